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
#include "server/node.h"
#include "server/notify.h"
#include "server/probe.h"

/* The process: its options, and what it serves with. */
struct server {
    struct options opt;
    struct http *http;
    struct auth *auth;     /* NULL: no authorization */
    struct res_limits lim; /* what a request is checked against */
    struct node *node;     /* alone, a group or partitions (server/node.h) */
    struct notify notify;
    sigset_t signals;
};

/* The service manager is told what /readyz would answer, and whether the server is healthy:
 * the store commits (a store whose commits keep failing, a full or failed disk, stops the
 * watchdog's pings; a standby has no store). Main thread. */
static void server_notify(struct server *s)
{
    char why[256] = "", sick[256] = "", status[600];
    struct mx_buf details = {0};
    bool ready = http_ready(s->http, why, sizeof why, &details);
    mx_buf_free(&details);
    bool healthy = node_healthy(s->node, sick, sizeof sick);
    const char *role = node_role(s->node, false);
    if (!healthy)
        snprintf(status, sizeof status, "unhealthy: the store fails: %s", sick);
    else if (!ready)
        snprintf(status, sizeof status, "not ready: %s", why);
    else
        snprintf(status, sizeof status, "ready%s%s%s on %s", role ? " (" : "", role ? role : "",
                 role ? ")" : "", http_address(s->http));
    notify_state(&s->notify, mx_mono_ns(), ready, healthy, status);
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

/* SIGHUP: the tokens file is read again; a bad one leaves the old tokens in force. */
static void reload_tokens(struct server *s)
{
    char err[512] = "", quoted[1100];
    enum auth_file reload;
    notify_reloading(&s->notify, mx_mono_ns(), "reloading: rereading the tokens file");
    if (!s->auth) {
        mx_info("SIGHUP: no tokens file to reread", NULL);
    } else if ((reload = auth_reload(s->auth, err, sizeof err)) != AUTH_FILE_OK) {
        mx_error(reload == AUTH_FILE_REFUSED
                     ? "SIGHUP: the tokens file is refused; the old tokens stay in force"
                     : "SIGHUP: the tokens file does not parse; the old tokens stay in force",
                 "error=%s", mx_log_quote(quoted, sizeof quoted, err));
    }
    notify_reloaded(&s->notify, mx_mono_ns());
}

/* Signals block every thread started after this; every connection is a descriptor, so the
 * process takes all the kernel allows. */
static void process_setup(struct server *s)
{
    sigemptyset(&s->signals);
    sigaddset(&s->signals, SIGINT);
    sigaddset(&s->signals, SIGTERM);
    sigaddset(&s->signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &s->signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
}

/* Opens the tokens file (before the store: a bad one leaves no data directory behind), the
 * node and the front. Returns -1, else the exit status with `failed` and `err` set, or
 * with both NULL when the message was written. */
static int start(struct server *s, char *err, size_t errlen, const char **failed)
{
    if (s->opt.auth_tokens &&
        auth_open(&s->auth, s->opt.auth_tokens, err, errlen) != AUTH_FILE_OK) {
        *failed = "cannot read the tokens file";
        return 1;
    }
    /* The store holds every lease id, which is a lease's credential: whatever the umask,
     * what the server creates is its user's alone (files 0600, directories 0700). */
    umask(077);
    core_limits(&s->opt, &s->lim);
    enum node_rc nr = node_open(&s->node, &s->opt, err, errlen, failed);
    if (nr == NODE_MISMATCH) {
        fprintf(stderr, "mutexd: %s\n", err);
        *failed = NULL;
        return 2;
    }
    if (nr != NODE_OK)
        return 1;
    struct http_config hc = {
        .auth = s->auth,
        .listen = s->opt.listen,
        .threads = (unsigned)s->opt.http_threads,
        .max_connections = (unsigned)s->opt.max_connections,
        .idle_timeout_ms = s->opt.idle_timeout_ms,
        .tls_cert_file = s->opt.tls_cert,
        .tls_key_file = s->opt.tls_key,
        .tls_priorities = s->opt.tls_priorities,
        .allowed_origins = s->opt.allowed_origins,
        .allowed_hosts = s->opt.allowed_hosts,
        .ui = s->opt.ui,
        .lim = &s->lim,
        .forward_timeout_ms = s->opt.forward_timeout_ms,
        .served_by = s->opt.ha ? s->opt.advertise_url : s->opt.fault_served_by,
        .fault_role = s->opt.fault_role,
        .fault_role_after = s->opt.fault_role_after,
        .fault_role_after_ms = s->opt.fault_role_after_ms,
    };
    node_front(s->node, &hc);
    if (http_start(&s->http, &hc, err, errlen) != 0) {
        *failed = "cannot start the HTTP server";
        return 1;
    }
    node_attach(s->node, s->http);
    mx_info("started", "version=%s address=%s data_dir=%s leases=%zu role=%s partitions=%u",
            MUTEXD_VERSION, http_address(s->http), s->opt.data_dir, node_leases(s->node),
            node_role(s->node, true), (unsigned)s->opt.partitions);
    return -1;
}

/* Serves until a signal ends it or the node does: the signal (the one that began a leave
 * when the node has left), or 0 (`*tick` says why). The node ticks between signals, and the
 * service manager (if any) is told how the server is when it is due. */
static int serve(struct server *s, enum node_tick *tick, int *status, char *err, size_t errlen,
                 const char **failed)
{
    int leaving = 0; /* the signal that began the leave */
    for (;;) {
        if ((*tick = node_tick(s->node, status, err, errlen, failed)) != NODE_GO_ON)
            return *tick == NODE_LEFT ? leaving : 0;
        uint64_t notify_at = notify_next_ns(&s->notify);
        if (notify_at && mx_mono_ns() >= notify_at) {
            server_notify(s);
            notify_at = notify_next_ns(&s->notify);
        }
        uint64_t deadline = notify_at, tick_at = node_tick_due(s->node);
        if (tick_at && (!deadline || tick_at < deadline))
            deadline = tick_at;
        int sig = wait_signal(&s->signals, deadline);
        if (sig == SIGHUP) {
            reload_tokens(s);
        } else if (sig && !leaving && node_leave(s->node)) {
            leaving = sig;
            mx_info("leaving the group: moving the partitions", "signal=%s",
                    sig == SIGTERM ? "TERM" : "INT");
            notify_stopping(&s->notify, "stopping: moving the partitions to the other servers");
        } else if (sig) {
            return sig;
        }
    }
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
    notify_init(&s.notify, mx_mono_ns());
    process_setup(&s);

    char err[512] = "", quoted[1100], status_text[700];
    const char *failed = NULL;
    enum node_tick tick = NODE_GO_ON;
    if ((rc = start(&s, err, sizeof err, &failed)) >= 0) {
        /* Every failure to start comes here with what failed and why; what had started
         * is stopped. */
        if (failed) {
            mx_error(failed, "error=%s", mx_log_quote(quoted, sizeof quoted, err));
            fprintf(stderr, "mutexd: %s\n", err);
            snprintf(status_text, sizeof status_text, "failed: %s: %s", failed, err);
            notify_status(&s.notify, status_text);
        }
        node_free(s.node);
        auth_free(s.auth);
        return rc;
    }
    int sig = serve(&s, &tick, &rc, err, sizeof err, &failed);
    if (tick == NODE_REFUSED) {
        if (rc == 1)
            mx_error(failed, "error=%s", mx_log_quote(quoted, sizeof quoted, err));
        fprintf(stderr, "mutexd: %s\n", err);
        notify_status(&s.notify, "failed: cannot join the server group");
    } else if (tick == NODE_FENCED) {
        mx_warn("another server has taken the container: starting again as a standby", NULL);
        notify_status(&s.notify, "fenced: starting again as a standby");
    } else {
        mx_info("shutting down", "signal=%s", sig == SIGTERM ? "TERM" : "INT");
        notify_stopping(&s.notify, "stopping: answering the requests in flight");
    }
    http_quiesce(s.http);
    node_stop(s.node, s.http);
    http_stop(s.http);
    node_free(s.node);
    auth_free(s.auth);
    if (tick == NODE_REFUSED)
        return rc;
    if (tick == NODE_FENCED) {
        /* The same arguments (getopt may have reordered them; mutexd takes no operands, so
         * their order does not matter). */
        execv("/proc/self/exe", argv);
        mx_error("cannot start again", "error=%s", strerror(errno));
        return 1;
    }
    mx_info("stopped", NULL);
    return 0;
}
