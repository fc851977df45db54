/*
 * The text the blob mirror writes: JSON, one object per line. Pure functions, no I/O; the
 * decoder validates everything, since a blob may have been written by another version or
 * damaged (it is one of the fuzzed parsers).
 *
 * Lines (format 2; a lease is {"lease_id":U,"owner":O,"token":T,"ttl_ms":L,
 * "acquired_at":A,"renewed_at":W,"deadline":D,"held":true|false,"shared":true|false,
 * "metadata":{...}|null}):
 *   {"op":"begin","format":2,"generation":G,"mode":"async"|"sync","first_seq":N}
 *                                            first line of a journal blob
 *   {"op":"set","seq":N,"resource":R,"index":I,"limit":L,"put":[lease...],"del":[U...]}
 *                                            a change: leases written, lease ids forgotten
 *   {"op":"del","seq":N,"resource":R,"index":I}      the resource has no lease left
 *   {"op":"reserve","ceiling":C}             fencing tokens up to C may be handed out
 *   {"op":"snapshot","format":2,"generation":G,"mode":M,"seq":S,"token_hwm":T,
 *    "index_hwm":I,"index_floor":F,"ceiling":C}
 *                                            first line of a snapshot; rows follow:
 *   {"op":"row","seq":0,"resource":R,"index":I,"limit":L,"leases":[lease...]}
 * Times are wall-clock milliseconds since the epoch.
 *
 * Format 1 (the first release) had no "format" field, no "set" nor "row", and wrote a
 * resource with its one lease as {"op":"put","seq":N,"resource":R,"index":I, <the lease's
 * fields without "shared">}, in journals and snapshots alike: it is still read, as a row
 * with limit 1 that replaces the resource's state. A "begin" or "snapshot" line of a
 * format above 2 is refused: a newer version wrote it.
 */
#ifndef MX_JOURNAL_H
#define MX_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/names.h"
#include "persistence/store.h"

/* JR_PUT (format 1) and JR_ROW replace the resource's state with `row`; JR_SET changes it
 * (row.index, row.limit; row.leases are the leases put, `del` the ids forgotten). */
enum jr_op { JR_BEGIN = 1, JR_PUT, JR_DEL, JR_RESERVE, JR_SNAPSHOT, JR_SET, JR_ROW };
#define JR_FORMAT 2
enum jr_mode { JR_MODE_ASYNC = 1, JR_MODE_SYNC = 2 };

struct jr_line {
    enum jr_op op;
    uint64_t seq;
    char name[MX_NAME_MAX + 1];
    size_t name_len;
    struct store_row row;     /* put, row, set (see enum jr_op); del: index only */
    uint32_t ndel;            /* set: the lease ids forgotten */
    uint8_t (*del)[16];       /* set: malloc'd */
    uint32_t format;          /* begin, snapshot: 1 when the line names none */
    uint64_t ceiling;         /* reserve, snapshot */
    uint64_t generation;      /* begin, snapshot */
    enum jr_mode mode;        /* begin, snapshot */
    uint64_t first_seq;       /* begin */
    struct store_marks marks; /* snapshot */
    bool grouped;             /* set, del: one of a group ("grp": how many follow it) */
    uint32_t group_left;
};

/* Appends one line (with its '\n') to `b`. */
void jr_encode_rec(struct mx_buf *b, const struct store_rec *rec);
/* A snapshot's row ("row"). */
void jr_encode_row(struct mx_buf *b, const char *name, size_t len, const struct store_row *row);
void jr_encode_reserve(struct mx_buf *b, uint64_t ceiling);
void jr_encode_begin(struct mx_buf *b, uint64_t generation, enum jr_mode mode, uint64_t first_seq);
void jr_encode_snapshot(struct mx_buf *b, uint64_t generation, enum jr_mode mode,
                        const struct store_marks *marks, uint64_t ceiling);

/* Decodes one line (without its '\n'). Returns true, or false with `err` filled; `out`
 * then holds nothing to release. On success release it with jr_line_clear(). A begin or
 * snapshot line of a format above JR_FORMAT is refused, and `err` says so. */
bool jr_decode(const char *line, size_t len, struct jr_line *out, char *err, size_t errlen);
void jr_line_clear(struct jr_line *l);

const char *jr_mode_name(enum jr_mode mode);

#endif
