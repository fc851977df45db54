/*
 * A running mirror as others see it (see mirror.h): its mode, generation, whether it is
 * fenced or ready, what gates a write, its lag, and its metrics.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "persistence/mirror_internal.h"

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
        prom_sample(b, "mutexd_mirror_errors_total", m->errors[i].count, "code", m->errors[i].code,
                    NULL);
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
    prom_counter(b, "mutexd_mirror_changes_left_to_snapshot_total",
                 "Changes left out of a full async queue (or a failed allocation), shipped in "
                 "the next snapshot.",
                 atomic_load(&m->left_to_snapshot));
    prom_counter(b, "mutexd_mirror_changes_dropped_total",
                 "Changes never shipped because another server took the container.",
                 atomic_load(&m->dropped));
    prom_gauge(b, "mutexd_mirror_up",
               "1 while the last blob request succeeded and the container is ours.",
               !atomic_load(&m->down) && !atomic_load(&m->fenced) ? 1 : 0);
}
