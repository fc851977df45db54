/*
 * The actor runtime (see runtime.h for the contract).
 *
 * Layout of this file: the actor and directory (sharded hash table of active actors),
 * the run queue and workers, a turn, timers, idle deactivation (the sweeper), start and
 * shutdown.
 *
 * Scheduling. Each actor has a count of messages sent and not yet handled (`pending`).
 * A sender first reserves its place in the count (compare-and-swap, which also enforces
 * the mailbox cap), then pushes onto the mailbox. The sender whose reservation took the
 * count from 0 to 1 puts the actor on the run queue; no one else does, so an actor is
 * on the run queue at most once and runs on one worker at a time. A turn pops at most
 * `batch` of the messages it counted, then subtracts what it handled; if messages remain
 * it goes to the back of the run queue. Subtracting is the last thing a turn does with
 * the actor: once the count is 0 the sweeper may free it.
 *
 * Deactivation. At the end of a turn the behavior says whether the actor is idle; if so
 * the worker records since when and lists the actor for the sweeper (once). The sweeper,
 * on the timer thread, deactivates an actor idle for idle_ms by swapping its count from
 * 0 to DEAD under its directory shard's lock, after checking it has no armed timer and
 * its barrier has passed. Senders look an actor up and reserve in its count under that
 * same lock, so a sender either reserved first (the swap fails, the actor stays) or finds
 * the name gone and activates a fresh actor: a message racing a deactivation is never
 * lost. The only push made without the shard lock is a timer firing, and an armed timer
 * pins its actor.
 *
 * Lock order: timers lock -> run queue lock; shard lock -> (nothing); idle-list lock ->
 * (nothing). No thread holds two shard locks.
 */
#include "actors/runtime.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/container_of.h"
#include "common/hash.h"
#include "common/log.h"

#define SHARDS       64
#define DEAD         UINT32_MAX
#define NAME_MAX_LEN UINT16_MAX

struct rt_actor {
    struct rt *rt;
    /* Senders and the running turn: messages reserved and not yet handled; DEAD once
     * the sweeper has deactivated the actor. */
    _Atomic uint32_t pending;
    /* Armed timers; an actor with pins is not deactivated. */
    _Atomic uint32_t pins;
    struct mbox mbox;
    struct rt_actor *dir_next;  /* shard lock */
    struct rt_actor *run_next;  /* run queue lock */
    struct rt_actor *idle_next; /* idle-list lock, then the sweeper's own */
    /* Written at the end of each turn, read by the sweeper: mono ms + 1 when the turn
     * ended idle, 0 when busy; and the barrier the behavior asked for. */
    _Atomic uint64_t idle_since;
    _Atomic uint64_t barrier;
    _Atomic bool in_idle_list; /* whoever flips it false -> true lists the actor */
    uint64_t listed_at;        /* sweeper: mono ms when put on the idle list */
    uint64_t hash;             /* immutable */
    bool activated;            /* turn-owned */
    void *turn_ctx;            /* turn-owned: rt_turn_ctx() */
    uint16_t name_len;         /* immutable */
    char name[];               /* NUL-terminated; the behavior's state follows, aligned */
};

struct shard {
    pthread_mutex_t lock;
    struct rt_actor **buckets; /* chains through dir_next */
    size_t nbuckets;           /* power of two */
    size_t count;
} __attribute__((aligned(64)));

struct rt {
    struct rt_config cfg;
    struct mx_hash_key key;
    struct shard shards[SHARDS];
    _Atomic bool closing;

    /* Run queue: FIFO of actors that have messages and are not running. */
    pthread_mutex_t rq_lock;
    pthread_cond_t rq_cond;
    struct rt_actor *rq_head, *rq_tail; /* rq_lock */
    size_t rq_len;                      /* rq_lock */
    unsigned rq_sleeping;               /* rq_lock */
    bool rq_stop;                       /* rq_lock */
    pthread_t *workers;
    unsigned nworkers;

    struct mx_timers *timers;

    /* Actors whose last turn ended idle, oldest first. */
    pthread_mutex_t idle_lock;
    struct rt_actor *idle_head, *idle_tail; /* idle_lock */

    _Atomic size_t active;
    _Atomic uint64_t activations, deactivations, messages, turns, refused;
};

