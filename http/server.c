/*
 * The HTTP front (see server.h).
 *
 * A request's life, on one of libmicrohttpd's threads unless said otherwise:
 *   1. The URI callback allocates its state (struct hreq) before the headers are read.
 *   2. First call of the access handler: route, request id, admission (an Origin header or,
 *      on a loopback listener, a foreign Host: 403), authorization, and the checks that
 *      need no body (Content-Length over 64 KiB: 413; a body not typed JSON: 415). A
 *      request with a body refused there (400, 401, 403, 404, 405, 415) is answered at
 *      once and its body is never read: libmicrohttpd closes the connection after the
 *      answer. A 413's body is read and thrown away first, up to 1 MiB (framing.c), so
 *      that a client still writing it is not reset before it reads the answer.
 *      From the request line the connection tracker (conns.h) gives the request
 *      --idle-timeout-ms to arrive whole.
 *   3. Body chunks are gathered, at most 64 KiB, in a buffer that grows with them.
 *   4. Final call: decode and validate. Health, readiness and metrics are answered at
 *      once. A lease request suspends its connection, registers for hang-up detection if
 *      it may wait, and goes to its resource's actor.
 *   5. The actor's answer arrives on some other thread (reply()): unregister, resume.
 *   6. The access handler runs again: render the answer, queue the response.
 *   7. The completion callback records metrics and frees the state.
 * In a standby (role HTTP_ROLE_FORWARD or HTTP_ROLE_HOLD) step 4 hands a /v1 request, once
 * it has passed every check above, to the forwarder instead of an actor (forward.h); its
 * answer comes back on the forwarder's thread (on_forwarded()) and is relayed in step 6.
 * A held request whose role turns to HTTP_ROLE_SERVE comes back to be served here.
 * A connection is always suspended before its request is handed on, so an answer that
 * arrives at once finds it suspended (resuming before suspending is not allowed).
 *
 * Here: answers from actors and the forwarder, dispatch, the libmicrohttpd callbacks, start
 * and stop. Steps 2 and 3 are in framing.c, queueing answers in respond.c, the pages
 * (the dashboard, /v1/servers, /metrics) in pages.c, a request's helpers (its suspension,
 * its id, its authorization) in request.c; request.h holds struct hreq.
 */
#include "http/request.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "actors/events.h"
#include "actors/resource.h"
#include "actors/resource_actor.h"
#include "actors/runtime.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/container_of.h"
#include "common/log.h"
#include "http/admit.h"
#include "http/answer.h"
#include "http/api.h"
#include "http/auth.h"
#include "http/conns.h"
#include "http/forward.h"
#include "http/hangup.h"
#include "http/listener.h"
#include "http/render.h"
#include "http/role.h"
#include "http/server.h"
#include "http/spread.h"
#include "http/stats.h"
#include "persistence/store.h"

/* ---- answers from actors --------------------------------------------------------- */

/* Any thread: the actor's answer is in q->ra.rq. */
static void on_reply(struct ra_request *r)
{
    struct hreq *q = container_of(r, struct hreq, ra);
    if (q->watched)
        hangup_unwatch(q->h->hangup, q->id); /* before the connection may close */
    if (answer_arrived(&q->answer))          /* else the handler answers (http/answer.h) */
        MHD_resume_connection(q->conn);
}

static void on_list_done(struct ra_list *l)
{
    struct hreq *q = l->arg;
    MHD_resume_connection(q->conn);
}

static bool client_alive(struct res_req *rq)
{
    struct hreq *q = container_of(rq, struct hreq, ra.rq);
    return !hangup_peer_gone(q->fd);
}

/* Hang-up watcher's thread. */
static void on_hangup(void *ctx, uint64_t id, void *arg)
{
    struct http *h = ctx;
    struct hreq *q = arg;
    /* q->watched stays: unwatching an id the watcher dropped already is harmless. */
    if (q->spread) {
        spread_cancel(h, q->spread); /* every partition's wait is closed */
        return;
    }
    if (q->many) {
        http_i_many_hangup(q); /* every part leaves its queue */
        return;
    }
    if (q->forwarding) {
        fwd_cancel(h->fwd, &q->fwd); /* the transfer is closed: the active drops its waiter */
        return;
    }
    /* Under the lock: a partition handed over (http_release()) is not published, and its
     * core may be closing; its waiters are answered by the core as it stops. */
    const struct http_part *pt = &h->parts[q->partition];
    pthread_rwlock_rdlock(&h->core_lock);
    if (atomic_load(&pt->published)) {
        if (!q->ev_held) {
            ra_send_drop(pt->core.rt, q->name, q->name_len, id);
        } else if (ev_wait_cancel(pt->core.events, &q->evw)) {
            q->ev_gone = true;
            MHD_resume_connection(q->conn);
        }
    }
    pthread_rwlock_unlock(&h->core_lock);
}

