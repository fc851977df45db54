/* Raw spans of values in valid JSON, and compaction. */
#include "testutil.h"

#include <string.h>

#include "common/json_span.h"

static void member_values(void **st)
{
    (void)st;
    const char *j = " { \"a\" : 1 , \"m\\\"x\":{\"k\":[1,{\"q\":\"}]\\\"\"}],\"n\":9007199254740993},"
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

static void compaction_keeps_strings(void **st)
{
    (void)st;
    const char *in = "{ \"a b\" : [ 1 , 2.50 , \" x \\\" y \" ] ,\n\t\"c\":1E+2 }";
    char out[128];
    size_t n = json_compact(in, strlen(in), out);
    out[n] = '\0';
    assert_string_equal(out, "{\"a b\":[1,2.50,\" x \\\" y \"],\"c\":1E+2}");
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(member_values),
    cmocka_unit_test(compaction_keeps_strings),
};
MX_TEST_MAIN(tests)
