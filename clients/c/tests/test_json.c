/*
 * Unit tests of the library's insides: the exact reading of answers (json.c), the decoders
 * (decode.c) and the request buffer (buf.c). No server.
 */
#include "testing.h"

#include "buf.h"
#include "decode.h"
#include "json.h"

static void free_meta(char **meta, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(meta[i]);
    free(meta);
}

static void rewrite_quotes_big_integers_only(void **state)
{
    (void)state;
    const char *in = "{\"a\":1234567890123456,\"b\":123456789012345,\"c\":-12345678901234567,"
                     "\"d\":1.5e300,\"e\":\"99999999999999999\",\"f\":[18446744073709551615]}";
    char **meta;
    size_t n;
    char *out = mxc_json_rewrite(in, strlen(in), &meta, &n);
    assert_non_null(out);
    assert_string_equal(out, "{\"a\":\"1234567890123456\",\"b\":123456789012345,"
                             "\"c\":\"-12345678901234567\",\"d\":1.5e300,"
                             "\"e\":\"99999999999999999\",\"f\":[\"18446744073709551615\"]}");
    assert_int_equal(n, 0);
    free(out);
    free_meta(meta, n);
}

static void rewrite_keeps_metadata_text_as_sent(void **state)
{
    (void)state;
    const char *in = "{\"metadata\" : {\"n\": 123456789012345678901, \"s\": \"}\\\"{\", "
                     "\"metadata\": [1, {}]},\"x\":{\"metadata\":null}, \"y\": \"metadata\"}";
    char **meta;
    size_t n;
    char *out = mxc_json_rewrite(in, strlen(in), &meta, &n);
    assert_non_null(out);
    assert_string_equal(out, "{\"metadata\" :0,\"x\":{\"metadata\":1}, \"y\": \"metadata\"}");
    assert_int_equal(n, 2);
    assert_string_equal(meta[0],
                        "{\"n\": 123456789012345678901, \"s\": \"}\\\"{\", \"metadata\": [1, {}]}");
    assert_string_equal(meta[1], "null");
    free(out);
    free_meta(meta, n);
}

static void rewrite_refuses_broken_text(void **state)
{
    (void)state;
    static const char *const bad[] = {"{\"a\":\"unterminated", "{\"metadata\":", "{\"metadata\":{",
                                      "{\"metadata\":{\"a\":}}", "{\"metadata\":\"x}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char **meta = (char **)1;
        size_t n = 7;
        assert_null(mxc_json_rewrite(bad[i], strlen(bad[i]), &meta, &n));
        assert_null(meta);
        assert_int_equal(n, 0);
    }
    struct mxc_doc doc;
    assert_int_equal(mxc_doc_parse(&doc, "{\"a\":", 5), MUTEXD_ERR_PROTOCOL);
    assert_int_equal(mxc_doc_parse(&doc, "", 0), MUTEXD_ERR_PROTOCOL);
    assert_int_equal(mxc_doc_parse(&doc, "<html>", 6), MUTEXD_ERR_PROTOCOL);
    mxc_doc_free(&doc);
}

static const char lease_body[] =
    "{\"resource\":\"jobs/a\",\"lease_id\":\"6ccb3e43-0489-4885-ac1c-bf894cffbd13\","
    "\"owner\":\"w\",\"fencing_token\":18446744073709551615,\"ttl_ms\":15000,"
    "\"expires_in_ms\":14999,\"acquired_at\":\"2026-01-01T00:00:00.000Z\","
    "\"renewed_at\":\"2026-01-01T00:00:01.000Z\",\"metadata\":{\"id\":9007199254740993, "
    "\"addr\":\"10.0.0.1:80\"}}";

static void lease_decodes_exactly(void **state)
{
    (void)state;
    struct mxc_doc doc;
    struct mutexd_lease l;
    assert_int_equal(mxc_doc_parse(&doc, lease_body, strlen(lease_body)), MUTEXD_OK);
    assert_int_equal(mxc_decode_lease(&doc, doc.root, &l), MUTEXD_OK);
    assert_string_equal(l.resource, "jobs/a");
    assert_string_equal(l.lease_id, "6ccb3e43-0489-4885-ac1c-bf894cffbd13");
    assert_string_equal(l.owner, "w");
    assert_true(l.fencing_token == UINT64_MAX);
    assert_int_equal(l.ttl_ms, 15000);
    assert_int_equal(l.expires_in_ms, 14999);
    assert_string_equal(l.acquired_at, "2026-01-01T00:00:00.000Z");
    assert_string_equal(l.renewed_at, "2026-01-01T00:00:01.000Z");
    assert_string_equal(l.metadata, "{\"id\":9007199254740993, \"addr\":\"10.0.0.1:80\"}");
    /* The JSON is the answer again: numbers and metadata exactly as sent. */
    assert_non_null(strstr(l.json, "\"fencing_token\":18446744073709551615,"));
    assert_non_null(strstr(l.json, "\"metadata\":{\"id\":9007199254740993, \"addr\""));
    mutexd_lease_clear(&l);
    assert_null(l.resource);
    mxc_doc_free(&doc);
}

