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

#include "actors/resource_actor.h"
#include "common/str.h"

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
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(answers_come_after_their_change_is_durable),
    cmocka_unit_test(waiters_are_granted_in_order),
    cmocka_unit_test(a_closed_write_gate_changes_nothing),
    cmocka_unit_test(a_failed_commit_is_answered_unavailable_and_forgotten),
    cmocka_unit_test(a_reactivated_resource_reads_its_lease_from_the_store),
};
MX_TEST_MAIN(tests)
