/*
 * The store's inside, shared by the files it is written in (not for other modules):
 * store.c (the schema, the writer thread, open and close), store_read.c (the read
 * connections and what reads rows), store_mirror.c (what the blob mirror needs: snapshots,
 * imports, re-arming; and the metrics), store_row.c (rows in memory). The store_i_ functions
 * are each file's statics that another needs.
 */
#ifndef MX_STORE_INTERNAL_H
#define MX_STORE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/prom.h"
#include "persistence/store.h"

/* A lease's columns, as lease_from_stmt() reads them. */
#define LEASE_COLUMNS                                                                              \
    "h.lease_id, h.owner, h.token, h.ttl_ms, h.acquired_at, h.renewed_at, h.deadline, h.held, "    \
    "h.shared, h.metadata"
/* A resource's rows, one per lease, oldest grant first: name, index, limit, LEASE_COLUMNS. */
#define ROW_SELECT                                                                                 \
    "SELECT r.resource, r.idx, r.lim, " LEASE_COLUMNS " FROM resources r "                         \
    "JOIN holders h ON h.resource = r.resource "

struct reader {
    struct reader *next;
    sqlite3 *db;
    sqlite3_stmt *get, *list;
};

struct store {
    struct store_config cfg;
    char *db_path;
    int lock_fd;

    /* Writer thread only. */
    sqlite3 *wdb;
    sqlite3_stmt *st_put, *st_forget, *st_header, *st_drop, *st_drop_leases, *st_any, *st_meta;
    sqlite3_stmt *st_begin, *st_commit, *st_rollback; /* prepared once: no parse per commit */
    pthread_t writer;
    uint64_t commits_tried;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct store_item *head, *tail; /* lock */
    uint64_t last_seq;              /* lock: the newest record's sequence number */
    bool busy;                      /* lock: a batch is being committed (writer or caller) */
    bool closing;                   /* lock */
    char health[256];               /* lock: "" when the last commit succeeded */

    _Atomic uint64_t done_seq;   /* every record up to here is processed */
    _Atomic uint64_t commit_seq; /* durable history: the last committed record's number */
    bool created;
    _Atomic uint64_t epoch;
    _Atomic uint64_t token_hwm, index_hwm, index_floor;

    pthread_mutex_t rlock;
    struct reader *readers; /* rlock: idle read connections */

    struct prom_hist batch_sizes, commit_seconds, fsync_seconds;
    _Atomic uint64_t commits_ok, commits_failed, records_written, records_refused;
    _Atomic uint64_t batches_here; /* batches committed in store_batch_end() */
};

/* store_read.c */
int store_i_exec(sqlite3 *db, const char *sql);
int store_i_open_db(const char *path, bool writer, sqlite3 **out);
int store_i_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st);
/* An idle read connection of s (made if none), or NULL; give it back with reader_put. */
struct reader *store_i_reader_get(struct store *s);
void store_i_reader_put(struct store *s, struct reader *r);
void store_i_reader_free(struct reader *r);
/* Reads the LEASE_COLUMNS that start at column `col`. */
int store_i_lease_from_stmt(sqlite3_stmt *st, int col, struct store_lease *l);
/* Steps a ROW_SELECT statement and calls `fn` once per resource (see store_read.c). */
int store_i_read_rows(sqlite3_stmt *st,
                      int (*fn)(void *arg, const char *name, size_t len, struct store_row *row),
                      void *arg, struct store_marks *hwm);

/* store.c: the writer's connection (the writer thread, or a caller that claimed it). */
int store_i_write_header(struct store *s, const char *name, size_t len, uint64_t index,
                         uint32_t limit);
int store_i_write_lease(struct store *s, const char *name, size_t len, const struct store_lease *l);
int store_i_write_meta(struct store *s, const char *key, uint64_t value);
int store_i_begin(struct store *s);
void store_i_rollback(struct store *s);
int store_i_commit(struct store *s);

#endif
