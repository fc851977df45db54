/*
 * The store's hand-over to the shipping hook (the blob mirror): which waits reach it, and
 * with which record they depend on. A sync mirror answers a wait only once that record is
 * in the container, so every wait that may depend on a shipped record must reach the hook,
 * in whichever batch it lands. Against a real SQLite file in a temporary directory.
 */
#include "testutil.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "common/str.h"
#include "persistence/store.h"

struct hook {
    sem_t entered, go;
    bool block_first;           /* the first call waits for `go`: the writer is busy meanwhile */
    atomic_int calls, finished; /* hook calls begun and ended */
    size_t recs[8], waits[8];
    uint64_t wait_seq[8];
    struct store_wait *held[8]; /* waits the hook took */
    size_t nheld;
};

static bool ship(void *ctx, struct store_rec *recs, struct store_wait *waits)
{
    struct hook *h = ctx;
    int call = atomic_fetch_add(&h->calls, 1);
    if (call == 0 && h->block_first) {
        sem_post(&h->entered);
        sem_wait(&h->go);
    }
    size_t nr = 0, nw = 0;
    while (recs) {
        struct store_rec *next = store_next_rec(recs);
        store_rec_free(recs);
        recs = next;
        nr++;
    }
    for (struct store_wait *w = waits; w; w = store_next_wait(w)) {
        if (call < 8 && nw == 0)
            h->wait_seq[call] = store_wait_seq(w);
        if (h->nheld < 8)
            h->held[h->nheld++] = w;
        nw++;
    }
    if (call < 8) {
        h->recs[call] = nr;
        h->waits[call] = nw;
    }
    atomic_fetch_add(&h->finished, 1);
    return true; /* as a sync mirror: the hook completes the waits */
}

struct waiter {
    struct store_wait w;
    atomic_int status; /* -1 until done */
    pthread_t thread;  /* the thread it was completed on */
};

static void on_done(struct store_wait *w, int status)
{
    ((struct waiter *)w)->thread = pthread_self();
    atomic_store(&((struct waiter *)w)->status, status);
}

static struct store_rec *rec_token(const char *name, uint64_t token)
{
    struct store_row row;
    memset(&row, 0, sizeof row);
    row.index = 1;
    row.has_lease = row.held = true;
    row.token = token;
    row.ttl_ms = 10000;
    row.deadline_ms = 1;
    struct store_rec *r = store_rec_new(name, strlen(name), &row);
    assert_non_null(r);
    return r;
}

static struct store_rec *rec(const char *name)
{
    return rec_token(name, 1);
}

static struct store *open_store(char *dir, struct hook *h, uint64_t fail_first)
{
    strcpy(dir, "/tmp/mutexd-store-XXXXXX");
    assert_non_null(mkdtemp(dir));
    struct store_config cfg = {.dir = dir,
                               .ship = h ? ship : NULL, /* no hook: nothing shipped */
                               .ship_ctx = h,
                               .fault_commit_first = fail_first,
                               .fault_commit_count = fail_first ? 1 : 0};
    struct store *s = NULL;
    char err[256];
    assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
    return s;
}

