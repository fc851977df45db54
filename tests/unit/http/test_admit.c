/* Admission and framing (http/admit.c): each refusal from the headers alone, with its
 * status, code and field, and what must pass. */
#include "tests/unit/testutil.h"

#include <string.h>

#include "http/admit.h"

/* A plain HTTP/1.1 request with one Host. */
static struct admit_headers plain(void)
{
    return (struct admit_headers){.host = "127.0.0.1:8080", .n_host = 1};
}

static void refused(bool ok, const struct api_error *e, int status, const char *code,
                    const char *field)
{
    assert_false(ok);
    assert_int_equal(e->status, status);
    assert_string_equal(e->code, code);
    if (field) {
        assert_non_null(e->field);
        assert_string_equal(e->field, field);
    } else {
        assert_null(e->field);
    }
}

static void framing_passes_a_plain_request(void **st)
{
    (void)st;
    struct api_error e;
    struct admit_headers h = plain();
    assert_true(admit_framing(&h, &e));
    h.transfer_encoding = "Chunked";
    h.n_transfer_encoding = 1;
    assert_true(admit_framing(&h, &e)); /* chunked alone, any case */
    h = (struct admit_headers){.http10 = true};
    assert_true(admit_framing(&h, &e)); /* HTTP/1.0 needs no Host */
}

static void framing_refuses_what_a_proxy_could_read_otherwise(void **st)
{
    (void)st;
    struct api_error e;
    struct admit_headers h = plain();
    h.n_content_length = 2;
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "Content-Length");
    h = plain();
    h.n_transfer_encoding = 2;
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "Transfer-Encoding");
    h = plain();
    h.transfer_encoding = "chunked";
    h.n_transfer_encoding = 1;
    h.n_content_length = 1;
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "Transfer-Encoding");
    h = plain();
    h.transfer_encoding = "gzip, chunked";
    h.n_transfer_encoding = 1;
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "Transfer-Encoding");
    h = (struct admit_headers){
        .http10 = true, .transfer_encoding = "chunked", .n_transfer_encoding = 1};
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "Transfer-Encoding");
    h = plain();
    h.n_host = 0;
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "Host");
    h = plain();
    h.n_host = 2;
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "Host");
    h = plain();
    h.n_authorization = 2;
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "Authorization");
    h = plain();
    h.nul_header = "X-Token";
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", "X-Token");
    h.nul_header = "not a token"; /* named only when it is a plain token */
    refused(admit_framing(&h, &e), &e, 400, "invalid_field", NULL);
}

static void counts_are_by_name_in_any_case(void **st)
{
    (void)st;
    struct admit_headers h = {0};
    admit_count(&h, "content-length");
    admit_count(&h, "CONTENT-LENGTH");
    admit_count(&h, "Transfer-Encoding");
    admit_count(&h, "host");
    admit_count(&h, "Authorization");
    admit_count(&h, "X-Other");
    assert_int_equal(h.n_content_length, 2);
    assert_int_equal(h.n_transfer_encoding, 1);
    assert_int_equal(h.n_host, 1);
    assert_int_equal(h.n_authorization, 1);
}

