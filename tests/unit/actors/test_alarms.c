/*
 * Alarms: an alarm fires once, never early, and activates an actor that is not active;
 * setting it again moves it (earlier wakes the thread); cancel removes it; held alarms
 * wait for their release; a send the
 * runtime refuses is tried again until it lands; stop refuses new alarms and free
 * releases what is left.
 */
#include "tests/unit/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "actors/alarms.h"
#include "actors/runtime.h"
#include "common/clock.h"

#define NACT    1000
#define T_ALARM 7
#define T_BLOCK 8

static struct {
    _Atomic int fired[NACT];
    _Atomic uint64_t fired_at[NACT];
    _Atomic int activations, early;
    uint64_t deadline[NACT]; /* written before the alarm is set */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool blocked, open;
} T;

static void reset(void)
{
    memset(&T, 0, sizeof T);
    pthread_mutex_init(&T.lock, NULL);
    pthread_cond_init(&T.cond, NULL);
}

static int idx_of(struct rt_actor *self)
{
    size_t len;
    const char *name = rt_name(self, &len);
    return atoi(name + 1);
}

static void a_activate(struct rt_actor *self, void *state)
{
    (void)self;
    (void)state;
    atomic_fetch_add(&T.activations, 1);
}

static void a_receive(struct rt_actor *self, void *state, struct rt_msg *m)
{
    (void)state;
    int i = idx_of(self);
    if (m->type == T_ALARM) {
        uint64_t now = mx_mono_ns();
        if (now < T.deadline[i])
            atomic_fetch_add(&T.early, 1);
        atomic_store(&T.fired_at[i], now);
        atomic_fetch_add(&T.fired[i], 1);
        rt_alarm_free(m);
        return;
    }
    if (m->type == T_BLOCK) {
        pthread_mutex_lock(&T.lock);
        T.blocked = true;
        pthread_cond_broadcast(&T.cond);
        while (!T.open)
            pthread_cond_wait(&T.cond, &T.lock);
        pthread_mutex_unlock(&T.lock);
    }
    free(m);
}

static bool a_idle(struct rt_actor *self, void *state, uint64_t *barrier)
{
    (void)self;
    (void)state;
    (void)barrier;
    return true;
}

static void a_deactivate(struct rt_actor *self, void *state, bool shutdown)
{
    (void)self;
    (void)state;
    (void)shutdown;
}

static const struct rt_behavior ab = {
    .state_size = 8,
    .activate = a_activate,
    .receive = a_receive,
    .idle = a_idle,
    .deactivate = a_deactivate,
};

static void start(struct rt **rt, struct rt_alarms **al, uint32_t mailbox_cap)
{
    reset();
    struct rt_config cfg = {
        .behavior = &ab, .workers = 2, .idle_ms = 50, .mailbox_cap = mailbox_cap};
    assert_int_equal(rt_start(rt, &cfg), 0);
    assert_int_equal(rt_alarms_start(al, *rt, T_ALARM), 0);
}

static void stop(struct rt *rt, struct rt_alarms *al)
{
    rt_alarms_stop(al);
    rt_shutdown(rt);
    rt_alarms_free(al);
}

static int set(struct rt_alarms *al, int i, uint64_t deadline)
{
    char name[16];
    int n = snprintf(name, sizeof name, "a%d", i);
    T.deadline[i] = deadline;
    return rt_alarm_set(al, name, (size_t)n, deadline);
}

static size_t active(struct rt *rt)
{
    struct rt_stats st;
    rt_get_stats(rt, &st);
    return st.active;
}

/* Waits up to `ms` for `cond` (an expression) to hold. */
#define WAIT_FOR(cond, ms)                                                                         \
    do {                                                                                           \
        for (int w_ = 0; w_ < (ms) && !(cond); w_++)                                               \
            mx_sleep_ms(1);                                                                        \
    } while (0)

