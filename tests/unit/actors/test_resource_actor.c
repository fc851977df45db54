/*
 * The resource actor's turns (actors/resource_actor.c) on the real runtime and a real
 * SQLite store in a temporary directory: every answer comes after the change it shows is
 * committed, conflicts and waiters are answered from the state machine, a refused write
 * (the write gate, a failed commit) changes nothing on disk, and a resource activated
 * again reads its lease back from the store.
 */
#include "tests/unit/testutil.h"

#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>

#include "actors/multi.h"
#include "actors/resource_actor.h"
#include "common/clock.h"
#include "common/container_of.h"
#include "common/str.h"
#include "common/uuid.h"

struct fixture {
    char dir[64];
    struct store *store;
    struct res_domain domain;
    struct ra_ctx ctx;
    struct rt *rt;
    const char *gate; /* what the write gate answers */
};

static const char *gate(void *arg)
{
    return ((struct fixture *)arg)->gate;
}

static void start_runtime(struct fixture *f)
{
    atomic_store(&f->domain.last_token, store_token_hwm(f->store));
    atomic_store(&f->domain.last_index, store_index_hwm(f->store));
    atomic_store(&f->domain.token_ceiling, UINT64_MAX);
    f->ctx =
        (struct ra_ctx){.domain = &f->domain, .store = f->store, .write_gate = gate, .gate_arg = f};
    struct rt_config rc = {.behavior = &ra_behavior,
                           .ctx = &f->ctx,
                           .workers = 2,
                           .barrier_passed = ra_barrier_passed};
    assert_int_equal(rt_start(&f->rt, &rc), 0);
}

static struct fixture *open_fixture(uint64_t fail_commit)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    mx_temp_dir(f->dir, "actor");
    struct store_config sc = {.dir = f->dir,
                              .fault_commit_first = fail_commit,
                              .fault_commit_count = fail_commit ? 1 : 0};
    char err[256];
    assert_int_equal(store_open(&f->store, &sc, err, sizeof err), 0);
    f->domain.lim = (struct res_limits){
        .min_ttl_ms = 1000, .max_ttl_ms = 3600000, .max_wait_ms = 300000, .max_waiters = 16};
    prom_hist_init(&f->domain.expiry_lateness, prom_latency_bounds, prom_latency_nbounds, 1e9);
    start_runtime(f);
    return f;
}

static void close_fixture(struct fixture *f)
{
    rt_shutdown(f->rt);
    store_close(f->store);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
}

/* One request and what was seen when its answer came. */
struct call {
    struct ra_request r;
    sem_t done;
    struct fixture *f;
    int row_rc;           /* store_get of the resource, read inside the reply */
    struct store_row row; /* its row then */
};

static void on_reply(struct ra_request *r)
{
    struct call *c = (struct call *)r;
    c->row_rc = store_get(c->f->store, "res", 3, &c->row);
    sem_post(&c->done);
}

static struct call *call_new(struct fixture *f, enum res_op op)
{
    static _Atomic uint64_t ids = 1;
    struct call *c = calloc(1, sizeof *c);
    assert_non_null(c);
    sem_init(&c->done, 0, 0);
    c->f = f;
    c->row_rc = -1;
    c->r.reply = on_reply;
    c->r.rq.op = (uint8_t)op;
    c->r.rq.id = atomic_fetch_add(&ids, 1);
    c->r.rq.ttl_ms = 30000;
    if (op == RES_ACQUIRE)
        c->r.rq.owner = mx_str_new("worker", 6);
    return c;
}

static void send(struct fixture *f, struct call *c)
{
    assert_int_equal(ra_send(f->rt, "res", 3, &c->r, NULL), RT_OK);
}

static bool wait_reply(struct call *c, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (sem_timedwait(&c->done, &ts) != 0)
        if (errno != EINTR)
            return false;
    return true;
}

static struct call *run(struct fixture *f, struct call *c)
{
    send(f, c);
    assert_true(wait_reply(c, 5000));
    return c;
}

static void call_free(struct call *c)
{
    if (c->row_rc == STORE_OK)
        store_row_clear(&c->row);
    res_req_clear(&c->r.rq);
    sem_destroy(&c->done);
    free(c);
}

