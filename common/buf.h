/*
 * A growable byte buffer with a size cap, for text built piece by piece (metrics, journal
 * lines, signed requests, response bodies). An append that cannot grow the buffer, because
 * memory ran out or because it would pass the cap, sets `oom` and every later append does
 * nothing, so callers check once at the end.
 *
 * Start one zeroed ({0}: the default cap) or with MX_BUF_INIT(max) / mx_buf_init() when what
 * it holds comes from a peer or a client and has a smaller bound of its own.
 */
#ifndef MX_BUF_H
#define MX_BUF_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* The cap of a buffer started zeroed (max == 0): 4 GiB where size_t allows it. */
#define MX_BUF_MAX_DEFAULT (sizeof(size_t) > 4 ? (size_t)1 << 32 : (size_t)1 << 30)

struct mx_buf {
    char *p;    /* NUL-terminated when len > 0 */
    size_t len; /* bytes held, the NUL not counted */
    size_t cap; /* bytes allocated */
    size_t max; /* the most `len` may reach; 0: MX_BUF_MAX_DEFAULT */
    /* An append failed and the buffer is unusable until mx_buf_free(): out of memory, or
     * past `max` (then too_big is set as well). Named after its first cause. */
    bool oom;
    bool too_big;
};

#define MX_BUF_INIT(max_len) ((struct mx_buf){.max = (max_len)})

/* An empty buffer capped at `max` bytes (0: MX_BUF_MAX_DEFAULT). Holds no memory. */
void mx_buf_init(struct mx_buf *b, size_t max);

void mx_buf_printf(struct mx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mx_buf_append(struct mx_buf *b, const void *data, size_t len);
void mx_buf_append_str(struct mx_buf *b, const char *s);
void mx_buf_append_char(struct mx_buf *b, char ch);

/* Hands the text over to the caller (to free()): never NULL when the buffer is good ("" at
 * least). When an append failed it frees the memory and returns NULL. Either way the buffer
 * is empty afterwards, keeping its cap and no memory. */
char *mx_buf_take(struct mx_buf *b);

/* Frees the memory and empties the buffer; the cap stays. */
void mx_buf_free(struct mx_buf *b);

/* Writes the formatted text (or "" when `fmt` is NULL) into `dst` of `len` bytes, which
 * other threads read under `lock`: formatted first, then copied with the lock held, so
 * that no formatting happens under it. */
void mx_set_text_locked(pthread_mutex_t *lock, char *dst, size_t len, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
