/*
 * A core (see core.h).
 */
#include "server/core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/events.h"
#include "actors/resource.h"
#include "actors/resource_actor.h"
#include "actors/runtime.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/partition.h"
#include "common/prom.h"
#include "blob/blob.h"
#include "persistence/store.h"

struct core {
    const struct options *opt;                 /* during core_open() only */
    char blob_prefix[MX_PARTITION_PREFIX_MAX]; /* the partition's blobs, or "" */
    char dir[4096];                            /* the store's */
    struct store *store;
    struct mirror *mirror; /* NULL: no blob mirror */
    bool blob_init;        /* blob_global_init() was called for the mirror */
    struct rt *rt;
    struct res_domain domain; /* its `events` is the core's change index and events */
    struct ra_ctx actx;
    size_t leases; /* in force when the core opened */
};

void core_limits(const struct options *o, struct res_limits *out)
{
    *out = (struct res_limits){
        .min_ttl_ms = o->min_ttl_ms,
        .max_ttl_ms = o->max_ttl_ms,
        .max_wait_ms = o->max_wait_ms,
        .max_waiters = (uint32_t)o->max_waiters,
        .max_holders = (uint32_t)o->max_holders,
    };
}

void core_data_dir(const struct options *o, unsigned p, unsigned partitions, char *out, size_t len)
{
    if (partitions > 1)
        snprintf(out, len, "%s/p%03u", o->data_dir, p);
    else
        snprintf(out, len, "%s", o->data_dir);
}

static const char *write_gate(void *arg)
{
    return mirror_write_gate(arg);
}