static struct call *with_lease(struct call *c, const uint8_t id[16])
{
    c->r.rq.has_lease_id = true;
    memcpy(c->r.rq.lease_id, id, 16);
    return c;
}

/* Grant, conflict, renewal and release: each answer finds its change already on disk. */
static void answers_come_after_their_change_is_durable(void **state)
{
    (void)state;
    struct fixture *f = open_fixture(0);
    struct call *a = run(f, call_new(f, RES_ACQUIRE));
    assert_int_equal(a->r.rq.status, RES_OK_LEASE);
    assert_int_equal(a->r.rq.view.token, 1);
    assert_int_equal(a->row_rc, STORE_OK);
    assert_true(a->row.nleases == 1 && a->row.leases[0].held);
    assert_int_equal(a->row.leases[0].token, 1);
    assert_memory_equal(a->row.leases[0].lease_id, a->r.rq.view.lease_id, 16);

    struct call *b = run(f, call_new(f, RES_ACQUIRE));
    assert_int_equal(b->r.rq.status, RES_ERR_HELD);
    assert_int_equal(b->r.rq.view.token, 1);
    assert_string_equal(b->r.rq.view.owner->s, "worker");

    struct call *rn = run(f, with_lease(call_new(f, RES_RENEW), a->r.rq.view.lease_id));
    assert_int_equal(rn->r.rq.status, RES_OK_LEASE);
    assert_int_equal(rn->r.rq.view.token, 1);
    assert_true(rn->row.index > a->row.index);

    struct call *rl = run(f, with_lease(call_new(f, RES_RELEASE), a->r.rq.view.lease_id));
    assert_int_equal(rl->r.rq.status, RES_OK_RELEASED);
    assert_true(rl->row_rc == STORE_NOTFOUND || rl->row.nleases == 0 || !rl->row.leases[0].held);

    struct call *again = run(f, with_lease(call_new(f, RES_RENEW), a->r.rq.view.lease_id));
    assert_int_equal(again->r.rq.status, RES_ERR_LOST);
    call_free(a);
    call_free(b);
    call_free(rn);
    call_free(rl);
    call_free(again);
    close_fixture(f);
}

/* Waiters are granted in arrival order as the holder releases, each with a new token. */
static void waiters_are_granted_in_order(void **state)
{
    (void)state;
    struct fixture *f = open_fixture(0);
    struct call *a = run(f, call_new(f, RES_ACQUIRE));
    struct call *w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = call_new(f, RES_ACQUIRE);
        w[i]->r.rq.wait_ms = 10000;
        send(f, w[i]);
    }
    assert_false(wait_reply(w[0], 200)); /* queued, not answered */
    struct call *rl = run(f, with_lease(call_new(f, RES_RELEASE), a->r.rq.view.lease_id));
    assert_int_equal(rl->r.rq.status, RES_OK_RELEASED);
    uint64_t token = 1;
    for (int i = 0; i < 3; i++) {
        assert_true(wait_reply(w[i], 5000));
        assert_int_equal(w[i]->r.rq.status, RES_OK_LEASE);
        assert_int_equal(w[i]->r.rq.view.token, ++token);
        assert_int_equal(w[i]->row.leases[0].token, token); /* durable when answered */
        if (i < 2)
            assert_false(wait_reply(w[i + 1], 100));
        call_free(run(f, with_lease(call_new(f, RES_RELEASE), w[i]->r.rq.view.lease_id)));
        call_free(w[i]);
    }
    call_free(a);
    call_free(rl);
    close_fixture(f);
}

/* A write the gate refuses (a sync mirror that cannot reach blob storage) is answered 503
 * and changes nothing; reads still work. */
static void a_closed_write_gate_changes_nothing(void **state)
{
    (void)state;
    struct fixture *f = open_fixture(0);
    f->gate = "blob_unreachable";
    struct call *a = run(f, call_new(f, RES_ACQUIRE));
    assert_int_equal(a->r.rq.status, RES_ERR_UNAVAILABLE);
    assert_string_equal(a->r.rq.reason, "blob_unreachable");
    assert_int_equal(a->row_rc, STORE_NOTFOUND);
    struct call *g = run(f, call_new(f, RES_GET));
    assert_int_equal(g->r.rq.status, RES_OK_STATE);
    assert_false(g->r.rq.view.held);
    f->gate = NULL;
    struct call *b = run(f, call_new(f, RES_ACQUIRE));
    assert_int_equal(b->r.rq.status, RES_OK_LEASE);
    assert_int_equal(b->r.rq.view.token, 1); /* the refused one used no token */
    call_free(a);
    call_free(g);
    call_free(b);
    close_fixture(f);
}

