/*
 * Internals shared by mirror.c (shipping) and mirror_restore.c (restore). Not for other
 * modules.
 */
#ifndef MX_MIRROR_INTERNAL_H
#define MX_MIRROR_INTERNAL_H

#include <pthread.h>

#include "common/prom.h"
#include "blob/blob.h"
#include "persistence/journal.h"
#include "persistence/mirror.h"
#include "persistence/mirror_plan.h"
#include "persistence/owner.h"

#define LEASE_RENEW_NS (3 * 1000000000ull)  /* the owner lease is renewed this often */
#define LEASE_TRUST_NS (10 * 1000000000ull) /* stop writing if not renewed for this long */
#define MAX_BLOCK      (4u * 1024 * 1024)   /* Append Block's limit */
#define ROLL_BYTES     (32ull * 1024 * 1024)
#define ROLL_BLOCKS    40000 /* Azure allows 50,000 blocks per append blob */
/* Changes an async mirror keeps queued at most (through a blob store outage); the rest is
 * left to the next snapshot. */
#define MIRROR_QUEUE_MAX 262144

/* A journal blob this server appends to (the mirror thread's). */
struct jblob {
    char name[96];
    int64_t off;
    char etag[BLOB_ETAG_MAX];
    uint64_t blocks;
    bool uncertain;       /* the last append may have landed though it failed */
    struct mx_buf unsure; /* then: exactly what it sent */
};

/* Committed changes handed over by the store's writer, waiting to be shipped. */
struct batch {
    struct batch *next;
    struct store_rec *recs;   /* in commit order; freed once shipped */
    struct store_wait *waits; /* lock; sync mode: completed once shipped (or timed out) */
    struct store_wait *waits_last;
    uint64_t first_seq, last_seq, nrec; /* commit_seq */
    uint64_t first_sub, last_sub;       /* submission numbers (store_rec_seq) */
    uint64_t at_ns;                     /* when it was committed */
};

struct mirror {
    struct mirror_config cfg;
    struct store *store;
    struct blob_account account;
    /* One thread at a time: main until mirror_start, then the mirror thread's. `c` has a
     * short timeout (appends, leases: a frozen blob store must be noticed in seconds);
     * `bulk` a long one (snapshots, listings, restore). */
    struct blob_client *c, *bulk;
    char lease_id[40];
    char hand_to[256]; /* mirror_hand_to(): named in the owner blob at the close, or "" */
    uint64_t generation;
    /* What the owner blob named when this server took the container (and sealed its
     * journal): the previous owner's generation, snapshot and journal. */
    struct owner_meta prev;
    /* What this server last wrote in the owner blob (its name, generation, snapshot and
     * journal). The main thread's until mirror_start, then the mirror thread's. */
    struct owner_meta owner;

    /* The mirror thread's own (the main thread's before it starts). */
    struct jblob cur; /* the journal the owner blob names, appended to */
    /* A roll whose owner-blob write got no clear answer: the owner blob may name `next`
     * or still `cur`. Nothing is appended until a read of the owner blob tells. */
    bool roll_unsure;
    struct {
        struct jblob next;
        struct owner_meta meta;
        uint64_t seq, done;
        bool overflow; /* the roll was to cover changes left out of the queue */
    } roll;
    bool roll_now;         /* the journal blob is full: roll at the next chance */
    uint64_t shipped_seq;  /* every change up to here is in the container */
    uint64_t snapshot_seq; /* the newest snapshot covers up to here */
    uint64_t snapshot_ns;  /* when it was taken */
    uint64_t retry_at_ns;  /* backoff: no request before this */
    uint64_t backoff_ms;
    pthread_t thread;
    bool thread_started;

    /* The owner lease is renewed by a thread of its own, with a client of its own, from
     * the moment it is taken (through a restore, however long) to mirror_close(). */
    struct blob_client *lc;
    pthread_t keeper;
    bool keeper_started;
    pthread_cond_t keeper_cond;
    bool keeper_stop;               /* lock */
    _Atomic uint64_t lease_sent_ns; /* when the last successful take or renewal was sent */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct batch *head, *tail; /* lock */
    uint64_t queued;           /* lock: changes queued */
    uint64_t shipped_sub;      /* lock: every record submitted up to here is in the container */
    uint64_t dropped_sub;      /* lock: the last record dropped unshipped (until a snapshot) */
    bool stop;                 /* lock */
    bool overflow;             /* lock: changes were left out of the queue; append nothing until a
                                * snapshot covers them */
    bool detached;             /* lock: the store is closing; do not read it */
    bool snapshotting;         /* lock: a snapshot reads the store now */
    char reason[256];          /* lock: why not healthy, "" when healthy */

    _Atomic bool down;     /* the last request to the blob store failed */
    _Atomic bool fenced;   /* another server owns the container: never write again */
    _Atomic bool shipping; /* mirror_start() finished: this server owns and serves */
    _Atomic uint64_t lag_changes, oldest_ns, snapshot_wall_ms;

    struct prom_hist append_seconds;
    _Atomic uint64_t appends, appended_changes, snapshots, reservations, sync_timeouts, dropped,
        left_to_snapshot;
    pthread_mutex_t err_lock;
    struct {
        char code[48];
        uint64_t count;
    } errors[16]; /* err_lock */
};

/* Records a failed request in the metrics and says whether it is worth retrying. */
bool mirror_note_error(struct mirror *m, const char *what, const struct blob_result *r);

/* Lists every blob under `prefix`, page by page; `fn` returns 0 to go on. Returns 0 or -1. */
int mirror_list(struct mirror *m, const char *prefix,
                int (*fn)(void *arg, const struct blob_item *item), void *arg,
                struct blob_result *res);

/* The same with any client, and without counting the failure. */
int mirror_list_client(struct blob_client *c, const char *prefix,
                       int (*fn)(void *arg, const struct blob_item *item), void *arg,
                       struct blob_result *res);

/* The highest generation found in the container (0: none). */
int mirror_max_generation(struct mirror *m, uint64_t *out, char *err, size_t errlen);

/* Shared by the files the mirror is written in; the mirror thread's, but where a comment
 * at the definition says otherwise. */
/* mirror.c */
void mirror_i_fence(struct mirror *m, const char *why);
void mirror_i_backoff(struct mirror *m);
void mirror_i_recovered(struct mirror *m);
bool mirror_i_set_overflow(struct mirror *m, bool on);
void mirror_i_jblob_free(struct jblob *j);
int mirror_i_prepare_journal(struct mirror *m, uint64_t first_seq, struct jblob *j);
/* mirror_keeper.c */
int mirror_i_write_file_durably(const char *path, const char *text, char *err, size_t errlen);
int mirror_i_load_lease_id(struct mirror *m, char *err, size_t errlen);
/* 0, -1 with err, or MIRROR_HELD with err (another server's lease held to the deadline). */
int mirror_i_take_lease(struct mirror *m, char *err, size_t errlen);
/* The keeper thread: renews the owner lease until mirror_i_keeper_stop(). */
void *mirror_i_keeper_main(void *arg);
void mirror_i_keeper_stop(struct mirror *m);
bool mirror_i_lease_trusted(struct mirror *m);
int mirror_i_publish_sure(struct mirror *m, const struct owner_meta *meta, char *err,
                          size_t errlen);
int mirror_i_seal_previous(struct mirror *m, char *err, size_t errlen);
/* mirror_snapshot.c */
int mirror_i_settle_roll(struct mirror *m);
int mirror_i_take_snapshot(struct mirror *m);

#endif
