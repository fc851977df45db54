/*
 * Server options (server/options.c): every numeric flag and its environment variable take
 * their bounds and refuse one past each, text that is not a whole number, and a flag with
 * no value; a flag wins over its variable; the cross-option checks refuse what cannot
 * work. The checks run over the whole option table (options_table()).
 */
#include "tests/unit/testutil.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/options.h"

#define OFF(f) offsetof(struct options, f)

static const struct option_def *defs;
static size_t NDEFS;

__attribute__((constructor)) static void load_table(void)
{
    defs = options_table(&NDEFS);
}

static void clear_env(void)
{
    for (size_t i = 0; i < NDEFS; i++)
        unsetenv(defs[i].env);
    unsetenv("AZURE_STORAGE_CONNECTION_STRING");
    unsetenv("MUTEXD_FAULT_COMMIT");
    unsetenv("MUTEXD_FAULT_ROLE");
    unsetenv("MUTEXD_FAULT_ROLE_AFTER_MS");
    unsetenv("MUTEXD_FAULT_SERVED_BY");
}

/* options_parse on argv {"mutexd", args..., NULL}: its result and the options. */
static int parse(struct options *o, int n, const char **args)
{
    char *argv[12] = {"mutexd"};
    assert_true(n < 11);
    for (int i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];
    optind = 0; /* getopt starts afresh */
    return options_parse(o, n + 1, argv);
}

static uint64_t field(const struct options *o, const struct option_def *d)
{
    return *(const uint64_t *)((const char *)o + d->offset);
}

/* One numeric option set to `value`, by flag or by its variable: parses, or not. */
static int set(const struct option_def *d, bool by_env, const char *value, struct options *o)
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

/* The cross-option checks tie min-ttl to max-ttl, and --partitions above 1 to --ha: their
 * values in range are checked elsewhere. */
static bool needs_room(const struct option_def *d)
{
    return d->offset == OFF(min_ttl_ms) || d->offset == OFF(max_ttl_ms) ||
           d->offset == OFF(partitions);
}

static void every_numeric_option_takes_its_bounds_and_refuses_past_them(void **state)
{
    (void)state;
    size_t checked = 0;
    for (size_t i = 0; i < NDEFS; i++) {
        const struct option_def *d = &defs[i];
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

/* The defaults and bounds of the group's options, as docs/api.md states them ("Servers"). */
static void group_options_have_the_contracts_defaults(void **state)
{
    (void)state;
    struct options o;
    clear_env();
    const char *none[] = {"--listen", "127.0.0.1:0"};
    assert_int_equal(parse(&o, 2, none), -1);
    assert_false(o.ha);
    assert_null(o.advertise_url);
    assert_int_equal(o.failover_after_ms, 3000);
    assert_int_equal(o.failover_grace_ms, 15000);
    assert_int_equal(o.forward_timeout_ms, 10000);
    static const struct {
        const char *flag;
        uint64_t min, max;
    } bounds[] = {
        {"failover-after-ms", 500, 600000},
        {"failover-grace-ms", 0, 3600000},
        {"forward-timeout-ms", 100, 600000},
    };
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        const struct option_def *d = NULL;
        for (size_t k = 0; k < NDEFS; k++)
            if (strcmp(defs[k].flag, bounds[i].flag) == 0)
                d = &defs[k];
        assert_non_null(d);
        assert_int_equal(d->min, bounds[i].min);
        assert_int_equal(d->max, bounds[i].max);
    }
}

static void ha_is_a_flag_without_a_value_and_its_variable_is_1_or_0(void **state)
{
    (void)state;
    struct options o;
    const char *group[] = {
        "--blob-connection-string", "UseDevelopmentStorage=true", "--mirror", "sync",
        "--advertise-url",          "http://127.0.0.1:8081",      "--ha"};
    clear_env();
    assert_int_equal(parse(&o, 7, group), -1);
    assert_true(o.ha);
    assert_string_equal(o.advertise_url, "http://127.0.0.1:8081");
    setenv("MUTEXD_HA", "1", 1);
    assert_int_equal(parse(&o, 6, group), -1);
    assert_true(o.ha);
    setenv("MUTEXD_HA", "0", 1);
    assert_int_equal(parse(&o, 6, group), -1);
    assert_false(o.ha);
    assert_int_equal(parse(&o, 7, group), -1); /* the flag wins */
    assert_true(o.ha);
    const char *bad[] = {"yes", "true", "2", " 1", "10"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("MUTEXD_HA", bad[i], 1);
        assert_int_equal(parse(&o, 6, group), 2);
    }
    clear_env();
    const char *with_value[] = {"--ha=1"};
    assert_int_equal(parse(&o, 1, with_value), 2);
}

static void ha_refuses_to_start_without_what_it_needs(void **state)
{
    (void)state;
    struct options o;
    clear_env();
    const char *alone[] = {"--ha"};
    assert_int_equal(parse(&o, 1, alone), 2);
    const char *no_url[] = {"--ha", "--blob-connection-string", "UseDevelopmentStorage=true",
                            "--mirror", "sync"};
    assert_int_equal(parse(&o, 5, no_url), 2);
    const char *async[] = {
        "--ha",  "--blob-connection-string", "UseDevelopmentStorage=true", "--mirror",
        "async", "--advertise-url",          "http://127.0.0.1:8081"};
    assert_int_equal(parse(&o, 7, async), 2);
    const char *no_blob[] = {"--ha", "--advertise-url", "http://127.0.0.1:8081"};
    assert_int_equal(parse(&o, 3, no_blob), 2);
    /* Without --ha the URL is only checked. */
    assert_int_equal(parse(&o, 2, no_blob + 1), -1);
    assert_false(o.ha);
}

static void advertise_url_is_http_or_https_with_a_host_and_a_port(void **state)
{
    (void)state;
    struct options o;
    const char *good[] = {"http://127.0.0.1:8081", "https://mutexd-a.example:443",
                          "http://[::1]:8081", "http://host-a:1/", "https://a:65535"};
    const char *bad[] = {"127.0.0.1:8081",  "http://127.0.0.1",     "ftp://a:21",
                         "http://:8081",    "http://a:0",           "http://a:65536",
                         "http://a:80/v1",  "http://a:80?x",        "http://a b:80",
                         "http://a:8x",     "https://[::1]",        "http://user@a:80",
                         "http://a:123456", "HTTP://a:80 trailing", ""};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        clear_env();
        const char *args[] = {"--advertise-url", good[i]};
        assert_int_equal(parse(&o, 2, args), -1);
        assert_string_equal(o.advertise_url, good[i]);
        setenv("MUTEXD_ADVERTISE_URL", good[i], 1);
        assert_int_equal(parse(&o, 0, args), -1);
        assert_string_equal(o.advertise_url, good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clear_env();
        const char *args[] = {"--advertise-url", bad[i]};
        assert_int_equal(parse(&o, 2, args), 2);
        if (*bad[i]) {
            setenv("MUTEXD_ADVERTISE_URL", bad[i], 1);
            assert_int_equal(parse(&o, 0, args), 2);
        }
    }
    clear_env();
}

static void the_role_seam_is_checked(void **state)
{
    (void)state;
    struct options o;
    const char *none[] = {"--listen", "127.0.0.1:0"};
    clear_env();
    setenv("MUTEXD_FAULT_ROLE", "forward:http://127.0.0.1:9", 1);
    setenv("MUTEXD_FAULT_ROLE_AFTER_MS", "250:serve", 1);
    assert_int_equal(parse(&o, 2, none), -1);
    assert_string_equal(o.fault_role, "forward:http://127.0.0.1:9");
    assert_int_equal(o.fault_role_after_ms, 250);
    assert_string_equal(o.fault_role_after, "serve");
    const char *roles[] = {"forward:", "forward:127.0.0.1:9", "standby", "hold "};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        clear_env();
        setenv("MUTEXD_FAULT_ROLE", roles[i], 1);
        assert_int_equal(parse(&o, 2, none), 2);
    }
    const char *afters[] = {"hold", "x:hold", "100", "100:", "100:bogus", "-1:hold"};
    for (size_t i = 0; i < sizeof afters / sizeof afters[0]; i++) {
        clear_env();
        setenv("MUTEXD_FAULT_ROLE_AFTER_MS", afters[i], 1);
        assert_int_equal(parse(&o, 2, none), 2);
    }
    clear_env();
}

