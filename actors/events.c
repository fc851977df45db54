/*
 * The change index, the ring of recent events, and the waits (see events.h).
 *
 * One mutex guards the ring, the list of waits and the taking of an index. A change
 * collects the waits it completes into a private list under the lock and calls them after
 * it; the timer thread does the same for the waits whose deadline passed.
 */
#include "actors/events.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/container_of.h"

struct ev_log {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the timer thread: a nearer deadline, or closing */
    pthread_t timer;
    bool timer_started, closing;
    _Atomic uint64_t *counter;
    struct ev_event *ring; /* capacity slots; the oldest at `head` */
    uint32_t capacity, head, count;
    uint64_t first_kept; /* the index of the oldest event kept (0: none ever kept) */
    /* The waits: a list, which a change walks (at most the server's cap on waiting
     * requests, three quarters of --max-connections: see http/server.c), and their
     * deadlines in a heap, which the timer thread pops (timers.h, as the alarms do). */
    struct ev_wait *waits;
    struct mx_timer_heap deadlines;
    _Atomic size_t nwaits;
    /* Changes recorded and not yet durable, in index order (a ring of `pcap`): the index and
     * a hash of its resource's name; `done` once ev_durable() told it. The durable
     * watermark is the index before the first not done. */
    struct pending {
        uint64_t index, name_hash;
        bool done;
    } * pending;
    uint32_t pcap, phead, pcount;
    /* The highest index committed, and the first failed one above it (0: none): a cursor
     * stops before a failed end. */
    uint64_t ok_max, fail_tail;
};

#define PENDING_MAX (1u << 20) /* beyond it the oldest is taken as durable */

static uint64_t name_hash(const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
    return h;
}

static struct pending *pending_at(struct ev_log *log, uint32_t i)
{
    return &log->pending[(log->phead + i) % log->pcap];
}

/* Drops the durable entries at the front (lock held). */
static void pending_trim(struct ev_log *log)
{
    while (log->pcount && pending_at(log, 0)->done) {
        log->phead = (log->phead + 1) % log->pcap;
        log->pcount--;
    }
}

/* Notes a change not yet durable (lock held). */
static void pending_add(struct ev_log *log, uint64_t index, uint64_t hash)
{
    if (log->pcount == log->pcap) {
        uint32_t cap = log->pcap ? log->pcap * 2 : 256;
        struct pending *p = cap <= PENDING_MAX ? malloc(cap * sizeof *p) : NULL;
        if (!p) {
            /* No room: the oldest is taken as durable (a watch may then wake a little
             * early, never miss a change of its own). */
            pending_at(log, 0)->done = true;
            pending_trim(log);
        } else {
            for (uint32_t i = 0; i < log->pcount; i++)
                p[i] = *pending_at(log, i);
            free(log->pending);
            log->pending = p;
            log->pcap = cap;
            log->phead = 0;
        }
    }
    if (log->pcount < log->pcap) {
        *pending_at(log, log->pcount) = (struct pending){index, hash, false};
        log->pcount++;
    }
}

const char *ev_type_name(enum ev_type t)
{
    switch (t) {
    case EV_GRANTED:
        return "granted";
    case EV_RENEWED:
        return "renewed";
    case EV_RELEASED:
        return "released";
    case EV_EXPIRED:
        return "expired";
    case EV_BROKEN:
        return "broken";
    }
    return "changed";
}

void ev_event_clear(struct ev_event *e)
{
    mx_str_unref(e->owner);
    e->owner = NULL;
}

static void unlink_wait(struct ev_log *log, struct ev_wait *w)
{
    if (w->_prev)
        w->_prev->_next = w->_next;
    else
        log->waits = w->_next;
    if (w->_next)
        w->_next->_prev = w->_prev;
    w->_next = w->_prev = NULL;
    w->_queued = false;
    if (mx_timer_armed(&w->_timer))
        mx_timer_heap_remove(&log->deadlines, &w->_timer);
    atomic_fetch_sub(&log->nwaits, 1);
}

