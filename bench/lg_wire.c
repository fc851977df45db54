/*
 * HTTP/1.1 and RESP framing, JSON field lookup and base64 for loadgen. See lg_wire.h.
 */
#include "lg_wire.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- HTTP/1.1 */

static bool header_is(const char *line, size_t n, const char *name, const char **val, size_t *vlen)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return false;
    const char *v = line + nl + 1, *e = line + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *val = v;
    *vlen = (size_t)(e - v);
    return true;
}

/* Decodes a chunked body at p into scratch; returns the bytes taken (trailers included). */
static long dechunk(const char *p, const char *end, char *scratch, size_t cap, size_t *out_len)
{
    const char *s = p;
    size_t o = 0;
    for (;;) {
        const char *eol = memmem(s, (size_t)(end - s), "\r\n", 2);
        if (!eol)
            return WIRE_MORE;
        char *hex_end;
        unsigned long size = strtoul(s, &hex_end, 16);
        if (hex_end == s || (hex_end != eol && *hex_end != ';'))
            return WIRE_BAD;
        s = eol + 2;
        if (size == 0) {
            /* Trailer lines (etcd's gateway sends one with every error), then an empty line. */
            for (;;) {
                const char *t = memmem(s, (size_t)(end - s), "\r\n", 2);
                if (!t)
                    return WIRE_MORE;
                bool empty = t == s;
                s = t + 2;
                if (empty) {
                    *out_len = o;
                    return s - p;
                }
            }
        }
        if (size > cap - o)
            return WIRE_BAD;
        if ((size_t)(end - s) < size + 2)
            return WIRE_MORE;
        memcpy(scratch + o, s, size);
        o += size;
        s += size;
        if (s[0] != '\r' || s[1] != '\n')
            return WIRE_BAD;
        s += 2;
    }
}

