/*
 * The lease state machine with a fake clock: every behaviour docs/api.md lists for acquire,
 * renew, release, break, expiry, waiters, watches, metadata and fencing tokens.
 */
#include "tests/unit/testutil.h"

#include <string.h>

#include "actors/resource.h"
#include "common/clock.h"

#define MS MX_NS_PER_MS

static struct res_domain D;
static struct res_now NOW;
static struct res_out OUT;

static void setup_domain(void)
{
    memset(&D, 0, sizeof D);
    prom_hist_init(&D.expiry_lateness, prom_latency_bounds, prom_latency_nbounds, 1e9);
    D.lim = (struct res_limits){
        .min_ttl_ms = 1000, .max_ttl_ms = 3600000, .max_wait_ms = 300000, .max_waiters = 3};
    atomic_store(&D.token_ceiling, UINT64_MAX);
    NOW =
        (struct res_now){.mono_ns = 1000 * MS, .wall_ms = 1700000000000, .lease_ms = 1700000000000};
    memset(&OUT, 0, sizeof OUT);
}

static void advance(uint64_t ms)
{
    NOW.mono_ns += ms * MS;
    NOW.wall_ms += (int64_t)ms;
    NOW.lease_ms += (int64_t)ms;
}

static bool gone_flag[64];
static bool alive_fn(struct res_req *q)
{
    return !gone_flag[q->id];
}

static struct res_req *req(uint8_t op)
{
    static uint64_t next_id = 1;
    struct res_req *q = calloc(1, sizeof *q);
    q->op = op;
    q->ttl_ms = 10000;
    q->id = next_id++ % 64;
    q->alive = alive_fn;
    return q;
}

static struct res_req *acquire_req(const char *owner, uint64_t ttl_ms, uint64_t wait_ms)
{
    struct res_req *q = req(RES_ACQUIRE);
    q->owner = mx_str_new(owner, strlen(owner));
    q->ttl_ms = ttl_ms;
    q->wait_ms = wait_ms;
    return q;
}

static struct res_req *with_id(struct res_req *q, const uint8_t id[16])
{
    memcpy(q->lease_id, id, 16);
    q->has_lease_id = true;
    return q;
}

static void done(struct res_req *q)
{
    mx_str_unref(q->owner);
    mx_str_unref(q->metadata);
    res_view_clear(&q->view);
    free(q);
}

/* Pops the next answer; it must be `q` with `status`. */
static void expect(struct res_req *q, enum res_status status)
{
    struct res_req *a = res_out_pop(&OUT);
    assert_ptr_equal(a, q);
    assert_int_equal(a->status, status);
}

static void expect_none(void)
{
    assert_null(res_out_pop(&OUT));
}

static void handle(struct res *r, struct res_req *q)
{
    res_handle(r, &D, q, &NOW, &OUT);
}

static void tick(struct res *r)
{
    res_tick(r, &D, &NOW, &OUT);
}

/* Acquires for `owner`, expecting a grant; returns the request (answered). */
static struct res_req *grant(struct res *r, const char *owner, uint64_t ttl_ms)
{
    struct res_req *q = acquire_req(owner, ttl_ms, 0);
    handle(r, q);
    expect(q, RES_OK_LEASE);
    expect_none();
    return q;
}

static void grant_on_free_then_conflict(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *a = grant(&r, "host-a", 5000);
    assert_true(a->view.held);
    assert_int_equal(a->view.token, 1);
    assert_int_equal(a->view.ttl_ms, 5000);
    assert_int_equal(a->view.expires_in_ms, 5000);
    assert_int_equal(a->view.index, 1);
    assert_int_equal(a->view.acquired_at_ms, NOW.wall_ms);
    assert_string_equal(a->view.owner->s, "host-a");
    assert_true(r.changed);

    advance(1200);
    struct res_req *b = acquire_req("host-b", 5000, 0);
    handle(&r, b);
    expect(b, RES_ERR_HELD);
    assert_string_equal(b->view.owner->s, "host-a"); /* the holder */
    assert_int_equal(b->view.token, 1);
    assert_int_equal(b->view.expires_in_ms, 3800);
    assert_int_equal(atomic_load(&D.conflicts), 1);
    done(a);
    done(b);
    res_free(&r);
}

static void reacquire_with_same_lease_id_is_idempotent(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    uint8_t id[16] = {1, 2, 3};
    struct res_req *a = with_id(acquire_req("a", 5000, 0), id);
    a->metadata = mx_str_new("{\"k\":1}", 7);
    a->has_metadata = true;
    handle(&r, a);
    expect(a, RES_OK_LEASE);
    assert_memory_equal(a->view.lease_id, id, 16);

    advance(3000);
    struct res_req *again = with_id(acquire_req("a", 8000, 0), id);
    handle(&r, again);
    expect(again, RES_OK_LEASE);
    assert_int_equal(again->view.token, a->view.token);        /* the same lease */
    assert_int_equal(again->view.expires_in_ms, 8000);         /* ttl from now */
    assert_string_equal(again->view.metadata->s, "{\"k\":1}"); /* kept when not given */
    assert_int_equal(again->view.acquired_at_ms, a->view.acquired_at_ms);
    assert_int_equal(again->view.renewed_at_ms, NOW.wall_ms);
    assert_true(again->view.index > a->view.index);

    /* After it expired, with nothing granted since, the retry still gets it back. */
    advance(8000);
    tick(&r);
    assert_int_equal(r.nheld, 0);
    struct res_req *late = with_id(acquire_req("a", 5000, 0), id);
    handle(&r, late);
    expect(late, RES_OK_LEASE);
    assert_int_equal(late->view.token, a->view.token);
    assert_int_equal(atomic_load(&D.grants), 1);
    done(a);
    done(again);
    done(late);
    res_free(&r);
}

