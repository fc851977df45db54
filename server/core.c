/*
 * The server's core (see core.h).
 */
#include "server/core.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "blob/blob.h"

static const char *write_gate(void *arg)
{
    return mirror_write_gate(arg);
}

/* Opens the blob mirror: takes the container, restores into a new store, starts shipping. */
static enum core_rc open_mirror(struct server *s, bool *restored, char *err, size_t errlen)
{
    struct options *o = &s->opt;
    if (o->mirror_mode == MIRROR_OFF) {
        atomic_store(&s->domain.token_ceiling, UINT64_MAX);
        return CORE_OK;
    }
    if (blob_global_init() != 0) {
        snprintf(err, errlen, "cannot initialize libcurl");
        return CORE_FAILED;
    }
    struct mirror_config mc = {
        .connection_string = o->blob_connection_string,
        .container = o->blob_container,
        .data_dir = o->data_dir,
        .mode = (enum mirror_mode)o->mirror_mode,
        .snapshot_every_changes = o->snapshot_every_changes,
        .snapshot_every_ms = o->snapshot_every_ms,
        /* In a group, a server takes the container only when it is free: one attempt. */
        .takeover_wait_ms = o->ha ? 1 : o->mirror_takeover_ms,
        .advertise_url = o->ha ? o->advertise_url : NULL,
        .warm = s->copy,
        .fault_append_pause_ms = o->fault_append_pause_ms,
        .queue_max = o->fault_mirror_queue_max,
        .last_token = &s->domain.last_token,
        .token_ceiling = &s->domain.token_ceiling,
    };
    if (mirror_open(&s->mirror, &mc, s->store, err, errlen) != 0)
        return CORE_FAILED;
    struct mirror_restored rs;
    enum mirror_read rrc = mirror_restore(s->mirror, &rs, err, errlen);
    if (rrc != MIRROR_READ_OK)
        return rrc == MIRROR_READ_UNDECODABLE ? CORE_BLOCKED : CORE_FAILED;
    *restored = rs.restored;
    if (rs.restored) {
        atomic_store(&s->domain.last_token, store_token_hwm(s->store));
        uint64_t idx = store_index_hwm(s->store), floor = store_index_floor(s->store);
        atomic_store(&s->domain.last_index, idx > floor ? idx : floor);
        if (rs.may_lag && o->restore_grace_ms) {
            /* An async mirror may miss the last grants: let every lease it may miss run
             * out before anyone else can be granted its resource. */
            atomic_store(&s->domain.grace_until_ns,
                         mx_mono_ns() + o->restore_grace_ms * MX_NS_PER_MS);
            mx_warn("restored from an async mirror: no new leases during the grace period",
                    "grace_ms=%" PRIu64, o->restore_grace_ms);
        }
    }
    atomic_store(&s->domain.token_ceiling, atomic_load(&s->domain.last_token));
    if (mirror_start(s->mirror, rs.restored, err, errlen) != 0)
        return CORE_FAILED;
    s->actx.write_gate = write_gate;
    s->actx.gate_arg = s->mirror;
    return CORE_OK;
}

/* Alarms (lease expiries) wait while this many changes wait for the disk: a storm of
 * expiries (a million leases that ran out while the server was down) then goes at the
 * disk's pace, and other requests wait behind one batch of it, not all of it. */
#define ALARM_STORE_BACKLOG 4096

static bool store_behind(void *store)
{
    return store_backlog(store) > ALARM_STORE_BACKLOG;
}

void close_core(struct server *s)
{
    pthread_mutex_lock(&s->core_lock);
    atomic_store_explicit(&s->core_published, false, memory_order_release);
    pthread_mutex_unlock(&s->core_lock);
    if (s->actx.alarms)
        rt_alarms_stop(s->actx.alarms); /* no alarm is sent to a stopping runtime */
    if (s->rt)
        rt_shutdown(s->rt);
    if (s->actx.alarms)
        rt_alarms_free(s->actx.alarms);
    if (s->mirror)
        mirror_detach(s->mirror);
    if (s->store)
        store_close(s->store);
    if (s->mirror) {
        mirror_close(s->mirror);
        blob_global_cleanup();
    }
    s->store = NULL;
    s->mirror = NULL;
    s->rt = NULL;
    s->actx.alarms = NULL;
}

enum core_rc start_core(struct server *s, char *err, size_t errlen, const char **failed)
{
    int rc;
    enum core_rc crc;
    struct store_config sc = {
        .dir = s->opt.data_dir,
        .fault_commit_every = s->opt.fault_commit_every,
        .fault_commit_first = s->opt.fault_commit_first,
        .fault_commit_count = s->opt.fault_commit_count,
    };
    if (store_open(&s->store, &sc, err, errlen) != 0) {
        *failed = "cannot open the store";
        return CORE_FAILED;
    }

    res_domain_init(&s->domain);
    if (s->domain.events)
        ev_reset(s->domain.events); /* events start afresh with the state read now */
    atomic_init(&s->domain.last_token, store_token_hwm(s->store));
    uint64_t idx = store_index_hwm(s->store), floor = store_index_floor(s->store);
    atomic_store(&s->domain.last_index, idx > floor ? idx : floor);
    s->actx = (struct ra_ctx){.domain = &s->domain, .store = s->store};
    bool restored = false;
    if ((crc = open_mirror(s, &restored, err, errlen)) != CORE_OK) {
        *failed = "cannot start the blob mirror";
        return crc;
    }

    struct rt_config rc_cfg = {
        .behavior = &ra_behavior,
        .ctx = &s->actx,
        .workers = (unsigned)s->opt.threads,
        .max_actors = s->opt.max_actors,
        .barrier_passed = ra_barrier_passed,
    };
    if ((rc = rt_start(&s->rt, &rc_cfg)) != 0) {
        *failed = "cannot start the actor runtime";
        snprintf(err, errlen, "%s", strerror(rc));
        return CORE_FAILED;
    }
    if ((rc = rt_alarms_start(&s->actx.alarms, s->rt, RA_MSG_ALARM)) != 0) {
        *failed = "cannot start the alarm thread";
        snprintf(err, errlen, "%s", strerror(rc));
        return CORE_FAILED;
    }
    rt_alarms_pace(s->actx.alarms, store_behind, s->store);

    /* Leases read from the container get their TTL again now, when this server is about to
     * serve them, not when it read them: the failover grace counts from here, however long
     * the first snapshot and the token reservation took. */
    uint64_t rearmed = 0;
    if (restored && store_rearm(s->store, mx_lease_ms(), s->opt.failover_grace_ms, &rearmed, err,
                                errlen) != STORE_OK) {
        *failed = "cannot re-arm the leases read from the container";
        return CORE_FAILED;
    }
    /* Leases in force at the last stop are counted and their expiries set again, each with
     * the time it had left; their resources stay on disk until something asks for them. */
    size_t unset = 0;
    if (ra_restore(&s->actx, &s->leases, &unset) != STORE_OK) {
        *failed = "cannot read the leases in force from the store";
        snprintf(err, errlen, "a read of the store failed");
        return CORE_FAILED;
    }
    if (unset)
        mx_warn("out of memory setting lease expiries; those leases expire when next used",
                "count=%zu", unset);

    pthread_mutex_lock(&s->core_lock);
    atomic_store_explicit(&s->core_published, true, memory_order_release);
    pthread_mutex_unlock(&s->core_lock);
    return CORE_OK;
}
