/*
 * Storage accounts of the blob client (see blob.h): an account from an endpoint, a name and a
 * base64 key, or from an Azure Storage connection string (Azure, Azurite's development storage,
 * a development proxy). Pure functions on plain data: no I/O, any thread. The key is decoded
 * strictly and wiped from every copy made on the way.
 */
#include "blob/blob.h"
#include "blob/shared.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/* The emulator's well-known development account; its key is public and the same everywhere. */
#define DEV_ACCOUNT "devstoreaccount1"
#define DEV_KEY                                                                                    \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define DEV_ENDPOINT "http://127.0.0.1:10000/" DEV_ACCOUNT
#define DEV_PORT     "10000"

void blob_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
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
        blob_set_err(err, errlen, "AccountKey is empty");
        return -1;
    }
    if (n > MAX_B64) {
        blob_set_err(err, errlen, "AccountKey is too long (at most %d decoded bytes)",
                     BLOB_KEY_MAX);
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
        blob_set_err(err, errlen, "AccountKey is not valid base64");
        OPENSSL_cleanse(tmp, sizeof tmp);
        return -1;
    }
    size_t len = (size_t)got - pad;
    if (len > BLOB_KEY_MAX) {
        blob_set_err(err, errlen, "AccountKey is too long (at most %d decoded bytes)",
                     BLOB_KEY_MAX);
        OPENSSL_cleanse(tmp, sizeof tmp);
        return -1;
    }
    memcpy(out, tmp, len);
    *out_len = len;
    OPENSSL_cleanse(tmp, sizeof tmp);
    return 0;
}

const char *blob_after_scheme(const char *url)
{
    if (ieq_prefix(url, "http://"))
        return url + 7;
    if (ieq_prefix(url, "https://"))
        return url + 8;
    return NULL;
}

const char *blob_endpoint_path(const char *endpoint)
{
    const char *host = blob_after_scheme(endpoint);
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
        blob_set_err(err, errlen, "the blob endpoint is too long");
        return -1;
    }
    const char *host = blob_after_scheme(ep);
    if (!host) {
        blob_set_err(err, errlen, "the blob endpoint must start with http:// or https://");
        return -1;
    }
    for (size_t n = strlen(ep); n > (size_t)(host - ep) && ep[n - 1] == '/'; n--)
        ep[n - 1] = '\0';
    for (const char *p = ep; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= ' ' || ch == 0x7f || ch == '?' || ch == '#' || ch == '\\') {
            blob_set_err(err, errlen, "the blob endpoint may not contain spaces, '?', '#' or '\\'");
            return -1;
        }
    }
    size_t host_len = strcspn(host, "/");
    if (host_len == 0 || host[0] == ':') {
        blob_set_err(err, errlen, "the blob endpoint has no host");
        return -1;
    }
    int n;
    if (host[host_len] == '\0' && host_is_path_style(host, host_len))
        n = snprintf(a->endpoint, sizeof a->endpoint, "%s/%s", ep, a->name);
    else
        n = snprintf(a->endpoint, sizeof a->endpoint, "%s", ep);
    if (n < 0 || (size_t)n >= sizeof a->endpoint) {
        blob_set_err(err, errlen, "the blob endpoint is too long");
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
        blob_set_err(err, errlen, "endpoint, account name and key are all needed");
        goto out;
    }
    if (!account_name_ok(name)) {
        blob_set_err(err, errlen, "the account name must be 1 to %d letters and digits",
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
        blob_set_err(err, errlen, "DevelopmentStorageProxyUri is too long");
        return -1;
    }
    const char *host = blob_after_scheme(uri);
    if (!host) {
        blob_set_err(err, errlen, "DevelopmentStorageProxyUri must start with http:// or https://");
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
        blob_set_err(err, errlen, "DevelopmentStorageProxyUri has no host");
        return -1;
    }
    int n = snprintf(out, cap, "%.*s%.*s:" DEV_PORT "/" DEV_ACCOUNT, (int)(host - uri), uri,
                     (int)host_len, host);
    if (n < 0 || (size_t)n >= cap) {
        blob_set_err(err, errlen, "DevelopmentStorageProxyUri is too long");
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
        blob_set_err(err, errlen, "no connection string");
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
            blob_set_err(err, errlen, "the connection string has a part without '=' (Key=Value)");
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
            blob_set_err(err, errlen, "UseDevelopmentStorage must be true or false");
            return -1;
        }
    }
    if (dev) {
        static const int not_with_dev[] = {PROTO, NAME, KEY, ENDPOINT, SUFFIX};
        for (size_t i = 0; i < sizeof not_with_dev / sizeof not_with_dev[0]; i++) {
            if (v[not_with_dev[i]].p) {
                blob_set_err(err, errlen,
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
        blob_set_err(err, errlen, "DevelopmentStorageProxyUri needs UseDevelopmentStorage=true");
        return -1;
    }
    if (!v[NAME].p || v[NAME].n == 0) {
        blob_set_err(err, errlen, "AccountName is missing from the connection string");
        return -1;
    }
    if (!v[KEY].p) {
        blob_set_err(err, errlen,
                     v[SAS].p ? "SharedAccessSignature connection strings are not supported: give "
                                "an AccountKey"
                              : "AccountKey is missing from the connection string");
        return -1;
    }
    if (span_copy(name, sizeof name, v[NAME]) != 0) {
        blob_set_err(err, errlen, "AccountName is too long");
        return -1;
    }
    if (span_copy(key, sizeof key, v[KEY]) != 0) {
        blob_set_err(err, errlen, "AccountKey is too long (at most %d decoded bytes)",
                     BLOB_KEY_MAX);
        goto out;
    }
    const char *proto = "https";
    if (v[PROTO].p) {
        if (ieq(v[PROTO].p, v[PROTO].n, "http")) {
            proto = "http";
        } else if (!ieq(v[PROTO].p, v[PROTO].n, "https")) {
            blob_set_err(err, errlen, "unknown DefaultEndpointsProtocol '%.*s' (http or https)",
                         v[PROTO].n > 16 ? 16 : (int)v[PROTO].n, v[PROTO].p);
            goto out;
        }
    }
    if (v[ENDPOINT].p) {
        if (span_copy(endpoint, sizeof endpoint, v[ENDPOINT]) != 0) {
            blob_set_err(err, errlen, "BlobEndpoint is too long");
            goto out;
        }
    } else {
        struct span suffix = v[SUFFIX].p ? v[SUFFIX] : (struct span){"core.windows.net", 16};
        if (suffix.n == 0 || memchr(suffix.p, '/', suffix.n)) {
            blob_set_err(err, errlen,
                         "EndpointSuffix must be a DNS suffix such as core.windows.net");
            goto out;
        }
        int n = snprintf(endpoint, sizeof endpoint, "%s://%s.blob.%.*s", proto, name, (int)suffix.n,
                         suffix.p);
        if (n < 0 || (size_t)n >= sizeof endpoint) {
            blob_set_err(err, errlen, "EndpointSuffix is too long");
            goto out;
        }
    }
    rc = blob_account_init(out, endpoint, name, key, err, errlen);
out:
    OPENSSL_cleanse(key, sizeof key);
    return rc;
}
