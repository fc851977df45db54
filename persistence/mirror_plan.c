/*
 * The blob mirror's pure decisions (see mirror_plan.h): packing batches into blocks,
 * planning a restore from a listing, and replaying its lines into rows in memory.
 */
#include "persistence/mirror_plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

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

/* ---- replaying lines in memory ---------------------------------------------------- */

static const struct mx_hash_key rows_key = {0x6d75746578640001ull, 0x726573746f726521ull};

static bool rows_grow(struct mirror_replay *r)
{
    size_t nslots = r->nslots ? r->nslots * 2 : 1024;
    size_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < r->n; i++) {
        size_t h = mx_siphash(&rows_key, r->v[i].name, r->v[i].len) & (nslots - 1);
        while (slots[h])
            h = (h + 1) & (nslots - 1);
        slots[h] = i + 1;
    }
    free(r->slots);
    r->slots = slots;
    r->nslots = nslots;
    return true;
}

/* The slot of `name`: where it is, or the empty one where it would go. */
static size_t rows_slot(const struct mirror_replay *r, const char *name, size_t len)
{
    size_t h = mx_siphash(&rows_key, name, len) & (r->nslots - 1);
    while (r->slots[h]) {
        const struct store_import_row *x = &r->v[r->slots[h] - 1];
        if (x->len == len && memcmp(x->name, name, len) == 0)
            break;
        h = (h + 1) & (r->nslots - 1);
    }
    return h;
}

/* The row of `name`, created empty if missing; NULL when out of memory. */
static struct store_row *rows_at(struct mirror_replay *r, const char *name, size_t len)
{
    if ((r->n + 1) * 2 > r->nslots && !rows_grow(r))
        return NULL;
    size_t h = rows_slot(r, name, len);
    if (r->slots[h])
        return &r->v[r->slots[h] - 1].row;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        struct store_import_row *v = realloc(r->v, cap * sizeof *v);
        if (!v)
            return NULL;
        r->v = v;
        r->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return NULL;
    memcpy(copy, name, len);
    copy[len] = '\0';
    r->v[r->n] = (struct store_import_row){.name = copy, .len = len};
    r->slots[h] = ++r->n;
    return &r->v[r->n - 1].row;
}

const struct store_row *mirror_replay_get(const struct mirror_replay *st, const char *name,
                                          size_t len)
{
    if (!st->nslots)
        return NULL;
    size_t h = rows_slot(st, name, len);
    return st->slots[h] ? &st->v[st->slots[h] - 1].row : NULL;
}

/* The group read so far is cut off: its lines are never applied, but the indexes and
 * tokens they name are never handed out again either. */
static void drop_group(struct mirror_replay *st)
{
    for (uint32_t i = 0; i < st->ngroup; i++) {
        struct jr_line *l = &st->group[i];
        if (l->seq > st->last_seq) {
            st->groups_dropped++;
            if (l->row.index > st->marks.index_hwm)
                st->marks.index_hwm = l->row.index;
            for (uint32_t j = 0; j < l->row.nleases; j++)
                if (l->row.leases[j].token > st->marks.token_hwm)
                    st->marks.token_hwm = l->row.leases[j].token;
        }
        jr_line_clear(l);
    }
    st->ngroup = 0;
}

void mirror_replay_free(struct mirror_replay *st)
{
    drop_group(st);
    for (size_t i = 0; i < st->n; i++) {
        free((char *)st->v[i].name);
        store_row_clear(&st->v[i].row);
    }
    free(st->v);
    free(st->slots);
    memset(st, 0, sizeof *st);
}

static int by_token(const void *a, const void *b)
{
    const struct store_lease *x = a, *y = b;
    return x->token < y->token ? -1 : x->token > y->token;
}

static struct store_lease *find_lease(struct store_row *row, const uint8_t id[16])
{
    for (uint32_t i = 0; i < row->nleases; i++)
        if (memcmp(row->leases[i].lease_id, id, 16) == 0)
            return &row->leases[i];
    return NULL;
}

/* A "set": its puts (moved out of `l`) and dels on `row`. */
static int apply_set(struct store_row *row, struct jr_line *l)
{
    if (l->row.nleases > 0) {
        struct store_lease *v =
            realloc(row->leases, ((size_t)row->nleases + l->row.nleases) * sizeof *v);
        if (!v)
            return -1;
        row->leases = v;
    }
    for (uint32_t i = 0; i < l->row.nleases; i++) {
        struct store_lease *put = &l->row.leases[i];
        struct store_lease *old = find_lease(row, put->lease_id);
        if (old)
            store_lease_clear(old);
        else
            old = &row->leases[row->nleases++];
        *old = *put; /* moves the references */
        memset(put, 0, sizeof *put);
    }
    for (uint32_t i = 0; i < l->ndel; i++) {
        struct store_lease *gone = find_lease(row, l->del[i]);
        if (!gone)
            continue;
        store_lease_clear(gone);
        size_t at = (size_t)(gone - row->leases);
        memmove(gone, gone + 1, (row->nleases - at - 1) * sizeof *gone);
        row->nleases--;
    }
    if (row->nleases == 0) {
        free(row->leases);
        row->leases = NULL;
    }
    return 0;
}

