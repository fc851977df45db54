/*
 * JSON output, written straight into a buffer in the contract's field order (mx_jw,
 * common/json_out.h). 64-bit integers (tokens, indexes) are written as digits, exact past
 * 2^53.
 */
#include "http/render.h"

#include "http/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/json_out.h"
#include "common/names.h"
#include "common/uuid.h"

static void key_time(struct mx_jw *w, const char *key, int64_t wall_ms)
{
    char buf[32];
    mx_wall_iso(wall_ms, buf);
    mx_jw_key(w, key);
    mx_jw_cstr(w, buf);
}

static void key_u64(struct mx_jw *w, const char *key, uint64_t v)
{
    mx_jw_key(w, key);
    mx_jw_u64(w, v);
}

static void key_str(struct mx_jw *w, const char *key, const char *s)
{
    mx_jw_key(w, key);
    mx_jw_cstr(w, s);
}

static void key_bool(struct mx_jw *w, const char *key, bool v)
{
    mx_jw_key(w, key);
    mx_jw_bool(w, v);
}

static void key_null(struct mx_jw *w, const char *key)
{
    mx_jw_key(w, key);
    mx_jw_null(w);
}

static void key_name(struct mx_jw *w, const char *key, const char *s, size_t len)
{
    mx_jw_key(w, key);
    mx_jw_str(w, s, len > MX_NAME_MAX ? MX_NAME_MAX : len);
}

static void key_owner(struct mx_jw *w, const char *key, const struct mx_str *owner)
{
    mx_jw_key(w, key);
    if (owner)
        mx_jw_str(w, owner->s, owner->len);
    else
        mx_jw_str(w, "", 0);
}

static void key_metadata(struct mx_jw *w, const struct mx_str *md)
{
    mx_jw_key(w, "metadata");
    if (md)
        mx_jw_raw(w, md->s, md->len); /* validated JSON object text */
    else
        mx_jw_null(w);
}

/* Ends the object opened last and hands its text to `out` with `status`. */
static void finish(struct mx_jw *w, int status, struct render *out)
{
    mx_jw_object_end(w);
    out->status = status;
    out->body = mx_jw_take(w);
}

/* The lease's public fields, in the contract's order: a grant's answer and a state's
 * holder show the same ones (the lease id only in the grant, before these). */
static void lease_fields(struct mx_jw *w, const struct res_view *v)
{
    key_owner(w, "owner", v->owner);
    key_u64(w, "fencing_token", v->token);
    key_u64(w, "ttl_ms", v->ttl_ms);
    key_u64(w, "expires_in_ms", v->expires_in_ms);
    key_time(w, "acquired_at", v->acquired_at_ms);
    key_time(w, "renewed_at", v->renewed_at_ms);
    key_metadata(w, v->metadata);
}

/* A holder of a state: the lease's public fields and whether it is shared. */
static void holder_object(struct mx_jw *w, const struct res_holder *h)
{
    struct res_view v = {.owner = h->owner,
                         .metadata = h->metadata,
                         .token = h->token,
                         .ttl_ms = h->ttl_ms,
                         .expires_in_ms = h->expires_in_ms,
                         .acquired_at_ms = h->acquired_at_ms,
                         .renewed_at_ms = h->renewed_at_ms};
    mx_jw_object(w);
    lease_fields(w, &v);
    key_bool(w, "shared", h->shared);
    mx_jw_object_end(w);
}

static void state_object(struct mx_jw *w, const char *name, size_t len, const struct res_view *v)
{
    mx_jw_object(w);
    key_name(w, "resource", name, len);
    key_str(w, "state", v->held ? "held" : "free");
    key_u64(w, "index", v->index);
    key_u64(w, "limit", v->limit ? v->limit : 1);
    /* `holder`: the first of `holders`, for clients written for exclusive leases. */
    mx_jw_key(w, "holder");
    if (v->held && v->nholders)
        holder_object(w, &v->holders[0]);
    else
        mx_jw_null(w);
    mx_jw_key(w, "holders");
    mx_jw_array(w);
    for (uint32_t i = 0; i < v->nholders; i++)
        holder_object(w, &v->holders[i]);
    mx_jw_array_end(w);
    key_u64(w, "waiters", v->waiters);
    mx_jw_object_end(w);
}

/* {"error":{"code":..,"message":.. and, left open, the caller's fields. */
static void error_object(struct mx_jw *w, const char *code, const char *message)
{
    mx_jw_object(w);
    mx_jw_key(w, "error");
    mx_jw_object(w);
    key_str(w, "code", code);
    key_str(w, "message", message);
}

/* error_object(), with `resource` when `name` is not NULL. */
static void error_named(struct mx_jw *w, const char *name, size_t len, const char *code,
                        const char *message)
{
    error_object(w, code, message);
    if (name)
        key_name(w, "resource", name, len);
}

