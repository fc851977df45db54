/*
 * The server group, seen from the blob container (see ha.h).
 *
 * Layout: state and names; the owner blob and the probe (ha_watch); heartbeats and the
 * group's listing; rendering and metrics.
 *
 * Safety does not depend on anything here: a standby that takes over too early (the active
 * was alive, only unreachable from it) costs a takeover, never a second holder, because the
 * old active's next append meets a sealed journal (mirror.c, seal_previous()).
 */
#include "server/ha.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/json_out.h"
#include "common/log.h"
#include "common/partition.h"
#include "common/prom.h"
#include "blob/blob.h"
#include "persistence/owner.h"

#define HEARTBEAT_NS    (1000 * MX_NS_PER_MS)
#define SERVER_STALE_MS 10000 /* a heartbeat older than this: the server is gone */
#define HA_GONE_MAX     64

struct ha {
    struct ha_config cfg;
    struct blob_account account;
    struct blob_client *c;  /* the group's blobs (under cfg.blob_prefix) */
    struct blob_client *hb; /* the container's: heartbeats */
    CURL *probe;
    char probe_url[300];
    uint64_t last_ok_ns;   /* the active last answered its /healthz */
    uint64_t heartbeat_ns; /* the last heartbeat written */
    char id[20];           /* this server's heartbeat blob: servers/<id>.json */
    bool has_seen;         /* `seen` is the next look (ha_set_seen()) */
    struct ha_seen seen;

    pthread_mutex_t lock;
    enum ha_role role;     /* lock */
    char active[256];      /* lock: the active's URL, or "" */
    uint64_t generation;   /* lock */
    int64_t since_ms;      /* lock */
    struct mx_buf servers; /* lock: the "servers" array, rendered */
    bool partitioned;      /* lock: ha_set_partitions() was called */
    unsigned parts[MX_PARTITIONS_MAX];
    size_t nparts;                /* lock */
    char gone[HA_GONE_MAX][256];  /* lock: ha_set_gone() */
    size_t ngone;                 /* lock */
    bool declines;                /* lock: ha_set_declines() */
    uint64_t lag_changes, lag_ms; /* lock: this server's own, as last reported */

    _Atomic uint64_t takeovers, last_takeover_ms, role_changes;
};

const char *ha_role_name(enum ha_role role)
{
    switch (role) {
    case HA_ACTIVE:
        return "active";
    case HA_STANDBY:
        return "standby";
    case HA_FENCED:
        return "fenced";
    case HA_JOINING:
        break;
    }
    return "joining";
}

/* FNV-1a of the URL: a stable name for this server's heartbeat. */
static void server_id(const char *url, char out[20])
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = url; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    snprintf(out, 20, "%016" PRIx64, h);
}

static size_t discard(char *data, size_t size, size_t nmemb, void *arg)
{
    (void)data;
    (void)arg;
    return size * nmemb;
}

