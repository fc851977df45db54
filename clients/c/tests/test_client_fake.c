/*
 * The library against a canned-answer server (fake_server.c): what it sends (headers, token,
 * body, path encoding), and the answers a real mutexd does not give on demand: 401, 403,
 * 503 with a reason and Retry-After, error codes of requests the library never makes, broken
 * bodies, silence (timeouts), and nobody listening; a client of several servers moving on
 * from those that do not answer or answer 503; and the semaphore and shared-lease fields
 * (limit, shared, holders, limit_mismatch, break of one lease), sent and read exactly, also
 * from a server that does not have them yet.
 */
#include "testing.h"

#include "fake_server.h"
#include "mutexd.h"

static const char lease_json[] =
    "{\"resource\":\"a\",\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\",\"owner\":\"w\","
    "\"fencing_token\":18446744073709551615,\"ttl_ms\":1000,\"expires_in_ms\":1000,"
    "\"acquired_at\":\"t\",\"renewed_at\":\"t\",\"metadata\":{\"big\":123456789012345678901}}";

static mutexd_client *client_for(const struct fake_server *f, const char *token)
{
    mutexd_client *c = NULL;
    struct mutexd_client_options o = {.token = token, .request_timeout_ms = 2000};
    assert_int_equal(mutexd_client_new(&c, fake_url(f), &o), MUTEXD_OK);
    return c;
}

static void requests_carry_token_json_and_encoded_path(void **state)
{
    (void)state;
    struct fake_server *f = fake_start("HTTP/1.1 200 OK", "", lease_json, 0);
    assert_non_null(f);
    mutexd_client *c = client_for(f, "s3cret-token");
    struct mutexd_lease l = {0};
    struct mutexd_acquire_options o = {.owner = "o \"q\"",
                                       .ttl_ms = 1000,
                                       .wait_ms = 5,
                                       .lease_id = "6ccb3e43-0489-4885-ac1c-bf894cffbd13",
                                       .metadata = "{\"k\": [1, 2]}"};
    assert_int_equal(mutexd_acquire(c, "a b/../c?d", &o, &l, NULL), MUTEXD_OK);
    char *req = fake_last_request(f);
    assert_non_null(req);
    assert_non_null(strstr(req, "POST /v1/resources/a%20b/../c%3Fd/acquire HTTP/1.1\r\n"));
    assert_non_null(strstr(req, "\r\nAuthorization: Bearer s3cret-token\r\n"));
    assert_non_null(strstr(req, "\r\nContent-Type: application/json\r\n"));
    assert_non_null(strstr(req, "\r\n\r\n{\"owner\":\"o \\\"q\\\"\","
                                "\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\","
                                "\"ttl_ms\":1000,\"wait_ms\":5,\"metadata\":{\"k\": [1, 2]}}"));
    free(req);
    /* The answer, exactly: a 64-bit token and metadata with an integer beyond doubles. */
    assert_true(l.fencing_token == UINT64_MAX);
    assert_string_equal(l.metadata, "{\"big\":123456789012345678901}");

    struct mutexd_list_options lo = {.prefix = "jobs/a b", .limit = 7, .cursor = "jobs/x&y"};
    struct mutexd_page p = {0};
    mutexd_list(c, &lo, &p, NULL); /* the canned answer is no page; only the request counts */
    req = fake_last_request(f);
    assert_non_null(
        strstr(req, "GET /v1/resources?prefix=jobs%2Fa%20b&limit=7&cursor=jobs%2Fx%26y "));
    assert_null(strstr(req, "Authorization: Bearer s3cret-token\r\nAuthorization"));
    free(req);
    mutexd_watch(c, "r", 18446744073709551615ULL, 10, NULL, NULL);
    req = fake_last_request(f);
    assert_non_null(strstr(req, "GET /v1/resources/r?index=18446744073709551615&wait_ms=10 "));
    free(req);
    /* A hash tag's braces, which the contract has sent percent-encoded. */
    mutexd_get(c, "{order-7}/lock", NULL, NULL);
    req = fake_last_request(f);
    assert_non_null(strstr(req, "GET /v1/resources/%7Border-7%7D/lock HTTP/1.1\r\n"));
    free(req);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
    fake_stop(f);
}

static void no_token_no_authorization_header(void **state)
{
    (void)state;
    struct fake_server *f =
        fake_start("HTTP/1.1 200 OK", "", "{\"resource\":\"a\",\"broken\":true}", 0);
    mutexd_client *c = client_for(f, NULL);
    int broken = 0;
    assert_int_equal(mutexd_break(c, "a", NULL, &broken, NULL), MUTEXD_OK);
    assert_int_equal(broken, 1);
    char *req = fake_last_request(f);
    assert_null(strstr(req, "Authorization"));
    assert_non_null(strstr(req, "\r\n\r\n{}"));
    free(req);
    mutexd_client_free(c);
    fake_stop(f);
}

/* One canned error answer and what the library makes of it. */
static void expect_error(const char *status_line, const char *headers, const char *body,
                         mutexd_result want, int status, const char *code, const char *field)
{
    struct fake_server *f = fake_start(status_line, headers, body, 0);
    assert_non_null(f);
    mutexd_client *c = client_for(f, "t");
    struct mutexd_error e = {0};
    struct mutexd_state s = {0};
    mutexd_result r = mutexd_get(c, "a", &s, &e);
    if (r != want)
        fail_msg("%s: got %s, want %s", status_line, mutexd_result_name(r),
                 mutexd_result_name(want));
    assert_int_equal(e.status, status);
    if (code != NULL)
        assert_string_equal(e.code, code);
    else
        assert_null(e.code);
    if (field != NULL)
        assert_string_equal(e.field, field);
    else
        assert_null(e.field);
    assert_non_null(e.message);
    assert_string_equal(e.body, body);
    assert_int_equal(e.transport, 0);
    assert_null(s.resource); /* untouched */
    mutexd_error_clear(&e);
    mutexd_client_free(c);
    fake_stop(f);
}

