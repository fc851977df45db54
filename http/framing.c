/*
 * Reading a request (see request.h and server.c's steps 2 and 3): its headers, admission
 * and authorization before any body is read, and the body gathered up to its limit.
 */
#include "http/request.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/partition.h"
#include "http/admit.h"
#include "http/api.h"
#include "http/conns.h"
#include "http/forward.h"
#include "http/server.h"
#include "http/ui.h"

/* A body over the limit is read and thrown away (libmicrohttpd cannot answer in the
 * middle of a body) and answered 413 at its end, unless it goes on for more than this:
 * then a chunked one has its connection simply closed, and one whose Content-Length says
 * so is answered at once. */
#define DISCARD_MAX (1024 * 1024)

/* The headers admission decides on (http/admit.h), as libmicrohttpd parsed them. */
static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    (void)value;
    admit_count(cls, key);
    return MHD_YES;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    return admit_scan_next(cls, key, value) ? MHD_YES : MHD_NO;
}

void http_i_read_headers(struct hreq *q, const char *method, const char *version,
                         struct admit_headers *ah)
{
    memset(ah, 0, sizeof *ah);
    ah->http10 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
    ah->https = q->h->cfg.tls_cert_file && q->h->cfg.tls_key_file;
    ah->origin = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Origin");
    ah->host = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Host");
    ah->content_length = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Content-Length");
    ah->transfer_encoding =
        MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Transfer-Encoding");
    ah->content_type = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Content-Type");
    MHD_get_connection_values(q->conn, MHD_HEADER_KIND, count_header, ah);
    /* The head as received, from the method on: see admit_scan. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (ci) {
        struct admit_scan sc = {.head = method, .end = method + ci->header_size};
        MHD_get_connection_values(q->conn, MHD_HEADER_KIND, scan_header, &sc);
        ah->nul_header = admit_scan_end(&sc);
    }
}

enum MHD_Result http_i_on_headers(struct hreq *q, const char *url, const char *method,
                                  const char *version)
{
    struct http *h = q->h;
    const char *rid = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Request-Id");
    if (rid && http_i_valid_request_id(rid))
        snprintf(q->rid, sizeof q->rid, "%s", rid);
    else
        http_i_new_request_id(h, q->rid, sizeof q->rid);
    /* Anything but a small number counts as a request forwarded as often as it may be. */
    const char *hops = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, FWD_HOPS_HEADER);
    if (hops) {
        char *end;
        unsigned long n = strtoul(hops, &end, 10);
        q->hops = end == hops || *end || n > FWD_HOPS_MAX ? FWD_HOPS_MAX : (unsigned)n;
    }
    q->head = strcmp(method, "HEAD") == 0;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    q->fd = ci ? ci->connect_fd : -1;

    struct admit_headers ah;
    http_i_read_headers(q, method, version, &ah);
    if (!admit_framing(&ah, &q->err)) {
        q->close = true; /* where this request ends is in doubt: nothing after it is read */
        return http_i_send_error(q, &q->err);
    }
    const char *name;
    if (q->bad_path) {
        q->failed = true;
        api_path_refused(&q->err);
    } else if (!api_route(method, url, &q->route, &name, &q->name_len, &q->err)) {
        q->failed = true;
    } else {
        if (name) {
            memcpy(q->name, name, q->name_len);
            q->name[q->name_len] = '\0';
            q->partition = mx_partition(q->name, q->name_len, q->h->cfg.partitions);
        }
        /* A list or events request of one partition (`partition=P`) goes to that
         * partition's core or owner; without it, a partitioned server asks every one
         * (http/spread.c). Read here: the partition decides where it is dispatched. */
        const char *pv =
            q->route == ROUTE_LIST || q->route == ROUTE_EVENTS
                ? MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "partition")
                : NULL;
        if (pv) {
            char *end = NULL;
            unsigned long v = *pv >= '0' && *pv <= '9' ? strtoul(pv, &end, 10) : 0;
            if (!end || *end || v >= h->cfg.partitions) {
                q->failed = true;
                api_fail(&q->err, 400, "invalid_field", "partition",
                         "partition must be a whole number from 0 to %u", h->cfg.partitions - 1);
            } else {
                q->partition = (unsigned)v;
                q->one_partition = true;
            }
        }
        if (q->route == ROUTE_UI) {
            q->ui_redirect = strcmp(url, "/ui") == 0;
            q->asset = ui_find(url);
            const char *inm =
                MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "If-None-Match");
            q->ui_not_modified = inm && q->asset && ui_etag_matches(inm, q->asset->etag);
        }
        /* The dashboard's files are public and change nothing, and a browser may send an
         * Origin for a module script of the page itself: only their Host is checked. */
        struct admit_headers oh = ah;
        if (q->route == ROUTE_UI)
            oh.origin = NULL;
        if (!admit_origin_host(&oh, h->cfg.allowed_origins, h->cfg.allowed_hosts, h->check_host,
                               &q->err))
            q->failed = true;
        else
            http_i_authorize(q);
    }

    /* A connection beyond the limit is kept for health checks: anything else is refused
     * and the connection closed, which gives the spare back. */
    if (q->route != ROUTE_HEALTHZ && q->route != ROUTE_READYZ &&
        conns_spare(http_i_conn_of(q->conn))) {
        atomic_fetch_add(&h->spares_refused, 1);
        q->close = true;
        return http_i_send_group_unavailable(q, HTTP_TOO_MANY_CONNECTIONS);
    }

    /* A Content-Length over the limit is answered 413. Up to DISCARD_MAX the body is read
     * and thrown away first, as a chunked one is: a client that writes its whole body
     * before reading (most do) then reads the answer, where a close with its body unread
     * would reset the connection under it. Beyond that, the answer goes at once and the
     * connection closes. */
    bool json_route = q->route == ROUTE_ACQUIRE || q->route == ROUTE_RENEW ||
                      q->route == ROUTE_RELEASE || q->route == ROUTE_BREAK ||
                      http_i_is_many(q->route);
    bool has_body;
    struct api_error be;
    bool body_ok = admit_body(&ah, json_route, &has_body, &be);
    if (!body_ok && be.status == 413) {
        q->close = true;
        if (admit_content_length(&ah) <= DISCARD_MAX) {
            q->too_large = true;
            q->phase = PH_BODY;
            return MHD_YES;
        }
        q->err = be;
        return http_i_send_error(q, &q->err);
    }
    if (q->failed && has_body) {
        /* Refused already (400, 401, 403, 404, 405): its body would only cost memory and
         * hold the connection. (Without a body the answer comes at the final call, which
         * follows at once, and the connection stays open: an answer queued now closes it.) */
        q->close = true;
        return http_i_send_error(q, &q->err);
    }
    if (!body_ok && !q->failed) { /* 415 */
        q->close = true;
        q->err = be;
        return http_i_send_error(q, &q->err);
    }
    q->phase = PH_BODY;
    return MHD_YES;
}

enum MHD_Result http_i_on_body(struct hreq *q, const char *data, size_t len)
{
    if (q->too_large || q->body_len + len > API_MAX_BODY) {
        q->too_large = true;
        q->discarded += len;
        return q->discarded > DISCARD_MAX ? MHD_NO : MHD_YES;
    }
    if (q->body_len + len > q->body_cap) {
        /* Most bodies fit the request's own buffer; a larger one doubles as it arrives, so
         * that a client announcing 64 KiB and sending little costs little. */
        size_t cap = q->body_cap * 2;
        while (cap < q->body_len + len)
            cap *= 2;
        if (cap > API_MAX_BODY)
            cap = API_MAX_BODY;
        char *big = q->body == q->small ? malloc(cap) : realloc(q->body, cap);
        if (!big) {
            q->too_large = true; /* answered 503 at the end */
            q->oom = true;
            return MHD_YES;
        }
        if (q->body == q->small)
            memcpy(big, q->small, q->body_len);
        q->body = big;
        q->body_cap = cap;
    }
    memcpy(q->body + q->body_len, data, len);
    q->body_len += len;
    return MHD_YES;
}