static void waiters_are_granted_in_fifo_order(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    struct res_req *w[3];
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        w[i] = acquire_req(name, 5000, 60000);
        handle(&r, w[i]);
        expect_none(); /* queued */
    }
    assert_int_equal(r.nwaiters, 3);
    struct res_req *over = acquire_req("over", 5000, 60000);
    handle(&r, over);
    expect(over, RES_ERR_TOO_MANY); /* max_waiters is 3 */

    uint64_t last_token = h->view.token;
    struct res_req *cur = h;
    for (int i = 0; i < 3; i++) {
        struct res_req *rel = with_id(req(RES_RELEASE), cur->view.lease_id);
        handle(&r, rel);
        expect(rel, RES_OK_RELEASED);
        expect(w[i], RES_OK_LEASE); /* the next waiter, at once */
        char want[8];
        snprintf(want, sizeof want, "w%d", i);
        assert_string_equal(w[i]->view.owner->s, want);
        assert_true(w[i]->view.token > last_token);
        last_token = w[i]->view.token;
        expect_none();
        done(rel);
        cur = w[i];
    }
    assert_int_equal(r.nwaiters, 0);
    done(h);
    done(over);
    for (int i = 0; i < 3; i++)
        done(w[i]);
    res_free(&r);
}

/* The queue is in arrival order: a request that took its place before it came (as one
 * about several resources does) goes ahead of those that arrived after it, and behind
 * those that arrived before; one ahead of every waiter is granted at once if it fits. */
static void waiters_are_queued_in_arrival_order(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    struct res_req *a = acquire_req("a", 5000, 60000);
    uint64_t early = res_next_arrival(&D); /* taken before a and c queue */
    handle(&r, a);
    struct res_req *c = acquire_req("c", 5000, 60000);
    handle(&r, c);
    struct res_req *b = acquire_req("b", 5000, 60000);
    b->seq = early;
    handle(&r, b);
    expect_none();
    assert_int_equal(r.nwaiters, 3);
    assert_ptr_equal(r.waiters, b);
    assert_ptr_equal(r.waiters->_next, a);
    assert_ptr_equal(r.waiters_tail, c);
    struct res_req *cur = h, *order[] = {b, a, c};
    for (int i = 0; i < 3; i++) {
        struct res_req *rel = with_id(req(RES_RELEASE), cur->view.lease_id);
        handle(&r, rel);
        expect(rel, RES_OK_RELEASED);
        expect(order[i], RES_OK_LEASE);
        expect_none();
        done(rel);
        cur = order[i];
    }
    done(h);
    done(a);
    done(b);
    done(c);
    res_free(&r);

    /* Readers hold, a writer waits: a reader that arrived before the writer is granted at
     * once, one that arrived after it waits behind it. */
    res_init(&r, 0);
    struct res_req *r1 = acquire_req("r1", 5000, 0);
    r1->shared = true;
    handle(&r, r1);
    expect(r1, RES_OK_LEASE);
    uint64_t before_writer = res_next_arrival(&D);
    struct res_req *w = acquire_req("w", 5000, 60000);
    handle(&r, w);
    expect_none();
    struct res_req *late = acquire_req("late", 5000, 60000);
    late->shared = true;
    handle(&r, late);
    expect_none();
    struct res_req *r2 = acquire_req("r2", 5000, 60000);
    r2->shared = true;
    r2->seq = before_writer;
    handle(&r, r2);
    expect(r2, RES_OK_LEASE);
    expect_none();
    assert_int_equal(r.nwaiters, 2);
    res_cancel_all(&r, &D, NULL, &OUT);
    expect(w, RES_ERR_UNAVAILABLE);
    expect(late, RES_ERR_UNAVAILABLE);
    done(r1);
    done(r2);
    done(w);
    done(late);
    res_free(&r);
}

/* A part of a request about several resources: reserved, not granted, when it heads the
 * queue and fits; granted by res_multi_grant(); while reserved, nobody behind it is granted
 * and a remembered lease cannot come back into its place. */
static struct res_req *part_req(const char *owner, uint64_t wait_ms)
{
    struct res_req *q = acquire_req(owner, 5000, wait_ms);
    q->multi = true;
    return q;
}

static void a_part_is_reserved_then_granted(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    struct res_req *m = part_req("multi", 60000);
    handle(&r, m);
    expect_none();
    assert_null(OUT.reserved); /* held: it waits */
    struct res_req *s = acquire_req("single", 5000, 300000);
    handle(&r, s);
    expect_none();

    /* The holder's lease runs out: the part reserves the place, and is not answered. */
    advance(5000);
    tick(&r);
    expect_none();
    assert_ptr_equal(OUT.reserved, m);
    OUT.reserved = NULL;
    tick(&r);
    assert_null(OUT.reserved); /* reserved once */
    /* The holder comes back too late: its place is reserved. */
    struct res_req *late = with_id(req(RES_RENEW), h->view.lease_id);
    handle(&r, late);
    expect(late, RES_ERR_LOST);
    struct res_req *again = with_id(acquire_req("holder", 5000, 0), h->view.lease_id);
    handle(&r, again);
    expect(again, RES_ERR_HELD); /* not its lease back: a new acquire, behind the part */
    expect_none();

    advance(120000); /* past its wait_ms: reserved, it does not time out */
    tick(&r);
    expect_none();
    m->part_token = res_reserve_tokens(&D, 1);
    res_multi_grant(&r, &D, m, &NOW, &OUT);
    expect(m, RES_OK_LEASE);
    assert_true(m->view.token > h->view.token);
    expect_none(); /* the single waits behind the part's lease */
    assert_int_equal(r.nwaiters, 1);
    res_cancel_all(&r, &D, NULL, &OUT);
    expect(s, RES_ERR_UNAVAILABLE);
    done(h);
    done(m);
    done(s);
    done(late);
    done(again);
    res_free(&r);

    /* wait_ms 0: reserved at once on a free resource, and held there until granted or
     * dropped, however long the others take; refused at once on a held one. */
    res_init(&r, 0);
    struct res_req *z = part_req("z", 0);
    handle(&r, z);
    expect_none();
    assert_ptr_equal(OUT.reserved, z);
    OUT.reserved = NULL;
    struct res_req *behind = acquire_req("behind", 5000, 60000);
    handle(&r, behind);
    expect_none();
    advance(30000);
    tick(&r);
    expect_none();
    res_drop(&r, &D, z->id, &NOW, &OUT);
    expect(z, RES_GONE);
    expect(behind, RES_OK_LEASE); /* the place is free again */
    struct res_req *z2 = part_req("z2", 0);
    handle(&r, z2);
    expect(z2, RES_ERR_HELD);
    assert_null(OUT.reserved);
    done(z);
    done(z2);
    done(behind);
    res_free(&r);
}