#define ERR(code, extra) "{\"error\":{\"code\":\"" code "\",\"message\":\"m\"" extra "}}"

static void unauthorized_and_forbidden(void **state)
{
    (void)state;
    expect_error("HTTP/1.1 401 Unauthorized", "", ERR("unauthorized", ""), MUTEXD_ERR_API, 401,
                 "unauthorized", NULL);
    expect_error("HTTP/1.1 403 Forbidden", "", ERR("forbidden", ""), MUTEXD_ERR_API, 403,
                 "forbidden", NULL);
}

static void unavailable_carries_reason_and_retry_after(void **state)
{
    (void)state;
    const char *body = ERR("unavailable", ",\"reason\":\"recovering\"");
    struct fake_server *f = fake_start("HTTP/1.1 503 Service Unavailable",
                                       "Retry-After: 7\r\nX-Request-Id: abc123\r\n", body, 0);
    mutexd_client *c = client_for(f, NULL);
    struct mutexd_error e = {0};
    mutexd_result r = mutexd_acquire(c, "a", NULL, NULL, &e);
    assert_int_equal(r, MUTEXD_ERR_API);
    assert_int_equal(e.status, 503);
    assert_string_equal(e.code, "unavailable");
    assert_string_equal(e.reason, "recovering");
    assert_int_equal(e.retry_after_s, 7);
    assert_string_equal(e.request_id, "abc123");
    assert_true(mutexd_error_is_temporary(r, &e));
    mutexd_error_clear(&e);
    assert_int_equal(e.retry_after_s, -1);
    mutexd_client_free(c);
    fake_stop(f);

    expect_error("HTTP/1.1 429 Too Many Requests", "", ERR("too_many_waiters", ""), MUTEXD_ERR_API,
                 429, "too_many_waiters", NULL);
}

/* Codes of requests the library never makes, decoded all the same. */
static void every_other_error_code_is_decoded(void **state)
{
    (void)state;
    expect_error("HTTP/1.1 400 Bad Request", "", ERR("invalid_json", ""), MUTEXD_ERR_API, 400,
                 "invalid_json", NULL);
    expect_error("HTTP/1.1 400 Bad Request", "", ERR("unknown_field", ",\"field\":\"ttl\""),
                 MUTEXD_ERR_API, 400, "unknown_field", "ttl");
    expect_error("HTTP/1.1 400 Bad Request", "", ERR("missing_field", ",\"field\":\"owner\""),
                 MUTEXD_ERR_API, 400, "missing_field", "owner");
    expect_error("HTTP/1.1 404 Not Found", "", ERR("not_found", ""), MUTEXD_ERR_API, 404,
                 "not_found", NULL);
    expect_error("HTTP/1.1 405 Method Not Allowed", "Allow: GET\r\n", ERR("method_not_allowed", ""),
                 MUTEXD_ERR_API, 405, "method_not_allowed", NULL);
    expect_error("HTTP/1.1 413 Payload Too Large", "", ERR("body_too_large", ""), MUTEXD_ERR_API,
                 413, "body_too_large", NULL);
    expect_error("HTTP/1.1 415 Unsupported Media Type", "", ERR("unsupported_media_type", ""),
                 MUTEXD_ERR_API, 415, "unsupported_media_type", NULL);
    /* The declined answers have results of their own. */
    expect_error("HTTP/1.1 409 Conflict", "", ERR("lease_lost", ""), MUTEXD_LOST, 409, "lease_lost",
                 NULL);
    expect_error("HTTP/1.1 409 Conflict", "Retry-After: 3\r\n",
                 ERR("lease_held", ",\"holder\":{\"owner\":\"x\",\"fencing_token\":1,"
                                   "\"expires_in_ms\":2500}"),
                 MUTEXD_HELD, 409, "lease_held", NULL);
}

static void bodies_that_are_not_the_api(void **state)
{
    (void)state;
    /* An error status with a proxy's page: an API error without a code. */
    expect_error("HTTP/1.1 502 Bad Gateway", "", "<html>bad gateway</html>", MUTEXD_ERR_API, 502,
                 NULL, NULL);
    expect_error("HTTP/1.1 500 Internal Server Error", "", "", MUTEXD_ERR_API, 500, NULL, NULL);
    /* A success that is not JSON, or lacks what the API promises. */
    expect_error("HTTP/1.1 200 OK", "", "not json", MUTEXD_ERR_PROTOCOL, 200, NULL, NULL);
    expect_error("HTTP/1.1 200 OK", "", "{\"resource\":\"a\"}", MUTEXD_ERR_PROTOCOL, 200, NULL,
                 NULL);

    struct fake_server *f =
        fake_start("HTTP/1.1 200 OK", "", "{\"resource\":\"a\",\"released\":false}", 0);
    mutexd_client *c = client_for(f, NULL);
    struct mutexd_error e = {0};
    assert_int_equal(mutexd_release(c, "a", "6ccb3e43-0489-4885-ac1c-bf894cffbd13", &e),
                     MUTEXD_ERR_PROTOCOL);
    assert_non_null(e.message);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
    fake_stop(f);
}

