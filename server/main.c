/*
 * mutexd: the process. Reads options (flags, else MUTEXD_* environment variables, else
 * defaults), opens the store, starts the actor runtime and the HTTP front, and on
 * SIGTERM or SIGINT shuts down in the order that lets every request be answered:
 * stop accepting, stop the actors (pending requests get 503), drain the store's
 * commits, send the last answers, exit 0.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/resource.h"
#include "actors/resource_actor.h"
#include "actors/runtime.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "http/server.h"
#include "persistence/blob.h"
#include "persistence/mirror.h"
#include "persistence/store.h"
#include "server/ha.h"
#include "server/options.h"
#include "server/probe.h"

struct server {
    struct options opt;
    struct store *store;
    struct mirror *mirror; /* NULL: no blob mirror */
    struct rt *rt;
    struct http *http;
    struct auth *auth; /* NULL: no authorization */
    struct res_domain domain;
    struct ra_ctx actx;
    _Atomic bool recovered;
    struct ha *ha;            /* NULL: not in a server group */
    _Atomic bool forwarding;  /* a standby that knows the active */
    char *const *argv;        /* as given, to start again as a standby when fenced */
    size_t leases;            /* leases in force when the core started */
    struct mirror_copy *copy; /* a standby's warm copy of the container */
    bool copy_ok;             /* it followed the journal at the last look */
    uint64_t copy_said_ns;    /* when a failure to follow was last logged */
};

static bool server_ready(void *ctx, char *why, size_t len, struct mx_buf *details)
{
    struct server *s = ctx;
    if (s->ha) {
        enum ha_role role = ha_role(s->ha);
        mx_buf_printf(details, "\"role\":\"%s\"%s", ha_role_name(role),
                      role == HA_ACTIVE ? "," : "");
        if (role == HA_FENCED) {
            snprintf(why, len, "fenced");
            return false;
        }
        if (role != HA_ACTIVE) {
            if (!atomic_load(&s->forwarding)) {
                snprintf(why, len, "no_active_server");
                return false;
            }
            return true; /* a standby is ready when it can forward */
        }
    }
    if (s->mirror) {
        uint64_t changes, ms;
        mirror_lag(s->mirror, &changes, &ms);
        mx_buf_printf(details, "\"mirror\":{\"mode\":\"%s\",\"lag_changes\":%lu,\"lag_ms\":%lu}",
                      mirror_mode(s->mirror) == MIRROR_SYNC ? "sync" : "async",
                      (unsigned long)changes, (unsigned long)ms);
    }
    if (!atomic_load(&s->recovered)) {
        snprintf(why, len, "recovering");
        return false;
    }
    if (!store_healthy(s->store, why, len))
        return false;
    if (s->mirror && !mirror_ready(s->mirror, why, len))
        return false;
    uint64_t grace = atomic_load(&s->domain.grace_until_ns), now = mx_mono_ns();
    if (grace && now < grace) {
        snprintf(why, len, "restore grace period: no new leases for %lu s",
                 (unsigned long)((grace - now) / 1000000000u + 1));
        return false;
    }
    return true;
}

static const char *write_gate(void *arg)
{
    return mirror_write_gate(arg);
}

/* The HTTP front's hint: requests parked on resources (waiting, watching). */
static long server_parked(void *ctx)
{
    struct server *s = ctx;
    return (long)(atomic_load_explicit(&s->domain.waiters, memory_order_relaxed) +
                  atomic_load_explicit(&s->domain.watchers, memory_order_relaxed));
}

