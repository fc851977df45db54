/*
 * Lists, list watches and events of a partitioned server (see spread.h).
 */
#include "http/spread.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "actors/events.h"
#include "actors/resource.h"
#include "actors/resource_actor.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/container_of.h"
#include "common/partition.h"
#include "http/api.h"
#include "http/forward.h"
#include "http/hangup.h"
#include "http/render.h"
#include "http/request.h"
#include "http/role.h"
#include "http/server.h"

enum part_kind {
    PART_LOCAL, /* one partition served here: read in-process */
    PART_PEER,  /* the partitions of one owner elsewhere: one request to it */
};

struct spread_part {
    struct spread *s;
    enum part_kind kind;
    unsigned *members; /* indexes into s->ids: one for a local part */
    unsigned nmembers;
    bool out;      /* sent (or started) in the current round */
    cJSON *answer; /* its 200 answer, parsed */

    /* a peer's: one request for all its partitions (`partitions=`) */
    struct fwd_req fwd;
    char *target;
    /* Handed to the forwarder in this round: from then on it may be cancelled (before, a
     * cancel would be undone by fwd_submit()). */
    _Atomic bool submitted;

    /* a local partition's */
    struct ev_wait evw;
    _Atomic bool added; /* evw was queued: from then on it may be taken back */
    bool waited;        /* its wait ended (its own thread's, then the connection's) */
    struct ra_list *list;
    uint64_t list_index;
    const char *refused; /* why it could not be served here (a 503's reason), or NULL */
};

struct spread {
    struct hreq *q;
    bool events;      /* GET /v1/events, else a list */
    uint64_t held_ms; /* the first round's wait (0: none) */
    int round;
    _Atomic unsigned left; /* parts of this round still out */
    _Atomic bool changed;  /* a watch's part saw a change or failed: the other waits end */
    _Atomic bool hung_up;
    unsigned n;    /* partitions asked */
    unsigned *ids; /* their numbers, ascending */
    uint64_t *pos; /* each one's index (a list watch) or `after` (events) */
    unsigned nparts;
    struct spread_part *parts;
    unsigned *members; /* the parts' members, each part's in a run */
};

/* "v" and the numbers, '.' between them: exactly n. */
static bool parse_position(const char *text, unsigned n, uint64_t *pos)
{
    if (!text || text[0] != 'v')
        return false;
    const char *c = text + 1;
    for (unsigned p = 0; p < n; p++) {
        if (p > 0 && *c++ != '.')
            return false;
        if (*c < '0' || *c > '9')
            return false;
        errno = 0;
        char *end;
        unsigned long long v = strtoull(c, &end, 10);
        if (errno)
            return false;
        pos[p] = v;
        c = end;
    }
    return *c == '\0';
}

/* The partitions of `partitions=`: ascending numbers below `count`, '.' between them.
 * Returns how many (0: not such a list). */
static unsigned parse_partitions(const char *text, unsigned count, unsigned *ids)
{
    unsigned n = 0;
    const char *c = text;
    while (*c) {
        if (n > 0 && *c++ != '.')
            return 0;
        if (*c < '0' || *c > '9' || n >= count)
            return 0;
        char *end;
        unsigned long v = strtoul(c, &end, 10);
        if (v >= count || (n > 0 && v <= ids[n - 1]))
            return 0;
        ids[n++] = (unsigned)v;
        c = end;
    }
    return n;
}

static void append_position(struct mx_buf *b, unsigned p, uint64_t v)
{
    mx_buf_printf(b, "%s%" PRIu64, p == 0 ? "v" : ".", v);
}

/* `s` percent-encoded as a query value (RFC 3986: all but the unreserved characters). */
static void append_escaped(struct mx_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            *c == '-' || *c == '.' || *c == '_' || *c == '~') {
            mx_buf_append(b, (const char *)c, 1);
        } else {
            char e[3] = {'%', hex[*c >> 4], hex[*c & 15]};
            mx_buf_append(b, e, 3);
        }
    }
}

/* A peer part's request: the client's query for the peer's partitions, at their
 * positions. */
