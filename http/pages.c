/*
 * The answers that are pages rather than lease requests (see request.h): the dashboard's
 * files, GET /v1/servers, and /metrics.
 */
#include "http/request.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/partition.h"
#include "common/prom.h"
#include "http/api.h"
#include "http/auth.h"
#include "http/conns.h"
#include "http/forward.h"
#include "http/stats.h"
#include "http/ui.h"

/* GET /ui/...: a file of the dashboard, from the binary (no copy: the table is constant);
 * /ui itself is sent to /ui/, where the page's relative links resolve. */
enum MHD_Result http_i_serve_ui(struct hreq *q)
{
    const struct ui_asset *a = q->asset;
    bool redirect = q->ui_redirect;
    if (!q->h->cfg.ui || (!a && !redirect)) {
        api_fail(&q->err, 404, "not_found", NULL,
                 q->h->cfg.ui ? "no such file of the dashboard"
                              : "the dashboard is turned off (--ui off)");
        return http_i_send_error(q, &q->err);
    }
    int status = redirect ? 301 : q->ui_not_modified ? 304 : 200;
    size_t len = status == 200 ? a->len : 0;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, len ? (void *)a->data : (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "X-Request-Id", q->rid);
    if (redirect) {
        MHD_add_response_header(r, "Location", "/ui/");
        MHD_add_response_header(r, "Cache-Control", "no-store");
    } else {
        if (status == 200)
            MHD_add_response_header(r, "Content-Type", a->type);
        MHD_add_response_header(r, "ETag", a->etag);
        /* Kept, but asked about again each time: a new binary serves new files at once. */
        MHD_add_response_header(r, "Cache-Control", "no-cache");
    }
    return http_i_queue(q, status, r);
}

/* GET /v1/servers: the group as the callback renders it. A server without a group (no
 * --ha) answers 200 too, naming itself alone: a 404 would be an error in every browser's
 * console, on every page of the dashboard. */
enum MHD_Result http_i_serve_servers(struct hreq *q)
{
    struct http *h = q->h;
    if (!h->cfg.servers)
        return http_i_send_body(
            q, 200,
            strdup("{\"self\":{\"url\":null,\"role\":\"alone\"},\"active\":null,"
                   "\"servers\":[]}"),
            "application/json; charset=utf-8", 0, NULL);
    struct mx_buf b = {0};
    int rc = h->cfg.servers(h->cfg.ctx, &b);
    char *body = mx_buf_take(&b);
    if (rc != 0 || !body) {
        free(body);
        return http_i_send_unavailable(q, rc != 0 ? "the server group cannot be described now"
                                                  : "out of memory");
    }
    return http_i_send_body(q, 200, body, "application/json; charset=utf-8", 0, NULL);
}

enum MHD_Result http_i_serve_metrics(struct hreq *q)
{
    struct http *h = q->h;
    struct mx_buf b = {0};
    http_stats_write(&h->stats, &b);
    /* The tracker's count: libmicrohttpd's own, asked of a connection's daemon, is that
     * one thread's connections. */
    prom_gauge(&b, "mutexd_http_connections", "Open HTTP connections.", conns_open(h->conns));
    prom_counter(&b, "mutexd_http_connections_reaped_total",
                 "Connections closed for staying too long between requests or on sending one, or "
                 "to make room.",
                 conns_reaped(h->conns));
    prom_gauge(&b, "mutexd_http_waiting_requests",
               "Requests that may wait (blocking acquires, watches) held or forwarded now.",
               atomic_load(&h->waiting));
    prom_counter(&b, "mutexd_http_waits_refused_total",
                 "Requests that may wait answered 503 too_many_waiting_requests: as many were "
                 "held already as the server takes.",
                 atomic_load(&h->waits_refused));
    prom_counter(&b, "mutexd_http_changes_dropped_total",
                 "Acquires, renewals, releases and breaks not carried out: their client had "
                 "closed its connection before they were.",
                 atomic_load(&h->changes_dropped));
    prom_counter(&b, "mutexd_http_spare_connection_refusals_total",
                 "Requests other than health checks answered 503 too_many_connections on a "
                 "connection kept beyond --max-connections for health checks.",
                 atomic_load(&h->spares_refused));
    if (h->cfg.auth)
        auth_metrics(h->cfg.auth, &b);
    fwd_metrics(h->fwd, &b);
    if (h->cfg.metrics)
        h->cfg.metrics(h->cfg.ctx, &b);
    /* Without a core (a standby), the front counts its requests itself. The cores of a
     * partitioned server's partitions: each figure once per partition, labelled. */
    pthread_rwlock_rdlock(&h->core_lock);
    if (h->cfg.partitions == 1) {
        const struct http_part *pt = &h->parts[0];
        if (atomic_load(&pt->published) && pt->core.metrics)
            pt->core.metrics(pt->core.ctx, &b);
    } else {
        struct mx_buf texts[MX_PARTITIONS_MAX];
        char names[MX_PARTITIONS_MAX][12];
        const char *values[MX_PARTITIONS_MAX];
        size_t n = 0;
        for (unsigned p = 0; p < h->cfg.partitions; p++) {
            const struct http_part *pt = &h->parts[p];
            if (!atomic_load(&pt->published) || !pt->core.metrics)
                continue;
            texts[n] = (struct mx_buf){0};
            pt->core.metrics(pt->core.ctx, &texts[n]);
            snprintf(names[n], sizeof names[n], "%u", p);
            values[n] = names[n];
            n++;
        }
        if (prom_merge_labelled(&b, texts, values, n, "partition") != 0)
            b.oom = true;
        for (size_t i = 0; i < n; i++)
            mx_buf_free(&texts[i]);
    }
    pthread_rwlock_unlock(&h->core_lock);
    if (b.oom) {
        free(b.p);
        return http_i_send_unavailable(q, "out of memory");
    }
    return http_i_send_body(q, 200, b.p ? b.p : strdup(""),
                            "text/plain; version=0.0.4; charset=utf-8", 0, NULL);
}