long wire_http_parse(const char *buf, size_t n, char *scratch, size_t cap, struct wire_http *r)
{
    const char *end = buf + n;
    const char *hdr_end = memmem(buf, n, "\r\n\r\n", 4);
    if (!hdr_end)
        return WIRE_MORE;
    if (hdr_end - buf < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ')
        return WIRE_BAD;
    r->status = atoi(buf + 9);
    if (r->status < 100 || r->status > 599)
        return WIRE_BAD;
    r->close = buf[7] == '0'; /* HTTP/1.0 closes unless told otherwise; we never ask */
    r->served_by_port = 0;
    long content_length = -1;
    bool chunked = false;
    const char *line = (const char *)memmem(buf, n, "\r\n", 2) + 2;
    while (line < hdr_end) {
        const char *eol = memmem(line, (size_t)(hdr_end + 2 - line), "\r\n", 2);
        size_t ll = (size_t)(eol - line);
        const char *v;
        size_t vl;
        if (header_is(line, ll, "Content-Length", &v, &vl)) {
            char *e;
            content_length = strtol(v, &e, 10);
            if (e == v || content_length < 0 || content_length > INT32_MAX)
                return WIRE_BAD;
        } else if (header_is(line, ll, "Transfer-Encoding", &v, &vl)) {
            chunked = vl >= 7 && strncasecmp(v + vl - 7, "chunked", 7) == 0;
        } else if (header_is(line, ll, "Mutexd-Served-By", &v, &vl)) {
            /* http://HOST:PORT: the port (the host is the one we were given, on loopback) */
            const char *colon = NULL;
            for (const char *p = v; p < v + vl; p++)
                if (*p == ':' && p > v + 5)
                    colon = p;
            r->served_by_port = colon ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
        } else if (header_is(line, ll, "Connection", &v, &vl)) {
            if (vl == 5 && strncasecmp(v, "close", 5) == 0)
                r->close = true;
        }
        line = eol + 2;
    }
    const char *body = hdr_end + 4;
    if (chunked) {
        size_t blen = 0;
        long used = dechunk(body, end, scratch, cap, &blen);
        if (used < 0)
            return used;
        r->body = scratch;
        r->body_len = blen;
        return (long)(body - buf) + used;
    }
    if (content_length < 0) {
        if (r->status != 204 && r->status != 304 && r->status >= 200)
            return WIRE_BAD;
        content_length = 0;
    }
    if ((size_t)(end - body) < (size_t)content_length)
        return WIRE_MORE;
    r->body = body;
    r->body_len = (size_t)content_length;
    return (long)(body - buf) + content_length;
}

int wire_http_post(char *out, size_t cap, const char *host, const char *path, const char *body)
{
    int n = snprintf(out, cap,
                     "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     path, host, strlen(body), body);
    return n > 0 && (size_t)n < cap ? n : -1;
}

/* ---------------------------------------------------------------- RESP */

long wire_resp_parse(const char *buf, size_t n, struct wire_resp *r)
{
    const char *eol = memmem(buf, n, "\r\n", 2);
    if (!eol)
        return WIRE_MORE;
    r->type = buf[0];
    r->nil = false;
    r->integer = 0;
    r->str = buf + 1;
    r->len = (size_t)(eol - buf - 1);
    long used = eol + 2 - buf;
    switch (r->type) {
    case '+':
    case '-':
        return used;
    case ':':
        r->integer = strtoll(buf + 1, NULL, 10);
        return used;
    case '$': {
        long long len = strtoll(buf + 1, NULL, 10);
        if (len < 0) {
            r->nil = true;
            return used;
        }
        if (len > INT32_MAX)
            return WIRE_BAD;
        if ((long long)n - used < len + 2)
            return WIRE_MORE;
        r->str = buf + used;
        r->len = (size_t)len;
        return used + (long)len + 2;
    }
    default:
        return WIRE_BAD;
    }
}

int wire_resp_cmd(char *out, size_t cap, int argc, const char *const *argv)
{
    int n = snprintf(out, cap, "*%d\r\n", argc);
    for (int i = 0; i < argc && n > 0 && (size_t)n < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    return n > 0 && (size_t)n < cap ? n : -1;
}

/* ---------------------------------------------------------------- JSON, base64 */

bool wire_json_field(const char *b, size_t n, const char *name, const char **val, size_t *vlen)
{
    char pat[64];
    int pl = snprintf(pat, sizeof pat, "\"%s\"", name);
    if (pl <= 0 || (size_t)pl >= sizeof pat)
        return false;
    const char *end = b + n, *p = b;
    while ((p = memmem(p, (size_t)(end - p), pat, (size_t)pl)) != NULL) {
        p += pl;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p >= end || *p != ':')
            continue; /* the name was a value, not a key */
        p++;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p >= end)
            return false;
        if (*p == '"') {
            const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
            if (!q)
                return false;
            *val = p + 1;
            *vlen = (size_t)(q - p - 1);
            return true;
        }
        const char *q = p;
        while (q < end && *q != ',' && *q != '}' && *q != ']' && *q != ' ')
            q++;
        *val = p;
        *vlen = (size_t)(q - p);
        return true;
    }
    return false;
}

bool wire_json_copy(const char *b, size_t n, const char *name, char *out, size_t cap)
{
    const char *v;
    size_t vl;
    if (!wire_json_field(b, n, name, &v, &vl) || vl == 0 || vl >= cap)
        return false;
    memcpy(out, v, vl);
    out[vl] = 0;
    return true;
}

bool wire_json_is(const char *b, size_t n, const char *name, const char *want)
{
    const char *v;
    size_t vl;
    return wire_json_field(b, n, name, &v, &vl) && vl == strlen(want) && memcmp(v, want, vl) == 0;
}

void wire_base64(const char *in, size_t n, char *out, size_t cap)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    if (cap == 0)
        return;
    for (size_t i = 0; i < n && o + 4 < cap; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = 0;
}

/* ---------------------------------------------------------------- partitions */

unsigned wire_partition_of(const char *name, unsigned count)
{
    /* The hash tag: what lies between the first '{' and the first '}' after it, if not empty. */
    const char *open = strchr(name, '{');
    const char *close = open ? strchr(open + 1, '}') : NULL;
    const char *p = name;
    size_t n = strlen(name);
    if (close && close > open + 1) {
        p = open + 1;
        n = (size_t)(close - p);
    }
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= (unsigned char)p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return count ? (~crc) % count : 0;
}
