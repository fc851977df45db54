/*
 * `mutexctl run`: runs a command while holding a lease, and stops it when the lease is lost.
 *
 * It acquires the lease (waiting if asked), starts the command in its own process group with
 * MUTEXD_RESOURCE, MUTEXD_LEASE_ID and MUTEXD_FENCING_TOKEN in its environment (and
 * MUTEXD_RESOURCES and MUTEXD_FENCING_TOKENS, which list them all for a set), and renews at
 * a third of the TTL, through whichever of the client's servers answers (the library moves
 * on from one that does not). When the lease is lost (renew answers lease_lost, or no renewal
 * succeeded before the lease's deadline, measured on the monotonic clock from the moment each
 * successful renewal was sent) it sends SIGTERM to the whole group, and SIGKILL after the
 * grace period. SIGTERM, SIGINT and SIGHUP sent to mutexctl are forwarded to the group. When
 * the command exits, whatever it left running in its group is stopped the same way, and the
 * lease is released. Should mutexctl itself be killed outright, the command gets SIGTERM
 * (on Linux, through PR_SET_PDEATHSIG).
 *
 * With several resources it holds them as a set (mutexd_acquire_many(), renewed and released
 * with one request each time), and the set is lost as soon as one of its leases is: a renewal
 * answers lease_lost for any of them, or none succeeds before the set's earliest deadline.
 *
 * The lease's deadline (monotonic ms, with the library's safety margin taken off) is kept in
 * a file named by MUTEXD_LEASE_FILE in the command's environment, rewritten (by rename) at
 * each renewal and set to 0 when the lease is lost: `mutexctl check` compares it with the
 * clock, so that the command can check right before each action, even after a pause that
 * mutexctl has not noticed yet.
 *
 * Threads: single-threaded; it installs signal handlers for the time the command runs.
 */
#ifndef MUTEXCTL_RUN_H
#define MUTEXCTL_RUN_H

#include <stdint.h>

#include "mutexd.h"

struct mxctl_run_config {
    const char *resource; /* the first of `resources` */
    /* The resources: one, or the 2 to MUTEXD_MANY_MAX of a set. */
    const char *const *resources;
    size_t nresources;
    const char *owner;    /* NULL: "<hostname>:<pid of mutexctl>" */
    const char *metadata; /* JSON object text, or NULL */
    int64_t ttl_ms;       /* > 0 */
    int64_t wait_ms;      /* how long to wait for the lease; 0: not at all */
    int64_t grace_ms;     /* from SIGTERM to SIGKILL */
    long request_timeout_ms;
    int parent_pid; /* > 0: do as on SIGTERM when this process, our parent, ends (Linux) */
    int quiet;      /* no message when the resource is held */
    int64_t limit;  /* holders at once (a counting semaphore); 0: not sent (1) */
    int shared;     /* a shared lease (a reader) */
    char **argv;    /* the command, NULL-terminated */
};

/* Runs it all; returns mutexctl's exit status: the command's own (128+N when signal N ended
 * it; 126 or 127 when it could not be started), 1 when the resource was held or the lease
 * was lost, 3 when the server could not be asked. */
int mxctl_run(mutexd_client *client, const struct mxctl_run_config *cfg);

/* `mutexctl check`: 1 while the deadline kept in `path` (by mxctl_run, for the command's
 * `mutexctl check`) is ahead on the monotonic clock, 0 once passed or lost, -1 (errno set)
 * when the file cannot be read. */
int mxctl_check_lease_file(const char *path);

#endif