static void silence_times_out(void **state)
{
    (void)state;
    struct fake_server *f = fake_start("HTTP/1.1 200 OK", "", "{}", 1);
    mutexd_client *c = NULL;
    struct mutexd_client_options o = {.request_timeout_ms = 300};
    assert_int_equal(mutexd_client_new(&c, fake_url(f), &o), MUTEXD_OK);
    struct mutexd_error e = {0};
    int64_t t0 = test_now_ms();
    mutexd_result r = mutexd_get(c, "a", NULL, &e);
    int64_t took = test_now_ms() - t0;
    assert_int_equal(r, MUTEXD_ERR_TRANSPORT);
    assert_int_equal(e.transport, 1);
    assert_int_equal(e.status, 0);
    assert_non_null(e.message);
    assert_true(mutexd_error_is_temporary(r, &e));
    assert_in_range(took, 250, 3000);

    /* A renew's own timeout wins over the client's. */
    t0 = test_now_ms();
    struct mutexd_renew_options ro = {.timeout_ms = 100};
    r = mutexd_renew(c, "a", "6ccb3e43-0489-4885-ac1c-bf894cffbd13", &ro, NULL, &e);
    took = test_now_ms() - t0;
    assert_int_equal(r, MUTEXD_ERR_TRANSPORT);
    assert_in_range(took, 80, 280);

    /* A watch waits on top of the request timeout. */
    t0 = test_now_ms();
    r = mutexd_watch(c, "a", 0, 500, NULL, &e);
    took = test_now_ms() - t0;
    assert_int_equal(r, MUTEXD_ERR_TRANSPORT);
    assert_in_range(took, 750, 3000);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
    fake_stop(f);
}

