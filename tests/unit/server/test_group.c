/*
 * The server group's takeover sequence (server/group.h) against a real Azurite
 * (scripts/with-azurite.sh sets MUTEXD_TEST_BLOB_CONNECTION_STRING; without it every case
 * fails). Each server is a group and an HTTP front on loopback in this process, each on
 * its own data directory, all on one container: the takeover's steps and each way it
 * fails, ticked by hand as main() ticks them.
 */
#include "tests/unit/testutil.h"
#include "tests/unit/azurite.h"
#include "tests/unit/testhttp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "blob/blob.h"
#include "blob/internal.h"
#include "common/clock.h"
#include "persistence/owner.h"
#include "common/partition.h"
#include "server/group.h"
#include "server/layout.h"
#include "server/partitions.h"
#include "server/placement.h"

struct member {
    char dir[64];
    char listen[64], url[96];
    struct options opt;
    struct res_limits lim;
    struct group *group;
    struct http *http;
    unsigned partition, partitions; /* 0 of 1 unless a case sets them before join() */
};

/* A free loopback port, so that the advertised URL is known before the front listens. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* mutexd --ha on `container`, as the command line would give it. */
static void member_options(struct member *m, const char *container)
{
    int port = free_port();
    snprintf(m->listen, sizeof m->listen, "127.0.0.1:%d", port);
    snprintf(m->url, sizeof m->url, "http://127.0.0.1:%d", port);
    char *argv[] = {"mutexd",
                    "--data-dir",
                    m->dir,
                    "--listen",
                    m->listen,
                    "--threads",
                    "2",
                    "--ha",
                    "--mirror",
                    "sync",
                    "--blob-connection-string",
                    (char *)mx_azurite_connection_string(),
                    "--blob-container",
                    (char *)container,
                    "--advertise-url",
                    m->url,
                    "--failover-after-ms",
                    "3000",
                    NULL};
    optind = 0;
    assert_int_equal(options_parse(&m->opt, (int)(sizeof argv / sizeof argv[0]) - 1, argv), -1);
}

/* Joins the group as main() does: the group first, then the front (holding), attached. */
static void join(struct member *m, const char *container)
{
    mx_temp_dir(m->dir, "group");
    member_options(m, container);
    core_limits(&m->opt, &m->lim);
    char err[512] = "";
    const char *failed = NULL;
    struct group_config gc = {
        .opt = &m->opt, .partition = m->partition, .partitions = m->partitions};
    if (group_open(&m->group, &gc, err, sizeof err, &failed) != 0)
        fail_msg("%s: %s", failed, err);
    struct http_config hc = {
        .listen = m->listen,
        .threads = 2,
        .lim = &m->lim,
        .ready = group_ready,
        .metrics = group_metrics,
        .served_by = m->opt.advertise_url,
        .servers = group_render_servers,
        .ctx = m->group,
    };
    if (http_start(&m->http, &hc, err, sizeof err) != 0)
        fail_msg("http: %s", err);
    group_attach(m->group, m->http);
}

/* Leaves as main() does at SIGTERM. */
static void leave(struct member *m)
{
    http_quiesce(m->http);
    group_close(m->group);
    http_stop(m->http);
    m->group = NULL;
}

/* Ticks until the member has a core (true) or `ms` passed (false). */
static bool tick_until_active(struct member *m, long ms)
{
    uint64_t end = mx_mono_ns() + (uint64_t)ms * MX_NS_PER_MS;
    while (mx_mono_ns() < end) {
        assert_int_equal(group_tick(m->group), 0);
        if (group_core(m->group))
            return true;
        mx_sleep_ms(GROUP_TICK_MS);
    }
    return false;
}

/* A new container with an active, `a`, and (when `b` is given) a standby, `b`. */
static void active_and_standby(char container[64], struct member *a, struct member *b)
{
    mx_azurite_name(container, 64);
    join(a, container);
    assert_true(tick_until_active(a, 10000));
    if (!b)
        return;
    join(b, container);
    assert_false(tick_until_active(b, 3 * GROUP_TICK_MS));
}

static long request(const struct member *m, const char *path, const char *json, struct mx_buf *body,
                    char served_by[128])
{
    return mx_test_request(m->url, path, json, body, served_by);
}

/* The member's /metrics holds `line`. */
static bool metric(const struct member *m, const char *line)
{
    struct mx_buf b = {0};
    assert_int_equal(request(m, "/metrics", NULL, &b, NULL), 200);
    bool has = b.p && strstr(b.p, line);
    mx_buf_free(&b);
    return has;
}

static void readyz(const struct member *m, long want_status, const char *want_text)
{
    struct mx_buf b = {0};
    long st = request(m, "/readyz", NULL, &b, NULL);
    if (st != want_status || !b.p || !strstr(b.p, want_text))
        fail_msg("%s/readyz: %ld %s (want %ld with %s)", m->url, st, b.p ? b.p : "", want_status,
                 want_text);
    mx_buf_free(&b);
}

/* A blob client of its own on `container`, and what the owner blob says now. */
static struct blob_client *owner_now(const char *container, struct owner_view *v)
{
    struct blob_account acc = mx_azurite_account();
    struct blob_client *c = mx_azurite_client(&acc, container, NULL);
    struct blob_result r = {0};
    assert_int_equal(owner_read(c, v, &r), OWNER_OK);
    blob_result_free(&r);
    return c;
}

