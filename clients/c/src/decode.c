/*
 * Decoders from the API's JSON to the public structs, and the clear functions that free them.
 * A small set of readers (req_str, opt_str, req_u64, ...) each take one member and say
 * MUTEXD_OK, MUTEXD_ERR_PROTOCOL (missing, wrong type) or MUTEXD_ERR_NOMEM.
 */
#include "decode.h"

#include <stdlib.h>
#include <string.h>

static mutexd_result dup_str(const char *s, char **out)
{
    *out = NULL;
    if (s == NULL)
        return MUTEXD_OK;
    *out = strdup(s);
    return *out != NULL ? MUTEXD_OK : MUTEXD_ERR_NOMEM;
}

/* A string member that must be there. */
static mutexd_result req_str(const cJSON *obj, const char *name, char **out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsString(item) || item->valuestring == NULL)
        return MUTEXD_ERR_PROTOCOL;
    return dup_str(item->valuestring, out);
}

/* A string member that may be missing or null (then *out is NULL). */
static mutexd_result opt_str(const cJSON *obj, const char *name, char **out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);
    *out = NULL;
    if (item == NULL || cJSON_IsNull(item))
        return MUTEXD_OK;
    if (!cJSON_IsString(item) || item->valuestring == NULL)
        return MUTEXD_ERR_PROTOCOL;
    return dup_str(item->valuestring, out);
}

static mutexd_result req_u64(const cJSON *obj, const char *name, uint64_t *out)
{
    return mxc_json_u64(cJSON_GetObjectItemCaseSensitive(obj, name), out) == 0
               ? MUTEXD_OK
               : MUTEXD_ERR_PROTOCOL;
}

static mutexd_result req_i64(const cJSON *obj, const char *name, int64_t *out)
{
    return mxc_json_i64(cJSON_GetObjectItemCaseSensitive(obj, name), out) == 0
               ? MUTEXD_OK
               : MUTEXD_ERR_PROTOCOL;
}

/* A boolean member that may be missing (then *out is 0). */
static mutexd_result opt_bool(const cJSON *obj, const char *name, int *out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, name);
    *out = 0;
    if (item == NULL)
        return MUTEXD_OK;
    if (!cJSON_IsBool(item))
        return MUTEXD_ERR_PROTOCOL;
    *out = cJSON_IsTrue(item);
    return MUTEXD_OK;
}

/* A resource's limit: missing (a server without semaphores) is 1; else at least 1. */
static mutexd_result opt_limit(const cJSON *obj, int64_t *out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, "limit");
    *out = 1;
    if (item == NULL)
        return MUTEXD_OK;
    return mxc_json_i64(item, out) == 0 && *out >= 1 ? MUTEXD_OK : MUTEXD_ERR_PROTOCOL;
}

/* The metadata member: missing or null is NULL. */
static mutexd_result opt_metadata(const struct mxc_doc *doc, const cJSON *obj, char **out)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const char *text = NULL;
    *out = NULL;
    if (item == NULL)
        return MUTEXD_OK;
    if (mxc_doc_metadata(doc, item, &text) != 0)
        return MUTEXD_ERR_PROTOCOL;
    return dup_str(text, out);
}

/* Runs one reader after another; the first failure wins. */
#define READ(call)                                                                                 \
    do {                                                                                           \
        result = (call);                                                                           \
        if (result != MUTEXD_OK)                                                                   \
            goto out;                                                                              \
    } while (0)

mutexd_result mxc_decode_lease(const struct mxc_doc *doc, const cJSON *obj,
                               struct mutexd_lease *out)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    memset(out, 0, sizeof(*out));
    if (!cJSON_IsObject(obj))
        goto out;
    READ(req_str(obj, "resource", &out->resource));
    READ(req_str(obj, "lease_id", &out->lease_id));
    READ(req_str(obj, "owner", &out->owner));
    READ(req_u64(obj, "fencing_token", &out->fencing_token));
    READ(req_i64(obj, "ttl_ms", &out->ttl_ms));
    READ(req_i64(obj, "expires_in_ms", &out->expires_in_ms));
    READ(opt_str(obj, "acquired_at", &out->acquired_at));
    READ(opt_str(obj, "renewed_at", &out->renewed_at));
    READ(opt_metadata(doc, obj, &out->metadata));
    READ(opt_limit(obj, &out->limit));
    READ(opt_bool(obj, "shared", &out->shared));
    out->json = mxc_doc_print(doc, obj);
    result = out->json != NULL ? MUTEXD_OK : MUTEXD_ERR_NOMEM;
