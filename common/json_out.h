/*
 * Writing JSON. Two ways:
 *
 * - With cJSON, the few helpers the journal (persistence/journal.c) and the server group's
 *   views need: 64-bit integers written exactly (cJSON keeps numbers as doubles), a
 *   resource name of known length, and printing an object compactly.
 * - Straight into a buffer (struct mx_jw), for the HTTP answers (http/render.c): every
 *   answer is a small object written once, in order, so it needs no tree of nodes, one
 *   allocation each, to be built, printed and freed. Strings are escaped as cJSON escapes
 *   them, so the text is the same.
 *
 * Any thread.
 */
#ifndef MX_JSON_OUT_H
#define MX_JSON_OUT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* `key`: v, as digits (exact above 2^53). */
void mx_json_add_u64(cJSON *o, const char *key, uint64_t v);
void mx_json_add_i64(cJSON *o, const char *key, int64_t v);

/* `key`: the first `len` bytes of `s` (at most MX_NAME_MAX), as a string. */
void mx_json_add_name(cJSON *o, const char *key, const char *s, size_t len);

/* `o` printed without spaces, then deleted: a string to free with cJSON_free(), or NULL
 * when out of memory (also when `o` is NULL). */
char *mx_json_print(cJSON *o);

/* A JSON text written in order: open an object, then key and value, key and value... A
 * value after a key or in an array gets its comma by itself. A failed allocation is seen
 * once, at mx_jw_take(). Start one zeroed ({0}). */
struct mx_jw {
    struct mx_buf b;
    bool comma; /* a value was written at this level: the next one needs a comma */
};

void mx_jw_object(struct mx_jw *w);
void mx_jw_object_end(struct mx_jw *w);
void mx_jw_array(struct mx_jw *w);
void mx_jw_array_end(struct mx_jw *w);
/* `"key":`; `key` is written as it is (the callers' keys are literals). */
void mx_jw_key(struct mx_jw *w, const char *key);
/* The first `len` bytes of `s`, quoted and escaped. */
void mx_jw_str(struct mx_jw *w, const char *s, size_t len);
void mx_jw_cstr(struct mx_jw *w, const char *s);
void mx_jw_u64(struct mx_jw *w, uint64_t v);
void mx_jw_bool(struct mx_jw *w, bool v);
void mx_jw_null(struct mx_jw *w);
/* `len` bytes of text that is JSON already (a validated metadata object). */
void mx_jw_raw(struct mx_jw *w, const char *s, size_t len);
/* The text, to free(); NULL when memory ran out. The writer is empty afterwards. */
char *mx_jw_take(struct mx_jw *w);

/* Appends the compact JSON text of `o` to `out`, and deletes `o`. 0, or -1 when memory ran
 * out. */
int mx_json_append(struct mx_buf *out, cJSON *o);

#endif