static char *part_target(const struct spread *s, const struct spread_part *pt, bool wait)
{
    const struct api_query *qq = &s->q->query;
    uint64_t limit = qq->has_limit ? qq->limit : API_DEFAULT_LIMIT;
    struct mx_buf b = {0};
    mx_buf_printf(&b, "%s?partitions=", s->events ? "/v1/events" : "/v1/resources");
    for (unsigned k = 0; k < pt->nmembers; k++)
        mx_buf_printf(&b, "%s%u", k ? "." : "", s->ids[pt->members[k]]);
    mx_buf_printf(&b, "&limit=%" PRIu64, limit);
    if (qq->prefix && *qq->prefix) {
        mx_buf_printf(&b, "&prefix=");
        append_escaped(&b, qq->prefix);
    }
    if (!s->events && qq->cursor) {
        mx_buf_printf(&b, "&cursor=");
        append_escaped(&b, qq->cursor);
    }
    if (s->events || wait) {
        mx_buf_printf(&b, s->events ? "&after=" : "&index=");
        for (unsigned k = 0; k < pt->nmembers; k++)
            append_position(&b, k, s->pos[pt->members[k]]);
    }
    if (wait)
        mx_buf_printf(&b, "&wait_ms=%" PRIu64, s->held_ms);
    if (b.oom) {
        mx_buf_free(&b);
        return NULL;
    }
    return mx_buf_take(&b);
}

/* The positions a part's answer gives for its members, in their order: a number (a local
 * partition) or a position of its partitions (a peer). */
static bool part_positions(const struct spread_part *pt, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pt->answer, key);
    if (pt->kind == PART_LOCAL) {
        if (!cJSON_IsNumber(v))
            return false;
        out[0] = (uint64_t)v->valuedouble;
        return true;
    }
    return cJSON_IsString(v) && parse_position(v->valuestring, pt->nmembers, out);
}

/* Whether a watch's peer part saw what it waited for: a list whose index moved, or an
 * event. */
static bool saw_change(const struct spread *s, const struct spread_part *pt)
{
    if (s->events)
        return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(pt->answer, "events")) > 0;
    uint64_t at[MX_PARTITIONS_MAX];
    if (!part_positions(pt, "index", at))
        return true;
    for (unsigned k = 0; k < pt->nmembers; k++)
        if (at[k] != s->pos[pt->members[k]])
            return true;
    return false;
}

static void local_cancel(struct spread_part *pt, bool on_watcher);

/* The others' waits end: a list reads them again, events keep their positions. */
static void end_other_waits(struct spread *s, const struct spread_part *except)
{
    for (unsigned i = 0; i < s->nparts; i++) {
        struct spread_part *o = &s->parts[i];
        if (o == except || !o->out)
            continue;
        if (o->kind == PART_PEER && atomic_load(&o->submitted))
            fwd_cancel(s->q->h->fwd, &o->fwd);
        else if (o->kind == PART_LOCAL && atomic_load(&o->added))
            local_cancel(o, false);
    }
}

/* A part of this round is over (any thread but the hang-up watcher's: see part_taken_back()).
 * `ends_waits`: it saw a change, or failed: the answer is due, and the other parts' waits
 * end. */
static void part_over(struct spread_part *pt, bool ends_waits)
{
    struct spread *s = pt->s;
    if (s->round == 1 && s->held_ms && ends_waits && !atomic_exchange(&s->changed, true))
        end_other_waits(s, pt);
    if (atomic_fetch_sub(&s->left, 1) != 1)
        return;
    struct hreq *q = s->q;
    if (q->watched) {
        /* Before the connection may close; it also waits out a spread_cancel() under way. */
        hangup_unwatch(q->h->hangup, q->id);
        q->watched = false;
    }
    MHD_resume_connection(q->conn);
}

/* The forwarder's thread: a peer part is answered (or refused, or cancelled). */
static void on_peer_done(struct fwd_req *r)
{
    struct spread_part *pt = container_of(r, struct spread_part, fwd);
    bool failed = r->outcome != FWD_RELAYED || r->status != 200;
    if (!failed)
        pt->answer = cJSON_ParseWithLength(r->answer, r->answer_len);
    /* A part that failed is the answer whatever the others say (a partition handed over
     * while its part waited: 503 partition_moved, sent again by the client), so their waits
     * end too, rather than until the forwarder stops or the wait runs out. A part cancelled
     * here has not completed yet, or has, and its cancel is a flag nobody reads. */
    part_over(pt, failed || (pt->answer && saw_change(pt->s, pt)));
}

/* ---- the partitions served here, in-process ------------------------------------------ */

