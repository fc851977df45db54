/*
 * Spans of valid JSON text (see json_span.h). The input has been accepted by a parser, so
 * this only needs to know where strings, containers and bare words end.
 */
#include "common/json_span.h"

#include <string.h>

static bool ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static size_t skip_ws(const char *s, size_t len, size_t i)
{
    while (i < len && ws(s[i]))
        i++;
    return i;
}

/* s[i] is the opening quote; returns the index after the closing one. */
static size_t skip_string(const char *s, size_t len, size_t i)
{
    for (i++; i < len && s[i] != '"'; i++)
        if (s[i] == '\\')
            i++;
    return i < len ? i + 1 : len;
}

static size_t skip_value(const char *s, size_t len, size_t i)
{
    if (i >= len)
        return len;
    if (s[i] == '"')
        return skip_string(s, len, i);
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        while (i < len) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, len, i);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return i + 1;
            i++;
        }
        return len;
    }
    while (i < len && !ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']')
        i++; /* a number, true, false or null */
    return i;
}

bool json_member_value(const char *json, size_t len, size_t index, const char **start, size_t *vlen)
{
    size_t i = skip_ws(json, len, 0);
    if (i >= len || json[i] != '{')
        return false;
    i++;
    for (size_t n = 0;; n++) {
        i = skip_ws(json, len, i);
        if (i >= len || json[i] != '"')
            return false; /* '}' of an object with fewer members */
        i = skip_ws(json, len, skip_string(json, len, i));
        if (i >= len || json[i] != ':')
            return false;
        size_t v = skip_ws(json, len, i + 1);
        size_t end = skip_value(json, len, v);
        if (n == index) {
            *start = json + v;
            *vlen = end - v;
            return true;
        }
        i = skip_ws(json, len, end);
        if (i >= len || json[i] != ',')
            return false;
        i++;
    }
}

bool json_element_value(const char *json, size_t len, size_t index, const char **start,
                        size_t *vlen)
{
    size_t i = skip_ws(json, len, 0);
    if (i >= len || json[i] != '[')
        return false;
    i++;
    for (size_t n = 0;; n++) {
        size_t v = skip_ws(json, len, i);
        if (v >= len || json[v] == ']')
            return false;
        size_t end = skip_value(json, len, v);
        if (n == index) {
            *start = json + v;
            *vlen = end - v;
            return true;
        }
        i = skip_ws(json, len, end);
        if (i >= len || json[i] != ',')
            return false;
        i++;
    }
}

size_t json_compact(const char *in, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        if (in[i] == '"') {
            size_t end = skip_string(in, len, i);
            while (i < end)
                out[o++] = in[i++];
        } else if (ws(in[i])) {
            i++;
        } else {
            out[o++] = in[i++];
        }
    }
    return o;
}

const char *json_text_flaw(const char *s, size_t len)
{
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\0')
            return "a NUL character";
        if (c < 0x20 && (in_string || (c != '\t' && c != '\r' && c != '\n')))
            return "a raw control character";
        if (!in_string) {
            in_string = c == '"';
        } else if (c == '"') {
            in_string = false;
        } else if (c == '\\' && i + 1 < len) {
            if (s[i + 1] == 'u' && i + 5 < len && memcmp(s + i + 2, "0000", 4) == 0)
                return "a NUL character";
            i++; /* skip the escaped character, a backslash included */
        }
    }
    return NULL;
}