static void nobody_listening_is_a_transport_error(void **state)
{
    (void)state;
    char url[64];
    fake_closed_url(url, sizeof(url));
    mutexd_client *c = NULL;
    assert_int_equal(mutexd_client_new(&c, url, NULL), MUTEXD_OK);
    struct mutexd_error e = {0};
    struct mutexd_lease l = {0};
    assert_int_equal(mutexd_acquire(c, "a", NULL, &l, &e), MUTEXD_ERR_TRANSPORT);
    assert_int_equal(e.transport, 1);
    assert_int_equal(e.status, 0);
    assert_null(e.code);
    assert_non_null(e.message);
    assert_null(l.lease_id);
    /* The same error struct is reused: the next failure replaces the last. */
    assert_int_equal(mutexd_get(c, "", NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(e.transport, 0);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

/* ---- Several servers ------------------------------------------------------------------------ */

static mutexd_client *client_of(const char *urls, long request_timeout_ms)
{
    mutexd_client *c = NULL;
    struct mutexd_client_options o = {.request_timeout_ms = request_timeout_ms};
    assert_int_equal(mutexd_client_new(&c, urls, &o), MUTEXD_OK);
    return c;
}

/* The lease id of the acquire body in a request the fake read. */
static void proposed_lease_id(struct fake_server *f, char *out)
{
    char *req = fake_last_request(f);
    assert_non_null(req);
    const char *at = strstr(req, "\"lease_id\":\"");
    assert_non_null(at);
    snprintf(out, MUTEXD_LEASE_ID_LEN + 1, "%s", at + 12);
    free(req);
}

static void url_lists_are_parsed(void **state)
{
    (void)state;
    mutexd_client *c = NULL;
    assert_int_equal(mutexd_client_new(&c, " http://a:1/ ,\thttps://b:2/x//", NULL), MUTEXD_OK);
    assert_string_equal(mutexd_client_url(c), "http://a:1");
    mutexd_client_free(c);
    const char *bad[] = {"",
                         ",",
                         "http://a:1,",
                         ",http://a:1",
                         "http://a:1,,http://b:2",
                         "http://a:1,ftp://b:2",
                         "http://a:1,http://b:2\r\nX: y"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        c = (mutexd_client *)1;
        if (mutexd_client_new(&c, bad[i], NULL) != MUTEXD_ERR_ARG)
            fail_msg("'%s' was taken as a list of URLs", bad[i]);
        assert_null(c);
    }
    char many[64 * 16 + 32] = "";
    for (int i = 0; i < 65; i++)
        strcat(many, i == 0 ? "http://a:1" : ",http://a:1");
    assert_int_equal(mutexd_client_new(&c, many, NULL), MUTEXD_ERR_ARG);
    many[strlen(many) - strlen(",http://a:1")] = '\0';
    assert_int_equal(mutexd_client_new(&c, many, NULL), MUTEXD_OK); /* 64 */
    mutexd_client_free(c);

    /* The list constructor splits nothing: a comma belongs to its URL. */
    const char *list[] = {"http://a:1/p,q/", "https://b:2"};
    assert_int_equal(mutexd_client_new_list(&c, list, 2, NULL), MUTEXD_OK);
    assert_string_equal(mutexd_client_url(c), "http://a:1/p,q");
    mutexd_client_free(c);
    assert_int_equal(mutexd_client_new_list(&c, list, 0, NULL), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_client_new_list(&c, NULL, 1, NULL), MUTEXD_ERR_ARG);
    const char *with_null[] = {"http://a:1", NULL};
    assert_int_equal(mutexd_client_new_list(&c, with_null, 2, NULL), MUTEXD_ERR_ARG);
    const char *not_http[] = {"http://a:1", "a:1"};
    assert_int_equal(mutexd_client_new_list(&c, not_http, 2, NULL), MUTEXD_ERR_ARG);
    assert_null(mutexd_client_url(NULL));
}

static void unavailable_server_moves_the_client_on(void **state)
{
    (void)state;
    const char *body = ERR("unavailable", ",\"reason\":\"fenced\"");
    struct fake_server *down =
        fake_start("HTTP/1.1 503 Service Unavailable", "Retry-After: 1\r\n", body, 0);
    struct fake_server *up = fake_start("HTTP/1.1 200 OK", "", lease_json, 0);
    assert_non_null(down);
    assert_non_null(up);
    const char *urls[] = {fake_url(down), fake_url(up)};
    mutexd_client *c = NULL;
    assert_int_equal(mutexd_client_new_list(&c, urls, 2, NULL), MUTEXD_OK);
    struct mutexd_lease l = {0};
    struct mutexd_error e = {0};
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_acquire(c, "a", NULL, &l, &e), MUTEXD_OK);
    assert_in_range(test_now_ms() - t0, 0, 900); /* no pause: the second one answered */
    assert_null(e.message);                      /* the 503 left nothing in the error */
    assert_true(l.fencing_token == UINT64_MAX);
    assert_int_equal(fake_requests(down), 1);
    assert_int_equal(fake_requests(up), 1);
    /* Both were asked with the lease id the library proposed. */
    char id_down[MUTEXD_LEASE_ID_LEN + 1], id_up[MUTEXD_LEASE_ID_LEN + 1];
    proposed_lease_id(down, id_down);
    proposed_lease_id(up, id_up);
    assert_string_equal(id_down, id_up);
    /* The one that answered is asked first from now on. */
    assert_string_equal(mutexd_client_url(c), fake_url(up));
    assert_int_equal(mutexd_get(c, "a", NULL, &e), MUTEXD_ERR_PROTOCOL); /* a lease, not a state */
    assert_int_equal(fake_requests(down), 1);
    assert_int_equal(fake_requests(up), 2);
    mutexd_lease_clear(&l);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
    fake_stop(down);
    fake_stop(up);
}

static void every_server_failing_gives_the_last_error(void **state)
{
    (void)state;
    char closed[64], urls[256];
    fake_closed_url(closed, sizeof(closed));
    const char *body = ERR("unavailable", ",\"reason\":\"no_active_server\"");
    struct fake_server *down =
        fake_start("HTTP/1.1 503 Service Unavailable", "Retry-After: 1\r\n", body, 0);
    assert_non_null(down);

    /* Nobody, then a 503 with Retry-After 1: round, a pause of 1 s, round again. */
    snprintf(urls, sizeof(urls), "%s,%s", closed, fake_url(down));
    mutexd_client *c = client_of(urls, 2000);
    struct mutexd_error e = {0};
    int64_t t0 = test_now_ms();
    mutexd_result r = mutexd_get(c, "a", NULL, &e);
    int64_t took = test_now_ms() - t0;
    assert_int_equal(r, MUTEXD_ERR_API);
    assert_int_equal(e.status, 503);
    assert_string_equal(e.reason, "no_active_server");
    assert_int_equal(e.retry_after_s, 1);
    assert_int_equal(e.transport, 0);
    assert_int_equal(fake_requests(down), 2);
    assert_in_range(took, 950, 1900);
    mutexd_client_free(c);

    /* The other way round, the last attempt is the one nobody answered. */
    snprintf(urls, sizeof(urls), "%s,%s", fake_url(down), closed);
    c = client_of(urls, 2000);
    r = mutexd_get(c, "a", NULL, &e);
    assert_int_equal(r, MUTEXD_ERR_TRANSPORT);
    assert_int_equal(e.transport, 1);
    assert_int_equal(e.status, 0);
    assert_null(e.reason);
    assert_non_null(strstr(e.message, closed)); /* it says which server */
    assert_int_equal(fake_requests(down), 4);
    mutexd_client_free(c);
    fake_stop(down);

    /* A long Retry-After is cut short. */
    struct fake_server *a =
        fake_start("HTTP/1.1 503 Service Unavailable", "Retry-After: 3600\r\n", body, 0);
    struct fake_server *b =
        fake_start("HTTP/1.1 503 Service Unavailable", "Retry-After: 3600\r\n", body, 0);
    snprintf(urls, sizeof(urls), "%s,%s", fake_url(a), fake_url(b));
    c = client_of(urls, 2000);
    t0 = test_now_ms();
    assert_int_equal(mutexd_get(c, "a", NULL, &e), MUTEXD_ERR_API);
    took = test_now_ms() - t0;
    assert_in_range(took, 1900, 3500);
    assert_int_equal(fake_requests(a), 2);
    assert_int_equal(fake_requests(b), 2);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
    fake_stop(a);
    fake_stop(b);
}

static void one_server_is_one_attempt(void **state)
{
    (void)state;
    struct fake_server *down = fake_start("HTTP/1.1 503 Service Unavailable", "Retry-After: 1\r\n",
                                          ERR("unavailable", ""), 0);
    mutexd_client *c = client_of(fake_url(down), 2000);
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_get(c, "a", NULL, NULL), MUTEXD_ERR_API);
    assert_in_range(test_now_ms() - t0, 0, 900);
    assert_int_equal(fake_requests(down), 1);
    mutexd_client_free(c);
    fake_stop(down);
}

/* A standby names the active it forwarded to: when that is one of the client's URLs, the
 * client sends its next requests there; a URL it was not given is never used. */
static void the_active_named_by_a_standby_is_asked_first(void **state)
{
    (void)state;
    const char *body = ERR("not_found", "");
    struct fake_server *active = fake_start("HTTP/1.1 404 Not Found", "", body, 0);
    char named[256], urls[512];
    /* Another spelling of the same URL: host in capitals, a trailing '/'. */
    snprintf(named, sizeof(named), "Mutexd-Served-By: HTTP://127.0.0.1:%s/\r\n",
             strrchr(fake_url(active), ':') + 1);
    struct fake_server *standby = fake_start("HTTP/1.1 404 Not Found", named, body, 0);
    snprintf(urls, sizeof(urls), "%s,%s", fake_url(standby), fake_url(active));
    mutexd_client *c = client_of(urls, 2000);
    for (int i = 0; i < 3; i++)
        assert_int_equal(mutexd_get(c, "a", NULL, NULL), MUTEXD_ERR_API);
    assert_int_equal(fake_requests(standby), 1);
    assert_int_equal(fake_requests(active), 2);
    assert_string_equal(mutexd_client_url(c), fake_url(active));
    mutexd_client_free(c);
    fake_stop(standby);

    /* Naming a server the client was not given changes nothing. */
    struct fake_server *other =
        fake_start("HTTP/1.1 404 Not Found", "Mutexd-Served-By: http://127.0.0.1:1\r\n", body, 0);
    snprintf(urls, sizeof(urls), "%s,%s", fake_url(other), fake_url(active));
    c = client_of(urls, 2000);
    for (int i = 0; i < 3; i++)
        assert_int_equal(mutexd_get(c, "a", NULL, NULL), MUTEXD_ERR_API);
    assert_int_equal(fake_requests(other), 3);
    mutexd_client_free(c);
    fake_stop(other);
    fake_stop(active);
}

static void renew_attempts_stop_at_the_deadline(void **state)
{
    (void)state;
    struct fake_server *s1 = fake_start("HTTP/1.1 200 OK", "", "{}", 1);
    struct fake_server *s2 = fake_start("HTTP/1.1 200 OK", "", "{}", 1);
    char urls[256];
    snprintf(urls, sizeof(urls), "%s,%s", fake_url(s1), fake_url(s2));
    mutexd_client *c = client_of(urls, 5000);
    struct mutexd_lease l = {.resource = strdup("a"),
                             .lease_id = strdup("6ccb3e43-0489-4885-ac1c-bf894cffbd13")};
    struct mutexd_error e = {0};

    /* Silent servers: the first attempt ends at the deadline, and no other begins. */
    l.deadline_ms = mutexd_monotonic_ms() + 500;
    int64_t t0 = test_now_ms();
    mutexd_result r = mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e);
    int64_t took = test_now_ms() - t0;
    assert_int_equal(r, MUTEXD_ERR_TRANSPORT);
    assert_in_range(took, 400, 1200);
    assert_true(mutexd_monotonic_ms() >= l.deadline_ms);
    assert_int_equal(fake_requests(s1), 1);
    assert_int_equal(fake_requests(s2), 0);
    assert_string_equal(l.resource, "a"); /* a failed call leaves the lease as it was */
    mutexd_client_free(c);
    fake_stop(s1);
    fake_stop(s2);

    /* 503s: the pause before going round again would end past the deadline: no more. */
    const char *body = ERR("unavailable", "");
    s1 = fake_start("HTTP/1.1 503 Service Unavailable", "Retry-After: 1\r\n", body, 0);
    s2 = fake_start("HTTP/1.1 503 Service Unavailable", "Retry-After: 1\r\n", body, 0);
    snprintf(urls, sizeof(urls), "%s,%s", fake_url(s1), fake_url(s2));
    c = client_of(urls, 5000);
    l.deadline_ms = mutexd_monotonic_ms() + 500;
    t0 = test_now_ms();
    r = mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e);
    took = test_now_ms() - t0;
    assert_int_equal(r, MUTEXD_ERR_API);
    assert_int_equal(e.status, 503);
    assert_in_range(took, 0, 450);
    assert_int_equal(fake_requests(s1), 1);
    assert_int_equal(fake_requests(s2), 1);
    /* Another lease's renewal, or one begun after the deadline, goes round again. */
    t0 = test_now_ms();
    r = mutexd_renew(c, l.resource, "0ccb3e43-0489-4885-ac1c-bf894cffbd13", NULL, &l, &e);
    assert_int_equal(r, MUTEXD_ERR_API);
    assert_in_range(test_now_ms() - t0, 950, 2500);
    assert_int_equal(fake_requests(s1), 3);
    assert_int_equal(fake_requests(s2), 3);
    l.deadline_ms = mutexd_monotonic_ms() - 1;
    r = mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e);
    assert_int_equal(r, MUTEXD_ERR_API);
    assert_int_equal(fake_requests(s1), 5);
    assert_int_equal(fake_requests(s2), 5);
    mutexd_error_clear(&e);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
    fake_stop(s1);
    fake_stop(s2);
}

