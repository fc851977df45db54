/*
 * The API's output side: every answer's status, Retry-After and JSON body, as docs/api.md
 * specifies them. Bodies are parsed back with cJSON and checked field by field; 64-bit
 * numbers are checked in the text, where a double would have rounded them.
 */
#include "tests/unit/testutil.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "common/str.h"
#include "common/clock.h"
#include "http/render.h"

static struct res_req lease_req(enum res_status status)
{
    struct res_req rq;
    memset(&rq, 0, sizeof rq);
    rq.status = status;
    rq.view.held = true;
    for (int i = 0; i < 16; i++)
        rq.view.lease_id[i] = (uint8_t)(0xa0 + i);
    rq.view.owner = mx_str_new("host-a:51635", 12);
    rq.view.metadata = mx_str_new("{\"k\":[1,2]}", 11);
    rq.view.token = 9007199254740993ull; /* 2^53 + 1: a double cannot hold it */
    rq.view.ttl_ms = 15000;
    rq.view.expires_in_ms = 14001;
    rq.view.index = 7;
    rq.view.acquired_at_ms = 1795000000123;
    rq.view.renewed_at_ms = 1795000001456;
    rq.view.waiters = 3;
    rq.view.limit = 1;
    /* A state lists its holders: this one. */
    rq.view.holders = calloc(1, sizeof *rq.view.holders);
    rq.view.nholders = 1;
    rq.view.holders[0] = (struct res_holder){.owner = mx_str_ref(rq.view.owner),
                                             .metadata = mx_str_ref(rq.view.metadata),
                                             .token = rq.view.token,
                                             .ttl_ms = rq.view.ttl_ms,
                                             .expires_in_ms = rq.view.expires_in_ms,
                                             .acquired_at_ms = rq.view.acquired_at_ms,
                                             .renewed_at_ms = rq.view.renewed_at_ms};
    return rq;
}

static void clear(struct res_req *rq, struct render *r)
{
    res_view_clear(&rq->view);
    free(r->body);
}

static cJSON *parse(const struct render *r)
{
    assert_non_null(r->body);
    cJSON *o = cJSON_Parse(r->body);
    assert_non_null(o);
    return o;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

static void a_grant_shows_every_lease_field(void **state)
{
    (void)state;
    struct res_req rq = lease_req(RES_OK_LEASE);
    struct render r;
    render_answer("jobs/a", 6, &rq, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.retry_after_s, 0);
    cJSON *o = parse(&r);
    assert_string_equal(str(o, "resource"), "jobs/a");
    assert_string_equal(str(o, "lease_id"), "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
    assert_string_equal(str(o, "owner"), "host-a:51635");
    assert_string_equal(str(o, "acquired_at"), "2026-11-18T11:06:40.123Z");
    assert_string_equal(str(o, "renewed_at"), "2026-11-18T11:06:41.456Z");
    assert_non_null(strstr(r.body, "\"fencing_token\":9007199254740993,"));
    assert_non_null(strstr(r.body, "\"metadata\":{\"k\":[1,2]}"));
    assert_int_equal(cJSON_GetObjectItem(o, "ttl_ms")->valuedouble, 15000);
    assert_int_equal(cJSON_GetObjectItem(o, "expires_in_ms")->valuedouble, 14001);
    /* The lease's fields, in the contract's order, right after the lease id. */
    const char *order[] = {"resource", "lease_id",      "owner",       "fencing_token",
                           "ttl_ms",   "expires_in_ms", "acquired_at", "renewed_at",
                           "metadata", "limit",         "shared"};
    const cJSON *it = o->child;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++, it = it->next) {
        assert_non_null(it);
        assert_string_equal(it->string, order[i]);
    }
    assert_null(it);
    cJSON_Delete(o);
    clear(&rq, &r);
}

static void a_state_shows_the_holder_but_never_the_lease_id(void **state)
{
    (void)state;
    struct res_req rq = lease_req(RES_OK_STATE);
    struct render r;
    render_answer("jobs/a", 6, &rq, &r);
    assert_int_equal(r.status, 200);
    assert_null(strstr(r.body, "lease_id"));
    assert_null(strstr(r.body, "a0a1a2a3"));
    cJSON *o = parse(&r);
    assert_string_equal(str(o, "state"), "held");
    const cJSON *h = cJSON_GetObjectItem(o, "holder");
    assert_true(cJSON_IsObject(h));
    assert_string_equal(str(h, "owner"), "host-a:51635");
    assert_string_equal(str(h, "renewed_at"), "2026-11-18T11:06:41.456Z");
    assert_non_null(strstr(r.body, "\"holder\":{\"owner\":\"host-a:51635\",\"fencing_token\":"
                                   "9007199254740993,\"ttl_ms\":15000"));
    assert_int_equal(cJSON_GetObjectItem(o, "index")->valuedouble, 7);
    assert_int_equal(cJSON_GetObjectItem(o, "waiters")->valuedouble, 3);

    const cJSON *hs = cJSON_GetObjectItem(o, "holders");
    assert_int_equal(cJSON_GetArraySize(hs), 1);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(hs, 0), "shared")));
    assert_int_equal(cJSON_GetObjectItem(o, "limit")->valuedouble, 1);
    cJSON_Delete(o);
    free(r.body);

    rq.view.held = false;
    rq.view.nholders = 0;
    render_answer("jobs/a", 6, &rq, &r);
    o = parse(&r);
    assert_string_equal(str(o, "state"), "free");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "holder")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "holders")), 0);
    rq.view.nholders = 1;
    cJSON_Delete(o);
    clear(&rq, &r);
}

