/*
 * What the blob mirror needs of the store (see store.h): a snapshot read on a connection
 * of its own, an import that replaces the whole content, the re-arming of leases read from
 * another server; and the store's metrics.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "persistence/store_internal.h"

bool store_created(struct store *s)
{
    return s->created;
}

uint64_t store_commit_seq(struct store *s)
{
    return atomic_load(&s->commit_seq);
}

void store_set_ship(struct store *s, store_ship_fn ship, void *ctx)
{
    pthread_mutex_lock(&s->lock);
    s->cfg.ship = ship;
    s->cfg.ship_ctx = ctx;
    pthread_mutex_unlock(&s->lock);
}

static uint64_t meta_of(sqlite3_stmt *st, const char *key)
{
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    uint64_t v = sqlite3_step(st) == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return v;
}

int store_snapshot(struct store *s,
                   int (*fn)(void *arg, const char *name, size_t len, struct store_row *row),
                   void *arg, struct store_marks *out)
{
    struct reader *r = store_i_reader_get(s);
    if (!r)
        return STORE_EIO;
    sqlite3_stmt *rows = NULL, *meta = NULL;
    int status = STORE_EIO;
    /* One read transaction: the rows and the marks as of the same commit. */
    if (store_i_exec(r->db, "BEGIN") != SQLITE_OK ||
        store_i_prepare(r->db, ROW_SELECT "ORDER BY r.resource, h.token", &rows) ||
        store_i_prepare(r->db, "SELECT value FROM meta WHERE key = ?1", &meta))
        goto out;
    out->commit_seq = meta_of(meta, "commit_seq");
    out->token_hwm = meta_of(meta, "token_hwm");
    out->index_hwm = meta_of(meta, "index_hwm");
    out->index_floor = meta_of(meta, "index_floor");
    status = store_i_read_rows(rows, fn, arg, out);
out:
    if (status != STORE_OK)
        mx_error("store: snapshot read failed", "error=\"%s\"", sqlite3_errmsg(r->db));
    sqlite3_finalize(rows);
    sqlite3_finalize(meta);
    store_i_exec(r->db, "COMMIT");
    store_i_reader_put(s, r);
    return status;
}

/* Takes the writer's connection for a caller outside the writer: nothing may be queued or
 * running. */
static void claim_writer(struct store *s)
{
    pthread_mutex_lock(&s->lock);
    while (s->busy || s->head) {
        pthread_mutex_unlock(&s->lock);
        sched_yield();
        pthread_mutex_lock(&s->lock);
    }
    s->busy = true;
    pthread_mutex_unlock(&s->lock);
}

static void release_writer(struct store *s)
{
    pthread_mutex_lock(&s->lock);
    s->busy = false;
    if (s->head)
        pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int store_import(struct store *s, const struct store_import_row *rows, size_t n,
                 const struct store_marks *marks, char *err, size_t errlen)
{
    claim_writer(s);
    int rc = store_i_begin(s);
    if (rc == SQLITE_OK)
        rc = store_i_exec(s->wdb, "DELETE FROM holders; DELETE FROM resources; DELETE FROM meta;");
    for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
        const struct store_row *row = &rows[i].row;
        if (row->nleases == 0)
            continue; /* a resource without leases has no row */
        rc = store_i_write_header(s, rows[i].name, rows[i].len, row->index, row->limit);
        for (uint32_t j = 0; rc == SQLITE_OK && j < row->nleases; j++)
            rc = store_i_write_lease(s, rows[i].name, rows[i].len, &row->leases[j]);
    }
    if (rc == SQLITE_OK)
        rc = store_i_write_meta(s, "commit_seq", marks->commit_seq);
    if (rc == SQLITE_OK)
        rc = store_i_write_meta(s, "token_hwm", marks->token_hwm);
    if (rc == SQLITE_OK)
        rc = store_i_write_meta(s, "index_hwm", marks->index_hwm);
    if (rc == SQLITE_OK)
        rc = store_i_write_meta(s, "index_floor", marks->index_floor);
    if (rc == SQLITE_OK)
        rc = store_i_commit(s);
    if (rc != SQLITE_OK)
        store_i_rollback(s);
    if (rc == SQLITE_OK) {
        atomic_store(&s->commit_seq, marks->commit_seq);
        atomic_store(&s->token_hwm, marks->token_hwm);
        atomic_store(&s->index_hwm, marks->index_hwm);
        atomic_store(&s->index_floor, marks->index_floor);
    } else {
        snprintf(err, errlen, "writing the restored rows failed: %s", sqlite3_errstr(rc));
    }
    release_writer(s);
    return rc == SQLITE_OK ? STORE_OK : STORE_EIO;
}

