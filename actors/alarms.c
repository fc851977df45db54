/*
 * Alarms (see alarms.h).
 *
 * One mutex guards a hash table of alarms by name (chained, keyed SipHash: names come
 * from clients) and a timer heap of the same alarms (timers.h). The thread pops what is
 * due, unlinks it from the table, and sends it with the lock released: a send may
 * activate an actor, and no lock of ours is held across the runtime's.
 */
#include "actors/alarms.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/container_of.h"
#include "common/hash.h"

/* A send refused for now is tried again after this long. */
#define RETRY_NS (10 * MX_NS_PER_MS)
/* Alarms sent per pass; between passes the thread looks at the run queue. */
#define SEND_BATCH 1024
/* A run queue longer than this means the workers are behind: a storm of alarms (a million
 * leases set to one deadline) waits for them instead of activating every actor at once. */
#define BUSY_RUN_QUEUE 8192

struct alarm {
    struct rt_msg msg; /* first: a fired alarm is its own message */
    struct mx_timer t;
    struct alarm *next; /* table chain */
    uint16_t len;
    char name[];
};

struct rt_alarms {
    struct rt *rt;
    uint32_t type;
    struct mx_hash_key key;
    pthread_mutex_t lock;
    struct mx_sleeper sleeper; /* lock */
    pthread_t thread;
    bool stop, hold; /* lock */
    bool (*busy)(void *arg);
    void *busy_arg;
    struct mx_timer_heap heap; /* lock */
    struct alarm **buckets;    /* lock */
    size_t nbuckets, count;    /* lock; nbuckets a power of two */
};

/* ---- the table (lock held) ------------------------------------------------------ */

static size_t bucket_of(const struct rt_alarms *al, const char *name, size_t len)
{
    return (size_t)mx_siphash(&al->key, name, len) & (al->nbuckets - 1);
}

/* The link that points at the alarm of `name`, or at the NULL ending its chain. */
static struct alarm **find(struct rt_alarms *al, const char *name, size_t len)
{
    struct alarm **p = &al->buckets[bucket_of(al, name, len)];
    while (*p && !((*p)->len == len && memcmp((*p)->name, name, len) == 0))
        p = &(*p)->next;
    return p;
}

/* Makes the table n buckets (a power of two, more than it has); on failure the chains
 * just grow longer. */
static void grow_to(struct rt_alarms *al, size_t n)
{
    struct alarm **b = calloc(n, sizeof *b);
    if (!b)
        return;
    struct alarm **old = al->buckets;
    size_t oldn = al->nbuckets;
    al->buckets = b;
    al->nbuckets = n;
    for (size_t i = 0; i < oldn; i++) {
        struct alarm *next;
        for (struct alarm *a = old[i]; a; a = next) {
            next = a->next;
            size_t k = bucket_of(al, a->name, a->len);
            a->next = b[k];
            b[k] = a;
        }
    }
    free(old);
}

/* Puts `a` (not in the table, not armed) in the table at `link` and in the heap. */
static int insert(struct rt_alarms *al, struct alarm **link, struct alarm *a, uint64_t deadline_ns)
{
    if (mx_timer_heap_push(&al->heap, &a->t, deadline_ns) != 0)
        return RT_ENOMEM;
    a->next = NULL;
    *link = a;
    if (++al->count > al->nbuckets)
        grow_to(al, al->nbuckets * 2);
    mx_sleeper_wake_for(&al->sleeper, deadline_ns); /* it may sleep until a later one */
    return RT_OK;
}

/* ---- setting --------------------------------------------------------------------- */

int rt_alarm_set(struct rt_alarms *al, const char *name, size_t len, uint64_t deadline_ns)
{
    if (len == 0 || len > UINT16_MAX)
        return RT_EINVAL;
    int rc = RT_OK;
    pthread_mutex_lock(&al->lock);
    struct alarm **link = find(al, name, len);
    struct alarm *a = *link;
    if (al->stop) {
        rc = RT_ESHUTDOWN;
    } else if (a) {
        if (mx_timer_deadline(&a->t) != deadline_ns) {
            mx_timer_heap_remove(&al->heap, &a->t);
            mx_timer_heap_push(&al->heap, &a->t, deadline_ns); /* cannot fail: a slot was freed */
            mx_sleeper_wake_for(&al->sleeper, deadline_ns);
        }
    } else if ((a = malloc(sizeof *a + len + 1)) == NULL) {
        rc = RT_ENOMEM;
    } else {
        memset(a, 0, sizeof *a);
        mx_timer_init(&a->t);
        a->len = (uint16_t)len;
        memcpy(a->name, name, len);
        a->name[len] = '\0';
        rc = insert(al, link, a, deadline_ns);
        if (rc != RT_OK)
            free(a);
    }
    pthread_mutex_unlock(&al->lock);
    return rc;
}

void rt_alarm_cancel(struct rt_alarms *al, const char *name, size_t len)
{
    if (len == 0 || len > UINT16_MAX)
        return;
    pthread_mutex_lock(&al->lock);
    struct alarm **link = find(al, name, len);
    struct alarm *a = *link;
    if (a) {
        *link = a->next;
        al->count--;
        mx_timer_heap_remove(&al->heap, &a->t);
    }
    pthread_mutex_unlock(&al->lock);
    free(a);
}

void rt_alarm_free(struct rt_msg *m)
{
    free(m); /* the message is the alarm's first member */
}

void rt_alarms_pace(struct rt_alarms *al, bool (*busy)(void *arg), void *arg)
{
    pthread_mutex_lock(&al->lock);
    al->busy = busy;
    al->busy_arg = arg;
    pthread_mutex_unlock(&al->lock);
}

