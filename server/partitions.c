/*
 * A server of a partitioned group (see partitions.h).
 */
#include "server/partitions.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/json_out.h"
#include "common/log.h"
#include "common/partition.h"
#include "common/prom.h"
#include "blob/blob.h"
#include "persistence/owner.h"
#include "server/core.h"
#include "server/group.h"
#include "server/placement.h"

#define MAX_SERVERS 64

struct partitions {
    const struct options *opt;
    unsigned count;
    struct place_config place;
    struct group *groups[MX_PARTITIONS_MAX];
    int64_t free_since_ms[MX_PARTITIONS_MAX]; /* when each was first seen free (0: owned) */
    bool named_here[MX_PARTITIONS_MAX];       /* seen free and named for this server (the servers'
                                               * listing read again then, once) */
    /* Leaving: the server each partition is handed to ("": none named). */
    char leave_to[MX_PARTITIONS_MAX][256];
    /* Since when each live server has been seen live (mono ms), by URL. */
    char known[MAX_SERVERS][256];
    int64_t known_since_ms[MAX_SERVERS];
    size_t nknown;
    char live[MAX_SERVERS][256]; /* this tick's live servers (nlive), placement's */
    size_t nlive;
    char decliners[MAX_SERVERS][256]; /* this tick's servers that decline new partitions */
    size_t ndecliners;
    /* Servers a group of this one gave up (they did not answer): not live to placement,
     * whatever their heartbeat says, so that their partitions go at once, for GONE_MS and
     * then for as long as a probe of them fails (a server that reaches the blob store but
     * not its peers would otherwise be given its share again, and given up again, every
     * GONE_MS plus a failover time for as long as that lasts). */
    struct gone {
        char url[256];
        int64_t since_ms, probe_ms; /* given up; last probed (mono ms) */
        bool probe_ok;              /* the last probe answered */
    } gone[MAX_SERVERS];
    char gone_urls[MAX_SERVERS][256]; /* for the heartbeat */
    size_t ngone;
    bool restrained; /* another server holds this one gone: it claims only orphans */
    bool leaving;    /* partitions_leave(): no placement, no claims */
    /* One listing of every partition's owner blob a tick, and one probe of each active. */
    struct blob_account account;
    struct blob_client *c; /* the container's */
    struct ha_seen seen[MX_PARTITIONS_MAX];
    struct ha_probes probes;
    _Atomic uint64_t listings, listings_failed;
};

/* A server given up is not live for at least this long (its heartbeat is stale by then
 * if it is dead), and is probed this often once it is past it. */
#define GONE_MS       15000
#define GONE_PROBE_MS 1000

