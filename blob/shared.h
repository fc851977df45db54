/*
 * What the files of the blob client share and nothing else uses: locale-free ASCII helpers,
 * spans, and the few functions one file defines for another (account.c, sign.c,
 * list.c, blob.c). Not for the tests (internal.h) and not for users (blob.h).
 */
#ifndef MX_BLOB_SHARED_H
#define MX_BLOB_SHARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- ASCII, spans, numbers ----------------------------------------------------------------- */

/* Our own ASCII helpers: <ctype.h> and strcasecmp follow the process locale. */
static inline char ascii_lower(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

static inline bool ascii_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static inline bool ascii_alnum(char ch)
{
    return ascii_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static inline bool ascii_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* Case-insensitive: does s[0..n) equal the NUL-terminated `word`? */
static inline bool ieq(const char *s, size_t n, const char *word)
{
    size_t i = 0;
    for (; i < n && word[i]; i++)
        if (ascii_lower(s[i]) != ascii_lower(word[i]))
            return false;
    return i == n && word[i] == '\0';
}

static inline bool ieq_prefix(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++)
        if (ascii_lower(*s) != ascii_lower(*prefix))
            return false;
    return true;
}

struct span {
    const char *p;
    size_t n;
};

static inline struct span span_trim(const char *p, size_t n)
{
    while (n && ascii_space(*p))
        p++, n--;
    while (n && ascii_space(p[n - 1]))
        n--;
    return (struct span){p, n};
}

/* A non-negative decimal, or -1. */
static inline int64_t parse_count(const char *v, size_t n)
{
    if (n == 0 || n > 18)
        return -1;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ascii_digit(v[i]))
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

/* ---- Defined in account.c ------------------------------------------------------------- */

/* vsnprintf into err[errlen]; nothing when err is NULL or errlen 0. */
void blob_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Where the scheme's "://" of `url` ends, or NULL when it is not http or https. */
const char *blob_after_scheme(const char *url);

/* The path of a validated endpoint: "" or "/...". */
const char *blob_endpoint_path(const char *endpoint);

/* ---- Defined in list.c ---------------------------------------------------------------- */

/* One element found by blob_find_elem(); every pointer is into the scanned text. */
struct xml_elem {
    const char *attrs; /* after the tag name, up to '>' */
    size_t attrs_len;
    const char *text;
    size_t text_len;
    const char *after; /* just past the end tag */
};

/*
 * A scanner for the few elements a listing (or an error body) needs, not an XML parser: the
 * service writes a fixed, flat document with no comments or CDATA. Finds the first element `tag`
 * in [p, end): 1 and *e filled, 0 when there is none, -1 when it is cut off.
 */
int blob_find_elem(const char *p, const char *end, const char *tag, struct xml_elem *e);

#endif