int ha_open(struct ha **out, const struct ha_config *cfg, char *err, size_t errlen)
{
    struct ha *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    h->cfg = *cfg;
    pthread_mutex_init(&h->lock, NULL);
    server_id(cfg->advertise_url, h->id);
    /* Short timeouts: a standby looks several times a second. */
    struct blob_options quick = {.connect_timeout_ms = 1000, .timeout_ms = 2000},
                        group = {.connect_timeout_ms = 1000,
                                 .timeout_ms = 2000,
                                 .prefix = cfg->blob_prefix};
    if (blob_parse_connection_string(cfg->connection_string, &h->account, err, errlen) != 0 ||
        blob_client_new(&h->account, cfg->container, &group, &h->c, err, errlen) != 0 ||
        blob_client_new(&h->account, cfg->container, &quick, &h->hb, err, errlen) != 0)
        goto fail;
    /* A blob store slow or out of reach for a moment (a takeover elsewhere, a restart) is
     * no reason not to join: try for up to 30 s. */
    struct blob_result r = {0};
    uint64_t until = mx_mono_ns() + 30000 * MX_NS_PER_MS;
    while (blob_create_container(h->c, &r) != 0) {
        if (!blob_result_transient(&r) || mx_mono_ns() >= until) {
            snprintf(err, errlen, "cannot create the blob container '%s': %ld %s %s",
                     cfg->container, r.status, r.error_code, r.message);
            blob_result_free(&r);
            goto fail;
        }
        mx_warn("the blob store does not answer; trying again", "status=%ld detail=\"%s\"",
                r.status, r.message);
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    blob_result_free(&r);
    h->probe = curl_easy_init();
    if (!h->probe) {
        snprintf(err, errlen, "cannot initialize libcurl");
        goto fail;
    }
    *out = h;
    return 0;
fail:
    ha_close(h);
    return -1;
}

void ha_withdraw(struct ha *h)
{
    if (!h->hb || h->cfg.no_heartbeat)
        return;
    h->cfg.no_heartbeat = true;
    struct blob_result r = {0};
    char name[64];
    snprintf(name, sizeof name, "servers/%s.json", h->id);
    blob_delete(h->hb, name, NULL, &r); /* gone from the listing at once */
    blob_result_free(&r);
}

void ha_close(struct ha *h)
{
    if (!h)
        return;
    ha_withdraw(h);
    blob_client_free(h->hb);
    blob_client_free(h->c);
    if (h->probe)
        curl_easy_cleanup(h->probe);
    blob_account_wipe(&h->account);
    mx_buf_free(&h->servers);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

void ha_set_role(struct ha *h, enum ha_role role)
{
    pthread_mutex_lock(&h->lock);
    enum ha_role was = h->role;
    h->role = role;
    if (role == HA_ACTIVE) {
        snprintf(h->active, sizeof h->active, "%s", h->cfg.advertise_url);
        h->since_ms = mx_wall_ms();
    }
    pthread_mutex_unlock(&h->lock);
    if (was != role) {
        atomic_fetch_add(&h->role_changes, 1);
        mx_info("role changed", "from=%s to=%s url=%s", ha_role_name(was), ha_role_name(role),
                h->cfg.advertise_url);
        h->heartbeat_ns = 0; /* tell the group now */
    }
}

enum ha_role ha_role(struct ha *h)
{
    pthread_mutex_lock(&h->lock);
    enum ha_role r = h->role;
    pthread_mutex_unlock(&h->lock);
    return r;
}

/* ---- the owner blob and the probe ------------------------------------------------- */

/* A probe of `url` from the shared ones, made within the last 50 ms (a tick of every
 * partition asks each active once): its slot, or -1. */
#define PROBE_FRESH_NS (50 * MX_NS_PER_MS)
static int probe_cached(const struct ha_probes *ps, const char *url, uint64_t now)
{
    for (int i = 0; ps && i < HA_PROBES_MAX; i++)
        if (ps->at_ns[i] && now - ps->at_ns[i] < PROBE_FRESH_NS && strcmp(ps->url[i], url) == 0)
            return i;
    return -1;
}

static bool probe_once(struct ha *h, const char *url);

static bool probe_active(struct ha *h, const char *url)
{
    struct ha_probes *ps = h->cfg.probes;
    uint64_t now = mx_mono_ns();
    int i = probe_cached(ps, url, now);
    if (i >= 0)
        return ps->ok[i];
    bool ok = probe_once(h, url);
    if (ps) {
        int slot = 0; /* the oldest */
        for (int k = 1; k < HA_PROBES_MAX; k++)
            if (ps->at_ns[k] < ps->at_ns[slot])
                slot = k;
        snprintf(ps->url[slot], sizeof ps->url[slot], "%s", url);
        ps->ok[slot] = ok;
        ps->at_ns[slot] = mx_mono_ns();
    }
    return ok;
}

bool ha_probe(struct ha *h, const char *url)
{
    return probe_active(h, url);
}

static bool probe_once(struct ha *h, const char *url)
{
    snprintf(h->probe_url, sizeof h->probe_url, "%s/healthz", url);
    long timeout = (long)(h->cfg.failover_after_ms / 3);
    if (timeout > 1000)
        timeout = 1000;
    if (timeout < 100)
        timeout = 100;
    curl_easy_setopt(h->probe, CURLOPT_URL, h->probe_url);
    curl_easy_setopt(h->probe, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(h->probe, CURLOPT_CONNECTTIMEOUT_MS, timeout);
    curl_easy_setopt(h->probe, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h->probe, CURLOPT_WRITEFUNCTION, discard);
    /* As the forwarder: the advertised URL's own scheme only, never a proxy from the
     * environment, and the certificate verified as for any forwarded request. */
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h->probe, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(h->probe, CURLOPT_PROXY, "");
    long status = 0;
    if (curl_easy_perform(h->probe) == CURLE_OK)
        curl_easy_getinfo(h->probe, CURLINFO_RESPONSE_CODE, &status);
    return status == 200;
}

void ha_set_seen(struct ha *h, const struct ha_seen *seen)
{
    h->seen = *seen;
    h->has_seen = true;
}

/* The owner blob: the look given by ha_set_seen() if any, else read now. `*sent`: when the
 * look was sent (mono). */
static enum owner_rc look(struct ha *h, struct owner_view *ov, struct blob_result *r,
                          uint64_t *sent)
{
    if (h->has_seen) {
        h->has_seen = false;
        *sent = h->seen.sent_ns;
        if (!h->seen.ok)
            return OWNER_AGAIN;
        *ov = h->seen.view;
        return OWNER_OK;
    }
    *sent = mx_mono_ns();
    return owner_read(h->c, ov, r);
}

enum ha_verdict ha_watch(struct ha *h, struct ha_view *view)
{
    struct blob_result r = {0};
    struct owner_view ov;
    enum ha_verdict v = HA_WAIT;
    char *active = view->active;
    size_t len = sizeof view->active;
    memset(view, 0, sizeof *view);
    pthread_mutex_lock(&h->lock);
    snprintf(active, len, "%s", h->active);
    pthread_mutex_unlock(&h->lock);
    uint64_t sent;
    if (look(h, &ov, &r, &sent) != OWNER_OK)
        goto out; /* the blob store is out of reach: keep what we knew, take nothing */
    if (!ov.exists) {
        v = HA_TAKE; /* a new container */
        goto out;
    }
    view->named = ov.meta;
    const char *url = ov.meta.url;
    if (owner_lease_free(ov.lease_state)) {
        /* Broken, not released: a server gave its holder up (this one, or another). */
        if (strcmp(ov.lease_state, "broken") == 0 && url[0] &&
            strcmp(url, h->cfg.advertise_url) != 0)
            snprintf(view->given_up, sizeof view->given_up, "%s", url);
        view->broken_here =
            strcmp(ov.lease_state, "broken") == 0 && strcmp(url, h->cfg.advertise_url) == 0;
        if (strcmp(ov.lease_state, "broken") != 0)
            snprintf(view->handed_to, sizeof view->handed_to, "%s", ov.meta.to);
        v = HA_TAKE;
        goto out;
    }
    if (!url[0]) {
        /* Held by a server that has not named itself yet (taking over now), or by a
         * server outside any group: wait for its lease, as a single server would. */
        active[0] = '\0';
        goto out;
    }
    if (strcmp(url, h->cfg.advertise_url) == 0) {
        v = HA_TAKE; /* our own lease, from before a restart: the lease id is ours */
        goto out;
    }
    uint64_t now = mx_mono_ns();
    pthread_mutex_lock(&h->lock);
    if (strcmp(h->active, url) != 0 || h->generation != ov.meta.generation) {
        /* A new active gets the whole failover time to answer, and so does a new term of
         * the same one: a server that took a partition back after it was free (no other
         * owner seen in between) was otherwise given up at its first failed probe. */
        snprintf(h->active, sizeof h->active, "%s", url);
        h->last_ok_ns = now;
    }
    h->generation = ov.meta.generation;
    h->since_ms = ov.meta.since_ms;
    pthread_mutex_unlock(&h->lock);
    snprintf(active, len, "%s", url);
    if (probe_active(h, url)) {
        h->last_ok_ns = mx_mono_ns();
        goto out;
    }
    if (now - h->last_ok_ns < h->cfg.failover_after_ms * MX_NS_PER_MS)
        goto out;
    /* Given up: break its lease at once, if it is still the same holder. */
    char suspect[256];
    snprintf(suspect, sizeof suspect, "%s", url);
    if (owner_read(h->c, &ov, &r) != OWNER_OK || !ov.exists || strcmp(ov.meta.url, suspect) != 0)
        goto out;
    if (owner_break_if(h->c, ov.etag, &r) == OWNER_OK) {
        snprintf(view->given_up, sizeof view->given_up, "%s", suspect);
        mx_warn("the active server does not answer: broke its lease",
                "active=%s silent_ms=%" PRIu64, suspect,
                (uint64_t)((now - h->last_ok_ns) / MX_NS_PER_MS));
        v = HA_TAKE;
    }
out:
    /* A server that watches has no core: an owner blob that still names it (a partition it
     * handed over or was fenced out of, a lease from before a restart) names nobody to
     * forward to. Forwarded to itself, a request would be forwarded again, round and round. */
    if (strcmp(active, h->cfg.advertise_url) == 0)
        active[0] = '\0';
    blob_result_free(&r);
    return v;
}

bool ha_still_owner(struct ha *h, uint64_t *confirmed_ns)
{
    struct blob_result r = {0};
    struct owner_view ov;
    bool ours = true; /* unknown (the blob store out of reach): the mirror decides */
    uint64_t sent;
    if (look(h, &ov, &r, &sent) == OWNER_OK) {
        ours = ov.exists && strcmp(ov.lease_state, "leased") == 0 &&
               strcmp(ov.meta.url, h->cfg.advertise_url) == 0;
        if (ours)
            *confirmed_ns = sent;
    }
    blob_result_free(&r);
    return ours;
}

void ha_set_active(struct ha *h, uint64_t generation)
{
    pthread_mutex_lock(&h->lock);
    h->generation = generation;
    pthread_mutex_unlock(&h->lock);
    ha_set_role(h, HA_ACTIVE);
}

/* ---- heartbeats and the group ------------------------------------------------------ */

/* Rereads every heartbeat into h->servers. */
struct group_read {
    struct ha *h;
    cJSON *arr;
    int64_t now;
};

/* A heartbeat listed: read, and kept when it is fresh. */
static void read_heartbeat(const struct blob_item *it, void *ctx)
{
    struct group_read *g = ctx;
    struct blob_result r = {0};
    if (blob_get(g->h->hb, it->name, NULL, &r) == 0 && r.body) {
        cJSON *o = cJSON_ParseWithLength(r.body, r.body_len);
        cJSON *seen = o ? cJSON_GetObjectItemCaseSensitive(o, "seen_ms") : NULL;
        if (cJSON_IsNumber(seen) && g->now - (int64_t)seen->valuedouble <= SERVER_STALE_MS) {
            char t[32];
            mx_wall_iso((int64_t)seen->valuedouble, t);
            cJSON_DeleteItemFromObjectCaseSensitive(o, "seen_ms");
            cJSON_AddStringToObject(o, "seen_at", t);
            cJSON_AddItemToArray(g->arr, o);
            o = NULL;
        }
        cJSON_Delete(o);
    }
    blob_result_free(&r);
}

static void read_group(struct ha *h)
{
    struct blob_result r = {0};
    cJSON *arr = cJSON_CreateArray();
    struct group_read g = {.h = h, .arr = arr, .now = mx_wall_ms()};
    bool ok = arr && blob_list_each(h->hb, "servers/", false, 10, read_heartbeat, &g, &r) == 0;
    blob_result_free(&r);
    char *text = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!text)
        return; /* keep the last listing */
    pthread_mutex_lock(&h->lock);
    mx_buf_free(&h->servers);
    mx_buf_append(&h->servers, text, strlen(text));
    pthread_mutex_unlock(&h->lock);
    free(text);
}

void ha_reread_live(struct ha *h)
{
    if (h->hb)
        read_group(h);
}

void ha_heartbeat(struct ha *h, bool has_copy, uint64_t lag_changes, uint64_t lag_ms)
{
    uint64_t now = mx_mono_ns();
    if (h->cfg.no_heartbeat || (h->heartbeat_ns && now - h->heartbeat_ns < HEARTBEAT_NS))
        return;
    h->heartbeat_ns = now;
    pthread_mutex_lock(&h->lock);
    h->lag_changes = lag_changes;
    h->lag_ms = lag_ms;
    enum ha_role role = h->role;
    pthread_mutex_unlock(&h->lock);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "url", h->cfg.advertise_url);
    cJSON_AddStringToObject(o, "role", ha_role_name(role));
    if (has_copy) {
        cJSON_AddNumberToObject(o, "lag_changes", (double)lag_changes);
        cJSON_AddNumberToObject(o, "lag_ms", (double)lag_ms);
    } else { /* a standby reads the container when it takes over: no copy to lag */
        cJSON_AddNullToObject(o, "lag_changes");
        cJSON_AddNullToObject(o, "lag_ms");
    }
    pthread_mutex_lock(&h->lock);
    if (h->partitioned) {
        cJSON *arr = cJSON_AddArrayToObject(o, "partitions");
        for (size_t i = 0; i < h->nparts; i++)
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(h->parts[i]));
    }
    if (h->declines)
        cJSON_AddBoolToObject(o, "declines", true);
    if (h->ngone) {
        cJSON *arr = cJSON_AddArrayToObject(o, "gone");
        for (size_t i = 0; i < h->ngone; i++)
            cJSON_AddItemToArray(arr, cJSON_CreateString(h->gone[i]));
    }
    pthread_mutex_unlock(&h->lock);
    cJSON_AddNumberToObject(o, "seen_ms", (double)mx_wall_ms());
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (text) {
        char name[64];
        struct blob_result r = {0};
        snprintf(name, sizeof name, "servers/%s.json", h->id);
        blob_put(h->hb, name, text, strlen(text), NULL, &r);
        blob_result_free(&r);
        free(text);
    }
    read_group(h);
}