/* ---- Semaphores and shared leases ---------------------------------------------------------- */

static const char sem_lease_json[] =
    "{\"resource\":\"jobs/encoder\",\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\","
    "\"owner\":\"w\",\"fencing_token\":7,\"ttl_ms\":1000,\"expires_in_ms\":1000,"
    "\"acquired_at\":\"t\",\"renewed_at\":\"t\",\"metadata\":null,\"limit\":3,\"shared\":false}";

/* limit and shared go in the body only when asked for (a server without semaphores refuses
 * them), and come back in the lease. */
static void acquire_sends_limit_and_shared(void **state)
{
    (void)state;
    struct fake_server *f = fake_start("HTTP/1.1 200 OK", "", sem_lease_json, 0);
    assert_non_null(f);
    mutexd_client *c = client_for(f, NULL);
    struct mutexd_lease l = {0};
    struct mutexd_acquire_options o = {
        .owner = "w", .lease_id = "6ccb3e43-0489-4885-ac1c-bf894cffbd13", .limit = 3};
    assert_int_equal(mutexd_acquire(c, "jobs/encoder", &o, &l, NULL), MUTEXD_OK);
    char *req = fake_last_request(f);
    assert_non_null(strstr(req, "\r\n\r\n{\"owner\":\"w\","
                                "\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\","
                                "\"limit\":3}"));
    free(req);
    assert_int_equal(l.limit, 3);
    assert_int_equal(l.shared, 0);

    struct mutexd_acquire_options r = {.owner = "w",
                                       .lease_id = "6ccb3e43-0489-4885-ac1c-bf894cffbd13",
                                       .ttl_ms = 2000,
                                       .shared = 1};
    assert_int_equal(mutexd_acquire(c, "jobs/encoder", &r, &l, NULL), MUTEXD_OK);
    req = fake_last_request(f);
    assert_non_null(strstr(req, "\r\n\r\n{\"owner\":\"w\","
                                "\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\","
                                "\"ttl_ms\":2000,\"shared\":true}"));
    free(req);

    /* An explicit limit of 1 is sent; shared with a limit is the server's to refuse. */
    struct mutexd_acquire_options both = {
        .owner = "w", .lease_id = "6ccb3e43-0489-4885-ac1c-bf894cffbd13", .limit = 1, .shared = 1};
    assert_int_equal(mutexd_acquire(c, "jobs/encoder", &both, NULL, NULL), MUTEXD_OK);
    req = fake_last_request(f);
    assert_non_null(strstr(req, ",\"limit\":1,\"shared\":true}"));
    free(req);
    mutexd_lease_clear(&l);
    assert_int_equal(l.limit, 0);
    mutexd_client_free(c);
    fake_stop(f);

    /* A shared lease's answer, and one from a server without semaphores (no limit, no
     * shared): an exclusive lease of limit 1. */
    const char *shared_json = "{\"resource\":\"c\",\"lease_id\":\"6ccb3e43-0489-4885-ac1c-"
                              "bf894cffbd13\",\"owner\":\"w\",\"fencing_token\":8,\"ttl_ms\":1000,"
                              "\"expires_in_ms\":999,\"limit\":1,\"shared\":true}";
    f = fake_start("HTTP/1.1 200 OK", "", shared_json, 0);
    c = client_for(f, NULL);
    assert_int_equal(mutexd_acquire(c, "c", &r, &l, NULL), MUTEXD_OK);
    assert_int_equal(l.limit, 1);
    assert_int_equal(l.shared, 1);
    assert_int_equal(mutexd_renew(c, "c", l.lease_id, NULL, &l, NULL), MUTEXD_OK);
    assert_int_equal(l.shared, 1);
    mutexd_client_free(c);
    fake_stop(f);
    f = fake_start("HTTP/1.1 200 OK", "", lease_json, 0);
    c = client_for(f, NULL);
    assert_int_equal(mutexd_acquire(c, "a", NULL, &l, NULL), MUTEXD_OK);
    assert_int_equal(l.limit, 1);
    assert_int_equal(l.shared, 0);
    req = fake_last_request(f);
    assert_null(strstr(req, "\"limit\""));
    assert_null(strstr(req, "\"shared\""));
    free(req);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
    fake_stop(f);
}

