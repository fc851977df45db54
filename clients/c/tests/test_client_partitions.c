/*
 * The library against a partitioned group: three real servers of 16 partitions on a real
 * Azurite, started for each case by with-group.sh (MUTEXD_URLS, MUTEXD_PIDS).
 * A request about a resource goes straight to its partition's owner, so that no server
 * forwards it (their mutexd_forwarded_requests_total stays as it was), and the client follows
 * a partition whose owner leaves; a set of resources of one partition goes to its owner too.
 */
#include "testing.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include "mutexd.h"

#define PARTITIONS 16
#define GROUP      3

struct group {
    char urls[GROUP][64];
    pid_t pids[GROUP];
};

static void group_of_env(struct group *g)
{
    const char *urls = getenv("MUTEXD_URLS"), *pids = getenv("MUTEXD_PIDS");
    if (urls == NULL || pids == NULL)
        fail_msg("MUTEXD_URLS is not set: run this through with-group.sh");
    for (int i = 0; i < GROUP; i++) {
        size_t n = strcspn(urls, ",");
        assert_true(n > 0 && n < sizeof(g->urls[i]));
        memcpy(g->urls[i], urls, n);
        g->urls[i][n] = '\0';
        urls += n + (urls[n] == ',');
        g->pids[i] = (pid_t)strtol(pids, (char **)&pids, 10);
        pids += *pids == ',';
        assert_true(g->pids[i] > 0);
    }
}

/* Whether the process runs (a zombie waiting for its parent does not). */
static int running(pid_t pid)
{
    char path[64], stat[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *end = strrchr(stat, ')');
    return end != NULL && end[1] == ' ' && end[2] != 'Z';
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    FILE *out = arg;
    return fwrite(data, size, n, out);
}

/* The body of GET url+path (a 200), or NULL; the caller frees it. */
static char *http_get(const char *url, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    char full[256];
    snprintf(full, sizeof(full), "%s%s", url, path);
    CURL *e = curl_easy_init();
    assert_non_null(e);
    curl_easy_setopt(e, CURLOPT_URL, full);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    long status = 0;
    CURLcode rc = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    fclose(out);
    if (rc != CURLE_OK || status != 200) {
        free(text);
        return NULL;
    }
    return text;
}

/* How many requests the running servers forwarded to another so far
 * (mutexd_forwarded_requests_total of every code, summed). */
static long forwarded(const struct group *g)
{
    long sum = 0;
    for (int i = 0; i < GROUP; i++) {
        if (!running(g->pids[i]))
            continue;
        char *text = http_get(g->urls[i], "/metrics");
        assert_non_null(text);
        for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
            if (strncmp(line, "mutexd_forwarded_requests_total", 31) == 0)
                sum += (long)strtod(strrchr(line, ' ') + 1, NULL);
        }
        free(text);
    }
    return sum;
}

/* Waits until every running server has the same map, every partition owned by a running
 * server and each one owning its even share; owner[p] is then the index of p's owner. */
