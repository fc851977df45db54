/*
 * JSON output with cJSON. 64-bit integers (tokens, indexes) are written as raw numbers
 * so they never pass through a double.
 */
#include "http/render.h"

#include "http/auth.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/json_out.h"
#include "common/uuid.h"

static void add_time(cJSON *o, const char *key, int64_t wall_ms)
{
    char buf[32];
    mx_wall_iso(wall_ms, buf);
    cJSON_AddStringToObject(o, key, buf);
}

static void add_metadata(cJSON *o, const struct mx_str *md)
{
    if (md)
        cJSON_AddRawToObject(o, "metadata", md->s); /* validated JSON object text */
    else
        cJSON_AddNullToObject(o, "metadata");
}

/* The lease's public fields, in the contract's order: a grant's answer and a state's
 * holder show the same ones (the lease id only in the grant, before these). */
static void add_lease(cJSON *o, const struct res_view *v)
{
    cJSON_AddStringToObject(o, "owner", v->owner ? v->owner->s : "");
    mx_json_add_u64(o, "fencing_token", v->token);
    mx_json_add_u64(o, "ttl_ms", v->ttl_ms);
    mx_json_add_u64(o, "expires_in_ms", v->expires_in_ms);
    add_time(o, "acquired_at", v->acquired_at_ms);
    add_time(o, "renewed_at", v->renewed_at_ms);
    add_metadata(o, v->metadata);
}

/* A holder of a state: the lease's public fields and whether it is shared. */
static cJSON *holder_object(const struct res_holder *h)
{
    struct res_view v = {.owner = h->owner,
                         .metadata = h->metadata,
                         .token = h->token,
                         .ttl_ms = h->ttl_ms,
                         .expires_in_ms = h->expires_in_ms,
                         .acquired_at_ms = h->acquired_at_ms,
                         .renewed_at_ms = h->renewed_at_ms};
    cJSON *o = cJSON_CreateObject();
    add_lease(o, &v);
    cJSON_AddBoolToObject(o, "shared", h->shared);
    return o;
}

static cJSON *state_object(const char *name, size_t len, const struct res_view *v)
{
    cJSON *o = cJSON_CreateObject();
    mx_json_add_name(o, "resource", name, len);
    cJSON_AddStringToObject(o, "state", v->held ? "held" : "free");
    mx_json_add_u64(o, "index", v->index);
    mx_json_add_u64(o, "limit", v->limit ? v->limit : 1);
    /* `holder`: the first of `holders`, for clients written for exclusive leases. */
    if (v->held && v->nholders)
        cJSON_AddItemToObject(o, "holder", holder_object(&v->holders[0]));
    else
        cJSON_AddNullToObject(o, "holder");
    cJSON *arr = cJSON_AddArrayToObject(o, "holders");
    for (uint32_t i = 0; i < v->nholders; i++)
        cJSON_AddItemToArray(arr, holder_object(&v->holders[i]));
    mx_json_add_u64(o, "waiters", v->waiters);
    return o;
}

static cJSON *error_object(const char *code, const char *message, cJSON **inner)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", message);
    *inner = e;
    return o;
}

void render_error(const struct api_error *e, struct render *out)
{
    cJSON *inner;
    cJSON *o = error_object(e->code, e->message, &inner);
    if (e->field)
        cJSON_AddStringToObject(inner, "field", e->field);
    out->status = e->status;
    out->retry_after_s = e->status == 503 ? 1 : 0;
    out->body = mx_json_print(o);
}

void render_unavailable(const char *reason, uint32_t retry_after_s, struct render *out)
{
    render_unavailable_message(reason, reason, retry_after_s, out);
}

void render_unavailable_message(const char *reason, const char *message, uint32_t retry_after_s,
                                struct render *out)
{
    cJSON *inner;
    const char *why = reason ? reason : "unavailable";
    cJSON *o = error_object("unavailable", message ? message : why, &inner);
    cJSON_AddStringToObject(inner, "reason", why);
    out->status = 503;
    out->retry_after_s = retry_after_s ? retry_after_s : 1;
    out->body = mx_json_print(o);
}