static void limit_mismatch_carries_the_limit(void **state)
{
    (void)state;
    struct fake_server *f =
        fake_start("HTTP/1.1 409 Conflict", "", ERR("limit_mismatch", ",\"limit\":3"), 0);
    mutexd_client *c = client_for(f, NULL);
    struct mutexd_error e = {0};
    struct mutexd_lease l = {0};
    struct mutexd_acquire_options o = {.limit = 4};
    mutexd_result r = mutexd_acquire(c, "jobs/encoder", &o, &l, &e);
    assert_int_equal(r, MUTEXD_ERR_LIMIT_MISMATCH);
    assert_string_equal(mutexd_result_name(r), "limit_mismatch");
    assert_int_equal(e.status, 409);
    assert_string_equal(e.code, "limit_mismatch");
    assert_int_equal(e.limit, 3);
    assert_int_equal(e.has_holder, 0);
    assert_false(mutexd_error_is_temporary(r, &e));
    assert_null(l.resource); /* untouched */
    mutexd_error_clear(&e);
    assert_int_equal(e.limit, 0);
    mutexd_client_free(c);
    fake_stop(f);

    /* Without the limit it is still the mismatch, with limit 0: not said. */
    expect_error("HTTP/1.1 409 Conflict", "", ERR("limit_mismatch", ""), MUTEXD_ERR_LIMIT_MISMATCH,
                 409, "limit_mismatch", NULL);
    /* A limit that is no limit is not the API. */
    f = fake_start("HTTP/1.1 409 Conflict", "", ERR("limit_mismatch", ",\"limit\":\"x\""), 0);
    c = client_for(f, NULL);
    assert_int_equal(mutexd_acquire(c, "a", &o, NULL, &e), MUTEXD_ERR_API);
    assert_null(e.code);
    assert_int_equal(e.limit, 0);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
    fake_stop(f);
    /* Another 409 code says nothing of a limit. */
    f = fake_start("HTTP/1.1 409 Conflict", "",
                   ERR("lease_held", ",\"limit\":3,\"holder\":{\"owner\":\"x\","
                                     "\"fencing_token\":1,\"expires_in_ms\":2500,\"shared\":true}"),
                   0);
    c = client_for(f, NULL);
    assert_int_equal(mutexd_acquire(c, "a", &o, NULL, &e), MUTEXD_HELD);
    assert_int_equal(e.limit, 0);
    assert_int_equal(e.has_holder, 1);
    assert_int_equal(e.holder.shared, 1);
    assert_int_equal(e.holder.ttl_ms, -1);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
    fake_stop(f);
}

#define HOLDER(owner, token, shared)                                                               \
    "{\"owner\":\"" owner "\",\"fencing_token\":" token ",\"shared\":" shared ",\"ttl_ms\":1000,"  \
    "\"expires_in_ms\":900,\"acquired_at\":\"t\",\"renewed_at\":\"t\",\"metadata\":null}"

