/*
 * The server's core: what runs behind the HTTP front (the store, the blob mirror, the
 * actors and their alarms), started and stopped as one. A single server starts it once; a
 * server of a group starts it when it takes the container over (server/group.c).
 *
 * Threads: the main thread's, but for what the HTTP threads read for /metrics and their
 * parked-requests hint: they read the core only while `core_published` says it is whole,
 * /metrics under `core_lock` (start_core() publishes it last, close_core() takes it back
 * first, under the lock, so a page being rendered holds the core until it is done).
 */
#ifndef MX_CORE_H
#define MX_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/resource.h"
#include "actors/resource_actor.h"
#include "actors/runtime.h"
#include "http/auth.h"
#include "http/server.h"
#include "persistence/mirror.h"
#include "persistence/store.h"
#include "server/ha.h"
#include "server/options.h"

struct server {
    struct options opt;
    pthread_mutex_t core_lock;   /* held to publish the core, take it back, render it */
    _Atomic bool core_published; /* the core is whole (set and cleared under core_lock) */
    struct store *store;
    struct mirror *mirror; /* NULL: no blob mirror */
    struct rt *rt;
    struct http *http;
    struct auth *auth; /* NULL: no authorization */
    struct res_domain domain;
    struct ra_ctx actx;
    _Atomic bool recovered;
    struct ha *ha;            /* NULL: not in a server group */
    _Atomic bool forwarding;  /* a standby that knows the active */
    char *const *argv;        /* as given, to start again as a standby when fenced */
    size_t leases;            /* leases in force when the core started */
    struct mirror_copy *copy; /* a standby's warm copy of the container */
    bool copy_ok;             /* it followed the journal at the last look */
    uint64_t copy_said_ns;    /* when a failure to follow was last logged */
    /* The active: when it last confirmed it owns the container (mono ns). */
    uint64_t owned_ns;
    /* A takeover stopped by a journal line that cannot be decoded: when it is tried again
     * (mono ns; 0: none) and when that was last logged. */
    _Atomic uint64_t blocked_until_ns; /* read by /metrics too */
    uint64_t blocked_said_ns;
    _Atomic uint64_t takeovers_blocked;
};

enum core_rc {
    CORE_OK = 0,
    CORE_FAILED = -1,  /* `failed` and err say what and why */
    CORE_BLOCKED = -2, /* the container holds a line that cannot be decoded: no takeover until
                          it is repaired (docs/ha.md, "A journal that cannot be read") */
};

/* Opens the store and starts everything behind HTTP: the mirror (restoring first when the
 * store is new), the actors, the alarms, and the leases in force. CORE_OK, or CORE_FAILED or
 * CORE_BLOCKED with what failed and why; close_core() stops what had started. */
enum core_rc start_core(struct server *s, char *err, size_t errlen, const char **failed);

/* Stops what runs behind HTTP, in order: alarms, actors, the mirror's reads, the store,
 * the mirror (which ships what the store committed last). Any of them may not have
 * started; what was stopped is set to NULL. */
void close_core(struct server *s);

#endif