static void settled(const struct group *g, int owner[PARTITIONS])
{
    int64_t end = test_now_ms() + 60000;
    while (test_now_ms() < end) {
        int live = 0, agree = 1, first = 1;
        int map[PARTITIONS];
        for (int i = 0; i < GROUP && agree; i++) {
            if (!running(g->pids[i]))
                continue;
            live++;
            char *text = http_get(g->urls[i], "/v1/servers");
            cJSON *root = text != NULL ? cJSON_Parse(text) : NULL;
            free(text);
            const cJSON *parts = cJSON_GetObjectItemCaseSensitive(root, "partitions");
            const cJSON *count = cJSON_GetObjectItemCaseSensitive(parts, "count");
            const cJSON *owners = cJSON_GetObjectItemCaseSensitive(parts, "owners");
            agree = cJSON_IsNumber(count) && count->valueint == PARTITIONS && cJSON_IsArray(owners);
            int here[PARTITIONS];
            for (int p = 0; p < PARTITIONS; p++)
                here[p] = -1;
            const cJSON *list = agree ? owners : NULL, *o;
            cJSON_ArrayForEach(o, list)
            {
                const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "partition");
                const cJSON *url = cJSON_GetObjectItemCaseSensitive(o, "url");
                if (!cJSON_IsNumber(p) || p->valueint < 0 || p->valueint >= PARTITIONS)
                    continue;
                for (int k = 0; k < GROUP; k++) {
                    if (cJSON_IsString(url) && strcmp(url->valuestring, g->urls[k]) == 0)
                        here[p->valueint] = k;
                }
            }
            cJSON_Delete(root);
            for (int p = 0; p < PARTITIONS && agree; p++) {
                agree = here[p] >= 0 && running(g->pids[here[p]]) && (first || here[p] == map[p]);
                map[p] = here[p];
            }
            first = 0;
        }
        int share[GROUP] = {0};
        for (int p = 0; p < PARTITIONS && agree; p++)
            share[map[p]]++;
        for (int i = 0; i < GROUP && agree && live > 0; i++) {
            if (running(g->pids[i]))
                agree = share[i] >= PARTITIONS / live && share[i] <= PARTITIONS / live + 1;
        }
        if (agree && live > 0) {
            memcpy(owner, map, sizeof(map));
            return;
        }
        test_sleep_ms(100);
    }
    fail_msg("the partitions did not settle within 60 s");
}

/* A name of this run's own in partition p, the n-th one found. */
static void name_in(char *out, size_t cap, const char *base, unsigned p, int n)
{
    for (int i = 0;; i++) {
        unsigned q;
        snprintf(out, cap, "%s-%ld-%d", base, (long)getpid(), i);
        assert_int_equal(mutexd_partition_of(out, PARTITIONS, &q), MUTEXD_OK);
        if (q == p && n-- == 0)
            return;
    }
}

static mutexd_client *connect_group(const struct group *g)
{
    char urls[256];
    snprintf(urls, sizeof(urls), "%s,%s,%s", g->urls[0], g->urls[1], g->urls[2]);
    mutexd_client *c = NULL;
    struct mutexd_client_options o = {.request_timeout_ms = 10000};
    assert_int_equal(mutexd_client_new(&c, urls, &o), MUTEXD_OK);
    return c;
}

/* The group the tests run against, once its partitions have settled (`owner`: each one's
 * server), and a client given every server's URL. */
static mutexd_client *open_group(struct group *g, int *owner)
{
    group_of_env(g);
    settled(g, owner);
    return connect_group(g);
}

/* The first answer about a resource says the group is partitioned: the client reads the map. */
static void read_the_map(mutexd_client *c)
{
    char name[128];
    struct mutexd_state s = {0};
    name_in(name, sizeof(name), "first", 0, 0);
    assert_int_equal(mutexd_get(c, name, &s, NULL), MUTEXD_OK);
    mutexd_state_clear(&s);
}

/* Fails when the servers forwarded any request since forwarded() said `before`; `what`: what
 * the requests were, for the message. */
static void none_forwarded(const struct group *g, long before, const char *what)
{
    long after = forwarded(g);
    if (after != before)
        fail_msg("the servers forwarded %ld %s", after - before, what);
}

/* Once the client has read the map, acquire, get, watch, renew, break and release of names in
 * every partition reach their owner: no server forwards one. */
static void requests_go_straight_to_the_partitions_owner(void **state)
{
    (void)state;
    struct group g;
    int owner[PARTITIONS];
    mutexd_client *c = open_group(&g, owner);
    struct mutexd_error e = {0};
    struct mutexd_state s = {0};
    struct mutexd_lease l = {0};
    char name[128];

    read_the_map(c);
    long before = forwarded(&g);
    for (unsigned p = 0; p < PARTITIONS; p++) {
        for (int n = 0; n < 2; n++) {
            name_in(name, sizeof(name), "straight", p, n);
            struct mutexd_acquire_options ao = {.owner = "w", .ttl_ms = 20000};
            assert_int_equal(mutexd_acquire(c, name, &ao, &l, &e), MUTEXD_OK);
            assert_int_equal(mutexd_get(c, name, &s, &e), MUTEXD_OK);
            assert_true(s.held && s.holder.fencing_token == l.fencing_token);
            assert_int_equal(mutexd_watch(c, name, 0, 1000, &s, &e), MUTEXD_OK);
            assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e), MUTEXD_OK);
            if (n == 0) {
                assert_int_equal(mutexd_release(c, l.resource, l.lease_id, &e), MUTEXD_OK);
            } else {
                int broken = 0;
                assert_int_equal(mutexd_break(c, name, "test", &broken, &e), MUTEXD_OK);
                assert_true(broken);
            }
        }
    }
    none_forwarded(&g, before, "of 192 requests");
    mutexd_lease_clear(&l);
    mutexd_state_clear(&s);
    mutexd_client_free(c);
}

