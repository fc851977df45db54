/*
 * The store (see store.h for the contract).
 *
 * Layout: the schema and its migrations; the writer thread (group commit, epochs on
 * failure); open and close. Elsewhere: the read pool and the reading of rows
 * (store_read.c), what the blob mirror needs and the metrics (store_mirror.c), rows in
 * memory (store_row.c), the fault seam (store_faults.c: a SQLite VFS that fails a commit's
 * fsync on demand); store_internal.h is what they share.
 *
 * On disk: DIR/mutexd.db (with -wal and -shm beside it) and DIR/LOCK, held with
 * flock(2) while the store is open so that a second server on the same directory stops
 * at once with a clear message instead of corrupting anything.
 */
#include "persistence/store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "persistence/store_faults.h"
#include "persistence/store_internal.h"

enum { ITEM_REC = 1, ITEM_WAIT = 2 };

/* Each entry moves the schema from version i to i + 1, in one transaction. */
static const char *const migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE leases ("
    "  resource    TEXT PRIMARY KEY,"
    "  idx         INTEGER NOT NULL,"
    "  lease_id    BLOB NOT NULL,"
    "  owner       TEXT NOT NULL,"
    "  token       INTEGER NOT NULL,"
    "  ttl_ms      INTEGER NOT NULL,"
    "  acquired_at INTEGER NOT NULL,"
    "  renewed_at  INTEGER NOT NULL,"
    "  deadline    INTEGER NOT NULL,"
    "  held        INTEGER NOT NULL,"
    "  metadata    TEXT"
    ") WITHOUT ROWID;"
    "CREATE INDEX leases_held ON leases(held, resource);"
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;",
    /* 1 -> 2: a resource holds several leases (a semaphore, shared leases). Its header
     * (index, limit) and each of its leases are rows of their own, so that a change to one
     * lease writes that lease alone. Every lease of version 1 was exclusive, limit 1. */
    "CREATE TABLE resources ("
    "  resource    TEXT PRIMARY KEY,"
    "  idx         INTEGER NOT NULL,"
    "  lim         INTEGER NOT NULL"
    ") WITHOUT ROWID;"
    "CREATE TABLE holders ("
    "  resource    TEXT NOT NULL,"
    "  lease_id    BLOB NOT NULL,"
    "  owner       TEXT NOT NULL,"
    "  token       INTEGER NOT NULL,"
    "  ttl_ms      INTEGER NOT NULL,"
    "  acquired_at INTEGER NOT NULL,"
    "  renewed_at  INTEGER NOT NULL,"
    "  deadline    INTEGER NOT NULL,"
    "  held        INTEGER NOT NULL,"
    "  shared      INTEGER NOT NULL,"
    "  metadata    TEXT,"
    "  PRIMARY KEY (resource, lease_id)"
    ") WITHOUT ROWID;"
    "CREATE INDEX holders_held ON holders(held, resource, deadline);"
    "INSERT INTO resources(resource, idx, lim) SELECT resource, idx, 1 FROM leases;"
    "INSERT INTO holders(resource, lease_id, owner, token, ttl_ms, acquired_at, renewed_at,"
    "                    deadline, held, shared, metadata)"
    "  SELECT resource, lease_id, owner, token, ttl_ms, acquired_at, renewed_at, deadline,"
    "         held, 0, metadata FROM leases;"
    "DROP TABLE leases;",
    /* 2 -> 3: no secondary index on holders. Every commit wrote a page of it beside the
     * table's (a grant inserts an entry, a release deletes one); the start-up scan and a
     * list read the table in key order instead, which is resource order already. */
    "DROP INDEX holders_held;",
};
#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

/* ---- the writer ------------------------------------------------------------------ */

