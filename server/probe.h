/*
 * `mutexd --probe`: asks the server configured by the same options (--listen, --tls-cert)
 * for /healthz and exits 0 when it answers 200, else 1. For container health checks, so
 * that the image needs no other tool.
 */
#ifndef MX_PROBE_H
#define MX_PROBE_H

#include "server/options.h"

int probe_main(const struct options *o);

#endif
