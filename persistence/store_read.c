/*
 * The store's reads (see store.h): a pool of read connections, each with its statements
 * prepared once, and the reading of rows from them. A read never waits for the writer
 * (WAL). The writer's own connection is opened with the same store_i_open_db.
 */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "persistence/store_faults.h"
#include "persistence/store_internal.h"

/* Reads the LEASE_COLUMNS that start at column `col`. */
int store_i_lease_from_stmt(sqlite3_stmt *st, int col, struct store_lease *l)
{
    memset(l, 0, sizeof *l);
    const void *id = sqlite3_column_blob(st, col);
    if (id && sqlite3_column_bytes(st, col) == 16)
        memcpy(l->lease_id, id, 16);
    const char *owner = (const char *)sqlite3_column_text(st, col + 1);
    l->owner =
        mx_str_new(owner ? owner : "", owner ? (size_t)sqlite3_column_bytes(st, col + 1) : 0);
    l->token = (uint64_t)sqlite3_column_int64(st, col + 2);
    l->ttl_ms = (uint64_t)sqlite3_column_int64(st, col + 3);
    l->acquired_at_ms = sqlite3_column_int64(st, col + 4);
    l->renewed_at_ms = sqlite3_column_int64(st, col + 5);
    l->deadline_ms = sqlite3_column_int64(st, col + 6);
    l->held = sqlite3_column_int(st, col + 7) != 0;
    l->shared = sqlite3_column_int(st, col + 8) != 0;
    if (sqlite3_column_type(st, col + 9) != SQLITE_NULL) {
        const char *md = (const char *)sqlite3_column_text(st, col + 9);
        l->metadata = mx_str_new(md ? md : "", md ? (size_t)sqlite3_column_bytes(st, col + 9) : 0);
        if (!l->metadata)
            goto oom;
    }
    if (!l->owner)
        goto oom;
    return STORE_OK;
oom:
    store_lease_clear(l);
    return STORE_EIO;
}

/* Steps a ROW_SELECT statement (rows ordered by resource, then token) and calls `fn` once
 * per resource with its whole row, which `fn` takes. `fn` returns nonzero to stop (then
 * STORE_EIO). With `hwm`, raises it to every token and index read. Returns STORE_OK or
 * STORE_EIO; the statement is left for the caller to reset. */
int store_i_read_rows(sqlite3_stmt *st,
                      int (*fn)(void *arg, const char *name, size_t len, struct store_row *row),
                      void *arg, struct store_marks *hwm)
{
    struct store_row row = {0};
    char *name = NULL;
    size_t name_len = 0;
    int rc, status = STORE_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *n = (const char *)sqlite3_column_text(st, 0);
        size_t nlen = (size_t)sqlite3_column_bytes(st, 0);
        if (!n) {
            status = STORE_EIO;
            break;
        }
        if (name && (nlen != name_len || memcmp(n, name, nlen) != 0)) {
            int stop = fn(arg, name, name_len, &row);
            memset(&row, 0, sizeof row);
            free(name);
            name = NULL;
            if (stop) {
                status = STORE_EIO;
                break;
            }
        }
        if (!name) {
            if (!(name = malloc(nlen + 1))) {
                status = STORE_EIO;
                break;
            }
            memcpy(name, n, nlen);
            name[nlen] = '\0';
            name_len = nlen;
            row.index = (uint64_t)sqlite3_column_int64(st, 1);
            row.limit = (uint32_t)sqlite3_column_int64(st, 2);
        }
        struct store_lease l;
        if (store_i_lease_from_stmt(st, 3, &l) != STORE_OK) {
            status = STORE_EIO;
            break;
        }
        /* The row takes the lease's references. */
        struct store_lease *v = realloc(row.leases, ((size_t)row.nleases + 1) * sizeof *v);
        if (!v) {
            store_lease_clear(&l);
            status = STORE_EIO;
            break;
        }
        row.leases = v;
        v[row.nleases++] = l;
        if (hwm && l.token > hwm->token_hwm)
            hwm->token_hwm = l.token;
        if (hwm && row.index > hwm->index_hwm)
            hwm->index_hwm = row.index;
    }
    if (status == STORE_OK && rc != SQLITE_DONE)
        status = STORE_EIO;
    if (status == STORE_OK && name && fn(arg, name, name_len, &row) != 0)
        status = STORE_EIO;
    else if (status != STORE_OK)
        store_row_clear(&row);
    free(name);
    return status;
}

int store_i_exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

