/*
 * `mutexd --probe` (see probe.h): one GET /healthz with libcurl to the address --listen
 * names (a wildcard address is probed on loopback), over TLS when --tls-cert is set,
 * without checking the certificate: it asks whether the server is alive, not who it is.
 */
#include "server/probe.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

int probe_main(const struct options *o)
{
    /* A wildcard listen address is probed on loopback. */
    char host[256], url[400];
    const char *colon = strrchr(o->listen, ':');
    size_t hl = colon ? (size_t)(colon - o->listen) : 0;
    if (!colon || hl >= sizeof host) {
        fprintf(stderr, "mutexd: --probe: cannot read --listen %s\n", o->listen);
        return 1;
    }
    memcpy(host, o->listen, hl);
    host[hl] = '\0';
    if (hl == 0 || strcmp(host, "0.0.0.0") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    else if (strcmp(host, "[::]") == 0)
        snprintf(host, sizeof host, "[::1]");
    snprintf(url, sizeof url, "%s://%s:%s/healthz", o->tls_cert ? "https" : "http", host,
             colon + 1);

    CURL *c = curl_easy_init();
    if (!c)
        return 1;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 3000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    /* Our own certificate may name another host than loopback: this is a liveness check. */
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    long status = 0;
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    if (status != 200) {
        fprintf(stderr, "mutexd: --probe: %s: %s\n", url,
                rc == CURLE_OK ? "not 200" : curl_easy_strerror(rc));
        return 1;
    }
    return 0;
}
