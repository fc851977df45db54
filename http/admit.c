/*
 * Admission and framing of a request (see admit.h).
 */
#include "http/admit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void admit_count(struct admit_headers *h, const char *name)
{
    if (strcasecmp(name, "Content-Length") == 0)
        h->n_content_length++;
    else if (strcasecmp(name, "Transfer-Encoding") == 0)
        h->n_transfer_encoding++;
    else if (strcasecmp(name, "Host") == 0)
        h->n_host++;
    else if (strcasecmp(name, "Authorization") == 0)
        h->n_authorization++;
}

/* Only NULs lie between the end of `value` and `next`, and at most `most` of them. */
static bool line_end_clean(const char *key, const char *value, const char *next, size_t most)
{
    if (value <= key || value >= next)
        return false;
    const char *p = value + strlen(value);
    if (p > next || (size_t)(next - p) > most)
        return false;
    for (; p < next; p++)
        if (*p)
            return false;
    return true;
}

bool admit_scan_next(struct admit_scan *sc, const char *key, const char *value)
{
    if (key < sc->head || key >= sc->end || (sc->key && key <= sc->key) ||
        (sc->key && !line_end_clean(sc->key, sc->value, key, 2))) {
        sc->bad = sc->key ? sc->key : key;
        return false;
    }
    sc->key = key;
    sc->value = value;
    return true;
}

const char *admit_scan_end(struct admit_scan *sc)
{
    if (!sc->bad && sc->key && !line_end_clean(sc->key, sc->value, sc->end, 4))
        sc->bad = sc->key;
    return sc->bad;
}

/* A header's name as the `field` of an error, when it is a plain token. */
static void header_field(struct api_error *e, const char *name)
{
    size_t n = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-");
    if (n == 0 || name[n] || n >= sizeof e->field_buf)
        return;
    memcpy(e->field_buf, name, n + 1);
    e->field = e->field_buf;
}

bool admit_framing(const struct admit_headers *h, struct api_error *e)
{
    if (h->nul_header) {
        api_fail(e, 400, "invalid_field", NULL,
                 "a header has a NUL byte in its value, or is folded onto a second line");
        header_field(e, h->nul_header);
        return false;
    }
    if (h->n_content_length > 1)
        return api_fail(e, 400, "invalid_field", "Content-Length",
                        "more than one Content-Length header");
    if (h->n_transfer_encoding > 1)
        return api_fail(e, 400, "invalid_field", "Transfer-Encoding",
                        "more than one Transfer-Encoding header");
    if (h->n_transfer_encoding) {
        if (h->n_content_length)
            return api_fail(e, 400, "invalid_field", "Transfer-Encoding",
                            "a request has Content-Length or Transfer-Encoding, not both");
        if (h->http10)
            return api_fail(e, 400, "invalid_field", "Transfer-Encoding",
                            "Transfer-Encoding needs HTTP/1.1");
        if (!h->transfer_encoding || strcasecmp(h->transfer_encoding, "chunked") != 0)
            return api_fail(e, 400, "invalid_field", "Transfer-Encoding",
                            "the only transfer coding accepted is chunked, alone");
    }
    if (h->n_host > 1 || (h->n_host == 0 && !h->http10))
        return api_fail(e, 400, "invalid_field", "Host",
                        "an HTTP/1.1 request has exactly one Host header");
    if (h->n_authorization > 1)
        return api_fail(e, 400, "invalid_field", "Authorization",
                        "more than one Authorization header");
    return true;
}

bool admit_list_has(const char *list, const char *s, size_t n)
{
    for (const char *p = list; p && *p;) {
        p += strspn(p, " ");
        size_t len = strcspn(p, ",");
        size_t m = len;
        while (m && p[m - 1] == ' ')
            m--;
        if (m == n && strncasecmp(p, s, n) == 0)
            return true;
        p += len;
        if (*p == ',')
            p++;
    }
    return false;
}