static void close_store(struct store *s, char *dir)
{
    store_close(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void wait_calls(struct hook *h, int n)
{
    for (int i = 0; i < 5000 && atomic_load(&h->finished) < n; i++)
        mx_sleep_ms(1);
    assert_int_equal(atomic_load(&h->finished), n);
    assert_int_equal(atomic_load(&h->calls), n);
}

/* The record was committed and shipped before the wait came: the writer is idle, and the
 * wait goes to the hook alone, with the record it depends on. */
static void an_idle_wait_goes_to_the_hook(void **state)
{
    (void)state;
    struct hook h = {0};
    char dir[64];
    struct store *s = open_store(dir, &h, 0);
    uint64_t seq = store_submit(s, rec("a"), store_epoch(s));
    assert_true(seq > 0);
    wait_calls(&h, 1);
    for (int i = 0; i < 5000 && !store_seq_done(s, seq); i++)
        mx_sleep_ms(1);
    struct waiter w = {.w.done = on_done, .status = -1};
    store_wait(s, &w.w, store_epoch(s), seq);
    wait_calls(&h, 2);
    assert_int_equal(h.recs[1], 0);
    assert_int_equal(h.waits[1], 1);
    assert_int_equal(h.wait_seq[1], seq);
    assert_int_equal(atomic_load(&w.status), -1); /* the hook has it, not answered */
    h.held[0]->done(h.held[0], STORE_OK);
    assert_int_equal(atomic_load(&w.status), STORE_OK);
    close_store(s, dir);
}

/* The wait came while the writer was busy with its record: it lands in the next batch,
 * which has no records, and still goes to the hook. */
static void a_wait_behind_its_record_goes_to_the_hook(void **state)
{
    (void)state;
    struct hook h = {.block_first = true};
    sem_init(&h.entered, 0, 0);
    sem_init(&h.go, 0, 0);
    char dir[64];
    struct store *s = open_store(dir, &h, 0);
    uint64_t seq = store_submit(s, rec("a"), store_epoch(s));
    sem_wait(&h.entered); /* the writer is in the hook with the record's batch */
    struct waiter w = {.w.done = on_done, .status = -1};
    store_wait(s, &w.w, store_epoch(s), seq);
    sem_post(&h.go);
    wait_calls(&h, 2);
    assert_int_equal(h.recs[0], 1);
    assert_int_equal(h.waits[0], 0);
    assert_int_equal(h.recs[1], 0);
    assert_int_equal(h.waits[1], 1);
    assert_int_equal(h.wait_seq[1], seq);
    assert_int_equal(atomic_load(&w.status), -1);
    h.held[0]->done(h.held[0], STORE_OK);
    close_store(s, dir);
    sem_destroy(&h.entered);
    sem_destroy(&h.go);
}

/* A wait whose batch failed to commit, or whose author's state is older than a failure,
 * fails at once and never reaches the hook. */
static void a_failed_wait_does_not_reach_the_hook(void **state)
{
    (void)state;
    struct hook h = {0};
    char dir[64];
    struct store *s = open_store(dir, &h, 1); /* the first commit fails */
    uint64_t epoch = store_epoch(s);
    struct waiter w1 = {.w.done = on_done, .status = -1};
    uint64_t seq = store_submit(s, rec("a"), epoch);
    store_wait(s, &w1.w, epoch, seq);
    for (int i = 0; i < 5000 && atomic_load(&w1.status) == -1; i++)
        mx_sleep_ms(1);
    assert_int_equal(atomic_load(&w1.status), STORE_EFAIL);
    assert_true(store_epoch(s) != epoch);
    /* Idle now: an answer computed in the old epoch fails too. */
    struct waiter w2 = {.w.done = on_done, .status = -1};
    store_wait(s, &w2.w, epoch, seq);
    assert_int_equal(atomic_load(&w2.status), STORE_EFAIL);
    assert_int_equal(atomic_load(&h.calls), 0);
    close_store(s, dir);
}

/* The high-water marks read at open are the floors of fencing tokens and indexes: a read
 * that fails must fail the open, never leave a floor at 0 (tokens would be handed out
 * again). Each of the reads is failed in turn through the fault seam. */
static void a_failed_high_water_read_fails_the_open(void **state)
{
    (void)state;
    char dir[64] = "/tmp/mutexd-store-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct store_config cfg = {.dir = dir};
    struct store *s = NULL;
    char err[256];
    assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
    uint64_t seq = store_submit(s, rec_token("a", 7), store_epoch(s));
    for (int i = 0; i < 5000 && !store_seq_done(s, seq); i++)
        mx_sleep_ms(1);
    assert_true(store_seq_done(s, seq));
    store_close(s);

    for (uint64_t k = 1; k <= 6; k++) {
        struct store_config bad = {.dir = dir, .fault_open_read = k};
        s = NULL;
        err[0] = '\0';
        assert_int_not_equal(store_open(&s, &bad, err, sizeof err), 0);
        assert_null(s);
        assert_non_null(strstr(err, "cannot read"));
    }
    assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
    assert_int_equal(store_token_hwm(s), 7);
    close_store(s, dir);
}

static struct store_rec *rec_full(const char *name, uint64_t index, uint64_t token, bool lease)
{
    struct store_row row;
    memset(&row, 0, sizeof row);
    row.index = index;
    row.has_lease = row.held = lease;
    row.token = token;
    row.ttl_ms = 15000;
    row.acquired_at_ms = 1795000000000;
    row.renewed_at_ms = 1795000001000;
    row.deadline_ms = 1795000016000;
    for (int i = 0; i < 16; i++)
        row.lease_id[i] = (uint8_t)(index + (uint64_t)i);
    row.owner = mx_str_new("host-a:1", 8);
    row.metadata = lease ? mx_str_new("{\"a\":1}", 7) : NULL;
    struct store_rec *r = store_rec_new(name, strlen(name), &row);
    store_row_clear(&row);
    assert_non_null(r);
    return r;
}

static void wait_done(struct store *s, uint64_t seq)
{
    for (int i = 0; i < 5000 && !store_seq_done(s, seq); i++)
        mx_sleep_ms(1);
    assert_true(store_seq_done(s, seq));
}

/* Group commit: what is submitted while the writer is busy is committed as one batch, in
 * submission order, numbered consecutively. */
static void records_submitted_meanwhile_commit_as_one_batch(void **state)
{
    (void)state;
    struct hook h = {.block_first = true};
    sem_init(&h.entered, 0, 0);
    sem_init(&h.go, 0, 0);
    char dir[64];
    struct store *s = open_store(dir, &h, 0);
    uint64_t epoch = store_epoch(s);
    uint64_t first = store_submit(s, rec("first"), epoch);
    sem_wait(&h.entered); /* the writer ships the first batch and waits */
    uint64_t last = 0;
    char name[16];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "r%d", i);
        last = store_submit(s, rec(name), epoch);
    }
    assert_int_equal(last, first + 5);
    assert_int_equal(store_backlog(s), 5);
    sem_post(&h.go);
    wait_calls(&h, 2);
    assert_int_equal(h.recs[0], 1);
    assert_int_equal(h.recs[1], 5);
    wait_done(s, last);
    assert_int_equal(store_backlog(s), 0);
    assert_int_equal(store_commit_seq(s), 6);
    struct store_row row;
    assert_int_equal(store_get(s, "r4", 2, &row), STORE_OK);
    store_row_clear(&row);
    close_store(s, dir);
    sem_destroy(&h.entered);
    sem_destroy(&h.go);
}