int store_rearm(struct store *s, int64_t now_ms, uint64_t grace_ms, uint64_t *n, char *err,
                size_t errlen)
{
    /* mirror_rearm_deadline's rule, for every lease held at once, plus a spread of up to a
     * tenth of the TTL (2 s at most) by token, so that leases whose holders died with the
     * old active do not all expire in one burst (etcd spreads its revocations too). */
    static const char sql[] =
        "UPDATE holders SET deadline = ?1 + MAX(ttl_ms, CASE WHEN deadline < ?1 THEN ?2 "
        "ELSE 0 END) + token % (1 + MIN(ttl_ms / 10, 2000)) WHERE held = 1";
    claim_writer(s);
    sqlite3_stmt *st = NULL;
    int rc = store_i_begin(s);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(s->wdb, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, now_ms);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)grace_ms);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(s->wdb);
    }
    if (rc == SQLITE_OK)
        *n = (uint64_t)sqlite3_changes(s->wdb);
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = store_i_commit(s);
    if (rc != SQLITE_OK) {
        store_i_rollback(s);
        snprintf(err, errlen, "re-arming the leases failed: %s", sqlite3_errstr(rc));
    }
    release_writer(s);
    return rc == SQLITE_OK ? STORE_OK : STORE_EIO;
}

/* ---- metrics --------------------------------------------------------------------- */

void store_metrics(struct store *s, struct mx_buf *b)
{
    prom_header(b, "mutexd_store_commit_batch_size", "histogram",
                "Records written per group commit.");
    prom_hist_write(b, "mutexd_store_commit_batch_size", "", &s->batch_sizes);
    prom_header(b, "mutexd_store_commit_seconds", "histogram",
                "Time to write and commit a batch, fsync included.");
    prom_hist_write(b, "mutexd_store_commit_seconds", "", &s->commit_seconds);
    prom_header(b, "mutexd_store_fsync_seconds", "histogram",
                "Time of COMMIT alone: writing the WAL and its fsync.");
    prom_hist_write(b, "mutexd_store_fsync_seconds", "", &s->fsync_seconds);
    prom_header(b, "mutexd_store_commits_total", "counter", "Group commits by result.");
    prom_sample(b, "mutexd_store_commits_total", atomic_load(&s->commits_ok), "result", "ok", NULL);
    prom_sample(b, "mutexd_store_commits_total", atomic_load(&s->commits_failed), "result", "error",
                NULL);
    prom_counter(b, "mutexd_store_batches_here_total",
                 "Batches committed on the thread of the request they answer, when no other "
                 "request waited to join the commit (the others: on the writer's thread).",
                 atomic_load(&s->batches_here));
    prom_counter(b, "mutexd_store_errors_total", "Commits that failed.",
                 atomic_load(&s->commits_failed));
    prom_header(b, "mutexd_store_records_total", "counter",
                "Records written, and refused after a failed commit.");
    prom_sample(b, "mutexd_store_records_total", atomic_load(&s->records_written), "result",
                "written", NULL);
    prom_sample(b, "mutexd_store_records_total", atomic_load(&s->records_refused), "result",
                "refused", NULL);
    prom_gauge(b, "mutexd_store_healthy", "1 when the last commit succeeded.",
               store_healthy(s, NULL, 0) ? 1 : 0);
}
