/*
 * Routing, resource names, bodies and query parameters: every input rule of docs/api.md that
 * is decided before a request reaches an actor.
 */
#include "tests/unit/testutil.h"

#include <string.h>

#include "http/api.h"

static const struct res_limits LIM = {
    .min_ttl_ms = 1000, .max_ttl_ms = 3600000, .max_wait_ms = 300000, .max_waiters = 1024};

static void route_ok(const char *method, const char *path, enum api_route want, const char *name)
{
    enum api_route r;
    const char *n;
    size_t len;
    struct api_error e;
    assert_true(api_route(method, path, &r, &n, &len, &e));
    assert_int_equal(r, want);
    if (name) {
        assert_int_equal(len, strlen(name));
        assert_memory_equal(n, name, len);
    } else {
        assert_null(n);
    }
}

static void route_err(const char *method, const char *path, int status, const char *code)
{
    enum api_route r;
    const char *n;
    size_t len;
    struct api_error e;
    assert_false(api_route(method, path, &r, &n, &len, &e));
    assert_int_equal(e.status, status);
    assert_string_equal(e.code, code);
}

static void routing(void **st)
{
    (void)st;
    route_ok("POST", "/v1/resources/a/acquire", ROUTE_ACQUIRE, "a");
    route_ok("POST", "/v1/resources/jobs/nightly-report/renew", ROUTE_RENEW, "jobs/nightly-report");
    route_ok("POST", "/v1/resources/a/b/c/release", ROUTE_RELEASE, "a/b/c");
    route_ok("POST", "/v1/resources/x/break", ROUTE_BREAK, "x");
    /* In a GET the whole rest is the resource, even when it ends in an action's name. */
    route_ok("GET", "/v1/resources/jobs/acquire", ROUTE_GET, "jobs/acquire");
    route_ok("HEAD", "/v1/resources/a", ROUTE_GET, "a");
    route_ok("GET", "/v1/resources", ROUTE_LIST, NULL);
    route_err("GET", "/v1/resources/", 400, "invalid_resource"); /* the rest is the name */
    route_ok("GET", "/healthz", ROUTE_HEALTHZ, NULL);
    route_ok("GET", "/readyz", ROUTE_READYZ, NULL);
    route_ok("GET", "/metrics", ROUTE_METRICS, NULL);
    route_ok("GET", "/v1/servers", ROUTE_SERVERS, NULL);
    route_ok("GET", "/v1/events", ROUTE_EVENTS, NULL);
    route_ok("GET", "/v1/whoami", ROUTE_WHOAMI, NULL);
    route_ok("HEAD", "/v1/servers", ROUTE_SERVERS, NULL);
    route_err("POST", "/v1/servers", 405, "method_not_allowed");
    route_err("GET", "/v1/servers/a", 404, "not_found");
    route_ok("GET", "/ui", ROUTE_UI, NULL); /* redirected to /ui/ by the front */
    route_ok("GET", "/ui/", ROUTE_UI, NULL);
    route_ok("HEAD", "/ui/app.js", ROUTE_UI, NULL);
    route_ok("GET", "/ui/no-such-file", ROUTE_UI, NULL); /* 404 from the front, with its headers */
    route_err("POST", "/ui/", 405, "method_not_allowed");
    route_err("GET", "/uix", 404, "not_found");

    route_err("POST", "/v1/resources/a/frobnicate", 404, "not_found");
    route_err("POST", "/v1/resources/acquire", 400, "invalid_resource"); /* no name */
    route_err("GET", "/v2/resources/a", 404, "not_found");
    route_err("GET", "/v1/resourcesX", 404, "not_found");
    route_err("GET", "/", 404, "not_found");
    route_err("DELETE", "/v1/resources/a", 405, "method_not_allowed");
    route_err("PUT", "/v1/resources", 405, "method_not_allowed");
    route_err("POST", "/healthz", 405, "method_not_allowed");
    route_err("GET", "/v1/resources/a//b", 400, "invalid_resource");
    route_err("POST", "/v1/resources/a b/acquire", 400, "invalid_resource");

    enum api_route r;
    const char *n;
    size_t len;
    struct api_error e;
    api_route("DELETE", "/v1/resources/a", &r, &n, &len, &e);
    assert_string_equal(e.allow, "GET, HEAD, POST");
    api_route("POST", "/metrics", &r, &n, &len, &e);
    assert_string_equal(e.allow, "GET, HEAD");
}