out:
    if (result != MUTEXD_OK)
        mutexd_lease_clear(out);
    return result;
}

static void holder_clear(struct mutexd_holder *h)
{
    free(h->owner);
    free(h->acquired_at);
    free(h->renewed_at);
    free(h->metadata);
    memset(h, 0, sizeof(*h));
}

/* A holder: `full` for a state's (every member), else lease_held's (owner, token, expiry). */
static mutexd_result decode_holder(const struct mxc_doc *doc, const cJSON *obj, int full,
                                   struct mutexd_holder *out)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    memset(out, 0, sizeof(*out));
    out->ttl_ms = -1;
    if (!cJSON_IsObject(obj))
        goto out;
    READ(req_str(obj, "owner", &out->owner));
    READ(req_u64(obj, "fencing_token", &out->fencing_token));
    READ(req_i64(obj, "expires_in_ms", &out->expires_in_ms));
    READ(opt_bool(obj, "shared", &out->shared));
    if (full) {
        READ(req_i64(obj, "ttl_ms", &out->ttl_ms));
        READ(opt_str(obj, "acquired_at", &out->acquired_at));
        READ(opt_str(obj, "renewed_at", &out->renewed_at));
        READ(opt_metadata(doc, obj, &out->metadata));
    }
out:
    if (result != MUTEXD_OK)
        holder_clear(out);
    return result;
}

static void holders_clear(struct mutexd_state *s)
{
    for (size_t i = 0; i < s->holder_count; i++)
        holder_clear(&s->holders[i]);
    free(s->holders);
    s->holders = NULL;
    s->holder_count = 0;
}

/* A deep copy of *h, for the holders of a server that sends only `holder`. */
static mutexd_result holder_copy(const struct mutexd_holder *h, struct mutexd_holder *out)
{
    mutexd_result result;
    *out = *h;
    out->owner = out->acquired_at = out->renewed_at = out->metadata = NULL;
    READ(dup_str(h->owner, &out->owner));
    READ(dup_str(h->acquired_at, &out->acquired_at));
    READ(dup_str(h->renewed_at, &out->renewed_at));
    READ(dup_str(h->metadata, &out->metadata));
out:
    if (result != MUTEXD_OK)
        holder_clear(out);
    return result;
}

/* The holders of a held state: the `holders` array, oldest first; from a server without
 * semaphores (no `holders`), a copy of its one `holder`. */
static mutexd_result decode_holders(const struct mxc_doc *doc, const cJSON *obj,
                                    struct mutexd_state *out)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "holders");
    size_t n = list == NULL ? 1 : cJSON_IsArray(list) ? (size_t)cJSON_GetArraySize(list) : 0;
    if (n == 0)
        return MUTEXD_ERR_PROTOCOL; /* held, with no holder, or holders is not an array */
    out->holders = calloc(n, sizeof(*out->holders));
    if (out->holders == NULL)
        return MUTEXD_ERR_NOMEM;
    if (list == NULL) {
        mutexd_result result = holder_copy(&out->holder, &out->holders[0]);
        out->holder_count = result == MUTEXD_OK;
        return result;
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, list)
    {
        mutexd_result result = decode_holder(doc, item, 1, &out->holders[out->holder_count]);
        if (result != MUTEXD_OK)
            return result;
        out->holder_count++;
    }
    return MUTEXD_OK;
}