/* Calls each wait of a private list (linked through _next) without the lock. */
static void complete(struct ev_wait *list, bool changed)
{
    while (list) {
        struct ev_wait *w = list;
        list = w->_next;
        w->_next = NULL;
        w->done(w, changed);
    }
}

static void *timer_main(void *arg)
{
    struct ev_log *log = arg;
    pthread_mutex_lock(&log->lock);
    while (!log->closing) {
        uint64_t now = mx_mono_ns();
        struct ev_wait *due = NULL;
        struct mx_timer *t;
        while ((t = mx_timer_heap_pop_due(&log->deadlines, now)) != NULL) {
            struct ev_wait *w = container_of(t, struct ev_wait, _timer);
            unlink_wait(log, w);
            w->_next = due;
            due = w;
        }
        uint64_t next = mx_timer_heap_next(&log->deadlines);
        if (due) {
            pthread_mutex_unlock(&log->lock);
            complete(due, false);
            pthread_mutex_lock(&log->lock);
            continue;
        }
        if (next == UINT64_MAX)
            pthread_cond_wait(&log->wake, &log->lock);
        else
            mx_cond_wait_until(&log->wake, &log->lock, next);
    }
    pthread_mutex_unlock(&log->lock);
    return NULL;
}

int ev_open(struct ev_log **out, uint32_t capacity, _Atomic uint64_t *counter)
{
    struct ev_log *log = calloc(1, sizeof *log);
    if (!log)
        return -1;
    log->counter = counter;
    log->capacity = capacity;
    mx_timer_heap_init(&log->deadlines);
    if (capacity && !(log->ring = calloc(capacity, sizeof *log->ring))) {
        free(log);
        return -1;
    }
    pthread_mutex_init(&log->lock, NULL);
    mx_cond_init_mono(&log->wake);
    if (pthread_create(&log->timer, NULL, timer_main, log) != 0) {
        ev_close(log);
        return -1;
    }
    log->timer_started = true;
    *out = log;
    return 0;
}

/* Takes every wait off the list (lock held): a private list to complete. */
static struct ev_wait *take_all(struct ev_log *log)
{
    struct ev_wait *all = NULL;
    while (log->waits) {
        struct ev_wait *w = log->waits;
        unlink_wait(log, w);
        w->_next = all;
        all = w;
    }
    return all;
}

void ev_flush(struct ev_log *log)
{
    pthread_mutex_lock(&log->lock);
    struct ev_wait *all = take_all(log);
    pthread_mutex_unlock(&log->lock);
    complete(all, false);
}

void ev_close(struct ev_log *log)
{
    if (!log)
        return;
    pthread_mutex_lock(&log->lock);
    log->closing = true;
    struct ev_wait *all = take_all(log);
    pthread_cond_signal(&log->wake);
    pthread_mutex_unlock(&log->lock);
    complete(all, false);
    if (log->timer_started)
        pthread_join(log->timer, NULL);
    for (uint32_t i = 0; i < log->count; i++)
        ev_event_clear(&log->ring[(log->head + i) % log->capacity]);
    free(log->ring);
    free(log->pending);
    mx_timer_heap_free(&log->deadlines);
    pthread_cond_destroy(&log->wake);
    pthread_mutex_destroy(&log->lock);
    free(log);
}

static bool under(const char *name, size_t len, const char *prefix, size_t prefix_len)
{
    return len >= prefix_len && memcmp(name, prefix, prefix_len) == 0;
}

/* A slot for the next event at the ring's end, the oldest dropped when it is full (lock
 * held). */
static struct ev_event *ring_push(struct ev_log *log)
{
    struct ev_event *slot;
    if (log->count == log->capacity) {
        slot = &log->ring[log->head];
        ev_event_clear(slot);
        log->head = (log->head + 1) % log->capacity;
        log->count--;
    } else {
        slot = &log->ring[(log->head + log->count) % log->capacity];
    }
    log->count++;
    return slot;
}

