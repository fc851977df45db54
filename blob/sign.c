/*
 * SharedKey signing of the blob client: URL encoding, the date, canonicalization of a request
 * and its HMAC-SHA256 signature. Pure functions (the unit tests reach them through
 * internal.h); blob.c sends what they build.
 *
 * Signing follows the SharedKey rules for the Blob service; the traps that cost a 403 each are
 * called out where they are handled: a 0-byte Content-Length signed as "", the path signed
 * exactly as sent (so the account appears twice for path-style endpoints), query names
 * lower-cased and sorted with decoded values, and the date formatted without the process
 * locale. (libcurl's implicit Content-Type and Expect headers are suppressed in blob.c.)
 */
#include "blob/blob.h"
#include "blob/internal.h"
#include "blob/shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/buf.h"

static bool unreserved(unsigned char ch)
{
    return ascii_alnum((char)ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

static void append_encoded(struct mx_buf *b, const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (unreserved(ch) || (keep_slash && ch == '/')) {
            mx_buf_append_char(b, (char)ch);
        } else {
            char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
            mx_buf_append(b, e, 3);
        }
    }
}

char *blob_url_encode(const char *s, bool keep_slash)
{
    struct mx_buf b = {0};
    append_encoded(&b, s, keep_slash);
    return mx_buf_take(&b);
}

void blob_format_date(time_t t, char *out)
{
    /* Fixed English names: strftime's %a and %b follow LC_TIME, and a server started under
     * another locale would sign dates the service cannot read. */
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    if (!gmtime_r(&t, &tm) || tm.tm_wday < 0 || tm.tm_wday > 6 || tm.tm_mon < 0 || tm.tm_mon > 11 ||
        tm.tm_year < -1900 || tm.tm_year > 9999 - 1900) {
        memcpy(out, "Thu, 01 Jan 1970 00:00:00 GMT", BLOB_DATE_LEN);
        return;
    }
    /* Each field is in range (gmtime_r's contract, the year checked above), so the text is
     * exactly 29 characters; gcc's -Wformat-truncation cannot see that at -O0, and the
     * unsigned casts with modulo bound each field for it. */
    snprintf(out, BLOB_DATE_LEN, "%s, %02u %s %04u %02u:%02u:%02u GMT", days[tm.tm_wday],
             (unsigned)tm.tm_mday % 100u, months[tm.tm_mon], (unsigned)(tm.tm_year + 1900) % 10000u,
             (unsigned)tm.tm_hour % 100u, (unsigned)tm.tm_min % 100u, (unsigned)tm.tm_sec % 100u);
}

int blob_hmac_base64(const unsigned char *key, size_t key_len, const char *msg, size_t len,
                     char *out)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    if (key_len == 0 || key_len > INT32_MAX ||
        !HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, len, mac, &mac_len) ||
        mac_len != 32)
        return -1;
    EVP_EncodeBlock((unsigned char *)out, mac, (int)mac_len);
    return 0;
}

/* A header or query name lower-cased, for sorting; `idx` keeps equal names in sending order. */
struct canon {
    char name[40];
    const char *value;
    size_t idx;
};

static int canon_cmp(const void *a, const void *b)
{
    const struct canon *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int canon_fill(struct canon *out, const struct blob_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = kv[i].name ? strlen(kv[i].name) : sizeof out[i].name;
        if (len >= sizeof out[i].name || !kv[i].value)
            return -1;
        for (size_t j = 0; j <= len; j++)
            out[i].name[j] = ascii_lower(kv[i].name[j]);
        out[i].value = kv[i].value;
        out[i].idx = i;
    }
    qsort(out, n, sizeof *out, canon_cmp);
    return 0;
}