/* The first server of a new container takes it at its first tick, publishes its core and
 * serves; the next one stays a standby, forwards to it, and is ready. */
static void the_first_takes_over_and_the_next_forwards(void **st)
{
    (void)st;
    char container[64];
    mx_azurite_name(container, sizeof container);
    struct member a = {0}, b = {0};
    join(&a, container);
    /* Holding, not ready, before its first look at the group. */
    readyz(&a, 503, "no_active_server");
    assert_true(tick_until_active(&a, 10000));
    assert_string_equal(group_role(a.group), "active");
    readyz(&a, 200, "\"role\":\"active\",\"mirror\":{\"mode\":\"sync\"");
    assert_true(metric(&a, "mutexd_takeovers_total 1\n"));
    assert_true(metric(&a, "mutexd_grants_total 0\n")); /* the published core's figures */

    join(&b, container);
    assert_false(tick_until_active(&b, 3 * GROUP_TICK_MS));
    assert_null(group_core(b.group));
    assert_string_equal(group_role(b.group), "standby");
    readyz(&b, 200, "\"role\":\"standby\"");
    assert_false(metric(&b, "mutexd_grants_total")); /* a standby has no core */
    char by[128];
    assert_int_equal(request(&b, "/v1/resources/r/acquire", "{\"owner\":\"w\"}", NULL, by), 200);
    assert_string_equal(by, a.url);
    assert_true(metric(&a, "mutexd_grants_total 1\n"));
    leave(&b);
    leave(&a);
}

/* The active leaves (SIGTERM): the standby takes over with the lease it granted. */
static void a_standby_takes_over_with_the_leases(void **st)
{
    (void)st;
    char container[64];
    struct member a = {0}, b = {0};
    active_and_standby(container, &a, &b);
    struct mx_buf body = {0};
    assert_int_equal(request(&a, "/v1/resources/kept/acquire",
                             "{\"owner\":\"w\",\"ttl_ms\":600000}", &body, NULL),
                     200);
    mx_buf_free(&body);
    leave(&a);
    assert_true(tick_until_active(&b, 20000));
    assert_int_equal(core_leases(group_core(b.group)), 1);
    char by[128];
    assert_int_equal(request(&b, "/v1/resources/kept", NULL, &body, by), 200);
    assert_string_equal(by, b.url);
    assert_non_null(strstr(body.p, "\"owner\":\"w\""));
    mx_buf_free(&body);
    leave(&b);
}

/* A takeover whose core cannot open (the data directory cannot be cleared) leaves nothing
 * half-set: the server stays a standby without a core, and takes over once it can. */
static void a_takeover_that_fails_stays_a_standby_and_tries_again(void **st)
{
    (void)st;
    char container[64];
    mx_azurite_name(container, sizeof container);
    struct member a = {0};
    join(&a, container);
    /* The store's file is a directory with a file in it: it cannot be removed. */
    char path[128];
    snprintf(path, sizeof path, "%s/mutexd.db", a.dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/mutexd.db/x", a.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_false(tick_until_active(&a, 5 * GROUP_TICK_MS));
    assert_string_equal(group_role(a.group), "standby");
    readyz(&a, 503, "no_active_server");
    assert_false(metric(&a, "mutexd_grants_total"));
    assert_true(metric(&a, "mutexd_takeovers_total 0\n"));
    /* Repaired: the next tick takes over. */
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof path, "%s/mutexd.db", a.dir);
    assert_int_equal(rmdir(path), 0);
    assert_true(tick_until_active(&a, 10000));
    readyz(&a, 200, "\"role\":\"active\"");
    leave(&a);
}

/* A journal line that cannot be decoded blocks the takeover (no core, counted, retried
 * later), rather than serving a state without it. */
static void an_undecodable_journal_line_blocks_the_takeover(void **st)
{
    (void)st;
    char container[64];
    struct member a = {0}, b = {0};
    active_and_standby(container, &a, NULL);
    for (int i = 0; i < 5; i++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/resources/k%d/acquire", i);
        assert_int_equal(request(&a, path, "{\"owner\":\"w\",\"ttl_ms\":600000}", NULL, NULL), 200);
    }
    join(&b, container);
    assert_false(tick_until_active(&b, 3 * GROUP_TICK_MS));

    /* The journal the owner blob names gets a line that is no record. */
    struct owner_view v;
    struct blob_client *c = owner_now(container, &v);
    struct blob_result r = {0};
    assert_true(v.meta.journal[0] != '\0');
    static const char garbage[] = "this line is not a journal record\n";
    assert_int_equal(blob_append_block(c, v.meta.journal, garbage, strlen(garbage), -1, NULL, &r),
                     0);
    assert_int_equal(r.status, 201);
    blob_result_free(&r);
    blob_client_free(c);

    leave(&a);
    assert_false(tick_until_active(&b, 3000));
    assert_null(group_core(b.group));
    assert_string_equal(group_role(b.group), "standby");
    assert_true(metric(&b, "mutexd_takeover_blocked 1\n"));
    assert_true(metric(&b, "mutexd_takeovers_blocked_total 1\n")); /* not again before 10 s */
    leave(&b);
}

