/*
 * Requests about several resources at once (docs/api.md, "Several resources at once"):
 * POST /v1/acquire, /v1/renew and /v1/release with `resources`.
 *
 * The body is decoded before dispatch: the names' partition decides which core serves the
 * request or which owner it is forwarded to, as a resource's name in the path does. Then:
 * - an acquire is one set of parts (actors/multi.h) granted all at once or not at all;
 * - a renewal or a release is one request per resource, sent together so that their
 *   changes join one commit when the resources are idle; each is answered when durable,
 *   and the whole when the last is. What is still held is renewed or released; the answer
 *   names what is not.
 * The connection is suspended before any part is sent and resumed once every part is
 * answered; the answer is rendered from the parts in the order the names were given.
 */
#include "http/request.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "actors/multi.h"
#include "actors/resource.h"
#include "actors/resource_actor.h"
#include "actors/runtime.h"
#include "common/container_of.h"
#include "common/partition.h"
#include "http/api.h"
#include "http/auth.h"
#include "http/hangup.h"
#include "http/render.h"
#include "persistence/store.h"

struct many_part {
    struct ra_request ra;
    struct hreq *q;
};

struct many {
    struct ra_multi *multi; /* an acquire's set; NULL for a renewal or a release */
    size_t n;
    _Atomic size_t answered;
    struct many_part parts[]; /* a renewal's or a release's */
};

bool http_i_is_many(enum api_route r)
{
    return r == ROUTE_ACQUIRE_MANY || r == ROUTE_RENEW_MANY || r == ROUTE_RELEASE_MANY;
}

bool http_i_many_decode(struct hreq *q)
{
    if (q->names.count)
        return true; /* decoded before dispatch */
    return api_decode_many(q->route, q->body, q->body_len, q->h->cfg.lim, &q->ra.rq, &q->names,
                           &q->err);
}

void http_i_many_route(struct hreq *q)
{
    struct http *h = q->h;
    if (q->failed || q->too_large)
        return;
    if (!http_i_many_decode(q)) {
        q->failed = true;
        return;
    }
    if (h->cfg.partitions > 1 && !api_names_one_partition(&q->names, h->cfg.partitions, &q->err)) {
        q->failed = true;
        api_names_free(&q->names); /* of no one partition: its answer names none */
        return;
    }
    q->partition = mx_partition(q->names.name[0], q->names.len[0], h->cfg.partitions);
    if (!h->cfg.auth)
        return;
    for (uint32_t i = 0; i < q->names.count; i++)
        if (!auth_prefix_allows(&q->grant, q->names.name[i], q->names.len[i])) {
            q->failed = true;
            api_fail(&q->err, 403, "forbidden", NULL,
                     "the token '%s' is limited to resources under '%s', and '%.60s' is not",
                     q->grant.name, q->grant.prefix, q->names.name[i]);
            return;
        }
}

/* Any thread, once every part is answered. */
static void resume(struct hreq *q)
{
    if (q->watched) {
        /* Before the connection may close; it also waits out an on_hangup() under way. */
        hangup_unwatch(q->h->hangup, q->id);
        q->watched = false;
    }
    MHD_resume_connection(q->conn);
}

static void on_set_done(struct ra_multi *m)
{
    resume(m->arg);
}

static void on_part_reply(struct ra_request *r)
{
    struct many_part *p = container_of(r, struct many_part, ra);
    struct hreq *q = p->q;
    /* Read before the count: once the last part is counted the request may be freed. */
    size_t n = q->many->n;
    if (atomic_fetch_add(&q->many->answered, 1) + 1 == n)
        resume(q);
}

/* Asked before a set commits: a set is never granted to a client that has gone. */
static bool set_client_alive(struct res_req *rq)
{
    struct hreq *q = container_of(rq, struct hreq, ra.rq);
    return !hangup_peer_gone(q->fd);
}

