/* The change index, the ring of recent events and the waits (actors/events.c). */
#include "tests/unit/testutil.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "actors/events.h"
#include "common/clock.h"

static _Atomic uint64_t counter;

static uint64_t record(struct ev_log *log, const char *name, enum ev_type type, uint64_t floor)
{
    struct ev_event e = {
        .type = (uint8_t)type, .token = 7, .limit = 1, .name_len = (uint16_t)strlen(name)};
    memcpy(e.name, name, e.name_len);
    e.owner = mx_str_new("o", 1);
    uint64_t i = ev_record(log, floor, &e);
    mx_str_unref(e.owner);
    ev_durable(log, name, strlen(name), i, i, true); /* committed at once */
    return i;
}

static void indexes_increase_and_the_ring_keeps_the_last(void **st)
{
    (void)st;
    struct ev_log *log;
    atomic_store(&counter, 100);
    assert_int_equal(ev_open(&log, 3, &counter), 0);
    assert_int_equal(record(log, "a/1", EV_GRANTED, 0), 101);
    assert_int_equal(record(log, "b/1", EV_RENEWED, 0), 102);
    assert_int_equal(record(log, "a/2", EV_RELEASED, 500), 501); /* never behind a resource */
    assert_int_equal(atomic_load(&counter), 501);
    assert_int_equal(ev_last_index(log), 501);

    struct ev_event ev[8];
    uint64_t next;
    bool truncated;
    /* From before the first event kept: those dropped are said to be. */
    size_t n = ev_read(log, 0, "", 0, ev, 8, &next, &truncated);
    assert_int_equal(n, 3);
    assert_true(truncated);
    assert_int_equal(ev[0].index, 101);
    assert_string_equal(ev[2].name, "a/2");
    assert_int_equal(next, 501);
    for (size_t i = 0; i < n; i++)
        ev_event_clear(&ev[i]);
    n = ev_read(log, 100, "a/", 2, ev, 8, &next, &truncated);
    assert_int_equal(n, 2);
    assert_false(truncated);
    assert_int_equal(ev[1].type, EV_RELEASED);
    for (size_t i = 0; i < n; i++)
        ev_event_clear(&ev[i]);
    /* The ring wraps: the oldest go, and an `after` before them is truncated. */
    record(log, "c", EV_EXPIRED, 0);
    record(log, "c", EV_BROKEN, 0);
    n = ev_read(log, 101, "", 0, ev, 8, &next, &truncated);
    assert_true(truncated);
    assert_int_equal(n, 3);
    assert_int_equal(ev[0].index, 501);
    for (size_t i = 0; i < n; i++)
        ev_event_clear(&ev[i]);
    /* A limit: `next` is the last one returned, so the rest comes next time. */
    n = ev_read(log, 500, "", 0, ev, 1, &next, &truncated);
    assert_int_equal(n, 1);
    assert_int_equal(next, 501);
    ev_event_clear(&ev[0]);
    /* Nothing after the last: empty, not truncated. */
    n = ev_read(log, ev_last_index(log), "", 0, ev, 8, &next, &truncated);
    assert_int_equal(n, 0);
    assert_false(truncated);
    assert_int_equal(next, ev_last_index(log));
    ev_close(log);
}

struct waited {
    struct ev_wait w;
    _Atomic int calls;
    _Atomic bool changed;
};

static void on_done(struct ev_wait *w, bool changed)
{
    struct waited *x = (struct waited *)w;
    atomic_store(&x->changed, changed);
    atomic_fetch_add(&x->calls, 1);
}

static void prepare(struct waited *x, const char *prefix, uint64_t after, uint64_t ms)
{
    memset(x, 0, sizeof *x);
    x->w.prefix_len = strlen(prefix);
    memcpy(x->w.prefix, prefix, x->w.prefix_len);
    x->w.after = after;
    x->w.deadline_ns = mx_mono_ns() + ms * MX_NS_PER_MS;
    x->w.done = on_done;
}

static void a_wait_ends_at_a_change_under_its_prefix_or_its_deadline(void **st)
{
    (void)st;
    struct ev_log *log;
    atomic_store(&counter, 0);
    assert_int_equal(ev_open(&log, 16, &counter), 0);
    record(log, "jobs/a", EV_GRANTED, 0); /* 1 */
    struct waited a, b, c;
    /* A change after its index is known: not queued, answered at once. */
    prepare(&a, "jobs/", 0, 60000);
    assert_false(ev_wait_add(log, &a.w));
    /* Held: a change elsewhere does not end it; one under the prefix does, once. */
    prepare(&a, "jobs/", 1, 60000);
    prepare(&b, "other/", 1, 60000);
    assert_true(ev_wait_add(log, &a.w));
    assert_true(ev_wait_add(log, &b.w));
    assert_int_equal(ev_waiting(log), 2);
    record(log, "mail/x", EV_GRANTED, 0);
    assert_int_equal(atomic_load(&a.calls), 0);
    record(log, "jobs/b", EV_GRANTED, 0);
    assert_int_equal(atomic_load(&a.calls), 1);
    assert_true(atomic_load(&a.changed));
    record(log, "jobs/c", EV_GRANTED, 0);
    assert_int_equal(atomic_load(&a.calls), 1);
    /* Taken back: never called; a second take-back finds nothing. */
    assert_true(ev_wait_cancel(log, &b.w));
    assert_false(ev_wait_cancel(log, &b.w));
    assert_false(ev_wait_cancel(log, &a.w)); /* completed already */
    /* The deadline, on the log's own thread. */
    prepare(&c, "x/", ev_last_index(log), 50);
    assert_true(ev_wait_add(log, &c.w));
    for (int i = 0; i < 200 && !atomic_load(&c.calls); i++) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(atomic_load(&c.calls), 1);
    assert_false(atomic_load(&c.changed));
    assert_int_equal(atomic_load(&b.calls), 0);
    /* Flushed at shutdown. */
    prepare(&c, "x/", ev_last_index(log), 60000);
    assert_true(ev_wait_add(log, &c.w));
    ev_flush(log);
    assert_int_equal(atomic_load(&c.calls), 1);
    assert_int_equal(ev_waiting(log), 0);
    ev_close(log);
}

