/*
 * The HTTP front's counters (see stats.h).
 */
#include "http/stats.h"

#include <stdio.h>

/* Statuses counted in metrics, in this order; anything else counts as "other" (0). */
static const int counted_codes[HTTP_STATS_NCODES] = {200, 400, 401, 403, 404, 405, 409,
                                                     413, 415, 429, 500, 503, 0};
static const char *const code_names[HTTP_STATS_NCODES] = {
    "200", "400", "401", "403", "404", "405", "409", "413", "415", "429", "500", "503", "other"};

int http_code_slot(int status)
{
    for (int i = 0; i < HTTP_STATS_NCODES - 1; i++)
        if (counted_codes[i] == status)
            return i;
    return HTTP_STATS_NCODES - 1;
}

const char *http_code_name(int slot)
{
    return slot >= 0 && slot < HTTP_STATS_NCODES ? code_names[slot] : "other";
}

void http_stats_init(struct http_stats *s)
{
    for (int r = 0; r < ROUTE_COUNT; r++)
        prom_hist_init(&s->latency[r], prom_latency_bounds, prom_latency_nbounds, 1e9);
}

void http_stats_answered(struct http_stats *s, enum api_route route, int status, uint64_t ns)
{
    atomic_fetch_add_explicit(&s->requests[route][http_code_slot(status)], 1, memory_order_relaxed);
    prom_hist_observe(&s->latency[route], ns);
}

void http_stats_write(struct http_stats *s, struct mx_buf *b)
{
    prom_header(b, "mutexd_http_requests_total", "counter",
                "HTTP requests answered, by route and status.");
    for (int r = 0; r < ROUTE_COUNT; r++)
        for (int c = 0; c < HTTP_STATS_NCODES; c++) {
            uint64_t n = atomic_load_explicit(&s->requests[r][c], memory_order_relaxed);
            if (n == 0)
                continue;
            prom_sample(b, "mutexd_http_requests_total", n, "route",
                        api_route_name((enum api_route)r), "code", http_code_name(c), NULL);
        }
    prom_header(b, "mutexd_http_request_duration_seconds", "histogram",
                "Time from the request's first byte to its answer, by route.");
    for (int r = 0; r < ROUTE_COUNT; r++) {
        char labels[48];
        snprintf(labels, sizeof labels, "route=\"%s\"", api_route_name((enum api_route)r));
        prom_hist_write(b, "mutexd_http_request_duration_seconds", labels, &s->latency[r]);
    }
    prom_gauge(b, "mutexd_http_requests_in_flight", "Requests being handled now.",
               atomic_load(&s->in_flight));
    prom_gauge(b, "mutexd_http_requests_waiting",
               "Requests whose connection is suspended: queued, watching, or committing.",
               atomic_load(&s->suspended));
}
