/*
 * The lease state machine (see resource.h).
 *
 * Layout: changes (views and answers are in resource_view.c) (every change goes through change(),
 * which takes the next index); the lease operations; the waiter queue (FIFO, doubly linked so that
 * a client that hangs up is unlinked at once) and the watcher list; ticks.
 */
#include "actors/resource.h"
#include "actors/resource_view.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/uuid.h"

/* ---- changes --------------------------------------------------------------------- */

/* One change of the resource: lease `l` was granted, renewed, released, broken or expired.
 * It takes the next change index (recorded as an event when the domain keeps them). */
static void change(struct res *r, struct res_domain *d, enum ev_type type,
                   const struct store_lease *l, const struct res_now *now)
{
    uint64_t next, reserved = r->next_index;
    r->next_index = 0;
    if (reserved && reserved <= r->row.index) {
        /* Another holder changed the resource since its index was reserved: the reserved
         * one is never shown, and this change takes the next. */
        if (d->events)
            ev_durable(d->events, r->name, r->name_len, reserved, reserved, false);
        reserved = 0;
    }
    if (d->events) {
        struct ev_event e = {.at_ms = now->wall_ms,
                             .type = (uint8_t)type,
                             .shared = l->shared,
                             .limit = r->row.limit ? r->row.limit : 1,
                             .token = l->token,
                             .owner = l->owner,
                             .name_len = (uint16_t)r->name_len};
        if (r->name_len)
            memcpy(e.name, r->name, r->name_len);
        if (reserved)
            ev_fill(d->events, reserved, &e);
        next = reserved ? reserved : ev_record(d->events, r->row.index, &e);
    } else if (reserved) {
        next = reserved;
    } else {
        next = atomic_fetch_add(&d->last_index, 1) + 1;
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
    }
    if (!r->changed)
        r->changed_from = next;
    r->row.index = next;
    r->changed = true;
}

/* How long lease `l` was held, when it ends (released, broken or expired). */
static void observe_held(struct res *r, struct res_domain *d, const struct store_lease *l,
                         const struct res_now *now)
{
    int64_t ms = now->wall_ms - l->acquired_at_ms;
    prom_hist_observe(&d->held_seconds[res_kind_of(r->row.limit, l->shared)],
                      ms > 0 ? (uint64_t)ms : 0);
}

static int find_lease(const struct res *r, const uint8_t id[16])
{
    for (uint32_t i = 0; i < r->row.nleases; i++)
        if (memcmp(r->row.leases[i].lease_id, id, 16) == 0)
            return (int)i;
    return -1;
}

static void set_held(struct res *r, struct res_domain *d, uint32_t i, bool held)
{
    struct store_lease *l = &r->row.leases[i];
    if (l->held == held)
        return;
    l->held = held;
    int64_t by = held ? 1 : -1;
    r->nheld += held ? 1u : (uint32_t)-1;
    atomic_fetch_add(&d->held, by);
    atomic_fetch_add(&d->held_kind[res_i_lease_kind(r, i)], by);
}

/* Room for one more lease. */
static bool reserve_lease(struct res *r)
{
    if (r->row.nleases < r->cap)
        return true;
    uint32_t cap = r->cap ? r->cap * 2 : 2;
    struct store_lease *leases = realloc(r->row.leases, cap * sizeof *leases);
    if (!leases)
        return false;
    r->row.leases = leases;
    struct res_slot *slot = realloc(r->slot, cap * sizeof *slot);
    if (!slot)
        return false;
    r->slot = slot;
    r->cap = cap;
    return true;
}

/* Notes that lease id `id` is to be deleted from the store (unless put again). */
static void note_deleted(struct res *r, const uint8_t id[16])
{
    if (r->ndel == r->delcap) {
        uint32_t cap = r->delcap ? r->delcap * 2 : 4;
        uint8_t(*del)[16] = realloc(r->del, cap * sizeof *del);
        if (!del) {
            /* Without room to say which, the turn cannot be written: res_take_rec() fails
             * and the actor reads the store again. */
            r->ndel = UINT32_MAX;
            return;
        }
        r->del = del;
        r->delcap = cap;
    }
    if (r->ndel != UINT32_MAX)
        memcpy(r->del[r->ndel++], id, 16);
}