const char *rt_strerror(int status)
{
    switch (status) {
    case RT_OK:
        return "ok";
    case RT_EFULL:
        return "mailbox full";
    case RT_ELIMIT:
        return "too many active actors";
    case RT_ESHUTDOWN:
        return "shutting down";
    case RT_ENOMEM:
        return "out of memory";
    case RT_ENOENT:
        return "actor not active";
    case RT_EINVAL:
        return "invalid actor name";
    }
    return "unknown";
}

/* ---- actors and the directory ---------------------------------------------------- */

static size_t state_offset(size_t name_len)
{
    size_t off = sizeof(struct rt_actor) + name_len + 1;
    return (off + 15) & ~(size_t)15;
}

static void *state_of(const struct rt_actor *a)
{
    return (char *)a + state_offset(a->name_len);
}

void *rt_ctx(const struct rt_actor *self)
{
    return self->rt->cfg.ctx;
}

struct rt *rt_of(const struct rt_actor *self)
{
    return self->rt;
}

const char *rt_name(const struct rt_actor *self, size_t *len)
{
    if (len)
        *len = self->name_len;
    return self->name;
}

static struct rt_actor *actor_new(struct rt *rt, const char *name, size_t len, uint64_t hash)
{
    size_t size = state_offset(len) + rt->cfg.behavior->state_size;
    struct rt_actor *a = calloc(1, size);
    if (!a)
        return NULL;
    a->rt = rt;
    atomic_init(&a->pending, 0);
    atomic_init(&a->pins, 0);
    atomic_init(&a->idle_since, 0);
    atomic_init(&a->barrier, 0);
    atomic_init(&a->in_idle_list, false);
    mbox_init(&a->mbox);
    a->hash = hash;
    a->name_len = (uint16_t)len;
    memcpy(a->name, name, len);
    a->name[len] = '\0';
    return a;
}

static struct shard *shard_for(struct rt *rt, uint64_t hash)
{
    return &rt->shards[hash & (SHARDS - 1)];
}

/* The bucket index uses the hash bits above those that picked the shard. */
static size_t bucket_for(const struct shard *s, uint64_t hash)
{
    return (size_t)(hash >> 6) & (s->nbuckets - 1);
}

/* Shard lock held. */
static struct rt_actor *shard_find(struct shard *s, const char *name, size_t len, uint64_t hash)
{
    for (struct rt_actor *a = s->buckets[bucket_for(s, hash)]; a; a = a->dir_next)
        if (a->hash == hash && a->name_len == len && memcmp(a->name, name, len) == 0)
            return a;
    return NULL;
}

/* Shard lock held. Growing is best effort: a failed realloc leaves longer chains. */
static void shard_insert(struct shard *s, struct rt_actor *a)
{
    if (s->count >= s->nbuckets) {
        size_t n = s->nbuckets * 2;
        struct rt_actor **b = calloc(n, sizeof *b);
        if (b) {
            for (size_t i = 0; i < s->nbuckets; i++) {
                struct rt_actor *next;
                for (struct rt_actor *x = s->buckets[i]; x; x = next) {
                    next = x->dir_next;
                    size_t j = (size_t)(x->hash >> 6) & (n - 1);
                    x->dir_next = b[j];
                    b[j] = x;
                }
            }
            free(s->buckets);
            s->buckets = b;
            s->nbuckets = n;
        }
    }
    size_t i = bucket_for(s, a->hash);
    a->dir_next = s->buckets[i];
    s->buckets[i] = a;
    s->count++;
}

/* Shard lock held. */
static void shard_remove(struct shard *s, struct rt_actor *a)
{
    struct rt_actor **pp = &s->buckets[bucket_for(s, a->hash)];
    while (*pp != a)
        pp = &(*pp)->dir_next;
    *pp = a->dir_next;
    s->count--;
}

/* ---- run queue and workers ------------------------------------------------------- */

/* rq_lock held. */
static void rq_append(struct rt *rt, struct rt_actor *a)
{
    a->run_next = NULL;
    if (rt->rq_tail)
        rt->rq_tail->run_next = a;
    else
        rt->rq_head = a;
    rt->rq_tail = a;
    rt->rq_len++;
    if (rt->rq_sleeping > 0)
        pthread_cond_signal(&rt->rq_cond);
}

