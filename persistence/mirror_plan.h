/*
 * The blob mirror's decisions that need no blob store, apart from its requests so that
 * they can be tested alone: how the queued batches are packed into Append Blocks
 * (mirror.c), which blobs a restore reads, in which order, and what their lines make of
 * the rows (mirror_restore.c). Pure functions; any thread.
 */
#ifndef MX_MIRROR_PLAN_H
#define MX_MIRROR_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "persistence/journal.h"

/* ---- packing the queue into blocks ---------------------------------------------- */

/* One block being filled. Offer the queued batches in order until one is refused or the
 * block is full; then append the block (in pieces, see mirror_pack_piece) and start the
 * next one with the batch refused, if any. */
struct mirror_pack {
    size_t max;                   /* a block's limit (Append Block's: 4 MiB) */
    size_t len;                   /* bytes taken */
    size_t nbatches;              /* whole batches taken */
    uint64_t first_seq, last_seq; /* the changes they hold; once shipped, up to last_seq */
    bool full;                    /* take no more */
};

void mirror_pack_init(struct mirror_pack *p, size_t max);

/* Offers the next queued batch: `size` bytes of lines, holding the changes first_seq to
 * last_seq. True: it is in the block. False: it is not (it would go over max), and the
 * block is full. The first batch is always taken, however large: the block then goes in
 * several pieces. A block that holds more than half of max takes no more batches, so that
 * whole batches fill each block at least half. */
bool mirror_pack_offer(struct mirror_pack *p, size_t size, uint64_t first_seq, uint64_t last_seq);

/* How many of the `len` bytes at `data` (whole lines) the next Append Block holds: all of
 * them when they fit in `max`, else as many as fit up to a line end, so that a line is
 * never split across blocks. 0 when the first `max` bytes hold no line end: a single line
 * longer than a block (no change's line comes near: a resource, an owner and metadata are
 * a few KiB at most). */
size_t mirror_pack_piece(const char *data, size_t len, size_t max);

/* ---- restore planning ------------------------------------------------------------ */

/* What a restore reads. */
struct mirror_plan {
    char snapshot[96];   /* the newest snapshot's blob; "" when there is nothing to restore */
    uint64_t generation; /* its generation */
    uint64_t seq;        /* the last change it holds (from its name) */
    uint64_t *journal;   /* first-seqs of its generation's journal blobs to replay, in order */
    size_t njournal;
};

/* Plans a restore from the names of every blob under snapshots/ and journal/, in any
 * order: the newest snapshot (highest generation, then highest seq), and every journal
 * blob of that generation that may hold a change after it, in sequence order (a blob
 * followed by one that begins at or before seq + 1 holds nothing newer and is left out).
 * Journal blobs of other generations and names of neither form are ignored. Returns 0
 * (no snapshot and no journal: an empty container, nothing to restore), or -1 with err:
 * a journal without a snapshot, or out of memory. Free the plan with mirror_plan_free(),
 * also after a failure. */
int mirror_plan_restore(const char *const *names, size_t n, struct mirror_plan *plan, char *err,
                        size_t errlen);

/* The same, but only snapshots and journal blobs of `generation` count (0: any): the plan
 * for a container whose owner blob names a journal but no snapshot (written by a version
 * before the owner blob named its snapshot). Blobs of other generations are ignored. */
int mirror_plan_restore_gen(const char *const *names, size_t n, uint64_t generation,
                            struct mirror_plan *plan, char *err, size_t errlen);

/* The plan the owner blob names (owner.h): exactly the snapshot `snapshot` and the journal
 * blob `journal` after it, nothing a listing shows. `journal` may be "" (a snapshot with
 * no journal yet). -1 with err when a name is not of its form, or when the journal is not
 * of the snapshot's generation or begins after the change that follows the snapshot (then
 * changes would be missing). */
int mirror_plan_named(const char *snapshot, const char *journal, struct mirror_plan *plan,
                      char *err, size_t errlen);

void mirror_plan_free(struct mirror_plan *plan);

/* ---- names ----------------------------------------------------------------------- */

/* snapshots/<generation>-<seq>.jsonl and journal/<generation>/<first-seq>, zero-padded. */
void mirror_snapshot_name(char *out, size_t len, uint64_t generation, uint64_t seq);
void mirror_journal_name(char *out, size_t len, uint64_t generation, uint64_t first_seq);
bool mirror_parse_snapshot_name(const char *name, uint64_t *generation, uint64_t *seq);
bool mirror_parse_journal_name(const char *name, uint64_t *generation, uint64_t *first_seq);

/* The generation of a snapshot or journal blob's name; false for any other name. */
bool mirror_name_generation(const char *name, uint64_t *generation);

/* ---- leases read from another server ---------------------------------------------- */

/* ---- replaying lines in memory ---------------------------------------------------- */

/* What a restore builds from a snapshot and the journal after it, before it writes the
 * store: every resource seen, with its row as the lines leave it (a row without leases: the
 * resource was dropped, and its index lives on in marks.index_floor), the marks, the
 * highest reservation, and how the sequence numbers went. Zero it to start. */
struct mirror_replay {
    struct store_import_row *v; /* malloc'd names */
    size_t n, cap;
    size_t *slots; /* index + 1 into v; 0: empty */
    size_t nslots;
    struct store_marks marks;
    uint64_t ceiling, last_seq, snapshot_seq, duplicates, gaps;
    enum jr_mode mode;
    /* The lines of a group read so far, applied when its last one comes: a group cut off
     * (at the journal's end, or by a block appended again) is never applied in part. */
    struct jr_line group[64];
    uint32_t ngroup;
    uint64_t groups_dropped; /* lines of groups cut off */
};

/* Applies one decoded line: "row" and "put" (format 1) replace the resource's row, "set"
 * writes and forgets leases (creating the row when there is none), "del" drops it; the
 * leases stay ordered by token. A journal line (`from_snapshot` false) at or below the last
 * sequence applied is skipped as a duplicate. Takes the line's leases (`l` is left with
 * nothing to release but what jr_line_clear() frees anyway). 0, or -1 when out of memory. */
int mirror_replay_line(struct mirror_replay *st, struct jr_line *l, bool from_snapshot);

/* What reading the container came to (mirror_replay_text, mirror_copy_follow,
 * mirror_restore): a line that cannot be decoded is told apart from every other failure,
 * since nothing may be served from a container that holds one (docs/ha.md). */
enum mirror_read {
    MIRROR_READ_OK = 0,
    MIRROR_READ_FAILED = -1,      /* err says why; trying again may do */
    MIRROR_READ_UNDECODABLE = -2, /* err names the line: not until the container is repaired */
};

/* Decodes and applies every line of a blob's text (`snapshot`: a snapshot, whose first line
 * must be its header). The lines of a group wait until its last one is read, in this call
 * or a later one; what a group read so far is when the journal ends is never applied.
 * MIRROR_READ_OK; MIRROR_READ_UNDECODABLE with err when a line cannot be decoded (among them a line
 * of a newer format); MIRROR_READ_FAILED with err when out of memory. */
enum mirror_read mirror_replay_text(struct mirror_replay *st, const char *name, const char *text,
                                    size_t len, bool snapshot, char *err, size_t errlen);

/* The row of `name`, or NULL when no line named it (a dropped one has no leases). */
const struct store_row *mirror_replay_get(const struct mirror_replay *st, const char *name,
                                          size_t len);

/* Frees everything and zeroes `st`. */
void mirror_replay_free(struct mirror_replay *st);

#endif
