/*
 * Timer heap and timer thread.
 *
 * The heap is an array of pointers into the callers' timers, each of which records its
 * own index so that disarming is O(log n). Ordering is (deadline, seq): seq counts
 * arms, so two timers with one deadline fire in the order they were armed.
 *
 * The thread sleeps on a condition variable bound to CLOCK_MONOTONIC until the earliest
 * deadline or the next tick, whichever is first. Arming a timer due before that time
 * wakes it (struct mx_sleeper). Fire callbacks run under the lock, which makes "disarm returned
 * false" mean "the fire callback has run or is running": there is no third state.
 */
#include "actors/timers.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/clock.h"

static bool earlier(const struct mx_timer *a, const struct mx_timer *b)
{
    if (a->_deadline_ns != b->_deadline_ns)
        return a->_deadline_ns < b->_deadline_ns;
    return a->_seq < b->_seq;
}

static void place(struct mx_timer_heap *h, uint32_t i, struct mx_timer *t)
{
    h->v[i] = t;
    t->_idx = i;
}

static void sift_up(struct mx_timer_heap *h, uint32_t i)
{
    struct mx_timer *t = h->v[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!earlier(t, h->v[parent]))
            break;
        place(h, i, h->v[parent]);
        i = parent;
    }
    place(h, i, t);
}

static void sift_down(struct mx_timer_heap *h, uint32_t i)
{
    struct mx_timer *t = h->v[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && earlier(h->v[child + 1], h->v[child]))
            child++;
        if (!earlier(h->v[child], t))
            break;
        place(h, i, h->v[child]);
        i = child;
    }
    place(h, i, t);
}

void mx_timer_heap_init(struct mx_timer_heap *h)
{
    h->v = NULL;
    h->n = h->cap = 0;
    h->seq = 0;
}

void mx_timer_heap_free(struct mx_timer_heap *h)
{
    free(h->v);
    mx_timer_heap_init(h);
}

int mx_timer_heap_push(struct mx_timer_heap *h, struct mx_timer *t, uint64_t deadline_ns)
{
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 64;
        struct mx_timer **v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    t->_deadline_ns = deadline_ns;
    t->_seq = h->seq++;
    place(h, h->n, t);
    sift_up(h, h->n++);
    return 0;
}

void mx_timer_heap_remove(struct mx_timer_heap *h, struct mx_timer *t)
{
    uint32_t i = t->_idx;
    struct mx_timer *last = h->v[--h->n];
    t->_idx = MX_TIMER_IDLE;
    if (last == t)
        return;
    place(h, i, last);
    /* The moved timer may belong above or below its new place, never both. */
    if (i > 0 && earlier(last, h->v[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

struct mx_timer *mx_timer_heap_pop_due(struct mx_timer_heap *h, uint64_t now_ns)
{
    if (h->n == 0 || h->v[0]->_deadline_ns > now_ns)
        return NULL;
    struct mx_timer *t = h->v[0];
    mx_timer_heap_remove(h, t);
    return t;
}

uint64_t mx_timer_heap_next(const struct mx_timer_heap *h)
{
    return h->n ? h->v[0]->_deadline_ns : UINT64_MAX;
}

struct mx_timers {
    pthread_mutex_t lock;
    struct mx_sleeper sleeper; /* lock */
    pthread_t thread;
    struct mx_timer_heap heap; /* lock */
    bool stop;                 /* lock */
    struct mx_timers_config cfg;
};

static void *timer_thread(void *arg)
{
    struct mx_timers *ts = arg;
    uint64_t next_tick = ts->cfg.tick_ns ? mx_mono_ns() + ts->cfg.tick_ns : UINT64_MAX;

    pthread_mutex_lock(&ts->lock);
    while (!ts->stop) {
        uint64_t now = mx_mono_ns();
        struct mx_timer *t;
        while ((t = mx_timer_heap_pop_due(&ts->heap, now)) != NULL)
            ts->cfg.fire(ts->cfg.ctx, t);
        if (now >= next_tick) {
            pthread_mutex_unlock(&ts->lock);
            ts->cfg.tick(ts->cfg.ctx, now);
            pthread_mutex_lock(&ts->lock);
            next_tick = now + ts->cfg.tick_ns;
            continue;
        }
        uint64_t until = mx_timer_heap_next(&ts->heap);
        if (next_tick < until)
            until = next_tick;
        mx_sleeper_sleep(&ts->sleeper, &ts->lock, until);
    }
    pthread_mutex_unlock(&ts->lock);
    return NULL;
}

int mx_timers_start(struct mx_timers **out, const struct mx_timers_config *cfg)
{
    struct mx_timers *ts = calloc(1, sizeof *ts);
    int rc = ENOMEM;
    if (!ts)
        return rc;
    ts->cfg = *cfg;
    mx_timer_heap_init(&ts->heap);
    pthread_mutex_init(&ts->lock, NULL);
    mx_sleeper_init(&ts->sleeper);
    rc = pthread_create(&ts->thread, NULL, timer_thread, ts);
    if (rc != 0) {
        pthread_cond_destroy(&ts->sleeper.wake);
        pthread_mutex_destroy(&ts->lock);
        free(ts);
        return rc;
    }
    *out = ts;
    return 0;
}

int mx_timers_arm(struct mx_timers *ts, struct mx_timer *t, uint64_t deadline_ns)
{
    int rc = -2;
    pthread_mutex_lock(&ts->lock);
    if (!ts->stop) {
        rc = mx_timer_heap_push(&ts->heap, t, deadline_ns);
        if (rc == 0)
            mx_sleeper_wake_for(&ts->sleeper, deadline_ns); /* it might sleep too long */
    }
    pthread_mutex_unlock(&ts->lock);
    return rc;
}

bool mx_timers_disarm(struct mx_timers *ts, struct mx_timer *t)
{
    bool was_armed = false;
    pthread_mutex_lock(&ts->lock);
    if (mx_timer_armed(t)) {
        mx_timer_heap_remove(&ts->heap, t);
        was_armed = true;
    }
    pthread_mutex_unlock(&ts->lock);
    return was_armed;
}

void mx_timers_stop(struct mx_timers *ts, void (*discard)(void *ctx, struct mx_timer *t))
{
    pthread_mutex_lock(&ts->lock);
    ts->stop = true;
    mx_sleeper_wake(&ts->sleeper);
    pthread_mutex_unlock(&ts->lock);
    pthread_join(ts->thread, NULL);

    while (ts->heap.n > 0) {
        struct mx_timer *t = ts->heap.v[ts->heap.n - 1];
        mx_timer_heap_remove(&ts->heap, t);
        if (discard)
            discard(ts->cfg.ctx, t);
    }
    mx_timer_heap_free(&ts->heap);
    pthread_cond_destroy(&ts->sleeper.wake);
    pthread_mutex_destroy(&ts->lock);
    free(ts);
}