static void schedule(struct rt *rt, struct rt_actor *a)
{
    pthread_mutex_lock(&rt->rq_lock);
    rq_append(rt, a);
    pthread_mutex_unlock(&rt->rq_lock);
}

/* Reserves a place in a's count. Returns the count before, or DEAD, or UINT32_MAX - 1
 * when the mailbox is at `cap` (0: no cap). */
#define RESERVE_FULL (UINT32_MAX - 1)
static uint32_t reserve(struct rt_actor *a, uint32_t cap)
{
    uint32_t p = atomic_load_explicit(&a->pending, memory_order_relaxed);
    do {
        if (p == DEAD)
            return DEAD;
        if (cap && p >= cap)
            return RESERVE_FULL;
    } while (!atomic_compare_exchange_weak_explicit(&a->pending, &p, p + 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    return p;
}

static void list_idle(struct rt *rt, struct rt_actor *a, uint64_t now_ms)
{
    a->listed_at = now_ms;
    a->idle_next = NULL;
    pthread_mutex_lock(&rt->idle_lock);
    if (rt->idle_tail)
        rt->idle_tail->idle_next = a;
    else
        rt->idle_head = a;
    rt->idle_tail = a;
    pthread_mutex_unlock(&rt->idle_lock);
}

static void deliver(struct rt_actor *a, void *state, struct rt_msg *m);

/* Runs one turn of `a`. Returns true when `a` must go back on the run queue. */
static bool run_turn(struct rt *rt, struct rt_actor *a, void *turn_ctx)
{
    a->turn_ctx = turn_ctx;
    void *state = state_of(a);
    const struct rt_behavior *b = rt->cfg.behavior;

    if (!a->activated) {
        a->activated = true;
        b->activate(a, state);
    }
    uint32_t n = atomic_load_explicit(&a->pending, memory_order_acquire);
    if (n > rt->cfg.batch)
        n = rt->cfg.batch;
    for (uint32_t i = 0; i < n; i++) {
        struct mbox_node *node = mbox_pop_wait(&a->mbox);
        deliver(a, state, container_of(node, struct rt_msg, _node));
    }
    atomic_fetch_add_explicit(&rt->messages, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&rt->turns, 1, memory_order_relaxed);
    a->turn_ctx = NULL;

    uint64_t barrier = 0;
    if (b->idle(a, state, &barrier)) {
        uint64_t now_ms = mx_mono_ns() / MX_NS_PER_MS;
        atomic_store_explicit(&a->barrier, barrier, memory_order_relaxed);
        /* seq_cst on idle_since and in_idle_list, here and in sweep(): each side writes one
         * and then reads the other (this turn: idle_since, then in_idle_list; the sweeper
         * unlisting a busy actor: in_idle_list, then idle_since). Release/acquire lets both
         * reads see the old values (a store may pass a later load), and then neither lists
         * the idle actor again: it would stay in memory for good. One total order makes at
         * least one side see the other's write. */
        atomic_store_explicit(&a->idle_since, now_ms + 1, memory_order_seq_cst);
        if (!atomic_exchange_explicit(&a->in_idle_list, true, memory_order_seq_cst))
            list_idle(rt, a, now_ms);
    } else {
        atomic_store_explicit(&a->idle_since, 0, memory_order_seq_cst);
    }
    /* Last touch: release so that the sweeper, which acquires the 0, sees this turn's
     * writes to the state before it deactivates the actor. */
    uint32_t before = atomic_fetch_sub_explicit(&a->pending, n, memory_order_acq_rel);
    return before > n;
}

static void *worker_main(void *arg)
{
    struct rt *rt = arg;
    pthread_mutex_lock(&rt->rq_lock);
    for (;;) {
        while (!rt->rq_head && !rt->rq_stop) {
            rt->rq_sleeping++;
            pthread_cond_wait(&rt->rq_cond, &rt->rq_lock);
            rt->rq_sleeping--;
        }
        if (rt->rq_stop)
            break;
        struct rt_actor *a = rt->rq_head;
        rt->rq_head = a->run_next;
        if (!rt->rq_head)
            rt->rq_tail = NULL;
        rt->rq_len--;
        pthread_mutex_unlock(&rt->rq_lock);

        bool again = run_turn(rt, a, NULL);

        pthread_mutex_lock(&rt->rq_lock);
        if (again)
            rq_append(rt, a);
    }
    pthread_mutex_unlock(&rt->rq_lock);
    return NULL;
}

/* ---- sending --------------------------------------------------------------------- */

static int send_to(struct rt *rt, const char *name, size_t len, struct rt_msg *m, int flags,
                   void *turn_ctx)
{
    if (len == 0 || len > NAME_MAX_LEN)
        return RT_EINVAL;
    uint64_t hash = mx_siphash(&rt->key, name, len);
    struct shard *s = shard_for(rt, hash);
    int rc = RT_OK;

    pthread_mutex_lock(&s->lock);
    if (atomic_load_explicit(&rt->closing, memory_order_relaxed)) {
        rc = RT_ESHUTDOWN;
        goto out;
    }
    struct rt_actor *a = shard_find(s, name, len, hash);
    if (!a) {
        if (flags & RT_SEND_IF_ACTIVE) {
            rc = RT_ENOENT;
            goto out;
        }
        if (rt->cfg.max_actors &&
            atomic_load_explicit(&rt->active, memory_order_relaxed) >= rt->cfg.max_actors) {
            rc = RT_ELIMIT;
            goto out;
        }
        a = actor_new(rt, name, len, hash);
        if (!a) {
            rc = RT_ENOMEM;
            goto out;
        }
        shard_insert(s, a);
        atomic_fetch_add_explicit(&rt->active, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&rt->activations, 1, memory_order_relaxed);
    }
    /* A DEAD actor is never in the directory: the sweeper removes it under this lock. */
    uint32_t before = reserve(a, rt->cfg.mailbox_cap);
    if (before == RESERVE_FULL) {
        atomic_fetch_add_explicit(&rt->refused, 1, memory_order_relaxed);
        rc = RT_EFULL;
        goto out;
    }
    m->_timer = false;
    mbox_push(&a->mbox, &m->_node);
    pthread_mutex_unlock(&s->lock);
    /* Our message keeps the count above 0, so `a` cannot be freed under us. The sender that
     * took the count from 0 owns the next turn: a worker's, or its own. */
    if (before == 0) {
        if ((flags & RT_SEND_RUN_HERE) && !run_turn(rt, a, turn_ctx))
            return RT_OK;
        schedule(rt, a);
    }
    return RT_OK;
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int rt_send(struct rt *rt, const char *name, size_t len, struct rt_msg *m, int flags)
{
    return send_to(rt, name, len, m, flags, NULL);
}

int rt_send_here(struct rt *rt, const char *name, size_t len, struct rt_msg *m, void *turn_ctx)
{
    return send_to(rt, name, len, m, RT_SEND_RUN_HERE, turn_ctx);
}

void *rt_turn_ctx(const struct rt_actor *self)
{
    return self->turn_ctx;
}

/* Pushes ignoring the cap, for an actor that cannot be deactivated meanwhile (the caller
 * is its turn, or holds a pin). A pinned actor may be DEAD for an instant while the
 * sweeper checks and puts it back; wait that out. */
static void push_forced(struct rt *rt, struct rt_actor *a, struct rt_msg *m)
{
    uint32_t before;
    while ((before = reserve(a, 0)) == DEAD)
        sched_yield();
    mbox_push(&a->mbox, &m->_node);
    if (before == 0)
        schedule(rt, a);
}

int rt_send_self(struct rt_actor *self, struct rt_msg *m)
{
    if (atomic_load_explicit(&self->rt->closing, memory_order_relaxed))
        return RT_ESHUTDOWN;
    m->_timer = false;
    push_forced(self->rt, self, m);
    return RT_OK;
}

/* ---- timers ---------------------------------------------------------------------- */

void rt_timer_init(struct rt_timer *t, uint32_t type)
{
    memset(t, 0, sizeof *t);
    mx_timer_init(&t->_t);
    t->msg.type = type;
    t->msg._timer = true;
    atomic_init(&t->_in_flight, false);
}

/* Timer thread, timers lock held. */
static void timer_fire(void *ctx, struct mx_timer *mt)
{
    struct rt *rt = ctx;
    struct rt_timer *t = container_of(mt, struct rt_timer, _t);
    struct rt_actor *a = t->_actor;
    atomic_store_explicit(&t->_in_flight, true, memory_order_relaxed);
    push_forced(rt, a, &t->msg);
    /* The message now keeps the actor; the pin may go. */
    atomic_fetch_sub_explicit(&a->pins, 1, memory_order_release);
}

/* After the timer thread stopped: the timer is disarmed; drop its pin. */
static void timer_discard(void *ctx, struct mx_timer *mt)
{
    (void)ctx;
    atomic_fetch_sub_explicit(&container_of(mt, struct rt_timer, _t)->_actor->pins, 1,
                              memory_order_relaxed);
}

static int timer_arm(struct rt_actor *self, struct rt_timer *t, uint64_t deadline_ns)
{
    struct rt *rt = self->rt;
    t->_actor = self;
    atomic_fetch_add_explicit(&self->pins, 1, memory_order_relaxed);
    int rc = mx_timers_arm(rt->timers, &t->_t, deadline_ns);
    if (rc != 0) {
        atomic_fetch_sub_explicit(&self->pins, 1, memory_order_relaxed);
        return rc == -1 ? RT_ENOMEM : RT_ESHUTDOWN;
    }
    return RT_OK;
}

int rt_timer_set(struct rt_actor *self, struct rt_timer *t, uint64_t deadline_ns)
{
    struct rt *rt = self->rt;
    if (atomic_load_explicit(&rt->closing, memory_order_relaxed) || !rt->timers)
        return RT_ESHUTDOWN;
    t->_cancelled = false;
    t->_set = true;
    if (mx_timers_disarm(rt->timers, &t->_t)) {
        atomic_fetch_sub_explicit(&self->pins, 1, memory_order_relaxed);
        return timer_arm(self, t, deadline_ns);
    }
    if (atomic_load_explicit(&t->_in_flight, memory_order_relaxed)) {
        /* Its message is in the mailbox: arm again when it is delivered. */
        t->_rearm_ns = deadline_ns;
        return RT_OK;
    }
    return timer_arm(self, t, deadline_ns);
}

void rt_timer_cancel(struct rt_actor *self, struct rt_timer *t)
{
    struct rt *rt = self->rt;
    t->_rearm_ns = 0;
    t->_set = false;
    if (rt->timers && mx_timers_disarm(rt->timers, &t->_t)) {
        atomic_fetch_sub_explicit(&self->pins, 1, memory_order_relaxed);
        return;
    }
    if (atomic_load_explicit(&t->_in_flight, memory_order_relaxed))
        t->_cancelled = true;
}

bool rt_timer_pending(const struct rt_timer *t)
{
    return t->_set;
}

static void deliver(struct rt_actor *a, void *state, struct rt_msg *m)
{
    if (m->_timer) {
        struct rt_timer *t = (struct rt_timer *)m;
        atomic_store_explicit(&t->_in_flight, false, memory_order_relaxed);
        if (t->_cancelled) {
            t->_cancelled = false;
            return;
        }
        if (t->_rearm_ns) {
            uint64_t when = t->_rearm_ns;
            t->_rearm_ns = 0;
            if (timer_arm(a, t, when) == RT_OK)
                return;
            /* Could not arm again (shutdown, memory): deliver now rather than never. */
        }
        t->_set = false;
    }
    a->rt->cfg.behavior->receive(a, state, m);
}

/* ---- idle deactivation ----------------------------------------------------------- */

static void actor_free(struct rt *rt, struct rt_actor *a, bool shutdown)
{
    rt->cfg.behavior->deactivate(a, state_of(a), shutdown);
    free(a);
}

/* Sweeper. Returns true when `a` was deactivated and freed. */
static bool try_deactivate(struct rt *rt, struct rt_actor *a, uint64_t since)
{
    struct shard *s = shard_for(rt, a->hash);
    pthread_mutex_lock(&s->lock);
    uint32_t zero = 0;
    if (!atomic_compare_exchange_strong_explicit(&a->pending, &zero, DEAD, memory_order_acq_rel,
                                                 memory_order_relaxed)) {
        pthread_mutex_unlock(&s->lock);
        return false;
    }
    /* No turn can start now. Was anything begun after we looked? */
    uint64_t barrier = atomic_load_explicit(&a->barrier, memory_order_relaxed);
    if (atomic_load_explicit(&a->pins, memory_order_acquire) != 0 ||
        atomic_load_explicit(&a->idle_since, memory_order_seq_cst) != since ||
        (barrier && rt->cfg.barrier_passed && !rt->cfg.barrier_passed(rt->cfg.ctx, barrier))) {
        atomic_store_explicit(&a->pending, 0, memory_order_release);
        pthread_mutex_unlock(&s->lock);
        return false;
    }
    shard_remove(s, a);
    pthread_mutex_unlock(&s->lock);

    actor_free(rt, a, false);
    atomic_fetch_sub_explicit(&rt->active, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rt->deactivations, 1, memory_order_relaxed);
    return true;
}

static void sweep(void *ctx, uint64_t now_ns)
{
    struct rt *rt = ctx;
    uint64_t now_ms = now_ns / MX_NS_PER_MS;
    uint64_t idle_ms = rt->cfg.idle_ms;

    /* Take the listed actors that have been listed long enough; the list is in listing
     * order, so stop at the first one that has not. */
    pthread_mutex_lock(&rt->idle_lock);
    struct rt_actor *due = rt->idle_head, *last = NULL;
    for (struct rt_actor *a = rt->idle_head; a && a->listed_at + idle_ms <= now_ms;
         a = a->idle_next)
        last = a;
    if (!last) {
        pthread_mutex_unlock(&rt->idle_lock);
        return;
    }
    rt->idle_head = last->idle_next;
    if (!rt->idle_head)
        rt->idle_tail = NULL;
    last->idle_next = NULL;
    pthread_mutex_unlock(&rt->idle_lock);

    struct rt_actor *next;
    size_t freed = 0;
    for (struct rt_actor *a = due; a; a = next) {
        next = a->idle_next;
        uint64_t since = atomic_load_explicit(&a->idle_since, memory_order_seq_cst);
        if (since == 0) {
            /* Busy again: unlist it. If it turned idle meanwhile and saw itself still
             * listed, list it again on its behalf. */
            atomic_store_explicit(&a->in_idle_list, false, memory_order_seq_cst);
            if (atomic_load_explicit(&a->idle_since, memory_order_seq_cst) == 0 ||
                atomic_exchange_explicit(&a->in_idle_list, true, memory_order_seq_cst))
                continue;
        } else if (since - 1 + idle_ms <= now_ms && try_deactivate(rt, a, since)) {
            freed++;
            continue;
        }
        list_idle(rt, a, now_ms);
    }
    /* A burst of resources that came and went leaves glibc holding the memory in its
     * arenas; give it back, so that memory returns to its baseline. */
    if (freed >= 4096)
        malloc_trim(0);
}

/* ---- start and shutdown ---------------------------------------------------------- */

int rt_start(struct rt **out, const struct rt_config *cfg)
{
    struct rt *rt = calloc(1, sizeof *rt);
    if (!rt)
        return ENOMEM;
    rt->cfg = *cfg;
    if (rt->cfg.workers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        rt->cfg.workers = n > 0 ? (unsigned)n : 1;
    }
    if (rt->cfg.batch == 0)
        rt->cfg.batch = 64;
    if (rt->cfg.mailbox_cap == 0)
        rt->cfg.mailbox_cap = 10000;
    if (rt->cfg.idle_ms == 0)
        rt->cfg.idle_ms = 2000;
    if (rt->cfg.sweep_ms == 0)
        rt->cfg.sweep_ms = rt->cfg.idle_ms / 4 ? rt->cfg.idle_ms / 4 : 1;
    if (mx_hash_key_random(&rt->key) != 0) {
        free(rt);
        return EIO;
    }
    for (int i = 0; i < SHARDS; i++) {
        pthread_mutex_init(&rt->shards[i].lock, NULL);
        rt->shards[i].nbuckets = 16;
        rt->shards[i].buckets = calloc(16, sizeof(struct rt_actor *));
        if (!rt->shards[i].buckets) {
            for (int j = 0; j <= i; j++) {
                free(rt->shards[j].buckets);
                pthread_mutex_destroy(&rt->shards[j].lock);
            }
            free(rt);
            return ENOMEM;
        }
    }
    pthread_mutex_init(&rt->rq_lock, NULL);
    pthread_cond_init(&rt->rq_cond, NULL);
    pthread_mutex_init(&rt->idle_lock, NULL);

    struct mx_timers_config tc = {
        .fire = timer_fire, .tick = sweep, .tick_ns = rt->cfg.sweep_ms * MX_NS_PER_MS, .ctx = rt};
    int rc = mx_timers_start(&rt->timers, &tc);
    if (rc != 0) {
        rt->nworkers = 0;
        rt_shutdown(rt);
        return rc;
    }
    rt->workers = calloc(rt->cfg.workers, sizeof(pthread_t));
    if (!rt->workers) {
        rt_shutdown(rt);
        return ENOMEM;
    }
    for (unsigned i = 0; i < rt->cfg.workers; i++) {
        rc = pthread_create(&rt->workers[i], NULL, worker_main, rt);
        if (rc != 0) {
            rt_shutdown(rt);
            return rc;
        }
        rt->nworkers++;
    }
    *out = rt;
    return 0;
}

void rt_shutdown(struct rt *rt)
{
    /* 1. Refuse new sends. Taking each shard lock orders the flag after every send in
     *    progress, so none completes after we drain below. */
    atomic_store(&rt->closing, true);
    for (int i = 0; i < SHARDS; i++) {
        pthread_mutex_lock(&rt->shards[i].lock);
        pthread_mutex_unlock(&rt->shards[i].lock);
    }

    /* 2. Let running turns finish; stop the workers. */
    pthread_mutex_lock(&rt->rq_lock);
    rt->rq_stop = true;
    pthread_cond_broadcast(&rt->rq_cond);
    pthread_mutex_unlock(&rt->rq_lock);
    for (unsigned i = 0; i < rt->nworkers; i++)
        pthread_join(rt->workers[i], NULL);
    free(rt->workers);

    /* 3. Stop the timer thread (and with it the sweeper); drop armed timers. */
    if (rt->timers) {
        mx_timers_stop(rt->timers, timer_discard);
        rt->timers = NULL;
    }

    /* 4. Alone now: cancel every undelivered message, deactivate every actor. */
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &rt->shards[i];
        for (size_t b = 0; b < s->nbuckets; b++) {
            struct rt_actor *next;
            for (struct rt_actor *a = s->buckets[b]; a; a = next) {
                next = a->dir_next;
                uint32_t n = atomic_load(&a->pending);
                for (uint32_t k = 0; k < n; k++) {
                    struct mbox_node *node = mbox_pop_wait(&a->mbox);
                    struct rt_msg *m = container_of(node, struct rt_msg, _node);
                    if (m->_timer)
                        atomic_store(&((struct rt_timer *)m)->_in_flight, false);
                    else if (m->cancel)
                        m->cancel(m);
                }
                atomic_store(&a->pending, 0);
                if (!a->activated) {
                    /* Never ran a turn: there is no state to release. */
                    free(a);
                    continue;
                }
                actor_free(rt, a, true);
            }
        }
        free(s->buckets);
        pthread_mutex_destroy(&s->lock);
    }
    pthread_mutex_destroy(&rt->rq_lock);
    pthread_cond_destroy(&rt->rq_cond);
    pthread_mutex_destroy(&rt->idle_lock);
    free(rt);
}

void rt_get_stats(struct rt *rt, struct rt_stats *out)
{
    out->active = atomic_load_explicit(&rt->active, memory_order_relaxed);
    out->activations = atomic_load_explicit(&rt->activations, memory_order_relaxed);
    out->deactivations = atomic_load_explicit(&rt->deactivations, memory_order_relaxed);
    out->messages = atomic_load_explicit(&rt->messages, memory_order_relaxed);
    out->turns = atomic_load_explicit(&rt->turns, memory_order_relaxed);
    out->mailbox_refused = atomic_load_explicit(&rt->refused, memory_order_relaxed);
    pthread_mutex_lock(&rt->rq_lock);
    out->run_queue = rt->rq_len;
    pthread_mutex_unlock(&rt->rq_lock);
}
