/*
 * mutexd: the process. Reads options (flags, else MUTEXD_* environment variables, else
 * defaults), opens the store, starts the actor runtime and the HTTP front, and on
 * SIGTERM or SIGINT shuts down in the order that lets every request be answered:
 * stop accepting, stop the actors (pending requests get 503), drain the store's
 * commits, send the last answers, exit 0. Under systemd it tells the service manager
 * when it is ready and, while healthy, pings its watchdog (server/notify.c).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "server/core.h"
#include "server/group.h"
#include "server/notify.h"
#include "server/probe.h"

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
        mx_buf_printf(details,
                      "\"mirror\":{\"mode\":\"%s\",\"lag_changes\":%" PRIu64 ",\"lag_ms\":%" PRIu64
                      "}",
                      mirror_mode(s->mirror) == MIRROR_SYNC ? "sync" : "async", changes, ms);
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
        snprintf(why, len, "restore grace period: no new leases for %" PRIu64 " s",
                 ((grace - now) / 1000000000u + 1));
        return false;
    }
    return true;
}

/* The service manager is told what /readyz would answer, and whether the server is healthy:
 * the store commits (a store whose commits keep failing, a full or failed disk, stops the
 * watchdog's pings; a standby has no store). Main thread. */
static void server_notify(struct server *s, struct notify *n)
{
    char why[256] = "", sick[256] = "", status[600];
    struct mx_buf details = {0};
    bool ready = server_ready(s, why, sizeof why, &details);
    mx_buf_free(&details);
    bool healthy = !s->store || store_healthy(s->store, sick, sizeof sick);
    const char *role = s->ha ? ha_role_name(ha_role(s->ha)) : NULL;
    if (!healthy)
        snprintf(status, sizeof status, "unhealthy: the store fails: %s", sick);
    else if (!ready)
        snprintf(status, sizeof status, "not ready: %s", why);
    else
        snprintf(status, sizeof status, "ready%s%s%s on %s", role ? " (" : "", role ? role : "",
                 role ? ")" : "", http_address(s->http));
    notify_state(n, mx_mono_ns(), ready, healthy, status);
}

/* Waits for a signal of `set` until `deadline_ns` (mono ns; 0: no deadline). Returns the
 * signal, or 0 when the deadline passed first. */
