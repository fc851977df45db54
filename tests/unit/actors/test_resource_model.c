/*
 * The resource's rules for semaphores and shared leases, checked against a small model.
 *
 * Random sequences of acquires (exclusive, shared, semaphores of 2 and 3, with and without
 * waiting, retries with a client's own lease id), renewals, releases, breaks of one lease
 * or all, clients that go away while they wait, reads, and time passing are applied both to
 * the resource (actors/resource.c) and to the model below, written from the contract's
 * sentences rather than from the code. Every answer is compared: its request, its status,
 * the fencing token of a lease, the limit of a limit_mismatch and the holders of a state.
 * Invariants are checked after every step: never more holders than the limit, an exclusive
 * lease alone, tokens increasing in grant order.
 *
 * The seed is printed; MX_SEED=<n> replays one run, MX_RUNS=<n> sets how many runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <time.h>

#include <cmocka.h>

#include "actors/resource.h"
#include "common/clock.h"

#define MS          1000000ull
#define NCLIENTS    8
#define MAX_HOLDERS 4 /* small, so that the bound on shared leases is reached */

/* ---- the model ---------------------------------------------------------------------- */

struct m_lease {
    int id; /* lease ids are small integers, written into a UUID's first bytes */
    bool shared, held;
    uint64_t token, ttl, deadline;
};

struct m_wait {
    uint64_t q;
    int id;
    uint32_t limit;
    bool shared;
    uint64_t ttl, deadline;
};

struct m_answer {
    uint64_t q;
    int status;
    uint64_t token; /* a lease */
    uint32_t limit; /* limit_mismatch */
};

static struct model {
    uint32_t limit;
    struct m_lease l[64];
    int n;
    struct m_wait w[64];
    int nw;
    uint64_t token;
    struct m_answer a[128];
    int na;
} M;

static void m_answer(uint64_t q, int status, uint64_t token, uint32_t limit)
{
    assert_true(M.na < 128);
    M.a[M.na++] = (struct m_answer){q, status, token, limit};
}

static int m_held(void)
{
    int n = 0;
    for (int i = 0; i < M.n; i++)
        n += M.l[i].held;
    return n;
}

static int m_find(int id)
{
    for (int i = 0; i < M.n; i++)
        if (M.l[i].id == id)
            return i;
    return -1;
}

static void m_remove(int i)
{
    memmove(&M.l[i], &M.l[i + 1], (size_t)(M.n - i - 1) * sizeof M.l[0]);
    M.n--;
}

/* "the waiter at the head of the queue is granted as soon as it fits (a free place of the
 * semaphore; for a shared request, no exclusive holder; for an exclusive one, no holder at
 * all)", and shared leases up to --max-holders. */
static bool m_fits(uint32_t limit, bool shared)
{
    int held = m_held();
    if (held == 0)
        return true;
    (void)limit;
    if (M.limit > 1)
        return held < (int)M.limit;
    if (!shared)
        return false;
    for (int i = 0; i < M.n; i++)
        if (M.l[i].held && !M.l[i].shared)
            return false;
    return held < MAX_HOLDERS;
}

static void m_grant(uint64_t q, int id, uint32_t limit, bool shared, uint64_t ttl, uint64_t now)
{
    if (m_held() == 0 && M.limit != limit) {
        M.n = 0; /* a new limit: nothing remembered under the old one */
        M.limit = limit;
    }
    int old = m_find(id);
    if (old >= 0)
        m_remove(old);
    M.l[M.n++] = (struct m_lease){id, shared, true, ++M.token, ttl, now + ttl * MS};
    /* A grant takes places of expired (remembered) leases: in a semaphore, the oldest ones
     * beyond the limit; an exclusive grant, all; a shared grant, the exclusive ones and
     * the oldest beyond --max-holders. */
    bool exclusive = limit == 1 && !shared;
    for (int i = 0; i < M.n;) {
        if (!M.l[i].held && (exclusive || (M.limit == 1 && !M.l[i].shared)))
            m_remove(i);
        else
            i++;
    }
    int bound = M.limit > 1 ? (int)M.limit : MAX_HOLDERS;
    for (int i = 0; i < M.n && M.n > bound;) {
        if (!M.l[i].held)
            m_remove(i);
        else
            i++;
    }
    m_answer(q, RES_OK_LEASE, M.token, 0);
}

