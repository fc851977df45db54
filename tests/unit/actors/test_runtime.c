/*
 * The actor runtime: turn exclusivity and counts under stress, per-sender order, timers
 * delivered as messages, idle deactivation and its races, the mailbox and actor caps,
 * and shutdown completing every pending message.
 */
#include "tests/unit/testutil.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "actors/runtime.h"
#include "common/clock.h"

#define NACT  1000
#define NSEND 8

/* What the behaviors record; reset by each test. */
static struct {
    _Atomic int in_turn[NACT];
    _Atomic uint64_t delivered[NACT];
    uint64_t last_seq[NACT][NSEND]; /* only touched in turns of actor i */
    _Atomic uint64_t total;
    _Atomic int violations;
    _Atomic int activations, deactivations, shutdown_deactivations;
    _Atomic uint64_t cancelled;
    /* gate: the first K_BLOCK message waits here */
    pthread_mutex_t gate_lock;
    pthread_cond_t gate_cond;
    bool gate_open, blocked;
} T;

static void reset(void)
{
    memset(&T, 0, sizeof T);
    pthread_mutex_init(&T.gate_lock, NULL);
    pthread_cond_init(&T.gate_cond, NULL);
}

enum { K_COUNT = 1, K_BLOCK, K_TIMERS, K_ARM_ONE };

struct tmsg {
    struct rt_msg m;
    int sender;
    uint64_t seq;
    _Atomic int completions; /* delivered or cancelled: must end at exactly 1 */
};

struct tstate {
    bool activated;
    int idx;
    /* timers test */
    struct rt_timer timers[20];
    uint64_t deadline[20];
    bool expect[20];
    int fired_order[20];
    uint64_t fired_at[20];
    int nfired;
};

static int idx_of(struct rt_actor *self)
{
    size_t len;
    const char *name = rt_name(self, &len);
    return atoi(name + 1);
}

static void t_activate(struct rt_actor *self, void *state)
{
    struct tstate *s = state;
    s->activated = true;
    s->idx = idx_of(self);
    for (int i = 0; i < 20; i++)
        rt_timer_init(&s->timers[i], 100 + (uint32_t)i);
    atomic_fetch_add(&T.activations, 1);
}

static void msg_cancel(struct rt_msg *m)
{
    struct tmsg *t = (struct tmsg *)m;
    atomic_fetch_add(&t->completions, 1);
    atomic_fetch_add(&T.cancelled, 1);
}

static void wait_gate(void)
{
    pthread_mutex_lock(&T.gate_lock);
    T.blocked = true;
    pthread_cond_broadcast(&T.gate_cond);
    while (!T.gate_open)
        pthread_cond_wait(&T.gate_cond, &T.gate_lock);
    pthread_mutex_unlock(&T.gate_lock);
}

static void wait_blocked(void)
{
    pthread_mutex_lock(&T.gate_lock);
    while (!T.blocked)
        pthread_cond_wait(&T.gate_cond, &T.gate_lock);
    pthread_mutex_unlock(&T.gate_lock);
}

static void open_gate(void)
{
    pthread_mutex_lock(&T.gate_lock);
    T.gate_open = true;
    pthread_cond_broadcast(&T.gate_cond);
    pthread_mutex_unlock(&T.gate_lock);
}

