/*
 * The blob mirror's pure decisions (see mirror_plan.h): packing batches into blocks, and
 * planning a restore from a listing.
 */
#include "persistence/mirror_plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return mirror_plan_restore_gen(names, n, 0, plan, err, errlen);
}

int mirror_plan_restore_gen(const char *const *names, size_t n, uint64_t generation,
                            struct mirror_plan *plan, char *err, size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    bool any_journal = false;
    size_t njournal = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t g, s;
        bool snapshot = mirror_parse_snapshot_name(names[i], &g, &s);
        bool journal = !snapshot && mirror_parse_journal_name(names[i], &g, &s);
        if ((!snapshot && !journal) || (generation && g != generation))
            continue;
        if (snapshot && (!plan->snapshot[0] || g > plan->generation ||
                         (g == plan->generation && s > plan->seq))) {
            plan->generation = g;
            plan->seq = s;
            snprintf(plan->snapshot, sizeof plan->snapshot, "%s", names[i]);
        } else if (journal) {
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

int mirror_plan_named(const char *snapshot, const char *journal, struct mirror_plan *plan,
                      char *err, size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    uint64_t g, first;
    if (!mirror_parse_snapshot_name(snapshot, &plan->generation, &plan->seq)) {
        snprintf(err, errlen, "the owner blob names no snapshot of the mirror's form: '%s'",
                 snapshot);
        return -1;
    }
    snprintf(plan->snapshot, sizeof plan->snapshot, "%s", snapshot);
    if (!journal[0])
        return 0;
    if (!mirror_parse_journal_name(journal, &g, &first)) {
        snprintf(err, errlen, "the owner blob names no journal blob of the mirror's form: '%s'",
                 journal);
        return -1;
    }
    if (g != plan->generation || first > plan->seq + 1) {
        snprintf(err, errlen,
                 "the owner blob names journal %s after snapshot %s: changes %" PRIu64
                 " to %" PRIu64 " would be missing",
                 journal, snapshot, plan->seq + 1, first > plan->seq + 1 ? first - 1 : first);
        return -1;
    }
    if (!(plan->journal = malloc(sizeof *plan->journal))) {
        snprintf(err, errlen, "out of memory planning the restore");
        return -1;
    }
    plan->journal[0] = first;
    plan->njournal = 1;
    return 0;
}

void mirror_plan_free(struct mirror_plan *plan)
{
    free(plan->journal);
    plan->journal = NULL;
    plan->njournal = 0;
}

/* ---- names ----------------------------------------------------------------------- */

void mirror_snapshot_name(char *out, size_t len, uint64_t generation, uint64_t seq)
{
    snprintf(out, len, "snapshots/%010" PRIu64 "-%020" PRIu64 ".jsonl", generation, seq);
}

void mirror_journal_name(char *out, size_t len, uint64_t generation, uint64_t first_seq)
{
    snprintf(out, len, "journal/%010" PRIu64 "/%020" PRIu64, generation, first_seq);
}

static bool digits(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

bool mirror_parse_snapshot_name(const char *name, uint64_t *generation, uint64_t *seq)
{
    /* snapshots/GGGGGGGGGG-SSSSSSSSSSSSSSSSSSSS.jsonl */
    return strlen(name) == 10 + 10 + 1 + 20 + 6 && strncmp(name, "snapshots/", 10) == 0 &&
           name[20] == '-' && strcmp(name + 41, ".jsonl") == 0 &&
           digits(name + 10, 10, generation) && digits(name + 21, 20, seq);
}

bool mirror_parse_journal_name(const char *name, uint64_t *generation, uint64_t *first_seq)
{
    /* journal/GGGGGGGGGG/SSSSSSSSSSSSSSSSSSSS */
    return strlen(name) == 8 + 10 + 1 + 20 && strncmp(name, "journal/", 8) == 0 &&
           name[18] == '/' && digits(name + 8, 10, generation) && digits(name + 19, 20, first_seq);
}

bool mirror_name_generation(const char *name, uint64_t *generation)
{
    uint64_t s;
    return mirror_parse_snapshot_name(name, generation, &s) ||
           mirror_parse_journal_name(name, generation, &s);
}

/* ---- leases read from another server ---------------------------------------------- */

int64_t mirror_rearm_deadline(int64_t written_ms, uint64_t ttl_ms, int64_t now_ms,
                              uint64_t grace_ms)
{
    uint64_t keep = ttl_ms;
    if (written_ms < now_ms && grace_ms > keep)
        keep = grace_ms;
    return now_ms + (int64_t)keep;
}
