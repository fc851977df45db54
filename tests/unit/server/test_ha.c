/*
 * The server group's view of the container (server/ha.h) against a real Azurite: what a
 * standby decides from the owner blob and from probing the active, whether an active still
 * owns the container, the roles, the heartbeats and the listing of the group. Another server
 * is played with owner.h's calls (or, where it must be the real thing, with the mirror), and
 * an active's /healthz by a small HTTP server of the case's own. Without
 * MUTEXD_TEST_BLOB_CONNECTION_STRING (scripts/with-azurite.sh) every case fails.
 */
#include "tests/unit/azurite.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "persistence/mirror.h"
#include "persistence/owner.h"
#include "server/ha.h"

#define EXPECT MX_AZ_EXPECT

#define SELF_URL  "http://10.0.0.1:8080"
#define HOLDER_ID "0f0e0d0c-0b0a-4908-8706-050403020100"
/* The least --failover-after-ms the server accepts (server/options.c); ha_open itself
 * checks no bound. */
#define FAILOVER_MIN_MS 500
#define POLL_MS         50

static uint64_t ms_since(uint64_t t0_ns)
{
    return (mx_mono_ns() - t0_ns) / MX_NS_PER_MS;
}

/* This server's view, on `container` (created by ha_open when it is not there yet). */
static struct ha *open_ha(const char *container, uint64_t failover_after_ms)
{
    struct ha_config cfg = {.advertise_url = SELF_URL,
                            .connection_string = mx_azurite_connection_string(),
                            .container = container,
                            .failover_after_ms = failover_after_ms};
    struct ha *h = NULL;
    char err[512] = "";
    if (ha_open(&h, &cfg, err, sizeof err) != 0)
        fail_msg("ha_open: %s", err);
    return h;
}

/* What another server does when it takes the container: the owner blob, its lease, and
 * (when `url` is not NULL) its name and what it writes. */
static void another_takes(struct blob_client *c, const char *url, struct owner_meta *published)
{
    struct blob_result r = {0};
    /* Either may have been done before: a holder takes with the same lease id again. */
    assert_int_equal(owner_create(c, &r), OWNER_OK);
    assert_int_equal(owner_take(c, HOLDER_ID, &r), OWNER_OK);
    if (url) {
        struct owner_meta m = {.generation = 5,
                               .snapshot = "snapshots/5-10.jsonl",
                               .journal = "journal/5/11",
                               .since_ms = 1700000000123};
        snprintf(m.url, sizeof m.url, "%s", url);
        EXPECT(owner_publish(c, HOLDER_ID, &m, &r), OWNER_OK, 200, "");
        if (published)
            *published = m;
    }
    blob_result_free(&r);
}

/* The other server's lease: still its own, or taken from it. */
static enum owner_rc holder_renews(struct blob_client *c)
{
    struct blob_result r = {0};
    enum owner_rc rc = owner_renew(c, HOLDER_ID, &r);
    blob_result_free(&r);
    return rc;
}

/* ha_watch until it says HA_TAKE, looking every POLL_MS; fails after `within_ms`. Returns
 * how long it took, from `t0`. */
static uint64_t watch_until_take(struct ha *h, struct ha_view *v, uint64_t t0, uint64_t within_ms)
{
    while (ha_watch(h, v) != HA_TAKE) {
        if (ms_since(t0) > within_ms)
            fail_msg("no HA_TAKE within %llu ms (active '%s')", (unsigned long long)within_ms,
                     v->active);
        mx_sleep_ms(POLL_MS);
    }
    return ms_since(t0);
}

/* ha_watch for `for_ms`: HA_WAIT every time, naming `active`. */
static void watch_keeps_waiting(struct ha *h, const char *active, uint64_t for_ms)
{
    uint64_t t0 = mx_mono_ns();
    int looks = 0;
    do {
        struct ha_view v;
        if (ha_watch(h, &v) != HA_WAIT)
            fail_msg("HA_TAKE after %llu ms", (unsigned long long)ms_since(t0));
        assert_string_equal(v.active, active);
        looks++;
        mx_sleep_ms(POLL_MS);
    } while (ms_since(t0) < for_ms);
    assert_true(looks > 2);
}