/* The forwarder's thread: the answer (or the refusal) is in q->fwd. */
static void on_forwarded(struct fwd_req *r)
{
    struct hreq *q = container_of(r, struct hreq, fwd);
    if (q->watched) {
        /* Before the connection may close; it also waits out an on_hangup() under way,
         * which may still be cancelling this request. */
        hangup_unwatch(q->h->hangup, q->id);
        q->watched = false;
    }
    MHD_resume_connection(q->conn);
}

/* The log's timer thread, or a changing thread: a change under the prefix, or the
 * deadline. */
static void on_ev_done(struct ev_wait *w, bool changed)
{
    (void)changed; /* either way the answer is read afresh */
    struct hreq *q = container_of(w, struct hreq, evw);
    if (q->watched) {
        hangup_unwatch(q->h->hangup, q->id);
        q->watched = false;
    }
    MHD_resume_connection(q->conn);
}

static enum MHD_Result answer_forwarded(struct hreq *q)
{
    q->forwarding = false;
    switch (q->fwd.outcome) {
    case FWD_RELAYED:
        return http_i_send_relayed(q);
    case FWD_SERVE_HERE:
        /* Held, and this server now serves: from the start, as a request just arrived. */
        q->here = true;
        res_req_clear(&q->ra.rq);
        memset(&q->ra, 0, sizeof q->ra);
        api_names_free(&q->names); /* decoded again with the rest */
        return http_i_dispatch(q);
    case FWD_REFUSED:
        if (strcmp(q->fwd.reason, FWD_SHUTTING_DOWN) == 0) {
            q->close = true;
            return http_i_send_unavailable(q, "shutting down");
        }
        return http_i_send_group_unavailable(q, q->fwd.reason);
    case FWD_GONE:
        break;
    }
    return http_i_nobody_to_answer(q);
}

static enum MHD_Result start_list(struct hreq *q);
static enum MHD_Result answer_events(struct hreq *q);

static enum MHD_Result answer_resumed(struct hreq *q)
{
    http_i_uncount(q);
    if (q->spread)
        return spread_answer(q);
    if (q->forwarding)
        return answer_forwarded(q);
    if (q->many)
        return http_i_answer_many(q);
    if (q->ev_held) {
        q->ev_held = false;
        if (q->ev_gone) {
            return http_i_nobody_to_answer(q);
        }
        if (atomic_load(&q->h->draining)) {
            q->close = true;
            return http_i_send_unavailable(q, "shutting down");
        }
        const char *stale = http_i_not_serving(q);
        if (stale && strcmp(stale, HTTP_UNCONFIRMED) == 0 && q->h->cfg.partitions > 1 &&
            !atomic_load(&q->h->parts[q->partition].published))
            stale = HTTP_PARTITION_MOVED; /* its core stopped as the partition moved */
        if (stale)
            return http_i_send_group_unavailable(q, stale);
        return q->route == ROUTE_EVENTS ? answer_events(q) : start_list(q);
    }
    struct render rd;
    if (q->list) {
        struct ra_list *l = q->list;
        bool failed = l->store_error;
        for (size_t i = 0; i < l->n && !failed; i++)
            failed = l->items[i].req.rq.status == RES_ERR_UNAVAILABLE;
        if (failed)
            return http_i_send_unavailable(q, l->store_error ? "the store could not be read"
                                                             : "a resource could not be read");
        render_list(l, l->full && l->n ? l->items[l->n - 1].name : NULL, q->list_index, &rd);
        return http_i_send_render(q, &rd, NULL);
    }
    if (q->ra.rq.status == RES_GONE) {
        return http_i_nobody_to_answer(q);
    }
    /* A read (a watch's state, a wait that ran out with the holder's name) answered after
     * a wait: checked as a list watch is. A change answered here is durable, so it stands. */
    if (q->ra.rq.status == RES_OK_STATE || q->ra.rq.status == RES_ERR_HELD) {
        const char *stale = http_i_not_serving(q);
        if (stale)
            return http_i_send_group_unavailable(q, stale);
    }
    render_answer(q->name, q->name_len, &q->ra.rq, &rd);
    return http_i_send_render(q, &rd, NULL);
}

/* ---- dispatch -------------------------------------------------------------------- */

struct query_ctx {
    struct hreq *q;
    struct api_query query;
    bool ok;
};

static enum MHD_Result query_param(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    struct query_ctx *c = cls;
    c->ok = api_query_param(c->q->route, &c->query, key, value, c->q->h->cfg.lim, &c->q->err);
    return c->ok ? MHD_YES : MHD_NO;
}

static enum MHD_Result forward(struct hreq *q, uint64_t wait_ms);

