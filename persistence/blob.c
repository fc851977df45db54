/*
 * Azure Blob Storage REST client (see blob.h).
 *
 * Layout, top to bottom: small ASCII and buffer helpers; accounts and connection strings;
 * encoding, canonicalization and SharedKey signing (pure functions, which the unit tests reach
 * through blob_internal.h); one request on libcurl and its response; the operations; the parser
 * of listings.
 *
 * Signing follows the SharedKey rules for the Blob service; the traps that cost a 403 each are
 * called out where they are handled: a 0-byte Content-Length signed as "", the path signed
 * exactly as sent (so the account appears twice for path-style endpoints), query names
 * lower-cased and sorted with decoded values, libcurl's implicit Content-Type and Expect headers
 * suppressed, and the date formatted without the process locale.
 */
#include "persistence/blob.h"
#include "persistence/blob_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/buf.h"
#include "common/hex.h"

#ifndef MUTEXD_VERSION
#define MUTEXD_VERSION "dev"
#endif

/* The emulator's well-known development account; its key is public and the same everywhere. */
#define DEV_ACCOUNT "devstoreaccount1"
#define DEV_KEY                                                                                    \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define DEV_ENDPOINT "http://127.0.0.1:10000/" DEV_ACCOUNT
#define DEV_PORT     "10000"

#define DEFAULT_CONNECT_TIMEOUT_MS 5000L
#define DEFAULT_TIMEOUT_MS         30000L
#define DEFAULT_MAX_BODY           ((size_t)64 << 20)
#define MAX_APPEND_BLOCK           ((size_t)4 << 20) /* the limit of version 2021-08-06 */

/* ---- ASCII and errors --------------------------------------------------------------------- */

/* Our own ASCII helpers: <ctype.h> and strcasecmp follow the process locale. */
static char ascii_lower(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

static bool ascii_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static bool ascii_alnum(char ch)
{
    return ascii_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool ascii_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* Case-insensitive: does s[0..n) equal the NUL-terminated `word`? */
static bool ieq(const char *s, size_t n, const char *word)
{
    size_t i = 0;
    for (; i < n && word[i]; i++)
        if (ascii_lower(s[i]) != ascii_lower(word[i]))
            return false;
    return i == n && word[i] == '\0';
}

static bool ieq_prefix(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++)
        if (ascii_lower(*s) != ascii_lower(*prefix))
            return false;
    return true;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- Accounts and connection strings ------------------------------------------------------- */

struct span {
    const char *p;
    size_t n;
};

static struct span span_trim(const char *p, size_t n)
{
    while (n && ascii_space(*p))
        p++, n--;
    while (n && ascii_space(p[n - 1]))
        n--;
    return (struct span){p, n};
}

/* Copies a span into dst[cap] as a C string; -1 if it does not fit. */
static int span_copy(char *dst, size_t cap, struct span s)
{
    if (s.n >= cap)
        return -1;
    memcpy(dst, s.p, s.n);
    dst[s.n] = '\0';
    return 0;
}

static bool base64_char(char ch)
{
    return ascii_alnum(ch) || ch == '+' || ch == '/';
}

/*
 * Decodes a base64 AccountKey strictly (no whitespace, padding only at the end).
 * EVP_DecodeBlock counts the '=' padding as zero bytes (66 bytes for an 88-character key), so
 * the padding is subtracted: signing with the two extra zero bytes fails every request.
 */
static int decode_key(const char *b64, unsigned char *out, size_t *out_len, char *err,
                      size_t errlen)
{
    enum { MAX_B64 = 4 * ((BLOB_KEY_MAX + 2) / 3) };
    unsigned char tmp[MAX_B64 / 4 * 3];
    size_t n = strlen(b64);
    if (n == 0) {
        set_err(err, errlen, "AccountKey is empty");
        return -1;
    }
    if (n > MAX_B64) {
        set_err(err, errlen, "AccountKey is too long (at most %d decoded bytes)", BLOB_KEY_MAX);
        return -1;
    }
    size_t pad = 0;
    while (pad < 2 && pad < n && b64[n - 1 - pad] == '=')
        pad++;
    bool ok = n % 4 == 0;
    for (size_t i = 0; ok && i < n - pad; i++)
        ok = base64_char(b64[i]);
    int got = ok ? EVP_DecodeBlock(tmp, (const unsigned char *)b64, (int)n) : -1;
    if (got < 0 || (size_t)got < pad + 1) {
        set_err(err, errlen, "AccountKey is not valid base64");
        OPENSSL_cleanse(tmp, sizeof tmp);
        return -1;
    }
    size_t len = (size_t)got - pad;
    if (len > BLOB_KEY_MAX) {
        set_err(err, errlen, "AccountKey is too long (at most %d decoded bytes)", BLOB_KEY_MAX);
        OPENSSL_cleanse(tmp, sizeof tmp);
        return -1;
    }
    memcpy(out, tmp, len);
    *out_len = len;
    OPENSSL_cleanse(tmp, sizeof tmp);
    return 0;
}

/* Where the scheme's "://" ends, or NULL when the URL is not http or https. */
static const char *after_scheme(const char *url)
{
    if (ieq_prefix(url, "http://"))
        return url + 7;
    if (ieq_prefix(url, "https://"))
        return url + 8;
    return NULL;
}

/* The path of a validated endpoint: "" or "/...". */
static const char *endpoint_path(const char *endpoint)
{
    const char *host = after_scheme(endpoint);
    if (!host)
        return endpoint + strlen(endpoint);
    const char *slash = strchr(host, '/');
    return slash ? slash : host + strlen(host);
}

/* Is the host (without port) an IP address or a name without a dot? Azurite then takes the
 * account from the first path segment, as it does for 127.0.0.1 or a compose service name. */
static bool host_is_path_style(const char *host, size_t n)
{
    if (n && host[0] == '[')
        return true; /* IPv6 literal */
    bool all_ip = true, dot = false;
    for (size_t i = 0; i < n && host[i] != ':'; i++) {
        if (host[i] == '.')
            dot = true;
        else if (!ascii_digit(host[i]))
            all_ip = false;
    }
    return all_ip || !dot;
}

static bool account_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= BLOB_ACCOUNT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!ascii_alnum(name[i]))
            return false;
    return true;
}

