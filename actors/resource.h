/*
 * The lease state machine of one resource, as pure logic: no threads, no I/O, and a
 * clock handed in with every call, so that it is unit-tested with a fake clock. The
 * resource actor (resource_actor.c) runs it in turns and makes its changes durable.
 *
 * A resource holds a set of leases: one exclusive lease, or shared (reader) leases
 * together, or up to `limit` leases of a counting semaphore. Leases are kept in grant
 * order (their tokens increase). A lease that expires is remembered, so that its holder
 * may still renew or release it until a grant takes its place (as Azure blob leases do):
 * any grant takes an exclusive lease's place; an exclusive grant takes every place; a
 * semaphore grant takes the oldest remembered lease's place once the held and the
 * remembered ones would exceed the limit. Release and break forget a lease.
 *
 * Waiting is first come, first served: the first waiter is granted as soon as it fits, and
 * no request is granted while one queued before it waits, even one that would fit. The
 * queue is in arrival order (res_req.seq), which is the order of queueing unless a request
 * took its place before it came (see res_domain.arrival).
 *
 * Requests are answered by setting their status and view and appending them to a
 * struct res_out; those that wait (waiters of acquire with wait_ms, watchers of GET with
 * index and wait_ms) are kept in the resource and answered by a later call. Each change
 * (grant, renew, release, break, expiry) takes the next index from the domain and sets
 * `changed`, which tells the caller to write what changed (res_take_rec()).
 */
#ifndef MX_RESOURCE_H
#define MX_RESOURCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/prom.h"
#include "actors/events.h"
#include "common/str.h"
#include "persistence/store.h"

struct res_limits {
    uint64_t min_ttl_ms, max_ttl_ms; /* enforced by the caller's validation */
    uint64_t max_wait_ms;            /* likewise */
    uint32_t max_waiters;            /* waiters per resource; watchers have the same cap */
    uint32_t max_holders;            /* leases held at once per resource (0: 1024) */
};

/* What a lease is, for the metrics. */
enum res_kind { RES_KIND_EXCLUSIVE, RES_KIND_SHARED, RES_KIND_SEMAPHORE, RES_NKINDS };

/* Shared by every resource of a server. */
struct res_domain {
    struct res_limits lim;
    _Atomic uint64_t last_token; /* the last fencing token handed out */
    _Atomic uint64_t last_index; /* the last change index handed out */
    /* The arrival order of waiters (res_req.seq): every queue is kept in it, so that a
     * request about several resources, which takes its number before it reaches any of
     * them, is queued on each behind exactly those that came before it. */
    _Atomic uint64_t arrival;
    /* Held while a set takes its place in the arrival order and sends its parts
     * (multi.c): the parts of sets then reach every queue in the order of their places, so
     * a part never arrives behind one that came after it and is reserved already. A spin
     * lock (zero: free), held for the sends of one set. */
    _Atomic bool arriving;
    /* Tokens above this may not be handed out (the blob mirror reserves them in blocks;
     * UINT64_MAX without a mirror). */
    _Atomic uint64_t token_ceiling;
    /* Tokens handed out are token_offset modulo token_stride (0 or 1: every integer; a
     * partition of a partitioned group: 256 and its number). Set before the first grant. */
    uint32_t token_stride, token_offset;
    /* Why waiters are answered 503 when the actors stop (NULL: "shutting down"): a
     * partition handed over says "partition_moved". */
    _Atomic(const char *) stop_reason;
    /* After a restore from a mirror that may lag, no lease is granted, renewed or taken
     * again before this (mono ns; 0: none). (A takeover's failover grace is in the
     * deadlines themselves: see mirror_rearm_deadline().) */
    _Atomic uint64_t grace_until_ns;
    /* metrics. `held` counts rows with a lease in force, whether their resource is in
     * memory or not: it starts from the store and moves with grants and their ends only. */
    _Atomic int64_t held, waiters, watchers;
    _Atomic uint64_t grants, renewals, releases, breaks, expiries, conflicts, timeouts;
    _Atomic int64_t held_kind[RES_NKINDS], waiters_kind[RES_NKINDS];
    _Atomic uint64_t grants_kind[RES_NKINDS];
    _Atomic uint64_t renewals_lost;            /* renewals answered lease_lost */
    struct prom_hist held_seconds[RES_NKINDS]; /* how long leases were held */
    struct prom_hist wait_seconds[RES_NKINDS]; /* how long granted acquires waited */
    /* The change index and the recent events (NULL: the index is last_index alone, as in
     * the unit tests). When set, it takes every index (ev_record) and last_index is its
     * counter. */
    struct ev_log *events;
    /* How late each lease was expired, in ns past its deadline (for a lease that ran out
     * while the server was down: past its loading). prom_hist_init() it before use. */
    struct prom_hist expiry_lateness;
};