/* The body of GET /v1/servers, parsed. */
static cJSON *render(struct ha *h)
{
    struct mx_buf b = {0};
    assert_int_equal(ha_render_servers(h, &b), 0);
    cJSON *o = cJSON_ParseWithLength(b.p, b.len);
    if (!o)
        fail_msg("not JSON: %s", b.p);
    mx_buf_free(&b);
    return o;
}

static const char *str_of(const cJSON *o, const char *name)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(it))
        fail_msg("'%s' is not a string", name);
    return it->valuestring;
}

/* The object has exactly these members. */
static void assert_members(const cJSON *o, const char *const *names, int n)
{
    assert_true(cJSON_IsObject(o));
    assert_int_equal(cJSON_GetArraySize(o), n);
    for (int i = 0; i < n; i++)
        if (!cJSON_HasObjectItem(o, names[i]))
            fail_msg("no member '%s'", names[i]);
}

/* "2023-11-14T22:13:20.123Z" as ms since the epoch. */
static int64_t iso_ms(const char *s)
{
    struct tm tm = {0};
    int ms = -1;
    assert_int_equal(sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                            &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms),
                     7);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + ms;
}

static char *metrics(struct ha *h)
{
    struct mx_buf b = {0};
    ha_metrics(h, &b);
    char *text = mx_buf_take(&b);
    assert_non_null(text);
    return text;
}

static void assert_has_line(const char *text, const char *line)
{
    char want[256];
    snprintf(want, sizeof want, "\n%s\n", line);
    if (!strstr(text, want))
        fail_msg("no line '%s' in:\n%s", line, text);
}

/* ---- an active's /healthz ---------------------------------------------------------- */

