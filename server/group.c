/*
 * The server group's takeover sequence (see group.h).
 *
 * A standby, at each tick: one look at the owner blob (ha_watch); take over when it says
 * so, else forward to the active it names and follow the snapshot and journal it names
 * into the warm copy. Taking over: hold requests, clear the data directory, start the core
 * (mirror_open takes the owner lease and seals the previous journal; mirror_restore reads
 * the warm copy's tail or the named snapshot and journal; mirror_start claims a new
 * generation, writes its first snapshot and reserves tokens), then serve.
 *
 * The active, at each tick: one read of the owner blob. Another server named there: step
 * down (the storage fences it anyway). Not confirmed for --failover-after-ms: answer
 * nothing, reads included, until it is confirmed again, since a standby may have taken
 * over meanwhile.
 */
#include "server/group.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "blob/blob.h"

/* A takeover stopped by a line of the container that cannot be decoded is tried again
 * this often (an operator may have repaired the container), and logged at most this
 * often. */
#define BLOCKED_RETRY_NS (10000 * MX_NS_PER_MS)
#define BLOCKED_SAY_NS   (60000 * MX_NS_PER_MS)

int group_render_servers(void *ctx, struct mx_buf *out)
{
    struct server *s = ctx;
    return ha_render_servers(s->ha, out);
}

int group_open(struct server *s, char *err, size_t errlen, const char **failed)
{
    struct ha_config hc = {
        .advertise_url = s->opt.advertise_url,
        .connection_string = s->opt.blob_connection_string,
        .container = s->opt.blob_container,
        .failover_after_ms = s->opt.failover_after_ms,
    };
    if (blob_global_init() != 0) {
        *failed = "cannot join the server group";
        snprintf(err, errlen, "cannot initialize libcurl");
        return -1;
    }
    if (ha_open(&s->ha, &hc, err, errlen) != 0 ||
        mirror_copy_open(&s->copy, s->opt.blob_connection_string, s->opt.blob_container, err,
                         errlen) != 0) {
        ha_close(s->ha);
        s->ha = NULL;
        blob_global_cleanup();
        *failed = "cannot join the server group";
        return -1;
    }
    return 0;
}

void group_close(struct server *s)
{
    if (!s->ha)
        return;
    ha_close(s->ha);
    s->ha = NULL;
    mirror_copy_free(s->copy);
    s->copy = NULL;
    blob_global_cleanup();
}

/* A server of a group keeps no store of its own between terms as active: the container is
 * the truth, and it is read again at each takeover. */
static int wipe_store(const char *dir, char *err, size_t errlen)
{
    static const char *const files[] = {"mutexd.db", "mutexd.db-wal", "mutexd.db-shm"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (unlink(path) != 0 && errno != ENOENT) {
            snprintf(err, errlen, "cannot remove %.400s: %s", path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The container is free, or its holder was given up: read it and serve. */
static void take_over(struct server *s)
{
    uint64_t t0 = mx_mono_ns();
    uint64_t blocked = atomic_load(&s->blocked_until_ns);
    if (blocked && t0 < blocked)
        return;
    http_set_role(s->http, HTTP_ROLE_HOLD, NULL);
    atomic_store(&s->forwarding, false);
    ha_set_role(s->ha, HA_JOINING);
    char err[512] = "", quoted[1100];
    const char *failed = "cannot clear the data directory";
    enum core_rc rc = wipe_store(s->opt.data_dir, err, sizeof err) == 0 ? CORE_OK : CORE_FAILED;
    if (rc == CORE_OK)
        rc = start_core(s, err, sizeof err, &failed);
    if (rc != CORE_OK) {
        close_core(s);
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
        mx_warn("could not take the container; staying a standby", "step=\"%s\" error=%s", failed,
                mx_log_quote(quoted, sizeof quoted, err));
        return;
    }
    atomic_store(&s->blocked_until_ns, 0);
    s->blocked_said_ns = 0;
    /* It owned the container when its mirror took the lease and wrote the owner blob. */
    s->owned_ns = mx_mono_ns();
    http_set_serve_until(s->http, s->owned_ns + s->opt.failover_after_ms * MX_NS_PER_MS);
    http_set_core(s->http, s->rt, s->store);
    http_set_role(s->http, HTTP_ROLE_SERVE, NULL);
    ha_set_active(s->ha, mirror_generation(s->mirror));
    uint64_t ms = (mx_mono_ns() - t0) / MX_NS_PER_MS;
    ha_count_takeover(s->ha, ms);
    mx_info("serving as the active server", "generation=%" PRIu64 " leases=%zu took_ms=%" PRIu64,
            mirror_generation(s->mirror), s->leases, ms);
}

/* A standby keeps its copy of the container warm. */
static void follow(struct server *s, const struct ha_view *v)
{
    if (!v->named.journal[0])
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

int group_tick(struct server *s)
{
    if (!s->rt) {
        struct ha_view v;
        if (ha_watch(s->ha, &v) == HA_TAKE) {
            take_over(s);
        } else {
            atomic_store(&s->forwarding, v.active[0] != '\0');
            http_set_role(s->http, v.active[0] ? HTTP_ROLE_FORWARD : HTTP_ROLE_HOLD, v.active);
            if (ha_role(s->ha) != HA_STANDBY)
                ha_set_role(s->ha, HA_STANDBY);
            follow(s, &v);
        }
        if (!s->rt) {
            uint64_t changes = 0, ms = 0;
            mirror_copy_lag(s->copy, &changes, &ms);
            ha_heartbeat(s->ha, s->copy_ok, changes, ms);
        }
        return 0;
    }
    if (!mirror_fenced(s->mirror) && !ha_still_owner(s->ha, &s->owned_ns))
        mirror_give_up(s->mirror, "the owner blob names another server");
    if (mirror_fenced(s->mirror)) {
        ha_set_role(s->ha, HA_FENCED);
        http_set_role(s->http, HTTP_ROLE_FENCED, NULL);
        return 1;
    }
    /* Served while it owned the container within the failover time: a standby that cannot
     * reach it may take over once that has passed. */
    http_set_serve_until(s->http, s->owned_ns + s->opt.failover_after_ms * MX_NS_PER_MS);
    uint64_t changes, ms;
    mirror_lag(s->mirror, &changes, &ms);
    ha_heartbeat(s->ha, true, changes, ms);
    return 0;
}

void group_metrics(struct server *s, struct mx_buf *b)
{
    prom_counter(b, "mutexd_takeovers_blocked_total",
                 "Takeovers stopped because the container holds a line that cannot be decoded.",
                 atomic_load(&s->takeovers_blocked));
    prom_gauge(b, "mutexd_takeover_blocked",
               "1 while this server refuses to take over a container it cannot decode.",
               atomic_load(&s->blocked_until_ns) ? 1 : 0);
}