/*
 * The leases of one resource are written together in one journal or snapshot line, and a
 * line must fit in one append block of blob storage (4 MiB): a line that does not stalls
 * shipping, and every write with it. So the leases of one resource (held or remembered)
 * carry at most this many bytes, counted as res_lease_bytes() counts them: a grant that
 * would pass it does not fit (it waits, or is answered lease_held, as when the holders are
 * at --max-holders), and a renewal whose metadata would pass it is refused. A change line
 * holds at most the row and one id per lease forgotten: well under a block.
 */
#define RES_ROW_MAX_BYTES (1536u * 1024u)

/* The reason of the 503 that answers the waiters of a partition that moved to another
 * server (docs/api.md): the client sends the request again. */
#define RES_PARTITION_MOVED "partition_moved"

struct res_now {
    uint64_t mono_ns; /* CLOCK_MONOTONIC: every deadline in memory */
    int64_t wall_ms;  /* wall clock: *_at times, for people */
    int64_t lease_ms; /* the lease clock (common/clock.h) at mono_ns: stored deadlines */
};

enum res_op { RES_ACQUIRE = 1, RES_RENEW, RES_RELEASE, RES_BREAK, RES_GET };

enum res_status {
    RES_PENDING = 0,     /* waiting (queued waiter or watcher) */
    RES_OK_LEASE,        /* 200, lease body */
    RES_OK_RELEASED,     /* 200 {released: true} */
    RES_OK_BROKEN,       /* 200 {broken: view.broken} */
    RES_OK_STATE,        /* 200, the resource's state */
    RES_ERR_HELD,        /* 409 lease_held, with the holder in view */
    RES_ERR_LOST,        /* 409 lease_lost */
    RES_ERR_TOO_MANY,    /* 429 too_many_waiters */
    RES_ERR_UNAVAILABLE, /* 503, with reason */
    RES_ERR_LIMIT,       /* 409 limit_mismatch, with the limit in force in view.limit */
    RES_ERR_SHARED,      /* 400 invalid_field shared: a retry naming another kind */
    RES_ERR_ROW_FULL,    /* 400 invalid_field metadata: the leases would not fit one line */
    RES_GONE,            /* the client went away: nothing to send */
};

/* One holder as an answer shows it. Holds references to the strings. */
struct res_holder {
    bool shared;
    struct mx_str *owner, *metadata;
    uint64_t token, ttl_ms, expires_in_ms;
    int64_t acquired_at_ms, renewed_at_ms;
};

/* What an answer shows. Holds references to the strings. The lease fields are: for a
 * lease body, the lease; for lease_held, the holder whose lease ends first; for a state,
 * its first holder (when `held`). */
struct res_view {
    bool held; /* at least one lease is in force */
    bool broken;
    bool shared;
    uint8_t lease_id[16];
    struct mx_str *owner, *metadata;
    uint64_t token, ttl_ms, expires_in_ms, index;
    int64_t acquired_at_ms, renewed_at_ms;
    uint32_t waiters;
    uint32_t limit;
    uint32_t nholders;          /* a state: every holder, oldest grant first */
    struct res_holder *holders; /* malloc'd (NULL when none, or out of memory: `held` says) */
};

void res_view_clear(struct res_view *v);

