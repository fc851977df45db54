/*
 * A server of a partitioned group: one group per partition (server/group.h) behind one
 * HTTP front, and the loop that decides which of them this server owns (server/placement.h):
 * at each tick it reads the live servers (the heartbeats) and every partition's owner (its
 * group's last look), lets each group take its partition over only when placement gives it
 * to this server, hands over what placement gives to another, and ticks every group.
 *
 * Threads: the main thread's, between signals.
 */
#ifndef MX_PARTITIONS_H
#define MX_PARTITIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "http/server.h"
#include "server/options.h"

struct partitions;

struct partitions_config {
    const struct options *opt; /* must outlive it */
    unsigned count;            /* 2 to MX_PARTITIONS_MAX */
    /* Placement's times (0: the defaults, from --failover-after-ms). */
    int64_t orphan_after_ms, settle_ms;
};

/* Joins every partition's group as a standby. 0, or -1 with what failed and why. */
int partitions_open(struct partitions **out, const struct partitions_config *cfg, char *err,
                    size_t errlen, const char **failed);
/* The front (started with `count` partitions): once, before the first tick. */
void partitions_attach(struct partitions *ps, struct http *h);
/* One look at every partition. A partition another server took is closed here, and this
 * server goes on as its standby. Returns 0. */
int partitions_tick(struct partitions *ps);
/* The partitions this server owns now; whether it owns partition p. */
unsigned partitions_owned(struct partitions *ps);
bool partitions_owns(struct partitions *ps, unsigned p);
/* The body of GET /v1/servers on a partitioned server (the front's `servers` hook; `ctx`:
 * the partitions): as a group's (docs/api.md, "Servers"), with "active" null, each server's
 * role "active" when it owns a partition, its "partitions", and the partition map,
 * "partitions": {"count", "owners": [{"partition", "url", "generation", "since"}...]}. */
int partitions_render_servers(void *ctx, struct mx_buf *out);

/* /readyz (the front's `ready` hook; `ctx`: the partitions): ready when every partition is
 * served here or has an owner to forward to; details: "role" ("active" when it owns one,
 * else "standby") and "partitions_owned". */
bool partitions_ready(void *ctx, char *why, size_t len, struct mx_buf *details);
/* /metrics (the front's `metrics` hook): every group's figures labelled by partition, and
 * mutexd_partitions_owned. */
void partitions_metrics(void *ctx, struct mx_buf *b);

/* Core health for the watchdog: false with what fails when the store of an owned partition
 * fails its commits. */
bool partitions_healthy(struct partitions *ps, char *why, size_t len);
/* A server leaving (SIGTERM) moves its partitions before it stops: its heartbeat goes, so
 * that placement elsewhere counts without it, and every partition it owns is handed over,
 * two at a time (its requests are held, then forwarded to the new owner); it claims nothing
 * more. Keep
 * calling partitions_tick() until partitions_left() or a deadline. */
void partitions_leave(struct partitions *ps);
/* True when, leaving, every partition has an owner and none is this server, or when no
 * other server is live to take them (a whole group stopped at once: each is sealed and
 * released, for whoever starts next). */
bool partitions_left(struct partitions *ps);

/* Takes every core back from the front and closes it, then leaves (after http_quiesce()). */
void partitions_close(struct partitions *ps);

#endif