/* A part's grant checks that it holds the head's place and fits, and takes its token
 * from the set's block or none: refused otherwise, and left in no queue (its request is
 * freed once answered). */
static void a_part_granted_where_it_was_not_reserved_is_refused(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    struct res_req *m = part_req("multi", 60000);
    handle(&r, m);
    expect_none();
    assert_int_equal(r.nwaiters, 1);
    m->part_token = res_reserve_tokens(&D, 1);
    res_multi_grant(&r, &D, m, &NOW, &OUT); /* queued, never reserved: the place is h's */
    expect(m, RES_ERR_UNAVAILABLE);
    expect_none();
    assert_int_equal(r.nwaiters, 0);
    assert_null(r.waiters);
    assert_int_equal(r.nheld, 1);

    /* Reserved, but no token could be taken for the set: refused, never granted one of
     * its own out of the set's order. */
    struct res_req *rel = with_id(req(RES_RELEASE), h->view.lease_id);
    struct res_req *m2 = part_req("multi2", 60000);
    handle(&r, m2);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    assert_ptr_equal(OUT.reserved, m2);
    OUT.reserved = NULL;
    m2->part_token = 0;
    res_multi_grant(&r, &D, m2, &NOW, &OUT);
    expect(m2, RES_ERR_UNAVAILABLE);
    expect_none();
    assert_int_equal(r.nheld, 0);
    assert_int_equal(r.nwaiters, 0);
    done(h);
    done(m);
    done(m2);
    done(rel);
    res_free(&r);
}

static void waiter_times_out_with_lease_held(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 10000);
    struct res_req *w = acquire_req("w", 5000, 2000);
    handle(&r, w);
    expect_none();
    assert_int_equal(res_next_deadline(&r), NOW.mono_ns + 2000 * MS);
    advance(1999);
    tick(&r);
    expect_none();
    advance(1);
    tick(&r);
    expect(w, RES_ERR_HELD);
    assert_string_equal(w->view.owner->s, "holder");
    assert_int_equal(w->view.expires_in_ms, 8000);
    done(h);
    done(w);
    res_free(&r);
}

static void expiry_at_deadline_never_before_and_grants_waiter(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    struct res_req *w = acquire_req("w", 5000, 60000);
    handle(&r, w);
    expect_none();
    r.changed = false;
    NOW.mono_ns += 5000 * MS - 1;
    tick(&r);
    expect_none();
    assert_true(r.nheld > 0);
    assert_false(r.changed);
    NOW.mono_ns += 1;
    tick(&r);
    expect(w, RES_OK_LEASE); /* at once, in the same tick as the expiry */
    assert_true(r.changed);
    assert_int_equal(atomic_load(&D.expiries), 1);
    assert_int_equal(atomic_load(&D.expiry_lateness.counts[0]), 1); /* on time: 0 ns late */
    assert_int_equal(atomic_load(&D.expiry_lateness.sum), 0);
    assert_int_equal(w->view.token, 2);
    assert_int_equal(atomic_load(&D.held), 1);
    done(h);
    done(w);
    res_free(&r);
}

static void waiter_gone_is_never_granted(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    struct res_req *w1 = acquire_req("w1", 5000, 60000);
    struct res_req *w2 = acquire_req("w2", 5000, 60000);
    struct res_req *w3 = acquire_req("w3", 5000, 60000);
    handle(&r, w1);
    handle(&r, w2);
    handle(&r, w3);
    /* w1's client hung up and was reported; w2's hung up and was not reported yet. */
    res_drop(&r, &D, w1->id, &NOW, &OUT);
    expect(w1, RES_GONE);
    gone_flag[w2->id] = true;
    struct res_req *rel = with_id(req(RES_RELEASE), h->view.lease_id);
    handle(&r, rel);
    expect(w2, RES_GONE); /* found gone at the head of the queue, never granted */
    expect(rel, RES_OK_RELEASED);
    expect(w3, RES_OK_LEASE);
    gone_flag[w2->id] = false;
    res_drop(&r, &D, 9999, &NOW, &OUT); /* unknown: nothing */
    expect_none();
    done(h);
    done(rel);
    done(w1);
    done(w2);
    done(w3);
    res_free(&r);
}

static void a_gone_client_is_not_granted_even_at_once(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *q = acquire_req("gone", 5000, 0);
    gone_flag[q->id] = true;
    handle(&r, q);
    expect(q, RES_GONE);
    assert_int_equal(r.row.nleases, 0);
    assert_false(r.changed);
    gone_flag[q->id] = false;
    done(q);
    res_free(&r);
}

/* The expiry's lateness goes into the histogram: 30 ms late is in the (25 ms, 50 ms]
 * bucket, and the sum is exact. */
static void expiry_lateness_is_measured(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    NOW.mono_ns += 5030 * MS;
    tick(&r);
    assert_int_equal(r.nheld, 0);
    for (int i = 0; i <= prom_latency_nbounds; i++) {
        bool here = i < prom_latency_nbounds && prom_latency_bounds[i] == 0.05;
        assert_int_equal(atomic_load(&D.expiry_lateness.counts[i]), here ? 1 : 0);
    }
    assert_int_equal(atomic_load(&D.expiry_lateness.sum), 30 * MS);
    done(h);
    res_free(&r);
}

