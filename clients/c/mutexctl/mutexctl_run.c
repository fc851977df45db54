/*
 * `mutexctl run` (see mutexctl_run.h).
 *
 * Layout: the clock and the signal plumbing (handlers that forward to the command's group and
 * wake the loop through a pipe); acquiring; starting the command; the supervision loop, which
 * is a small state machine woken by the pipe or by its next deadline (renewal, lease deadline,
 * SIGKILL after the grace); and the end: release and exit status.
 */
#include "mutexctl_run.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>
#include <unistd.h>

#include "mutexctl_cli.h"

/* The signals forwarded to the command's group. */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP};

/* Written by the main flow before the signals are unblocked, read by the handler. */
static volatile sig_atomic_t group_id;
static int wake_pipe[2] = {-1, -1};

static int64_t now_ms(void)
{
    return mutexd_monotonic_ms();
}

/* ---- The lease file of `mutexctl check` ---------------------------------------------------- */

static char lease_file[4096];

/* Writes the deadline (0: lost) to the lease file, atomically (a new file renamed over it). */
static void write_lease_file(int64_t deadline)
{
    if (lease_file[0] == '\0')
        return;
    char tmp[sizeof(lease_file) + 8];
    snprintf(tmp, sizeof(tmp), "%s.new", lease_file);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        goto fail;
    char line[32];
    int len = snprintf(line, sizeof(line), "%" PRId64 "\n", deadline);
    ssize_t w = write(fd, line, (size_t)len);
    if (close(fd) != 0 || w != len || rename(tmp, lease_file) != 0)
        goto fail;
    return;
fail:
    fprintf(stderr, "mutexctl: writing %s: %s\n", lease_file, strerror(errno));
    unlink(tmp);
}

static int make_lease_file(void)
{
    const char *dir = getenv("TMPDIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";
    snprintf(lease_file, sizeof(lease_file), "%s/mutexctl-lease-XXXXXX", dir);
    int fd = mkstemp(lease_file);
    if (fd < 0) {
        fprintf(stderr, "mutexctl: creating a lease file in %s: %s\n", dir, strerror(errno));
        lease_file[0] = '\0';
        return -1;
    }
    close(fd);
    return 0;
}

static void remove_lease_file(void)
{
    if (lease_file[0] != '\0')
        unlink(lease_file);
    lease_file[0] = '\0';
}

int mxctl_check_lease_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char line[32];
    ssize_t got = read(fd, line, sizeof(line) - 1);
    int e = errno;
    close(fd);
    if (got < 0) {
        errno = e;
        return -1;
    }
    line[got] = '\0';
    char *end;
    errno = 0;
    long long deadline = strtoll(line, &end, 10);
    if (errno != 0 || end == line || (*end != '\n' && *end != '\0')) {
        errno = EINVAL;
        return -1;
    }
    return deadline > 0 && now_ms() < deadline;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Forwards termination signals to the command's group at once (kill() is safe here), and
 * wakes the loop for everything, SIGCHLD included. */
static void on_signal(int sig)
{
    int saved = errno;
    if (sig != SIGCHLD && group_id > 0)
        kill(-(pid_t)group_id, sig);
    if (wake_pipe[1] >= 0) {
        ssize_t w = write(wake_pipe[1], "", 1);
        (void)w; /* a full pipe already wakes the loop */
    }
    errno = saved;
}

static void drain(int fd)
{
    char b[64];
    while (read(fd, b, sizeof(b)) > 0)
        ;
}

static void handle_signals(sigset_t *mask, struct sigaction *saved)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigemptyset(mask);
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        sigaddset(mask, forwarded[i]);
    sigaddset(mask, SIGCHLD);
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        sigaction(forwarded[i], &sa, &saved[i]);
    sigaction(SIGCHLD, &sa, &saved[sizeof(forwarded) / sizeof(forwarded[0])]);
}

static void restore_signals(const struct sigaction *saved)
{
    size_t n = sizeof(forwarded) / sizeof(forwarded[0]);
    for (size_t i = 0; i < n; i++)
        sigaction(forwarded[i], &saved[i], NULL);
    sigaction(SIGCHLD, &saved[n], NULL);
}

/* ---- What is held ------------------------------------------------------------------------- */

/* The lease run holds, or the set of several resources. */
struct held {
    const struct mxctl_run_config *cfg;
    int many;
    struct mutexd_lease lease;
    struct mutexd_leases set;
    char label[1024]; /* the resources, for messages: "jobs/a", or "a, b" */
};

