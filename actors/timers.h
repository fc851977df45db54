/*
 * Timers: a binary min-heap of deadlines on CLOCK_MONOTONIC (ties broken by arming
 * order, as libuv does), and one thread that fires what is due.
 *
 * The heap functions take `now` as an argument and do no locking, so their tests are
 * deterministic. The thread (struct mx_timers) owns a heap behind one mutex.
 *
 * Timers are intrusive: the caller embeds a struct mx_timer and owns its memory. A
 * timer is in the heap exactly while it is armed.
 */
#ifndef MX_TIMERS_H
#define MX_TIMERS_H

#include <stdbool.h>
#include <stdint.h>

#define MX_TIMER_IDLE UINT32_MAX

struct mx_timer {
    /* private: owned by whoever holds the heap */
    uint64_t _deadline_ns;
    uint64_t _seq;
    uint32_t _idx; /* position in the heap, MX_TIMER_IDLE when not armed */
};

struct mx_timer_heap {
    struct mx_timer **v;
    uint32_t n, cap;
    uint64_t seq;
};

static inline void mx_timer_init(struct mx_timer *t)
{
    t->_idx = MX_TIMER_IDLE;
    t->_deadline_ns = 0;
    t->_seq = 0;
}

static inline bool mx_timer_armed(const struct mx_timer *t)
{
    return t->_idx != MX_TIMER_IDLE;
}

static inline uint64_t mx_timer_deadline(const struct mx_timer *t)
{
    return t->_deadline_ns;
}

void mx_timer_heap_init(struct mx_timer_heap *h);
void mx_timer_heap_free(struct mx_timer_heap *h);
/* Arms `t` (not armed) at `deadline_ns`. Returns 0, or -1 when out of memory. */
int mx_timer_heap_push(struct mx_timer_heap *h, struct mx_timer *t, uint64_t deadline_ns);
/* Disarms `t` (armed in `h`). */
void mx_timer_heap_remove(struct mx_timer_heap *h, struct mx_timer *t);
/* Removes and returns the earliest timer due at `now_ns` (deadline <= now), else NULL. */
struct mx_timer *mx_timer_heap_pop_due(struct mx_timer_heap *h, uint64_t now_ns);
/* The earliest deadline, or UINT64_MAX when the heap is empty. */
uint64_t mx_timer_heap_next(const struct mx_timer_heap *h);

/* The timer thread. */
struct mx_timers;

struct mx_timers_config {
    /* Called on the timer thread with the timers' lock held, for each timer that is due,
     * in deadline order, after it was disarmed. Must not call back into mx_timers. */
    void (*fire)(void *ctx, struct mx_timer *t);
    /* Called on the timer thread without the lock about every tick_ns (0: never). */
    void (*tick)(void *ctx, uint64_t now_ns);
    uint64_t tick_ns;
    void *ctx;
};

/* Starts the thread. Returns 0, or an errno value. */
int mx_timers_start(struct mx_timers **out, const struct mx_timers_config *cfg);
/* Arms `t` at `deadline_ns`. Any thread. Returns 0, -1 out of memory, -2 stopped. */
int mx_timers_arm(struct mx_timers *ts, struct mx_timer *t, uint64_t deadline_ns);
/* Disarms `t`. Any thread. True when it was armed: it will not fire. False when it was
 * not armed (it has fired already, or was never armed). */
bool mx_timers_disarm(struct mx_timers *ts, struct mx_timer *t);
/* Stops and joins the thread; then calls `discard` (may be NULL) for every timer still
 * armed, disarmed first. No timer fires after this returns. Frees `ts`. */
void mx_timers_stop(struct mx_timers *ts, void (*discard)(void *ctx, struct mx_timer *t));

#endif