static int set_endpoint(struct blob_account *a, const char *endpoint, char *err, size_t errlen)
{
    struct span s = span_trim(endpoint, strlen(endpoint));
    char ep[BLOB_ENDPOINT_MAX];
    if (span_copy(ep, sizeof ep, s) != 0) {
        set_err(err, errlen, "the blob endpoint is too long");
        return -1;
    }
    const char *host = after_scheme(ep);
    if (!host) {
        set_err(err, errlen, "the blob endpoint must start with http:// or https://");
        return -1;
    }
    for (size_t n = strlen(ep); n > (size_t)(host - ep) && ep[n - 1] == '/'; n--)
        ep[n - 1] = '\0';
    for (const char *p = ep; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= ' ' || ch == 0x7f || ch == '?' || ch == '#' || ch == '\\') {
            set_err(err, errlen, "the blob endpoint may not contain spaces, '?', '#' or '\\'");
            return -1;
        }
    }
    size_t host_len = strcspn(host, "/");
    if (host_len == 0 || host[0] == ':') {
        set_err(err, errlen, "the blob endpoint has no host");
        return -1;
    }
    int n;
    if (host[host_len] == '\0' && host_is_path_style(host, host_len))
        n = snprintf(a->endpoint, sizeof a->endpoint, "%s/%s", ep, a->name);
    else
        n = snprintf(a->endpoint, sizeof a->endpoint, "%s", ep);
    if (n < 0 || (size_t)n >= sizeof a->endpoint) {
        set_err(err, errlen, "the blob endpoint is too long");
        return -1;
    }
    return 0;
}

int blob_account_init(struct blob_account *out, const char *endpoint, const char *name,
                      const char *key_base64, char *err, size_t errlen)
{
    /* Built aside and copied at the end: the arguments may point into *out. */
    struct blob_account a;
    int rc = -1;
    memset(&a, 0, sizeof a);
    if (!endpoint || !name || !key_base64) {
        set_err(err, errlen, "endpoint, account name and key are all needed");
        goto out;
    }
    if (!account_name_ok(name)) {
        set_err(err, errlen, "the account name must be 1 to %d letters and digits",
                BLOB_ACCOUNT_NAME_MAX - 1);
        goto out;
    }
    memcpy(a.name, name, strlen(name) + 1);
    if (decode_key(key_base64, a.key, &a.key_len, err, errlen) != 0 ||
        set_endpoint(&a, endpoint, err, errlen) != 0)
        goto out;
    rc = 0;
out:
    if (rc == 0)
        *out = a;
    else
        memset(out, 0, sizeof *out);
    blob_account_wipe(&a);
    return rc;
}

void blob_account_wipe(struct blob_account *a)
{
    OPENSSL_cleanse(a->key, sizeof a->key);
    a->key_len = 0;
}

/* UseDevelopmentStorage with DevelopmentStorageProxyUri: the proxy's scheme and host, with
 * the emulator's port and account path (as the Azure SDKs build it). */
static int dev_proxy_endpoint(struct span proxy, char *out, size_t cap, char *err, size_t errlen)
{
    char uri[BLOB_ENDPOINT_MAX];
    if (span_copy(uri, sizeof uri, proxy) != 0) {
        set_err(err, errlen, "DevelopmentStorageProxyUri is too long");
        return -1;
    }
    const char *host = after_scheme(uri);
    if (!host) {
        set_err(err, errlen, "DevelopmentStorageProxyUri must start with http:// or https://");
        return -1;
    }
    size_t host_len;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        host_len = close ? (size_t)(close - host) + 1 : 0;
    } else {
        host_len = strcspn(host, ":/");
    }
    if (host_len == 0) {
        set_err(err, errlen, "DevelopmentStorageProxyUri has no host");
        return -1;
    }
    int n = snprintf(out, cap, "%.*s%.*s:" DEV_PORT "/" DEV_ACCOUNT, (int)(host - uri), uri,
                     (int)host_len, host);
    if (n < 0 || (size_t)n >= cap) {
        set_err(err, errlen, "DevelopmentStorageProxyUri is too long");
        return -1;
    }
    return 0;
}

