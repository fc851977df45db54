/*
 * The resource actor (see resource_actor.h).
 *
 * A turn: load the row if this is the actor's first message (or reload it if the store's
 * epoch moved because a commit failed), apply the message to the state machine, write a
 * record if the resource changed, queue every answer behind that record in the store
 * (so a reply is sent only once what it shows is durable), and set the actor's one timer
 * to the resource's next deadline.
 */
#include "actors/resource_actor.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/container_of.h"
#include "common/log.h"

enum { MSG_REQ = 1, MSG_DROP, MSG_ALARM = RA_MSG_ALARM, MSG_TIMER, MSG_COMMIT, MSG_SUBMITTED };

struct drop_msg {
    struct rt_msg msg;
    uint64_t id;
};

struct ra_state {
    struct res res;
    struct rt_timer timer; /* deadlines of waiters and watchers */
    uint64_t timer_at;     /* the deadline the timer is set for; 0: none */
    uint64_t alarm_at;     /* the lease's expiry in the alarms; UINT64_MAX: none, 0: unknown */
    uint64_t epoch;        /* the store epoch the state was read in */
    uint64_t last_seq;     /* the last record submitted */
    bool loaded;
    /* A part's grant went into a group not yet submitted (MSG_SUBMITTED ends it): nothing
     * is written meanwhile, answers wait in `held`, changes gather in the state, and a
     * second part's commit waits in `deferred`. */
    bool holding;
    struct res_out held;
    struct ra_request *deferred, *deferred_tail; /* linked through rq._next */
    uint64_t held_from, held_to;                 /* the group's change indexes (events) */
};

static struct res_now now_clock(void)
{
    uint64_t mono = mx_mono_ns();
    return (struct res_now){
        .mono_ns = mono, .wall_ms = mx_wall_ms(), .lease_ms = mx_lease_ms_at(mono)};
}

/* Store thread (or inside store_wait). */
static void on_durable(struct store_wait *w, int status)
{
    struct ra_request *r = container_of(w, struct ra_request, _wait);
    if (status != STORE_OK && r->rq.status != RES_GONE) {
        res_view_clear(&r->rq.view);
        r->rq.status = RES_ERR_UNAVAILABLE;
        r->rq.reason = status == STORE_ECLOSED ? "shutting down" : "the store could not commit";
    }
    r->reply(r);
}

static void fail_all(struct res_out *out, const char *reason)
{
    struct res_req *q;
    while ((q = res_out_pop(out)) != NULL) {
        struct ra_request *r = container_of(q, struct ra_request, rq);
        if (q->status != RES_GONE) {
            res_view_clear(&q->view);
            q->status = RES_ERR_UNAVAILABLE;
            q->reason = reason;
        }
        r->reply(r);
    }
}

/* A turn's changes for the event log, told once they are durable. */
struct ev_notice {
    struct store_wait wait;
    struct ev_log *log;
    uint64_t from, to;
    size_t len;
    char name[];
};

/* Store thread (or inside store_wait). Told whatever the commit's outcome: a change that
 * failed wakes a watch that finds nothing new, and watches again. */
static void on_events_durable(struct store_wait *w, int status)
{
    struct ev_notice *n = container_of(w, struct ev_notice, wait);
    ev_durable(n->log, n->name, n->len, n->from, n->to, status == STORE_OK);
    free(n);
}

/* Holding: answers wait for the group (those whose client left are told at once). */
static void hold_answers(struct ra_state *st, struct res_out *out)
{
    struct res_req *q;
    while ((q = res_out_pop(out)) != NULL) {
        if (q->status == RES_GONE) {
            struct ra_request *r = container_of(q, struct ra_request, rq);
            r->reply(r);
            continue;
        }
        q->_next = NULL;
        if (st->held.tail)
            st->held.tail->_next = q;
        else
            st->held.head = q;
        st->held.tail = q;
    }
}

