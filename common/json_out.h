/*
 * Writing JSON with cJSON, the few helpers both the HTTP answers (http/render.c) and the
 * journal (persistence/journal.c) need: 64-bit integers written exactly (cJSON keeps
 * numbers as doubles), a resource name of known length, and printing an object compactly.
 * Any thread.
 */
#ifndef MX_JSON_OUT_H
#define MX_JSON_OUT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* `key`: v, as digits (exact above 2^53). */
void mx_json_add_u64(cJSON *o, const char *key, uint64_t v);
void mx_json_add_i64(cJSON *o, const char *key, int64_t v);

/* `key`: the first `len` bytes of `s` (at most MX_NAME_MAX), as a string. */
void mx_json_add_name(cJSON *o, const char *key, const char *s, size_t len);

/* `o` printed without spaces, then deleted: a string to free with cJSON_free(), or NULL
 * when out of memory (also when `o` is NULL). */
char *mx_json_print(cJSON *o);

#endif