int blob_parse_connection_string(const char *cs, struct blob_account *out, char *err, size_t errlen)
{
    enum { PROTO, NAME, KEY, ENDPOINT, SUFFIX, USEDEV, PROXY, SAS, NKEYS };
    static const char *const keys[NKEYS] = {"DefaultEndpointsProtocol",
                                            "AccountName",
                                            "AccountKey",
                                            "BlobEndpoint",
                                            "EndpointSuffix",
                                            "UseDevelopmentStorage",
                                            "DevelopmentStorageProxyUri",
                                            "SharedAccessSignature"};
    struct span v[NKEYS] = {{NULL, 0}};
    char name[BLOB_ACCOUNT_NAME_MAX], key[4 * ((BLOB_KEY_MAX + 2) / 3) + 1];
    char endpoint[BLOB_ENDPOINT_MAX];
    int rc = -1;

    memset(out, 0, sizeof *out);
    if (!cs) {
        set_err(err, errlen, "no connection string");
        return -1;
    }
    for (const char *p = cs; *p;) {
        size_t n = strcspn(p, ";");
        struct span part = span_trim(p, n);
        p += n + (p[n] == ';');
        if (part.n == 0)
            continue;
        const char *eq = memchr(part.p, '=', part.n);
        if (!eq) {
            set_err(err, errlen, "the connection string has a part without '=' (Key=Value)");
            return -1;
        }
        struct span k = span_trim(part.p, (size_t)(eq - part.p));
        struct span val = span_trim(eq + 1, part.n - (size_t)(eq - part.p) - 1);
        for (int i = 0; i < NKEYS; i++)
            if (ieq(k.p, k.n, keys[i]))
                v[i] = val; /* the last one wins; unknown keys are ignored */
    }

    bool dev = false;
    if (v[USEDEV].p) {
        if (ieq(v[USEDEV].p, v[USEDEV].n, "true")) {
            dev = true;
        } else if (!ieq(v[USEDEV].p, v[USEDEV].n, "false")) {
            set_err(err, errlen, "UseDevelopmentStorage must be true or false");
            return -1;
        }
    }
    if (dev) {
        static const int not_with_dev[] = {PROTO, NAME, KEY, ENDPOINT, SUFFIX};
        for (size_t i = 0; i < sizeof not_with_dev / sizeof not_with_dev[0]; i++) {
            if (v[not_with_dev[i]].p) {
                set_err(err, errlen,
                        "UseDevelopmentStorage=true cannot be combined with %s (only with "
                        "DevelopmentStorageProxyUri)",
                        keys[not_with_dev[i]]);
                return -1;
            }
        }
        if (!v[PROXY].p)
            return blob_account_init(out, DEV_ENDPOINT, DEV_ACCOUNT, DEV_KEY, err, errlen);
        if (dev_proxy_endpoint(v[PROXY], endpoint, sizeof endpoint, err, errlen) != 0)
            return -1;
        return blob_account_init(out, endpoint, DEV_ACCOUNT, DEV_KEY, err, errlen);
    }
    if (v[PROXY].p) {
        set_err(err, errlen, "DevelopmentStorageProxyUri needs UseDevelopmentStorage=true");
        return -1;
    }
    if (!v[NAME].p || v[NAME].n == 0) {
        set_err(err, errlen, "AccountName is missing from the connection string");
        return -1;
    }
    if (!v[KEY].p) {
        set_err(err, errlen,
                v[SAS].p ? "SharedAccessSignature connection strings are not supported: give "
                           "an AccountKey"
                         : "AccountKey is missing from the connection string");
        return -1;
    }
    if (span_copy(name, sizeof name, v[NAME]) != 0) {
        set_err(err, errlen, "AccountName is too long");
        return -1;
    }
    if (span_copy(key, sizeof key, v[KEY]) != 0) {
        set_err(err, errlen, "AccountKey is too long (at most %d decoded bytes)", BLOB_KEY_MAX);
        goto out;
    }
    const char *proto = "https";
    if (v[PROTO].p) {
        if (ieq(v[PROTO].p, v[PROTO].n, "http")) {
            proto = "http";
        } else if (!ieq(v[PROTO].p, v[PROTO].n, "https")) {
            set_err(err, errlen, "unknown DefaultEndpointsProtocol '%.*s' (http or https)",
                    v[PROTO].n > 16 ? 16 : (int)v[PROTO].n, v[PROTO].p);
            goto out;
        }
    }
    if (v[ENDPOINT].p) {
        if (span_copy(endpoint, sizeof endpoint, v[ENDPOINT]) != 0) {
            set_err(err, errlen, "BlobEndpoint is too long");
            goto out;
        }
    } else {
        struct span suffix = v[SUFFIX].p ? v[SUFFIX] : (struct span){"core.windows.net", 16};
        if (suffix.n == 0 || memchr(suffix.p, '/', suffix.n)) {
            set_err(err, errlen, "EndpointSuffix must be a DNS suffix such as core.windows.net");
            goto out;
        }
        int n = snprintf(endpoint, sizeof endpoint, "%s://%s.blob.%.*s", proto, name, (int)suffix.n,
                         suffix.p);
        if (n < 0 || (size_t)n >= sizeof endpoint) {
            set_err(err, errlen, "EndpointSuffix is too long");
            goto out;
        }
    }
    rc = blob_account_init(out, endpoint, name, key, err, errlen);
out:
    OPENSSL_cleanse(key, sizeof key);
    return rc;
}

/* ---- Encoding, canonicalization, signing --------------------------------------------------- */

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
    const char *ep_path = endpoint_path(account->endpoint);
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

/* ---- Results ------------------------------------------------------------------------------- */

static void reset_headers(struct blob_result *r)
{
    r->error_code[0] = r->etag[0] = r->request_id[0] = r->lease_id[0] = '\0';
    r->lease_time = -1;
    r->append_offset = r->committed_blocks = r->content_length = -1;
}

void blob_result_free(struct blob_result *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
    r->status = 0;
    r->curl_code = 0;
    r->message[0] = '\0';
    reset_headers(r);
}