static void server_metrics(void *ctx, struct mx_buf *b)
{
    struct server *s = ctx;
    if (s->ha)
        ha_metrics(s->ha, b);
    if (!s->rt)
        return; /* a standby: its requests are counted by the HTTP front */
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

/* Opens the blob mirror: takes the container, restores into a new store, starts shipping. */
static int open_mirror(struct server *s, char *err, size_t errlen)
{
    struct options *o = &s->opt;
    if (o->mirror_mode == MIRROR_OFF) {
        atomic_store(&s->domain.token_ceiling, UINT64_MAX);
        return 0;
    }
    if (blob_global_init() != 0) {
        snprintf(err, errlen, "cannot initialize libcurl");
        return -1;
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
        .last_token = &s->domain.last_token,
        .token_ceiling = &s->domain.token_ceiling,
    };
    if (mirror_open(&s->mirror, &mc, s->store, err, errlen) != 0)
        return -1;
    struct mirror_restored rs;
    if (mirror_restore(s->mirror, &rs, err, errlen) != 0)
        return -1;
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
                    "grace_ms=%lu", (unsigned long)o->restore_grace_ms);
        }
    }
    atomic_store(&s->domain.token_ceiling, atomic_load(&s->domain.last_token));
    if (mirror_start(s->mirror, rs.restored, err, errlen) != 0)
        return -1;
    s->actx.write_gate = write_gate;
    s->actx.gate_arg = s->mirror;
    return 0;
}

/* Alarms (lease expiries) wait while this many changes wait for the disk: a storm of
 * expiries (a million leases that ran out while the server was down) then goes at the
 * disk's pace, and other requests wait behind one batch of it, not all of it. */
#define ALARM_STORE_BACKLOG 4096

static bool store_behind(void *store)
{
    return store_backlog(store) > ALARM_STORE_BACKLOG;
}

/* Stops what runs behind HTTP, in order: alarms, actors, the mirror's reads, the store,
 * the mirror (which ships what the store committed last). Any of them may not have started. */
static void close_core(struct server *s)
{
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
}

/* Refuses a data directory other users can write (they could replace the store, or read
 * it through a file they planted); warns when they can read it, and makes the store's
 * files that a version before this one created 0644 private. */
static int check_data_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0; /* created 0700 by the store, or refused by it with its own reason */
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen,
                 "the data directory %s is writable by other users (mode %04o): chmod 700 it", dir,
                 (unsigned)(st.st_mode & 07777));
        return -1;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        mx_warn("the data directory is open to other users: the store holds the lease ids, "
                "which are credentials; chmod 700 it",
                "dir=%s mode=%04o", dir, (unsigned)(st.st_mode & 07777));
    static const char *const files[] = {"mutexd.db", "mutexd.db-wal", "mutexd.db-shm", "LOCK"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        struct stat fst;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (lstat(path, &fst) == 0 && S_ISREG(fst.st_mode) && (fst.st_mode & 077) &&
            chmod(path, fst.st_mode & 0700) == 0)
            mx_info("made a store file private", "path=%s mode=%04o", path,
                    (unsigned)(fst.st_mode & 0700));
    }
    return 0;
}

/* Opens the store and starts everything behind HTTP: the mirror (restoring first when the
 * store is new), the actors, the alarms, and the leases in force. On failure returns -1 with
 * what failed and why; close_core() stops what had started. */
static int start_core(struct server *s, char *err, size_t errlen, const char **failed)
{
    int rc;
    struct store_config sc = {
        .dir = s->opt.data_dir,
        .fault_commit_every = s->opt.fault_commit_every,
        .fault_commit_first = s->opt.fault_commit_first,
        .fault_commit_count = s->opt.fault_commit_count,
    };
    if (store_open(&s->store, &sc, err, errlen) != 0) {
        *failed = "cannot open the store";
        return -1;
    }

    prom_hist_init(&s->domain.expiry_lateness, prom_latency_bounds, prom_latency_nbounds, 1e9);
    atomic_init(&s->domain.last_token, store_token_hwm(s->store));
    uint64_t idx = store_index_hwm(s->store), floor = store_index_floor(s->store);
    atomic_init(&s->domain.last_index, idx > floor ? idx : floor);
    s->actx = (struct ra_ctx){.domain = &s->domain, .store = s->store};
    if (open_mirror(s, err, errlen) != 0) {
        *failed = "cannot start the blob mirror";
        return -1;
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
        return -1;
    }
    if ((rc = rt_alarms_start(&s->actx.alarms, s->rt, RA_MSG_ALARM)) != 0) {
        *failed = "cannot start the alarm thread";
        snprintf(err, errlen, "%s", strerror(rc));
        return -1;
    }
    rt_alarms_pace(s->actx.alarms, store_behind, s->store);

    /* Leases in force at the last stop are counted and their expiries set again, each with
     * the time it had left; their resources stay on disk until something asks for them. */
    size_t unset = 0;
    if (ra_restore(&s->actx, &s->leases, &unset) != STORE_OK) {
        *failed = "cannot read the leases in force from the store";
        snprintf(err, errlen, "a read of the store failed");
        return -1;
    }
    if (unset)
        mx_warn("out of memory setting lease expiries; those leases expire when next used",
                "count=%zu", unset);

    return 0;
}