static void renew_keeps_token_and_works_after_expiry(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    advance(4000);
    struct res_req *rn = with_id(req(RES_RENEW), h->view.lease_id);
    handle(&r, rn); /* no ttl_ms: the lease's own */
    expect(rn, RES_OK_LEASE);
    assert_int_equal(rn->view.token, h->view.token);
    assert_int_equal(rn->view.ttl_ms, 5000);
    assert_int_equal(rn->view.expires_in_ms, 5000);

    advance(6000);
    tick(&r);
    assert_int_equal(r.nheld, 0);
    struct res_req *late = with_id(req(RES_RENEW), h->view.lease_id);
    late->ttl_ms = 7000;
    late->has_ttl = true;
    late->metadata = mx_str_new("{\"a\":2}", 7);
    late->has_metadata = true;
    handle(&r, late);
    expect(late, RES_OK_LEASE); /* expired, nothing granted since: renewed */
    assert_int_equal(late->view.token, h->view.token);
    assert_int_equal(late->view.ttl_ms, 7000);
    assert_string_equal(late->view.metadata->s, "{\"a\":2}");
    assert_true(r.nheld > 0);

    uint8_t other[16] = {9};
    struct res_req *wrong = with_id(req(RES_RENEW), other);
    handle(&r, wrong);
    expect(wrong, RES_ERR_LOST);
    done(h);
    done(rn);
    done(late);
    done(wrong);
    res_free(&r);
}

static void renew_after_another_grant_is_lost(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *a = grant(&r, "a", 5000);
    advance(5000);
    struct res_req *b = grant(&r, "b", 5000); /* a expired; b got it */
    struct res_req *rn = with_id(req(RES_RENEW), a->view.lease_id);
    handle(&r, rn);
    expect(rn, RES_ERR_LOST);
    struct res_req *rel = with_id(req(RES_RELEASE), a->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_ERR_LOST);
    assert_true(r.nheld > 0); /* b keeps it */
    assert_memory_equal(r.row.leases[0].lease_id, b->view.lease_id, 16);
    done(a);
    done(b);
    done(rn);
    done(rel);
    res_free(&r);
}

static void release_after_expiry_and_twice(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *a = grant(&r, "a", 5000);
    advance(6000);
    struct res_req *rel = with_id(req(RES_RELEASE), a->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    assert_int_equal(r.row.nleases, 0);
    struct res_req *again = with_id(req(RES_RELEASE), a->view.lease_id);
    handle(&r, again);
    expect(again, RES_ERR_LOST);
    struct res_req *rn = with_id(req(RES_RENEW), a->view.lease_id);
    handle(&r, rn);
    expect(rn, RES_ERR_LOST); /* released leases do not come back */
    done(a);
    done(rel);
    done(again);
    done(rn);
    res_free(&r);
}

static void break_ends_any_lease_and_grants_next(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *b0 = req(RES_BREAK);
    handle(&r, b0);
    expect(b0, RES_OK_BROKEN);
    assert_false(b0->view.broken); /* nothing to break */
    struct res_req *h = grant(&r, "holder", 5000);
    struct res_req *w = acquire_req("w", 5000, 60000);
    handle(&r, w);
    struct res_req *b1 = req(RES_BREAK);
    handle(&r, b1);
    expect(b1, RES_OK_BROKEN);
    assert_true(b1->view.broken);
    expect(w, RES_OK_LEASE);
    struct res_req *rn = with_id(req(RES_RENEW), h->view.lease_id);
    handle(&r, rn);
    expect(rn, RES_ERR_LOST);
    assert_int_equal(atomic_load(&D.breaks), 1);
    done(b0);
    done(b1);
    done(h);
    done(w);
    done(rn);
    res_free(&r);
}

static void watch_waits_for_a_change_or_its_deadline(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 7);
    struct res_req *g0 = req(RES_GET);
    handle(&r, g0);
    expect(g0, RES_OK_STATE);
    assert_false(g0->view.held);
    assert_int_equal(g0->view.index, 7);

    /* A different index answers at once. */
    struct res_req *g1 = req(RES_GET);
    g1->has_index = true;
    g1->index = 3;
    g1->wait_ms = 5000;
    handle(&r, g1);
    expect(g1, RES_OK_STATE);

    /* The current index waits; a grant wakes it with the new state. */
    struct res_req *wt = req(RES_GET);
    wt->has_index = true;
    wt->index = 7;
    wt->wait_ms = 5000;
    handle(&r, wt);
    expect_none();
    assert_int_equal(r.nwatchers, 1);
    assert_false(res_idle(&r));
    struct res_req *a = acquire_req("a", 5000, 0);
    handle(&r, a);
    expect(a, RES_OK_LEASE);
    expect(wt, RES_OK_STATE);
    assert_true(wt->view.held);
    assert_int_equal(wt->view.index, a->view.index);
    assert_true(wt->view.index > 7);

    /* Watching the new index with no change: answered unchanged at its deadline. */
    struct res_req *w2 = req(RES_GET);
    w2->has_index = true;
    w2->index = a->view.index;
    w2->wait_ms = 3000;
    handle(&r, w2);
    expect_none();
    advance(2999);
    tick(&r);
    expect_none();
    advance(1);
    tick(&r);
    expect(w2, RES_OK_STATE);
    assert_int_equal(w2->view.index, a->view.index);
    done(g0);
    done(g1);
    done(wt);
    done(a);
    done(w2);
    res_free(&r);
}

static void watchers_see_the_state_after_release_and_grant(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "holder", 5000);
    struct res_req *w = acquire_req("next", 5000, 60000);
    handle(&r, w);
    struct res_req *wt = req(RES_GET);
    wt->has_index = true;
    wt->index = r.row.index;
    wt->wait_ms = 60000;
    handle(&r, wt);
    expect_none();
    struct res_req *rel = with_id(req(RES_RELEASE), h->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    expect(w, RES_OK_LEASE);
    expect(wt, RES_OK_STATE);
    assert_true(wt->view.held); /* not the free moment in between */
    assert_string_equal(wt->view.owner->s, "next");
    res_drop(&r, &D, wt->id, &NOW, &OUT); /* answered already: nothing */
    expect_none();
    done(h);
    done(w);
    done(wt);
    done(rel);
    res_free(&r);
}