/* libmicrohttpd's layout: each header's line break and colon overwritten with NULs. */
static void scan_finds_a_nul_in_a_value_and_a_folded_line(void **st)
{
    (void)st;
    /* "GET / HTTP/1.1\r\nHost: a\r\nX-Token: t\r\n\r\n" as libmicrohttpd leaves it. */
    char head[] = "GET\0/\0HTTP/1.1\0\0Host\0 a\0\0X-Token\0 t\0\0\0\0";
    const char *host = head + 16, *host_v = head + 22, *tok = head + 25, *tok_v = head + 34;
    struct admit_scan sc = {.head = head, .end = head + sizeof head - 1};
    assert_true(admit_scan_next(&sc, host, host_v));
    assert_true(admit_scan_next(&sc, tok, tok_v));
    assert_null(admit_scan_end(&sc));

    /* "X-Token: t\0junk": the value libmicrohttpd shows ends at the NUL. */
    char nul[] = "GET\0/\0HTTP/1.1\0\0Host\0 a\0\0X-Token\0 t\0junk\0\0\0\0";
    struct admit_scan s2 = {.head = nul, .end = nul + sizeof nul - 1};
    assert_true(admit_scan_next(&s2, nul + 16, nul + 22));
    assert_true(admit_scan_next(&s2, nul + 25, nul + 34));
    assert_ptr_equal(admit_scan_end(&s2), nul + 25);

    /* A NUL in the first value: found when the next header is seen. */
    char first[] = "GET\0/\0HTTP/1.1\0\0Host\0 a\0x\0\0X-Token\0 t\0\0\0\0";
    struct admit_scan s3 = {.head = first, .end = first + sizeof first - 1};
    assert_true(admit_scan_next(&s3, first + 16, first + 22));
    assert_false(admit_scan_next(&s3, first + 27, first + 36));
    assert_ptr_equal(admit_scan_end(&s3), first + 16);

    /* A header rebuilt elsewhere (a folded line) or out of order. */
    static char elsewhere[] = "X-Folded";
    struct admit_scan s4 = {.head = head, .end = head + sizeof head - 1};
    assert_false(admit_scan_next(&s4, elsewhere, elsewhere + 3));
    assert_ptr_equal(admit_scan_end(&s4), elsewhere);
    struct admit_scan s5 = {.head = head, .end = head + sizeof head - 1};
    assert_true(admit_scan_next(&s5, tok, tok_v));
    assert_false(admit_scan_next(&s5, host, host_v));
}

static void origin_and_host_are_checked(void **st)
{
    (void)st;
    struct api_error e;
    struct admit_headers h = plain();
    assert_true(admit_origin_host(&h, NULL, NULL, true, &e));
    h.origin = "https://evil.example";
    refused(admit_origin_host(&h, NULL, NULL, true, &e), &e, 403, "forbidden", NULL);
    assert_true(admit_origin_host(&h, "https://ok.example, https://EVIL.example", NULL, true, &e));
    h = plain();
    h.host = "rebind.example:8080";
    refused(admit_origin_host(&h, NULL, NULL, true, &e), &e, 403, "forbidden", NULL);
    assert_true(admit_origin_host(&h, NULL, "other, rebind.example", true, &e));
    assert_true(admit_origin_host(&h, NULL, NULL, false, &e)); /* not checked */
    const char *good[] = {"localhost",   "LOCALHOST:80", "127.0.0.1",
                          "127.9.9.9:1", "[::1]",        "[::1]:8080"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        h.host = good[i];
        assert_true(admit_origin_host(&h, NULL, NULL, true, &e));
    }
    const char *bad[] = {"128.0.0.1", "[::2]", "localhost:",        "localhost:8x",
                         "[::1",      ":80",   "localhost.example", "[]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h.host = bad[i];
        if (admit_origin_host(&h, NULL, NULL, true, &e))
            fail_msg("Host %s was admitted", bad[i]);
    }
    h.host = NULL; /* HTTP/1.0 without a Host */
    assert_true(admit_origin_host(&h, NULL, NULL, true, &e));
}