/* A grant whose commit fails is answered 503 and forgotten: the actor does not keep a
 * lease the disk does not have, and the next acquire is granted. */
static void a_failed_commit_is_answered_unavailable_and_forgotten(void **state)
{
    (void)state;
    struct fixture *f = open_fixture(1);
    struct call *a = run(f, call_new(f, RES_ACQUIRE));
    assert_int_equal(a->r.rq.status, RES_ERR_UNAVAILABLE);
    assert_int_equal(a->row_rc, STORE_NOTFOUND);
    struct call *b = run(f, call_new(f, RES_ACQUIRE));
    assert_int_equal(b->r.rq.status, RES_OK_LEASE);
    assert_int_equal(b->row_rc, STORE_OK);
    assert_memory_equal(b->row.leases[0].lease_id, b->r.rq.view.lease_id, 16);
    call_free(a);
    call_free(b);
    close_fixture(f);
}

/* A resource activated again (here: in a new runtime on the same store) reads its lease
 * back from the store, and the next token continues from the store's high-water mark. */
static void a_reactivated_resource_reads_its_lease_from_the_store(void **state)
{
    (void)state;
    struct fixture *f = open_fixture(0);
    struct call *a = run(f, call_new(f, RES_ACQUIRE));
    assert_int_equal(a->r.rq.status, RES_OK_LEASE);
    rt_shutdown(f->rt);
    start_runtime(f);
    struct call *g = run(f, call_new(f, RES_GET));
    assert_int_equal(g->r.rq.status, RES_OK_STATE);
    assert_true(g->r.rq.view.held);
    assert_int_equal(g->r.rq.view.token, 1);
    assert_string_equal(g->r.rq.view.owner->s, "worker");
    struct call *b = run(f, call_new(f, RES_ACQUIRE));
    assert_int_equal(b->r.rq.status, RES_ERR_HELD);
    struct call *rn = run(f, with_lease(call_new(f, RES_RENEW), a->r.rq.view.lease_id));
    assert_int_equal(rn->r.rq.status, RES_OK_LEASE);
    assert_int_equal(rn->r.rq.view.token, 1);
    call_free(a);
    call_free(g);
    call_free(b);
    call_free(rn);
    close_fixture(f);
}

int main(int argc, char **argv);
/* A test's own coordinator of one request about two resources, "a" and "b": when both
 * parts are reserved it commits a, then b; b's record submits the group. */
struct group;
struct part {
    struct ra_request r;
    struct ra_submitted sub;
    struct group *g;
    const char *name;
    sem_t done;
    int rows_at_reply; /* how many of the two rows the store had when it was answered */
};
struct group {
    struct fixture *f;
    struct part p[2];
    atomic_int reserved;
    pthread_mutex_t lock;
    struct store_rec *recs[2];
    uint64_t epochs[2];
    int handed;
    uint64_t seq;
};

static void part_reserved(struct ra_request *r)
{
    struct part *p = container_of(r, struct part, r);
    struct group *g = p->g;
    /* "a" first; "b" once a's part is granted and a moment has passed, so that a's answer
     * would be out by then if it did not wait for the group. */
    if (atomic_fetch_add(&g->reserved, 1) + 1 == 2) {
        uint64_t token = res_reserve_tokens(&g->f->domain, 2); /* the set's, in its order */
        g->p[0].r.rq.part_token = token;
        g->p[1].r.rq.part_token = token + 1;
        assert_int_equal(ra_send_commit(g->f->rt, "a", 1, &g->p[0].r), RT_OK);
    }
}

static void *commit_b_later(void *arg)
{
    struct group *g = arg;
    mx_sleep_ms(100);
    assert_int_equal(ra_send_commit(g->f->rt, "b", 1, &g->p[1].r), RT_OK);
    return NULL;
}