static void held_init(struct held *h, const struct mxctl_run_config *cfg)
{
    memset(h, 0, sizeof(*h));
    h->cfg = cfg;
    h->many = cfg->nresources > 1;
    char *all = mxctl_join_names(cfg->resources, cfg->nresources);
    snprintf(h->label, sizeof(h->label), "%s", all != NULL ? all : cfg->resource);
    free(all);
}

static void held_clear(struct held *h)
{
    mutexd_lease_clear(&h->lease);
    mutexd_leases_clear(&h->set);
}

static int64_t held_deadline(const struct held *h)
{
    return h->many ? h->set.deadline_ms : h->lease.deadline_ms;
}

static const char *held_lease_id(const struct held *h)
{
    return h->many ? h->set.lease_id : h->lease.lease_id;
}

/* What an error is about: of a set, the resources its answer names (the one held, those
 * lost), else all of them. */
static void error_label(const struct held *h, const struct mutexd_error *err, char *out, size_t cap)
{
    char *names = h->many ? mxctl_error_names(err, h->cfg->resources, h->cfg->nresources) : NULL;
    snprintf(out, cap, "%s", names != NULL ? names : h->label);
    free(names);
}

static int report(const struct held *h, mutexd_result r, const struct mutexd_error *err, int quiet)
{
    char what[1024];
    error_label(h, err, what, sizeof(what));
    return mxctl_report(what, r, err, quiet);
}

static mutexd_result renew_held(mutexd_client *client, struct held *h,
                                const struct mutexd_renew_options *o, struct mutexd_error *err)
{
    if (h->many)
        return mutexd_renew_many(client, h->cfg->resources, h->cfg->nresources, h->set.lease_id, o,
                                 &h->set, err);
    return mutexd_renew(client, h->lease.resource, h->lease.lease_id, o, &h->lease, err);
}

static mutexd_result release_held(mutexd_client *client, struct held *h, struct mutexd_error *err)
{
    if (h->many)
        return mutexd_release_many(client, h->cfg->resources, h->cfg->nresources, h->set.lease_id,
                                   err);
    return mutexd_release(client, h->lease.resource, h->lease.lease_id, err);
}

/* ---- Acquiring ---------------------------------------------------------------------------- */

/* Acquires, retrying with the same proposed lease id while the error is temporary and the
 * wait allows it. *sent is when the successful request was sent. Returns an exit status. */
static int acquire(mutexd_client *client, const struct mxctl_run_config *cfg, struct held *h,
                   int64_t *sent)
{
    char lease_id[MUTEXD_LEASE_ID_LEN + 1];
    struct mutexd_error err = {0};
    int status = 3;
    if (mutexd_new_lease_id(lease_id) != MUTEXD_OK) {
        fprintf(stderr, "mutexctl: no randomness for a lease id\n");
        goto out;
    }
    char owner[300];
    if (cfg->owner == NULL) {
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
            strcpy(host, "localhost");
        snprintf(owner, sizeof(owner), "%s:%ld", host, (long)getpid());
    }
    int64_t start = now_ms(), until = start + cfg->wait_ms;
    for (;;) {
        struct mutexd_acquire_options o = {
            .owner = cfg->owner != NULL ? cfg->owner : owner,
            .ttl_ms = cfg->ttl_ms,
            .wait_ms = cfg->wait_ms > 0 ? until - now_ms() : 0,
            .lease_id = lease_id,
            .metadata = cfg->metadata,
            .limit = cfg->limit,
            .shared = cfg->shared,
        };
        if (cfg->wait_ms > 0 && o.wait_ms <= 0)
            o.wait_ms = 1; /* the time is up: one last try that answers at once */
        *sent = now_ms();
        mutexd_result r = h->many ? mutexd_acquire_many(client, cfg->resources, cfg->nresources, &o,
                                                        &h->set, &err)
                                  : mutexd_acquire(client, cfg->resource, &o, &h->lease, &err);
        if (r == MUTEXD_OK) {
            status = 0;
            goto out;
        }
        int64_t left = until - now_ms();
        if (!mutexd_error_is_temporary(r, &err) || left <= 0) {
            status = report(h, r, &err, cfg->quiet);
            goto out;
        }
        fprintf(stderr, "mutexctl: acquiring %s: %s; trying again\n", h->label, err.message);
        sleep_ms(left < 1000 ? left : 1000);
    }
out:
    mutexd_error_clear(&err);
    return status;
}

