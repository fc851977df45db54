/*
 * The capped, sticky byte buffer of buf.h.
 */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mxc_buf_init(struct mxc_buf *b, size_t max)
{
    memset(b, 0, sizeof(*b));
    b->max = max;
}

void mxc_buf_free(struct mxc_buf *b)
{
    free(b->data);
    mxc_buf_init(b, b->max);
}

int mxc_buf_ok(const struct mxc_buf *b)
{
    return b->nomem || b->too_big ? -1 : 0;
}

/* Makes room for `n` more bytes and the NUL. */
static int reserve(struct mxc_buf *b, size_t n)
{
    if (mxc_buf_ok(b) != 0)
        return -1;
    if (n > b->max - b->len) {
        b->too_big = 1;
        return -1;
    }
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->nomem = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void mxc_buf_add(struct mxc_buf *b, const void *bytes, size_t n)
{
    if (reserve(b, n) != 0)
        return;
    if (n > 0)
        memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void mxc_buf_str(struct mxc_buf *b, const char *s)
{
    mxc_buf_add(b, s, strlen(s));
}

void mxc_buf_printf(struct mxc_buf *b, const char *fmt, ...)
{
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->nomem = 1;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        mxc_buf_add(b, small, (size_t)n);
        return;
    }
    if (reserve(b, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void mxc_buf_json_string(struct mxc_buf *b, const char *s)
{
    mxc_buf_add(b, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        mxc_buf_add(b, run, (size_t)(p - run));
        run = p + 1;
        switch (c) {
        case '"':
            mxc_buf_add(b, "\\\"", 2);
            break;
        case '\\':
            mxc_buf_add(b, "\\\\", 2);
            break;
        case '\n':
            mxc_buf_add(b, "\\n", 2);
            break;
        case '\r':
            mxc_buf_add(b, "\\r", 2);
            break;
        case '\t':
            mxc_buf_add(b, "\\t", 2);
            break;
        default:
            mxc_buf_printf(b, "\\u%04x", c);
        }
    }
    mxc_buf_str(b, run);
    mxc_buf_add(b, "\"", 1);
}

void mxc_buf_url_encode(struct mxc_buf *b, const char *s, int (*keep)(unsigned char c))
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (keep(*p)) {
            mxc_buf_add(b, p, 1);
        } else {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            mxc_buf_add(b, esc, 3);
        }
    }
}

char *mxc_buf_take(struct mxc_buf *b)
{
    if (mxc_buf_ok(b) != 0) {
        mxc_buf_free(b);
        return NULL;
    }
    char *text = b->data;
    if (text == NULL)
        text = calloc(1, 1);
    mxc_buf_init(b, b->max);
    return text;
}