/* A turn that reserved a part's place tells its request. */
static void tell_reserved(struct res_out *out)
{
    if (!out->reserved)
        return;
    struct ra_request *r = container_of(out->reserved, struct ra_request, rq);
    out->reserved = NULL;
    if (r->reserved)
        r->reserved(r);
}

/* Writes the change (if any), then queues every answer behind it. */
static void flush(struct rt_actor *self, struct ra_state *st, struct ra_ctx *ctx,
                  struct res_out *out)
{
    tell_reserved(out);
    if (st->holding) {
        hold_answers(st, out);
        return;
    }
    if (st->res.changed) {
        size_t len;
        const char *name = rt_name(self, &len);
        uint64_t from = st->res.changed_from, to = st->res.row.index;
        struct store_rec *rec = res_take_rec(&st->res, name, len);
        uint64_t seq = rec ? store_submit_in(ctx->store, rec, st->epoch, rt_turn_ctx(self)) : 0;
        res_forget_changes(&st->res);
        struct ev_log *log = ctx->domain->events;
        struct ev_notice *n = log ? malloc(sizeof *n + len) : NULL;
        if (n) {
            *n = (struct ev_notice){.log = log, .from = from, .to = to, .len = len};
            memcpy(n->name, name, len);
            n->wait.done = on_events_durable;
        } else if (log) {
            ev_durable(log, name, len, from, to, true); /* out of memory: told at once */
        }
        if (seq == 0) {
            /* Not written: memory holds a change the store never will. Read the row again
             * at the next message, and tell these clients nothing happened. */
            st->epoch = 0;
            fail_all(out, rec ? "shutting down" : "out of memory");
            if (n)
                on_events_durable(&n->wait, STORE_EFAIL);
            return;
        }
        st->last_seq = seq;
        if (n)
            store_wait_in(ctx->store, &n->wait, st->epoch, seq, rt_turn_ctx(self));
    }
    struct res_req *q;
    while ((q = res_out_pop(out)) != NULL) {
        struct ra_request *r = container_of(q, struct ra_request, rq);
        if (q->status == RES_GONE) {
            r->reply(r);
            continue;
        }
        r->_wait.done = on_durable;
        store_wait_in(ctx->store, &r->_wait, st->epoch, st->last_seq, rt_turn_ctx(self));
    }
}

/*
 * Arms what the resource waits for. The deadlines of waiters and watchers go on the actor's
 * own timer, which keeps it active (they are requests in its memory). The lease's expiry
 * goes in the alarms, which do not: a resource with a lease and nothing else rests, its
 * actor deactivated, and the alarm activates it again to expire the lease. Without alarms
 * (or when one cannot be set) the own timer keeps the expiry too.
 */
static void set_timer(struct rt_actor *self, struct ra_state *st, struct ra_ctx *ctx)
{
    uint64_t lease_at = res_lease_deadline(&st->res);
    uint64_t next = res_queue_deadline(&st->res);
    if (ctx->alarms && lease_at != st->alarm_at) {
        size_t len;
        const char *name = rt_name(self, &len);
        if (lease_at == UINT64_MAX)
            rt_alarm_cancel(ctx->alarms, name, len);
        bool set =
            lease_at == UINT64_MAX || rt_alarm_set(ctx->alarms, name, len, lease_at) == RT_OK;
        st->alarm_at = set ? lease_at : UINT64_MAX;
    }
    if (lease_at != st->alarm_at && lease_at < next)
        next = lease_at; /* no alarm: the own timer keeps the expiry (and the actor active) */

    if (next == UINT64_MAX) {
        if (st->timer_at) {
            rt_timer_cancel(self, &st->timer);
            st->timer_at = 0;
        }
        return;
    }
    if (next == st->timer_at)
        return;
    if (rt_timer_set(self, &st->timer, next) == RT_OK)
        st->timer_at = next;
    else
        st->timer_at = 0; /* shutting down or out of memory: the next message retries */
}