static void set_health(struct store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_health(struct store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mx_set_text_locked(&s->lock, s->health, sizeof s->health, fmt, ap);
    va_end(ap);
}

/* Binds ?1 (the resource) and ?2.. ?11 (the lease) of st_put. */
static void bind_lease(sqlite3_stmt *st, const char *name, size_t len, const struct store_lease *l)
{
    sqlite3_bind_text(st, 1, name, (int)len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, l->lease_id, 16, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, l->owner ? l->owner->s : "", l->owner ? (int)l->owner->len : 0,
                      SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)l->token);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)l->ttl_ms);
    sqlite3_bind_int64(st, 6, l->acquired_at_ms);
    sqlite3_bind_int64(st, 7, l->renewed_at_ms);
    sqlite3_bind_int64(st, 8, l->deadline_ms);
    sqlite3_bind_int(st, 9, l->held ? 1 : 0);
    sqlite3_bind_int(st, 10, l->shared ? 1 : 0);
    if (l->metadata)
        sqlite3_bind_text(st, 11, l->metadata->s, (int)l->metadata->len, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 11);
}

static int step_reset(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int store_i_write_header(struct store *s, const char *name, size_t len, uint64_t index,
                         uint32_t limit)
{
    sqlite3_bind_text(s->st_header, 1, name, (int)len, SQLITE_STATIC);
    sqlite3_bind_int64(s->st_header, 2, (sqlite3_int64)index);
    sqlite3_bind_int64(s->st_header, 3, limit);
    return step_reset(s->st_header);
}

int store_i_write_lease(struct store *s, const char *name, size_t len, const struct store_lease *l)
{
    bind_lease(s->st_put, name, len, l);
    return step_reset(s->st_put);
}

/* Deletes the resource's header and every lease of it. */
static int drop_resource(struct store *s, const char *name, size_t len)
{
    sqlite3_bind_text(s->st_drop, 1, name, (int)len, SQLITE_STATIC);
    int rc = step_reset(s->st_drop);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s->st_drop_leases, 1, name, (int)len, SQLITE_STATIC);
        rc = step_reset(s->st_drop_leases);
    }
    return rc;
}

/* Writes one record: O(its puts and dels), whatever the number of the resource's leases.
 * Raises *token_max to its tokens, and *floor_max to its index when the resource is left
 * without leases (dropped, or its last lease forgotten). */
static int write_rec(struct store *s, const struct store_rec *rec, uint64_t *token_max,
                     uint64_t *floor_max)
{
    int rc = SQLITE_OK;
    bool gone = rec->drop;
    for (uint32_t i = 0; !gone && rc == SQLITE_OK && i < rec->nput; i++) {
        rc = store_i_write_lease(s, rec->name, rec->name_len, &rec->put[i]);
        if (rec->put[i].token > *token_max)
            *token_max = rec->put[i].token;
    }
    for (uint32_t i = 0; !gone && rc == SQLITE_OK && i < rec->ndel; i++) {
        sqlite3_bind_text(s->st_forget, 1, rec->name, rec->name_len, SQLITE_STATIC);
        sqlite3_bind_blob(s->st_forget, 2, rec->del[i], 16, SQLITE_STATIC);
        rc = step_reset(s->st_forget);
    }
    if (rc == SQLITE_OK && !gone && rec->nput == 0) {
        /* Nothing written: a resource whose every lease was forgotten has no row. */
        sqlite3_bind_text(s->st_any, 1, rec->name, rec->name_len, SQLITE_STATIC);
        int step = sqlite3_step(s->st_any);
        if (step == SQLITE_DONE)
            gone = true;
        else if (step != SQLITE_ROW)
            rc = step;
        sqlite3_reset(s->st_any);
        sqlite3_clear_bindings(s->st_any);
    }
    if (rc != SQLITE_OK)
        return rc;
    if (gone) {
        if (rec->index > *floor_max)
            *floor_max = rec->index;
        return drop_resource(s, rec->name, rec->name_len);
    }
    return store_i_write_header(s, rec->name, rec->name_len, rec->index, rec->limit);
}

int store_i_write_meta(struct store *s, const char *key, uint64_t value)
{
    sqlite3_bind_text(s->st_meta, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s->st_meta, 2, (sqlite3_int64)value);
    return step_reset(s->st_meta);
}

