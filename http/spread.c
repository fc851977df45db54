/*
 * Lists, list watches and events of a partitioned server (see spread.h).
 */
#include "http/spread.h"

#include <cjson/cJSON.h>

#include "http/request.h"

struct spread_part {
    struct fwd_req fwd;
    struct spread *s;
    unsigned p;
    char *target;
    bool out; /* sent in the current round */
    /* Handed to the forwarder in this round: from then on it may be cancelled (before, a
     * cancel would be undone by fwd_submit()). */
    _Atomic bool submitted;
    cJSON *answer; /* its 200 answer, parsed (the forwarder's thread, before the count) */
};

struct spread {
    struct hreq *q;
    bool events;      /* GET /v1/events, else a list */
    uint64_t held_ms; /* the first round's wait (0: none) */
    int round;
    _Atomic unsigned left; /* parts of this round still out */
    _Atomic bool changed;  /* a watch's part saw a change or failed: the other waits end */
    _Atomic bool hung_up;
    unsigned n;
    uint64_t *pos; /* each partition's index (a list watch) or `after` (events) */
    struct spread_part parts[];
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

/* The part's request: the client's query for partition p alone. */
static char *part_target(const struct spread *s, unsigned p, bool wait)
{
    const struct api_query *qq = &s->q->query;
    uint64_t limit = qq->has_limit ? qq->limit : API_DEFAULT_LIMIT;
    struct mx_buf b = {0};
    mx_buf_printf(&b, "%s?partition=%u&limit=%" PRIu64, s->events ? "/v1/events" : "/v1/resources",
                  p, limit);
    if (qq->prefix && *qq->prefix) {
        mx_buf_printf(&b, "&prefix=");
        append_escaped(&b, qq->prefix);
    }
    if (!s->events && qq->cursor) {
        mx_buf_printf(&b, "&cursor=");
        append_escaped(&b, qq->cursor);
    }
    if (s->events)
        mx_buf_printf(&b, "&after=%" PRIu64, s->pos[p]);
    if (wait && !s->events)
        mx_buf_printf(&b, "&index=%" PRIu64, s->pos[p]);
    if (wait)
        mx_buf_printf(&b, "&wait_ms=%" PRIu64, s->held_ms);
    if (b.oom) {
        mx_buf_free(&b);
        return NULL;
    }
    return mx_buf_take(&b);
}

/* Whether a watch's part saw what it waited for: a list whose index moved, or an event. */
static bool saw_change(const struct spread *s, const struct spread_part *pt)
{
    if (s->events)
        return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(pt->answer, "events")) > 0;
    const cJSON *index = cJSON_GetObjectItemCaseSensitive(pt->answer, "index");
    return !cJSON_IsNumber(index) || (uint64_t)index->valuedouble != s->pos[pt->p];
}

/* The forwarder's thread: a part is answered (or refused, or cancelled). */
static void on_part_done(struct fwd_req *r)
{
    struct spread_part *pt = container_of(r, struct spread_part, fwd);
    struct spread *s = pt->s;
    bool failed = r->outcome != FWD_RELAYED || r->status != 200;
    if (!failed)
        pt->answer = cJSON_ParseWithLength(r->answer, r->answer_len);
    /* A part that failed is the answer whatever the others say (a partition handed over
     * while its part waited: 503 partition_moved, sent again by the client), so their waits
     * end too, rather than until the forwarder stops or the wait runs out. */
    if (s->round == 1 && s->held_ms && (failed || (pt->answer && saw_change(s, pt))) &&
        !atomic_exchange(&s->changed, true)) {
        /* The others' waits end: a list reads them again, events keep their positions. Every
         * part completes on this thread, so a part cancelled here has not completed yet, or
         * has, and its cancel is a flag nobody reads. */
        for (unsigned i = 0; i < s->n; i++)
            if (&s->parts[i] != pt && atomic_load(&s->parts[i].submitted))
                fwd_cancel(s->q->h->fwd, &s->parts[i].fwd);
    }
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

/* Sends the parts whose `out` is set; the count is set first, as completions may come at
 * once. Returns false when none could be sent (the forwarder has stopped). */
static bool send_parts(struct spread *s, bool wait)
{
    struct hreq *q = s->q;
    unsigned n = 0;
    for (unsigned p = 0; p < s->n; p++)
        n += s->parts[p].out;
    atomic_store(&s->left, n);
    const char *auth = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Authorization");
    bool sent = false;
    for (unsigned p = 0; p < s->n; p++) {
        struct spread_part *pt = &s->parts[p];
        if (!pt->out)
            continue;
        atomic_store(&pt->submitted, false);
        free(pt->target);
        fwd_req_clear(&pt->fwd);
        cJSON_Delete(pt->answer);
        pt->answer = NULL;
        pt->target = part_target(s, p, wait);
        pt->fwd = (struct fwd_req){.method = "GET",
                                   .target = pt->target,
                                   .partition = p,
                                   .authorization = auth,
                                   .accept = "application/json",
                                   .request_id = q->rid,
                                   .hops = q->hops,
                                   .client_fd = q->fd,
                                   .arrival_ns = mx_mono_ns(),
                                   .wait_ms = wait ? s->held_ms : 0,
                                   .idempotent = true,
                                   .self_url = q->h->cfg.served_by,
                                   .done = on_part_done};
        if (pt->target && fwd_submit(q->h->fwd, &pt->fwd) == 0) {
            sent = true;
            atomic_store(&pt->submitted, true);
            /* A part answered already may have ended the waits (or the client gone) before
             * this one was handed over: its cancel is made here. */
            if ((wait && atomic_load(&s->changed)) || atomic_load(&s->hung_up))
                fwd_cancel(q->h->fwd, &pt->fwd);
            continue;
        }
        pt->fwd.outcome = FWD_REFUSED;
        pt->fwd.reason = FWD_SHUTTING_DOWN;
        on_part_done(&pt->fwd);
    }
    return sent;
}

enum MHD_Result spread_start(struct hreq *q, uint64_t held_ms)
{
    struct http *h = q->h;
    unsigned n = h->cfg.partitions;
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
    struct spread *s = calloc(1, sizeof *s + n * sizeof s->parts[0]);
    uint64_t *pos = calloc(n, sizeof *pos);
    if (!s || !pos) {
        free(s);
        free(pos);
        return http_i_send_unavailable(q, "out of memory");
    }
    s->q = q;
    s->n = n;
    s->pos = pos;
    s->events = events;
    s->held_ms = held_ms;
    s->round = 1;
    q->spread = s;
    if (q->query.index_text && !parse_position(q->query.index_text, n, pos)) {
        api_fail(&q->err, 400, "invalid_field", what,
                 "%s must be the position a %s of this group of %u partitions returned, "
                 "passed back unchanged",
                 what, events ? "GET /v1/events" : "list", n);
        return http_i_send_error(q, &q->err);
    }
    for (unsigned p = 0; p < n; p++) {
        s->parts[p].s = s;
        s->parts[p].p = p;
        s->parts[p].out = true;
    }
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
    for (unsigned p = 0; p < s->n; p++)
        if (atomic_load(&s->parts[p].submitted))
            fwd_cancel(h->fwd, &s->parts[p].fwd);
}

void spread_free(struct spread *s)
{
    if (!s)
        return;
    for (unsigned p = 0; p < s->n; p++) {
        fwd_req_clear(&s->parts[p].fwd);
        free(s->parts[p].target);
        cJSON_Delete(s->parts[p].answer);
    }
    free(s->pos);
    free(s);
}

/* A part's answer other than 200, or a refusal, answered as it came. */
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

static int by_name(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    const char *nx = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "resource"));
    const char *ny = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(y, "resource"));
    return strcmp(nx ? nx : "", ny ? ny : "");
}

