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
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "server/core.h"
#include "server/group.h"
#include "server/join.h"
#include "server/layout.h"
#include "server/notify.h"
#include "server/partitions.h"
#include "server/probe.h"

/* The process: its options, and what it serves with. */
struct server {
    struct options opt;
    struct http *http;
    struct auth *auth;     /* NULL: no authorization */
    struct res_limits lim; /* what a request is checked against */
    struct core *core;     /* a lone server's (NULL in a group: the group holds it) */
    struct group *group;   /* NULL: not in a server group, or partitioned */
    struct partitions *ps; /* NULL: not a partitioned group (--partitions 1) */
    struct join *join;     /* a server of a group (--ha): its join, which s.group or s.ps is
                            * once joined; the front's callbacks go through it */
};

/* The group joined (or partitions) are handed the front. */
static void attach(struct server *s)
{
    if (s->group)
        group_attach(s->group, s->http);
    if (s->ps)
        partitions_attach(s->ps, s->http);
}

/* The service manager is told what /readyz would answer, and whether the server is healthy:
 * the store commits (a store whose commits keep failing, a full or failed disk, stops the
 * watchdog's pings; a standby has no store). Main thread. */
static void server_notify(struct server *s, struct notify *n)
{
    char why[256] = "", sick[256] = "", status[600];
    struct mx_buf details = {0};
    bool ready = http_ready(s->http, why, sizeof why, &details);
    mx_buf_free(&details);
    struct core *c = s->group ? group_core(s->group) : s->core;
    bool healthy = s->ps ? partitions_healthy(s->ps, sick, sizeof sick)
                         : !c || core_healthy(c, sick, sizeof sick);
    const char *role = s->group ? group_role(s->group)
                       : s->ps  ? (partitions_owned(s->ps) ? "active" : "standby")
                                : NULL;
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

/* The partition count of the container (layout_check()), tried for up to 30 s while the
 * blob store does not answer. */
static enum layout_rc settle_layout(const struct options *opt, unsigned *found, char *err,
                                    size_t errlen)
{
    uint64_t until = mx_mono_ns() + 30000 * MX_NS_PER_MS;
    enum layout_rc rc;
    while ((rc = layout_check(opt, found, err, errlen)) == LAYOUT_AGAIN && mx_mono_ns() < until) {
        char quoted[600];
        mx_warn("cannot read the group's partition count; trying again", "error=%s",
                mx_log_quote(quoted, sizeof quoted, err));
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct server s;
    memset(&s, 0, sizeof s);
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
     * stops whatever had started (core_close() and group_close() take NULL). */
    char err[512] = "";
    const char *failed = NULL;
    /* The tokens file is read before the store is opened: a bad one leaves no data
     * directory behind. */
    if (s.opt.auth_tokens &&
        auth_open(&s.auth, s.opt.auth_tokens, err, sizeof err) != AUTH_FILE_OK) {
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
    core_limits(&s.opt, &s.lim);
    struct http_core front; /* a lone server's core, served from the first request */
    struct core_config cc = {.opt = &s.opt};
    struct group_config gc = {.opt = &s.opt, .partition = 0, .partitions = 1};
    struct partitions_config pc = {.opt = &s.opt, .count = (unsigned)s.opt.partitions};
    if (s.opt.ha) {
        /* A server of a group joins it: its partition count (written by the container's
         * first server: another is refused), then its group or partitions. Tried once
         * now; a blob store that does not answer yet is tried again from the loop below,
         * the front answering meanwhile (server/join.h). */
        if (!(s.join = join_new(&gc, &pc))) {
            failed = "cannot join the server group";
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        enum join_rc jr = join_try(s.join, mx_mono_ns(), err, sizeof err, &failed);
        if (jr == JOIN_MISMATCH) {
            fprintf(stderr, "mutexd: %s\n", err);
            join_free(s.join);
            auth_free(s.auth);
            return 2;
        }
        if (jr == JOIN_FAILED)
            goto fail;
        s.group = join_group(s.join);
        s.ps = join_partitions(s.join);
    } else {
        if (s.opt.mirror_mode != MIRROR_OFF) {
            /* A lone server with a mirror checks the count too: on a partitioned group's
             * container it would take the container's own owner blob beside the group. */
            unsigned found = 0;
            enum layout_rc lr = settle_layout(&s.opt, &found, err, sizeof err);
            if (lr == LAYOUT_MISMATCH) {
                fprintf(stderr, "mutexd: %s\n", err);
                auth_free(s.auth);
                return 2;
            }
            if (lr != LAYOUT_OK) {
                failed = "cannot start the blob mirror";
                goto fail;
            }
        }
        if (core_open(&s.core, &cc, err, sizeof err, &failed) != CORE_OK)
            goto fail;
        core_front(s.core, &front);
    }

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
        .lim = &s.lim,
        .core = s.core ? &front : NULL,
        .partitions = s.opt.ha ? pc.count : 1,
        .ready = s.join ? join_ready : NULL,
        .metrics = s.join ? join_metrics : NULL,
        .forward_timeout_ms = s.opt.forward_timeout_ms,
        .served_by = s.opt.ha ? s.opt.advertise_url : s.opt.fault_served_by,
        .servers = s.join ? join_render_servers : NULL,
        .ctx = s.join,
        .fault_role = s.opt.fault_role,
        .fault_role_after = s.opt.fault_role_after,
        .fault_role_after_ms = s.opt.fault_role_after_ms,
    };
    if (http_start(&s.http, &hc, err, sizeof err) != 0) {
        failed = "cannot start the HTTP server";
        goto fail;
    }
    attach(&s);
    mx_info("started", "version=%s address=%s data_dir=%s leases=%zu role=%s partitions=%u",
            MUTEXD_VERSION, http_address(s.http), s.opt.data_dir,
            s.core ? core_leases(s.core) : (size_t)0,
            s.group  ? group_role(s.group)
            : s.ps   ? "standby"
            : s.join ? "joining"
                     : "active",
            pc.count);

    int sig = 0;
    bool fenced = false;
    int refused = 0; /* the join, tried again, was refused: the exit status */
    uint64_t group_at = s.join ? mx_mono_ns() + GROUP_TICK_MS * MX_NS_PER_MS : 0;
    uint64_t leave_by = 0; /* leaving: the partitions have moved, or this time has come */
    for (;;) {
        /* A server of a group looks at the group between signals, and the service manager
         * (if any) is told how the server is when it is due. */
        if (group_at && mx_mono_ns() >= group_at) {
            uint64_t due = join_due(s.join);
            if (due && mx_mono_ns() >= due) {
                enum join_rc jr = join_try(s.join, mx_mono_ns(), err, sizeof err, &failed);
                if (jr == JOIN_MISMATCH || jr == JOIN_FAILED) {
                    refused = jr == JOIN_MISMATCH ? 2 : 1;
                    break;
                }
                s.group = join_group(s.join);
                s.ps = join_partitions(s.join);
                attach(&s);
            }
            if (s.group && group_tick(s.group) != 0) {
                fenced = true;
                break;
            }
            if (s.ps)
                partitions_tick(s.ps);
            if (leave_by && partitions_left(s.ps))
                break;
            if (leave_by && mx_mono_ns() >= leave_by) {
                mx_warn("leaving: not every partition was taken in time", NULL);
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
        if (sig != SIGHUP && s.ps && !leave_by) {
            /* Partitions move by handover before the server stops; its requests meanwhile
             * are forwarded to their new owners. */
            mx_info("leaving the group: moving the partitions", "signal=%s",
                    sig == SIGTERM ? "TERM" : "INT");
            notify_stopping(&notify, "stopping: moving the partitions to the other servers");
            partitions_leave(s.ps);
            leave_by = mx_mono_ns() + 2 * s.opt.failover_after_ms * MX_NS_PER_MS;
            continue;
        }
        if (sig != SIGHUP)
            break;
        notify_reloading(&notify, mx_mono_ns(), "reloading: rereading the tokens file");
        char quoted[1100];
        enum auth_file reload;
        if (!s.auth) {
            mx_info("SIGHUP: no tokens file to reread", NULL);
        } else if ((reload = auth_reload(s.auth, err, sizeof err)) != AUTH_FILE_OK) {
            mx_error(reload == AUTH_FILE_REFUSED
                         ? "SIGHUP: the tokens file is refused; the old tokens stay in force"
                         : "SIGHUP: the tokens file does not parse; the old tokens stay in "
                           "force",
                     "error=%s", mx_log_quote(quoted, sizeof quoted, err));
        }
        notify_reloaded(&notify, mx_mono_ns());
    }
    if (refused) {
        char quoted[1100];
        if (refused == 1)
            mx_error(failed, "error=%s", mx_log_quote(quoted, sizeof quoted, err));
        fprintf(stderr, "mutexd: %s\n", err);
        notify_status(&notify, "failed: cannot join the server group");
    } else if (fenced) {
        mx_warn("another server has taken the container: starting again as a standby", NULL);
        notify_status(&notify, "fenced: starting again as a standby");
    } else {
        mx_info("shutting down", "signal=%s", sig == SIGTERM ? "TERM" : "INT");
        notify_stopping(&notify, "stopping: answering the requests in flight");
    }
    http_quiesce(s.http);
    if (s.core)
        http_set_core(s.http, 0, NULL);
    core_close(s.core);
    group_close(s.group); /* takes its core back and closes it first */
    partitions_close(s.ps);
    http_stop(s.http);
    join_free(s.join);
    auth_free(s.auth);
    if (refused)
        return refused;
    if (fenced) {
        /* The same arguments (getopt may have reordered them; mutexd takes no operands, so
         * their order does not matter). */
        execv("/proc/self/exe", argv);
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
    core_close(s.core);
    group_close(s.group);
    partitions_close(s.ps);
    join_free(s.join);
    auth_free(s.auth);
    return 1;
}
