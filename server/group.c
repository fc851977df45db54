/*
 * The server group's takeover sequence (see group.h).
 *
 * A standby, at each tick: one look at the owner blob (ha_watch); take over when it says
 * so, else forward to the active it names and follow the snapshot and journal it names
 * into the warm copy. Taking over: hold requests, clear the data directory, start the core
 * (mirror_open takes the owner lease and seals the previous journal; mirror_restore reads
 * the warm copy's tail or the named snapshot and journal; mirror_start claims a new
 * generation, writes its first snapshot and reserves tokens), then serve. A partition's
 * core is opened on a thread of its own, and served at the first tick after it is open:
 * the server's other partitions are ticked meanwhile.
 *
 * The active, at each tick: one read of the owner blob. Another server named there: step
 * down (the storage fences it anyway). Not confirmed for --failover-after-ms: answer
 * nothing, reads included, until it is confirmed again, since a standby may have taken
 * over meanwhile.
 */
#include "server/group.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/partition.h"
#include "common/prom.h"
#include "blob/blob.h"
#include "server/ha.h"

/* A takeover stopped by a line of the container that cannot be decoded is tried again
 * this often (an operator may have repaired the container), and logged at most this
 * often. */
#define BLOCKED_RETRY_NS (10000 * MX_NS_PER_MS)
#define BLOCKED_SAY_NS   (60000 * MX_NS_PER_MS)

/* A partition's takeover that failed is not tried again before a wait that starts here and
 * doubles with each failure up to the cap, drawn between half of it and all of it: placement
 * would otherwise have the server claim it again at every tick, holding its lease through
 * each failed attempt, and no other server would take it. */
#define CLAIM_RETRY_FIRST_MS 10000
#define CLAIM_RETRY_MAX_MS   300000

struct group {
    const struct options *opt;
    unsigned partition, partitions;
    char blob_prefix[MX_PARTITION_PREFIX_MAX]; /* the partition's, or "" */
    struct http *http;
    struct ha *ha;
    /* NULL: a standby. Written by the main thread alone; read by the HTTP threads too
     * (/readyz and /metrics count the partitions owned), hence atomic. */
    _Atomic(struct core *) core;
    _Atomic bool forwarding;  /* a standby that knows the active */
    struct mirror_copy *copy; /* a standby's warm copy of the container */
    bool copy_ok;             /* it followed the journal at the last look */
    uint64_t copy_said_ns;    /* when a failure to follow was last logged */
    /* The active: when it last confirmed it owns the container (mono ns). */
    uint64_t owned_ns;
    /* A takeover stopped by a journal line that cannot be decoded: when it is tried again
     * (mono ns; 0: none) and when that was last logged. */
    _Atomic uint64_t blocked_until_ns; /* read by /metrics too */
    uint64_t blocked_said_ns;
    _Atomic uint64_t takeovers_blocked;
    bool may_take; /* group_allow_takeover() */
    /* A partition's failed takeovers in a row, and when the next may start (mono ns). */
    unsigned claim_failures;
    uint64_t claim_retry_ns;
    char seen_owner[256]; /* a standby's last look: the URL the owner blob names, or "" */
    char given_up[256];   /* the owner that look gave up, or "" */
    bool broken_here;     /* that look found this server's lease broken by another */
    char handed_to[256];  /* that look found it handed over to this server, or "" */
    /* A partition's takeover reads the container on a thread of its own (the opener): the
     * server's other partitions are confirmed at each tick meanwhile, or they would stop
     * answering once a slow takeover outlasted --failover-after-ms. Its outcome is handed
     * to the tick once `opened` is set. */
    pthread_t opener;
    bool opening; /* the opener was started and is not joined yet */
    _Atomic bool opened;
    struct core *open_core;
    enum core_rc open_rc;
    const char *open_failed;
    char open_err[512];
    uint64_t open_t0, open_done_ns;
    /* A partition handed over closes its core on a thread of its own (the closer): the
     * close ships what is left and seals the journal, seconds on a slow blob store, while
     * the server's other partitions must be confirmed at each tick. Until it is joined, the
     * partition is neither served nor watched, and its owner is still this server (the
     * owner lease is released at the end of the close). */
    pthread_t closer;
    bool closing; /* the closer was started and is not joined yet */
    _Atomic bool closed;
    struct core *close_core;
    uint64_t close_t0, close_done_ns;
};

