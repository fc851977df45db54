/*
 * The store: the durable state of every resource in SQLite (WAL, synchronous=FULL).
 *
 * Writes: callers submit records (a resource's row as it now is) and waits (a callback
 * to run once everything submitted before it is durable) into one queue. One writer
 * thread takes everything queued, writes it in one BEGIN IMMEDIATE transaction and
 * commits it with one fsync (group commit), then completes the waits in order.
 *
 * Failures: when a commit fails (disk full, I/O error) the transaction is rolled back,
 * the waits of the batch complete with STORE_EFAIL, and the store's *epoch* advances.
 * Records and waits carry the epoch their author's state was read in; those of an older
 * epoch are refused (not written; waits complete with STORE_EFAIL), because the state
 * they were computed from may contain the lost changes. Authors compare their epoch with
 * store_epoch() before using their in-memory state and reload it from the store when it
 * moved. The store keeps trying: the next batch is a new commit; store_health() says why
 * the last one failed until one succeeds.
 *
 * Reads: store_get(), store_list_held() and store_each_held() use a pool of read
 * connections that never wait for the writer (WAL readers see the last commit).
 *
 * Threads: every function may be called from any thread, except store_close().
 */
#ifndef MX_STORE_H
#define MX_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/prom.h"
#include "common/str.h"

struct store;

enum store_status {
    STORE_OK = 0,
    STORE_NOTFOUND, /* store_get: no row */
    STORE_EFAIL,    /* the write was not made durable; the client is told 503 */
    STORE_ECLOSED,  /* store_close() has begun */
    STORE_EIO,      /* a read failed */
};

/* One lease of a resource. */
struct store_lease {
    uint8_t lease_id[16];
    /* false: it expired and is remembered, so that its holder may still renew or release it
     * until a grant on the resource takes its place. */
    bool held;
    bool shared; /* a shared (reader) lease */
    uint64_t token;
    uint64_t ttl_ms;
    int64_t acquired_at_ms, renewed_at_ms; /* wall clock, informative */
    int64_t deadline_ms;                   /* wall clock: when it expires */
    struct mx_str *owner;                  /* a reference held by the lease */
    struct mx_str *metadata;               /* serialized JSON object, or NULL */
};

/* Drops the lease's references. */
void store_lease_clear(struct store_lease *l);
/* *dst = *src with new references to src's strings. */
void store_lease_copy(struct store_lease *dst, const struct store_lease *src);

/* A resource's row: the index of its last change, the holder limit in force, and its
 * leases (held, and expired ones remembered), oldest grant (lowest token) first. A
 * resource without leases has no row. */
struct store_row {
    uint64_t index;
    uint32_t limit; /* 1: one exclusive lease or shared leases; > 1: a counting semaphore */
    uint32_t nleases;
    struct store_lease *leases; /* malloc'd, nleases of them (NULL when none) */
};

/* Drops the row's references and frees its leases; the row is then empty. */
void store_row_clear(struct store_row *row);
/* Appends a copy of `l` (new references). 0, or -1 when out of memory. */
int store_row_add(struct store_row *row, const struct store_lease *l);

/* Queue links. Private. */
struct store_item {
    struct store_item *_next;
    uint64_t _epoch;
    uint64_t _seq;
    uint8_t _kind;
};

/* A change to one resource: its index and limit become `index` and `limit`; each lease of
 * `put` is written (added, or replacing the lease with the same id) and each lease id of
 * `del` forgotten. `drop`: the resource has no lease left, and its row and every lease of
 * it are deleted (`put` and `del` are then empty). */
struct store_rec {
    struct store_item _item; /* private */
    uint64_t index;
    uint32_t limit;
    bool drop;
    uint32_t nput, ndel;
    struct store_lease *put; /* references held by the record */
    uint8_t (*del)[16];
    uint64_t commit_seq; /* set when committed: its place in the store's history, durable */
    /* One of a group (store_submit_group): how many of its records follow it. The journal
     * marks them, so that a restore applies a group whole or not at all. */
    bool grouped;
    uint16_t group_left;
    uint16_t name_len;
    char name[];
};

/* A new record with room for `nput` leases and `ndel` ids (zeroed; the caller fills them,
 * putting references the record then owns). NULL when out of memory. */
struct store_rec *store_rec_new(const char *name, size_t len, uint64_t index, uint32_t limit,
                                uint32_t nput, uint32_t ndel);
/* A record that replaces the resource's whole state with `row` (new references): every
 * lease of `row` is put, and the resource is dropped when `row` has none. Deletes no lease
 * id: for a resource with no row yet, as a restore and the tests write them. */
