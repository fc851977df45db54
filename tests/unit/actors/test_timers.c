/*
 * The timer heap with a fake clock (ordering, ties, removal) and the timer thread with
 * the real one (fires in order, never early, disarm).
 */
#include "tests/unit/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "actors/timers.h"
#include "common/clock.h"

static void heap_pops_in_deadline_order(void **st)
{
    (void)st;
    unsigned seed = mx_test_seed();
    srand(seed);
    enum { N = 2000 };
    static struct mx_timer t[N];
    struct mx_timer_heap h;
    mx_timer_heap_init(&h);
    for (int i = 0; i < N; i++) {
        mx_timer_init(&t[i]);
        assert_int_equal(mx_timer_heap_push(&h, &t[i], (uint64_t)(rand() % 500) + 1), 0);
    }
    /* Nothing is due before the earliest deadline. */
    assert_null(mx_timer_heap_pop_due(&h, 0));
    uint64_t last = 0, last_seq = 0;
    int n = 0;
    for (uint64_t now = 0; now < 500 + 7; now += 7) {
        struct mx_timer *x;
        while ((x = mx_timer_heap_pop_due(&h, now)) != NULL) {
            assert_true(x->_deadline_ns <= now); /* never early */
            assert_true(x->_deadline_ns >= last);
            if (x->_deadline_ns == last)
                assert_true(x->_seq > last_seq); /* ties: arming order */
            last = x->_deadline_ns;
            last_seq = x->_seq;
            assert_false(mx_timer_armed(x));
            n++;
        }
    }
    assert_int_equal(n, N);
    assert_int_equal(mx_timer_heap_next(&h), UINT64_MAX);
    mx_timer_heap_free(&h);
}

static void heap_remove_keeps_order(void **st)
{
    (void)st;
    srand(mx_test_seed());
    enum { N = 1000 };
    static struct mx_timer t[N];
    struct mx_timer_heap h;
    mx_timer_heap_init(&h);
    for (int i = 0; i < N; i++) {
        mx_timer_init(&t[i]);
        mx_timer_heap_push(&h, &t[i], (uint64_t)(rand() % 10000));
    }
    bool removed[N] = {false};
    for (int i = 0; i < N / 2; i++) {
        int k = rand() % N;
        if (!removed[k]) {
            mx_timer_heap_remove(&h, &t[k]);
            removed[k] = true;
            assert_false(mx_timer_armed(&t[k]));
        }
    }
    int left = 0;
    for (int i = 0; i < N; i++)
        left += !removed[i];
    uint64_t last = 0;
    struct mx_timer *x;
    int n = 0;
    while ((x = mx_timer_heap_pop_due(&h, UINT64_MAX)) != NULL) {
        assert_false(removed[x - t]);
        assert_true(x->_deadline_ns >= last);
        last = x->_deadline_ns;
        n++;
    }
    assert_int_equal(n, left);
    mx_timer_heap_free(&h);
}

struct fired {
    pthread_mutex_t lock;
    struct mx_timer *order[64];
    uint64_t at[64];
    int n;
};

static void on_fire(void *ctx, struct mx_timer *t)
{
    struct fired *f = ctx;
    pthread_mutex_lock(&f->lock);
    f->order[f->n] = t;
    f->at[f->n] = mx_mono_ns();
    f->n++;
    pthread_mutex_unlock(&f->lock);
}

static void thread_fires_in_order_never_early_and_disarms(void **st)
{
    (void)st;
    struct fired f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    struct mx_timers *ts;
    struct mx_timers_config cfg = {.fire = on_fire, .ctx = &f};
    assert_int_equal(mx_timers_start(&ts, &cfg), 0);

    struct mx_timer t[10];
    uint64_t base = mx_mono_ns();
    /* Armed out of order: 290 ms, 280 ms, ..., 200 ms; the odd ones are disarmed (well
     * before the first is due, even on a slow machine or under TSan). */
    for (int i = 0; i < 10; i++) {
        mx_timer_init(&t[i]);
        uint64_t at = base + (uint64_t)(200 + (9 - i) * 10) * MX_NS_PER_MS;
        assert_int_equal(mx_timers_arm(ts, &t[i], at), 0);
    }
    for (int i = 1; i < 10; i += 2)
        assert_true(mx_timers_disarm(ts, &t[i]));
    mx_sleep_ms(400);
    for (int i = 0; i < 10; i += 2)
        assert_false(mx_timers_disarm(ts, &t[i])); /* fired already */
    mx_timers_stop(ts, NULL);

    assert_int_equal(f.n, 5);
    for (int k = 0; k < 5; k++) {
        struct mx_timer *x = f.order[k];
        assert_true(f.at[k] >= mx_timer_deadline(x)); /* never early */
        if (k > 0)
            assert_true(mx_timer_deadline(x) > mx_timer_deadline(f.order[k - 1]));
        assert_int_equal((x - t) % 2, 0);
    }
    pthread_mutex_destroy(&f.lock);
}

