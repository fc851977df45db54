/*
 * The store's hand-over to the shipping hook (the blob mirror): which waits reach it, and
 * with which record they depend on. A sync mirror answers a wait only once that record is
 * in the container, so every wait that may depend on a shipped record must reach the hook,
 * in whichever batch it lands. Against a real SQLite file in a temporary directory.
 */
#include "tests/unit/testutil.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/clock.h"
#include "common/str.h"
#include "common/uuid.h"
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

/* A lease with `token`, its id made of `seed`. */
static struct store_lease lease_of(uint64_t token, uint8_t seed, bool held)
{
    struct store_lease l;
    memset(&l, 0, sizeof l);
    for (int i = 0; i < 16; i++)
        l.lease_id[i] = (uint8_t)(seed + i);
    l.held = held;
    l.token = token;
    l.ttl_ms = 15000;
    l.acquired_at_ms = 1795000000000;
    l.renewed_at_ms = 1795000001000;
    l.deadline_ms = 1795000016000;
    l.owner = mx_str_new("host-a:1", 8);
    return l;
}

static struct store_rec *rec_token(const char *name, uint64_t token)
{
    struct store_rec *r = store_rec_new(name, strlen(name), 1, 1, 1, 0);
    assert_non_null(r);
    r->put[0] = lease_of(token, 1, true);
    r->put[0].deadline_ms = 1;
    r->put[0].ttl_ms = 10000;
    return r;
}

static struct store_rec *rec(const char *name)
{
    return rec_token(name, 1);
}