struct res_req {
    /* in */
    uint8_t op; /* enum res_op */
    bool has_lease_id, has_ttl, has_metadata, has_index;
    uint8_t lease_id[16];
    struct mx_str *owner;    /* acquire (reference owned by the request) */
    struct mx_str *metadata; /* serialized JSON object (reference owned by the request) */
    uint64_t ttl_ms, wait_ms, index;
    uint32_t limit; /* acquire: the holder limit it names (0 is taken as 1) */
    bool shared;    /* acquire: a shared lease */
    uint64_t id;    /* unique: names the request in res_drop() */
    /* Its place in the arrival order of res_domain.arrival (res_next_arrival()), or 0: it
     * takes the next one if it has to wait. */
    uint64_t seq;
    /* One part of a request about several resources at once: when it heads the queue and
     * fits it is not granted but reserved (res_out.reserved), and granted by
     * res_multi_grant() once every part is reserved. While reserved it holds the place a
     * grant would take (a remembered lease cannot come back into it) and has no deadline
     * of its own: it leaves only by res_multi_grant() or res_drop(). */
    bool multi;
    /* A part: the change index its grant takes (res_reserve_indexes()), set before
     * res_multi_grant(); 0: the next one, as any change. */
    uint64_t part_index;
    /* A part: the fencing token its grant takes (res_reserve_tokens()); 0: none could be
     * reserved for the set, and the grant is refused (503) rather than take one out of the
     * set's order. */
    uint64_t part_token;
    /* A part answered with its own lease while the set waited (a retry of the set): at the
     * commit it is renewed again (res_multi_grant()), or the set fails if the lease was
     * lost meanwhile, so that no set is answered with a lease that ran out as it waited. */
    bool part_own;
    /* Whether the client is still there; NULL: always. Asked before granting a waiter. */
    bool (*alive)(struct res_req *q);
    /* out */
    uint8_t status; /* enum res_status */
    const char *reason;
    uint32_t retry_after_s; /* RES_ERR_UNAVAILABLE: when to try again (0: the default) */
    struct res_view view;
    /* private */
    struct res_req *_next, *_prev;
    uint64_t _deadline_ns;
    uint64_t _queued_ns; /* mono: when it joined the queue (0: never waited) */
    bool _watcher;
    bool _reserved;
};

/* The next place in the domain's arrival order. Any thread. */
uint64_t res_next_arrival(struct res_domain *d);
/* Takes `n` consecutive change indexes for the grants of a set, the first returned:
 * names[i]'s grant takes the first + i (res_req.part_index). A grant that finds its
 * resource's index at or above its own (another holder of a semaphore changed it since)
 * takes the next one instead, and the one reserved is never shown. Any thread. */
uint64_t res_reserve_indexes(struct res_domain *d, const char *const *names, const size_t *lens,
                             size_t n);

/* Takes `n` fencing tokens for the grants of a set, in order, the first returned (0: not
 * that many reserved now, and the set is refused): the i-th is the first + i times
 * the domain's stride. Safe because no other grant can come between on a resource whose
 * place a part holds. Any thread; res_reserve_tokens(d, 1) is the next token. */
uint64_t res_reserve_tokens(struct res_domain *d, size_t n);

/* Sets up the domain's histograms (the rest of a zeroed domain is ready). */
void res_domain_init(struct res_domain *d);

/* Appends the domain's lease metrics (Prometheus text) to `b`. Any thread. */
void res_domain_metrics(struct res_domain *d, struct mx_buf *b);

/* Releases the references a request holds (its owner and metadata, and its view's). */
void res_req_clear(struct res_req *rq);

/* Answered requests, in order; and the part of a request about several resources that
 * reserved its place during the call (still queued, not answered), if one did. */
struct res_out {
    struct res_req *head, *tail;
    struct res_req *reserved;
};

/* Beside each lease of the row. */
struct res_slot {
    uint64_t deadline_ns; /* mono: when it expires, if held */
    bool dirty;           /* changed since the last res_take_rec() */
};

