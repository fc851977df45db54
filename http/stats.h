/*
 * The HTTP front's own counters and their Prometheus text: requests answered by route and
 * status, latency by route, requests in flight and suspended. libmicrohttpd's threads
 * update them with atomics; /metrics writes them.
 */
#ifndef MX_HTTP_STATS_H
#define MX_HTTP_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/prom.h"
#include "http/api.h"

/* The statuses counted one by one (see stats.c), and one slot for any other. */
#define HTTP_STATS_NCODES 13
/* The slot of `status` (the last one: any status not counted one by one), and its label
 * value ("200", ..., "other"). For every counter by status: the front's and the
 * forwarder's. */
int http_code_slot(int status);
const char *http_code_name(int slot);

struct http_stats {
    _Atomic long in_flight; /* requests begun and not yet completed */
    _Atomic long suspended; /* requests whose connection waits for an answer */
    _Atomic uint64_t requests[ROUTE_COUNT][HTTP_STATS_NCODES];
    struct prom_hist latency[ROUTE_COUNT];
};

void http_stats_init(struct http_stats *s);
/* A request of `route` was answered `status`, `ns` after its first byte. Any thread. */
void http_stats_answered(struct http_stats *s, enum api_route route, int status, uint64_t ns);
/* Appends the counters as Prometheus text. Any thread. */
void http_stats_write(struct http_stats *s, struct mx_buf *b);

#endif