static void a_wait_ends_only_once_its_change_is_durable(void **st)
{
    (void)st;
    struct ev_log *log;
    atomic_store(&counter, 0);
    assert_int_equal(ev_open(&log, 16, &counter), 0);
    struct ev_event e = {.type = EV_GRANTED, .name_len = 5};
    memcpy(e.name, "job/a", 5);
    struct waited a, b;
    prepare(&a, "job/", 0, 60000);
    assert_true(ev_wait_add(log, &a.w));
    uint64_t i = ev_record(log, 0, &e); /* not committed yet: a list would not show it */
    assert_int_equal(atomic_load(&a.calls), 0);
    /* A wait added now does not take the uncommitted change as known. */
    prepare(&b, "job/", 0, 60000);
    assert_true(ev_wait_add(log, &b.w));
    uint64_t j = ev_record(log, 0, &e);
    ev_durable(log, "job/a", 5, i, j, true); /* the turn's commit */
    assert_int_equal(atomic_load(&a.calls), 1);
    assert_int_equal(atomic_load(&b.calls), 1);
    assert_int_equal(ev_durable_index(log), j);
    /* The watermark stays below a change not yet durable, whatever came after it. */
    struct ev_event o = {.type = EV_GRANTED, .name_len = 5};
    memcpy(o.name, "job/b", 5);
    uint64_t k = ev_record(log, 0, &o);
    uint64_t m = ev_record(log, 0, &e);
    ev_durable(log, "job/a", 5, m, m, true);
    assert_int_equal(ev_durable_index(log), k - 1);
    ev_durable(log, "job/b", 5, k, k, true);
    assert_int_equal(ev_durable_index(log), m);
    /* Now known: a wait from before it ends at once. */
    prepare(&b, "job/", 0, 60000);
    assert_false(ev_wait_add(log, &b.w));
    ev_close(log);
}

static size_t read_all(struct ev_log *log, uint64_t after, struct ev_event *ev, uint64_t *next,
                       bool *truncated)
{
    size_t n = ev_read(log, after, "", 0, ev, 16, next, truncated);
    for (size_t i = 0; i < n; i++)
        ev_event_clear(&ev[i]);
    return n;
}

/* The feed shows durable changes only: one not yet committed is not shown and holds the
 * cursor before it (a reader that moved past it would never see it); one whose commit
 * failed is never shown, and a failed end holds the cursor: a new active starts its index
 * from what the container kept, and a cursor above that would skip its first changes. */
static void reads_show_durable_changes_only(void **st)
{
    (void)st;
    struct ev_log *log;
    atomic_store(&counter, 10);
    assert_int_equal(ev_open(&log, 16, &counter), 0);
    struct ev_event e = {.type = EV_GRANTED, .name_len = 1};
    e.name[0] = 'a';
    struct ev_event ev[16];
    uint64_t next;
    bool truncated;
    uint64_t i = ev_record(log, 0, &e); /* 11, pending */
    assert_int_equal(read_all(log, 10, ev, &next, &truncated), 0);
    assert_int_equal(next, 10);
    assert_false(truncated);
    ev_durable(log, "a", 1, i, i, true);
    assert_int_equal(ev_read(log, 10, "", 0, ev, 16, &next, &truncated), 1);
    assert_int_equal(ev[0].index, 11);
    ev_event_clear(&ev[0]);
    assert_int_equal(next, 11);
    /* A failed change is never shown; one committed after it moves the cursor past it. */
    uint64_t f = ev_record(log, 0, &e); /* 12 */
    ev_durable(log, "a", 1, f, f, false);
    assert_int_equal(read_all(log, 11, ev, &next, &truncated), 0);
    assert_int_equal(next, 11); /* a failed end holds the cursor */
    assert_int_equal(ev_durable_index(log), 11);
    uint64_t g = ev_record(log, 0, &e); /* 13 */
    ev_durable(log, "a", 1, g, g, true);
    assert_int_equal(ev_read(log, 11, "", 0, ev, 16, &next, &truncated), 1);
    assert_int_equal(ev[0].index, 13);
    ev_event_clear(&ev[0]);
    assert_int_equal(next, 13);
    assert_int_equal(ev_durable_index(log), 13);
    /* A cursor above every index taken is not this log's: truncated, from the oldest. */
    assert_int_equal(read_all(log, 99, ev, &next, &truncated), 2);
    assert_true(truncated);
    assert_int_equal(next, 13);
    struct waited w;
    prepare(&w, "", 99, 60000);
    assert_false(ev_wait_add(log, &w.w)); /* answered at once, as truncated */
    ev_close(log);
}

