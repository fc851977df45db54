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

/* A lease as a JSON object (format 2). */
static cJSON *lease_object(const struct store_lease *l)
{
    cJSON *o = cJSON_CreateObject();
    char id[MX_UUID_STR_LEN + 1];
    mx_uuid_format(l->lease_id, id);
    cJSON_AddStringToObject(o, "lease_id", id);
    cJSON_AddStringToObject(o, "owner", l->owner ? l->owner->s : "");
    mx_json_add_u64(o, "token", l->token);
    mx_json_add_u64(o, "ttl_ms", l->ttl_ms);
    mx_json_add_i64(o, "acquired_at", l->acquired_at_ms);
    mx_json_add_i64(o, "renewed_at", l->renewed_at_ms);
    mx_json_add_i64(o, "deadline", l->deadline_ms);
    cJSON_AddBoolToObject(o, "held", l->held);
    cJSON_AddBoolToObject(o, "shared", l->shared);
    if (l->metadata)
        cJSON_AddRawToObject(o, "metadata", l->metadata->s);
    else
        cJSON_AddNullToObject(o, "metadata");
    return o;
}

static void add_leases(cJSON *o, const char *key, const struct store_lease *v, uint32_t n)
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (uint32_t i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, lease_object(&v[i]));
}

void jr_encode_row(struct mx_buf *b, const char *name, size_t len, const struct store_row *row)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", "row");
    mx_json_add_u64(o, "seq", 0);
    mx_json_add_name(o, "resource", name, len);
    mx_json_add_u64(o, "index", row->index);
    mx_json_add_u64(o, "limit", row->limit);
    add_leases(o, "leases", row->leases, row->nleases);
    finish(b, o);
}

void jr_encode_rec(struct mx_buf *b, const struct store_rec *rec)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", rec->drop ? "del" : "set");
    mx_json_add_u64(o, "seq", rec->commit_seq);
    mx_json_add_name(o, "resource", rec->name, rec->name_len);
    mx_json_add_u64(o, "index", rec->index);
    if (rec->grouped)
        mx_json_add_u64(o, "grp", rec->group_left);
    if (!rec->drop) {
        mx_json_add_u64(o, "limit", rec->limit);
        add_leases(o, "put", rec->put, rec->nput);
        cJSON *del = cJSON_AddArrayToObject(o, "del");
        for (uint32_t i = 0; del && i < rec->ndel; i++) {
            char id[MX_UUID_STR_LEN + 1];
            mx_uuid_format(rec->del[i], id);
            cJSON_AddItemToArray(del, cJSON_CreateString(id));
        }
    }
    finish(b, o);
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
    mx_json_add_u64(o, "format", JR_FORMAT);
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
    mx_json_add_u64(o, "format", JR_FORMAT);
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

/* ---- spans: the raw text of a value nested in a line -------------------------------- */

/* The member `key` of object `o` (whose text is `text`): its cJSON item, and its raw text.
 * False when the object has no such member or its text cannot be found. */
static const cJSON *member_span(const cJSON *o, const char *text, size_t len, const char *key,
                                const char **raw, size_t *raw_len)
{
    size_t member = 0;
    const cJSON *v = o->child;
    while (v && (!v->string || strcmp(v->string, key) != 0)) {
        v = v->next;
        member++;
    }
    if (!v || !json_member_value(text, len, member, raw, raw_len))
        return NULL;
    return v;
}

/* One lease object (its cJSON item and its text). `format1`: the lease's fields are those
 * of a format 1 "put" (no "shared"). */
