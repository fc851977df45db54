/*
 * The lease state machine's views and answers (resource.c, resource_view.c): what an answer
 * shows of a resource, and the queue of answers a turn makes. Internal to actors/.
 */
#ifndef MX_RESOURCE_VIEW_H
#define MX_RESOURCE_VIEW_H

#include "actors/resource.h"
#include "common/clock.h"

static inline uint64_t res_i_ms_until(uint64_t deadline_ns, uint64_t now_ns)
{
    if (deadline_ns <= now_ns)
        return 0;
    return (deadline_ns - now_ns + MX_NS_PER_MS - 1) / MX_NS_PER_MS; /* rounded up */
}

static inline uint32_t res_i_req_limit(const struct res_req *q)
{
    return q->limit ? q->limit : 1;
}

static inline uint32_t res_i_max_holders(const struct res_domain *d)
{
    return d->lim.max_holders ? d->lim.max_holders : 1024;
}

/* The kind of lease i, for the metrics. */
static inline enum res_kind res_i_lease_kind(const struct res *r, uint32_t i)
{
    return res_kind_of(r->row.limit, r->row.leases[i].shared);
}

/* Lease i of r into the view's lease fields. */
void res_i_view_lease(const struct res *r, uint32_t i, const struct res_now *now,
                      struct res_view *v);

/* The resource-wide fields of a view. */
void res_i_view_common(const struct res *r, struct res_view *v);

/* A state: every holder, oldest grant first; the lease fields show the first. */
void res_i_fill_state(const struct res *r, const struct res_now *now, struct res_view *v);

/* q answered with `status`, at the end of the turn's answers. */
void res_i_answer(struct res_out *out, struct res_req *q, enum res_status status);

/* q answered with the state as it is now. */
void res_i_answer_state(const struct res *r, const struct res_now *now, struct res_out *out,
                        struct res_req *q, enum res_status status);

/* A lease body: lease i. */
void res_i_answer_lease(const struct res *r, uint32_t i, const struct res_now *now,
                        struct res_out *out, struct res_req *q);

/* lease_held: the holder whose lease ends first. */
void res_i_answer_held(const struct res *r, const struct res_now *now, struct res_out *out,
                       struct res_req *q);

/* limit_mismatch, with the limit in force. */
void res_i_answer_limit(const struct res *r, struct res_out *out, struct res_req *q);

#endif
