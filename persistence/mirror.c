/*
 * The blob mirror: shipping (see mirror.h; restore is in mirror_restore.c).
 *
 * Layout: names and listing; errors; the owner lease; appending to the journal; token
 * reservations; snapshots; the mirror thread; open, start and close; status and metrics.
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

static int append_block(struct mirror *m, const char *data, size_t len);

/* ---- names and listing ----------------------------------------------------------- */

void mirror_snapshot_name(char *out, size_t len, uint64_t generation, uint64_t seq)
{
    snprintf(out, len, "snapshots/%010" PRIu64 "-%020" PRIu64 ".jsonl", generation, seq);
}

void mirror_journal_name(char *out, size_t len, uint64_t generation, uint64_t first_seq)
{
    snprintf(out, len, "journal/%010" PRIu64 "/%020" PRIu64, generation, first_seq);
}

static bool digits(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

bool mirror_parse_snapshot_name(const char *name, uint64_t *generation, uint64_t *seq)
{
    /* snapshots/GGGGGGGGGG-SSSSSSSSSSSSSSSSSSSS.jsonl */
    return strlen(name) == 10 + 10 + 1 + 20 + 6 && strncmp(name, "snapshots/", 10) == 0 &&
           name[20] == '-' && strcmp(name + 41, ".jsonl") == 0 &&
           digits(name + 10, 10, generation) && digits(name + 21, 20, seq);
}

bool mirror_parse_journal_name(const char *name, uint64_t *generation, uint64_t *first_seq)
{
    /* journal/GGGGGGGGGG/SSSSSSSSSSSSSSSSSSSS */
    return strlen(name) == 8 + 10 + 1 + 20 && strncmp(name, "journal/", 8) == 0 &&
           name[18] == '/' && digits(name + 8, 10, generation) && digits(name + 19, 20, first_seq);
}

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
    pthread_mutex_lock(&m->lock);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->reason, sizeof m->reason, fmt, ap);
        va_end(ap);
    } else {
        m->reason[0] = '\0';
    }
    pthread_mutex_unlock(&m->lock);
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

static void fence(struct mirror *m, const char *why)
{
    if (!atomic_exchange(&m->fenced, true)) {
        mx_error("mirror: stopped: another server writes to this container; not writing again",
                 "detail=\"%s\"", why);
        set_reason(m, "blob mirror stopped: %s", why);
    }
}

/* Exponential backoff with jitter, from 50 ms to 5 s. */
static void backoff(struct mirror *m)
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

static void recovered(struct mirror *m)
{
    m->backoff_ms = 0;
    m->retry_at_ns = 0;
    if (atomic_exchange(&m->down, false) && !atomic_load(&m->fenced)) {
        set_reason(m, NULL);
        mx_info("mirror: blob storage reachable again", NULL);
    }
}

/* ---- the owner lease ------------------------------------------------------------- */

/* Replaces the small file at `path` with `text`, readable by its owner only: written to
 * path.tmp, fsynced and renamed over it, so a crash leaves the old file or the new one.
 * On failure nothing is left behind but the old file, and err says why. */
static int write_file_durably(const char *path, const char *text, char *err, size_t errlen)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    size_t len = strlen(text);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
        return -1;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
        return -1;
    }
    return 0;
}

static int load_lease_id(struct mirror *m, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/mirror-lease", m->cfg.data_dir);
    FILE *f = fopen(path, "r");
    if (f) {
        char buf[64] = "";
        uint8_t id[16];
        if (fgets(buf, sizeof buf, f) && mx_uuid_parse(buf, strcspn(buf, "\n"), id))
            mx_uuid_format(id, m->lease_id);
        fclose(f);
        if (m->lease_id[0])
            return 0;
    }
    uint8_t id[16];
    if (mx_uuid_random(id) != 0) {
        snprintf(err, errlen, "no random source for the owner lease id");
        return -1;
    }
    mx_uuid_format(id, m->lease_id);
    char text[64];
    snprintf(text, sizeof text, "%s\n", m->lease_id);
    return write_file_durably(path, text, err, errlen);
}