static void unnote_deleted(struct res *r, const uint8_t id[16])
{
    if (r->ndel == UINT32_MAX)
        return;
    for (uint32_t i = 0; i < r->ndel; i++)
        if (memcmp(r->del[i], id, 16) == 0) {
            memmove(r->del[i], r->del[i + 1], (r->ndel - i - 1) * sizeof r->del[0]);
            r->ndel--;
            return;
        }
}

/* Forgets lease i (held or remembered). */
static void forget_lease(struct res *r, struct res_domain *d, uint32_t i)
{
    set_held(r, d, i, false);
    note_deleted(r, r->row.leases[i].lease_id);
    store_lease_clear(&r->row.leases[i]);
    uint32_t after = r->row.nleases - i - 1;
    memmove(&r->row.leases[i], &r->row.leases[i + 1], after * sizeof r->row.leases[0]);
    memmove(&r->slot[i], &r->slot[i + 1], after * sizeof r->slot[0]);
    r->row.nleases--;
}

static void set_deadline(struct res *r, uint32_t i, uint64_t ttl_ms, const struct res_now *now)
{
    struct store_lease *l = &r->row.leases[i];
    l->ttl_ms = ttl_ms;
    l->deadline_ms = now->lease_ms + (int64_t)ttl_ms;
    r->slot[i].deadline_ns = now->mono_ns + ttl_ms * MX_NS_PER_MS;
    r->slot[i].dirty = true;
}

static void unavailable(struct res_out *out, struct res_req *q, const char *reason,
                        uint32_t retry_after_s)
{
    q->reason = reason;
    q->retry_after_s = retry_after_s;
    res_i_answer(out, q, RES_ERR_UNAVAILABLE);
}