/* The dashboard calls its own server: an Origin equal to scheme://Host is not foreign. */
static void own_origin_is_admitted(void **st)
{
    (void)st;
    struct api_error e;
    struct admit_headers h = plain();
    h.origin = "http://127.0.0.1:8080";
    assert_true(admit_origin_host(&h, NULL, NULL, true, &e));
    h.origin = "HTTP://127.0.0.1:8080"; /* any case */
    assert_true(admit_origin_host(&h, NULL, NULL, true, &e));
    h.host = "localhost";
    h.origin = "http://localhost:80"; /* a default port, written or not */
    assert_true(admit_origin_host(&h, NULL, NULL, true, &e));
    h.host = "[::1]:8080";
    h.origin = "http://[::1]:8080";
    assert_true(admit_origin_host(&h, NULL, NULL, true, &e));

    /* Another port, scheme or host is another origin; and so is the opaque "null". */
    const char *foreign[] = {"http://127.0.0.1:8081",
                             "https://127.0.0.1:8080",
                             "http://127.0.0.1",
                             "http://localhost:8080",
                             "null",
                             "http://127.0.0.1:8080.evil.example",
                             "http://127.0.0.1:80800"};
    h.host = "127.0.0.1:8080";
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        h.origin = foreign[i];
        if (admit_origin_host(&h, NULL, NULL, true, &e))
            fail_msg("Origin %s was admitted for Host %s", foreign[i], h.host);
        assert_int_equal(e.status, 403);
    }

    /* Over TLS the page's origin is https. */
    h.https = true;
    h.origin = "https://127.0.0.1:8080";
    assert_true(admit_origin_host(&h, NULL, NULL, true, &e));
    h.origin = "http://127.0.0.1:8080";
    refused(admit_origin_host(&h, NULL, NULL, true, &e), &e, 403, "forbidden", NULL);
    h.host = "127.0.0.1";
    h.origin = "https://127.0.0.1:443";
    assert_true(admit_origin_host(&h, NULL, NULL, true, &e));

    /* A name the server does not know may be an attacker's pointed at it (DNS rebinding):
     * its own origin counts only once --allowed-hosts names it, even where the Host
     * itself is not checked (a listener on 0.0.0.0). */
    h = plain();
    h.host = "locks.example:8080";
    h.origin = "http://locks.example:8080";
    refused(admit_origin_host(&h, NULL, NULL, false, &e), &e, 403, "forbidden", NULL);
    assert_true(admit_origin_host(&h, NULL, "locks.example", true, &e));
    assert_true(admit_origin_host(&h, NULL, "*", false, &e));
    assert_false(admit_same_origin(&h, "other.example"));
    h.host = NULL; /* HTTP/1.0 without a Host: no origin of its own */
    assert_false(admit_same_origin(&h, "*"));
}

static void list_items_are_trimmed_and_caseless(void **st)
{
    (void)st;
    assert_true(admit_list_has(" a ,B,  c", "b", 1));
    assert_true(admit_list_has("a,b, c ", "c", 1));
    assert_false(admit_list_has("ab,c", "a", 1));
    assert_false(admit_list_has(NULL, "a", 1));
    assert_false(admit_list_has("", "a", 1));
    assert_true(admit_list_has("*", "*", 1));
}

static void body_limits_and_type(void **st)
{
    (void)st;
    struct api_error e;
    bool has;
    struct admit_headers h = plain();
    assert_true(admit_body(&h, true, &has, &e));
    assert_false(has);
    h.content_length = "65537";
    refused(admit_body(&h, false, &has, &e), &e, 413, "body_too_large", NULL);
    h.content_length = "10";
    refused(admit_body(&h, true, &has, &e), &e, 415, "unsupported_media_type", NULL);
    assert_true(has);
    assert_non_null(strstr(e.message, "needs Content-Type"));
    h.content_type = "text/plain";
    refused(admit_body(&h, true, &has, &e), &e, 415, "unsupported_media_type", NULL);
    h.content_type = "application/json; charset=utf-8";
    assert_true(admit_body(&h, true, &has, &e));
    h.content_type = NULL;
    assert_true(admit_body(&h, false, &has, &e)); /* a route without a JSON body */
    h.content_length = "0";
    assert_true(admit_body(&h, true, &has, &e)); /* no body: no type needed */
    assert_false(has);
    h.content_length = NULL;
    h.transfer_encoding = "chunked";
    refused(admit_body(&h, true, &has, &e), &e, 415, "unsupported_media_type", NULL);
    assert_true(has);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(framing_passes_a_plain_request),
    cmocka_unit_test(framing_refuses_what_a_proxy_could_read_otherwise),
    cmocka_unit_test(counts_are_by_name_in_any_case),
    cmocka_unit_test(scan_finds_a_nul_in_a_value_and_a_folded_line),
    cmocka_unit_test(origin_and_host_are_checked),
    cmocka_unit_test(own_origin_is_admitted),
    cmocka_unit_test(list_items_are_trimmed_and_caseless),
    cmocka_unit_test(body_limits_and_type),
};
MX_TEST_MAIN(tests)