/* Reads the row (again). Returns false when the store could not be read. */
static bool load(struct rt_actor *self, struct ra_state *st, struct ra_ctx *ctx,
                 const struct res_now *now)
{
    uint64_t epoch = store_epoch(ctx->store);
    struct store_row row;
    size_t len;
    const char *name = rt_name(self, &len);
    memset(&row, 0, sizeof row);
    int rc = store_get(ctx->store, name, len, &row);
    if (rc == STORE_NOTFOUND)
        row.index = store_index_floor(ctx->store);
    else if (rc != STORE_OK)
        return false;
    /* `held` counts the store's leases until a change moves it. A reload replaces a state
     * that may hold changes the store lost: count the difference. */
    if (st->loaded)
        res_count_held(&st->res, ctx->domain, -1);
    res_load(&st->res, &row, now);
    if (st->loaded)
        res_count_held(&st->res, ctx->domain, 1);
    st->epoch = epoch;
    st->loaded = true;
    return true;
}

/* A part's commit: its grant, and the record of the turn handed to its request, which
 * submits it with the other parts'. Until then the actor holds. */
static void commit_part(struct rt_actor *self, struct ra_state *st, struct ra_ctx *ctx,
                        struct ra_request *r, const struct res_now *now, struct res_out *out)
{
    res_multi_grant(&st->res, ctx->domain, &r->rq, now, out);
    size_t len;
    const char *name = rt_name(self, &len);
    struct store_rec *rec = NULL;
    if (st->res.changed) {
        st->held_from = st->res.changed_from;
        st->held_to = st->res.row.index;
        rec = res_take_rec(&st->res, name, len);
        res_forget_changes(&st->res);
    }
    st->holding = true;
    r->granted(r, rec, st->epoch);
}

/* The group is submitted as `seq`: the answers held wait for it, and what changed
 * meanwhile is written behind it. */
static void submitted(struct rt_actor *self, struct ra_state *st, struct ra_ctx *ctx, uint64_t seq,
                      const struct res_now *now, struct res_out *out)
{
    st->holding = false;
    if (seq == 0) {
        /* Not written (a part failed, or the store is closing): memory holds a grant the
         * store never will. Read the row again at the next message; the held answers
         * fail, and so does a part's commit that waited (its record, of epoch 0, is
         * refused with its group). */
        st->epoch = 0;
        st->held_from = st->held_to = 0;
        fail_all(&st->held, "the grant of several resources could not be written");
        st->held.head = st->held.tail = NULL;
    }
    if (seq > st->last_seq)
        st->last_seq = seq;
    size_t len;
    const char *name = rt_name(self, &len);
    struct ev_log *log = ctx->domain->events;
    if (log && st->held_to && !seq)
        ev_durable(log, name, len, st->held_from, st->held_to, false); /* never written */
    if (log && st->held_to && seq) {
        struct ev_notice *n = malloc(sizeof *n + len);
        if (n) {
            *n = (struct ev_notice){
                .log = log, .from = st->held_from, .to = st->held_to, .len = len};
            memcpy(n->name, name, len);
            n->wait.done = on_events_durable;
            store_wait_in(ctx->store, &n->wait, st->epoch, seq, rt_turn_ctx(self));
        } else {
            ev_durable(log, name, len, st->held_from, st->held_to, true);
        }
    }
    st->held_from = st->held_to = 0;
    /* The held answers go first, in their order. */
    if (st->held.head) {
        st->held.tail->_next = out->head;
        if (!out->tail)
            out->tail = st->held.tail;
        out->head = st->held.head;
        st->held.head = st->held.tail = NULL;
    }
    /* The next group, if a part's commit waited for this one. */
    struct ra_request *next = st->deferred;
    if (next) {
        st->deferred = next->rq._next ? container_of(next->rq._next, struct ra_request, rq) : NULL;
        if (!st->deferred)
            st->deferred_tail = NULL;
        next->rq._next = NULL;
        /* What changed before it is written first, as its own record. */
        flush(self, st, ctx, out);
        commit_part(self, st, ctx, next, now, out);
    }
}