struct res {
    const char *name; /* the resource's name, for its events (the caller's; may be NULL) */
    size_t name_len;
    struct store_row row;  /* the durable shape: index, limit, leases in grant order */
    struct res_slot *slot; /* one per lease of the row */
    uint32_t cap;          /* room in row.leases and slot */
    uint32_t nheld;        /* leases held (the others are remembered) */
    uint8_t (*del)[16];    /* lease ids forgotten since the last res_take_rec() */
    uint32_t ndel, delcap;
    struct res_req *waiters, *waiters_tail;
    struct res_req *watchers;
    uint32_t nwaiters, nwatchers;
    bool changed;          /* set by a change; the caller writes it (res_take_rec) */
    uint64_t changed_from; /* the index of the first change since `changed` was cleared */
    uint64_t next_index;   /* the index reserved for the next change (0: none) */
};

/* A resource without a row: free, with `index` (see store_index_floor()). */
void res_init(struct res *r, uint64_t index);
/* Replaces the lease state with `row` (moved in) read from the store, keeping waiters and
 * watchers. A lease whose wall-clock deadline has passed expires at the next res_tick(). */
void res_load(struct res *r, struct store_row *row, const struct res_now *now);
/* When a lease stored with the wall-clock deadline `deadline_ms` ends (mono ns): the time it
 * had left. (A restore has written deadlines of this server's clock: see
 * mirror_rearm_deadline().) */
uint64_t res_deadline_ns(int64_t deadline_ms, const struct res_now *now);
/* Releases the memory; waiters and watchers must have been answered (res_cancel_all). The
 * leases held stay counted in res_domain.held: they are still in force in the store. */
void res_free(struct res *r);
/* What changed since the last call, as a store record for resource `name`, and clears
 * `changed`. NULL when out of memory: the turn cannot be written, and the caller must read
 * the resource from the store again. */
struct store_rec *res_take_rec(struct res *r, const char *name, size_t len);
/* Adds `sign` (1 or -1) times the leases r holds to the domain's counts of held leases. */
void res_count_held(const struct res *r, struct res_domain *d, int sign);
/* Adds to the domain's counts the leases a resource held in the store: `nheld` of them,
 * `nshared` of those shared, under `limit` (at start, before any actor loads it). */
void res_count_stored(struct res_domain *d, uint32_t limit, uint32_t nheld, uint32_t nshared);
/* Forgets what changed without writing it (the state is about to be reloaded). */
void res_forget_changes(struct res *r);
/* The kind of lease a resource with this limit and lease grants. */
enum res_kind res_kind_of(uint32_t limit, bool shared);

/* Handles one request (after applying what is due at `now`). */
void res_handle(struct res *r, struct res_domain *d, struct res_req *q, const struct res_now *now,
                struct res_out *out);
/* Applies what is due at `now`: expiry, waiters and watchers that timed out, and grants a
 * waiter if the resource is free. */
void res_tick(struct res *r, struct res_domain *d, const struct res_now *now, struct res_out *out);
/* The client of request `id` has gone: drop it if it waits here (answered RES_GONE), and
 * grant those behind it that now fit. */
void res_drop(struct res *r, struct res_domain *d, uint64_t id, const struct res_now *now,
              struct res_out *out);
/* Grants `q`, a part of a request about several resources that has reserved its place
 * (res_out.reserved): answered in `out` like any grant (RES_OK_LEASE, or
 * RES_ERR_UNAVAILABLE when no token or lease id could be had). */
void res_multi_grant(struct res *r, struct res_domain *d, struct res_req *q,
                     const struct res_now *now, struct res_out *out);
/* Answers every waiter and watcher RES_ERR_UNAVAILABLE with `reason`. */
void res_cancel_all(struct res *r, struct res_domain *d, const char *reason, struct res_out *out);

/* Mono deadlines that need a res_tick(), or UINT64_MAX: the earliest expiry of a lease;
 * the earliest deadline of a waiter or watcher; the earlier of the two. */
uint64_t res_lease_deadline(const struct res *r);
uint64_t res_queue_deadline(const struct res *r);
uint64_t res_next_deadline(const struct res *r);
/* True when nobody waits or watches: the resource needs no memory but its row, and a lease
 * in force needs only something to call res_tick() at res_lease_deadline(). */
bool res_idle(const struct res *r);

/* Pops the first answered request, or NULL. */
struct res_req *res_out_pop(struct res_out *out);

#endif