/* Another server takes the group of `container` under `prefix` ("": the container's own;
 * a partition's) over, as a takeover does: the lease broken and taken, `url` written as its
 * owner. */
static void take_partition(const char *container, const char *prefix, const char *url)
{
    struct blob_account acc = mx_azurite_account();
    struct blob_options o = {.prefix = prefix};
    struct blob_client *c = mx_azurite_client(&acc, container, &o);
    struct owner_view v;
    struct blob_result r = {0};
    assert_int_equal(owner_read(c, &v, &r), OWNER_OK);
    assert_int_equal(owner_break_if(c, v.etag, &r), OWNER_OK);
    const char *lease = "0f0e0d0c-0b0a-4908-8706-050403020101";
    assert_int_equal(owner_take(c, lease, &r), OWNER_OK);
    struct owner_meta other = v.meta;
    snprintf(other.url, sizeof other.url, "%s", url);
    other.generation++;
    assert_int_equal(owner_publish(c, lease, &other, &r), OWNER_OK);
    blob_result_free(&r);
    blob_client_free(c);
}

/* ...and lets it go again. */
static void release_partition(const char *container, const char *prefix)
{
    struct blob_account acc = mx_azurite_account();
    struct blob_options o = {.prefix = prefix};
    struct blob_client *c = mx_azurite_client(&acc, container, &o);
    struct blob_result r = {0};
    assert_int_equal(owner_release(c, "0f0e0d0c-0b0a-4908-8706-050403020101", &r), OWNER_OK);
    blob_result_free(&r);
    blob_client_free(c);
}

/* Another server takes the container (its lease broken, its name written): the active
 * notices at a tick, is fenced, and says so. */
static void an_active_another_server_replaced_is_fenced(void **st)
{
    (void)st;
    char container[64];
    struct member a = {0};
    active_and_standby(container, &a, NULL);

    take_partition(container, "", "http://127.0.0.1:1");

    int fenced = 0;
    uint64_t end = mx_mono_ns() + 10000 * MX_NS_PER_MS;
    while (!fenced && mx_mono_ns() < end) {
        fenced = group_tick(a.group);
        mx_sleep_ms(GROUP_TICK_MS);
    }
    assert_int_equal(fenced, 1);
    assert_string_equal(group_role(a.group), "fenced");
    readyz(&a, 503, "fenced");
    leave(&a);
    release_partition(container, "");
}

/* The fencing_token of an answer's body (freed). */
static unsigned long long token_of(struct mx_buf *body)
{
    const char *t = body->p ? strstr(body->p, "\"fencing_token\":") : NULL;
    assert_non_null(t);
    unsigned long long v = strtoull(t + strlen("\"fencing_token\":"), NULL, 10);
    mx_buf_free(body);
    assert_true(v > 0);
    return v;
}

/* A server of a partitioned group's data directory and options. */
static void prepare(struct member *m, const char *container)
{
    mx_temp_dir(m->dir, "group");
    member_options(m, container);
    core_limits(&m->opt, &m->lim);
}

/* Its front, holding every partition until its groups set the roles; `servers` and `ctx`:
 * GET /v1/servers (may be NULL). */
static void start_front(struct member *m, unsigned partitions,
                        int (*servers)(void *ctx, struct mx_buf *out), void *ctx)
{
    char err[512] = "";
    struct http_config hc = {.listen = m->listen,
                             .threads = 2,
                             .lim = &m->lim,
                             .served_by = m->opt.advertise_url,
                             .partitions = partitions,
                             .servers = servers,
                             .ctx = ctx};
    if (http_start(&m->http, &hc, err, sizeof err) != 0)
        fail_msg("http: %s", err);
}

#define PARTS 2

/* A server of a partitioned group: one front, one group per partition. */
struct server {
    struct member m; /* its options, front and URL; m.group unused */
    struct group *groups[PARTS];
};

static void join_partitioned(struct server *x, const char *container)
{
    struct member *m = &x->m;
    prepare(m, container);
    start_front(m, PARTS, NULL, NULL);
    char err[512] = "";
    const char *failed = NULL;
    for (unsigned p = 0; p < PARTS; p++) {
        struct group_config gc = {.opt = &m->opt, .partition = p, .partitions = PARTS};
        if (group_open(&x->groups[p], &gc, err, sizeof err, &failed) != 0)
            fail_msg("%s: %s", failed, err);
    }
    for (unsigned p = 0; p < PARTS; p++)
        group_attach(x->groups[p], m->http);
}

static void leave_partitioned(struct server *x)
{
    http_quiesce(x->m.http);
    for (unsigned p = 0; p < PARTS; p++)
        group_close(x->groups[p]);
    http_stop(x->m.http);
}

/* Ticks partition p's group of x until it has a core (true) or `ms` passed. */
static bool tick_part(struct server *x, unsigned p, long ms)
{
    x->m.group = x->groups[p];
    return tick_until_active(&x->m, ms);
}

/* Two servers of a group of two partitions on a new container: x the active of
 * partition 0, y of partition 1. */
