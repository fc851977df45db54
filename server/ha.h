/*
 * The server group (docs/architecture.md, "High availability"; docs/ha.md): which server
 * is active, seen from the blob container alone. The owner blob's Azure lease says whether
 * a server holds the container, and its metadata which one (url, generation, since). A
 * standby watches it, probes the active's /healthz, and says when to take over; every
 * server writes a small heartbeat blob (servers/<id>.json) so that any of them can list
 * the group.
 *
 * Threads: everything from the main thread, except ha_render_servers() and ha_role_name(),
 * which any thread may call.
 */
#ifndef MX_HA_H
#define MX_HA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "persistence/owner.h"

struct ha_config {
    const char *advertise_url;
    const char *connection_string;
    const char *container;
    uint64_t failover_after_ms; /* the active unanswered this long: take over */
    /* The blobs of the group watched (its owner blob) are under this prefix of the container
     * (blob_options.prefix: a partition's, "p/003/"); NULL or "": the container's own.
     * Heartbeats are the container's, whatever the prefix. */
    const char *blob_prefix;
    /* Another ha of the same server writes its heartbeat (a partitioned server has one ha
     * per partition and one heartbeat): ha_heartbeat() does nothing. */
    bool no_heartbeat;
    /* The probes of the actives' /healthz, shared by the ha of every partition of a server
     * (NULL: its own): an active's answer is used by every partition it owns for a while. */
    struct ha_probes *probes;
};

/* Recent probes: one per active server, by URL. The main thread's. */
#define HA_PROBES_MAX 64
struct ha_probes {
    char url[HA_PROBES_MAX][256];
    bool ok[HA_PROBES_MAX];
    uint64_t at_ns[HA_PROBES_MAX];
};

/* One look at the owner blob, made for several partitions at once (one listing of their
 * owner blobs, with metadata): `ok` false when the blob store did not answer. */
struct ha_seen {
    bool ok;
    struct owner_view view;
    uint64_t sent_ns; /* when the listing was sent (mono) */
};

enum ha_role { HA_JOINING, HA_STANDBY, HA_ACTIVE, HA_FENCED };

/* What a standby should do after one look. */
enum ha_verdict {
    HA_WAIT, /* another server is active (or none is known yet): forward, or hold */
    HA_TAKE, /* the container is free, or its holder was given up: take it now */
};

struct ha;

int ha_open(struct ha **out, const struct ha_config *cfg, char *err, size_t errlen);
void ha_close(struct ha *h);
/* Leaving the group: this server's heartbeat is deleted, so that the others leave it out at
 * once, and none is written again. Main thread. */
void ha_withdraw(struct ha *h);

/* What the owner blob says. */
struct ha_view {
    char active[256];        /* the active's URL, or "" when none is known */
    struct owner_meta named; /* its generation, and the snapshot and journal it names */
    /* The active given up (its lease broken, by this look or another server's), or "". */
    char given_up[256];
    /* The container is free because another server broke this server's lease: it gave this
     * server up (it did not answer its probes). */
    bool broken_here;
    /* The container is free because its holder handed it over to this server (its URL),
     * naming it in the owner blob (`to`), or "". */
    char handed_to[256];
};

/* The look the next ha_watch() or ha_still_owner() takes instead of reading the owner
 * blob itself (once). */
void ha_set_seen(struct ha *h, const struct ha_seen *seen);

/* One look at the owner blob (and a probe of the active). */
enum ha_verdict ha_watch(struct ha *h, struct ha_view *v);

/* The active: false when the owner blob says another server holds the container (or
 * nobody does). Stepping down on it is always safe; it only makes an ousted active notice
 * before its next append or lease renewal. True also when the blob store did not answer;
 * `*confirmed_ns` is then left alone, else set to when the read that found this server
 * the owner was sent (mono): an active that cannot confirm it for the failover time stops
 * answering (docs/ha.md, "Reads"). */
bool ha_still_owner(struct ha *h, uint64_t *confirmed_ns);

/* This server has become the active, of `generation`. */
void ha_set_active(struct ha *h, uint64_t generation);

/* This server's role, for /v1/servers, the metrics and the logs. */
void ha_set_role(struct ha *h, enum ha_role role);
enum ha_role ha_role(struct ha *h);
const char *ha_role_name(enum ha_role role);
/* Call often; once a second it writes this server's heartbeat and rereads the others'.
 * `has_copy`: the server has a copy of the leases (the active), whose lag is given. */
void ha_heartbeat(struct ha *h, bool has_copy, uint64_t lag_changes, uint64_t lag_ms);

/* The owner the group last saw (this server once it is the active): its URL ("" when
 * none is known), generation and since when it holds the container (wall ms; 0: unknown).
 * Any thread. */
void ha_owner(struct ha *h, char url[256], uint64_t *generation, int64_t *since_ms);

/* The partitions this server owns, written into its heartbeat from the next one on (a
 * partitioned server's; a group of one partition writes none). */
void ha_set_partitions(struct ha *h, const unsigned *parts, size_t n);

/* The servers this one has given up and holds gone (see partitions.c), written into its
 * heartbeat ("gone": [urls]) from the next one on, so that each of them can tell that a
 * peer cannot reach it. */
void ha_set_gone(struct ha *h, const char (*urls)[256], size_t n);
/* Whether a fresh heartbeat of another server, at the last reading, says it holds this
 * server gone. Main thread. */
bool ha_gone_to_others(struct ha *h);
/* Whether this server declines new partitions for now (a takeover of one failed and is
 * being waited out), written into its heartbeat ("declines": true) from the next one on;
 * and the servers whose fresh heartbeats say so at the last reading, into `urls` (at most
 * `max`; returns how many). Placement gives nothing to a server that declines. Main
 * thread. */
void ha_set_declines(struct ha *h, bool declines);
size_t ha_decliners(struct ha *h, char (*urls)[256], size_t max);
/* A probe of `url`'s /healthz (shared with the probes of the actives, struct ha_probes):
 * true when it answered 200. Blocks for up to a third of the failover time (at most 1 s).
 * Main thread. */
bool ha_probe(struct ha *h, const char *url);

/* The servers whose heartbeats were fresh at the last reading (ha_heartbeat() rereads them
 * once a second): their URLs into `urls`, at most `max`. Returns how many. Any thread. */
size_t ha_live(struct ha *h, char (*urls)[256], size_t max);
/* Rereads the heartbeats now, for ha_live() (a server that withdrew writes none and so
 * reads none in ha_heartbeat()). Blob requests: a listing, and a read of each. */
void ha_reread_live(struct ha *h);

/* The body of GET /v1/servers (docs/api.md, "Servers"). 0, or -1 when out of memory. */
int ha_render_servers(struct ha *h, struct mx_buf *out);

/* Metrics: role, takeovers, the last takeover's duration. */
void ha_metrics(struct ha *h, struct mx_buf *b);
void ha_count_takeover(struct ha *h, uint64_t ms);

#endif