static int take_lease(struct mirror *m, char *err, size_t errlen)
{
    struct blob_result r = {0};
    struct blob_cond none_match = {.if_none_match = "*"};
    int rc = -1;
    /* The owner blob: created once; 409 means it is there already. */
    if (blob_put(m->c, OWNER_BLOB, "", 0, &none_match, &r) != 0 && r.status != 409 &&
        r.status != 412) {
        snprintf(err, errlen, "cannot create the owner blob: %ld %s %s", r.status, r.error_code,
                 r.message);
        goto out;
    }
    uint64_t deadline = mx_mono_ns() + m->cfg.takeover_wait_ms * MX_NS_PER_MS;
    bool said = false;
    for (;;) {
        /* Our own id (kept in the data directory) takes it back at once after a crash. */
        if (blob_lease_acquire(m->c, OWNER_BLOB, LEASE_SECONDS, m->lease_id, &r) == 0) {
            m->lease_renewed_ns = mx_mono_ns();
            rc = 0;
            break;
        }
        if (r.status != 409) {
            snprintf(err, errlen, "cannot take the owner lease: %ld %s %s", r.status, r.error_code,
                     r.message);
            break;
        }
        uint64_t now = mx_mono_ns();
        if (now >= deadline) {
            snprintf(err, errlen,
                     "the blob container '%s' is owned by another mutexd (its lease on '%s' is "
                     "held); run one server per container",
                     m->cfg.container, OWNER_BLOB);
            break;
        }
        if (!said) {
            mx_warn("mirror: the container's owner lease is held; waiting for it to lapse",
                    "container=%s wait_ms=%lu", m->cfg.container,
                    (unsigned long)m->cfg.takeover_wait_ms);
            said = true;
        }
        /* Try again in a second, or at the deadline if that comes first: a server group's
         * standby gives a held lease 1 ms, and must not stay out of the group for a second
         * after losing a takeover to another standby. */
        const uint64_t second = 1000 * MX_NS_PER_MS;
        uint64_t nap = deadline - now < second ? deadline - now : second;
        struct timespec ts = {(time_t)(nap / second), (long)(nap % second)};
        nanosleep(&ts, NULL);
    }
out:
    blob_result_free(&r);
    return rc;
}

static void renew_lease(struct mirror *m)
{
    struct blob_result r = {0};
    if (blob_lease_renew(m->c, OWNER_BLOB, m->lease_id, &r) == 0) {
        m->lease_renewed_ns = mx_mono_ns();
        recovered(m);
    } else if (r.status == 409 || r.status == 412 || r.status == 404) {
        fence(m, "the owner lease was taken by another server");
    } else {
        mirror_note_error(m, "renew lease", &r);
        backoff(m);
    }
    blob_result_free(&r);
}

/* The owner blob's metadata names this server, its generation and the journal blob it
 * appends to. It is written with the lease: once another server holds the lease, this fails
 * (and the server is fenced), so the name there is the last one the old owner could use. */
static int publish_owner_as(struct mirror *m, uint64_t generation, const char *journal)
{
    struct blob_meta meta[4] = {
        {.name = "generation"}, {.name = "journal"}, {.name = "since"}, {.name = "url"}};
    snprintf(meta[0].value, sizeof meta[0].value, "%lu", (unsigned long)generation);
    snprintf(meta[1].value, sizeof meta[1].value, "%s", journal);
    snprintf(meta[2].value, sizeof meta[2].value, "%lld", (long long)m->since_ms);
    snprintf(meta[3].value, sizeof meta[3].value, "%s",
             m->cfg.advertise_url ? m->cfg.advertise_url : "-");
    struct blob_result r = {0};
    struct blob_cond cond = {.lease_id = m->lease_id};
    int rc = 0;
    if (blob_set_metadata(m->c, OWNER_BLOB, meta, 4, &cond, &r) != 0) {
        if (r.status == 409 || r.status == 412 || r.status == 404) {
            fence(m, "the owner lease was taken by another server");
        } else {
            mirror_note_error(m, "publish owner", &r);
            backoff(m);
        }
        rc = -1;
    }
    blob_result_free(&r);
    return rc;
}

static int publish_owner(struct mirror *m, const char *journal)
{
    return publish_owner_as(m, m->generation, journal);
}

