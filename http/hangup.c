/*
 * Hang-up watcher (see hangup.h): an epoll set of sockets registered for EPOLLRDHUP only
 * (data a client pipelines behind its request is not a hang-up), and a table from request
 * id to socket under one lock. An event is looked up by id, so an event for a socket
 * that was unwatched meanwhile finds nothing and is ignored.
 */
#include "http/hangup.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"

#define BUCKETS 4096 /* a power of two */

struct entry {
    struct entry *next;
    uint64_t id;
    int fd;
    void *arg;
};

struct hangup {
    int ep, wake;
    pthread_t thread;
    pthread_mutex_t lock;
    struct entry *table[BUCKETS]; /* lock */
    bool stop;                    /* lock */
    bool muted;                   /* lock */
    void (*on_hangup)(void *ctx, uint64_t id, void *arg);
    void *ctx;
};

/* lock held */
static struct entry **slot(struct hangup *h, uint64_t id)
{
    struct entry **pp = &h->table[id & (BUCKETS - 1)];
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->next;
    return pp;
}

static void *watch_main(void *arg)
{
    struct hangup *h = arg;
    struct epoll_event ev[64];
    for (;;) {
        int n = epoll_wait(h->ep, ev, 64, -1);
        if (n < 0 && errno != EINTR) {
            mx_error("hangup: epoll_wait failed", "errno=%d", errno);
            break;
        }
        pthread_mutex_lock(&h->lock);
        if (h->stop) {
            pthread_mutex_unlock(&h->lock);
            break;
        }
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == 0)
                continue; /* the wake-up eventfd */
            struct entry **pp = slot(h, ev[i].data.u64), *e = *pp;
            if (!e)
                continue;
            epoll_ctl(h->ep, EPOLL_CTL_DEL, e->fd, NULL);
            *pp = e->next;
            if (!h->muted)
                h->on_hangup(h->ctx, e->id, e->arg);
            free(e);
        }
        pthread_mutex_unlock(&h->lock);
    }
    return NULL;
}

int hangup_start(struct hangup **out, void (*on_hangup)(void *ctx, uint64_t id, void *arg),
                 void *ctx)
{
    struct hangup *h = calloc(1, sizeof *h);
    if (!h)
        return -1;
    h->on_hangup = on_hangup;
    h->ctx = ctx;
    pthread_mutex_init(&h->lock, NULL);
    h->ep = epoll_create1(EPOLL_CLOEXEC);
    h->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (h->ep < 0 || h->wake < 0 || epoll_ctl(h->ep, EPOLL_CTL_ADD, h->wake, &ev) != 0 ||
        pthread_create(&h->thread, NULL, watch_main, h) != 0) {
        if (h->ep >= 0)
            close(h->ep);
        if (h->wake >= 0)
            close(h->wake);
        pthread_mutex_destroy(&h->lock);
        free(h);
        return -1;
    }
    *out = h;
    return 0;
}

int hangup_watch(struct hangup *h, int fd, uint64_t id, void *arg)
{
    struct entry *e = malloc(sizeof *e);
    if (!e || id == 0)
        return free(e), -1;
    e->id = id;
    e->fd = fd;
    e->arg = arg;
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.u64 = id};
    pthread_mutex_lock(&h->lock);
    if (epoll_ctl(h->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        pthread_mutex_unlock(&h->lock);
        free(e);
        return -1;
    }
    struct entry **pp = &h->table[id & (BUCKETS - 1)];
    e->next = *pp;
    *pp = e;
    pthread_mutex_unlock(&h->lock);
    return 0;
}

void hangup_unwatch(struct hangup *h, uint64_t id)
{
    pthread_mutex_lock(&h->lock);
    struct entry **pp = slot(h, id), *e = *pp;
    if (e) {
        epoll_ctl(h->ep, EPOLL_CTL_DEL, e->fd, NULL);
        *pp = e->next;
    }
    pthread_mutex_unlock(&h->lock);
    free(e);
}

void hangup_mute(struct hangup *h)
{
    pthread_mutex_lock(&h->lock);
    h->muted = true;
    pthread_mutex_unlock(&h->lock);
}

void hangup_stop(struct hangup *h)
{
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_mutex_unlock(&h->lock);
    uint64_t one = 1;
    if (write(h->wake, &one, sizeof one) != sizeof one)
        mx_warn("hangup: cannot wake the watcher", NULL);
    pthread_join(h->thread, NULL);
    for (int i = 0; i < BUCKETS; i++)
        while (h->table[i]) {
            struct entry *e = h->table[i];
            h->table[i] = e->next;
            free(e);
        }
    close(h->wake);
    close(h->ep);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

bool hangup_peer_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) != 1)
        return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}