uint64_t res_reserve_tokens(struct res_domain *d, size_t n)
{
    uint64_t t = atomic_load(&d->last_token), first, last, stride = d->token_stride;
    uint64_t step = stride > 1 ? stride : 1;
    if (n == 0 || n > UINT64_MAX / step)
        return 0;
    do {
        first = stride > 1 ? (t / stride + 1) * stride + d->token_offset : t + 1;
        last = first + (n - 1) * step;
        if (first <= t || last < first || last > atomic_load(&d->token_ceiling))
            return 0;
    } while (!atomic_compare_exchange_weak(&d->last_token, &t, last));
    return first;
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

/* What one lease adds to its row's line at most: its fixed fields, its owner escaped, its
 * metadata as stored. */
static size_t lease_bytes(const struct mx_str *owner, const struct mx_str *metadata)
{
    return 320 + 2 * (owner ? owner->len : 0) + (metadata ? metadata->len : 4);
}

static size_t row_bytes(const struct res *r)
{
    size_t n = 0;
    for (uint32_t i = 0; i < r->row.nleases; i++)
        n += lease_bytes(r->row.leases[i].owner, r->row.leases[i].metadata);
    return n;
}

/* Whether a new lease for q fits beside the leases held now (limits agreed). */
static bool fits(const struct res *r, const struct res_domain *d, const struct res_req *q)
{
    if (r->nheld == 0)
        return true;
    if (row_bytes(r) + lease_bytes(q->owner, q->has_metadata ? q->metadata : NULL) >
        RES_ROW_MAX_BYTES)
        return false;
    if (r->row.limit > 1)
        return r->nheld < r->row.limit;
    if (!q->shared || r->nheld >= res_i_max_holders(d))
        return false;
    for (uint32_t i = 0; i < r->row.nleases; i++)
        if (r->row.leases[i].held && !r->row.leases[i].shared)
            return false;
    return true;
}

/* A grant takes the places of remembered leases (see resource.h). */
static void take_places(struct res *r, struct res_domain *d, bool exclusive)
{
    uint32_t bound = r->row.limit > 1 ? r->row.limit : res_i_max_holders(d);
    for (uint32_t i = 0; i < r->row.nleases;) {
        const struct store_lease *l = &r->row.leases[i];
        if (l->held) {
            i++;
            continue;
        }
        bool taken = r->row.limit > 1 ? r->row.nleases > bound
                                      : exclusive || !l->shared || r->row.nleases > bound;
        if (taken)
            forget_lease(r, d, i); /* the oldest remembered goes first */
        else
            i++;
    }
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
    if (!reserve_lease(r)) {
        unavailable(out, q, "out of memory", 0);
        return;
    }
    /* A part takes its token from the set's block, in the set's order, or none. */
    uint64_t token = q->multi ? q->part_token : res_reserve_tokens(d, 1);
    if (!token) {
        unavailable(out, q, "no fencing tokens reserved: blob storage unreachable", 0);
        return;
    }
    if (r->nheld == 0 && r->row.limit != res_i_req_limit(q)) {
        /* The limit belongs to the resource while it has holders: a new one now. */
        while (r->row.nleases)
            forget_lease(r, d, 0);
        r->row.limit = res_i_req_limit(q);
    }
    int old = find_lease(r, id);
    if (old >= 0)
        forget_lease(r, d, (uint32_t)old); /* a remembered lease of the same id */
    uint32_t i = r->row.nleases++;
    struct store_lease *l = &r->row.leases[i];
    memset(l, 0, sizeof *l);
    memset(&r->slot[i], 0, sizeof r->slot[i]);
    memcpy(l->lease_id, id, 16);
    unnote_deleted(r, id);
    l->shared = q->shared;
    l->owner = mx_str_ref(q->owner);
    l->metadata = q->has_metadata ? mx_str_ref(q->metadata) : NULL;
    l->token = token;
    l->acquired_at_ms = l->renewed_at_ms = now->wall_ms;
    set_deadline(r, i, q->ttl_ms, now);
    set_held(r, d, i, true);
    take_places(r, d, r->row.limit == 1 && !q->shared);
    i = (uint32_t)find_lease(r, id);
    change(r, d, EV_GRANTED, &r->row.leases[i], now);
    prom_hist_observe(&d->wait_seconds[res_kind_of(r->row.limit, q->shared)],
                      q->_queued_ns && now->mono_ns > q->_queued_ns ? now->mono_ns - q->_queued_ns
                                                                    : 0);
    atomic_fetch_add(&d->grants, 1);
    atomic_fetch_add(&d->grants_kind[res_kind_of(r->row.limit, q->shared)], 1);
    res_i_answer_lease(r, i, now, out, q);
}

/* The part of a request about several resources that holds the head's place, or NULL. */
static struct res_req *reserved_head(const struct res *r)
{
    return r->waiters && r->waiters->_reserved ? r->waiters : NULL;
}

/* Keeps lease i (and its token), starting its TTL again: renew, re-acquire. */
static void extend(struct res *r, struct res_domain *d, uint32_t i, struct res_req *q,
                   uint64_t ttl_ms, const struct res_now *now, struct res_out *out)
{
    if (in_restore_grace(d, q, now, out))
        return;
    struct store_lease *l = &r->row.leases[i];
    const struct res_req *held_for = reserved_head(r);
    size_t room =
        RES_ROW_MAX_BYTES -
        (held_for ? lease_bytes(held_for->owner, held_for->has_metadata ? held_for->metadata : NULL)
                  : 0);
    if (q->has_metadata && (l->metadata ? l->metadata->len : 0) < q->metadata->len &&
        row_bytes(r) - lease_bytes(l->owner, l->metadata) + lease_bytes(l->owner, q->metadata) >
            room) {
        res_i_answer(out, q, RES_ERR_ROW_FULL);
        return;
    }
    set_held(r, d, i, true);
    l->renewed_at_ms = now->wall_ms;
    set_deadline(r, i, ttl_ms, now);
    if (q->has_metadata) {
        mx_str_unref(l->metadata);
        l->metadata = mx_str_ref(q->metadata);
    }
    change(r, d, EV_RENEWED, l, now);
    res_i_answer_lease(r, i, now, out, q);
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
    atomic_fetch_sub(&d->waiters_kind[res_kind_of(res_i_req_limit(q), q->shared)], 1);
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

/* An acquire with the id of a lease the resource has (held, or expired with nothing granted
 * in its place): the same lease back, if it asks for the same kind. */
static void acquire_own(struct res *r, struct res_domain *d, uint32_t i, struct res_req *q,
                        const struct res_now *now, struct res_out *out)
{
    if (res_i_req_limit(q) != r->row.limit)
        res_i_answer_limit(r, out, q);
    else if (q->shared != r->row.leases[i].shared)
        res_i_answer(out, q, RES_ERR_SHARED);
    else
        extend(r, d, i, q, q->ttl_ms, now, out);
}

/* Grants waiters in order while the first fits; one whose limit is not the one in force
 * when its turn comes is answered limit_mismatch; one whose client has gone is dropped;
 * one that proposed the id of a lease granted while it waited (the same request sent
 * twice) gets that lease back. */
static void grant_next(struct res *r, struct res_domain *d, const struct res_now *now,
                       struct res_out *out)
{
    while (r->waiters) {
        struct res_req *q = r->waiters;
        int own = q->has_lease_id ? find_lease(r, q->lease_id) : -1;
        if (q->alive && !q->alive(q)) {
            unlink_waiter(r, d, q);
            res_i_answer(out, q, RES_GONE); /* never granted */
        } else if (own >= 0) {
            unlink_waiter(r, d, q);
            acquire_own(r, d, (uint32_t)own, q, now, out);
        } else if (r->nheld && res_i_req_limit(q) != r->row.limit) {
            unlink_waiter(r, d, q);
            res_i_answer_limit(r, out, q);
        } else if (q->multi) {
            /* Reserved, not granted: the other parts decide. Nobody behind it goes first. */
            if (!q->_reserved && fits(r, d, q)) {
                /* Its own deadline ends here: once every part is reserved they are granted
                 * together, and a part timed out in between would leave them split. The
                 * request's deadline is kept by whoever waits for all the parts. */
                q->_reserved = true;
                q->_deadline_ns = UINT64_MAX;
                out->reserved = q;
            }
            break;
        } else if (fits(r, d, q)) {
            unlink_waiter(r, d, q);
            grant(r, d, q, now, out);
        } else {
            break;
        }
    }
}

/* Answers every watcher with the state as it is now. */
static void notify_watchers(struct res *r, struct res_domain *d, const struct res_now *now,
                            struct res_out *out)
{
    while (r->watchers) {
        struct res_req *q = r->watchers;
        unlink_watcher(r, d, q);
        res_i_answer_state(r, now, out, q, RES_OK_STATE);
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
        res_i_answer(out, q, RES_GONE);
        return;
    }
    int i = q->has_lease_id ? find_lease(r, q->lease_id) : -1;
    if (i >= 0 && (r->row.leases[i].held || !reserved_head(r))) {
        acquire_own(r, d, (uint32_t)i, q, now, out); /* a retry */
        return;
    }
    if (r->nheld && res_i_req_limit(q) != r->row.limit) {
        res_i_answer_limit(r, out, q);
        return;
    }
    bool now_fits = !r->waiters && fits(r, d, q);
    if (now_fits && !q->multi) {
        grant(r, d, q, now, out);
    } else if (q->wait_ms == 0 && !now_fits) {
        atomic_fetch_add(&d->conflicts, 1);
        res_i_answer_held(r, now, out, q);
    } else if (r->nwaiters >= d->lim.max_waiters) {
        res_i_answer(out, q, RES_ERR_TOO_MANY);
    } else {
        q->_deadline_ns = now->mono_ns + q->wait_ms * MX_NS_PER_MS; /* a part: until reserved */
        q->_queued_ns = now->mono_ns;
        q->_watcher = false;
        q->_reserved = false;
        q->status = RES_PENDING;
        if (!q->seq)
            q->seq = res_next_arrival(d);
        /* Behind every waiter that arrived before it: from the tail, since most come last. */
        struct res_req *after = r->waiters_tail;
        while (after && after->seq > q->seq)
            after = after->_prev;
        q->_prev = after;
        q->_next = after ? after->_next : r->waiters;
        if (q->_next)
            q->_next->_prev = q;
        else
            r->waiters_tail = q;
        if (after)
            after->_next = q;
        else
            r->waiters = q;
        r->nwaiters++;
        atomic_fetch_add(&d->waiters, 1);
        atomic_fetch_add(&d->waiters_kind[res_kind_of(res_i_req_limit(q), q->shared)], 1);
        if (!after) /* ahead of every waiter: it may fit where the one it passed did not */
            grant_next(r, d, now, out);
    }
}

static void renew(struct res *r, struct res_domain *d, struct res_req *q, const struct res_now *now,
                  struct res_out *out)
{
    int i = q->has_lease_id ? find_lease(r, q->lease_id) : -1;
    if (i < 0 || (!r->row.leases[i].held && reserved_head(r))) {
        /* Too late: another took its place, or reserved it. */
        atomic_fetch_add(&d->renewals_lost, 1);
        res_i_answer(out, q, RES_ERR_LOST);
        return;
    }
    atomic_fetch_add(&d->renewals, 1);
    extend(r, d, (uint32_t)i, q, q->has_ttl ? q->ttl_ms : r->row.leases[i].ttl_ms, now, out);
}

static void release(struct res *r, struct res_domain *d, struct res_req *q,
                    const struct res_now *now, struct res_out *out)
{
    int i = q->has_lease_id ? find_lease(r, q->lease_id) : -1;
    if (i < 0) {
        res_i_answer(out, q, RES_ERR_LOST);
        return;
    }
    if (r->row.leases[i].held)
        observe_held(r, d, &r->row.leases[i], now);
    change(r, d, EV_RELEASED, &r->row.leases[i], now);
    forget_lease(r, d, (uint32_t)i);
    atomic_fetch_add(&d->releases, 1);
    res_i_answer_state(r, now, out, q, RES_OK_RELEASED);
    grant_next(r, d, now, out);
}

/* Ends lease i by a break (an event each, held or remembered). */
static void break_one(struct res *r, struct res_domain *d, uint32_t i, const struct res_now *now)
{
    if (r->row.leases[i].held)
        observe_held(r, d, &r->row.leases[i], now);
    change(r, d, EV_BROKEN, &r->row.leases[i], now);
    forget_lease(r, d, i);
}

static void break_lease(struct res *r, struct res_domain *d, struct res_req *q,
                        const struct res_now *now, struct res_out *out)
{
    uint32_t broken = 0;
    if (q->has_lease_id) {
        int i = find_lease(r, q->lease_id);
        if (i >= 0) {
            broken = r->row.leases[i].held;
            break_one(r, d, (uint32_t)i, now);
        }
    } else {
        broken = r->nheld;
        while (r->row.nleases)
            break_one(r, d, 0, now);
    }
    atomic_fetch_add(&d->breaks, broken);
    res_i_answer_state(r, now, out, q, RES_OK_BROKEN);
    q->view.broken = broken > 0;
    grant_next(r, d, now, out);
}

static void get(struct res *r, struct res_domain *d, struct res_req *q, const struct res_now *now,
                struct res_out *out)
{
    if (!q->has_index || q->index != r->row.index || q->wait_ms == 0) {
        res_i_answer_state(r, now, out, q, RES_OK_STATE);
        return;
    }
    if (r->nwatchers >= d->lim.max_waiters) {
        res_i_answer(out, q, RES_ERR_TOO_MANY);
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

uint64_t res_next_arrival(struct res_domain *d)
{
    return atomic_fetch_add_explicit(&d->arrival, 1, memory_order_relaxed) + 1;
}

uint64_t res_reserve_indexes(struct res_domain *d, const char *const *names, const size_t *lens,
                             size_t n)
{
    if (d->events)
        return ev_reserve(d->events, names, lens, n);
    return atomic_fetch_add(&d->last_index, n) + 1;
}

void res_init(struct res *r, uint64_t index)
{
    memset(r, 0, sizeof *r);
    r->row.index = index;
    r->row.limit = 1;
}

uint64_t res_deadline_ns(int64_t deadline_ms, const struct res_now *now)
{
    /* The lease clock carries the deadline across a rest of the actor exactly (it is the
     * monotonic clock within one process), and across a restart on the wall clock: the
     * lease keeps the time it had left, not its full TTL. */
    int64_t left = deadline_ms - now->lease_ms;
    return now->mono_ns + (left > 0 ? (uint64_t)left * MX_NS_PER_MS : 0);
}

void res_count_held(const struct res *r, struct res_domain *d, int sign)
{
    for (uint32_t i = 0; i < r->row.nleases; i++)
        if (r->row.leases[i].held) {
            atomic_fetch_add(&d->held, sign);
            atomic_fetch_add(&d->held_kind[res_i_lease_kind(r, i)], sign);
        }
}

void res_count_stored(struct res_domain *d, uint32_t limit, uint32_t nheld, uint32_t nshared)
{
    atomic_fetch_add(&d->held, nheld);
    if (limit > 1) {
        atomic_fetch_add(&d->held_kind[RES_KIND_SEMAPHORE], nheld);
    } else {
        atomic_fetch_add(&d->held_kind[RES_KIND_SHARED], nshared);
        atomic_fetch_add(&d->held_kind[RES_KIND_EXCLUSIVE], nheld - nshared);
    }
}

void res_forget_changes(struct res *r)
{
    for (uint32_t i = 0; i < r->row.nleases; i++)
        r->slot[i].dirty = false;
    r->ndel = 0;
    r->changed = false;
}

void res_load(struct res *r, struct store_row *row, const struct res_now *now)
{
    store_row_clear(&r->row);
    free(r->slot);
    r->slot = NULL;
    r->cap = r->nheld = 0;
    r->row = *row;
    memset(row, 0, sizeof *row);
    if (!r->row.limit)
        r->row.limit = 1;
    r->ndel = 0;
    r->changed = false;
    if (!r->row.nleases)
        return;
    r->slot = calloc(r->row.nleases, sizeof *r->slot);
    if (!r->slot) {
        /* Without room for the deadlines the leases cannot be kept: read as free, the
         * store keeps them; the next turn that reloads tries again. */
        store_row_clear(&r->row);
        r->row.limit = 1;
        return;
    }
    r->cap = r->row.nleases;
    for (uint32_t i = 0; i < r->row.nleases; i++)
        if (r->row.leases[i].held) {
            r->slot[i].deadline_ns = res_deadline_ns(r->row.leases[i].deadline_ms, now);
            r->nheld++;
        }
}

void res_free(struct res *r)
{
    store_row_clear(&r->row);
    free(r->slot);
    free(r->del);
    r->slot = NULL;
    r->del = NULL;
    r->cap = r->ndel = r->delcap = r->nheld = 0;
}

struct store_rec *res_take_rec(struct res *r, const char *name, size_t len)
{
    if (r->ndel == UINT32_MAX)
        return NULL; /* which leases were forgotten is not known: as out of memory */
    if (r->row.nleases == 0) {
        struct store_rec *rec = store_rec_new(name, len, r->row.index, r->row.limit, 0, 0);
        if (!rec)
            return NULL;
        rec->drop = true; /* nothing left: the row goes */
        res_forget_changes(r);
        return rec;
    }
    uint32_t nput = 0;
    for (uint32_t i = 0; i < r->row.nleases; i++)
        nput += r->slot[i].dirty;
    struct store_rec *rec = store_rec_new(name, len, r->row.index, r->row.limit, nput, r->ndel);
    if (!rec)
        return NULL;
    uint32_t k = 0;
    for (uint32_t i = 0; i < r->row.nleases; i++)
        if (r->slot[i].dirty)
            store_lease_copy(&rec->put[k++], &r->row.leases[i]);
    if (r->ndel)
        memcpy(rec->del, r->del, r->ndel * sizeof r->del[0]);
    res_forget_changes(r);
    return rec;
}

void res_tick(struct res *r, struct res_domain *d, const struct res_now *now, struct res_out *out)
{
    uint64_t index = r->row.index;
    for (uint32_t i = 0; i < r->row.nleases; i++) {
        if (!r->row.leases[i].held || r->slot[i].deadline_ns > now->mono_ns)
            continue;
        set_held(r, d, i, false); /* kept: its holder may still renew it */
        r->slot[i].dirty = true;
        atomic_fetch_add(&d->expiries, 1);
        prom_hist_observe(&d->expiry_lateness, now->mono_ns - r->slot[i].deadline_ns);
        observe_held(r, d, &r->row.leases[i], now);
        change(r, d, EV_EXPIRED, &r->row.leases[i], now);
    }
    grant_next(r, d, now, out);
    bool timed_out = false;
    for (struct res_req *q = r->waiters, *next; q; q = next) {
        next = q->_next;
        if (q->_deadline_ns <= now->mono_ns) {
            unlink_waiter(r, d, q);
            atomic_fetch_add(&d->timeouts, 1);
            res_i_answer_held(r, now, out, q);
            timed_out = true;
        }
    }
    if (timed_out)
        grant_next(r, d, now, out); /* those behind may fit now */
    if (r->row.index != index) {
        notify_watchers(r, d, now, out);
        return;
    }
    for (struct res_req *q = r->watchers, *next; q; q = next) {
        next = q->_next;
        if (q->_deadline_ns <= now->mono_ns) {
            unlink_watcher(r, d, q);
            res_i_answer_state(r, now, out, q, RES_OK_STATE); /* unchanged */
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
        res_i_answer(out, q, RES_ERR_UNAVAILABLE);
        break;
    }
    /* Watchers see the state after the whole operation (a release and the grant it led
     * to), not the step between. A watch just added has the current index: not woken. */
    if (r->row.index != index)
        notify_watchers(r, d, now, out);
}

void res_drop(struct res *r, struct res_domain *d, uint64_t id, const struct res_now *now,
              struct res_out *out)
{
    for (struct res_req *q = r->waiters; q; q = q->_next)
        if (q->id == id) {
            bool first = q == r->waiters;
            unlink_waiter(r, d, q);
            res_i_answer(out, q, RES_GONE);
            if (first) {
                /* Those behind it may fit now (readers behind a writer that left). */
                uint64_t index = r->row.index;
                grant_next(r, d, now, out);
                if (r->row.index != index)
                    notify_watchers(r, d, now, out);
            }
            return;
        }
    for (struct res_req *q = r->watchers; q; q = q->_next)
        if (q->id == id) {
            unlink_watcher(r, d, q);
            res_i_answer(out, q, RES_GONE);
            return;
        }
}

/* Whether q is in the resource's queue. */
static bool queued(const struct res *r, const struct res_req *q)
{
    for (const struct res_req *w = r->waiters; w; w = w->_next)
        if (w == q)
            return true;
    return false;
}

void res_multi_grant(struct res *r, struct res_domain *d, struct res_req *q,
                     const struct res_now *now, struct res_out *out)
{
    uint64_t index = r->row.index;
    r->next_index = q->part_index;
    if (q->part_own) {
        /* Answered with its own lease while the set waited: renewed again now, if that
         * lease is still the resource's. */
        int i = find_lease(r, q->lease_id);
        if (i >= 0 && (r->row.leases[i].held || !reserved_head(r)))
            acquire_own(r, d, (uint32_t)i, q, now, out);
        else
            unavailable(out, q, "a lease of the set was lost while the set waited", 1);
    } else if (q != reserved_head(r) || !fits(r, d, q)) {
        /* Cannot be: a part is granted only where it holds the head's place, and nothing
         * takes a place reserved. Should it be, the set fails (and the actors read their
         * rows again) rather than grant a lease that does not fit, and no queue keeps the
         * part, whose request is freed once answered. */
        if (queued(r, q))
            unlink_waiter(r, d, q);
        q->_reserved = false;
        unavailable(out, q, "the place of a part of the set was not reserved", 1);
        mx_error("a part of a set was not reserved at its commit", "resource=%.*s",
                 (int)r->name_len, r->name);
    } else {
        unlink_waiter(r, d, q);
        q->_reserved = false;
        grant(r, d, q, now, out);
    }
    if (r->next_index && d->events) /* not granted: the index is never shown */
        ev_durable(d->events, r->name, r->name_len, r->next_index, r->next_index, false);
    r->next_index = 0;
    grant_next(r, d, now, out); /* a semaphore may have room for those behind it */
    if (r->row.index != index)
        notify_watchers(r, d, now, out);
}

void res_cancel_all(struct res *r, struct res_domain *d, const char *reason, struct res_out *out)
{
    while (r->waiters) {
        struct res_req *q = r->waiters;
        unlink_waiter(r, d, q);
        q->reason = reason;
        res_i_answer(out, q, RES_ERR_UNAVAILABLE);
    }
    while (r->watchers) {
        struct res_req *q = r->watchers;
        unlink_watcher(r, d, q);
        q->reason = reason;
        res_i_answer(out, q, RES_ERR_UNAVAILABLE);
    }
}

uint64_t res_lease_deadline(const struct res *r)
{
    uint64_t next = UINT64_MAX;
    for (uint32_t i = 0; i < r->row.nleases; i++)
        if (r->row.leases[i].held && r->slot[i].deadline_ns < next)
            next = r->slot[i].deadline_ns;
    return next;
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