static void two_partitioned(char container[64], struct server *x, struct server *y)
{
    mx_azurite_name(container, 64);
    join_partitioned(x, container);
    join_partitioned(y, container);
    assert_true(tick_part(x, 0, 10000));
    assert_true(tick_part(y, 1, 10000)); /* not held off by partition 0's owner */
}

/* A request about `name` to x: its status, the server that served it, its partition. */
static long ask(struct server *x, const char *name, const char *action, struct mx_buf *body,
                char by[128], unsigned *partition)
{
    char path[128], num[12];
    snprintf(path, sizeof path, "/v1/resources/%s%s%s", name, action ? "/" : "",
             action ? action : "");
    struct mx_buf h = {0};
    long status = mx_test_exchange(x->m.url, path, action ? "{\"owner\":\"w\"}" : NULL, body, &h);
    mx_test_header(&h, "Mutexd-Served-By", by, 128);
    mx_test_header(&h, "Mutexd-Partition", num, sizeof num);
    *partition = num[0] ? (unsigned)strtoul(num, NULL, 10) : 999;
    mx_buf_free(&h);
    return status;
}

/* A blocking acquire of "{d}" (partition 0) sent to `url`, in a thread of its own. */
struct waiter {
    const char *url;
    long status;
    struct mx_buf body;
};

static void *wait_for_d(void *arg)
{
    struct waiter *w = arg;
    w->status = mx_test_exchange(w->url, "/v1/resources/%7Bd%7D/acquire",
                                 "{\"owner\":\"v\",\"wait_ms\":8000}", &w->body, NULL);
    return NULL;
}

/* Two servers of a group of two partitions, each the active of one and a standby of the
 * other, on one container: each partition has its own owner blob, lease, journal and
 * generation under p/<ppp>/ (the container's own owner blob is never written), its own
 * store, and its own tokens (seq << 8 | partition). Either server answers a request about
 * any resource, serving its own partition's and forwarding the other's, with
 * Mutexd-Served-By and Mutexd-Partition; a takeover of one partition leaves the other
 * serving. */
static void two_servers_share_two_partitions(void **st)
{
    (void)st;
    char container[64];
    struct server x = {0}, y = {0};
    two_partitioned(container, &x, &y);
    assert_false(tick_part(&x, 1, 3 * GROUP_TICK_MS));
    assert_false(tick_part(&y, 0, 3 * GROUP_TICK_MS));

    /* "{d}" hashes "d": partition 0 of 2; "{a}" hashes "a": partition 1. */
    static const struct {
        const char *name;
        unsigned partition;
    } names[] = {{"{d}", 0}, {"{a}", 1}};
    struct server *both[2] = {&x, &y};
    const char *owner[PARTS] = {x.m.url, y.m.url};
    unsigned long long tokens[PARTS] = {0};
    for (int k = 0; k < 2; k++) {
        for (int via = 0; via < 2; via++) {
            char by[128];
            unsigned part;
            struct mx_buf body = {0};
            long stt = ask(both[via], names[k].name, via == 0 ? "acquire" : NULL, &body, by, &part);
            assert_int_equal(stt, 200);
            assert_string_equal(by, owner[names[k].partition]);
            assert_int_equal(part, names[k].partition);
            if (via == 0) {
                tokens[k] = token_of(&body);
                assert_int_equal(tokens[k] % 256, names[k].partition);
            } else {
                assert_non_null(strstr(body.p, "\"state\":\"held\""));
                mx_buf_free(&body);
            }
        }
    }

    /* Each partition's owner blob names its own active, of its own first generation. */
    struct blob_account acc = mx_azurite_account();
    const char *prefixes[PARTS] = {"p/000/", "p/001/"};
    for (int i = 0; i < PARTS; i++) {
        struct blob_options o = {.prefix = prefixes[i]};
        struct blob_client *c = mx_azurite_client(&acc, container, &o);
        struct owner_view v;
        struct blob_result r = {0};
        assert_int_equal(owner_read(c, &v, &r), OWNER_OK);
        assert_true(v.exists);
        assert_string_equal(v.meta.url, owner[i]);
        assert_int_equal(v.meta.generation, 1);
        assert_true(v.meta.journal[0] != '\0');
        blob_result_free(&r);
        blob_client_free(c);
    }
    struct blob_client *whole = mx_azurite_client(&acc, container, NULL);
    struct blob_result r = {0};
    assert_int_equal(blob_head(whole, "owner", &r), -1);
    assert_int_equal(r.status, 404);
    blob_result_free(&r);
    blob_client_free(whole);

    /* x hands partition 0 over to y: a blocking acquire waiting at x is answered 503 and
     * may be sent again; y takes the partition over at once, with the lease; x forwards. */
    struct waiter w = {.url = x.m.url};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_d, &w), 0);
    for (int k = 0; k < 100 && !metric(&x.m, "mutexd_waiters 1\n"); k++)
        mx_sleep_ms(50); /* until it waits at x, behind the holder of {d} */
    group_allow_takeover(x.groups[0], false);
    uint64_t t0 = mx_mono_ns();
    group_hand_over(x.groups[0]);
    assert_null(group_core(x.groups[0]));
    pthread_join(t, NULL);
    assert_int_equal(w.status, 503);
    if (!w.body.p || !strstr(w.body.p, "\"partition_moved\""))
        fail_msg("the waiter's answer: %s", w.body.p ? w.body.p : "");
    mx_buf_free(&w.body);
    assert_true(tick_part(&y, 0, 5000));
    uint64_t moved_ms = (mx_mono_ns() - t0) / MX_NS_PER_MS;
    printf("partition 0 moved from x to y in %llu ms\n", (unsigned long long)moved_ms);
    assert_true(moved_ms < 1000);
    assert_false(tick_part(&x, 0, 2 * GROUP_TICK_MS)); /* not allowed: it stays a standby */
    char by[128];
    unsigned part;
    struct mx_buf body = {0};
    assert_int_equal(ask(&x, "{d}", NULL, &body, by, &part), 200);
    assert_string_equal(by, y.m.url);
    assert_int_equal(part, 0);
    assert_non_null(strstr(body.p, "\"state\":\"held\""));
    mx_buf_free(&body);
    leave_partitioned(&x);
    assert_int_equal(ask(&y, "{d}/2", "acquire", &body, by, &part), 200);
    assert_string_equal(by, y.m.url);
    assert_int_equal(part, 0);
    unsigned long long after = token_of(&body);
    assert_int_equal(after % 256, 0);
    assert_true(after > tokens[0]);
    leave_partitioned(&y);
}