/* A failure of our own (bad argument, no memory): no status, no transport error. */
static int local_fail(struct blob_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int local_fail(struct blob_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    return -1;
}

bool blob_result_transient(const struct blob_result *r)
{
    switch (r->status) {
    case 408:
    case 429:
    case 500:
    case 502:
    case 503:
    case 504:
        return true;
    case 0:
        break;
    default:
        return false;
    }
    switch ((CURLcode)r->curl_code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_AGAIN:
        return true;
    default:
        return false;
    }
}

/* ---- One request on libcurl ---------------------------------------------------------------- */

struct blob_client {
    CURL *curl;
    struct blob_account account;
    char container[64];
    long connect_timeout_ms, timeout_ms;
    size_t max_body;
    long connects;
    char errbuf[CURL_ERROR_SIZE];
};

int blob_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void blob_global_cleanup(void)
{
    curl_global_cleanup();
}

static bool container_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 3 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        bool ok =
            ascii_digit(s[i]) || (s[i] >= 'a' && s[i] <= 'z') || (s[i] == '-' && s[i + 1] != '-');
        if (!ok)
            return false;
    }
    return true;
}

int blob_client_new(const struct blob_account *account, const char *container,
                    const struct blob_options *opts, struct blob_client **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (!container || !container_name_ok(container)) {
        set_err(err, errlen,
                "a container name is 3 to 63 characters of a-z, 0-9 and single '-' inside");
        return -1;
    }
    if (!account || account->key_len == 0 || !after_scheme(account->endpoint)) {
        set_err(err, errlen, "the account is not initialized");
        return -1;
    }
    struct blob_client *c = calloc(1, sizeof *c);
    if (!c) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    c->curl = curl_easy_init();
    if (!c->curl) {
        free(c);
        set_err(err, errlen, "libcurl could not create a handle");
        return -1;
    }
    c->account = *account;
    memcpy(c->container, container, strlen(container) + 1);
    c->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    c->max_body = DEFAULT_MAX_BODY;
    if (opts) {
        if (opts->connect_timeout_ms > 0)
            c->connect_timeout_ms = opts->connect_timeout_ms;
        if (opts->timeout_ms > 0)
            c->timeout_ms = opts->timeout_ms;
        if (opts->max_body > 0)
            c->max_body = opts->max_body;
    }
    *out = c;
    return 0;
}

void blob_client_free(struct blob_client *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    blob_account_wipe(&c->account);
    free(c);
}

long blob_client_connects(const struct blob_client *c)
{
    return c->connects;
}

