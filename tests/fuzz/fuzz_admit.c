/*
 * Fuzzer: admission and framing (http/admit.c). The input is a request head; it is laid
 * out as libmicrohttpd keeps it (line breaks and each header's colon overwritten with
 * NULs), its headers are fed to the scan in order, counted, and the first of each kind
 * handed to the checks. Checks that every refusal has the status and code of its kind.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/admit.h"

#define MAX_HEADERS 64

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 2)
        return 0;
    bool http10 = data[0] & 1, json_route = data[0] & 2, check_host = data[0] & 4;
    char *head = malloc(size);
    memcpy(head, data + 1, size - 1);
    head[size - 1] = '\0';
    size_t len = size - 1;
    const char *keys[MAX_HEADERS], *values[MAX_HEADERS];
    size_t n = 0;
    /* The first line is the request line; each later one "Name: value". */
    char *p = memchr(head, '\n', len);
    while (p && n < MAX_HEADERS) {
        *p++ = '\0';
        char *end = memchr(p, '\n', len - (size_t)(p - head));
        char *colon = memchr(p, ':', (end ? end : head + len) - p);
        if (!colon || colon == p)
            break;
        *colon = '\0';
        keys[n] = p;
        values[n] = colon + 1;
        n++;
        p = end;
    }
    struct admit_headers h = {.http10 = http10};
    struct admit_scan sc = {.head = head, .end = head + len};
    bool scanning = true;
    for (size_t i = 0; i < n; i++) {
        if (scanning)
            scanning = admit_scan_next(&sc, keys[i], values[i]);
        admit_count(&h, keys[i]);
        const char **slot = strcasecmp(keys[i], "Origin") == 0              ? &h.origin
                            : strcasecmp(keys[i], "Host") == 0              ? &h.host
                            : strcasecmp(keys[i], "Content-Length") == 0    ? &h.content_length
                            : strcasecmp(keys[i], "Transfer-Encoding") == 0 ? &h.transfer_encoding
                            : strcasecmp(keys[i], "Content-Type") == 0      ? &h.content_type
                                                                            : NULL;
        if (slot && !*slot)
            *slot = values[i];
    }
    h.nul_header = admit_scan_end(&sc);

    struct api_error e;
    if (!admit_framing(&h, &e) && (e.status != 400 || strcmp(e.code, "invalid_field") != 0))
        abort();
    if (!admit_origin_host(&h, "https://a.example", "b.example", check_host, &e) &&
        (e.status != 403 || strcmp(e.code, "forbidden") != 0))
        abort();
    bool has_body;
    if (!admit_body(&h, json_route, &has_body, &e) && e.status != 413 && e.status != 415)
        abort();
    free(head);
    return 0;
}