/* ---- the server group (--ha) ----------------------------------------------------- */

#define GROUP_TICK_MS 100

static int render_servers(void *ctx, struct mx_buf *out)
{
    struct server *s = ctx;
    return ha_render_servers(s->ha, out);
}

static int open_group(struct server *s, char *err, size_t errlen, const char **failed)
{
    struct ha_config hc = {
        .advertise_url = s->opt.advertise_url,
        .connection_string = s->opt.blob_connection_string,
        .container = s->opt.blob_container,
        .failover_after_ms = s->opt.failover_after_ms,
    };
    if (blob_global_init() != 0) {
        *failed = "cannot join the server group";
        snprintf(err, errlen, "cannot initialize libcurl");
        return -1;
    }
    if (ha_open(&s->ha, &hc, err, errlen) != 0 ||
        mirror_copy_open(&s->copy, s->opt.blob_connection_string, s->opt.blob_container, err,
                         errlen) != 0) {
        ha_close(s->ha);
        s->ha = NULL;
        blob_global_cleanup();
        *failed = "cannot join the server group";
        return -1;
    }
    return 0;
}

/* A server of a group keeps no store of its own between terms as active: the container is
 * the truth, and it is read again at each takeover. */
static int wipe_store(const char *dir, char *err, size_t errlen)
{
    static const char *const files[] = {"mutexd.db", "mutexd.db-wal", "mutexd.db-shm"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (unlink(path) != 0 && errno != ENOENT) {
            snprintf(err, errlen, "cannot remove %.400s: %s", path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The container is free, or its holder was given up: read it and serve. */
static void take_over(struct server *s)
{
    uint64_t t0 = mx_mono_ns();
    http_set_role(s->http, HTTP_ROLE_HOLD, NULL);
    atomic_store(&s->forwarding, false);
    ha_set_role(s->ha, HA_JOINING);
    char err[512] = "", quoted[1100];
    const char *failed = "cannot clear the data directory";
    /* Leases that ran out while no server was active stay their holders' for a while. */
    atomic_store(&s->domain.failover_at_ms, mx_wall_ms());
    atomic_store(&s->domain.failover_grace_until_ns,
                 mx_mono_ns() + s->opt.failover_grace_ms * MX_NS_PER_MS);
    if (wipe_store(s->opt.data_dir, err, sizeof err) != 0 ||
        start_core(s, err, sizeof err, &failed) != 0) {
        mx_warn("could not take the container; staying a standby", "step=\"%s\" error=%s", failed,
                mx_log_quote(quoted, sizeof quoted, err));
        close_core(s);
        s->store = NULL;
        s->mirror = NULL;
        s->rt = NULL;
        s->actx.alarms = NULL;
        ha_set_role(s->ha, HA_STANDBY);
        return;
    }
    http_set_core(s->http, s->rt, s->store);
    http_set_role(s->http, HTTP_ROLE_SERVE, NULL);
    ha_set_role(s->ha, HA_ACTIVE);
    uint64_t ms = (mx_mono_ns() - t0) / MX_NS_PER_MS;
    ha_count_takeover(s->ha, ms);
    mx_info("serving as the active server", "generation=%lu leases=%zu took_ms=%lu",
            (unsigned long)mirror_generation(s->mirror), s->leases, (unsigned long)ms);
}

/* A standby keeps its copy of the container warm. */
static void follow(struct server *s, const struct ha_view *v)
{
    if (!v->journal[0])
        return;
    char err[512], quoted[1100];
    bool ok = mirror_copy_follow(s->copy, v->generation, v->journal, err, sizeof err) == 0;
    uint64_t now = mx_mono_ns();
    if (!ok && (s->copy_ok || now - s->copy_said_ns > 10000 * MX_NS_PER_MS)) {
        mx_warn("standby: cannot follow the journal; trying again", "error=%s",
                mx_log_quote(quoted, sizeof quoted, err));
        s->copy_said_ns = now;
    }
    s->copy_ok = ok;
}

/* One look at the group. Returns 1 when this server was fenced and must start again. */
static int group_tick(struct server *s)
{
    if (!s->rt) {
        struct ha_view v;
        if (ha_watch(s->ha, &v) == HA_TAKE) {
            take_over(s);
        } else {
            atomic_store(&s->forwarding, v.active[0] != '\0');
            http_set_role(s->http, v.active[0] ? HTTP_ROLE_FORWARD : HTTP_ROLE_HOLD, v.active);
            if (ha_role(s->ha) != HA_STANDBY)
                ha_set_role(s->ha, HA_STANDBY);
            follow(s, &v);
        }
        if (!s->rt) {
            uint64_t changes = 0, ms = 0;
            mirror_copy_lag(s->copy, &changes, &ms);
            ha_heartbeat(s->ha, s->copy_ok, changes, ms);
        }
        return 0;
    }
    if (!mirror_fenced(s->mirror) && !ha_still_owner(s->ha))
        mirror_give_up(s->mirror, "the owner blob names another server");
    if (mirror_fenced(s->mirror)) {
        ha_set_role(s->ha, HA_FENCED);
        http_set_role(s->http, HTTP_ROLE_FENCED, NULL);
        return 1;
    }
    uint64_t changes, ms;
    mirror_lag(s->mirror, &changes, &ms);
    ha_heartbeat(s->ha, true, changes, ms);
    return 0;
}

int main(int argc, char **argv)
{
    struct server s;
    memset(&s, 0, sizeof s);
    /* A fenced server starts itself again with the same arguments (getopt may have
     * reordered them; mutexd takes no operands, so their order does not matter). */
    s.argv = argv;
    int rc = options_parse(&s.opt, argc, argv);
    if (rc >= 0)
        return rc; /* --help, --version, or a bad option (already reported) */
    if (s.opt.probe)
        return probe_main(&s.opt);
    mx_log_set_level((enum mx_log_level)s.opt.log_level);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* every thread started below inherits it */
    signal(SIGPIPE, SIG_IGN);
    /* Every connection is a descriptor: take all the kernel allows this process. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }

    /* Every failure to start goes to `fail` with what failed and why: one way out, which
     * stops whatever had started (close_core() takes any of it not started). */
    char err[512] = "";
    const char *failed = NULL;
    /* The tokens file is read before the store is opened: a bad one leaves no data
     * directory behind. */
    if (s.opt.auth_tokens && auth_open(&s.auth, s.opt.auth_tokens, err, sizeof err) != 0) {
        failed = "cannot read the tokens file";
        goto fail;
    }
    /* The store holds every lease id, which is a lease's credential: whatever the umask,
     * what the server creates is its user's alone (files 0600, directories 0700). */
    umask(077);
    if (check_data_dir(s.opt.data_dir, err, sizeof err) != 0) {
        failed = "refusing the data directory";
        goto fail;
    }
    /* The limits a request is checked against, on every server of a group alike. */
    s.domain.lim = (struct res_limits){
        .min_ttl_ms = s.opt.min_ttl_ms,
        .max_ttl_ms = s.opt.max_ttl_ms,
        .max_wait_ms = s.opt.max_wait_ms,
        .max_waiters = (uint32_t)s.opt.max_waiters,
    };
    if (s.opt.ha ? open_group(&s, err, sizeof err, &failed) != 0
                 : start_core(&s, err, sizeof err, &failed) != 0)
        goto fail;

    struct http_config hc = {
        .auth = s.auth,
        .listen = s.opt.listen,
        .threads = (unsigned)s.opt.http_threads,
        .max_connections = (unsigned)s.opt.max_connections,
        .idle_timeout_ms = s.opt.idle_timeout_ms,
        .tls_cert_file = s.opt.tls_cert,
        .tls_key_file = s.opt.tls_key,
        .tls_priorities = s.opt.tls_priorities,
        .allowed_origins = s.opt.allowed_origins,
        .allowed_hosts = s.opt.allowed_hosts,
        .rt = s.rt,
        .store = s.store,
        .lim = &s.domain.lim,
        .ready = server_ready,
        .metrics = server_metrics,
        .parked = server_parked,
        .forward_timeout_ms = s.opt.forward_timeout_ms,
        .served_by = s.opt.ha ? s.opt.advertise_url : s.opt.fault_served_by,
        .servers = s.opt.ha ? render_servers : NULL,
        .ctx = &s,
        .fault_role = s.opt.fault_role,
        .fault_role_after = s.opt.fault_role_after,
        .fault_role_after_ms = s.opt.fault_role_after_ms,
    };
    if (http_start(&s.http, &hc, err, sizeof err) != 0) {
        failed = "cannot start the HTTP server";
        goto fail;
    }
    atomic_store(&s.recovered, true);
    mx_info("started", "version=%s address=%s data_dir=%s leases=%zu role=%s", MUTEXD_VERSION,
            http_address(s.http), s.opt.data_dir, s.leases,
            s.ha ? ha_role_name(ha_role(s.ha)) : "active");

    int sig = 0;
    bool fenced = false;
    for (;;) {
        if (s.ha) {
            /* A server of a group looks at the group between signals. */
            struct timespec tick = {0, GROUP_TICK_MS * 1000000L};
            sig = sigtimedwait(&set, NULL, &tick);
            if (sig < 0) {
                if (group_tick(&s) != 0) {
                    fenced = true;
                    break;
                }
                continue;
            }
        } else {
            sigwait(&set, &sig);
        }
        if (sig != SIGHUP)
            break;
        char quoted[1100];
        if (!s.auth) {
            mx_info("SIGHUP: no tokens file to reread", NULL);
        } else if ((rc = auth_reload(s.auth, err, sizeof err)) != 0) {
            mx_error(rc == -2 ? "SIGHUP: the tokens file is refused; the old tokens stay in force"
                              : "SIGHUP: the tokens file does not parse; the old tokens stay in "
                                "force",
                     "error=%s", mx_log_quote(quoted, sizeof quoted, err));
        }
    }
    if (fenced)
        mx_warn("another server has taken the container: starting again as a standby", NULL);
    else
        mx_info("shutting down", "signal=%s", sig == SIGTERM ? "TERM" : "INT");
    http_quiesce(s.http);
    close_core(&s);
    http_stop(s.http);
    if (s.ha) {
        ha_close(s.ha);
        mirror_copy_free(s.copy);
        blob_global_cleanup();
    }
    auth_free(s.auth);
    if (fenced) {
        execv("/proc/self/exe", s.argv);
        mx_error("cannot start again", "error=%s", strerror(errno));
        return 1;
    }
    mx_info("stopped", NULL);
    return 0;

fail:;
    char quoted[1100];
    mx_error(failed, "error=%s", mx_log_quote(quoted, sizeof quoted, err));
    fprintf(stderr, "mutexd: %s\n", err);
    close_core(&s);
    if (s.ha) {
        ha_close(s.ha);
        mirror_copy_free(s.copy);
        blob_global_cleanup();
    }
    auth_free(s.auth);
    return 1;
}