int partitions_open(struct partitions **out, const struct partitions_config *cfg, char *err,
                    size_t errlen, const char **failed)
{
    *out = NULL;
    struct partitions *ps = calloc(1, sizeof *ps);
    if (!ps) {
        *failed = "cannot join the server group";
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ps->opt = cfg->opt;
    ps->count = cfg->count;
    /* Each partition's store is in p<ppp>/ of the data directory. */
    if (mkdir(cfg->opt->data_dir, 0700) != 0 && errno != EEXIST) {
        *failed = "cannot open the store";
        snprintf(err, errlen, "cannot create the data directory %s: %s", cfg->opt->data_dir,
                 strerror(errno));
        free(ps);
        return -1;
    }
    /* A free partition whose target has not taken it within two failover times is anyone's;
     * a server is given partitions once it has been live for three heartbeat times. */
    int64_t failover = (int64_t)cfg->opt->failover_after_ms;
    ps->place = (struct place_config){
        .orphan_after_ms = cfg->orphan_after_ms ? cfg->orphan_after_ms : 2 * failover,
        .settle_ms = cfg->settle_ms ? cfg->settle_ms : 3000,
        .max_gives = 2,
    };
    struct blob_options quick = {.connect_timeout_ms = 1000, .timeout_ms = 2000};
    if (blob_global_init() != 0 ||
        blob_parse_connection_string(cfg->opt->blob_connection_string, &ps->account, err, errlen) !=
            0 ||
        blob_client_new(&ps->account, cfg->opt->blob_container, &quick, &ps->c, err, errlen) != 0) {
        *failed = "cannot join the server group";
        partitions_close(ps);
        return -1;
    }
    for (unsigned p = 0; p < ps->count; p++) {
        struct group_config gc = {.opt = cfg->opt,
                                  .partition = p,
                                  .partitions = ps->count,
                                  .no_heartbeat = p > 0,
                                  .probes = &ps->probes};
        if (group_open(&ps->groups[p], &gc, err, errlen, failed) != 0) {
            partitions_close(ps);
            return -1;
        }
        group_allow_takeover(ps->groups[p], false); /* placement decides */
    }
    *out = ps;
    return 0;
}

void partitions_attach(struct partitions *ps, struct http *h)
{
    for (unsigned p = 0; p < ps->count; p++)
        group_attach(ps->groups[p], h);
}

void partitions_close(struct partitions *ps)
{
    if (!ps)
        return;
    for (unsigned p = 0; p < ps->count; p++)
        group_close(ps->groups[p]);
    if (ps->c) {
        blob_client_free(ps->c);
        blob_global_cleanup();
    }
    blob_account_wipe(&ps->account);
    free(ps);
}

unsigned partitions_owned(struct partitions *ps)
{
    unsigned n = 0;
    for (unsigned p = 0; p < ps->count; p++)
        n += group_core(ps->groups[p]) != NULL;
    return n;
}

bool partitions_owns(struct partitions *ps, unsigned p)
{
    return p < ps->count && group_core(ps->groups[p]) != NULL;
}

bool partitions_ready(void *ctx, char *why, size_t len, struct mx_buf *details)
{
    struct partitions *ps = ctx;
    unsigned owned = partitions_owned(ps);
    mx_buf_printf(details, "\"role\":\"%s\",\"partitions_owned\":%u", owned ? "active" : "standby",
                  owned);
    for (unsigned p = 0; p < ps->count; p++) {
        struct mx_buf scratch = {0};
        char reason[128];
        bool ready = group_ready(ps->groups[p], reason, sizeof reason, &scratch);
        mx_buf_free(&scratch);
        if (!ready) {
            snprintf(why, len, "partition %u: %s", p, reason);
            return false;
        }
    }
    return true;
}

void partitions_metrics(void *ctx, struct mx_buf *b)
{
    struct partitions *ps = ctx;
    struct mx_buf texts[MX_PARTITIONS_MAX];
    char names[MX_PARTITIONS_MAX][12];
    const char *values[MX_PARTITIONS_MAX];
    for (unsigned p = 0; p < ps->count; p++) {
        texts[p] = (struct mx_buf){0};
        group_metrics(ps->groups[p], &texts[p]);
        snprintf(names[p], sizeof names[p], "%u", p);
        values[p] = names[p];
    }
    if (prom_merge_labelled(b, texts, values, ps->count, "partition") != 0)
        b->oom = true;
    for (unsigned p = 0; p < ps->count; p++)
        mx_buf_free(&texts[p]);
    prom_gauge(b, "mutexd_partitions_owned", "The partitions this server owns.",
               partitions_owned(ps));
    prom_counter(b, "mutexd_partitions_listings_total",
                 "Listings of every partition's owner blob (one a tick).",
                 atomic_load(&ps->listings));
    prom_counter(b, "mutexd_partitions_listings_failed_total",
                 "Listings of the owner blobs the blob store did not answer.",
                 atomic_load(&ps->listings_failed));
}

/* "active" for a server that owns a partition, else "standby". */
static void set_role(cJSON *o, const cJSON *parts)
{
    const char *role = cJSON_GetArraySize(parts) > 0 ? "active" : "standby";
    if (cJSON_GetObjectItemCaseSensitive(o, "role"))
        cJSON_ReplaceItemInObjectCaseSensitive(o, "role", cJSON_CreateString(role));
    else
        cJSON_AddStringToObject(o, "role", role);
}

int partitions_render_servers(void *ctx, struct mx_buf *out)
{
    struct partitions *ps = ctx;
    struct mx_buf base = {0};
    if (group_render_servers(ps->groups[0], &base) != 0) {
        mx_buf_free(&base);
        return -1;
    }
    cJSON *o = cJSON_ParseWithLength(base.p, base.len);
    mx_buf_free(&base);
    if (!o)
        return -1;
    cJSON_ReplaceItemInObjectCaseSensitive(o, "active", cJSON_CreateNull());
    cJSON *map = cJSON_CreateObject(), *owners = cJSON_CreateArray(), *mine = cJSON_CreateArray();
    cJSON_AddNumberToObject(map, "count", ps->count);
    for (unsigned p = 0; p < ps->count; p++) {
        char url[256], since[32];
        uint64_t generation;
        int64_t since_ms;
        group_owner_info(ps->groups[p], url, &generation, &since_ms);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "partition", p);
        if (url[0]) {
            cJSON_AddStringToObject(e, "url", url);
            cJSON_AddNumberToObject(e, "generation", (double)generation);
            if (since_ms > 0) {
                mx_wall_iso(since_ms, since);
                cJSON_AddStringToObject(e, "since", since);
            } else {
                cJSON_AddNullToObject(e, "since");
            }
        } else {
            cJSON_AddNullToObject(e, "url");
            cJSON_AddNullToObject(e, "generation");
            cJSON_AddNullToObject(e, "since");
        }
        cJSON_AddItemToArray(owners, e);
        if (url[0] && strcmp(url, ps->opt->advertise_url) == 0)
            cJSON_AddItemToArray(mine, cJSON_CreateNumber(p));
    }
    cJSON_AddItemToObject(map, "owners", owners);
    cJSON *self = cJSON_GetObjectItemCaseSensitive(o, "self");
    set_role(self, mine);
    cJSON_AddItemToObject(self, "partitions", mine);
    cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(o, "servers"))
    {
        cJSON *parts = cJSON_GetObjectItemCaseSensitive(s, "partitions");
        if (!parts)
            parts = cJSON_AddArrayToObject(s, "partitions");
        set_role(s, parts);
    }
    cJSON_AddItemToObject(o, "partitions", map);
    return mx_json_append(out, o);
}

