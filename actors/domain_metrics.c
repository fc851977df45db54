/*
 * The resources' domain as figures: its histograms' buckets, and the Prometheus text of
 * every counter and gauge the resources keep (see res_domain_metrics in resource.h).
 * Apart from the lease state machine, which only counts.
 */
#include <inttypes.h>
#include <stdio.h>

#include "actors/resource.h"

/* How long leases are held: 100 ms to a day; how long acquires wait: 1 ms to 5 minutes. */
static const double held_bounds[] = {0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 3600, 14400, 86400};
static const double wait_bounds[] = {0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300};

void res_domain_init(struct res_domain *d)
{
    prom_hist_init(&d->expiry_lateness, prom_latency_bounds, prom_latency_nbounds, 1e9);
    for (int k = 0; k < RES_NKINDS; k++) {
        prom_hist_init(&d->held_seconds[k], held_bounds, sizeof held_bounds / sizeof held_bounds[0],
                       1e3);
        prom_hist_init(&d->wait_seconds[k], wait_bounds, sizeof wait_bounds / sizeof wait_bounds[0],
                       1e9);
    }
}

static const char *const kind_names[RES_NKINDS] = {"exclusive", "shared", "semaphore"};

static void kind_metric(struct mx_buf *b, const char *name, const char *type, const char *help,
                        _Atomic int64_t *gauges, _Atomic uint64_t *counters)
{
    prom_header(b, name, type, help);
    for (int k = 0; k < RES_NKINDS; k++) {
        if (gauges)
            mx_buf_printf(b, "%s{kind=\"%s\"} %" PRId64 "\n", name, kind_names[k],
                          atomic_load(&gauges[k]));
        else
            mx_buf_printf(b, "%s{kind=\"%s\"} %" PRIu64 "\n", name, kind_names[k],
                          atomic_load(&counters[k]));
    }
}

static void kind_hist(struct mx_buf *b, const char *name, const char *help,
                      const struct prom_hist *h)
{
    prom_header(b, name, "histogram", help);
    for (int k = 0; k < RES_NKINDS; k++) {
        char labels[32];
        snprintf(labels, sizeof labels, "kind=\"%s\"", kind_names[k]);
        prom_hist_write(b, name, labels, &h[k]);
    }
}

void res_domain_metrics(struct res_domain *d, struct mx_buf *b)
{
    prom_gauge(b, "mutexd_leases_held", "Leases in force.", atomic_load(&d->held));
    prom_gauge(b, "mutexd_waiters", "Acquire requests queued for a resource.",
               atomic_load(&d->waiters));
    prom_gauge(b, "mutexd_watchers", "GET requests watching for a change.",
               atomic_load(&d->watchers));
    kind_metric(b, "mutexd_holders", "gauge",
                "Leases in force by kind (exclusive, shared, semaphore).", d->held_kind, NULL);
    kind_metric(b, "mutexd_waiters_by_kind", "gauge",
                "Acquire requests queued, by the kind of lease they ask for.", d->waiters_kind,
                NULL);
    prom_counter(b, "mutexd_grants_total", "Leases granted.", atomic_load(&d->grants));
    kind_metric(b, "mutexd_grants_by_kind_total", "counter", "Leases granted, by kind.", NULL,
                d->grants_kind);
    prom_counter(b, "mutexd_renewals_total", "Leases renewed.", atomic_load(&d->renewals));
    prom_counter(b, "mutexd_releases_total", "Leases released.", atomic_load(&d->releases));
    prom_counter(b, "mutexd_breaks_total", "Leases broken.", atomic_load(&d->breaks));
    prom_counter(b, "mutexd_expiries_total", "Leases that ran out.", atomic_load(&d->expiries));
    prom_header(b, "mutexd_expiry_lateness_seconds", "histogram",
                "How long after its deadline each lease was expired (for a lease that ran out "
                "while the server was down: after the restart).");
    prom_hist_write(b, "mutexd_expiry_lateness_seconds", "", &d->expiry_lateness);
    prom_counter(b, "mutexd_renewals_lost_total",
                 "Renewals that came too late: answered lease_lost (another lease took the "
                 "place, or the lease was released or broken).",
                 atomic_load(&d->renewals_lost));
    kind_hist(b, "mutexd_lease_held_seconds",
              "How long leases were held, from their grant to their release, break or expiry, "
              "by kind.",
              d->held_seconds);
    kind_hist(b, "mutexd_acquire_wait_seconds",
              "How long granted acquires waited in the queue (0 when granted at once), by kind.",
              d->wait_seconds);
    prom_counter(b, "mutexd_conflicts_total", "Acquires answered lease_held at once.",
                 atomic_load(&d->conflicts));
    prom_counter(b, "mutexd_wait_timeouts_total", "Waiters whose wait_ms ran out.",
                 atomic_load(&d->timeouts));
    /* A token is unsigned 64-bit: written as such, not through prom_gauge's int64_t. */
    prom_header(b, "mutexd_fencing_token_last", "gauge", "The last fencing token handed out.");
    mx_buf_printf(b, "mutexd_fencing_token_last %" PRIu64 "\n", atomic_load(&d->last_token));
}
