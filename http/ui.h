/*
 * The dashboard's files (docs/dashboard.md), built into the binary: the table below is
 * generated at build time from every file under ui/ (cmake/embed_ui.cmake), so the server
 * needs nothing beside itself at run time. This module finds a file by its path and says
 * which headers every answer under /ui/ carries; http/server.c answers. Pure functions over
 * constant data; any thread.
 */
#ifndef MX_HTTP_UI_H
#define MX_HTTP_UI_H

#include <stdbool.h>
#include <stddef.h>

struct ui_asset {
    const char *path; /* as requested: "/ui/app.js"; index.html is also "/ui/" */
    const char *type; /* Content-Type */
    const char *etag; /* a strong ETag, quoted: a hash of the bytes */
    const unsigned char *data;
    size_t len;
};

/* Generated (ui_assets.c in the build folder): every file under ui/, in path order. */
extern const struct ui_asset ui_assets[];
extern const size_t ui_assets_count;

/* The file served at `path` (decoded, without the query), or NULL. */
const struct ui_asset *ui_find(const char *path);

/* Whether an If-None-Match header value (a list of entity tags, or "*") names `etag`:
 * the weak comparison RFC 9110 13.1.2 asks of If-None-Match. */
bool ui_etag_matches(const char *if_none_match, const char *etag);

/* Headers every answer under /ui/ carries, 304s and errors included: the page may run no
 * script but its own files, be framed by no one, and send nothing elsewhere. A NULL name
 * ends the table. */
struct ui_header {
    const char *name, *value;
};
extern const struct ui_header ui_security_headers[];

/* Whether a path (decoded, no query) is the dashboard's: "/ui" or under "/ui/". */
bool ui_is_path(const char *path);

#endif
