/*
 * The blob mirror: the store's committed changes shipped to Azure Blob Storage (or
 * Azurite) as a journal, the way Litestream ships SQLite, so that a server on a lost disk
 * can be rebuilt (docs/architecture.md, "Blob mirror"; docs/mirror.md).
 *
 * In the container:
 *   owner                                  a blob whose Azure lease the running server holds;
 *                                          its metadata: url, generation, journal (the blob
 *                                          appended to now), written with that lease
 *   snapshots/<generation>-<seq>.jsonl     every row as of commit <seq>
 *   journal/<generation>/<first-seq>       append blobs: one block per shipped batch
 * Lines are described in journal.h. A generation is one server's tenure over the
 * container: it begins with a snapshot of everything, so a restore needs only the newest
 * snapshot and its own generation's journal after it.
 *
 * Life: mirror_open() (connect, take the owner lease) -> mirror_restore() (only when the
 * store is new) -> mirror_start() (snapshot, reserve tokens, ship from now on) ->
 * mirror_close(). Only mirror_open/restore/start/close are called from the main thread;
 * the rest from any thread.
 */
#ifndef MX_MIRROR_H
#define MX_MIRROR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "persistence/owner.h"
#include "persistence/mirror_plan.h"
#include "persistence/store.h"

enum mirror_mode { MIRROR_OFF = 0, MIRROR_ASYNC, MIRROR_SYNC };

struct mirror_config {
    const char *connection_string;
    const char *container;
    /* The group's blobs are under this prefix of the container (blob_options.prefix: a
     * partition's, "p/003/"); NULL or "": the container's own. */
    const char *blob_prefix;
    const char *data_dir; /* where the owner lease's id is kept across restarts */
    enum mirror_mode mode;
    uint64_t snapshot_every_changes; /* 0: 100000 */
    uint64_t snapshot_every_ms;      /* 0: 300000 */
    uint64_t token_block;            /* tokens reserved at a time; 0: 100000 */
    uint64_t sync_timeout_ms;        /* a sync answer waits this long for the blob; 0: 10000 */
    uint64_t takeover_wait_ms;       /* wait for another owner's lease to lapse; 0: 20000 */
    uint64_t request_timeout_ms;     /* one blob request at most; 0: 5000 */
    const char *advertise_url;       /* published in the owner blob's metadata; NULL: none */
    uint64_t fault_append_pause_ms;  /* testing: see MUTEXD_FAULT_APPEND_PAUSE_MS */
    uint64_t queue_max;       /* an async mirror's queue bound, in changes; 0: MIRROR_QUEUE_MAX */
    struct mirror_copy *warm; /* a standby's copy, used by mirror_restore; or NULL */
    /* The server's fencing-token counter, and the ceiling the mirror reserves (tokens
     * above it must not be handed out). */
    _Atomic uint64_t *last_token;
    _Atomic uint64_t *token_ceiling;
};

struct mirror;
struct mirror_copy;

enum mirror_mode mirror_parse_mode(const char *s); /* -1 (as int) when unknown */

/* Connects, creates the container if needed and takes its owner lease (waiting up to
 * takeover_wait_ms for another holder's lease to lapse), then seals the journal blob the
 * previous owner was appending to: from then on nothing it appends lands, however late it
 * resumes. Returns 0, -1 with err, or MIRROR_HELD with err when another server's lease on
 * the owner blob held to the end of the wait (it took the container first: nothing failed
 * here); a transient error to the end of the wait (a 503, not a 409) is a -1. */
#define MIRROR_HELD (-2)
int mirror_open(struct mirror **out, const struct mirror_config *cfg, struct store *store,
                char *err, size_t errlen);

struct mirror_restored {
    bool restored;       /* the store was loaded from the container */
    bool may_lag;        /* the source was mirrored asynchronously: it may miss changes */
    size_t rows;         /* rows restored */
    uint64_t generation; /* the generation restored from */
    uint64_t commit_seq; /* the last change restored */
};

