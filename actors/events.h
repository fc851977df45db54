/*
 * The server-wide change index, the recent events, and the requests waiting for a change.
 *
 * Every change of every resource (a grant, a renewal, a release, an expiry, a break of one
 * lease) takes the next change index here, under one lock, and is recorded at once as an
 * event in a ring of the last `capacity` events (none when 0): so the ring is in index
 * order, and a reader that saw index N has seen every event up to N. Events live in memory
 * only; the index itself is durable (the store keeps each resource's, and its high-water
 * mark).
 *
 * Waits: a list watch or an events request that waits registers a struct ev_wait for a name
 * prefix and an index; the first change after that index to a resource under the prefix
 * completes it once the change is durable (ev_durable(), called when the store has committed
 * it: a list read after the wake shows the change), and so does its deadline (on the log's
 * own timer thread). A wait completes exactly once, unless ev_wait_cancel() took it back
 * first.
 *
 * What readers see is durable only: ev_read() and the list's index stop at the cursor
 * limit, the index before the first change not yet durable, and never pass a change whose
 * commit failed at the end (a server that lost its store or the container): a cursor it
 * gave is never above what the group kept, so a new active, whose index starts from the
 * container's, skips nothing after it. A cursor above the last index taken (given by an
 * earlier term of the group, or by another process) reads as truncated.
 *
 * Threads: every function may be called from any thread, but ev_close().
 */
#ifndef MX_EVENTS_H
#define MX_EVENTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/timers.h"
#include "common/names.h"
#include "common/str.h"

enum ev_type { EV_GRANTED = 1, EV_RENEWED, EV_RELEASED, EV_EXPIRED, EV_BROKEN };

const char *ev_type_name(enum ev_type t);

struct ev_event {
    uint64_t index;
    int64_t at_ms; /* wall clock */
    uint8_t type;  /* enum ev_type */
    bool shared;
    uint32_t limit;
    uint64_t token;
    struct mx_str *owner; /* a reference */
    bool durable;         /* the change is committed (ev_durable) */
    bool failed;          /* its commit failed: never shown */
    uint16_t name_len;
    char name[MX_NAME_MAX + 1];
};

struct ev_log;

/* `capacity`: events kept (0: none, but the index and the waits work the same). `counter`:
 * the change index, shared with whoever else reads it (the resources' domain). */
int ev_open(struct ev_log **out, uint32_t capacity, _Atomic uint64_t *counter);
/* Completes every wait (changed false) and frees the log. */
void ev_close(struct ev_log *log);

/* Takes the next change index (at least `floor` + 1: a resource's own index never goes
 * back) and records the event, whose fields but `index` the caller filled. Returns the
 * index. */
uint64_t ev_record(struct ev_log *log, uint64_t floor, const struct ev_event *e);

/* Takes `n` consecutive change indexes, the first returned, for the grants of a set of
 * resources (names[i] takes the first + i), recorded as events not yet durable: a reader
 * stops before them until each is filled (ev_fill) and durable, or failed (ev_durable). */
uint64_t ev_reserve(struct ev_log *log, const char *const *names, const size_t *lens, size_t n);
/* Records the event of reserved `index` (the caller filled its fields but the index). */
void ev_fill(struct ev_log *log, uint64_t index, const struct ev_event *e);

/* The changes of resource `name` with indexes `from` to `to` are durable (`ok`), or their
 * commit failed (they never happened, and are never shown): completes the waits they end
 * (on this thread, after the lock is released), also when they failed (a watch wakes,
 * finds nothing new and watches again). */
void ev_durable(struct ev_log *log, const char *name, size_t len, uint64_t from, uint64_t to,
                bool ok);

/* The last change index taken. */
uint64_t ev_last_index(struct ev_log *log);
/* The cursor limit: every change up to this index is durable or failed (ev_durable() told
 * it), and none at its end failed. A list read after this call shows every change up to
 * it, so it is the list's `index`: a watch from it misses none that was not yet
 * committed. */
uint64_t ev_durable_index(struct ev_log *log);

/*
 * Reads the events after index `after` whose resource starts with `prefix`, oldest first,
 * at most `limit`, into `out` (references the caller drops with ev_event_clear()); only
 * durable ones, up to the cursor limit (ev_durable_index). *next: the index to read after
 * next time (the last event returned, or the last one looked at, at most the limit).
 * *truncated: events after `after` were dropped from the ring already (or never kept), or
 * `after` is above every index taken (a cursor of an earlier term): then the read starts
 * at the oldest event kept.
 * Returns how many were read.
 */
size_t ev_read(struct ev_log *log, uint64_t after, const char *prefix, size_t prefix_len,
               struct ev_event *out, size_t limit, uint64_t *next, bool *truncated);
void ev_event_clear(struct ev_event *e);

struct ev_wait {
    /* in */
    char prefix[MX_NAME_MAX + 1];
    size_t prefix_len;
    uint64_t after;       /* completes at the first change under the prefix after this */
    uint64_t deadline_ns; /* mono */
    /* Called once, on the changing thread or the log's timer thread, without the log's
     * lock: `changed` false when the deadline passed (or the log closed). */
    void (*done)(struct ev_wait *w, bool changed);
    /* private */
    struct ev_wait *_next, *_prev;
    struct mx_timer _timer; /* its deadline, in the log's timer heap while queued */
    bool _queued;
};

/* Queues `w`, unless a durable change under its prefix after w->after is known already (or
 * one may have been dropped from the ring): then returns false and `w` is not queued (the
 * caller answers at once). */
bool ev_wait_add(struct ev_log *log, struct ev_wait *w);
/* Takes `w` back if it is still queued: true, and `done` will not be called; false when it
 * completed or is completing (its `done` runs or ran). */
bool ev_wait_cancel(struct ev_log *log, struct ev_wait *w);

/* Completes every wait now (changed false): at shutdown, once no new one is added. */
void ev_flush(struct ev_log *log);

/* Requests waiting now. */
size_t ev_waiting(struct ev_log *log);

#endif