/* ---- Starting the command ----------------------------------------------------------------- */

/* The child: its own process group, default signal handling, then the command. Only
 * async-signal-safe calls from here on: libcurl's resolver threads may have existed. */
static void exec_child(char **argv, const sigset_t *mask, pid_t parent)
{
#ifdef PR_SET_PDEATHSIG
    /* Should mutexctl die without stopping the command (SIGKILL), nothing renews the lease
     * any more: the command gets SIGTERM. */
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0L, 0L, 0L);
    if (getppid() != parent)
        _exit(128 + SIGTERM);
#else
    (void)parent;
#endif
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        sigaction(forwarded[i], &dfl, NULL);
    sigaction(SIGCHLD, &dfl, NULL);
    sigprocmask(SIG_UNBLOCK, mask, NULL);
    setpgid(0, 0);
    execvp(argv[0], argv);
    int e = errno;
    const char *why = strerror(e);
    const char *parts[] = {"mutexctl: cannot run ", argv[0], ": ", why, "\n"};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        ssize_t w = write(STDERR_FILENO, parts[i], strlen(parts[i]));
        (void)w;
    }
    _exit(e == ENOENT ? 127 : 126);
}

/* ---- Supervising -------------------------------------------------------------------------- */

struct supervisor {
    const struct mxctl_run_config *cfg;
    mutexd_client *client;
    struct held *held;
    pid_t pid;  /* the command, leader of its own group */
    int reaped; /* the command has exited; `wstatus` says how */
    int wstatus;
    int lost;         /* the lease is lost: the group is being stopped */
    int expired;      /* lost because no renewal succeeded before the deadline */
    int64_t deadline; /* when the lease ends unless renewed (monotonic) */
    int64_t next_renew;
    int64_t term_at; /* when SIGTERM went to the group, or -1 */
    int killed;      /* SIGKILL went to the group */
    int64_t killed_at;
    char last_error[256]; /* why the last renewal failed, or "" */
};

static int group_exists(pid_t pgid)
{
    return kill(-pgid, 0) == 0 || errno == EPERM;
}