static void control_characters_in_paths(void **st)
{
    (void)st;
    struct api_error e;
    assert_true(api_path_clean("/v1/resources/a/acquire"));
    assert_true(api_path_clean("/v1/resources/a%2Fb/acquire"));
    assert_true(api_path_clean("/v1/resources/a?prefix=%00")); /* the query is not the path */
    assert_true(api_path_clean("/v1/resources/a%zz"));         /* not an escape */
    assert_true(api_path_clean("/v1/resources/a%"));
    assert_false(api_path_clean("/v1/resources/a%00b/acquire"));
    assert_false(api_path_clean("/v1/resources/a%0ab"));
    assert_false(api_path_clean("/v1/resources/a%1F"));
    assert_false(api_path_clean("/v1/resources/a%7f"));
    assert_false(api_path_clean("/v1/resources/a\x01b"));
    assert_false(api_path_clean("/healthz%00"));
    assert_false(api_path_refused(&e));
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "invalid_resource");
}

static void resource_names(void **st)
{
    (void)st;
    const char *good[] = {"a", "jobs/nightly-report", "A-Z_a.z~0:9@x", "...", "a/.../b", ".a",
                          "a."};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_true(api_valid_resource(good[i], strlen(good[i])));
    const char *bad[] = {"",    "/a",   "a/",  "a//b", ".",    "..",  "a/./b", "a/../b",
                         "a/.", "../a", "a b", "a%b",  "a?b",  "a#b", "é",     "a\\b",
                         "a*",  "a+b",  "a,b", "a;b",  "a\nb", "\x01"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(api_valid_resource(bad[i], strlen(bad[i])));
    char max[257];
    memset(max, 'x', 256);
    max[256] = '\0';
    assert_true(api_valid_resource(max, 256));
    char over[258];
    memset(over, 'x', 257);
    over[257] = '\0';
    assert_false(api_valid_resource(over, 257));
}

static bool decode(enum api_route route, const char *body, struct res_req *rq, struct api_error *e)
{
    char reason[64];
    memset(rq, 0, sizeof *rq);
    return api_decode_body(route, body, strlen(body), &LIM, rq, reason, sizeof reason, e);
}

static void decode_fails(enum api_route route, const char *body, const char *code,
                         const char *field)
{
    struct res_req rq;
    struct api_error e;
    assert_false(decode(route, body, &rq, &e));
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, code);
    if (field)
        assert_string_equal(e.field, field);
    else
        assert_null(e.field);
    res_req_clear(&rq);
}