static void m_grant_next(uint64_t now)
{
    while (M.nw) {
        struct m_wait w = M.w[0];
        if (m_held() && w.limit != M.limit) {
            memmove(&M.w[0], &M.w[1], (size_t)(--M.nw) * sizeof M.w[0]);
            m_answer(w.q, RES_ERR_LIMIT, 0, M.limit);
        } else if (m_fits(w.limit, w.shared)) {
            memmove(&M.w[0], &M.w[1], (size_t)(--M.nw) * sizeof M.w[0]);
            m_grant(w.q, w.id, w.limit, w.shared, w.ttl, now);
        } else {
            break;
        }
    }
}

static void m_tick(uint64_t now)
{
    for (int i = 0; i < M.n; i++)
        if (M.l[i].held && M.l[i].deadline <= now)
            M.l[i].held = false;
    m_grant_next(now);
    bool out = false;
    for (int i = 0; i < M.nw;) {
        if (M.w[i].deadline <= now) {
            m_answer(M.w[i].q, RES_ERR_HELD, 0, 0);
            memmove(&M.w[i], &M.w[i + 1], (size_t)(--M.nw - i) * sizeof M.w[0]);
            out = true;
        } else {
            i++;
        }
    }
    if (out)
        m_grant_next(now);
}

static void m_acquire(uint64_t q, int id, uint32_t limit, bool shared, uint64_t ttl, uint64_t wait,
                      uint64_t now)
{
    m_tick(now);
    int i = m_find(id);
    if (i >= 0) {
        if (limit != M.limit)
            m_answer(q, RES_ERR_LIMIT, 0, M.limit);
        else if (shared != M.l[i].shared)
            m_answer(q, RES_ERR_SHARED, 0, 0);
        else {
            M.l[i].held = true;
            M.l[i].ttl = ttl;
            M.l[i].deadline = now + ttl * MS;
            m_answer(q, RES_OK_LEASE, M.l[i].token, 0);
        }
        return;
    }
    if (m_held() && limit != M.limit)
        m_answer(q, RES_ERR_LIMIT, 0, M.limit);
    else if (M.nw == 0 && m_fits(limit, shared))
        m_grant(q, id, limit, shared, ttl, now);
    else if (wait == 0)
        m_answer(q, RES_ERR_HELD, 0, 0);
    else if (M.nw >= 16)
        m_answer(q, RES_ERR_TOO_MANY, 0, 0);
    else
        M.w[M.nw++] = (struct m_wait){q, id, limit, shared, ttl, now + wait * MS};
}

static void m_renew(uint64_t q, int id, uint64_t now)
{
    m_tick(now);
    int i = m_find(id);
    if (i < 0) {
        m_answer(q, RES_ERR_LOST, 0, 0);
        return;
    }
    M.l[i].held = true;
    M.l[i].deadline = now + M.l[i].ttl * MS;
    m_answer(q, RES_OK_LEASE, M.l[i].token, 0);
}

static void m_release(uint64_t q, int id, uint64_t now)
{
    m_tick(now);
    int i = m_find(id);
    if (i < 0) {
        m_answer(q, RES_ERR_LOST, 0, 0);
        return;
    }
    m_remove(i);
    m_answer(q, RES_OK_RELEASED, 0, 0);
    m_grant_next(now);
}

static void m_break(uint64_t q, int id, uint64_t now)
{
    m_tick(now);
    if (id) {
        int i = m_find(id);
        if (i >= 0)
            m_remove(i);
    } else {
        M.n = 0;
    }
    m_answer(q, RES_OK_BROKEN, 0, 0);
    m_grant_next(now);
}

static void m_drop(uint64_t q, uint64_t now)
{
    for (int i = 0; i < M.nw; i++)
        if (M.w[i].q == q) {
            memmove(&M.w[i], &M.w[i + 1], (size_t)(--M.nw - i) * sizeof M.w[0]);
            m_answer(q, RES_GONE, 0, 0);
            if (i == 0)
                m_grant_next(now);
            return;
        }
}

/* ---- the resource, driven alike ------------------------------------------------------ */

static struct res_domain D;
static struct res_now NOW;
static struct res_out OUT;
static struct res R;
static struct res_req *pending[NCLIENTS]; /* each client's waiting acquire */
static uint64_t next_q;