static enum MHD_Result serve_set(struct hreq *q, const struct http_core *core)
{
    struct http *h = q->h;
    size_t n = q->names.count;
    struct many *many = calloc(1, sizeof *many);
    if (!many)
        return http_i_send_unavailable(q, "out of memory");
    uint64_t first = atomic_fetch_add(&h->next_id, n) + 1;
    q->ra.rq.alive = set_client_alive;
    many->multi = ra_multi_new(core->rt, core->store, q->names.name, q->names.len, n, &q->ra.rq,
                               first, on_set_done, q);
    if (!many->multi) {
        free(many);
        return http_i_send_unavailable(q, "out of memory");
    }
    q->many = many;
    q->phase = PH_WAIT;
    http_i_suspend(q);
    if (q->ra.rq.wait_ms > 0 && hangup_watch(h->hangup, q->fd, q->id, q) == 0)
        q->watched = true;
    ra_multi_start(many->multi, core->domain);
    return MHD_YES;
}

static enum MHD_Result serve_parts(struct hreq *q, const struct http_core *core)
{
    struct http *h = q->h;
    size_t n = q->names.count;
    struct many *many = calloc(1, sizeof *many + n * sizeof many->parts[0]);
    if (!many)
        return http_i_send_unavailable(q, "out of memory");
    many->n = n;
    uint64_t first = atomic_fetch_add(&h->next_id, n) + 1;
    const struct res_req *t = &q->ra.rq;
    for (size_t i = 0; i < n; i++) {
        struct res_req *rq = &many->parts[i].ra.rq;
        *rq = *t;
        memset(&rq->view, 0, sizeof rq->view);
        rq->owner = NULL;
        rq->metadata = t->has_metadata ? mx_str_ref(t->metadata) : NULL;
        rq->id = first + i;
        many->parts[i].ra.reply = on_part_reply;
        many->parts[i].q = q;
    }
    q->many = many;
    q->phase = PH_WAIT;
    http_i_suspend(q);
    struct store_batch batch;
    store_batch_begin(core->store, &batch);
    for (size_t i = 0; i < n; i++) {
        struct many_part *p = &many->parts[i];
        int rc = ra_send(core->rt, q->names.name[i], q->names.len[i], &p->ra, &batch);
        if (rc != RT_OK) {
            p->ra.rq.status = RES_ERR_UNAVAILABLE;
            p->ra.rq.reason = rc == RT_EFULL    ? "the resource is overloaded"
                              : rc == RT_ELIMIT ? "too many active resources"
                                                : rt_strerror(rc);
            on_part_reply(&p->ra);
        }
    }
    store_batch_end(&batch, false);
    return MHD_YES;
}

enum MHD_Result http_i_serve_many(struct hreq *q, const struct http_core *core)
{
    return q->route == ROUTE_ACQUIRE_MANY ? serve_set(q, core) : serve_parts(q, core);
}

enum MHD_Result http_i_answer_many(struct hreq *q)
{
    struct many *many = q->many;
    const struct res_req *rq[API_MAX_NAMES];
    size_t n = q->names.count;
    bool gone = true;
    for (size_t i = 0; i < n; i++) {
        rq[i] = many->multi ? &many->multi->parts[i].req.rq : &many->parts[i].ra.rq;
        gone = gone && rq[i]->status == RES_GONE;
    }
    if (gone)
        return http_i_nobody_to_answer(q);
    /* A refusal shows a holder read here: checked as a single acquire's is, since the
     * set may have waited while another server took the partition over. */
    for (size_t i = 0; i < n; i++)
        if (rq[i]->status == RES_ERR_HELD) {
            const char *stale = http_i_not_serving(q);
            if (stale)
                return http_i_send_group_unavailable(q, stale);
            break;
        }
    struct render rd;
    render_many(q->names.name, q->names.len, rq, n,
                q->route == ROUTE_RELEASE_MANY ? RES_OK_RELEASED : RES_OK_LEASE, &rd);
    return http_i_send_render(q, &rd, NULL);
}

void http_i_many_hangup(struct hreq *q)
{
    if (q->many && q->many->multi)
        ra_multi_hangup(q->many->multi);
}

void http_i_many_free(struct hreq *q)
{
    struct many *many = q->many;
    if (many) {
        if (many->multi)
            ra_multi_free(many->multi);
        for (size_t i = 0; i < many->n; i++)
            res_req_clear(&many->parts[i].ra.rq);
        free(many);
        q->many = NULL;
    }
    api_names_free(&q->names);
}