/* Enters partition p's core as a request dispatched here does (http_i_dispatch()): NULL,
 * and the core may be used until local_leave(); else why not (local_leave() all the
 * same). */
static const char *local_enter(struct http *h, unsigned p)
{
    struct http_part *hp = &h->parts[p];
    atomic_fetch_add(&h->dispatching, 1);
    atomic_fetch_add(&hp->dispatching, 1); /* before the role is read: see http_release() */
    if (atomic_load(&h->draining))
        return FWD_SHUTTING_DOWN;
    enum http_role role = fwd_role(h->fwd, p);
    if (role == HTTP_ROLE_FENCED)
        return FWD_FENCED;
    if (role != HTTP_ROLE_SERVE || !atomic_load(&hp->published))
        return HTTP_PARTITION_MOVED; /* its core stopped as the partition moved */
    uint64_t until = atomic_load_explicit(&hp->serve_until_ns, memory_order_relaxed);
    if (until && mx_mono_ns() > until)
        return HTTP_UNCONFIRMED;
    if (!hp->core.events)
        return "events are not kept by this server";
    return NULL;
}

static void local_leave(struct http *h, unsigned p)
{
    atomic_fetch_sub(&h->parts[p].dispatching, 1);
    atomic_fetch_sub(&h->dispatching, 1);
}

/* Reads a local partition's events into the part's answer (any thread), or sets why not. */
static void local_read_events(struct spread *s, struct spread_part *pt)
{
    struct http *h = s->q->h;
    unsigned m = pt->members[0], p = s->ids[m];
    const struct api_query *qq = &s->q->query;
    const char *prefix = qq->prefix ? qq->prefix : "";
    size_t limit = qq->has_limit ? (size_t)qq->limit : API_DEFAULT_LIMIT;
    pt->refused = local_enter(h, p);
    if (pt->refused) {
        local_leave(h, p);
        return;
    }
    struct ev_event *ev = calloc(limit, sizeof *ev);
    uint64_t next = 0;
    bool truncated = false;
    size_t n = ev ? ev_read(h->parts[p].core.events, s->pos[m], prefix, strlen(prefix), ev, limit,
                            &next, &truncated)
                  : 0;
    local_leave(h, p);
    if (ev) {
        struct render rd;
        render_events(ev, n, next, truncated, &rd);
        for (size_t i = 0; i < n; i++)
            ev_event_clear(&ev[i]);
        free(ev);
        pt->answer = rd.body ? cJSON_Parse(rd.body) : NULL;
        free(rd.body);
    }
    if (!pt->answer)
        pt->refused = "out of memory";
}

/* The log's timer thread, a changing thread, or the connection's (a change known at once):
 * a local partition's wait ended. It is then read as a part of one partition answers:
 * events at once, here, a list in the next round (through the actors, which this thread
 * may be serving); the part ends the others' waits when that answer shows a change (events
 * read, a list's index moved), as a peer's does. Without a change, its log may have closed
 * as the partition was handed over (http_release() took its core back first): that is the
 * answer, 503 partition_moved. */
static void on_local_wait(struct ev_wait *w, bool changed)
{
    (void)changed; /* what is read decides */
    struct spread_part *pt = container_of(w, struct spread_part, evw);
    struct spread *s = pt->s;
    struct http *h = s->q->h;
    unsigned m = pt->members[0], p = s->ids[m];
    pt->waited = true;
    if (s->events) {
        local_read_events(s, pt);
        part_over(pt, pt->refused || cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
                                         pt->answer, "events")) > 0);
        return;
    }
    pt->refused = local_enter(h, p);
    bool moved = !pt->refused && ev_durable_index(h->parts[p].core.events) != s->pos[m];
    local_leave(h, p);
    part_over(pt, pt->refused || moved);
}

/* The hang-up watcher's thread (spread_cancel()), which must not unwatch (http/hangup.h):
 * a local wait taken back there is over, and the last part over resumes the connection. The
 * watcher has dropped the request's id already. */
static void part_taken_back(struct spread_part *pt)
{
    if (atomic_fetch_sub(&pt->s->left, 1) == 1)
        MHD_resume_connection(pt->s->q->conn);
}

/* Takes a local partition's wait back, if it is still queued (any thread; `on_watcher`:
 * the hang-up watcher's). Under the lock: a partition handed over is not published, its
 * core may be closing, and its log then completes the wait itself. */
