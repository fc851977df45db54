/*
 * A request about several resources at once (see multi.h).
 */
#include "actors/multi.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/container_of.h"
#include "common/uuid.h"

static struct ra_multi_part *part_of(struct ra_request *r)
{
    return container_of(r, struct ra_multi_part, req);
}

static bool part_alive(struct res_req *q)
{
    struct ra_multi_part *p = part_of(container_of(q, struct ra_request, rq));
    return atomic_load(&p->m->state) != RA_MULTI_ABANDONED;
}

/* Every part but `except` leaves its queue (one already answered ignores it). */
static void drop_others(struct ra_multi *m, const struct ra_multi_part *except)
{
    for (size_t i = 0; i < m->n; i++)
        if (&m->parts[i] != except)
            ra_send_drop(m->rt, m->parts[i].name, m->parts[i].len, m->parts[i].req.rq.id);
}

static void abandon(struct ra_multi *m, const struct ra_multi_part *by)
{
    int waiting = RA_MULTI_WAITING;
    if (atomic_compare_exchange_strong(&m->state, &waiting, RA_MULTI_ABANDONED))
        drop_others(m, by);
}

static void part_reserved(struct ra_request *r);

static void part_reply(struct ra_request *r)
{
    struct ra_multi_part *p = part_of(r);
    struct ra_multi *m = p->m;
    if (r->rq.status == RES_OK_LEASE && atomic_load(&m->state) == RA_MULTI_WAITING) {
        /* A retry of the set: this lease id holds the resource already, and was renewed.
         * It is renewed once more at the commit, and answers again then. */
        p->early = true;
        r->rq.part_own = true;
        part_reserved(r);
    } else {
        /* While waiting no part is granted: any other answer is a refusal, and ends the
         * set. */
        abandon(m, p);
    }
    /* Read before the count (after part_reserved(), which may add the early parts' second
     * answers): once the last answer is counted the set may be freed. */
    size_t n = atomic_load(&m->expected);
    if (atomic_fetch_add(&m->answered, 1) + 1 == n)
        m->done(m);
}

/* A message the actors must get (a holding actor waits for it): a full mailbox is waited
 * out; only a shutdown refuses it, and then the actors answer what they hold. */
static int send_surely(int (*send)(struct ra_multi_part *p, uint64_t seq), struct ra_multi_part *p,
                       uint64_t seq)
{
    int rc;
    while ((rc = send(p, seq)) == RT_EFULL)
        sched_yield();
    return rc;
}

static int send_commit(struct ra_multi_part *p, uint64_t seq)
{
    (void)seq;
    return ra_send_commit(p->m->rt, p->name, p->len, &p->req);
}

static int send_submitted(struct ra_multi_part *p, uint64_t seq)
{
    return ra_send_submitted(p->m->rt, p->name, p->len, &p->submitted, seq);
}

static void part_granted(struct ra_request *r, struct store_rec *rec, uint64_t epoch);

static void part_reserved(struct ra_request *r)
{
    struct ra_multi *m = part_of(r)->m;
    size_t n = m->n;
    if (atomic_fetch_add(&m->reserved, 1) + 1 != n)
        return;
    /* A client that has gone is never granted, as a single waiter is not. */
    if (m->client_alive && !m->client_alive(m->client)) {
        abandon(m, NULL);
        return;
    }
    int waiting = RA_MULTI_WAITING;
    if (!atomic_compare_exchange_strong(&m->state, &waiting, RA_MULTI_COMMITTING))
        return; /* abandoned meanwhile: the drops are on their way */
    /* Every part commits: the new ones are granted, the early ones (answered with their
     * own lease while the set waited) renewed once more, so that none is answered with a
     * lease that ran out meanwhile. Each early part answers a second time. */
    const char *names[64];
    size_t lens[64], fresh = 0;
    for (size_t i = 0; i < m->n; i++) {
        names[i] = m->parts[i].name;
        lens[i] = m->parts[i].len;
        fresh += !m->parts[i].early;
    }
    atomic_fetch_add(&m->expected, m->n - fresh);
    m->committing = m->n;
    m->first_index = res_reserve_indexes(m->domain, names, lens, m->n);
    /* The new grants' tokens in the order the request names the resources; none reserved
     * (the ceiling is near): every grant is refused, never given one out of order. */
    uint64_t token = fresh ? res_reserve_tokens(m->domain, fresh) : 0;
    uint64_t step = m->domain->token_stride > 1 ? m->domain->token_stride : 1;
    for (size_t i = 0; i < m->n; i++) {
        m->parts[i].req.rq.part_index = m->first_index + i;
        if (!m->parts[i].early) {
            m->parts[i].req.rq.part_token = token;
            token = token ? token + step : 0;
        }
    }
    for (size_t i = 0; i < m->n; i++)
        if (send_surely(send_commit, &m->parts[i], 0) != RT_OK)
            part_granted(&m->parts[i].req, NULL, 0); /* shutting down: the group fails */
}