/* The requests x has forwarded, of every answer code (its /metrics). */
static unsigned long forwarded(const struct member *m)
{
    struct mx_buf b = {0};
    assert_int_equal(request(m, "/metrics", NULL, &b, NULL), 200);
    unsigned long n = 0;
    static const char name[] = "mutexd_forwarded_requests_total{";
    for (const char *at = b.p; at && (at = strstr(at, name)) != NULL; at++) {
        const char *v = strchr(at, ' ');
        if (v)
            n += strtoul(v + 1, NULL, 10);
    }
    mx_buf_free(&b);
    return n;
}

struct asker {
    struct server *x;
    long status;
    char by[128];
};

static void *ask_for_d(void *arg)
{
    struct asker *a = arg;
    struct mx_buf body = {0};
    unsigned part;
    a->status = ask(a->x, "{d}", NULL, &body, a->by, &part);
    mx_buf_free(&body);
    return NULL;
}

/* x hands partition 0 over while nobody may take it yet: its owner blob still names x, with
 * the lease released. x holds the partition's requests until a new owner names itself; it
 * never forwards them to itself, where each would be forwarded again, round and round. */
static void a_partition_handed_over_is_never_forwarded_to_itself(void **st)
{
    (void)st;
    char container[64];
    struct server x = {0}, y = {0};
    two_partitioned(container, &x, &y);
    group_allow_takeover(x.groups[0], false);
    group_allow_takeover(y.groups[0], false);
    group_hand_over(x.groups[0]);
    assert_false(tick_part(&x, 0, 2 * GROUP_TICK_MS));
    assert_false(tick_part(&y, 0, 2 * GROUP_TICK_MS));
    unsigned long before = forwarded(&x.m);
    struct asker a = {.x = &x};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ask_for_d, &a), 0);
    mx_sleep_ms(500);
    group_allow_takeover(y.groups[0], true);
    assert_true(tick_part(&y, 0, 5000));
    assert_false(tick_part(&x, 0, 2 * GROUP_TICK_MS)); /* now it forwards to y */
    pthread_join(t, NULL);
    unsigned long sent = forwarded(&x.m) - before;
    printf("requests x forwarded for one request while partition 0 had no owner: %lu\n", sent);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.by, y.m.url);
    assert_true(sent <= 1);
    leave_partitioned(&x);
    leave_partitioned(&y);
}

/* ---- a partitioned server: placement's loop ---------------------------------------- */

#define NPART 4

struct pserver {
    struct member m;
    struct partitions *ps;
    bool up;
};

static void pserver_join(struct pserver *x, const char *container)
{
    struct member *m = &x->m;
    prepare(m, container);
    char err[512] = "";
    const char *failed = NULL;
    struct partitions_config pc = {
        .opt = &m->opt, .count = NPART, .orphan_after_ms = 8000, .settle_ms = 1500};
    if (partitions_open(&x->ps, &pc, err, sizeof err, &failed) != 0)
        fail_msg("%s: %s", failed, err);
    start_front(m, NPART, partitions_render_servers, x->ps);
    partitions_attach(x->ps, m->http);
    x->up = true;
}

static void pserver_leave(struct pserver *x)
{
    http_quiesce(x->m.http);
    partitions_close(x->ps);
    http_stop(x->m.http);
    x->up = false;
}

/* Each partition's owner now, by URL (NULL: free), as placement reads it. */
static const char **owners_now(struct pserver *xs, size_t n, const char **owner)
{
    for (unsigned p = 0; p < NPART; p++) {
        owner[p] = NULL;
        for (size_t i = 0; i < n; i++)
            if (xs[i].up && partitions_owns(xs[i].ps, p))
                owner[p] = xs[i].m.url;
    }
    return owner;
}

/* Ticks every server up until every partition p is owned by server target[p] (an index in
 * xs), as placement's target says for the servers up and the owners then (a balanced map
 * is its own target); fails past `ms`. No partition may change owner more than once on the
 * way (a first claim of a free partition is no change); returns how many changed, and the
 * target reached in `target`. */