bool admit_host_of(const char *v, const char **host, size_t *len)
{
    const char *end = v + strlen(v), *port;
    if (v[0] == '[') {
        const char *close = strchr(v, ']');
        if (!close)
            return false;
        port = close + 1;
    } else {
        port = strchr(v, ':');
        if (!port)
            port = end;
    }
    if (port < end && (*port != ':' || port + 1 == end ||
                       strspn(port + 1, "0123456789") != (size_t)(end - port - 1)))
        return false;
    *host = v;
    *len = (size_t)(port - v);
    return *len > 0;
}

bool admit_is_loopback_host(const char *host, size_t len)
{
    char buf[INET6_ADDRSTRLEN];
    if (len == 9 && strncasecmp(host, "localhost", 9) == 0)
        return true;
    if (host[0] == '[') {
        struct in6_addr a6;
        if (len < 3 || len - 2 >= sizeof buf)
            return false;
        memcpy(buf, host + 1, len - 2);
        buf[len - 2] = '\0';
        return inet_pton(AF_INET6, buf, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    struct in_addr a4;
    if (len >= sizeof buf)
        return false;
    memcpy(buf, host, len);
    buf[len] = '\0';
    return inet_pton(AF_INET, buf, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* `n` bytes of host[:port] without a default port (":80" for http, ":443" for https). */
static size_t without_default_port(const char *s, size_t n, bool https)
{
    const char *port = https ? ":443" : ":80";
    size_t pn = strlen(port);
    if (n > pn && strncmp(s + n - pn, port, pn) == 0)
        return n - pn;
    return n;
}

bool admit_same_origin(const struct admit_headers *h, const char *allowed_hosts)
{
    const char *host;
    size_t len;
    if (!h->origin || !h->host || !admit_host_of(h->host, &host, &len))
        return false;
    if (!admit_is_loopback_host(host, len) && !admit_list_has(allowed_hosts, host, len) &&
        !admit_list_has(allowed_hosts, "*", 1))
        return false;
    const char *scheme = h->https ? "https://" : "http://";
    size_t sn = strlen(scheme);
    if (strncasecmp(h->origin, scheme, sn) != 0)
        return false;
    const char *o = h->origin + sn;
    size_t on = without_default_port(o, strlen(o), h->https);
    size_t hn = without_default_port(h->host, strlen(h->host), h->https);
    return on == hn && strncasecmp(o, h->host, on) == 0;
}

bool admit_origin_host(const struct admit_headers *h, const char *allowed_origins,
                       const char *allowed_hosts, bool check_host, struct api_error *e)
{
    if (h->origin && !admit_list_has(allowed_origins, h->origin, strlen(h->origin)) &&
        !admit_same_origin(h, allowed_hosts))
        return api_fail(e, 403, "forbidden", NULL,
                        "requests from web pages are refused: the request has an Origin "
                        "header that is not in --allowed-origins, nor this server's own");
    const char *host;
    size_t len;
    if (!check_host || !h->host) /* no Host: HTTP/1.0, which no browser sends */
        return true;
    if (admit_host_of(h->host, &host, &len) &&
        (admit_is_loopback_host(host, len) || admit_list_has(allowed_hosts, host, len)))
        return true;
    return api_fail(e, 403, "forbidden", NULL,
                    "the Host header is not a loopback name or address nor in --allowed-hosts "
                    "(a defence against DNS rebinding)");
}

unsigned long long admit_content_length(const struct admit_headers *h)
{
    return h->content_length ? strtoull(h->content_length, NULL, 10) : 0;
}

bool admit_body(const struct admit_headers *h, bool json_route, bool *has_body, struct api_error *e)
{
    unsigned long long clen = admit_content_length(h);
    *has_body = clen > 0 || h->transfer_encoding != NULL;
    if (h->content_length && clen > API_MAX_BODY)
        return api_fail(e, 413, "body_too_large", NULL, "the body is over %d bytes", API_MAX_BODY);
    if (*has_body && json_route && (!h->content_type || !api_is_json_type(h->content_type)))
        return api_fail(e, 415, "unsupported_media_type", NULL,
                        h->content_type ? "the body must be JSON (Content-Type: application/json)"
                                        : "a body needs Content-Type: application/json");
    return true;
}
