/*
 * What the library's other files need of a client (client.c) beyond mutexd.h.
 */
#ifndef MXC_CLIENT_H
#define MXC_CLIENT_H

#include <stdarg.h>

#include "mutexd.h"

/* A new client made as `client` was (its servers, token, CA file and timeouts), for another
 * thread: the one that renews a lock. MUTEXD_OK or MUTEXD_ERR_NOMEM; *copy NULL on failure. */
mutexd_result mxc_client_copy(const mutexd_client *client, mutexd_client **copy);

/* The time of one request to one server, as the client was made with (or its default). */
long mxc_client_timeout(const mutexd_client *client);

/* Replaces the error's message by the library's own sentence, `fmt` with `ap` (cut at 1023
 * bytes; no message when memory ran out). */
void mxc_error_vmessage(struct mutexd_error *err, const char *fmt, va_list ap);

#endif
