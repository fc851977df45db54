/*
 * A request's helpers (see request.h), for the dispatcher (server.c) and the files that
 * serve a request in its stead (framing.c, many.c, spread.c): its connection suspended
 * and counted, the answer to a client that hung up, whether a read may still be answered
 * from this server's state, its request id, its connection's entry in the tracker
 * (conns.h), and its authorization. On the thread of the request they take.
 */
#include "http/request.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "http/api.h"
#include "http/auth.h"
#include "http/forward.h"
#include "http/role.h"
#include "http/server.h"

/* The client hung up: nothing to answer, and the connection is closed. */
enum MHD_Result http_i_nobody_to_answer(struct hreq *q)
{
    q->status = 499;
    q->phase = PH_DONE;
    return MHD_NO;
}

/* Before a request is handed on: its connection waits, counted among the suspended. */
void http_i_suspend(struct hreq *q)
{
    atomic_fetch_add(&q->h->stats.suspended, 1);
    q->counted = true;
    MHD_suspend_connection(q->conn);
}

/* A resumed connection whose client has gone is closed by libmicrohttpd without calling
 * the handler again: the completion callback settles the count then. */
void http_i_uncount(struct hreq *q)
{
    if (q->counted) {
        q->counted = false;
        atomic_fetch_sub(&q->h->stats.suspended, 1);
    }
}

/* Why this server may no longer answer a read from its state, after a request waited here:
 * it was fenced, stopped serving, or has not confirmed within --failover-after-ms that it
 * owns the container (a standby may have taken over). NULL when it may. */
const char *http_i_not_serving(struct hreq *q)
{
    enum http_role role = fwd_role(q->h->fwd, q->partition);
    uint64_t until =
        atomic_load_explicit(&q->h->parts[q->partition].serve_until_ns, memory_order_relaxed);
    if (role == HTTP_ROLE_FENCED)
        return FWD_FENCED;
    if ((role != HTTP_ROLE_SERVE && !q->here) || (until && mx_mono_ns() > until))
        return HTTP_UNCONFIRMED;
    return NULL;
}

void http_i_new_request_id(struct http *h, char *out, size_t len)
{
    static _Thread_local uint64_t state;
    if (state == 0 && getrandom(&state, sizeof state, 0) != sizeof state)
        state = mx_mono_ns() ^ atomic_fetch_add(&h->next_id, 1);
    /* xorshift64*: unique enough to find a request in the logs, not a secret. */
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    snprintf(out, len, "%016" PRIx64, (uint64_t)(state * 2685821657736338717ull));
}

bool http_i_valid_request_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.' ||
              s[i] == ':'))
            return false;
    return true;
}

struct conn *http_i_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The scope each route needs; 0: open to all. */
unsigned http_i_route_scope(enum api_route r)
{
    switch (r) {
    case ROUTE_ACQUIRE:
    case ROUTE_RENEW:
    case ROUTE_RELEASE:
    case ROUTE_ACQUIRE_MANY:
    case ROUTE_RENEW_MANY:
    case ROUTE_RELEASE_MANY:
        return AUTH_WRITE;
    case ROUTE_BREAK:
        return AUTH_ADMIN;
    case ROUTE_GET:
    case ROUTE_LIST:
    case ROUTE_SERVERS:
    case ROUTE_EVENTS:
        return AUTH_READ;
    case ROUTE_METRICS:
        return AUTH_METRICS;
    default:
        return 0;
    }
}

/* With authorization on: a valid bearer token with the route's scope, and for a resource,
 * within the token's prefix. A failure becomes the request's answer. */
void http_i_authorize(struct hreq *q)
{
    struct http *h = q->h;
    unsigned scope = http_i_route_scope(q->route);
    if (!h->cfg.auth || (!scope && q->route != ROUTE_WHOAMI))
        return; /* whoami: any valid token, no scope */
    const char *hdr = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Authorization");
    int rc = auth_check(h->cfg.auth, hdr, scope, &q->grant);
    if (rc == 401) {
        q->failed = q->unauthorized = true;
        api_fail(&q->err, 401, "unauthorized", NULL,
                 hdr ? "the bearer token is not valid" : "a bearer token is required");
    } else if (rc == 403) {
        q->failed = true;
        api_fail(&q->err, 403, "forbidden", NULL, "the token '%s' lacks the %s scope",
                 q->grant.name,
                 scope == AUTH_ADMIN     ? "admin"
                 : scope == AUTH_WRITE   ? "write"
                 : scope == AUTH_METRICS ? "metrics"
                                         : "read");
    } else if (q->name_len && !auth_prefix_allows(&q->grant, q->name, q->name_len)) {
        q->failed = true;
        api_fail(&q->err, 403, "forbidden", NULL,
                 "the token '%s' is limited to resources under '%s'", q->grant.name,
                 q->grant.prefix);
    }
}