/* Answers a complete request: at once, or by handing it to the actors (the connection is
 * then suspended until the answer). Called only through http_i_dispatch(). */
static enum MHD_Result serve_request(struct hreq *q);

/* Everything that reaches into the runtime, the store or the forwarder from libmicrohttpd's
 * threads goes through here, so that http_quiesce() can wait for it to be over. */
enum MHD_Result http_i_dispatch(struct hreq *q)
{
    struct http *h = q->h;
    struct http_part *pt = &h->parts[q->partition];
    atomic_fetch_add(&h->dispatching, 1);
    atomic_fetch_add(&pt->dispatching, 1); /* before the role is read: see http_release() */
    enum MHD_Result rc;
    if (atomic_load(&h->draining)) {
        q->close = true;
        rc = http_i_send_unavailable(q, "shutting down");
    } else {
        rc = serve_request(q);
    }
    atomic_fetch_sub(&pt->dispatching, 1);
    atomic_fetch_sub(&h->dispatching, 1);
    return rc;
}

static enum MHD_Result serve_request(struct hreq *q)
{
    struct http *h = q->h;
    if (q->too_large) {
        q->close = true;
        if (q->oom)
            return http_i_send_unavailable(q, "out of memory");
        api_fail(&q->err, 413, "body_too_large", NULL, "the body is over %d bytes", API_MAX_BODY);
        return http_i_send_error(q, &q->err);
    }
    if (q->failed)
        return http_i_send_error(q, &q->err);

    switch (q->route) {
    case ROUTE_HEALTHZ: {
        struct render rd;
        render_status(200, "ok", NULL, NULL, &rd);
        return http_i_send_render(q, &rd, NULL);
    }
    case ROUTE_READYZ: {
        char why[256] = "";
        struct mx_buf details = {0};
        bool ready = http_ready(h, why, sizeof why, &details);
        struct render rd;
        render_status(ready ? 200 : 503, ready ? "ready" : "unavailable", ready ? NULL : why,
                      details.oom ? NULL : details.p, &rd);
        mx_buf_free(&details);
        return http_i_send_render(q, &rd, NULL);
    }
    case ROUTE_METRICS:
        return http_i_serve_metrics(q);
    case ROUTE_UI:
        return http_i_serve_ui(q);
    default:
        break;
    }

    struct query_ctx qc = {.q = q, .ok = true};
    bool get = q->route == ROUTE_GET || q->route == ROUTE_LIST || q->route == ROUTE_SERVERS ||
               q->route == ROUTE_EVENTS || q->route == ROUTE_WHOAMI;
    if (get) {
        MHD_get_connection_values(q->conn, MHD_GET_ARGUMENT_KIND, query_param, &qc);
        if (!qc.ok)
            return http_i_send_error(q, &q->err);
        q->query = qc.query;
    } else if (http_i_is_many(q->route)
                   ? !http_i_many_decode(q)
                   : !api_decode_body(q->route, q->body, q->body_len, h->cfg.lim, &q->ra.rq,
                                      q->reason, sizeof q->reason, &q->err)) {
        return http_i_send_error(q, &q->err);
    }
    if (q->route == ROUTE_SERVERS)
        return http_i_serve_servers(q); /* every role answers it itself */
    if (q->route == ROUTE_WHOAMI) {
        struct render rd; /* every role answers it itself */
        render_whoami(h->cfg.auth ? q->grant.name : NULL,
                      h->cfg.auth ? q->grant.scopes
                                  : AUTH_READ | AUTH_WRITE | AUTH_ADMIN | AUTH_METRICS,
                      &rd);
        return http_i_send_render(q, &rd, NULL);
    }
    if (q->route == ROUTE_GET)
        api_query_finish(q->route, &qc.query, h->cfg.lim, &q->ra.rq);