static unsigned converge(struct pserver *xs, size_t n, int *target, long ms)
{
    uint64_t end = mx_mono_ns() + (uint64_t)ms * MX_NS_PER_MS;
    int owner[NPART], first[NPART];
    unsigned changes[NPART] = {0}, moved = 0;
    for (int p = 0; p < NPART; p++) {
        owner[p] = -1;
        for (size_t i = 0; i < n; i++)
            if (xs[i].up && partitions_owns(xs[i].ps, (unsigned)p))
                owner[p] = (int)i;
        first[p] = owner[p];
    }
    for (;;) {
        bool ok = true;
        for (size_t i = 0; i < n; i++) {
            if (!xs[i].up)
                continue;
            assert_int_equal(partitions_tick(xs[i].ps), 0);
            for (int p = 0; p < NPART; p++) {
                if (!partitions_owns(xs[i].ps, (unsigned)p) || owner[p] == (int)i)
                    continue;
                if (owner[p] >= 0 || first[p] >= 0)
                    changes[p]++; /* from another owner, maybe through "free" */
                if (first[p] < 0)
                    first[p] = (int)i;
                owner[p] = (int)i;
            }
        }
        const char *urls[4], *owned_by[NPART];
        int of[4];
        size_t live = 0;
        for (size_t i = 0; i < n; i++)
            if (xs[i].up) {
                of[live] = (int)i;
                urls[live++] = xs[i].m.url;
            }
        place_target(NPART, urls, live, owners_now(xs, n, owned_by), target);
        for (int p = 0; p < NPART; p++) {
            target[p] = target[p] >= 0 ? of[target[p]] : -1;
            if (changes[p] > 1)
                fail_msg("partition %d changed owner %u times", p, changes[p]);
            ok = ok && target[p] >= 0 && owner[p] == target[p] &&
                 partitions_owns(xs[target[p]].ps, (unsigned)p);
        }
        if (ok)
            break;
        if (mx_mono_ns() > end) {
            for (int p = 0; p < NPART; p++)
                fprintf(stderr, "partition %d with %d, target %d\n", p, owner[p], target[p]);
            fail_msg("no convergence within %ld ms", ms);
        }
        mx_sleep_ms(GROUP_TICK_MS);
    }
    for (int p = 0; p < NPART; p++)
        moved += changes[p];
    /* A few more looks, as the server's loop goes on: every standby of a partition learns
     * its new owner from the owner blob, and forwards to it. */
    for (int k = 0; k < 3; k++) {
        mx_sleep_ms(GROUP_TICK_MS);
        for (size_t i = 0; i < n; i++)
            if (xs[i].up)
                assert_int_equal(partitions_tick(xs[i].ps), 0);
    }
    return moved;
}

/* x's /metrics: each figure of a core once per partition it owns, labelled, under one
 * header. */
static void check_metrics(struct pserver *x)
{
    struct mx_buf b = {0};
    assert_int_equal(mx_test_exchange(x->m.url, "/metrics", NULL, &b, NULL), 200);
    unsigned seen = 0;
    for (unsigned p = 0; p < NPART; p++) {
        char want[64];
        snprintf(want, sizeof want, "\nmutexd_grants_total{partition=\"%u\"} ", p);
        bool has = strstr(b.p, want) != NULL;
        assert_int_equal(has, partitions_owns(x->ps, p));
        seen += has;
    }
    assert_int_equal(seen, partitions_owned(x->ps));
    const char *first = strstr(b.p, "# TYPE mutexd_grants_total ");
    assert_non_null(first);
    assert_null(strstr(first + 1, "# TYPE mutexd_grants_total "));
    mx_buf_free(&b);
}

/* x's GET /v1/servers: the partition map names each partition's target as its owner, at a
 * generation, and x's own share is what it owns. True when the servers' entries (from the
 * heartbeats, written and read once a second) list each server's share too. */
static bool check_map(struct pserver *x, struct pserver *xs, size_t n, const int *target,
                      const char *const *urls)
{
    struct mx_buf b = {0};
    assert_int_equal(mx_test_exchange(x->m.url, "/v1/servers", NULL, &b, NULL), 200);
    cJSON *o = cJSON_Parse(b.p);
    assert_non_null(o);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "active")));
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(o, "partitions");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(map, "count")->valueint, NPART);
    const cJSON *e;
    int p = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(map, "owners"))
    {
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(e, "partition")->valueint, p);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "url")->valuestring,
                            urls[target[p]]);
        assert_true(cJSON_GetObjectItemCaseSensitive(e, "generation")->valueint >= 1);
        p++;
    }
    assert_int_equal(p, NPART);
    const cJSON *self = cJSON_GetObjectItemCaseSensitive(o, "self");
    unsigned mine =
        (unsigned)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(self, "partitions"));
    assert_int_equal(mine, partitions_owned(x->ps));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(self, "role")->valuestring,
                        mine ? "active" : "standby");
    /* The heartbeats: every live server listed, with a share as large as it owns. */
    int listed = 0;
    bool shares = true;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "servers"))
    {
        const char *url = cJSON_GetObjectItemCaseSensitive(e, "url")->valuestring;
        for (size_t i = 0; i < n; i++)
            if (strcmp(url, xs[i].m.url) == 0) {
                listed++;
                int parts = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "partitions"));
                shares = shares && parts == (int)partitions_owned(xs[i].ps);
            }
    }
    cJSON_Delete(o);
    mx_buf_free(&b);
    return shares && listed == (int)n;
}

