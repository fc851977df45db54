/*
 * The blob mirror: shipping (see mirror.h; restore is in mirror_restore.c).
 *
 * Layout: names and listing; errors; appending to the journal; token reservations; the
 * mirror thread; open, start and close. Status and metrics are in mirror_status.c; the owner lease
 * and its keeper thread are in mirror_keeper.c, snapshot rolls in mirror_snapshot.c; what they
 * share with this file is in mirror_internal.h (the mirror_i_ functions).
 *
 * One thread does every request of a running mirror, in order: it renews the owner lease,
 * reserves fencing tokens, appends the queued batches, and takes snapshots. The store's
 * writer only queues batches (ship()); in sync mode it also hands over the batch's waits,
 * which the thread completes once the batch is in the container, or with a failure when
 * the blob store has not taken it within sync_timeout_ms (the change is kept and shipped
 * later; the client was told 503).
 *
 * Every append names the position it expects (x-ms-blob-condition-appendpos) and the
 * blob's ETag, so a second writer on the same journal is noticed at its first append and
 * never interleaved. A request that failed without an answer may still have landed: the
 * next append then meets a moved position, and the blob's tail is compared with what was
 * sent before calling it another writer's.
 *
 * The owner lease is renewed by a thread of its own (the keeper), so that no restore,
 * snapshot or backlog ever delays it. What the container holds is what the owner blob
 * names (owner.h): a generation is claimed there before any blob of it is written, and a
 * snapshot roll writes the snapshot and the next journal blob first, then names both in
 * one owner-blob write, and only then appends there. A change is never in a journal blob
 * the owner blob does not name, whichever single request fails.
 */
#include "persistence/mirror_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/uuid.h"
#include "persistence/mirror_plan.h"

static int append_block(struct mirror *m, struct jblob *j, const char *data, size_t len);

/* ---- listing --------------------------------------------------------------------- */

int mirror_list_client(struct blob_client *c, const char *prefix,
                       int (*fn)(void *arg, const struct blob_item *item), void *arg,
                       struct blob_result *res)
{
    char *marker = NULL;
    int rc = 0;
    do {
        struct blob_list page = {0};
        if (blob_list_page(c, prefix, marker, 5000, &page, res) != 0)
            rc = -1;
        free(marker);
        marker = NULL;
        for (size_t i = 0; rc == 0 && i < page.count; i++)
            if (fn(arg, &page.items[i]) != 0)
                rc = 1;
        if (rc == 0 && page.next_marker)
            marker = strdup(page.next_marker);
        blob_list_free(&page);
    } while (rc == 0 && marker);
    free(marker);
    return rc < 0 ? -1 : 0;
}

int mirror_list(struct mirror *m, const char *prefix,
                int (*fn)(void *arg, const struct blob_item *item), void *arg,
                struct blob_result *res)
{
    int rc = mirror_list_client(m->bulk, prefix, fn, arg, res);
    if (rc != 0)
        mirror_note_error(m, "list", res);
    return rc;
}

static int max_gen_item(void *arg, const struct blob_item *it)
{
    uint64_t *max = arg, g;
    if (mirror_name_generation(it->name, &g) && g > *max)
        *max = g;
    return 0;
}

int mirror_max_generation(struct mirror *m, uint64_t *out, char *err, size_t errlen)
{
    struct blob_result r = {0};
    *out = 0;
    int rc = mirror_list(m, "snapshots/", max_gen_item, out, &r);
    if (rc == 0)
        rc = mirror_list(m, "journal/", max_gen_item, out, &r);
    if (rc != 0)
        snprintf(err, errlen, "cannot list the container: %s",
                 r.message[0] ? r.message : r.error_code);
    blob_result_free(&r);
    return rc;
}

/* ---- errors ---------------------------------------------------------------------- */