static void lease_missing_or_mistyped_members_are_protocol_errors(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"lease_id\":\"x\",\"owner\":\"w\",\"fencing_token\":1,\"ttl_ms\":1,\"expires_in_ms\":1}",
        "{\"resource\":\"r\",\"lease_id\":\"x\",\"owner\":\"w\",\"fencing_token\":-1,"
        "\"ttl_ms\":1,\"expires_in_ms\":1}",
        "{\"resource\":\"r\",\"lease_id\":\"x\",\"owner\":\"w\",\"fencing_token\":1.5,"
        "\"ttl_ms\":1,\"expires_in_ms\":1}",
        "{\"resource\":\"r\",\"lease_id\":\"x\",\"owner\":\"w\",\"fencing_token\":"
        "18446744073709551616,\"ttl_ms\":1,\"expires_in_ms\":1}",
        "{\"resource\":\"r\",\"lease_id\":7,\"owner\":\"w\",\"fencing_token\":1,\"ttl_ms\":1,"
        "\"expires_in_ms\":1}",
        "{\"resource\":\"r\",\"lease_id\":\"x\",\"owner\":\"w\",\"fencing_token\":1,"
        "\"ttl_ms\":\"1\",\"expires_in_ms\":1}",
        "[]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct mxc_doc doc;
        struct mutexd_lease l;
        assert_int_equal(mxc_doc_parse(&doc, bad[i], strlen(bad[i])), MUTEXD_OK);
        if (mxc_decode_lease(&doc, doc.root, &l) != MUTEXD_ERR_PROTOCOL)
            fail_msg("accepted: %s", bad[i]);
        assert_null(l.resource);
        mxc_doc_free(&doc);
    }
}

static void states_and_pages_decode(void **state)
{
    (void)state;
    const char *body =
        "{\"resources\":[{\"resource\":\"a\",\"state\":\"held\",\"index\":12345678901234567,"
        "\"holder\":{\"owner\":\"o\",\"fencing_token\":3,\"ttl_ms\":1000,\"expires_in_ms\":900,"
        "\"acquired_at\":\"t1\",\"renewed_at\":\"t2\",\"metadata\":{\"k\":1}},\"waiters\":2},"
        "{\"resource\":\"b\",\"state\":\"free\",\"index\":4,\"holder\":null,\"waiters\":0}],"
        "\"next_cursor\":\"b\"}";
    struct mxc_doc doc;
    struct mutexd_page p;
    assert_int_equal(mxc_doc_parse(&doc, body, strlen(body)), MUTEXD_OK);
    assert_int_equal(mxc_decode_page(&doc, doc.root, &p), MUTEXD_OK);
    assert_int_equal(p.count, 2);
    assert_string_equal(p.next_cursor, "b");
    struct mutexd_state *a = &p.resources[0], *b = &p.resources[1];
    assert_string_equal(a->resource, "a");
    assert_int_equal(a->held, 1);
    assert_true(a->index == 12345678901234567ULL);
    assert_string_equal(a->holder.owner, "o");
    assert_int_equal(a->holder.fencing_token, 3);
    assert_int_equal(a->holder.ttl_ms, 1000);
    assert_int_equal(a->holder.expires_in_ms, 900);
    assert_string_equal(a->holder.metadata, "{\"k\":1}");
    assert_int_equal(a->waiters, 2);
    assert_string_equal(a->json,
                        "{\"resource\":\"a\",\"state\":\"held\",\"index\":12345678901234567,"
                        "\"holder\":{\"owner\":\"o\",\"fencing_token\":3,\"ttl_ms\":1000,"
                        "\"expires_in_ms\":900,\"acquired_at\":\"t1\",\"renewed_at\":\"t2\","
                        "\"metadata\":{\"k\":1}},\"waiters\":2}");
    assert_int_equal(b->held, 0);
    assert_null(b->holder.owner);
    assert_int_equal(b->index, 4);
    mutexd_page_clear(&p);
    mxc_doc_free(&doc);

    static const char *const bad[] = {
        "{\"resource\":\"a\",\"state\":\"held\",\"index\":1,\"holder\":null,\"waiters\":0}",
        "{\"resource\":\"a\",\"state\":\"free\",\"index\":1,\"holder\":{},\"waiters\":0}",
        "{\"resource\":\"a\",\"state\":\"maybe\",\"index\":1,\"holder\":null,\"waiters\":0}",
        "{\"resource\":\"a\",\"state\":\"free\",\"holder\":null,\"waiters\":0}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct mutexd_state s;
        assert_int_equal(mxc_doc_parse(&doc, bad[i], strlen(bad[i])), MUTEXD_OK);
        if (mxc_decode_state(&doc, doc.root, &s) != MUTEXD_ERR_PROTOCOL)
            fail_msg("accepted: %s", bad[i]);
        mxc_doc_free(&doc);
    }
}