struct healthz {
    struct MHD_Daemon *d;
    _Atomic unsigned status; /* what it answers */
    _Atomic unsigned asked;
    char url[64];
};

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **req)
{
    (void)method, (void)version, (void)upload, (void)upload_len, (void)req;
    struct healthz *hz = cls;
    unsigned status = strcmp(url, "/healthz") == 0 ? atomic_load(&hz->status) : 404;
    atomic_fetch_add(&hz->asked, 1);
    struct MHD_Response *resp = MHD_create_response_from_buffer(2, "ok", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result rc = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static void healthz_start(struct healthz *hz, unsigned status)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    atomic_store(&hz->status, status);
    atomic_store(&hz->asked, 0);
    hz->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, answer, hz,
                             MHD_OPTION_SOCK_ADDR, &sin, MHD_OPTION_END);
    assert_non_null(hz->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(hz->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    snprintf(hz->url, sizeof hz->url, "http://127.0.0.1:%u", (unsigned)info->port);
}

/* ---- cases ------------------------------------------------------------------------- */

static void empty_container_is_taken(void **st)
{
    (void)st;
    char name[64];
    struct ha *h = open_ha(mx_azurite_name(name, sizeof name), FAILOVER_MIN_MS);
    assert_int_equal(ha_role(h), HA_JOINING);
    struct ha_view v;
    memset(&v, 'x', sizeof v);
    assert_int_equal(ha_watch(h, &v), HA_TAKE);
    assert_string_equal(v.active, "");
    assert_int_equal(v.named.generation, 0);

    /* ha_open created the container; an owner blob nobody leases is free as well. */
    struct blob_account a = mx_azurite_account();
    struct blob_client *c = mx_azurite_client(&a, name, NULL);
    struct blob_result r = {0};
    EXPECT(owner_create(c, &r), OWNER_OK, 201, "");
    assert_int_equal(ha_watch(h, &v), HA_TAKE);
    /* And one its holder let go of. */
    EXPECT(owner_take(c, HOLDER_ID, &r), OWNER_OK, 201, "");
    EXPECT(owner_release(c, HOLDER_ID, &r), OWNER_OK, 200, "");
    assert_int_equal(ha_watch(h, &v), HA_TAKE);
    blob_result_free(&r);
    blob_client_free(c);
    ha_close(h);
}

static void named_holder_is_waited_for(void **st)
{
    (void)st;
    char name[64], url[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    int fd;
    mx_closed_url(url, sizeof url, &fd);
    struct owner_meta m;
    another_takes(c, url, &m);
    struct ha *h = open_ha(name, 3000);

    struct ha_view v;
    assert_int_equal(ha_watch(h, &v), HA_WAIT);
    assert_string_equal(v.active, url);
    assert_int_equal(v.named.generation, m.generation);
    assert_string_equal(v.named.snapshot, m.snapshot);
    assert_string_equal(v.named.journal, m.journal);
    assert_int_equal(v.named.since_ms, m.since_ms);
    assert_string_equal(v.named.url, url);

    /* /v1/servers names it as the active, as the owner blob does. */
    cJSON *o = render(h);
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(o, "active");
    static const char *const act_members[] = {"url", "since", "generation"};
    assert_members(act, act_members, 3);
    assert_string_equal(str_of(act, "url"), url);
    assert_string_equal(str_of(act, "since"), "2023-11-14T22:13:20.123Z");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(act, "generation")->valuedouble, 5);
    cJSON_Delete(o);

    /* Its lease was not touched. */
    assert_int_equal(holder_renews(c), OWNER_OK);
    ha_close(h);
    blob_client_free(c);
    close(fd);
}

/* A holder that has not named itself (taking over now, or a server outside any group) is
 * waited for, however long, never given up. */
static void unnamed_holder_is_never_broken(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    another_takes(c, NULL, NULL);
    struct ha *h = open_ha(name, FAILOVER_MIN_MS);
    watch_keeps_waiting(h, "", 3 * FAILOVER_MIN_MS);
    assert_int_equal(holder_renews(c), OWNER_OK);
    ha_close(h);
    blob_client_free(c);
}

/* A holder whose URL answers nothing is given up after failover_after_ms, not before: its
 * lease is broken and the standby told to take the container. */
static void silent_holder_is_given_up(void **st)
{
    (void)st;
    char name[64], url[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    int fd;
    mx_closed_url(url, sizeof url, &fd);
    another_takes(c, url, NULL);
    struct ha *h = open_ha(name, FAILOVER_MIN_MS);

    struct ha_view v;
    uint64_t t0 = mx_mono_ns();
    uint64_t took = watch_until_take(h, &v, t0, FAILOVER_MIN_MS + 5000);
    if (took < FAILOVER_MIN_MS)
        fail_msg("given up after %llu ms, before the failover time", (unsigned long long)took);
    assert_string_equal(v.active, url);

    struct blob_result r = {0};
    struct owner_view ov;
    EXPECT(owner_read(c, &ov, &r), OWNER_OK, 200, "");
    assert_true(owner_lease_free(ov.lease_state));
    assert_int_equal(holder_renews(c), OWNER_FENCED);
    blob_result_free(&r);
    ha_close(h);
    blob_client_free(c);
    close(fd);
}

/* A holder that answers its /healthz 200 keeps the container past the failover time; once
 * it answers anything else it is given up. */
static void answering_holder_is_kept(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct healthz hz;
    healthz_start(&hz, 200);
    another_takes(c, hz.url, NULL);
    struct ha *h = open_ha(name, FAILOVER_MIN_MS);

    watch_keeps_waiting(h, hz.url, 3 * FAILOVER_MIN_MS);
    assert_true(atomic_load(&hz.asked) > 2);
    assert_int_equal(holder_renews(c), OWNER_OK);

    atomic_store(&hz.status, 503); /* up, and unhealthy */
    struct ha_view v;
    watch_until_take(h, &v, mx_mono_ns(), FAILOVER_MIN_MS + 5000);
    assert_int_equal(holder_renews(c), OWNER_FENCED);
    ha_close(h);
    MHD_stop_daemon(hz.d);
    blob_client_free(c);
}

/* The active took the container as a server does, with its mirror: the owner blob names
 * it, and it still owns it until it lets go. */
static void still_owner_after_mirror_took_it(void **st)
{
    (void)st;
    char name[64], dir[64];
    struct ha *h = open_ha(mx_azurite_name(name, sizeof name), FAILOVER_MIN_MS);
    struct mirror_config mc = {.connection_string = mx_azurite_connection_string(),
                               .container = name,
                               .data_dir = mx_temp_dir(dir, "ha"),
                               .mode = MIRROR_SYNC,
                               .takeover_wait_ms = 2000,
                               .advertise_url = SELF_URL};
    struct mirror *m = NULL;
    char err[512] = "";
    if (mirror_open(&m, &mc, NULL, err, sizeof err) != 0)
        fail_msg("mirror_open: %s", err);

    uint64_t confirmed = 0, sent = mx_mono_ns();
    assert_true(ha_still_owner(h, &confirmed));
    /* When the read that confirmed it was sent. */
    assert_true(confirmed >= sent && confirmed <= mx_mono_ns());
    /* Its own name in the owner blob (a restart): its lease id takes it back. */
    struct ha_view v;
    assert_int_equal(ha_watch(h, &v), HA_TAKE);

    mirror_close(m); /* releases the lease */
    uint64_t before = confirmed;
    assert_false(ha_still_owner(h, &confirmed));
    assert_int_equal(confirmed, before);
    ha_close(h);
}

/* Not the owner when the owner blob names another server, or no server; ha_still_owner
 * goes by the name only. */
static void still_owner_follows_the_name(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct ha *h = open_ha(name, FAILOVER_MIN_MS);
    const uint64_t never = 12345;
    uint64_t confirmed = never;
    assert_false(ha_still_owner(h, &confirmed)); /* no owner blob */
    another_takes(c, NULL, NULL);
    assert_false(ha_still_owner(h, &confirmed)); /* leased, nobody named */
    another_takes(c, "http://10.0.0.2:8080", NULL);
    assert_false(ha_still_owner(h, &confirmed));
    assert_int_equal(confirmed, never);

    another_takes(c, SELF_URL, NULL);
    assert_true(ha_still_owner(h, &confirmed));
    assert_true(confirmed != never);
    ha_close(h);
    blob_client_free(c);
}

static void roles_and_metrics(void **st)
{
    (void)st;
    char name[64];
    struct ha *h = open_ha(mx_azurite_name(name, sizeof name), FAILOVER_MIN_MS);
    assert_string_equal(ha_role_name(HA_JOINING), "joining");
    assert_string_equal(ha_role_name(HA_STANDBY), "standby");
    assert_string_equal(ha_role_name(HA_ACTIVE), "active");
    assert_string_equal(ha_role_name(HA_FENCED), "fenced");

    assert_int_equal(ha_role(h), HA_JOINING);
    char *text = metrics(h);
    assert_has_line(text, "mutexd_role{role=\"joining\"} 1");
    assert_has_line(text, "mutexd_role{role=\"standby\"} 0");
    assert_has_line(text, "mutexd_role_changes_total 0");
    free(text);

    ha_set_role(h, HA_STANDBY);
    ha_set_role(h, HA_STANDBY); /* no change */
    assert_int_equal(ha_role(h), HA_STANDBY);
    text = metrics(h);
    assert_has_line(text, "# TYPE mutexd_role gauge");
    assert_has_line(text, "mutexd_role{role=\"joining\"} 0");
    assert_has_line(text, "mutexd_role{role=\"standby\"} 1");
    assert_has_line(text, "mutexd_role{role=\"active\"} 0");
    assert_has_line(text, "mutexd_role{role=\"fenced\"} 0");
    assert_has_line(text, "mutexd_role_changes_total 1");
    assert_has_line(text, "mutexd_takeovers_total 0");
    free(text);
    cJSON *o = render(h);
    assert_string_equal(str_of(cJSON_GetObjectItemCaseSensitive(o, "self"), "role"), "standby");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "active")));
    cJSON_Delete(o);

    /* Took the container, of generation 9, in 1234 ms. */
    int64_t before = mx_wall_ms();
    ha_set_active(h, 9);
    ha_count_takeover(h, 1234);
    assert_int_equal(ha_role(h), HA_ACTIVE);
    text = metrics(h);
    assert_has_line(text, "mutexd_role{role=\"standby\"} 0");
    assert_has_line(text, "mutexd_role{role=\"active\"} 1");
    assert_has_line(text, "mutexd_role_changes_total 2");
    assert_has_line(text, "mutexd_takeovers_total 1");
    assert_has_line(text, "mutexd_last_takeover_seconds 1.234");
    free(text);
    o = render(h);
    const cJSON *self = cJSON_GetObjectItemCaseSensitive(o, "self");
    static const char *const self_members[] = {"url", "role"};
    assert_members(self, self_members, 2);
    assert_string_equal(str_of(self, "url"), SELF_URL);
    assert_string_equal(str_of(self, "role"), "active");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(o, "active");
    assert_string_equal(str_of(act, "url"), SELF_URL);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(act, "generation")->valuedouble, 9);
    int64_t since = iso_ms(str_of(act, "since"));
    assert_true(since >= before - 1 && since <= mx_wall_ms());
    cJSON_Delete(o);

    ha_set_role(h, HA_FENCED);
    text = metrics(h);
    assert_has_line(text, "mutexd_role{role=\"active\"} 0");
    assert_has_line(text, "mutexd_role{role=\"fenced\"} 1");
    free(text);
    ha_close(h);
}