int group_render_servers(void *ctx, struct mx_buf *out)
{
    struct group *g = ctx;
    return ha_render_servers(g->ha, out);
}

int group_open(struct group **out, const struct group_config *cfg, char *err, size_t errlen,
               const char **failed)
{
    const struct options *opt = cfg->opt;
    *out = NULL;
    *failed = "cannot join the server group";
    struct group *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    g->opt = opt;
    g->may_take = true;
    g->partition = cfg->partition;
    g->partitions = cfg->partitions;
    mx_partition_prefix(cfg->partition, cfg->partitions, g->blob_prefix);
    struct ha_config hc = {
        .blob_prefix = g->blob_prefix,
        .no_heartbeat = cfg->no_heartbeat,
        .advertise_url = opt->advertise_url,
        .connection_string = opt->blob_connection_string,
        .container = opt->blob_container,
        .failover_after_ms = opt->failover_after_ms,
        .probes = cfg->probes,
    };
    if (blob_global_init() != 0) {
        snprintf(err, errlen, "cannot initialize libcurl");
        free(g);
        return -1;
    }
    if (ha_open(&g->ha, &hc, err, errlen) != 0 ||
        mirror_copy_open(&g->copy, opt->blob_connection_string, opt->blob_container, g->blob_prefix,
                         err, errlen) != 0) {
        ha_close(g->ha);
        blob_global_cleanup();
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void group_attach(struct group *g, struct http *h)
{
    g->http = h;
}

void group_close(struct group *g)
{
    if (!g)
        return;
    if (g->closing) {
        pthread_join(g->closer, NULL);
        g->closing = false;
    }
    if (g->opening) {
        pthread_join(g->opener, NULL);
        if (g->open_core)
            core_close(g->open_core); /* never published */
    }
    if (g->core) {
        http_set_core(g->http, g->partition, NULL);
        core_close(g->core);
    }
    ha_close(g->ha);
    mirror_copy_free(g->copy);
    blob_global_cleanup();
    free(g);
}

void group_allow_takeover(struct group *g, bool allow)
{
    g->may_take = allow;
}

void group_withdraw(struct group *g)
{
    ha_withdraw(g->ha);
}

static void *closer_main(void *arg)
{
    struct group *g = arg;
    core_close(g->close_core);
    g->close_core = NULL;
    g->close_done_ns = mx_mono_ns();
    atomic_store(&g->closed, true);
    return NULL;
}

/* The handed-over core is closed: a standby of the partition from now on. */
static void finish_hand_over(struct group *g)
{
    ha_set_role(g->ha, HA_STANDBY);
    mx_info("handed the partition over", "partition=%u took_ms=%" PRIu64, g->partition,
            (uint64_t)((g->close_done_ns - g->close_t0) / MX_NS_PER_MS));
}

void group_hand_over(struct group *g)
{
    if (!g->core)
        return;
    g->close_t0 = mx_mono_ns();
    http_release(g->http, g->partition);
    core_set_stop_reason(g->core, RES_PARTITION_MOVED);
    g->close_core = g->core;
    g->core = NULL;
    atomic_store(&g->closed, false);
    if (pthread_create(&g->closer, NULL, closer_main, g) == 0) {
        g->closing = true;
        return;
    }
    mx_warn("cannot start a thread for the handover; closing on this one", "partition=%u",
            g->partition);
    closer_main(g);
    finish_hand_over(g);
}

bool group_handing_over(struct group *g)
{
    return g->closing;
}

const char *group_owner(struct group *g)
{
    if (g->core || g->closing)
        return g->opt->advertise_url;
    return g->seen_owner[0] ? g->seen_owner : NULL;
}

const char *group_given_up(struct group *g)
{
    return g->given_up[0] ? g->given_up : NULL;
}

void group_hand_to(struct group *g, const char *url)
{
    if (g->core)
        core_hand_to(g->core, url);
}

const char *group_handed_to(struct group *g)
{
    return !g->core && g->handed_to[0] ? g->handed_to : NULL;
}

bool group_declines(struct group *g, uint64_t now_ns)
{
    return now_ns < g->claim_retry_ns;
}

bool group_broken_here(struct group *g)
{
    return !g->core && g->broken_here;
}

void group_set_gone(struct group *g, const char (*urls)[256], size_t n)
{
    ha_set_gone(g->ha, urls, n);
}

void group_set_declines(struct group *g, bool declines)
{
    ha_set_declines(g->ha, declines);
}

size_t group_decliners(struct group *g, char (*urls)[256], size_t max)
{
    return ha_decliners(g->ha, urls, max);
}

bool group_gone_to_others(struct group *g)
{
    return ha_gone_to_others(g->ha);
}

bool group_probe(struct group *g, const char *url)
{
    return ha_probe(g->ha, url);
}

void group_owner_info(struct group *g, char url[256], uint64_t *generation, int64_t *since_ms)
{
    ha_owner(g->ha, url, generation, since_ms);
}

void group_set_partitions(struct group *g, const unsigned *parts, size_t n)
{
    ha_set_partitions(g->ha, parts, n);
}

size_t group_live(struct group *g, char (*urls)[256], size_t max)
{
    return ha_live(g->ha, urls, max);
}

void group_reread_live(struct group *g)
{
    ha_reread_live(g->ha);
}

struct core *group_core(struct group *g)
{
    return g->core;
}

const char *group_role(struct group *g)
{
    return ha_role_name(ha_role(g->ha));
}

bool group_ready(void *ctx, char *why, size_t len, struct mx_buf *details)
{
    struct group *g = ctx;
    enum ha_role role = ha_role(g->ha);
    mx_buf_printf(details, "\"role\":\"%s\"", ha_role_name(role));
    if (role == HA_FENCED) {
        snprintf(why, len, "fenced");
        return false;
    }
    if (role != HA_ACTIVE && !atomic_load(&g->forwarding)) {
        snprintf(why, len, "no_active_server");
        return false;
    }
    return true; /* a standby is ready when it can forward; the active asks its core next */
}

/* A server of a group keeps no store of its own between terms as active: the container is
 * the truth, and it is read again at each takeover. */
static int wipe_store(const char *dir, char *err, size_t errlen)
{
    static const char *const files[] = {"mutexd.db", "mutexd.db-wal", "mutexd.db-shm"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096 + 32];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (unlink(path) != 0 && errno != ENOENT) {
            snprintf(err, errlen, "cannot remove %.400s: %s", path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* Clears the data directory and opens the core: the container's lease taken, its state
 * read. The opener's thread with more than one partition, else the tick's. */
static void open_core(struct group *s)
{
    char dir[4096];
    s->open_core = NULL;
    s->open_err[0] = '\0';
    s->open_failed = "cannot clear the data directory";
    core_data_dir(s->opt, s->partition, s->partitions, dir, sizeof dir);
    s->open_rc = wipe_store(dir, s->open_err, sizeof s->open_err) == 0 ? CORE_OK : CORE_FAILED;
    struct core_config cc = {.opt = s->opt,
                             .warm = s->partitions > 1 ? NULL : s->copy,
                             .partition = s->partition,
                             .partitions = s->partitions};
    if (s->open_rc == CORE_OK)
        s->open_rc =
            core_open(&s->open_core, &cc, s->open_err, sizeof s->open_err, &s->open_failed);
    s->open_done_ns = mx_mono_ns();
    atomic_store(&s->opened, true);
}

static void *opener_main(void *arg)
{
    open_core(arg);
    return NULL;
}

static void finish_take_over(struct group *s);

/* The container is free, or its holder was given up: read it and serve. */
static void take_over(struct group *s)
{
    uint64_t t0 = mx_mono_ns();
    uint64_t blocked = atomic_load(&s->blocked_until_ns);
    if ((blocked && t0 < blocked) || t0 < s->claim_retry_ns)
        return;
    http_set_role(s->http, s->partition, HTTP_ROLE_HOLD, NULL);
    atomic_store(&s->forwarding, false);
    ha_set_role(s->ha, HA_JOINING);
    s->open_t0 = t0;
    atomic_store(&s->opened, false);
    if (s->partitions > 1) {
        if (pthread_create(&s->opener, NULL, opener_main, s) == 0) {
            s->opening = true;
            return;
        }
        mx_warn("cannot start a thread for the takeover; taking over on this one", "partition=%u",
                s->partition);
    }
    open_core(s);
    finish_take_over(s);
}

/* The opened core served, or the failure to open it told. */
static void finish_take_over(struct group *s)
{
    uint64_t t0 = s->open_t0;
    char quoted[1100];
    const char *failed = s->open_failed;
    const char *err = s->open_err;
    enum core_rc rc = s->open_rc;
    s->core = rc == CORE_OK ? s->open_core : NULL;
    s->open_core = NULL;
    if (rc != CORE_OK) {
        ha_set_role(s->ha, HA_STANDBY);
        if (rc == CORE_BLOCKED) {
            /* The container holds a line this server cannot decode: serving from what is
             * left would lose changes, so no takeover until the container is repaired. */
            atomic_fetch_add(&s->takeovers_blocked, 1);
            atomic_store(&s->blocked_until_ns, mx_mono_ns() + BLOCKED_RETRY_NS);
            if (!s->blocked_said_ns || mx_mono_ns() - s->blocked_said_ns > BLOCKED_SAY_NS) {
                mx_error("takeover stopped: the container holds a line that cannot be decoded; "
                         "repair it (docs/ha.md, \"A journal that cannot be read\")",
                         "error=%s retry_ms=%" PRIu64, mx_log_quote(quoted, sizeof quoted, err),
                         (uint64_t)(BLOCKED_RETRY_NS / MX_NS_PER_MS));
                s->blocked_said_ns = mx_mono_ns();
            }
            return;
        }
        if (rc == CORE_HELD && s->partitions > 1) {
            /* Another server took the partition first (two claimed it at once): a lost
             * race, not a failure of this server's, so no wait and nothing declined. */
            mx_info("another server took the partition first; staying a standby", "partition=%u",
                    s->partition);
            return;
        }
        if (s->partitions > 1) {
            uint64_t d = CLAIM_RETRY_FIRST_MS;
            for (unsigned k = 0; k < s->claim_failures && d < CLAIM_RETRY_MAX_MS; k++)
                d *= 2;
            if (d > CLAIM_RETRY_MAX_MS)
                d = CLAIM_RETRY_MAX_MS;
            uint64_t now = mx_mono_ns(),
                     wait = d / 2 + (now / 1000 + s->partition * 7919) % (d / 2);
            s->claim_failures++;
            s->claim_retry_ns = now + wait * MX_NS_PER_MS;
            mx_warn("could not take the partition; staying a standby and trying again later",
                    "partition=%u failures=%u retry_ms=%" PRIu64 " step=\"%s\" error=%s",
                    s->partition, s->claim_failures, wait, failed,
                    mx_log_quote(quoted, sizeof quoted, err));
            return;
        }
        mx_warn("could not take the container; staying a standby", "step=\"%s\" error=%s", failed,
                mx_log_quote(quoted, sizeof quoted, err));
        return;
    }
    s->claim_failures = 0;
    s->claim_retry_ns = 0;
    atomic_store(&s->blocked_until_ns, 0);
    s->blocked_said_ns = 0;
    /* It owned the container when its mirror took the lease and wrote the owner blob. */
    s->owned_ns = s->open_done_ns;
    http_set_serve_until(s->http, s->partition,
                         s->owned_ns + s->opt->failover_after_ms * MX_NS_PER_MS);
    struct http_core hc;
    core_front(s->core, &hc);
    http_set_core(s->http, s->partition, &hc); /* whole, once */
    http_set_role(s->http, s->partition, HTTP_ROLE_SERVE, NULL);
    struct mirror *m = core_mirror(s->core);
    ha_set_active(s->ha, mirror_generation(m));
    uint64_t ms = (mx_mono_ns() - t0) / MX_NS_PER_MS;
    ha_count_takeover(s->ha, ms);
    if (s->partitions > 1)
        mx_info("serving as the active server",
                "partition=%u generation=%" PRIu64 " leases=%zu took_ms=%" PRIu64, s->partition,
                mirror_generation(m), core_leases(s->core), ms);
    else
        mx_info("serving as the active server",
                "generation=%" PRIu64 " leases=%zu took_ms=%" PRIu64, mirror_generation(m),
                core_leases(s->core), ms);
}

/* A standby keeps its copy of the container warm. A standby of a partition does not: a
 * partition's takeover reads a share of the leases, and a copy of every partition a server
 * does not own would read each one's journal at every tick (blob requests growing with the
 * partitions). */
static void follow(struct group *s, const struct ha_view *v)
{
    if (!v->named.journal[0] || s->partitions > 1)
        return;
    char err[512], quoted[1100];
    bool ok = mirror_copy_follow(s->copy, &v->named, err, sizeof err) == MIRROR_READ_OK;
    uint64_t now = mx_mono_ns();
    if (!ok && (s->copy_ok || now - s->copy_said_ns > 10000 * MX_NS_PER_MS)) {
        mx_warn("standby: cannot follow the journal; trying again", "error=%s",
                mx_log_quote(quoted, sizeof quoted, err));
        s->copy_said_ns = now;
    }
    s->copy_ok = ok;
}

void group_set_seen(struct group *g, const struct ha_seen *seen)
{
    ha_set_seen(g->ha, seen);
}

/* A standby's look at the owner blob: take over, or forward to the active it names. */
static void watch(struct group *s)
{
    struct ha_view v;
    enum ha_verdict verdict = ha_watch(s->ha, &v);
    snprintf(s->seen_owner, sizeof s->seen_owner, "%s", verdict == HA_TAKE ? "" : v.active);
    snprintf(s->given_up, sizeof s->given_up, "%s", v.given_up);
    s->broken_here = v.broken_here;
    snprintf(s->handed_to, sizeof s->handed_to, "%s", verdict == HA_TAKE ? v.handed_to : "");
    if (verdict == HA_TAKE && s->may_take) {
        take_over(s);
    } else {
        atomic_store(&s->forwarding, v.active[0] != '\0');
        http_set_role(s->http, s->partition, v.active[0] ? HTTP_ROLE_FORWARD : HTTP_ROLE_HOLD,
                      v.active);
        if (ha_role(s->ha) != HA_STANDBY)
            ha_set_role(s->ha, HA_STANDBY);
        follow(s, &v);
    }
}

int group_tick(struct group *s)
{
    /* What this look gave up, this look only: a partition taken over keeps no word of the
     * server it was taken from, which may come back on its address. */
    s->given_up[0] = '\0';
    if (s->closing && atomic_load(&s->closed)) {
        pthread_join(s->closer, NULL);
        s->closing = false;
        finish_hand_over(s);
    }
    if (!s->core) {
        if (s->closing) {
            /* Being handed over: nothing to look at until the owner lease is released. */
        } else if (!s->opening) {
            watch(s);
        } else if (atomic_load(&s->opened)) {
            /* The partition's takeover is over: served from now on, or a standby again. */
            pthread_join(s->opener, NULL);
            s->opening = false;
            finish_take_over(s);
        }
        if (!s->core) {
            uint64_t changes = 0, ms = 0;
            mirror_copy_lag(s->copy, &changes, &ms);
            ha_heartbeat(s->ha, s->copy_ok, changes, ms);
        }
        return 0;
    }
    struct mirror *m = core_mirror(s->core);
    if (!mirror_fenced(m) && !ha_still_owner(s->ha, &s->owned_ns))
        mirror_give_up(m, "the owner blob names another server");
    if (mirror_fenced(m)) {
        ha_set_role(s->ha, HA_FENCED);
        http_set_role(s->http, s->partition, HTTP_ROLE_FENCED, NULL);
        return 1;
    }
    /* Served while it owned the container within the failover time: a standby that cannot
     * reach it may take over once that has passed. */
    http_set_serve_until(s->http, s->partition,
                         s->owned_ns + s->opt->failover_after_ms * MX_NS_PER_MS);
    uint64_t changes, ms;
    mirror_lag(m, &changes, &ms);
    ha_heartbeat(s->ha, true, changes, ms);
    return 0;
}

void group_metrics(void *ctx, struct mx_buf *b)
{
    struct group *s = ctx;
    ha_metrics(s->ha, b);
    prom_counter(b, "mutexd_takeovers_blocked_total",
                 "Takeovers stopped because the container holds a line that cannot be decoded.",
                 atomic_load(&s->takeovers_blocked));
    prom_gauge(b, "mutexd_takeover_blocked",
               "1 while this server refuses to take over a container it cannot decode.",
               atomic_load(&s->blocked_until_ns) ? 1 : 0);
}
