/*
 * Restore from the blob mirror (see mirror.h): the newest snapshot, then the journal of
 * the same generation after it, line by line in sequence order, into a store that was
 * just created, in one transaction.
 *
 * Rows are gathered in memory first (mirror_replay, in mirror_plan.c), because the journal
 * changes them in any order and a row may be deleted and written again. Lines at or below
 * the snapshot's sequence are skipped, and so is a line seen twice (a block appended again
 * after an unanswered attempt landed).
 */
#include "persistence/mirror_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

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
 * none). Returns MIRROR_READ_OK (an empty container leaves plan->snapshot ""),
 * MIRROR_READ_FAILED with err, or MIRROR_READ_UNDECODABLE with err when a line cannot be
 * decoded. */
static enum mirror_read load(struct blob_client *c, const struct owner_meta *named,
                             struct mirror_replay *st, struct mirror_plan *plan, char *last,
                             size_t lastlen, int64_t *last_len, char *err, size_t errlen)
{
    struct blob_result r = {0};
    enum mirror_read rc = MIRROR_READ_FAILED;
    last[0] = '\0';
    *last_len = 0;
    if (plan_from(c, named, plan, err, errlen) != 0)
        goto out;
    if (!plan->snapshot[0]) {
        rc = MIRROR_READ_OK;
        goto out;
    }
    if (blob_get(c, plan->snapshot, NULL, &r) != 0) {
        snprintf(err, errlen, "cannot read %s: %ld %s", plan->snapshot, r.status, r.error_code);
        goto out;
    }
    if ((rc = mirror_replay_text(st, plan->snapshot, r.body ? r.body : "", r.body_len, true, err,
                                 errlen)) != MIRROR_READ_OK)
        goto out;
    rc = MIRROR_READ_FAILED;
    for (size_t i = 0; i < plan->njournal; i++) {
        char name[96];
        mirror_journal_name(name, sizeof name, plan->generation, plan->journal[i]);
        if (blob_get(c, name, NULL, &r) != 0) {
            snprintf(err, errlen, "cannot read %s: %ld %s", name, r.status, r.error_code);
            goto out;
        }
        if ((rc = mirror_replay_text(st, name, r.body ? r.body : "", r.body_len, false, err,
                                     errlen)) != MIRROR_READ_OK)
            goto out;
        rc = MIRROR_READ_FAILED;
        snprintf(last, lastlen, "%s", name);
        *last_len = (int64_t)r.body_len;
    }
    rc = MIRROR_READ_OK;
out:
    blob_result_free(&r);
    return rc;
}

/* Writes `st` into the (new) store. */
static int import(struct mirror *m, struct mirror_replay *st, uint64_t generation,
                  struct mirror_restored *out, char *err, size_t errlen)
{
    if (st->gaps)
        mx_warn("mirror: the journal skips sequence numbers", "gaps=%" PRIu64, st->gaps);
    if (st->groups_dropped)
        mx_warn("mirror: a group of changes cut off in the journal was left out, whole",
                "changes=%" PRIu64, st->groups_dropped);
    /* No token at or below the last reservation may be handed out again. */
    if (st->ceiling > st->marks.token_hwm)
        st->marks.token_hwm = st->ceiling;
    st->marks.commit_seq = st->last_seq;
    /* Only rows with a lease are stored; deleted ones live on in index_floor. The leases
     * keep the deadlines written on another server's clock: store_rearm() gives them their
     * TTL again once this server is about to serve, not now (writing the first snapshot and
     * reserving tokens may take a while, and the failover grace counts from serving). */
    size_t kept = 0, held = 0;
    for (size_t i = 0; i < st->n; i++)
        if (st->v[i].row.nleases > 0) {
            for (uint32_t j = 0; j < st->v[i].row.nleases; j++)
                held += st->v[i].row.leases[j].held;
            st->v[kept++] = st->v[i];
        } else {
            free((char *)st->v[i].name);
            store_row_clear(&st->v[i].row);
        }
    /* The index on names no longer matches: nothing looks a row up from here. */
    st->n = kept;
    free(st->slots);
    st->slots = NULL;
    st->nslots = 0;
    if (store_import(m->store, st->v, st->n, &st->marks, err, errlen) != STORE_OK)
        return -1;
    out->restored = true;
    out->may_lag = st->mode != JR_MODE_SYNC;
    out->rows = st->n;
    out->generation = generation;
    out->commit_seq = st->last_seq;
    mx_info("mirror: restored",
            "generation=%" PRIu64 " rows=%zu held=%zu seq=%" PRIu64 " token_hwm=%" PRIu64
            " mode=%s",
            generation, st->n, held, st->last_seq, st->marks.token_hwm, jr_mode_name(st->mode));
    return 0;
}

/* ---- a standby's warm copy ------------------------------------------------------- */

struct mirror_copy {
    struct blob_account account;
    struct blob_client *c;
    struct mirror_replay st;
    bool loaded;
    uint64_t generation;
    char snapshot[96]; /* the snapshot the copy was read from, or its journal followed to */
    char journal[96];  /* the blob being followed */
    int64_t off;       /* bytes of it applied (whole lines) */
    uint64_t found;    /* changes the last call found new */
    uint64_t complete_ns;
};

int mirror_copy_open(struct mirror_copy **out, const char *connection_string, const char *container,
                     const char *blob_prefix, char *err, size_t errlen)
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
                                .max_body = 4ull * 1024 * 1024 * 1024,
                                .prefix = blob_prefix};
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
    mirror_replay_free(&c->st);
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

/* What copy_tail() came to: a mirror_read, or the blob is gone. */
enum { TAIL_GONE = 1 };