static void part_granted(struct ra_request *r, struct store_rec *rec, uint64_t epoch)
{
    struct ra_multi_part *p = part_of(r);
    struct ra_multi *m = p->m;
    size_t i = (size_t)(p - m->parts);
    pthread_mutex_lock(&m->lock);
    m->recs[i] = rec;
    m->epochs[i] = epoch;
    /* Its grant answered (the restore grace, no token left, out of memory): not granted,
     * so none is. */
    if (!rec || r->rq.status != RES_OK_LEASE)
        m->failed = true;
    bool last = ++m->handed == m->committing;
    pthread_mutex_unlock(&m->lock);
    if (!last)
        return;
    struct store_rec *first = NULL, *prev = NULL;
    uint64_t epochs[64];
    size_t k = 0;
    for (size_t j = 0; j < m->n; j++) {
        if (!m->recs[j])
            continue;
        if (m->failed) {
            store_rec_free(m->recs[j]);
            continue;
        }
        if (prev)
            store_link_rec(prev, m->recs[j]);
        else
            first = m->recs[j];
        prev = m->recs[j];
        epochs[k++] = m->epochs[j];
    }
    uint64_t seq = 0;
    if (!m->failed) {
        store_link_rec(prev, NULL);
        seq = store_submit_group(m->store, first, k, epochs);
    }
    struct ev_log *log = m->domain->events;
    for (size_t j = 0; j < m->n; j++) {
        struct ra_multi_part *x = &m->parts[j];
        /* Never written: its reserved index is never shown (the actor says so too when
         * its turn recorded the grant). */
        if (!seq && log)
            ev_durable(log, x->name, x->len, m->first_index + j, m->first_index + j, false);
        send_surely(send_submitted, x, seq);
    }
}

struct ra_multi *ra_multi_new(struct rt *rt, struct store *store, const char *const *names,
                              const size_t *lens, size_t n, const struct res_req *template,
                              uint64_t first_id, void (*done)(struct ra_multi *m), void *arg)
{
    if (n < 2 || n > 64)
        return NULL;
    /* One lease id for the set: the client's, or one drawn here for every part. */
    uint8_t id[16];
    if (template->has_lease_id)
        memcpy(id, template->lease_id, sizeof id);
    else if (mx_uuid_random(id) != 0)
        return NULL;
    struct ra_multi *m = calloc(1, sizeof *m + n * sizeof m->parts[0]);
    if (!m)
        return NULL;
    m->rt = rt;
    m->store = store;
    m->n = n;
    m->done = done;
    m->arg = arg;
    m->client = (struct res_req *)template;
    m->client_alive = template->alive;
    atomic_init(&m->state, RA_MULTI_WAITING);
    atomic_init(&m->expected, n);
    pthread_mutex_init(&m->lock, NULL);
    for (size_t i = 0; i < n; i++) {
        struct ra_multi_part *p = &m->parts[i];
        p->m = m;
        p->name = names[i];
        p->len = lens[i];
        struct res_req *q = &p->req.rq;
        *q = *template;
        memset(&q->view, 0, sizeof q->view);
        q->owner = mx_str_ref(template->owner);
        q->metadata = template->has_metadata ? mx_str_ref(template->metadata) : NULL;
        q->op = RES_ACQUIRE;
        q->multi = true;
        q->has_lease_id = true;
        memcpy(q->lease_id, id, sizeof id);
        q->id = first_id + i;
        q->alive = part_alive;
        q->_next = q->_prev = NULL;
        p->req.reply = part_reply;
        p->req.reserved = part_reserved;
        p->req.granted = part_granted;
    }
    return m;
}

/* The domain's arrival lock (res_domain.arriving): held for one set's sends. */
static void arrival_lock(struct res_domain *d)
{
    bool busy = false;
    while (!atomic_compare_exchange_weak_explicit(&d->arriving, &busy, true, memory_order_acquire,
                                                  memory_order_relaxed)) {
        busy = false;
        sched_yield();
    }
}

static void arrival_unlock(struct res_domain *d)
{
    atomic_store_explicit(&d->arriving, false, memory_order_release);
}

void ra_multi_start(struct ra_multi *m, struct res_domain *domain)
{
    /* The set's place and its sends in one step: a set that takes a later place sends
     * after it, so on every resource they share its part queues behind this one's (a
     * single request takes its place in its own turn, behind whatever reached the
     * resource before it). Otherwise a part of this set could reach a resource after a
     * later set's part was reserved there, queue ahead of it and be reserved too: two
     * sets holding one place, and both granted. A part's turn may run right here and
     * answer the whole set: nothing of the set is read after its last send. */
    size_t n = m->n;
    int rcs[64];
    m->domain = domain;
    arrival_lock(domain);
    uint64_t seq = res_next_arrival(domain);
    for (size_t i = 0; i < n; i++)
        m->parts[i].req.rq.seq = seq;
    bool failed = false;
    for (size_t i = 0; i < n; i++) {
        rcs[i] = ra_send(m->rt, m->parts[i].name, m->parts[i].len, &m->parts[i].req, NULL);
        failed = failed || rcs[i] != RT_OK;
    }
    arrival_unlock(domain);
    if (!failed)
        return;
    /* A part not sent is still unanswered: the set waits for it, and is there to read. */
    for (size_t i = 0; i < n; i++)
        if (rcs[i] != RT_OK) {
            struct ra_multi_part *p = &m->parts[i];
            p->req.rq.status = RES_ERR_UNAVAILABLE;
            p->req.rq.reason = rt_strerror(rcs[i]);
            part_reply(&p->req);
        }
}

void ra_multi_hangup(struct ra_multi *m)
{
    abandon(m, NULL);
}

void ra_multi_free(struct ra_multi *m)
{
    for (size_t i = 0; i < m->n; i++)
        res_req_clear(&m->parts[i].req.rq);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
