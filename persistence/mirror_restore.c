/*
 * Restore from the blob mirror (see mirror.h): the newest snapshot, then the journal of
 * the same generation after it, line by line in sequence order, into a store that was
 * just created, in one transaction.
 *
 * Rows are gathered in memory first (a vector and an open-addressing index on the name),
 * because the journal changes them in any order and a row may be deleted and written
 * again. Lines at or below the snapshot's sequence are skipped, and so is a line seen
 * twice (a block appended again after an unanswered attempt landed).
 */
#include "persistence/mirror_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/log.h"
#include "persistence/mirror_plan.h"

struct rows {
    struct store_import_row *v;
    size_t n, cap;
    size_t *slots; /* index + 1 into v; 0: empty */
    size_t nslots;
};

static const struct mx_hash_key rows_key = {0x6d75746578640001ull, 0x726573746f726521ull};

static bool rows_grow(struct rows *r)
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

/* The row of `name`, created empty if missing; NULL when out of memory. */
static struct store_row *rows_at(struct rows *r, const char *name, size_t len)
{
    if ((r->n + 1) * 2 > r->nslots && !rows_grow(r))
        return NULL;
    size_t h = mx_siphash(&rows_key, name, len) & (r->nslots - 1);
    while (r->slots[h]) {
        struct store_import_row *x = &r->v[r->slots[h] - 1];
        if (x->len == len && memcmp(x->name, name, len) == 0)
            return &x->row;
        h = (h + 1) & (r->nslots - 1);
    }
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

static void rows_free(struct rows *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free((char *)r->v[i].name);
        store_row_clear(&r->v[i].row);
    }
    free(r->v);
    free(r->slots);
}

struct state {
    struct rows rows;
    struct store_marks marks;
    uint64_t ceiling, last_seq, snapshot_seq, duplicates, gaps;
    enum jr_mode mode;
};

/* Applies one journal or snapshot line. Returns 0, or -1 when out of memory. */
static int apply(struct state *st, struct jr_line *l, bool from_snapshot)
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
    struct store_row *row = rows_at(&st->rows, l->name, l->name_len);
    if (!row)
        return -1;
    store_row_clear(row);
    *row = l->row; /* moves the references */
    memset(&l->row, 0, sizeof l->row);
    if (row->token > st->marks.token_hwm)
        st->marks.token_hwm = row->token;
    if (row->index > st->marks.index_hwm)
        st->marks.index_hwm = row->index;
    if (!row->has_lease && row->index > st->marks.index_floor)
        st->marks.index_floor = row->index;
    return 0;
}

/* Decodes and applies every line of a blob. */
static int apply_text(struct state *st, const char *name, const char *text, size_t len,
                      bool snapshot, char *err, size_t errlen)
{
    size_t lineno = 0;
    for (size_t off = 0; off < len;) {
        const char *nl = memchr(text + off, '\n', len - off);
        size_t n = nl ? (size_t)(nl - (text + off)) : len - off;
        lineno++;
        if (n > 0) {
            struct jr_line l;
            char why[128];
            if (!jr_decode(text + off, n, &l, why, sizeof why)) {
                snprintf(err, errlen, "%s line %zu: %s", name, lineno, why);
                return -1;
            }
            if (snapshot && lineno == 1) {
                if (l.op != JR_SNAPSHOT) {
                    snprintf(err, errlen, "%s: no snapshot header", name);
                    jr_line_clear(&l);
                    return -1;
                }
                st->marks = l.marks;
                st->ceiling = l.ceiling;
                st->mode = l.mode;
                st->snapshot_seq = st->last_seq = l.marks.commit_seq;
            }
            int rc = apply(st, &l, snapshot);
            jr_line_clear(&l);
            if (rc != 0) {
                snprintf(err, errlen, "out of memory restoring %s", name);
                return -1;
            }
        }
        off += n + 1;
    }
    return 0;
}

/* The names of every blob listed, for the plan. */
struct names {
    char **v;
    size_t n, cap;
    bool oom;
};

