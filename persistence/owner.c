/*
 * The owner blob (see owner.h).
 */
#include "persistence/owner.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum owner_rc transient_or(const struct blob_result *r, enum owner_rc otherwise)
{
    return blob_result_transient(r) ? OWNER_AGAIN : otherwise;
}

/* A refusal that means the lease (or the blob) is not ours. */
static bool lost(const struct blob_result *r)
{
    return r->status == 409 || r->status == 412 || r->status == 404;
}

bool owner_lease_free(const char *lease_state)
{
    return strcmp(lease_state, "available") == 0 || strcmp(lease_state, "expired") == 0 ||
           strcmp(lease_state, "broken") == 0;
}

static void copy_name(char *out, size_t len, const char *v)
{
    snprintf(out, len, "%s", v && strcmp(v, "-") != 0 ? v : "");
}

/* An owner blob's view from its lease state, ETag and metadata (`meta` of `from`). */
static void fill_view(struct owner_view *v, const char *lease_state, const char *etag,
                      const char *(*meta)(const void *from, const char *name), const void *from)
{
    v->exists = true;
    snprintf(v->lease_state, sizeof v->lease_state, "%s", lease_state);
    snprintf(v->etag, sizeof v->etag, "%s", etag);
    const char *gen = meta(from, "generation");
    const char *since = meta(from, "since");
    v->meta.generation = gen ? strtoull(gen, NULL, 10) : 0;
    v->meta.since_ms = since ? strtoll(since, NULL, 10) : 0;
    copy_name(v->meta.url, sizeof v->meta.url, meta(from, "url"));
    copy_name(v->meta.snapshot, sizeof v->meta.snapshot, meta(from, "snapshot"));
    copy_name(v->meta.journal, sizeof v->meta.journal, meta(from, "journal"));
}

static const char *result_meta(const void *from, const char *name)
{
    return blob_result_meta(from, name);
}

static const char *item_meta(const void *from, const char *name)
{
    return blob_item_meta(from, name);
}

enum owner_rc owner_read(struct blob_client *c, struct owner_view *v, struct blob_result *r)
{
    memset(v, 0, sizeof *v);
    if (blob_head(c, OWNER_BLOB, r) != 0)
        return r->status == 404 ? OWNER_OK : OWNER_AGAIN;
    fill_view(v, r->lease_state, r->etag, result_meta, r);
    return OWNER_OK;
}

void owner_from_item(const struct blob_item *it, struct owner_view *v)
{
    memset(v, 0, sizeof *v);
    fill_view(v, it->lease_state, it->etag, item_meta, it);
}

enum owner_rc owner_create(struct blob_client *c, struct blob_result *r)
{
    struct blob_cond none_match = {.if_none_match = "*"};
    if (blob_put(c, OWNER_BLOB, "", 0, &none_match, r) == 0 || r->status == 409 || r->status == 412)
        return OWNER_OK;
    return transient_or(r, OWNER_FENCED);
}

enum owner_rc owner_take(struct blob_client *c, const char *lease_id, struct blob_result *r)
{
    if (blob_lease_acquire(c, OWNER_BLOB, OWNER_LEASE_SECONDS, lease_id, r) == 0)
        return OWNER_OK;
    return r->status == 409 ? OWNER_AGAIN : transient_or(r, OWNER_FENCED);
}

enum owner_rc owner_renew(struct blob_client *c, const char *lease_id, struct blob_result *r)
{
    if (blob_lease_renew(c, OWNER_BLOB, lease_id, r) == 0)
        return OWNER_OK;
    return lost(r) ? OWNER_FENCED : OWNER_AGAIN;
}

enum owner_rc owner_publish(struct blob_client *c, const char *lease_id, const struct owner_meta *m,
                            struct blob_result *r)
{
    struct blob_meta meta[6] = {{.name = "generation"},
                                {.name = "journal"},
                                {.name = "since"},
                                {.name = "snapshot"},
                                {.name = "url"}};
    snprintf(meta[0].value, sizeof meta[0].value, "%" PRIu64, m->generation);
    snprintf(meta[1].value, sizeof meta[1].value, "%s", m->journal[0] ? m->journal : "-");
    snprintf(meta[2].value, sizeof meta[2].value, "%" PRId64, m->since_ms);
    snprintf(meta[3].value, sizeof meta[3].value, "%s", m->snapshot[0] ? m->snapshot : "-");
    snprintf(meta[4].value, sizeof meta[4].value, "%s", m->url[0] ? m->url : "-");
    struct blob_cond cond = {.lease_id = lease_id};
    if (blob_set_metadata(c, OWNER_BLOB, meta, 5, &cond, r) == 0)
        return OWNER_OK;
    return lost(r) ? OWNER_FENCED : OWNER_AGAIN;
}

enum owner_rc owner_release(struct blob_client *c, const char *lease_id, struct blob_result *r)
{
    if (blob_lease_release(c, OWNER_BLOB, lease_id, r) == 0)
        return OWNER_OK;
    return lost(r) ? OWNER_FENCED : OWNER_AGAIN;
}

enum owner_rc owner_break_if(struct blob_client *c, const char *etag, struct blob_result *r)
{
    if (blob_lease_break_if(c, OWNER_BLOB, 0, etag, r) == 0 || r->status == 409)
        return OWNER_OK; /* 409: no lease to break any more */
    return r->status == 412 ? OWNER_FENCED : OWNER_AGAIN;
}

enum owner_rc owner_seal(struct blob_client *c, const char *journal, struct blob_result *r)
{
    if (blob_seal(c, journal, NULL, r) == 0 || r->status == 404 ||
        (r->status == 409 && strcmp(r->error_code, "BlobIsSealed") == 0))
        return OWNER_OK;
    return transient_or(r, OWNER_FENCED);
}