static void acquire_body(void **st)
{
    (void)st;
    struct res_req rq;
    struct api_error e;
    assert_true(decode(ROUTE_ACQUIRE,
                       "{\"owner\":\"host-a:51635\",\"ttl_ms\":5000,\"wait_ms\":100,"
                       "\"lease_id\":\"0D3D9875-FFA5-4520-B3E4-367071DD8F0B\","
                       "\"metadata\":{\"addr\":\"10.0.0.1:80\",\"n\":[1,2]}}",
                       &rq, &e));
    assert_int_equal(rq.op, RES_ACQUIRE);
    assert_string_equal(rq.owner->s, "host-a:51635");
    assert_int_equal(rq.ttl_ms, 5000);
    assert_int_equal(rq.wait_ms, 100);
    assert_true(rq.has_lease_id);
    assert_int_equal(rq.lease_id[0], 0x0d);
    assert_true(rq.has_metadata);
    assert_string_equal(rq.metadata->s, "{\"addr\":\"10.0.0.1:80\",\"n\":[1,2]}");
    res_req_clear(&rq);

    /* Defaults. */
    assert_true(decode(ROUTE_ACQUIRE, "{\"owner\":\"o\"}", &rq, &e));
    assert_int_equal(rq.ttl_ms, 15000);
    assert_int_equal(rq.wait_ms, 0);
    assert_false(rq.has_lease_id);
    res_req_clear(&rq);
    /* Null for an optional field is absent. */
    assert_true(decode(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"ttl_ms\":null}", &rq, &e));
    assert_int_equal(rq.ttl_ms, 15000);
    res_req_clear(&rq);
    /* Owner: 256 bytes of UTF-8 is fine. */
    char body[400];
    snprintf(body, sizeof body, "{\"owner\":\"%0256d\"}", 0);
    assert_true(decode(ROUTE_ACQUIRE, body, &rq, &e));
    res_req_clear(&rq);
    assert_true(decode(ROUTE_ACQUIRE, "{\"owner\":\"h\\u00e9te\"}", &rq, &e));
    res_req_clear(&rq);

    decode_fails(ROUTE_ACQUIRE, "{}", "missing_field", "owner");
    decode_fails(ROUTE_ACQUIRE, "", "missing_field", "owner");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":null}", "missing_field", "owner");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"ttl\":5000}", "unknown_field", "ttl");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"reason\":\"x\"}", "unknown_field", "reason");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"limit\":0}", "invalid_field", "limit");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"limit\":1025}", "invalid_field", "limit");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"limit\":2.5}", "invalid_field", "limit");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"shared\":1}", "invalid_field", "shared");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"shared\":true,\"limit\":2}", "invalid_field",
                 "shared");
    decode_fails(ROUTE_RENEW, "{\"lease_id\":\"a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf\",\"limit\":2}",
                 "unknown_field", "limit");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"\"}", "invalid_field", "owner");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":5}", "invalid_field", "owner");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"a\\u0001b\"}", "invalid_field", "owner");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"a\\u0085b\"}", "invalid_field", "owner");
    snprintf(body, sizeof body, "{\"owner\":\"%0257d\"}", 0);
    decode_fails(ROUTE_ACQUIRE, body, "invalid_field", "owner");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"ttl_ms\":999}", "invalid_ttl", "ttl_ms");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"ttl_ms\":3600001}", "invalid_ttl", "ttl_ms");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"ttl_ms\":1500.5}", "invalid_ttl", "ttl_ms");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"ttl_ms\":\"5000\"}", "invalid_ttl", "ttl_ms");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"ttl_ms\":-5}", "invalid_ttl", "ttl_ms");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"wait_ms\":300001}", "invalid_wait", "wait_ms");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"wait_ms\":true}", "invalid_wait", "wait_ms");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"lease_id\":\"nope\"}", "invalid_lease_id",
                 "lease_id");
    decode_fails(ROUTE_ACQUIRE,
                 "{\"owner\":\"o\",\"lease_id\":\"0d3d9875ffa54520b3e4367071dd8f0b\"}",
                 "invalid_lease_id", "lease_id");
    /* The nil UUID is no lease id to propose (see docs/security.md). */
    decode_fails(ROUTE_ACQUIRE,
                 "{\"owner\":\"o\",\"lease_id\":\"00000000-0000-0000-0000-000000000000\"}",
                 "invalid_lease_id", "lease_id");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"metadata\":[1]}", "invalid_field", "metadata");
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"owner\":\"p\"}", "invalid_field", "owner");
}

static void metadata_limit(void **st)
{
    (void)st;
    /* {"owner":"o","metadata":{"k":"xxx..."}}: metadata serialized is 8 + n bytes. */
    char body[5000];
    char fill[4200];
    struct res_req rq;
    struct api_error e;
    memset(fill, 'x', 4088);
    fill[4088] = '\0';
    snprintf(body, sizeof body, "{\"owner\":\"o\",\"metadata\":{\"k\":\"%s\"}}", fill);
    assert_true(decode(ROUTE_ACQUIRE, body, &rq, &e)); /* exactly 4096 */
    assert_int_equal(rq.metadata->len, 4096);
    res_req_clear(&rq);
    fill[4088] = 'x';
    fill[4089] = '\0';
    snprintf(body, sizeof body, "{\"owner\":\"o\",\"metadata\":{\"k\":\"%s\"}}", fill);
    decode_fails(ROUTE_ACQUIRE, body, "invalid_field", "metadata");
}

/* Metadata nested `levels` deep: {"k":{"k":...{}}}. */
static void nested_metadata(char *body, size_t size, int levels)
{
    size_t n = (size_t)snprintf(body, size, "{\"owner\":\"o\",\"metadata\":");
    for (int i = 1; i < levels; i++)
        n += (size_t)snprintf(body + n, size - n, "{\"k\":");
    n += (size_t)snprintf(body + n, size - n, "{}");
    for (int i = 1; i < levels; i++)
        n += (size_t)snprintf(body + n, size - n, "}");
    snprintf(body + n, size - n, "}");
}

