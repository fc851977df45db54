/*
 * Routing and input decoding (see api.h).
 *
 * Bodies are parsed with cJSON and walked once: every string (keys included) must be
 * valid UTF-8, keys must be known for the route and appear once, and each field is
 * checked for its type and bounds before anything reaches an actor.
 */
#include "http/api.h"

#include <inttypes.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/hex.h"
#include "common/json_span.h"
#include "common/partition.h"
#include "common/uuid.h"
#include "http/ui.h"

static const char *const route_names[ROUTE_COUNT] = {
    [ROUTE_NONE] = "other",
    [ROUTE_ACQUIRE] = "acquire",
    [ROUTE_RENEW] = "renew",
    [ROUTE_RELEASE] = "release",
    [ROUTE_BREAK] = "break",
    [ROUTE_GET] = "get",
    [ROUTE_LIST] = "list",
    [ROUTE_HEALTHZ] = "healthz",
    [ROUTE_READYZ] = "readyz",
    [ROUTE_METRICS] = "metrics",
    [ROUTE_SERVERS] = "servers",
    [ROUTE_EVENTS] = "events",
    [ROUTE_WHOAMI] = "whoami",
    [ROUTE_UI] = "ui",
    [ROUTE_ACQUIRE_MANY] = "acquire_many",
    [ROUTE_RENEW_MANY] = "renew_many",
    [ROUTE_RELEASE_MANY] = "release_many",
};

const char *api_route_name(enum api_route r)
{
    return r < ROUTE_COUNT ? route_names[r] : "other";
}

bool api_fail(struct api_error *e, int status, const char *code, const char *field, const char *fmt,
              ...)
{
    e->status = status;
    e->code = code;
    e->field = field;
    e->allow = NULL;
    e->reason = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

static bool method_is(const char *method, const char *m)
{
    return strcmp(method, m) == 0;
}

static bool is_get(const char *method)
{
    return method_is(method, "GET") || method_is(method, "HEAD");
}

static bool not_allowed(struct api_error *e, const char *allow)
{
    api_fail(e, 405, "method_not_allowed", NULL, "this path accepts %s", allow);
    e->allow = allow;
    return false;
}

bool api_valid_resource(const char *name, size_t len)
{
    if (len == 0 || len > MX_NAME_MAX || name[0] == '/' || name[len - 1] == '/')
        return false;
    size_t seg = 0; /* start of the current segment */
    for (size_t i = 0; i <= len; i++) {
        if (i == len || name[i] == '/') {
            size_t n = i - seg;
            if (n == 0)
                return false; /* "//" */
            if ((n == 1 && name[seg] == '.') ||
                (n == 2 && name[seg] == '.' && name[seg + 1] == '.'))
                return false;
            seg = i + 1;
            continue;
        }
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '~' || c == ':' || c == '@' || c == '-' || c == '{' ||
              c == '}'))
            return false;
    }
    return true;
}