static void local_cancel(struct spread_part *pt, bool on_watcher)
{
    struct http *h = pt->s->q->h;
    struct http_part *hp = &h->parts[pt->s->ids[pt->members[0]]];
    bool taken = false;
    pthread_rwlock_rdlock(&h->core_lock);
    if (atomic_load(&hp->published))
        taken = ev_wait_cancel(hp->core.events, &pt->evw);
    pthread_rwlock_unlock(&h->core_lock);
    if (!taken)
        return;
    pt->waited = true;
    if (on_watcher)
        part_taken_back(pt);
    else
        part_over(pt, false);
}

static void on_local_list(struct ra_list *l)
{
    struct spread_part *pt = l->arg;
    pt->list = l;
    part_over(pt, false);
}

/* Starts what a local part does in this round: wait for a change, or read (a list through
 * the actors, its part over when they answer; events at once). */
static void local_start(struct spread *s, struct spread_part *pt, bool wait)
{
    struct http *h = s->q->h;
    unsigned m = pt->members[0], p = s->ids[m];
    const struct api_query *qq = &s->q->query;
    const char *prefix = qq->prefix ? qq->prefix : "";
    pt->refused = local_enter(h, p);
    if (pt->refused) {
        local_leave(h, p);
        part_over(pt, true);
        return;
    }
    const struct http_core *core = &h->parts[p].core;
    size_t limit = qq->has_limit ? (size_t)qq->limit : API_DEFAULT_LIMIT;
    if (wait) {
        pt->evw = (struct ev_wait){.prefix_len = strlen(prefix),
                                   .after = s->pos[m],
                                   .deadline_ns = mx_mono_ns() + s->held_ms * MX_NS_PER_MS,
                                   .done = on_local_wait};
        memcpy(pt->evw.prefix, prefix, pt->evw.prefix_len);
        bool queued = ev_wait_add(core->events, &pt->evw);
        local_leave(h, p);
        if (!queued) {
            on_local_wait(&pt->evw, true); /* a change is known already */
            return;
        }
        atomic_store(&pt->added, true);
        /* A part over already may have ended the waits (or the client gone) before this
         * one was queued: it is taken back here. */
        if (atomic_load(&s->changed) || atomic_load(&s->hung_up))
            local_cancel(pt, false);
        return;
    }
    if (!s->events) {
        /* Every change up to it is committed, so the list read next shows it. */
        pt->list_index = ev_durable_index(core->events);
        struct ra_list *l = ra_list_start(core->rt, core->store, qq->prefix, qq->cursor, (int)limit,
                                          on_local_list, pt);
        local_leave(h, p);
        if (!l) {
            pt->refused = "out of memory";
            part_over(pt, true);
        }
        return;
    }
    local_leave(h, p);
    local_read_events(s, pt);
    part_over(pt, pt->refused != NULL);
}

/* A local list read is over: its page as the part's answer, or why not. */
static void local_list_answer(struct spread_part *pt)
{
    struct ra_list *l = pt->list;
    pt->list = NULL;
    bool failed = l->store_error;
    for (size_t i = 0; i < l->n && !failed; i++)
        failed = l->items[i].req.rq.status == RES_ERR_UNAVAILABLE;
    if (failed) {
        pt->refused =
            l->store_error ? "the store could not be read" : "a resource could not be read";
    } else {
        struct render rd;
        render_list(l, l->full && l->n ? l->items[l->n - 1].name : NULL, pt->list_index, &rd);
        pt->answer = rd.body ? cJSON_Parse(rd.body) : NULL;
        free(rd.body);
        if (!pt->answer)
            pt->refused = "out of memory";
    }
    ra_list_free(l);
}

/* ---- the rounds ---------------------------------------------------------------------- */

/* Sends the parts whose `out` is set; the count is set first, as completions may come at
 * once. */