/* Without --threads the actors get a thread per core and HTTP one fewer (the store's writer
 * keeps a core busy under load); with it, both pools take the number given. */
static void threads_default_to_the_cores_and_one_fewer_for_http(void **state)
{
    (void)state;
    struct options o;
    const char *none[] = {"--listen", "127.0.0.1:0"};
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t cores = n > 0 ? (uint64_t)n : 1;
    clear_env();
    assert_int_equal(parse(&o, 2, none), -1);
    assert_int_equal(o.threads, cores);
    assert_int_equal(o.http_threads, cores > 1 ? cores - 1 : 1);
    const char *three[] = {"--threads", "3"};
    assert_int_equal(parse(&o, 2, three), -1);
    assert_int_equal(o.threads, 3);
    assert_int_equal(o.http_threads, 3);
    setenv("MUTEXD_THREADS", "1", 1);
    assert_int_equal(parse(&o, 2, none), -1);
    assert_int_equal(o.threads, 1);
    assert_int_equal(o.http_threads, 1);
    clear_env();
}

int main(int argc, char **argv);
/* --ui on|off: on by default; the variable takes the same words; anything else is refused. */
static void ui_is_on_by_default_and_takes_on_or_off(void **state)
{
    (void)state;
    struct options o;
    clear_env();
    const char *none[] = {"--listen", "127.0.0.1:0"};
    assert_int_equal(parse(&o, 2, none), -1);
    assert_true(o.ui);
    const char *off[] = {"--ui", "off"};
    assert_int_equal(parse(&o, 2, off), -1);
    assert_false(o.ui);
    setenv("MUTEXD_UI", "off", 1);
    assert_int_equal(parse(&o, 0, none), -1);
    assert_false(o.ui);
    const char *on[] = {"--ui", "on"}; /* the flag wins */
    assert_int_equal(parse(&o, 2, on), -1);
    assert_true(o.ui);
    clear_env();
    const char *bad[][2] = {{"--ui", "yes"}, {"--ui", "1"}, {"--ui", "ON"}, {"--ui", "of"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(parse(&o, 2, bad[i]), 2);
    setenv("MUTEXD_UI", "0", 1);
    assert_int_equal(parse(&o, 0, none), 2);
    clear_env();
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_numeric_option_takes_its_bounds_and_refuses_past_them),
    cmocka_unit_test(a_flag_wins_over_its_variable_and_needs_a_value),
    cmocka_unit_test(cross_option_checks_refuse_what_cannot_work),
    cmocka_unit_test(group_options_have_the_contracts_defaults),
    cmocka_unit_test(ha_is_a_flag_without_a_value_and_its_variable_is_1_or_0),
    cmocka_unit_test(ha_refuses_to_start_without_what_it_needs),
    cmocka_unit_test(advertise_url_is_http_or_https_with_a_host_and_a_port),
    cmocka_unit_test(the_role_seam_is_checked),
    cmocka_unit_test(threads_default_to_the_cores_and_one_fewer_for_http),
    cmocka_unit_test(ui_is_on_by_default_and_takes_on_or_off),
};
MX_TEST_MAIN(tests)
