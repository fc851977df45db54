/*
 * The server group's takeover sequence (docs/ha.md): a server started with --ha joins as a
 * standby (forwarding, keeping a warm copy of the container), takes the container over
 * when it is free or its active has been given up, serves while it can confirm it owns
 * it, and notices when another server has taken it.
 *
 * Threads: the main thread's, between signals.
 */
#ifndef MX_GROUP_H
#define MX_GROUP_H

#include <stddef.h>

#include "common/buf.h"
#include "server/core.h"

/* How often group_tick() is called (ms). */
#define GROUP_TICK_MS 100

/* Joins the group of the container (no core is started: the server is a standby until it
 * takes over). 0, or -1 with what failed and why. */
int group_open(struct server *s, char *err, size_t errlen, const char **failed);
void group_close(struct server *s);

/* One look at the group. Returns 1 when this server was fenced and must start again. */
int group_tick(struct server *s);

/* The body of GET /v1/servers (the HTTP front's `servers` hook; `ctx` is the server). */
int group_render_servers(void *ctx, struct mx_buf *out);

/* Metrics of the takeover sequence. */
void group_metrics(struct server *s, struct mx_buf *b);

#endif