/* Reads c->journal from c->off on: MIRROR_READ_OK, MIRROR_READ_FAILED,
 * MIRROR_READ_UNDECODABLE, or TAIL_GONE. */
static int copy_tail(struct mirror_copy *c, char *err, size_t errlen)
{
    struct blob_result r = {0};
    int rc = MIRROR_READ_FAILED;
    if (blob_get_from(c->c, c->journal, c->off, &r) != 0) {
        if (r.status == 404)
            rc = TAIL_GONE;
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
    if (n > 0 && (rc = (int)mirror_replay_text(&c->st, c->journal, r.body, n, false, err,
                                               errlen)) != MIRROR_READ_OK)
        goto out;
    c->off += (int64_t)n;
    c->found += c->st.last_seq - before;
    rc = MIRROR_READ_OK;
out:
    blob_result_free(&r);
    return rc;
}

enum mirror_read mirror_copy_follow(struct mirror_copy *c, const struct owner_meta *named,
                                    char *err, size_t errlen)
{
    c->found = 0;
    uint64_t g, first;
    bool journal_ok = named->journal[0] && mirror_parse_journal_name(named->journal, &g, &first);
    if (c->loaded && journal_ok) {
        int rc = copy_tail(c, err, errlen);
        if (rc == MIRROR_READ_OK && strcmp(named->journal, c->journal) != 0) {
            /* The owner moved on to a new blob after a snapshot: what it holds must follow
             * what was read here without a gap, else the snapshot has what is missing. */
            if (first == c->st.last_seq + 1) {
                snprintf(c->journal, sizeof c->journal, "%s", named->journal);
                snprintf(c->snapshot, sizeof c->snapshot, "%s", named->snapshot);
                c->off = 0;
                rc = copy_tail(c, err, errlen);
            } else {
                rc = TAIL_GONE;
            }
        }
        if (rc == MIRROR_READ_OK) {
            c->complete_ns = mx_mono_ns();
            return MIRROR_READ_OK;
        }
        if (rc != TAIL_GONE) {
            copy_reset(c);
            return (enum mirror_read)rc;
        }
        /* a blob gone, or a gap: read the named snapshot again */
    }
    copy_reset(c);
    struct mirror_plan plan = {0};
    enum mirror_read rc =
        load(c->c, named, &c->st, &plan, c->journal, sizeof c->journal, &c->off, err, errlen);
    if (rc == MIRROR_READ_OK && plan.snapshot[0]) {
        c->loaded = true;
        c->generation = plan.generation;
        snprintf(c->snapshot, sizeof c->snapshot, "%s", plan.snapshot);
        c->found = c->st.last_seq;
        c->complete_ns = mx_mono_ns();
        if (!c->journal[0]) {
            rc = MIRROR_READ_FAILED;
            snprintf(err, errlen, "the snapshot has no journal after it yet");
        }
    } else if (rc == MIRROR_READ_OK) {
        rc = MIRROR_READ_FAILED;
        snprintf(err, errlen, "the container holds no snapshot yet");
    }
    mirror_plan_free(&plan);
    if (rc != MIRROR_READ_OK)
        copy_reset(c);
    return rc;
}

void mirror_copy_lag(const struct mirror_copy *c, uint64_t *changes, uint64_t *ms)
{
    *changes = c->found;
    *ms = c->loaded && c->complete_ns ? (mx_mono_ns() - c->complete_ns) / MX_NS_PER_MS : 0;
}

/* ---- restore --------------------------------------------------------------------- */

enum mirror_read mirror_restore(struct mirror *m, struct mirror_restored *out, char *err,
                                size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!store_created(m->store))
        return MIRROR_READ_OK; /* the local store is the truth; nothing to restore */
    struct mirror_copy *warm = m->cfg.warm;
    if (warm && warm->loaded && m->prev.journal[0]) {
        /* The journal the previous owner wrote is sealed now: read it to its end. */
        char why[256];
        uint64_t had = warm->st.last_seq;
        enum mirror_read frc = mirror_copy_follow(warm, &m->prev, why, sizeof why);
        if (frc == MIRROR_READ_OK && warm->loaded) {
            mx_info("mirror: restoring from the warm copy",
                    "generation=%" PRIu64 " read_changes=%" PRIu64, warm->generation,
                    warm->st.last_seq - had);
            int rc = import(m, &warm->st, warm->generation, out, err, errlen);
            copy_reset(warm);
            return rc == 0 ? MIRROR_READ_OK : MIRROR_READ_FAILED;
        }
        if (frc == MIRROR_READ_UNDECODABLE) {
            snprintf(err, errlen, "%s", why);
            return MIRROR_READ_UNDECODABLE;
        }
        mx_warn("mirror: the warm copy cannot be used; reading the container", "error=\"%s\"", why);
    }
    struct mirror_replay st = {0};
    struct mirror_plan plan = {0};
    char last[96];
    int64_t last_len;
    enum mirror_read rc =
        load(m->bulk, &m->prev, &st, &plan, last, sizeof last, &last_len, err, errlen);
    if (rc != MIRROR_READ_OK)
        goto out;
    if (!plan.snapshot[0]) {
        rc = MIRROR_READ_OK; /* an empty container: a fresh start */
        goto out;
    }
    mx_info("mirror: restored from", "snapshot=%s journal=%s", plan.snapshot,
            m->prev.journal[0] ? m->prev.journal : "-");
    rc = import(m, &st, plan.generation, out, err, errlen) == 0 ? MIRROR_READ_OK
                                                                : MIRROR_READ_FAILED;
out:
    mirror_replay_free(&st);
    mirror_plan_free(&plan);
    return rc;
}
