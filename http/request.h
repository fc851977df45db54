/*
 * The HTTP front's inside, shared by the files it is written in (not for other modules):
 * server.c (a request's life: the libmicrohttpd callbacks, dispatch, answers from actors
 * and the forwarder; start and stop), request.c (a request's helpers: its suspension, its
 * id, its authorization), framing.c (headers and body, admission), respond.c (queueing
 * answers), pages.c (the dashboard, /v1/servers, /metrics). The http_i_
 * functions are each file's statics that another needs; the threads that may call them
 * are those of the request they take (struct hreq below).
 */
#ifndef MX_HTTP_REQUEST_H
#define MX_HTTP_REQUEST_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/events.h"
#include "actors/resource_actor.h"
#include "common/names.h"
#include "http/answer.h"
#include "http/api.h"
#include "http/auth.h"
#include "http/forward.h"
#include "http/server.h"
#include "http/stats.h"

/* Only pointed to here (their own headers are those of the files that use them). */
struct admit_headers;
struct conn;
struct conns;
struct hangup;
struct many;
struct render;
struct spread;
struct ui_asset;

enum phase { PH_HEADERS, PH_BODY, PH_WAIT, PH_DONE };

/* One partition's core, as the front serves it (http_set_core()). */
struct http_part {
    struct http_core core;
    _Atomic bool published;
    /* Threads inside http_i_dispatch() with a request of this partition: they may touch
     * its core (http_release() waits for them). */
    _Atomic int dispatching;
    _Atomic uint64_t serve_until_ns; /* see http_set_serve_until(); 0: no bound */
};

struct http {
    struct http_config cfg;
    /* The core served with (http_set_core()): its fields are written by the role-setting
     * thread while no request of role serve reads them, then `published` set; pages
     * that read the core's figures (/metrics, /readyz) hold `core_lock` for reading. */
    struct http_part *parts; /* cfg.partitions of them */
    pthread_rwlock_t core_lock;
    struct MHD_Daemon *daemon;
    struct hangup *hangup;
    struct conns *conns;
    int listen_fd;
    char address[96];
    bool check_host; /* refuse a Host that is neither loopback nor in cfg.allowed_hosts */
    _Atomic bool draining;
    _Atomic int dispatching; /* threads inside dispatch(): they may touch the runtime and store */
    _Atomic uint64_t next_id;
    struct http_stats stats;
    char *tls_cert, *tls_key;
    struct fwd *fwd;
    /* Once a role other than serve was set: requests keep their target as received, to be
     * forwarded. Never goes back. */
    _Atomic bool grouped;
    /* Requests that may wait (wait_ms > 0: blocking acquires, watches), served here or
     * forwarded: taken at dispatch, given back at completion, by libmicrohttpd's threads.
     * At `max_waiting` one more is refused, so that they never take the connections the
     * probes of /healthz need (a standby would take the group over from a live server). */
    unsigned max_waiting; /* immutable */
    _Atomic unsigned waiting;
    _Atomic uint64_t waits_refused, spares_refused;
    _Atomic uint64_t changes_dropped; /* changes whose client hung up before they were made */
};

/*
 * One request on one connection. Threads, as struct rt_actor notes them:
 * - The connection's thread (libmicrohttpd calls a connection's handlers on one thread at
 *   a time) owns every field, but for what follows.
 * - Immutable once the headers are read, and read by other threads: `h`, `conn`, `id`,
 *   `fd`, `name`/`name_len`, `partition` (the hang-up watcher; the actor asking client_alive()).
 * - `ra.rq`'s answer fields are written by the thread the answer comes on (an actor's
 *   turn, the store's writer, the mirror's thread) before answer_arrived(); the handler
 *   reads them only once the answer is its own (http/answer.h: answer_suspend() true, or
 *   the connection resumed). `list`'s items likewise, before on_list_done().
 * - `fwd` is the forwarder thread's from fwd_submit() until on_forwarded() resumes the
 *   connection; `forwarding` is set before fwd_submit() and read by the hang-up watcher.
 * - `watched` is cleared by on_forwarded() (the forwarder's thread) once it has unwatched,
 *   while the connection is suspended.
 * - `answer` is atomic: both sides (http/answer.h).
 */