/* Since when `url` has been seen live (ms), remembered from earlier looks. */
static int64_t live_since(struct partitions *ps, const char *url, int64_t now)
{
    for (size_t i = 0; i < ps->nknown; i++)
        if (strcmp(ps->known[i], url) == 0)
            return ps->known_since_ms[i];
    if (ps->nknown < MAX_SERVERS) {
        memcpy(ps->known[ps->nknown], url, strlen(url) + 1);
        ps->known_since_ms[ps->nknown++] = now;
    }
    return now;
}

/* Forgets the servers no longer live, so that one coming back counts from its return. */
static void forget_gone(struct partitions *ps, char (*live)[256], size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < ps->nknown; i++) {
        bool still = false;
        for (size_t j = 0; j < n && !still; j++)
            still = strcmp(ps->known[i], live[j]) == 0;
        if (still) {
            memmove(ps->known[k], ps->known[i], sizeof ps->known[k]);
            ps->known_since_ms[k++] = ps->known_since_ms[i];
        }
    }
    ps->nknown = k;
}

static bool listed(char (*live)[256], size_t n, const char *url)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(live[i], url) == 0)
            return true;
    return false;
}

/* Keeps of `live` (n) the servers not held gone; returns how many. A server given up stays
 * gone for GONE_MS, then until a probe of it answers (or its heartbeat goes). */
static size_t drop_gone(struct partitions *ps, char (*live)[256], size_t n, int64_t now)
{
    size_t g = 0;
    for (size_t i = 0; i < ps->ngone; i++) {
        struct gone *e = &ps->gone[i];
        bool in = listed(live, n, e->url);
        if (in && now - e->since_ms >= GONE_MS && now - e->probe_ms >= GONE_PROBE_MS) {
            e->probe_ok = group_probe(ps->groups[0], e->url);
            e->probe_ms = now;
        }
        if (now - e->since_ms < GONE_MS || (in && !e->probe_ok)) {
            if (g != i)
                ps->gone[g] = *e;
            g++;
        } else if (in) {
            mx_info("a server given up answers again: its share comes back to it", "server=%s",
                    e->url);
        }
    }
    ps->ngone = g;
    for (size_t i = 0; i < g; i++)
        memcpy(ps->gone_urls[i], ps->gone[i].url, sizeof ps->gone_urls[i]);
    group_set_gone(ps->groups[0], (const char(*)[256])ps->gone_urls, g);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool gone = false;
        for (size_t j = 0; j < ps->ngone && !gone; j++)
            gone = strcmp(live[i], ps->gone[j].url) == 0;
        if (!gone && k != i)
            memmove(live[k], live[i], sizeof live[k]);
        k += !gone;
    }
    return k;
}

