/*
 * Forwarding to the active server of a group: a standby sends each /v1 request to the
 * active over HTTP/1.1 keep-alive (one libcurl multi handle on one thread, connections
 * reused across requests) and hands the answer back to be relayed as given. While no
 * server is active, or the active cannot be connected to, requests are held until there
 * is one to send them to, or to serve them here, for at most the forward timeout.
 *
 * A request is a struct fwd_req that the HTTP front embeds in its own request state, with
 * a `done` callback the forwarder calls exactly once, on its own thread, with no lock held:
 * on an answer, a refusal, a cancel, or at fwd_stop().
 *
 * Threads: fwd_start(), fwd_stop() and fwd_free() from one thread; the rest from any.
 */
#ifndef MX_HTTP_FORWARD_H
#define MX_HTTP_FORWARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "http/role.h"

struct fwd;

enum fwd_outcome {
    FWD_RELAYED,    /* the active's answer: status, body, headers */
    FWD_SERVE_HERE, /* the role became HTTP_ROLE_SERVE while it was held: serve it here */
    FWD_REFUSED,    /* answer 503 `unavailable` with `reason` */
    FWD_GONE,       /* cancelled (the client hung up): nobody to answer */
};

/* The headers of the active's answer that are relayed, in this order. */
enum fwd_header {
    FWD_H_CONTENT_TYPE,
    FWD_H_RETRY_AFTER,
    FWD_H_ALLOW,
    FWD_H_WWW_AUTHENTICATE,
    FWD_H_SERVED_BY,
    FWD_H_PARTITION,
    FWD_H_REQUEST_ID,
    FWD_NHEADERS
};
extern const char *const fwd_header_names[FWD_NHEADERS];

/* Reasons of FWD_REFUSED. */
#define FWD_NO_ACTIVE     "no_active_server"
#define FWD_ACTIVE_LOST   "active_lost"
#define FWD_FENCED        "fenced"
#define FWD_SHUTTING_DOWN "shutting down"
#define FWD_BUSY          "forward_busy"

/* A forwarded request carries the number of servers it has crossed (Mutexd-Hops). One
 * forward reaches the owner; a move in progress may take two. A request that has already
 * crossed this many is refused FWD_NO_ACTIVE rather than sent on: two servers whose views
 * of the owner disagree for a moment would otherwise pass it back and forth. */
#define FWD_HOPS_HEADER "Mutexd-Hops"
#define FWD_HOPS_MAX    3

struct fwd_req {
    /* public: set before fwd_submit(), unchanged until `done` */
    const char *method; /* GET, HEAD (sent as GET, so the relayed length is right) or POST */
    const char *target; /* path and query, as the client sent them */
    unsigned partition; /* of the resource it names (0 if none): it goes to that one's owner */
    const char *body;   /* POST: the body (may be empty) */
    size_t body_len;
    /* The client's headers that are sent on (NULL: none), and the request id. Copied by
     * fwd_submit(). */
    const char *authorization, *content_type, *accept, *request_id;
    uint64_t arrival_ns; /* held at most the forward timeout from here */
    uint64_t wait_ms;    /* the request's own wait: added to the timeout of the transfer */
    /* Carried out twice, it does what it does once (a read; a change naming its lease_id:
     * an acquire with the lease_id proposed, a renewal, a release). False for a break and an
     * acquire without a lease_id: those go to the active at most once (see forward.c). */
    bool idempotent;
    unsigned hops; /* the servers it crossed before this one (its Mutexd-Hops header) */
    /* The client's socket, polled for a hang-up before each attempt to send: a request
     * whose client has gone is dropped (FWD_GONE), not sent. -1: none to poll. */
    int client_fd;
    /* Where it goes while its partition is served here (HTTP_ROLE_SERVE): this server's
     * own URL, for a request that must be answered by HTTP whoever owns the partition (a
     * part of a list of every partition). NULL: such a request comes back FWD_SERVE_HERE. */
    const char *self_url;
    void (*done)(struct fwd_req *r);

    /* results: valid in `done` and after; fwd_req_clear() frees them */
    enum fwd_outcome outcome;
    int status;                  /* FWD_RELAYED */
    const char *reason;          /* FWD_REFUSED: one of FWD_* above */
    char *answer;                /* FWD_RELAYED: the body (NUL-terminated), or NULL */
    size_t answer_len;           /* its length */
    char *headers[FWD_NHEADERS]; /* FWD_RELAYED: header values, NULL where absent */

    /* private: the forwarder's */
    struct fwd_req *_next;
    void *_easy;         /* CURL *: a transfer in progress */
    void *_send_headers; /* struct curl_slist * */
    struct mx_buf _body;
    uint64_t _not_before_ns; /* held: next attempt */
    bool _parked;            /* sending, and it waits at the active (wait_ms) */
    unsigned _offered;       /* times the transfer was about to write it on a connection */
    uint64_t _sent_ns;
    _Atomic bool _cancel;
};

/* `timeout_ms`: the forward timeout (0: 10000). Returns 0, or -1 with a sentence in err. */
/* `max_parked`: requests that wait at the active (a blocking acquire, a watch) forwarded
 * at once, at most; one more is refused FWD_BUSY, so that a standby never fills the
 * active's connections and starves the probes of its /healthz (0: no bound). */
/* `partitions`: of the group (0 or 1: one); each has its own role. */
int fwd_start(struct fwd **out, unsigned partitions, uint64_t timeout_ms, unsigned max_parked,
              char *err, size_t errlen);
/* A partition's role and, for HTTP_ROLE_FORWARD, its owner's URL (copied; NULL or too long:
 * the role becomes HTTP_ROLE_HOLD). Held requests of the partition follow the new role at
 * once. */
void fwd_set_role(struct fwd *f, unsigned partition, enum http_role role, const char *url);
/* The same for every partition, `after_ms` from now (one change at most is pending; a later
 * call replaces it). */
void fwd_set_role_later(struct fwd *f, uint64_t after_ms, enum http_role role, const char *url);
enum http_role fwd_role(struct fwd *f, unsigned partition);
/* The role and, for HTTP_ROLE_FORWARD, the owner's URL into `url` (else ""). Any thread. */
enum http_role fwd_owner(struct fwd *f, unsigned partition, char *url, size_t len);
/* Takes `r` to forward. Returns -1 when the forwarder has stopped (`done` is not called). */
int fwd_submit(struct fwd *f, struct fwd_req *r);
/* The client of `r` has gone: abort it (its `done` comes with FWD_GONE, unless it came
 * already). Valid only until `done` has returned. */
void fwd_cancel(struct fwd *f, struct fwd_req *r);
/* Answers every request FWD_REFUSED FWD_SHUTTING_DOWN and joins the thread. Idempotent. */
void fwd_stop(struct fwd *f);
void fwd_free(struct fwd *f);
/* Appends the forwarder's metrics. Any thread. */
void fwd_metrics(struct fwd *f, struct mx_buf *b);
void fwd_req_clear(struct fwd_req *r);

/* "forward:URL", "hold", "fenced" or "serve" (as the fault seam writes roles): the role,
 * and for forward the URL (pointing into `spec`). False when it is none of these. */
bool fwd_parse_role(const char *spec, enum http_role *role, const char **url);

#endif
