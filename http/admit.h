/*
 * Admission and framing of a request, decided from its headers alone (http/server.c reads
 * them from libmicrohttpd and answers what these refuse): whether a proxy in front could
 * read its length or its headers differently (RFC 9112), whether a web page sent it
 * (Origin, DNS rebinding through Host), and whether its body may be read. Pure functions
 * over what they are given; any thread.
 */
#ifndef MX_HTTP_ADMIT_H
#define MX_HTTP_ADMIT_H

#include <stdbool.h>
#include <stddef.h>

#include "http/api.h"

/* A request's headers as admission needs them. The values are the first of each name, or
 * NULL; the counts are of every header line of that name. */
struct admit_headers {
    bool http10; /* HTTP/1.0 (libmicrohttpd answers versions other than 1.x itself) */
    bool https;  /* the request came over TLS: its own origin is https://Host */
    const char *origin, *host, *content_length, *transfer_encoding, *content_type;
    unsigned n_content_length, n_transfer_encoding, n_host, n_authorization;
    /* The first header with a NUL byte in its value or folded onto a second line (see
     * admit_nul_header), or NULL. */
    const char *nul_header;
};

/* Counts `name` into h's counts (call for each header line). */
void admit_count(struct admit_headers *h, const char *name);

/*
 * A NUL in a header value is invisible through libmicrohttpd's API: it ends the value
 * there, so `Authorization: Bearer tok\0junk` reads as `Bearer tok`. But its headers are
 * kept where they were received, in order, each line's break (CR LF or LF) and its colon
 * overwritten with NULs, between the method and the end of the head. So between the end
 * of a value and the next header's name only its line break may lie: one or two NULs, two
 * to four before the end of the head (the blank line). Anything more is a NUL in the value
 * and what came after it. (A single trailing NUL before a bare LF cannot be told from a
 * CR; it hides nothing.) A header found elsewhere was rebuilt from a folded line
 * (obsolete, RFC 9112 5.2): refused as well. This is the layout of libmicrohttpd 0.9.75
 * (Debian 12); with one that kept its headers elsewhere every request with a header would
 * be refused, which the tests would show at once. Failing open instead would let a folded
 * first header switch the check off.
 *
 * Fed the headers in order (`admit_scan_next`, false: stop, one is bad), then finished
 * (`admit_scan_end`): the name of the first bad header, or NULL.
 */
struct admit_scan {
    const char *head, *end;  /* the request's head as received: [method, end of head) */
    const char *key, *value; /* the header whose line end is checked next */
    const char *bad;         /* the first header that failed */
};
bool admit_scan_next(struct admit_scan *sc, const char *key, const char *value);
const char *admit_scan_end(struct admit_scan *sc);

/* Framing (RFC 9112 3.2, 6.1, 6.3): a request whose length or target a proxy in front
 * could read differently from libmicrohttpd (which takes the first of two Content-Lengths,
 * lets chunked win over a Content-Length, and neither refuses nor reads another transfer
 * coding) is refused: false with `e` filled (400). The caller answers and closes the
 * connection. */
bool admit_framing(const struct admit_headers *h, struct api_error *e);

/* What a web browser sends on behalf of a page the user happened to open is refused: a
 * request with an Origin header (browsers add it to every cross-origin request and to
 * every POST) unless `allowed_origins` lists it or it is the request's own origin (see
 * admit_same_origin: the dashboard at /ui/ calling its server), and, when `check_host`, a
 * Host that is neither loopback nor in `allowed_hosts`: a page on a name its owner points
 * at 127.0.0.1 (DNS rebinding) is then its own origin and sends no Origin on a GET. The
 * lists are comma-separated, or NULL. False with `e` filled (403). */
bool admit_origin_host(const struct admit_headers *h, const char *allowed_origins,
                       const char *allowed_hosts, bool check_host, struct api_error *e);

/* Whether the Origin is the request's own: the same scheme (https when it came over TLS),
 * host and port as its Host header (a default port, 80 or 443, written or not), compared
 * without regard to case. Only for a Host the server knows: loopback, or named by
 * `allowed_hosts` (or `*` there). Elsewhere a page on a name that an attacker points at
 * this server (DNS rebinding) would be its own origin too. */
bool admit_same_origin(const struct admit_headers *h, const char *allowed_hosts);

/* The Content-Length given (0 without one). */
unsigned long long admit_content_length(const struct admit_headers *h);

/* Whether a request has a body, and whether it may be read: over API_MAX_BODY by its
 * Content-Length (413), or, for a route that takes a JSON body (`json_route`), a body
 * without a JSON Content-Type (415: a web page can send text/plain or no type without
 * asking the server first). False with `e` filled. */
bool admit_body(const struct admit_headers *h, bool json_route, bool *has_body,
                struct api_error *e);

/* Whether the comma-separated `list` (may be NULL) has the item `s` (`n` bytes), compared
 * without regard to case, spaces around items ignored. */
bool admit_list_has(const char *list, const char *s, size_t n);

/* The host of a Host header value, without its port: a name, an IPv4 address or an
 * [IPv6] address. False when the value is none of these. */
bool admit_host_of(const char *v, const char **host, size_t *len);

/* localhost, 127.0.0.0/8 and [::1]: names an attacker's DNS cannot point elsewhere. */
bool admit_is_loopback_host(const char *host, size_t len);

#endif