/* A commit that fails is rolled back whole: none of its rows is there, its waits fail, the
 * store says why, and the next commit succeeds. */
static void a_failed_commit_rolls_back_and_the_next_succeeds(void **state)
{
    (void)state;
    char dir[64], why[128];
    struct store *s = open_store(dir, NULL, 1);
    uint64_t epoch = store_epoch(s);
    struct waiter w = {.w.done = on_done, .status = -1};
    uint64_t seq = store_submit(s, rec_full("a", 1, 5, true), epoch);
    store_wait(s, &w.w, epoch, seq);
    for (int i = 0; i < 5000 && atomic_load(&w.status) == -1; i++)
        mx_sleep_ms(1);
    assert_int_equal(atomic_load(&w.status), STORE_EFAIL);
    assert_false(store_healthy(s, why, sizeof why));
    assert_true(why[0] != '\0');
    struct store_row row;
    assert_int_equal(store_get(s, "a", 1, &row), STORE_NOTFOUND);

    epoch = store_epoch(s);
    struct waiter w2 = {.w.done = on_done, .status = -1};
    seq = store_submit(s, rec_full("b", 2, 6, true), epoch);
    store_wait(s, &w2.w, epoch, seq);
    for (int i = 0; i < 5000 && atomic_load(&w2.status) == -1; i++)
        mx_sleep_ms(1);
    assert_int_equal(atomic_load(&w2.status), STORE_OK);
    assert_true(store_healthy(s, why, sizeof why));
    assert_int_equal(store_get(s, "b", 1, &row), STORE_OK);
    assert_int_equal(row.token, 6);
    store_row_clear(&row);
    assert_int_equal(store_get(s, "a", 1, &row), STORE_NOTFOUND);
    close_store(s, dir);
}