/* Ends an error_object() and hands it to `out`. */
static void finish_error(struct mx_jw *w, int status, struct render *out)
{
    mx_jw_object_end(w);
    finish(w, status, out);
}

void render_error(const struct api_error *e, struct render *out)
{
    struct mx_jw w = {0};
    error_object(&w, e->code, e->message);
    if (e->field)
        key_str(&w, "field", e->field);
    if (e->reason)
        key_str(&w, "reason", e->reason);
    out->retry_after_s = e->status == 503 ? 1 : 0;
    finish_error(&w, e->status, out);
}

void render_unavailable(const char *reason, uint32_t retry_after_s, struct render *out)
{
    render_unavailable_message(reason, reason, retry_after_s, out);
}

void render_unavailable_message(const char *reason, const char *message, uint32_t retry_after_s,
                                struct render *out)
{
    struct mx_jw w = {0};
    const char *why = reason ? reason : "unavailable";
    error_object(&w, "unavailable", message ? message : why);
    key_str(&w, "reason", why);
    out->retry_after_s = retry_after_s ? retry_after_s : 1;
    finish_error(&w, 503, out);
}

/* The answer to `rq` about `name` into `out`; `named`: an error names the resource too (a
 * request about several resources says which one it is about). */
static void answer(const char *name, size_t len, const struct res_req *rq, bool named,
                   struct render *out)
{
    const struct res_view *v = &rq->view;
    struct mx_jw w = {0};
    char id[MX_UUID_STR_LEN + 1];
    out->retry_after_s = 0;

    switch ((enum res_status)rq->status) {
    case RES_OK_LEASE:
        mx_jw_object(&w);
        key_name(&w, "resource", name, len);
        mx_uuid_format(v->lease_id, id);
        key_str(&w, "lease_id", id);
        lease_fields(&w, v);
        key_u64(&w, "limit", v->limit ? v->limit : 1);
        key_bool(&w, "shared", v->shared);
        finish(&w, 200, out);
        return;
    case RES_OK_RELEASED:
        mx_jw_object(&w);
        key_name(&w, "resource", name, len);
        key_bool(&w, "released", true);
        finish(&w, 200, out);
        return;
    case RES_OK_BROKEN:
        mx_jw_object(&w);
        key_name(&w, "resource", name, len);
        key_bool(&w, "broken", v->broken);
        finish(&w, 200, out);
        return;
    case RES_OK_STATE:
        state_object(&w, name, len, v);
        out->status = 200;
        out->body = mx_jw_take(&w);
        return;
    case RES_ERR_HELD:
        error_named(&w, named ? name : NULL, len, "lease_held",
                    "the resource is held by another lease");
        mx_jw_key(&w, "holder");
        mx_jw_object(&w);
        key_owner(&w, "owner", v->owner);
        key_u64(&w, "fencing_token", v->token);
        key_u64(&w, "expires_in_ms", v->expires_in_ms);
        mx_jw_object_end(&w);
        /* The holder's remaining time in whole seconds, rounded up. */
        out->retry_after_s = (v->expires_in_ms + 999) / 1000;
        if (out->retry_after_s == 0)
            out->retry_after_s = 1;
        finish_error(&w, 409, out);
        return;
    case RES_ERR_LIMIT:
        error_named(&w, named ? name : NULL, len, "limit_mismatch",
                    "the resource is held under another limit: every acquire of a "
                    "resource with holders must name the limit in force");
        key_u64(&w, "limit", v->limit ? v->limit : 1);
        finish_error(&w, 409, out);
        return;
    case RES_ERR_SHARED:
        error_named(&w, named ? name : NULL, len, "invalid_field",
                    "this lease id holds the resource with the other value of shared");
        key_str(&w, "field", "shared");
        finish_error(&w, 400, out);
        return;
    case RES_ERR_ROW_FULL:
        error_named(&w, named ? name : NULL, len, "invalid_field",
                    "with this metadata the leases of the resource would carry more than "
                    "1.5 MiB together: use smaller metadata");
        key_str(&w, "field", "metadata");
        finish_error(&w, 400, out);
        return;
    case RES_ERR_LOST:
        error_named(&w, named ? name : NULL, len, "lease_lost",
                    "the lease is no longer the resource's: it was released, broken, or "
                    "another lease was granted after it expired");
        finish_error(&w, 409, out);
        return;
    case RES_ERR_TOO_MANY:
        error_named(&w, named ? name : NULL, len, "too_many_waiters",
                    "the resource's queue of waiters is full");
        out->retry_after_s = 1;
        finish_error(&w, 429, out);
        return;
    case RES_PENDING:
    case RES_GONE:
    case RES_ERR_UNAVAILABLE:
    default:
        render_unavailable(rq->reason, rq->retry_after_s, out);
        return;
    }
}

