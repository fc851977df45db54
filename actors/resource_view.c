/*
 * The lease state machine's views and answers (see resource_view.h).
 */
#include "actors/resource_view.h"

#include <stdlib.h>
#include <string.h>

/* ---- views and answers ----------------------------------------------------------- */

enum res_kind res_kind_of(uint32_t limit, bool shared)
{
    return limit > 1 ? RES_KIND_SEMAPHORE : shared ? RES_KIND_SHARED : RES_KIND_EXCLUSIVE;
}

static void holder_clear(struct res_holder *h)
{
    mx_str_unref(h->owner);
    mx_str_unref(h->metadata);
}

void res_view_clear(struct res_view *v)
{
    mx_str_unref(v->owner);
    mx_str_unref(v->metadata);
    for (uint32_t i = 0; i < v->nholders; i++)
        holder_clear(&v->holders[i]);
    free(v->holders);
    memset(v, 0, sizeof *v);
}

void res_req_clear(struct res_req *rq)
{
    mx_str_unref(rq->owner);
    mx_str_unref(rq->metadata);
    rq->owner = rq->metadata = NULL;
    res_view_clear(&rq->view);
}

/* Lease i of r into the view's lease fields. */
void res_i_view_lease(const struct res *r, uint32_t i, const struct res_now *now,
                      struct res_view *v)
{
    const struct store_lease *l = &r->row.leases[i];
    mx_str_unref(v->owner);
    mx_str_unref(v->metadata);
    memcpy(v->lease_id, l->lease_id, 16);
    v->shared = l->shared;
    v->owner = mx_str_ref(l->owner);
    v->metadata = mx_str_ref(l->metadata);
    v->token = l->token;
    v->ttl_ms = l->ttl_ms;
    v->expires_in_ms = l->held ? res_i_ms_until(r->slot[i].deadline_ns, now->mono_ns) : 0;
    v->acquired_at_ms = l->acquired_at_ms;
    v->renewed_at_ms = l->renewed_at_ms;
}

/* The resource-wide fields of a view. */
void res_i_view_common(const struct res *r, struct res_view *v)
{
    v->held = r->nheld > 0;
    v->index = r->row.index;
    v->waiters = r->nwaiters;
    v->limit = r->row.limit ? r->row.limit : 1;
}

/* A state: every holder, oldest grant first; the lease fields show the first. */
void res_i_fill_state(const struct res *r, const struct res_now *now, struct res_view *v)
{
    res_view_clear(v);
    res_i_view_common(r, v);
    if (!r->nheld) {
        v->limit = r->nheld ? v->limit : 1; /* a free resource reads limit 1 */
        return;
    }
    v->holders = calloc(r->nheld, sizeof *v->holders);
    bool first = true;
    for (uint32_t i = 0; i < r->row.nleases; i++) {
        const struct store_lease *l = &r->row.leases[i];
        if (!l->held)
            continue;
        if (first)
            res_i_view_lease(r, i, now, v);
        first = false;
        if (!v->holders)
            continue;
        struct res_holder *h = &v->holders[v->nholders++];
        h->shared = l->shared;
        h->owner = mx_str_ref(l->owner);
        h->metadata = mx_str_ref(l->metadata);
        h->token = l->token;
        h->ttl_ms = l->ttl_ms;
        h->expires_in_ms = res_i_ms_until(r->slot[i].deadline_ns, now->mono_ns);
        h->acquired_at_ms = l->acquired_at_ms;
        h->renewed_at_ms = l->renewed_at_ms;
    }
}

void res_i_answer(struct res_out *out, struct res_req *q, enum res_status status)
{
    q->status = (uint8_t)status;
    q->_next = q->_prev = NULL;
    if (out->tail)
        out->tail->_next = q;
    else
        out->head = q;
    out->tail = q;
}

void res_i_answer_state(const struct res *r, const struct res_now *now, struct res_out *out,
                        struct res_req *q, enum res_status status)
{
    res_i_fill_state(r, now, &q->view);
    res_i_answer(out, q, status);
}

/* A lease body: lease i. */
void res_i_answer_lease(const struct res *r, uint32_t i, const struct res_now *now,
                        struct res_out *out, struct res_req *q)
{
    res_view_clear(&q->view);
    res_i_view_common(r, &q->view);
    res_i_view_lease(r, i, now, &q->view);
    res_i_answer(out, q, RES_OK_LEASE);
}

/* lease_held: the holder whose lease ends first. */
void res_i_answer_held(const struct res *r, const struct res_now *now, struct res_out *out,
                       struct res_req *q)
{
    res_view_clear(&q->view);
    res_i_view_common(r, &q->view);
    uint32_t first = UINT32_MAX;
    for (uint32_t i = 0; i < r->row.nleases; i++)
        if (r->row.leases[i].held &&
            (first == UINT32_MAX || r->slot[i].deadline_ns < r->slot[first].deadline_ns))
            first = i;
    if (first != UINT32_MAX)
        res_i_view_lease(r, first, now, &q->view);
    res_i_answer(out, q, RES_ERR_HELD);
}

void res_i_answer_limit(const struct res *r, struct res_out *out, struct res_req *q)
{
    res_view_clear(&q->view);
    res_i_view_common(r, &q->view);
    res_i_answer(out, q, RES_ERR_LIMIT);
}

struct res_req *res_out_pop(struct res_out *out)
{
    struct res_req *q = out->head;
    if (q) {
        out->head = q->_next;
        if (!out->head)
            out->tail = NULL;
        q->_next = NULL;
    }
    return q;
}