static bool decode_lease(const cJSON *o, const char *text, size_t len, bool format1,
                         struct store_lease *l, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    if (!cJSON_IsObject(o))
        return fail(err, errlen, "lease: not an object");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "lease_id");
    if (!cJSON_IsString(id) ||
        !mx_uuid_parse(id->valuestring, strlen(id->valuestring), l->lease_id))
        return fail(err, errlen, "lease: bad lease_id");
    const cJSON *owner = cJSON_GetObjectItemCaseSensitive(o, "owner");
    if (!cJSON_IsString(owner) || strlen(owner->valuestring) > MX_OWNER_MAX)
        return fail(err, errlen, "lease: bad owner");
    const cJSON *held = cJSON_GetObjectItemCaseSensitive(o, "held");
    if (!cJSON_IsBool(held))
        return fail(err, errlen, "lease: bad held");
    l->held = cJSON_IsTrue(held);
    if (!format1) {
        const cJSON *shared = cJSON_GetObjectItemCaseSensitive(o, "shared");
        if (!cJSON_IsBool(shared))
            return fail(err, errlen, "lease: bad shared");
        l->shared = cJSON_IsTrue(shared);
    }
    if (!get_u64(o, "token", &l->token) || !get_u64(o, "ttl_ms", &l->ttl_ms) ||
        !get_i64(o, "acquired_at", &l->acquired_at_ms) ||
        !get_i64(o, "renewed_at", &l->renewed_at_ms) || !get_i64(o, "deadline", &l->deadline_ms))
        return fail(err, errlen, "lease: bad number");
    /* Metadata is the client's own text, kept as written (see common/json_span.h). */
    const char *raw;
    size_t raw_len;
    const cJSON *md = member_span(o, text, len, "metadata", &raw, &raw_len);
    if (!md && cJSON_GetObjectItemCaseSensitive(o, "metadata"))
        return fail(err, errlen, "lease: metadata cannot be read");
    if (md && !cJSON_IsNull(md)) {
        if (!cJSON_IsObject(md))
            return fail(err, errlen, "lease: metadata is not an object");
        if (raw_len > 8192)
            return fail(err, errlen, "lease: metadata too large");
        char *tmp = malloc(raw_len ? raw_len : 1);
        if (!tmp)
            return fail(err, errlen, "out of memory");
        size_t mlen = json_compact(raw, raw_len, tmp);
        if (mlen <= 4096)
            l->metadata = mx_str_new(tmp, mlen);
        free(tmp);
        if (!l->metadata)
            return fail(err, errlen, "lease: metadata too large");
    }
    l->owner = mx_str_new(owner->valuestring, strlen(owner->valuestring));
    if (!l->owner) {
        store_lease_clear(l);
        return fail(err, errlen, "out of memory");
    }
    return true;
}

/* Leases of a row, or put by a "set": no more than this many in one line. */
#define MAX_LINE_LEASES (1u << 20)

/* The array member `key` of `o` (the line's top-level object) as leases appended to `row`. */
static bool decode_leases(const cJSON *o, const char *line, size_t len, const char *key,
                          struct store_row *row, char *err, size_t errlen)
{
    const char *raw;
    size_t raw_len;
    const cJSON *a = member_span(o, line, len, key, &raw, &raw_len);
    if (!cJSON_IsArray(a))
        return fail(err, errlen, "leases: not an array");
    int n = cJSON_GetArraySize(a);
    if (n < 0 || (unsigned)n > MAX_LINE_LEASES)
        return fail(err, errlen, "leases: too many");
    if (n > 0 && !(row->leases = calloc((size_t)n, sizeof *row->leases)))
        return fail(err, errlen, "out of memory");
    size_t i = 0;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        const char *etext;
        size_t elen;
        if (!json_element_value(raw, raw_len, i, &etext, &elen))
            return fail(err, errlen, "leases: element cannot be read");
        if (!decode_lease(e, etext, elen, false, &row->leases[row->nleases], err, errlen))
            return false;
        row->nleases++;
    }
    return true;
}

static bool decode_dels(const cJSON *o, struct jr_line *out, char *err, size_t errlen)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "del");
    if (!cJSON_IsArray(a))
        return fail(err, errlen, "set: del is not an array");
    int n = cJSON_GetArraySize(a);
    if (n < 0 || (unsigned)n > MAX_LINE_LEASES)
        return fail(err, errlen, "set: too many del");
    if (n > 0 && !(out->del = calloc((size_t)n, sizeof *out->del)))
        return fail(err, errlen, "out of memory");
    for (const cJSON *e = a->child; e; e = e->next) {
        if (!cJSON_IsString(e) ||
            !mx_uuid_parse(e->valuestring, strlen(e->valuestring), out->del[out->ndel]))
            return fail(err, errlen, "set: bad lease id in del");
        out->ndel++;
    }
    return true;
}