/* The heartbeat blob, as a client of the container reads it. */
static cJSON *read_heartbeat(struct blob_client *c, char *blob, size_t cap)
{
    struct blob_result r = {0};
    struct blob_list l = {0};
    EXPECT(blob_list_page(c, "servers/", NULL, 0, &l, &r), 0, 200, "");
    cJSON *o = NULL;
    for (size_t i = 0; i < l.count && !o; i++) {
        EXPECT(blob_get(c, l.items[i].name, NULL, &r), 0, 200, "");
        o = cJSON_ParseWithLength(r.body, r.body_len);
        const cJSON *url = cJSON_GetObjectItemCaseSensitive(o, "url");
        if (!cJSON_IsString(url) || strcmp(url->valuestring, SELF_URL) != 0) {
            cJSON_Delete(o);
            o = NULL;
        } else {
            snprintf(blob, cap, "%s", l.items[i].name);
        }
    }
    blob_list_free(&l);
    blob_result_free(&r);
    if (!o)
        fail_msg("no heartbeat of %s in servers/", SELF_URL);
    return o;
}

/* The entry of `url` in /v1/servers' "servers", or NULL. */
static const cJSON *listed(const cJSON *o, const char *url)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(o, "servers"))
    {
        if (strcmp(str_of(it, "url"), url) == 0)
            return it;
    }
    return NULL;
}

