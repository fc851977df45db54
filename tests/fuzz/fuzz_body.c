/*
 * Fuzzer: JSON body decoding and query parameters (http/api.c). The first byte picks the
 * route; the rest is the body, and also, split at '&' and '=', query parameters.
 */
#include <stdlib.h>
#include <string.h>

#include "http/api.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static const enum api_route routes[] = {ROUTE_ACQUIRE, ROUTE_RENEW, ROUTE_RELEASE,
                                            ROUTE_BREAK,   ROUTE_GET,   ROUTE_LIST};
    static const struct res_limits lim = {
        .min_ttl_ms = 1000, .max_ttl_ms = 3600000, .max_wait_ms = 300000, .max_waiters = 1024};
    if (size == 0)
        return 0;
    enum api_route route = routes[data[0] % 6];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    struct res_req rq;
    memset(&rq, 0, sizeof rq);
    char reason[API_MAX_REASON + 1];
    struct api_error e;
    if (api_decode_body(route, body, len, &lim, &rq, reason, sizeof reason, &e)) {
        if (rq.ttl_ms < lim.min_ttl_ms || rq.ttl_ms > lim.max_ttl_ms ||
            rq.wait_ms > lim.max_wait_ms)
            abort(); /* a decoded request is always within the limits */
        if (rq.owner && (rq.owner->len == 0 || rq.owner->len > MX_OWNER_MAX))
            abort();
        if (rq.metadata && (rq.metadata->len > API_MAX_METADATA || rq.metadata->s[0] != '{'))
            abort();
    } else if (!e.code || (e.status != 400 && e.status != 503)) {
        abort();
    }
    res_req_clear(&rq);

    char *q = malloc(len + 1);
    memcpy(q, body, len);
    q[len] = '\0';
    struct api_query query;
    memset(&query, 0, sizeof query);
    char *save = NULL;
    for (char *kv = strtok_r(q, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '=');
        if (eq)
            *eq = '\0';
        if (!api_query_param(route, &query, kv, eq ? eq + 1 : NULL, &lim, &e))
            break;
    }
    memset(&rq, 0, sizeof rq);
    api_query_finish(route, &query, &lim, &rq);
    if (rq.wait_ms > lim.max_wait_ms)
        abort();
    free(q);
    return 0;
}