static void copy_field(char *dst, size_t cap, const char *v, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* A non-negative decimal, or -1. */
static int64_t parse_count(const char *v, size_t n)
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

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    struct blob_result *r = arg;
    size_t n = size * nmemb;
    /* A new status line (after a 100 Continue, say) starts a new set of headers. */
    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        reset_headers(r);
        return n;
    }
    const char *colon = memchr(data, ':', n);
    if (!colon)
        return n;
    size_t name_len = (size_t)(colon - data);
    struct span v = span_trim(colon + 1, n - name_len - 1);
    if (ieq(data, name_len, "etag"))
        copy_field(r->etag, sizeof r->etag, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-error-code"))
        copy_field(r->error_code, sizeof r->error_code, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-request-id"))
        copy_field(r->request_id, sizeof r->request_id, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-lease-id"))
        copy_field(r->lease_id, sizeof r->lease_id, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-lease-time"))
        r->lease_time = (int)(v.n <= 9 ? parse_count(v.p, v.n) : -1);
    else if (ieq(data, name_len, "x-ms-blob-append-offset"))
        r->append_offset = parse_count(v.p, v.n);
    else if (ieq(data, name_len, "x-ms-blob-committed-block-count"))
        r->committed_blocks = parse_count(v.p, v.n);
    else if (ieq(data, name_len, "content-length"))
        r->content_length = parse_count(v.p, v.n);
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct mx_buf *body = arg; /* capped at the client's max_body */
    size_t n = size * nmemb;
    mx_buf_append(body, data, n);
    return body->oom ? 0 : n; /* 0 aborts the transfer with CURLE_WRITE_ERROR */
}

struct xml_elem {
    const char *attrs; /* after the tag name, up to '>' */
    size_t attrs_len;
    const char *text;
    size_t text_len;
    const char *after; /* just past the end tag */
};
static int find_elem(const char *p, const char *end, const char *tag, struct xml_elem *e);

/* HEAD answers and some proxies carry no x-ms-error-code: take <Code> from the body then. */
static void error_code_from_body(struct blob_result *r)
{
    struct xml_elem e;
    if (find_elem(r->body, r->body + r->body_len, "Code", &e) > 0)
        copy_field(r->error_code, sizeof r->error_code, e.text, e.text_len);
}

static int add_header(struct curl_slist **list, const char *name, const char *value)
{
    char line[512];
    int n = snprintf(line, sizeof line, "%s:%s%s", name, value[0] ? " " : "", value);
    if (n < 0 || (size_t)n >= sizeof line)
        return -1;
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return -1;
    *list = l;
    return 0;
}

static struct curl_slist *build_headers(const struct blob_request *req, const char *date,
                                        const char *authorization)
{
    struct curl_slist *h = NULL;
    int bad = add_header(&h, "x-ms-date", date);
    bad |= add_header(&h, "x-ms-version", BLOB_API_VERSION);
    for (size_t i = 0; i < req->nxms; i++)
        bad |= add_header(&h, req->xms[i].name, req->xms[i].value);
    /* "Content-Type:" with no value removes the form type libcurl adds to a POSTFIELDS body;
     * unsigned, it costs a 403. "Expect:" keeps large bodies from waiting on 100 Continue. */
    bad |= add_header(&h, "Content-Type", req->content_type ? req->content_type : "");
    bad |= add_header(&h, "Expect", "");
    if (req->if_match)
        bad |= add_header(&h, "If-Match", req->if_match);
    if (req->if_none_match)
        bad |= add_header(&h, "If-None-Match", req->if_none_match);
    bad |= add_header(&h, "Authorization", authorization);
    if (bad) {
        curl_slist_free_all(h);
        return NULL;
    }
    return h;
}

/* Sends `req` and fills `res` (reset by the caller). Returns 0 when the status is `ok`. */
static int perform(struct blob_client *c, const struct blob_request *req, long ok,
                   struct blob_result *res)
{
    struct blob_signed sg;
    struct curl_slist *headers = NULL;
    struct mx_buf body = MX_BUF_INIT(c->max_body);
    char date[BLOB_DATE_LEN];
    int rc = -1;

    blob_format_date(time(NULL), date);
    if (blob_sign_request(&c->account, c->container, req, date, &sg) != 0) {
        local_fail(res, "could not build the request (out of memory)");
        return -1;
    }
    headers = build_headers(req, date, sg.authorization);
    if (!headers) {
        local_fail(res, "could not build the request headers");
        goto out;
    }

    CURL *h = c->curl;
    /* Reset keeps the connection cache: the next request reuses the open connection. */
    curl_easy_reset(h);
    c->errbuf[0] = '\0';
    CURLcode cc = CURLE_OK;
#define SET(opt, val)                                                                              \
    do {                                                                                           \
        if (cc == CURLE_OK)                                                                        \
            cc = curl_easy_setopt(h, opt, val);                                                    \
    } while (0)
    SET(CURLOPT_URL, sg.url);
    SET(CURLOPT_HTTPHEADER, headers);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_TCP_NODELAY, 1L);
    /* The path is signed as sent: curl must not squash "/./" or "/../" in a blob name. */
    SET(CURLOPT_PATH_AS_IS, 1L);
    SET(CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    SET(CURLOPT_TIMEOUT_MS, c->timeout_ms);
    SET(CURLOPT_ERRORBUFFER, c->errbuf);
    SET(CURLOPT_USERAGENT, "mutexd/" MUTEXD_VERSION);
#if LIBCURL_VERSION_NUM >= 0x075500
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, res);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, &body);
    if (strcmp(req->verb, "GET") == 0) {
        SET(CURLOPT_HTTPGET, 1L);
    } else if (strcmp(req->verb, "HEAD") == 0) {
        SET(CURLOPT_NOBODY, 1L);
    } else {
        SET(CURLOPT_CUSTOMREQUEST, req->verb);
        if (strcmp(req->verb, "PUT") == 0) {
            /* Always a body, possibly empty: libcurl then sends Content-Length: 0. */
            SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
            SET(CURLOPT_POSTFIELDS, req->body ? req->body : "");
        }
    }
#undef SET
    if (cc != CURLE_OK) {
        local_fail(res, "libcurl option: %s", curl_easy_strerror(cc));
        goto out;
    }

    cc = curl_easy_perform(h);
    long connects = 0;
    if (curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK)
        c->connects += connects;
    if (cc != CURLE_OK) {
        reset_headers(res);
        if (body.too_big) {
            local_fail(res, "response body larger than %zu bytes", c->max_body);
        } else if (body.oom) {
            local_fail(res, "out of memory reading the response");
        } else {
            res->curl_code = (int)cc;
            local_fail(res, "%s", c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc));
        }
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &res->status);
    if (body.len) {
        res->body = body.p;
        res->body_len = body.len;
        body.p = NULL;
    }
    if (res->status >= 400 && !res->error_code[0] && res->body)
        error_code_from_body(res);
    rc = res->status == ok ? 0 : -1;
out:
    mx_buf_free(&body);
    curl_slist_free_all(headers);
    blob_signed_free(&sg);
    return rc;
}

/* ---- Operations ---------------------------------------------------------------------------- */

/*
 * One operation's request and copies of every caller string that goes into a header. The copies
 * are taken before the result is reset, because callers chain calls on one result: If-Match set
 * to res->etag, a renewal of res->lease_id, the next page from list->next_marker.
 */
struct call {
    struct blob_request req;
    char if_match[BLOB_ETAG_MAX + 2];
    char if_none_match[BLOB_ETAG_MAX + 2];
    char lease_id[BLOB_LEASE_ID_MAX];
    char proposed_id[BLOB_LEASE_ID_MAX];
    char num[24];
    const char *problem; /* an argument that cannot be sent, found before the reset */
};

/* The operations below never add more than the arrays hold; the bounds are checked again when
 * signing. */
static void call_query(struct call *k, const char *name, const char *value)
{
    if (k->req.nquery < BLOB_REQ_MAX_QUERY)
        k->req.query[k->req.nquery++] = (struct blob_kv){name, value};
}

static void call_xms(struct call *k, const char *name, const char *value)
{
    if (k->req.nxms < BLOB_REQ_MAX_XMS)
        k->req.xms[k->req.nxms++] = (struct blob_kv){name, value};
}

/* A caller's string as a header value: 1 to max-1 printable bytes. */
static bool header_value_ok(const char *s, size_t max)
{
    size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || s[n] == 0x7f || n + 1 >= max)
            return false;
    return n > 0;
}

/* ETags go out quoted ("0x..."), whether they came from a header (quoted) or a listing. */
static bool etag_header(const char *etag, char *out, size_t cap)
{
    if (!header_value_ok(etag, BLOB_ETAG_MAX))
        return false;
    bool bare = strcmp(etag, "*") != 0 && etag[0] != '"' && strncmp(etag, "W/", 2) != 0;
    snprintf(out, cap, bare ? "\"%s\"" : "%s", etag);
    return true;
}