static void errors_decode_with_holder(void **state)
{
    (void)state;
    const char *body = "{\"error\":{\"code\":\"lease_held\",\"message\":\"held\","
                       "\"holder\":{\"owner\":\"w1\",\"fencing_token\":7,\"expires_in_ms\":99}}}";
    struct mxc_doc doc;
    struct mutexd_error e = {0};
    mutexd_error_clear(&e);
    assert_int_equal(mxc_doc_parse(&doc, body, strlen(body)), MUTEXD_OK);
    assert_int_equal(mxc_decode_error(&doc, doc.root, &e), MUTEXD_OK);
    assert_string_equal(e.code, "lease_held");
    assert_string_equal(e.message, "held");
    assert_null(e.field);
    assert_int_equal(e.has_holder, 1);
    assert_string_equal(e.holder.owner, "w1");
    assert_int_equal(e.holder.fencing_token, 7);
    assert_int_equal(e.holder.expires_in_ms, 99);
    assert_int_equal(e.holder.ttl_ms, -1);
    mutexd_error_clear(&e);
    mxc_doc_free(&doc);

    const char *nocode = "{\"error\":{\"message\":\"x\"}}";
    assert_int_equal(mxc_doc_parse(&doc, nocode, strlen(nocode)), MUTEXD_OK);
    assert_int_equal(mxc_decode_error(&doc, doc.root, &e), MUTEXD_ERR_PROTOCOL);
    assert_null(e.code);
    assert_null(e.message);
    mutexd_error_clear(&e);
    mxc_doc_free(&doc);
}

static int keep_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static void buffer_escapes_and_caps(void **state)
{
    (void)state;
    struct mxc_buf b;
    mxc_buf_init(&b, 1024);
    mxc_buf_json_string(&b, "a\"b\\c\nd\x01\xc3\xa9");
    mxc_buf_str(&b, " ");
    mxc_buf_url_encode(&b, "a b/%", keep_alnum);
    char *text = mxc_buf_take(&b);
    assert_string_equal(text, "\"a\\\"b\\\\c\\nd\\u0001\xc3\xa9\" a%20b%2F%25");
    free(text);

    mxc_buf_init(&b, 8);
    mxc_buf_str(&b, "12345678");
    assert_int_equal(mxc_buf_ok(&b), 0);
    mxc_buf_str(&b, "9");
    assert_int_equal(mxc_buf_ok(&b), -1);
    assert_int_equal(b.too_big, 1);
    mxc_buf_str(&b, ""); /* sticky */
    assert_null(mxc_buf_take(&b));

    mxc_buf_init(&b, 1 << 20);
    for (int i = 0; i < 1000; i++)
        mxc_buf_printf(&b, "%0200d", i);
    assert_int_equal(b.len, 200000);
    text = mxc_buf_take(&b);
    assert_int_equal(strlen(text), 200000);
    free(text);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(rewrite_quotes_big_integers_only),
    cmocka_unit_test(rewrite_keeps_metadata_text_as_sent),
    cmocka_unit_test(rewrite_refuses_broken_text),
    cmocka_unit_test(lease_decodes_exactly),
    cmocka_unit_test(lease_missing_or_mistyped_members_are_protocol_errors),
    cmocka_unit_test(states_and_pages_decode),
    cmocka_unit_test(errors_decode_with_holder),
    cmocka_unit_test(buffer_escapes_and_caps),
};
TEST_MAIN(tests)