int blob_sign_request(const struct blob_account *account, const char *container,
                      const struct blob_request *req, const char *date, struct blob_signed *out)
{
    struct canon q[BLOB_REQ_MAX_QUERY], h[BLOB_REQ_MAX_XMS + 2];
    struct mx_buf path = {0}, url = {0}, sts = {0};
    char sig[BLOB_SIG_LEN];
    int rc = -1;

    memset(out, 0, sizeof *out);
    if (req->nquery > BLOB_REQ_MAX_QUERY || req->nxms > BLOB_REQ_MAX_XMS)
        return -1;

    /* The path exactly as it goes on the wire: percent-encoded, '/' kept. */
    const char *ep_path = blob_endpoint_path(account->endpoint);
    mx_buf_append_str(&path, ep_path);
    mx_buf_append_char(&path, '/');
    mx_buf_append_str(&path, container);
    if (req->blob) {
        mx_buf_append_char(&path, '/');
        append_encoded(&path, req->blob, true);
    }
    if (path.oom)
        goto out;

    mx_buf_append(&url, account->endpoint, (size_t)(ep_path - account->endpoint));
    mx_buf_append(&url, path.p, path.len);
    for (size_t i = 0; i < req->nquery; i++) {
        mx_buf_append_char(&url, i ? '&' : '?');
        append_encoded(&url, req->query[i].name, false);
        mx_buf_append_char(&url, '=');
        /* Values always encoded: Azurite drops parameters whose raw value holds a '='. */
        append_encoded(&url, req->query[i].value, false);
    }

    /* The fixed lines. Content-Length is "" for an empty body (a "0" is a 403). */
    char length[24] = "";
    if (req->body_len)
        snprintf(length, sizeof length, "%zu", req->body_len);
    mx_buf_append_str(&sts, req->verb);
    mx_buf_append_str(&sts, "\n\n\n"); /* Content-Encoding, Content-Language */
    mx_buf_append_str(&sts, length);
    mx_buf_append_str(&sts, "\n\n"); /* Content-MD5 */
    mx_buf_append_str(&sts, req->content_type ? req->content_type : "");
    mx_buf_append_str(&sts, "\n\n\n"); /* Date (x-ms-date is used), If-Modified-Since */
    mx_buf_append_str(&sts, req->if_match ? req->if_match : "");
    mx_buf_append_char(&sts, '\n');
    mx_buf_append_str(&sts, req->if_none_match ? req->if_none_match : "");
    mx_buf_append_str(&sts, "\n\n\n"); /* If-Unmodified-Since, Range */

    /* Canonicalized x-ms-* headers: lower-case names, sorted. */
    struct blob_kv all[BLOB_REQ_MAX_XMS + 2];
    size_t nh = 0;
    all[nh++] = (struct blob_kv){"x-ms-date", date};
    all[nh++] = (struct blob_kv){"x-ms-version", BLOB_API_VERSION};
    for (size_t i = 0; i < req->nxms; i++)
        all[nh++] = req->xms[i];
    if (canon_fill(h, all, nh) != 0 || canon_fill(q, req->query, req->nquery) != 0)
        goto out;
    for (size_t i = 0; i < nh; i++) {
        mx_buf_append_str(&sts, h[i].name);
        mx_buf_append_char(&sts, ':');
        mx_buf_append_str(&sts, h[i].value);
        mx_buf_append_char(&sts, '\n');
    }

    /* Canonicalized resource: "/" + account + the path as sent, so a path-style endpoint
     * (which already starts with "/account") carries the account twice. Then the query,
     * sorted by lower-cased name, values decoded, repeated names joined by ','. */
    mx_buf_append_char(&sts, '/');
    mx_buf_append_str(&sts, account->name);
    mx_buf_append(&sts, path.p, path.len);
    for (size_t i = 0; i < req->nquery; i++) {
        if (i > 0 && strcmp(q[i].name, q[i - 1].name) == 0) {
            mx_buf_append_char(&sts, ',');
        } else {
            mx_buf_append_char(&sts, '\n');
            mx_buf_append_str(&sts, q[i].name);
            mx_buf_append_char(&sts, ':');
        }
        mx_buf_append_str(&sts, q[i].value);
    }

    out->url = mx_buf_take(&url);
    out->string_to_sign = mx_buf_take(&sts);
    if (!out->url || !out->string_to_sign)
        goto out;
    if (blob_hmac_base64(account->key, account->key_len, out->string_to_sign,
                         strlen(out->string_to_sign), sig) != 0)
        goto out;
    int n = snprintf(out->authorization, sizeof out->authorization, "SharedKey %s:%s",
                     account->name, sig);
    if (n < 0 || (size_t)n >= sizeof out->authorization)
        goto out;
    rc = 0;
out:
    mx_buf_free(&path);
    mx_buf_free(&url);
    mx_buf_free(&sts);
    if (rc != 0)
        blob_signed_free(out);
    return rc;
}

void blob_signed_free(struct blob_signed *s)
{
    free(s->url);
    free(s->string_to_sign);
    memset(s, 0, sizeof *s);
}