static void send_parts(struct spread *s, bool wait)
{
    struct hreq *q = s->q;
    unsigned n = 0;
    for (unsigned i = 0; i < s->nparts; i++)
        n += s->parts[i].out;
    atomic_store(&s->left, n);
    const char *auth = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Authorization");
    for (unsigned i = 0; i < s->nparts; i++) {
        struct spread_part *pt = &s->parts[i];
        if (!pt->out)
            continue;
        cJSON_Delete(pt->answer);
        pt->answer = NULL;
        if (pt->kind == PART_LOCAL) {
            local_start(s, pt, wait);
            continue;
        }
        atomic_store(&pt->submitted, false);
        free(pt->target);
        fwd_req_clear(&pt->fwd);
        pt->target = part_target(s, pt, wait);
        pt->fwd = (struct fwd_req){.method = "GET",
                                   .target = pt->target,
                                   .partition = s->ids[pt->members[0]],
                                   .authorization = auth,
                                   .accept = "application/json",
                                   .request_id = q->rid,
                                   .hops = q->hops,
                                   .client_fd = q->fd,
                                   .arrival_ns = mx_mono_ns(),
                                   .wait_ms = wait ? s->held_ms : 0,
                                   .idempotent = true,
                                   .self_url = q->h->cfg.served_by,
                                   .done = on_peer_done};
        if (pt->target && fwd_submit(q->h->fwd, &pt->fwd) == 0) {
            atomic_store(&pt->submitted, true);
            /* A part over already may have ended the waits (or the client gone) before
             * this one was handed over: its cancel is made here. */
            if ((wait && atomic_load(&s->changed)) || atomic_load(&s->hung_up))
                fwd_cancel(q->h->fwd, &pt->fwd);
            continue;
        }
        pt->fwd.outcome = FWD_REFUSED;
        pt->fwd.reason = FWD_SHUTTING_DOWN;
        on_peer_done(&pt->fwd);
    }
}

/* The parts: one for each partition served here, one for each other owner with all its
 * partitions (and one for each partition with no owner known, held by the forwarder). */
static bool make_parts(struct spread *s)
{
    struct http *h = s->q->h;
    char(*url)[512] = calloc(s->n, sizeof *url);
    enum http_role *role = calloc(s->n, sizeof *role);
    unsigned *part_of = calloc(s->n, sizeof *part_of);
    s->parts = calloc(s->n, sizeof *s->parts);
    s->members = calloc(s->n, sizeof *s->members);
    if (!url || !role || !part_of || !s->parts || !s->members) {
        free(url);
        free(role);
        free(part_of);
        return false;
    }
    unsigned np = 0;
    for (unsigned i = 0; i < s->n; i++) {
        role[i] = fwd_owner(h->fwd, s->ids[i], url[i], sizeof url[i]);
        unsigned j = 0;
        if (role[i] == HTTP_ROLE_FORWARD && url[i][0]) {
            while (j < i && !(role[j] == HTTP_ROLE_FORWARD && strcmp(url[j], url[i]) == 0))
                j++;
        } else {
            j = i;
        }
        if (j == i) {
            part_of[i] = np;
            s->parts[np].kind = role[i] == HTTP_ROLE_SERVE ? PART_LOCAL : PART_PEER;
            s->parts[np].nmembers = 0;
            np++;
        } else {
            part_of[i] = part_of[j];
        }
        s->parts[part_of[i]].nmembers++;
    }
    unsigned at = 0;
    for (unsigned k = 0; k < np; k++) {
        s->parts[k].members = s->members + at;
        at += s->parts[k].nmembers;
        s->parts[k].nmembers = 0;
        s->parts[k].s = s;
        s->parts[k].out = true;
    }
    for (unsigned i = 0; i < s->n; i++) {
        struct spread_part *pt = &s->parts[part_of[i]];
        pt->members[pt->nmembers++] = i;
    }
    s->nparts = np;
    struct spread_part *fit = realloc(s->parts, np * sizeof *s->parts); /* np >= 1 */
    if (fit)
        s->parts = fit;
    free(url);
    free(role);
    free(part_of);
    return true;
}

