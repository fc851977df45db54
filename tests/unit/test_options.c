/*
 * Server options (server/options.c): every numeric flag and its environment variable take
 * their bounds and refuse one past each, text that is not a whole number, and a flag with
 * no value; a flag wins over its variable; the cross-option checks refuse what cannot
 * work. The option table is reached by including the file, as curl's unit tests reach
 * statics.
 */
#include "testutil.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/options.c"

static void clear_env(void)
{
    for (size_t i = 0; i < NDEFS; i++)
        unsetenv(defs[i].env);
    unsetenv("AZURE_STORAGE_CONNECTION_STRING");
    unsetenv("MUTEXD_FAULT_COMMIT");
}

/* options_parse on argv {"mutexd", args..., NULL}: its result and the options. */
static int parse(struct options *o, int n, const char **args)
{
    char *argv[8] = {"mutexd"};
    assert_true(n < 7);
    for (int i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];
    optind = 0; /* getopt starts afresh */
    return options_parse(o, n + 1, argv);
}

static uint64_t field(const struct options *o, const struct def *d)
{
    return *(const uint64_t *)((const char *)o + d->offset);
}

/* One numeric option set to `value`, by flag or by its variable: parses, or not. */
static int set(const struct def *d, bool by_env, const char *value, struct options *o)
{
    clear_env();
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", d->flag);
    const char *args[2] = {flag, value};
    if (by_env) {
        setenv(d->env, value, 1);
        return parse(o, 0, args);
    }
    return parse(o, 2, args);
}

/* The cross-option checks tie min-ttl to max-ttl: keep the other one out of the way. */
static bool needs_room(const struct def *d)
{
    return d->offset == OFF(min_ttl_ms) || d->offset == OFF(max_ttl_ms);
}

static void every_numeric_option_takes_its_bounds_and_refuses_past_them(void **state)
{
    (void)state;
    size_t checked = 0;
    for (size_t i = 0; i < NDEFS; i++) {
        const struct def *d = &defs[i];
        if (d->type != T_U64)
            continue;
        for (int by_env = 0; by_env <= 1; by_env++) {
            struct options o;
            char v[32];
            if (!needs_room(d)) {
                snprintf(v, sizeof v, "%" PRIu64, d->min);
                assert_int_equal(set(d, by_env, v, &o), -1);
                assert_int_equal(field(&o, d), d->min);
                snprintf(v, sizeof v, "%" PRIu64, d->max);
                assert_int_equal(set(d, by_env, v, &o), -1);
                assert_int_equal(field(&o, d), d->max);
            }
            if (d->min > 0) {
                snprintf(v, sizeof v, "%" PRIu64, d->min - 1);
                assert_int_equal(set(d, by_env, v, &o), 2);
            }
            snprintf(v, sizeof v, "%" PRIu64, d->max + 1);
            assert_int_equal(set(d, by_env, v, &o), 2);
            /* Digits only; an empty variable is one that is not set. */
            const char *bad[] = {"-1", "12x", "1e3", " 5", "+5", "0x10", "99999999999999999999999",
                                 ""};
            for (size_t b = 0; b < sizeof bad / sizeof bad[0] - (size_t)by_env; b++)
                assert_int_equal(set(d, by_env, bad[b], &o), 2);
        }
        checked++;
    }
    assert_true(checked >= 12);
    clear_env();
}

static void a_flag_wins_over_its_variable_and_needs_a_value(void **state)
{
    (void)state;
    struct options o;
    clear_env();
    setenv("MUTEXD_MAX_WAITERS", "7", 1);
    const char *args[] = {"--max-waiters", "9"};
    assert_int_equal(parse(&o, 2, args), -1);
    assert_int_equal(o.max_waiters, 9);
    assert_int_equal(parse(&o, 0, args), -1);
    assert_int_equal(o.max_waiters, 7);
    clear_env();
    assert_int_equal(parse(&o, 0, args), -1);
    assert_int_equal(o.max_waiters, 1024); /* the default */
    const char *none[] = {"--max-waiters"};
    assert_int_equal(parse(&o, 1, none), 2);
    const char *unknown[] = {"--max-waiterz", "3"};
    assert_int_equal(parse(&o, 2, unknown), 2);
    const char *extra[] = {"stray"};
    assert_int_equal(parse(&o, 1, extra), 2);
}

static void cross_option_checks_refuse_what_cannot_work(void **state)
{
    (void)state;
    struct options o;
    clear_env();
    const char *ttl[] = {"--min-ttl-ms", "5000", "--max-ttl-ms", "4000"};
    assert_int_equal(parse(&o, 4, ttl), 2);
    const char *ttl_ok[] = {"--min-ttl-ms", "4000", "--max-ttl-ms", "4000"};
    assert_int_equal(parse(&o, 4, ttl_ok), -1);
    assert_int_equal(o.restore_grace_ms, 4000); /* the maximum TTL by default */
    const char *port[] = {"--listen", "127.0.0.1:65536"};
    assert_int_equal(parse(&o, 2, port), 2);
    const char *noport[] = {"--listen", "8090"};
    assert_int_equal(parse(&o, 2, noport), 2);
    const char *container[] = {"--blob-container", "Bad_Name"};
    assert_int_equal(parse(&o, 2, container), 2);
    const char *origin[] = {"--allowed-origins", "evil.example"};
    assert_int_equal(parse(&o, 2, origin), 2);
    const char *level[] = {"--log-level", "loud"};
    assert_int_equal(parse(&o, 2, level), 2);
    const char *missing[] = {"--tls-cert", "/nonexistent/cert.pem"};
    assert_int_equal(parse(&o, 2, missing), 2);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_numeric_option_takes_its_bounds_and_refuses_past_them),
    cmocka_unit_test(a_flag_wins_over_its_variable_and_needs_a_value),
    cmocka_unit_test(cross_option_checks_refuse_what_cannot_work),
};
MX_TEST_MAIN(tests)
