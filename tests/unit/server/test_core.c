/*
 * Cores (server/core.h): two cores in one process, on two data directories, each served
 * by its own HTTP front on loopback, driven at once from several threads; what each one
 * hands out and keeps is its own (fencing tokens, change indexes, leases in force), as it
 * would be in two processes. A failed open leaves nothing running and nothing locked.
 * Run under ThreadSanitizer by the TSan build.
 */
#include "tests/unit/testutil.h"
#include "tests/unit/testhttp.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>

#include <cjson/cJSON.h>

#include "server/core.h"

struct served {
    char dir[64];
    struct options opt;
    struct res_limits lim;
    struct core *core;
    struct http *http;
    char url[128];
};

/* Options as the command line would give them: mutexd --data-dir DIR, on any free port. */
static void options_for(struct options *o, const char *dir)
{
    char *argv[] = {"mutexd",    "--data-dir", (char *)dir,      "--listen", "127.0.0.1:0",
                    "--threads", "2",          "--http-threads", "2",        NULL};
    optind = 0;
    assert_int_equal(options_parse(o, 7, argv), -1);
}

static enum core_rc open_core(struct served *s, char *err, size_t errlen, const char **failed)
{
    options_for(&s->opt, s->dir);
    core_limits(&s->opt, &s->lim);
    struct core_config cc = {.opt = &s->opt};
    return core_open(&s->core, &cc, err, errlen, failed);
}

static void serve(struct served *s, const char *what)
{
    mx_temp_dir(s->dir, what);
    char err[512] = "";
    const char *failed = NULL;
    if (open_core(s, err, sizeof err, &failed) != CORE_OK)
        fail_msg("%s: %s", failed, err);
    struct http_core front;
    core_front(s->core, &front);
    struct http_config hc = {.listen = "127.0.0.1:0", .threads = 2, .lim = &s->lim, .core = &front};
    if (http_start(&s->http, &hc, err, sizeof err) != 0)
        fail_msg("http: %s", err);
    snprintf(s->url, sizeof s->url, "http://%s", http_address(s->http));
}

/* Stops as main() does: quiesce, take the core back, close it, stop the front. */
static void unserve(struct served *s)
{
    http_quiesce(s->http);
    http_set_core(s->http, 0, NULL);
    core_close(s->core);
    http_stop(s->http);
    s->core = NULL;
    s->http = NULL;
}

/* One request; its status, and its body parsed (NULL when not JSON) or as text. */
static long request(const char *url, const char *path, const char *body, cJSON **json,
                    struct mx_buf *text)
{
    struct mx_buf b = {0};
    long status = mx_test_request(url, path, body, &b, NULL);
    if (json)
        *json = b.p ? cJSON_Parse(b.p) : NULL;
    if (text)
        *text = b;
    else
        mx_buf_free(&b);
    return status;
}

static uint64_t number(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        fail_msg("no number \"%s\"", key);
    return (uint64_t)v->valuedouble;
}

#define CYCLES 100

struct driver {
    struct served *s;
    int id;
    uint64_t tokens[CYCLES];
};

/* Acquires and releases resource "shared" and a resource of its own, CYCLES times. */
static void *drive(void *arg)
{
    struct driver *d = arg;
    for (int i = 0; i < CYCLES; i++) {
        char path[96], body[160];
        snprintf(path, sizeof path, "/v1/resources/%s/acquire", i % 2 ? "shared" : "own");
        if (i % 2 == 0)
            snprintf(path, sizeof path, "/v1/resources/own-%d/acquire", d->id);
        snprintf(body, sizeof body, "{\"owner\":\"driver-%d\",\"ttl_ms\":10000,\"wait_ms\":5000}",
                 d->id);
        cJSON *j = NULL;
        long st = request(d->s->url, path, body, &j, NULL);
        if (st != 200 || !j)
            fail_msg("acquire %s: %ld", path, st);
        d->tokens[i] = number(j, "fencing_token");
        const char *lease = cJSON_GetObjectItemCaseSensitive(j, "lease_id")->valuestring;
        snprintf(body, sizeof body, "{\"lease_id\":\"%s\"}", lease);
        memcpy(path + strlen(path) - strlen("acquire"), "release", strlen("release") + 1);
        cJSON_Delete(j);
        assert_int_equal(request(d->s->url, path, body, NULL, NULL), 200);
    }
    return NULL;
}

#define DRIVERS 2 /* per core */

/* Two cores, each driven by two threads at once, all four at the same time: each core
 * hands out its own tokens, 1 to 2 × CYCLES, every one once, increasing in each thread;
 * neither sees the other's grants. */
