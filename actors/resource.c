/*
 * The lease state machine (see resource.h).
 *
 * Layout: views and answers; changes (every change goes through change(), which takes
 * the next index); the lease operations; the waiter queue (FIFO, doubly linked so that
 * a client that hangs up is unlinked at once) and the watcher list; ticks.
 */
#include "actors/resource.h"

#include <inttypes.h>
#include <string.h>

#include "common/clock.h"
#include "common/uuid.h"

/* ---- views and answers ----------------------------------------------------------- */

void res_view_clear(struct res_view *v)
{
    mx_str_unref(v->owner);
    mx_str_unref(v->metadata);
    memset(v, 0, sizeof *v);
}

void res_domain_metrics(struct res_domain *d, struct mx_buf *b)
{
    prom_gauge(b, "mutexd_leases_held", "Leases in force.", atomic_load(&d->held));
    prom_gauge(b, "mutexd_waiters", "Acquire requests queued for a resource.",
               atomic_load(&d->waiters));
    prom_gauge(b, "mutexd_watchers", "GET requests watching for a change.",
               atomic_load(&d->watchers));
    prom_counter(b, "mutexd_grants_total", "Leases granted.", atomic_load(&d->grants));
    prom_counter(b, "mutexd_renewals_total", "Leases renewed.", atomic_load(&d->renewals));
    prom_counter(b, "mutexd_releases_total", "Leases released.", atomic_load(&d->releases));
    prom_counter(b, "mutexd_breaks_total", "Leases broken.", atomic_load(&d->breaks));
    prom_counter(b, "mutexd_expiries_total", "Leases that ran out.", atomic_load(&d->expiries));
    prom_header(b, "mutexd_expiry_lateness_seconds", "histogram",
                "How long after its deadline each lease was expired (for a lease that ran out "
                "while the server was down: after the restart).");
    prom_hist_write(b, "mutexd_expiry_lateness_seconds", "", &d->expiry_lateness);
    prom_counter(b, "mutexd_conflicts_total", "Acquires answered lease_held at once.",
                 atomic_load(&d->conflicts));
    prom_counter(b, "mutexd_wait_timeouts_total", "Waiters whose wait_ms ran out.",
                 atomic_load(&d->timeouts));
    /* A token is unsigned 64-bit: written as such, not through prom_gauge's int64_t. */
    prom_header(b, "mutexd_fencing_token_last", "gauge", "The last fencing token handed out.");
    mx_buf_printf(b, "mutexd_fencing_token_last %" PRIu64 "\n", atomic_load(&d->last_token));
}

void res_req_clear(struct res_req *rq)
{
    mx_str_unref(rq->owner);
    mx_str_unref(rq->metadata);
    rq->owner = rq->metadata = NULL;
    res_view_clear(&rq->view);
}

static uint64_t ms_until(uint64_t deadline_ns, uint64_t now_ns)
{
    if (deadline_ns <= now_ns)
        return 0;
    return (deadline_ns - now_ns + MX_NS_PER_MS - 1) / MX_NS_PER_MS; /* rounded up */
}

/* Fills `v` with the resource's state and its latest lease (whether held or not). */
static void fill_view(const struct res *r, const struct res_now *now, struct res_view *v)
{
    res_view_clear(v);
    v->held = r->row.has_lease && r->row.held;
    v->index = r->row.index;
    v->waiters = r->nwaiters;
    if (r->row.has_lease) {
        memcpy(v->lease_id, r->row.lease_id, 16);
        v->owner = mx_str_ref(r->row.owner);
        v->metadata = mx_str_ref(r->row.metadata);
        v->token = r->row.token;
        v->ttl_ms = r->row.ttl_ms;
        v->expires_in_ms = v->held ? ms_until(r->deadline_ns, now->mono_ns) : 0;
        v->acquired_at_ms = r->row.acquired_at_ms;
        v->renewed_at_ms = r->row.renewed_at_ms;
    }
}