/* The ring's position of the first event at or above `index` (lock held). */
static uint32_t ring_find(struct ev_log *log, uint64_t index)
{
    uint32_t lo = 0, hi = log->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (log->ring[(log->head + mid) % log->capacity].index < index)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

uint64_t ev_record(struct ev_log *log, uint64_t floor, const struct ev_event *e)
{
    pthread_mutex_lock(&log->lock);
    uint64_t index = atomic_load(log->counter) + 1;
    if (index <= floor)
        index = floor + 1; /* the counter is behind this resource (a restore): move past */
    atomic_store(log->counter, index);
    pending_add(log, index, name_hash(e->name, e->name_len));
    if (log->capacity) {
        struct ev_event *slot = ring_push(log);
        *slot = *e;
        slot->index = index;
        slot->durable = false;
        mx_str_ref(slot->owner);
        log->first_kept = log->ring[log->head].index;
    }
    pthread_mutex_unlock(&log->lock);
    return index;
}

uint64_t ev_reserve(struct ev_log *log, const char *const *names, const size_t *lens, size_t n)
{
    pthread_mutex_lock(&log->lock);
    uint64_t first = atomic_load(log->counter) + 1;
    atomic_store(log->counter, first + n - 1);
    for (size_t i = 0; i < n; i++) {
        pending_add(log, first + i, name_hash(names[i], lens[i]));
        if (log->capacity) {
            struct ev_event *slot = ring_push(log);
            *slot = (struct ev_event){
                .index = first + i, .type = EV_GRANTED, .name_len = (uint16_t)lens[i]};
            memcpy(slot->name, names[i], lens[i]);
            log->first_kept = log->ring[log->head].index;
        }
    }
    pthread_mutex_unlock(&log->lock);
    return first;
}

void ev_fill(struct ev_log *log, uint64_t index, const struct ev_event *e)
{
    pthread_mutex_lock(&log->lock);
    uint32_t i = log->capacity ? ring_find(log, index) : 0;
    if (i < log->count) {
        struct ev_event *slot = &log->ring[(log->head + i) % log->capacity];
        if (slot->index == index && !slot->durable && !slot->failed) {
            ev_event_clear(slot);
            *slot = *e;
            slot->index = index;
            slot->durable = false;
            mx_str_ref(slot->owner);
        }
    }
    pthread_mutex_unlock(&log->lock);
}

void ev_durable(struct ev_log *log, const char *name, size_t len, uint64_t from, uint64_t to,
                bool ok)
{
    pthread_mutex_lock(&log->lock);
    if (ok) {
        if (to > log->ok_max)
            log->ok_max = to;
        if (log->fail_tail && log->fail_tail <= log->ok_max)
            log->fail_tail = 0; /* committed after it: the failure lies inside, hidden */
    } else if (from > log->ok_max && (!log->fail_tail || from < log->fail_tail)) {
        log->fail_tail = from;
    }
    /* The ring is in index order: find `from`, then mark this resource's events to `to`. */
    for (uint32_t i = log->capacity ? ring_find(log, from) : 0; i < log->count; i++) {
        struct ev_event *e = &log->ring[(log->head + i) % log->capacity];
        if (e->index > to)
            break;
        if (e->name_len == len && memcmp(e->name, name, len) == 0) {
            e->durable = ok;
            e->failed = !ok;
        }
    }
    uint64_t hash = name_hash(name, len);
    uint32_t lo = 0, hi = log->pcount;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (pending_at(log, mid)->index < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (uint32_t i = lo; i < log->pcount; i++) {
        struct pending *p = pending_at(log, i);
        if (p->index > to)
            break;
        if (p->name_hash == hash)
            p->done = true;
    }
    pending_trim(log);
    struct ev_wait *woken = NULL;
    for (struct ev_wait *w = log->waits, *n; w; w = n) {
        n = w->_next;
        if (w->after < to && under(name, len, w->prefix, w->prefix_len)) {
            unlink_wait(log, w);
            w->_next = woken;
            woken = w;
        }
    }
    pthread_mutex_unlock(&log->lock);
    complete(woken, true);
}

uint64_t ev_last_index(struct ev_log *log)
{
    return atomic_load(log->counter);
}

/* The cursor limit (lock held): before the first change not yet durable, and before a
 * failed end. */
static uint64_t cursor_limit(struct ev_log *log)
{
    uint64_t i = log->pcount ? pending_at(log, 0)->index - 1 : atomic_load(log->counter);
    if (log->fail_tail && log->fail_tail - 1 < i)
        i = log->fail_tail - 1;
    return i;
}

uint64_t ev_durable_index(struct ev_log *log)
{
    pthread_mutex_lock(&log->lock);
    uint64_t i = cursor_limit(log);
    pthread_mutex_unlock(&log->lock);
    return i;
}

/* Whether every event after `after` is in the ring (lock held). */
static bool kept_after(const struct ev_log *log, uint64_t after)
{
    uint64_t last = atomic_load(log->counter);
    if (after >= last)
        return true; /* nothing after it yet */
    if (!log->count)
        return false;
    return after + 1 >= log->first_kept;
}

size_t ev_read(struct ev_log *log, uint64_t after, const char *prefix, size_t prefix_len,
               struct ev_event *out, size_t limit, uint64_t *next, bool *truncated)
{
    size_t n = 0;
    pthread_mutex_lock(&log->lock);
    uint64_t upto = cursor_limit(log);
    if (after > atomic_load(log->counter)) {
        /* Not a cursor of this log's: what happened after it is not known. */
        *truncated = true;
        after = 0;
    } else {
        *truncated = !kept_after(log, after);
    }
    *next = after;
    for (uint32_t i = 0; i < log->count && n < limit; i++) {
        const struct ev_event *e = &log->ring[(log->head + i) % log->capacity];
        if (e->index <= after)
            continue;
        if (e->index > upto)
            break;
        *next = e->index;
        if (e->failed || !under(e->name, e->name_len, prefix, prefix_len))
            continue;
        out[n] = *e;
        mx_str_ref(out[n].owner);
        n++;
    }
    /* Nothing more under the prefix in what is kept: skip ahead to the cursor limit, so
     * that the next read does not look at the same events again. */
    if (n < limit && upto > *next)
        *next = upto;
    pthread_mutex_unlock(&log->lock);
    return n;
}

bool ev_wait_add(struct ev_log *log, struct ev_wait *w)
{
    pthread_mutex_lock(&log->lock);
    bool queue = true;
    if (!kept_after(log, w->after) || w->after > atomic_load(log->counter)) {
        queue = false; /* what happened after it is not known: answer at once */
    } else {
        /* A change not yet durable is not known yet: its ev_durable() completes the wait. */
        for (uint32_t i = 0; i < log->count; i++) {
            const struct ev_event *e = &log->ring[(log->head + i) % log->capacity];
            if (e->index > w->after && e->durable &&
                under(e->name, e->name_len, w->prefix, w->prefix_len)) {
                queue = false;
                break;
            }
        }
    }
    mx_timer_init(&w->_timer);
    if (queue && !log->closing && mx_timer_heap_push(&log->deadlines, &w->_timer, w->deadline_ns)) {
        queue = false; /* out of memory: answered at once, as if something changed */
    } else if (queue && !log->closing) {
        w->_prev = NULL;
        w->_next = log->waits;
        if (log->waits)
            log->waits->_prev = w;
        log->waits = w;
        w->_queued = true;
        atomic_fetch_add(&log->nwaits, 1);
        pthread_cond_signal(&log->wake); /* its deadline may be the nearest */
    } else {
        queue = false;
    }
    pthread_mutex_unlock(&log->lock);
    return queue;
}

bool ev_wait_cancel(struct ev_log *log, struct ev_wait *w)
{
    pthread_mutex_lock(&log->lock);
    bool taken = w->_queued;
    if (taken)
        unlink_wait(log, w);
    pthread_mutex_unlock(&log->lock);
    return taken;
}

size_t ev_waiting(struct ev_log *log)
{
    return atomic_load(&log->nwaits);
}