static int gather_name(void *arg, const struct blob_item *it)
{
    struct names *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->oom = true;
            return 1;
        }
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(it->name))) {
        l->oom = true;
        return 1;
    }
    l->n++;
    return 0;
}

static void names_free(struct names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

int mirror_restore(struct mirror *m, struct mirror_restored *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!store_created(m->store))
        return 0; /* the local store is the truth; nothing to restore */
    struct blob_result r = {0};
    struct names names = {0};
    struct mirror_plan plan = {0};
    struct state st = {0};
    int rc = -1;
    /* A listing that failed says nothing of what the container holds: it must never read
     * as an empty container, nor as a journal without a snapshot. */
    if (mirror_list(m, "snapshots/", gather_name, &names, &r) != 0) {
        snprintf(err, errlen, "cannot list snapshots: %s", r.message[0] ? r.message : r.error_code);
        goto out;
    }
    if (mirror_list(m, "journal/", gather_name, &names, &r) != 0) {
        snprintf(err, errlen, "cannot list the journal: %s",
                 r.message[0] ? r.message : r.error_code);
        goto out;
    }
    if (names.oom) {
        snprintf(err, errlen, "out of memory listing the container");
        goto out;
    }
    if (mirror_plan_restore((const char *const *)names.v, names.n, &plan, err, errlen) != 0)
        goto out;
    if (!plan.snapshot[0]) {
        rc = 0; /* an empty container: a fresh start */
        goto out;
    }
    mx_info("mirror: restoring", "snapshot=%s", plan.snapshot);
    if (blob_get(m->bulk, plan.snapshot, NULL, &r) != 0) {
        snprintf(err, errlen, "cannot read %s: %ld %s", plan.snapshot, r.status, r.error_code);
        goto out;
    }
    if (apply_text(&st, plan.snapshot, r.body ? r.body : "", r.body_len, true, err, errlen) != 0)
        goto out;

    for (size_t i = 0; i < plan.njournal; i++) {
        char name[96];
        mirror_journal_name(name, sizeof name, plan.generation, plan.journal[i]);
        if (blob_get(m->bulk, name, NULL, &r) != 0) {
            snprintf(err, errlen, "cannot read %s: %ld %s", name, r.status, r.error_code);
            goto out;
        }
        if (apply_text(&st, name, r.body ? r.body : "", r.body_len, false, err, errlen) != 0)
            goto out;
    }
    if (st.gaps)
        mx_warn("mirror: the journal skips sequence numbers", "gaps=%lu", (unsigned long)st.gaps);

    /* No token at or below the last reservation may be handed out again. */
    if (st.ceiling > st.marks.token_hwm)
        st.marks.token_hwm = st.ceiling;
    st.marks.commit_seq = st.last_seq;
    /* Only rows with a lease are stored; deleted ones live on in index_floor. */
    size_t kept = 0;
    for (size_t i = 0; i < st.rows.n; i++)
        if (st.rows.v[i].row.has_lease)
            st.rows.v[kept++] = st.rows.v[i];
        else {
            free((char *)st.rows.v[i].name);
            store_row_clear(&st.rows.v[i].row);
        }
    st.rows.n = kept;
    if (store_import(m->store, st.rows.v, st.rows.n, &st.marks, err, errlen) != STORE_OK)
        goto out;
    out->restored = true;
    out->may_lag = st.mode != JR_MODE_SYNC;
    out->rows = st.rows.n;
    out->generation = plan.generation;
    out->commit_seq = st.last_seq;
    mx_info("mirror: restored", "generation=%lu rows=%zu seq=%lu token_hwm=%lu mode=%s",
            (unsigned long)plan.generation, st.rows.n, (unsigned long)st.last_seq,
            (unsigned long)st.marks.token_hwm, jr_mode_name(st.mode));
    rc = 0;
out:
    blob_result_free(&r);
    rows_free(&st.rows);
    mirror_plan_free(&plan);
    names_free(&names);
    return rc;
}