enum MHD_Result spread_start(struct hreq *q, uint64_t held_ms)
{
    struct http *h = q->h;
    unsigned count = h->cfg.partitions;
    bool events = q->route == ROUTE_EVENTS;
    const char *what = events ? "after" : "index";
    /* 0 is every partition's start (a watch of a list read before anything changed, the
     * events from the oldest): it needs no position. */
    if (q->query.has_index && !q->query.index_text && q->query.index != 0) {
        api_fail(&q->err, 400, "invalid_field", what,
                 "%s must be the position a %s of this partitioned group returned ('v' and a "
                 "number per partition), passed back unchanged",
                 what, events ? "GET /v1/events" : "list");
        return http_i_send_error(q, &q->err);
    }
    struct spread *s = calloc(1, sizeof *s);
    unsigned *ids = calloc(count, sizeof *ids);
    uint64_t *pos = calloc(count, sizeof *pos);
    if (!s || !ids || !pos) {
        free(s);
        free(ids);
        free(pos);
        return http_i_send_unavailable(q, "out of memory");
    }
    s->q = q;
    s->ids = ids;
    s->pos = pos;
    s->events = events;
    s->held_ms = held_ms;
    s->round = 1;
    q->spread = s;
    if (q->query.partitions) {
        s->n = parse_partitions(q->query.partitions, count, ids);
        if (!s->n) {
            api_fail(&q->err, 400, "invalid_field", "partitions",
                     "partitions must be partition numbers below %u, ascending, joined by '.'",
                     count);
            return http_i_send_error(q, &q->err);
        }
    } else {
        s->n = count;
        for (unsigned p = 0; p < count; p++)
            ids[p] = p;
    }
    if (q->query.index_text && !parse_position(q->query.index_text, s->n, pos)) {
        api_fail(&q->err, 400, "invalid_field", what,
                 "%s must be the position a %s of this group of %u partitions returned, "
                 "passed back unchanged",
                 what, events ? "GET /v1/events" : "list", s->n);
        return http_i_send_error(q, &q->err);
    }
    if (!make_parts(s))
        return http_i_send_unavailable(q, "out of memory");
    q->phase = PH_WAIT;
    http_i_suspend(q);
    if (held_ms > 0 && hangup_watch(h->hangup, q->fd, q->id, q) == 0)
        q->watched = true;
    send_parts(s, held_ms > 0);
    return MHD_YES;
}

void spread_cancel(struct http *h, struct spread *s)
{
    atomic_store(&s->hung_up, true);
    for (unsigned i = 0; i < s->nparts; i++) {
        struct spread_part *pt = &s->parts[i];
        if (pt->kind == PART_PEER && atomic_load(&pt->submitted))
            fwd_cancel(h->fwd, &pt->fwd);
        else if (pt->kind == PART_LOCAL && atomic_load(&pt->added))
            local_cancel(pt, true);
    }
}

void spread_free(struct spread *s)
{
    if (!s)
        return;
    for (unsigned i = 0; s->parts && i < s->nparts; i++) {
        struct spread_part *pt = &s->parts[i];
        fwd_req_clear(&pt->fwd);
        free(pt->target);
        cJSON_Delete(pt->answer);
        if (pt->list)
            ra_list_free(pt->list);
    }
    free(s->parts);
    free(s->members);
    free(s->ids);
    free(s->pos);
    free(s);
}

/* A peer part's answer other than 200, or a refusal, answered as it came. */
static enum MHD_Result answer_failed_part(struct hreq *q, struct spread_part *pt)
{
    struct fwd_req *f = &pt->fwd;
    if (f->outcome == FWD_REFUSED) {
        if (strcmp(f->reason, FWD_SHUTTING_DOWN) == 0) {
            q->close = true;
            return http_i_send_unavailable(q, "shutting down");
        }
        return http_i_send_group_unavailable(q, f->reason);
    }
    const char *ra = f->headers[FWD_H_RETRY_AFTER];
    char *body = f->answer ? strndup(f->answer, f->answer_len) : strdup("");
    return http_i_send_body(q, f->status, body, "application/json; charset=utf-8",
                            ra ? strtoull(ra, NULL, 10) : 0, NULL);
}

/* A local part that could not be served here, answered as a request of its partition. */
static enum MHD_Result answer_refused_part(struct hreq *q, const char *reason)
{
    if (strcmp(reason, FWD_SHUTTING_DOWN) == 0) {
        q->close = true;
        return http_i_send_unavailable(q, "shutting down");
    }
    if (strcmp(reason, FWD_FENCED) == 0 || strcmp(reason, HTTP_PARTITION_MOVED) == 0 ||
        strcmp(reason, HTTP_UNCONFIRMED) == 0)
        return http_i_send_group_unavailable(q, reason);
    return http_i_send_unavailable(q, reason);
}

static int by_name(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    const char *nx = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "resource"));
    const char *ny = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(y, "resource"));
    return strcmp(nx ? nx : "", ny ? ny : "");
}