static void t_receive(struct rt_actor *self, void *state, struct rt_msg *m)
{
    struct tstate *s = state;
    int i = s->idx;
    if (!s->activated)
        atomic_fetch_add(&T.violations, 1); /* a message before activate() */
    if (atomic_exchange(&T.in_turn[i], 1) != 0)
        atomic_fetch_add(&T.violations, 1); /* two turns of one actor at once */

    if (m->type >= 100) { /* a timer */
        int k = (int)m->type - 100;
        s->fired_order[s->nfired] = k;
        s->fired_at[s->nfired] = mx_mono_ns();
        s->nfired++;
    } else {
        struct tmsg *t = (struct tmsg *)m;
        if (m->type == K_COUNT && t->sender >= 0) {
            if (t->seq != T.last_seq[i][t->sender] + 1)
                atomic_fetch_add(&T.violations, 1); /* out of send order */
            T.last_seq[i][t->sender] = t->seq;
        } else if (m->type == K_BLOCK) {
            wait_gate();
        } else if (m->type == K_TIMERS) {
            /* Set 20 timers between 20 and 220 ms out; cancel every third; move #1 later. */
            uint64_t now = mx_mono_ns();
            for (int k = 0; k < 20; k++) {
                s->deadline[k] = now + (uint64_t)(20 + (k * 37) % 200) * MX_NS_PER_MS;
                s->expect[k] = true;
                assert_int_equal(rt_timer_set(self, &s->timers[k], s->deadline[k]), RT_OK);
            }
            for (int k = 0; k < 20; k += 3) {
                rt_timer_cancel(self, &s->timers[k]);
                s->expect[k] = false;
                assert_false(rt_timer_pending(&s->timers[k]));
            }
            s->deadline[1] = now + 250 * MX_NS_PER_MS;
            assert_int_equal(rt_timer_set(self, &s->timers[1], s->deadline[1]), RT_OK);
            assert_true(rt_timer_pending(&s->timers[1]));
        } else if (m->type == K_ARM_ONE) {
            s->deadline[0] = mx_mono_ns() + 300 * MX_NS_PER_MS;
            s->expect[0] = true;
            rt_timer_set(self, &s->timers[0], s->deadline[0]);
        }
        atomic_fetch_add(&t->completions, 1);
        free(t);
    }
    atomic_fetch_add(&T.delivered[i], 1);
    atomic_store(&T.in_turn[i], 0);
    atomic_fetch_add(&T.total, 1);
}

static bool t_idle(struct rt_actor *self, void *state, uint64_t *barrier)
{
    (void)self;
    (void)state;
    (void)barrier;
    return true;
}

/* Copied at deactivation (on the sweeper's thread), read by the tests. */
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tstate last_state;

static struct tstate get_last_state(void)
{
    pthread_mutex_lock(&last_lock);
    struct tstate s = last_state;
    pthread_mutex_unlock(&last_lock);
    return s;
}

static void t_deactivate(struct rt_actor *self, void *state, bool shutdown)
{
    (void)self;
    pthread_mutex_lock(&last_lock);
    last_state = *(struct tstate *)state;
    pthread_mutex_unlock(&last_lock);
    atomic_fetch_add(&T.deactivations, 1);
    if (shutdown)
        atomic_fetch_add(&T.shutdown_deactivations, 1);
}

static const struct rt_behavior tb = {
    .state_size = sizeof(struct tstate),
    .activate = t_activate,
    .receive = t_receive,
    .idle = t_idle,
    .deactivate = t_deactivate,
};

static struct tmsg *new_msg(uint32_t type, int sender, uint64_t seq)
{
    struct tmsg *t = calloc(1, sizeof *t);
    assert_non_null(t);
    t->m.type = type;
    t->m.cancel = msg_cancel;
    t->sender = sender;
    t->seq = seq;
    return t;
}

static int send_to(struct rt *rt, int actor, struct tmsg *t)
{
    char name[16];
    int n = snprintf(name, sizeof name, "a%d", actor);
    return rt_send(rt, name, (size_t)n, &t->m, 0);
}

static int send_flags; /* RT_SEND_RUN_HERE in the tests of turns run by senders */

/* Sends, retrying while the mailbox is full (that keeps the sender's order). */
static void send_retry(struct rt *rt, int actor, struct tmsg *t)
{
    int rc;
    char name[16];
    int n = snprintf(name, sizeof name, "a%d", actor);
    while ((rc = rt_send(rt, name, (size_t)n, &t->m, send_flags)) == RT_EFULL)
        sched_yield();
    assert_int_equal(rc, RT_OK);
}

static void wait_total(uint64_t want, int seconds)
{
    uint64_t deadline = mx_mono_ns() + (uint64_t)seconds * 1000 * MX_NS_PER_MS;
    while (atomic_load(&T.total) < want && mx_mono_ns() < deadline)
        mx_sleep_ms(5);
}

/* ---- stress: exclusivity, counts, order ---------------------------------------- */

struct sender_arg {
    struct rt *rt;
    int id;
    unsigned seed;
    uint64_t count; /* messages to send */
    int nact;
    uint64_t sent[NACT];
};