/* ---- rendering and metrics --------------------------------------------------------- */

void ha_owner(struct ha *h, char url[256], uint64_t *generation, int64_t *since_ms)
{
    pthread_mutex_lock(&h->lock);
    memcpy(url, h->active, 256);
    url[255] = '\0';
    *generation = h->generation;
    *since_ms = h->since_ms;
    pthread_mutex_unlock(&h->lock);
}

void ha_set_partitions(struct ha *h, const unsigned *parts, size_t n)
{
    pthread_mutex_lock(&h->lock);
    h->partitioned = true;
    h->nparts = n < MX_PARTITIONS_MAX ? n : MX_PARTITIONS_MAX;
    memcpy(h->parts, parts, h->nparts * sizeof *parts);
    pthread_mutex_unlock(&h->lock);
}

void ha_set_gone(struct ha *h, const char (*urls)[256], size_t n)
{
    pthread_mutex_lock(&h->lock);
    bool same = n == h->ngone;
    for (size_t i = 0; same && i < n; i++)
        same = strcmp(h->gone[i], urls[i]) == 0;
    h->ngone = n < HA_GONE_MAX ? n : HA_GONE_MAX;
    for (size_t i = 0; i < h->ngone; i++)
        snprintf(h->gone[i], sizeof h->gone[i], "%s", urls[i]);
    pthread_mutex_unlock(&h->lock);
    if (!same)
        h->heartbeat_ns = 0; /* tell the group now */
}

