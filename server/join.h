/*
 * A server of a group (--ha) joins it once the blob store answers. A store that does not
 * answer at start (a DNS lookup that timed out, a connection refused, a store still starting
 * beside the server) is no reason to exit, as a daemon started by a service manager or a
 * compose file would otherwise stay down: the join is tried again with a capped, jittered
 * backoff, while the HTTP front answers /healthz 200 and /readyz 503 with why, and held /v1
 * requests are answered 503 as by a standby that knows no active. A refusal (credentials the
 * store refuses, a container it refuses) ends the start once five attempts in a row met one
 * (2 to 4 s): one that does not repeat, or an open that failed while the store answered the
 * check before and after it, is tried again. Another partition count ends it at once.
 *
 * The join is the container's partition count (server/layout.h), then the group of the
 * server (server/group.h) or, with --partitions N > 1, its partitions
 * (server/partitions.h), whose owner becomes the caller once joined.
 *
 * Threads: join_new(), join_try(), join_due(), join_free() from the main thread; the front's
 * callbacks (join_ready(), join_metrics(), join_render_servers(), `ctx`: the join) from any.
 */
#ifndef MX_JOIN_H
#define MX_JOIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "server/group.h"
#include "server/partitions.h"

/* The backoff between attempts: from the first, doubling up to the cap (ms); each wait is
 * drawn between half of it and all of it, so that servers started together do not ask
 * together. */
#define JOIN_RETRY_FIRST_MS 250
#define JOIN_RETRY_MAX_MS   4000

struct join;

enum join_rc {
    JOIN_OK,       /* joined: join_group() or join_partitions() is set */
    JOIN_AGAIN,    /* the blob store did not answer: try again at join_due() */
    JOIN_MISMATCH, /* the container's group has another partition count: err names both */
    JOIN_FAILED,   /* refused five times in a row: err */
};

/* A join of the group of `gc` (--partitions 1) or of the partitions of `pc` (N > 1); both
 * must outlive it. NULL when out of memory. */
struct join *join_new(const struct group_config *gc, const struct partitions_config *pc);
/* One attempt. `failed`: what failed, for the log (JOIN_AGAIN, JOIN_FAILED). */
enum join_rc join_try(struct join *j, uint64_t now_ns, char *err, size_t errlen,
                      const char **failed);
/* When the next attempt is due (mono ns; 0: joined). */
uint64_t join_due(const struct join *j);
/* What was joined (the caller closes it: group_close(), partitions_close()), or NULL. */
struct group *join_group(struct join *j);
struct partitions *join_partitions(struct join *j);
/* After every HTTP answer that may call the callbacks is over (http_stop()). NULL: nothing. */
void join_free(struct join *j);

/* The front's callbacks: the joined group's or partitions' (group_ready(),
 * partitions_ready()...) once joined; before, /readyz is not ready ("role": "joining", why:
 * the blob store's last failure), /metrics has the join's figures, and /v1/servers is 503. */
bool join_ready(void *ctx, char *why, size_t len, struct mx_buf *details);
void join_metrics(void *ctx, struct mx_buf *b);
int join_render_servers(void *ctx, struct mx_buf *out);

#endif
