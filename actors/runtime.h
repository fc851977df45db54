/*
 * The actor runtime: turn-based actors on a pool of worker threads, in the manner of
 * Service Fabric's Reliable Actors and Pony's scheduler.
 *
 * An actor is named by a byte string and activated by the first message sent to that
 * name. It has a mailbox; its behavior handles one message at a time (a *turn* handles
 * a bounded batch of them), never two at once, and the messages of one sender in the
 * order they were sent. Different actors run in parallel on the workers. An actor that
 * has been idle for a while is deactivated and its memory freed; the next message to
 * its name activates it again.
 *
 * Threads: rt_send() may be called from any thread. Everything that takes `self` may be
 * called only from a turn of that actor (inside its behavior's callbacks).
 *
 * Ownership: a message belongs to the sender until rt_send() returns RT_OK, then to the
 * runtime until it is delivered to the behavior's receive(), which then owns it. A
 * message that will never be delivered (shutdown) is handed to its cancel callback.
 */
#ifndef MX_RUNTIME_H
#define MX_RUNTIME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/mailbox.h"
#include "actors/timers.h"

struct rt;
struct rt_actor;

enum rt_status {
    RT_OK = 0,
    RT_EFULL,     /* the actor's mailbox is at its cap: try again later (503) */
    RT_ELIMIT,    /* the cap on active actors is reached (503) */
    RT_ESHUTDOWN, /* the runtime is shutting down (503) */
    RT_ENOMEM,    /* out of memory (503) */
    RT_ENOENT,    /* RT_SEND_IF_ACTIVE and the actor is not active */
    RT_EINVAL,    /* empty or over-long name */
};

const char *rt_strerror(int status);

struct rt_msg {
    /* private */
    struct mbox_node _node;
    bool _timer;
    /* public */
    uint32_t type; /* the behavior's own message kind */
    /* Called instead of delivery when the message will never be delivered (runtime
     * shutdown). Must complete whatever waits on the message and free it. May be NULL. */
    void (*cancel)(struct rt_msg *m);
};

struct rt_behavior {
    /* Bytes of per-actor state, zeroed at activation and kept until deactivation. */
    size_t state_size;
    /* The actor's first turn, before its first message. */
    void (*activate)(struct rt_actor *self, void *state);
    /* One message. The behavior owns `m` from here on. */
    void (*receive)(struct rt_actor *self, void *state, struct rt_msg *m);
    /* At the end of every turn: true when the actor holds nothing that needs it active
     * (pending timers are accounted for by the runtime). `*barrier` may be set to a value
     * that rt_config.barrier_passed must accept before the actor is deactivated (for
     * example the commit sequence of its last write); it is 0 on entry. */
    bool (*idle)(struct rt_actor *self, void *state, uint64_t *barrier);
    /* With no turn running and none to come: release what the state holds. When
     * `shutdown` is true, requests the state holds must be completed (cancelled). */
    void (*deactivate)(struct rt_actor *self, void *state, bool shutdown);
};

struct rt_config {
    const struct rt_behavior *behavior;
    void *ctx;            /* returned by rt_ctx() */
    unsigned workers;     /* worker threads; 0: the number of cores */
    unsigned batch;       /* messages per turn at most; 0: 64 */
    uint32_t mailbox_cap; /* messages queued per actor at most; 0: 10000 */
    size_t max_actors;    /* active actors at most (approximate, per shard); 0: no cap */
    uint64_t idle_ms;     /* deactivate after this long idle; 0: 2000 */
    uint64_t sweep_ms;    /* how often idle actors are looked at; 0: idle_ms / 4 */
    /* May be NULL. Called with a directory lock held: must not block or call back. */
    bool (*barrier_passed)(void *ctx, uint64_t barrier);
};

/* Starts the workers and the timer thread. Returns 0 or an errno value. */
int rt_start(struct rt **out, const struct rt_config *cfg);

