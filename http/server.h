/*
 * The HTTP front: libmicrohttpd with an internal epoll thread pool. Requests are routed
 * and validated on libmicrohttpd's threads; lease requests go to resource actors with
 * their connection suspended, and are resumed when the answer is durable.
 *
 * In a server group, a standby's front forwards /v1 requests to the active server
 * (forward.h), holds them while there is none, or refuses them once fenced: its role, set
 * by whoever runs the group through http_set_role().
 *
 * Threads: http_start(), http_quiesce() and http_stop() from the main thread.
 */
#ifndef MX_HTTP_SERVER_H
#define MX_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "actors/events.h"
#include "actors/resource.h"
#include "actors/runtime.h"
#include "http/auth.h"
#include "common/prom.h"
#include "http/role.h"

struct store; /* only handed on to the actors (ra_list_start) */

struct http;

/* What a data set (server/core.h) gives the front to serve it: its actors, store and
 * events, and its figures. The callbacks take `ctx` and are called from any thread while
 * the core is published (see http_set_core()). */
struct http_core {
    struct rt *rt;
    struct store *store;
    struct ev_log *events;     /* the change index, the recent events and the waits for them */
    struct res_domain *domain; /* the arrival order of requests about several resources */
    void *ctx;
    /* /readyz: true when ready, else false with a reason; may add JSON members to
     * `details`. */
    bool (*ready)(void *ctx, char *why, size_t len, struct mx_buf *details);
    /* /metrics: appends the core's metrics. */
    void (*metrics)(void *ctx, struct mx_buf *b);
    /* Lease requests parked in the actors (waiters and watchers): those of the suspended
     * requests that wait for a lease or a change, not for a commit. A hint, read without a
     * lock. */
    long (*parked)(void *ctx);
};

struct http_config {
    const char *listen;        /* HOST:PORT; PORT 0 picks a free port */
    unsigned threads;          /* libmicrohttpd's pool (options_parse decides the default) */
    unsigned max_connections;  /* 0: 10000 */
    uint64_t idle_timeout_ms;  /* most time between requests on a connection; 0: 60000 */
    const char *tls_cert_file; /* both set: HTTPS */
    const char *tls_key_file;
    const char *tls_priorities; /* GnuTLS priority string; NULL: libmicrohttpd's default */
    /* Request admission (see admit_origin_host() in http/admit.h): comma-separated lists, or
     * NULL. */
    const char *allowed_origins; /* a request with another Origin is refused */
    const char *allowed_hosts;   /* NULL: Host checked on a loopback listener only */
    bool ui;                     /* serve the dashboard under /ui/ (http/ui.h); false: 404 there */
    struct auth *auth;           /* NULL: no authorization */
    const struct res_limits *lim;
    /* The data set served here, published at start as partition 0's (NULL: a server of a
     * group that has not taken it over yet: requests are held until a role is set); see
     * http_set_core(). */
    const struct http_core *core;
    /* The group's partitions (common/partition.h; 0 or 1: one). A request about a resource
     * is served by, or forwarded to, its partition's core or owner; every other request is
     * partition 0's. */
    unsigned partitions;
    /* /readyz, before the core is asked: false with a reason when the server is not ready
     * whatever its core says (a standby that knows no active); may add JSON members to the
     * answer in `details` (as `"k":v,...`). NULL: ready when a core is published. Any
     * thread. */
    bool (*ready)(void *ctx, char *why, size_t len, struct mx_buf *details);
    /* /metrics: appends the process's metrics (the group's), before the core's. Any thread. */
    void (*metrics)(void *ctx, struct mx_buf *b);
    /* Forwarding (see http_set_role()). A held request waits at most forward_timeout_ms
     * from its arrival, and a forwarded one its own wait_ms plus this (0: 10000). */
    uint64_t forward_timeout_ms;
    /* This server's advertised URL: the Mutexd-Served-By header of every /v1 answer it
     * serves itself. NULL: no header. */
    const char *served_by;
    /* GET /v1/servers: appends the whole JSON body to `out` and returns 0; -1: 503. NULL:
     * not in a server group: the route answers 200, role "alone". Any thread. */
    int (*servers)(void *ctx, struct mx_buf *out);
    void *ctx;
    /* Testing only (builds with MUTEXD_FAULT_INJECTION): the role to start in, and one to
     * take role_after_ms later, as "forward:URL", "hold", "fenced" or "serve". NULL: none. */
    const char *fault_role, *fault_role_after;
    uint64_t fault_role_after_ms;
};

/* Listens and starts serving. On failure returns -1 and writes a sentence into err. */
int http_start(struct http **out, const struct http_config *cfg, char *err, size_t errlen);
/* A partition's role (one partition: the server's). Any thread, any time. `active_url`:
 * the partition's active's advertised URL (HTTP_ROLE_FORWARD; copied). Requests held or about to be
 * forwarded follow the new role at once; those already sent to the active finish there. Starts as
 * HTTP_ROLE_SERVE, or HTTP_ROLE_HOLD when started without a core (cfg.core NULL). */
void http_set_role(struct http *h, unsigned partition, enum http_role role, const char *active_url);
/* Publishes the core the front serves a partition with (copied), once, atomically: a server
 * of a group that starts without one (a standby) gets one when it takes over; call before
 * http_set_role(HTTP_ROLE_SERVE), from the thread that sets roles. NULL takes it back,
 * after http_quiesce() and before the core closes: it returns once no /metrics or /readyz
 * answer is still reading the core, and none reads it after. */
void http_set_core(struct http *h, unsigned partition, const struct http_core *core);
/* A partition handed over to another server: its requests are held from now on (until a
 * role is set again), and the core is taken back once no request is being handed to it
 * (http_set_core(NULL)); then the caller closes the core, whose waiters are answered as its
 * runtime stops. From the thread that sets roles. */
void http_release(struct http *h, unsigned partition);
/* What /readyz answers: the config's `ready`, then the published core's (not ready,
 * "recovering", when none is published and the config has no `ready`). Any thread. */
bool http_ready(struct http *h, char *why, size_t len, struct mx_buf *details);
/* The active of a group's partition serves its /v1 requests only until `mono_ns` (0: no
 * bound), the time by which it must have confirmed again that it owns the partition; after
 * it, each one is answered 503 `unavailable`, reason HTTP_UNCONFIRMED. Any thread, any
 * time. */
void http_set_serve_until(struct http *h, unsigned partition, uint64_t mono_ns);
#define HTTP_UNCONFIRMED "ownership_unconfirmed"
/* The reason of the 503 answered to a list watch or an events wait whose partition was
 * handed over (http_release()) while it waited: the client sends it again, and it goes to
 * the new owner. A blocking acquire or a resource watch is answered the same by its core. */
#define HTTP_PARTITION_MOVED "partition_moved"
/* Reasons of the 503 answered when a server has its waiting requests (blocking acquires,
 * watches) at their bound, three quarters of its connection limit, whether they came from
 * clients or through a standby; and on a spare connection (http/conns.h) to any request
 * but a health check. */
#define HTTP_TOO_MANY_WAITING     "too_many_waiting_requests"
#define HTTP_TOO_MANY_CONNECTIONS "too_many_connections"
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