int store_i_open_db(const char *path, bool writer, sqlite3 **out)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (writer ? SQLITE_OPEN_CREATE : 0);
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, flags, writer ? store_faults_vfs_name() : NULL);
    if (rc != SQLITE_OK) {
        sqlite3_close(db);
        return rc;
    }
    sqlite3_busy_timeout(db, 5000);
    /* Durability: WAL with a full fsync at every commit (the answers promise it). */
    rc = store_i_exec(
        db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA temp_store=MEMORY;");
    if (rc == SQLITE_OK && !writer)
        rc = store_i_exec(db, "PRAGMA query_only=1;");
    if (rc != SQLITE_OK) {
        sqlite3_close(db);
        return rc;
    }
    *out = db;
    return SQLITE_OK;
}

int store_i_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
    return sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
}

void store_i_reader_free(struct reader *r)
{
    sqlite3_finalize(r->get);
    sqlite3_finalize(r->list);
    sqlite3_close(r->db);
    free(r);
}

struct reader *store_i_reader_get(struct store *s)
{
    pthread_mutex_lock(&s->rlock);
    struct reader *r = s->readers;
    if (r)
        s->readers = r->next;
    pthread_mutex_unlock(&s->rlock);
    if (r)
        return r;
    r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    /* One statement each, so that a read sees one commit (a resource's header and its
     * leases alike). */
    if (store_i_open_db(s->db_path, false, &r->db) != SQLITE_OK ||
        store_i_prepare(r->db, ROW_SELECT "WHERE r.resource = ?1 ORDER BY h.token", &r->get) ||
        store_i_prepare(r->db,
                        ROW_SELECT
                        "JOIN (SELECT DISTINCT resource FROM holders "
                        "WHERE held = 1 AND deadline > ?1 "
                        "AND resource > ?2 AND resource >= ?3 AND resource < ?4 "
                        "ORDER BY resource LIMIT ?5) AS sel ON sel.resource = r.resource "
                        "ORDER BY r.resource, h.token",
                        &r->list)) {
        mx_error("store: cannot open a read connection", "error=\"%s\"",
                 r->db ? sqlite3_errmsg(r->db) : "open");
        store_i_reader_free(r);
        return NULL;
    }
    return r;
}

void store_i_reader_put(struct store *s, struct reader *r)
{
    pthread_mutex_lock(&s->rlock);
    r->next = s->readers;
    s->readers = r;
    pthread_mutex_unlock(&s->rlock);
}

struct get_ctx {
    struct store_row *out;
    bool found;
};

static int got_row(void *arg, const char *name, size_t len, struct store_row *row)
{
    (void)name;
    (void)len;
    struct get_ctx *g = arg;
    *g->out = *row; /* takes the references */
    g->found = true;
    return 0;
}

int store_get(struct store *s, const char *name, size_t len, struct store_row *out)
{
    struct reader *r = store_i_reader_get(s);
    if (!r)
        return STORE_EIO;
    memset(out, 0, sizeof *out);
    struct get_ctx g = {.out = out};
    sqlite3_bind_text(r->get, 1, name, (int)len, SQLITE_STATIC);
    int status = store_i_read_rows(r->get, got_row, &g, NULL);
    if (status != STORE_OK) {
        mx_error("store: read failed", "error=\"%s\"", sqlite3_errmsg(r->db));
        store_row_clear(out);
    } else if (!g.found) {
        status = STORE_NOTFOUND;
    }
    sqlite3_reset(r->get);
    sqlite3_clear_bindings(r->get);
    store_i_reader_put(s, r);
    return status;
}

struct list_ctx {
    void (*fn)(void *arg, const char *name, size_t len, struct store_row *row);
    void *arg;
};

static int listed_row(void *arg, const char *name, size_t len, struct store_row *row)
{
    struct list_ctx *c = arg;
    c->fn(c->arg, name, len, row);
    return 0;
}