/* Sets alarms a0..a(NACT-1), due 50 to 249 ms after `now`, in no order. */
static void set_all(struct rt_alarms *al, uint64_t now)
{
    for (int i = 0; i < NACT; i++)
        assert_int_equal(set(al, i, now + (uint64_t)(50 + (i * 37) % 200) * MX_NS_PER_MS), RT_OK);
}

/* Waits up to 2 s for `want` alarms to have fired in all, then 100 ms more, in which
 * nothing more should arrive. */
static void wait_fired(int want)
{
    for (int k = 0, total = 0; k < 2000 && total < want; k++) {
        total = 0;
        for (int i = 0; i < NACT; i++)
            total += atomic_load(&T.fired[i]);
        mx_sleep_ms(1);
    }
    mx_sleep_ms(100);
}

static void fires_once_never_early_and_activates(void **state)
{
    (void)state;
    struct rt *rt;
    struct rt_alarms *al;
    start(&rt, &al, 0);
    set_all(al, mx_mono_ns());
    assert_int_equal(rt_alarms_count(al), NACT);
    assert_int_equal(active(rt), 0); /* an alarm keeps nothing active */
    WAIT_FOR(rt_alarms_count(al) == 0, 2000);
    assert_int_equal(rt_alarms_count(al), 0);
    wait_fired(NACT);
    for (int i = 0; i < NACT; i++)
        assert_int_equal(atomic_load(&T.fired[i]), 1);
    assert_int_equal(atomic_load(&T.early), 0);
    assert_int_equal(atomic_load(&T.activations), NACT);
    WAIT_FOR(active(rt) == 0, 2000); /* and they go idle again */
    assert_int_equal(active(rt), 0);
    stop(rt, al);
}

/* Room made for many more alarms at once (as a restart does) keeps those already set: each
 * is still found by its name, to move or cancel it, and fires once. */
static void reserving_room_keeps_the_alarms_set(void **state)
{
    (void)state;
    struct rt *rt;
    struct rt_alarms *al;
    start(&rt, &al, 0);
    uint64_t now = mx_mono_ns();
    set_all(al, now);
    rt_alarms_reserve(al, 100000);
    rt_alarms_reserve(al, 10); /* less than it has: nothing changes */
    assert_int_equal(set(al, 0, now + 150 * MX_NS_PER_MS), RT_OK); /* moved, not added */
    assert_int_equal(rt_alarms_count(al), NACT);
    rt_alarm_cancel(al, "a1", 2);
    assert_int_equal(rt_alarms_count(al), NACT - 1);
    WAIT_FOR(rt_alarms_count(al) == 0, 2000);
    wait_fired(NACT - 1);
    for (int i = 0; i < NACT; i++)
        assert_int_equal(atomic_load(&T.fired[i]), i == 1 ? 0 : 1);
    assert_int_equal(atomic_load(&T.early), 0);
    stop(rt, al);
}

static void set_again_moves_and_cancel_removes(void **state)
{
    (void)state;
    struct rt *rt;
    struct rt_alarms *al;
    start(&rt, &al, 0);
    uint64_t t0 = mx_mono_ns();
    /* The thread sleeps until the only deadline, 2 s out; moving it earlier wakes it. */
    assert_int_equal(set(al, 0, t0 + 2000 * MX_NS_PER_MS), RT_OK);
    mx_sleep_ms(20);
    assert_int_equal(set(al, 0, t0 + 100 * MX_NS_PER_MS), RT_OK);
    assert_int_equal(set(al, 1, t0 + 100 * MX_NS_PER_MS), RT_OK);
    assert_int_equal(set(al, 1, t0 + 300 * MX_NS_PER_MS), RT_OK); /* later */
    assert_int_equal(set(al, 2, t0 + 100 * MX_NS_PER_MS), RT_OK);
    rt_alarm_cancel(al, "a2", 2);
    rt_alarm_cancel(al, "a3", 2); /* none: nothing happens */
    assert_int_equal(rt_alarms_count(al), 2);
    assert_int_equal(rt_alarm_set(al, "", 0, t0), RT_EINVAL);

    WAIT_FOR(atomic_load(&T.fired[1]) == 1, 2000);
    mx_sleep_ms(50);
    assert_int_equal(atomic_load(&T.fired[0]), 1);
    assert_int_equal(atomic_load(&T.fired[1]), 1);
    assert_int_equal(atomic_load(&T.fired[2]), 0);
    assert_int_equal(atomic_load(&T.early), 0);
    /* The moved alarm fired near its new deadline, long before the old one. */
    assert_true(atomic_load(&T.fired_at[0]) < t0 + 1000 * MX_NS_PER_MS);
    assert_true(atomic_load(&T.fired_at[1]) >= t0 + 300 * MX_NS_PER_MS);
    assert_int_equal(rt_alarms_count(al), 0);
    stop(rt, al);
}