void render_answer(const char *name, size_t len, const struct res_req *rq, struct render *out)
{
    const struct res_view *v = &rq->view;
    cJSON *o = NULL, *inner;
    char id[MX_UUID_STR_LEN + 1];
    out->status = 200;
    out->retry_after_s = 0;

    switch ((enum res_status)rq->status) {
    case RES_OK_LEASE:
        o = cJSON_CreateObject();
        mx_json_add_name(o, "resource", name, len);
        mx_uuid_format(v->lease_id, id);
        cJSON_AddStringToObject(o, "lease_id", id);
        add_lease(o, v);
        mx_json_add_u64(o, "limit", v->limit ? v->limit : 1);
        cJSON_AddBoolToObject(o, "shared", v->shared);
        break;
    case RES_OK_RELEASED:
        o = cJSON_CreateObject();
        mx_json_add_name(o, "resource", name, len);
        cJSON_AddTrueToObject(o, "released");
        break;
    case RES_OK_BROKEN:
        o = cJSON_CreateObject();
        mx_json_add_name(o, "resource", name, len);
        cJSON_AddBoolToObject(o, "broken", v->broken);
        break;
    case RES_OK_STATE:
        o = state_object(name, len, v);
        break;
    case RES_ERR_HELD: {
        o = error_object("lease_held", "the resource is held by another lease", &inner);
        cJSON *h = cJSON_AddObjectToObject(inner, "holder");
        cJSON_AddStringToObject(h, "owner", v->owner ? v->owner->s : "");
        mx_json_add_u64(h, "fencing_token", v->token);
        mx_json_add_u64(h, "expires_in_ms", v->expires_in_ms);
        out->status = 409;
        /* The holder's remaining time in whole seconds, rounded up. */
        out->retry_after_s = (v->expires_in_ms + 999) / 1000;
        if (out->retry_after_s == 0)
            out->retry_after_s = 1;
        break;
    }
    case RES_ERR_LIMIT:
        o = error_object("limit_mismatch",
                         "the resource is held under another limit: every acquire of a "
                         "resource with holders must name the limit in force",
                         &inner);
        mx_json_add_u64(inner, "limit", v->limit ? v->limit : 1);
        out->status = 409;
        break;
    case RES_ERR_SHARED:
        o = error_object("invalid_field",
                         "this lease id holds the resource with the other value of shared", &inner);
        cJSON_AddStringToObject(inner, "field", "shared");
        out->status = 400;
        break;
    case RES_ERR_LOST:
        o = error_object("lease_lost",
                         "the lease is no longer the resource's: it was released, broken, or "
                         "another lease was granted after it expired",
                         &inner);
        out->status = 409;
        break;
    case RES_ERR_TOO_MANY:
        o = error_object("too_many_waiters", "the resource's queue of waiters is full", &inner);
        out->status = 429;
        out->retry_after_s = 1;
        break;
    case RES_PENDING:
    case RES_GONE:
    case RES_ERR_UNAVAILABLE:
    default:
        render_unavailable(rq->reason, rq->retry_after_s, out);
        return;
    }
    out->body = mx_json_print(o);
}

void render_list(const struct ra_list *l, const char *next_cursor, uint64_t index,
                 struct render *out)
{
    cJSON *o = cJSON_CreateObject();
    mx_json_add_u64(o, "index", index);
    cJSON *arr = cJSON_AddArrayToObject(o, "resources");
    for (size_t i = 0; i < l->n; i++) {
        const struct ra_list_item *it = &l->items[i];
        if (it->req.rq.status == RES_OK_STATE && it->req.rq.view.held)
            cJSON_AddItemToArray(arr, state_object(it->name, it->name_len, &it->req.rq.view));
    }
    if (next_cursor)
        cJSON_AddStringToObject(o, "next_cursor", next_cursor);
    else
        cJSON_AddNullToObject(o, "next_cursor");
    out->status = 200;
    out->retry_after_s = 0;
    out->body = mx_json_print(o);
}

void render_status(int status, const char *word, const char *reason, const char *details,
                   struct render *out)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", word);
    if (reason)
        cJSON_AddStringToObject(o, "reason", reason);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    out->status = status;
    out->retry_after_s = status == 503 ? 1 : 0;
    if (!text || !details || !*details) {
        out->body = text;
        return;
    }
    /* {"status":...} + details: splice the members in before the closing brace. */
    size_t n = strlen(text), d = strlen(details);
    out->body = malloc(n + d + 2);
    if (out->body) {
        memcpy(out->body, text, n - 1);
        out->body[n - 1] = ',';
        memcpy(out->body + n, details, d);
        out->body[n + d] = '}';
        out->body[n + d + 1] = '\0';
    }
    cJSON_free(text);
}

void render_events(const struct ev_event *ev, size_t n, uint64_t next, bool truncated,
                   struct render *out)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "events");
    for (size_t i = 0; i < n; i++) {
        const struct ev_event *e = &ev[i];
        cJSON *j = cJSON_CreateObject();
        mx_json_add_u64(j, "index", e->index);
        add_time(j, "at", e->at_ms);
        mx_json_add_name(j, "resource", e->name, e->name_len);
        cJSON_AddStringToObject(j, "type", ev_type_name((enum ev_type)e->type));
        cJSON_AddStringToObject(j, "owner", e->owner ? e->owner->s : "");
        mx_json_add_u64(j, "fencing_token", e->token);
        cJSON_AddBoolToObject(j, "shared", e->shared);
        mx_json_add_u64(j, "limit", e->limit ? e->limit : 1);
        cJSON_AddItemToArray(arr, j);
    }
    mx_json_add_u64(o, "next", next);
    cJSON_AddBoolToObject(o, "truncated", truncated);
    out->status = 200;
    out->retry_after_s = 0;
    out->body = mx_json_print(o);
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
    cJSON *o = cJSON_CreateObject();
    if (name)
        cJSON_AddStringToObject(o, "name", name);
    else
        cJSON_AddNullToObject(o, "name");
    cJSON *arr = cJSON_AddArrayToObject(o, "scopes");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (scopes & all[i].bit)
            cJSON_AddItemToArray(arr, cJSON_CreateString(all[i].word));
    out->status = 200;
    out->retry_after_s = 0;
    out->body = mx_json_print(o);
}