mutexd_result mxc_decode_state(const struct mxc_doc *doc, const cJSON *obj,
                               struct mutexd_state *out)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    memset(out, 0, sizeof(*out));
    if (!cJSON_IsObject(obj))
        goto out;
    READ(req_str(obj, "resource", &out->resource));
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(obj, "state");
    const cJSON *holder = cJSON_GetObjectItemCaseSensitive(obj, "holder");
    result = MUTEXD_ERR_PROTOCOL;
    if (!cJSON_IsString(state))
        goto out;
    const cJSON *holders = cJSON_GetObjectItemCaseSensitive(obj, "holders");
    if (strcmp(state->valuestring, "held") == 0) {
        out->held = 1;
        READ(decode_holder(doc, holder, 1, &out->holder));
        READ(decode_holders(doc, obj, out));
    } else if (strcmp(state->valuestring, "free") != 0 ||
               (holder != NULL && !cJSON_IsNull(holder)) ||
               (holders != NULL && (!cJSON_IsArray(holders) || cJSON_GetArraySize(holders) > 0))) {
        goto out; /* neither held nor free, or free with a holder */
    }
    READ(opt_limit(obj, &out->limit));
    READ(req_u64(obj, "index", &out->index));
    READ(req_i64(obj, "waiters", &out->waiters));
    out->json = mxc_doc_print(doc, obj);
    result = out->json != NULL ? MUTEXD_OK : MUTEXD_ERR_NOMEM;
out:
    if (result != MUTEXD_OK)
        mutexd_state_clear(out);
    return result;
}

mutexd_result mxc_decode_page(const struct mxc_doc *doc, const cJSON *obj, struct mutexd_page *out)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    memset(out, 0, sizeof(*out));
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "resources");
    if (!cJSON_IsObject(obj) || !cJSON_IsArray(list))
        goto out;
    READ(opt_str(obj, "next_cursor", &out->next_cursor));
    size_t n = (size_t)cJSON_GetArraySize(list);
    if (n > 0) {
        out->resources = calloc(n, sizeof(*out->resources));
        if (out->resources == NULL) {
            result = MUTEXD_ERR_NOMEM;
            goto out;
        }
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, list)
    {
        READ(mxc_decode_state(doc, item, &out->resources[out->count]));
        out->count++;
    }
    out->json = mxc_doc_print(doc, obj);
    result = out->json != NULL ? MUTEXD_OK : MUTEXD_ERR_NOMEM;
out:
    if (result != MUTEXD_OK)
        mutexd_page_clear(out);
    return result;
}

static void event_clear(struct mutexd_event *e)
{
    free(e->at);
    free(e->resource);
    free(e->type);
    free(e->owner);
    free(e->json);
    memset(e, 0, sizeof(*e));
}

static mutexd_result decode_event(const struct mxc_doc *doc, const cJSON *obj,
                                  struct mutexd_event *out)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    memset(out, 0, sizeof(*out));
    if (!cJSON_IsObject(obj))
        goto out;
    READ(req_u64(obj, "index", &out->index));
    READ(opt_str(obj, "at", &out->at));
    READ(req_str(obj, "resource", &out->resource));
    READ(req_str(obj, "type", &out->type));
    READ(opt_str(obj, "owner", &out->owner));
    READ(req_u64(obj, "fencing_token", &out->fencing_token));
    READ(opt_bool(obj, "shared", &out->shared));
    READ(opt_limit(obj, &out->limit));
    out->json = mxc_doc_print(doc, obj);
    result = out->json != NULL ? MUTEXD_OK : MUTEXD_ERR_NOMEM;
out:
    if (result != MUTEXD_OK)
        event_clear(out);
    return result;
}

mutexd_result mxc_decode_event_page(const struct mxc_doc *doc, const cJSON *obj,
                                    struct mutexd_event_page *out)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    memset(out, 0, sizeof(*out));
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "events");
    if (!cJSON_IsObject(obj) || !cJSON_IsArray(list))
        goto out;
    READ(req_u64(obj, "next", &out->next));
    READ(opt_bool(obj, "truncated", &out->truncated));
    size_t n = (size_t)cJSON_GetArraySize(list);
    if (n > 0) {
        out->events = calloc(n, sizeof(*out->events));
        if (out->events == NULL) {
            result = MUTEXD_ERR_NOMEM;
            goto out;
        }
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, list)
    {
        READ(decode_event(doc, item, &out->events[out->count]));
        out->count++;
    }
    out->json = mxc_doc_print(doc, obj);
    result = out->json != NULL ? MUTEXD_OK : MUTEXD_ERR_NOMEM;
out:
    if (result != MUTEXD_OK)
        mutexd_event_page_clear(out);
    return result;
}