static int wait_signal(const sigset_t *set, uint64_t deadline_ns)
{
    int sig = 0;
    if (!deadline_ns) {
        sigwait(set, &sig);
        return sig;
    }
    uint64_t now = mx_mono_ns(), left = deadline_ns > now ? deadline_ns - now : 0;
    struct timespec ts = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
    sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

/* The HTTP front's hint: requests parked on resources (waiting, watching). */
static long server_parked(void *ctx)
{
    struct server *s = ctx;
    /* Acquire: the domain was set up before the core was published. */
    if (!atomic_load_explicit(&s->core_published, memory_order_acquire))
        return 0;
    return (long)(atomic_load_explicit(&s->domain.waiters, memory_order_relaxed) +
                  atomic_load_explicit(&s->domain.watchers, memory_order_relaxed) +
                  (s->domain.events ? ev_waiting(s->domain.events) : 0));
}

static void core_metrics(struct server *s, struct mx_buf *b);

/* HTTP threads. Without a core (a standby), the HTTP front counts its requests itself. */
static void server_metrics(void *ctx, struct mx_buf *b)
{
    struct server *s = ctx;
    if (s->ha) {
        ha_metrics(s->ha, b);
        group_metrics(s, b);
    }
    pthread_mutex_lock(&s->core_lock);
    if (atomic_load_explicit(&s->core_published, memory_order_relaxed))
        core_metrics(s, b);
    pthread_mutex_unlock(&s->core_lock);
}

/* The core's figures; core_lock held, the core published. */
static void core_metrics(struct server *s, struct mx_buf *b)
{
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

int main(int argc, char **argv)
{
    struct server s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.core_lock, NULL);
    /* A fenced server starts itself again with the same arguments (getopt may have
     * reordered them; mutexd takes no operands, so their order does not matter). */
    s.argv = argv;
    int rc = options_parse(&s.opt, argc, argv);
    if (rc >= 0)
        return rc; /* --help, --version, or a bad option (already reported) */
    if (s.opt.probe)
        return probe_main(&s.opt);
    mx_log_set_level((enum mx_log_level)s.opt.log_level);
    struct notify notify;
    notify_init(&notify, mx_mono_ns());

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
        .max_holders = (uint32_t)s.opt.max_holders,
    };
    /* The change index and the recent events, for the process's life: a new start of the
     * core (a takeover) forgets the events, not the log. */
    if (ev_open(&s.domain.events, (uint32_t)s.opt.event_history, &s.domain.last_index) != 0) {
        failed = "cannot start the event log";
        snprintf(err, sizeof err, "out of memory or threads");
        goto fail;
    }
    if (s.opt.ha ? group_open(&s, err, sizeof err, &failed) != 0
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
        .ui = s.opt.ui,
        .rt = s.rt,
        .store = s.store,
        .events = s.domain.events,
        .lim = &s.domain.lim,
        .ready = server_ready,
        .metrics = server_metrics,
        .parked = server_parked,
        .forward_timeout_ms = s.opt.forward_timeout_ms,
        .served_by = s.opt.ha ? s.opt.advertise_url : s.opt.fault_served_by,
        .servers = s.opt.ha ? group_render_servers : NULL,
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
    uint64_t group_at = s.ha ? mx_mono_ns() + GROUP_TICK_MS * MX_NS_PER_MS : 0;
    for (;;) {
        /* A server of a group looks at the group between signals, and the service manager
         * (if any) is told how the server is when it is due. */
        if (s.ha && mx_mono_ns() >= group_at) {
            if (group_tick(&s) != 0) {
                fenced = true;
                break;
            }
            group_at = mx_mono_ns() + GROUP_TICK_MS * MX_NS_PER_MS;
        }
        uint64_t notify_at = notify_next_ns(&notify);
        if (notify_at && mx_mono_ns() >= notify_at) {
            server_notify(&s, &notify);
            notify_at = notify_next_ns(&notify);
        }
        uint64_t deadline = notify_at;
        if (group_at && (!deadline || group_at < deadline))
            deadline = group_at;
        if ((sig = wait_signal(&set, deadline)) == 0)
            continue;
        if (sig != SIGHUP)
            break;
        notify_reloading(&notify, mx_mono_ns(), "reloading: rereading the tokens file");
        char quoted[1100];
        if (!s.auth) {
            mx_info("SIGHUP: no tokens file to reread", NULL);
        } else if ((rc = auth_reload(s.auth, err, sizeof err)) != 0) {
            mx_error(rc == -2 ? "SIGHUP: the tokens file is refused; the old tokens stay in force"
                              : "SIGHUP: the tokens file does not parse; the old tokens stay in "
                                "force",
                     "error=%s", mx_log_quote(quoted, sizeof quoted, err));
        }
        notify_reloaded(&notify, mx_mono_ns());
    }
    if (fenced) {
        mx_warn("another server has taken the container: starting again as a standby", NULL);
        notify_status(&notify, "fenced: starting again as a standby");
    } else {
        mx_info("shutting down", "signal=%s", sig == SIGTERM ? "TERM" : "INT");
        notify_stopping(&notify, "stopping: answering the requests in flight");
    }
    http_quiesce(s.http);
    close_core(&s);
    http_stop(s.http);
    group_close(&s);
    ev_close(s.domain.events);
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
    char status[700];
    snprintf(status, sizeof status, "failed: %s: %s", failed, err);
    notify_status(&notify, status);
    close_core(&s);
    group_close(&s);
    ev_close(s.domain.events);
    auth_free(s.auth);
    return 1;
}
