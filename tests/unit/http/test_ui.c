/* The dashboard's files (http/ui.c and the table generated from ui/): every file is there
 * under /ui/ with a type and a strong ETag, /ui/ is index.html, If-None-Match is read as
 * RFC 9110 says, and the security headers forbid what the contract forbids. */
#include "tests/unit/testutil.h"

#include <string.h>

#include "http/ui.h"

static void every_file_has_a_path_a_type_and_a_strong_etag(void **st)
{
    (void)st;
    assert_true(ui_assets_count >= 4); /* index.html, app.css, app.js and its modules */
    for (size_t i = 0; i < ui_assets_count; i++) {
        const struct ui_asset *a = &ui_assets[i];
        assert_int_equal(strncmp(a->path, "/ui/", 4), 0);
        assert_non_null(a->type);
        assert_true(a->len > 0);
        /* A quoted hash, 32 hex digits: strong (no W/), and the same bytes give the same tag. */
        assert_int_equal(strlen(a->etag), 34);
        assert_int_equal(a->etag[0], '"');
        assert_int_equal(a->etag[33], '"');
        assert_int_equal(strspn(a->etag + 1, "0123456789abcdef"), 32);
        assert_ptr_equal(ui_find(a->path), a);
        for (size_t j = 0; j < i; j++) {
            assert_string_not_equal(ui_assets[j].path, a->path);
            if (ui_assets[j].len != a->len || memcmp(ui_assets[j].data, a->data, a->len) != 0)
                assert_string_not_equal(ui_assets[j].etag, a->etag);
        }
    }
}

static void types_follow_the_extension(void **st)
{
    (void)st;
    const struct ui_asset *html = ui_find("/ui/index.html");
    assert_non_null(html);
    assert_string_equal(html->type, "text/html; charset=utf-8");
    assert_ptr_equal(ui_find("/ui/"), html);
    assert_string_equal(ui_find("/ui/app.js")->type, "text/javascript; charset=utf-8");
    assert_string_equal(ui_find("/ui/app.css")->type, "text/css; charset=utf-8");
    assert_string_equal(ui_find("/ui/icon.svg")->type, "image/svg+xml");
    /* The bytes are the file's: the page starts as HTML does. */
    assert_int_equal(memcmp(html->data, "<!doctype html>", 15), 0);
}

static void only_the_tables_paths_are_found(void **st)
{
    (void)st;
    const char *none[] = {
        "/ui",         "/ui/nope.js", "/ui//app.js", "/ui/./app.js",     "/ui/../ui/app.js",
        "/ui/app.js/", "/UI/app.js",  "/app.js",     "/ui/index.html?x", "/ui/APP.JS"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (ui_find(none[i]))
            fail_msg("%s was found", none[i]);
    assert_true(ui_is_path("/ui"));
    assert_true(ui_is_path("/ui/"));
    assert_true(ui_is_path("/ui/x/y"));
    assert_false(ui_is_path("/uix"));
    assert_false(ui_is_path("/v1/ui"));
}

static void if_none_match_is_a_weak_comparison_of_a_list(void **st)
{
    (void)st;
    const char *tag = "\"0123\"";
    assert_true(ui_etag_matches("\"0123\"", tag));
    assert_true(ui_etag_matches("W/\"0123\"", tag));
    assert_true(ui_etag_matches("\"aa\", \"0123\"", tag));
    assert_true(ui_etag_matches("\"aa\",W/\"0123\"", tag));
    assert_true(ui_etag_matches("*", tag));
    assert_false(ui_etag_matches("\"012\"", tag));
    assert_false(ui_etag_matches("\"01234\"", tag));
    assert_false(ui_etag_matches("0123", tag)); /* not a quoted tag */
    assert_false(ui_etag_matches("\"0123", tag));
    assert_false(ui_etag_matches("", tag));
    assert_false(ui_etag_matches(NULL, tag));
}

static const char *header(const char *name)
{
    for (const struct ui_header *h = ui_security_headers; h->name; h++)
        if (strcmp(h->name, name) == 0)
            return h->value;
    return NULL;
}

static void security_headers_allow_only_the_pages_own_files(void **st)
{
    (void)st;
    const char *csp = header("Content-Security-Policy");
    assert_non_null(csp);
    assert_int_equal(strncmp(csp, "default-src 'self';", 19), 0);
    const char *want[] = {"script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'",
                          "base-uri 'none'",   "form-action 'self'", "object-src 'none'"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(csp, want[i]))
            fail_msg("the CSP lacks %s", want[i]);
    assert_null(strstr(csp, "unsafe"));
    assert_null(strstr(csp, "nonce"));
    assert_null(strstr(csp, "http"));
    assert_string_equal(header("X-Frame-Options"), "DENY");
    assert_string_equal(header("X-Content-Type-Options"), "nosniff");
    assert_string_equal(header("Referrer-Policy"), "no-referrer");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_file_has_a_path_a_type_and_a_strong_etag),
    cmocka_unit_test(types_follow_the_extension),
    cmocka_unit_test(only_the_tables_paths_are_found),
    cmocka_unit_test(if_none_match_is_a_weak_comparison_of_a_list),
    cmocka_unit_test(security_headers_allow_only_the_pages_own_files),
};
MX_TEST_MAIN(tests)