static void metadata_depth(void **st)
{
    (void)st;
    char body[8192];
    struct res_req rq;
    struct api_error e;
    nested_metadata(body, sizeof body, 32);
    assert_true(decode(ROUTE_ACQUIRE, body, &rq, &e));
    res_req_clear(&rq);
    nested_metadata(body, sizeof body, 33);
    decode_fails(ROUTE_ACQUIRE, body, "invalid_field", "metadata");
    /* 900 levels: under cJSON's depth limit; up to 998 were once answered 200. */
    nested_metadata(body, sizeof body, 900);
    decode_fails(ROUTE_ACQUIRE, body, "invalid_field", "metadata");
    /* Arrays count as levels too: {"a":[[...[1]...]]} with 32 arrays is 33 levels. */
    int n = snprintf(body, sizeof body, "{\"owner\":\"o\",\"metadata\":{\"a\":");
    for (int i = 0; i < 32; i++)
        body[n++] = '[';
    body[n++] = '1';
    for (int i = 0; i < 32; i++)
        body[n++] = ']';
    snprintf(body + n, sizeof body - (size_t)n, "}}");
    decode_fails(ROUTE_ACQUIRE, body, "invalid_field", "metadata");
}

/* Numbers that cJSON reads through strtod and RFC 8259 refuses: stored and echoed, they
 * made every answer that showed them invalid JSON. */
static void strict_numbers(void **st)
{
    (void)st;
    const char *bad[] = {"01", "1.",  "-.5",  "1.e3", ".5",    "-",   "1e", "1e+",
                         "00", "-01", "1.5.", "0x1",  "1E+-2", "--1", "+1"};
    char body[200];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{\"owner\":\"o\",\"metadata\":{\"n\":%s}}", bad[i]);
        decode_fails(ROUTE_ACQUIRE, body, "invalid_json", NULL);
        snprintf(body, sizeof body, "{\"owner\":\"o\",\"ttl_ms\":%s}", bad[i]);
        decode_fails(ROUTE_ACQUIRE, body, "invalid_json", NULL);
    }
    const char *good[] = {"0",
                          "-0",
                          "1",
                          "10",
                          "1.5",
                          "-0.25",
                          "1e3",
                          "1E-3",
                          "2.5e+10",
                          "9007199254740993",
                          "[0,-1,2.0e1]",
                          "\"01 1. -.5\""};
    struct res_req rq;
    struct api_error e;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(body, sizeof body, "{\"owner\":\"o\",\"metadata\":{\"n\":%s}}", good[i]);
        assert_true(decode(ROUTE_ACQUIRE, body, &rq, &e));
        res_req_clear(&rq);
    }
}

static void bad_json(void **st)
{
    (void)st;
    const char *bad[] = {"{",
                         "[]",
                         "\"s\"",
                         "5",
                         "null",
                         "{\"owner\":\"o\"} x",
                         "{'owner':'o'}",
                         "{\"owner\":\"o\",}",
                         "{\"owner\" \"o\"}",
                         "\xff"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        decode_fails(ROUTE_ACQUIRE, bad[i], "invalid_json", NULL);
    /* Invalid UTF-8 inside a string, in a key, and in metadata. */
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"a\xc3\x28\"}", "invalid_json", NULL);
    decode_fails(ROUTE_ACQUIRE, "{\"own\xe2\x82r\":\"a\"}", "invalid_json", NULL);
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"a\",\"metadata\":{\"k\":\"\xed\xa0\x80\"}}",
                 "invalid_json", NULL);
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"\xc0\xaf\"}", "invalid_json", NULL); /* overlong */
    /* Raw control characters: cJSON takes them for white space, JSON allows none in a
     * string and only tab, CR and LF between tokens. */
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"metadata\":\x1d{\"a\":1}}", "invalid_json",
                 NULL);
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"metadata\":{\"a\":\"x\ty\"}}", "invalid_json",
                 NULL);
    decode_fails(ROUTE_ACQUIRE, "\x01{\"owner\":\"o\"}", "invalid_json", NULL);
    /* NUL, escaped (cJSON would cut the string there) anywhere, or raw. */
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"a\\u0000b\"}", "invalid_json", NULL);
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"metadata\":{\"k\\u0000\":1}}", "invalid_json",
                 NULL);
    struct res_req nul;
    struct api_error ne;
    memset(&nul, 0, sizeof nul);
    char reason[8];
    assert_false(api_decode_body(ROUTE_ACQUIRE, "{\"owner\":\"a\0b\"}", 14, &LIM, &nul, reason,
                                 sizeof reason, &ne));
    assert_string_equal(ne.code, "invalid_json");
    /* An escaped backslash before u0000 is a plain backslash, not a NUL. */
    struct res_req bs;
    memset(&bs, 0, sizeof bs);
    assert_true(decode(ROUTE_ACQUIRE, "{\"owner\":\"a\\\\u0000\"}", &bs, &ne));
    assert_string_equal(bs.owner->s, "a\\u0000");
    res_req_clear(&bs);
    /* Trailing white space is fine. */
    struct res_req rq;
    struct api_error e;
    assert_true(decode(ROUTE_ACQUIRE, " {\"owner\":\"o\"}\r\n ", &rq, &e));
    res_req_clear(&rq);
}