bool api_path_clean(const char *uri)
{
    for (const char *p = uri; *p && *p != '?'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '%' && mx_hex_digit(p[1]) >= 0 && mx_hex_digit(p[2]) >= 0) {
            c = (unsigned char)mx_hex_byte(p[1], p[2]);
            p += 2;
        }
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

bool api_path_refused(struct api_error *e)
{
    return api_fail(e, 400, "invalid_resource", NULL,
                    "the path has a control character (%%00 to %%1F or %%7F)");
}

static bool invalid_resource(struct api_error *e)
{
    return api_fail(e, 400, "invalid_resource", NULL,
                    "a resource name is 1 to 256 characters of A-Z a-z 0-9 . _ ~ : @ - { } and /, "
                    "with no empty, '.' or '..' segment and no leading or trailing '/'");
}

bool api_route(const char *method, const char *path, enum api_route *route, const char **name,
               size_t *name_len, struct api_error *e)
{
    static const char prefix[] = "/v1/resources";
    const size_t plen = sizeof prefix - 1;
    *name = NULL;
    *name_len = 0;

    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0 ||
        strcmp(path, "/metrics") == 0) {
        if (!is_get(method))
            return not_allowed(e, "GET, HEAD");
        *route = path[1] == 'h' ? ROUTE_HEALTHZ : path[1] == 'r' ? ROUTE_READYZ : ROUTE_METRICS;
        return true;
    }
    if (ui_is_path(path)) {
        if (!is_get(method))
            return not_allowed(e, "GET, HEAD");
        *route = ROUTE_UI; /* which file, if any: http/ui.h */
        return true;
    }
    if (strcmp(path, "/v1/servers") == 0 || strcmp(path, "/v1/events") == 0 ||
        strcmp(path, "/v1/whoami") == 0) {
        if (!is_get(method))
            return not_allowed(e, "GET, HEAD");
        *route = path[4] == 's' ? ROUTE_SERVERS : path[4] == 'e' ? ROUTE_EVENTS : ROUTE_WHOAMI;
        return true;
    }
    if (strcmp(path, "/v1/acquire") == 0 || strcmp(path, "/v1/renew") == 0 ||
        strcmp(path, "/v1/release") == 0) {
        if (!method_is(method, "POST"))
            return not_allowed(e, "POST");
        *route = path[4] == 'a'   ? ROUTE_ACQUIRE_MANY
                 : path[6] == 'n' ? ROUTE_RENEW_MANY
                                  : ROUTE_RELEASE_MANY;
        return true;
    }
    if (strncmp(path, prefix, plen) != 0 || (path[plen] != '\0' && path[plen] != '/'))
        return api_fail(e, 404, "not_found", NULL, "no such path: %.100s", path);

    if (path[plen] == '\0') {
        if (!is_get(method))
            return not_allowed(e, "GET, HEAD");
        *route = ROUTE_LIST;
        return true;
    }
    const char *rest = path + plen + 1; /* "/v1/resources/": an empty name */
    size_t len = strlen(rest);
    if (is_get(method)) {
        /* In a GET the whole rest of the path is the resource. */
        if (!api_valid_resource(rest, len))
            return invalid_resource(e);
        *route = ROUTE_GET;
        *name = rest;
        *name_len = len;
        return true;
    }
    if (!method_is(method, "POST"))
        return not_allowed(e, "GET, HEAD, POST");

    /* In a POST the last segment is the action. */
    const char *slash = strrchr(rest, '/');
    const char *action = slash ? slash + 1 : rest;
    if (strcmp(action, "acquire") == 0)
        *route = ROUTE_ACQUIRE;
    else if (strcmp(action, "renew") == 0)
        *route = ROUTE_RENEW;
    else if (strcmp(action, "release") == 0)
        *route = ROUTE_RELEASE;
    else if (strcmp(action, "break") == 0)
        *route = ROUTE_BREAK;
    else
        return api_fail(e, 404, "not_found", NULL,
                        "unknown action '%.40s': use acquire, renew, release or break", action);
    size_t nlen = slash ? (size_t)(slash - rest) : 0;
    if (!api_valid_resource(rest, nlen))
        return invalid_resource(e);
    *name = rest;
    *name_len = nlen;
    return true;
}

bool api_utf8_valid(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned cp;
        if ((c & 0xe0) == 0xc0) {
            n = 2;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 3;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n > len)
            return false;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n;
    }
    return true;
}

/* UTF-8 (already checked) without C0 or C1 control characters or DEL. */
static bool no_controls(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x20 || s[i] == 0x7f)
            return false;
        if (s[i] == 0xc2 && i + 1 < len && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f)
            return false; /* U+0080..U+009F */
    }
    return true;
}