void ha_set_declines(struct ha *h, bool declines)
{
    pthread_mutex_lock(&h->lock);
    bool changed = h->declines != declines;
    h->declines = declines;
    pthread_mutex_unlock(&h->lock);
    if (changed)
        h->heartbeat_ns = 0; /* tell the group now */
}

/* A parse of the last servers listing read (NULL: none), to read without the lock. */
static cJSON *servers_parsed(struct ha *h)
{
    pthread_mutex_lock(&h->lock);
    cJSON *arr = h->servers.len ? cJSON_ParseWithLength(h->servers.p, h->servers.len) : NULL;
    pthread_mutex_unlock(&h->lock);
    return arr;
}

/* The URLs of the servers listed, or of those whose heartbeat has `flag` true. */
static size_t servers_urls(struct ha *h, const char *flag, char (*urls)[256], size_t max)
{
    cJSON *arr = servers_parsed(h);
    size_t n = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, arr)
    {
        const cJSON *url = cJSON_GetObjectItemCaseSensitive(o, "url");
        if (n < max && cJSON_IsString(url) && strlen(url->valuestring) < 256 &&
            (!flag || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, flag))))
            memcpy(urls[n++], url->valuestring, strlen(url->valuestring) + 1);
    }
    cJSON_Delete(arr);
    return n;
}