/* When the store was just created and the container holds a mirror, loads the snapshot
 * and the journal after it that the owner blob names into the store; with a warm copy
 * (cfg.warm) that follows that journal, only the journal's tail is read. The leases keep
 * the deadlines written on the other server's clock: the caller re-arms them with
 * store_rearm() just before it serves. Returns MIRROR_READ_OK (see `out`),
 * MIRROR_READ_FAILED with err, or MIRROR_READ_UNDECODABLE with err when a line of the
 * container cannot be decoded (nothing may be served from it as it is, see docs/ha.md,
 * "A journal that cannot be read"). */
enum mirror_read mirror_restore(struct mirror *m, struct mirror_restored *out, char *err,
                                size_t errlen);

/*
 * A standby's copy of the container, kept warm by following the journal (the leases in
 * memory, not in a store): when it takes over, the restore reads only what was appended
 * since. Every call from one thread.
 */
int mirror_copy_open(struct mirror_copy **out, const char *connection_string, const char *container,
                     const char *blob_prefix, char *err, size_t errlen);
void mirror_copy_free(struct mirror_copy *c);
/* Brings the copy up to the snapshot and journal blob the owner blob names now (`named`,
 * owner.h): reads what was appended since the last call, or that snapshot and its journal
 * after a roll it cannot follow without a gap, or a lost blob. MIRROR_READ_OK,
 * MIRROR_READ_FAILED with err (the copy is then read anew next time), or
 * MIRROR_READ_UNDECODABLE with err when a line cannot be decoded. */
enum mirror_read mirror_copy_follow(struct mirror_copy *c, const struct owner_meta *named,
                                    char *err, size_t errlen);
/* How many changes the last call found new, and how long ago the copy was last complete
 * (ms). */
void mirror_copy_lag(const struct mirror_copy *c, uint64_t *changes, uint64_t *ms);

/* Starts a new generation: a snapshot of the store, a token reservation, then ships every
 * commit (the store's hook is set here). `restored`: the store was just loaded from this
 * container. Refuses (-1, err) when the container holds a generation newer than this data
 * directory last wrote, so that a stale directory never erases another server's mirror. */
int mirror_start(struct mirror *m, bool restored, char *err, size_t errlen);

/* Before store_close(): the mirror stops reading the store (no more snapshots; one in
 * progress is finished first). It still takes the batches the store's writer hands it. */
void mirror_detach(struct mirror *m);

/* A planned handover: mirror_close() names `url` in the owner blob (its `to`) before it
 * releases the lease, so that the servers watching it know whose the container is to be
 * (docs/ha.md, "Partitions"). Before mirror_close(), from the thread that closes. */
void mirror_hand_to(struct mirror *m, const char *url);

/* Ships what is queued (for a few seconds at most), seals the journal, releases the owner
 * lease, frees. Call after store_close(). */
void mirror_close(struct mirror *m);

/* NULL when writes may proceed; else why not (sync mode and the blob store unreachable,
 * or another server has taken the container). */
const char *mirror_write_gate(struct mirror *m);

/* Readiness: false with a reason when the mirror stops the server from being ready. */
bool mirror_ready(struct mirror *m, char *why, size_t len);

/* Changes committed and not yet shipped, and the age of the oldest, in ms. */
void mirror_lag(struct mirror *m, uint64_t *changes, uint64_t *ms);

enum mirror_mode mirror_mode(const struct mirror *m);

/* Another server has taken the container (seen in the owner blob): never write again. */
void mirror_give_up(struct mirror *m, const char *why);

/* True once another server has taken the container: this one never writes to it again. */
bool mirror_fenced(struct mirror *m);

/* The generation being written (0 before mirror_start). */
uint64_t mirror_generation(const struct mirror *m);

void mirror_metrics(struct mirror *m, struct mx_buf *b);

#endif