static void set_reason(struct mirror *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_reason(struct mirror *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mx_set_text_locked(&m->lock, m->reason, sizeof m->reason, fmt, ap);
    va_end(ap);
}

bool mirror_note_error(struct mirror *m, const char *what, const struct blob_result *r)
{
    char code[48];
    if (r->status == 0)
        snprintf(code, sizeof code, "transport");
    else if (r->error_code[0])
        snprintf(code, sizeof code, "%.47s", r->error_code);
    else
        snprintf(code, sizeof code, "http_%ld", r->status);
    pthread_mutex_lock(&m->err_lock);
    size_t n = sizeof m->errors / sizeof m->errors[0];
    for (size_t i = 0; i < n; i++) {
        if (m->errors[i].code[0] == '\0')
            snprintf(m->errors[i].code, sizeof m->errors[i].code, "%s", code);
        if (strcmp(m->errors[i].code, code) == 0) {
            m->errors[i].count++;
            break;
        }
    }
    pthread_mutex_unlock(&m->err_lock);
    mx_warn("mirror: blob request failed", "what=%s status=%ld code=%s detail=\"%s\"", what,
            r->status, code, r->message);
    return blob_result_transient(r);
}

void mirror_i_fence(struct mirror *m, const char *why)
{
    if (atomic_exchange(&m->fenced, true))
        return;
    /* Before this server serves, losing the container is the expected end of a race between
     * standbys taking over at once; after, it means this server was replaced while active. */
    if (atomic_load(&m->shipping))
        mx_error("mirror: stopped: another server writes to this container; not writing again",
                 "detail=\"%s\"", why);
    else
        mx_warn("mirror: another server took the container first; not writing to it",
                "detail=\"%s\"", why);
    set_reason(m, "blob mirror stopped: %s", why);
}

/* Exponential backoff with jitter, from 50 ms to 5 s. */
void mirror_i_backoff(struct mirror *m)
{
    m->backoff_ms = m->backoff_ms ? m->backoff_ms * 2 : 50;
    if (m->backoff_ms > 5000)
        m->backoff_ms = 5000;
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (uint32_t)mx_mono_ns();
    uint64_t jitter = m->backoff_ms / 2 + r % (m->backoff_ms + 1);
    m->retry_at_ns = mx_mono_ns() + jitter * MX_NS_PER_MS;
    if (!atomic_exchange(&m->down, true))
        set_reason(m, "blob storage unreachable");
}

void mirror_i_recovered(struct mirror *m)
{
    m->backoff_ms = 0;
    m->retry_at_ns = 0;
    if (atomic_exchange(&m->down, false) && !atomic_load(&m->fenced)) {
        set_reason(m, NULL);
        mx_info("mirror: blob storage reachable again", NULL);
    }
}

static bool overflowed(struct mirror *m)
{
    pthread_mutex_lock(&m->lock);
    bool o = m->overflow;
    pthread_mutex_unlock(&m->lock);
    return o;
}

/* Sets or clears the overflow mark; returns what it was. */
bool mirror_i_set_overflow(struct mirror *m, bool on)
{
    pthread_mutex_lock(&m->lock);
    bool was = m->overflow;
    m->overflow = on;
    pthread_mutex_unlock(&m->lock);
    return was;
}

/* ---- appending ------------------------------------------------------------------- */

void mirror_i_jblob_free(struct jblob *j)
{
    mx_buf_free(&j->unsure);
    memset(j, 0, sizeof *j);
}

/* Makes the journal blob that follows a snapshot at `first_seq - 1`, and writes its first
 * line. Nobody reads it until the owner blob names it. 0, or -1 (backing off, or fenced). */
int mirror_i_prepare_journal(struct mirror *m, uint64_t first_seq, struct jblob *j)
{
    struct blob_result r = {0};
    struct blob_cond none_match = {.if_none_match = "*"};
    memset(j, 0, sizeof *j);
    mirror_journal_name(j->name, sizeof j->name, m->generation, first_seq);
    int rc = 0;
    if (blob_create_append(m->c, j->name, &none_match, &r) == 0) {
        snprintf(j->etag, sizeof j->etag, "%s", r.etag);
    } else if (r.status == 409 || r.status == 412) {
        /* Only this server writes blobs of its generation: an earlier attempt of this roll
         * made it (its answer lost, or the owner-blob write after it failed). Go on from
         * where it is. */
        if (blob_head(m->c, j->name, &r) != 0 || r.sealed) {
            if (r.sealed)
                mirror_i_fence(m, "a journal blob of this generation was sealed by another server");
            else {
                mirror_note_error(m, "read journal", &r);
                mirror_i_backoff(m);
            }
            rc = -1;
        } else {
            j->off = r.content_length > 0 ? r.content_length : 0;
            j->blocks = r.committed_blocks > 0 ? (uint64_t)r.committed_blocks : 0;
            snprintf(j->etag, sizeof j->etag, "%s", r.etag);
        }
    } else {
        mirror_note_error(m, "create journal", &r);
        mirror_i_backoff(m);
        rc = -1;
    }
    blob_result_free(&r);
    if (rc == 0 && j->off == 0) {
        struct mx_buf b = {0};
        jr_encode_begin(&b, m->generation,
                        m->cfg.mode == MIRROR_SYNC ? JR_MODE_SYNC : JR_MODE_ASYNC, first_seq);
        rc = b.oom ? -1 : append_block(m, j, b.p, b.len);
        mx_buf_free(&b);
    }
    if (rc != 0)
        mirror_i_jblob_free(j);
    return rc;
}

/* After an append that got no answer: read the blob to learn whether that block landed.
 * 0: settled (the journal's position is known again); -1: could not tell yet. A blob that
 * is neither as we left it nor with our block at its end was written by someone else. */
static int settle_unsure(struct mirror *m, struct jblob *j)
{
    struct blob_result g = {0};
    int rc = -1;
    if (blob_get(m->bulk, j->name, NULL, &g) != 0) {
        mirror_note_error(m, "read journal", &g);
        mirror_i_backoff(m);
    } else if (g.body_len == (size_t)j->off) {
        rc = 0; /* it did not land */
    } else if (g.body_len == (size_t)j->off + j->unsure.len &&
               memcmp(g.body + j->off, j->unsure.p, j->unsure.len) == 0) {
        /* It landed. Whoever sent it will send its lines again: a restore skips the
         * lines it has seen (by sequence number). */
        j->off += (int64_t)j->unsure.len;
        j->blocks++;
        rc = 0;
    } else {
        mirror_i_fence(m, "the journal was appended to by another writer");
    }
    if (rc == 0) {
        snprintf(j->etag, sizeof j->etag, "%s", g.etag);
        j->uncertain = false;
        mx_buf_free(&j->unsure);
    }
    blob_result_free(&g);
    return rc;
}

/* Testing (MUTEXD_FAULT_APPEND_PAUSE_MS): once the file `fault-pause-append` appears in
 * the data directory, the next append stops for that long after its ownership check, as a
 * server frozen at the worst moment would; the file is removed. */
static void fault_pause(struct mirror *m)
{
#ifdef MUTEXD_FAULT_INJECTION
    if (!m->cfg.fault_append_pause_ms)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/fault-pause-append", m->cfg.data_dir);
    if (unlink(path) != 0)
        return;
    mx_warn("fault: pausing before an append", "pause_ms=%" PRIu64, m->cfg.fault_append_pause_ms);
    uint64_t ms = m->cfg.fault_append_pause_ms;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
#else
    (void)m;
#endif
}

/* One block at the position we expect. 0: appended; -1: failed (backing off, or a full
 * blob: roll_now is set). */
static int append_block(struct mirror *m, struct jblob *j, const char *data, size_t len)
{
    if (j->uncertain && settle_unsure(m, j) != 0)
        return -1;
    if (!mirror_i_lease_trusted(m)) {
        mirror_i_backoff(m); /* the keeper renews it, or fences */
        return -1;
    }
    fault_pause(m);
    struct blob_result r = {0};
    struct blob_cond cond = {.if_match = j->etag[0] ? j->etag : NULL};
    uint64_t t0 = mx_mono_ns();
    int rc = -1;
    if (blob_append_block(m->c, j->name, data, len, j->off, &cond, &r) == 0) {
        prom_hist_observe(&m->append_seconds, mx_mono_ns() - t0);
        atomic_fetch_add(&m->appends, 1);
        j->off += (int64_t)len;
        j->blocks++;
        snprintf(j->etag, sizeof j->etag, "%s", r.etag);
        j->uncertain = false;
        mirror_i_recovered(m);
        rc = 0;
    } else if (r.status == 409 && strcmp(r.error_code, "BlockCountExceedsLimit") == 0) {
        /* Full (Azure's 50,000 blocks): nothing more goes there; the next snapshot rolls
         * to a new blob. Not a failure of the blob store. */
        mirror_note_error(m, "append", &r);
        m->roll_now = true;
    } else if (r.status == 412 || r.status == 404 ||
               (r.status == 409 && strcmp(r.error_code, "BlobIsSealed") == 0)) {
        mirror_i_fence(m,
                       r.status == 404 ? "the journal blob was deleted by someone else"
                       : r.status == 409
                           ? "the journal was sealed by the server that took the container"
                           : "the journal was changed by another server (appended to, or sealed)");
    } else {
        mirror_note_error(m, "append", &r);
        if (r.status == 0 || r.status >= 500) {
            /* It may have landed: keep what was sent, to compare before the next append. */
            j->uncertain = true;
            mx_buf_free(&j->unsure);
            mx_buf_append(&j->unsure, data, len);
        }
        mirror_i_backoff(m);
    }
    blob_result_free(&r);
    return rc;
}

/* ---- token reservations ---------------------------------------------------------- */

/* Keeps the ceiling at least half a block above the last token handed out. A reservation
 * reaches the container before the tokens it covers are used, so a restore can never hand
 * one out again. */
static int reserve_tokens(struct mirror *m, bool force)
{
    uint64_t last = atomic_load(m->cfg.last_token);
    uint64_t ceiling = atomic_load(m->cfg.token_ceiling);
    if (!force && ceiling != UINT64_MAX && last + m->cfg.token_block / 2 < ceiling)
        return 0;
    uint64_t next = (ceiling == UINT64_MAX || last > ceiling ? last : ceiling) + m->cfg.token_block;
    struct mx_buf b = {0};
    jr_encode_reserve(&b, next);
    int rc = b.oom ? -1 : append_block(m, &m->cur, b.p, b.len);
    mx_buf_free(&b);
    if (rc == 0) {
        atomic_store(m->cfg.token_ceiling, next);
        atomic_fetch_add(&m->reservations, 1);
    }
    return rc;
}

/* ---- the mirror thread ----------------------------------------------------------- */

static void free_recs(struct store_rec *r)
{
    while (r) {
        struct store_rec *next = store_next_rec(r);
        store_rec_free(r);
        r = next;
    }
}

/* lock held. The queued batch holding record `sub`, or NULL. */
static struct batch *batch_holding(struct mirror *m, uint64_t sub)
{
    if (m->tail && m->tail->first_sub <= sub) /* usually: the batch just queued */
        return sub <= m->tail->last_sub ? m->tail : NULL;
    for (struct batch *b = m->head; b; b = b->next)
        if (b->first_sub <= sub && sub <= b->last_sub)
            return b;
    return NULL;
}

/* lock held. Adds `w` to the end of b's waits. */
static void add_wait(struct batch *b, struct store_wait *w)
{
    store_link_wait(w, NULL);
    if (b->waits_last)
        store_link_wait(b->waits_last, w);
    else
        b->waits = w;
    b->waits_last = w;
}

/* Pushes `w` on a list to complete outside the lock. */
static void push_wait(struct store_wait **list, struct store_wait *w)
{
    store_link_wait(w, *list);
    *list = w;
}

/*
 * The store's writer thread (or store_wait): takes a committed batch, if any, and in sync
 * mode the waits. A wait is answered once the record it depends on is in the container:
 * at once when it already is (or was never committed: refused, or its commit failed),
 * when its batch is appended (or covered by a snapshot) otherwise, and failed when it was
 * dropped unshipped (out of memory, or the mirror fenced) and no snapshot has covered it.
 */
static bool ship(void *ctx, struct store_rec *recs, struct store_wait *waits)
{
    struct mirror *m = ctx;
    bool sync = m->cfg.mode == MIRROR_SYNC;
    if (!recs && !sync)
        return false; /* async: nothing to queue, and answers do not wait for the mirror */
    struct batch *b = recs ? calloc(1, sizeof *b) : NULL;
    uint64_t dropped = 0;
    if (recs && !b) {
        for (struct store_rec *r = recs; r; r = store_next_rec(r))
            dropped = store_rec_seq(r);
        free_recs(recs); /* cannot queue it: the next snapshot covers it */
        atomic_fetch_add(&m->left_to_snapshot, 1);
        mx_warn("mirror: out of memory; changes left to the next snapshot", NULL);
    } else if (b) {
        b->recs = recs;
        b->at_ns = mx_mono_ns();
        b->first_seq = recs->commit_seq;
        b->first_sub = store_rec_seq(recs);
        for (struct store_rec *r = recs; r; r = store_next_rec(r)) {
            b->last_seq = r->commit_seq;
            b->last_sub = store_rec_seq(r);
            b->nrec++;
        }
    }
    struct store_wait *ok = NULL, *failed = NULL, *next;
    struct batch *over = NULL;
    pthread_mutex_lock(&m->lock);
    if (b && !sync && m->queued + b->nrec > m->cfg.queue_max) {
        /* A long outage of an async mirror: the queue keeps its bound, and what does not
         * fit is left to the next snapshot, as after a failed allocation. */
        over = b;
        b = NULL;
        dropped = over->last_sub;
        atomic_fetch_add(&m->left_to_snapshot, over->nrec);
    }
    if (dropped) {
        if (dropped > m->dropped_sub)
            m->dropped_sub = dropped;
        /* Nothing more is appended until a snapshot covers the changes left out: the
         * journal never skips one. */
        m->overflow = true;
    }
    if (b) {
        if (m->tail)
            m->tail->next = b;
        else
            m->head = b;
        m->tail = b;
        m->queued += b->nrec;
        atomic_store(&m->lag_changes, m->queued);
        if (m->head == b)
            atomic_store(&m->oldest_ns, b->at_ns);
        pthread_cond_signal(&m->cond);
    }
    for (struct store_wait *w = sync ? waits : NULL; w; w = next) {
        next = store_next_wait(w);
        uint64_t sub = store_wait_seq(w);
        struct batch *into = sub > m->shipped_sub ? batch_holding(m, sub) : NULL;
        if (into)
            add_wait(into, w);
        else if (sub > m->shipped_sub && sub <= m->dropped_sub)
            push_wait(&failed, w);
        else
            push_wait(&ok, w); /* in the container, or never committed: nothing to ship */
    }
    pthread_mutex_unlock(&m->lock);
    if (over) {
        free_recs(over->recs);
        free(over);
    }
    store_complete_waits(ok, STORE_OK);
    store_complete_waits(failed, STORE_EFAIL);
    return sync;
}

/* Removes the head batch (shipped, or covered by a snapshot). */
static void pop_batch(struct mirror *m, int status)
{
    pthread_mutex_lock(&m->lock);
    struct batch *b = m->head;
    m->head = b->next;
    if (!m->head)
        m->tail = NULL;
    m->queued -= b->nrec;
    if (status == STORE_OK && b->last_sub > m->shipped_sub)
        m->shipped_sub = b->last_sub;
    else if (status != STORE_OK && b->last_sub > m->dropped_sub)
        m->dropped_sub = b->last_sub;
    atomic_store(&m->lag_changes, m->queued);
    atomic_store(&m->oldest_ns, m->head ? m->head->at_ns : 0);
    struct store_wait *waits = b->waits;
    pthread_mutex_unlock(&m->lock);
    if (status == STORE_OK)
        atomic_fetch_add(&m->appended_changes, b->nrec);
    free_recs(b->recs);
    store_complete_waits(waits, status);
    free(b);
}

/* Sync answers that have waited too long are told it failed; the changes stay queued. */
static void expire_waits(struct mirror *m, uint64_t now)
{
    uint64_t limit = m->cfg.sync_timeout_ms * MX_NS_PER_MS;
    struct store_wait *lists[64];
    size_t n = 0;
    pthread_mutex_lock(&m->lock);
    for (struct batch *b = m->head; b && n < 64; b = b->next)
        if (b->waits && now - b->at_ns > limit) {
            lists[n++] = b->waits;
            b->waits = b->waits_last = NULL;
        }
    pthread_mutex_unlock(&m->lock);
    if (n)
        atomic_fetch_add(&m->sync_timeouts, 1);
    for (size_t i = 0; i < n; i++)
        store_complete_waits(lists[i], STORE_EFAIL);
}

/* Appends the next block of queued batches (4 MiB at most). Returns 0 when the queue is
 * empty, 1 when more is queued, -1 on failure. One block a call, so that the mirror
 * thread's other duties (reservations, rolls, answer timeouts) keep their schedule under
 * any load. */
static int ship_queued(struct mirror *m)
{
    for (;;) {
        pthread_mutex_lock(&m->lock);
        struct batch *b = m->head;
        pthread_mutex_unlock(&m->lock);
        if (!b)
            return 0;
        if (b->last_seq <= m->shipped_seq) { /* covered by a snapshot */
            pop_batch(m, STORE_OK);
            continue;
        }
        /* Build one block from as many whole batches as fit (at least one). */
        struct mx_buf block = {0};
        struct mirror_pack pack;
        mirror_pack_init(&pack, MAX_BLOCK);
        for (struct batch *x = b; x && !pack.full;) {
            size_t before = block.len;
            for (struct store_rec *r = x->recs; r; r = store_next_rec(r))
                if (r->commit_seq > m->shipped_seq)
                    jr_encode_rec(&block, r);
            uint64_t first = x->first_seq > m->shipped_seq ? x->first_seq : m->shipped_seq + 1;
            if (!mirror_pack_offer(&pack, block.len - before, first, x->last_seq)) {
                block.len = before; /* it goes in the next block */
                break;
            }
            pthread_mutex_lock(&m->lock);
            x = x->next;
            pthread_mutex_unlock(&m->lock);
        }
        if (block.oom) {
            mx_buf_free(&block);
            return -1;
        }
        /* A single batch larger than a block goes in pieces, at line ends. */
        size_t off = 0;
        int rc = 0;
        while (rc == 0 && off < block.len) {
            size_t n = mirror_pack_piece(block.p + off, block.len - off, MAX_BLOCK);
            rc = append_block(m, &m->cur, block.p + off, n);
            if (rc == 0)
                off += n;
        }
        mx_buf_free(&block);
        if (rc != 0) {
            /* Pieces already appended stay; shipped_seq does not move, and the next try
             * starts over: a restore applies a line once per seq. */
            return -1;
        }
        m->shipped_seq = pack.last_seq;
        for (size_t i = 0; i < pack.nbatches; i++)
            pop_batch(m, STORE_OK);
        pthread_mutex_lock(&m->lock);
        bool more = m->head != NULL;
        pthread_mutex_unlock(&m->lock);
        return more ? 1 : 0;
    }
}

static bool snapshot_due(struct mirror *m, uint64_t now)
{
    uint64_t commits = store_commit_seq(m->store);
    return commits - m->snapshot_seq >= m->cfg.snapshot_every_changes ||
           (commits > m->snapshot_seq &&
            now - m->snapshot_ns >= m->cfg.snapshot_every_ms * MX_NS_PER_MS) ||
           m->roll_now || (uint64_t)m->cur.off >= ROLL_BYTES || m->cur.blocks >= ROLL_BLOCKS ||
           overflowed(m);
}

/* The store may be read only between these, and not once mirror_detach() began. */
static bool begin_snapshot(struct mirror *m)
{
    pthread_mutex_lock(&m->lock);
    bool ok = !m->detached;
    m->snapshotting = ok;
    pthread_mutex_unlock(&m->lock);
    return ok;
}

static void end_snapshot(struct mirror *m)
{
    pthread_mutex_lock(&m->lock);
    m->snapshotting = false;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
}

void mirror_detach(struct mirror *m)
{
    pthread_mutex_lock(&m->lock);
    m->detached = true;
    while (m->snapshotting)
        pthread_cond_wait(&m->cond, &m->lock);
    pthread_mutex_unlock(&m->lock);
}

static void *mirror_main(void *arg)
{
    struct mirror *m = arg;
    uint64_t stop_deadline = 0;
    for (;;) {
        uint64_t now = mx_mono_ns();
        pthread_mutex_lock(&m->lock);
        bool stopping = m->stop;
        if (!stopping && !m->head) {
            mx_cond_wait_until(&m->cond, &m->lock, mx_mono_ns() + 200 * MX_NS_PER_MS);
            stopping = m->stop;
        }
        bool empty = !m->head;
        pthread_mutex_unlock(&m->lock);
        now = mx_mono_ns();
        if (stopping && !stop_deadline)
            stop_deadline = now + 5000 * MX_NS_PER_MS;

        if (atomic_load(&m->fenced)) {
            while (!empty) { /* never shipped: sync clients were not told success */
                pthread_mutex_lock(&m->lock);
                atomic_fetch_add(&m->dropped, m->head->nrec);
                pthread_mutex_unlock(&m->lock);
                pop_batch(m, STORE_EFAIL);
                pthread_mutex_lock(&m->lock);
                empty = !m->head;
                pthread_mutex_unlock(&m->lock);
            }
            if (stopping)
                break;
            continue;
        }
        expire_waits(m, now);
        if (now < m->retry_at_ns) {
            if (stopping && now > stop_deadline)
                break;
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (m->roll_unsure && mirror_i_settle_roll(m) != 0)
            continue;
        if (reserve_tokens(m, false) != 0)
            continue;
        pthread_mutex_lock(&m->lock);
        bool overflow = m->overflow;
        pthread_mutex_unlock(&m->lock);
        int shipped = overflow ? 1 : ship_queued(m);
        /* A snapshot when one is due, whatever is queued: what it covers is dropped from
         * the queue, and a journal blob is rolled long before Azure's block limit. */
        if (!stopping && !m->roll_unsure && !atomic_load(&m->fenced) &&
            mx_mono_ns() >= m->retry_at_ns && begin_snapshot(m)) {
            /* snapshot_due() reads the store too: only between these two. */
            if (snapshot_due(m, now))
                mirror_i_take_snapshot(m);
            end_snapshot(m);
        }
        if (stopping && (shipped == 0 || mx_mono_ns() > stop_deadline))
            break;
    }
    /* Whatever is left was not shipped. */
    for (;;) {
        pthread_mutex_lock(&m->lock);
        bool empty = !m->head;
        pthread_mutex_unlock(&m->lock);
        if (empty)
            break;
        pop_batch(m, STORE_EFAIL);
    }
    return NULL;
}

/* ---- open, start, close ---------------------------------------------------------- */

enum mirror_mode mirror_parse_mode(const char *s)
{
    if (strcmp(s, "off") == 0)
        return MIRROR_OFF;
    if (strcmp(s, "async") == 0)
        return MIRROR_ASYNC;
    if (strcmp(s, "sync") == 0)
        return MIRROR_SYNC;
    return (enum mirror_mode) - 1;
}

/* Frees what mirror_open() made, as far as it got: a failed open and mirror_close() (once
 * the thread has stopped and the lease is released) end here alike. */
static void teardown(struct mirror *m)
{
    mirror_i_keeper_stop(m);
    if (m->c)
        blob_client_free(m->c);
    if (m->bulk)
        blob_client_free(m->bulk);
    if (m->lc)
        blob_client_free(m->lc);
    blob_account_wipe(&m->account);
    mirror_i_jblob_free(&m->cur);
    mirror_i_jblob_free(&m->roll.next);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    pthread_cond_destroy(&m->keeper_cond);
    pthread_mutex_destroy(&m->err_lock);
    free(m);
}

int mirror_open(struct mirror **out, const struct mirror_config *cfg, struct store *store,
                char *err, size_t errlen)
{
    int held = 0; /* what taking the owner lease came to */
    struct mirror *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->cfg = *cfg;
    if (!m->cfg.snapshot_every_changes)
        m->cfg.snapshot_every_changes = 100000;
    if (!m->cfg.snapshot_every_ms)
        m->cfg.snapshot_every_ms = 300000;
    if (!m->cfg.token_block)
        m->cfg.token_block = 100000;
    if (!m->cfg.sync_timeout_ms)
        m->cfg.sync_timeout_ms = 10000;
    if (!m->cfg.takeover_wait_ms)
        m->cfg.takeover_wait_ms = 20000;
    if (!m->cfg.request_timeout_ms)
        m->cfg.request_timeout_ms = 5000;
    if (!m->cfg.queue_max)
        m->cfg.queue_max = MIRROR_QUEUE_MAX;
    m->store = store;
    pthread_mutex_init(&m->lock, NULL);
    mx_cond_init_mono(&m->cond);
    mx_cond_init_mono(&m->keeper_cond);
    pthread_mutex_init(&m->err_lock, NULL);
    prom_hist_init(&m->append_seconds, prom_latency_bounds, prom_latency_nbounds, 1e9);

    /* `c` and the keeper's `lc`: one request at most request_timeout_ms. `bulk` (snapshots,
     * listings, restore) may move a large body: it fails once no byte moves for a few
     * seconds, and after a minute whatever happens. */
    long stall = (long)m->cfg.request_timeout_ms;
    struct blob_options quick = {.connect_timeout_ms = (long)m->cfg.request_timeout_ms,
                                 .timeout_ms = (long)m->cfg.request_timeout_ms,
                                 .prefix = cfg->blob_prefix},
                        slow = {.connect_timeout_ms = (long)m->cfg.request_timeout_ms,
                                .timeout_ms = 60000,
                                .stall_ms = stall,
                                .max_body = 4ull * 1024 * 1024 * 1024,
                                .prefix = cfg->blob_prefix};
    struct blob_result r = {0};
    if (blob_parse_connection_string(cfg->connection_string, &m->account, err, errlen) != 0 ||
        blob_client_new(&m->account, cfg->container, &quick, &m->c, err, errlen) != 0 ||
        blob_client_new(&m->account, cfg->container, &quick, &m->lc, err, errlen) != 0 ||
        blob_client_new(&m->account, cfg->container, &slow, &m->bulk, err, errlen) != 0)
        goto fail;
    if (blob_create_container(m->c, &r) != 0) {
        snprintf(err, errlen, "cannot create the blob container '%s': %ld %s %s", cfg->container,
                 r.status, r.error_code, r.message[0] ? r.message : "");
        goto fail;
    }
    if (mirror_i_load_lease_id(m, err, errlen) != 0 ||
        (held = mirror_i_take_lease(m, err, errlen)) != 0)
        goto fail;
    /* From here the lease is renewed whatever the main thread does (a restore may take
     * longer than the lease lasts). */
    if (pthread_create(&m->keeper, NULL, mirror_i_keeper_main, m) != 0) {
        snprintf(err, errlen, "cannot start the owner lease's thread");
        goto fail;
    }
    m->keeper_started = true;
    if (mirror_i_seal_previous(m, err, errlen) != 0)
        goto fail;
    blob_result_free(&r);
    mx_info("mirror: owner of the container", "container=%s mode=%s", cfg->container,
            cfg->mode == MIRROR_SYNC ? "sync" : "async");
    *out = m;
    return 0;
fail:
    blob_result_free(&r);
    teardown(m);
    return held == MIRROR_HELD ? MIRROR_HELD : -1;
}

/* The generation this data directory last mirrored as (0: never). */
static uint64_t read_generation_file(struct mirror *m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/mirror-generation", m->cfg.data_dir);
    FILE *f = fopen(path, "r");
    unsigned long long g = 0;
    if (f) {
        if (fscanf(f, "%llu", &g) != 1)
            g = 0;
        fclose(f);
    }
    return g;
}

static int write_generation_file(struct mirror *m, char *err, size_t errlen)
{
    char path[4096], text[32];
    snprintf(path, sizeof path, "%s/mirror-generation", m->cfg.data_dir);
    snprintf(text, sizeof text, "%" PRIu64 "\n", m->generation);
    return mirror_i_write_file_durably(path, text, err, errlen);
}

int mirror_start(struct mirror *m, bool restored, char *err, size_t errlen)
{
    uint64_t newest;
    if (mirror_max_generation(m, &newest, err, errlen) != 0)
        return -1;
    if (m->prev.generation > newest)
        newest = m->prev.generation; /* claimed by an owner that wrote nothing of it */
    /* This data directory may overwrite the container's mirror only if the container holds
     * nothing newer than what this directory last wrote there (or what it was restored
     * from). A stale directory must not erase another server's history. */
    uint64_t mine = read_generation_file(m);
    if (!restored && newest > mine && !store_created(m->store)) {
        snprintf(err, errlen,
                 "the blob container '%s' holds generation %" PRIu64
                 ", newer than this data directory's last (%" PRIu64
                 "): another server has written it since. Move the data directory away to "
                 "restore from the container, or use another container",
                 m->cfg.container, newest, mine);
        return -1;
    }
    m->generation = newest + 1;
    if (write_generation_file(m, err, errlen) != 0)
        return -1;
    /* Claim the generation in the owner blob, under the lease, before writing any blob of
     * it: a server that loses the lease later writes only blobs the owner blob never
     * names, and the next owner claims a higher generation. */
    m->owner.generation = m->generation;
    if (mirror_i_publish_sure(m, &m->owner, err, errlen) != 0)
        return -1;
    /* Tokens: everything the store has seen, then a first reservation above it. */
    uint64_t hwm = store_token_hwm(m->store);
    if (atomic_load(m->cfg.last_token) < hwm)
        atomic_store(m->cfg.last_token, hwm);
    /* The first snapshot of this generation and its journal, named in the owner blob. */
    for (int attempt = 0;; attempt++) {
        if (m->roll_unsure)
            mirror_i_settle_roll(m);
        else if (mirror_i_take_snapshot(m) == 0)
            break;
        if (atomic_load(&m->fenced) || attempt >= 20) {
            snprintf(err, errlen, "cannot write the first snapshot of generation %" PRIu64 "%s",
                     m->generation,
                     atomic_load(&m->fenced) ? ": another server has taken the container" : "");
            return -1;
        }
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
        m->retry_at_ns = 0;
    }
    /* No token above the last one may be handed out until a block is reserved. */
    atomic_store(m->cfg.token_ceiling, atomic_load(m->cfg.last_token));
    if (reserve_tokens(m, true) != 0) {
        snprintf(err, errlen, "cannot reserve fencing tokens in the blob container");
        return -1;
    }
    store_set_ship(m->store, ship, m);
    if (pthread_create(&m->thread, NULL, mirror_main, m) != 0) {
        snprintf(err, errlen, "cannot start the mirror thread");
        return -1;
    }
    m->thread_started = true;
    atomic_store(&m->shipping, true);
    mx_info("mirror: shipping",
            "generation=%" PRIu64 " from_seq=%" PRIu64 " token_ceiling=%" PRIu64, m->generation,
            m->snapshot_seq + 1, atomic_load(m->cfg.token_ceiling));
    return 0;
}

void mirror_give_up(struct mirror *m, const char *why)
{
    mirror_i_fence(m, why);
}

void mirror_hand_to(struct mirror *m, const char *url)
{
    snprintf(m->hand_to, sizeof m->hand_to, "%s", url ? url : "");
}

void mirror_close(struct mirror *m)
{
    if (m->thread_started) {
        pthread_mutex_lock(&m->lock);
        m->stop = true;
        pthread_cond_signal(&m->cond);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->thread, NULL);
    }
    mirror_i_keeper_stop(m);
    if (!atomic_load(&m->fenced)) {
        struct blob_result r = {0};
        /* The next owner then need not wait for anything to land here. */
        if (m->cur.name[0] && owner_seal(m->c, m->cur.name, &r) != OWNER_OK)
            mx_warn("mirror: could not seal the journal; the next owner seals it", "status=%ld",
                    r.status);
        if (m->hand_to[0]) {
            struct blob_result n = {0};
            /* What it wrote last is what the blob names, unless a roll's write went
             * unanswered: then the blob is read first. */
            const struct owner_meta *known = m->roll_unsure ? NULL : &m->owner;
            if (owner_name_next(m->c, m->lease_id, known, m->hand_to, &n) != OWNER_OK)
                mx_warn("mirror: could not name the next owner; the others place it", "status=%ld",
                        n.status);
            blob_result_free(&n);
        }
        if (owner_release(m->c, m->lease_id, &r) != OWNER_OK)
            mx_warn("mirror: could not release the owner lease; it lapses by itself", "status=%ld",
                    r.status);
        blob_result_free(&r);
    }
    teardown(m);
}