/* One holder a line: clang-format would scatter the macros. */
/* clang-format off */
static const char sem_state_json[] =
    "{\"resource\":\"jobs/encoder\",\"state\":\"held\",\"index\":9,\"limit\":3,"
    "\"holder\":" HOLDER("a", "4", "false") ","
    "\"holders\":[" HOLDER("a", "4", "false") ","
                   HOLDER("b", "18446744073709551615", "false") "],"
    "\"waiters\":2}";

static const char readers_state_json[] =
    "{\"resource\":\"cache\",\"state\":\"held\",\"index\":3,\"limit\":1,"
    "\"holder\":" HOLDER("r1", "1", "true") ","
    "\"holders\":[" HOLDER("r1", "1", "true") ","
                   HOLDER("r2", "2", "true") ","
                   HOLDER("r3", "3", "true") "],"
    "\"waiters\":1}";
/* clang-format on */

/* Every holder, oldest first; `holder` stays the first. */
static void state_lists_every_holder(void **state)
{
    (void)state;
    struct fake_server *f = fake_start("HTTP/1.1 200 OK", "", sem_state_json, 0);
    mutexd_client *c = client_for(f, NULL);
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "jobs/encoder", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.held, 1);
    assert_int_equal(s.limit, 3);
    assert_int_equal(s.waiters, 2);
    assert_int_equal(s.holder_count, 2);
    assert_string_equal(s.holder.owner, "a");
    assert_string_equal(s.holders[0].owner, "a");
    assert_true(s.holders[0].owner != s.holder.owner); /* each owns its strings */
    assert_string_equal(s.holders[1].owner, "b");
    assert_true(s.holders[1].fencing_token == UINT64_MAX);
    assert_int_equal(s.holders[1].ttl_ms, 1000);
    assert_int_equal(s.holders[1].expires_in_ms, 900);
    assert_string_equal(s.holders[1].acquired_at, "t");
    assert_null(s.holders[1].metadata);
    assert_int_equal(s.holders[1].shared, 0);
    /* Watching reads the same. */
    assert_int_equal(mutexd_watch(c, "jobs/encoder", 8, 10, &s, NULL), MUTEXD_OK);
    assert_int_equal(s.holder_count, 2);
    mutexd_state_clear(&s);
    assert_null(s.holders);
    assert_int_equal(s.holder_count, 0);
    mutexd_client_free(c);
    fake_stop(f);

    /* Readers: shared holders. */
    f = fake_start("HTTP/1.1 200 OK", "", readers_state_json, 0);
    c = client_for(f, NULL);
    assert_int_equal(mutexd_get(c, "cache", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.limit, 1);
    assert_int_equal(s.holder_count, 3);
    for (size_t i = 0; i < s.holder_count; i++)
        assert_int_equal(s.holders[i].shared, 1);
    assert_int_equal(s.holder.shared, 1);
    assert_int_equal(s.holders[2].fencing_token, 3);
    mutexd_state_clear(&s);
    mutexd_client_free(c);
    fake_stop(f);

    /* A free resource: no holders, limit 1. */
    f = fake_start("HTTP/1.1 200 OK", "",
                   "{\"resource\":\"x\",\"state\":\"free\",\"index\":0,\"limit\":1,"
                   "\"holder\":null,\"holders\":[],\"waiters\":0}",
                   0);
    c = client_for(f, NULL);
    assert_int_equal(mutexd_get(c, "x", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.held, 0);
    assert_int_equal(s.limit, 1);
    assert_int_equal(s.holder_count, 0);
    assert_null(s.holders);
    mutexd_state_clear(&s);
    mutexd_client_free(c);
    fake_stop(f);

    /* A server without semaphores (no limit, no holders): its one holder, limit 1. */
    f = fake_start("HTTP/1.1 200 OK", "",
                   "{\"resource\":\"x\",\"state\":\"held\",\"index\":4,\"holder\":{\"owner\":\"o\","
                   "\"fencing_token\":5,\"ttl_ms\":1000,\"expires_in_ms\":800,\"acquired_at\":"
                   "\"t\",\"renewed_at\":\"u\",\"metadata\":{\"k\":1}},\"waiters\":0}",
                   0);
    c = client_for(f, NULL);
    assert_int_equal(mutexd_get(c, "x", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.limit, 1);
    assert_int_equal(s.holder_count, 1);
    assert_string_equal(s.holders[0].owner, "o");
    assert_string_equal(s.holders[0].renewed_at, "u");
    assert_string_equal(s.holders[0].metadata, "{\"k\":1}");
    assert_int_equal(s.holders[0].fencing_token, 5);
    assert_int_equal(s.holders[0].shared, 0);
    mutexd_state_clear(&s);
    mutexd_client_free(c);
    fake_stop(f);
}

/* What the API never answers is a protocol error, and the caller's state is left alone. */
static void holders_that_are_not_the_api(void **state)
{
    (void)state;
    /* clang-format off */
    static const char *const bodies[] = {
        /* held with no holders */
        "{\"resource\":\"x\",\"state\":\"held\",\"index\":1,\"limit\":1,"
        "\"holder\":" HOLDER("a", "1", "false") ",\"holders\":[],\"waiters\":0}",
        /* free with a holder in holders */
        "{\"resource\":\"x\",\"state\":\"free\",\"index\":1,\"limit\":1,"
        "\"holder\":null,\"holders\":[" HOLDER("a", "1", "false") "],\"waiters\":0}",
        /* holders not an array */
        "{\"resource\":\"x\",\"state\":\"held\",\"index\":1,\"limit\":1,"
        "\"holder\":" HOLDER("a", "1", "false") ",\"holders\":{},\"waiters\":0}",
        /* shared not a boolean */
        "{\"resource\":\"x\",\"state\":\"held\",\"index\":1,\"limit\":1,"
        "\"holder\":" HOLDER("a", "1", "false") ","
        "\"holders\":[" HOLDER("a", "1", "1") "],\"waiters\":0}",
        /* a limit of 0 */
        "{\"resource\":\"x\",\"state\":\"free\",\"index\":1,\"limit\":0,"
        "\"holder\":null,\"holders\":[],\"waiters\":0}",
        /* a holder without a token */
        "{\"resource\":\"x\",\"state\":\"held\",\"index\":1,\"limit\":2,"
        "\"holder\":" HOLDER("a", "1", "false") ",\"holders\":[{\"owner\":\"a\"}],"
        "\"waiters\":0}",
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        expect_error("HTTP/1.1 200 OK", "", bodies[i], MUTEXD_ERR_PROTOCOL, 200, NULL, NULL);

    /* A lease whose shared or limit is of the wrong type. */
    struct fake_server *f = fake_start(
        "HTTP/1.1 200 OK", "",
        "{\"resource\":\"c\",\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\",\"owner\":"
        "\"w\",\"fencing_token\":8,\"ttl_ms\":1000,\"expires_in_ms\":999,\"shared\":\"yes\"}",
        0);
    mutexd_client *c = client_for(f, NULL);
    assert_int_equal(mutexd_acquire(c, "c", NULL, NULL, NULL), MUTEXD_ERR_PROTOCOL);
    mutexd_client_free(c);
    fake_stop(f);
}

/* Every state of a list page has its holders. */
static void list_pages_carry_holders(void **state)
{
    (void)state;
    char body[4096];
    snprintf(body, sizeof(body), "{\"resources\":[%s,%s],\"next_cursor\":null}", sem_state_json,
             sem_state_json);
    struct fake_server *f = fake_start("HTTP/1.1 200 OK", "", body, 0);
    mutexd_client *c = client_for(f, NULL);
    struct mutexd_page p = {0};
    assert_int_equal(mutexd_list(c, NULL, &p, NULL), MUTEXD_OK);
    assert_int_equal(p.count, 2);
    for (size_t i = 0; i < p.count; i++) {
        assert_int_equal(p.resources[i].limit, 3);
        assert_int_equal(p.resources[i].holder_count, 2);
        assert_string_equal(p.resources[i].holders[1].owner, "b");
    }
    mutexd_page_clear(&p);
    mutexd_client_free(c);
    fake_stop(f);
}

/* break with a lease id names it in the body; without, the body is as before. */
static void break_names_one_lease(void **state)
{
    (void)state;
    struct fake_server *f =
        fake_start("HTTP/1.1 200 OK", "", "{\"resource\":\"a\",\"broken\":false}", 0);
    mutexd_client *c = client_for(f, NULL);
    int broken = -1;
    assert_int_equal(
        mutexd_break_lease(c, "a", "6ccb3e43-0489-4885-ac1c-bf894cffbd13", NULL, &broken, NULL),
        MUTEXD_OK);
    assert_int_equal(broken, 0);
    char *req = fake_last_request(f);
    assert_non_null(strstr(req, "POST /v1/resources/a/break HTTP/1.1\r\n"));
    assert_non_null(strstr(req, "\r\n\r\n{\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\"}"));
    free(req);
    assert_int_equal(mutexd_break_lease(c, "a", "6ccb3e43-0489-4885-ac1c-bf894cffbd13",
                                        "stuck \"job\"", NULL, NULL),
                     MUTEXD_OK);
    req = fake_last_request(f);
    assert_non_null(strstr(req, "\r\n\r\n{\"reason\":\"stuck \\\"job\\\"\","
                                "\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\"}"));
    free(req);
    assert_int_equal(mutexd_break_lease(c, "a", NULL, "r", NULL, NULL), MUTEXD_OK);
    req = fake_last_request(f);
    assert_non_null(strstr(req, "\r\n\r\n{\"reason\":\"r\"}"));
    free(req);
    assert_int_equal(mutexd_break(c, "a", "r", NULL, NULL), MUTEXD_OK);
    req = fake_last_request(f);
    assert_non_null(strstr(req, "\r\n\r\n{\"reason\":\"r\"}"));
    free(req);
    mutexd_client_free(c);
    fake_stop(f);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(requests_carry_token_json_and_encoded_path),
    cmocka_unit_test(no_token_no_authorization_header),
    cmocka_unit_test(unauthorized_and_forbidden),
    cmocka_unit_test(unavailable_carries_reason_and_retry_after),
    cmocka_unit_test(every_other_error_code_is_decoded),
    cmocka_unit_test(bodies_that_are_not_the_api),
    cmocka_unit_test(silence_times_out),
    cmocka_unit_test(nobody_listening_is_a_transport_error),
    cmocka_unit_test(url_lists_are_parsed),
    cmocka_unit_test(unavailable_server_moves_the_client_on),
    cmocka_unit_test(every_server_failing_gives_the_last_error),
    cmocka_unit_test(one_server_is_one_attempt),
    cmocka_unit_test(the_active_named_by_a_standby_is_asked_first),
    cmocka_unit_test(renew_attempts_stop_at_the_deadline),
    cmocka_unit_test(acquire_sends_limit_and_shared),
    cmocka_unit_test(limit_mismatch_carries_the_limit),
    cmocka_unit_test(state_lists_every_holder),
    cmocka_unit_test(holders_that_are_not_the_api),
    cmocka_unit_test(list_pages_carry_holders),
    cmocka_unit_test(break_names_one_lease),
};
TEST_MAIN(tests)
