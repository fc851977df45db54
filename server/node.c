/*
 * The node: a lone server's core, a group or partitions behind one interface
 * (server/node.h).
 */
#include "server/node.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/core.h"
#include "server/group.h"
#include "server/join.h"
#include "server/layout.h"
#include "server/partitions.h"

struct node {
    const struct options *opt;
    struct core *core;      /* alone: its core */
    struct http_core front; /* alone: the core as the front serves it */
    struct join *join;      /* a server of a group (--ha): its join, then what it joined */
    struct group *group;    /* joined, --partitions 1 */
    struct partitions *ps;  /* joined, --partitions N > 1 */
    struct group_config gc; /* the join's: they outlive it */
    struct partitions_config pc;
    struct http *http; /* attached */
    uint64_t tick_at;  /* mono ns; 0: no ticks */
    uint64_t leave_by; /* leaving: the partitions have moved, or this time has come */
};

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

static uint64_t next_tick(void)
{
    return mx_mono_ns() + GROUP_TICK_MS * MX_NS_PER_MS;
}

/* What the join has joined, handed the front if it has started. */
static void joined(struct node *n)
{
    if (!n->group && (n->group = join_group(n->join)) && n->http)
        group_attach(n->group, n->http);
    if (!n->ps && (n->ps = join_partitions(n->join)) && n->http)
        partitions_attach(n->ps, n->http);
}

static enum node_rc open_alone(struct node *n, char *err, size_t errlen, const char **failed)
{
    if (n->opt->mirror_mode != MIRROR_OFF) {
        /* A lone server with a mirror checks the count too: on a partitioned group's
         * container it would take the container's own owner blob beside the group. */
        unsigned found = 0;
        enum layout_rc lr = settle_layout(n->opt, &found, err, errlen);
        if (lr == LAYOUT_MISMATCH)
            return NODE_MISMATCH;
        if (lr != LAYOUT_OK) {
            *failed = "cannot start the blob mirror";
            return NODE_FAILED;
        }
    }
    struct core_config cc = {.opt = n->opt};
    if (core_open(&n->core, &cc, err, errlen, failed) != CORE_OK)
        return NODE_FAILED;
    core_front(n->core, &n->front);
    return NODE_OK;
}

/* A server of a group joins it: its partition count (written by the container's first
 * server: another is refused), then its group or partitions. Tried once now; a blob store
 * that does not answer yet is tried again from node_tick(), the front answering meanwhile
 * (server/join.h). */
static enum node_rc open_group(struct node *n, char *err, size_t errlen, const char **failed)
{
    if (!(n->join = join_new(&n->gc, &n->pc))) {
        *failed = "cannot join the server group";
        snprintf(err, errlen, "out of memory");
        return NODE_FAILED;
    }
    switch (join_try(n->join, mx_mono_ns(), err, errlen, failed)) {
    case JOIN_MISMATCH:
        return NODE_MISMATCH;
    case JOIN_FAILED:
        return NODE_FAILED;
    default:
        joined(n);
        n->tick_at = next_tick();
        return NODE_OK;
    }
}

enum node_rc node_open(struct node **out, const struct options *opt, char *err, size_t errlen,
                       const char **failed)
{
    struct node *n = *out = calloc(1, sizeof *n);
    if (!n) {
        *failed = "cannot start";
        snprintf(err, errlen, "out of memory");
        return NODE_FAILED;
    }
    n->opt = opt;
    n->gc = (struct group_config){.opt = opt, .partition = 0, .partitions = 1};
    n->pc = (struct partitions_config){.opt = opt, .count = (unsigned)opt->partitions};
    if (check_data_dir(opt->data_dir, err, errlen) != 0) {
        *failed = "refusing the data directory";
        return NODE_FAILED;
    }
    return opt->ha ? open_group(n, err, errlen, failed) : open_alone(n, err, errlen, failed);
}

void node_front(struct node *n, struct http_config *hc)
{
    hc->core = n->core ? &n->front : NULL;
    hc->partitions = n->opt->ha ? n->pc.count : 1;
    hc->ready = n->join ? join_ready : NULL;
    hc->metrics = n->join ? join_metrics : NULL;
    hc->servers = n->join ? join_render_servers : NULL;
    hc->ctx = n->join;
}

void node_attach(struct node *n, struct http *h)
{
    n->http = h;
    if (n->group)
        group_attach(n->group, h);
    if (n->ps)
        partitions_attach(n->ps, h);
}

uint64_t node_tick_due(const struct node *n)
{
    return n->tick_at;
}

enum node_tick node_tick(struct node *n, int *status, char *err, size_t errlen, const char **failed)
{
    if (!n->tick_at || mx_mono_ns() < n->tick_at)
        return NODE_GO_ON;
    uint64_t due = join_due(n->join);
    if (due && mx_mono_ns() >= due) {
        enum join_rc jr = join_try(n->join, mx_mono_ns(), err, errlen, failed);
        if (jr == JOIN_MISMATCH || jr == JOIN_FAILED) {
            *status = jr == JOIN_MISMATCH ? 2 : 1;
            return NODE_REFUSED;
        }
        joined(n);
    }
    if (n->group && group_tick(n->group) != 0)
        return NODE_FENCED;
    if (n->ps)
        partitions_tick(n->ps);
    if (n->leave_by && partitions_left(n->ps))
        return NODE_LEFT;
    if (n->leave_by && mx_mono_ns() >= n->leave_by) {
        mx_warn("leaving: not every partition was taken in time", NULL);
        return NODE_LEFT;
    }
    n->tick_at = next_tick();
    return NODE_GO_ON;
}

bool node_leave(struct node *n)
{
    if (!n->ps)
        return false;
    /* Partitions move by handover before the server stops; its requests meanwhile are
     * forwarded to their new owners. */
    partitions_leave(n->ps);
    n->leave_by = mx_mono_ns() + 2 * n->opt->failover_after_ms * MX_NS_PER_MS;
    return true;
}

const char *node_role(struct node *n, bool at_start)
{
    if (n->group)
        return group_role(n->group);
    if (n->ps)
        return at_start || !partitions_owned(n->ps) ? "standby" : "active";
    if (n->join)
        return "joining";
    return at_start ? "active" : NULL;
}

bool node_healthy(struct node *n, char *why, size_t len)
{
    if (n->ps)
        return partitions_healthy(n->ps, why, len);
    struct core *c = n->group ? group_core(n->group) : n->core;
    return !c || core_healthy(c, why, len);
}

size_t node_leases(const struct node *n)
{
    return n->core ? core_leases(n->core) : 0;
}

void node_stop(struct node *n, struct http *h)
{
    if (n->core)
        http_set_core(h, 0, NULL);
    core_close(n->core);
    n->core = NULL;
    group_close(n->group); /* takes its core back and closes it first */
    n->group = NULL;
    partitions_close(n->ps);
    n->ps = NULL;
}

void node_free(struct node *n)
{
    if (!n)
        return;
    core_close(n->core);
    group_close(n->group);
    partitions_close(n->ps);
    join_free(n->join);
    free(n);
}