struct store_rec *store_rec_from_row(const char *name, size_t len, const struct store_row *row);
void store_rec_free(struct store_rec *rec);

struct store_wait {
    struct store_item _item; /* private */
    /* Called once, on the writer thread, inside store_wait(), in store_batch_end() or
     * (sync mirroring) on the mirror's thread: STORE_OK when everything submitted before
     * the wait is durable, and with sync mirroring the record it depends on is in the
     * mirror too; else STORE_EFAIL or STORE_ECLOSED. */
    void (*done)(struct store_wait *w, int status);
};

/*
 * Shipping (the blob mirror). When set, `ship` is called on the thread that committed (the
 * writer, or a caller of store_batch_end()), one commit at a time, after every
 * successful commit with the batch's committed records, in commit order and numbered
 * (commit_seq), linked through store_next_rec(); it takes them and must free each with
 * store_rec_free(). `waits` is the batch's waits, linked through store_next_wait(): when
 * `ship` returns true it has taken them and completes each itself (sync mirroring); when
 * false the store completes them at once. It is also called with no records, for waits
 * alone (from the writer, or inside store_wait() when the writer is idle): every record
 * a wait depends on (store_wait_seq) was handed to an earlier call.
 */
typedef bool (*store_ship_fn)(void *ctx, struct store_rec *recs, struct store_wait *waits);
struct store_rec *store_next_rec(const struct store_rec *r);
struct store_wait *store_next_wait(const struct store_wait *w);
/* Completes each wait of the list that starts at `w`, in order. */
void store_complete_waits(struct store_wait *w, int status);
/* Sets the wait after `w` in a list the shipping hook keeps. */
void store_link_wait(struct store_wait *w, struct store_wait *next);
/* The record's submission number (store_submit's result), and the one a wait depends on. */
uint64_t store_rec_seq(const struct store_rec *r);
uint64_t store_wait_seq(const struct store_wait *w);

struct store_config {
    const char *dir;    /* created if missing; locked while open */
    store_ship_fn ship; /* NULL: nothing is shipped */
    void *ship_ctx;
    uint64_t fault_commit_every; /* testing: fail every Nth commit (0: never) */
    uint64_t fault_commit_first; /* testing: the first commit to fail (1-based; 0: none) */
    uint64_t fault_commit_count; /* testing: how many in a row from there */
    uint64_t fault_open_read;    /* testing: the Nth of store_open's high-water reads fails
                                    (1-based; 0: none) */
};

/* Opens (creating and migrating) DIR/mutexd.db and starts the writer. On failure returns
 * an errno-style code and writes a sentence into err. */
int store_open(struct store **out, const struct store_config *cfg, char *err, size_t errlen);

/* Stops taking writes, commits what is queued, completes every wait, joins the writer,
 * closes every connection, frees the store and unlocks the directory. */
void store_close(struct store *s);

/* Takes `rec` (the store frees it) and queues it, tagged with `epoch`. Returns its
 * sequence number; 0 when the store is closing (the record was freed). */
uint64_t store_submit(struct store *s, struct store_rec *rec, uint64_t epoch);

/* Takes the `n` records of `recs` (linked through store_next_rec(); each with the epoch its
 * author read its state in, `epochs[i]`) and queues them one after another: they are
 * committed in one transaction and shipped in one batch, or all refused (when any epoch is
 * not the store's). The changes of a grant of several resources at once. Returns the last
 * one's sequence number (the first is that minus n - 1); 0 when the store is closing (the
 * records were freed). */
uint64_t store_submit_group(struct store *s, struct store_rec *recs, size_t n,
                            const uint64_t *epochs);
/* Sets the record after `r` in a list for store_submit_group(). */
void store_link_rec(struct store_rec *r, struct store_rec *next);

/* Completes `w` once everything submitted so far is durable, in this call when it
 * already is. `epoch`: as for store_submit. `seq`: the last record the answer shows (a
 * store_submit result; 0 for none), which a sync mirror must hold before `w` completes. */
void store_wait(struct store *s, struct store_wait *w, uint64_t epoch, uint64_t seq);

/*
 * Committing on the caller's thread: a batch is a handle the caller passes in. What is
 * submitted and waited for through it (store_submit_in, store_wait_in) is queued without
 * waking the writer. At store_batch_end(), with `here` true and no commit under way, the
 * caller commits the queue itself (and the waits that completes are called on its
 * thread); otherwise the writer takes it. Worth it when nothing else would join the
 * commit: it saves a hand-off to the writer and back. A batch lives on one thread's stack
 * from store_batch_begin() to store_batch_end(), and no other thread uses it.
 */
