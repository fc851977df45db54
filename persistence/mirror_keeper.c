/*
 * The owner lease of a running mirror (see mirror.c's header): taking it, the keeper thread
 * that renews it apart from every other request, naming this server in the owner blob for
 * sure, and sealing the previous owner's journal.
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

/* Replaces the small file at `path` with `text`, readable by its owner only: written to
 * path.tmp, fsynced and renamed over it, so a crash leaves the old file or the new one.
 * On failure nothing is left behind but the old file, and err says why. */
int mirror_i_write_file_durably(const char *path, const char *text, char *err, size_t errlen)
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

int mirror_i_load_lease_id(struct mirror *m, char *err, size_t errlen)
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
    return mirror_i_write_file_durably(path, text, err, errlen);
}

int mirror_i_take_lease(struct mirror *m, char *err, size_t errlen)
{
    struct blob_result r = {0};
    int rc = -1;
    /* The owner blob: created once; an existing one is left as it is. */
    if (owner_create(m->c, &r) != OWNER_OK) {
        snprintf(err, errlen, "cannot create the owner blob: %ld %s %s", r.status, r.error_code,
                 r.message);
        goto out;
    }
    uint64_t deadline = mx_mono_ns() + m->cfg.takeover_wait_ms * MX_NS_PER_MS;
    bool said = false;
    for (;;) {
        /* Our own id (kept in the data directory) takes it back at once after a crash. */
        uint64_t sent = mx_mono_ns();
        enum owner_rc orc = owner_take(m->c, m->lease_id, &r);
        if (orc == OWNER_OK) {
            atomic_store(&m->lease_sent_ns, sent);
            rc = 0;
            break;
        }
        /* Only a 409 is another server's lease; a transient error to the end of the wait
         * (a 503 at every try) is this server's failure to take it, not a lost race. */
        uint64_t now = mx_mono_ns();
        bool held = r.status == 409;
        if (orc == OWNER_FENCED || (!held && (!blob_result_transient(&r) || now >= deadline))) {
            snprintf(err, errlen, "cannot take the owner lease: %ld %s %s", r.status, r.error_code,
                     r.message);
            break;
        }
        if (now >= deadline) {
            rc = MIRROR_HELD;
            if (m->cfg.advertise_url)
                snprintf(err, errlen, "the container's owner lease is held by another server");
            else
                snprintf(err, errlen,
                         "the blob container '%s' is owned by another mutexd (its lease on "
                         "'%s' is held); a server outside a group needs a container of its "
                         "own (or join the group with --ha)",
                         m->cfg.container, OWNER_BLOB);
            break;
        }
        if (!said && !m->cfg.advertise_url) {
            mx_warn("mirror: the container's owner lease is held; waiting for it to lapse",
                    "container=%s wait_ms=%" PRIu64, m->cfg.container, m->cfg.takeover_wait_ms);
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

/* The keeper: renews the owner lease every LEASE_RENEW_NS (sooner after a failure) until
 * mirror_close(), whatever the other threads are doing. A refusal fences the mirror. */
void *mirror_i_keeper_main(void *arg)
{
    struct mirror *m = arg;
    struct blob_result r = {0};
    uint64_t next = atomic_load(&m->lease_sent_ns) + LEASE_RENEW_NS;
    pthread_mutex_lock(&m->lock);
    while (!m->keeper_stop && !atomic_load(&m->fenced)) {
        if (mx_mono_ns() < next) {
            mx_cond_wait_until(&m->keeper_cond, &m->lock, next);
            continue;
        }
        pthread_mutex_unlock(&m->lock);
        uint64_t sent = mx_mono_ns();
        enum owner_rc orc = owner_renew(m->lc, m->lease_id, &r);
        if (orc == OWNER_OK) {
            atomic_store(&m->lease_sent_ns, sent);
            next = sent + LEASE_RENEW_NS;
        } else if (orc == OWNER_FENCED) {
            mirror_i_fence(m, "the owner lease was taken by another server");
        } else {
            mirror_note_error(m, "renew lease", &r);
            next = mx_mono_ns() + 500 * MX_NS_PER_MS;
        }
        blob_result_free(&r);
        pthread_mutex_lock(&m->lock);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

void mirror_i_keeper_stop(struct mirror *m)
{
    if (!m->keeper_started)
        return;
    pthread_mutex_lock(&m->lock);
    m->keeper_stop = true;
    pthread_cond_broadcast(&m->keeper_cond);
    pthread_mutex_unlock(&m->lock);
    pthread_join(m->keeper, NULL);
    m->keeper_started = false;
}

/* Writing is allowed only while the lease is surely ours: renewed less than
 * LEASE_TRUST_NS ago (counted from when the renewal was sent), and never after a fence. */
bool mirror_i_lease_trusted(struct mirror *m)
{
    return !atomic_load(&m->fenced) &&
           mx_mono_ns() - atomic_load(&m->lease_sent_ns) < LEASE_TRUST_NS;
}

/* Writes `meta` in the owner blob and makes sure of the outcome: a write that got no clear
 * answer is checked by reading the owner blob. 0: it is there; -1: fenced, or the blob
 * store did not answer for the few seconds this tries (err says which). For the main
 * thread's steps of a takeover, which cannot go on without it. */
int mirror_i_publish_sure(struct mirror *m, const struct owner_meta *meta, char *err, size_t errlen)
{
    struct blob_result r = {0};
    int rc = -1;
    for (int attempt = 0; attempt < 10 && !atomic_load(&m->fenced); attempt++) {
        if (attempt > 0) {
            struct timespec ts = {0, 300 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        enum owner_rc orc = owner_publish(m->c, m->lease_id, meta, &r);
        if (orc == OWNER_OK) {
            rc = 0;
            break;
        }
        if (orc == OWNER_FENCED) {
            mirror_i_fence(m, "the owner lease was taken by another server");
            break;
        }
        mirror_note_error(m, "publish owner", &r);
        struct owner_view v;
        if (owner_read(m->c, &v, &r) == OWNER_OK && v.exists &&
            strcmp(v.meta.url, meta->url) == 0 && v.meta.generation == meta->generation &&
            strcmp(v.meta.journal, meta->journal) == 0 &&
            strcmp(v.meta.snapshot, meta->snapshot) == 0) {
            rc = 0; /* it landed */
            break;
        }
    }
    if (rc != 0)
        snprintf(err, errlen, "%s",
                 atomic_load(&m->fenced) ? "another server has taken the container"
                                         : "cannot write the owner blob's metadata");
    blob_result_free(&r);
    return rc;
}

/* After taking the lease: seal the journal blob the previous owner names in the owner
 * blob's metadata. It can name no later one (its metadata writes fail without the lease),
 * and it appends to no other (it names a blob before appending to it). */
int mirror_i_seal_previous(struct mirror *m, char *err, size_t errlen)
{
    struct blob_result r = {0};
    int rc = -1;
    for (int attempt = 0;; attempt++) {
        struct owner_view v;
        if (owner_read(m->c, &v, &r) != OWNER_OK || !v.exists) {
            if (v.exists || attempt >= 4) {
                snprintf(err, errlen, "cannot read the owner blob: %ld %s %s", r.status,
                         r.error_code, r.message);
                break;
            }
        } else {
            m->prev = v.meta;
            /* Name this server at once (what the container holds unchanged): a standby
             * that gave the old owner up and sees a new name does not break this lease
             * too, and the change of ETag refuses a break decided on the old metadata. */
            m->owner = v.meta;
            snprintf(m->owner.url, sizeof m->owner.url, "%s",
                     m->cfg.advertise_url ? m->cfg.advertise_url : "");
            m->owner.since_ms = mx_wall_ms();
            if (m->cfg.advertise_url && mirror_i_publish_sure(m, &m->owner, err, errlen) != 0)
                break;
            if (!v.meta.journal[0]) {
                rc = 0; /* no owner named one (a container of an earlier version, or new) */
                break;
            }
            if (owner_seal(m->c, v.meta.journal, &r) == OWNER_OK) {
                mx_info("mirror: sealed the previous owner's journal", "journal=%s",
                        v.meta.journal);
                rc = 0;
                break;
            }
            if (!blob_result_transient(&r) || attempt >= 4) {
                snprintf(err, errlen, "cannot seal the previous owner's journal %s: %ld %s %s",
                         v.meta.journal, r.status, r.error_code, r.message);
                break;
            }
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    blob_result_free(&r);
    return rc;
}
