/*
 * A growable byte buffer for text built piece by piece (metrics, journal lines). An append
 * that cannot grow the buffer sets `oom` and every later append does nothing, so callers
 * check once at the end.
 */
#ifndef MX_BUF_H
#define MX_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct mx_buf {
    char *p; /* NUL-terminated when len > 0 */
    size_t len, cap;
    bool oom;
};

void mx_buf_printf(struct mx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mx_buf_append(struct mx_buf *b, const void *data, size_t len);
/* Frees the memory and empties the buffer. */
void mx_buf_free(struct mx_buf *b);

#endif