/* The owner of a partition the client holds a lease in stops (SIGTERM, handing its
 * partitions to the others): renewals and the release succeed, and once the client has read
 * the map again its requests go straight to the new owner. */
static void the_client_follows_a_partition_whose_owner_leaves(void **state)
{
    (void)state;
    struct group g;
    int owner[PARTITIONS];
    mutexd_client *c = open_group(&g, owner);
    struct mutexd_error e = {0};
    struct mutexd_state s = {0};
    struct mutexd_lease l = {0};
    char name[128], other[128];

    /* A partition of the second server: not the first URL, so a request there was routed. */
    int victim = 1;
    unsigned p = 0;
    while (owner[p] != victim)
        p++;
    name_in(name, sizeof(name), "moving", p, 0);
    assert_int_equal(mutexd_get(c, name, &s, &e), MUTEXD_OK);
    struct mutexd_acquire_options ao = {.owner = "w", .ttl_ms = 30000};
    assert_int_equal(mutexd_acquire(c, name, &ao, &l, &e), MUTEXD_OK);
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e), MUTEXD_OK);

    assert_int_equal(kill(g.pids[victim], SIGTERM), 0);
    int64_t end = test_now_ms() + 20000;
    while (running(g.pids[victim]) && test_now_ms() < end)
        test_sleep_ms(50);
    assert_false(running(g.pids[victim]));
    if (mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e) != MUTEXD_OK)
        fail_msg("the first renewal after the owner left: %s", e.message);

    int next[PARTITIONS];
    settled(&g, next);
    assert_true(next[p] != victim);
    /* A name in a partition of the other live server, so that the server that answered last
     * is never the one to ask next. */
    unsigned q = 0;
    while (next[q] == next[p] || next[q] == victim)
        q++;
    name_in(other, sizeof(other), "other", q, 0);
    /* The map may have been read while the partitions were still moving: past the second
     * between readings, an answer from another server than the one asked has it read again. */
    test_sleep_ms(1100);
    assert_int_equal(mutexd_get(c, name, &s, &e), MUTEXD_OK);
    assert_int_equal(mutexd_get(c, other, &s, &e), MUTEXD_OK);
    test_sleep_ms(1100);
    assert_int_equal(mutexd_get(c, name, &s, &e), MUTEXD_OK);
    assert_int_equal(mutexd_get(c, other, &s, &e), MUTEXD_OK);

    long before = forwarded(&g);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e), MUTEXD_OK);
        assert_int_equal(mutexd_get(c, other, &s, &e), MUTEXD_OK);
        assert_int_equal(mutexd_get(c, name, &s, &e), MUTEXD_OK);
        assert_true(s.held && s.holder.fencing_token == l.fencing_token);
        assert_int_equal(mutexd_get(c, other, &s, &e), MUTEXD_OK);
    }
    assert_int_equal(mutexd_release(c, l.resource, l.lease_id, &e), MUTEXD_OK);
    none_forwarded(&g, before, "of 13 requests after the move");
    mutexd_error_clear(&e);
    mutexd_lease_clear(&l);
    mutexd_state_clear(&s);
    mutexd_client_free(c);
}

/* A set of names with one hash tag (in every partition) goes straight to its partition's
 * owner, as a request about its first name does: no server forwards its acquire, renew or
 * release. Names of different partitions are refused (partitions_differ); the ordered
 * helper takes those one by one, each at its owner. */
