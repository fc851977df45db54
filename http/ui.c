/*
 * The dashboard's files and headers (see ui.h). The table is small (a handful of files)
 * and sorted by path, so a binary search would save nothing worth its code: a linear scan.
 */
#include "http/ui.h"

#include <string.h>

const struct ui_header ui_security_headers[] = {
    /* No 'unsafe-inline' and no nonces: every script and style is one of the files below,
     * and the page talks to its own server only. */
    {"Content-Security-Policy",
     "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
     "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
     "form-action 'self'; frame-ancestors 'none'"},
    {"X-Frame-Options", "DENY"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
    {"Cross-Origin-Opener-Policy", "same-origin"},
    {"Cross-Origin-Resource-Policy", "same-origin"},
    {NULL, NULL},
};

bool ui_is_path(const char *path)
{
    return strncmp(path, "/ui", 3) == 0 && (path[3] == '\0' || path[3] == '/');
}

const struct ui_asset *ui_find(const char *path)
{
    if (strcmp(path, "/ui/") == 0)
        path = "/ui/index.html";
    for (size_t i = 0; i < ui_assets_count; i++)
        if (strcmp(ui_assets[i].path, path) == 0)
            return &ui_assets[i];
    return NULL;
}

bool ui_etag_matches(const char *inm, const char *etag)
{
    size_t n = strlen(etag);
    for (const char *p = inm; p && *p;) {
        p += strspn(p, " \t,");
        if (*p == '*')
            return true;
        if (strncmp(p, "W/", 2) == 0) /* weak comparison: W/"x" names "x" */
            p += 2;
        if (*p != '"')
            return false; /* not a list of entity tags: names nothing */
        const char *close = strchr(p + 1, '"');
        if (!close)
            return false;
        if ((size_t)(close + 1 - p) == n && strncmp(p, etag, n) == 0)
            return true;
        p = close + 1;
    }
    return false;
}