static int discarded;
static void on_discard(void *ctx, struct mx_timer *t)
{
    (void)ctx;
    assert_false(mx_timer_armed(t));
    discarded++;
}

static void stop_discards_armed_timers(void **st)
{
    (void)st;
    struct fired f = {.lock = PTHREAD_MUTEX_INITIALIZER};
    struct mx_timers *ts;
    struct mx_timers_config cfg = {.fire = on_fire, .ctx = &f};
    assert_int_equal(mx_timers_start(&ts, &cfg), 0);
    struct mx_timer t[3];
    for (int i = 0; i < 3; i++) {
        mx_timer_init(&t[i]);
        mx_timers_arm(ts, &t[i], mx_mono_ns() + 60ull * 1000 * MX_NS_PER_MS);
    }
    discarded = 0;
    mx_timers_stop(ts, on_discard);
    assert_int_equal(discarded, 3);
    assert_int_equal(f.n, 0);
}

static void on_fire_at(void *ctx, struct mx_timer *t)
{
    (void)t;
    atomic_store((_Atomic uint64_t *)ctx, mx_mono_ns());
}

/* A resource's own timer moves later at every hand-off of its lease (the next waiter's
 * deadline): that must not wake the thread, which sleeps until an earlier time anyway.
 * A timer armed earlier than that time still wakes it, and fires on time. */
static void only_an_earlier_deadline_wakes_the_thread(void **st)
{
    (void)st;
    _Atomic uint64_t fired_at = 0;
    struct mx_timers *ts;
    struct mx_timers_config cfg = {.fire = on_fire_at, .ctx = &fired_at};
    assert_int_equal(mx_timers_start(&ts, &cfg), 0);
    struct mx_timer t;
    mx_timer_init(&t);

    uint64_t base = mx_mono_ns() + 10ull * 1000 * MX_NS_PER_MS;
    assert_int_equal(mx_timers_arm(ts, &t, base), 0);
    mx_sleep_ms(50); /* the thread sleeps until `base` */
    long before = mx_test_others_sleeps();
    for (int i = 1; i <= 100; i++) { /* apart, as hand-offs come: each could wake it */
        assert_true(mx_timers_disarm(ts, &t));
        assert_int_equal(mx_timers_arm(ts, &t, base + (uint64_t)i * MX_NS_PER_MS), 0);
        mx_sleep_ms(1);
    }
    mx_sleep_ms(50);
    long woken = mx_test_others_sleeps() - before;
    assert_true(woken < 10); /* it was woken by every re-arm: about 100 */

    assert_true(mx_timers_disarm(ts, &t));
    uint64_t at = mx_mono_ns() + 100 * MX_NS_PER_MS;
    assert_int_equal(mx_timers_arm(ts, &t, at), 0);
    for (int i = 0; i < 500 && atomic_load(&fired_at) == 0; i++)
        mx_sleep_ms(2);
    assert_true(atomic_load(&fired_at) >= at); /* fired, 9.9 s before the time it slept for */
    mx_timers_stop(ts, NULL);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(heap_pops_in_deadline_order),
    cmocka_unit_test(heap_remove_keeps_order),
    cmocka_unit_test(thread_fires_in_order_never_early_and_disarms),
    cmocka_unit_test(stop_discards_armed_timers),
    cmocka_unit_test(only_an_earlier_deadline_wakes_the_thread),
};
MX_TEST_MAIN(tests)
