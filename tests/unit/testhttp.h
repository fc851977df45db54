/*
 * The C unit tests' HTTP client for fronts they start on loopback (libcurl): one request,
 * its status, its body and the Mutexd-Served-By header.
 */
#ifndef MX_TESTHTTP_H
#define MX_TESTHTTP_H

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"

static inline size_t mx_test_collect(char *p, size_t size, size_t n, void *arg)
{
    mx_buf_append(arg, p, size * n);
    return size * n;
}

/* The value of header `name` in raw response headers, into `out` (`cap` bytes; "" when
 * absent). Returns out. */
static inline char *mx_test_header(const struct mx_buf *headers, const char *name, char *out,
                                   size_t cap)
{
    char key[96];
    snprintf(key, sizeof key, "\n%s: ", name);
    const char *p = headers->p ? strcasestr(headers->p, key) : NULL;
    size_t n = 0;
    if (p)
        for (p += strlen(key); n + 1 < cap && p[n] && p[n] != '\r' && p[n] != '\n'; n++)
            out[n] = p[n];
    out[n] = '\0';
    return out;
}

/* `base` + `path`, a POST of `json` when given, else a GET. Returns the status; the body in
 * `body` and the raw headers in `headers` (each freed by the caller) when given. A transfer
 * that fails fails the case. */
static inline long mx_test_exchange(const char *base, const char *path, const char *json,
                                    struct mx_buf *body, struct mx_buf *headers)
{
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[512];
    snprintf(url, sizeof url, "%s%s", base, path);
    struct mx_buf b = {0}, h = {0};
    struct curl_slist *hs = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mx_test_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, mx_test_collect);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    if (json)
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        fail_msg("%s: %s", url, curl_easy_strerror(rc));
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hs);
    curl_easy_cleanup(c);
    if (headers)
        *headers = h;
    else
        mx_buf_free(&h);
    if (body)
        *body = b;
    else
        mx_buf_free(&b);
    return status;
}

/* The same, with the Mutexd-Served-By header in `served_by` (128 bytes) when given. */
static inline long mx_test_request(const char *base, const char *path, const char *json,
                                   struct mx_buf *body, char *served_by)
{
    struct mx_buf h = {0};
    long status = mx_test_exchange(base, path, json, body, &h);
    if (served_by)
        mx_test_header(&h, "Mutexd-Served-By", served_by, 128);
    mx_buf_free(&h);
    return status;
}

#endif
