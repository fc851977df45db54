/*
 * The server group's takeover sequence (docs/ha.md): a server started with --ha joins as a
 * standby (forwarding, keeping a warm copy of the container), takes the container over
 * when it is free or its active has been given up, serves while it can confirm it owns
 * it, and notices when another server has taken it. The group owns the HA state and, while
 * this server is the active, its core, which it publishes to the HTTP front once whole.
 *
 * Threads: the main thread's, between signals; but the `ctx` callbacks of the HTTP front
 * (group_ready(), group_metrics(), group_render_servers()), which any thread may call. A
 * partition's takeover opens its core on a thread of its own (one group_tick() starts it,
 * a later one serves it or stays a standby), so that a slow takeover holds up no other
 * partition of the server; a partition handed over closes its core on a thread of its
 * own too (group_hand_over()).
 */
#ifndef MX_GROUP_H
#define MX_GROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "http/server.h"
#include "server/core.h"
#include "server/ha.h"
#include "server/options.h"

/* How often group_tick() is called (ms). */
#define GROUP_TICK_MS 100

struct group;

struct group_config {
    const struct options *opt; /* must outlive the group */
    /* The partition this group is of `partitions` in the container (common/partition.h):
     * its blobs are under mx_partition_prefix(); one partition: the container's own. */
    unsigned partition, partitions;
    /* Another group of this server writes its heartbeat (every group but a partitioned
     * server's first). */
    bool no_heartbeat;
    /* The probes of the actives, shared by the groups of a partitioned server (NULL: its
     * own; see struct ha_probes). */
    struct ha_probes *probes;
};

/* Joins the group (no core is opened: the server is a standby until it takes over). 0, or
 * -1 with what failed and why. */
int group_open(struct group **out, const struct group_config *cfg, char *err, size_t errlen,
               const char **failed);
/* The HTTP front whose role the group sets and to which it publishes its core: once, before
 * the first group_tick(). */
void group_attach(struct group *g, struct http *h);
/* Takes the core back from the HTTP front and closes it (after http_quiesce()), then
 * leaves the group. NULL: nothing. */
void group_close(struct group *g);

/* One look at the group. Returns 1 when this server was fenced and must start again. */
int group_tick(struct group *g);
/* The look at the owner blob the next group_tick() takes instead of reading it itself (a
 * partitioned server lists every partition's owner blob once a tick). */
void group_set_seen(struct group *g, const struct ha_seen *seen);

/* Whether a standby of this group takes the partition over when it finds it free (true
 * from group_open(); a partitioned server lets only the partitions placement gives it). */
void group_allow_takeover(struct group *g, bool allow);
/* A planned move of the active's partition to another server: its requests are held here
 * (and forwarded to the new owner once it is known), the core is taken back from the front
 * and closed on a thread of its own, which ships what it committed last, seals the journal
 * and releases the owner lease; the server is a standby of the partition once that is over
 * (a later group_tick() sees it), and takes it over again only once allowed
 * (group_allow_takeover()). Nothing: not the active. */
void group_hand_over(struct group *g);
/* The core handed over is still closing (on a thread of its own, so that the server's
 * other partitions are ticked meanwhile): group_owner() names this server until it is
 * closed, and the group looks at the partition again at the first tick after. */
bool group_handing_over(struct group *g);
/* Leaving the group (a SIGTERM): the server's heartbeat is deleted and not written again,
 * so that the others count without it at once (see ha_withdraw()). */
void group_withdraw(struct group *g);

/* The partition's owner at the last look: this server's URL while it is the active, the
 * URL the owner blob names, or NULL when the partition is free. Main thread. */
const char *group_owner(struct group *g);
/* The server the last look gave up as the partition's owner (it did not answer for
 * --failover-after-ms: its lease was broken), or NULL. Main thread. */
const char *group_given_up(struct group *g);
/* A planned handover to `url`, named in the owner blob as the partition's next owner: call
 * before group_hand_over() (nothing when not the active). Main thread. */
void group_hand_to(struct group *g, const char *url);
/* The server the partition was handed to, named by its last owner, while it is free at the
 * last look; NULL when it is not free or none was named. Main thread. */
const char *group_handed_to(struct group *g);
/* Whether a failed takeover of the partition is being waited out (the next may start only
 * after a backoff), at `now_ns` (mono). Main thread. */
bool group_declines(struct group *g, uint64_t now_ns);
/* Whether the last look found the partition free because another server broke this
 * server's lease (it gave this server up). Main thread. */
bool group_broken_here(struct group *g);
/* The heartbeat's list of servers held gone (ha_set_gone()), whether another server holds
 * this one gone (ha_gone_to_others()), and a probe of a server (ha_probe()). Main thread. */
void group_set_gone(struct group *g, const char (*urls)[256], size_t n);
bool group_gone_to_others(struct group *g);
/* The heartbeat's "declines" (ha_set_declines()), and the servers that say so
 * (ha_decliners()). Main thread. */
void group_set_declines(struct group *g, bool declines);
size_t group_decliners(struct group *g, char (*urls)[256], size_t max);
bool group_probe(struct group *g, const char *url);
/* The partition's owner as the group last saw it (ha_owner()). Any thread. */
void group_owner_info(struct group *g, char url[256], uint64_t *generation, int64_t *since_ms);
/* The partitions this server owns, for its heartbeat (ha_set_partitions()). */
void group_set_partitions(struct group *g, const unsigned *parts, size_t n);
/* The servers of the container whose heartbeats are fresh (ha_live()). */
size_t group_live(struct group *g, char (*urls)[256], size_t max);
/* Rereads the heartbeats now (ha_reread_live()). */
void group_reread_live(struct group *g);

/* The core, while this server is the active (NULL: a standby). Main thread. */
struct core *group_core(struct group *g);
/* This server's role in the group ("standby", "active"...), for the logs. */
const char *group_role(struct group *g);

/* The HTTP front's callbacks (`ctx`: the group). /readyz: a standby is ready when it knows
 * an active to forward to; the active when its core is (asked next). */
bool group_ready(void *ctx, char *why, size_t len, struct mx_buf *details);
/* /metrics: the group's and the takeover sequence's. */
void group_metrics(void *ctx, struct mx_buf *b);
/* The body of GET /v1/servers. */
int group_render_servers(void *ctx, struct mx_buf *out);

#endif