/* Every partition's page, merged by name and cut at the limit. */
static cJSON *merge_list(struct spread *s, struct mx_buf *pos)
{
    size_t limit = s->q->query.has_limit ? (size_t)s->q->query.limit : API_DEFAULT_LIMIT;
    size_t total = 0;
    bool more = false;
    for (unsigned p = 0; p < s->n; p++) {
        const cJSON *a = s->parts[p].answer;
        total += (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(a, "resources"));
        more |= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "next_cursor"));
        const cJSON *index = cJSON_GetObjectItemCaseSensitive(a, "index");
        append_position(pos, p, cJSON_IsNumber(index) ? (uint64_t)index->valuedouble : 0);
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
    for (unsigned p = 0; p < s->n; p++) {
        cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(s->parts[p].answer, "resources"))
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
    cJSON **head = calloc(s->n, sizeof *head); /* each partition's next event to give */
    size_t *given = calloc(s->n, sizeof *given);
    uint64_t *last = calloc(s->n, sizeof *last);
    cJSON *out = cJSON_CreateObject(), *list = cJSON_CreateArray();
    bool truncated = false;
    if (!head || !given || !last || !out || !list)
        goto fail;
    for (unsigned p = 0; p < s->n; p++) {
        cJSON *a = s->parts[p].answer;
        truncated |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "truncated"));
        const cJSON *events = cJSON_GetObjectItemCaseSensitive(a, "events");
        head[p] = cJSON_IsArray(events) ? events->child : NULL;
    }
    for (size_t k = 0; k < limit; k++) {
        unsigned best = s->n;
        const char *best_at = NULL;
        for (unsigned p = 0; p < s->n; p++) {
            if (!head[p])
                continue;
            const char *at = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(head[p], "at"));
            if (!at)
                at = "";
            if (best == s->n || strcmp(at, best_at) < 0) {
                best = p;
                best_at = at;
            }
        }
        if (best == s->n)
            break;
        cJSON *e = head[best];
        head[best] = e->next;
        const cJSON *index = cJSON_GetObjectItemCaseSensitive(e, "index");
        cJSON_AddNumberToObject(e, "partition", best);
        cJSON_AddItemReferenceToArray(list, e);
        given[best]++;
        last[best] = cJSON_IsNumber(index) ? (uint64_t)index->valuedouble : s->pos[best];
    }
    for (unsigned p = 0; p < s->n; p++) {
        const cJSON *next = cJSON_GetObjectItemCaseSensitive(s->parts[p].answer, "next");
        uint64_t v = s->pos[p];
        if (s->parts[p].answer && !head[p] && cJSON_IsNumber(next))
            v = (uint64_t)next->valuedouble;
        else if (given[p])
            v = last[p];
        append_position(pos, p, v);
    }
    if (pos->oom)
        goto fail;
    cJSON_AddItemToObject(out, "events", list);
    cJSON_AddStringToObject(out, "next", pos->p);
    cJSON_AddBoolToObject(out, "truncated", truncated);
    free(head);
    free(given);
    free(last);
    return out;
fail:
    free(head);
    free(given);
    free(last);
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
    for (unsigned p = 0; p < s->n; p++) {
        struct spread_part *pt = &s->parts[p];
        if (!pt->out)
            continue;
        pt->out = false;
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
        return http_i_send_unavailable(q, "out of memory");
    return http_i_send_body(q, 200, text, "application/json; charset=utf-8", 0, NULL);
}
