/*
 * The inside of the blob client that its unit tests reach: canonicalization and signing of a
 * request, URL encoding and the date format (sign.c), the listing parser (list.c) and
 * the client's connection count (blob.c). Nothing outside those files and their tests includes
 * this header.
 */
#ifndef MX_BLOB_INTERNAL_H
#define MX_BLOB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "blob/blob.h"

struct blob_kv {
    const char *name;
    const char *value;
};

#define BLOB_REQ_MAX_QUERY 8
#define BLOB_REQ_MAX_XMS   8
#define BLOB_DATE_LEN      30 /* "Sun, 22 Nov 2026 04:24:31 GMT" and its NUL */
#define BLOB_SIG_LEN       45 /* base64 of 32 bytes and a NUL */

/* One request before it is signed. Every string is borrowed from the caller. */
struct blob_request {
    const char *verb;                         /* "GET", "PUT", "DELETE", "HEAD" */
    const char *blob;                         /* NULL: the container itself; not encoded */
    struct blob_kv query[BLOB_REQ_MAX_QUERY]; /* names and decoded values, in sending order */
    size_t nquery;
    struct blob_kv xms[BLOB_REQ_MAX_XMS]; /* x-ms-* headers besides x-ms-date and x-ms-version */
    size_t nxms;
    const void *body; /* NULL: none */
    size_t body_len;
    const char *content_type;  /* NULL: none is sent and libcurl's default is suppressed */
    const char *if_match;      /* NULL or the exact header value */
    const char *if_none_match; /* NULL or the exact header value */
};

/* A signed request, owned by the caller: free with blob_signed_free(). */
struct blob_signed {
    char *url;
    char *string_to_sign;
    char authorization[BLOB_ACCOUNT_NAME_MAX + BLOB_SIG_LEN + 16]; /* "SharedKey acct:sig" */
};

/*
 * Builds the URL and the SharedKey string-to-sign of `req` on `container` of `account` with
 * x-ms-date `date` and x-ms-version BLOB_API_VERSION, and signs it. Returns 0, or -1 when out of
 * memory or a request field is out of bounds.
 */
int blob_sign_request(const struct blob_account *account, const char *container,
                      const struct blob_request *req, const char *date, struct blob_signed *out);
void blob_signed_free(struct blob_signed *s);

/* base64(HMAC-SHA256(key, msg)) into `out` (BLOB_SIG_LEN bytes). Returns 0 or -1. */
int blob_hmac_base64(const unsigned char *key, size_t key_len, const char *msg, size_t len,
                     char *out);

/* RFC 1123 date of `t` in GMT, independent of the process locale. `out`: BLOB_DATE_LEN bytes. */
void blob_format_date(time_t t, char *out);

/* Percent-encodes every byte but A-Z a-z 0-9 - . _ ~ (and '/' when keep_slash). Returns a
 * malloc'd string, or NULL when out of memory. */
char *blob_url_encode(const char *s, bool keep_slash);

/* Parses an EnumerationResults document into `out` (reset first). Returns 0, or -1 when it is
 * malformed (a bad entity, an unterminated element) or memory ran out; `out` is then empty. */
int blob_parse_list(const char *xml, size_t len, struct blob_list *out);

/* The text of an XML element with entities (&amp; &#233; &#xE9; ...) replaced. Returns a
 * malloc'd string, or NULL for an unknown or invalid entity, or when out of memory. */
char *blob_xml_unescape(const char *s, size_t len);

/* How many connections the client has opened since it was created. */
long blob_client_connects(const struct blob_client *c);

#endif