static void several_resources_go_to_their_partitions_owner(void **state)
{
    (void)state;
    struct group g;
    int owner[PARTITIONS];
    mutexd_client *c = open_group(&g, owner);
    struct mutexd_error e = {0};
    struct mutexd_state s = {0};
    struct mutexd_leases set = {0};
    char tag[128];

    read_the_map(c);

    /* The sets of every partition acquired, then renewed, then released: each request goes
     * to another partition than the one before. */
    static char names[PARTITIONS][2][160];
    static const char *sets[PARTITIONS][2];
    static char ids[PARTITIONS][MUTEXD_LEASE_ID_LEN + 1];
    for (unsigned p = 0; p < PARTITIONS; p++) {
        name_in(tag, sizeof(tag), "set", p, 0);
        snprintf(names[p][0], sizeof(names[p][0]), "{%s}/alice", tag);
        snprintf(names[p][1], sizeof(names[p][1]), "{%s}/bob", tag);
        sets[p][0] = names[p][0];
        sets[p][1] = names[p][1];
    }
    long before = forwarded(&g);
    for (unsigned p = 0; p < PARTITIONS; p++) {
        struct mutexd_acquire_options ao = {.owner = "w", .ttl_ms = 20000};
        if (mutexd_acquire_many(c, sets[p], 2, &ao, &set, &e) != MUTEXD_OK)
            fail_msg("acquire of %s and %s: %s", sets[p][0], sets[p][1], e.message);
        assert_true(set.leases[0].fencing_token != set.leases[1].fencing_token);
        snprintf(ids[p], sizeof(ids[p]), "%s", set.lease_id);
    }
    for (unsigned p = 0; p < PARTITIONS; p++)
        assert_int_equal(mutexd_renew_many(c, sets[p], 2, ids[p], NULL, &set, &e), MUTEXD_OK);
    for (unsigned p = 0; p < PARTITIONS; p++)
        assert_int_equal(mutexd_release_many(c, sets[p], 2, ids[p], &e), MUTEXD_OK);
    none_forwarded(&g, before, "of 48 requests about sets");

    /* Three names of three partitions, of different owners. */
    char x[128], y[128], z[128];
    unsigned px = 0, py = 0, pz = 0;
    while (owner[py] == owner[px])
        py++;
    while (owner[pz] == owner[px] || owner[pz] == owner[py])
        pz++;
    name_in(x, sizeof(x), "x", px, 0);
    name_in(y, sizeof(y), "y", py, 0);
    name_in(z, sizeof(z), "z", pz, 0);
    const char *spread[] = {z, x, y};
    assert_int_equal(mutexd_acquire_many(c, spread, 3, NULL, &set, &e), MUTEXD_ERR_API);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "invalid_field");
    assert_string_equal(e.field, "resources");
    assert_string_equal(e.reason, "partitions_differ");

    mutexd_lock *lock = NULL;
    struct mutexd_acquire_options lo = {.owner = "w", .ttl_ms = 2000};
    before = forwarded(&g);
    if (mutexd_lock_ordered(c, spread, 3, &lo, NULL, &lock, &e) != MUTEXD_OK)
        fail_msg("the ordered helper: %s", e.message);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(mutexd_get(c, spread[i], &s, &e), MUTEXD_OK);
        assert_true(s.held && s.holder.fencing_token == mutexd_lock_fencing_token(lock, i));
    }
    assert_int_equal(mutexd_lock_wait_lost(lock, 1500), 0); /* renewed, each at its owner */
    assert_int_equal(mutexd_lock_release(lock, &e), MUTEXD_OK);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(mutexd_get(c, spread[i], &s, &e), MUTEXD_OK);
        assert_false(s.held);
    }
    none_forwarded(&g, before, "requests of the ordered helper");
    mutexd_error_clear(&e);
    mutexd_state_clear(&s);
    mutexd_leases_clear(&set);
    mutexd_client_free(c);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(requests_go_straight_to_the_partitions_owner),
    cmocka_unit_test(the_client_follows_a_partition_whose_owner_leaves),
    cmocka_unit_test(several_resources_go_to_their_partitions_owner),
};
TEST_MAIN(tests)