int mirror_replay_line(struct mirror_replay *st, struct jr_line *l, bool from_snapshot)
{
    switch (l->op) {
    case JR_RESERVE:
        if (l->ceiling > st->ceiling)
            st->ceiling = l->ceiling;
        return 0;
    case JR_BEGIN:
        st->mode = l->mode;
        return 0;
    case JR_SNAPSHOT:
        return 0;
    case JR_PUT:
    case JR_ROW:
    case JR_SET:
    case JR_DEL:
        break;
    }
    if (!from_snapshot) {
        if (l->seq <= st->last_seq) {
            st->duplicates++;
            return 0;
        }
        if (l->seq != st->last_seq + 1)
            st->gaps++;
        st->last_seq = l->seq;
    }
    struct store_row *row = rows_at(st, l->name, l->name_len);
    if (!row)
        return -1;
    if (l->op == JR_SET) {
        if (apply_set(row, l) != 0)
            return -1;
        row->index = l->row.index;
        row->limit = l->row.limit;
    } else if (l->op == JR_DEL) {
        store_row_clear(row);
        row->index = l->row.index;
    } else {
        store_row_clear(row);
        *row = l->row; /* moves the references */
        memset(&l->row, 0, sizeof l->row);
    }
    bool sorted = true;
    for (uint32_t i = 0; i < row->nleases; i++) {
        if (row->leases[i].token > st->marks.token_hwm)
            st->marks.token_hwm = row->leases[i].token;
        if (i > 0 && row->leases[i - 1].token > row->leases[i].token)
            sorted = false;
    }
    if (!sorted)
        qsort(row->leases, row->nleases, sizeof *row->leases, by_token);
    if (row->index > st->marks.index_hwm)
        st->marks.index_hwm = row->index;
    if (row->nleases == 0 && row->index > st->marks.index_floor)
        st->marks.index_floor = row->index;
    return 0;
}

enum mirror_read mirror_replay_text(struct mirror_replay *st, const char *name, const char *text,
                                    size_t len, bool snapshot, char *err, size_t errlen)
{
    size_t lineno = 0;
    for (size_t off = 0; off < len;) {
        const char *nl = memchr(text + off, '\n', len - off);
        size_t n = nl ? (size_t)(nl - (text + off)) : len - off;
        lineno++;
        if (n > 0) {
            struct jr_line l;
            char why[160];
            if (!jr_decode(text + off, n, &l, why, sizeof why)) {
                snprintf(err, errlen, "%s line %zu cannot be decoded: %s", name, lineno, why);
                return MIRROR_READ_UNDECODABLE;
            }
            if (snapshot && lineno == 1) {
                if (l.op != JR_SNAPSHOT) {
                    snprintf(err, errlen, "%s: no snapshot header", name);
                    jr_line_clear(&l);
                    return MIRROR_READ_UNDECODABLE;
                }
                st->marks = l.marks;
                st->ceiling = l.ceiling;
                st->mode = l.mode;
                st->snapshot_seq = st->last_seq = l.marks.commit_seq;
            }
            int rc = 0;
            if (!snapshot && (l.op == JR_SET || l.op == JR_DEL) && l.grouped) {
                const struct jr_line *prev = st->ngroup ? &st->group[st->ngroup - 1] : NULL;
                if (prev && (l.seq != prev->seq + 1 || l.group_left + 1 != prev->group_left))
                    drop_group(st); /* cut off: this one starts it again, or another */
                if (st->ngroup == 64)
                    drop_group(st);
                st->group[st->ngroup++] = l; /* moved in */
                if (l.group_left == 0) {
                    for (uint32_t i = 0; i < st->ngroup && rc == 0; i++)
                        rc = mirror_replay_line(st, &st->group[i], false);
                    drop_group(st);
                }
            } else {
                if (st->ngroup && !snapshot && l.op != JR_RESERVE)
                    drop_group(st);
                rc = mirror_replay_line(st, &l, snapshot);
                jr_line_clear(&l);
            }
            if (rc != 0) {
                snprintf(err, errlen, "out of memory restoring %s", name);
                return MIRROR_READ_FAILED;
            }
        }
        off += n + 1;
    }
    return MIRROR_READ_OK;
}
