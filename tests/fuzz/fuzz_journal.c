/*
 * Fuzzer: the journal and snapshot line decoder (persistence/journal.c). A line that
 * decodes must encode again and decode to the same thing.
 */
#include <stdlib.h>
#include <string.h>

#include "persistence/journal.h"

static void same_lease(const struct store_lease *a, const struct store_lease *b)
{
    if (memcmp(a->lease_id, b->lease_id, 16) != 0 || a->held != b->held || a->shared != b->shared ||
        a->token != b->token || a->ttl_ms != b->ttl_ms || a->acquired_at_ms != b->acquired_at_ms ||
        a->renewed_at_ms != b->renewed_at_ms || a->deadline_ms != b->deadline_ms)
        abort();
    if ((a->owner == NULL) != (b->owner == NULL) ||
        (a->owner && strcmp(a->owner->s, b->owner->s) != 0))
        abort();
    if ((a->metadata == NULL) != (b->metadata == NULL) ||
        (a->metadata && strcmp(a->metadata->s, b->metadata->s) != 0))
        abort();
}

/* `b` was encoded from `a`; a format 1 "put" comes back as a "row", and a row's seq as 0. */
static void same(const struct jr_line *a, const struct jr_line *b)
{
    enum jr_op op = a->op == JR_PUT ? JR_ROW : a->op;
    uint64_t seq = op == JR_ROW ? 0 : a->seq;
    if (op != b->op || seq != b->seq || a->name_len != b->name_len ||
        memcmp(a->name, b->name, a->name_len) != 0 || a->row.index != b->row.index ||
        a->ceiling != b->ceiling || a->generation != b->generation || a->mode != b->mode ||
        a->first_seq != b->first_seq || a->ndel != b->ndel)
        abort();
    if (op != JR_DEL && (a->row.limit != b->row.limit || a->row.nleases != b->row.nleases))
        abort();
    for (uint32_t i = 0; op != JR_DEL && i < a->row.nleases; i++)
        same_lease(&a->row.leases[i], &b->row.leases[i]);
    for (uint32_t i = 0; i < a->ndel; i++)
        if (memcmp(a->del[i], b->del[i], 16) != 0)
            abort();
    if (op == JR_SNAPSHOT && memcmp(&a->marks, &b->marks, sizeof a->marks) != 0)
        abort();
    if ((op == JR_BEGIN || op == JR_SNAPSHOT) && b->format != JR_FORMAT)
        abort();
}

/* The change of a set or del line as a record (new references). */
static struct store_rec *rec_of(const struct jr_line *l)
{
    bool drop = l->op == JR_DEL;
    struct store_rec *rec = store_rec_new(l->name, l->name_len, l->row.index, l->row.limit,
                                          drop ? 0 : l->row.nleases, drop ? 0 : l->ndel);
    if (!rec)
        return NULL;
    rec->drop = drop;
    rec->commit_seq = l->seq;
    for (uint32_t i = 0; i < rec->nput; i++)
        store_lease_copy(&rec->put[i], &l->row.leases[i]);
    if (rec->ndel)
        memcpy(rec->del, l->del, rec->ndel * sizeof *rec->del);
    return rec;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    struct jr_line l;
    char err[160];
    if (!jr_decode((const char *)data, size, &l, err, sizeof err))
        return 0;
    struct mx_buf b = {0};
    struct store_rec *rec = NULL;
    switch (l.op) {
    case JR_PUT:
    case JR_ROW:
        jr_encode_row(&b, l.name, l.name_len, &l.row);
        break;
    case JR_SET:
    case JR_DEL:
        rec = rec_of(&l);
        if (!rec)
            abort();
        jr_encode_rec(&b, rec);
        store_rec_free(rec);
        break;
    case JR_RESERVE:
        jr_encode_reserve(&b, l.ceiling);
        break;
    case JR_BEGIN:
        jr_encode_begin(&b, l.generation, l.mode, l.first_seq);
        break;
    case JR_SNAPSHOT:
        jr_encode_snapshot(&b, l.generation, l.mode, &l.marks, l.ceiling);
        break;
    }
    struct jr_line again;
    if (b.oom || b.len == 0 || !jr_decode(b.p, b.len - 1, &again, err, sizeof err))
        abort(); /* what we write we must read */
    same(&l, &again);
    jr_line_clear(&again);
    jr_line_clear(&l);
    mx_buf_free(&b);
    return 0;
}