int store_list_held(struct store *s, const char *prefix, const char *after, int limit,
                    void (*fn)(void *arg, const char *name, size_t len, struct store_row *row),
                    void *arg)
{
    struct reader *r = store_i_reader_get(s);
    if (!r)
        return STORE_EIO;
    /* Names are ASCII below 0x7f, so every name starting with P sorts below P "\x7f". */
    char upper[512];
    const char *p = prefix ? prefix : "";
    snprintf(upper, sizeof upper, "%s\x7f", p);
    sqlite3_bind_int64(r->list, 1, mx_lease_ms());
    sqlite3_bind_text(r->list, 2, after ? after : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(r->list, 3, p, -1, SQLITE_STATIC);
    sqlite3_bind_text(r->list, 4, upper, -1, SQLITE_STATIC);
    sqlite3_bind_int(r->list, 5, limit);
    struct list_ctx c = {fn, arg};
    int status = store_i_read_rows(r->list, listed_row, &c, NULL);
    if (status != STORE_OK)
        mx_error("store: list failed", "error=\"%s\"", sqlite3_errmsg(r->db));
    sqlite3_reset(r->list);
    sqlite3_clear_bindings(r->list);
    store_i_reader_put(s, r);
    return status;
}

int store_count_rows(struct store *s, uint64_t *n)
{
    struct reader *r = store_i_reader_get(s);
    if (!r)
        return STORE_EIO;
    sqlite3_stmt *st = NULL;
    int rc = store_i_prepare(r->db, "SELECT count(*) FROM resources", &st);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW)
        *n = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    store_i_reader_put(s, r);
    return rc == SQLITE_ROW ? STORE_OK : STORE_EIO;
}

/* SQLite's BINARY collation, which orders both tables' primary keys: bytes, then length. */
static int name_cmp(sqlite3_stmt *a, sqlite3_stmt *b)
{
    const void *x = sqlite3_column_blob(a, 0), *y = sqlite3_column_blob(b, 0);
    int nx = sqlite3_column_bytes(a, 0), ny = sqlite3_column_bytes(b, 0);
    size_t n = (size_t)(nx < ny ? nx : ny);
    int c = n ? memcmp(x, y, n) : 0;
    return c ? c : (nx > ny) - (nx < ny);
}

/* Two scans in key order, merged here: a join of the two tables costs SQLite a search of
 * `resources` for every lease, and that was most of a restart with a million leases. */
int store_each_held(struct store *s,
                    void (*fn)(void *arg, const char *name, size_t len, const struct store_held *h),
                    void *arg)
{
    struct reader *r = store_i_reader_get(s);
    if (!r)
        return STORE_EIO;
    sqlite3_stmt *res = NULL, *hold = NULL;
    /* One read transaction: both scans see the same commit. */
    int rc = store_i_exec(r->db, "BEGIN");
    if (rc == SQLITE_OK)
        rc = store_i_prepare(r->db, "SELECT resource, lim FROM resources ORDER BY resource", &res);
    if (rc == SQLITE_OK)
        rc = store_i_prepare(r->db,
                             "SELECT resource, deadline, shared FROM holders WHERE held = 1 "
                             "ORDER BY resource",
                             &hold);
    int hrc = rc == SQLITE_OK ? sqlite3_step(hold) : rc;
    int rrc = hrc == SQLITE_ROW ? sqlite3_step(res) : SQLITE_DONE;
    while (hrc == SQLITE_ROW && rrc == SQLITE_ROW) {
        int c = name_cmp(res, hold);
        if (c < 0) { /* a resource without a lease held */
            rrc = sqlite3_step(res);
            continue;
        }
        if (c > 0) { /* a lease without its resource's row: not in force */
            hrc = sqlite3_step(hold);
            continue;
        }
        struct store_held h = {.deadline_ms = sqlite3_column_int64(hold, 1),
                               .limit = (uint32_t)sqlite3_column_int64(res, 1)};
        do {
            int64_t d = sqlite3_column_int64(hold, 1);
            if (d < h.deadline_ms)
                h.deadline_ms = d;
            h.nheld++;
            h.nshared += sqlite3_column_int64(hold, 2) != 0;
            hrc = sqlite3_step(hold);
        } while (hrc == SQLITE_ROW && name_cmp(res, hold) == 0);
        fn(arg, (const char *)sqlite3_column_text(res, 0), (size_t)sqlite3_column_bytes(res, 0),
           &h);
        rrc = sqlite3_step(res);
    }
    int status =
        (hrc == SQLITE_ROW || hrc == SQLITE_DONE) && (rrc == SQLITE_ROW || rrc == SQLITE_DONE)
            ? STORE_OK
            : STORE_EIO;
    if (status != STORE_OK)
        mx_error("store: reading the held leases failed", "error=\"%s\"", sqlite3_errmsg(r->db));
    sqlite3_finalize(hold);
    sqlite3_finalize(res);
    if (store_i_exec(r->db, "COMMIT") != SQLITE_OK)
        (void)store_i_exec(r->db, "ROLLBACK");
    store_i_reader_put(s, r);
    return status;
}
