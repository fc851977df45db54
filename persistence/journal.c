/*
 * Journal and snapshot lines (see journal.h). Encoded with cJSON so that every string is
 * escaped correctly; integers are written as exact decimal text and read back only when a
 * double holds them exactly (up to 2^53, far beyond any token or index in practice).
 */
#include "persistence/journal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_out.h"
#include "common/json_span.h"
#include "common/uuid.h"

const char *jr_mode_name(enum jr_mode mode)
{
    return mode == JR_MODE_SYNC ? "sync" : "async";
}

/* `o` as one line of the journal (deleted). */
static void finish(struct mx_buf *b, cJSON *o)
{
    char *text = mx_json_print(o);
    if (!text) {
        b->oom = true;
        return;
    }
    mx_buf_append(b, text, strlen(text));
    mx_buf_append(b, "\n", 1);
    cJSON_free(text);
}

void jr_encode_row(struct mx_buf *b, uint64_t seq, const char *name, size_t len,
                   const struct store_row *row)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", row->has_lease ? "put" : "del");
    mx_json_add_u64(o, "seq", seq);
    mx_json_add_name(o, "resource", name, len);
    mx_json_add_u64(o, "index", row->index);
    if (row->has_lease) {
        char id[MX_UUID_STR_LEN + 1];
        mx_uuid_format(row->lease_id, id);
        cJSON_AddStringToObject(o, "lease_id", id);
        cJSON_AddStringToObject(o, "owner", row->owner ? row->owner->s : "");
        mx_json_add_u64(o, "token", row->token);
        mx_json_add_u64(o, "ttl_ms", row->ttl_ms);
        mx_json_add_i64(o, "acquired_at", row->acquired_at_ms);
        mx_json_add_i64(o, "renewed_at", row->renewed_at_ms);
        mx_json_add_i64(o, "deadline", row->deadline_ms);
        cJSON_AddBoolToObject(o, "held", row->held);
        if (row->metadata)
            cJSON_AddRawToObject(o, "metadata", row->metadata->s);
        else
            cJSON_AddNullToObject(o, "metadata");
    }
    finish(b, o);
}

void jr_encode_rec(struct mx_buf *b, const struct store_rec *rec)
{
    jr_encode_row(b, rec->commit_seq, rec->name, rec->name_len, &rec->row);
}

void jr_encode_reserve(struct mx_buf *b, uint64_t ceiling)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", "reserve");
    mx_json_add_u64(o, "ceiling", ceiling);
    finish(b, o);
}

void jr_encode_begin(struct mx_buf *b, uint64_t generation, enum jr_mode mode, uint64_t first_seq)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", "begin");
    mx_json_add_u64(o, "generation", generation);
    cJSON_AddStringToObject(o, "mode", jr_mode_name(mode));
    mx_json_add_u64(o, "first_seq", first_seq);
    finish(b, o);
}

void jr_encode_snapshot(struct mx_buf *b, uint64_t generation, enum jr_mode mode,
                        const struct store_marks *m, uint64_t ceiling)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", "snapshot");
    mx_json_add_u64(o, "generation", generation);
    cJSON_AddStringToObject(o, "mode", jr_mode_name(mode));
    mx_json_add_u64(o, "seq", m->commit_seq);
    mx_json_add_u64(o, "token_hwm", m->token_hwm);
    mx_json_add_u64(o, "index_hwm", m->index_hwm);
    mx_json_add_u64(o, "index_floor", m->index_floor);
    mx_json_add_u64(o, "ceiling", ceiling);
    finish(b, o);
}

/* ---- decoding -------------------------------------------------------------------- */

static bool fail(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "%s", what);
    return false;
}

/* A non-negative integer field. cJSON keeps numbers as doubles, exact up to 2^53;
 * anything beyond (or fractional, or negative) is refused rather than rounded. */
static bool get_u64(const cJSON *o, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || (double)(uint64_t)d != d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static bool get_i64(const cJSON *o, const char *key, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || (double)(int64_t)d != d)
        return false;
    *out = (int64_t)d;
    return true;
}

static bool get_mode(const cJSON *o, enum jr_mode *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "mode");
    if (!cJSON_IsString(v))
        return false;
    if (strcmp(v->valuestring, "sync") == 0)
        *out = JR_MODE_SYNC;
    else if (strcmp(v->valuestring, "async") == 0)
        *out = JR_MODE_ASYNC;
    else
        return false;
    return true;
}