static void renew_release_break_bodies(void **st)
{
    (void)st;
    struct res_req rq;
    struct api_error e;
    const char *id = "\"lease_id\":\"0d3d9875-ffa5-4520-b3e4-367071dd8f0b\"";
    char body[256];
    snprintf(body, sizeof body, "{%s,\"ttl_ms\":2000,\"metadata\":{}}", id);
    assert_true(decode(ROUTE_RENEW, body, &rq, &e));
    assert_int_equal(rq.op, RES_RENEW);
    assert_true(rq.has_ttl);
    assert_int_equal(rq.ttl_ms, 2000);
    res_req_clear(&rq);
    snprintf(body, sizeof body, "{%s}", id);
    assert_true(decode(ROUTE_RENEW, body, &rq, &e));
    assert_false(rq.has_ttl);
    res_req_clear(&rq);
    assert_true(decode(ROUTE_RELEASE, body, &rq, &e));
    assert_int_equal(rq.op, RES_RELEASE);
    res_req_clear(&rq);
    decode_fails(ROUTE_RENEW, "{}", "missing_field", "lease_id");
    decode_fails(ROUTE_RELEASE, "", "missing_field", "lease_id");
    snprintf(body, sizeof body, "{%s,\"ttl_ms\":5000}", id);
    decode_fails(ROUTE_RELEASE, body, "unknown_field", "ttl_ms");
    /* A lease granted under the nil UUID before it was refused can still be let go. */
    const char *nil = "{\"lease_id\":\"00000000-0000-0000-0000-000000000000\"}";
    assert_true(decode(ROUTE_RENEW, nil, &rq, &e));
    assert_true(rq.has_lease_id);
    res_req_clear(&rq);
    assert_true(decode(ROUTE_RELEASE, nil, &rq, &e));
    res_req_clear(&rq);
    snprintf(body, sizeof body, "{%s,\"owner\":\"o\"}", id);
    decode_fails(ROUTE_RENEW, body, "unknown_field", "owner");

    char reason[64];
    memset(&rq, 0, sizeof rq);
    assert_true(api_decode_body(ROUTE_BREAK, "{\"reason\":\"stuck\"}", 18, &LIM, &rq, reason,
                                sizeof reason, &e));
    assert_string_equal(reason, "stuck");
    assert_int_equal(rq.op, RES_BREAK);
    assert_true(decode(ROUTE_BREAK, "", &rq, &e));
    decode_fails(ROUTE_BREAK, "{\"reason\":1}", "invalid_field", "reason");
    decode_fails(ROUTE_BREAK, "{\"lease_id\":\"x\"}", "invalid_lease_id", "lease_id");
    decode_fails(ROUTE_BREAK, "{\"owner\":\"x\"}", "unknown_field", "owner");
}

static void content_types(void **st)
{
    (void)st;
    assert_true(api_is_json_type("application/json"));
    assert_true(api_is_json_type("application/json; charset=utf-8"));
    assert_true(api_is_json_type("Application/JSON;charset=UTF-8"));
    assert_true(api_is_json_type(" application/json "));
    assert_false(api_is_json_type("application/x-www-form-urlencoded"));
    assert_false(api_is_json_type("text/plain"));
    assert_false(api_is_json_type("application/jsonx"));
    assert_false(api_is_json_type("application/json-patch+json"));
}