struct store_batch {
    struct store *store; /* NULL once ended */
};
void store_batch_begin(struct store *s, struct store_batch *b);
void store_batch_end(struct store_batch *b, bool here);
/* store_submit and store_wait through batch `b` (NULL: as store_submit, store_wait). */
uint64_t store_submit_in(struct store *s, struct store_rec *rec, uint64_t epoch,
                         struct store_batch *b);
void store_wait_in(struct store *s, struct store_wait *w, uint64_t epoch, uint64_t seq,
                   struct store_batch *b);

/* The current epoch (see above). */
uint64_t store_epoch(struct store *s);

/* Records submitted and not yet committed (or refused): how far the writer is behind. */
uint64_t store_backlog(struct store *s);

/* True when record `seq` has been processed (committed, or refused). */
bool store_seq_done(struct store *s, uint64_t seq);
/* The last record processed: every one up to it was committed (or refused). */
uint64_t store_done_seq(struct store *s);

/* Reads the row of `name`. STORE_OK (fills `out`, which the caller clears),
 * STORE_NOTFOUND, or STORE_EIO. */
int store_get(struct store *s, const char *name, size_t len, struct store_row *out);

/* Calls `fn` for each resource with at least one lease held whose name starts with
 * `prefix` and sorts after `after` (either may be NULL), in name order, at most `limit`
 * times, with its whole row. `fn` gets references it must drop (store_row_clear). Returns
 * STORE_OK or STORE_EIO. */
int store_list_held(struct store *s, const char *prefix, const char *after, int limit,
                    void (*fn)(void *arg, const char *name, size_t len, struct store_row *row),
                    void *arg);

/* Calls `fn` once per resource with a lease in force (including leases whose deadline has
 * passed but that were not yet expired), with its name, the earliest wall-clock deadline
 * of those leases, its limit, how many leases are in force and how many of them are
 * shared, in no particular order. Returns STORE_OK or STORE_EIO. */
struct store_held {
    int64_t deadline_ms;
    uint32_t limit, nheld, nshared;
};
int store_each_held(struct store *s,
                    void (*fn)(void *arg, const char *name, size_t len, const struct store_held *h),
                    void *arg);

/* How many resources have a row: at least as many as store_each_held() will call back
 * for. Returns STORE_OK or STORE_EIO. */
int store_count_rows(struct store *s, uint64_t *n);

/* The highest fencing token and change index ever committed (at open: on disk). */
uint64_t store_token_hwm(struct store *s);
uint64_t store_index_hwm(struct store *s);
/* The index a resource without a row reports: the highest index of any deleted row, so
 * that a resource's index never goes backwards when its row is deleted and recreated. */
uint64_t store_index_floor(struct store *s);

/* True when the last commit succeeded; otherwise false with the reason copied into why. */
bool store_healthy(struct store *s, char *why, size_t len);

/* True when store_open() created the database (the directory had none). */
bool store_created(struct store *s);

/* The last commit_seq committed. */
uint64_t store_commit_seq(struct store *s);

/* Sets the shipping hook (see store_config); before any write. */
void store_set_ship(struct store *s, store_ship_fn ship, void *ctx);

/*
 * A consistent snapshot: `fn` gets every row (held or expired-remembered) as of one commit,
 * whose commit_seq and high-water marks are returned in `out`. On a read connection: it
 * does not stop the writer. `fn` gets references it must drop.
 */
struct store_marks {
    uint64_t commit_seq, token_hwm, index_hwm, index_floor;
};
int store_snapshot(struct store *s,
                   int (*fn)(void *arg, const char *name, size_t len, struct store_row *row),
                   void *arg, struct store_marks *out);

/* Replaces the whole content with `n` rows and `marks` in one transaction (restore). Only
 * before the store takes writes. Returns STORE_OK or STORE_EIO (err says why). */
struct store_import_row {
    const char *name;
    size_t len;
    struct store_row row;
};
/* Gives every lease held its TTL again from `now_ms` (the lease clock), or at least
 * `grace_ms` when its deadline had passed, plus a spread by token of up to a tenth of its
 * TTL (at most 2 s): what a server does with leases read from another server's clock, once
 * it is about to serve them. *n: the leases re-armed. Only before the store takes writes.
 * Returns STORE_OK or STORE_EIO (err says why). */
int store_rearm(struct store *s, int64_t now_ms, uint64_t grace_ms, uint64_t *n, char *err,
                size_t errlen);
int store_import(struct store *s, const struct store_import_row *rows, size_t n,
                 const struct store_marks *marks, char *err, size_t errlen);

/* Appends the store's metrics in Prometheus text format. */
void store_metrics(struct store *s, struct mx_buf *b);

#endif
