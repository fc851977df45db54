/*
 * The capped growable buffer (see buf.h). Capacity doubles from a small start and never goes
 * past the cap and its NUL, so a buffer near its cap does not hold twice the memory.
 */
#include "common/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for an HTTP answer that shows a lease (about 330 bytes) at the first allocation. */
#define FIRST_CAP 512

static size_t max_of(const struct mx_buf *b)
{
    /* Half of size_t at most: len + more + 1 below can then never wrap. */
    size_t max = b->max ? b->max : MX_BUF_MAX_DEFAULT;
    return max > SIZE_MAX / 2 ? SIZE_MAX / 2 : max;
}

/* Room for `more` bytes and the NUL; false (and the buffer failed) when there is none. */
static bool reserve(struct mx_buf *b, size_t more)
{
    if (b->oom)
        return false;
    size_t max = max_of(b);
    if (b->len > max || more > max - b->len) {
        b->too_big = true;
        b->oom = true;
        return false;
    }
    size_t need = b->len + more + 1;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : FIRST_CAP;
    while (cap < need)
        cap *= 2;
    if (cap > max + 1)
        cap = max + 1;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void mx_buf_init(struct mx_buf *b, size_t max)
{
    *b = MX_BUF_INIT(max);
}

void mx_buf_printf(struct mx_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void mx_buf_append(struct mx_buf *b, const void *data, size_t len)
{
    if (!reserve(b, len))
        return;
    if (len)
        memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
}

void mx_buf_append_str(struct mx_buf *b, const char *s)
{
    mx_buf_append(b, s, strlen(s));
}

void mx_buf_append_char(struct mx_buf *b, char ch)
{
    mx_buf_append(b, &ch, 1);
}

char *mx_buf_take(struct mx_buf *b)
{
    mx_buf_append(b, "", 0); /* an empty buffer holds no memory yet */
    char *p = b->oom ? NULL : b->p;
    if (!p)
        free(b->p);
    size_t max = b->max;
    *b = MX_BUF_INIT(max);
    return p;
}

void mx_buf_free(struct mx_buf *b)
{
    free(b->p);
    size_t max = b->max;
    *b = MX_BUF_INIT(max);
}

void mx_set_text_locked(pthread_mutex_t *lock, char *dst, size_t len, const char *fmt, va_list ap)
{
    char text[512] = "";
    if (fmt)
        vsnprintf(text, sizeof text < len ? sizeof text : len, fmt, ap);
    pthread_mutex_lock(lock);
    snprintf(dst, len, "%s", text);
    pthread_mutex_unlock(lock);
}
