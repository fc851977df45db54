/*
 * Writing JSON, with cJSON or straight into a buffer (see json_out.h).
 */
#include "common/json_out.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"

void mx_json_add_u64(cJSON *o, const char *key, uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    cJSON_AddRawToObject(o, key, buf);
}

void mx_json_add_i64(cJSON *o, const char *key, int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    cJSON_AddRawToObject(o, key, buf);
}

void mx_json_add_name(cJSON *o, const char *key, const char *s, size_t len)
{
    char buf[MX_NAME_MAX + 1];
    if (len > MX_NAME_MAX)
        len = MX_NAME_MAX;
    memcpy(buf, s, len);
    buf[len] = '\0';
    cJSON_AddStringToObject(o, key, buf);
}

char *mx_json_print(cJSON *o)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* ---- straight into a buffer ------------------------------------------------------------- */

static void sep(struct mx_jw *w)
{
    if (w->comma)
        mx_buf_append_char(&w->b, ',');
    w->comma = true;
}

/* The comma a value needs, if any, and the value's first character, in one append. */
static void lead(struct mx_jw *w, char c)
{
    char s[2] = {',', c};
    mx_buf_append(&w->b, s + !w->comma, 1 + w->comma);
    w->comma = true;
}

void mx_jw_object(struct mx_jw *w)
{
    lead(w, '{');
    w->comma = false;
}

void mx_jw_object_end(struct mx_jw *w)
{
    mx_buf_append_char(&w->b, '}');
    w->comma = true;
}

void mx_jw_array(struct mx_jw *w)
{
    lead(w, '[');
    w->comma = false;
}

void mx_jw_array_end(struct mx_jw *w)
{
    mx_buf_append_char(&w->b, ']');
    w->comma = true;
}

void mx_jw_key(struct mx_jw *w, const char *key)
{
    char s[64];
    size_t n = strlen(key);
    if (n > sizeof s - 4) { /* no key of the answers is this long */
        lead(w, '"');
        mx_buf_append(&w->b, key, n);
        mx_buf_append(&w->b, "\":", 2);
    } else {
        size_t i = 0;
        if (w->comma)
            s[i++] = ',';
        s[i++] = '"';
        memcpy(s + i, key, n);
        i += n;
        s[i++] = '"';
        s[i++] = ':';
        mx_buf_append(&w->b, s, i);
    }
    w->comma = false; /* its value follows */
}

void mx_jw_str(struct mx_jw *w, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    lead(w, '"');
    size_t run = 0; /* bytes before s[i] that need no escape, not yet written */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        mx_buf_append(&w->b, s + i - run, run);
        run = 0;
        char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        size_t n = 2;
        switch (c) {
        case '"':
            e[1] = '"';
            break;
        case '\\':
            e[1] = '\\';
            break;
        case '\b':
            e[1] = 'b';
            break;
        case '\f':
            e[1] = 'f';
            break;
        case '\n':
            e[1] = 'n';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '\t':
            e[1] = 't';
            break;
        default:
            n = 6;
            break;
        }
        mx_buf_append(&w->b, e, n);
    }
    mx_buf_append(&w->b, s + len - run, run);
    mx_buf_append_char(&w->b, '"');
}

void mx_jw_cstr(struct mx_jw *w, const char *s)
{
    mx_jw_str(w, s, strlen(s));
}

void mx_jw_u64(struct mx_jw *w, uint64_t v)
{
    char buf[20];
    size_t i = sizeof buf;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    sep(w);
    mx_buf_append(&w->b, buf + i, sizeof buf - i);
}

void mx_jw_bool(struct mx_jw *w, bool v)
{
    sep(w);
    mx_buf_append(&w->b, v ? "true" : "false", v ? 4 : 5);
}

void mx_jw_null(struct mx_jw *w)
{
    sep(w);
    mx_buf_append(&w->b, "null", 4);
}

void mx_jw_raw(struct mx_jw *w, const char *s, size_t len)
{
    sep(w);
    mx_buf_append(&w->b, s, len);
}

char *mx_jw_take(struct mx_jw *w)
{
    w->comma = false;
    return mx_buf_take(&w->b);
}

int mx_json_append(struct mx_buf *out, cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return -1;
    mx_buf_append(out, text, strlen(text));
    free(text);
    return out->oom ? -1 : 0;
}