mutexd_result mxc_decode_whoami(const struct mxc_doc *doc, const cJSON *obj,
                                struct mutexd_whoami *out)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    memset(out, 0, sizeof(*out));
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "scopes");
    if (!cJSON_IsObject(obj) || !cJSON_IsArray(list))
        goto out;
    READ(opt_str(obj, "name", &out->name));
    size_t n = (size_t)cJSON_GetArraySize(list);
    if (n > 0) {
        out->scopes = calloc(n, sizeof(*out->scopes));
        if (out->scopes == NULL) {
            result = MUTEXD_ERR_NOMEM;
            goto out;
        }
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, list)
    {
        result = MUTEXD_ERR_PROTOCOL;
        if (!cJSON_IsString(item) || item->valuestring == NULL)
            goto out;
        READ(dup_str(item->valuestring, &out->scopes[out->scope_count]));
        out->scope_count++;
    }
    out->json = mxc_doc_print(doc, obj);
    result = out->json != NULL ? MUTEXD_OK : MUTEXD_ERR_NOMEM;
out:
    if (result != MUTEXD_OK)
        mutexd_whoami_clear(out);
    return result;
}

mutexd_result mxc_decode_error(const struct mxc_doc *doc, const cJSON *obj,
                               struct mutexd_error *out)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(obj, "error");
    if (!cJSON_IsObject(err))
        goto out;
    READ(req_str(err, "code", &out->code));
    READ(opt_str(err, "message", &out->message));
    READ(opt_str(err, "field", &out->field));
    READ(opt_str(err, "reason", &out->reason));
    /* limit_mismatch names the limit in force; 0 stays "not said". */
    if (strcmp(out->code, "limit_mismatch") == 0 &&
        cJSON_GetObjectItemCaseSensitive(err, "limit") != NULL)
        READ(opt_limit(err, &out->limit));
    const cJSON *holder = cJSON_GetObjectItemCaseSensitive(err, "holder");
    if (holder != NULL && !cJSON_IsNull(holder)) {
        READ(decode_holder(doc, holder, 0, &out->holder));
        out->has_holder = 1;
    }
out:
    if (result != MUTEXD_OK) {
        free(out->code);
        free(out->message);
        free(out->field);
        free(out->reason);
        out->code = out->message = out->field = out->reason = NULL;
        holder_clear(&out->holder);
        out->holder.ttl_ms = -1;
        out->has_holder = 0;
        out->limit = 0;
    }
    return result;
}

void mutexd_lease_clear(struct mutexd_lease *lease)
{
    if (lease == NULL)
        return;
    free(lease->resource);
    free(lease->lease_id);
    free(lease->owner);
    free(lease->acquired_at);
    free(lease->renewed_at);
    free(lease->metadata);
    free(lease->json);
    memset(lease, 0, sizeof(*lease));
}

void mutexd_state_clear(struct mutexd_state *state)
{
    if (state == NULL)
        return;
    free(state->resource);
    holder_clear(&state->holder);
    holders_clear(state);
    free(state->json);
    memset(state, 0, sizeof(*state));
}

void mutexd_page_clear(struct mutexd_page *page)
{
    if (page == NULL)
        return;
    for (size_t i = 0; i < page->count; i++)
        mutexd_state_clear(&page->resources[i]);
    free(page->resources);
    free(page->next_cursor);
    free(page->json);
    memset(page, 0, sizeof(*page));
}

void mutexd_error_clear(struct mutexd_error *error)
{
    if (error == NULL)
        return;
    free(error->code);
    free(error->message);
    free(error->field);
    free(error->reason);
    holder_clear(&error->holder);
    free(error->request_id);
    free(error->body);
    memset(error, 0, sizeof(*error));
    error->retry_after_s = -1;
    error->holder.ttl_ms = -1;
}

void mutexd_event_page_clear(struct mutexd_event_page *events)
{
    if (events == NULL)
        return;
    for (size_t i = 0; i < events->count; i++)
        event_clear(&events->events[i]);
    free(events->events);
    free(events->json);
    memset(events, 0, sizeof(*events));
}

void mutexd_whoami_clear(struct mutexd_whoami *who)
{
    if (who == NULL)
        return;
    for (size_t i = 0; i < who->scope_count; i++)
        free(who->scopes[i]);
    free(who->scopes);
    free(who->name);
    free(who->json);
    memset(who, 0, sizeof(*who));
}
