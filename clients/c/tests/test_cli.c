/*
 * Unit tests of mutexctl's parsing helpers: durations, numbers, the command line, the exit
 * status of each library result, and the names of a set in a message.
 */
#include "testing.h"

#include "mutexctl_cli.h"

static void durations_accept_units_and_plain_milliseconds(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int64_t ms;
    } good[] = {
        {"500ms", 500},
        {"15s", 15000},
        {"2m", 120000},
        {"1h", 3600000},
        {"1500", 1500},
        {"0", 0},
        {"0s", 0},
        {"007s", 7000},
        {"86400000", 86400000},
        {"999999999999999999", 999999999999999999LL},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int64_t ms = -1;
        assert_int_equal(mxctl_parse_duration(good[i].text, &ms), 0);
        assert_int_equal(ms, good[i].ms);
    }
}

static void durations_refuse_anything_else(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "s",
        "ms",
        "-1",
        "-5s",
        "1.5s",
        "15 s",
        " 15s",
        "15s ",
        "15S",
        "15sec",
        "1d",
        "1m1s",
        "abc",
        "0x10",
        "+5",
        "9999999999999999999",
        "999999999999999999h",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ms = 42;
        if (mxctl_parse_duration(bad[i], &ms) != -1)
            fail_msg("'%s' was accepted as %lld ms", bad[i], (long long)ms);
        assert_int_equal(ms, 42);
    }
    int64_t ms;
    assert_int_equal(mxctl_parse_duration(NULL, &ms), -1);
}