/* A lease taken and released over and over sets its alarm again each time, later than
 * the last: that must not wake the thread, which sleeps until an earlier time anyway. */
static void a_later_alarm_does_not_wake_the_thread(void **state)
{
    (void)state;
    struct rt *rt;
    struct rt_alarms *al;
    start(&rt, &al, 0);
    uint64_t base = mx_mono_ns() + 10ull * 1000 * MX_NS_PER_MS;
    assert_int_equal(set(al, 0, base), RT_OK);
    mx_sleep_ms(50); /* the thread sleeps until `base` */
    long before = mx_test_others_sleeps();
    for (int i = 1; i <= 100; i++) { /* apart, as a client's cycles come */
        rt_alarm_cancel(al, "a0", 2);
        assert_int_equal(set(al, 0, base + (uint64_t)i * MX_NS_PER_MS), RT_OK);
        mx_sleep_ms(1);
    }
    long woken = mx_test_others_sleeps() - before;
    /* Every set woke it before: about 100. Now only the runtime's own sweeps remain. */
    assert_true(woken < 40);

    /* Earlier than the time it sleeps until: wakes it, and fires on time. */
    uint64_t at = mx_mono_ns() + 100 * MX_NS_PER_MS;
    assert_int_equal(set(al, 0, at), RT_OK);
    WAIT_FOR(atomic_load(&T.fired[0]) == 1, 2000);
    assert_int_equal(atomic_load(&T.fired[0]), 1);
    assert_true(atomic_load(&T.fired_at[0]) >= at);
    assert_true(atomic_load(&T.fired_at[0]) < base);
    stop(rt, al);
}

static void held_alarms_fire_when_released(void **state)
{
    (void)state;
    struct rt *rt;
    struct rt_alarms *al;
    start(&rt, &al, 0);
    rt_alarms_hold(al, true);
    uint64_t now = mx_mono_ns();
    for (int i = 0; i < 10; i++)
        assert_int_equal(set(al, i, now), RT_OK); /* due at once */
    mx_sleep_ms(100);
    for (int i = 0; i < 10; i++)
        assert_int_equal(atomic_load(&T.fired[i]), 0);
    assert_int_equal(rt_alarms_count(al), 10);
    rt_alarms_hold(al, false);
    WAIT_FOR(rt_alarms_count(al) == 0, 2000);
    mx_sleep_ms(50);
    for (int i = 0; i < 10; i++)
        assert_int_equal(atomic_load(&T.fired[i]), 1);
    stop(rt, al);
}

/* A restart sets every held lease's alarm while the alarms are held: none of them may
 * wake the thread, which could not fire them anyway (it did, once for each). */