static void part_granted(struct ra_request *r, struct store_rec *rec, uint64_t epoch)
{
    struct part *p = container_of(r, struct part, r);
    struct group *g = p->g;
    pthread_mutex_lock(&g->lock);
    int i = (int)(p - g->p);
    g->recs[i] = rec;
    g->epochs[i] = epoch;
    bool last = ++g->handed == 2;
    if (last) {
        assert_non_null(g->recs[0]);
        assert_non_null(g->recs[1]);
        store_link_rec(g->recs[0], g->recs[1]);
        store_link_rec(g->recs[1], NULL);
        g->seq = store_submit_group(g->f->store, g->recs[0], 2, g->epochs);
    }
    pthread_mutex_unlock(&g->lock);
    if (i == 0) { /* a's turn ends first */
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, commit_b_later, g), 0);
        pthread_detach(t);
    }
    if (last)
        for (int k = 0; k < 2; k++)
            assert_int_equal(ra_send_submitted(g->f->rt, g->p[k].name, 1, &g->p[k].sub, g->seq),
                             RT_OK);
}

static void part_reply(struct ra_request *r)
{
    struct part *p = container_of(r, struct part, r);
    struct store_row row;
    p->rows_at_reply = 0;
    for (int i = 0; i < 2; i++)
        if (store_get(p->g->f->store, p->g->p[i].name, 1, &row) == STORE_OK) {
            p->rows_at_reply += row.nleases > 0 && row.leases[row.nleases - 1].held;
            store_row_clear(&row);
        }
    sem_post(&p->done);
}

static struct group *group_new(struct fixture *f, uint64_t wait_ms)
{
    struct group *g = calloc(1, sizeof *g);
    assert_non_null(g);
    g->f = f;
    pthread_mutex_init(&g->lock, NULL);
    uint64_t seq = res_next_arrival(&f->domain);
    uint8_t id[16];
    assert_int_equal(mx_uuid_random(id), 0);
    for (int i = 0; i < 2; i++) {
        struct part *p = &g->p[i];
        p->g = g;
        p->name = i ? "b" : "a";
        sem_init(&p->done, 0, 0);
        p->r.reply = part_reply;
        p->r.reserved = part_reserved;
        p->r.granted = part_granted;
        p->r.rq.op = RES_ACQUIRE;
        p->r.rq.multi = true;
        p->r.rq.seq = seq;
        p->r.rq.id = 1000 + (uint64_t)i;
        p->r.rq.ttl_ms = 30000;
        p->r.rq.wait_ms = wait_ms;
        p->r.rq.owner = mx_str_new("pair", 4);
        p->r.rq.has_lease_id = true;
        memcpy(p->r.rq.lease_id, id, 16); /* one lease id for the set */
    }
    return g;
}

static bool part_wait(struct part *p, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000 + 1;
    while (sem_timedwait(&p->done, &ts) != 0)
        if (errno != EINTR)
            return false;
    return true;
}

