/*
 * The raw text of a value inside JSON that a parser has already accepted. cJSON keeps
 * numbers as doubles, so re-printing a parsed object can change it (9007199254740993 comes
 * back as 9007199254740992); where a client's JSON is stored and returned (lease
 * metadata), the server keeps the client's own text instead, found with these.
 */
#ifndef MX_JSON_SPAN_H
#define MX_JSON_SPAN_H

#include <stdbool.h>
#include <stddef.h>

/* The value of the `index`-th member (0-based) of the top-level object of `json`, which
 * must be valid JSON. Returns false if there is no such member. */
bool json_member_value(const char *json, size_t len, size_t index, const char **start,
                       size_t *vlen);

/* The `index`-th element (0-based) of the top-level array of `json`, which must be valid
 * JSON. Returns false if there is no such element. */
bool json_element_value(const char *json, size_t len, size_t index, const char **start,
                        size_t *vlen);

/* Copies `in` to `out` (room for `len` bytes) without the white space between tokens.
 * Returns the length written. */
size_t json_compact(const char *in, size_t len, char *out);

/* What makes a JSON text unfit that cJSON lets through, or NULL when nothing does: a raw
 * NUL or control character (JSON allows none in a string, and only tab, CR and LF between
 * tokens, where cJSON takes any byte below 0x20 for white space), or a \u0000 escape, at
 * which cJSON's C strings would silently end ("a\u0000b" would read as "a"). The answer
 * names the flaw ("a raw control character"). Check before parsing. */
const char *json_text_flaw(const char *json, size_t len);

/* json_text_flaw, and also a number that RFC 8259 does not allow and cJSON reads all the
 * same through strtod: a leading zero (`01`), a point without digits on one side (`1.`,
 * `-.5`, `1.e3`), an exponent without digits. For what a client sends: the server stores
 * and echoes a client's own text (metadata), so every answer stays JSON that any client's
 * parser reads. Stored text (journal lines) is checked with json_text_flaw alone, so that
 * what an earlier version accepted is still read. */
const char *json_strict_flaw(const char *json, size_t len);

#endif
