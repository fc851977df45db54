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
    copy_name(v->meta.to, sizeof v->meta.to, meta(from, "to"));
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

/* The five names every holder writes. */
static size_t fill_meta(struct blob_meta meta[5], const struct owner_meta *m)
{
    static const char *const names[] = {"generation", "journal", "since", "snapshot", "url"};
    for (size_t i = 0; i < 5; i++)
        snprintf(meta[i].name, sizeof meta[i].name, "%s", names[i]);
    snprintf(meta[0].value, sizeof meta[0].value, "%" PRIu64, m->generation);
    snprintf(meta[1].value, sizeof meta[1].value, "%s", m->journal[0] ? m->journal : "-");
    snprintf(meta[2].value, sizeof meta[2].value, "%" PRId64, m->since_ms);
    snprintf(meta[3].value, sizeof meta[3].value, "%s", m->snapshot[0] ? m->snapshot : "-");
    snprintf(meta[4].value, sizeof meta[4].value, "%s", m->url[0] ? m->url : "-");
    return 5;
}

enum owner_rc owner_publish(struct blob_client *c, const char *lease_id, const struct owner_meta *m,
                            struct blob_result *r)
{
    struct blob_meta meta[6];
    size_t n = fill_meta(meta, m);
    struct blob_cond cond = {.lease_id = lease_id};
    if (blob_set_metadata(c, OWNER_BLOB, meta, n, &cond, r) == 0)
        return OWNER_OK;
    return lost(r) ? OWNER_FENCED : OWNER_AGAIN;
}

enum owner_rc owner_name_next(struct blob_client *c, const char *lease_id,
                              const struct owner_meta *known, const char *to, struct blob_result *r)
{
    struct blob_meta meta[BLOB_META_MAX];
    size_t n = 0;
    if (known) {
        n = fill_meta(meta, known);
    } else {
        /* The metadata as the blob has it: a write whose answer was lost may have landed,
         * and the snapshot and journal it named must stay named. */
        if (blob_head(c, OWNER_BLOB, r) != 0)
            return lost(r) ? OWNER_FENCED : OWNER_AGAIN;
        for (size_t i = 0; i < r->nmeta && n < BLOB_META_MAX - 1; i++)
            if (strcmp(r->meta[i].name, "to") != 0)
                meta[n++] = r->meta[i];
        blob_result_free(r);
        *r = (struct blob_result){0};
    }
    snprintf(meta[n].name, sizeof meta[n].name, "to");
    snprintf(meta[n].value, sizeof meta[n].value, "%s", to);
    n++;
    struct blob_cond cond = {.lease_id = lease_id};
    if (blob_set_metadata(c, OWNER_BLOB, meta, n, &cond, r) == 0)
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