/* Three servers of a group of four partitions take 1 or 2 each (as placement's target says),
 * and any server answers for any partition, served by its owner; a fourth server joining
 * gets one, handed over to it; one leaving, its partition goes to another. */
static void partitions_spread_over_servers_and_follow_them(void **st)
{
    (void)st;
    char container[64];
    mx_azurite_name(container, sizeof container);
    struct pserver xs[4] = {0};
    for (int i = 0; i < 3; i++)
        pserver_join(&xs[i], container);
    const char *urls[4] = {xs[0].m.url, xs[1].m.url, xs[2].m.url, xs[3].m.url};
    int target[NPART];
    unsigned moves = converge(xs, 3, target, 30000);
    printf("three servers started: %u partition(s) moved after their first claim\n", moves);

    /* Names of the four partitions ("d" and "e" hash to 0 of 2; of 4, see the vectors). */
    char names[NPART][16];
    for (int p = 0, k = 0; p < NPART; k++) {
        char n[16];
        snprintf(n, sizeof n, "{k%d}", k);
        if (mx_partition(n, strlen(n), NPART) == (unsigned)p)
            memcpy(names[p++], n, sizeof n);
    }
    for (int p = 0; p < NPART; p++)
        for (int i = 0; i < 3; i++) {
            struct server x = {.m = xs[i].m};
            char by[128];
            unsigned part;
            struct mx_buf body = {0};
            assert_int_equal(ask(&x, names[p], i == 0 ? "acquire" : NULL, &body, by, &part), 200);
            assert_string_equal(by, urls[target[p]]);
            assert_int_equal(part, (unsigned)p);
            mx_buf_free(&body);
        }

    /* Every server's /v1/servers carries the partition map, and each server's share; its
     * /metrics, the figures of each partition it owns. */
    for (int i = 0; i < 3; i++) {
        check_metrics(&xs[i]);
        uint64_t end = mx_mono_ns() + 5000 * MX_NS_PER_MS;
        while (!check_map(&xs[i], xs, 3, target, urls)) {
            if (mx_mono_ns() > end)
                fail_msg("the servers' shares are not in %s's /v1/servers", xs[i].m.url);
            mx_sleep_ms(GROUP_TICK_MS);
            for (int k = 0; k < 3; k++)
                assert_int_equal(partitions_tick(xs[k].ps), 0);
        }
    }

    /* A fourth joins: its share (one) moves to it, once, and nothing else moves. */
    pserver_join(&xs[3], container);
    moves = converge(xs, 4, target, 30000);
    printf("a fourth server joined: %u partition(s) moved\n", moves);
    assert_int_equal(moves, 1);
    for (int p = 0; p < NPART; p++) {
        struct server x = {.m = xs[3].m};
        char by[128];
        unsigned part;
        struct mx_buf body = {0};
        assert_int_equal(ask(&x, names[p], NULL, &body, by, &part), 200);
        assert_string_equal(by, urls[target[p]]);
        assert_non_null(strstr(body.p, "\"state\":\"held\"")); /* moved with its lease */
        mx_buf_free(&body);
    }

    /* The second leaves: its partition goes to another, and nothing else moves. */
    const char *before[NPART], *after[NPART];
    owners_now(xs, 4, before);
    pserver_leave(&xs[1]);
    converge(xs, 4, target, 40000);
    owners_now(xs, 4, after);
    for (unsigned p = 0; p < NPART; p++)
        if (before[p] != xs[1].m.url && before[p] != after[p])
            fail_msg("partition %u moved from %s, which stayed, to %s", p, before[p], after[p]);

    /* Another server takes one of the third's partitions (its lease broken, its name
     * written): the third steps down from that partition alone, keeps serving the others,
     * and forwards the lost one's requests to the name the owner blob gives. */
    unsigned lost = NPART;
    for (unsigned p = 0; p < NPART && lost == NPART; p++)
        if (partitions_owns(xs[2].ps, p))
            lost = p;
    assert_true(lost < NPART);
    unsigned had = partitions_owned(xs[2].ps);
    char prefix[8];
    mx_partition_prefix(lost, NPART, prefix);
    take_partition(container, prefix, xs[3].m.url);
    uint64_t end = mx_mono_ns() + 10000 * MX_NS_PER_MS;
    while (partitions_owns(xs[2].ps, lost)) {
        assert_int_equal(partitions_tick(xs[2].ps), 0);
        if (mx_mono_ns() > end)
            fail_msg("partition %u still served by a server another has replaced", lost);
        mx_sleep_ms(GROUP_TICK_MS);
    }
    assert_int_equal(partitions_owned(xs[2].ps), had - 1);
    /* That other server goes: the partition comes back to its target. */
    release_partition(container, prefix);
    converge(xs, 4, target, 20000);

    /* The first stops answering (every request 503, /healthz included), its leases still
     * renewed by its mirrors: after --failover-after-ms the others give it up, break its
     * leases, and its partitions go to their new targets at once, not after its heartbeat
     * goes stale. */
    http_quiesce(xs[0].m.http);
    xs[0].up = false;
    uint64_t t0 = mx_mono_ns();
    converge(xs, 4, target, 20000);
    uint64_t took = (mx_mono_ns() - t0) / MX_NS_PER_MS;
    printf("a server silent: its partitions served elsewhere after %llu ms (failover 3000)\n",
           (unsigned long long)took);
    assert_true(took < 3000 + 4000);
    partitions_close(xs[0].ps); /* its cores find their leases broken */
    http_stop(xs[0].m.http);
    for (int i = 0; i < 4; i++)
        if (xs[i].up)
            pserver_leave(&xs[i]);
}