static void query_params(void **st)
{
    (void)st;
    struct api_query q;
    struct api_error e;
    struct res_req rq;
    memset(&q, 0, sizeof q);
    assert_true(api_query_param(ROUTE_GET, &q, "index", "42", &LIM, &e));
    assert_true(api_query_param(ROUTE_GET, &q, "wait_ms", "1500", &LIM, &e));
    memset(&rq, 0, sizeof rq);
    api_query_finish(ROUTE_GET, &q, &LIM, &rq);
    assert_true(rq.has_index);
    assert_int_equal(rq.index, 42);
    assert_int_equal(rq.wait_ms, 1500);
    /* index alone waits as long as allowed; wait_ms alone does not wait. */
    memset(&q, 0, sizeof q);
    api_query_param(ROUTE_GET, &q, "index", "1", &LIM, &e);
    api_query_finish(ROUTE_GET, &q, &LIM, &rq);
    assert_int_equal(rq.wait_ms, 300000);
    memset(&q, 0, sizeof q);
    api_query_param(ROUTE_GET, &q, "wait_ms", "100", &LIM, &e);
    api_query_finish(ROUTE_GET, &q, &LIM, &rq);
    assert_int_equal(rq.wait_ms, 0);

    /* A refused value leaves the query as it was (found by fuzz_body). */
    memset(&q, 0, sizeof q);
    assert_true(api_query_param(ROUTE_GET, &q, "wait_ms", "4", &LIM, &e));
    assert_false(api_query_param(ROUTE_GET, &q, "wait_ms", "10001000", &LIM, &e));
    assert_int_equal(q.wait_ms, 4);
    assert_false(api_query_param(ROUTE_GET, &q, "index", "x", &LIM, &e));
    assert_false(q.has_index);

    memset(&q, 0, sizeof q);
    assert_false(api_query_param(ROUTE_GET, &q, "index", "-1", &LIM, &e));
    assert_string_equal(e.field, "index");
    assert_false(api_query_param(ROUTE_GET, &q, "index", "1x", &LIM, &e));
    assert_false(api_query_param(ROUTE_GET, &q, "wait_ms", "300001", &LIM, &e));
    assert_string_equal(e.code, "invalid_wait");
    assert_false(api_query_param(ROUTE_GET, &q, "wait", "5", &LIM, &e));
    assert_string_equal(e.code, "unknown_field");
    assert_string_equal(e.field, "wait");
    assert_false(api_query_param(ROUTE_GET, &q, "limit", "5", &LIM, &e));

    memset(&q, 0, sizeof q);
    assert_true(api_query_param(ROUTE_LIST, &q, "prefix", "jobs/", &LIM, &e));
    assert_true(api_query_param(ROUTE_LIST, &q, "limit", "1000", &LIM, &e));
    assert_true(api_query_param(ROUTE_LIST, &q, "cursor", "jobs/a", &LIM, &e));
    assert_false(api_query_param(ROUTE_LIST, &q, "limit", "0", &LIM, &e));
    assert_false(api_query_param(ROUTE_LIST, &q, "limit", "1001", &LIM, &e));
    assert_string_equal(e.field, "limit");
    /* A list watch; events take after, prefix, limit and wait_ms, and nothing else. */
    assert_true(api_query_param(ROUTE_LIST, &q, "index", "1", &LIM, &e));
    assert_true(api_query_param(ROUTE_LIST, &q, "wait_ms", "500", &LIM, &e));
    memset(&q, 0, sizeof q);
    assert_true(api_query_param(ROUTE_EVENTS, &q, "after", "7", &LIM, &e));
    assert_true(q.has_index && q.index == 7);
    assert_true(api_query_param(ROUTE_EVENTS, &q, "prefix", "jobs/", &LIM, &e));
    assert_true(api_query_param(ROUTE_EVENTS, &q, "wait_ms", "500", &LIM, &e));
    assert_false(api_query_param(ROUTE_EVENTS, &q, "after", "x", &LIM, &e));
    assert_string_equal(e.field, "after");
    assert_false(api_query_param(ROUTE_EVENTS, &q, "index", "1", &LIM, &e));
    assert_false(api_query_param(ROUTE_EVENTS, &q, "cursor", "a", &LIM, &e));
}