/* Each asked partition's position as its part gave it under `key` (else as asked). */
static bool gather_positions(struct spread *s, const char *key, uint64_t *out)
{
    uint64_t at[MX_PARTITIONS_MAX];
    for (unsigned i = 0; i < s->n; i++)
        out[i] = s->pos[i];
    for (unsigned k = 0; k < s->nparts; k++) {
        struct spread_part *pt = &s->parts[k];
        if (!pt->answer)
            continue;
        if (!part_positions(pt, key, at))
            return false;
        for (unsigned j = 0; j < pt->nmembers; j++)
            out[pt->members[j]] = at[j];
    }
    return true;
}

/* Every part's page, merged by name and cut at the limit: each part gave the first
 * `limit` names of its partitions after the cursor, so none before the cut is missing. */
static cJSON *merge_list(struct spread *s, struct mx_buf *pos)
{
    size_t limit = s->q->query.has_limit ? (size_t)s->q->query.limit : API_DEFAULT_LIMIT;
    size_t total = 0;
    bool more = false;
    uint64_t index[MX_PARTITIONS_MAX];
    if (!gather_positions(s, "index", index))
        return NULL;
    for (unsigned i = 0; i < s->n; i++)
        append_position(pos, i, index[i]);
    for (unsigned k = 0; k < s->nparts; k++) {
        const cJSON *a = s->parts[k].answer;
        total += (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(a, "resources"));
        more |= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "next_cursor"));
    }
    cJSON **items = calloc(total ? total : 1, sizeof *items);
    cJSON *out = cJSON_CreateObject(), *list = cJSON_CreateArray();
    if (!items || !out || !list || pos->oom) {
        free(items);
        cJSON_Delete(out);
        cJSON_Delete(list);
        return NULL;
    }
    size_t k = 0;
    for (unsigned j = 0; j < s->nparts; j++) {
        cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(s->parts[j].answer, "resources"))
        {
            items[k++] = e;
        }
    }
    qsort(items, k, sizeof *items, by_name);
    size_t take = k < limit ? k : limit;
    more |= k > limit;
    for (size_t i = 0; i < take; i++)
        cJSON_AddItemReferenceToArray(list, items[i]);
    cJSON_AddStringToObject(out, "index", pos->p);
    cJSON_AddItemToObject(out, "resources", list);
    const char *last =
        take ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(items[take - 1], "resource"))
             : NULL;
    if (more && last)
        cJSON_AddStringToObject(out, "next_cursor", last);
    else
        cJSON_AddNullToObject(out, "next_cursor");
    free(items);
    return out;
}

/* The asked partition (its index in s->ids) an event of part `pt` is of, or -1. */
static int member_of_event(const struct spread *s, const struct spread_part *pt, const cJSON *e)
{
    if (pt->kind == PART_LOCAL)
        return (int)pt->members[0];
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "partition");
    if (!cJSON_IsNumber(p))
        return -1;
    for (unsigned j = 0; j < pt->nmembers; j++)
        if (s->ids[pt->members[j]] == (unsigned)p->valuedouble)
            return (int)pt->members[j];
    return -1;
}

/* Every partition's events, cut at the limit: each partition's as a prefix of what it
 * gave, in its index order, so that its next position (after the last of its events given,
 * or as it said when all of them were given) skips none and repeats none. Across
 * partitions they are interleaved oldest first (by time, then partition): each partition's
 * times follow its indexes only roughly (a change takes its index before it is stamped,
 * and a set's reserved indexes are filled later), so time orders nothing a reader may rely
 * on. */