static struct store *open_store(char *dir, struct hook *h, uint64_t fail_first)
{
    mx_temp_dir(dir, "store");
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
    if (s)
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
    char dir[64];
    mx_temp_dir(dir, "store");
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

/* A resource with one lease (`lease`), or dropped (!lease). */
static struct store_rec *rec_full(const char *name, uint64_t index, uint64_t token, bool lease)
{
    struct store_rec *r = store_rec_new(name, strlen(name), index, 1, lease ? 1 : 0, 0);
    assert_non_null(r);
    r->drop = !lease;
    if (lease) {
        r->put[0] = lease_of(token, (uint8_t)index, true);
        r->put[0].metadata = mx_str_new("{\"a\":1}", 7);
    }
    return r;
}

/* The store's database file, opened beside it (the store closed or not). */
static sqlite3 *open_store_file(const char *dir)
{
    char path[128];
    snprintf(path, sizeof path, "%s/mutexd.db", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    return db;
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

/* A group (the grant of several resources at once): committed in one transaction and
 * shipped in one batch, numbered one after another; refused whole when one of its records
 * was made from a state read before a failed commit. */
static void a_group_is_committed_or_refused_whole(void **state)
{
    (void)state;
    struct hook h = {0};
    char dir[64];
    struct store *s = open_store(dir, &h, 1); /* the first commit fails */
    uint64_t old = store_epoch(s);
    struct waiter w = {.w.done = on_done, .status = -1};
    uint64_t seq = store_submit(s, rec("lost"), old);
    store_wait(s, &w.w, old, seq);
    for (int i = 0; i < 5000 && atomic_load(&w.status) == -1; i++)
        mx_sleep_ms(1);
    assert_int_equal(atomic_load(&w.status), STORE_EFAIL);
    uint64_t epoch = store_epoch(s);
    assert_true(epoch != old);
    wait_calls(&h, 0);

    /* One part read its state before the failure: none of the three is written. */
    struct store_rec *a = rec("g/a"), *b = rec("g/b"), *c = rec("g/c");
    store_link_rec(a, b);
    store_link_rec(b, c);
    uint64_t epochs[3] = {epoch, old, epoch};
    seq = store_submit_group(s, a, 3, epochs);
    assert_true(seq > 0);
    wait_done(s, seq);
    struct store_row row;
    assert_int_equal(store_get(s, "g/a", 3, &row), STORE_NOTFOUND);
    assert_int_equal(store_get(s, "g/c", 3, &row), STORE_NOTFOUND);

    /* All read in the store's epoch: all three, in one commit, one shipped batch. */
    int calls = atomic_load(&h.finished);
    a = rec("g/a");
    b = rec("g/b");
    c = rec("g/c");
    store_link_rec(a, b);
    store_link_rec(b, c);
    uint64_t now[3] = {epoch, epoch, epoch};
    uint64_t last = store_submit_group(s, a, 3, now);
    assert_int_equal(last, seq + 3);
    wait_done(s, last);
    wait_calls(&h, calls + 1);
    assert_int_equal(h.recs[calls], 3);
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "g/%c", 'a' + i);
        assert_int_equal(store_get(s, name, 3, &row), STORE_OK);
        store_row_clear(&row);
    }
    close_store(s, dir);
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
    assert_int_equal(row.nleases, 1);
    assert_int_equal(row.leases[0].token, 6);
    store_row_clear(&row);
    assert_int_equal(store_get(s, "a", 1, &row), STORE_NOTFOUND);
    close_store(s, dir);
}

/* What was committed is what a reopened store reads: rows with every field, deleted rows
 * gone, and the high-water marks that keep tokens and indexes from going back. */
static void a_reopened_store_has_every_committed_row_and_mark(void **state)
{
    (void)state;
    char dir[64];
    mx_temp_dir(dir, "store");
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
    assert_int_equal(row.limit, 1);
    assert_int_equal(row.nleases, 1);
    const struct store_lease *l = &row.leases[0];
    assert_true(l->held);
    assert_false(l->shared);
    assert_int_equal(l->token, 3);
    assert_int_equal(l->ttl_ms, 15000);
    assert_int_equal(l->acquired_at_ms, 1795000000000);
    assert_int_equal(l->renewed_at_ms, 1795000001000);
    assert_int_equal(l->deadline_ms, 1795000016000);
    assert_int_equal(l->lease_id[15], 16);
    assert_string_equal(l->owner->s, "host-a:1");
    assert_string_equal(l->metadata->s, "{\"a\":1}");
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
        assert_int_equal(row.leases[0].token, (uint64_t)i + 1);
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

/* ---- several leases ------------------------------------------------------------------ */

static void uuid_of(const char *text, uint8_t out[16])
{
    assert_true(mx_uuid_parse(text, strlen(text), out));
}

static void expect_lease(const struct store_lease *l, const char *id, const char *owner,
                         uint64_t token, uint64_t ttl, int64_t acquired, int64_t renewed,
                         int64_t deadline, bool held, const char *metadata)
{
    uint8_t want[16];
    uuid_of(id, want);
    assert_memory_equal(l->lease_id, want, 16);
    assert_string_equal(l->owner->s, owner);
    assert_int_equal(l->token, token);
    assert_int_equal(l->ttl_ms, ttl);
    assert_int_equal(l->acquired_at_ms, acquired);
    assert_int_equal(l->renewed_at_ms, renewed);
    assert_int_equal(l->deadline_ms, deadline);
    assert_int_equal(l->held, held);
    assert_false(l->shared);
    if (metadata)
        assert_string_equal(l->metadata->s, metadata);
    else
        assert_null(l->metadata);
}

/* The fixtures' folder, beside this file's: tests/fixtures/v1. */
static void fixture_path(char *out, size_t len, const char *name)
{
    const char *file = __FILE__;
    const char *end = strstr(file, "unit/persistence/test_store.c");
    assert_non_null(end);
    snprintf(out, len, "%.*sfixtures/v1/%s", (int)(end - file), file, name);
}

struct seen {
    char names[8][32];
    int64_t deadlines[8];
    struct store_held held[8];
    int n;
};

static void saw_held(void *arg, const char *name, size_t len, const struct store_held *h)
{
    struct seen *x = arg;
    assert_true(x->n < 8 && len < 32);
    memcpy(x->names[x->n], name, len);
    x->names[x->n][len] = '\0';
    x->held[x->n] = *h;
    x->deadlines[x->n++] = h->deadline_ms;
}

static int64_t deadline_of(const struct seen *x, const char *name)
{
    for (int i = 0; i < x->n; i++)
        if (strcmp(x->names[i], name) == 0)
            return x->deadlines[i];
    return -1;
}

/* A data directory of the first release (schema 1, one lease a resource, made by 0.1.0:
 * tests/fixtures/v1) opens migrated, every lease read back as it was: limit 1, exclusive. */
static void a_store_of_the_first_release_is_migrated_whole(void **state)
{
    (void)state;
    char dir[64], src[1024], cmd[1200];
    mx_temp_dir(dir, "store");
    fixture_path(src, sizeof src, "mutexd.db");
    snprintf(cmd, sizeof cmd, "cp '%s' %s/mutexd.db", src, dir);
    assert_int_equal(system(cmd), 0);
    struct store_config cfg = {.dir = dir};
    struct store *s = NULL;
    char err[256];
    for (int pass = 0; pass < 2; pass++) { /* migrated, then as migrated */
        assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
        assert_false(store_created(s));
        assert_int_equal(store_token_hwm(s), 4);
        assert_int_equal(store_index_hwm(s), 7);
        assert_int_equal(store_index_floor(s), 6);
        assert_int_equal(store_commit_seq(s), 7);
        struct store_row row;
        assert_int_equal(store_get(s, "fixture/held", 12, &row), STORE_OK);
        assert_int_equal(row.index, 5);
        assert_int_equal(row.limit, 1);
        assert_int_equal(row.nleases, 1);
        expect_lease(&row.leases[0], "6ccb3e43-0489-4885-ac1c-bf894cffbd13", "worker-1", 1, 3600000,
                     1795635847279, 1795635847288, 1795639447288, true, NULL);
        store_row_clear(&row);
        assert_int_equal(store_get(s, "fixture/expired", 15, &row), STORE_OK);
        assert_int_equal(row.index, 7);
        assert_int_equal(row.limit, 1);
        assert_int_equal(row.nleases, 1);
        expect_lease(&row.leases[0], "0b0c2a6e-5f1d-4a4e-9d3b-2a1f0c9e8d71", "worker-2", 2, 100,
                     1795635847285, 1795635847285, 1795635847385, false, NULL);
        store_row_clear(&row);
        assert_int_equal(store_get(s, "fixture/meta", 12, &row), STORE_OK);
        assert_int_equal(row.index, 3);
        assert_int_equal(row.limit, 1);
        assert_int_equal(row.nleases, 1);
        expect_lease(&row.leases[0], "9a7e54d2-3c21-4f0b-8e6a-5d4c3b2a1f00", "host \"a\" \xc3\xa9",
                     3, 3600000, 1795635847286, 1795635847286, 1795639447286, true,
                     "{\"addr\":\"10.0.0.1:80\",\"n\":[1,2.5,null],\"big\":9007199254740993}");
        store_row_clear(&row);
        assert_int_equal(store_get(s, "fixture/gone", 12, &row), STORE_NOTFOUND);
        struct seen x = {0};
        assert_int_equal(store_each_held(s, saw_held, &x), STORE_OK);
        assert_int_equal(x.n, 2);
        assert_int_equal(deadline_of(&x, "fixture/held"), 1795639447288);
        assert_int_equal(deadline_of(&x, "fixture/meta"), 1795639447286);
        store_close(s);
        s = NULL;
    }
    close_store(NULL, dir);
}

static void wait_committed(struct store *s, struct store_rec *r)
{
    wait_done(s, store_submit(s, r, store_epoch(s)));
}

/* A record writes its leases and forgets its ids; the row reads back whole, oldest grant
 * first; forgetting the last lease, or a drop, leaves no row and raises the floor. */
static void a_record_puts_and_forgets_leases_of_a_row(void **state)
{
    (void)state;
    char dir[64];
    struct store *s = open_store(dir, NULL, 0);
    struct store_rec *r = store_rec_new("sem", 3, 10, 3, 3, 0);
    r->put[0] = lease_of(30, 3, true);
    r->put[1] = lease_of(10, 1, true);
    r->put[2] = lease_of(20, 2, false);
    r->put[2].shared = true;
    r->put[2].deadline_ms = 1795000000500;
    wait_committed(s, r);
    struct store_row row;
    assert_int_equal(store_get(s, "sem", 3, &row), STORE_OK);
    assert_int_equal(row.index, 10);
    assert_int_equal(row.limit, 3);
    assert_int_equal(row.nleases, 3);
    assert_int_equal(row.leases[0].token, 10);
    assert_int_equal(row.leases[1].token, 20);
    assert_true(row.leases[1].shared && !row.leases[1].held);
    assert_int_equal(row.leases[2].token, 30);
    store_row_clear(&row);

    /* one renewed, one forgotten, one added */
    r = store_rec_new("sem", 3, 11, 3, 2, 1);
    r->put[0] = lease_of(10, 1, true);
    r->put[0].deadline_ms = 1795000099000;
    r->put[1] = lease_of(40, 4, true);
    struct store_lease third = lease_of(30, 3, true);
    memcpy(r->del[0], third.lease_id, 16);
    store_lease_clear(&third);
    wait_committed(s, r);
    assert_int_equal(store_get(s, "sem", 3, &row), STORE_OK);
    assert_int_equal(row.index, 11);
    assert_int_equal(row.nleases, 3);
    assert_int_equal(row.leases[0].token, 10);
    assert_int_equal(row.leases[0].deadline_ms, 1795000099000);
    assert_int_equal(row.leases[1].token, 20);
    assert_int_equal(row.leases[2].token, 40);
    store_row_clear(&row);
    assert_int_equal(store_token_hwm(s), 40);

    /* the earliest deadline of the held ones */
    struct seen x = {0};
    assert_int_equal(store_each_held(s, saw_held, &x), STORE_OK);
    assert_int_equal(x.n, 1);
    assert_int_equal(x.deadlines[0], 1795000016000);
    assert_int_equal(x.held[0].limit, 3); /* and how many, under which limit */
    assert_int_equal(x.held[0].nheld, 2);
    assert_int_equal(x.held[0].nshared, 0);

    /* every lease forgotten: no row */
    r = store_rec_new("sem", 3, 12, 3, 0, 3);
    for (int i = 0; i < 3; i++) {
        struct store_lease l = lease_of(0, (uint8_t)(i == 2 ? 4 : i + 1), false);
        memcpy(r->del[i], l.lease_id, 16);
        store_lease_clear(&l);
    }
    wait_committed(s, r);
    assert_int_equal(store_get(s, "sem", 3, &row), STORE_NOTFOUND);
    assert_int_equal(store_index_floor(s), 12);

    /* a drop */
    wait_committed(s, rec_full("other", 13, 50, true));
    wait_committed(s, rec_full("other", 14, 0, false));
    assert_int_equal(store_get(s, "other", 5, &row), STORE_NOTFOUND);
    assert_int_equal(store_index_floor(s), 14);
    assert_int_equal(store_index_hwm(s), 14);
    close_store(s, dir);
}

struct listed {
    int n;
    char names[4][16];
    uint32_t nleases[4];
};

static void on_listed(void *arg, const char *name, size_t len, struct store_row *row)
{
    struct listed *x = arg;
    assert_true(x->n < 4 && len < 16);
    memcpy(x->names[x->n], name, len);
    x->names[x->n][len] = '\0';
    x->nleases[x->n++] = row->nleases;
    store_row_clear(row);
}

static int on_snap(void *arg, const char *name, size_t len, struct store_row *row)
{
    struct store_import_row *rows = arg;
    int i = 0;
    while (i < 3 && rows[i].name)
        i++;
    assert_true(i < 3);
    rows[i].name = strndup(name, len);
    rows[i].len = len;
    rows[i].row = *row;
    return 0;
}

/* The list shows each resource with a lease held (and in force) once, with every lease;
 * a snapshot has whole rows, and importing it gives them back. */
static void lists_and_snapshots_have_whole_rows(void **state)
{
    (void)state;
    char dir[64];
    struct store *s = open_store(dir, NULL, 0);
    int64_t later = mx_wall_ms() + 3600000;
    struct store_rec *r = store_rec_new("a/readers", 9, 1, 1, 2, 0);
    r->put[0] = lease_of(1, 1, true);
    r->put[1] = lease_of(2, 2, true);
    r->put[0].shared = r->put[1].shared = true;
    r->put[0].deadline_ms = r->put[1].deadline_ms = later;
    wait_committed(s, r);
    r = store_rec_new("a/expired", 9, 2, 1, 1, 0);
    r->put[0] = lease_of(3, 3, false);
    wait_committed(s, r);
    r = store_rec_new("b/sem", 5, 3, 4, 3, 0);
    for (int i = 0; i < 3; i++) {
        r->put[i] = lease_of(4 + (uint64_t)i, (uint8_t)(4 + i), i > 0);
        r->put[i].deadline_ms = later;
    }
    wait_committed(s, r);
    struct listed x = {0};
    assert_int_equal(store_list_held(s, NULL, NULL, 10, on_listed, &x), STORE_OK);
    assert_int_equal(x.n, 2);
    assert_string_equal(x.names[0], "a/readers");
    assert_int_equal(x.nleases[0], 2);
    assert_string_equal(x.names[1], "b/sem");
    assert_int_equal(x.nleases[1], 3);
    memset(&x, 0, sizeof x);
    assert_int_equal(store_list_held(s, "b/", NULL, 10, on_listed, &x), STORE_OK);
    assert_int_equal(x.n, 1);
    memset(&x, 0, sizeof x);
    assert_int_equal(store_list_held(s, NULL, NULL, 1, on_listed, &x), STORE_OK);
    assert_int_equal(x.n, 1);
    assert_int_equal(x.nleases[0], 2);

    struct store_import_row rows[3] = {{0}};
    struct store_marks marks;
    assert_int_equal(store_snapshot(s, on_snap, rows, &marks), STORE_OK);
    assert_string_equal(rows[0].name, "a/expired");
    assert_int_equal(rows[0].row.nleases, 1);
    assert_false(rows[0].row.leases[0].held);
    assert_string_equal(rows[1].name, "a/readers");
    assert_int_equal(rows[1].row.nleases, 2);
    assert_true(rows[1].row.leases[1].shared);
    assert_string_equal(rows[2].name, "b/sem");
    assert_int_equal(rows[2].row.limit, 4);
    assert_int_equal(rows[2].row.nleases, 3);
    assert_int_equal(rows[2].row.leases[0].token, 4);
    assert_int_equal(marks.token_hwm, 6);
    assert_int_equal(marks.index_hwm, 3);
    assert_int_equal(marks.commit_seq, 3);
    for (int i = 0; i < 3; i++) {
        free((char *)rows[i].name);
        store_row_clear(&rows[i].row);
    }
    memset(rows, 0, sizeof rows);
    close_store(s, dir);

    /* import two whole rows, read them back */
    s = open_store(dir, NULL, 0);
    struct store_row sem = {.index = 7, .limit = 4};
    for (int i = 0; i < 3; i++) {
        struct store_lease l = lease_of(10 + (uint64_t)i, (uint8_t)(10 + i), true);
        assert_int_equal(store_row_add(&sem, &l), 0);
        store_lease_clear(&l);
    }
    struct store_import_row in[2] = {{.name = "sem", .len = 3, .row = sem},
                                     {.name = "none", .len = 4, .row = {.index = 3}}};
    struct store_marks m = {.commit_seq = 5, .token_hwm = 20, .index_hwm = 8, .index_floor = 3};
    char err[128];
    assert_int_equal(store_import(s, in, 2, &m, err, sizeof err), STORE_OK);
    store_row_clear(&sem);
    struct store_row row;
    assert_int_equal(store_get(s, "sem", 3, &row), STORE_OK);
    assert_int_equal(row.limit, 4);
    assert_int_equal(row.nleases, 3);
    assert_int_equal(row.leases[2].token, 12);
    store_row_clear(&row);
    assert_int_equal(store_get(s, "none", 4, &row), STORE_NOTFOUND);
    assert_int_equal(store_token_hwm(s), 20);
    close_store(s, dir);
}

/* A lease read from another server's container never ends before its holder's own
 * deadline, whatever the two clocks say: it gets its whole TTL again, and one whose
 * written deadline has passed gets at least the failover grace; spread by token over up
 * to a tenth of its TTL, 2 s at most. A lease not held is left alone. */
static void rearm_never_shortens_a_lease(void **state)
{
    (void)state;
    char dir[64];
    struct store *s = open_store(dir, NULL, 0);
    const int64_t now = 1700000000000;
    struct {
        const char *name;
        int64_t written;
        uint64_t ttl, token;
        bool held;
        int64_t want;
    } c[] = {
        /* 4 s left of 10 by the other clock: 10 s from now, + token % 1001. */
        {"left", now + 4000, 10000, 1500, true, now + 10000 + 499},
        /* Written by a clock 5 s ahead: still 10 s, not 15. */
        {"ahead", now + 15000, 10000, 1000, true, now + 10000 + 1000},
        /* Passed by this clock (a clock behind, or no active for a while): the grace. */
        {"passed", now - 2000, 10000, 7, true, now + 15000 + 7},
        /* A TTL longer than the grace keeps its TTL; the spread stops at 2 s. */
        {"long", now - 2000, 60000, 2001 + 5, true, now + 60000 + 5},
        /* Not held: untouched. */
        {"gone", now - 2000, 10000, 9, false, now - 2000},
    };
    struct store_import_row in[5] = {{0}};
    for (int i = 0; i < 5; i++) {
        struct store_lease l = lease_of(c[i].token, (uint8_t)(20 * i), c[i].held);
        l.deadline_ms = c[i].written;
        l.ttl_ms = c[i].ttl;
        in[i] = (struct store_import_row){.name = c[i].name, .len = strlen(c[i].name)};
        in[i].row = (struct store_row){.index = 1, .limit = 1};
        assert_int_equal(store_row_add(&in[i].row, &l), 0);
        store_lease_clear(&l);
    }
    struct store_marks m = {.commit_seq = 1, .token_hwm = 3000, .index_hwm = 1};
    char err[128];
    assert_int_equal(store_import(s, in, 5, &m, err, sizeof err), STORE_OK);
    uint64_t n = 0;
    assert_int_equal(store_rearm(s, now, 15000, &n, err, sizeof err), STORE_OK);
    assert_int_equal(n, 4);
    for (int i = 0; i < 5; i++) {
        struct store_row row;
        assert_int_equal(store_get(s, c[i].name, strlen(c[i].name), &row), STORE_OK);
        assert_int_equal(row.leases[0].deadline_ms, c[i].want);
        store_row_clear(&row);
        store_row_clear(&in[i].row);
    }
    close_store(s, dir);
}

/* Renewing one lease of a semaphore of a thousand writes that lease alone (counted by a
 * trigger on the file, outside the store). */
static void one_renewal_of_a_thousand_holders_writes_one_lease(void **state)
{
    (void)state;
    char dir[64];
    mx_temp_dir(dir, "store");
    struct store_config cfg = {.dir = dir};
    struct store *s = NULL;
    char err[256];
    assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
    struct store_rec *r = store_rec_new("big", 3, 1, 1000, 1000, 0);
    for (uint32_t i = 0; i < 1000; i++) {
        r->put[i] = lease_of(i + 1, 0, true);
        r->put[i].lease_id[0] = (uint8_t)(i >> 8);
        r->put[i].lease_id[1] = (uint8_t)i;
    }
    wait_committed(s, r);
    store_close(s);

    sqlite3 *db = open_store_file(dir);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TABLE writes(n INTEGER); INSERT INTO writes VALUES(0);"
                                  "CREATE TRIGGER w1 AFTER INSERT ON holders BEGIN "
                                  "UPDATE writes SET n = n + 1; END;"
                                  "CREATE TRIGGER w2 AFTER UPDATE ON holders BEGIN "
                                  "UPDATE writes SET n = n + 1; END;"
                                  "CREATE TRIGGER w3 AFTER DELETE ON holders BEGIN "
                                  "UPDATE writes SET n = n + 1; END;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
    r = store_rec_new("big", 3, 2, 1000, 1, 0);
    r->put[0] = lease_of(500, 0, true);
    r->put[0].lease_id[0] = (uint8_t)(499 >> 8);
    r->put[0].lease_id[1] = (uint8_t)499;
    r->put[0].deadline_ms = 1795000099000;
    wait_committed(s, r);
    struct store_row row;
    assert_int_equal(store_get(s, "big", 3, &row), STORE_OK);
    assert_int_equal(row.nleases, 1000);
    assert_int_equal(row.index, 2);
    assert_int_equal(row.leases[499].token, 500);
    assert_int_equal(row.leases[499].deadline_ms, 1795000099000);
    assert_int_equal(row.leases[498].deadline_ms, 1795000016000);
    store_row_clear(&row);
    store_close(s);

    db = open_store_file(dir);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT n FROM writes", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    close_store(NULL, dir);
}

/* One resource as store_each_held() reports it, or as the reference join computes it. */
struct held_entry {
    char name[16];
    size_t len;
    struct store_held h;
};

struct held_list {
    struct held_entry v[512];
    int n;
};

static void collect_held(void *arg, const char *name, size_t len, const struct store_held *h)
{
    struct held_list *l = arg;
    assert_true(l->n < 512 && len <= sizeof l->v[0].name);
    memcpy(l->v[l->n].name, name, len);
    l->v[l->n].len = len;
    l->v[l->n++].h = *h;
}

static int held_entry_cmp(const void *a, const void *b)
{
    const struct held_entry *x = a, *y = b;
    int c = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The held leases read for a restart are those of the join of the two tables, resource by
 * resource: names that are prefixes of each other, bytes above 0x7f, resources whose
 * leases are all expired, lease rows whose resource has no row (before, between and after
 * the others), on a seeded random store, against the join itself in SQL. */
static void the_held_leases_read_at_start_are_the_joins(void **state)
{
    (void)state;
    unsigned seed = mx_test_seed();
    srand(seed);
    char dir[64];
    struct store *s = open_store(dir, NULL, 0);
    static const char *const piece[] = {"a", "b", "/", "ab", "\xc3\xa9", "~", "A", "a/"};
    uint64_t token = 0;
    for (int i = 0; i < 300; i++) {
        char name[16];
        size_t len = 0;
        for (int k = 1 + rand() % 4; k > 0; k--) {
            const char *p = piece[rand() % 8];
            memcpy(name + len, p, strlen(p));
            len += strlen(p);
        }
        uint32_t limit = 1 + (uint32_t)(rand() % 4), nput = 1 + (uint32_t)(rand() % limit);
        struct store_rec *r = store_rec_new(name, len, (uint64_t)i + 1, limit, nput, 0);
        assert_non_null(r);
        for (uint32_t j = 0; j < nput; j++) {
            token++;
            r->put[j] = lease_of(token, 0, rand() % 3 != 0);
            memcpy(r->put[j].lease_id, &token, sizeof token);
            r->put[j].shared = limit > 1 && rand() % 2;
            r->put[j].deadline_ms = 1795000000000 + rand() % 100000;
        }
        wait_committed(s, r);
    }
    store_close(s);

    sqlite3 *db = open_store_file(dir);
    assert_int_equal(sqlite3_exec(db,
                                  "INSERT INTO holders (resource, lease_id, owner, token, "
                                  "ttl_ms, acquired_at, renewed_at, deadline, held, shared) "
                                  "VALUES ('!', x'00', 'o', 1, 1, 1, 1, 1, 1, 0), "
                                  "('ab!', x'00', 'o', 1, 1, 1, 1, 1, 1, 0), "
                                  "('\xc3\xa9!', x'00', 'o', 1, 1, 1, 1, 1, 1, 0), "
                                  "(CAST(x'ff' AS TEXT), x'00', 'o', 1, 1, 1, 1, 1, 1, 0);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    static struct held_list want, got;
    want.n = got.n = 0;
    sqlite3_stmt *st;
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT h.resource, min(h.deadline), r.lim, count(*), sum(h.shared) "
                           "FROM holders h JOIN resources r ON r.resource = h.resource "
                           "WHERE h.held = 1 GROUP BY h.resource",
                           -1, &st, NULL),
        SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        struct store_held h = {.deadline_ms = sqlite3_column_int64(st, 1),
                               .limit = (uint32_t)sqlite3_column_int64(st, 2),
                               .nheld = (uint32_t)sqlite3_column_int64(st, 3),
                               .nshared = (uint32_t)sqlite3_column_int64(st, 4)};
        collect_held(&want, (const char *)sqlite3_column_text(st, 0),
                     (size_t)sqlite3_column_bytes(st, 0), &h);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    assert_true(want.n > 50);

    char err[256];
    struct store_config cfg = {.dir = dir};
    assert_int_equal(store_open(&s, &cfg, err, sizeof err), 0);
    uint64_t rows = 0;
    assert_int_equal(store_count_rows(s, &rows), STORE_OK);
    assert_true(rows >= (uint64_t)want.n);
    assert_int_equal(store_each_held(s, collect_held, &got), STORE_OK);
    qsort(want.v, (size_t)want.n, sizeof want.v[0], held_entry_cmp);
    qsort(got.v, (size_t)got.n, sizeof got.v[0], held_entry_cmp);
    assert_int_equal(got.n, want.n);
    for (int i = 0; i < want.n; i++) {
        assert_int_equal(got.v[i].len, want.v[i].len);
        assert_memory_equal(got.v[i].name, want.v[i].name, want.v[i].len);
        assert_int_equal(got.v[i].h.deadline_ms, want.v[i].h.deadline_ms);
        assert_int_equal(got.v[i].h.limit, want.v[i].h.limit);
        assert_int_equal(got.v[i].h.nheld, want.v[i].h.nheld);
        assert_int_equal(got.v[i].h.nshared, want.v[i].h.nshared);
    }
    close_store(s, dir);
}

/* Pages a commit wrote: the frames the WAL grew by. */
static long wal_frames(const char *dir, long *size)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "%s/mutexd.db-wal", dir);
    assert_int_equal(stat(path, &st), 0);
    long frames = (st.st_size - *size) / (4096 + 24); /* a frame: its header and a page */
    *size = st.st_size;
    return frames;
}

/* A grant of a new resource writes three pages, the resource's header, its lease and the
 * store's marks (meta), and so does its release: no index beside the tables. The fewer
 * pages a commit writes, the sooner its fsync is done. Measured once the tables have a few
 * pages, so that no page split or freelist change is counted. */
static void a_grant_and_a_release_write_three_pages_each(void **state)
{
    (void)state;
    char dir[64];
    struct store *s = open_store(dir, NULL, 0);
    char name[32];
    for (int i = 0; i < 200; i++) {
        snprintf(name, sizeof name, "warm/%03d", i);
        wait_committed(s, rec_full(name, 1, (uint64_t)i + 1, true));
    }
    long size = 0;
    wal_frames(dir, &size);
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "warm/%03d-x", i * 40);
        wait_committed(s, rec_full(name, 2, 1000 + (uint64_t)i, true));
        assert_int_equal(wal_frames(dir, &size), 3);
        wait_committed(s, rec_full(name, 3, 0, false));
        assert_int_equal(wal_frames(dir, &size), 3);
    }
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
    cmocka_unit_test(a_group_is_committed_or_refused_whole),
    cmocka_unit_test(a_reopened_store_has_every_committed_row_and_mark),
    cmocka_unit_test(a_deferred_change_is_committed_on_the_callers_thread),
    cmocka_unit_test(a_deferred_change_not_committed_here_goes_to_the_writer),
    cmocka_unit_test(a_deferred_change_behind_a_busy_writer_is_committed_next),
    cmocka_unit_test(a_failed_commit_here_leaves_the_writer_probing),
    cmocka_unit_test(a_store_of_the_first_release_is_migrated_whole),
    cmocka_unit_test(a_record_puts_and_forgets_leases_of_a_row),
    cmocka_unit_test(the_held_leases_read_at_start_are_the_joins),
    cmocka_unit_test(lists_and_snapshots_have_whole_rows),
    cmocka_unit_test(rearm_never_shortens_a_lease),
    cmocka_unit_test(one_renewal_of_a_thousand_holders_writes_one_lease),
    cmocka_unit_test(a_grant_and_a_release_write_three_pages_each),
};
MX_TEST_MAIN(tests)