static void alarms_set_while_held_do_not_wake_the_thread(void **state)
{
    (void)state;
    struct rt *rt;
    struct rt_alarms *al;
    start(&rt, &al, 0);
    rt_alarms_hold(al, true);
    mx_sleep_ms(50);
    uint64_t at = mx_mono_ns() + 300 * MX_NS_PER_MS;
    long before = mx_test_others_sleeps();
    for (int i = 0; i < 100; i++) {
        assert_int_equal(set(al, i, at - (uint64_t)i * MX_NS_PER_MS), RT_OK); /* each earlier */
        mx_sleep_ms(1);
    }
    long woken = mx_test_others_sleeps() - before;
    assert_true(woken < 40); /* the runtime's own sweeps */
    rt_alarms_hold(al, false);
    WAIT_FOR(rt_alarms_count(al) == 0, 2000);
    mx_sleep_ms(50);
    for (int i = 0; i < 100; i++)
        assert_int_equal(atomic_load(&T.fired[i]), 1);
    assert_int_equal(atomic_load(&T.early), 0);
    stop(rt, al);
}

static void refused_send_is_tried_again(void **state)
{
    (void)state;
    struct rt *rt;
    struct rt_alarms *al;
    start(&rt, &al, 1);
    /* a0's turn blocks, and its message fills the mailbox (cap 1) until the turn ends. */
    struct rt_msg *b = calloc(1, sizeof *b), *f = calloc(1, sizeof *f);
    b->type = T_BLOCK;
    b->cancel = (void (*)(struct rt_msg *))free;
    assert_int_equal(rt_send(rt, "a0", 2, b, 0), RT_OK);
    pthread_mutex_lock(&T.lock);
    while (!T.blocked)
        pthread_cond_wait(&T.cond, &T.lock);
    pthread_mutex_unlock(&T.lock);
    assert_int_equal(rt_send(rt, "a0", 2, f, 0), RT_EFULL);
    free(f);

    assert_int_equal(set(al, 0, mx_mono_ns()), RT_OK);
    mx_sleep_ms(100); /* refused every 10 ms meanwhile, and kept */
    assert_int_equal(atomic_load(&T.fired[0]), 0);
    assert_int_equal(rt_alarms_count(al), 1);

    pthread_mutex_lock(&T.lock);
    T.open = true;
    pthread_cond_broadcast(&T.cond);
    pthread_mutex_unlock(&T.lock);
    WAIT_FOR(atomic_load(&T.fired[0]) == 1, 2000);
    mx_sleep_ms(50);
    assert_int_equal(atomic_load(&T.fired[0]), 1);
    assert_int_equal(rt_alarms_count(al), 0);
    stop(rt, al);
}

static void stop_refuses_and_free_releases(void **state)
{
    (void)state;
    struct rt *rt;
    struct rt_alarms *al;
    start(&rt, &al, 0);
    uint64_t later = mx_mono_ns() + 3600000 * MX_NS_PER_MS;
    for (int i = 0; i < 100; i++)
        assert_int_equal(set(al, i, later), RT_OK);
    rt_alarms_stop(al);
    assert_int_equal(set(al, 100, later), RT_ESHUTDOWN);
    rt_alarm_cancel(al, "a5", 2); /* still allowed after stop */
    assert_int_equal(rt_alarms_count(al), 99);
    rt_shutdown(rt);
    rt_alarms_free(al); /* the 99 left are freed: ASan's leak check sees to it */
    for (int i = 0; i < 100; i++)
        assert_int_equal(atomic_load(&T.fired[i]), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(fires_once_never_early_and_activates),
    cmocka_unit_test(set_again_moves_and_cancel_removes),
    cmocka_unit_test(reserving_room_keeps_the_alarms_set),
    cmocka_unit_test(a_later_alarm_does_not_wake_the_thread),
    cmocka_unit_test(held_alarms_fire_when_released),
    cmocka_unit_test(alarms_set_while_held_do_not_wake_the_thread),
    cmocka_unit_test(refused_send_is_tried_again),
    cmocka_unit_test(stop_refuses_and_free_releases),
};

MX_TEST_MAIN(tests)
