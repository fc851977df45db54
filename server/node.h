/*
 * The node: what the process serves with, whichever of the three shapes it has, behind one
 * interface, so that main() knows none of them.
 *
 *   alone        one core (server/core.h), served from the first request;
 *   a group      --ha, --partitions 1: the group of the container (server/group.h);
 *   partitions   --ha, --partitions N > 1: a group per partition (server/partitions.h).
 *
 * A server of a group first joins it (server/join.h), tried again from node_tick() while the
 * blob store does not answer. The front (http/server.h) is given the node's callbacks by
 * node_front() before it starts and the node itself by node_attach() once it has; the
 * node is stopped (its cores closed) before the front stops, and freed after.
 *
 * Threads: every function from the main thread; the front's callbacks (node_front()) from
 * any.
 */
#ifndef MX_NODE_H
#define MX_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/server.h"
#include "server/options.h"

struct node;

enum node_rc {
    NODE_OK,
    NODE_MISMATCH, /* the container's group has another partition count: exit 2 */
    NODE_FAILED,   /* `failed` and `err` say what and why: exit 1 */
};

/* Opens the node of `opt` (which must outlive it): checks the data directory, then opens
 * the lone server's core, or makes a first attempt to join the group. `*out` is set even on
 * failure (node_free() it). */
enum node_rc node_open(struct node **out, const struct options *opt, char *err, size_t errlen,
                       const char **failed);
/* The front's callbacks and the lone server's core, into the front's configuration. */
void node_front(struct node *n, struct http_config *hc);
/* The front has started: the group or partitions joined are handed it. */
void node_attach(struct node *n, struct http *h);

/* What the node asks of the process after a tick. */
enum node_tick {
    NODE_GO_ON,
    NODE_FENCED,  /* another server took the container: start again as a standby */
    NODE_LEFT,    /* leaving: every partition has moved, or the time for it has come */
    NODE_REFUSED, /* the join, tried again, was refused: exit with node_tick()'s status */
};
/* When the next tick is due (mono ns; 0: never, a lone server). */
uint64_t node_tick_due(const struct node *n);
/* A look at the group: the join tried again when due, the group's or partitions' tick.
 * NODE_REFUSED sets `*status` (1 or 2), `err` and `failed`. */
enum node_tick node_tick(struct node *n, int *status, char *err, size_t errlen,
                         const char **failed);
/* Asked to stop (SIGTERM, SIGINT): true when the node leaves first (partitions move by
 * handover, then node_tick() says NODE_LEFT); false: stop now. Called once. */
bool node_leave(struct node *n);

/* For the log and the service manager: the role ("active", "standby", "joining"...; NULL
 * for a lone server after start), whether the store commits (`why` when not), the leases
 * held at start. */
const char *node_role(struct node *n, bool at_start);
bool node_healthy(struct node *n, char *why, size_t len);
size_t node_leases(const struct node *n);

/* Closes every core (after http_quiesce(), before http_stop()). */
void node_stop(struct node *n, struct http *h);
/* After http_stop() (the front's callbacks are over), or after a failed start. NULL: nothing. */
void node_free(struct node *n);

#endif
