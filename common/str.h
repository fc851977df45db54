/*
 * Immutable reference-counted strings. A lease's owner and metadata are shared by the
 * lease, the views that replies render and the records the store writes, without
 * copying. NUL-terminated for convenience; `len` excludes the NUL.
 */
#ifndef MX_STR_H
#define MX_STR_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct mx_str {
    _Atomic uint32_t refs;
    uint32_t len;
    char s[];
};

/* A new string with one reference, or NULL when out of memory. */
static inline struct mx_str *mx_str_new(const char *s, size_t len)
{
    struct mx_str *x = malloc(sizeof *x + len + 1);
    if (!x)
        return NULL;
    atomic_init(&x->refs, 1);
    x->len = (uint32_t)len;
    memcpy(x->s, s, len);
    x->s[len] = '\0';
    return x;
}

/* Any thread. NULL passes through. */
static inline struct mx_str *mx_str_ref(struct mx_str *x)
{
    if (x)
        atomic_fetch_add_explicit(&x->refs, 1, memory_order_relaxed);
    return x;
}

/* Any thread. NULL is fine. */
static inline void mx_str_unref(struct mx_str *x)
{
    /* acq_rel: the last owner must see every other owner's reads finished before free. */
    if (x && atomic_fetch_sub_explicit(&x->refs, 1, memory_order_acq_rel) == 1)
        free(x);
}

#endif