static void max_into(_Atomic uint64_t *dst, uint64_t v)
{
    uint64_t cur = atomic_load(dst);
    while (v > cur && !atomic_compare_exchange_weak(dst, &cur, v))
        ;
}

int store_i_begin(struct store *s)
{
    return step_reset(s->st_begin);
}

/* Rolls back the transaction, if SQLite has not already done so after an error. */
void store_i_rollback(struct store *s)
{
    if (!sqlite3_get_autocommit(s->wdb))
        step_reset(s->st_rollback);
}

/* COMMIT, timed: in WAL mode with synchronous=FULL this is the write of the log and its
 * fsync, the part of a batch the disk decides. */
int store_i_commit(struct store *s)
{
    s->commits_tried++;
    store_faults_arm(&s->cfg, s->commits_tried);
    uint64_t t0 = mx_mono_ns();
    int rc = step_reset(s->st_commit);
    store_faults_disarm();
    if (rc == SQLITE_OK)
        prom_hist_observe(&s->fsync_seconds, mx_mono_ns() - t0);
    return rc;
}

/* Writes the batch's records of `epoch` in one transaction. Returns SQLITE_OK or the
 * error; on error the transaction is rolled back. */
static int write_batch(struct store *s, struct store_item *batch, uint64_t epoch, size_t *nrec)
{
    uint64_t token_max = 0, index_max = 0, floor_max = 0;
    uint64_t seq = atomic_load(&s->commit_seq);
    size_t n = 0;
    int rc = store_i_begin(s);
    for (struct store_item *it = batch; rc == SQLITE_OK && it; it = it->_next) {
        if (it->_kind != ITEM_REC || it->_epoch != epoch)
            continue;
        struct store_rec *rec = (struct store_rec *)it;
        rc = write_rec(s, rec, &token_max, &floor_max);
        if (rec->index > index_max)
            index_max = rec->index;
        rec->commit_seq = ++seq;
        n++;
    }
    if (rc == SQLITE_OK && n > 0)
        rc = store_i_write_meta(s, "commit_seq", seq);
    if (rc == SQLITE_OK && token_max > atomic_load(&s->token_hwm))
        rc = store_i_write_meta(s, "token_hwm", token_max);
    if (rc == SQLITE_OK && index_max > atomic_load(&s->index_hwm))
        rc = store_i_write_meta(s, "index_hwm", index_max);
    if (rc == SQLITE_OK && floor_max > atomic_load(&s->index_floor))
        rc = store_i_write_meta(s, "index_floor", floor_max);
    if (rc == SQLITE_OK)
        rc = store_i_commit(s);
    if (rc != SQLITE_OK) {
        store_i_rollback(s);
        return rc;
    }
    max_into(&s->token_hwm, token_max);
    max_into(&s->index_hwm, index_max);
    max_into(&s->index_floor, floor_max);
    atomic_store(&s->commit_seq, seq);
    *nrec = n;
    return SQLITE_OK;
}

static bool failing(struct store *s)
{
    pthread_mutex_lock(&s->lock);
    bool f = s->health[0] != '\0';
    pthread_mutex_unlock(&s->lock);
    return f;
}

static void commit_succeeded(struct store *s)
{
    if (failing(s)) {
        set_health(s, NULL);
        mx_info("store: commits succeed again", NULL);
    }
}

/* After a failure, with nothing to write: a small commit to find out whether the disk is
 * back, so that /readyz recovers without waiting for traffic. */
static void probe(struct store *s)
{
    int rc = store_i_begin(s);
    if (rc == SQLITE_OK)
        rc = store_i_write_meta(s, "probe", (uint64_t)mx_wall_ms());
    if (rc == SQLITE_OK)
        rc = store_i_commit(s);
    if (rc == SQLITE_OK) {
        commit_succeeded(s);
        return;
    }
    store_i_rollback(s);
    set_health(s, "store commit failed: %s", sqlite3_errstr(rc));
}

