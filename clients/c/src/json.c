/*
 * The exact reading of answers described in json.h: a one-pass rewrite (big integers to
 * strings, metadata values to placeholders), cJSON on the result, and the readers and the
 * printer that undo the rewrite.
 */
#include "json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

/* An answer is at most this big (buf.h caps what is read from the network lower). */
#define REWRITE_MAX ((size_t)64 << 20)

/* Integers with this many digits or more may not fit a double exactly (2^53 has 16). */
#define BIG_DIGITS 16

/* Past the string that starts at p (at its '"'), or NULL if it does not end. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

static int is_delimiter(char c)
{
    return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n' ||
           c == ':' || c == '\0';
}

/* Past the JSON value that starts at p, or NULL if it does not end. It only finds the end;
 * whether the value is well formed is cJSON's to say (mxc_json_rewrite checks metadata). */
static const char *skip_value(const char *p, const char *end)
{
    if (p >= end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        size_t depth = 0;
        while (p < end) {
            if (*p == '"') {
                p = skip_string(p, end);
                if (p == NULL)
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[') {
                depth++;
            } else if (*p == '}' || *p == ']') {
                if (--depth == 0)
                    return p + 1;
            }
            p++;
        }
        return NULL;
    }
    const char *q = p;
    while (q < end && !is_delimiter(*q))
        q++;
    return q > p ? q : NULL;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static void free_meta(char **meta, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(meta[i]);
    free(meta);
}

/* Keeps [p, q) as the next metadata text, once cJSON agrees it is JSON. */
static int keep_meta(char ***meta, size_t *n, const char *p, const char *q)
{
    char *text = strndup(p, (size_t)(q - p));
    if (text == NULL)
        return -1;
    cJSON *check = cJSON_ParseWithOpts(text, NULL, 1);
    if (check == NULL) {
        free(text);
        return -1;
    }
    cJSON_Delete(check);
    char **grown = realloc(*meta, (*n + 1) * sizeof(*grown));
    if (grown == NULL) {
        free(text);
        return -1;
    }
    grown[*n] = text;
    *meta = grown;
    (*n)++;
    return 0;
}

char *mxc_json_rewrite(const char *text, size_t len, char ***meta_out, size_t *nmeta_out)
{
    char *result = NULL;
    char **meta = NULL;
    size_t nmeta = 0;
    struct mxc_buf out;
    mxc_buf_init(&out, REWRITE_MAX);
    const char *p = text, *end = text + len;
    int after_metadata_key = 0; /* the last token was the string "metadata" */

    while (p < end) {
        char c = *p;
        if (c == '"') {
            const char *q = skip_string(p, end);
            if (q == NULL)
                goto out;
            mxc_buf_add(&out, p, (size_t)(q - p));
            after_metadata_key = q - p == 10 && memcmp(p, "\"metadata\"", 10) == 0;
            p = q;
        } else if (c == ':' && after_metadata_key) {
            mxc_buf_add(&out, ":", 1);
            for (p++; p < end && is_space(*p); p++)
                ;
            const char *q = skip_value(p, end);
            if (q == NULL || keep_meta(&meta, &nmeta, p, q) != 0)
                goto out;
            mxc_buf_printf(&out, "%zu", nmeta - 1);
            after_metadata_key = 0;
            p = q;
        } else if (c == '-' || is_digit(c)) {
            const char *q = p + 1;
            while (q < end &&
                   (is_digit(*q) || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' || *q == '-'))
                q++;
            size_t digits = 0;
            int integer = 1;
            for (const char *d = c == '-' ? p + 1 : p; d < q; d++) {
                if (is_digit(*d))
                    digits++;
                else
                    integer = 0;
            }
            if (integer && digits >= BIG_DIGITS) {
                mxc_buf_add(&out, "\"", 1);
                mxc_buf_add(&out, p, (size_t)(q - p));
                mxc_buf_add(&out, "\"", 1);
            } else {
                mxc_buf_add(&out, p, (size_t)(q - p));
            }
            after_metadata_key = 0;
            p = q;
        } else {
            mxc_buf_add(&out, p, 1);
            if (!is_space(c))
                after_metadata_key = 0;
            p++;
        }
    }
    result = mxc_buf_take(&out);
out:
    mxc_buf_free(&out);
    if (result == NULL) {
        free_meta(meta, nmeta);
        meta = NULL;
        nmeta = 0;
    }
    *meta_out = meta;
    *nmeta_out = nmeta;
    return result;
}

mutexd_result mxc_doc_parse(struct mxc_doc *doc, const char *text, size_t len)
{
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    memset(doc, 0, sizeof(*doc));
    char *rewritten = mxc_json_rewrite(text, len, &doc->meta, &doc->nmeta);
    if (rewritten == NULL)
        goto out;
    doc->root = cJSON_ParseWithOpts(rewritten, NULL, 1);
    if (doc->root == NULL)
        goto out;
    result = MUTEXD_OK;
out:
    free(rewritten);
    if (result != MUTEXD_OK)
        mxc_doc_free(doc);
    return result;
}

void mxc_doc_free(struct mxc_doc *doc)
{
    cJSON_Delete(doc->root);
    free_meta(doc->meta, doc->nmeta);
    memset(doc, 0, sizeof(*doc));
}

int mxc_doc_metadata(const struct mxc_doc *doc, const cJSON *item, const char **text)
{
    uint64_t k;
    if (!cJSON_IsNumber(item) || mxc_json_u64(item, &k) != 0 || k >= doc->nmeta)
        return -1;
    *text = strcmp(doc->meta[k], "null") == 0 ? NULL : doc->meta[k];
    return 0;
}

/* 2^53: doubles hold every integer up to it. */
#define EXACT_MAX 9007199254740992.0

int mxc_json_u64(const cJSON *item, uint64_t *out)
{
    if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (!(d >= 0 && d <= EXACT_MAX) || d != (double)(uint64_t)d)
            return -1;
        *out = (uint64_t)d;
        return 0;
    }
    /* A string only as the rewrite makes them: big integers. */
    if (!cJSON_IsString(item) || item->valuestring == NULL)
        return -1;
    const char *s = item->valuestring;
    size_t n = strlen(s);
    if (n < BIG_DIGITS || n > 20 || strspn(s, "0123456789") != n)
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno != 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

int mxc_json_i64(const cJSON *item, int64_t *out)
{
    if (cJSON_IsNumber(item)) {
        double d = item->valuedouble;
        if (!(d >= -EXACT_MAX && d <= EXACT_MAX) || d != (double)(int64_t)d)
            return -1;
        *out = (int64_t)d;
        return 0;
    }
    if (!cJSON_IsString(item) || item->valuestring == NULL)
        return -1;
    const char *s = item->valuestring;
    const char *digits = *s == '-' ? s + 1 : s;
    size_t n = strlen(digits);
    if (n < BIG_DIGITS || n > 19 || strspn(digits, "0123456789") != n)
        return -1;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno != 0)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* The members whose numbers the rewrite may have made strings. */
static int is_number_member(const char *name)
{
    static const char *const names[] = {"fencing_token", "index", "ttl_ms", "expires_in_ms",
                                        "waiters"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(name, names[i]) == 0)
            return 1;
    }
    return 0;
}

/* Undoes the rewrite in a copy: the items become raw text, printed as they are. */
static int restore(const struct mxc_doc *doc, cJSON *node)
{
    for (cJSON *child = node->child; child != NULL; child = child->next) {
        const char *meta;
        if (child->string != NULL && strcmp(child->string, "metadata") == 0 &&
            mxc_doc_metadata(doc, child, &meta) == 0) {
            child->valuestring = strdup(meta != NULL ? meta : "null");
            if (child->valuestring == NULL)
                return -1;
            child->type = cJSON_Raw;
        } else if (child->string != NULL && cJSON_IsString(child) &&
                   is_number_member(child->string)) {
            child->type = cJSON_Raw; /* a string of digits: the number's own text */
        } else if (cJSON_IsObject(child) || cJSON_IsArray(child)) {
            if (restore(doc, child) != 0)
                return -1;
        }
    }
    return 0;
}

char *mxc_doc_print(const struct mxc_doc *doc, const cJSON *item)
{
    char *text = NULL;
    cJSON *copy = cJSON_Duplicate(item, 1);
    if (copy == NULL)
        goto out;
    if ((cJSON_IsObject(copy) || cJSON_IsArray(copy)) && restore(doc, copy) != 0)
        goto out;
    text = cJSON_PrintUnformatted(copy);
out:
    cJSON_Delete(copy);
    return text;
}