void rt_alarms_hold(struct rt_alarms *al, bool hold)
{
    pthread_mutex_lock(&al->lock);
    al->hold = hold;
    mx_sleeper_wake(&al->sleeper);
    pthread_mutex_unlock(&al->lock);
}

void rt_alarms_reserve(struct rt_alarms *al, size_t n)
{
    pthread_mutex_lock(&al->lock);
    size_t want = al->nbuckets;
    while (want < n && want < SIZE_MAX / 2 / sizeof *al->buckets)
        want *= 2;
    if (want > al->nbuckets)
        grow_to(al, want);
    pthread_mutex_unlock(&al->lock);
}

size_t rt_alarms_count(struct rt_alarms *al)
{
    pthread_mutex_lock(&al->lock);
    size_t n = al->count;
    pthread_mutex_unlock(&al->lock);
    return n;
}

/* ---- firing ---------------------------------------------------------------------- */

/* A send refused for now: set the alarm again shortly, unless it was set anew meanwhile
 * (that one fires instead) or the alarms are stopping. */
static void retry(struct rt_alarms *al, struct alarm *a)
{
    pthread_mutex_lock(&al->lock);
    struct alarm **link = find(al, a->name, a->len);
    bool keep = !al->stop && *link == NULL && insert(al, link, a, mx_mono_ns() + RETRY_NS) == RT_OK;
    pthread_mutex_unlock(&al->lock);
    if (!keep)
        free(a);
}

static void send_due(struct rt_alarms *al, struct alarm *due)
{
    struct alarm *next;
    for (struct alarm *a = due; a; a = next) {
        next = a->next;
        a->next = NULL;
        a->msg.type = al->type;
        a->msg.cancel = rt_alarm_free;
        int rc = rt_send(al->rt, a->name, a->len, &a->msg, 0);
        if (rc == RT_OK)
            continue; /* the receiver's now */
        if (rc == RT_ESHUTDOWN || rc == RT_EINVAL)
            free(a);
        else
            retry(al, a);
    }
}

/* Waits (without the lock) while the workers have a long run queue or are otherwise busy,
 * at most about a second: alarms are late then, never lost. */
static void pace(struct rt_alarms *al)
{
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 1000; i++) {
        struct rt_stats st;
        rt_get_stats(al->rt, &st);
        if (st.run_queue < BUSY_RUN_QUEUE && !(al->busy && al->busy(al->busy_arg)))
            return;
        pthread_mutex_lock(&al->lock);
        bool stop = al->stop;
        pthread_mutex_unlock(&al->lock);
        if (stop)
            return;
        nanosleep(&ms, NULL);
    }
}

static void *alarm_thread(void *arg)
{
    struct rt_alarms *al = arg;
    pthread_mutex_lock(&al->lock);
    while (!al->stop) {
        uint64_t now = mx_mono_ns();
        struct alarm *due = NULL, **tail = &due;
        size_t n = 0;
        struct mx_timer *t;
        while (!al->hold && n < SEND_BATCH && (t = mx_timer_heap_pop_due(&al->heap, now)) != NULL) {
            struct alarm *a = container_of(t, struct alarm, t);
            *find(al, a->name, a->len) = a->next;
            al->count--;
            a->next = NULL;
            *tail = a;
            tail = &a->next;
            n++;
        }
        if (n > 0) {
            pthread_mutex_unlock(&al->lock);
            send_due(al, due);
            pace(al);
            pthread_mutex_lock(&al->lock);
            continue;
        }
        if (al->hold) /* until released (mx_sleeper_wake): no deadline wakes it meanwhile */
            pthread_cond_wait(&al->sleeper.wake, &al->lock);
        else
            mx_sleeper_sleep(&al->sleeper, &al->lock, mx_timer_heap_next(&al->heap));
    }
    pthread_mutex_unlock(&al->lock);
    return NULL;
}

/* ---- start and stop -------------------------------------------------------------- */

int rt_alarms_start(struct rt_alarms **out, struct rt *rt, uint32_t type)
{
    struct rt_alarms *al = calloc(1, sizeof *al);
    if (!al)
        return ENOMEM;
    al->rt = rt;
    al->type = type;
    al->nbuckets = 1024;
    al->buckets = calloc(al->nbuckets, sizeof *al->buckets);
    int rc = !al->buckets ? ENOMEM : mx_hash_key_random(&al->key) != 0 ? EIO : 0;
    if (rc != 0) {
        free(al->buckets);
        free(al);
        return rc;
    }
    mx_timer_heap_init(&al->heap);
    pthread_mutex_init(&al->lock, NULL);
    mx_sleeper_init(&al->sleeper);
    rc = pthread_create(&al->thread, NULL, alarm_thread, al);
    if (rc != 0) {
        pthread_cond_destroy(&al->sleeper.wake);
        pthread_mutex_destroy(&al->lock);
        free(al->buckets);
        free(al);
        return rc;
    }
    *out = al;
    return 0;
}

void rt_alarms_stop(struct rt_alarms *al)
{
    pthread_mutex_lock(&al->lock);
    bool was = al->stop;
    al->stop = true;
    mx_sleeper_wake(&al->sleeper);
    pthread_mutex_unlock(&al->lock);
    if (!was)
        pthread_join(al->thread, NULL);
}

void rt_alarms_free(struct rt_alarms *al)
{
    rt_alarms_stop(al);
    for (size_t i = 0; i < al->nbuckets; i++) {
        struct alarm *next;
        for (struct alarm *a = al->buckets[i]; a; a = next) {
            next = a->next;
            free(a);
        }
    }
    free(al->buckets);
    mx_timer_heap_free(&al->heap);
    pthread_cond_destroy(&al->sleeper.wake);
    pthread_mutex_destroy(&al->lock);
    free(al);
}