static void group_free(struct group *g)
{
    for (int i = 0; i < 2; i++) {
        res_req_clear(&g->p[i].r.rq);
        sem_destroy(&g->p[i].done);
    }
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static struct call *call_on(struct fixture *f, const char *name, struct call *c)
{
    assert_int_equal(ra_send(f->rt, name, strlen(name), &c->r, NULL), RT_OK);
    return c;
}

/* Two resources granted at once: each part waits for its place, holds it reserved while
 * the other waits (a single waiter behind it is not granted), and both are answered only
 * once both rows are on disk, in one commit. */
static void the_parts_of_a_set_are_granted_in_one_commit(void **state)
{
    (void)state;
    struct fixture *f = open_fixture(0);
    struct call *hb = call_on(f, "b", call_new(f, RES_ACQUIRE)); /* b is held */
    assert_true(wait_reply(hb, 5000));
    assert_int_equal(hb->r.rq.status, RES_OK_LEASE);

    struct group *g = group_new(f, 10000);
    for (int i = 0; i < 2; i++)
        assert_int_equal(ra_send(f->rt, g->p[i].name, 1, &g->p[i].r, NULL), RT_OK);
    struct call *wa = call_new(f, RES_ACQUIRE);
    wa->r.rq.wait_ms = 10000;
    call_on(f, "a", wa);
    assert_false(part_wait(&g->p[0], 200)); /* a reserved, b waits: nobody answered */
    assert_false(wait_reply(wa, 10));
    assert_int_equal(atomic_load(&g->reserved), 1);

    struct call *rel = call_new(f, RES_RELEASE);
    with_lease(rel, hb->r.rq.view.lease_id);
    call_on(f, "b", rel);
    assert_true(wait_reply(rel, 5000));
    for (int i = 0; i < 2; i++) {
        assert_true(part_wait(&g->p[i], 5000));
        assert_int_equal(g->p[i].r.rq.status, RES_OK_LEASE);
        assert_int_equal(g->p[i].rows_at_reply, 2); /* both durable when either answers */
        assert_memory_equal(g->p[i].r.rq.view.lease_id, g->p[0].r.rq.lease_id, 16);
    }
    assert_true(g->p[0].r.rq.view.token != g->p[1].r.rq.view.token);
    assert_false(wait_reply(wa, 100)); /* behind the set's lease on a */
    assert_int_equal(store_backlog(f->store), 0);

    struct call *ra = call_new(f, RES_RELEASE);
    with_lease(ra, g->p[0].r.rq.view.lease_id);
    call_on(f, "a", ra);
    assert_true(wait_reply(ra, 5000));
    assert_true(wait_reply(wa, 5000));
    assert_int_equal(wa->r.rq.status, RES_OK_LEASE);
    call_free(hb);
    call_free(rel);
    call_free(ra);
    call_free(wa);
    group_free(g);
    close_fixture(f);
}

/* ---- the coordinator (actors/multi.h) ---- */

struct set {
    struct ra_multi *m;
    sem_t done;
};

static void set_done(struct ra_multi *m)
{
    sem_post(&((struct set *)m->arg)->done);
}

static struct set *set_start(struct fixture *f, const char *a, const char *b, uint64_t wait_ms,
                             uint64_t first_id)
{
    struct set *s = calloc(1, sizeof *s);
    assert_non_null(s);
    sem_init(&s->done, 0, 0);
    const char *names[2] = {a, b};
    size_t lens[2] = {strlen(a), strlen(b)};
    struct res_req t = {.op = RES_ACQUIRE, .ttl_ms = 30000, .wait_ms = wait_ms};
    t.owner = mx_str_new("set", 3);
    t.has_lease_id = true;
    assert_int_equal(mx_uuid_random(t.lease_id), 0);
    s->m = ra_multi_new(f->rt, f->store, names, lens, 2, &t, first_id, set_done, s);
    mx_str_unref(t.owner);
    assert_non_null(s->m);
    ra_multi_start(s->m, &f->domain);
    return s;
}

static bool set_wait(struct set *s, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (sem_timedwait(&s->done, &ts) != 0)
        if (errno != EINTR)
            return false;
    return true;
}

static void set_free(struct set *s)
{
    ra_multi_free(s->m);
    sem_destroy(&s->done);
    free(s);
}

static void release_on(struct fixture *f, const char *name, const uint8_t id[16])
{
    struct call *c = with_lease(call_new(f, RES_RELEASE), id);
    call_on(f, name, c);
    assert_true(wait_reply(c, 5000));
    assert_int_equal(c->r.rq.status, RES_OK_RELEASED);
    call_free(c);
}

/* Two sets naming the same resources in opposite orders, both waiting behind a holder of
 * each: no deadlock. The one that arrived first is granted both when the holders leave; the
 * other, both, when it releases. */
static void sets_in_opposite_orders_do_not_deadlock(void **state)
{
    (void)state;
    struct fixture *f = open_fixture(0);
    struct call *ha = call_on(f, "x", call_new(f, RES_ACQUIRE));
    struct call *hb = call_on(f, "y", call_new(f, RES_ACQUIRE));
    assert_true(wait_reply(ha, 5000) && wait_reply(hb, 5000));
    struct set *s1 = set_start(f, "x", "y", 20000, 5000);
    struct set *s2 = set_start(f, "y", "x", 20000, 6000);
    assert_false(set_wait(s1, 200));
    release_on(f, "y", hb->r.rq.view.lease_id); /* y free: s1 reserves it, s2 waits */
    assert_false(set_wait(s1, 200));
    release_on(f, "x", ha->r.rq.view.lease_id);
    assert_true(set_wait(s1, 5000));
    for (int i = 0; i < 2; i++)
        assert_int_equal(s1->m->parts[i].req.rq.status, RES_OK_LEASE);
    assert_false(set_wait(s2, 200));
    release_on(f, "x", s1->m->parts[0].req.rq.view.lease_id);
    assert_false(set_wait(s2, 200)); /* y is still s1's */
    release_on(f, "y", s1->m->parts[1].req.rq.view.lease_id);
    assert_true(set_wait(s2, 5000));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(s2->m->parts[i].req.rq.status, RES_OK_LEASE);
        assert_true(s2->m->parts[i].req.rq.view.token > s1->m->parts[1 - i].req.rq.view.token);
    }
    call_free(ha);
    call_free(hb);
    set_free(s1);
    set_free(s2);
    close_fixture(f);
}

