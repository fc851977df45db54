/*
 * A growable byte buffer with a size cap, for request bodies, URLs and answers. Appends are
 * sticky: after one fails (out of memory, or over the cap) every later append is a no-op, so a
 * caller builds a whole text and checks once at the end.
 */
#ifndef MXC_BUF_H
#define MXC_BUF_H

#include <stddef.h>

struct mxc_buf {
    char *data; /* NUL-terminated when not NULL */
    size_t len;
    size_t cap;
    size_t max;  /* the most bytes it may hold */
    int nomem;   /* an allocation failed */
    int too_big; /* an append would have passed `max` */
};

/* An empty buffer that will hold at most `max` bytes. */
void mxc_buf_init(struct mxc_buf *b, size_t max);
void mxc_buf_free(struct mxc_buf *b);

/* 0, or -1 once any append has failed. */
int mxc_buf_ok(const struct mxc_buf *b);

void mxc_buf_add(struct mxc_buf *b, const void *bytes, size_t n);
void mxc_buf_str(struct mxc_buf *b, const char *s);
void mxc_buf_printf(struct mxc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* `s` as a JSON string, quoted and escaped; UTF-8 passes through as it is. */
void mxc_buf_json_string(struct mxc_buf *b, const char *s);
/* `s` percent-encoded: bytes for which keep(byte) is true are copied as they are. */
void mxc_buf_url_encode(struct mxc_buf *b, const char *s, int (*keep)(unsigned char c));

/* Hands the text over (the caller frees it; "" when nothing was added) and empties the buffer.
 * NULL when an append failed or memory ran out. */
char *mxc_buf_take(struct mxc_buf *b);

#endif
