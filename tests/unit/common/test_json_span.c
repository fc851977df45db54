/* Raw spans of values in valid JSON, and compaction. */
#include "tests/unit/testutil.h"

#include <string.h>

#include "common/json_span.h"

static void member_values(void **st)
{
    (void)st;
    const char *j =
        " { \"a\" : 1 , \"m\\\"x\":{\"k\":[1,{\"q\":\"}]\\\"\"}],\"n\":9007199254740993},"
        "\"s\":\"x,y}\",\"t\":true,\"e\":1e2 } ";
    const char *v;
    size_t n;
    assert_true(json_member_value(j, strlen(j), 0, &v, &n));
    assert_int_equal(n, 1);
    assert_memory_equal(v, "1", 1);
    assert_true(json_member_value(j, strlen(j), 1, &v, &n));
    const char *want = "{\"k\":[1,{\"q\":\"}]\\\"\"}],\"n\":9007199254740993}";
    assert_int_equal(n, strlen(want));
    assert_memory_equal(v, want, n);
    assert_true(json_member_value(j, strlen(j), 2, &v, &n));
    assert_memory_equal(v, "\"x,y}\"", n);
    assert_true(json_member_value(j, strlen(j), 4, &v, &n));
    assert_memory_equal(v, "1e2", n);
    assert_false(json_member_value(j, strlen(j), 5, &v, &n));
    assert_false(json_member_value("[1]", 3, 0, &v, &n));
    assert_false(json_member_value("{}", 2, 0, &v, &n));
}

static void element_values(void **st)
{
    (void)st;
    const char *j = " [ {\"a\": [1, \"]\"]} , 9007199254740993,\"x,y\" ] ";
    const char *v;
    size_t n;
    assert_true(json_element_value(j, strlen(j), 0, &v, &n));
    assert_int_equal(n, strlen("{\"a\": [1, \"]\"]}"));
    assert_memory_equal(v, "{\"a\": [1, \"]\"]}", n);
    assert_true(json_element_value(j, strlen(j), 1, &v, &n));
    assert_memory_equal(v, "9007199254740993", n); /* the text, not a double */
    assert_true(json_element_value(j, strlen(j), 2, &v, &n));
    assert_memory_equal(v, "\"x,y\"", n);
    assert_false(json_element_value(j, strlen(j), 3, &v, &n));
    assert_false(json_element_value("[]", 2, 0, &v, &n));
    assert_false(json_element_value("{}", 2, 0, &v, &n));
}

static void compaction_keeps_strings(void **st)
{
    (void)st;
    const char *in = "{ \"a b\" : [ 1 , 2.50 , \" x \\\" y \" ] ,\n\t\"c\":1E+2 }";
    char out[128];
    size_t n = json_compact(in, strlen(in), out);
    out[n] = '\0';
    assert_string_equal(out, "{\"a b\":[1,2.50,\" x \\\" y \"],\"c\":1E+2}");
}

static const char *flaw(const char *s)
{
    return json_text_flaw(s, strlen(s));
}

static void flaws_cjson_would_let_through(void **st)
{
    (void)st;
    assert_null(flaw("{ \"a\" :\t[1,\r\n2] }"));
    assert_null(flaw("{\"a\":\"\\u0001 \\\\u0000\"}")); /* escapes, and a plain backslash */
    assert_string_equal(flaw("{\"a\":\x1d{}}"), "a raw control character");
    assert_string_equal(flaw("\x01{}"), "a raw control character");
    assert_string_equal(flaw("{\"a\":\"x\ty\"}"), "a raw control character"); /* in a string */
    assert_string_equal(flaw("{\"a\":\"x\ny\"}"), "a raw control character");
    assert_string_equal(flaw("{\"a\":\"x\\u0000\"}"), "a NUL character");
    assert_string_equal(json_text_flaw("{\"a\":\"\0\"}", 7), "a NUL character");
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(member_values),
    cmocka_unit_test(element_values),
    cmocka_unit_test(compaction_keeps_strings),
    cmocka_unit_test(flaws_cjson_would_let_through),
};
MX_TEST_MAIN(tests)