static void process_batch(struct store *s, struct store_item *batch, uint64_t last_seq)
{
    uint64_t epoch = atomic_load(&s->epoch);
    size_t valid = 0, refused = 0;
    for (struct store_item *it = batch; it; it = it->_next)
        if (it->_kind == ITEM_REC) {
            if (it->_epoch == epoch)
                valid++;
            else
                refused++;
        }

    bool ok = true;
    if (valid > 0) {
        uint64_t t0 = mx_mono_ns();
        size_t written = 0;
        int rc = write_batch(s, batch, epoch, &written);
        if (rc == SQLITE_OK) {
            prom_hist_observe(&s->commit_seconds, mx_mono_ns() - t0);
            prom_hist_observe(&s->batch_sizes, written);
            atomic_fetch_add(&s->commits_ok, 1);
            atomic_fetch_add(&s->records_written, written);
            commit_succeeded(s);
        } else {
            ok = false;
            /* The state the batch's authors hold in memory may include what was lost:
             * refuse everything they computed from it until they reload. */
            atomic_fetch_add(&s->epoch, 1);
            atomic_fetch_add(&s->commits_failed, 1);
            set_health(s, "store commit failed: %s", sqlite3_errstr(rc));
            mx_error("store: commit failed; the batch is answered 503", "error=\"%s\" records=%zu",
                     sqlite3_errstr(rc), valid);
        }
    }
    atomic_fetch_add(&s->records_refused, refused);
    atomic_store_explicit(&s->done_seq, last_seq, memory_order_release);

    /* Split the batch: committed records (to ship, or free) and waits, each in order.
     * A wait whose records were refused, or whose batch failed, is told so now. */
    struct store_item *recs = NULL, **rtail = &recs, *waits = NULL, **wtail = &waits;
    struct store_item *next;
    for (struct store_item *it = batch; it; it = next) {
        next = it->_next;
        it->_next = NULL;
        if (it->_kind == ITEM_WAIT && (!ok || it->_epoch != epoch)) {
            struct store_wait *w = (struct store_wait *)it;
            w->done(w, STORE_EFAIL);
        } else if (it->_kind == ITEM_WAIT) {
            *wtail = it;
            wtail = &it->_next;
        } else if (ok && it->_epoch == epoch) {
            *rtail = it;
            rtail = &it->_next;
        } else {
            store_rec_free((struct store_rec *)it);
        }
    }
    if (s->cfg.ship && (recs || waits) &&
        s->cfg.ship(s->cfg.ship_ctx, (struct store_rec *)recs, (struct store_wait *)waits))
        return;
    if (!s->cfg.ship) {
        for (struct store_item *it = recs; it; it = next) {
            next = it->_next;
            store_rec_free((struct store_rec *)it);
        }
    }
    store_complete_waits((struct store_wait *)waits, STORE_OK);
}

void store_complete_waits(struct store_wait *w, int status)
{
    while (w) {
        struct store_wait *next = store_next_wait(w);
        w->done(w, status);
        w = next;
    }
}

void store_link_wait(struct store_wait *w, struct store_wait *next)
{
    w->_item._next = next ? &next->_item : NULL;
}

uint64_t store_rec_seq(const struct store_rec *r)
{
    return r->_item._seq;
}

uint64_t store_wait_seq(const struct store_wait *w)
{
    return w->_item._seq;
}

void store_link_rec(struct store_rec *r, struct store_rec *next)
{
    r->_item._next = next ? &next->_item : NULL;
}

struct store_rec *store_next_rec(const struct store_rec *r)
{
    return (struct store_rec *)r->_item._next;
}

struct store_wait *store_next_wait(const struct store_wait *w)
{
    return (struct store_wait *)w->_item._next;
}