/* A holder limit: 1 to 65536 (--max-holders' range). */
static bool get_limit(const cJSON *o, uint32_t *out)
{
    uint64_t v;
    if (!get_u64(o, "limit", &v) || v < 1 || v > 65536)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* "format" of a begin or snapshot line: 1 when it names none; a format above JR_FORMAT is
 * refused with a sentence that says so. */
static bool get_format(const cJSON *o, uint32_t *out, char *err, size_t errlen)
{
    if (!cJSON_GetObjectItemCaseSensitive(o, "format")) {
        *out = 1;
        return true;
    }
    uint64_t v;
    if (!get_u64(o, "format", &v) || v < 1)
        return fail(err, errlen, "bad format");
    if (v > JR_FORMAT) {
        snprintf(err, errlen,
                 "written by a newer version of mutexd (format %" PRIu64
                 "); this version reads formats up to %d",
                 v, JR_FORMAT);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

static bool decode_change(const cJSON *o, const char *line, size_t len, struct jr_line *out,
                          char *err, size_t errlen)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "resource");
    size_t nlen = cJSON_IsString(name) ? strlen(name->valuestring) : 0;
    if (nlen == 0 || nlen > MX_NAME_MAX)
        return fail(err, errlen, "bad resource");
    memcpy(out->name, name->valuestring, nlen + 1);
    out->name_len = nlen;
    if (!get_u64(o, "seq", &out->seq) || !get_u64(o, "index", &out->row.index))
        return fail(err, errlen, "bad seq or index");
    switch (out->op) {
    case JR_DEL:
        return true;
    case JR_PUT: {
        /* Format 1: the resource's one lease, its fields at the top level. */
        out->row.limit = 1;
        struct store_lease l;
        if (!decode_lease(o, line, len, true, &l, err, errlen))
            return false;
        if (!(out->row.leases = malloc(sizeof l))) {
            store_lease_clear(&l);
            return fail(err, errlen, "out of memory");
        }
        out->row.leases[0] = l;
        out->row.nleases = 1;
        return true;
    }
    case JR_ROW:
        if (!get_limit(o, &out->row.limit))
            return fail(err, errlen, "row: bad limit");
        return decode_leases(o, line, len, "leases", &out->row, err, errlen);
    case JR_SET:
        if (!get_limit(o, &out->row.limit))
            return fail(err, errlen, "set: bad limit");
        return decode_leases(o, line, len, "put", &out->row, err, errlen) &&
               decode_dels(o, out, err, errlen);
    default:
        return fail(err, errlen, "unknown op");
    }
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
    if (strcmp(s, "put") == 0 || strcmp(s, "del") == 0 || strcmp(s, "set") == 0 ||
        strcmp(s, "row") == 0) {
        out->op = strcmp(s, "put") == 0   ? JR_PUT
                  : strcmp(s, "del") == 0 ? JR_DEL
                  : strcmp(s, "set") == 0 ? JR_SET
                                          : JR_ROW;
        if (!decode_change(o, line, len, out, err, errlen)) {
            jr_line_clear(out);
            goto out;
        }
        uint64_t left;
        if (cJSON_GetObjectItemCaseSensitive(o, "grp")) {
            if (!get_u64(o, "grp", &left) || left > 63) {
                jr_line_clear(out);
                fail(err, errlen, "bad grp");
                goto out;
            }
            out->grouped = true;
            out->group_left = (uint32_t)left;
        }
    } else if (strcmp(s, "reserve") == 0) {
        out->op = JR_RESERVE;
        if (!get_u64(o, "ceiling", &out->ceiling)) {
            fail(err, errlen, "bad ceiling");
            goto out;
        }
    } else if (strcmp(s, "begin") == 0) {
        out->op = JR_BEGIN;
        if (!get_format(o, &out->format, err, errlen))
            goto out;
        if (!get_u64(o, "generation", &out->generation) || !get_mode(o, &out->mode) ||
            !get_u64(o, "first_seq", &out->first_seq)) {
            fail(err, errlen, "bad begin");
            goto out;
        }
    } else if (strcmp(s, "snapshot") == 0) {
        out->op = JR_SNAPSHOT;
        if (!get_format(o, &out->format, err, errlen))
            goto out;
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
    free(l->del);
    l->del = NULL;
    l->ndel = 0;
}