static bool decode_put(const cJSON *o, const char *line, size_t len, struct jr_line *out, char *err,
                       size_t errlen)
{
    struct store_row *r = &out->row;
    r->has_lease = true;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "lease_id");
    if (!cJSON_IsString(id) ||
        !mx_uuid_parse(id->valuestring, strlen(id->valuestring), r->lease_id))
        return fail(err, errlen, "put: bad lease_id");
    const cJSON *owner = cJSON_GetObjectItemCaseSensitive(o, "owner");
    if (!cJSON_IsString(owner) || strlen(owner->valuestring) > MX_OWNER_MAX)
        return fail(err, errlen, "put: bad owner");
    const cJSON *held = cJSON_GetObjectItemCaseSensitive(o, "held");
    if (!cJSON_IsBool(held))
        return fail(err, errlen, "put: bad held");
    r->held = cJSON_IsTrue(held);
    if (!get_u64(o, "token", &r->token) || !get_u64(o, "ttl_ms", &r->ttl_ms) ||
        !get_i64(o, "acquired_at", &r->acquired_at_ms) ||
        !get_i64(o, "renewed_at", &r->renewed_at_ms) || !get_i64(o, "deadline", &r->deadline_ms))
        return fail(err, errlen, "put: bad number");
    /* Metadata is the client's own text, kept as written (see common/json_span.h). */
    size_t member = 0;
    const cJSON *md = o->child;
    while (md && strcmp(md->string, "metadata") != 0) {
        md = md->next;
        member++;
    }
    if (md && !cJSON_IsNull(md)) {
        const char *raw;
        size_t raw_len;
        if (!cJSON_IsObject(md) || !json_member_value(line, len, member, &raw, &raw_len))
            return fail(err, errlen, "put: metadata is not an object");
        if (raw_len > 8192)
            return fail(err, errlen, "put: metadata too large");
        char *tmp = malloc(raw_len);
        if (!tmp)
            return fail(err, errlen, "out of memory");
        size_t mlen = json_compact(raw, raw_len, tmp);
        if (mlen <= 4096)
            r->metadata = mx_str_new(tmp, mlen);
        free(tmp);
        if (!r->metadata)
            return fail(err, errlen, "put: metadata too large");
    }
    r->owner = mx_str_new(owner->valuestring, strlen(owner->valuestring));
    if (!r->owner)
        return fail(err, errlen, "out of memory");
    return true;
}

bool jr_decode(const char *line, size_t len, struct jr_line *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *flaw = json_text_flaw(line, len);
    if (flaw)
        return fail(err, errlen, flaw);
    cJSON *o = cJSON_ParseWithLength(line, len);
    bool ok = false;
    if (!cJSON_IsObject(o)) {
        fail(err, errlen, "not a JSON object");
        goto out;
    }
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "op");
    if (!cJSON_IsString(op)) {
        fail(err, errlen, "no op");
        goto out;
    }
    const char *s = op->valuestring;
    if (strcmp(s, "put") == 0 || strcmp(s, "del") == 0) {
        out->op = s[0] == 'p' ? JR_PUT : JR_DEL;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "resource");
        size_t nlen = cJSON_IsString(name) ? strlen(name->valuestring) : 0;
        if (nlen == 0 || nlen > MX_NAME_MAX) {
            fail(err, errlen, "bad resource");
            goto out;
        }
        memcpy(out->name, name->valuestring, nlen + 1);
        out->name_len = nlen;
        if (!get_u64(o, "seq", &out->seq) || !get_u64(o, "index", &out->row.index)) {
            fail(err, errlen, "bad seq or index");
            goto out;
        }
        if (out->op == JR_PUT && !decode_put(o, line, len, out, err, errlen)) {
            store_row_clear(&out->row);
            goto out;
        }
    } else if (strcmp(s, "reserve") == 0) {
        out->op = JR_RESERVE;
        if (!get_u64(o, "ceiling", &out->ceiling)) {
            fail(err, errlen, "bad ceiling");
            goto out;
        }
    } else if (strcmp(s, "begin") == 0) {
        out->op = JR_BEGIN;
        if (!get_u64(o, "generation", &out->generation) || !get_mode(o, &out->mode) ||
            !get_u64(o, "first_seq", &out->first_seq)) {
            fail(err, errlen, "bad begin");
            goto out;
        }
    } else if (strcmp(s, "snapshot") == 0) {
        out->op = JR_SNAPSHOT;
        struct store_marks *m = &out->marks;
        if (!get_u64(o, "generation", &out->generation) || !get_mode(o, &out->mode) ||
            !get_u64(o, "seq", &m->commit_seq) || !get_u64(o, "token_hwm", &m->token_hwm) ||
            !get_u64(o, "index_hwm", &m->index_hwm) ||
            !get_u64(o, "index_floor", &m->index_floor) || !get_u64(o, "ceiling", &out->ceiling)) {
            fail(err, errlen, "bad snapshot header");
            goto out;
        }
    } else {
        fail(err, errlen, "unknown op");
        goto out;
    }
    ok = true;
out:
    cJSON_Delete(o);
    return ok;
}

void jr_line_clear(struct jr_line *l)
{
    store_row_clear(&l->row);
}