static void numbers_are_whole_and_in_range(void **state)
{
    (void)state;
    int64_t v;
    uint64_t u;
    assert_int_equal(mxctl_parse_int("1000", 1, 1000, &v), 0);
    assert_int_equal(v, 1000);
    assert_int_equal(mxctl_parse_int("-3", -5, 5, &v), 0);
    assert_int_equal(v, -3);
    assert_int_equal(mxctl_parse_int("1001", 1, 1000, &v), -1);
    assert_int_equal(mxctl_parse_int("0", 1, 1000, &v), -1);
    assert_int_equal(mxctl_parse_int("", 1, 1000, &v), -1);
    assert_int_equal(mxctl_parse_int("12a", 1, 1000, &v), -1);
    assert_int_equal(mxctl_parse_int("99999999999999999999", 0, INT64_MAX, &v), -1);
    assert_int_equal(mxctl_parse_u64("18446744073709551615", &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(mxctl_parse_u64("18446744073709551616", &u), -1);
    assert_int_equal(mxctl_parse_u64("-1", &u), -1);
    assert_int_equal(mxctl_parse_u64("", &u), -1);
}

/* The options of `run`, as mutexctl builds them: global ones and the command's. */
static struct mxctl_opt *run_opts(size_t *n)
{
    static struct mxctl_opt opts[] = {
        {"--server", 1, NULL}, {"--json", 0, NULL}, {"--help", 0, NULL},
        {"--ttl", 1, NULL},    {"--wait", 1, NULL}, {"--owner", 1, NULL},
    };
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
        opts[i].value = NULL;
    *n = sizeof(opts) / sizeof(opts[0]);
    return opts;
}

static void options_take_values_in_both_forms_anywhere(void **state)
{
    (void)state;
    size_t n;
    struct mxctl_opt *o = run_opts(&n);
    char *argv[] = {"--json", "res", "--ttl", "2s", "--wait=500ms", "--owner=", "--ttl", "3s"};
    struct mxctl_args a;
    char err[128] = "";
    assert_int_equal(mxctl_parse_args(8, argv, o, n, 1, 0, &a, err, sizeof(err)), 0);
    assert_int_equal(a.npositional, 1);
    assert_string_equal(a.positional[0], "res");
    assert_string_equal(mxctl_opt(o, n, "--json"), "");
    assert_string_equal(mxctl_opt(o, n, "--ttl"), "3s"); /* the last one counts */
    assert_string_equal(mxctl_opt(o, n, "--wait"), "500ms");
    assert_string_equal(mxctl_opt(o, n, "--owner"), "");
    assert_null(mxctl_opt(o, n, "--server"));
    assert_null(a.rest);
}

static void options_report_mistakes(void **state)
{
    (void)state;
    size_t n;
    struct mxctl_args a;
    char err[128];
    struct {
        int argc;
        char *argv[3];
        const char *message;
    } cases[] = {
        {1, {"--nope"}, "unknown option --nope"},
        {1, {"--ttl"}, "--ttl needs a value"},
        {1, {"--json=yes"}, "--json takes no value"},
        {2, {"a", "b"}, "unexpected argument 'b'"},
        {1, {"-x"}, "unknown option -x"},
        {1, {"--tt=1"}, "unknown option --tt"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mxctl_opt *o = run_opts(&n);
        err[0] = '\0';
        assert_int_equal(
            mxctl_parse_args(cases[i].argc, cases[i].argv, o, n, 1, 0, &a, err, sizeof(err)), -1);
        assert_string_equal(err, cases[i].message);
    }
}

static void dash_h_is_help_and_dashdash_ends_options(void **state)
{
    (void)state;
    size_t n;
    struct mxctl_opt *o = run_opts(&n);
    struct mxctl_args a;
    char err[128];
    char *argv[] = {"-h", "--", "--json"};
    assert_int_equal(mxctl_parse_args(3, argv, o, n, 1, 0, &a, err, sizeof(err)), 0);
    assert_non_null(mxctl_opt(o, n, "--help"));
    assert_null(mxctl_opt(o, n, "--json")); /* after "--": a positional */
    assert_int_equal(a.npositional, 1);
    assert_string_equal(a.positional[0], "--json");
}

static void run_keeps_the_command_after_dashdash_untouched(void **state)
{
    (void)state;
    size_t n;
    struct mxctl_opt *o = run_opts(&n);
    struct mxctl_args a;
    char err[128];
    char *argv[] = {"res", "--ttl", "1s", "--", "sh", "-c", "exit 3", "--json"};
    assert_int_equal(mxctl_parse_args(8, argv, o, n, 1, 1, &a, err, sizeof(err)), 0);
    assert_string_equal(mxctl_opt(o, n, "--ttl"), "1s");
    assert_null(mxctl_opt(o, n, "--json"));
    assert_int_equal(a.nrest, 4);
    assert_string_equal(a.rest[0], "sh");
    assert_string_equal(a.rest[3], "--json");
}

static void run_without_dashdash_starts_the_command_at_its_first_word(void **state)
{
    (void)state;
    size_t n;
    struct mxctl_opt *o = run_opts(&n);
    struct mxctl_args a;
    char err[128];
    char *argv[] = {"--wait", "2s", "res", "make", "--ttl", "x"};
    assert_int_equal(mxctl_parse_args(6, argv, o, n, 1, 1, &a, err, sizeof(err)), 0);
    assert_string_equal(mxctl_opt(o, n, "--wait"), "2s");
    assert_null(mxctl_opt(o, n, "--ttl")); /* the command's own option */
    assert_int_equal(a.nrest, 3);
    assert_string_equal(a.rest[0], "make");

    o = run_opts(&n);
    char *none[] = {"res", "--"};
    assert_int_equal(mxctl_parse_args(2, none, o, n, 1, 1, &a, err, sizeof(err)), 0);
    assert_int_equal(a.nrest, 0);
}

/* --resource of run may be given several times: every value is kept, in order; other
 * options keep their last value. */
static void a_repeated_option_keeps_every_value(void **state)
{
    (void)state;
    struct mxctl_opt o[] = {{"--ttl", 1, NULL}, {"--resource", MXCTL_REPEATED, NULL}};
    struct mxctl_args a;
    char err[128];
    char *argv[] = {"--resource", "a", "--ttl", "1s", "--resource=b", "--ttl", "2s",
                    "--resource", "c", "--",    "sh", "--resource",   "d"};
    assert_int_equal(mxctl_parse_args(13, argv, o, 2, 1, 1, &a, err, sizeof(err)), 0);
    assert_int_equal(a.nvalues, 3);
    assert_string_equal(a.values[0], "a");
    assert_string_equal(a.values[1], "b");
    assert_string_equal(a.values[2], "c");
    assert_string_equal(mxctl_opt(o, 2, "--ttl"), "2s");
    assert_int_equal(a.npositional, 0);
    assert_int_equal(a.nrest, 3); /* the command's own words are left alone */

    char *many[2 * MXCTL_MAX_VALUES + 2];
    for (int i = 0; i < MXCTL_MAX_VALUES + 1; i++) {
        many[2 * i] = "--resource";
        many[2 * i + 1] = "r";
    }
    assert_int_equal(mxctl_parse_args(2 * MXCTL_MAX_VALUES, many, o, 2, 1, 1, &a, err, sizeof(err)),
                     0);
    assert_int_equal(a.nvalues, MXCTL_MAX_VALUES);
    assert_int_equal(
        mxctl_parse_args(2 * MXCTL_MAX_VALUES + 2, many, o, 2, 1, 1, &a, err, sizeof(err)), -1);
    assert_string_equal(err, "--resource is given more than 64 times");
}

static void exit_statuses_follow_the_documented_table(void **state)
{
    (void)state;
    struct mutexd_error e = {0};
    assert_int_equal(mxctl_exit_status(MUTEXD_OK, &e), 0);
    assert_int_equal(mxctl_exit_status(MUTEXD_HELD, &e), 1);
    assert_int_equal(mxctl_exit_status(MUTEXD_LOST, &e), 1);
    assert_int_equal(mxctl_exit_status(MUTEXD_ERR_ARG, &e), 2);
    e.status = 400;
    assert_int_equal(mxctl_exit_status(MUTEXD_ERR_API, &e), 2);
    e.status = 413;
    assert_int_equal(mxctl_exit_status(MUTEXD_ERR_API, &e), 2);
    static const int other[] = {401, 403, 404, 405, 415, 429, 500, 503};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        e.status = other[i];
        assert_int_equal(mxctl_exit_status(MUTEXD_ERR_API, &e), 3);
    }
    assert_int_equal(mxctl_exit_status(MUTEXD_ERR_TRANSPORT, &e), 3);
    assert_int_equal(mxctl_exit_status(MUTEXD_ERR_PROTOCOL, &e), 3);
    assert_int_equal(mxctl_exit_status(MUTEXD_ERR_NOMEM, &e), 3);
    /* A semaphore held under another limit: retrying the same command will not help. */
    e.status = 409;
    assert_int_equal(mxctl_exit_status(MUTEXD_ERR_LIMIT_MISMATCH, &e), 3);
}

/* The names in messages about a set: those the error's answer names, else all of them. */
static void messages_name_the_resources_an_error_names(void **state)
{
    (void)state;
    const char *set[] = {"a", "b", "c"};
    char *text = mxctl_join_names(set, 3);
    assert_string_equal(text, "a, b, c");
    free(text);
    text = mxctl_join_names(set, 0);
    assert_string_equal(text, "");
    free(text);

    char body[] = "{\"error\":{\"code\":\"lease_lost\",\"resources\":[\"b\",\"c\"]}}";
    struct mutexd_error e = {.status = 409, .body = body};
    text = mxctl_error_names(&e, set, 3);
    assert_string_equal(text, "b, c");
    free(text);
    e.body = NULL; /* no answer: the whole set */
    text = mxctl_error_names(&e, set, 3);
    assert_string_equal(text, "a, b, c");
    free(text);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(durations_accept_units_and_plain_milliseconds),
    cmocka_unit_test(durations_refuse_anything_else),
    cmocka_unit_test(numbers_are_whole_and_in_range),
    cmocka_unit_test(options_take_values_in_both_forms_anywhere),
    cmocka_unit_test(options_report_mistakes),
    cmocka_unit_test(dash_h_is_help_and_dashdash_ends_options),
    cmocka_unit_test(run_keeps_the_command_after_dashdash_untouched),
    cmocka_unit_test(run_without_dashdash_starts_the_command_at_its_first_word),
    cmocka_unit_test(a_repeated_option_keeps_every_value),
    cmocka_unit_test(exit_statuses_follow_the_documented_table),
    cmocka_unit_test(messages_name_the_resources_an_error_names),
};
TEST_MAIN(tests)