static void copy_id(struct call *k, char *dst, const char *id, const char *what)
{
    if (!id || !header_value_ok(id, BLOB_LEASE_ID_MAX)) {
        if (!k->problem)
            k->problem = what;
        return;
    }
    memcpy(dst, id, strlen(id) + 1);
}

/* Starts an operation on `blob` (NULL: the container): checks and copies the name and the
 * conditions. Call call_start() next, after any other argument is copied. */
static void call_init(struct call *k, const char *verb, const char *blob,
                      const struct blob_cond *cond)
{
    memset(k, 0, sizeof *k);
    k->req.verb = verb;
    k->req.blob = blob; /* names are not in any result, so no copy is needed */
    if (blob) {
        size_t n = strnlen(blob, BLOB_NAME_MAX + 1);
        if (n == 0 || n > BLOB_NAME_MAX)
            k->problem = "a blob name is 1 to 1024 bytes";
    }
    if (!cond)
        return;
    if (cond->if_match) {
        if (etag_header(cond->if_match, k->if_match, sizeof k->if_match))
            k->req.if_match = k->if_match;
        else if (!k->problem)
            k->problem = "if_match is not a valid ETag";
    }
    if (cond->if_none_match) {
        if (etag_header(cond->if_none_match, k->if_none_match, sizeof k->if_none_match))
            k->req.if_none_match = k->if_none_match;
        else if (!k->problem)
            k->problem = "if_none_match is not a valid ETag";
    }
    if (cond->lease_id) {
        copy_id(k, k->lease_id, cond->lease_id, "lease_id is not a valid lease id");
        call_xms(k, "x-ms-lease-id", k->lease_id);
    }
}

/* Resets the result; -1 (with the reason in it) when an argument was refused. */
static int call_start(struct call *k, struct blob_result *res)
{
    blob_result_free(res);
    return k->problem ? local_fail(res, "%s", k->problem) : 0;
}

int blob_create_container(struct blob_client *c, struct blob_result *res)
{
    struct call k;
    call_init(&k, "PUT", NULL, NULL);
    call_query(&k, "restype", "container");
    call_start(&k, res);
    int rc = perform(c, &k.req, 201, res);
    if (rc != 0 && res->status == 409 && strcmp(res->error_code, "ContainerAlreadyExists") == 0)
        rc = 0;
    return rc;
}

int blob_delete_container(struct blob_client *c, struct blob_result *res)
{
    struct call k;
    call_init(&k, "DELETE", NULL, NULL);
    call_query(&k, "restype", "container");
    call_start(&k, res);
    return perform(c, &k.req, 202, res);
}

int blob_put(struct blob_client *c, const char *name, const void *data, size_t len,
             const struct blob_cond *cond, struct blob_result *res)
{
    struct call k;
    call_init(&k, "PUT", name, cond);
    if (!data && len && !k.problem)
        k.problem = "no data for a non-empty blob";
    if (call_start(&k, res) != 0)
        return -1;
    call_xms(&k, "x-ms-blob-type", "BlockBlob");
    k.req.body = data;
    k.req.body_len = len;
    k.req.content_type = "application/octet-stream";
    return perform(c, &k.req, 201, res);
}

int blob_get(struct blob_client *c, const char *name, const struct blob_cond *cond,
             struct blob_result *res)
{
    struct call k;
    call_init(&k, "GET", name, cond);
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 200, res);
}

int blob_head(struct blob_client *c, const char *name, struct blob_result *res)
{
    struct call k;
    call_init(&k, "HEAD", name, NULL);
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 200, res);
}

int blob_delete(struct blob_client *c, const char *name, const struct blob_cond *cond,
                struct blob_result *res)
{
    struct call k;
    call_init(&k, "DELETE", name, cond);
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 202, res);
}

int blob_create_append(struct blob_client *c, const char *name, const struct blob_cond *cond,
                       struct blob_result *res)
{
    struct call k;
    call_init(&k, "PUT", name, cond);
    if (call_start(&k, res) != 0)
        return -1;
    call_xms(&k, "x-ms-blob-type", "AppendBlob");
    return perform(c, &k.req, 201, res);
}

int blob_append_block(struct blob_client *c, const char *name, const void *data, size_t len,
                      int64_t append_pos, const struct blob_cond *cond, struct blob_result *res)
{
    struct call k;
    call_init(&k, "PUT", name, cond);
    if ((!data || len == 0 || len > MAX_APPEND_BLOCK) && !k.problem)
        k.problem = "an appended block is 1 byte to 4 MiB";
    if (call_start(&k, res) != 0)
        return -1;
    call_query(&k, "comp", "appendblock");
    if (append_pos >= 0) {
        snprintf(k.num, sizeof k.num, "%" PRId64, append_pos);
        call_xms(&k, "x-ms-blob-condition-appendpos", k.num);
    }
    k.req.body = data;
    k.req.body_len = len;
    k.req.content_type = "application/octet-stream";
    return perform(c, &k.req, 201, res);
}

