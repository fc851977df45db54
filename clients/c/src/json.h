/*
 * Reading the server's answers with cJSON, exactly.
 *
 * cJSON keeps numbers as doubles, which hold integers exactly only up to 2^53, and the API's
 * fencing tokens and indexes are unsigned 64-bit integers. Lease metadata is the caller's
 * JSON, to be handed back as the text the server sent, not as cJSON would print it. So an
 * answer is rewritten in one pass before cJSON sees it:
 *
 *   - every integer of 16 digits or more becomes a string of its digits (mxc_json_u64() and
 *     mxc_json_i64() read either form);
 *   - the value of every "metadata" member becomes the number k, and its text is kept as the
 *     k-th entry of doc->meta (mxc_doc_metadata() looks it up).
 *
 * Both rewrites only touch the server's own fields: the first cannot change a string, the
 * second replaces the caller's JSON whole, so nothing inside it is rewritten.
 */
#ifndef MXC_JSON_H
#define MXC_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "mutexd.h"

struct mxc_doc {
    cJSON *root;
    char **meta; /* the text of each "metadata" value, as sent */
    size_t nmeta;
};

/* Parses `len` bytes of `text`. MUTEXD_OK; MUTEXD_ERR_PROTOCOL when it is not JSON;
 * MUTEXD_ERR_NOMEM. On failure *doc is empty (mxc_doc_free() is still fine). */
mutexd_result mxc_doc_parse(struct mxc_doc *doc, const char *text, size_t len);
void mxc_doc_free(struct mxc_doc *doc);

/* The rewrite alone, for tests: the rewritten text (the caller frees it) and the metadata
 * texts; NULL when the text is not JSON or memory ran out. */
char *mxc_json_rewrite(const char *text, size_t len, char ***meta, size_t *nmeta);

/* The metadata text `item` stands for: 0 with *text set (NULL for a JSON null), -1 when
 * `item` is not a metadata placeholder of this document. */
int mxc_doc_metadata(const struct mxc_doc *doc, const cJSON *item, const char **text);

/* An integer member, as a number or as a string of digits; 0, or -1 if it is anything else
 * or out of range. */
int mxc_json_u64(const cJSON *item, uint64_t *out);
int mxc_json_i64(const cJSON *item, int64_t *out);

/* `item` printed as the server sent it (whitespace aside): numbers made strings and metadata
 * placeholders are put back. The caller frees the text; NULL when memory ran out. */
char *mxc_doc_print(const struct mxc_doc *doc, const cJSON *item);

#endif