size_t ha_decliners(struct ha *h, char (*urls)[256], size_t max)
{
    return servers_urls(h, "declines", urls, max);
}

bool ha_gone_to_others(struct ha *h)
{
    cJSON *arr = servers_parsed(h);
    bool gone = false;
    const cJSON *o, *u;
    cJSON_ArrayForEach(o, arr)
    {
        const cJSON *url = cJSON_GetObjectItemCaseSensitive(o, "url");
        if (!cJSON_IsString(url) || strcmp(url->valuestring, h->cfg.advertise_url) == 0)
            continue;
        cJSON_ArrayForEach(u, cJSON_GetObjectItemCaseSensitive(o, "gone")) gone =
            gone || (cJSON_IsString(u) && strcmp(u->valuestring, h->cfg.advertise_url) == 0);
    }
    cJSON_Delete(arr);
    return gone;
}

size_t ha_live(struct ha *h, char (*urls)[256], size_t max)
{
    return servers_urls(h, NULL, urls, max);
}

int ha_render_servers(struct ha *h, struct mx_buf *out)
{
    cJSON *o = cJSON_CreateObject(), *self = cJSON_CreateObject(), *act = NULL, *list = NULL;
    pthread_mutex_lock(&h->lock);
    cJSON_AddStringToObject(self, "url", h->cfg.advertise_url);
    cJSON_AddStringToObject(self, "role", ha_role_name(h->role));
    if (h->active[0]) {
        char t[32];
        act = cJSON_CreateObject();
        cJSON_AddStringToObject(act, "url", h->active);
        if (h->since_ms > 0) {
            mx_wall_iso(h->since_ms, t);
            cJSON_AddStringToObject(act, "since", t);
        } else {
            cJSON_AddNullToObject(act, "since");
        }
        cJSON_AddNumberToObject(act, "generation", (double)h->generation);
    }
    if (h->servers.len)
        list = cJSON_ParseWithLength(h->servers.p, h->servers.len);
    /* A heartbeat says what its server was when it wrote it: one that said "active" and is
     * not the active the owner blob names now has lost the container since (its heartbeat
     * lives on for SERVER_STALE_MS). */
    cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        cJSON *url = cJSON_GetObjectItemCaseSensitive(it, "url");
        cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        if (cJSON_IsString(role) && strcmp(role->valuestring, "active") == 0 &&
            (!cJSON_IsString(url) || strcmp(url->valuestring, h->active) != 0))
            cJSON_ReplaceItemInObjectCaseSensitive(it, "role", cJSON_CreateString("unknown"));
    }
    pthread_mutex_unlock(&h->lock);
    cJSON_AddItemToObject(o, "self", self);
    cJSON_AddItemToObject(o, "active", act ? act : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "servers", list ? list : cJSON_CreateArray());
    return mx_json_append(out, o);
}