int blob_list_page(struct blob_client *c, const char *prefix, const char *marker,
                   unsigned max_results, struct blob_list *out, struct blob_result *res)
{
    struct call k;
    int rc = -1;
    /* Copied before `out` is freed: the marker is usually out->next_marker. */
    char *pfx = prefix && prefix[0] ? strdup(prefix) : NULL;
    char *mark = marker && marker[0] ? strdup(marker) : NULL;
    bool oom = (prefix && prefix[0] && !pfx) || (marker && marker[0] && !mark);
    blob_list_free(out);
    call_init(&k, "GET", NULL, NULL);
    call_start(&k, res);
    if (oom) {
        local_fail(res, "out of memory");
        goto out;
    }
    call_query(&k, "restype", "container");
    call_query(&k, "comp", "list");
    if (pfx)
        call_query(&k, "prefix", pfx);
    if (mark)
        call_query(&k, "marker", mark);
    if (max_results) {
        snprintf(k.num, sizeof k.num, "%u", max_results);
        call_query(&k, "maxresults", k.num);
    }
    if (perform(c, &k.req, 200, res) != 0)
        goto out;
    if (blob_parse_list(res->body ? res->body : "", res->body_len, out) != 0) {
        local_fail(res, "the listing could not be parsed");
        goto out;
    }
    rc = 0;
out:
    free(pfx);
    free(mark);
    return rc;
}

/* A lease action on `name`; `id` (may be NULL) goes in x-ms-lease-id. */
static void lease_init(struct call *k, const char *name, const char *action, const char *id)
{
    call_init(k, "PUT", name, NULL);
    call_query(k, "comp", "lease");
    call_xms(k, "x-ms-lease-action", action);
    if (id) {
        copy_id(k, k->lease_id, id, "lease_id is not a valid lease id");
        call_xms(k, "x-ms-lease-id", k->lease_id);
    }
}

int blob_lease_acquire(struct blob_client *c, const char *name, int duration,
                       const char *proposed_id, struct blob_result *res)
{
    struct call k;
    lease_init(&k, name, "acquire", NULL);
    if (duration != -1 && (duration < 15 || duration > 60) && !k.problem)
        k.problem = "a lease lasts 15 to 60 seconds, or -1 for ever";
    snprintf(k.num, sizeof k.num, "%d", duration);
    call_xms(&k, "x-ms-lease-duration", k.num);
    if (proposed_id) {
        copy_id(&k, k.proposed_id, proposed_id, "proposed_id is not a valid lease id");
        call_xms(&k, "x-ms-proposed-lease-id", k.proposed_id);
    }
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 201, res);
}

static int lease_with_id(struct blob_client *c, const char *name, const char *action,
                         const char *lease_id, struct blob_result *res)
{
    struct call k;
    lease_init(&k, name, action, lease_id);
    if (!lease_id && !k.problem)
        k.problem = "no lease_id";
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 200, res);
}

int blob_lease_renew(struct blob_client *c, const char *name, const char *lease_id,
                     struct blob_result *res)
{
    return lease_with_id(c, name, "renew", lease_id, res);
}

int blob_lease_release(struct blob_client *c, const char *name, const char *lease_id,
                       struct blob_result *res)
{
    return lease_with_id(c, name, "release", lease_id, res);
}

int blob_lease_break(struct blob_client *c, const char *name, int break_period,
                     struct blob_result *res)
{
    struct call k;
    lease_init(&k, name, "break", NULL);
    if (break_period > 60 && !k.problem)
        k.problem = "a break period is 0 to 60 seconds";
    if (break_period >= 0) {
        snprintf(k.num, sizeof k.num, "%d", break_period);
        call_xms(&k, "x-ms-lease-break-period", k.num);
    }
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 202, res);
}

/* ---- Listings ------------------------------------------------------------------------------ */

/*
 * A scanner for the few elements a listing needs, not an XML parser: the service writes a
 * fixed, flat document with no comments or CDATA. Finds the first element `tag` in [p, end):
 * 1 and *e filled, 0 when there is none, -1 when it is cut off.
 */
static int find_elem(const char *p, const char *end, const char *tag, struct xml_elem *e)
{
    size_t tag_len = strlen(tag);
    char close[64];
    if (tag_len + 4 > sizeof close)
        return -1;
    snprintf(close, sizeof close, "</%s>", tag);
    while (p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt)
            return 0;
        p = lt + 1;
        if ((size_t)(end - p) <= tag_len || memcmp(p, tag, tag_len) != 0)
            continue;
        char next = p[tag_len];
        if (next != '>' && next != '/' && !ascii_space(next))
            continue; /* <Blob> is not <Blobs> or <BlobType> */
        const char *gt = memchr(p + tag_len, '>', (size_t)(end - p - tag_len));
        if (!gt)
            return -1;
        e->attrs = p + tag_len;
        e->attrs_len = (size_t)(gt - e->attrs);
        if (gt[-1] == '/') { /* <NextMarker/> */
            e->attrs_len--;
            e->text = gt + 1;
            e->text_len = 0;
            e->after = gt + 1;
            return 1;
        }
        e->text = gt + 1;
        const char *c = memmem(e->text, (size_t)(end - e->text), close, tag_len + 3);
        if (!c)
            return -1;
        e->text_len = (size_t)(c - e->text);
        e->after = c + tag_len + 3;
        return 1;
    }
    return 0;
}

static void append_utf8(struct mx_buf *b, uint32_t cp)
{
    char u[4];
    if (cp < 0x80) {
        u[0] = (char)cp;
        mx_buf_append(b, u, 1);
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        mx_buf_append(b, u, 2);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        mx_buf_append(b, u, 3);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        mx_buf_append(b, u, 4);
    }
}

/* &#233; or &#xE9; (without '&' and ';'): the code point, or -1 if it is not a character a
 * C string can hold. */
