/*
 * Snapshot rolls of a running mirror (see mirror.c's header): the snapshot and the next
 * journal blob written first, then both named in one owner-blob write, and the blobs the
 * owner blob no longer names cleaned up.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/uuid.h"
#include "persistence/mirror_internal.h"
#include "persistence/mirror_plan.h"

static int snap_row(void *arg, const char *name, size_t len, struct store_row *row)
{
    struct mx_buf *b = arg;
    jr_encode_row(b, name, len, row);
    store_row_clear(row);
    return b->oom ? -1 : 0;
}

struct cleanup {
    struct mirror *m;
    char (*names)[96];
    size_t n, cap;
};

/* Every snapshot and journal blob of this generation or an earlier one that the owner
 * blob does not name (this server's older ones, and whatever a server that lost the
 * container left behind) is removed. Never a later generation's: a server that has lost
 * the container may still get here, and must not delete what the new owner wrote. */
static int cleanup_item(void *arg, const struct blob_item *it)
{
    struct cleanup *c = arg;
    uint64_t g;
    if (!mirror_name_generation(it->name, &g) || g > c->m->generation ||
        strcmp(it->name, c->m->owner.snapshot) == 0 || strcmp(it->name, c->m->owner.journal) == 0)
        return 0;
    if (c->n < c->cap)
        snprintf(c->names[c->n++], sizeof c->names[0], "%s", it->name);
    return 0;
}

static void cleanup(struct mirror *m)
{
    struct cleanup c = {.m = m, .cap = 1024};
    c.names = calloc(c.cap, sizeof *c.names);
    if (!c.names)
        return;
    struct blob_result lr = {0};
    if (mirror_list(m, "journal/", cleanup_item, &c, &lr) == 0 &&
        mirror_list(m, "snapshots/", cleanup_item, &c, &lr) == 0)
        for (size_t i = 0; i < c.n; i++)
            blob_delete(m->bulk, c.names[i], NULL, &lr);
    blob_result_free(&lr);
    free(c.names);
}

/* The owner blob names the new snapshot and journal: append there from now on. Every
 * change up to `seq` is in the snapshot, every record submitted up to `done` too. */
static void switch_journal(struct mirror *m, struct jblob *next, const struct owner_meta *meta,
                           uint64_t seq, uint64_t done)
{
    mirror_i_jblob_free(&m->cur);
    m->cur = *next;
    memset(next, 0, sizeof *next);
    m->owner = *meta;
    m->roll_now = false;
    m->snapshot_seq = seq;
    m->snapshot_ns = mx_mono_ns();
    atomic_store(&m->snapshot_wall_ms, (uint64_t)mx_wall_ms());
    atomic_fetch_add(&m->snapshots, 1);
    if (seq > m->shipped_seq)
        m->shipped_seq = seq;
    pthread_mutex_lock(&m->lock);
    if (done > m->shipped_sub)
        m->shipped_sub = done;
    pthread_mutex_unlock(&m->lock);
    mx_info("mirror: snapshot written", "snapshot=%s journal=%s", meta->snapshot, meta->journal);
    cleanup(m);
}

/* A roll whose owner-blob write got no clear answer: read the owner blob to learn which
 * journal it names. 0: settled (switched, or staying on the current one); -1: not yet. */
int mirror_i_settle_roll(struct mirror *m)
{
    struct owner_view v;
    struct blob_result r = {0};
    int rc = -1;
    if (owner_read(m->c, &v, &r) != OWNER_OK) {
        mirror_note_error(m, "read owner", &r);
        mirror_i_backoff(m);
    } else if (v.exists && strcmp(v.meta.url, m->owner.url) == 0 &&
               v.meta.generation == m->generation &&
               strcmp(v.meta.journal, m->roll.next.name) == 0) {
        switch_journal(m, &m->roll.next, &m->roll.meta, m->roll.seq, m->roll.done);
        rc = 0;
    } else if (v.exists && strcmp(v.meta.url, m->owner.url) == 0 &&
               v.meta.generation == m->generation && strcmp(v.meta.journal, m->cur.name) == 0) {
        mirror_i_jblob_free(&m->roll.next); /* it did not land: the next snapshot rolls again */
        if (m->roll.overflow)
            mirror_i_set_overflow(m, true);
        rc = 0;
    } else {
        mirror_i_fence(m, "the owner blob names another server's journal");
    }
    if (rc == 0)
        m->roll_unsure = false;
    blob_result_free(&r);
    return rc;
}

/* Writes a snapshot of every row, makes the journal blob that follows it, and names both
 * in the owner blob; only then are changes appended there. Until that write has surely
 * landed, changes go on to the journal the owner blob names now. 0, or -1 (backing off;
 * the current journal is unchanged, or roll_unsure is set). */
int mirror_i_take_snapshot(struct mirror *m)
{
    struct mx_buf rows = {0}, all = {0};
    struct store_marks marks;
    struct blob_result r = {0};
    int rc = -1;
    /* Changes left out of the queue before this point are in the store read below. */
    bool was_overflow = mirror_i_set_overflow(m, false);
    uint64_t done = store_done_seq(m->store); /* every record up to it is in the snapshot */
    if (store_snapshot(m->store, snap_row, &rows, &marks) != STORE_OK || rows.oom) {
        mx_error("mirror: cannot read the store for a snapshot", NULL);
        goto out;
    }
    uint64_t ceiling = atomic_load(m->cfg.token_ceiling);
    jr_encode_snapshot(&all, m->generation,
                       m->cfg.mode == MIRROR_SYNC ? JR_MODE_SYNC : JR_MODE_ASYNC, &marks,
                       ceiling == UINT64_MAX ? marks.token_hwm : ceiling);
    mx_buf_append(&all, rows.p ? rows.p : "", rows.len);
    if (all.oom)
        goto out;
    struct owner_meta meta = m->owner;
    mirror_snapshot_name(meta.snapshot, sizeof meta.snapshot, m->generation, marks.commit_seq);
    if (!mirror_i_lease_trusted(m)) {
        mirror_i_backoff(m);
        goto out;
    }
    if (blob_put(m->bulk, meta.snapshot, all.p, all.len, NULL, &r) != 0) {
        mirror_note_error(m, "put snapshot", &r);
        mirror_i_backoff(m);
        goto out;
    }
    mirror_i_recovered(m);
    struct jblob next;
    if (mirror_i_prepare_journal(m, marks.commit_seq + 1, &next) != 0)
        goto out;
    snprintf(meta.journal, sizeof meta.journal, "%s", next.name);
    enum owner_rc orc = owner_publish(m->c, m->lease_id, &meta, &r);
    if (orc == OWNER_OK) {
        switch_journal(m, &next, &meta, marks.commit_seq, done);
        rc = 0;
    } else if (orc == OWNER_FENCED) {
        mirror_i_jblob_free(&next);
        mirror_i_fence(m, "the owner lease was taken by another server");
    } else {
        mirror_note_error(m, "publish owner", &r);
        m->roll.next = next;
        m->roll.meta = meta;
        m->roll.seq = marks.commit_seq;
        m->roll.done = done;
        m->roll.overflow = was_overflow;
        m->roll_unsure = true;
        was_overflow = false; /* mirror_i_settle_roll() decides */
        mirror_i_backoff(m);
    }
out:
    if (rc != 0 && was_overflow)
        mirror_i_set_overflow(m, true);
    blob_result_free(&r);
    mx_buf_free(&rows);
    mx_buf_free(&all);
    return rc;
}
