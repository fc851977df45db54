/*
 * The HTTP front: libmicrohttpd with an internal epoll thread pool. Requests are routed
 * and validated on libmicrohttpd's threads; lease requests go to resource actors with
 * their connection suspended, and are resumed when the answer is durable.
 *
 * Threads: http_start(), http_quiesce() and http_stop() from the main thread.
 */
#ifndef MX_HTTP_SERVER_H
#define MX_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "actors/resource.h"
#include "actors/runtime.h"
#include "http/auth.h"
#include "common/prom.h"

struct store; /* only handed on to the actors (ra_list_start) */

struct http;

struct http_config {
    const char *listen;        /* HOST:PORT; PORT 0 picks a free port */
    unsigned threads;          /* libmicrohttpd's pool; 0: the number of cores */
    unsigned max_connections;  /* 0: 10000 */
    uint64_t idle_timeout_ms;  /* most time between requests on a connection; 0: 60000 */
    const char *tls_cert_file; /* both set: HTTPS */
    const char *tls_key_file;
    const char *tls_priorities; /* GnuTLS priority string; NULL: libmicrohttpd's default */
    /* Request admission (see admit() in server.c): comma-separated lists, or NULL. */
    const char *allowed_origins; /* a request with another Origin is refused */
    const char *allowed_hosts;   /* NULL: Host checked on a loopback listener only */
    struct rt *rt;
    struct store *store;
    struct auth *auth; /* NULL: no authorization */
    const struct res_limits *lim;
    /* /readyz: true when ready, else false with a reason; may add JSON members to the
     * answer in `details` (as `"k":v,...`). Any thread. */
    bool (*ready)(void *ctx, char *why, size_t len, struct mx_buf *details);
    /* /metrics: appends the other modules' metrics. Any thread. */
    void (*metrics)(void *ctx, struct mx_buf *b);
    void *ctx;
};

/* Listens and starts serving. On failure returns -1 and writes a sentence into err. */
int http_start(struct http **out, const struct http_config *cfg, char *err, size_t errlen);
/* The address actually bound, as HOST:PORT. */
const char *http_address(const struct http *h);
/* From here on every request is answered 503 (Connection: close); returns once no request
 * is still being handed to the runtime or the store. */
void http_quiesce(struct http *h);
/* Waits (a little) for answers in flight to be sent, stops serving, frees everything.
 * Every suspended request must have been answered: the runtime and the store shut down
 * first. */
void http_stop(struct http *h);

#endif