static void two_cores_run_side_by_side(void **st)
{
    (void)st;
    struct served a, b;
    serve(&a, "core-a");
    serve(&b, "core-b");
    struct driver d[2 * DRIVERS];
    pthread_t t[2 * DRIVERS];
    for (int i = 0; i < 2 * DRIVERS; i++) {
        d[i] = (struct driver){.s = i < DRIVERS ? &a : &b, .id = i % DRIVERS};
        assert_int_equal(pthread_create(&t[i], NULL, drive, &d[i]), 0);
    }
    for (int i = 0; i < 2 * DRIVERS; i++)
        pthread_join(t[i], NULL);

    for (int c = 0; c < 2; c++) {
        bool seen[DRIVERS * CYCLES + 1] = {false};
        for (int k = 0; k < DRIVERS; k++) {
            const struct driver *dr = &d[c * DRIVERS + k];
            for (int i = 0; i < CYCLES; i++) {
                uint64_t tok = dr->tokens[i];
                if (tok < 1 || tok > DRIVERS * CYCLES)
                    fail_msg("core %c: token %" PRIu64 " outside 1..%d", 'a' + c, tok,
                             DRIVERS * CYCLES);
                if (seen[tok])
                    fail_msg("core %c: token %" PRIu64 " handed out twice", 'a' + c, tok);
                seen[tok] = true;
                if (i > 0 && tok <= dr->tokens[i - 1])
                    fail_msg("core %c: tokens went back", 'a' + c);
            }
        }
    }
    /* Each front reports its own core's figures. */
    struct served *both[2] = {&a, &b};
    for (int c = 0; c < 2; c++) {
        struct mx_buf m = {0};
        assert_int_equal(request(both[c]->url, "/metrics", NULL, NULL, &m), 200);
        char want[96];
        snprintf(want, sizeof want, "mutexd_grants_total %d\n", DRIVERS * CYCLES);
        if (!m.p || !strstr(m.p, want))
            fail_msg("core %c: no \"%s\" in /metrics", 'a' + c, want);
        mx_buf_free(&m);
        cJSON *r = NULL;
        assert_int_equal(request(both[c]->url, "/readyz", NULL, &r, NULL), 200);
        cJSON_Delete(r);
    }
    unserve(&a);
    unserve(&b);
}

/* A lease held in one core is that data set's alone: opened again, one core has it in
 * force and the other none. */
static void leases_stay_with_their_data_set(void **st)
{
    (void)st;
    struct served a, b;
    serve(&a, "core-a");
    serve(&b, "core-b");
    cJSON *j = NULL;
    assert_int_equal(request(a.url, "/v1/resources/kept/acquire",
                             "{\"owner\":\"w\",\"ttl_ms\":600000}", &j, NULL),
                     200);
    cJSON_Delete(j);
    /* The other data set never heard of it. */
    assert_int_equal(request(b.url, "/v1/resources/kept", NULL, &j, NULL), 200);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "state")->valuestring, "free");
    cJSON_Delete(j);
    unserve(&a);
    unserve(&b);

    char err[512];
    const char *failed;
    assert_int_equal(open_core(&a, err, sizeof err, &failed), CORE_OK);
    assert_int_equal(open_core(&b, err, sizeof err, &failed), CORE_OK);
    assert_int_equal(core_leases(a.core), 1);
    assert_int_equal(core_leases(b.core), 0);
    core_close(a.core);
    core_close(b.core);
}

/* A failed open names the step and why, sets nothing, and leaves nothing behind: the data
 * directory an open core holds cannot be opened twice, and opens again once it is
 * closed. */
static void a_failed_open_leaves_nothing(void **st)
{
    (void)st;
    struct served a, b;
    mx_temp_dir(a.dir, "core-a");
    memcpy(b.dir, a.dir, sizeof b.dir);
    char err[512] = "";
    const char *failed = NULL;
    assert_int_equal(open_core(&a, err, sizeof err, &failed), CORE_OK);

    b.core = (struct core *)&b; /* must be set to NULL */
    failed = NULL;
    assert_int_equal(open_core(&b, err, sizeof err, &failed), CORE_FAILED);
    assert_null(b.core);
    assert_string_equal(failed, "cannot open the store");
    assert_true(err[0] != '\0');

    core_close(a.core);
    assert_int_equal(open_core(&b, err, sizeof err, &failed), CORE_OK);
    core_close(b.core);

    /* A data directory that is a file. */
    char file[64];
    memcpy(file, a.dir, sizeof file);
    memcpy(file + strlen(a.dir), "/f", 3);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    memcpy(b.dir, file, sizeof b.dir);
    assert_int_equal(open_core(&b, err, sizeof err, &failed), CORE_FAILED);
    assert_null(b.core);
    core_close(NULL);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(two_cores_run_side_by_side),
    cmocka_unit_test(leases_stay_with_their_data_set),
    cmocka_unit_test(a_failed_open_leaves_nothing),
};
MX_TEST_MAIN(tests)