void render_answer(const char *name, size_t len, const struct res_req *rq, struct render *out)
{
    answer(name, len, rq, false, out);
}

void render_many(const char *const *names, const size_t *lens, const struct res_req *const *rq,
                 size_t n, int ok, struct render *out)
{
    out->retry_after_s = 0;
    size_t lost = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        if (rq[i]->status == RES_ERR_LOST && lost++ == 0)
            first = i;
        else if (first == n && rq[i]->status != ok && rq[i]->status != RES_GONE &&
                 rq[i]->status != RES_ERR_LOST)
            first = i;
    }
    struct mx_jw w = {0};
    if (lost) {
        error_named(&w, names[first], lens[first], "lease_lost",
                    "the lease is no longer held on every resource named: see resources");
        mx_jw_key(&w, "resources");
        mx_jw_array(&w);
        for (size_t i = 0; i < n; i++)
            if (rq[i]->status == RES_ERR_LOST)
                mx_jw_str(&w, names[i], lens[i]);
        mx_jw_array_end(&w);
        finish_error(&w, 409, out);
        return;
    }
    if (first < n) {
        answer(names[first], lens[first], rq[first], true, out);
        return;
    }
    mx_jw_object(&w);
    mx_jw_key(&w, "leases");
    mx_jw_array(&w);
    for (size_t i = 0; i < n; i++) {
        struct render one;
        answer(names[i], lens[i], rq[i], false, &one);
        if (!one.body) {
            free(mx_jw_take(&w));
            out->status = 503;
            out->body = NULL;
            return;
        }
        mx_jw_raw(&w, one.body, strlen(one.body));
        free(one.body);
    }
    mx_jw_array_end(&w);
    finish(&w, 200, out);
}

void render_list(const struct ra_list *l, const char *next_cursor, uint64_t index,
                 struct render *out)
{
    struct mx_jw w = {0};
    mx_jw_object(&w);
    key_u64(&w, "index", index);
    mx_jw_key(&w, "resources");
    mx_jw_array(&w);
    for (size_t i = 0; i < l->n; i++) {
        const struct ra_list_item *it = &l->items[i];
        if (it->req.rq.status == RES_OK_STATE && it->req.rq.view.held)
            state_object(&w, it->name, it->name_len, &it->req.rq.view);
    }
    mx_jw_array_end(&w);
    if (next_cursor)
        key_str(&w, "next_cursor", next_cursor);
    else
        key_null(&w, "next_cursor");
    out->retry_after_s = 0;
    finish(&w, 200, out);
}

void render_status(int status, const char *word, const char *reason, const char *details,
                   struct render *out)
{
    struct mx_jw w = {0};
    mx_jw_object(&w);
    key_str(&w, "status", word);
    if (reason)
        key_str(&w, "reason", reason);
    if (details && *details) /* members written already: `"k":v,...` */
        mx_jw_raw(&w, details, strlen(details));
    out->retry_after_s = status == 503 ? 1 : 0;
    finish(&w, status, out);
}

void render_events(const struct ev_event *ev, size_t n, uint64_t next, bool truncated,
                   struct render *out)
{
    struct mx_jw w = {0};
    mx_jw_object(&w);
    mx_jw_key(&w, "events");
    mx_jw_array(&w);
    for (size_t i = 0; i < n; i++) {
        const struct ev_event *e = &ev[i];
        mx_jw_object(&w);
        key_u64(&w, "index", e->index);
        key_time(&w, "at", e->at_ms);
        key_name(&w, "resource", e->name, e->name_len);
        key_str(&w, "type", ev_type_name((enum ev_type)e->type));
        key_owner(&w, "owner", e->owner);
        key_u64(&w, "fencing_token", e->token);
        key_bool(&w, "shared", e->shared);
        key_u64(&w, "limit", e->limit ? e->limit : 1);
        mx_jw_object_end(&w);
    }
    mx_jw_array_end(&w);
    key_u64(&w, "next", next);
    key_bool(&w, "truncated", truncated);
    out->retry_after_s = 0;
    finish(&w, 200, out);
}

void render_whoami(const char *name, unsigned scopes, struct render *out)
{
    static const struct {
        unsigned bit;
        const char *word;
    } all[] = {{AUTH_READ, "read"},
               {AUTH_WRITE, "write"},
               {AUTH_ADMIN, "admin"},
               {AUTH_METRICS, "metrics"}};
    struct mx_jw w = {0};
    mx_jw_object(&w);
    if (name)
        key_str(&w, "name", name);
    else
        key_null(&w, "name");
    mx_jw_key(&w, "scopes");
    mx_jw_array(&w);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (scopes & all[i].bit)
            mx_jw_cstr(&w, all[i].word);
    mx_jw_array_end(&w);
    out->retry_after_s = 0;
    finish(&w, 200, out);
}