/* What was committed is what a reopened store reads: rows with every field, deleted rows
 * gone, and the high-water marks that keep tokens and indexes from going back. */
static void a_reopened_store_has_every_committed_row_and_mark(void **state)
{
    (void)state;
    char dir[64] = "/tmp/mutexd-store-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct store_config cfg = {.dir = dir};
    struct store *s = NULL;
    char err[256];
    assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
    assert_true(store_created(s));
    uint64_t epoch = store_epoch(s);
    store_submit(s, rec_full("jobs/a", 1, 3, true), epoch);
    store_submit(s, rec_full("jobs/b", 2, 4, true), epoch);
    wait_done(s, store_submit(s, rec_full("jobs/b", 3, 0, false), epoch)); /* deleted */
    uint64_t commits = store_commit_seq(s);
    store_close(s);

    s = NULL;
    assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
    assert_false(store_created(s));
    assert_int_equal(store_token_hwm(s), 4);
    assert_int_equal(store_index_hwm(s), 3);
    assert_true(store_index_floor(s) >= 2);
    assert_int_equal(store_commit_seq(s), commits);
    struct store_row row;
    assert_int_equal(store_get(s, "jobs/a", 6, &row), STORE_OK);
    assert_int_equal(row.index, 1);
    assert_true(row.has_lease && row.held);
    assert_int_equal(row.token, 3);
    assert_int_equal(row.ttl_ms, 15000);
    assert_int_equal(row.acquired_at_ms, 1795000000000);
    assert_int_equal(row.renewed_at_ms, 1795000001000);
    assert_int_equal(row.deadline_ms, 1795000016000);
    assert_int_equal(row.lease_id[15], 16);
    assert_string_equal(row.owner->s, "host-a:1");
    assert_string_equal(row.metadata->s, "{\"a\":1}");
    store_row_clear(&row);
    assert_int_equal(store_get(s, "jobs/b", 6, &row), STORE_NOTFOUND);
    close_store(s, dir);
}

/* A request alone commits its own change: between store_batch_begin() and store_batch_end()
 * nothing wakes the writer, and the commit and the wait's completion happen on the
 * caller's thread, before store_batch_end() returns. */
static void a_deferred_change_is_committed_on_the_callers_thread(void **state)
{
    (void)state;
    char dir[64];
    struct store *s = open_store(dir, NULL, 0);
    mx_sleep_ms(50); /* the writer, just started, waits for work by now */
    for (int i = 0; i < 3; i++) {
        uint64_t epoch = store_epoch(s);
        struct waiter w = {.w.done = on_done, .status = -1};
        struct store_batch b;
        store_batch_begin(s, &b);
        uint64_t seq = store_submit_in(s, rec_token("a", (uint64_t)i + 1), epoch, &b);
        store_wait_in(s, &w.w, epoch, seq, &b);
        mx_sleep_ms(20); /* a writer woken anyway would have committed it by now */
        assert_false(store_seq_done(s, seq));
        assert_int_equal(atomic_load(&w.status), -1);
        store_batch_end(&b, true);
        assert_int_equal(atomic_load(&w.status), STORE_OK);
        assert_true(pthread_equal(w.thread, pthread_self()));
        struct store_row row;
        assert_int_equal(store_get(s, "a", 1, &row), STORE_OK);
        assert_int_equal(row.token, (uint64_t)i + 1);
        store_row_clear(&row);
    }
    close_store(s, dir);
}

/* Not here (others would join the commit): the writer takes what was deferred. */
static void a_deferred_change_not_committed_here_goes_to_the_writer(void **state)
{
    (void)state;
    char dir[64];
    struct store *s = open_store(dir, NULL, 0);
    uint64_t epoch = store_epoch(s);
    struct waiter w = {.w.done = on_done, .status = -1};
    struct store_batch b;
    store_batch_begin(s, &b);
    store_wait_in(s, &w.w, epoch, store_submit_in(s, rec("a"), epoch, &b), &b);
    store_batch_end(&b, false);
    for (int i = 0; i < 5000 && atomic_load(&w.status) == -1; i++)
        mx_sleep_ms(1);
    assert_int_equal(atomic_load(&w.status), STORE_OK);
    assert_false(pthread_equal(w.thread, pthread_self()));
    close_store(s, dir);
}