static void ra_activate(struct rt_actor *self, void *state)
{
    (void)self;
    struct ra_state *st = state;
    res_init(&st->res, 0);
    st->res.name = rt_name(self, &st->res.name_len); /* stable while the actor lives */
    rt_timer_init(&st->timer, MSG_TIMER);
    st->alarm_at = 0; /* unknown (a rested lease has one): the first turn sets or cancels it */
}

static void ra_receive(struct rt_actor *self, void *state, struct rt_msg *m)
{
    struct ra_state *st = state;
    struct ra_ctx *ctx = rt_ctx(self);
    struct res_domain *d = ctx->domain;
    struct res_now now = now_clock();
    struct res_out out = {0};

    bool stale = st->loaded && st->epoch != store_epoch(ctx->store);
    if ((!st->loaded || stale) && !load(self, st, ctx, &now)) {
        if (m->type == MSG_REQ) {
            struct ra_request *r = (struct ra_request *)m;
            r->rq.status = RES_ERR_UNAVAILABLE;
            r->rq.reason = "the store could not be read";
            r->reply(r);
        } else if (m->type == MSG_ALARM) {
            /* The expiry must still happen: look again in a second. */
            size_t len;
            const char *name = rt_name(self, &len);
            rt_alarm_free(m);
            rt_alarm_set(ctx->alarms, name, len, now.mono_ns + 1000 * MX_NS_PER_MS);
        } else if (m->type == MSG_DROP) {
            free(m);
        } else if (m->type == MSG_COMMIT) {
            struct ra_request *r = (struct ra_request *)m;
            r->granted(r, NULL, 0); /* the group fails: its request answers */
        } else if (m->type == MSG_SUBMITTED) {
            submitted(self, st, ctx, 0, &now, &out); /* what was held fails */
            fail_all(&out, "the store could not be read");
        }
        return;
    }

    switch (m->type) {
    case MSG_REQ: {
        struct ra_request *r = (struct ra_request *)m;
        const char *why =
            r->rq.op != RES_GET && ctx->write_gate ? ctx->write_gate(ctx->gate_arg) : NULL;
        if (why) {
            r->rq.status = RES_ERR_UNAVAILABLE;
            r->rq.reason = why;
            r->reply(r);
            res_tick(&st->res, d, &now, &out); /* what is due still happens */
            break;
        }
        res_handle(&st->res, d, &r->rq, &now, &out);
        break;
    }
    case MSG_DROP:
        res_drop(&st->res, d, ((struct drop_msg *)m)->id, &now, &out);
        free(m);
        break;
    case MSG_ALARM:
        rt_alarm_free(m);
        st->alarm_at = UINT64_MAX; /* it fired: set anew below if still needed */
        res_tick(&st->res, d, &now, &out);
        break;
    case MSG_TIMER:
        st->timer_at = 0;
        res_tick(&st->res, d, &now, &out);
        break;
    case MSG_COMMIT: {
        struct ra_request *r = (struct ra_request *)m;
        if (st->holding) { /* one group at a time: after the one under way */
            r->rq._next = NULL;
            if (st->deferred_tail)
                st->deferred_tail->rq._next = &r->rq;
            else
                st->deferred = r;
            st->deferred_tail = r;
            break;
        }
        commit_part(self, st, ctx, r, &now, &out);
        break;
    }
    case MSG_SUBMITTED:
        submitted(self, st, ctx, ((struct ra_submitted *)m)->seq, &now, &out);
        break;
    }
    flush(self, st, ctx, &out);
    set_timer(self, st, ctx);
}

/* Idle when nobody waits or watches: a lease in force needs only its alarm. */
static bool ra_idle(struct rt_actor *self, void *state, uint64_t *barrier)
{
    (void)self;
    struct ra_state *st = state;
    *barrier = st->last_seq;
    return !st->holding && !st->deferred && res_idle(&st->res);
}