static cJSON *merge_events(struct spread *s, struct mx_buf *pos)
{
    size_t limit = s->q->query.has_limit ? (size_t)s->q->query.limit : API_DEFAULT_LIMIT;
    uint64_t next[MX_PARTITIONS_MAX];
    size_t total = 0;
    for (unsigned k = 0; k < s->nparts; k++)
        total += (size_t)cJSON_GetArraySize(
            cJSON_GetObjectItemCaseSensitive(s->parts[k].answer, "events"));
    /* Each partition's events in a run of `ev`, from start[i]; head[i] the next to give. */
    cJSON **ev = calloc(total ? total : 1, sizeof *ev);
    size_t *start = calloc(s->n + 1, sizeof *start), *head = calloc(s->n, sizeof *head);
    uint64_t *last = calloc(s->n, sizeof *last);
    size_t *given = calloc(s->n, sizeof *given);
    cJSON *out = cJSON_CreateObject(), *list = cJSON_CreateArray();
    bool truncated = false;
    if (!ev || !start || !head || !last || !given || !out || !list ||
        !gather_positions(s, "next", next))
        goto fail;
    for (unsigned k = 0; k < s->nparts; k++) {
        const cJSON *e;
        truncated |=
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s->parts[k].answer, "truncated"));
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(s->parts[k].answer, "events"))
        {
            int m = member_of_event(s, &s->parts[k], e);
            if (m >= 0)
                start[m + 1]++;
        }
    }
    for (unsigned i = 0; i < s->n; i++) {
        start[i + 1] += start[i];
        head[i] = start[i];
    }
    for (unsigned k = 0; k < s->nparts; k++) {
        cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(s->parts[k].answer, "events"))
        {
            int m = member_of_event(s, &s->parts[k], e);
            if (m >= 0)
                ev[head[m]++] = e;
        }
    }
    for (unsigned i = 0; i < s->n; i++)
        head[i] = start[i];
    for (size_t k = 0; k < limit; k++) {
        unsigned best = s->n;
        const char *best_at = NULL;
        for (unsigned i = 0; i < s->n; i++) {
            if (head[i] == start[i + 1])
                continue;
            const char *at =
                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev[head[i]], "at"));
            if (!at)
                at = "";
            if (best == s->n || strcmp(at, best_at) < 0) {
                best = i;
                best_at = at;
            }
        }
        if (best == s->n)
            break;
        cJSON *e = ev[head[best]++];
        const cJSON *index = cJSON_GetObjectItemCaseSensitive(e, "index");
        if (!cJSON_GetObjectItemCaseSensitive(e, "partition"))
            cJSON_AddNumberToObject(e, "partition", s->ids[best]);
        cJSON_AddItemReferenceToArray(list, e);
        given[best]++;
        last[best] = cJSON_IsNumber(index) ? (uint64_t)index->valuedouble : s->pos[best];
    }
    for (unsigned i = 0; i < s->n; i++) {
        uint64_t v = s->pos[i];
        if (head[i] == start[i + 1])
            v = next[i]; /* all it gave was given: as it said */
        else if (given[i])
            v = last[i];
        append_position(pos, i, v);
    }
    if (pos->oom)
        goto fail;
    cJSON_AddItemToObject(out, "events", list);
    cJSON_AddStringToObject(out, "next", pos->p);
    cJSON_AddBoolToObject(out, "truncated", truncated);
    free(ev);
    free(start);
    free(head);
    free(last);
    free(given);
    return out;
fail:
    free(ev);
    free(start);
    free(head);
    free(last);
    free(given);
    cJSON_Delete(out);
    cJSON_Delete(list);
    return NULL;
}

enum MHD_Result spread_answer(struct hreq *q)
{
    struct spread *s = q->spread;
    if (atomic_load(&s->hung_up)) {
        return http_i_nobody_to_answer(q);
    }
    bool again = false;
    for (unsigned i = 0; i < s->nparts; i++) {
        struct spread_part *pt = &s->parts[i];
        if (!pt->out)
            continue;
        pt->out = false;
        if (pt->kind == PART_LOCAL) {
            if (pt->list)
                local_list_answer(pt);
            if (pt->refused)
                return answer_refused_part(q, pt->refused);
            if (pt->waited && !s->events) {
                /* Its wait ended (a change, the deadline, or a change elsewhere): read.
                 * Events were read as the wait ended, or keep their position (taken
                 * back). */
                pt->out = again = true;
            }
            pt->waited = false;
            continue;
        }
        if (pt->fwd.outcome == FWD_GONE) {
            /* A watch's wait ended by a change elsewhere: a list reads it again. */
            pt->out = again = !s->events;
            continue;
        }
        if (pt->fwd.outcome != FWD_RELAYED || pt->fwd.status != 200)
            return answer_failed_part(q, pt);
        if (!pt->answer)
            return http_i_send_unavailable(q, "a partition's answer could not be read");
    }
    if (again) {
        s->round = 2;
        http_i_suspend(q);
        send_parts(s, false);
        return MHD_YES;
    }
    struct mx_buf pos = {0};
    cJSON *out = s->events ? merge_events(s, &pos) : merge_list(s, &pos);
    char *text = out ? cJSON_PrintUnformatted(out) : NULL;
    cJSON_Delete(out);
    mx_buf_free(&pos);
    if (!text)
        return http_i_send_unavailable(q, "a partition's answer could not be read");
    return http_i_send_body(q, 200, text, "application/json; charset=utf-8", 0, NULL);
}