static void stop_group(struct supervisor *s, int64_t now, const char *why)
{
    if (s->term_at >= 0)
        return;
    if (why != NULL)
        fprintf(stderr,
                "mutexctl: %s: stopping the command (SIGTERM, SIGKILL after %" PRId64 " ms)\n", why,
                s->cfg->grace_ms);
    kill(-s->pid, SIGTERM);
    s->term_at = now;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static void renew(struct supervisor *s)
{
    const struct mxctl_run_config *cfg = s->cfg;
    struct mutexd_error err = {0};
    int64_t sent = now_ms();
    /* One attempt takes at most a third of the TTL, and never goes past the deadline, so that
     * a server gone silent leaves time for more attempts, each on a new connection. With
     * several servers the library moves on to the next one that answers, each attempt within
     * this budget and all of them within the lease's deadline: the lease survives a switch
     * of server, and only a deadline passed without a renewal loses it. */
    int64_t budget = min64(s->deadline - sent, cfg->ttl_ms / 3);
    long timeout = cfg->request_timeout_ms;
    if (budget < timeout)
        timeout = budget > 1 ? (long)budget : 1;
    struct mutexd_renew_options o = {.ttl_ms = cfg->ttl_ms, .timeout_ms = timeout};
    mutexd_result r = renew_held(s->client, s->held, &o, &err);
    if (r == MUTEXD_OK && now_ms() >= s->deadline) {
        /* Answered after the deadline: the loss is final, whatever the answer says. */
        snprintf(s->last_error, sizeof(s->last_error), "a renewal was answered too late");
    } else if (r == MUTEXD_OK) {
        s->deadline = held_deadline(s->held);
        s->next_renew = sent + cfg->ttl_ms / 3;
        s->last_error[0] = '\0';
        write_lease_file(s->deadline);
    } else if (r == MUTEXD_LOST) {
        s->lost = 1;
        write_lease_file(0);
        /* Of a set: the leases lost, named; any one of them is enough. */
        char what[1024], why[1200];
        error_label(s->held, &err, what, sizeof(what));
        snprintf(why, sizeof(why), "the lease on %s is lost (%s)", what,
                 err.code != NULL ? err.code : "lease_lost");
        stop_group(s, now_ms(), why);
    } else {
        int64_t retry = cfg->ttl_ms / 10;
        retry = retry < 100 ? 100 : retry > 1000 ? 1000 : retry;
        snprintf(s->last_error, sizeof(s->last_error), "%s",
                 err.message != NULL ? err.message : "?");
        fprintf(stderr, "mutexctl: renewing %s failed: %s; %" PRId64 " ms of the lease left\n",
                s->held->label, s->last_error, s->deadline - now_ms());
        s->next_renew = now_ms() + retry;
    }
    mutexd_error_clear(&err);
}

/* Runs until the command has exited and its group is gone. */
static void supervise(struct supervisor *s)
{
    const struct mxctl_run_config *cfg = s->cfg;
    for (;;) {
        drain(wake_pipe[0]);
        /* Every child: the command, and (as a subreaper) what it left behind when it died,
         * so that no zombie keeps the group alive. */
        for (;;) {
            int st;
            pid_t w = waitpid(-1, &st, WNOHANG);
            if (w <= 0)
                break;
            if (w == s->pid) {
                s->reaped = 1;
                s->wstatus = st;
            }
        }
        int64_t now = now_ms();
        int alive = group_exists(s->pid);
        if (s->reaped && !alive)
            return;
        if (s->reaped && alive)
            stop_group(s, now, "the command exited and left processes in its group");
        if (!s->lost && now >= s->deadline) {
            s->lost = s->expired = 1;
            write_lease_file(0);
            char why[1600];
            snprintf(why, sizeof(why),
                     "no renewal of %s succeeded before the lease's deadline (%s)", s->held->label,
                     s->last_error[0] != '\0' ? s->last_error
                                              : "none was tried: mutexctl did not run in time");
            stop_group(s, now, why);
        }
        if (s->term_at >= 0 && !s->killed && now >= s->term_at + cfg->grace_ms) {
            kill(-s->pid, SIGKILL);
            s->killed = 1;
            s->killed_at = now;
        }
        if (s->killed && s->reaped && now >= s->killed_at + 5000) {
            fprintf(stderr, "mutexctl: processes of the command's group outlived SIGKILL\n");
            return;
        }
        if (!s->lost && now >= s->next_renew) {
            renew(s);
            continue;
        }

        int64_t wake = now + 60000;
        if (!s->lost)
            wake = min64(wake, min64(s->next_renew, s->deadline));
        if (s->term_at >= 0 && !s->killed)
            wake = min64(wake, s->term_at + cfg->grace_ms);
        if (s->reaped || s->killed) /* no SIGCHLD tells when a grandchild is gone: look */
            wake = min64(wake, now + 50);
        int64_t t = wake - now;
        struct pollfd p = {.fd = wake_pipe[0], .events = POLLIN};
        poll(&p, 1, t < 0 ? 0 : t > INT_MAX ? INT_MAX : (int)t);
    }
}

static int exit_status(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return 1;
}

/* The command's environment: the lease, or the set (every resource and its token, and the
 * first's as for one). 0, or -1 when it cannot be set. */
static int set_environment(const struct held *h)
{
    const struct mutexd_lease *leases = h->many ? h->set.leases : &h->lease;
    size_t n = h->many ? h->set.count : 1, len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(leases[i].resource) + 1;
    char *names = malloc(len), *tokens = malloc(n * 21 + 1);
    int bad = names == NULL || tokens == NULL;
    size_t at = 0, tat = 0;
    for (size_t i = 0; !bad && i < n; i++) {
        at += (size_t)sprintf(names + at, "%s%s", i > 0 ? " " : "", leases[i].resource);
        tat +=
            (size_t)sprintf(tokens + tat, "%s%" PRIu64, i > 0 ? " " : "", leases[i].fencing_token);
    }
    char token[32];
    snprintf(token, sizeof(token), "%" PRIu64, leases[0].fencing_token);
    bad = bad || setenv("MUTEXD_RESOURCE", leases[0].resource, 1) != 0 ||
          setenv("MUTEXD_LEASE_ID", held_lease_id(h), 1) != 0 ||
          setenv("MUTEXD_FENCING_TOKEN", token, 1) != 0 ||
          setenv("MUTEXD_RESOURCES", names, 1) != 0 ||
          setenv("MUTEXD_FENCING_TOKENS", tokens, 1) != 0;
    free(names);
    free(tokens);
    return bad ? -1 : 0;
}

int mxctl_run(mutexd_client *client, const struct mxctl_run_config *cfg)
{
    int status = 3;
    struct held h;
    struct mutexd_error err = {0};
    struct sigaction saved[sizeof(forwarded) / sizeof(forwarded[0]) + 1];
    sigset_t mask, old;
    int handling = 0;
    int64_t sent;

    held_init(&h, cfg);
#ifdef PR_SET_PDEATHSIG
    if (cfg->parent_pid > 0) {
        /* SIGTERM when the parent ends, as if it had sent it; checked after, so that a parent
         * that ended before this is seen too. */
        prctl(PR_SET_PDEATHSIG, SIGTERM, 0L, 0L, 0L);
        if (getppid() != (pid_t)cfg->parent_pid) {
            fprintf(stderr, "mutexctl: the parent process %d is gone\n", cfg->parent_pid);
            return 1;
        }
    }
#endif
    status = acquire(client, cfg, &h, &sent);
    if (status != 0)
        goto out;
    status = 3;
    int64_t deadline = held_deadline(&h);
    if (now_ms() - sent > 1000) {
        /* The grant came some time during a long request: renew to know when it ends. */
        int64_t again = now_ms();
        struct mutexd_renew_options o = {.ttl_ms = cfg->ttl_ms};
        mutexd_result r = renew_held(client, &h, &o, &err);
        if (r == MUTEXD_OK) {
            sent = again;
            deadline = held_deadline(&h);
        } else if (r == MUTEXD_LOST || now_ms() >= deadline) {
            status = r == MUTEXD_LOST ? report(&h, r, &err, 0) : 3;
            goto out;
        }
    }

    if (set_environment(&h) != 0) {
        fprintf(stderr, "mutexctl: cannot set the environment\n");
        goto release;
    }
    if (make_lease_file() != 0)
        goto release;
    write_lease_file(deadline);
    if (setenv("MUTEXD_LEASE_FILE", lease_file, 1) != 0) {
        fprintf(stderr, "mutexctl: cannot set the environment\n");
        goto release;
    }
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "mutexctl: pipe: %s\n", strerror(errno));
        goto release;
    }
    /* Blocked from before the fork until group_id is set, so that no signal meant for the
     * command is lost in between; they are delivered (and forwarded) at the unblock. */