static uint64_t rnd_state;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static void uuid_of(int id, uint8_t out[16])
{
    memset(out, 0x5a, 16);
    memcpy(out, &id, sizeof id);
}

static struct res_req *new_req(uint8_t op, int id)
{
    struct res_req *q = calloc(1, sizeof *q);
    q->op = op;
    q->id = ++next_q;
    if (id) {
        uuid_of(id, q->lease_id);
        q->has_lease_id = true;
    }
    return q;
}

static void free_req(struct res_req *q)
{
    res_req_clear(q);
    free(q);
}

/* Compares what the resource answered with what the model did, in order. */
static void compare(const char *what, uint64_t seed, int step)
{
    int k = 0;
    struct res_req *a;
    while ((a = res_out_pop(&OUT)) != NULL) {
        if (k >= M.na)
            fail_msg("seed %" PRIu64 " step %d (%s): the resource answered request %" PRIu64
                     " (status %d), the model nothing more",
                     seed, step, what, a->id, a->status);
        struct m_answer *m = &M.a[k++];
        if (a->id != m->q || a->status != m->status)
            fail_msg("seed %" PRIu64 " step %d (%s): answer %d is request %" PRIu64
                     " status %d; the model: request %" PRIu64 " status %d",
                     seed, step, what, k, a->id, a->status, m->q, m->status);
        if (m->status == RES_OK_LEASE && a->view.token != m->token)
            fail_msg("seed %" PRIu64 " step %d (%s): token %" PRIu64 ", the model %" PRIu64, seed,
                     step, what, a->view.token, m->token);
        if (m->status == RES_ERR_LIMIT && a->view.limit != m->limit)
            fail_msg("seed %" PRIu64 " step %d (%s): limit %u, the model %u", seed, step, what,
                     a->view.limit, m->limit);
        for (int c = 0; c < NCLIENTS; c++)
            if (pending[c] == a)
                pending[c] = NULL;
        free_req(a);
    }
    if (k != M.na)
        fail_msg("seed %" PRIu64 " step %d (%s): the model answered %d, the resource %d", seed,
                 step, what, M.na, k);
    M.na = 0;
}

/* Never more holders than the limit; an exclusive lease alone; the same holders as the
 * model, in grant order with increasing tokens. */
static void check_state(uint64_t seed, int step)
{
    struct res_req *g = new_req(RES_GET, 0);
    res_handle(&R, &D, g, &NOW, &OUT);
    struct res_req *a = res_out_pop(&OUT);
    assert_ptr_equal(a, g);
    /* The read ran a tick: the model does the same. */
    m_tick(NOW.mono_ns);
    struct res_view *v = &g->view;
    int held = m_held();
    if ((int)v->nholders != held)
        fail_msg("seed %" PRIu64 " step %d: %u holders, the model %d", seed, step, v->nholders,
                 held);
    uint32_t exclusive = 0;
    for (uint32_t i = 0, j = 0; i < v->nholders; i++, j++) {
        while (!M.l[j].held)
            j++;
        if (v->holders[i].token != M.l[j].token || v->holders[i].shared != M.l[j].shared)
            fail_msg("seed %" PRIu64 " step %d: holder %u token %" PRIu64 ", the model %" PRIu64,
                     seed, step, i, v->holders[i].token, M.l[j].token);
        if (i && v->holders[i].token <= v->holders[i - 1].token)
            fail_msg("seed %" PRIu64 " step %d: holders out of grant order", seed, step);
        exclusive += !v->holders[i].shared && v->limit == 1;
    }
    if (v->nholders > (v->limit > 1 ? v->limit : MAX_HOLDERS))
        fail_msg("seed %" PRIu64 " step %d: %u holders over the limit %u", seed, step, v->nholders,
                 v->limit);
    if (exclusive && v->nholders > 1)
        fail_msg("seed %" PRIu64 " step %d: an exclusive lease beside %u others", seed, step,
                 v->nholders - 1);
    if (held && v->limit != M.limit)
        fail_msg("seed %" PRIu64 " step %d: limit %u, the model %u", seed, step, v->limit, M.limit);
    free_req(g);
}

