/*
 * Connection tracker and reaper (see conns.h). Connections the server waits on (idle
 * between requests, or sending one) sit on a list ordered by when that wait began; all
 * share one timeout, so the list is also in deadline order and the reaper looks only at
 * the oldest. A socket is shut down under the lock that conns_closed() takes before
 * libmicrohttpd closes it, so the reaper never touches a descriptor that has been reused.
 */
#include "http/conns.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common/clock.h"
#include "common/log.h"

struct conn {
    struct conn *prev, *next; /* on the list while the server waits on the client */
    int fd;
    bool waiting; /* on the list */
    bool reaped;
    bool spare;        /* opened beyond the limit: for health checks only (immutable) */
    uint64_t since_ns; /* when the wait began: idle since, or the request's line */
};

struct conns {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct conn *head, *tail; /* connections waited on, oldest first */
    unsigned count;           /* open connections */
    unsigned peak;            /* the most open since memory was last given back */
    unsigned max;
    uint64_t idle_timeout_ns;
    bool stop;
    pthread_t thread;
    _Atomic uint64_t reaped;
    int readable; /* epoll set of every tracked connection, level-triggered on input */
};

/* lock held */
static void wait_push(struct conns *c, struct conn *k)
{
    k->waiting = true;
    k->since_ns = mx_mono_ns();
    k->next = NULL;
    k->prev = c->tail;
    if (c->tail)
        c->tail->next = k;
    else
        c->head = k;
    c->tail = k;
}

/* lock held */
static void wait_remove(struct conns *c, struct conn *k)
{
    if (!k->waiting)
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
    k->waiting = false;
}

/* lock held: shuts the socket; libmicrohttpd sees the error and closes the connection. */
static void reap(struct conns *c, struct conn *k)
{
    wait_remove(c, k);
    k->reaped = true;
    shutdown(k->fd, SHUT_RDWR);
    atomic_fetch_add(&c->reaped, 1);
}

/* Freed connections' memory (their requests, bodies and libmicrohttpd's pools) stays in
 * glibc's per-thread arenas, which give back only what lies at their top: after
 * thousands of connections closed the process kept hundreds of megabytes it no longer
 * used. Once the open connections have fallen by this many from their peak, and at most
 * once a second, malloc_trim() returns the free pages to the system. */
#define TRIM_AFTER_CLOSES 64

static void *reaper_main(void *arg)
{
    struct conns *c = arg;
    uint64_t last_trim = 0;
    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        uint64_t now = mx_mono_ns();
        while (c->head && now - c->head->since_ns >= c->idle_timeout_ns)
            reap(c, c->head);
        /* Near the limit: make room, longest waited on first, down to 80%. */
        if (c->count > c->max / 10 * 9) {
            unsigned n = 0;
            while (c->head && c->count - n > c->max / 10 * 8) {
                reap(c, c->head);
                n++;
            }
            if (n)
                mx_warn("http: near the connection limit; closed the connections waited on "
                        "longest",
                        "closed=%u open=%u limit=%u", n, c->count, c->max);
        }
        if (c->peak >= c->count + TRIM_AFTER_CLOSES && now - last_trim >= 1000 * MX_NS_PER_MS) {
            c->peak = c->count;
            last_trim = now;
            pthread_mutex_unlock(&c->lock); /* it walks every arena: not under our lock */
#ifdef __GLIBC__
            malloc_trim(0);
#endif
            pthread_mutex_lock(&c->lock);
            continue;
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
    c->readable = epoll_create1(EPOLL_CLOEXEC);
    if (c->readable < 0) {
        free(c);
        return -1;
    }
    pthread_mutex_init(&c->lock, NULL);
    mx_cond_init_mono(&c->cond);
    if (pthread_create(&c->thread, NULL, reaper_main, c) != 0) {
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        close(c->readable);
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
    close(c->readable);
    free(c);
}

struct conn *conns_opened(struct conns *c, int fd)
{
    struct conn *k = calloc(1, sizeof *k);
    if (!k)
        return NULL; /* untracked: only libmicrohttpd's own timeout applies */
    k->fd = fd;
    /* Best effort: a connection left out only makes conns_others_readable() miss it. */
    struct epoll_event ev = {.events = EPOLLIN};
    (void)epoll_ctl(c->readable, EPOLL_CTL_ADD, fd, &ev);
    pthread_mutex_lock(&c->lock);
    c->count++;
    k->spare = c->count > c->max;
    if (c->count > c->peak)
        c->peak = c->count;
    wait_push(c, k);
    pthread_mutex_unlock(&c->lock);
    return k;
}

void conns_closed(struct conns *c, struct conn *k)
{
    if (!k)
        return;
    (void)epoll_ctl(c->readable, EPOLL_CTL_DEL, k->fd, NULL); /* before the fd is reused */
    pthread_mutex_lock(&c->lock);
    wait_remove(c, k);
    c->count--;
    pthread_mutex_unlock(&c->lock);
    free(k);
}

unsigned conns_open(struct conns *c)
{
    pthread_mutex_lock(&c->lock);
    unsigned n = c->count;
    pthread_mutex_unlock(&c->lock);
    return n;
}

bool conns_others_readable(struct conns *c)
{
    struct epoll_event ev;
    return epoll_wait(c->readable, &ev, 1, 0) > 0;
}

/* The time to the request line counts as idle time: the request's own deadline starts
 * there, the moment the server first sees it (libmicrohttpd does not tell when a byte
 * arrives), and no byte after it moves the deadline. */
void conns_request_begins(struct conns *c, struct conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    if (!k->reaped) {
        wait_remove(c, k);
        wait_push(c, k); /* at the tail: its deadline is the latest */
    }
    pthread_mutex_unlock(&c->lock);
}

void conns_request_received(struct conns *c, struct conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    wait_remove(c, k);
    pthread_mutex_unlock(&c->lock);
}

void conns_request_ends(struct conns *c, struct conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&c->lock);
    if (!k->reaped && !k->waiting)
        wait_push(c, k);
    pthread_mutex_unlock(&c->lock);
}

unsigned conns_spares(unsigned max_connections)
{
    return 8 + max_connections / 64;
}

bool conns_spare(const struct conn *k)
{
    return k && k->spare;
}

uint64_t conns_reaped(struct conns *c)
{
    return atomic_load(&c->reaped);
}
