/*
 * A request about several resources at once (docs/api.md, "Several resources at once"):
 * one part on each resource's actor (resource_actor.h), and what decides for all of them.
 *
 * Every part takes the same place in the domain's arrival order, and the set takes that
 * place and sends its parts in one step (under the domain's arrival lock), so that on each
 * resource it queues behind exactly the waiters that came before the request, and the parts
 * of two sets stand in the same order in every queue they share. A part that heads its
 * queue and fits is reserved there (resource.h); when the last part is reserved the set is
 * committing (unless its client has gone): each part is granted, their records are
 * submitted as one group (store_submit_group), and every part is answered once the group
 * is durable. No deadlock is possible: the waiter that arrived first heads every queue it
 * is in, and only leases (which end by their TTL) stand before it; a reserved part waits
 * for nothing. No place is reserved twice: a part can reach a queue only before every part
 * of a later set, so none is ever queued ahead of a part reserved already.
 *
 * The grants take consecutive change indexes, reserved when the set starts committing
 * (res_reserve_indexes()), so that nothing else comes between them in the events.
 *
 * A part answered with its lease while the set waits is a retry: its lease id holds that
 * resource already, and the answer renewed it. It counts as reserved, and is renewed again
 * in the commit (the set fails if that lease was lost meanwhile).
 * Until the set is committing, any part answered without a grant (lease_held at its
 * deadline or with wait_ms 0, limit_mismatch, too_many_waiters, unavailable) abandons the
 * set, as does ra_multi_hangup(): every other part is dropped from its queue, reserved or
 * not. Once committing, the set is granted whatever happens to the client.
 *
 * Threads: start from a thread that is not inside a turn; the rest runs on the actors'
 * turns and the store's threads; `done` is called once, on any of them.
 */
#ifndef MX_MULTI_H
#define MX_MULTI_H

#include <stdatomic.h>
#include <pthread.h>

#include "actors/resource_actor.h"

struct ra_multi;

struct ra_multi_part {
    struct ra_request req; /* the part's request and answer */
    struct ra_submitted submitted;
    struct ra_multi *m;
    const char *name; /* the caller's */
    size_t len;
    /* Answered with its lease while the set waited: the lease id holds the resource
     * already (a retry of the set), and the answer renewed it. It is renewed again at the
     * commit (res_req.part_own), and answers a second time then. */
    bool early;
};

enum { RA_MULTI_WAITING, RA_MULTI_COMMITTING, RA_MULTI_ABANDONED };

struct ra_multi {
    struct rt *rt;
    struct store *store;
    struct res_domain *domain;
    size_t n;
    /* Called once every part is answered: read each part's req.rq.status and view. */
    void (*done)(struct ra_multi *m);
    void *arg;
    /* private */
    _Atomic int state;
    _Atomic size_t reserved, answered;
    /* Answers before `done`: one a part, and a second one for each early part, whose
     * renewal at the commit answers again. */
    _Atomic size_t expected;
    /* The request as the caller made it, and whether its client is still there (the
     * template's `alive`; NULL: always): asked before the set commits. */
    struct res_req *client;
    bool (*client_alive)(struct res_req *q);
    pthread_mutex_t lock;
    size_t handed, committing; /* parts handed over, of those committed */
    bool failed;
    uint64_t epochs[64];
    struct store_rec *recs[64];
    uint64_t first_index; /* the first change index reserved for the parts committed */
    struct ra_multi_part parts[];
};

/* A set of `n` parts (2 to 64), with `template` (op RES_ACQUIRE, owner, ttl_ms, wait_ms,
 * lease_id, metadata, limit, shared) copied into each, its references taken; part i has
 * request id `first_id` + i. Every part has the template's lease id, or without one the
 * same one drawn at random. NULL when out of memory (or no random id). */
struct ra_multi *ra_multi_new(struct rt *rt, struct store *store, const char *const *names,
                              const size_t *lens, size_t n, const struct res_req *template,
                              uint64_t first_id, void (*done)(struct ra_multi *m), void *arg);

/* Sends every part, all with one place in `domain`'s arrival order. A part that cannot be
 * sent is answered RES_ERR_UNAVAILABLE and abandons the set. */
void ra_multi_start(struct ra_multi *m, struct res_domain *domain);

/* The client has gone: the set is abandoned unless it is committing. Any thread. */
void ra_multi_hangup(struct ra_multi *m);

/* After `done`: releases the parts' references and the set. */
void ra_multi_free(struct ra_multi *m);

#endif