/* A server whose takeover of a partition failed waits it out before it tries again
 * (group_declines()), and says so in its heartbeat: meanwhile placement gives it nothing, in
 * the view of every server (its own included: it claims and gives nothing either), so that
 * the others take what would have been its share. Keeps of `live` (n) the servers that do
 * not decline; returns how many. */
static size_t drop_decliners(struct partitions *ps, char (*live)[256], size_t n, uint64_t now_ns)
{
    bool declines = false;
    for (unsigned p = 0; p < ps->count && !declines; p++)
        declines = group_declines(ps->groups[p], now_ns);
    group_set_declines(ps->groups[0], declines);
    size_t nd = group_decliners(ps->groups[0], ps->decliners, MAX_SERVERS), k = 0;
    ps->ndecliners = nd;
    for (size_t i = 0; i < n; i++) {
        bool out = listed(ps->decliners, nd, live[i]) ||
                   (declines && strcmp(live[i], ps->opt->advertise_url) == 0);
        if (!out && k != i)
            memmove(live[k], live[i], sizeof live[k]);
        k += !out;
    }
    return k;
}

static bool is_gone(struct partitions *ps, const char *url)
{
    for (size_t i = 0; i < ps->ngone; i++)
        if (strcmp(ps->gone[i].url, url) == 0)
            return true;
    return false;
}

/* Remembers the servers the groups gave up at their last look. */
static void note_gone(struct partitions *ps, int64_t now)
{
    for (unsigned p = 0; p < ps->count; p++) {
        const char *url = group_given_up(ps->groups[p]);
        if (!url || strcmp(url, ps->opt->advertise_url) == 0)
            continue;
        size_t i = 0;
        while (i < ps->ngone && strcmp(ps->gone[i].url, url) != 0)
            i++;
        bool known = i < ps->ngone;
        if (!known && ps->ngone < MAX_SERVERS) {
            snprintf(ps->gone[ps->ngone].url, sizeof ps->gone[ps->ngone].url, "%s", url);
            ps->ngone++;
        }
        if (i < ps->ngone) {
            ps->gone[i].since_ms = now;
            ps->gone[i].probe_ms = now; /* it was given up on a failed probe */
            ps->gone[i].probe_ok = false;
        }
        if (!known) /* once, not at every look of every partition that says so */
            mx_warn("a server did not answer: its partitions go to the others", "server=%s", url);
    }
}

bool partitions_healthy(struct partitions *ps, char *why, size_t len)
{
    for (unsigned p = 0; p < ps->count; p++) {
        struct core *c = group_core(ps->groups[p]);
        if (c && !core_healthy(c, why, len))
            return false;
    }
    return true;
}

/* A server leaving hands its partitions over two at a time: each one's requests are held
 * only while its own close runs, and closed all at once they would share the blob store,
 * each held the longer (5 at once took up to 1.1 s each where one alone takes 0.3 s); one
 * at a time, the next starts only at the tick after the last one closed. */
#define LEAVE_AT_ONCE 2

static void leave_next(struct partitions *ps)
{
    unsigned busy = 0;
    for (unsigned p = 0; p < ps->count; p++)
        busy += group_handing_over(ps->groups[p]);
    for (unsigned p = 0; p < ps->count && busy < LEAVE_AT_ONCE; p++)
        if (group_core(ps->groups[p])) {
            mx_info("leaving: handing a partition over", "partition=%u to=%s", p,
                    ps->leave_to[p][0] ? ps->leave_to[p] : "none");
            group_hand_over(ps->groups[p]);
            busy++;
        }
}

