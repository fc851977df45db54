/*
 * The blob mirror's pure decisions (see mirror_plan.h): packing batches into blocks, and
 * planning a restore from a listing.
 */
#include "persistence/mirror_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persistence/mirror_internal.h"

/* ---- packing the queue into blocks ---------------------------------------------- */

void mirror_pack_init(struct mirror_pack *p, size_t max)
{
    *p = (struct mirror_pack){.max = max};
}

bool mirror_pack_offer(struct mirror_pack *p, size_t size, uint64_t first_seq, uint64_t last_seq)
{
    if (p->full)
        return false;
    if (p->nbatches > 0 && size > p->max - p->len) {
        p->full = true;
        return false;
    }
    if (p->nbatches == 0)
        p->first_seq = first_seq;
    p->last_seq = last_seq;
    p->len += size;
    p->nbatches++;
    if (p->len > p->max / 2)
        p->full = true;
    return true;
}

size_t mirror_pack_piece(const char *data, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    while (n > 0 && data[n - 1] != '\n')
        n--;
    return n;
}

/* ---- restore planning ------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int mirror_plan_restore(const char *const *names, size_t n, struct mirror_plan *plan, char *err,
                        size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    bool any_journal = false;
    size_t njournal = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t g, s;
        if (mirror_parse_snapshot_name(names[i], &g, &s) &&
            (!plan->snapshot[0] || g > plan->generation ||
             (g == plan->generation && s > plan->seq))) {
            plan->generation = g;
            plan->seq = s;
            snprintf(plan->snapshot, sizeof plan->snapshot, "%s", names[i]);
        } else if (mirror_parse_journal_name(names[i], &g, &s)) {
            any_journal = true;
            njournal++;
        }
    }
    if (!plan->snapshot[0]) {
        if (any_journal) {
            snprintf(err, errlen,
                     "the container has a journal but no snapshot: refusing to "
                     "start on an incomplete mirror");
            return -1;
        }
        return 0; /* an empty container: a fresh start */
    }
    if (njournal == 0)
        return 0;
    uint64_t *first = malloc(njournal * sizeof *first);
    if (!first) {
        snprintf(err, errlen, "out of memory planning the restore");
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t g, s;
        if (mirror_parse_journal_name(names[i], &g, &s) && g == plan->generation)
            first[k++] = s;
    }
    qsort(first, k, sizeof *first, cmp_u64);
    plan->journal = first;
    for (size_t i = 0; i < k; i++) {
        if (i + 1 < k && first[i + 1] <= plan->seq + 1)
            continue; /* every line of it is in the snapshot */
        first[plan->njournal++] = first[i];
    }
    return 0;
}

void mirror_plan_free(struct mirror_plan *plan)
{
    free(plan->journal);
    plan->journal = NULL;
    plan->njournal = 0;
}

/* ---- names ----------------------------------------------------------------------- */

bool mirror_name_generation(const char *name, uint64_t *generation)
{
    uint64_t s;
    return mirror_parse_snapshot_name(name, generation, &s) ||
           mirror_parse_journal_name(name, generation, &s);
}