static void utf8(void **st)
{
    (void)st;
    assert_true(api_utf8_valid("plain", 5));
    assert_true(api_utf8_valid("h\xc3\xa9", 3));
    assert_true(api_utf8_valid("\xf0\x9f\x94\x92", 4));
    assert_false(api_utf8_valid("\xc3", 1));
    assert_false(api_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
    assert_false(api_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    assert_false(api_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    assert_false(api_utf8_valid("\xff", 1));
}

int main(int argc, char **argv);
/* Several resources at once: the routes, `resources` and its every refusal. */
static bool decode_many(enum api_route route, const char *body, struct res_req *rq,
                        struct api_names *n, struct api_error *e)
{
    memset(rq, 0, sizeof *rq);
    return api_decode_many(route, body, strlen(body), &LIM, rq, n, e);
}

static void many_fails(enum api_route route, const char *body, const char *code, const char *field)
{
    struct res_req rq;
    struct api_names n;
    struct api_error e;
    assert_false(decode_many(route, body, &rq, &n, &e));
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, code);
    if (field)
        assert_string_equal(e.field, field);
    else
        assert_null(e.field);
    assert_null(n.buf);
    res_req_clear(&rq);
}

static void several_resources(void **st)
{
    (void)st;
    route_ok("POST", "/v1/acquire", ROUTE_ACQUIRE_MANY, NULL);
    route_ok("POST", "/v1/renew", ROUTE_RENEW_MANY, NULL);
    route_ok("POST", "/v1/release", ROUTE_RELEASE_MANY, NULL);
    route_err("GET", "/v1/acquire", 405, "method_not_allowed");
    route_err("POST", "/v1/break", 404, "not_found");

    struct res_req rq;
    struct api_names n;
    struct api_error e;
    assert_true(decode_many(ROUTE_ACQUIRE_MANY,
                            "{\"resources\":[\"{acct}/b\",\"{acct}/a\"],\"owner\":\"w\","
                            "\"ttl_ms\":5000,\"wait_ms\":100}",
                            &rq, &n, &e));
    assert_int_equal(rq.op, RES_ACQUIRE);
    assert_int_equal(n.count, 2);
    assert_string_equal(n.name[0], "{acct}/b"); /* the order given */
    assert_string_equal(n.name[1], "{acct}/a");
    assert_int_equal(rq.ttl_ms, 5000);
    assert_int_equal(rq.wait_ms, 100);
    assert_true(api_names_one_partition(&n, 16, &e));
    api_names_free(&n);
    res_req_clear(&rq);

    /* 64 names at most, 2 at least, each once, each a name. */
    char body[8192];
    int k = snprintf(body, sizeof body, "{\"owner\":\"w\",\"resources\":[");
    for (int i = 0; i < 64; i++)
        k += snprintf(body + k, sizeof body - (size_t)k, "%s\"r%d\"", i ? "," : "", i);
    snprintf(body + k, sizeof body - (size_t)k, "]}");
    assert_true(decode_many(ROUTE_ACQUIRE_MANY, body, &rq, &n, &e));
    assert_int_equal(n.count, 64);
    assert_string_equal(n.name[63], "r63");
    assert_false(api_names_one_partition(&n, 16, &e));
    assert_int_equal(e.status, 400);
    assert_string_equal(e.field, "resources");
    assert_string_equal(e.reason, "partitions_differ");
    assert_true(api_names_one_partition(&n, 1, &e));
    api_names_free(&n);
    res_req_clear(&rq);
    snprintf(body + k, sizeof body - (size_t)k, ",\"r64\"]}");
    many_fails(ROUTE_ACQUIRE_MANY, body, "invalid_field", "resources");
    many_fails(ROUTE_ACQUIRE_MANY, "{\"owner\":\"w\",\"resources\":[\"a\"]}", "invalid_field",
               "resources");
    many_fails(ROUTE_ACQUIRE_MANY, "{\"owner\":\"w\",\"resources\":[]}", "invalid_field",
               "resources");
    many_fails(ROUTE_ACQUIRE_MANY, "{\"owner\":\"w\",\"resources\":\"a\"}", "invalid_field",
               "resources");
    many_fails(ROUTE_ACQUIRE_MANY, "{\"owner\":\"w\",\"resources\":[\"a\",\"b\",\"a\"]}",
               "invalid_field", "resources");
    many_fails(ROUTE_ACQUIRE_MANY, "{\"owner\":\"w\",\"resources\":[\"a\",1]}", "invalid_field",
               "resources");
    many_fails(ROUTE_ACQUIRE_MANY, "{\"owner\":\"w\",\"resources\":[\"a\",\"b//c\"]}",
               "invalid_resource", NULL);
    many_fails(ROUTE_ACQUIRE_MANY, "{\"owner\":\"w\"}", "missing_field", "resources");
    many_fails(ROUTE_ACQUIRE_MANY, "", "missing_field", "resources");
    many_fails(ROUTE_ACQUIRE_MANY, "{\"resources\":[\"a\",\"b\"]}", "missing_field", "owner");
    many_fails(ROUTE_ACQUIRE_MANY, "{\"resources\":[\"a\",\"b\"],\"owner\":\"w\",\"reason\":\"x\"}",
               "unknown_field", "reason");
    /* One resource's routes take no `resources`. */
    decode_fails(ROUTE_ACQUIRE, "{\"owner\":\"w\",\"resources\":[\"a\",\"b\"]}", "unknown_field",
                 "resources");

    const char *lease = "\"lease_id\":\"0b6f8e4e-2c1a-4f7e-9d3b-5a6c7d8e9f01\"";
    snprintf(body, sizeof body, "{\"resources\":[\"a\",\"b\"],%s,\"ttl_ms\":2000}", lease);
    assert_true(decode_many(ROUTE_RENEW_MANY, body, &rq, &n, &e));
    assert_int_equal(rq.op, RES_RENEW);
    assert_true(rq.has_lease_id);
    api_names_free(&n);
    res_req_clear(&rq);
    snprintf(body, sizeof body, "{\"resources\":[\"a\",\"b\"],%s}", lease);
    assert_true(decode_many(ROUTE_RELEASE_MANY, body, &rq, &n, &e));
    assert_int_equal(rq.op, RES_RELEASE);
    api_names_free(&n);
    res_req_clear(&rq);
    many_fails(ROUTE_RELEASE_MANY, "{\"resources\":[\"a\",\"b\"]}", "missing_field", "lease_id");
    snprintf(body, sizeof body, "{\"resources\":[\"a\",\"b\"],%s,\"ttl_ms\":2000}", lease);
    many_fails(ROUTE_RELEASE_MANY, body, "unknown_field", "ttl_ms");
}

static void acquire_takes_a_limit_or_shared(void **state)
{
    (void)state;
    struct res_req rq;
    struct api_error e;
    memset(&rq, 0, sizeof rq);
    assert_true(decode(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"limit\":3}", &rq, &e));
    assert_int_equal(rq.limit, 3);
    assert_false(rq.shared);
    res_req_clear(&rq);
    memset(&rq, 0, sizeof rq);
    assert_true(decode(ROUTE_ACQUIRE, "{\"owner\":\"o\",\"shared\":true,\"limit\":1}", &rq, &e));
    assert_true(rq.shared);
    assert_int_equal(rq.limit, 1);
    res_req_clear(&rq);
    memset(&rq, 0, sizeof rq);
    assert_true(
        decode(ROUTE_BREAK, "{\"lease_id\":\"a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf\"}", &rq, &e));
    assert_true(rq.has_lease_id);
    res_req_clear(&rq);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(acquire_takes_a_limit_or_shared),
    cmocka_unit_test(routing),
    cmocka_unit_test(several_resources),
    cmocka_unit_test(resource_names),
    cmocka_unit_test(acquire_body),
    cmocka_unit_test(metadata_limit),
    cmocka_unit_test(metadata_depth),
    cmocka_unit_test(strict_numbers),
    cmocka_unit_test(bad_json),
    cmocka_unit_test(renew_release_break_bodies),
    cmocka_unit_test(content_types),
    cmocka_unit_test(query_params),
    cmocka_unit_test(utf8),
    cmocka_unit_test(control_characters_in_paths),
};
MX_TEST_MAIN(tests)