/* 409 lease_held: Retry-After is the holder's time left in whole seconds, rounded up,
 * never 0. */
static void held_retries_after_the_holders_time_rounded_up(void **state)
{
    (void)state;
    const uint64_t left[] = {14001, 14000, 1, 0};
    const uint64_t want[] = {15, 14, 1, 1};
    for (size_t i = 0; i < 4; i++) {
        struct res_req rq = lease_req(RES_ERR_HELD);
        rq.view.expires_in_ms = left[i];
        struct render r;
        render_answer("a", 1, &rq, &r);
        assert_int_equal(r.status, 409);
        assert_int_equal(r.retry_after_s, want[i]);
        cJSON *o = parse(&r);
        const cJSON *e = cJSON_GetObjectItem(o, "error");
        assert_string_equal(str(e, "code"), "lease_held");
        assert_string_equal(str(cJSON_GetObjectItem(e, "holder"), "owner"), "host-a:51635");
        assert_null(strstr(r.body, "a0a1a2a3"));
        cJSON_Delete(o);
        clear(&rq, &r);
    }
}

static void each_error_has_its_status_and_code(void **state)
{
    (void)state;
    const struct {
        enum res_status s;
        int status;
        const char *code;
        uint64_t retry;
    } cases[] = {
        {RES_ERR_LOST, 409, "lease_lost", 0},
        {RES_ERR_TOO_MANY, 429, "too_many_waiters", 1},
        {RES_ERR_UNAVAILABLE, 503, "unavailable", 1},
        {RES_GONE, 503, "unavailable", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct res_req rq = lease_req(cases[i].s);
        struct render r;
        render_answer("a", 1, &rq, &r);
        assert_int_equal(r.status, cases[i].status);
        assert_int_equal(r.retry_after_s, cases[i].retry);
        cJSON *o = parse(&r);
        assert_string_equal(str(cJSON_GetObjectItem(o, "error"), "code"), cases[i].code);
        assert_non_null(str(cJSON_GetObjectItem(o, "error"), "message"));
        cJSON_Delete(o);
        clear(&rq, &r);
    }

    struct render r;
    render_unavailable("restore_grace", 12, &r);
    assert_int_equal(r.status, 503);
    assert_int_equal(r.retry_after_s, 12);
    cJSON *o = parse(&r);
    assert_string_equal(str(cJSON_GetObjectItem(o, "error"), "reason"), "restore_grace");
    cJSON_Delete(o);
    free(r.body);

    struct api_error e = {.status = 400, .code = "unknown_field", .field = "ttl"};
    strcpy(e.message, "unknown field 'ttl'");
    render_error(&e, &r);
    assert_int_equal(r.status, 400);
    assert_int_equal(r.retry_after_s, 0);
    o = parse(&r);
    assert_string_equal(str(cJSON_GetObjectItem(o, "error"), "field"), "ttl");
    cJSON_Delete(o);
    free(r.body);
}

static void released_and_broken(void **state)
{
    (void)state;
    struct res_req rq = lease_req(RES_OK_RELEASED);
    struct render r;
    render_answer("a/b", 3, &rq, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"resource\":\"a/b\",\"released\":true}");
    free(r.body);
    rq.status = RES_OK_BROKEN;
    rq.view.broken = false;
    render_answer("a/b", 3, &rq, &r);
    assert_string_equal(r.body, "{\"resource\":\"a/b\",\"broken\":false}");
    clear(&rq, &r);
}

/* /healthz and /readyz: details are spliced in as members of the same object. */
static void status_splices_its_details(void **state)
{
    (void)state;
    struct render r;
    render_status(503, "unavailable", "recovering", "\"lag\":3,\"x\":\"y\"", &r);
    assert_int_equal(r.status, 503);
    assert_int_equal(r.retry_after_s, 1);
    assert_string_equal(
        r.body, "{\"status\":\"unavailable\",\"reason\":\"recovering\",\"lag\":3,\"x\":\"y\"}");
    free(r.body);
    render_status(200, "ok", NULL, NULL, &r);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    assert_int_equal(r.retry_after_s, 0);
    free(r.body);
}

static void times_are_rfc3339_utc_with_milliseconds(void **state)
{
    (void)state;
    char t[32];
    mx_wall_iso(0, t);
    assert_string_equal(t, "1970-01-01T00:00:00.000Z");
    mx_wall_iso(-5, t);
    assert_string_equal(t, "1970-01-01T00:00:00.000Z");
    mx_wall_iso(951782400007, t); /* a leap day */
    assert_string_equal(t, "2000-02-29T00:00:00.007Z");
    mx_wall_iso(4107542399999, t); /* 2100 is not a leap year */
    assert_string_equal(t, "2100-02-28T23:59:59.999Z");
    mx_wall_iso(4107542400000, t);
    assert_string_equal(t, "2100-03-01T00:00:00.000Z");
    mx_wall_iso(253402300799999, t); /* the last millisecond of year 9999 */
    assert_string_equal(t, "9999-12-31T23:59:59.999Z");
    mx_wall_iso(253402300800000, t); /* after it: as the C library writes it */
    assert_string_equal(t, "10000-01-01T00:00:00.000Z");
}

/* The date arithmetic against the C library's, over seeded random times up to year 9999. */
static void times_agree_with_gmtime(void **state)
{
    (void)state;
    unsigned seed = (unsigned)mx_wall_ms();
    printf("times_agree_with_gmtime: seed %u\n", seed);
    uint64_t x = seed | 1;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t ms = (int64_t)(x % 253402300800000ull);
        if (i % 2)
            ms %= 4102444800000; /* half of them before 2100, where leases live */
        char got[32], want[40];
        mx_wall_iso(ms, got);
        time_t secs = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        size_t n = strftime(want, sizeof want, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(want + n, sizeof want - n, ".%03uZ", (unsigned)(ms % 1000));
        if (strcmp(got, want) != 0)
            fail_msg("%lld ms: %s, the C library says %s", (long long)ms, got, want);
    }
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(a_grant_shows_every_lease_field),
    cmocka_unit_test(a_state_shows_the_holder_but_never_the_lease_id),
    cmocka_unit_test(held_retries_after_the_holders_time_rounded_up),
    cmocka_unit_test(each_error_has_its_status_and_code),
    cmocka_unit_test(released_and_broken),
    cmocka_unit_test(status_splices_its_details),
    cmocka_unit_test(times_are_rfc3339_utc_with_milliseconds),
    cmocka_unit_test(times_agree_with_gmtime),
};
MX_TEST_MAIN(tests)