static void *sender_main(void *p)
{
    struct sender_arg *a = p;
    uint64_t seq[NACT] = {0};
    for (uint64_t k = 0; k < a->count; k++) {
        int actor = (int)(rand_r(&a->seed) % (unsigned)a->nact);
        send_retry(a->rt, actor, new_msg(K_COUNT, a->id, ++seq[actor]));
        a->sent[actor]++;
    }
    return NULL;
}

static void run_senders(struct rt *rt, int nsend, int nact, uint64_t total, unsigned seed)
{
    static struct sender_arg args[NSEND];
    pthread_t th[NSEND];
    for (int s = 0; s < nsend; s++) {
        memset(&args[s], 0, sizeof args[s]);
        args[s] = (struct sender_arg){.rt = rt,
                                      .id = s,
                                      .seed = seed + (unsigned)s,
                                      .count = total / (uint64_t)nsend,
                                      .nact = nact};
        pthread_create(&th[s], NULL, sender_main, &args[s]);
    }
    for (int s = 0; s < nsend; s++)
        pthread_join(th[s], NULL);
    wait_total(total, 240);
    assert_int_equal(atomic_load(&T.total), total);
    for (int i = 0; i < nact; i++) {
        uint64_t want = 0;
        for (int s = 0; s < nsend; s++)
            want += args[s].sent[i];
        assert_int_equal(atomic_load(&T.delivered[i]), want);
    }
    assert_int_equal(atomic_load(&T.violations), 0);
}

static void stress_turn_exclusivity(void **st)
{
    (void)st;
    reset();
    unsigned seed = mx_test_seed();
    struct rt *rt;
    struct rt_config cfg = {.behavior = &tb, .workers = 4, .idle_ms = 60000};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    run_senders(rt, NSEND, NACT, 1000000, seed);
    struct rt_stats stats;
    rt_get_stats(rt, &stats);
    assert_int_equal(stats.active, NACT);
    assert_int_equal(stats.messages, 1000000);
    rt_shutdown(rt);
    assert_int_equal(atomic_load(&T.shutdown_deactivations), NACT);
    assert_int_equal(atomic_load(&T.cancelled), 0);
}

/* The same, with senders running idle actors' turns themselves (RT_SEND_RUN_HERE) while
 * workers run the rest: still one turn at a time per actor, and every count exact. */
static void stress_turns_run_by_senders(void **st)
{
    (void)st;
    reset();
    unsigned seed = mx_test_seed();
    struct rt *rt;
    struct rt_config cfg = {.behavior = &tb, .workers = 2, .idle_ms = 60000};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    send_flags = RT_SEND_RUN_HERE;
    run_senders(rt, NSEND, NACT, 1000000, seed);
    send_flags = 0;
    rt_shutdown(rt);
    assert_int_equal(atomic_load(&T.cancelled), 0);
}

static void fifo_per_sender_small_mailbox(void **st)
{
    (void)st;
    reset();
    unsigned seed = mx_test_seed();
    struct rt *rt;
    /* batch 1 and a tiny mailbox: every message is its own turn and senders keep
     * running into the cap, so order must survive rescheduling and refusal. */
    struct rt_config cfg = {.behavior = &tb, .workers = 2, .batch = 1, .mailbox_cap = 8};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    run_senders(rt, 4, 3, 200000, seed);
    rt_shutdown(rt);
}

/* ---- timers ------------------------------------------------------------------- */

static void timers_fire_in_order_never_early_cancel_works(void **st)
{
    (void)st;
    reset();
    struct rt *rt;
    struct rt_config cfg = {.behavior = &tb, .workers = 2, .idle_ms = 60000};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    send_retry(rt, 7, new_msg(K_TIMERS, -1, 0));
    mx_sleep_ms(400);
    rt_shutdown(rt);

    struct tstate last = get_last_state(), *s = &last;
    int want = 0;
    for (int k = 0; k < 20; k++)
        want += s->expect[k];
    assert_int_equal(s->nfired, want);
    for (int j = 0; j < s->nfired; j++) {
        int k = s->fired_order[j];
        assert_true(s->expect[k]);                     /* cancelled ones never come */
        assert_true(s->fired_at[j] >= s->deadline[k]); /* never early */
        if (j > 0)
            assert_true(s->deadline[k] >= s->deadline[s->fired_order[j - 1]]);
        for (int i = 0; i < j; i++)
            assert_int_not_equal(s->fired_order[i], k); /* once each */
    }
    /* #1 was moved to 250 ms: it came last. */
    assert_int_equal(s->fired_order[s->nfired - 1], 1);
}