static void answer(struct res_out *out, struct res_req *q, enum res_status status)
{
    q->status = (uint8_t)status;
    q->_next = q->_prev = NULL;
    if (out->tail)
        out->tail->_next = q;
    else
        out->head = q;
    out->tail = q;
}

static void answer_view(const struct res *r, const struct res_now *now, struct res_out *out,
                        struct res_req *q, enum res_status status)
{
    fill_view(r, now, &q->view);
    answer(out, q, status);
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

/* ---- changes --------------------------------------------------------------------- */

static void change(struct res *r, struct res_domain *d)
{
    uint64_t next = atomic_fetch_add(&d->last_index, 1) + 1;
    if (next <= r->row.index) {
        /* The domain's counter is behind this resource (it starts at the store's
         * high-water mark, so this takes a restore or a bug): move it past, so the
         * resource's index never goes backwards. */
        uint64_t cur = atomic_load(&d->last_index);
        while (cur <= r->row.index &&
               !atomic_compare_exchange_weak(&d->last_index, &cur, r->row.index + 1))
            ;
        next = r->row.index + 1;
    }
    r->row.index = next;
    r->changed = true;
}

static void forget_lease(struct res *r, struct res_domain *d)
{
    if (r->row.held)
        atomic_fetch_sub(&d->held, 1);
    mx_str_unref(r->row.owner);
    mx_str_unref(r->row.metadata);
    uint64_t index = r->row.index;
    memset(&r->row, 0, sizeof r->row);
    r->row.index = index;
    r->deadline_ns = 0;
}

static void set_deadline(struct res *r, uint64_t ttl_ms, const struct res_now *now)
{
    r->row.ttl_ms = ttl_ms;
    r->row.deadline_ms = now->wall_ms + (int64_t)ttl_ms;
    r->deadline_ns = now->mono_ns + ttl_ms * MX_NS_PER_MS;
}

static void replace_metadata(struct res *r, const struct res_req *q)
{
    if (q->has_metadata) {
        mx_str_unref(r->row.metadata);
        r->row.metadata = mx_str_ref(q->metadata);
    }
}

static bool same_lease(const struct res *r, const struct res_req *q)
{
    return r->row.has_lease && q->has_lease_id && memcmp(r->row.lease_id, q->lease_id, 16) == 0;
}

static void unavailable(struct res_out *out, struct res_req *q, const char *reason,
                        uint32_t retry_after_s)
{
    q->reason = reason;
    q->retry_after_s = retry_after_s;
    answer(out, q, RES_ERR_UNAVAILABLE);
}

/* The next fencing token, if one is reserved: 0 when none may be handed out now. */
static uint64_t next_token(struct res_domain *d)
{
    uint64_t t = atomic_load(&d->last_token);
    do {
        if (t >= atomic_load(&d->token_ceiling))
            return 0;
    } while (!atomic_compare_exchange_weak(&d->last_token, &t, t + 1));
    return t + 1;
}

/* After a restore from a mirror that may lag, no lease is granted, renewed or taken again
 * until the grace ends: the mirror may miss a break and a grant to someone else, so the
 * lease a holder presents may not be the resource's any more. True: q was answered 503. */
static bool in_restore_grace(struct res_domain *d, struct res_req *q, const struct res_now *now,
                             struct res_out *out)
{
    uint64_t grace = atomic_load(&d->grace_until_ns);
    if (!grace || now->mono_ns >= grace)
        return false;
    unavailable(out, q,
                "restore grace period: leases granted before the restore may still "
                "be held",
                (uint32_t)((grace - now->mono_ns) / 1000000000u + 1));
    return true;
}

/* A new lease for q. */
static void grant(struct res *r, struct res_domain *d, struct res_req *q, const struct res_now *now,
                  struct res_out *out)
{
    if (in_restore_grace(d, q, now, out))
        return;
    uint8_t id[16];
    if (q->has_lease_id) {
        memcpy(id, q->lease_id, 16);
    } else if (mx_uuid_random(id) != 0) {
        unavailable(out, q, "no random source for a lease id", 0);
        return;
    }
    uint64_t token = next_token(d);
    if (!token) {
        unavailable(out, q, "no fencing tokens reserved: blob storage unreachable", 0);
        return;
    }
    forget_lease(r, d);
    r->row.has_lease = true;
    r->row.held = true;
    memcpy(r->row.lease_id, id, 16);
    r->row.owner = mx_str_ref(q->owner);
    r->row.metadata = q->has_metadata ? mx_str_ref(q->metadata) : NULL;
    r->row.token = token;
    r->row.acquired_at_ms = r->row.renewed_at_ms = now->wall_ms;
    set_deadline(r, q->ttl_ms, now);
    change(r, d);
    atomic_fetch_add(&d->held, 1);
    atomic_fetch_add(&d->grants, 1);
    answer_view(r, now, out, q, RES_OK_LEASE);
}

/* Keeps the lease (and its token), starting its TTL again: renew, re-acquire. */
static void extend(struct res *r, struct res_domain *d, struct res_req *q, uint64_t ttl_ms,
                   const struct res_now *now, struct res_out *out)
{
    if (in_restore_grace(d, q, now, out))
        return;
    if (!r->row.held) {
        r->row.held = true;
        atomic_fetch_add(&d->held, 1);
    }
    r->row.renewed_at_ms = now->wall_ms;
    set_deadline(r, ttl_ms, now);
    replace_metadata(r, q);
    change(r, d);
    answer_view(r, now, out, q, RES_OK_LEASE);
}

/* ---- waiters and watchers -------------------------------------------------------- */

static void unlink_waiter(struct res *r, struct res_domain *d, struct res_req *q)
{
    if (q->_prev)
        q->_prev->_next = q->_next;
    else
        r->waiters = q->_next;
    if (q->_next)
        q->_next->_prev = q->_prev;
    else
        r->waiters_tail = q->_prev;
    q->_next = q->_prev = NULL;
    r->nwaiters--;
    atomic_fetch_sub(&d->waiters, 1);
}

static void unlink_watcher(struct res *r, struct res_domain *d, struct res_req *q)
{
    if (q->_prev)
        q->_prev->_next = q->_next;
    else
        r->watchers = q->_next;
    if (q->_next)
        q->_next->_prev = q->_prev;
    q->_next = q->_prev = NULL;
    r->nwatchers--;
    atomic_fetch_sub(&d->watchers, 1);
}

/* While the resource is free, grants the first waiter whose client is still there. */
static void grant_next(struct res *r, struct res_domain *d, const struct res_now *now,
                       struct res_out *out)
{
    while (r->waiters && !(r->row.has_lease && r->row.held)) {
        struct res_req *q = r->waiters;
        unlink_waiter(r, d, q);
        if (q->alive && !q->alive(q))
            answer(out, q, RES_GONE); /* never granted */
        else
            grant(r, d, q, now, out);
    }
}

/* Answers every watcher with the state as it is now. */
static void notify_watchers(struct res *r, struct res_domain *d, const struct res_now *now,
                            struct res_out *out)
{
    while (r->watchers) {
        struct res_req *q = r->watchers;
        unlink_watcher(r, d, q);
        answer_view(r, now, out, q, RES_OK_STATE);
    }
}

/* ---- operations ------------------------------------------------------------------ */

static void acquire(struct res *r, struct res_domain *d, struct res_req *q,
                    const struct res_now *now, struct res_out *out)
{
    /* A client that has gone is never granted, whether it waited or not: it may already
     * have sent the release of the lease id it proposed, on another connection, and that
     * release may have been handled before this acquire. */
    if (q->alive && !q->alive(q)) {
        answer(out, q, RES_GONE);
        return;
    }
    if (r->row.has_lease && r->row.held) {
        if (same_lease(r, q)) {
            extend(r, d, q, q->ttl_ms, now, out); /* a retry: the same lease back */
        } else if (q->wait_ms == 0) {
            atomic_fetch_add(&d->conflicts, 1);
            answer_view(r, now, out, q, RES_ERR_HELD);
        } else if (r->nwaiters >= d->lim.max_waiters) {
            answer(out, q, RES_ERR_TOO_MANY);
        } else {
            q->_deadline_ns = now->mono_ns + q->wait_ms * MX_NS_PER_MS;
            q->_watcher = false;
            q->status = RES_PENDING;
            q->_next = NULL;
            q->_prev = r->waiters_tail;
            if (r->waiters_tail)
                r->waiters_tail->_next = q;
            else
                r->waiters = q;
            r->waiters_tail = q;
            r->nwaiters++;
            atomic_fetch_add(&d->waiters, 1);
        }
        return;
    }
    if (same_lease(r, q))
        extend(r, d, q, q->ttl_ms, now, out); /* expired, nothing granted since */
    else
        grant(r, d, q, now, out);
}

static void renew(struct res *r, struct res_domain *d, struct res_req *q, const struct res_now *now,
                  struct res_out *out)
{
    if (!same_lease(r, q)) {
        answer(out, q, RES_ERR_LOST);
        return;
    }
    atomic_fetch_add(&d->renewals, 1);
    extend(r, d, q, q->has_ttl ? q->ttl_ms : r->row.ttl_ms, now, out);
}

static void release(struct res *r, struct res_domain *d, struct res_req *q,
                    const struct res_now *now, struct res_out *out)
{
    if (!same_lease(r, q)) {
        answer(out, q, RES_ERR_LOST);
        return;
    }
    forget_lease(r, d);
    change(r, d);
    atomic_fetch_add(&d->releases, 1);
    answer_view(r, now, out, q, RES_OK_RELEASED);
    grant_next(r, d, now, out);
}

static void break_lease(struct res *r, struct res_domain *d, struct res_req *q,
                        const struct res_now *now, struct res_out *out)
{
    bool broken = r->row.has_lease && r->row.held;
    if (r->row.has_lease) {
        forget_lease(r, d);
        change(r, d);
    }
    if (broken)
        atomic_fetch_add(&d->breaks, 1);
    answer_view(r, now, out, q, RES_OK_BROKEN);
    q->view.broken = broken;
    grant_next(r, d, now, out);
}

static void get(struct res *r, struct res_domain *d, struct res_req *q, const struct res_now *now,
                struct res_out *out)
{
    if (!q->has_index || q->index != r->row.index || q->wait_ms == 0) {
        answer_view(r, now, out, q, RES_OK_STATE);
        return;
    }
    if (r->nwatchers >= d->lim.max_waiters) {
        answer(out, q, RES_ERR_TOO_MANY);
        return;
    }
    q->_deadline_ns = now->mono_ns + q->wait_ms * MX_NS_PER_MS;
    q->_watcher = true;
    q->status = RES_PENDING;
    q->_prev = NULL;
    q->_next = r->watchers;
    if (r->watchers)
        r->watchers->_prev = q;
    r->watchers = q;
    r->nwatchers++;
    atomic_fetch_add(&d->watchers, 1);
}

/* ---- the entry points ------------------------------------------------------------ */

void res_init(struct res *r, uint64_t index)
{
    memset(r, 0, sizeof *r);
    r->row.index = index;
}

uint64_t res_deadline_ns(int64_t deadline_ms, const struct res_now *now)
{
    /* The wall clock carries the deadline across restarts and takeovers: the lease keeps
     * the time it had left, not its full TTL. */
    int64_t left = deadline_ms - now->wall_ms;
    return now->mono_ns + (left > 0 ? (uint64_t)left * MX_NS_PER_MS : 0);
}

void res_load(struct res *r, struct store_row *row, const struct res_now *now)
{
    mx_str_unref(r->row.owner);
    mx_str_unref(r->row.metadata);
    r->row = *row;
    memset(row, 0, sizeof *row);
    r->deadline_ns = 0;
    if (r->row.has_lease && r->row.held)
        r->deadline_ns = res_deadline_ns(r->row.deadline_ms, now);
}

void res_free(struct res *r)
{
    store_row_clear(&r->row);
}

void res_tick(struct res *r, struct res_domain *d, const struct res_now *now, struct res_out *out)
{
    uint64_t index = r->row.index;
    if (r->row.has_lease && r->row.held && r->deadline_ns <= now->mono_ns) {
        r->row.held = false; /* kept: its holder may still renew it */
        atomic_fetch_sub(&d->held, 1);
        atomic_fetch_add(&d->expiries, 1);
        prom_hist_observe(&d->expiry_lateness, now->mono_ns - r->deadline_ns);
        change(r, d);
    }
    grant_next(r, d, now, out);
    for (struct res_req *q = r->waiters, *next; q; q = next) {
        next = q->_next;
        if (q->_deadline_ns <= now->mono_ns) {
            unlink_waiter(r, d, q);
            atomic_fetch_add(&d->timeouts, 1);
            answer_view(r, now, out, q, RES_ERR_HELD);
        }
    }
    if (r->row.index != index) {
        notify_watchers(r, d, now, out);
        return;
    }
    for (struct res_req *q = r->watchers, *next; q; q = next) {
        next = q->_next;
        if (q->_deadline_ns <= now->mono_ns) {
            unlink_watcher(r, d, q);
            answer_view(r, now, out, q, RES_OK_STATE); /* unchanged */
        }
    }
}

void res_handle(struct res *r, struct res_domain *d, struct res_req *q, const struct res_now *now,
                struct res_out *out)
{
    res_tick(r, d, now, out);
    uint64_t index = r->row.index;
    switch (q->op) {
    case RES_ACQUIRE:
        acquire(r, d, q, now, out);
        break;
    case RES_RENEW:
        renew(r, d, q, now, out);
        break;
    case RES_RELEASE:
        release(r, d, q, now, out);
        break;
    case RES_BREAK:
        break_lease(r, d, q, now, out);
        break;
    case RES_GET:
        get(r, d, q, now, out);
        break;
    default:
        q->reason = "unknown operation";
        answer(out, q, RES_ERR_UNAVAILABLE);
        break;
    }
    /* Watchers see the state after the whole operation (a release and the grant it led
     * to), not the step between. A watch just added has the current index: not woken. */
    if (r->row.index != index)
        notify_watchers(r, d, now, out);
}

void res_drop(struct res *r, struct res_domain *d, uint64_t id, struct res_out *out)
{
    for (struct res_req *q = r->waiters; q; q = q->_next)
        if (q->id == id) {
            unlink_waiter(r, d, q);
            answer(out, q, RES_GONE);
            return;
        }
    for (struct res_req *q = r->watchers; q; q = q->_next)
        if (q->id == id) {
            unlink_watcher(r, d, q);
            answer(out, q, RES_GONE);
            return;
        }
}

void res_cancel_all(struct res *r, struct res_domain *d, const char *reason, struct res_out *out)
{
    while (r->waiters) {
        struct res_req *q = r->waiters;
        unlink_waiter(r, d, q);
        q->reason = reason;
        answer(out, q, RES_ERR_UNAVAILABLE);
    }
    while (r->watchers) {
        struct res_req *q = r->watchers;
        unlink_watcher(r, d, q);
        q->reason = reason;
        answer(out, q, RES_ERR_UNAVAILABLE);
    }
}

uint64_t res_lease_deadline(const struct res *r)
{
    return r->row.has_lease && r->row.held ? r->deadline_ns : UINT64_MAX;
}

uint64_t res_queue_deadline(const struct res *r)
{
    uint64_t next = UINT64_MAX;
    for (const struct res_req *q = r->waiters; q; q = q->_next)
        if (q->_deadline_ns < next)
            next = q->_deadline_ns;
    for (const struct res_req *q = r->watchers; q; q = q->_next)
        if (q->_deadline_ns < next)
            next = q->_deadline_ns;
    return next;
}

uint64_t res_next_deadline(const struct res *r)
{
    uint64_t lease = res_lease_deadline(r), queue = res_queue_deadline(r);
    return lease < queue ? lease : queue;
}

bool res_idle(const struct res *r)
{
    return !r->waiters && !r->watchers;
}
