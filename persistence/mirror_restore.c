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

#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"

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

/* Decodes and applies every line of a blob. 0; -2 with err when a line cannot be decoded
 * (the container is damaged: nothing may be served from it as it is); -1 otherwise. */
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
                snprintf(err, errlen, "%s line %zu cannot be decoded: %s", name, lineno, why);
                return -2;
            }
            if (snapshot && lineno == 1) {
                if (l.op != JR_SNAPSHOT) {
                    snprintf(err, errlen, "%s: no snapshot header", name);
                    jr_line_clear(&l);
                    return -2;
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

/* Plans what to read: what the owner blob names (`named`), never the newest blobs of a
 * listing, which may hold what a server that lost the container left behind. Only a
 * container whose owner blob names no snapshot (written by an earlier version) is listed:
 * then the generation of the journal it names, or the newest when it names none. */
static int plan_from(struct blob_client *c, const struct owner_meta *named,
                     struct mirror_plan *plan, char *err, size_t errlen)
{
    if (named->snapshot[0])
        return mirror_plan_named(named->snapshot, named->journal, plan, err, errlen);
    uint64_t generation = 0;
    if (named->journal[0] && !mirror_name_generation(named->journal, &generation)) {
        snprintf(err, errlen, "the owner blob names no journal blob of the mirror's form: '%s'",
                 named->journal);
        return -1;
    }
    struct blob_result r = {0};
    struct names names = {0};
    int rc = -1;
    /* A listing that failed says nothing of what the container holds: it must never read
     * as an empty container, nor as a journal without a snapshot. */
    if (mirror_list_client(c, "snapshots/", gather_name, &names, &r) != 0) {
        snprintf(err, errlen, "cannot list snapshots: %s", r.message[0] ? r.message : r.error_code);
        goto out;
    }
    if (mirror_list_client(c, "journal/", gather_name, &names, &r) != 0) {
        snprintf(err, errlen, "cannot list the journal: %s",
                 r.message[0] ? r.message : r.error_code);
        goto out;
    }
    if (names.oom) {
        snprintf(err, errlen, "out of memory listing the container");
        goto out;
    }
    rc = mirror_plan_restore_gen((const char *const *)names.v, names.n, generation, plan, err,
                                 errlen);
out:
    blob_result_free(&r);
    names_free(&names);
    return rc;
}

/* Reads the snapshot the owner blob names and its journal into `st` (fresh). `last`/
 * `last_len`: the last journal blob read and how many bytes of it were applied ("" when
 * none). Returns 0 (an empty container leaves plan->snapshot ""), -1 with err, or -2 with
 * err when a line cannot be decoded. */
static int load(struct blob_client *c, const struct owner_meta *named, struct state *st,
                struct mirror_plan *plan, char *last, size_t lastlen, int64_t *last_len, char *err,
                size_t errlen)
{
    struct blob_result r = {0};
    int rc = -1;
    last[0] = '\0';
    *last_len = 0;
    if (plan_from(c, named, plan, err, errlen) != 0)
        goto out;
    if (!plan->snapshot[0]) {
        rc = 0;
        goto out;
    }
    if (blob_get(c, plan->snapshot, NULL, &r) != 0) {
        snprintf(err, errlen, "cannot read %s: %ld %s", plan->snapshot, r.status, r.error_code);
        goto out;
    }
    if ((rc = apply_text(st, plan->snapshot, r.body ? r.body : "", r.body_len, true, err,
                         errlen)) != 0)
        goto out;
    rc = -1;
    for (size_t i = 0; i < plan->njournal; i++) {
        char name[96];
        mirror_journal_name(name, sizeof name, plan->generation, plan->journal[i]);
        if (blob_get(c, name, NULL, &r) != 0) {
            snprintf(err, errlen, "cannot read %s: %ld %s", name, r.status, r.error_code);
            goto out;
        }
        if ((rc = apply_text(st, name, r.body ? r.body : "", r.body_len, false, err, errlen)) != 0)
            goto out;
        rc = -1;
        snprintf(last, lastlen, "%s", name);
        *last_len = (int64_t)r.body_len;
    }
    rc = 0;
out:
    blob_result_free(&r);
    return rc;
}

/* Writes `st` into the (new) store. */
static int import(struct mirror *m, struct state *st, uint64_t generation,
                  struct mirror_restored *out, char *err, size_t errlen)
{
    if (st->gaps)
        mx_warn("mirror: the journal skips sequence numbers", "gaps=%" PRIu64, st->gaps);
    /* No token at or below the last reservation may be handed out again. */
    if (st->ceiling > st->marks.token_hwm)
        st->marks.token_hwm = st->ceiling;
    st->marks.commit_seq = st->last_seq;
    /* Only rows with a lease are stored; deleted ones live on in index_floor. A lease
     * held gets its TTL again from now (mirror_rearm_deadline): its deadline was written
     * on another server's clock. */
    int64_t now = mx_wall_ms();
    size_t kept = 0, rearmed = 0;
    for (size_t i = 0; i < st->rows.n; i++)
        if (st->rows.v[i].row.has_lease) {
            struct store_row *row = &st->rows.v[i].row;
            if (row->held) {
                row->deadline_ms = mirror_rearm_deadline(row->deadline_ms, row->ttl_ms, now,
                                                         m->cfg.rearm_grace_ms);
                rearmed++;
            }
            st->rows.v[kept++] = st->rows.v[i];
        } else {
            free((char *)st->rows.v[i].name);
            store_row_clear(&st->rows.v[i].row);
        }
    st->rows.n = kept;
    if (store_import(m->store, st->rows.v, st->rows.n, &st->marks, err, errlen) != STORE_OK)
        return -1;
    out->restored = true;
    out->may_lag = st->mode != JR_MODE_SYNC;
    out->rows = st->rows.n;
    out->generation = generation;
    out->commit_seq = st->last_seq;
    mx_info(
        "mirror: restored",
        "generation=%" PRIu64 " rows=%zu held=%zu seq=%" PRIu64 " token_hwm=%" PRIu64 " mode=%s",
        generation, st->rows.n, rearmed, st->last_seq, st->marks.token_hwm, jr_mode_name(st->mode));
    return 0;
}

/* ---- a standby's warm copy ------------------------------------------------------- */

struct mirror_copy {
    struct blob_account account;
    struct blob_client *c;
    struct state st;
    bool loaded;
    uint64_t generation;
    char snapshot[96]; /* the snapshot the copy was read from, or its journal followed to */
    char journal[96];  /* the blob being followed */
    int64_t off;       /* bytes of it applied (whole lines) */
    uint64_t found;    /* changes the last call found new */
    uint64_t complete_ns;
};

int mirror_copy_open(struct mirror_copy **out, const char *connection_string, const char *container,
                     char *err, size_t errlen)
{
    struct mirror_copy *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* The copy is read on the main thread of a standby, which also decides takeovers and
     * answers signals: a read that moves no byte for two seconds fails (and is tried again
     * at the next look), and none takes more than a minute. */
    struct blob_options slow = {.connect_timeout_ms = 2000,
                                .timeout_ms = 60000,
                                .stall_ms = 2000,
                                .max_body = 4ull * 1024 * 1024 * 1024};
    if (blob_parse_connection_string(connection_string, &c->account, err, errlen) != 0 ||
        blob_client_new(&c->account, container, &slow, &c->c, err, errlen) != 0) {
        mirror_copy_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

static void copy_reset(struct mirror_copy *c)
{
    rows_free(&c->st.rows);
    memset(&c->st, 0, sizeof c->st);
    c->loaded = false;
    c->snapshot[0] = '\0';
    c->journal[0] = '\0';
    c->off = 0;
}

void mirror_copy_free(struct mirror_copy *c)
{
    if (!c)
        return;
    copy_reset(c);
    if (c->c)
        blob_client_free(c->c);
    blob_account_wipe(&c->account);
    free(c);
}

/* Reads c->journal from c->off on. 1: the blob is gone; 0: read; -1: failed; -2: a line
 * cannot be decoded. */
static int copy_tail(struct mirror_copy *c, char *err, size_t errlen)
{
    struct blob_result r = {0};
    int rc = -1;
    if (blob_get_from(c->c, c->journal, c->off, &r) != 0) {
        if (r.status == 404)
            rc = 1;
        else
            snprintf(err, errlen, "cannot read %s: %ld %s %s", c->journal, r.status, r.error_code,
                     r.message);
        goto out;
    }
    /* Blocks hold whole lines; should a read ever end inside one, it is read again. */
    size_t n = r.body_len;
    while (n > 0 && r.body[n - 1] != '\n')
        n--;
    uint64_t before = c->st.last_seq;
    if (n > 0 && (rc = apply_text(&c->st, c->journal, r.body, n, false, err, errlen)) != 0)
        goto out;
    c->off += (int64_t)n;
    c->found += c->st.last_seq - before;
    rc = 0;
out:
    blob_result_free(&r);
    return rc;
}

int mirror_copy_follow(struct mirror_copy *c, const struct owner_meta *named, char *err,
                       size_t errlen)
{
    c->found = 0;
    uint64_t g, first;
    bool journal_ok = named->journal[0] && mirror_parse_journal_name(named->journal, &g, &first);
    if (c->loaded && journal_ok) {
        int rc = copy_tail(c, err, errlen);
        if (rc == 0 && strcmp(named->journal, c->journal) != 0) {
            /* The owner moved on to a new blob after a snapshot: what it holds must follow
             * what was read here without a gap, else the snapshot has what is missing. */
            if (first == c->st.last_seq + 1) {
                snprintf(c->journal, sizeof c->journal, "%s", named->journal);
                snprintf(c->snapshot, sizeof c->snapshot, "%s", named->snapshot);
                c->off = 0;
                rc = copy_tail(c, err, errlen);
            } else {
                rc = 1;
            }
        }
        if (rc == 0) {
            c->complete_ns = mx_mono_ns();
            return 0;
        }
        if (rc < 0) {
            copy_reset(c);
            return rc;
        }
        /* a blob gone, or a gap: read the named snapshot again */
    }
    copy_reset(c);
    struct mirror_plan plan = {0};
    int rc = load(c->c, named, &c->st, &plan, c->journal, sizeof c->journal, &c->off, err, errlen);
    if (rc == 0 && plan.snapshot[0]) {
        c->loaded = true;
        c->generation = plan.generation;
        snprintf(c->snapshot, sizeof c->snapshot, "%s", plan.snapshot);
        c->found = c->st.last_seq;
        c->complete_ns = mx_mono_ns();
        if (!c->journal[0])
            rc = -1, snprintf(err, errlen, "the snapshot has no journal after it yet");
    } else if (rc == 0) {
        rc = -1;
        snprintf(err, errlen, "the container holds no snapshot yet");
    }
    mirror_plan_free(&plan);
    if (rc != 0)
        copy_reset(c);
    return rc;
}

void mirror_copy_lag(const struct mirror_copy *c, uint64_t *changes, uint64_t *ms)
{
    *changes = c->found;
    *ms = c->loaded && c->complete_ns ? (mx_mono_ns() - c->complete_ns) / MX_NS_PER_MS : 0;
}

/* ---- restore --------------------------------------------------------------------- */

int mirror_restore(struct mirror *m, struct mirror_restored *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!store_created(m->store))
        return 0; /* the local store is the truth; nothing to restore */
    struct mirror_copy *warm = m->cfg.warm;
    if (warm && warm->loaded && m->prev.journal[0]) {
        /* The journal the previous owner wrote is sealed now: read it to its end. */
        char why[256];
        uint64_t had = warm->st.last_seq;
        int frc = mirror_copy_follow(warm, &m->prev, why, sizeof why);
        if (frc == 0 && warm->loaded) {
            mx_info("mirror: restoring from the warm copy",
                    "generation=%" PRIu64 " read_changes=%" PRIu64, warm->generation,
                    warm->st.last_seq - had);
            int rc = import(m, &warm->st, warm->generation, out, err, errlen);
            copy_reset(warm);
            return rc;
        }
        if (frc == -2) {
            snprintf(err, errlen, "%s", why);
            return -2;
        }
        mx_warn("mirror: the warm copy cannot be used; reading the container", "error=\"%s\"", why);
    }
    struct state st = {0};
    struct mirror_plan plan = {0};
    char last[96];
    int64_t last_len;
    int rc = load(m->bulk, &m->prev, &st, &plan, last, sizeof last, &last_len, err, errlen);
    if (rc != 0)
        goto out;
    if (!plan.snapshot[0]) {
        rc = 0; /* an empty container: a fresh start */
        goto out;
    }
    mx_info("mirror: restored from", "snapshot=%s journal=%s", plan.snapshot,
            m->prev.journal[0] ? m->prev.journal : "-");
    rc = import(m, &st, plan.generation, out, err, errlen);
out:
    rows_free(&st.rows);
    mirror_plan_free(&plan);
    return rc;
}