static void timer_keeps_actor_active_until_it_fires(void **st)
{
    (void)st;
    reset();
    struct rt *rt;
    struct rt_config cfg = {.behavior = &tb, .workers = 2, .idle_ms = 20, .sweep_ms = 5};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    send_retry(rt, 3, new_msg(K_ARM_ONE, -1, 0)); /* idle, but a 300 ms timer is armed */
    mx_sleep_ms(150);
    struct rt_stats stats;
    rt_get_stats(rt, &stats);
    assert_int_equal(stats.active, 1);
    assert_int_equal(stats.deactivations, 0);
    mx_sleep_ms(350); /* fired at 300 ms, then idle for 20 ms: deactivated */
    rt_get_stats(rt, &stats);
    assert_int_equal(stats.active, 0);
    assert_int_equal(stats.activations, 1); /* the timer did not re-activate it */
    struct tstate last = get_last_state();
    assert_int_equal(last.nfired, 1);
    assert_true(last.fired_at[0] >= last.deadline[0]);
    rt_shutdown(rt);
}

/* ---- idle deactivation -------------------------------------------------------- */

static void idle_deactivation_returns_to_zero(void **st)
{
    (void)st;
    reset();
    struct rt *rt;
    struct rt_config cfg = {.behavior = &tb, .workers = 2, .idle_ms = 50, .sweep_ms = 10};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    for (int i = 0; i < NACT; i++)
        send_retry(rt, i, new_msg(K_COUNT, -1, 0));
    wait_total(NACT, 10);
    struct rt_stats stats;
    for (int k = 0; k < 200; k++) {
        rt_get_stats(rt, &stats);
        if (stats.active == 0)
            break;
        mx_sleep_ms(10);
    }
    assert_int_equal(stats.active, 0);
    assert_int_equal(stats.deactivations, NACT);
    assert_int_equal(atomic_load(&T.deactivations), NACT);
    assert_int_equal(atomic_load(&T.shutdown_deactivations), 0);
    rt_shutdown(rt);
}

static void sends_racing_deactivation_all_arrive(void **st)
{
    (void)st;
    reset();
    unsigned seed = mx_test_seed();
    struct rt *rt;
    /* Deactivate after 1 ms idle, look every ms: most sends race a deactivation. */
    struct rt_config cfg = {.behavior = &tb, .workers = 2, .idle_ms = 1, .sweep_ms = 1};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    enum { N = 10000, ACTORS = 10 };
    for (int k = 0; k < N; k++) {
        send_retry(rt, (int)(rand_r(&seed) % ACTORS), new_msg(K_COUNT, -1, 0));
        if (k % 8 == 0) {
            struct timespec ts = {0, (long)(rand_r(&seed) % 1500) * 1000};
            nanosleep(&ts, NULL);
        }
    }
    wait_total(N, 30);
    assert_int_equal(atomic_load(&T.total), N);
    struct rt_stats stats;
    rt_get_stats(rt, &stats);
    printf("activations=%" PRIu64 " deactivations=%" PRIu64 "\n", stats.activations,
           stats.deactivations);
    assert_true(stats.deactivations > 100); /* the race was really run */
    assert_int_equal(atomic_load(&T.violations), 0);
    rt_shutdown(rt);
    assert_int_equal(atomic_load(&T.cancelled), 0);
}

/* ---- caps and shutdown -------------------------------------------------------- */

static void mailbox_cap_refuses_then_recovers(void **st)
{
    (void)st;
    reset();
    struct rt *rt;
    struct rt_config cfg = {.behavior = &tb, .workers = 1, .mailbox_cap = 4};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    send_retry(rt, 1, new_msg(K_BLOCK, -1, 0));
    wait_blocked(); /* 1 counted, in its turn */
    for (int k = 0; k < 3; k++)
        assert_int_equal(send_to(rt, 1, new_msg(K_COUNT, -1, 0)), RT_OK);
    struct tmsg *extra = new_msg(K_COUNT, -1, 0);
    assert_int_equal(send_to(rt, 1, extra), RT_EFULL);                /* still the caller's */
    assert_int_equal(send_to(rt, 2, new_msg(K_COUNT, -1, 0)), RT_OK); /* others unaffected */
    struct rt_stats stats;
    rt_get_stats(rt, &stats);
    assert_int_equal(stats.mailbox_refused, 1);
    open_gate();
    wait_total(5, 10);
    assert_int_equal(send_to(rt, 1, extra), RT_OK);
    wait_total(6, 10);
    assert_int_equal(atomic_load(&T.total), 6);
    rt_shutdown(rt);
}