/* wait_ms 0 with one of the two held: lease_held on that part, the other dropped, and
 * nothing granted; a client that hangs up while its set waits leaves every queue, its
 * reserved place given to the next waiter. */
static void a_refused_or_abandoned_set_takes_nothing(void **state)
{
    (void)state;
    struct fixture *f = open_fixture(0);
    struct call *hb = call_on(f, "q", call_new(f, RES_ACQUIRE));
    assert_true(wait_reply(hb, 5000));
    struct set *s = set_start(f, "p", "q", 0, 7000);
    assert_true(set_wait(s, 5000));
    assert_int_equal(s->m->parts[1].req.rq.status, RES_ERR_HELD);
    assert_int_equal(s->m->parts[0].req.rq.status, RES_GONE);
    struct call *g = call_on(f, "p", call_new(f, RES_GET));
    assert_true(wait_reply(g, 5000));
    assert_false(g->r.rq.view.held);
    set_free(s);

    s = set_start(f, "p", "q", 20000, 8000); /* p reserved, q waits */
    struct call *w = call_new(f, RES_ACQUIRE);
    w->r.rq.wait_ms = 20000;
    call_on(f, "p", w);
    assert_false(wait_reply(w, 200));
    ra_multi_hangup(s->m);
    assert_true(set_wait(s, 5000));
    for (int i = 0; i < 2; i++)
        assert_int_equal(s->m->parts[i].req.rq.status, RES_GONE);
    assert_true(wait_reply(w, 5000));
    assert_int_equal(w->r.rq.status, RES_OK_LEASE);
    call_free(hb);
    call_free(g);
    call_free(w);
    set_free(s);

    /* A grant that cannot be made when the set commits (here the restore grace): none is
     * made, both parts are answered unavailable, and neither resource is held after. */
    atomic_store(&f->domain.grace_until_ns, mx_mono_ns() + 60000 * MX_NS_PER_MS);
    s = set_start(f, "g1", "g2", 1000, 9000);
    assert_true(set_wait(s, 5000));
    for (int i = 0; i < 2; i++)
        assert_int_equal(s->m->parts[i].req.rq.status, RES_ERR_UNAVAILABLE);
    atomic_store(&f->domain.grace_until_ns, 0);
    for (int i = 0; i < 2; i++) {
        struct call *gi = call_on(f, i ? "g2" : "g1", call_new(f, RES_GET));
        assert_true(wait_reply(gi, 5000));
        assert_false(gi->r.rq.view.held);
        call_free(gi);
    }
    set_free(s);
    close_fixture(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(answers_come_after_their_change_is_durable),
    cmocka_unit_test(the_parts_of_a_set_are_granted_in_one_commit),
    cmocka_unit_test(sets_in_opposite_orders_do_not_deadlock),
    cmocka_unit_test(a_refused_or_abandoned_set_takes_nothing),
    cmocka_unit_test(waiters_are_granted_in_order),
    cmocka_unit_test(a_closed_write_gate_changes_nothing),
    cmocka_unit_test(a_failed_commit_is_answered_unavailable_and_forgotten),
    cmocka_unit_test(a_reactivated_resource_reads_its_lease_from_the_store),
};
MX_TEST_MAIN(tests)