static void ra_deactivate(struct rt_actor *self, void *state, bool shutdown)
{
    struct ra_state *st = state;
    struct ra_ctx *ctx = rt_ctx(self);
    struct res_out out = {0};
    const char *why = atomic_load(&ctx->domain->stop_reason);
    res_cancel_all(&st->res, ctx->domain,
                   !shutdown ? "deactivated"
                   : why     ? why
                             : "shutting down",
                   &out);
    struct res_req *q;
    while ((q = res_out_pop(&out)) != NULL) {
        struct ra_request *r = container_of(q, struct ra_request, rq);
        r->reply(r);
    }
    /* Only at shutdown can a group be under way here (holding keeps the actor active). */
    fail_all(&st->held, "shutting down");
    st->held.head = st->held.tail = NULL;
    while (st->deferred) {
        struct ra_request *r = st->deferred;
        st->deferred = r->rq._next ? container_of(r->rq._next, struct ra_request, rq) : NULL;
        r->granted(r, NULL, 0);
    }
    if (!shutdown && st->loaded && st->epoch != store_epoch(ctx->store)) {
        /* A commit failed since the state was read: what memory holds may never have
         * reached the store. Leave with the store's view, counted and with its alarm. */
        struct res_now now = now_clock();
        uint64_t lease_at;
        if (load(self, st, ctx, &now) && ctx->alarms &&
            (lease_at = res_lease_deadline(&st->res)) != UINT64_MAX) {
            size_t len;
            const char *name = rt_name(self, &len);
            rt_alarm_set(ctx->alarms, name, len, lease_at);
        }
    }
    res_free(&st->res);
}

const struct rt_behavior ra_behavior = {
    .state_size = sizeof(struct ra_state),
    .activate = ra_activate,
    .receive = ra_receive,
    .idle = ra_idle,
    .deactivate = ra_deactivate,
};

bool ra_barrier_passed(void *ctx, uint64_t barrier)
{
    return store_seq_done(((struct ra_ctx *)ctx)->store, barrier);
}

/* ---- sending --------------------------------------------------------------------- */

static void cancel_request(struct rt_msg *m)
{
    struct ra_request *r = (struct ra_request *)m;
    r->rq.status = RES_ERR_UNAVAILABLE;
    r->rq.reason = "shutting down";
    r->reply(r);
}

int ra_send(struct rt *rt, const char *name, size_t len, struct ra_request *r,
            struct store_batch *batch)
{
    r->msg.type = MSG_REQ;
    r->msg.cancel = cancel_request;
    r->rq.status = RES_PENDING;
    /* The turn usually runs right here on the HTTP thread: a lease change is a few
     * microseconds of work, less than waking a worker for it. Its change then goes into
     * the sender's batch; a turn a worker runs submits to the store's writer. */
    return rt_send_here(rt, name, len, &r->msg, batch);
}

static void cancel_part(struct rt_msg *m)
{
    /* Shutting down before the commit: the group is never submitted. */
    struct ra_request *r = (struct ra_request *)m;
    r->granted(r, NULL, 0);
}

int ra_send_commit(struct rt *rt, const char *name, size_t len, struct ra_request *r)
{
    r->msg.type = MSG_COMMIT;
    r->msg.cancel = cancel_part;
    return rt_send(rt, name, len, &r->msg, 0);
}

int ra_send_submitted(struct rt *rt, const char *name, size_t len, struct ra_submitted *m,
                      uint64_t seq)
{
    m->msg.type = MSG_SUBMITTED;
    m->msg.cancel = NULL; /* shutting down: the held answers are cancelled at deactivation */
    m->seq = seq;
    return rt_send(rt, name, len, &m->msg, 0);
}

static void free_msg(struct rt_msg *m)
{
    free(m);
}

