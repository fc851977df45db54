/*
 * Connection tracker and reaper (see conns.h). Connections between requests sit on a
 * list ordered by when they became idle, so the reaper looks only at the oldest. A
 * socket is shut down under the lock that conns_closed() takes before libmicrohttpd
 * closes it, so the reaper never touches a descriptor that has been reused.
 */
#include "conns.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

struct conn {
    struct conn *prev, *next; /* on the idle list while between requests */
    int fd;
    bool idle;
    bool reaped;
    uint64_t idle_since_ns;
};

struct conns {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct conn *head, *tail; /* idle connections, oldest first */
    unsigned count;           /* open connections */
    unsigned max;
    uint64_t idle_timeout_ns;
    bool stop;
    pthread_t thread;
    _Atomic uint64_t reaped;
};

/* lock held */
static void idle_push(struct conns *c, struct conn *k)
{
    k->idle = true;
    k->idle_since_ns = mx_mono_ns();
    k->next = NULL;
    k->prev = c->tail;
    if (c->tail)
        c->tail->next = k;
    else
        c->head = k;
    c->tail = k;
}

/* lock held */
static void idle_remove(struct conns *c, struct conn *k)
{
    if (!k->idle)
        return;
    if (k->prev)
        k->prev->next = k->next;
    else
        c->head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    else
        c->tail = k->prev;
    k->prev = k->next = NULL;
    k->idle = false;
}

/* lock held: shuts the socket; libmicrohttpd sees the error and closes the connection. */
static void reap(struct conns *c, struct conn *k)
{
    idle_remove(c, k);
    k->reaped = true;
    shutdown(k->fd, SHUT_RDWR);
    atomic_fetch_add(&c->reaped, 1);
}

static void *reaper_main(void *arg)
{
    struct conns *c = arg;
    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        uint64_t now = mx_mono_ns();
        while (c->head && now - c->head->idle_since_ns >= c->idle_timeout_ns)
            reap(c, c->head);
        /* Near the limit: make room, oldest idle first, down to 80%. */
        if (c->count > c->max / 10 * 9) {
            unsigned n = 0;
            while (c->head && c->count - n > c->max / 10 * 8) {
                reap(c, c->head);
                n++;
            }
            if (n)
                mx_warn("http: near the connection limit; closed idle connections",
                        "closed=%u open=%u limit=%u", n, c->count, c->max);
        }
        /* look ten times a second */
        mx_cond_wait_until(&c->cond, &c->lock, mx_mono_ns() + 100 * MX_NS_PER_MS);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int conns_start(struct conns **out, unsigned max_connections, uint64_t idle_timeout_ms)
{
    struct conns *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->max = max_connections;
    c->idle_timeout_ns = idle_timeout_ms * MX_NS_PER_MS;
    pthread_mutex_init(&c->lock, NULL);
    mx_cond_init_mono(&c->cond);
    if (pthread_create(&c->thread, NULL, reaper_main, c) != 0) {
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void conns_stop(struct conns *c)
{
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

struct conn *conns_opened(struct conns *c, int fd)
{
    struct conn *k = calloc(1, sizeof *k);
    if (!k)
        return NULL; /* untracked: only libmicrohttpd's own timeout applies */
    k->fd = fd;
    pthread_mutex_lock(&c->lock);
    c->count++;
    idle_push(c, k);
    pthread_mutex_unlock(&c->lock);
    return k;
}

void conns_closed(struct conns *c, struct conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    idle_remove(c, k);
    c->count--;
    pthread_mutex_unlock(&c->lock);
    free(k);
}

void conns_request_begins(struct conns *c, struct conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    idle_remove(c, k);
    pthread_mutex_unlock(&c->lock);
}

void conns_request_ends(struct conns *c, struct conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    if (!k->reaped && !k->idle)
        idle_push(c, k);
    pthread_mutex_unlock(&c->lock);
}

uint64_t conns_reaped(struct conns *c)
{
    return atomic_load(&c->reaped);
}