static void run_once(uint64_t seed, int steps)
{
    memset(&D, 0, sizeof D);
    prom_hist_init(&D.expiry_lateness, prom_latency_bounds, prom_latency_nbounds, 1e9);
    D.lim = (struct res_limits){.min_ttl_ms = 1,
                                .max_ttl_ms = 3600000,
                                .max_wait_ms = 300000,
                                .max_waiters = 16,
                                .max_holders = MAX_HOLDERS};
    atomic_store(&D.token_ceiling, UINT64_MAX);
    NOW =
        (struct res_now){.mono_ns = 1000 * MS, .wall_ms = 1700000000000, .lease_ms = 1700000000000};
    memset(&OUT, 0, sizeof OUT);
    memset(&M, 0, sizeof M);
    M.limit = 1;
    memset(pending, 0, sizeof pending);
    res_init(&R, 0);
    rnd_state = seed ? seed : 1;
    int last_id[NCLIENTS] = {0};
    int next_id = 1;
    static const uint32_t limits[] = {1, 1, 2, 3};
    static const uint64_t waits[] = {0, 0, 300, 2500};
    struct mx_str *owner = mx_str_new("worker", 6);

    for (int step = 0; step < steps; step++) {
        int c = (int)(rnd() % NCLIENTS);
        int op = (int)(rnd() % 10);
        const char *what = "?";
        if (op <= 3 && !pending[c]) {
            what = "acquire";
            bool retry = last_id[c] && rnd() % 4 == 0;
            int id = retry ? last_id[c] : next_id++;
            uint32_t limit = limits[rnd() % 4];
            bool shared = limit == 1 && rnd() % 2;
            uint64_t ttl = 1000 + rnd() % 3 * 1000, wait = waits[rnd() % 4];
            struct res_req *q = new_req(RES_ACQUIRE, id);
            q->owner = mx_str_ref(owner);
            q->limit = limit;
            q->shared = shared;
            q->ttl_ms = ttl;
            q->wait_ms = wait;
            last_id[c] = id;
            m_acquire(q->id, id, limit, shared, ttl, wait, NOW.mono_ns);
            res_handle(&R, &D, q, &NOW, &OUT);
            if (q->status == RES_PENDING)
                pending[c] = q;
        } else if (op == 4 && last_id[c]) {
            what = "renew";
            struct res_req *q = new_req(RES_RENEW, last_id[c]);
            m_renew(q->id, last_id[c], NOW.mono_ns);
            res_handle(&R, &D, q, &NOW, &OUT);
        } else if (op == 5 && last_id[c]) {
            what = "release";
            struct res_req *q = new_req(RES_RELEASE, last_id[c]);
            m_release(q->id, last_id[c], NOW.mono_ns);
            res_handle(&R, &D, q, &NOW, &OUT);
        } else if (op == 6 && rnd() % 4 == 0) {
            what = "break";
            int id = rnd() % 2 ? last_id[c] : 0;
            struct res_req *q = new_req(RES_BREAK, id);
            m_break(q->id, id, NOW.mono_ns);
            res_handle(&R, &D, q, &NOW, &OUT);
        } else if (op == 7 && pending[c]) {
            what = "client gone";
            m_drop(pending[c]->id, NOW.mono_ns);
            res_drop(&R, &D, pending[c]->id, &NOW, &OUT);
        } else {
            what = "time passes";
            uint64_t ms = rnd() % 1200;
            NOW.mono_ns += ms * MS;
            NOW.wall_ms += (int64_t)ms;
            NOW.lease_ms += (int64_t)ms;
            m_tick(NOW.mono_ns);
            res_tick(&R, &D, &NOW, &OUT);
        }
        compare(what, seed, step);
        check_state(seed, step);
        compare("the read's tick", seed, step);
    }
    struct res_out out = {0};
    res_cancel_all(&R, &D, "end", &out);
    struct res_req *q;
    while ((q = res_out_pop(&out)) != NULL)
        free_req(q);
    res_free(&R);
    mx_str_unref(owner);
}

static void random_sequences_agree_with_the_model(void **st)
{
    (void)st;
    const char *env = getenv("MX_SEED");
    const char *runs_env = getenv("MX_RUNS");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    int runs = env ? 1 : runs_env ? atoi(runs_env) : 200;
    printf("resource model: seed %" PRIu64 " (MX_SEED=%" PRIu64 " replays it), %d runs\n", seed,
           seed, runs);
    for (int i = 0; i < runs; i++)
        run_once(seed + (uint64_t)i, 400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_sequences_agree_with_the_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