void partitions_leave(struct partitions *ps)
{
    ps->leaving = true;
    group_withdraw(ps->groups[0]);
    /* Each partition is named for its target among the others (the live servers of the
     * last tick, without this one): it claims it at once, without waiting to read that
     * this server's heartbeat is gone. The name is written as its handover releases it,
     * two at a time (leave_next()). */
    const char *urls[MAX_SERVERS], *owner[MX_PARTITIONS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < ps->nlive; i++)
        if (strcmp(ps->live[i], ps->opt->advertise_url) != 0)
            urls[n++] = ps->live[i];
    for (unsigned p = 0; p < ps->count; p++)
        owner[p] = group_core(ps->groups[p]) ? NULL : group_owner(ps->groups[p]);
    int target[MX_PARTITIONS_MAX];
    place_target(ps->count, urls, n, owner, target);
    for (unsigned p = 0; p < ps->count; p++) {
        group_allow_takeover(ps->groups[p], false);
        if (group_core(ps->groups[p])) {
            const char *to = target[p] >= 0 ? urls[target[p]] : NULL;
            snprintf(ps->leave_to[p], sizeof ps->leave_to[p], "%s", to ? to : "");
            if (to)
                group_hand_to(ps->groups[p], to);
        }
    }
    leave_next(ps);
}

bool partitions_left(struct partitions *ps)
{
    if (!group_live(ps->groups[0], ps->live, MAX_SERVERS)) {
        for (unsigned p = 0; p < ps->count; p++)
            if (group_core(ps->groups[p]) || group_handing_over(ps->groups[p]))
                return false; /* still being handed over */
        mx_info("leaving: no other server is live to take the partitions", NULL);
        return true;
    }
    for (unsigned p = 0; p < ps->count; p++) {
        const char *owner = group_owner(ps->groups[p]);
        if (!owner || strcmp(owner, ps->opt->advertise_url) == 0)
            return false;
    }
    return true;
}

/* One listing of every partition's owner blob (`p/<ppp>/owner`, with its lease state and
 * metadata), handed to each group as its look of this tick: blob requests that do not grow
 * with the partitions. */
static void seen_owner(const struct blob_item *it, void *ctx)
{
    struct partitions *ps = ctx;
    unsigned p;
    int end = 0;
    if (sscanf(it->name, "p/%3u/owner%n", &p, &end) == 1 && end == 11 && it->name[end] == '\0' &&
        p < ps->count)
        owner_from_item(it, &ps->seen[p].view);
}

static void look_all(struct partitions *ps)
{
    uint64_t sent = mx_mono_ns();
    for (unsigned p = 0; p < ps->count; p++)
        ps->seen[p] = (struct ha_seen){.ok = true, .sent_ns = sent};
    struct blob_result r = {0};
    bool ok = blob_list_each(ps->c, "p/", true, 100, seen_owner, ps, &r) == 0;
    blob_result_free(&r);
    atomic_fetch_add(&ps->listings, 1);
    if (!ok) {
        atomic_fetch_add(&ps->listings_failed, 1);
        for (unsigned p = 0; p < ps->count; p++)
            ps->seen[p].ok = false;
    }
    for (unsigned p = 0; p < ps->count; p++)
        group_set_seen(ps->groups[p], &ps->seen[p]);
}

