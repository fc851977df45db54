/*
 * The JSON writer of the HTTP answers (struct mx_jw): its text is what cJSON would print,
 * byte for byte, for every string byte, integers past 2^53, and nested objects and arrays.
 */
#include "tests/unit/testutil.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "common/json_out.h"

/* Every byte value 1..255 in a string, escaped exactly as cJSON escapes it. */
static void strings_are_escaped_as_cjson_escapes_them(void **state)
{
    (void)state;
    char all[256];
    for (int i = 1; i < 256; i++)
        all[i - 1] = (char)i;
    all[255] = '\0';

    struct mx_jw w = {0};
    mx_jw_object(&w);
    mx_jw_key(&w, "s");
    mx_jw_str(&w, all, 255);
    mx_jw_key(&w, "plain");
    mx_jw_cstr(&w, "host-a:51635");
    mx_jw_key(&w, "empty");
    mx_jw_str(&w, "", 0);
    mx_jw_object_end(&w);
    char *got = mx_jw_take(&w);
    assert_non_null(got);

    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "s", all);
    cJSON_AddStringToObject(o, "plain", "host-a:51635");
    cJSON_AddStringToObject(o, "empty", "");
    char *want = cJSON_PrintUnformatted(o);
    assert_string_equal(got, want);
    cJSON_free(want);
    cJSON_Delete(o);
    free(got);
}

/* Only the first `len` bytes of a string are written, even when more follow. */
static void a_string_is_cut_at_its_length(void **state)
{
    (void)state;
    struct mx_jw w = {0};
    mx_jw_array(&w);
    mx_jw_str(&w, "ab\"cd", 3);
    mx_jw_array_end(&w);
    char *got = mx_jw_take(&w);
    assert_string_equal(got, "[\"ab\\\"\"]");
    free(got);
}

static void numbers_booleans_null_raw_and_nesting(void **state)
{
    (void)state;
    struct mx_jw w = {0};
    mx_jw_object(&w);
    mx_jw_key(&w, "zero");
    mx_jw_u64(&w, 0);
    mx_jw_key(&w, "big");
    mx_jw_u64(&w, 18446744073709551615ull);
    mx_jw_key(&w, "past_2_53");
    mx_jw_u64(&w, 9007199254740993ull);
    mx_jw_key(&w, "list");
    mx_jw_array(&w);
    mx_jw_bool(&w, true);
    mx_jw_bool(&w, false);
    mx_jw_null(&w);
    mx_jw_object(&w);
    mx_jw_object_end(&w);
    mx_jw_array(&w);
    mx_jw_array_end(&w);
    mx_jw_object(&w);
    mx_jw_key(&w, "k");
    mx_jw_raw(&w, "{\"x\":[1,2]}", 11);
    mx_jw_object_end(&w);
    mx_jw_array_end(&w);
    mx_jw_key(&w, "after");
    mx_jw_u64(&w, 7);
    mx_jw_object_end(&w);
    char *got = mx_jw_take(&w);
    assert_string_equal(got, "{\"zero\":0,\"big\":18446744073709551615,"
                             "\"past_2_53\":9007199254740993,"
                             "\"list\":[true,false,null,{},[],{\"k\":{\"x\":[1,2]}}],\"after\":7}");
    free(got);

    /* The writer is empty again after a take: the next text starts afresh. */
    mx_jw_array(&w);
    mx_jw_array_end(&w);
    got = mx_jw_take(&w);
    assert_string_equal(got, "[]");
    free(got);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(strings_are_escaped_as_cjson_escapes_them),
    cmocka_unit_test(a_string_is_cut_at_its_length),
    cmocka_unit_test(numbers_booleans_null_raw_and_nesting),
};
MX_TEST_MAIN(tests)