#ifdef PR_SET_CHILD_SUBREAPER
    /* Orphans of the command become our children: we reap them, so that the group is seen
     * to be gone as soon as it is, whatever the system's init does with zombies. */
    prctl(PR_SET_CHILD_SUBREAPER, 1L, 0L, 0L, 0L);
#endif
    handle_signals(&mask, saved);
    handling = 1;
    sigprocmask(SIG_BLOCK, &mask, &old);
    fflush(NULL);
    pid_t self = getpid();
    pid_t pid = fork();
    if (pid == 0)
        exec_child(cfg->argv, &mask, self);
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        fprintf(stderr, "mutexctl: fork: %s\n", strerror(errno));
        goto release;
    }
    setpgid(pid, pid); /* also here, so that the group exists before we signal it */
    group_id = pid;
    sigprocmask(SIG_SETMASK, &old, NULL);

    struct supervisor s = {
        .cfg = cfg,
        .client = client,
        .held = &h,
        .pid = pid,
        .deadline = deadline,
        .next_renew = sent + cfg->ttl_ms / 3,
        .term_at = -1,
    };
    supervise(&s);
    group_id = 0;
    write_lease_file(0);
    status = s.lost ? 1 : exit_status(s.wstatus);
    /* A lease lost is someone else's now, or nobody's; of a set, the others are still its own
     * until released (the release of a set releases what it still holds). */
    if (s.lost && !s.expired && !h.many)
        goto out;

release:;
    mutexd_result r = release_held(client, &h, &err);
    if (r == MUTEXD_LOST && status != 1)
        fprintf(stderr, "mutexctl: the lease on %s was lost before it was released\n", h.label);
    else if (r != MUTEXD_OK && r != MUTEXD_LOST)
        fprintf(stderr, "mutexctl: releasing %s: %s (it ends with its TTL)\n", h.label,
                err.message);
out:
    remove_lease_file();
    if (handling)
        restore_signals(saved);
    for (int i = 0; i < 2; i++) {
        if (wake_pipe[i] >= 0)
            close(wake_pipe[i]);
        wake_pipe[i] = -1;
    }
    held_clear(&h);
    mutexd_error_clear(&err);
    return status;
}