/* Lock held: takes the queued batch and commits it on this thread, busy meanwhile. */
static void commit_queued(struct store *s)
{
    struct store_item *batch = s->head;
    uint64_t last = s->last_seq;
    s->head = s->tail = NULL;
    s->busy = true;
    pthread_mutex_unlock(&s->lock);

    process_batch(s, batch, last);

    pthread_mutex_lock(&s->lock);
    s->busy = false;
}

static void *writer_main(void *arg)
{
    struct store *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (s->head && !s->busy) {
            commit_queued(s);
            continue;
        }
        if (s->closing && !s->head && !s->busy)
            break; /* drained, and no caller is committing */
        if (s->health[0] == '\0' || s->busy || s->head) {
            pthread_cond_wait(&s->cond, &s->lock);
            continue;
        }
        if (mx_cond_wait_until(&s->cond, &s->lock, mx_mono_ns() + 1000 * MX_NS_PER_MS) ==
                ETIMEDOUT &&
            !s->head && !s->closing && !s->busy) {
            s->busy = true;
            pthread_mutex_unlock(&s->lock);
            probe(s);
            pthread_mutex_lock(&s->lock);
            s->busy = false;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* lock held. `wake`: signal the writer (not when a batch will commit it, or hand it on). */
static void enqueue(struct store *s, struct store_item *it, bool wake)
{
    it->_next = NULL;
    if (s->tail)
        s->tail->_next = it;
    else
        s->head = it;
    s->tail = it;
    if (!s->busy && wake)
        pthread_cond_signal(&s->cond);
}

void store_batch_begin(struct store *s, struct store_batch *b)
{
    b->store = s;
}

void store_batch_end(struct store_batch *b, bool here)
{
    struct store *s = b->store;
    b->store = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->head && !s->busy) {
        if (here && !s->closing) {
            commit_queued(s);
            atomic_fetch_add(&s->batches_here, 1);
        }
        /* What others queued meanwhile, or all of it when not here: the writer's. And
         * after a failed commit the writer probes the disk until one succeeds. */
        if (s->head || s->closing || s->health[0] != '\0')
            pthread_cond_signal(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
}

uint64_t store_submit(struct store *s, struct store_rec *rec, uint64_t epoch)
{
    return store_submit_in(s, rec, epoch, NULL);
}

uint64_t store_submit_in(struct store *s, struct store_rec *rec, uint64_t epoch,
                         struct store_batch *b)
{
    rec->_item._kind = ITEM_REC;
    rec->_item._epoch = epoch;
    pthread_mutex_lock(&s->lock);
    if (s->closing) {
        pthread_mutex_unlock(&s->lock);
        store_rec_free(rec);
        return 0;
    }
    uint64_t seq = ++s->last_seq;
    rec->_item._seq = seq;
    enqueue(s, &rec->_item, !b || b->store != s);
    pthread_mutex_unlock(&s->lock);
    return seq;
}

uint64_t store_submit_group(struct store *s, struct store_rec *recs, size_t n,
                            const uint64_t *epochs)
{
    /* One epoch for all: the writer refuses a record whose epoch is not its own, and a
     * group must be refused whole. Epochs start at 1: 0 is never the store's. */
    uint64_t epoch = n ? epochs[0] : 0;
    for (size_t i = 1; i < n; i++)
        if (epochs[i] != epoch)
            epoch = 0;
    pthread_mutex_lock(&s->lock);
    if (s->closing) {
        pthread_mutex_unlock(&s->lock);
        for (struct store_rec *r = recs, *next; r; r = next) {
            next = store_next_rec(r);
            store_rec_free(r);
        }
        return 0;
    }
    /* Under one hold of the lock, so nothing comes between them, and the writer takes the
     * whole queue at once: one commit. */
    uint64_t seq = 0;
    size_t left = n;
    for (struct store_rec *r = recs, *next; r; r = next) {
        next = store_next_rec(r);
        r->grouped = true;
        r->group_left = (uint16_t)--left;
        r->_item._kind = ITEM_REC;
        r->_item._epoch = epoch;
        r->_item._seq = seq = ++s->last_seq;
        enqueue(s, &r->_item, true);
    }
    pthread_mutex_unlock(&s->lock);
    return seq;
}

void store_wait(struct store *s, struct store_wait *w, uint64_t epoch, uint64_t seq)
{
    store_wait_in(s, w, epoch, seq, NULL);
}

void store_wait_in(struct store *s, struct store_wait *w, uint64_t epoch, uint64_t seq,
                   struct store_batch *b)
{
    w->_item._kind = ITEM_WAIT;
    w->_item._epoch = epoch;
    w->_item._seq = seq;
    pthread_mutex_lock(&s->lock);
    if (s->closing && !s->head && !s->busy) {
        pthread_mutex_unlock(&s->lock);
        w->done(w, STORE_ECLOSED);
        return;
    }
    if (!s->head && !s->busy) {
        /* Everything submitted is processed: durable unless it was refused or failed,
         * and in that case the epoch has moved. */
        bool ok = epoch == atomic_load(&s->epoch);
        pthread_mutex_unlock(&s->lock);
        w->_item._next = NULL;
        if (ok && s->cfg.ship && s->cfg.ship(s->cfg.ship_ctx, NULL, w))
            return; /* the mirror has it */
        w->done(w, ok ? STORE_OK : STORE_EFAIL);
        return;
    }
    enqueue(s, &w->_item, !b || b->store != s);
    pthread_mutex_unlock(&s->lock);
}

uint64_t store_backlog(struct store *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t last = s->last_seq;
    pthread_mutex_unlock(&s->lock);
    uint64_t done = atomic_load(&s->done_seq);
    return last > done ? last - done : 0;
}

uint64_t store_epoch(struct store *s)
{
    return atomic_load(&s->epoch);
}

uint64_t store_done_seq(struct store *s)
{
    return atomic_load_explicit(&s->done_seq, memory_order_acquire);
}

bool store_seq_done(struct store *s, uint64_t seq)
{
    return atomic_load_explicit(&s->done_seq, memory_order_acquire) >= seq;
}

uint64_t store_token_hwm(struct store *s)
{
    return atomic_load(&s->token_hwm);
}

uint64_t store_index_hwm(struct store *s)
{
    return atomic_load(&s->index_hwm);
}

uint64_t store_index_floor(struct store *s)
{
    return atomic_load(&s->index_floor);
}

bool store_healthy(struct store *s, char *why, size_t len)
{
    pthread_mutex_lock(&s->lock);
    bool ok = s->health[0] == '\0';
    if (!ok && why && len)
        snprintf(why, len, "%s", s->health);
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* ---- open and close -------------------------------------------------------------- */

static int migrate(sqlite3 *db, bool *created, char *err, size_t errlen)
{
    sqlite3_stmt *st;
    int version = 0;
    if (store_i_prepare(db, "PRAGMA user_version", &st) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            version = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    *created = version == 0;
    if (version > SCHEMA_VERSION) {
        snprintf(err, errlen, "the database has schema version %d, newer than this server's %d",
                 version, SCHEMA_VERSION);
        return EINVAL;
    }
    for (; version < SCHEMA_VERSION; version++) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version=%d", version + 1);
        if (store_i_exec(db, "BEGIN IMMEDIATE") != SQLITE_OK ||
            store_i_exec(db, migrations[version]) != SQLITE_OK ||
            store_i_exec(db, sql) != SQLITE_OK || store_i_exec(db, "COMMIT") != SQLITE_OK) {
            snprintf(err, errlen, "schema migration to version %d failed: %s", version + 1,
                     sqlite3_errmsg(db));
            store_i_exec(db, "ROLLBACK");
            return EIO;
        }
        mx_info("store: schema migrated", "version=%d", version + 1);
    }
    return 0;
}

/* One number from a one-row query: a missing row or a NULL is 0 (a new store). Any SQLite
 * error is an error: these numbers are the floors of fencing tokens and indexes, and a
 * floor read as 0 by mistake would hand out tokens again. */
static int read_u64(sqlite3 *db, const char *sql, uint64_t *out)
{
    sqlite3_stmt *st;
    int rc = store_i_prepare(db, sql, &st);
    *out = 0;
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = (uint64_t)sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

static int lock_dir(struct store *s, const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/LOCK", dir);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return errno;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(s->lock_fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        snprintf(err, errlen,
                 "the data directory %s is in use by another mutexd (pid %s); "
                 "give each server its own --data-dir",
                 dir, pid[0] ? pid : "unknown");
        close(s->lock_fd);
        s->lock_fd = -1;
        return EBUSY;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(s->lock_fd, 0) != 0 || pwrite(s->lock_fd, pid, (size_t)n, 0) != n)
        mx_warn("store: cannot write the pid into the lock file", "path=%s", path);
    return 0;
}

static const double batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};

/* Frees what store_open() made, as far as it got: a failed open and store_close() (once
 * the writer has stopped) end here alike. */
static void teardown(struct store *s)
{
    while (s->readers) {
        struct reader *r = s->readers;
        s->readers = r->next;
        store_i_reader_free(r);
    }
    sqlite3_finalize(s->st_put);
    sqlite3_finalize(s->st_forget);
    sqlite3_finalize(s->st_header);
    sqlite3_finalize(s->st_drop);
    sqlite3_finalize(s->st_drop_leases);
    sqlite3_finalize(s->st_any);
    sqlite3_finalize(s->st_meta);
    sqlite3_finalize(s->st_begin);
    sqlite3_finalize(s->st_commit);
    sqlite3_finalize(s->st_rollback);
    /* Closing the last connection checkpoints the WAL into the database file. */
    sqlite3_close(s->wdb);
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* releases the flock */
    free(s->db_path);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->rlock);
    free(s);
}

int store_open(struct store **out, const struct store_config *cfg, char *err, size_t errlen)
{
    struct store *s = calloc(1, sizeof *s);
    int rc = ENOMEM;
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    s->cfg = *cfg;
    s->lock_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    mx_cond_init_mono(&s->cond);
    pthread_mutex_init(&s->rlock, NULL);
    prom_hist_init(&s->batch_sizes, batch_bounds, sizeof batch_bounds / sizeof batch_bounds[0], 1);
    prom_hist_init(&s->commit_seconds, prom_latency_bounds, prom_latency_nbounds, 1e9);
    prom_hist_init(&s->fsync_seconds, prom_latency_bounds, prom_latency_nbounds, 1e9);

    if (mkdir(cfg->dir, 0700) != 0 && errno != EEXIST) {
        rc = errno;
        snprintf(err, errlen, "cannot create the data directory %s: %s", cfg->dir, strerror(rc));
        goto fail;
    }
    if ((rc = lock_dir(s, cfg->dir, err, errlen)) != 0)
        goto fail;
    size_t plen = strlen(cfg->dir) + sizeof "/mutexd.db";
    s->db_path = malloc(plen);
    if (!s->db_path) {
        rc = ENOMEM;
        goto fail;
    }
    snprintf(s->db_path, plen, "%s/mutexd.db", cfg->dir);
    if ((rc = store_faults_register()) != 0) {
        snprintf(err, errlen, "cannot register the SQLite VFS");
        goto fail;
    }
    if (store_i_open_db(s->db_path, true, &s->wdb) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", s->db_path,
                 s->wdb ? sqlite3_errmsg(s->wdb) : "open failed");
        rc = EIO;
        goto fail;
    }
    if ((rc = migrate(s->wdb, &s->created, err, errlen)) != 0)
        goto fail;
    if (store_i_prepare(
            s->wdb,
            "INSERT INTO holders(resource, lease_id, owner, token, ttl_ms, acquired_at, "
            "renewed_at, deadline, held, shared, metadata) "
            "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11) "
            "ON CONFLICT(resource, lease_id) DO UPDATE SET owner=excluded.owner, "
            "token=excluded.token, ttl_ms=excluded.ttl_ms, acquired_at=excluded.acquired_at, "
            "renewed_at=excluded.renewed_at, deadline=excluded.deadline, held=excluded.held, "
            "shared=excluded.shared, metadata=excluded.metadata",
            &s->st_put) != SQLITE_OK ||
        store_i_prepare(s->wdb, "DELETE FROM holders WHERE resource = ?1 AND lease_id = ?2",
                        &s->st_forget) != SQLITE_OK ||
        store_i_prepare(s->wdb,
                        "INSERT INTO resources(resource, idx, lim) VALUES(?1, ?2, ?3) "
                        "ON CONFLICT(resource) DO UPDATE SET idx=excluded.idx, lim=excluded.lim",
                        &s->st_header) != SQLITE_OK ||
        store_i_prepare(s->wdb, "DELETE FROM resources WHERE resource = ?1", &s->st_drop) !=
            SQLITE_OK ||
        store_i_prepare(s->wdb, "DELETE FROM holders WHERE resource = ?1", &s->st_drop_leases) !=
            SQLITE_OK ||
        store_i_prepare(s->wdb, "SELECT 1 FROM holders WHERE resource = ?1 LIMIT 1", &s->st_any) !=
            SQLITE_OK ||
        store_i_prepare(s->wdb,
                        "INSERT INTO meta(key, value) VALUES(?1, ?2) "
                        "ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)",
                        &s->st_meta) != SQLITE_OK ||
        store_i_prepare(s->wdb, "BEGIN IMMEDIATE", &s->st_begin) != SQLITE_OK ||
        store_i_prepare(s->wdb, "COMMIT", &s->st_commit) != SQLITE_OK ||
        store_i_prepare(s->wdb, "ROLLBACK", &s->st_rollback) != SQLITE_OK) {
        snprintf(err, errlen, "cannot prepare statements: %s", sqlite3_errmsg(s->wdb));
        rc = EIO;
        goto fail;
    }
    static const char *const hwm_sql[] = {
        "SELECT value FROM meta WHERE key = 'token_hwm'",
        "SELECT max(token) FROM holders",
        "SELECT value FROM meta WHERE key = 'index_hwm'",
        "SELECT max(idx) FROM resources",
        "SELECT value FROM meta WHERE key = 'index_floor'",
        "SELECT value FROM meta WHERE key = 'commit_seq'",
    };
    uint64_t hwm[sizeof hwm_sql / sizeof hwm_sql[0]];
    for (size_t i = 0; i < sizeof hwm / sizeof hwm[0]; i++) {
        store_faults_arm_read(cfg, i + 1);
        rc = read_u64(s->wdb, hwm_sql[i], &hwm[i]);
        store_faults_disarm();
        if (rc != SQLITE_OK) {
            snprintf(err, errlen, "cannot read %s: %s", hwm_sql[i], sqlite3_errstr(rc));
            rc = EIO;
            goto fail;
        }
    }
    atomic_init(&s->token_hwm, hwm[0] > hwm[1] ? hwm[0] : hwm[1]);
    atomic_init(&s->index_hwm, hwm[2] > hwm[3] ? hwm[2] : hwm[3]);
    atomic_init(&s->index_floor, hwm[4]);
    atomic_init(&s->commit_seq, hwm[5]);
    atomic_init(&s->epoch, 1);

    if ((rc = pthread_create(&s->writer, NULL, writer_main, s)) != 0) {
        snprintf(err, errlen, "cannot start the writer thread");
        goto fail;
    }
    mx_info("store: open", "path=%s token_hwm=%" PRIu64 " index_hwm=%" PRIu64, s->db_path,
            atomic_load(&s->token_hwm), atomic_load(&s->index_hwm));
    *out = s;
    return 0;
fail:
    teardown(s);
    return rc;
}

void store_close(struct store *s)
{
    pthread_mutex_lock(&s->lock);
    s->closing = true;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->writer, NULL);

    teardown(s);
}