void ra_send_drop(struct rt *rt, const char *name, size_t len, uint64_t id)
{
    struct drop_msg *m = calloc(1, sizeof *m);
    if (!m)
        return; /* the waiter stays until its deadline or its grant's alive() check */
    m->msg.type = MSG_DROP;
    m->msg.cancel = free_msg;
    m->id = id;
    /* Not active: nothing waits there. */
    if (rt_send(rt, name, len, &m->msg, RT_SEND_IF_ACTIVE) != RT_OK)
        free(m);
}

struct restore {
    struct ra_ctx *ctx;
    struct res_now now;
    size_t n, unset;
};

static void restore_row(void *arg, const char *name, size_t len, const struct store_held *h)
{
    struct restore *r = arg;
    uint64_t at = res_deadline_ns(h->deadline_ms, &r->now);
    if (rt_alarm_set(r->ctx->alarms, name, len, at) != RT_OK)
        r->unset++;
    res_count_stored(r->ctx->domain, h->limit, h->nheld, h->nshared);
    r->n++;
}

int ra_restore(struct ra_ctx *ctx, size_t *count, size_t *unset)
{
    struct restore r = {.ctx = ctx, .now = now_clock()};
    rt_alarms_hold(ctx->alarms, true); /* the scan first: what ran out meanwhile fires after */
    uint64_t rows;
    if (store_count_rows(ctx->store, &rows) == STORE_OK)
        rt_alarms_reserve(ctx->alarms, (size_t)rows);
    int rc = store_each_held(ctx->store, restore_row, &r);
    rt_alarms_hold(ctx->alarms, false);
    *count = r.n;
    *unset = r.unset;
    return rc;
}

/* ---- listing --------------------------------------------------------------------- */

struct list_fill {
    struct ra_list *l;
    size_t cap;
};

static void list_row(void *arg, const char *name, size_t len, struct store_row *row)
{
    struct list_fill *f = arg;
    store_row_clear(row); /* the actor is the authority on the state; we need the name */
    if (f->l->n >= f->cap || len >= sizeof f->l->items[0].name)
        return;
    struct ra_list_item *it = &f->l->items[f->l->n++];
    memcpy(it->name, name, len);
    it->name[len] = '\0';
    it->name_len = len;
}

static void list_item_done(struct ra_list *l)
{
    if (atomic_fetch_sub(&l->pending, 1) == 1)
        l->done(l);
}

static void list_reply(struct ra_request *r)
{
    list_item_done(container_of(r, struct ra_list_item, req)->list);
}

struct ra_list *ra_list_start(struct rt *rt, struct store *store, const char *prefix,
                              const char *after, int limit, void (*done)(struct ra_list *l),
                              void *arg)
{
    struct ra_list *l = calloc(1, sizeof *l + ((size_t)limit + 1) * sizeof l->items[0]);
    if (!l)
        return NULL;
    l->done = done;
    l->arg = arg;
    /* One name more than asked for says whether another page follows. */
    struct list_fill f = {l, (size_t)limit + 1};
    if (store_list_held(store, prefix, after, limit + 1, list_row, &f) != STORE_OK)
        l->store_error = true;
    l->full = l->n > (size_t)limit;
    if (l->full)
        l->n = (size_t)limit;
    /* One extra count for this function, so `done` runs after the last send. */
    atomic_init(&l->pending, l->n + 1);
    for (size_t i = 0; i < l->n; i++) {
        struct ra_list_item *it = &l->items[i];
        it->list = l;
        it->req.reply = list_reply;
        it->req.rq.op = RES_GET;
        int rc = ra_send(rt, it->name, it->name_len, &it->req, NULL);
        if (rc != RT_OK) {
            it->req.rq.status = RES_ERR_UNAVAILABLE;
            it->req.rq.reason = rt_strerror(rc);
            list_item_done(l);
        }
    }
    list_item_done(l);
    return l;
}

void ra_list_free(struct ra_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        res_view_clear(&l->items[i].req.rq.view);
    free(l);
}