    if (q->route == ROUTE_LIST || q->route == ROUTE_EVENTS) {
        const char *prefix = qc.query.prefix ? qc.query.prefix : "";
        if (h->cfg.auth && !auth_prefix_allows(&q->grant, prefix, strlen(prefix))) {
            api_fail(&q->err, 403, "forbidden", NULL,
                     "the token '%s' is limited to resources under '%s': %s with that prefix",
                     q->grant.name, q->grant.prefix,
                     q->route == ROUTE_LIST ? "list" : "read the events");
            return http_i_send_error(q, &q->err);
        }
    }
    uint64_t held_ms = 0; /* how long a list watch or an events request may be held */
    if (q->route == ROUTE_LIST)
        held_ms = api_query_wait(&qc.query, h->cfg.lim);
    else if (q->route == ROUTE_EVENTS && qc.query.has_wait)
        held_ms = qc.query.wait_ms;
    bool every_partition = (q->route == ROUTE_LIST || q->route == ROUTE_EVENTS) &&
                           h->cfg.partitions > 1 && !q->one_partition;
    if (qc.query.partitions && !every_partition) {
        api_fail(&q->err, 400, "invalid_field", "partitions",
                 "partitions is for a list or events request of a partitioned group, without "
                 "partition");
        return http_i_send_error(q, &q->err);
    }
    if (qc.query.index_text && !every_partition) {
        const char *what = q->route == ROUTE_EVENTS ? "after" : "index";
        api_fail(&q->err, 400, "invalid_field", what, "%s must be a whole number, as returned %s",
                 what, q->route == ROUTE_EVENTS ? "in next" : "by GET");
        return http_i_send_error(q, &q->err);
    }
    /* A change whose client has closed its connection is not made. It waited in this
     * server's socket (a server paused, say, then resumed) while its client gave up, and a
     * client that gives up retries elsewhere with the same lease_id, may be answered there,
     * and may have released that lease since: made now, an acquire would grant a lease no
     * client holds, a break would end a newer holder's. */
    if (!get && hangup_peer_gone(q->fd)) {
        atomic_fetch_add(&h->changes_dropped, 1);
        return http_i_nobody_to_answer(q);
    }
    /* Every check of this server passed: a standby hands it on, a fenced server refuses. */
    enum http_role role = q->here ? HTTP_ROLE_SERVE : fwd_role(h->fwd, q->partition);
    const struct http_core *core = &h->parts[q->partition].core;
    if (role == HTTP_ROLE_FENCED && !every_partition)
        return http_i_send_group_unavailable(q, FWD_FENCED);
    uint64_t wait_ms = q->ra.rq.wait_ms > held_ms ? q->ra.rq.wait_ms : held_ms;
    if (wait_ms > 0 && !q->wait_slot) {
        if (atomic_fetch_add(&h->waiting, 1) >= h->max_waiting) {
            atomic_fetch_sub(&h->waiting, 1);
            atomic_fetch_add(&h->waits_refused, 1);
            return http_i_send_group_unavailable(q, HTTP_TOO_MANY_WAITING);
        }
        q->wait_slot = true;
    }
    if (every_partition)
        return spread_start(q, held_ms);
    if (role != HTTP_ROLE_SERVE)
        return forward(q, wait_ms);
    uint64_t until =
        atomic_load_explicit(&h->parts[q->partition].serve_until_ns, memory_order_relaxed);
    if (until && mx_mono_ns() > until)
        return http_i_send_group_unavailable(q, HTTP_UNCONFIRMED);

    if ((q->route == ROUTE_LIST || q->route == ROUTE_EVENTS) && held_ms > 0 && core->events) {
        /* Held until a change under the prefix after the index given, or held_ms. */
        const char *prefix = qc.query.prefix ? qc.query.prefix : "";
        q->evw = (struct ev_wait){.prefix_len = strlen(prefix),
                                  .after = qc.query.index,
                                  .deadline_ns = mx_mono_ns() + held_ms * MX_NS_PER_MS,
                                  .done = on_ev_done};
        memcpy(q->evw.prefix, prefix, q->evw.prefix_len);
        q->phase = PH_WAIT;
        q->ev_held = true;
        http_i_suspend(q);
        if (hangup_watch(h->hangup, q->fd, q->id, q) == 0)
            q->watched = true;
        if (!ev_wait_add(core->events, &q->evw)) {
            /* A change is known already: answer now, through the resumed path. */
            if (q->watched) {
                hangup_unwatch(h->hangup, q->id);
                q->watched = false;
            }
            MHD_resume_connection(q->conn);
        }
        return MHD_YES;
    }
    if (q->route == ROUTE_LIST)
        return start_list(q);
    if (q->route == ROUTE_EVENTS)
        return answer_events(q);
    if (q->route == ROUTE_BREAK) {
        char reason[2 * API_MAX_REASON + 8]; /* the client's text, escaped: one log line */
        mx_info("break requested", "resource=%s reason=%s request_id=%s", q->name,
                mx_log_quote(reason, sizeof reason, q->reason), q->rid);
    }

    if (http_i_is_many(q->route))
        return http_i_serve_many(q, core);