static int64_t char_ref(const char *s, size_t n)
{
    if (n < 2 || s[0] != '#')
        return -1;
    bool hex = s[1] == 'x' || s[1] == 'X';
    size_t i = hex ? 2 : 1;
    if (i == n)
        return -1;
    int64_t cp = 0;
    for (; i < n; i++) {
        int d;
        char ch = ascii_lower(s[i]);
        if (ascii_digit(ch))
            d = ch - '0';
        else if (hex && ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else
            return -1;
        cp = cp * (hex ? 16 : 10) + d;
        if (cp > 0x10FFFF)
            return -1;
    }
    if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    return cp;
}

char *blob_xml_unescape(const char *s, size_t len)
{
    static const struct {
        const char *name;
        char ch;
    } named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    struct mx_buf b = {0};
    size_t i = 0;
    while (i < len) {
        const char *amp = memchr(s + i, '&', len - i);
        size_t run = amp ? (size_t)(amp - (s + i)) : len - i;
        mx_buf_append(&b, s + i, run);
        i += run;
        if (!amp)
            break;
        /* The longest reference is &#x10FFFF; (10 characters between '&' and ';'). */
        size_t look = len - i - 1 < 12 ? len - i - 1 : 12;
        const char *semi = memchr(amp + 1, ';', look);
        if (!semi)
            goto bad;
        const char *ent = amp + 1;
        size_t ent_len = (size_t)(semi - ent);
        bool done = false;
        for (size_t j = 0; j < sizeof named / sizeof named[0] && !done; j++) {
            if (strlen(named[j].name) == ent_len && memcmp(ent, named[j].name, ent_len) == 0) {
                mx_buf_append_char(&b, named[j].ch);
                done = true;
            }
        }
        if (!done) {
            int64_t cp = char_ref(ent, ent_len);
            if (cp < 0)
                goto bad;
            append_utf8(&b, (uint32_t)cp);
        }
        i = (size_t)(semi - s) + 1;
    }
    return mx_buf_take(&b);
bad:
    mx_buf_free(&b);
    return NULL;
}

/* Names the service cannot put in XML come as <Name Encoded="true">percent-encoded</Name>. */
static int percent_decode_inplace(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r != '%') {
            *w++ = *r;
            continue;
        }
        /* r[2] is at worst the NUL; %00 would cut the name short. */
        int byte = r[1] ? mx_hex_byte(r[1], r[2]) : -1;
        if (byte <= 0)
            return -1;
        *w++ = (char)byte;
        r += 2;
    }
    *w = '\0';
    return 0;
}

static bool attr_encoded(const struct xml_elem *e)
{
    struct mx_buf b = {0};
    mx_buf_append(&b, e->attrs, e->attrs_len);
    char *a = mx_buf_take(&b);
    bool yes = a && (strstr(a, "Encoded=\"true\"") || strstr(a, "Encoded='true'"));
    free(a);
    return yes;
}

static int parse_item(const char *p, const char *end, struct blob_item *it)
{
    struct xml_elem name, props, e;
    it->size = -1;
    if (find_elem(p, end, "Name", &name) <= 0)
        return -1;
    it->name = blob_xml_unescape(name.text, name.text_len);
    if (!it->name || (attr_encoded(&name) && percent_decode_inplace(it->name) != 0))
        return -1;
    int f = find_elem(name.after, end, "Properties", &props);
    if (f < 0)
        return -1;
    if (f == 0)
        return 0;
    const char *pe = props.text + props.text_len;
    f = find_elem(props.text, pe, "Etag", &e);
    if (f < 0)
        return -1;
    if (f > 0 && e.text_len) {
        char *etag = blob_xml_unescape(e.text, e.text_len);
        bool quoted = etag && etag[0] == '"';
        int n = etag ? snprintf(it->etag, sizeof it->etag, quoted ? "%s" : "\"%s\"", etag) : -1;
        free(etag);
        if (n < 0 || (size_t)n >= sizeof it->etag)
            return -1;
    }
    f = find_elem(props.text, pe, "Content-Length", &e);
    if (f < 0)
        return -1;
    if (f > 0) {
        it->size = parse_count(e.text, e.text_len);
        if (it->size < 0)
            return -1;
    }
    return 0;
}

void blob_list_free(struct blob_list *l)
{
    for (size_t i = 0; i < l->count; i++)
        free(l->items[i].name);
    free(l->items);
    free(l->next_marker);
    memset(l, 0, sizeof *l);
}

int blob_parse_list(const char *xml, size_t len, struct blob_list *out)
{
    const char *end = xml + len, *rest = xml;
    struct xml_elem blobs, b, m;
    size_t cap = 0;

    memset(out, 0, sizeof *out);
    if (find_elem(xml, end, "EnumerationResults", &blobs) <= 0)
        goto bad;
    int f = find_elem(xml, end, "Blobs", &blobs);
    if (f < 0)
        goto bad;
    if (f > 0) {
        const char *p = blobs.text, *bend = blobs.text + blobs.text_len;
        while ((f = find_elem(p, bend, "Blob", &b)) > 0) {
            if (out->count == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct blob_item *ni = realloc(out->items, ncap * sizeof *ni);
                if (!ni)
                    goto bad;
                out->items = ni;
                cap = ncap;
            }
            struct blob_item *it = &out->items[out->count++];
            memset(it, 0, sizeof *it);
            if (parse_item(b.text, b.text + b.text_len, it) != 0)
                goto bad;
            p = b.after;
        }
        if (f < 0)
            goto bad;
        rest = blobs.after;
    }
    f = find_elem(rest, end, "NextMarker", &m);
    if (f < 0)
        goto bad;
    if (f > 0 && m.text_len) {
        out->next_marker = blob_xml_unescape(m.text, m.text_len);
        if (!out->next_marker)
            goto bad;
    }
    return 0;
bad:
    blob_list_free(out);
    return -1;
}
