/*
 * An actor's mailbox: Dmitry Vyukov's intrusive multi-producer single-consumer queue.
 * Producers push with one atomic exchange and never wait; the one consumer (whoever
 * runs the actor's turn) pops.
 *
 * The queue itself does not say whether it is empty in a way producers can rely on,
 * so the runtime keeps a count beside it (runtime.c): a producer reserves its place in
 * the count first, then pushes; the consumer pops exactly as many messages as it
 * counted. A pop can find the queue momentarily empty while a producer is between its
 * exchange and its link; mbox_pop_wait() spins through that window, which is a few
 * instructions long.
 */
#ifndef MX_MAILBOX_H
#define MX_MAILBOX_H

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

struct mbox_node {
    _Atomic(struct mbox_node *) next;
};

struct mbox {
    _Atomic(struct mbox_node *) head; /* producers: newest node */
    struct mbox_node *tail;           /* consumer only: oldest node */
    struct mbox_node stub;
};

static inline void mbox_init(struct mbox *q)
{
    atomic_init(&q->stub.next, NULL);
    atomic_init(&q->head, &q->stub);
    q->tail = &q->stub;
}

/* Any thread. */
static inline void mbox_push(struct mbox *q, struct mbox_node *n)
{
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
    /* acq_rel: release publishes n's contents to the consumer; acquire orders us after
     * the previous producer so that our link below lands on a node it finished. */
    struct mbox_node *prev = atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
    atomic_store_explicit(&prev->next, n, memory_order_release);
}

/* Consumer only. Returns the oldest node, or NULL if none is linked yet. */
static inline struct mbox_node *mbox_pop(struct mbox *q)
{
    struct mbox_node *tail = q->tail;
    struct mbox_node *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (next == NULL)
            return NULL;
        q->tail = next;
        tail = next;
        next = atomic_load_explicit(&tail->next, memory_order_acquire);
    }
    if (next) {
        q->tail = next;
        return tail;
    }
    if (tail != atomic_load_explicit(&q->head, memory_order_acquire))
        return NULL; /* a producer is mid-push */
    mbox_push(q, &q->stub);
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next) {
        q->tail = next;
        return tail;
    }
    return NULL;
}

/* Consumer only, when the count says a node is there: waits out a producer mid-push. */
static inline struct mbox_node *mbox_pop_wait(struct mbox *q)
{
    struct mbox_node *n;
    for (unsigned spins = 0; (n = mbox_pop(q)) == NULL; spins++)
        if (spins > 64)
            sched_yield(); /* the producer was preempted between its two steps */
    return n;
}

#endif