static void watcher_can_be_dropped_and_cancelled(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *wt = req(RES_GET);
    wt->has_index = true;
    wt->wait_ms = 60000;
    handle(&r, wt);
    res_drop(&r, &D, wt->id, &NOW, &OUT);
    expect(wt, RES_GONE);
    assert_true(res_idle(&r));

    struct res_req *h = grant(&r, "h", 5000);
    struct res_req *w = acquire_req("w", 5000, 60000);
    struct res_req *wt2 = req(RES_GET);
    wt2->has_index = true;
    wt2->index = r.row.index;
    wt2->wait_ms = 60000;
    handle(&r, w);
    handle(&r, wt2);
    res_cancel_all(&r, &D, "shutting down", &OUT);
    expect(w, RES_ERR_UNAVAILABLE);
    expect(wt2, RES_ERR_UNAVAILABLE);
    assert_string_equal(w->reason, "shutting down");
    assert_int_equal(atomic_load(&D.waiters), 0);
    assert_int_equal(atomic_load(&D.watchers), 0);
    done(wt);
    done(h);
    done(w);
    done(wt2);
    res_free(&r);
}

static void fencing_tokens_increase_across_resources(void **st)
{
    (void)st;
    setup_domain();
    atomic_store(&D.last_token, 41); /* as restored from the store */
    struct res r1, r2;
    res_init(&r1, 0);
    res_init(&r2, 0);
    uint64_t last = 41;
    for (int i = 0; i < 10; i++) {
        struct res *r = i % 2 ? &r2 : &r1;
        struct res_req *g = grant(r, "x", 1000);
        assert_true(g->view.token > last);
        last = g->view.token;
        struct res_req *rel = with_id(req(RES_RELEASE), g->view.lease_id);
        handle(r, rel);
        expect(rel, RES_OK_RELEASED);
        done(g);
        done(rel);
    }
    assert_int_equal(last, 51);
    res_free(&r1);
    res_free(&r2);
}

static void load_keeps_remaining_wall_time(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct store_row row = {.index = 9, .limit = 1};
    struct store_lease l = {.held = true,
                            .token = 5,
                            .ttl_ms = 10000,
                            .acquired_at_ms = NOW.wall_ms - 4000,
                            .renewed_at_ms = NOW.wall_ms - 4000,
                            .deadline_ms = NOW.lease_ms + 6000};
    l.owner = mx_str_new("o", 1);
    assert_int_equal(store_row_add(&row, &l), 0);
    store_lease_clear(&l);
    res_load(&r, &row, &NOW);
    atomic_fetch_add(&D.held, 1);
    struct res_req *g = req(RES_GET);
    handle(&r, g);
    expect(g, RES_OK_STATE);
    assert_true(g->view.held);
    assert_int_equal(g->view.expires_in_ms, 6000); /* not its full TTL */
    assert_int_equal(g->view.index, 9);

    /* A row whose deadline passed while the server was down: free at the first tick,
     * with a new index. */
    struct res r2;
    res_init(&r2, 0);
    struct store_row old = {.index = 9, .limit = 1};
    struct store_lease ol = {
        .held = true, .token = 5, .ttl_ms = 10000, .deadline_ms = NOW.lease_ms - 1};
    ol.owner = mx_str_new("o", 1);
    assert_int_equal(store_row_add(&old, &ol), 0);
    store_lease_clear(&ol);
    res_load(&r2, &old, &NOW);
    atomic_fetch_add(&D.held, 1);
    atomic_store(&D.last_index, 20);
    tick(&r2);
    assert_int_equal(r2.nheld, 0);
    assert_int_equal(r2.row.index, 21);
    assert_true(r2.changed);
    done(g);
    res_free(&r);
    res_free(&r2);
}

static void next_deadline_and_idle(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    assert_int_equal(res_next_deadline(&r), UINT64_MAX);
    assert_int_equal(res_lease_deadline(&r), UINT64_MAX);
    assert_true(res_idle(&r));
    /* A lease alone: idle (it needs only its expiry), with the lease's deadline. */
    struct res_req *h = grant(&r, "h", 8000);
    assert_true(res_idle(&r));
    assert_int_equal(res_lease_deadline(&r), NOW.mono_ns + 8000 * MS);
    assert_int_equal(res_queue_deadline(&r), UINT64_MAX);
    assert_int_equal(res_next_deadline(&r), NOW.mono_ns + 8000 * MS);
    /* A waiter: busy, and its deadline comes first. */
    struct res_req *w = acquire_req("w", 5000, 3000);
    handle(&r, w);
    assert_false(res_idle(&r));
    assert_int_equal(res_queue_deadline(&r), NOW.mono_ns + 3000 * MS);
    assert_int_equal(res_next_deadline(&r), NOW.mono_ns + 3000 * MS);
    advance(3000);
    tick(&r);
    expect(w, RES_ERR_HELD);
    assert_true(res_idle(&r));
    advance(5000);
    tick(&r); /* expired; the latest lease is remembered but nothing is held */
    assert_true(res_idle(&r));
    assert_int_equal(res_next_deadline(&r), UINT64_MAX);
    assert_int_equal(atomic_load(&D.held), 0);
    done(h);
    done(w);
    res_free(&r);
}