bool api_is_json_type(const char *ct)
{
    while (*ct == ' ' || *ct == '\t')
        ct++;
    static const char json[] = "application/json";
    if (strncasecmp(ct, json, sizeof json - 1) != 0)
        return false;
    ct += sizeof json - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

/* Every string in the tree, keys included, must be valid UTF-8. */
static bool tree_utf8(const cJSON *item)
{
    for (; item; item = item->next) {
        if (item->string && !api_utf8_valid(item->string, strlen(item->string)))
            return false;
        if (cJSON_IsString(item) && !api_utf8_valid(item->valuestring, strlen(item->valuestring)))
            return false;
        if (item->child && !tree_utf8(item->child))
            return false;
    }
    return true;
}

/* A JSON number that is a whole number from 0 to 2^53. */
static bool get_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > 9007199254740992.0 || floor(d) != d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static uint64_t api_default_ttl(const struct res_limits *lim)
{
    uint64_t ttl = API_DEFAULT_TTL_MS;
    if (ttl < lim->min_ttl_ms)
        ttl = lim->min_ttl_ms;
    if (ttl > lim->max_ttl_ms)
        ttl = lim->max_ttl_ms;
    return ttl;
}

static bool decode_ttl(const cJSON *v, const struct res_limits *lim, struct res_req *rq,
                       struct api_error *e)
{
    uint64_t ttl;
    if (!get_uint(v, &ttl) || ttl < lim->min_ttl_ms || ttl > lim->max_ttl_ms)
        return api_fail(e, 400, "invalid_ttl", "ttl_ms",
                        "ttl_ms must be a whole number of milliseconds from %" PRIu64
                        " to %" PRIu64,
                        lim->min_ttl_ms, lim->max_ttl_ms);
    rq->ttl_ms = ttl;
    rq->has_ttl = true;
    return true;
}

static bool decode_limit(const cJSON *v, const struct res_limits *lim, struct res_req *rq,
                         struct api_error *e)
{
    uint64_t n;
    uint32_t max = lim->max_holders ? lim->max_holders : 1024;
    if (!get_uint(v, &n) || n < 1 || n > max)
        return api_fail(e, 400, "invalid_field", "limit",
                        "limit must be a whole number from 1 to %" PRIu32 " (--max-holders)", max);
    rq->limit = (uint32_t)n;
    return true;
}

static bool decode_shared(const cJSON *v, struct res_req *rq, struct api_error *e)
{
    if (!cJSON_IsBool(v))
        return api_fail(e, 400, "invalid_field", "shared", "shared must be true or false");
    rq->shared = cJSON_IsTrue(v);
    return true;
}

static bool decode_wait(const cJSON *v, const struct res_limits *lim, struct res_req *rq,
                        struct api_error *e)
{
    uint64_t w;
    if (!get_uint(v, &w) || w > lim->max_wait_ms)
        return api_fail(e, 400, "invalid_wait", "wait_ms",
                        "wait_ms must be a whole number of milliseconds from 0 to %" PRIu64,
                        lim->max_wait_ms);
    rq->wait_ms = w;
    return true;
}

static bool decode_lease_id(const cJSON *v, struct res_req *rq, struct api_error *e)
{
    if (!cJSON_IsString(v) || !mx_uuid_parse(v->valuestring, strlen(v->valuestring), rq->lease_id))
        return api_fail(e, 400, "invalid_lease_id", "lease_id",
                        "lease_id must be a UUID (8-4-4-4-12 hexadecimal digits)");
    /* The nil UUID is what an id left unset looks like: two clients proposing it would
     * both be granted the one lease (acquire with the holder's own id is idempotent), and
     * anyone could guess it. A lease granted under it before this rule may still be
     * renewed and released. */
    static const uint8_t nil[16];
    if (rq->op == RES_ACQUIRE && memcmp(rq->lease_id, nil, sizeof nil) == 0)
        return api_fail(e, 400, "invalid_lease_id", "lease_id",
                        "lease_id may not be the nil UUID: propose a random one (version 4)");
    rq->has_lease_id = true;
    return true;
}

static bool decode_owner(const cJSON *v, struct res_req *rq, struct api_error *e)
{
    size_t len = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
    if (!cJSON_IsString(v) || len == 0 || len > MX_OWNER_MAX || !no_controls(v->valuestring, len))
        return api_fail(e, 400, "invalid_field", "owner",
                        "owner must be a string of 1 to %d bytes without control characters",
                        MX_OWNER_MAX);
    rq->owner = mx_str_new(v->valuestring, len);
    if (!rq->owner)
        return api_fail(e, 503, "unavailable", NULL, "out of memory");
    return true;
}

/* How many levels of objects and arrays `v` nests (an empty object is 1), counted up to
 * `cap` only: the walk goes no deeper. */
static int nesting(const cJSON *v, int cap)
{
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return 0;
    int deepest = 0;
    if (cap > 1)
        for (const cJSON *c = v->child; c; c = c->next) {
            int d = nesting(c, cap - 1);
            if (d > deepest)
                deepest = d;
        }
    return 1 + deepest;
}

/* The client's own text of the object, compacted: never re-printed from cJSON's doubles,
 * which would change numbers beyond 2^53 and their notation. */
static bool decode_metadata(const cJSON *v, const char *raw, size_t raw_len, struct res_req *rq,
                            struct api_error *e)
{
    if (!cJSON_IsObject(v))
        return api_fail(e, 400, "invalid_field", "metadata", "metadata must be a JSON object");
    /* Bounded well below cJSON's own limit of 1000: a journal or snapshot line holds the
     * metadata a few levels deeper, and it must read back whatever was answered 2xx. */
    int depth = nesting(v, API_MAX_METADATA_DEPTH + 1);
    if (depth > API_MAX_METADATA_DEPTH)
        return api_fail(e, 400, "invalid_field", "metadata",
                        "metadata nests more than %d levels deep", API_MAX_METADATA_DEPTH);
    char buf[API_MAX_BODY];
    size_t len = json_compact(raw, raw_len, buf);
    if (len > API_MAX_METADATA)
        return api_fail(e, 400, "invalid_field", "metadata",
                        "metadata is %zu bytes serialized; at most %d are allowed", len,
                        API_MAX_METADATA);
    rq->metadata = mx_str_new(buf, len);
    if (!rq->metadata)
        return api_fail(e, 503, "unavailable", NULL, "out of memory");
    rq->has_metadata = true;
    return true;
}

/* Names the client's own spelling of an unknown field in the error. */
static void unknown_field_name(struct api_error *e, const char *s)
{
    snprintf(e->field_buf, sizeof e->field_buf, "%s", s);
    e->field = e->field_buf;
}

enum field {
    F_OWNER = 1 << 0,
    F_TTL = 1 << 1,
    F_LEASE_ID = 1 << 2,
    F_WAIT = 1 << 3,
    F_METADATA = 1 << 4,
    F_REASON = 1 << 5,
    F_LIMIT = 1 << 6,
    F_SHARED = 1 << 7,
    F_RESOURCES = 1 << 8
};

static const struct {
    const char *name;
    enum field f;
} fields[] = {
    {"owner", F_OWNER},  {"ttl_ms", F_TTL},        {"lease_id", F_LEASE_ID},
    {"wait_ms", F_WAIT}, {"metadata", F_METADATA}, {"reason", F_REASON},
    {"limit", F_LIMIT},  {"shared", F_SHARED},     {"resources", F_RESOURCES},
};

static unsigned allowed_fields(enum api_route route, unsigned *required)
{
    switch (route) {
    case ROUTE_ACQUIRE:
        *required = F_OWNER;
        return F_OWNER | F_TTL | F_LEASE_ID | F_WAIT | F_METADATA | F_LIMIT | F_SHARED;
    case ROUTE_RENEW:
        *required = F_LEASE_ID;
        return F_LEASE_ID | F_TTL | F_METADATA;
    case ROUTE_RELEASE:
        *required = F_LEASE_ID;
        return F_LEASE_ID;
    case ROUTE_BREAK:
        *required = 0;
        return F_REASON | F_LEASE_ID;
    case ROUTE_ACQUIRE_MANY:
        *required = F_OWNER | F_RESOURCES;
        return F_RESOURCES | F_OWNER | F_TTL | F_LEASE_ID | F_WAIT | F_METADATA | F_LIMIT |
               F_SHARED;
    case ROUTE_RENEW_MANY:
        *required = F_RESOURCES | F_LEASE_ID;
        return F_RESOURCES | F_LEASE_ID | F_TTL | F_METADATA;
    case ROUTE_RELEASE_MANY:
        *required = F_RESOURCES | F_LEASE_ID;
        return F_RESOURCES | F_LEASE_ID;
    default:
        *required = 0;
        return 0;
    }
}

static enum res_op route_op(enum api_route route)
{
    switch (route) {
    case ROUTE_ACQUIRE:
    case ROUTE_ACQUIRE_MANY:
        return RES_ACQUIRE;
    case ROUTE_RENEW:
    case ROUTE_RENEW_MANY:
        return RES_RENEW;
    case ROUTE_RELEASE:
    case ROUTE_RELEASE_MANY:
        return RES_RELEASE;
    case ROUTE_BREAK:
        return RES_BREAK;
    default:
        return RES_GET;
    }
}

void api_names_free(struct api_names *n)
{
    free(n->buf);
    memset(n, 0, sizeof *n);
}

/* `resources`: 2 to 64 distinct valid names, kept in the order given. */
static bool decode_names(const cJSON *v, struct api_names *n, struct api_error *e)
{
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (count < API_MIN_NAMES || count > API_MAX_NAMES)
        return api_fail(e, 400, "invalid_field", "resources",
                        "resources must be an array of %d to %d resource names", API_MIN_NAMES,
                        API_MAX_NAMES);
    size_t total = 0;
    for (const cJSON *x = v->child; x; x = x->next) {
        if (!cJSON_IsString(x))
            return api_fail(e, 400, "invalid_field", "resources",
                            "resources must hold resource names (strings)");
        size_t len = strlen(x->valuestring);
        if (!api_valid_resource(x->valuestring, len)) {
            invalid_resource(e);
            snprintf(e->message, sizeof e->message,
                     "resources[%u] is not a valid resource name (1 to %d characters of "
                     "A-Z a-z 0-9 . _ ~ : @ - { } and /)",
                     (unsigned)n->count, MX_NAME_MAX);
            return false;
        }
        for (uint32_t k = 0; k < n->count; k++)
            if (n->len[k] == len && memcmp(n->name[k], x->valuestring, len) == 0)
                return api_fail(e, 400, "invalid_field", "resources",
                                "resources names '%.60s' twice: each resource once",
                                x->valuestring);
        n->name[n->count] = x->valuestring; /* the tree's until copied below */
        n->len[n->count++] = len;
        total += len + 1;
    }
    n->buf = malloc(total);
    if (!n->buf)
        return api_fail(e, 503, "unavailable", NULL, "out of memory");
    char *p = n->buf;
    for (uint32_t k = 0; k < n->count; k++) {
        memcpy(p, n->name[k], n->len[k]);
        p[n->len[k]] = '\0';
        n->name[k] = p;
        p += n->len[k] + 1;
    }
    return true;
}

bool api_names_one_partition(const struct api_names *n, unsigned partitions, struct api_error *e)
{
    unsigned first = mx_partition(n->name[0], n->len[0], partitions);
    for (uint32_t k = 1; k < n->count; k++)
        if (mx_partition(n->name[k], n->len[k], partitions) != first) {
            api_fail(e, 400, "invalid_field", "resources",
                     "'%.60s' and '%.60s' are in different partitions: name them with one "
                     "hash tag, as {order-7}/lock and {order-7}/stock",
                     n->name[0], n->name[k]);
            e->reason = "partitions_differ";
            return false;
        }
    return true;
}

static bool decode_field(enum field f, const cJSON *v, const char *raw, size_t raw_len,
                         const struct res_limits *lim, struct res_req *rq, struct api_names *names,
                         char *reason, size_t reason_len, struct api_error *e)
{
    switch (f) {
    case F_RESOURCES:
        return decode_names(v, names, e);
    case F_OWNER:
        return decode_owner(v, rq, e);
    case F_TTL:
        return decode_ttl(v, lim, rq, e);
    case F_LEASE_ID:
        return decode_lease_id(v, rq, e);
    case F_WAIT:
        return decode_wait(v, lim, rq, e);
    case F_METADATA:
        return decode_metadata(v, raw, raw_len, rq, e);
    case F_LIMIT:
        return decode_limit(v, lim, rq, e);
    case F_SHARED:
        return decode_shared(v, rq, e);
    case F_REASON: {
        size_t len = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
        if (!cJSON_IsString(v) || len > API_MAX_REASON)
            return api_fail(e, 400, "invalid_field", "reason",
                            "reason must be a string of at most %d bytes", API_MAX_REASON);
        snprintf(reason, reason_len, "%s", v->valuestring);
        return true;
    }
    }
    return false;
}

static bool decode_body(enum api_route route, const char *body, size_t len,
                        const struct res_limits *lim, struct res_req *rq, struct api_names *names,
                        char *reason, size_t reason_len, struct api_error *e)
{
    rq->op = (uint8_t)route_op(route);
    rq->ttl_ms = api_default_ttl(lim);
    if (reason_len)
        reason[0] = '\0';
    unsigned required, allowed = allowed_fields(route, &required);
    if (len == 0) {
        if (required & F_RESOURCES)
            return api_fail(e, 400, "missing_field", "resources", "resources is required");
        if (required & F_OWNER)
            return api_fail(e, 400, "missing_field", "owner", "owner is required");
        if (required & F_LEASE_ID)
            return api_fail(e, 400, "missing_field", "lease_id", "lease_id is required");
        return true;
    }

    const char *flaw = json_strict_flaw(body, len);
    if (flaw)
        return api_fail(e, 400, "invalid_json", NULL, "the body has %s", flaw);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    bool ok = false;
    if (!root || (size_t)(end - body) != len) {
        /* Trailing bytes after the value: only white space is allowed. */
        if (root) {
            const char *p = end;
            while (p < body + len && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
                p++;
            if (p == body + len)
                goto parsed;
        }
        api_fail(e, 400, "invalid_json", NULL, "the body is not valid JSON");
        goto out;
    }
parsed:
    if (!cJSON_IsObject(root)) {
        api_fail(e, 400, "invalid_json", NULL, "the body must be a JSON object");
        goto out;
    }
    if (!tree_utf8(root)) {
        api_fail(e, 400, "invalid_json", NULL, "the body is not valid UTF-8");
        goto out;
    }
    unsigned seen = 0;
    size_t member = 0;
    for (const cJSON *v = root->child; v; v = v->next, member++) {
        enum field f = 0;
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            if (strcmp(v->string, fields[i].name) == 0)
                f = fields[i].f;
        if (!f || !(allowed & f)) {
            api_fail(e, 400, "unknown_field", NULL, "unknown field '%.60s' for %s", v->string,
                     api_route_name(route));
            unknown_field_name(e, v->string);
            goto out;
        }
        if (seen & f) {
            api_fail(e, 400, "invalid_field", fields[__builtin_ctz(f)].name,
                     "field '%s' appears more than once", fields[__builtin_ctz(f)].name);
            goto out;
        }
        seen |= f;
        if (cJSON_IsNull(v))
            continue; /* an optional field given as null is absent */
        const char *raw = NULL;
        size_t raw_len = 0;
        if (f == F_METADATA && !json_member_value(body, len, member, &raw, &raw_len)) {
            api_fail(e, 400, "invalid_json", NULL, "the body is not valid JSON");
            goto out;
        }
        if (!decode_field(f, v, raw, raw_len, lim, rq, names, reason, reason_len, e))
            goto out;
    }
    if ((required & F_RESOURCES) && names->count == 0) {
        api_fail(e, 400, "missing_field", "resources", "resources is required");
        goto out;
    }
    if ((required & F_OWNER) && !rq->owner) {
        api_fail(e, 400, "missing_field", "owner", "owner is required");
        goto out;
    }
    if ((required & F_LEASE_ID) && !rq->has_lease_id) {
        api_fail(e, 400, "missing_field", "lease_id", "lease_id is required");
        goto out;
    }
    if (rq->shared && rq->limit > 1) {
        api_fail(e, 400, "invalid_field", "shared",
                 "shared leases take no limit: shared is for readers beside one writer, "
                 "limit for a counting semaphore");
        goto out;
    }
    ok = true;
out:
    cJSON_Delete(root);
    return ok;
}

bool api_decode_body(enum api_route route, const char *body, size_t len,
                     const struct res_limits *lim, struct res_req *rq, char *reason,
                     size_t reason_len, struct api_error *e)
{
    struct api_names none = {0}; /* no route of one resource takes `resources` */
    return decode_body(route, body, len, lim, rq, &none, reason, reason_len, e);
}

bool api_decode_many(enum api_route route, const char *body, size_t len,
                     const struct res_limits *lim, struct res_req *rq, struct api_names *names,
                     struct api_error *e)
{
    memset(names, 0, sizeof *names);
    if (decode_body(route, body, len, lim, rq, names, NULL, 0, e))
        return true;
    api_names_free(names);
    return false;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

bool api_query_param(enum api_route route, struct api_query *q, const char *key, const char *value,
                     const struct res_limits *lim, struct api_error *e)
{
    if (!key)
        return true;
    /* Values are parsed aside and stored only when valid: a refused parameter leaves the
     * query as it was. */
    uint64_t v;
    bool watch = route == ROUTE_GET || route == ROUTE_LIST;
    /* The partition a list or events request is limited to: checked against the group's
     * count when the request arrives (http/framing.c). */
    if ((route == ROUTE_LIST || route == ROUTE_EVENTS) && strcmp(key, "partition") == 0)
        return true;
    /* The partitions a server asks another for, at once (http/spread.c checks them). */
    if ((route == ROUTE_LIST || route == ROUTE_EVENTS) && strcmp(key, "partitions") == 0) {
        q->partitions = value;
        return true;
    }
    if ((route == ROUTE_EVENTS && strcmp(key, "after") == 0) ||
        (route == ROUTE_LIST && strcmp(key, "index") == 0)) {
        if (value && value[0] == 'v' && strlen(value) <= API_MAX_POSITION) {
            q->index_text = value; /* a partitioned group's position: http/spread.c */
            q->has_index = true;
            return true;
        }
    }
    if (route == ROUTE_EVENTS && strcmp(key, "after") == 0) {
        if (!parse_u64(value, &v))
            return api_fail(e, 400, "invalid_field", "after",
                            "after must be a whole number, as returned in next");
        q->index = v;
        q->has_index = true;
        return true;
    }
    if (watch && strcmp(key, "index") == 0) {
        if (!parse_u64(value, &v))
            return api_fail(e, 400, "invalid_field", "index",
                            "index must be a whole number, as returned by GET");
        q->index = v;
        q->has_index = true;
        return true;
    }
    if ((watch || route == ROUTE_EVENTS) && strcmp(key, "wait_ms") == 0) {
        if (!parse_u64(value, &v) || v > lim->max_wait_ms)
            return api_fail(e, 400, "invalid_wait", "wait_ms",
                            "wait_ms must be a whole number of milliseconds from 0 to %" PRIu64,
                            lim->max_wait_ms);
        q->wait_ms = v;
        q->has_wait = true;
        return true;
    }
    if ((route == ROUTE_LIST || route == ROUTE_EVENTS) && strcmp(key, "prefix") == 0) {
        if (!value || strlen(value) > MX_NAME_MAX)
            return api_fail(e, 400, "invalid_field", "prefix", "prefix must be at most %d bytes",
                            MX_NAME_MAX);
        q->prefix = value;
        return true;
    }
    if (route == ROUTE_LIST && strcmp(key, "cursor") == 0) {
        if (!value || strlen(value) > MX_NAME_MAX)
            return api_fail(e, 400, "invalid_field", "cursor",
                            "cursor must be a next_cursor returned by a previous page");
        q->cursor = value;
        return true;
    }
    if ((route == ROUTE_LIST || route == ROUTE_EVENTS) && strcmp(key, "limit") == 0) {
        if (!parse_u64(value, &v) || v < 1 || v > API_MAX_LIMIT)
            return api_fail(e, 400, "invalid_field", "limit",
                            "limit must be a whole number from 1 to %d", API_MAX_LIMIT);
        q->limit = v;
        q->has_limit = true;
        return true;
    }
    api_fail(e, 400, "unknown_field", NULL, "unknown query parameter '%.60s'", key);
    unknown_field_name(e, key);
    return false;
}

uint64_t api_query_wait(const struct api_query *q, const struct res_limits *lim)
{
    /* With an index and no wait_ms, a watch waits as long as it may (as Consul's blocking
     * queries do); without an index there is nothing to wait for. */
    return q->has_index ? (q->has_wait ? q->wait_ms : lim->max_wait_ms) : 0;
}

void api_query_finish(enum api_route route, const struct api_query *q, const struct res_limits *lim,
                      struct res_req *rq)
{
    (void)route;
    rq->op = RES_GET;
    rq->has_index = q->has_index;
    rq->index = q->index;
    rq->wait_ms = api_query_wait(q, lim);
}
