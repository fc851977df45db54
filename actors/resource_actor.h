/*
 * The resource actor: runs a resource's lease state machine (resource.h) in the actor
 * runtime's turns, loads its row from the store when activated, writes a record for
 * every change, and answers each request only once everything it shows is durable.
 *
 * It knows nothing of HTTP: a request is a struct ra_request that the caller embeds in
 * its own request state, with a reply callback the actor calls exactly once.
 */
#ifndef MX_RESOURCE_ACTOR_H
#define MX_RESOURCE_ACTOR_H

#include "actors/alarms.h"
#include "actors/resource.h"
#include "actors/runtime.h"
#include "common/names.h"
#include "persistence/store.h"

/* The behavior's context (rt_config.ctx). */
struct ra_ctx {
    struct res_domain *domain;
    struct store *store;
    /* May be NULL. Before a request that changes leases: NULL to go on, or why it must be
     * refused with 503 (a sync mirror that cannot reach blob storage). Any thread. */
    const char *(*write_gate)(void *arg);
    void *gate_arg;
    /* Lease expiries of resting resources (may be NULL: each actor keeps its own timer and
     * stays active while it holds a lease). Started with type RA_MSG_ALARM. */
    struct rt_alarms *alarms;
};

extern const struct rt_behavior ra_behavior;

/* rt_config.barrier_passed for this behavior. */
bool ra_barrier_passed(void *ctx, uint64_t barrier);

struct ra_request {
    struct rt_msg msg; /* private: set by ra_send() */
    struct res_req rq; /* the request, and its answer once replied */
    /* Called exactly once: when the answer is durable, or could not be made so (then
     * rq.status is RES_ERR_UNAVAILABLE), or the client is gone (RES_GONE). Any thread. */
    void (*reply)(struct ra_request *r);
    /* A part of a request about several resources (rq.multi) only. `reserved`: called once,
     * in the turn its place is reserved. `granted`: called in the turn ra_send_commit()
     * leads to, with the record of that turn's changes and the store epoch it was made in
     * (rec is NULL when it could not be made: out of memory). The caller submits every
     * part's record as one group (store_submit_group) and then calls ra_send_submitted()
     * for every part; until then the actor writes nothing more and answers nothing. Both
     * run on the actor's turn: they may rt_send, not with RT_SEND_RUN_HERE. */
    void (*reserved)(struct ra_request *r);
    void (*granted)(struct ra_request *r, struct store_rec *rec, uint64_t epoch);
    struct store_wait _wait; /* private */
};

/* What ra_send_submitted() sends: the caller's memory, untouched once that call returns
 * until the part's reply. */
struct ra_submitted {
    struct rt_msg msg; /* private */
    uint64_t seq;      /* private */
};

/* Sends `r` to resource `name`. When the resource's turn runs on this thread, its change
 * is submitted to the store through `batch` (may be NULL: see store_batch_begin), which
 * the caller then ends. Returns RT_OK, or an rt_status error (the caller still owns `r`
 * and answers it itself). */
int ra_send(struct rt *rt, const char *name, size_t len, struct ra_request *r,
            struct store_batch *batch);

/* Grants the reserved part `r` on resource `name` (it was sent with ra_send and its
 * `reserved` has been called). Any thread. Returns RT_OK or an rt_status error. */
int ra_send_commit(struct rt *rt, const char *name, size_t len, struct ra_request *r);

/* Tells resource `name` that the group its part's record went into was submitted as `seq`
 * (its last record). Any thread. Returns RT_OK or an rt_status error. */
int ra_send_submitted(struct rt *rt, const char *name, size_t len, struct ra_submitted *m,
                      uint64_t seq);

/* Tells resource `name` that the client of request `id` has gone. Any thread. */
void ra_send_drop(struct rt *rt, const char *name, size_t len, uint64_t id);

/* The message type to start the behavior's alarms with (rt_alarms_start). */
enum { RA_MSG_ALARM = 3 };

/*
 * At start, before the first request: counts the store's leases in force into
 * domain->held, and sets each one's expiry as an alarm, so that they expire on time with
 * none of their resources in memory. *count: leases found; *unset: alarms that could not
 * be set (out of memory; those leases expire when next touched). Returns STORE_OK or
 * STORE_EIO.
 */
int ra_restore(struct ra_ctx *ctx, size_t *count, size_t *unset);

/*
 * The list of held resources: names and order come from the store, and each entry is then
 * read from its actor exactly as GET reads it (and dropped if it is no longer held).
 */
struct ra_list_item {
    struct ra_request req;
    struct ra_list *list;
    char name[MX_NAME_MAX + 1];
    size_t name_len;
};

struct ra_list {
    _Atomic size_t pending;
    void (*done)(struct ra_list *l); /* any thread, once, after every item is answered */
    void *arg;
    bool store_error; /* the store could not be read */
    bool full;        /* the store returned `limit` names: there may be more */
    size_t n;
    struct ra_list_item items[];
};

/* Starts a list. `done` is called once (possibly before this returns). Returns NULL when
 * out of memory. The caller frees the list with ra_list_free() after `done`. */
struct ra_list *ra_list_start(struct rt *rt, struct store *store, const char *prefix,
                              const char *after, int limit, void (*done)(struct ra_list *l),
                              void *arg);
void ra_list_free(struct ra_list *l);

#endif