    struct res_req *rq = &q->ra.rq;
    rq->id = q->id;
    rq->alive = client_alive;
    q->ra.reply = on_reply;
    q->phase = PH_WAIT;
    answer_begin(&q->answer);
    if (rq->wait_ms > 0 && hangup_watch(h->hangup, q->fd, q->id, q) == 0)
        q->watched = true;
    /* The turn runs here when the resource is idle (ra_send); its change is then committed
     * here too when nothing else would join that commit: at most one other request waits
     * for a commit (the other suspended ones wait for a lease or a change) and no request
     * waits unread on another connection. One client alone, or a lease handed from its
     * holder to a waiter (that one other request), is then answered without a hand-off to
     * the writer and back. Under load the writer batches, and this thread reads on: a
     * commit here would hold up every request queued on its connections. */
    struct store_batch batch;
    store_batch_begin(core->store, &batch);
    int rc = ra_send(core->rt, q->name, q->name_len, &q->ra, &batch);
    long parked = core->parked ? core->parked(core->ctx) : 0;
    store_batch_end(&batch, atomic_load(&h->stats.suspended) <= parked + 1 &&
                                !conns_others_readable(h->conns));
    if (rc != RT_OK) {
        rq->status = RES_ERR_UNAVAILABLE;
        rq->reason = rc == RT_EFULL    ? "the resource is overloaded"
                     : rc == RT_ELIMIT ? "too many active resources"
                                       : rt_strerror(rc);
        on_reply(&q->ra);
    }
    if (answer_suspend(&q->answer))
        return answer_resumed(q); /* answered during the send */
    http_i_suspend(q);
    if (answer_suspended(&q->answer))
        MHD_resume_connection(q->conn); /* answered while suspending */
    return MHD_YES;
}

/* Reads a page of the list through the actors (the connection is suspended meanwhile). */
static enum MHD_Result start_list(struct hreq *q)
{
    struct http *h = q->h;
    int limit = q->query.has_limit ? (int)q->query.limit : API_DEFAULT_LIMIT;
    /* Every change up to it is committed, so the list read next shows it: a watch from
     * this index misses no change the list did not show. */
    const struct http_core *core = &h->parts[q->partition].core;
    q->list_index = core->events ? ev_durable_index(core->events) : 0;
    q->phase = PH_WAIT;
    http_i_suspend(q);
    q->list = ra_list_start(core->rt, core->store, q->query.prefix, q->query.cursor, limit,
                            on_list_done, q);
    if (!q->list) {
        /* Not started: answer out of memory through the resumed path. */
        q->ra.rq.status = RES_ERR_UNAVAILABLE;
        q->ra.rq.reason = "out of memory";
        MHD_resume_connection(q->conn);
    }
    return MHD_YES;
}

/* GET /v1/events, read now. */
static enum MHD_Result answer_events(struct hreq *q)
{
    struct http *h = q->h;
    size_t limit = q->query.has_limit ? (size_t)q->query.limit : API_DEFAULT_LIMIT;
    const char *prefix = q->query.prefix ? q->query.prefix : "";
    struct ev_log *events = h->parts[q->partition].core.events;
    if (!events)
        return http_i_send_unavailable(q, "events are not kept by this server");
    struct ev_event *ev = calloc(limit, sizeof *ev);
    if (!ev)
        return http_i_send_unavailable(q, "out of memory");
    uint64_t next = 0;
    bool truncated = false;
    size_t n =
        ev_read(events, q->query.index, prefix, strlen(prefix), ev, limit, &next, &truncated);
    struct render rd;
    render_events(ev, n, next, truncated, &rd);
    for (size_t i = 0; i < n; i++)
        ev_event_clear(&ev[i]);
    free(ev);
    return http_i_send_render(q, &rd, NULL);
}

/* Hands a checked request to the forwarder; the connection waits for its answer. */
static enum MHD_Result forward(struct hreq *q, uint64_t wait_ms)
{
    struct http *h = q->h;
    if (!q->target) /* arrived before the first role change: its target was not kept */
        return http_i_send_group_unavailable(q, FWD_NO_ACTIVE);
    bool post = q->route == ROUTE_ACQUIRE || q->route == ROUTE_RENEW || q->route == ROUTE_RELEASE ||
                q->route == ROUTE_BREAK || http_i_is_many(q->route);
    struct fwd_req *f = &q->fwd;
    f->method = post ? "POST" : q->head ? "HEAD" : "GET";
    f->target = q->target;
    f->partition = q->partition;
    f->body = q->body;
    f->body_len = q->body_len;
    f->authorization = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Authorization");
    f->content_type = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Content-Type");
    f->accept = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Accept");
    f->request_id = q->rid;
    f->hops = q->hops;
    f->client_fd = q->fd;
    f->arrival_ns = q->start_ns;
    f->wait_ms = wait_ms;
    /* A break (with or without a lease_id), and an acquire without a lease_id, would do
     * their change again if carried out twice; a change that names its lease would not. */
    f->idempotent = !post || (q->route != ROUTE_BREAK && q->ra.rq.has_lease_id);
    f->done = on_forwarded;
    q->forwarding = true;
    q->phase = PH_WAIT;
    http_i_suspend(q);
    if (wait_ms > 0 && hangup_watch(h->hangup, q->fd, q->id, q) == 0)
        q->watched = true;
    if (fwd_submit(h->fwd, f) != 0) {
        f->outcome = FWD_REFUSED;
        f->reason = FWD_SHUTTING_DOWN;
        on_forwarded(f);
    }
    return MHD_YES;
}

