/*
 * Fuzzer: the journal and snapshot line decoder (persistence/journal.c). A line that
 * decodes must encode again and decode to the same thing.
 */
#include <stdlib.h>
#include <string.h>

#include "persistence/journal.h"

static void same(const struct jr_line *a, const struct jr_line *b)
{
    if (a->op != b->op || a->seq != b->seq || a->name_len != b->name_len ||
        memcmp(a->name, b->name, a->name_len) != 0 || a->row.index != b->row.index ||
        a->row.has_lease != b->row.has_lease || a->row.held != b->row.held ||
        a->row.token != b->row.token || a->row.ttl_ms != b->row.ttl_ms ||
        a->row.deadline_ms != b->row.deadline_ms ||
        memcmp(a->row.lease_id, b->row.lease_id, 16) != 0 || a->ceiling != b->ceiling ||
        a->generation != b->generation || a->mode != b->mode)
        abort();
    if ((a->row.owner == NULL) != (b->row.owner == NULL) ||
        (a->row.owner && strcmp(a->row.owner->s, b->row.owner->s) != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    struct jr_line l;
    char err[128];
    if (!jr_decode((const char *)data, size, &l, err, sizeof err))
        return 0;
    struct mx_buf b = {0};
    switch (l.op) {
    case JR_PUT:
    case JR_DEL:
        jr_encode_row(&b, l.seq, l.name, l.name_len, &l.row);
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