static void actor_cap_refuses_new_actors(void **st)
{
    (void)st;
    reset();
    struct rt *rt;
    struct rt_config cfg = {.behavior = &tb, .workers = 1, .max_actors = 10, .idle_ms = 60000};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(send_to(rt, i, new_msg(K_COUNT, -1, 0)), RT_OK);
    struct tmsg *t = new_msg(K_COUNT, -1, 0);
    assert_int_equal(send_to(rt, 10, t), RT_ELIMIT);
    assert_int_equal(send_to(rt, 3, t), RT_OK); /* an active one still takes messages */
    struct tmsg *u = new_msg(K_COUNT, -1, 0);
    assert_int_equal(rt_send(rt, "a99", 3, &u->m, RT_SEND_IF_ACTIVE), RT_ENOENT);
    assert_int_equal(rt_send(rt, "", 0, &u->m, 0), RT_EINVAL);
    free(u);
    wait_total(11, 10);
    rt_shutdown(rt);
}

static void *shutdown_main(void *p)
{
    rt_shutdown(p);
    return NULL;
}

static void shutdown_cancels_every_pending_message(void **st)
{
    (void)st;
    reset();
    struct rt *rt;
    struct rt_config cfg = {.behavior = &tb, .workers = 1, .idle_ms = 60000};
    assert_int_equal(rt_start(&rt, &cfg), 0);
    enum { MORE = 100, OTHERS = 50 };
    struct tmsg *all[1 + MORE + OTHERS];
    int n = 0;
    all[n] = new_msg(K_BLOCK, -1, 0);
    atomic_fetch_add(&all[n]->completions, 0);
    send_retry(rt, 0, all[n++]);
    wait_blocked(); /* the only worker is inside actor 0's turn, which counted 1 */
    for (int k = 0; k < MORE; k++) {
        all[n] = new_msg(K_COUNT, -1, 0);
        send_retry(rt, 0, all[n++]);
    }
    for (int k = 0; k < OTHERS; k++) {
        all[n] = new_msg(K_COUNT, -1, 0);
        send_retry(rt, 1 + k, all[n++]);
    }
    /* Messages are freed when delivered; keep our own completion flags by not freeing
     * the cancelled ones (msg_cancel does not free) and counting the delivered ones. */
    pthread_t th;
    pthread_create(&th, NULL, shutdown_main, rt);
    mx_sleep_ms(50);
    struct tmsg *late = new_msg(K_COUNT, -1, 0);
    assert_int_equal(send_to(rt, 0, late), RT_ESHUTDOWN);
    free(late);
    open_gate();
    pthread_join(th, NULL);

    assert_int_equal(atomic_load(&T.total), 1);                 /* the blocked one */
    assert_int_equal(atomic_load(&T.cancelled), MORE + OTHERS); /* all the rest */
    for (int k = 1; k < n; k++) {
        assert_int_equal(atomic_load(&all[k]->completions), 1);
        free(all[k]);
    }
    /* Only actor 0 ever ran a turn, so only it had state to release. */
    assert_int_equal(atomic_load(&T.shutdown_deactivations), 1);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(stress_turn_exclusivity),
    cmocka_unit_test(stress_turns_run_by_senders),
    cmocka_unit_test(fifo_per_sender_small_mailbox),
    cmocka_unit_test(timers_fire_in_order_never_early_cancel_works),
    cmocka_unit_test(timer_keeps_actor_active_until_it_fires),
    cmocka_unit_test(idle_deactivation_returns_to_zero),
    cmocka_unit_test(sends_racing_deactivation_all_arrive),
    cmocka_unit_test(mailbox_cap_refuses_then_recovers),
    cmocka_unit_test(actor_cap_refuses_new_actors),
    cmocka_unit_test(shutdown_cancels_every_pending_message),
};
MX_TEST_MAIN(tests)
