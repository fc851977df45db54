/*
 * mutexd: the process. Reads options (flags, else MUTEXD_* environment variables, else
 * defaults), opens the store, starts the actor runtime and the HTTP front, and on
 * SIGTERM or SIGINT shuts down in the order that lets every request be answered:
 * stop accepting, stop the actors (pending requests get 503), drain the store's
 * commits, send the last answers, exit 0.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/resource.h"
#include "actors/resource_actor.h"
#include "actors/runtime.h"
#include "common/log.h"
#include "common/prom.h"
#include "http/server.h"
#include "persistence/store.h"
#include "server/options.h"

struct server {
    struct options opt;
    struct store *store;
    struct rt *rt;
    struct http *http;
    struct res_domain domain;
    struct ra_ctx actx;
    _Atomic bool recovered;
};

static bool server_ready(void *ctx, char *why, size_t len)
{
    struct server *s = ctx;
    if (!atomic_load(&s->recovered)) {
        snprintf(why, len, "recovering");
        return false;
    }
    if (!store_healthy(s->store, why, len))
        return false;
    return true;
}

static void server_metrics(void *ctx, struct prom_buf *b)
{
    struct server *s = ctx;
    struct res_domain *d = &s->domain;
    struct rt_stats st;
    rt_get_stats(s->rt, &st);

    prom_header(b, "mutexd_leases_held", "gauge", "Leases in force.");
    prom_printf(b, "mutexd_leases_held %ld\n", (long)atomic_load(&d->held));
    prom_header(b, "mutexd_waiters", "gauge", "Acquire requests queued for a resource.");
    prom_printf(b, "mutexd_waiters %ld\n", (long)atomic_load(&d->waiters));
    prom_header(b, "mutexd_watchers", "gauge", "GET requests watching for a change.");
    prom_printf(b, "mutexd_watchers %ld\n", (long)atomic_load(&d->watchers));
    prom_header(b, "mutexd_grants_total", "counter", "Leases granted.");
    prom_printf(b, "mutexd_grants_total %lu\n", (unsigned long)atomic_load(&d->grants));
    prom_header(b, "mutexd_renewals_total", "counter", "Leases renewed.");
    prom_printf(b, "mutexd_renewals_total %lu\n", (unsigned long)atomic_load(&d->renewals));
    prom_header(b, "mutexd_releases_total", "counter", "Leases released.");
    prom_printf(b, "mutexd_releases_total %lu\n", (unsigned long)atomic_load(&d->releases));
    prom_header(b, "mutexd_breaks_total", "counter", "Leases broken.");
    prom_printf(b, "mutexd_breaks_total %lu\n", (unsigned long)atomic_load(&d->breaks));
    prom_header(b, "mutexd_expiries_total", "counter", "Leases that ran out.");
    prom_printf(b, "mutexd_expiries_total %lu\n", (unsigned long)atomic_load(&d->expiries));
    prom_header(b, "mutexd_conflicts_total", "counter", "Acquires answered lease_held at once.");
    prom_printf(b, "mutexd_conflicts_total %lu\n", (unsigned long)atomic_load(&d->conflicts));
    prom_header(b, "mutexd_wait_timeouts_total", "counter", "Waiters whose wait_ms ran out.");
    prom_printf(b, "mutexd_wait_timeouts_total %lu\n", (unsigned long)atomic_load(&d->timeouts));
    prom_header(b, "mutexd_fencing_token_last", "gauge", "The last fencing token handed out.");
    prom_printf(b, "mutexd_fencing_token_last %lu\n", (unsigned long)atomic_load(&d->last_token));

    prom_header(b, "mutexd_actors_active", "gauge", "Resource actors in memory.");
    prom_printf(b, "mutexd_actors_active %zu\n", st.active);
    prom_header(b, "mutexd_actor_activations_total", "counter", "Actors activated.");
    prom_printf(b, "mutexd_actor_activations_total %lu\n", (unsigned long)st.activations);
    prom_header(b, "mutexd_actor_deactivations_total", "counter", "Idle actors deactivated.");
    prom_printf(b, "mutexd_actor_deactivations_total %lu\n", (unsigned long)st.deactivations);
    prom_header(b, "mutexd_actor_messages_total", "counter", "Messages handled by actors.");
    prom_printf(b, "mutexd_actor_messages_total %lu\n", (unsigned long)st.messages);
    prom_header(b, "mutexd_actor_run_queue", "gauge", "Actors waiting for a worker thread.");
    prom_printf(b, "mutexd_actor_run_queue %zu\n", st.run_queue);
    prom_header(b, "mutexd_actor_mailbox_refused_total", "counter",
                "Messages refused because a mailbox was full.");
    prom_printf(b, "mutexd_actor_mailbox_refused_total %lu\n", (unsigned long)st.mailbox_refused);

    store_metrics(s->store, b);
}

struct preload {
    struct rt *rt;
    size_t n, failed;
};

static void preload_row(void *arg, const char *name, size_t len, struct store_row *row)
{
    struct preload *p = arg;
    if (ra_send_preload(p->rt, name, len, row) == RT_OK)
        p->n++;
    else
        p->failed++;
}

int main(int argc, char **argv)
{
    struct server s;
    memset(&s, 0, sizeof s);
    int rc = options_parse(&s.opt, argc, argv);
    if (rc >= 0)
        return rc; /* --help, --version, or a bad option (already reported) */
    mx_log_set_level((enum mx_log_level)s.opt.log_level);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* every thread started below inherits it */
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    struct store_config sc = {
        .dir = s.opt.data_dir,
        .fault_commit_every = s.opt.fault_commit_every,
        .fault_commit_first = s.opt.fault_commit_first,
        .fault_commit_count = s.opt.fault_commit_count,
    };
    if (store_open(&s.store, &sc, err, sizeof err) != 0) {
        mx_error("cannot open the store", "error=\"%s\"", err);
        fprintf(stderr, "mutexd: %s\n", err);
        return 1;
    }

    s.domain.lim = (struct res_limits){
        .min_ttl_ms = s.opt.min_ttl_ms,
        .max_ttl_ms = s.opt.max_ttl_ms,
        .max_wait_ms = s.opt.max_wait_ms,
        .max_waiters = (uint32_t)s.opt.max_waiters,
    };
    atomic_init(&s.domain.last_token, store_token_hwm(s.store));
    uint64_t idx = store_index_hwm(s.store), floor = store_index_floor(s.store);
    atomic_init(&s.domain.last_index, idx > floor ? idx : floor);
    s.actx = (struct ra_ctx){.domain = &s.domain, .store = s.store};

    struct rt_config rc_cfg = {
        .behavior = &ra_behavior,
        .ctx = &s.actx,
        .workers = (unsigned)s.opt.threads,
        .max_actors = s.opt.max_actors,
        .barrier_passed = ra_barrier_passed,
    };
    if ((rc = rt_start(&s.rt, &rc_cfg)) != 0) {
        mx_error("cannot start the actor runtime", "errno=%d", rc);
        store_close(s.store);
        return 1;
    }

    struct http_config hc = {
        .listen = s.opt.listen,
        .threads = (unsigned)s.opt.threads,
        .max_connections = (unsigned)s.opt.max_connections,
        .idle_timeout_ms = s.opt.idle_timeout_ms,
        .tls_cert_file = s.opt.tls_cert,
        .tls_key_file = s.opt.tls_key,
        .rt = s.rt,
        .store = s.store,
        .lim = &s.domain.lim,
        .ready = server_ready,
        .metrics = server_metrics,
        .ctx = &s,
    };
    if (http_start(&s.http, &hc, err, sizeof err) != 0) {
        mx_error("cannot start the HTTP server", "error=\"%s\"", err);
        fprintf(stderr, "mutexd: %s\n", err);
        rt_shutdown(s.rt);
        store_close(s.store);
        return 1;
    }

    /* Leases held at the last stop come back now, each with the time it had left, so that
     * their expiry runs and they are counted and listed. */
    struct preload p = {.rt = s.rt};
    if (store_list_held(s.store, NULL, NULL, INT_MAX, preload_row, &p) != STORE_OK)
        mx_error("cannot read the held leases; they are loaded on first use instead", NULL);
    atomic_store(&s.recovered, true);
    mx_info("started", "version=%s address=%s data_dir=%s leases=%zu", MUTEXD_VERSION,
            http_address(s.http), s.opt.data_dir, p.n);
    if (p.failed)
        mx_warn("some held leases could not be loaded now; they load on first use", "count=%zu",
                p.failed);

    int sig = 0;
    sigwait(&set, &sig);
    mx_info("shutting down", "signal=%s", sig == SIGTERM ? "TERM" : "INT");
    http_quiesce(s.http);
    rt_shutdown(s.rt);
    store_close(s.store);
    http_stop(s.http);
    mx_info("stopped", NULL);
    return 0;
}