static void without_history_a_wait_from_the_past_ends_at_once(void **st)
{
    (void)st;
    struct ev_log *log;
    atomic_store(&counter, 0);
    assert_int_equal(ev_open(&log, 0, &counter), 0);
    record(log, "a", EV_GRANTED, 0);
    record(log, "b", EV_GRANTED, 0);
    struct waited a;
    prepare(&a, "zzz", 1, 60000);
    assert_false(ev_wait_add(log, &a.w)); /* what happened after 1 is not known */
    prepare(&a, "a", 2, 60000);
    assert_true(ev_wait_add(log, &a.w)); /* nothing after 2 yet */
    record(log, "a", EV_RENEWED, 0);
    assert_int_equal(atomic_load(&a.calls), 1);
    struct ev_event ev[2];
    uint64_t next;
    bool truncated;
    assert_int_equal(ev_read(log, 0, "", 0, ev, 2, &next, &truncated), 0);
    assert_true(truncated);
    assert_int_equal(next, 3);
    ev_close(log);
}

static struct ev_log *race_log;

/* The grants of a set take consecutive indexes reserved ahead: another change recorded
 * meanwhile takes the next after them, a reader stops before the set until it is durable,
 * and a reserved index whose grant never happened is never shown. */
static void reserved_indexes_stay_together_and_hide_until_durable(void **st)
{
    (void)st;
    struct ev_log *log;
    atomic_store(&counter, 10);
    assert_int_equal(ev_open(&log, 16, &counter), 0);
    const char *names[] = {"s/a", "s/b", "s/c"};
    size_t lens[] = {3, 3, 3};
    assert_int_equal(ev_reserve(log, names, lens, 3), 11);
    assert_int_equal(record(log, "other", EV_GRANTED, 0), 14); /* after the set's */

    struct ev_event ev[8];
    uint64_t next;
    bool truncated;
    assert_int_equal(ev_read(log, 10, "", 0, ev, 8, &next, &truncated), 0); /* held back */
    for (int i = 0; i < 2; i++) {
        struct ev_event e = {
            .type = EV_GRANTED, .token = 40 + (uint64_t)i, .limit = 1, .name_len = 3};
        memcpy(e.name, names[i], 3);
        e.owner = mx_str_new("o", 1);
        ev_fill(log, 11 + (uint64_t)i, &e);
        mx_str_unref(e.owner);
        ev_durable(log, names[i], 3, 11 + (uint64_t)i, 11 + (uint64_t)i, true);
    }
    ev_durable(log, "s/c", 3, 13, 13, false); /* s/c's grant did not happen */
    size_t n = ev_read(log, 10, "", 0, ev, 8, &next, &truncated);
    assert_int_equal(n, 3);
    assert_int_equal(ev[0].index, 11);
    assert_int_equal(ev[0].token, 40);
    assert_string_equal(ev[1].name, "s/b");
    assert_int_equal(ev[1].index, 12);
    assert_string_equal(ev[2].name, "other");
    assert_int_equal(ev[2].index, 14);
    for (size_t i = 0; i < n; i++)
        ev_event_clear(&ev[i]);
    ev_close(log);
}

static void *recorder(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++)
        record(race_log, "r", EV_RENEWED, 0);
    return NULL;
}

static void concurrent_changes_are_kept_in_index_order(void **st)
{
    (void)st;
    atomic_store(&counter, 0);
    assert_int_equal(ev_open(&race_log, 1000, &counter), 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, recorder, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(ev_last_index(race_log), 80000);
    struct ev_event *ev = calloc(1000, sizeof *ev);
    uint64_t next;
    bool truncated;
    size_t n = ev_read(race_log, 79000, "", 0, ev, 1000, &next, &truncated);
    assert_int_equal(n, 1000);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ev[i].index, 79001 + i);
        ev_event_clear(&ev[i]);
    }
    free(ev);
    ev_close(race_log);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(indexes_increase_and_the_ring_keeps_the_last),
    cmocka_unit_test(a_wait_ends_at_a_change_under_its_prefix_or_its_deadline),
    cmocka_unit_test(a_wait_ends_only_once_its_change_is_durable),
    cmocka_unit_test(reads_show_durable_changes_only),
    cmocka_unit_test(without_history_a_wait_from_the_past_ends_at_once),
    cmocka_unit_test(concurrent_changes_are_kept_in_index_order),
    cmocka_unit_test(reserved_indexes_stay_together_and_hide_until_durable),
};
MX_TEST_MAIN(tests)