/* ---- libmicrohttpd callbacks ----------------------------------------------------- */

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct http *h = cls;
    struct hreq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL; /* the access handler refuses the request */
    q->h = h;
    q->conn = conn;
    q->start_ns = mx_mono_ns();
    q->id = atomic_fetch_add(&h->next_id, 1) + 1;
    q->fd = -1;
    q->bad_path = !api_path_clean(uri); /* libmicrohttpd decodes it in place after this */
    q->v1 = strncmp(uri, "/v1", 3) == 0 && (uri[3] == '/' || uri[3] == '?' || uri[3] == '\0');
    q->ui = strncmp(uri, "/ui", 3) == 0 && (uri[3] == '/' || uri[3] == '?' || uri[3] == '\0');
    if (q->v1 && atomic_load(&h->grouped)) {
        q->target = strdup(uri); /* NULL (out of memory): answered 503 if it is forwarded */
    }
    q->body = q->small;
    q->body_cap = sizeof q->small;
    atomic_fetch_add(&h->stats.in_flight, 1);
    conns_request_begins(h->conns, http_i_conn_of(conn));
    return q;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? conns_opened(h->conns, ci->connect_fd) : NULL;
    } else {
        conns_closed(h->conns, *socket_context); /* before libmicrohttpd closes the fd */
        *socket_context = NULL;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)cls;
    struct hreq *q = *con_cls;
    if (!q)
        return MHD_NO; /* out of memory in on_uri: close */
    switch (q->phase) {
    case PH_HEADERS: {
        enum MHD_Result rc = http_i_on_headers(q, url, method, version);
        if (q->phase == PH_DONE) /* answered at once: no deadline while it is sent */
            conns_request_received(q->h->conns, http_i_conn_of(conn));
        return rc;
    }
    case PH_BODY:
        if (*upload_data_size > 0) {
            size_t n = *upload_data_size;
            *upload_data_size = 0;
            return http_i_on_body(q, upload_data, n);
        }
        conns_request_received(q->h->conns, http_i_conn_of(conn));
        if (http_i_is_many(q->route))
            http_i_many_route(q); /* its names' partition decides where it goes */
        return http_i_dispatch(q);
    case PH_WAIT:
        return answer_resumed(q);
    case PH_DONE:
        /* An answer was queued before the body was read: discard what still comes. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    return MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    struct http *h = cls;
    struct hreq *q = *con_cls;
    if (!q)
        return;
    *con_cls = NULL;
    conns_request_ends(h->conns, http_i_conn_of(conn));
    http_i_uncount(q);
    if (q->wait_slot)
        atomic_fetch_sub(&h->waiting, 1);
    int status = q->status ? q->status : 499;
    http_stats_answered(&h->stats, q->route, status, mx_mono_ns() - q->start_ns);
    if (q->watched)
        hangup_unwatch(h->hangup, q->id);
    res_req_clear(&q->ra.rq);
    fwd_req_clear(&q->fwd);
    spread_free(q->spread);
    http_i_many_free(q);
    free(q->target);
    if (q->list)
        ra_list_free(q->list);
    if (q->body != q->small)
        free(q->body);
    free(q);
    atomic_fetch_sub(&h->stats.in_flight, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[256], quoted[300];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    mx_debug("http", "detail=%s", mx_log_quote(quoted, sizeof quoted, msg));
}

/* ---- start and stop -------------------------------------------------------------- */

/* The fault seam's roles (see http_config), before the first request. */
static int apply_fault_roles(struct http *h, char *err, size_t errlen)
{
    enum http_role role;
    const char *url;
    if (h->cfg.fault_role) {
        if (!fwd_parse_role(h->cfg.fault_role, &role, &url)) {
            snprintf(err, errlen, "not a role: %s", h->cfg.fault_role);
            return -1;
        }
        for (unsigned p = 0; p < h->cfg.partitions; p++)
            http_set_role(h, p, role, url);
    }
    if (h->cfg.fault_role_after) {
        if (!fwd_parse_role(h->cfg.fault_role_after, &role, &url)) {
            snprintf(err, errlen, "not a role: %s", h->cfg.fault_role_after);
            return -1;
        }
        /* Requests must keep their targets from now on: the change may come any time. */
        atomic_store(&h->grouped, true);
        fwd_set_role_later(h->fwd, h->cfg.fault_role_after_ms, role, url);
    }
    return 0;
}

void http_set_role(struct http *h, unsigned partition, enum http_role role, const char *active_url)
{
    if (role != HTTP_ROLE_SERVE)
        atomic_store(&h->grouped,
                     true); /* before the role: a request that sees it kept its target */
    fwd_set_role(h->fwd, partition, role, active_url);
}

void http_set_serve_until(struct http *h, unsigned partition, uint64_t mono_ns)
{
    if (partition < h->cfg.partitions)
        atomic_store(&h->parts[partition].serve_until_ns, mono_ns);
}

void http_set_core(struct http *h, unsigned partition, const struct http_core *core)
{
    if (partition >= h->cfg.partitions)
        return;
    struct http_part *pt = &h->parts[partition];
    pthread_rwlock_wrlock(&h->core_lock);
    if (core) {
        /* Read by requests served here only once they see HTTP_ROLE_SERVE (an atomic set
         * after this), and by the pages under the lock. */
        pt->core = *core;
        atomic_store(&pt->published, true);
    } else {
        /* The fields stay: requests suspended before http_quiesce() may still be answered
         * through them, until the core's runtime and store have shut down. */
        atomic_store(&pt->published, false);
    }
    pthread_rwlock_unlock(&h->core_lock);
}

void http_release(struct http *h, unsigned partition)
{
    if (partition >= h->cfg.partitions)
        return;
    http_set_role(h, partition, HTTP_ROLE_HOLD, NULL);
    /* seq_cst with http_i_dispatch(): a request that read the role before it changed is
     * counted, and is waited for; one that reads it after is held. */
    while (atomic_load(&h->parts[partition].dispatching) > 0)
        sched_yield();
    http_set_core(h, partition, NULL);
}

bool http_ready(struct http *h, char *why, size_t len, struct mx_buf *details)
{
    if (h->cfg.ready && !h->cfg.ready(h->cfg.ctx, why, len, details))
        return false;
    bool ready = true, any = false;
    pthread_rwlock_rdlock(&h->core_lock);
    for (unsigned p = 0; p < h->cfg.partitions && ready; p++) {
        const struct http_part *pt = &h->parts[p];
        if (!atomic_load(&pt->published) || !pt->core.ready)
            continue;
        any = true;
        struct mx_buf more = {0};
        ready = pt->core.ready(pt->core.ctx, why, len, &more);
        if (more.len && p == 0)
            mx_buf_printf(details, "%s%s", details->len ? "," : "", more.p);
        details->oom |= more.oom;
        mx_buf_free(&more);
    }
    if (!any && !h->cfg.ready) {
        snprintf(why, len, "recovering");
        ready = false;
    }
    pthread_rwlock_unlock(&h->core_lock);
    return ready;
}

/* Frees what http_start() made, as far as it got: its failure and http_stop() end here
 * alike. */
static void teardown(struct http *h)
{
    if (h->daemon)
        MHD_stop_daemon(h->daemon);
    fwd_free(h->fwd);
    if (h->conns)
        conns_stop(h->conns);
    if (h->hangup)
        hangup_stop(h->hangup);
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    free(h->tls_cert);
    free(h->tls_key);
    pthread_rwlock_destroy(&h->core_lock);
    free(h->parts);
    free(h);
}

int http_start(struct http **out, const struct http_config *cfg, char *err, size_t errlen)
{
    struct http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    h->cfg = *cfg;
    h->cfg.core = NULL; /* the caller's; copied below */
    if (!h->cfg.partitions)
        h->cfg.partitions = 1;
    if (!(h->parts = calloc(h->cfg.partitions, sizeof *h->parts))) {
        free(h);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_rwlock_init(&h->core_lock, NULL);
    h->listen_fd = -1;
    http_stats_init(&h->stats);
    unsigned threads = cfg->threads ? cfg->threads : 1; /* the options decide the default */
    unsigned max_conn = cfg->max_connections ? cfg->max_connections : 10000;
    uint64_t idle_ms = cfg->idle_timeout_ms ? cfg->idle_timeout_ms : 60000;
    unsigned idle = (unsigned)((idle_ms + 999) / 1000); /* libmicrohttpd counts seconds */

    struct listener l;
    if (listener_open(cfg->listen, &l, err, errlen) != 0)
        goto fail;
    h->listen_fd = l.fd;
    snprintf(h->address, sizeof h->address, "%s", l.address);
    /* Only a loopback listener knows the names it is reached by; elsewhere (0.0.0.0 in a
     * container) the Host is checked only against --allowed-hosts. */
    h->check_host = cfg->allowed_hosts ? !admit_list_has(cfg->allowed_hosts, "*", 1) : l.loopback;
    if (hangup_start(&h->hangup, on_hangup, h) != 0) {
        snprintf(err, errlen, "cannot start the hang-up watcher");
        goto fail;
    }
    if (conns_start(&h->conns, max_conn, idle_ms) != 0) {
        snprintf(err, errlen, "cannot start the connection reaper");
        goto fail;
    }
    /* A standby forwards waiting requests up to a quarter of the connection limit (the
     * active has the same flags): two standbys leave the active half its connections for
     * its own clients and the probes of its /healthz. */
    unsigned max_parked = max_conn / 4 ? max_conn / 4 : 1;
    /* Whatever way they come, directly or from a standby, waiting requests take at most
     * three quarters of the connections: the rest stays for the requests that are answered
     * at once. And libmicrohttpd takes conns_spares() connections more, on which only
     * /healthz and /readyz are served (see http_i_on_headers()): the probes of the standbys get in
     * even when every other connection is taken. */
    h->max_waiting = max_conn * 3 / 4;
    if (fwd_start(&h->fwd, h->cfg.partitions, cfg->forward_timeout_ms, max_parked, err, errlen) !=
        0)
        goto fail;
    /* Without a core (a server of a group that does not know the group yet) there is
     * nothing to serve with: requests waiting in the listen queue are read the moment the
     * daemon starts, and are held until a role is set. */
    if (cfg->core)
        http_set_core(h, 0, cfg->core);
    else
        for (unsigned p = 0; p < h->cfg.partitions; p++)
            http_set_role(h, p, HTTP_ROLE_HOLD, NULL);
    if (apply_fault_roles(h, err, errlen) != 0)
        goto fail;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    bool tls = cfg->tls_cert_file && cfg->tls_key_file;
    if (tls) {
        h->tls_cert = listener_read_file(cfg->tls_cert_file, err, errlen);
        h->tls_key = h->tls_cert ? listener_read_file(cfg->tls_key_file, err, errlen) : NULL;
        if (!h->tls_key)
            goto fail;
        flags |= MHD_USE_TLS;
    }
    struct MHD_OptionItem opts[16] = {
        {MHD_OPTION_LISTEN_SOCKET, h->listen_fd, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, max_conn + conns_spares(max_conn), NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, idle, NULL},
        /* Headers (and the read buffer) of one request. libmicrohttpd zeroes it between
         * requests, so it is kept small: 8 KiB of headers is what proxies allow too. */
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, 8 * 1024, NULL},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_uri, h},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h},
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, NULL},
    };
    size_t nopts = 8;
    /* One thread is the internal polling thread alone: libmicrohttpd warns of a pool of
     * 1, and of 0, at every start, so the pool is named only when there is one. */
    if (threads > 1)
        opts[nopts++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, threads, NULL};
    if (tls) {
        opts[nopts++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert};
        opts[nopts++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key};
        if (cfg->tls_priorities)
            opts[nopts++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                                    (void *)cfg->tls_priorities};
    }
    opts[nopts] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_ARRAY, opts,
                                 MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, errlen, "cannot start the HTTP server on %s%s", h->address,
                 tls ? " (check the TLS certificate, the key and --tls-priorities)" : "");
        goto fail;
    }
    h->listen_fd = -1; /* libmicrohttpd's now: MHD_stop_daemon() closes it */
    mx_info("listening", "address=%s threads=%u tls=%s max_connections=%u", h->address, threads,
            tls ? "on" : "off", max_conn);
    *out = h;
    return 0;