static void no_token_above_the_reserved_ceiling(void **st)
{
    (void)st;
    setup_domain();
    atomic_store(&D.last_token, 10);
    atomic_store(&D.token_ceiling, 12);
    struct res r;
    res_init(&r, 0);
    struct res_req *a = grant(&r, "a", 5000);
    struct res_req *rel = with_id(req(RES_RELEASE), a->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    struct res_req *b = grant(&r, "b", 5000);
    assert_int_equal(b->view.token, 12);
    struct res_req *rel2 = with_id(req(RES_RELEASE), b->view.lease_id);
    handle(&r, rel2);
    expect(rel2, RES_OK_RELEASED);
    struct res_req *c = acquire_req("c", 5000, 0);
    handle(&r, c);
    expect(c, RES_ERR_UNAVAILABLE); /* 13 is not reserved yet */
    assert_non_null(strstr(c->reason, "fencing tokens"));
    assert_int_equal(atomic_load(&D.last_token), 12);
    atomic_store(&D.token_ceiling, 100); /* the mirror reserved more */
    struct res_req *d = grant(&r, "d", 5000);
    assert_int_equal(d->view.token, 13);
    done(a);
    done(b);
    done(c);
    done(d);
    done(rel);
    done(rel2);
    res_free(&r);
}

/* A partition of a partitioned group hands out tokens seq << 8 | partition: every one its
 * own partition's residue, increasing, under the ceiling like any other. */
static void a_partition_hands_out_its_own_tokens(void **st)
{
    (void)st;
    setup_domain();
    D.token_stride = 256;
    D.token_offset = 7;
    atomic_store(&D.last_token, 300); /* a ceiling of an earlier term, of any residue */
    atomic_store(&D.token_ceiling, 1000);
    struct res r;
    res_init(&r, 0);
    uint64_t want[] = {512 + 7, 768 + 7};
    for (int i = 0; i < 2; i++) {
        struct res_req *a = grant(&r, "a", 5000);
        assert_int_equal(a->view.token, want[i]);
        struct res_req *rel = with_id(req(RES_RELEASE), a->view.lease_id);
        handle(&r, rel);
        expect(rel, RES_OK_RELEASED);
        done(a);
        done(rel);
    }
    struct res_req *c = acquire_req("c", 5000, 0);
    handle(&r, c);
    expect(c, RES_ERR_UNAVAILABLE); /* 1024 + 7 is above the ceiling */
    done(c);
    D.token_stride = 0;
    D.token_offset = 0;
    res_free(&r);
}

/* A set's tokens are taken as one block, in order, of the domain's stride; a block that
 * does not fit under the ceiling takes nothing. */
static void a_set_reserves_its_tokens_in_one_block(void **st)
{
    (void)st;
    setup_domain();
    atomic_store(&D.last_token, 10);
    atomic_store(&D.token_ceiling, 14);
    assert_int_equal(res_reserve_tokens(&D, 3), 11);
    assert_int_equal(atomic_load(&D.last_token), 13);
    assert_int_equal(res_reserve_tokens(&D, 2), 0); /* 14 and 15: 15 is not reserved */
    assert_int_equal(atomic_load(&D.last_token), 13);
    assert_int_equal(res_reserve_tokens(&D, 1), 14);
    D.token_stride = 256;
    D.token_offset = 7;
    atomic_store(&D.last_token, 300);
    atomic_store(&D.token_ceiling, 1000);
    assert_int_equal(res_reserve_tokens(&D, 2), 512 + 7); /* and 768 + 7 */
    assert_int_equal(atomic_load(&D.last_token), 768 + 7);
    assert_int_equal(res_reserve_tokens(&D, 1), 0); /* 1024 + 7 is above the ceiling */
    assert_int_equal(res_reserve_tokens(&D, 0), 0);
    D.token_stride = 0;
    D.token_offset = 0;
}

/* After a restore from a mirror that may lag, the grace refuses grants, renewals and
 * re-acquires alike: the mirror may miss a break and a re-grant, so the lease a holder
 * presents may be another's by now. */
static void restore_grace_refuses_grants_and_renewals(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *a = grant(&r, "a", 60000); /* held before the restore */
    atomic_store(&D.grace_until_ns, NOW.mono_ns + 2500 * MS);
    struct res_req *b = acquire_req("b", 5000, 0);
    struct res r2;
    res_init(&r2, 0);
    handle(&r2, b);
    expect(b, RES_ERR_UNAVAILABLE);
    assert_int_equal(b->retry_after_s, 3);
    struct res_req *rn = with_id(req(RES_RENEW), a->view.lease_id);
    handle(&r, rn);
    expect(rn, RES_ERR_UNAVAILABLE); /* nor renewed */
    assert_int_equal(rn->retry_after_s, 3);
    struct res_req *again = with_id(acquire_req("a", 60000, 0), a->view.lease_id);
    handle(&r, again);
    expect(again, RES_ERR_UNAVAILABLE);                     /* nor taken again with its id */
    assert_int_equal(r.row.leases[0].token, a->view.token); /* the lease is as it was */
    advance(2500);
    struct res_req *b2 = acquire_req("b", 5000, 0);
    handle(&r2, b2);
    expect(b2, RES_OK_LEASE);
    done(a);
    done(b);
    done(rn);
    done(again);
    done(b2);
    res_free(&r);
    res_free(&r2);
}

static struct res_req *sem_req(const char *owner, uint32_t limit, bool shared, uint64_t wait_ms)
{
    struct res_req *q = acquire_req(owner, 10000, wait_ms);
    q->limit = limit;
    q->shared = shared;
    return q;
}

static void done_all(struct res_req **all, size_t n)
{
    for (size_t i = 0; i < n; i++)
        done(all[i]);
}

static void a_semaphore_holds_up_to_its_limit(void **st)
{
    (void)st;
    setup_domain();
    D.lim.max_waiters = 16;
    struct res r;
    res_init(&r, 0);
    struct res_req *h[3];
    for (int i = 0; i < 3; i++) {
        h[i] = sem_req("enc", 3, false, 0);
        handle(&r, h[i]);
        expect(h[i], RES_OK_LEASE);
        assert_int_equal(h[i]->view.limit, 3);
        assert_int_equal(h[i]->view.token, (uint64_t)i + 1); /* each its own token */
    }
    struct res_req *full = sem_req("enc", 3, false, 0);
    handle(&r, full);
    expect(full, RES_ERR_HELD);
    assert_int_equal(full->view.token, 1); /* the holder whose lease ends first */
    /* Another limit, or none (1), while it has holders: limit_mismatch with the limit. */
    struct res_req *other = sem_req("x", 2, false, 60000);
    handle(&r, other);
    expect(other, RES_ERR_LIMIT);
    assert_int_equal(other->view.limit, 3);
    struct res_req *plain = acquire_req("x", 10000, 0);
    handle(&r, plain);
    expect(plain, RES_ERR_LIMIT);
    /* Two waiters; one release frees one place: the first waiter only. */
    struct res_req *w1 = sem_req("w1", 3, false, 60000), *w2 = sem_req("w2", 3, false, 60000);
    handle(&r, w1);
    handle(&r, w2);
    expect_none();
    struct res_req *rel = with_id(req(RES_RELEASE), h[1]->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    expect(w1, RES_OK_LEASE);
    expect_none();
    /* Breaking all grants as many waiters as now fit, at once, in order. */
    struct res_req *brk = req(RES_BREAK);
    handle(&r, brk);
    expect(brk, RES_OK_BROKEN);
    assert_true(brk->view.broken);
    expect(w2, RES_OK_LEASE);
    expect_none();
    struct res_req *all[] = {h[0], h[1], h[2], full, other, plain, w1, w2, rel, brk};
    done_all(all, sizeof all / sizeof all[0]);
    res_free(&r);
}

static void readers_share_and_a_queued_writer_is_not_overtaken(void **st)
{
    (void)st;
    setup_domain();
    D.lim.max_waiters = 16;
    struct res r;
    res_init(&r, 0);
    struct res_req *r1 = sem_req("r1", 1, true, 0), *r2 = sem_req("r2", 1, true, 0);
    handle(&r, r1);
    expect(r1, RES_OK_LEASE);
    assert_true(r1->view.shared);
    handle(&r, r2);
    expect(r2, RES_OK_LEASE);
    struct res_req *w = sem_req("w", 1, false, 60000);
    handle(&r, w);
    expect_none(); /* the writer waits for both readers */
    struct res_req *r3 = sem_req("r3", 1, true, 60000);
    handle(&r, r3);
    expect_none(); /* a reader that would fit waits behind the writer */
    struct res_req *r4 = sem_req("r4", 1, true, 0);
    handle(&r, r4);
    expect(r4, RES_ERR_HELD); /* and one that will not wait is refused */
    struct res_req *g = req(RES_GET);
    handle(&r, g);
    expect(g, RES_OK_STATE);
    assert_int_equal(g->view.nholders, 2);
    assert_true(g->view.holders[0].shared && g->view.holders[1].shared);
    assert_string_equal(g->view.holders[0].owner->s, "r1"); /* oldest grant first */
    assert_int_equal(g->view.waiters, 2);
    /* Breaking one lease by its id leaves the other. */
    struct res_req *b1 = with_id(req(RES_BREAK), r1->view.lease_id);
    handle(&r, b1);
    expect(b1, RES_OK_BROKEN);
    assert_true(b1->view.broken);
    expect_none();
    struct res_req *rel = with_id(req(RES_RELEASE), r2->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    expect(w, RES_OK_LEASE); /* the writer alone */
    expect_none();
    struct res_req *b2 = with_id(req(RES_BREAK), r1->view.lease_id);
    handle(&r, b2);
    expect(b2, RES_OK_BROKEN);
    assert_false(b2->view.broken); /* that lease holds nothing */
    struct res_req *relw = with_id(req(RES_RELEASE), w->view.lease_id);
    handle(&r, relw);
    expect(relw, RES_OK_RELEASED);
    expect(r3, RES_OK_LEASE);
    expect_none();
    struct res_req *all[] = {r1, r2, w, r3, r4, g, b1, rel, b2, relw};
    done_all(all, sizeof all / sizeof all[0]);
    res_free(&r);
}

static void a_retry_must_name_the_same_kind(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *a = sem_req("a", 2, false, 0);
    handle(&r, a);
    expect(a, RES_OK_LEASE);
    struct res_req *same = with_id(sem_req("a", 2, false, 0), a->view.lease_id);
    handle(&r, same);
    expect(same, RES_OK_LEASE);
    assert_int_equal(same->view.token, a->view.token);
    struct res_req *lim = with_id(sem_req("a", 3, false, 0), a->view.lease_id);
    handle(&r, lim);
    expect(lim, RES_ERR_LIMIT);
    assert_int_equal(lim->view.limit, 2);
    struct res_req *rel = with_id(req(RES_RELEASE), a->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    struct res_req *rd = sem_req("b", 1, true, 0);
    handle(&r, rd);
    expect(rd, RES_OK_LEASE);
    struct res_req *rdx = with_id(sem_req("b", 1, false, 0), rd->view.lease_id);
    handle(&r, rdx);
    expect(rdx, RES_ERR_SHARED);
    struct res_req *all[] = {a, same, lim, rel, rd, rdx};
    done_all(all, sizeof all / sizeof all[0]);
    res_free(&r);
}

static void one_renewal_of_a_thousand_holders_writes_one_lease(void **st)
{
    (void)st;
    setup_domain();
    D.lim.max_holders = 1000;
    struct res r;
    res_init(&r, 0);
    struct res_req *first = NULL;
    for (int i = 0; i < 1000; i++) {
        struct res_req *q = sem_req("w", 1000, false, 0);
        handle(&r, q);
        expect(q, RES_OK_LEASE);
        if (i == 0)
            first = q;
        else
            done(q);
    }
    struct store_rec *rec = res_take_rec(&r, "s", 1);
    assert_int_equal(rec->nput, 1000);
    store_rec_free(rec);
    struct res_req *rn = with_id(req(RES_RENEW), first->view.lease_id);
    handle(&r, rn);
    expect(rn, RES_OK_LEASE);
    rec = res_take_rec(&r, "s", 1);
    assert_int_equal(rec->nput, 1);
    assert_int_equal(rec->ndel, 0);
    assert_false(rec->drop);
    assert_memory_equal(rec->put[0].lease_id, first->view.lease_id, 16);
    store_rec_free(rec);
    struct res_req *rel = with_id(req(RES_RELEASE), first->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    rec = res_take_rec(&r, "s", 1);
    assert_int_equal(rec->nput, 0);
    assert_int_equal(rec->ndel, 1);
    store_rec_free(rec);
    struct res_req *brk = req(RES_BREAK);
    handle(&r, brk);
    expect(brk, RES_OK_BROKEN);
    rec = res_take_rec(&r, "s", 1);
    assert_true(rec->drop);
    store_rec_free(rec);
    struct res_req *all[] = {first, rn, rel, brk};
    done_all(all, sizeof all / sizeof all[0]);
    res_free(&r);
}

static void the_same_acquire_queued_twice_gets_one_lease(void **st)
{
    (void)st;
    setup_domain();
    struct res r;
    res_init(&r, 0);
    struct res_req *h = grant(&r, "h", 10000);
    uint8_t id[16];
    memset(id, 0x3c, sizeof id);
    struct res_req *w1 = with_id(acquire_req("w", 10000, 60000), id);
    struct res_req *w2 = with_id(acquire_req("w", 10000, 60000), id);
    handle(&r, w1);
    handle(&r, w2);
    expect_none();
    struct res_req *rel = with_id(req(RES_RELEASE), h->view.lease_id);
    handle(&r, rel);
    expect(rel, RES_OK_RELEASED);
    expect(w1, RES_OK_LEASE);
    expect(w2, RES_OK_LEASE); /* its own lease back, not a second grant */
    assert_int_equal(w2->view.token, w1->view.token);
    assert_int_equal(r.nheld, 1);
    struct res_req *all[] = {h, w1, w2, rel};
    done_all(all, sizeof all / sizeof all[0]);
    res_free(&r);
}

/* Readers with 4000-byte metadata: grants stop at RES_ROW_MAX_BYTES (the next reader is
 * answered lease_held, or waits), and a renewal growing its metadata past it is refused;
 * one that keeps its size is not. */
static void the_leases_of_one_resource_fit_one_line(void **st)
{
    (void)st;
    setup_domain();
    D.lim.max_holders = 4096;
    struct res r;
    res_init(&r, 0);
    char md[4001];
    md[0] = '{';
    memset(md + 1, ' ', 3998);
    md[3999] = '}';
    md[4000] = '\0';
    static struct res_req *held[1000];
    uint32_t n = 0;
    for (;;) {
        struct res_req *q = acquire_req("reader", 60000, 0);
        q->shared = true;
        q->metadata = mx_str_new(md, 4000);
        q->has_metadata = true;
        handle(&r, q);
        struct res_req *a = res_out_pop(&OUT);
        assert_ptr_equal(a, q);
        if (a->status != RES_OK_LEASE) {
            assert_int_equal(a->status, RES_ERR_HELD);
            done(q);
            break;
        }
        assert_true(n < 1000);
        held[n++] = q;
    }
    /* 4000 + 320 + 12 bytes a lease: 363 of them in 1.5 MiB, where 1000 would make 4.3 MB. */
    assert_int_equal(n, RES_ROW_MAX_BYTES / (4000 + 320 + 12));
    /* A renewal of the first, now with 8000 bytes: refused; with the same: renewed. */
    char big[8001];
    big[0] = '{';
    memset(big + 1, ' ', 7998);
    big[7999] = '}';
    big[8000] = '\0';
    struct res_req *rn = with_id(req(RES_RENEW), held[0]->view.lease_id);
    rn->metadata = mx_str_new(big, 8000);
    rn->has_metadata = true;
    handle(&r, rn);
    expect(rn, RES_ERR_ROW_FULL);
    done(rn);
    rn = with_id(req(RES_RENEW), held[0]->view.lease_id);
    rn->metadata = mx_str_new(md, 4000);
    rn->has_metadata = true;
    handle(&r, rn);
    expect(rn, RES_OK_LEASE);
    done(rn);
    for (uint32_t i = 0; i < n; i++)
        done(held[i]);
    res_free(&r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(no_token_above_the_reserved_ceiling),
    cmocka_unit_test(a_partition_hands_out_its_own_tokens),
    cmocka_unit_test(a_set_reserves_its_tokens_in_one_block),
    cmocka_unit_test(restore_grace_refuses_grants_and_renewals),
    cmocka_unit_test(grant_on_free_then_conflict),
    cmocka_unit_test(reacquire_with_same_lease_id_is_idempotent),
    cmocka_unit_test(waiters_are_granted_in_fifo_order),
    cmocka_unit_test(waiters_are_queued_in_arrival_order),
    cmocka_unit_test(a_part_is_reserved_then_granted),
    cmocka_unit_test(a_part_granted_where_it_was_not_reserved_is_refused),
    cmocka_unit_test(waiter_times_out_with_lease_held),
    cmocka_unit_test(expiry_at_deadline_never_before_and_grants_waiter),
    cmocka_unit_test(expiry_lateness_is_measured),
    cmocka_unit_test(waiter_gone_is_never_granted),
    cmocka_unit_test(a_gone_client_is_not_granted_even_at_once),
    cmocka_unit_test(renew_keeps_token_and_works_after_expiry),
    cmocka_unit_test(renew_after_another_grant_is_lost),
    cmocka_unit_test(release_after_expiry_and_twice),
    cmocka_unit_test(break_ends_any_lease_and_grants_next),
    cmocka_unit_test(watch_waits_for_a_change_or_its_deadline),
    cmocka_unit_test(watchers_see_the_state_after_release_and_grant),
    cmocka_unit_test(watcher_can_be_dropped_and_cancelled),
    cmocka_unit_test(fencing_tokens_increase_across_resources),
    cmocka_unit_test(load_keeps_remaining_wall_time),
    cmocka_unit_test(next_deadline_and_idle),
    cmocka_unit_test(a_semaphore_holds_up_to_its_limit),
    cmocka_unit_test(readers_share_and_a_queued_writer_is_not_overtaken),
    cmocka_unit_test(a_retry_must_name_the_same_kind),
    cmocka_unit_test(one_renewal_of_a_thousand_holders_writes_one_lease),
    cmocka_unit_test(the_same_acquire_queued_twice_gets_one_lease),
    cmocka_unit_test(the_leases_of_one_resource_fit_one_line),
};
MX_TEST_MAIN(tests)
