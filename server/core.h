/*
 * A core: one data set served, and everything behind the HTTP front that serves it (the
 * store, the blob mirror, the actors and their alarms, the change index and the recent
 * events), opened and closed as one. A lone server opens one at start; a server of a group
 * opens one when it takes the container over (server/group.c). Nothing of it is global to
 * the process: two cores on two data directories run side by side.
 *
 * Threads: core_open() and core_close() from one thread (the main thread); the core's
 * figures (core_front()'s callbacks) from any thread while it is published.
 */
#ifndef MX_CORE_H
#define MX_CORE_H

#include <stdbool.h>
#include <stddef.h>

#include "actors/resource.h"
#include "common/buf.h"
#include "http/server.h"
#include "persistence/mirror.h"
#include "server/options.h"

struct core;

struct core_config {
    /* The data directory, the actors' threads and limits, the mirror's settings and the
     * grace periods (read during core_open() only). */
    const struct options *opt;
    /* A standby's warm copy of the container, restored from when it takes over (NULL:
     * none). Lent: the core reads it during core_open() only. */
    struct mirror_copy *warm;
    /* The partition of the data set, of `partitions` (0 of 0 or 1: the only one). It keeps
     * its blobs under mx_partition_prefix(), and with more than one partition its fencing
     * tokens are seq << 8 | partition (docs/api.md, "Partitions"): unique in the group,
     * increasing per resource, since a name never leaves its partition. */
    unsigned partition, partitions;
};

enum core_rc {
    CORE_OK = 0,
    CORE_FAILED,  /* `failed` and err say what and why */
    CORE_BLOCKED, /* the container holds a line that cannot be decoded: no takeover until it
                     is repaired (docs/ha.md, "A journal that cannot be read") */
    CORE_HELD,    /* another server holds the container's owner lease: it took it first, and
                     nothing failed here (a CORE_FAILED to whoever does not tell them apart) */
};

/* Opens the store and starts everything behind HTTP: the mirror (restoring first when the
 * store is new), the actors, the alarms, and the leases in force. CORE_OK with *out set, or
 * CORE_FAILED or CORE_BLOCKED with what failed and why, *out NULL and nothing left
 * running. */
enum core_rc core_open(struct core **out, const struct core_config *cfg, char *err, size_t errlen,
                       const char **failed);

/* Stops everything, in order: alarms, actors, the mirror's reads, the store, the mirror
 * (which ships what the store committed last), the events (their waits complete). Taken
 * back from the HTTP front first (http_set_core(h, NULL)). NULL: nothing. */
void core_close(struct core *c);

/* A planned handover of the core's partition to `url` (mirror_hand_to()): named in the owner
 * blob when the core closes. Before core_close(). */
void core_hand_to(struct core *c, const char *url);
/* Why its waiters are answered 503 when it closes (a partition moved:
 * RES_PARTITION_MOVED); "shutting down" otherwise. Before core_close(). */
void core_set_stop_reason(struct core *c, const char *reason);

/* What the HTTP front serves the core with (http_config.core, http_set_core()): its actors,
 * store and events, and its readiness, metrics and parked requests. */
void core_front(struct core *c, struct http_core *out);

/* The limits a request is checked against, from the options: on every server of a group,
 * and by the HTTP front and every core of a process, alike. */
void core_limits(const struct options *o, struct res_limits *out);

/* Where the data set of partition `p` of `partitions` keeps its store: the data directory,
 * or with more than one partition its subdirectory p<ppp>. */
void core_data_dir(const struct options *o, unsigned p, unsigned partitions, char *out, size_t len);

/* The blob mirror (NULL: none). */
struct mirror *core_mirror(struct core *c);
/* Leases in force when the core opened. */
size_t core_leases(const struct core *c);
/* The store commits: true, else false with why. */
bool core_healthy(struct core *c, char *why, size_t len);

#endif