/* Opens the blob mirror: takes the container, restores into a new store, starts shipping. */
static enum core_rc open_mirror(struct core *s, struct mirror_copy *warm, bool *restored, char *err,
                                size_t errlen)
{
    const struct options *o = s->opt;
    if (o->mirror_mode == MIRROR_OFF) {
        atomic_store(&s->domain.token_ceiling, UINT64_MAX);
        return CORE_OK;
    }
    if (blob_global_init() != 0) {
        snprintf(err, errlen, "cannot initialize libcurl");
        return CORE_FAILED;
    }
    s->blob_init = true;
    struct mirror_config mc = {
        .connection_string = o->blob_connection_string,
        .container = o->blob_container,
        .blob_prefix = s->blob_prefix,
        .data_dir = s->dir,
        .mode = (enum mirror_mode)o->mirror_mode,
        .snapshot_every_changes = o->snapshot_every_changes,
        .snapshot_every_ms = o->snapshot_every_ms,
        /* In a group, a server takes the container only when it is free: one attempt. */
        .takeover_wait_ms = o->ha ? 1 : o->mirror_takeover_ms,
        .advertise_url = o->ha ? o->advertise_url : NULL,
        .warm = warm,
        .fault_append_pause_ms = o->fault_append_pause_ms,
        .queue_max = o->fault_mirror_queue_max,
        .token_block = 100000ull * (s->domain.token_stride ? s->domain.token_stride : 1),
        .last_token = &s->domain.last_token,
        .token_ceiling = &s->domain.token_ceiling,
    };
    int orc = mirror_open(&s->mirror, &mc, s->store, err, errlen);
    if (orc != 0)
        return orc == MIRROR_HELD ? CORE_HELD : CORE_FAILED;
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

void core_close(struct core *s)
{
    if (!s)
        return;
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
    if (s->mirror)
        mirror_close(s->mirror);
    if (s->blob_init)
        blob_global_cleanup();
    ev_close(s->domain.events); /* after the actors: no change is recorded any more */
    free(s);
}

static enum core_rc open_all(struct core *s, const struct core_config *cfg, char *err,
                             size_t errlen, const char **failed);

enum core_rc core_open(struct core **out, const struct core_config *cfg, char *err, size_t errlen,
                       const char **failed)
{
    *out = NULL;
    struct core *s = calloc(1, sizeof *s);
    if (!s) {
        *failed = "cannot open the store";
        snprintf(err, errlen, "out of memory");
        return CORE_FAILED;
    }
    s->opt = cfg->opt;
    mx_partition_prefix(cfg->partition, cfg->partitions, s->blob_prefix);
    core_data_dir(cfg->opt, cfg->partition, cfg->partitions, s->dir, sizeof s->dir);
    if (cfg->partitions > 1) {
        s->domain.token_stride = MX_PARTITIONS_MAX;
        s->domain.token_offset = cfg->partition;
    }
    enum core_rc crc = open_all(s, cfg, err, errlen, failed);
    if (crc != CORE_OK) {
        core_close(s); /* nothing is left half-set */
        return crc;
    }
    s->opt = NULL;
    *out = s;
    return CORE_OK;
}

static enum core_rc open_all(struct core *s, const struct core_config *cfg, char *err,
                             size_t errlen, const char **failed)
{
    int rc;
    enum core_rc crc;
    const struct options *o = cfg->opt;
    core_limits(o, &s->domain.lim);
    struct store_config sc = {
        .dir = s->dir,
        .fault_commit_every = o->fault_commit_every,
        .fault_commit_first = o->fault_commit_first,
        .fault_commit_count = o->fault_commit_count,
    };
    if (store_open(&s->store, &sc, err, errlen) != 0) {
        *failed = "cannot open the store";
        return CORE_FAILED;
    }

    res_domain_init(&s->domain);
    /* The change index and the recent events of this data set, from the state read now. */
    if (ev_open(&s->domain.events, (uint32_t)o->event_history, &s->domain.last_index) != 0) {
        *failed = "cannot start the event log";
        snprintf(err, errlen, "out of memory or threads");
        return CORE_FAILED;
    }
    atomic_init(&s->domain.last_token, store_token_hwm(s->store));
    uint64_t idx = store_index_hwm(s->store), floor = store_index_floor(s->store);
    atomic_store(&s->domain.last_index, idx > floor ? idx : floor);
    s->actx = (struct ra_ctx){.domain = &s->domain, .store = s->store};
    bool restored = false;
    if ((crc = open_mirror(s, cfg->warm, &restored, err, errlen)) != CORE_OK) {
        *failed = "cannot start the blob mirror";
        return crc;
    }

    struct rt_config rc_cfg = {
        .behavior = &ra_behavior,
        .ctx = &s->actx,
        .workers = (unsigned)o->threads,
        .max_actors = o->max_actors,
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
    if (restored && store_rearm(s->store, mx_lease_ms(), o->failover_grace_ms, &rearmed, err,
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
    return CORE_OK;
}

void core_hand_to(struct core *c, const char *url)
{
    if (c->mirror)
        mirror_hand_to(c->mirror, url);
}

void core_set_stop_reason(struct core *c, const char *reason)
{
    atomic_store(&c->domain.stop_reason, reason);
}

struct mirror *core_mirror(struct core *c)
{
    return c->mirror;
}

size_t core_leases(const struct core *c)
{
    return c->leases;
}

bool core_healthy(struct core *c, char *why, size_t len)
{
    return store_healthy(c->store, why, len);
}

/* /readyz: the store commits, the mirror keeps up, no restore grace period. */
static bool core_ready(void *ctx, char *why, size_t len, struct mx_buf *details)
{
    struct core *s = ctx;
    if (s->mirror) {
        uint64_t changes, ms;
        mirror_lag(s->mirror, &changes, &ms);
        mx_buf_printf(details,
                      "\"mirror\":{\"mode\":\"%s\",\"lag_changes\":%" PRIu64 ",\"lag_ms\":%" PRIu64
                      "}",
                      mirror_mode(s->mirror) == MIRROR_SYNC ? "sync" : "async", changes, ms);
    }
    if (!store_healthy(s->store, why, len))
        return false;
    if (s->mirror && !mirror_ready(s->mirror, why, len))
        return false;
    uint64_t grace = atomic_load(&s->domain.grace_until_ns), now = mx_mono_ns();
    if (grace && now < grace) {
        snprintf(why, len, "restore grace period: no new leases for %" PRIu64 " s",
                 ((grace - now) / 1000000000u + 1));
        return false;
    }
    return true;
}

/* The HTTP front's hint: requests parked on resources (waiting, watching). */
static long core_parked(void *ctx)
{
    struct core *s = ctx;
    return (long)(atomic_load_explicit(&s->domain.waiters, memory_order_relaxed) +
                  atomic_load_explicit(&s->domain.watchers, memory_order_relaxed) +
                  ev_waiting(s->domain.events));
}

static void core_metrics(void *ctx, struct mx_buf *b)
{
    struct core *s = ctx;
    struct res_domain *d = &s->domain;
    struct rt_stats st;
    rt_get_stats(s->rt, &st);

    res_domain_metrics(d, b);
    prom_gauge(b, "mutexd_actors_active", "Resource actors in memory.", st.active);
    prom_header(
        b, "mutexd_lease_alarms", "gauge",
        "Lease expiries set as alarms (every lease in force, its resource in memory or not).");
    mx_buf_printf(b, "mutexd_lease_alarms %zu\n", rt_alarms_count(s->actx.alarms));
    prom_counter(b, "mutexd_actor_activations_total", "Actors activated.", st.activations);
    prom_counter(b, "mutexd_actor_deactivations_total", "Idle actors deactivated.",
                 st.deactivations);
    prom_counter(b, "mutexd_actor_messages_total", "Messages handled by actors.", st.messages);
    prom_gauge(b, "mutexd_actor_run_queue", "Actors waiting for a worker thread.", st.run_queue);
    prom_counter(b, "mutexd_actor_mailbox_refused_total",
                 "Messages refused because a mailbox was full.", st.mailbox_refused);

    store_metrics(s->store, b);
    if (s->mirror)
        mirror_metrics(s->mirror, b);
}

void core_front(struct core *c, struct http_core *out)
{
    *out = (struct http_core){
        .rt = c->rt,
        .store = c->store,
        .events = c->domain.events,
        .domain = &c->domain,
        .ctx = c,
        .ready = core_ready,
        .metrics = core_metrics,
        .parked = core_parked,
    };
}