static void put_heartbeat(struct blob_client *c, const char *blob, const char *url,
                          const char *role, int64_t seen_ms)
{
    char text[256];
    snprintf(text, sizeof text,
             "{\"url\":\"%s\",\"role\":\"%s\",\"lag_changes\":null,\"lag_ms\":null,"
             "\"seen_ms\":%lld}",
             url, role, (long long)seen_ms);
    struct blob_result r = {0};
    EXPECT(blob_put(c, blob, text, strlen(text), NULL, &r), 0, 201, "");
    blob_result_free(&r);
}

static void heartbeat_lists_the_group(void **st)
{
    (void)st;
    char name[64], blob[128];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct ha *h = open_ha(name, FAILOVER_MIN_MS);
    ha_set_role(h, HA_STANDBY);

    /* A standby has no copy to lag. */
    int64_t before = mx_wall_ms();
    ha_heartbeat(h, false, 0, 0);
    cJSON *hb = read_heartbeat(c, blob, sizeof blob);
    assert_int_equal(strlen(blob), strlen("servers/") + 16 + strlen(".json"));
    assert_string_equal(str_of(hb, "role"), "standby");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(hb, "lag_changes")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(hb, "lag_ms")));
    double seen = cJSON_GetObjectItemCaseSensitive(hb, "seen_ms")->valuedouble;
    assert_true(seen >= (double)before && seen <= (double)mx_wall_ms());
    cJSON_Delete(hb);

    cJSON *o = render(h);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "servers")), 1);
    const cJSON *me = listed(o, SELF_URL);
    static const char *const entry[] = {"url", "role", "lag_changes", "lag_ms", "seen_at"};
    assert_members(me, entry, 5);
    assert_string_equal(str_of(me, "role"), "standby");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(me, "lag_changes")));
    assert_int_equal(iso_ms(str_of(me, "seen_at")), (int64_t)seen);
    cJSON_Delete(o);

    /* A change of role is told at once; with a copy, its lag. */
    ha_set_active(h, 3);
    ha_heartbeat(h, true, 5, 250);
    hb = read_heartbeat(c, blob, sizeof blob);
    assert_string_equal(str_of(hb, "role"), "active");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(hb, "lag_changes")->valuedouble, 5);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(hb, "lag_ms")->valuedouble, 250);
    cJSON_Delete(hb);
    char *text = metrics(h);
    assert_has_line(text, "mutexd_standby_lag_changes 5");
    assert_has_line(text, "mutexd_standby_lag_seconds 0.250");
    free(text);
    /* Else at most once a second. */
    ha_heartbeat(h, true, 6, 300);
    hb = read_heartbeat(c, blob, sizeof blob);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(hb, "lag_changes")->valuedouble, 5);
    cJSON_Delete(hb);

    /* Other servers: one that says it is active and is not the active the owner blob
     * names, one gone quiet, one unreadable. */
    put_heartbeat(c, "servers/0000000000000001.json", "http://10.0.0.2:8080", "active",
                  mx_wall_ms());
    put_heartbeat(c, "servers/0000000000000002.json", "http://10.0.0.3:8080", "standby",
                  mx_wall_ms() - 60000);
    struct blob_result r = {0};
    EXPECT(blob_put(c, "servers/0000000000000003.json", "{", 1, NULL, &r), 0, 201, "");
    uint64_t t0 = mx_mono_ns();
    for (;;) {
        ha_heartbeat(h, true, 0, 0);
        o = render(h);
        if (listed(o, "http://10.0.0.2:8080"))
            break;
        cJSON_Delete(o);
        if (ms_since(t0) > 3000)
            fail_msg("the other server's heartbeat is not listed");
        mx_sleep_ms(POLL_MS);
    }
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "servers")), 2);
    assert_string_equal(str_of(listed(o, "http://10.0.0.2:8080"), "role"), "unknown");
    assert_string_equal(str_of(listed(o, SELF_URL), "role"), "active");
    assert_null(listed(o, "http://10.0.0.3:8080"));
    cJSON_Delete(o);

    /* Gone from the listing when it closes. */
    ha_close(h);
    EXPECT(blob_head(c, blob, &r), -1, 404, NULL);
    blob_result_free(&r);
    blob_client_free(c);
}