fail:
    teardown(h);
    return -1;
}

const char *http_address(const struct http *h)
{
    return h->address;
}

void http_quiesce(struct http *h)
{
    /* seq_cst with http_i_dispatch(): a thread that missed the flag is counted, and we wait. */
    atomic_store(&h->draining, true);
    while (atomic_load(&h->dispatching) > 0)
        sched_yield();
    hangup_mute(h->hangup); /* on_hangup sends to the runtime, which stops next */
    /* Every request forwarded or held is answered 503 now: the active's waiters are dropped
     * as their transfers close, and nothing here waits for a server elsewhere. */
    fwd_stop(h->fwd);
    for (unsigned p = 0; p < h->cfg.partitions; p++)
        if (atomic_load(&h->parts[p].published) && h->parts[p].core.events)
            ev_flush(h->parts[p].core.events); /* list watches, events requests: 503 */
    /* No MHD_quiesce_daemon(): it takes the listen socket out of the pool threads' epoll
     * sets from this thread, racing with those threads' own handling of it. Connections
     * still arrive until http_stop(); http_i_dispatch() answers them 503 with Connection: close. */
}

void http_stop(struct http *h)
{
    /* Every suspended request has its answer by now (the runtime and the store are shut
     * down); give the pool threads a moment to send them. */
    for (int i = 0;
         i < 200 && (atomic_load(&h->stats.suspended) > 0 || atomic_load(&h->stats.in_flight) > 0);
         i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&h->stats.suspended) > 0)
        mx_error("http: requests still waiting at shutdown", "count=%ld",
                 atomic_load(&h->stats.suspended));
    teardown(h);
}