void ha_metrics(struct ha *h, struct mx_buf *b)
{
    enum ha_role role = ha_role(h);
    prom_header(b, "mutexd_role", "gauge", "1 for this server's role in its group.");
    static const enum ha_role roles[] = {HA_JOINING, HA_STANDBY, HA_ACTIVE, HA_FENCED};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        prom_sample(b, "mutexd_role", roles[i] == role, "role", ha_role_name(roles[i]), NULL);
    prom_counter(b, "mutexd_takeovers_total", "Times this server took the container over.",
                 atomic_load(&h->takeovers));
    prom_gauge_f(b, "mutexd_last_takeover_seconds",
                 "How long this server's last takeover took, from its decision to serving.",
                 (double)atomic_load(&h->last_takeover_ms) / 1000);
    prom_counter(b, "mutexd_role_changes_total", "Role changes of this server.",
                 atomic_load(&h->role_changes));
    pthread_mutex_lock(&h->lock);
    uint64_t lag_changes = h->lag_changes, lag_ms = h->lag_ms;
    pthread_mutex_unlock(&h->lock);
    prom_gauge(b, "mutexd_standby_lag_changes",
               "Changes the active has that this standby has not read (0 on the active).",
               lag_changes);
    prom_gauge_f(b, "mutexd_standby_lag_seconds", "Age of this standby's copy (0 on the active).",
                 (double)lag_ms / 1000);
}

void ha_count_takeover(struct ha *h, uint64_t ms)
{
    atomic_fetch_add(&h->takeovers, 1);
    atomic_store(&h->last_takeover_ms, ms);
}