struct hreq {
    struct ra_request ra; /* the lease request, when there is one */
    struct http *h;
    struct MHD_Connection *conn;
    uint64_t start_ns;
    uint64_t id;
    enum phase phase;
    enum api_route route;
    bool head;      /* HEAD: no body is sent */
    bool failed;    /* `err` is the answer */
    bool watched;   /* registered for hang-up detection */
    bool close;     /* close the connection after the answer */
    bool too_large; /* the body went over the limit: 413 at its end */
    bool counted;   /* counted in h->suspended until its answer is handled */
    bool oom;
    bool bad_path; /* a control character in the path, seen before it was decoded */
    bool v1;       /* the path is under /v1: Mutexd-Served-By */
    bool ui;       /* the path is the dashboard's: its security headers (http/ui.h) */
    const struct ui_asset *asset; /* the dashboard's file asked for, or NULL */
    bool ui_not_modified;         /* If-None-Match names the file's ETag: 304 */
    bool ui_redirect;             /* GET /ui: sent to /ui/ */
    bool forwarding;              /* handed to the forwarder: `fwd` holds its answer */
    bool here;            /* serve here whatever the role (held, then the role became serve) */
    bool wait_slot;       /* counted in h->waiting until completion */
    struct answer answer; /* a lease request's answer against its connection's suspension */
    char *target;         /* path and query as received, when the server is in a group */
    struct fwd_req fwd;
    size_t discarded;
    int status; /* the status sent, for metrics */
    int fd;
    bool unauthorized; /* 401: add WWW-Authenticate */
    struct auth_grant grant;
    struct api_error err;
    char *body; /* `small`, or a buffer grown as the body arrives, at most 64 KiB */
    size_t body_len, body_cap;
    char small[512];
    struct ra_list *list;
    uint64_t list_index;    /* the change index when the list was read */
    struct api_query query; /* a GET's query (its strings are the connection's) */
    /* A list watch or an events request held until a change (actors/events.h): `evw` is
     * the log's from ev_wait_add() until its `done` or ev_wait_cancel(); `ev_held` is set
     * before ev_wait_add() and cleared by the handler once resumed; `ev_gone` by the
     * hang-up watcher when it took the wait back. */
    struct ev_wait evw;
    bool ev_held, ev_gone;
    char name[MX_NAME_MAX + 1];
    size_t name_len;
    unsigned partition; /* of the resource named (0 when none): whose core or owner serves it */
    bool one_partition; /* a list or events request limited to `partition` (partition=P) */
    /* A list or events request of a partitioned server, asked of every partition: the
     * connection's thread's but while the parts are out (http/spread.h). */
    struct spread *spread;
    /* A request about several resources (POST /v1/acquire, /v1/renew, /v1/release): the
     * names, decoded before dispatch (their partition decides where it goes), and its parts
     * while they are out (http/many.c). */
    struct api_names names;
    struct many *many;
    char rid[72];
    unsigned hops; /* servers it crossed before this one (Mutexd-Hops; 0: from a client) */
    char reason[API_MAX_REASON + 1];
};

/* server.c: dispatch */
enum MHD_Result http_i_dispatch(struct hreq *q);

/* request.c: a request's helpers */
enum MHD_Result http_i_nobody_to_answer(struct hreq *q);
void http_i_suspend(struct hreq *q);
void http_i_uncount(struct hreq *q);
void http_i_new_request_id(struct http *h, char *out, size_t len);
bool http_i_valid_request_id(const char *s);
struct conn *http_i_conn_of(struct MHD_Connection *conn);
unsigned http_i_route_scope(enum api_route r);
void http_i_authorize(struct hreq *q);
/* Why this server may no longer answer a read from its state after the request waited
 * here (fenced, not serving, or its ownership unconfirmed): a reason for
 * http_i_send_group_unavailable(), or NULL when it may. */
const char *http_i_not_serving(struct hreq *q);

/* respond.c: queueing the answers */
enum MHD_Result http_i_queue(struct hreq *q, int status, struct MHD_Response *r);
enum MHD_Result http_i_send_body(struct hreq *q, int status, char *body, const char *type,
                                 uint64_t retry_after_s, const char *allow);
enum MHD_Result http_i_send_render(struct hreq *q, const struct render *rd, const char *allow);
enum MHD_Result http_i_send_error(struct hreq *q, const struct api_error *e);
enum MHD_Result http_i_send_unavailable(struct hreq *q, const char *reason);
enum MHD_Result http_i_send_group_unavailable(struct hreq *q, const char *reason);
enum MHD_Result http_i_send_relayed(struct hreq *q);

/* framing.c: reading a request's headers and body, admission */
void http_i_read_headers(struct hreq *q, const char *method, const char *version,
                         struct admit_headers *ah);
enum MHD_Result http_i_on_headers(struct hreq *q, const char *url, const char *method,
                                  const char *version);
enum MHD_Result http_i_on_body(struct hreq *q, const char *data, size_t len);

/* many.c: requests about several resources */
bool http_i_is_many(enum api_route r);
void http_i_many_route(struct hreq *q);
bool http_i_many_decode(struct hreq *q);
enum MHD_Result http_i_serve_many(struct hreq *q, const struct http_core *core);
enum MHD_Result http_i_answer_many(struct hreq *q);
void http_i_many_hangup(struct hreq *q);
void http_i_many_free(struct hreq *q);

/* pages.c: the dashboard, /v1/servers, /metrics */
enum MHD_Result http_i_serve_ui(struct hreq *q);
enum MHD_Result http_i_serve_servers(struct hreq *q);
enum MHD_Result http_i_serve_metrics(struct hreq *q);

#endif