/* ha_open says why it cannot join. */
static void open_says_why_not(void **st)
{
    (void)st;
    char name[64], err[512] = "";
    struct ha_config cfg = {.advertise_url = SELF_URL,
                            .connection_string = "AccountName=x",
                            .container = mx_azurite_name(name, sizeof name),
                            .failover_after_ms = FAILOVER_MIN_MS};
    struct ha *h = NULL;
    assert_int_equal(ha_open(&h, &cfg, err, sizeof err), -1);
    assert_true(err[0] != '\0');

    /* The right Azurite, the wrong key: refused at once, not tried again for 30 s. */
    struct blob_account a = mx_azurite_account();
    char cs[1024];
    snprintf(cs, sizeof cs,
             "DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=" MX_AZURITE_OTHER_KEY
             ";BlobEndpoint=%s",
             a.name, a.endpoint);
    cfg.connection_string = cs;
    uint64_t t0 = mx_mono_ns();
    assert_int_equal(ha_open(&h, &cfg, err, sizeof err), -1);
    assert_true(ms_since(t0) < 5000);
    assert_non_null(strstr(err, "cannot create the blob container"));
    assert_non_null(strstr(err, "403"));
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(empty_container_is_taken, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(named_holder_is_waited_for, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(unnamed_holder_is_never_broken, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(silent_holder_is_given_up, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(answering_holder_is_kept, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(still_owner_after_mirror_took_it, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(still_owner_follows_the_name, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(roles_and_metrics, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(heartbeat_lists_the_group, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(open_says_why_not, mx_azurite_setup, mx_azurite_teardown),
};
MX_TEST_MAIN(tests)