/* A commit under way elsewhere: the caller leaves its deferred change queued, and whoever
 * is committing sees it afterwards; nothing is left behind, and batches stay in order. */
static void a_deferred_change_behind_a_busy_writer_is_committed_next(void **state)
{
    (void)state;
    struct hook h = {.block_first = true};
    sem_init(&h.entered, 0, 0);
    sem_init(&h.go, 0, 0);
    char dir[64];
    struct store *s = open_store(dir, &h, 0);
    uint64_t epoch = store_epoch(s);
    uint64_t first = store_submit(s, rec("a"), epoch);
    sem_wait(&h.entered); /* the writer is busy with the first batch */
    struct waiter w = {.w.done = on_done, .status = -1};
    struct store_batch b;
    store_batch_begin(s, &b);
    uint64_t seq = store_submit_in(s, rec("b"), epoch, &b);
    store_wait_in(s, &w.w, epoch, seq, &b);
    store_batch_end(&b, true); /* busy: returns at once, nothing committed here */
    assert_false(store_seq_done(s, seq));
    sem_post(&h.go);
    wait_calls(&h, 2);
    assert_true(store_seq_done(s, first));
    assert_true(store_seq_done(s, seq));
    assert_int_equal(h.recs[0], 1);
    assert_int_equal(h.recs[1], 1);
    assert_int_equal(h.waits[1], 1);
    assert_int_equal(h.wait_seq[1], seq);
    h.held[0]->done(h.held[0], STORE_OK);
    assert_int_equal(atomic_load(&w.status), STORE_OK);
    close_store(s, dir);
    sem_destroy(&h.entered);
    sem_destroy(&h.go);
}

/* A commit made on the caller's thread fails: the writer, asleep until then, must still
 * probe the disk, so that the store is healthy again with no traffic at all. */
static void a_failed_commit_here_leaves_the_writer_probing(void **state)
{
    (void)state;
    char dir[64], why[256];
    struct store *s = open_store(dir, NULL, 1);
    mx_sleep_ms(50); /* the writer waits for work */
    uint64_t epoch = store_epoch(s);
    struct waiter w = {.w.done = on_done, .status = -1};
    struct store_batch b;
    store_batch_begin(s, &b);
    store_wait_in(s, &w.w, epoch, store_submit_in(s, rec("a"), epoch, &b), &b);
    store_batch_end(&b, true);
    assert_int_equal(atomic_load(&w.status), STORE_EFAIL);
    assert_false(store_healthy(s, why, sizeof why));
    for (int i = 0; i < 5000 && !store_healthy(s, why, sizeof why); i++)
        mx_sleep_ms(1);
    assert_true(store_healthy(s, why, sizeof why)); /* the probe, about 1 s later */
    close_store(s, dir);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(an_idle_wait_goes_to_the_hook),
    cmocka_unit_test(a_wait_behind_its_record_goes_to_the_hook),
    cmocka_unit_test(a_failed_wait_does_not_reach_the_hook),
    cmocka_unit_test(a_failed_high_water_read_fails_the_open),
    cmocka_unit_test(records_submitted_meanwhile_commit_as_one_batch),
    cmocka_unit_test(a_failed_commit_rolls_back_and_the_next_succeeds),
    cmocka_unit_test(a_reopened_store_has_every_committed_row_and_mark),
    cmocka_unit_test(a_deferred_change_is_committed_on_the_callers_thread),
    cmocka_unit_test(a_deferred_change_not_committed_here_goes_to_the_writer),
    cmocka_unit_test(a_deferred_change_behind_a_busy_writer_is_committed_next),
    cmocka_unit_test(a_failed_commit_here_leaves_the_writer_probing),
};
MX_TEST_MAIN(tests)