/* ---- the partition count, fixed when the group is created -------------------------- */

/* A new container: the first server writes the count once, N = 1 included; the same N
 * reads it back; another N is refused naming both. */
static void the_partition_count_is_written_once(void **st)
{
    (void)st;
    char name[64], err[256];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    unsigned found = 99;
    struct blob_result r = {0};
    assert_int_equal(layout_settle(c, 16, &found, err, sizeof err), LAYOUT_OK);
    assert_int_equal(found, 16);
    assert_int_equal(blob_get(c, LAYOUT_BLOB, NULL, &r), 0);
    assert_non_null(strstr(r.body, "\"partitions\":16"));
    assert_int_equal(layout_settle(c, 16, &found, err, sizeof err), LAYOUT_OK);
    unsigned asks[] = {8, 1};
    for (int i = 0; i < 2; i++) {
        err[0] = '\0';
        assert_int_equal(layout_settle(c, asks[i], &found, err, sizeof err), LAYOUT_MISMATCH);
        assert_int_equal(found, 16);
        char want[16];
        snprintf(want, sizeof want, "asks for %u", asks[i]);
        if (!strstr(err, "has 16 partitions") || !strstr(err, want))
            fail_msg("the message does not name both counts: %s", err);
    }
    /* N = 1 first: written too, so that a server of 4 started with it is refused. */
    struct blob_client *d = mx_azurite_container(name, sizeof name);
    assert_int_equal(layout_settle(d, 1, &found, err, sizeof err), LAYOUT_OK);
    assert_int_equal(found, 1);
    assert_int_equal(blob_get(d, LAYOUT_BLOB, NULL, &r), 0);
    assert_non_null(strstr(r.body, "\"partitions\":1,"));
    assert_int_equal(layout_settle(d, 4, &found, err, sizeof err), LAYOUT_MISMATCH);
    assert_non_null(strstr(err, "has 1 partition,"));
    blob_result_free(&r);
    blob_client_free(c);
    blob_client_free(d);
}

/* A container written before the count was written for N = 1 (its own owner blob, or its
 * own journals, and no `group` blob) is a group of one partition: N = 1 goes on and the
 * count 1 is written, N = 16 is refused. */
static void a_group_of_one_partition_stays_one(void **st)
{
    (void)st;
    char name[64], err[256];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    assert_int_equal(owner_create(c, &r), OWNER_OK);
    unsigned found = 0;
    assert_int_equal(layout_settle(c, 16, &found, err, sizeof err), LAYOUT_MISMATCH);
    assert_int_equal(found, 1);
    assert_non_null(strstr(err, "has 1 partition,"));
    assert_int_equal(layout_settle(c, 1, &found, err, sizeof err), LAYOUT_OK);
    assert_int_equal(blob_get(c, LAYOUT_BLOB, NULL, &r), 0);
    assert_non_null(strstr(r.body, "\"partitions\":1,"));
    /* A journal alone says the same. */
    struct blob_client *j = mx_azurite_container(name, sizeof name);
    assert_int_equal(blob_put(j, "journal/0000000001/00000000000000000001", "x", 1, NULL, &r), 0);
    assert_int_equal(layout_settle(j, 4, &found, err, sizeof err), LAYOUT_MISMATCH);
    assert_int_equal(found, 1);
    /* A count that cannot be read is no count: refused, not taken for 1. */
    struct blob_client *d = mx_azurite_container(name, sizeof name);
    assert_int_equal(blob_put(d, LAYOUT_BLOB, "{\"partitions\":0}", 16, NULL, &r), 0);
    assert_int_equal(layout_settle(d, 4, &found, err, sizeof err), LAYOUT_FAILED);
    blob_result_free(&r);
    blob_client_free(c);
    blob_client_free(j);
    blob_client_free(d);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(the_first_takes_over_and_the_next_forwards, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(a_standby_takes_over_with_the_leases, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(a_takeover_that_fails_stays_a_standby_and_tries_again,
                                    mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(an_undecodable_journal_line_blocks_the_takeover,
                                    mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(a_partition_handed_over_is_never_forwarded_to_itself,
                                    mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(two_servers_share_two_partitions, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(partitions_spread_over_servers_and_follow_them,
                                    mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(the_partition_count_is_written_once, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(a_group_of_one_partition_stays_one, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(an_active_another_server_replaced_is_fenced, mx_azurite_setup,
                                    mx_azurite_teardown),
};
MX_TEST_MAIN(tests)