/* After taking the lease: seal the journal blob the previous owner names in the owner
 * blob's metadata. It can name no later one (its metadata writes fail without the lease),
 * and it appends to no other (it names a blob before appending to it). */
static int seal_previous(struct mirror *m, char *err, size_t errlen)
{
    struct blob_result r = {0};
    int rc = -1;
    for (int attempt = 0;; attempt++) {
        if (blob_head(m->c, OWNER_BLOB, &r) != 0) {
            if (!blob_result_transient(&r) || attempt >= 4) {
                snprintf(err, errlen, "cannot read the owner blob: %ld %s %s", r.status,
                         r.error_code, r.message);
                break;
            }
        } else {
            const char *journal = blob_result_meta(&r, "journal");
            const char *gen = blob_result_meta(&r, "generation");
            if (journal && strcmp(journal, "-") == 0)
                journal = NULL; /* named by a server that had not begun a journal */
            m->prev_generation = gen ? strtoull(gen, NULL, 10) : 0;
            snprintf(m->prev_journal, sizeof m->prev_journal, "%s", journal ? journal : "");
            /* Name this server at once (the journal still the old one): a standby that
             * gave the old owner up and sees a new name does not break this lease too, and
             * the change of ETag refuses a break decided on the old metadata. */
            if (m->cfg.advertise_url) {
                m->since_ms = mx_wall_ms();
                if (publish_owner_as(m, m->prev_generation,
                                     m->prev_journal[0] ? m->prev_journal : "-") != 0) {
                    snprintf(err, errlen, "lost the owner lease while taking the container");
                    break;
                }
            }
            if (!journal || !journal[0]) {
                rc = 0; /* no owner named one (a container of an earlier version, or new) */
                break;
            }
            char name[96];
            snprintf(name, sizeof name, "%s", journal);
            if (blob_seal(m->c, name, NULL, &r) == 0 || r.status == 404) {
                mx_info("mirror: sealed the previous owner's journal", "journal=%s", name);
                rc = 0;
                break;
            }
            if (!blob_result_transient(&r) || attempt >= 4) {
                snprintf(err, errlen, "cannot seal the previous owner's journal %s: %ld %s %s",
                         name, r.status, r.error_code, r.message);
                break;
            }
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    blob_result_free(&r);
    return rc;
}

/* Writing is allowed only while the lease is surely ours. */
static bool lease_trusted(struct mirror *m)
{
    return !atomic_load(&m->fenced) && mx_mono_ns() - m->lease_renewed_ns < LEASE_TRUST_NS;
}

/* ---- appending ------------------------------------------------------------------- */

static int new_journal(struct mirror *m, uint64_t first_seq)
{
    struct blob_result r = {0};
    struct blob_cond none_match = {.if_none_match = "*"};
    char name[96];
    mirror_journal_name(name, sizeof name, m->generation, first_seq);
    int rc = 0;
    if (blob_create_append(m->c, name, &none_match, &r) != 0) {
        if (r.status == 409 || r.status == 412) {
            fence(m, "a journal blob of this generation exists already");
        } else {
            mirror_note_error(m, "create journal", &r);
            backoff(m);
        }
        rc = -1;
    } else {
        snprintf(m->journal, sizeof m->journal, "%s", name);
        snprintf(m->journal_etag, sizeof m->journal_etag, "%s", r.etag);
        m->journal_off = 0;
        m->journal_blocks = 0;
        m->uncertain = false;
        mx_buf_free(&m->unsure);
    }
    blob_result_free(&r);
    if (rc == 0)
        rc = publish_owner(m, name);
    if (rc == 0) {
        struct mx_buf b = {0};
        jr_encode_begin(&b, m->generation,
                        m->cfg.mode == MIRROR_SYNC ? JR_MODE_SYNC : JR_MODE_ASYNC, first_seq);
        rc = b.oom ? -1 : append_block(m, b.p, b.len);
        mx_buf_free(&b);
    }
    return rc;
}

/* After an append that got no answer: read the blob to learn whether that block landed.
 * 0: settled (the journal's position is known again); -1: could not tell yet. A blob that
 * is neither as we left it nor with our block at its end was written by someone else. */
static int settle_unsure(struct mirror *m)
{
    struct blob_result g = {0};
    int rc = -1;
    if (blob_get(m->bulk, m->journal, NULL, &g) != 0) {
        mirror_note_error(m, "read journal", &g);
        backoff(m);
    } else if (g.body_len == (size_t)m->journal_off) {
        rc = 0; /* it did not land */
    } else if (g.body_len == (size_t)m->journal_off + m->unsure.len &&
               memcmp(g.body + m->journal_off, m->unsure.p, m->unsure.len) == 0) {
        /* It landed. Whoever sent it will send its lines again: a restore skips the
         * lines it has seen (by sequence number). */
        m->journal_off += (int64_t)m->unsure.len;
        m->journal_blocks++;
        rc = 0;
    } else {
        fence(m, "the journal was appended to by another writer");
    }
    if (rc == 0) {
        snprintf(m->journal_etag, sizeof m->journal_etag, "%s", g.etag);
        m->uncertain = false;
        mx_buf_free(&m->unsure);
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
    mx_warn("fault: pausing before an append", "pause_ms=%lu",
            (unsigned long)m->cfg.fault_append_pause_ms);
    uint64_t ms = m->cfg.fault_append_pause_ms;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
#else
    (void)m;
#endif
}

/* One block at the position we expect. 0: appended; -1: failed (backing off). */
static int append_block(struct mirror *m, const char *data, size_t len)
{
    if (m->uncertain && settle_unsure(m) != 0)
        return -1;
    if (!lease_trusted(m)) {
        if (!atomic_load(&m->fenced))
            renew_lease(m);
        if (!lease_trusted(m))
            return -1;
    }
    fault_pause(m);
    struct blob_result r = {0};
    struct blob_cond cond = {.if_match = m->journal_etag[0] ? m->journal_etag : NULL};
    uint64_t t0 = mx_mono_ns();
    int rc = -1;
    if (blob_append_block(m->c, m->journal, data, len, m->journal_off, &cond, &r) == 0) {
        prom_hist_observe(&m->append_seconds, mx_mono_ns() - t0);
        atomic_fetch_add(&m->appends, 1);
        m->journal_off += (int64_t)len;
        m->journal_blocks++;
        snprintf(m->journal_etag, sizeof m->journal_etag, "%s", r.etag);
        m->uncertain = false;
        recovered(m);
        rc = 0;
    } else if (r.status == 412 || r.status == 404 ||
               (r.status == 409 && strcmp(r.error_code, "BlobIsSealed") == 0)) {
        fence(m, r.status == 404 ? "the journal blob was deleted by someone else"
                 : r.status == 409
                     ? "the journal was sealed by the server that took the container"
                     : "the journal was changed by another server (appended to, or sealed)");
    } else {
        mirror_note_error(m, "append", &r);
        if (r.status == 0 || r.status >= 500) {
            /* It may have landed: keep what was sent, to compare before the next append. */
            m->uncertain = true;
            mx_buf_free(&m->unsure);
            mx_buf_append(&m->unsure, data, len);
        }
        backoff(m);
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
    int rc = b.oom ? -1 : append_block(m, b.p, b.len);
    mx_buf_free(&b);
    if (rc == 0) {
        atomic_store(m->cfg.token_ceiling, next);
        atomic_fetch_add(&m->reservations, 1);
    }
    return rc;
}

/* ---- snapshots ------------------------------------------------------------------- */

static int snap_row(void *arg, const char *name, size_t len, struct store_row *row)
{
    struct mx_buf *b = arg;
    jr_encode_row(b, 0, name, len, row);
    store_row_clear(row);
    return b->oom ? -1 : 0;
}

struct cleanup {
    struct mirror *m;
    uint64_t keep_gen, keep_seq; /* the new snapshot */
    char (*names)[96];
    size_t n, cap;
};

static int cleanup_item(void *arg, const struct blob_item *it)
{
    struct cleanup *c = arg;
    uint64_t g, s;
    bool old = false;
    /* Never a later generation's: a server that has lost the container may still get
     * here, and must not delete what the new owner wrote. */
    if (mirror_parse_journal_name(it->name, &g, &s))
        old = g <= c->keep_gen && strcmp(it->name, c->m->journal) != 0; /* not the current */
    else if (mirror_parse_snapshot_name(it->name, &g, &s))
        old = g < c->keep_gen || (g == c->keep_gen && s < c->keep_seq);
    if (old && c->n < c->cap)
        snprintf(c->names[c->n++], sizeof c->names[0], "%s", it->name);
    return 0;
}

/* Writes a snapshot of every row and starts a new journal blob after it; the journal and
 * snapshots it makes redundant are then deleted. */
static int take_snapshot(struct mirror *m)
{
    struct mx_buf rows = {0}, all = {0};
    struct store_marks marks;
    int rc = -1;
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
    char name[96];
    mirror_snapshot_name(name, sizeof name, m->generation, marks.commit_seq);
    struct blob_result r = {0};
    if (blob_put(m->bulk, name, all.p, all.len, NULL, &r) != 0) {
        mirror_note_error(m, "put snapshot", &r);
        blob_result_free(&r);
        backoff(m);
        goto out;
    }
    blob_result_free(&r);
    recovered(m);
    m->snapshot_seq = marks.commit_seq;
    m->snapshot_ns = mx_mono_ns();
    atomic_store(&m->snapshot_wall_ms, (uint64_t)mx_wall_ms());
    atomic_fetch_add(&m->snapshots, 1);
    if (marks.commit_seq > m->shipped_seq)
        m->shipped_seq = marks.commit_seq;
    pthread_mutex_lock(&m->lock);
    if (done > m->shipped_sub)
        m->shipped_sub = done;
    pthread_mutex_unlock(&m->lock);
    mx_info("mirror: snapshot written", "name=%s bytes=%zu", name, all.len);

    /* Everything shipped so far is in it: a fresh journal blob from here. */
    if (new_journal(m, marks.commit_seq + 1) != 0)
        goto out;
    struct cleanup c = {
        .m = m, .keep_gen = m->generation, .keep_seq = marks.commit_seq, .cap = 1024};
    c.names = calloc(c.cap, sizeof *c.names);
    if (c.names) {
        struct blob_result lr = {0};
        mirror_list(m, "journal/", cleanup_item, &c, &lr);
        mirror_list(m, "snapshots/", cleanup_item, &c, &lr);
        for (size_t i = 0; i < c.n; i++)
            blob_delete(m->bulk, c.names[i], NULL, &lr);
        blob_result_free(&lr);
        free(c.names);
    }
    rc = 0;
out:
    mx_buf_free(&rows);
    mx_buf_free(&all);
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
    pthread_mutex_lock(&m->lock);
    if (dropped > m->dropped_sub)
        m->dropped_sub = dropped;
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

/* Appends the queued batches, 4 MiB at a time. Returns 0 when the queue is empty. */
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
            rc = append_block(m, block.p + off, n);
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
    }
}

static bool snapshot_due(struct mirror *m, uint64_t now)
{
    uint64_t commits = store_commit_seq(m->store);
    return commits - m->snapshot_seq >= m->cfg.snapshot_every_changes ||
           (commits > m->snapshot_seq &&
            now - m->snapshot_ns >= m->cfg.snapshot_every_ms * MX_NS_PER_MS) ||
           (uint64_t)m->journal_off >= ROLL_BYTES || m->journal_blocks >= ROLL_BLOCKS;
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
        if (now - m->lease_renewed_ns >= LEASE_RENEW_NS)
            renew_lease(m);
        if (atomic_load(&m->fenced) || now < m->retry_at_ns)
            continue;
        if (reserve_tokens(m, false) != 0)
            continue;
        int shipped = ship_queued(m);
        if (shipped == 0 && !stopping && begin_snapshot(m)) {
            if (snapshot_due(m, now))
                take_snapshot(m);
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
    if (m->c)
        blob_client_free(m->c);
    if (m->bulk)
        blob_client_free(m->bulk);
    blob_account_wipe(&m->account);
    mx_buf_free(&m->unsure);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->err_lock);
    free(m);
}

int mirror_open(struct mirror **out, const struct mirror_config *cfg, struct store *store,
                char *err, size_t errlen)
{
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
    m->store = store;
    pthread_mutex_init(&m->lock, NULL);
    mx_cond_init_mono(&m->cond);
    pthread_mutex_init(&m->err_lock, NULL);
    prom_hist_init(&m->append_seconds, prom_latency_bounds, prom_latency_nbounds, 1e9);

    struct blob_options quick = {.connect_timeout_ms = (long)m->cfg.request_timeout_ms,
                                 .timeout_ms = (long)m->cfg.request_timeout_ms},
                        slow = {.connect_timeout_ms = (long)m->cfg.request_timeout_ms,
                                .timeout_ms = 600000,
                                .max_body = 4ull * 1024 * 1024 * 1024};
    struct blob_result r = {0};
    if (blob_parse_connection_string(cfg->connection_string, &m->account, err, errlen) != 0 ||
        blob_client_new(&m->account, cfg->container, &quick, &m->c, err, errlen) != 0 ||
        blob_client_new(&m->account, cfg->container, &slow, &m->bulk, err, errlen) != 0)
        goto fail;
    if (blob_create_container(m->c, &r) != 0) {
        snprintf(err, errlen, "cannot create the blob container '%s': %ld %s %s", cfg->container,
                 r.status, r.error_code, r.message[0] ? r.message : "");
        goto fail;
    }
    if (load_lease_id(m, err, errlen) != 0 || take_lease(m, err, errlen) != 0 ||
        seal_previous(m, err, errlen) != 0)
        goto fail;
    blob_result_free(&r);
    mx_info("mirror: owner of the container", "container=%s mode=%s", cfg->container,
            cfg->mode == MIRROR_SYNC ? "sync" : "async");
    *out = m;
    return 0;
fail:
    blob_result_free(&r);
    teardown(m);
    return -1;
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
    snprintf(text, sizeof text, "%lu\n", (unsigned long)m->generation);
    return write_file_durably(path, text, err, errlen);
}

int mirror_start(struct mirror *m, bool restored, char *err, size_t errlen)
{
    uint64_t newest;
    if (mirror_max_generation(m, &newest, err, errlen) != 0)
        return -1;
    /* This data directory may overwrite the container's mirror only if the container holds
     * nothing newer than what this directory last wrote there (or what it was restored
     * from). A stale directory must not erase another server's history. */
    uint64_t mine = read_generation_file(m);
    if (!restored && newest > mine && !store_created(m->store)) {
        snprintf(err, errlen,
                 "the blob container '%s' holds generation %lu, newer than this data "
                 "directory's last (%lu): another server has written it since. Move the data "
                 "directory away to restore from the container, or use another container",
                 m->cfg.container, (unsigned long)newest, (unsigned long)mine);
        return -1;
    }
    m->generation = newest + 1;
    m->since_ms = mx_wall_ms();
    if (write_generation_file(m, err, errlen) != 0)
        return -1;
    /* Tokens: everything the store has seen, then a first reservation above it. */
    uint64_t hwm = store_token_hwm(m->store);
    if (atomic_load(m->cfg.last_token) < hwm)
        atomic_store(m->cfg.last_token, hwm);
    m->lease_renewed_ns = mx_mono_ns();
    /* The journal blob of this generation exists before the snapshot that names it. */
    if (take_snapshot(m) != 0 || atomic_load(&m->fenced)) {
        snprintf(err, errlen, "cannot write the first snapshot of generation %lu",
                 (unsigned long)m->generation);
        return -1;
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
    mx_info("mirror: shipping", "generation=%lu from_seq=%lu token_ceiling=%lu",
            (unsigned long)m->generation, (unsigned long)m->snapshot_seq + 1,
            (unsigned long)atomic_load(m->cfg.token_ceiling));
    return 0;
}

void mirror_give_up(struct mirror *m, const char *why)
{
    fence(m, why);
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
    if (!atomic_load(&m->fenced)) {
        struct blob_result r = {0};
        /* The next owner then need not wait for anything to land here. */
        if (m->journal[0] && blob_seal(m->c, m->journal, NULL, &r) != 0)
            mx_warn("mirror: could not seal the journal; the next owner seals it", "status=%ld",
                    r.status);
        if (blob_lease_release(m->c, OWNER_BLOB, m->lease_id, &r) != 0)
            mx_warn("mirror: could not release the owner lease; it lapses by itself", "status=%ld",
                    r.status);
        blob_result_free(&r);
    }
    teardown(m);
}

/* ---- status and metrics ---------------------------------------------------------- */

enum mirror_mode mirror_mode(const struct mirror *m)
{
    return m->cfg.mode;
}

bool mirror_fenced(struct mirror *m)
{
    return atomic_load(&m->fenced);
}

uint64_t mirror_generation(const struct mirror *m)
{
    return m->generation;
}

const char *mirror_write_gate(struct mirror *m)
{
    if (atomic_load(&m->fenced))
        return "another server has taken the blob container";
    if (m->cfg.mode == MIRROR_SYNC && atomic_load(&m->down))
        return "blob storage is unreachable (sync mirror)";
    return NULL;
}

bool mirror_ready(struct mirror *m, char *why, size_t len)
{
    const char *gate = mirror_write_gate(m);
    if (gate) {
        snprintf(why, len, "%s", gate);
        return false;
    }
    return true;
}

void mirror_lag(struct mirror *m, uint64_t *changes, uint64_t *ms)
{
    *changes = atomic_load(&m->lag_changes);
    uint64_t oldest = atomic_load(&m->oldest_ns);
    uint64_t now = mx_mono_ns();
    *ms = oldest && now > oldest ? (now - oldest) / MX_NS_PER_MS : 0;
}

void mirror_metrics(struct mirror *m, struct mx_buf *b)
{
    uint64_t changes, ms;
    mirror_lag(m, &changes, &ms);
    prom_gauge(b, "mutexd_mirror_lag_changes", "Committed changes not yet in blob storage.",
               changes);
    prom_gauge_f(b, "mutexd_mirror_lag_seconds",
                 "Age of the oldest committed change not yet in blob storage.", (double)ms / 1000);
    prom_counter(b, "mutexd_mirror_appends_total", "Journal blocks appended.",
                 atomic_load(&m->appends));
    prom_counter(b, "mutexd_mirror_changes_shipped_total", "Changes shipped to blob storage.",
                 atomic_load(&m->appended_changes));
    prom_header(b, "mutexd_mirror_append_seconds", "histogram", "Latency of an append.");
    prom_hist_write(b, "mutexd_mirror_append_seconds", "", &m->append_seconds);
    prom_header(b, "mutexd_mirror_errors_total", "counter", "Failed blob requests, by code.");
    pthread_mutex_lock(&m->err_lock);
    for (size_t i = 0; i < sizeof m->errors / sizeof m->errors[0] && m->errors[i].code[0]; i++)
        mx_buf_printf(b, "mutexd_mirror_errors_total{code=\"%s\"} %lu\n", m->errors[i].code,
                      (unsigned long)m->errors[i].count);
    pthread_mutex_unlock(&m->err_lock);
    prom_counter(b, "mutexd_mirror_snapshots_total", "Snapshots written.",
                 atomic_load(&m->snapshots));
    uint64_t snap = atomic_load(&m->snapshot_wall_ms);
    int64_t age = snap ? mx_wall_ms() - (int64_t)snap : 0;
    prom_gauge_f(b, "mutexd_mirror_snapshot_age_seconds", "Age of the newest snapshot.",
                 (double)(age > 0 ? age : 0) / 1000);
    prom_counter(b, "mutexd_mirror_token_reservations_total",
                 "Blocks of fencing tokens reserved in blob storage.",
                 atomic_load(&m->reservations));
    prom_counter(b, "mutexd_mirror_sync_timeouts_total",
                 "Times sync answers were given up (503) waiting for blob storage.",
                 atomic_load(&m->sync_timeouts));
    prom_counter(b, "mutexd_mirror_changes_dropped_total",
                 "Changes never shipped because another server took the container.",
                 atomic_load(&m->dropped));
    prom_gauge(b, "mutexd_mirror_up",
               "1 while the last blob request succeeded and the container is ours.",
               !atomic_load(&m->down) && !atomic_load(&m->fenced) ? 1 : 0);
}