enum {
    RT_SEND_IF_ACTIVE = 1, /* do not activate: RT_ENOENT if the actor is not active */
    /* When the actor was idle, run its turn on the calling thread instead of handing it to a
     * worker: one thread hop less. The caller must hold no lock and be able to wait for a
     * turn (the behavior's callbacks run here), and must not be inside a turn itself. */
    RT_SEND_RUN_HERE = 2,
};

/*
 * Sends `m` to the actor named `name` (`len` bytes, 1 to 65535), activating it if
 * needed (unless RT_SEND_IF_ACTIVE). Any thread. Returns RT_OK, or an error with `m`
 * still the caller's.
 */
int rt_send(struct rt *rt, const char *name, size_t len, struct rt_msg *m, int flags);

/* rt_send with RT_SEND_RUN_HERE, and `turn_ctx` for the turn if it runs here: the behavior
 * reads it with rt_turn_ctx() during that turn (and NULL in every turn a worker runs). How
 * a sender hands the turn something of its own thread, such as a store batch. */
int rt_send_here(struct rt *rt, const char *name, size_t len, struct rt_msg *m, void *turn_ctx);

/* From a turn: the `turn_ctx` of the rt_send_here() that runs it on its sender's thread,
 * or NULL (a worker's turn). */
void *rt_turn_ctx(const struct rt_actor *self);

/* Sends `m` to `self` (it is handled after what is already queued). From a turn of self;
 * the mailbox cap does not apply. Returns RT_OK or RT_ESHUTDOWN. */
int rt_send_self(struct rt_actor *self, struct rt_msg *m);

/*
 * Stops the runtime: refuses new sends, finishes the turns that are running, cancels
 * every message not yet delivered, deactivates every actor with shutdown=true, joins
 * every thread and frees everything. Call once, from a thread that is not a worker.
 */
void rt_shutdown(struct rt *rt);

void *rt_ctx(const struct rt_actor *self);
struct rt *rt_of(const struct rt_actor *self);
const char *rt_name(const struct rt_actor *self, size_t *len);

/*
 * Timers: a message delivered to its actor at a CLOCK_MONOTONIC deadline, handled in a
 * turn like any other. Embed a struct rt_timer in the actor's state and rt_timer_init()
 * it in activate(). A timer is one message: setting it again moves its deadline; it is
 * delivered once per expiry.
 *
 * An actor with an armed timer is never deactivated for being idle, so a timer never
 * finds its actor gone and never re-activates one. At shutdown armed timers are dropped.
 */
struct rt_timer {
    struct rt_msg msg; /* public: msg.type identifies the timer in receive() */
    /* private */
    struct mx_timer _t;
    struct rt_actor *_actor;
    _Atomic bool _in_flight; /* fired, in the mailbox, not yet delivered */
    uint64_t _rearm_ns;      /* turn-owned: deadline to arm at delivery instead */
    bool _cancelled;         /* turn-owned: swallow the in-flight delivery */
    bool _set;               /* turn-owned: set and not yet delivered or cancelled */
};

void rt_timer_init(struct rt_timer *t, uint32_t type);
/* Fires `t` at `deadline_ns` (mono) replacing any earlier setting. From a turn of self.
 * Returns RT_OK, RT_ENOMEM or RT_ESHUTDOWN. */
int rt_timer_set(struct rt_actor *self, struct rt_timer *t, uint64_t deadline_ns);
/* `t` will not be delivered until set again. From a turn of self. */
void rt_timer_cancel(struct rt_actor *self, struct rt_timer *t);
/* True while `t` is set and not yet delivered. From a turn of self. */
bool rt_timer_pending(const struct rt_timer *t);

struct rt_stats {
    size_t active;            /* actors active now */
    uint64_t activations;     /* since start */
    uint64_t deactivations;   /* since start */
    uint64_t messages;        /* delivered since start */
    uint64_t turns;           /* since start */
    size_t run_queue;         /* actors waiting for a worker now */
    uint64_t mailbox_refused; /* sends refused for a full mailbox since start */
};

/* Any thread; the figures are read without a common lock, each is exact on its own. */
void rt_get_stats(struct rt *rt, struct rt_stats *out);

#endif
