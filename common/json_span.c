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

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The length of the RFC 8259 number at s[0..len), or 0 if the text there is not one:
 * -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?, not followed by another character
 * a number could continue with. */
static size_t strict_number(const char *s, size_t len)
{
    size_t i = 0;
    if (i < len && s[i] == '-')
        i++;
    if (i < len && s[i] == '0') {
        i++;
    } else if (i < len && is_digit(s[i])) {
        while (i < len && is_digit(s[i]))
            i++;
    } else {
        return 0;
    }
    if (i < len && s[i] == '.') {
        size_t d = ++i;
        while (i < len && is_digit(s[i]))
            i++;
        if (i == d)
            return 0;
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < len && is_digit(s[i]))
            i++;
        if (i == d)
            return 0;
    }
    if (i < len &&
        (is_digit(s[i]) || s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-'))
        return 0;
    return i;
}

const char *json_strict_flaw(const char *s, size_t len)
{
    const char *flaw = json_text_flaw(s, len);
    if (flaw)
        return flaw;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '"')
                in_string = false;
            else if (c == '\\')
                i++;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '-' || is_digit(c)) {
            /* Outside a string, '-' and digits only ever start a number: true, false and
             * null hold neither. */
            size_t n = strict_number(s + i, len - i);
            if (n == 0)
                return "a number that is not JSON (RFC 8259)";
            i += n - 1;
        }
    }
    return NULL;
}