int partitions_tick(struct partitions *ps)
{
    look_all(ps);
    if (ps->leaving) {
        /* A takeover that was under way when the server began to leave ends here too: its
         * partition is handed over as soon as it is served. */
        for (unsigned p = 0; p < ps->count; p++)
            if (group_tick(ps->groups[p]) != 0)
                group_hand_over(ps->groups[p]); /* fenced out of it: closed at once */
        leave_next(ps);
        group_reread_live(ps->groups[0]); /* for partitions_left(): who is left to take */
        return 0;
    }
    /* A partition released by name for this server is most often a leaver's, whose
     * heartbeat went first: the servers' listing, up to a heartbeat old, is read again once
     * when the name is first seen, lest placement give the leaver its share back as soon as
     * this server has taken it, and the partition wait for an orphan's time. */
    bool reread = false;
    for (unsigned p = 0; p < ps->count; p++) {
        const char *to = group_handed_to(ps->groups[p]);
        bool here = to && strcmp(to, ps->opt->advertise_url) == 0;
        reread = reread || (here && !ps->named_here[p]);
        ps->named_here[p] = here;
    }
    if (reread)
        group_reread_live(ps->groups[0]);
    int64_t now = (int64_t)(mx_mono_ns() / MX_NS_PER_MS);
    char(*live)[256] = ps->live;
    size_t n = drop_gone(ps, live, group_live(ps->groups[0], live, MAX_SERVERS), now);
    n = drop_decliners(ps, live, n, mx_mono_ns());
    forget_gone(ps, live, n);
    ps->nlive = n;
    const char *urls[MAX_SERVERS], *owner[MX_PARTITIONS_MAX], *handed[MX_PARTITIONS_MAX];
    int64_t since[MAX_SERVERS];
    for (size_t i = 0; i < n; i++) {
        urls[i] = live[i];
        since[i] = live_since(ps, live[i], now);
    }
    for (unsigned p = 0; p < ps->count; p++) {
        owner[p] = group_owner(ps->groups[p]);
        handed[p] = group_handed_to(ps->groups[p]);
        if (handed[p] &&
            (listed(ps->decliners, ps->ndecliners, handed[p]) || is_gone(ps, handed[p])))
            handed[p] = NULL; /* it will not take it: its new target does, at once */
        if (owner[p])
            ps->free_since_ms[p] = 0;
        else if (!ps->free_since_ms[p])
            ps->free_since_ms[p] = now;
    }
    /* A server another one gave up (it broke its lease, or its heartbeat holds it gone)
     * takes a partition only once it is an orphan: the others cannot reach it, and would
     * give it up again a failover time later. */
    bool restrained = group_gone_to_others(ps->groups[0]), orphan_only[MX_PARTITIONS_MAX];
    if (restrained != ps->restrained)
        mx_info(restrained ? "another server cannot reach this one: taking only orphaned "
                             "partitions"
                           : "every other server reaches this one again",
                NULL);
    ps->restrained = restrained;
    for (unsigned p = 0; p < ps->count; p++)
        orphan_only[p] = restrained || group_broken_here(ps->groups[p]);
    struct place_view v = {.partitions = ps->count,
                           .self = ps->opt->advertise_url,
                           .urls = urls,
                           .live_since_ms = since,
                           .nurls = n,
                           .owner = owner,
                           .free_since_ms = ps->free_since_ms,
                           .orphan_only = orphan_only,
                           .handed_to = handed,
                           .now_ms = now};
    struct place_move moves[MX_PARTITIONS_MAX + 2];
    size_t m = place_decide(&v, &ps->place, moves, sizeof moves / sizeof moves[0]);
    bool claim[MX_PARTITIONS_MAX] = {false};
    for (size_t i = 0; i < m; i++) {
        if (moves[i].action == PLACE_CLAIM) {
            claim[moves[i].partition] = true;
        } else if (group_core(ps->groups[moves[i].partition])) {
            /* A partition being handed over is named this server's until it is closed:
             * placement gives it again meanwhile, and that is nothing more to do. */
            mx_info("handing a partition over", "partition=%u to=%s", moves[i].partition,
                    urls[moves[i].to]);
            group_hand_to(ps->groups[moves[i].partition], urls[moves[i].to]);
            group_hand_over(ps->groups[moves[i].partition]);
        }
    }
    unsigned owned[MX_PARTITIONS_MAX];
    size_t nowned = 0;
    for (unsigned p = 0; p < ps->count; p++)
        if (group_core(ps->groups[p]))
            owned[nowned++] = p;
    group_set_partitions(ps->groups[0], owned, nowned); /* for the next heartbeat */
    for (unsigned p = 0; p < ps->count; p++) {
        group_allow_takeover(ps->groups[p], claim[p]);
        if (group_tick(ps->groups[p]) != 0) {
            /* Another server took this partition: it alone stops here, a standby of it from
             * now on (a server of one group starts again instead). */
            mx_warn("fenced out of a partition; a standby of it now", "partition=%u", p);
            group_hand_over(ps->groups[p]);
        }
    }
    note_gone(ps, now);
    return 0;
}
