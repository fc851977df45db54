/*
 * Listings of the blob client: the EnumerationResults document of List Blobs scanned into a
 * struct blob_list (names unescaped, percent-decoded when the service marks them Encoded, ETags
 * quoted, sizes), and the element scanner blob.c also uses for the <Code> of an error body.
 * Pure functions on bytes a server sent: any malformed input is an error, never a crash.
 */
#include "blob/blob.h"
#include "blob/internal.h"
#include "blob/shared.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/hex.h"

/* See shared.h. */
int blob_find_elem(const char *p, const char *end, const char *tag, struct xml_elem *e)
{
    size_t tag_len = strlen(tag);
    char close[64];
    if (tag_len + 4 > sizeof close)
        return -1;
    snprintf(close, sizeof close, "</%s>", tag);
    while (p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt)
            return 0;
        p = lt + 1;
        if ((size_t)(end - p) <= tag_len || memcmp(p, tag, tag_len) != 0)
            continue;
        char next = p[tag_len];
        if (next != '>' && next != '/' && !ascii_space(next))
            continue; /* <Blob> is not <Blobs> or <BlobType> */
        const char *gt = memchr(p + tag_len, '>', (size_t)(end - p - tag_len));
        if (!gt)
            return -1;
        e->attrs = p + tag_len;
        e->attrs_len = (size_t)(gt - e->attrs);
        if (gt[-1] == '/') { /* <NextMarker/> */
            e->attrs_len--;
            e->text = gt + 1;
            e->text_len = 0;
            e->after = gt + 1;
            return 1;
        }
        e->text = gt + 1;
        const char *c = memmem(e->text, (size_t)(end - e->text), close, tag_len + 3);
        if (!c)
            return -1;
        e->text_len = (size_t)(c - e->text);
        e->after = c + tag_len + 3;
        return 1;
    }
    return 0;
}

static void append_utf8(struct mx_buf *b, uint32_t cp)
{
    char u[4];
    if (cp < 0x80) {
        u[0] = (char)cp;
        mx_buf_append(b, u, 1);
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        mx_buf_append(b, u, 2);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        mx_buf_append(b, u, 3);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        mx_buf_append(b, u, 4);
    }
}

/* &#233; or &#xE9; (without '&' and ';'): the code point, or -1 if it is not a character a
 * C string can hold. */
static int64_t char_ref(const char *s, size_t n)
{
    if (n < 2 || s[0] != '#')
        return -1;
    bool hex = s[1] == 'x' || s[1] == 'X';
    size_t i = hex ? 2 : 1;
    if (i == n)
        return -1;
    int64_t cp = 0;
    for (; i < n; i++) {
        int d;
        char ch = ascii_lower(s[i]);
        if (ascii_digit(ch))
            d = ch - '0';
        else if (hex && ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else
            return -1;
        cp = cp * (hex ? 16 : 10) + d;
        if (cp > 0x10FFFF)
            return -1;
    }
    if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    return cp;
}

char *blob_xml_unescape(const char *s, size_t len)
{
    static const struct {
        const char *name;
        char ch;
    } named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    struct mx_buf b = {0};
    size_t i = 0;
    while (i < len) {
        const char *amp = memchr(s + i, '&', len - i);
        size_t run = amp ? (size_t)(amp - (s + i)) : len - i;
        mx_buf_append(&b, s + i, run);
        i += run;
        if (!amp)
            break;
        /* The longest reference is &#x10FFFF; (10 characters between '&' and ';'). */
        size_t look = len - i - 1 < 12 ? len - i - 1 : 12;
        const char *semi = memchr(amp + 1, ';', look);
        if (!semi)
            goto bad;
        const char *ent = amp + 1;
        size_t ent_len = (size_t)(semi - ent);
        bool done = false;
        for (size_t j = 0; j < sizeof named / sizeof named[0] && !done; j++) {
            if (strlen(named[j].name) == ent_len && memcmp(ent, named[j].name, ent_len) == 0) {
                mx_buf_append_char(&b, named[j].ch);
                done = true;
            }
        }
        if (!done) {
            int64_t cp = char_ref(ent, ent_len);
            if (cp < 0)
                goto bad;
            append_utf8(&b, (uint32_t)cp);
        }
        i = (size_t)(semi - s) + 1;
    }
    return mx_buf_take(&b);
bad:
    mx_buf_free(&b);
    return NULL;
}

/* Names the service cannot put in XML come as <Name Encoded="true">percent-encoded</Name>. */
static int percent_decode_inplace(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r != '%') {
            *w++ = *r;
            continue;
        }
        /* r[2] is at worst the NUL; %00 would cut the name short. */
        int byte = r[1] ? mx_hex_byte(r[1], r[2]) : -1;
        if (byte <= 0)
            return -1;
        *w++ = (char)byte;
        r += 2;
    }
    *w = '\0';
    return 0;
}

static bool attr_encoded(const struct xml_elem *e)
{
    struct mx_buf b = {0};
    mx_buf_append(&b, e->attrs, e->attrs_len);
    char *a = mx_buf_take(&b);
    bool yes = a && (strstr(a, "Encoded=\"true\"") || strstr(a, "Encoded='true'"));
    free(a);
    return yes;
}

/* The children of <Metadata>: <name>value</name>, as far as BLOB_META_MAX fit. */
static int parse_metadata(const char *p, const char *end, struct blob_item *it)
{
    while (p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt)
            return 0;
        const char *t = lt + 1, *te = t;
        while (te < end && *te != '>' && *te != '/' && !ascii_space(*te))
            te++;
        char tag[BLOB_META_NAME_MAX];
        struct xml_elem e;
        if (te == t || (size_t)(te - t) >= sizeof tag)
            return -1;
        memcpy(tag, t, (size_t)(te - t));
        tag[te - t] = '\0';
        if (blob_find_elem(lt, end, tag, &e) <= 0)
            return -1;
        if (it->nmeta < BLOB_META_MAX) {
            if (!it->meta && !(it->meta = calloc(BLOB_META_MAX, sizeof *it->meta)))
                return -1;
            char *v = blob_xml_unescape(e.text, e.text_len);
            if (!v)
                return -1;
            struct blob_meta *m = &it->meta[it->nmeta++];
            snprintf(m->name, sizeof m->name, "%s", tag);
            for (char *c = m->name; *c; c++)
                if (*c >= 'A' && *c <= 'Z')
                    *c = (char)(*c - 'A' + 'a');
            snprintf(m->value, sizeof m->value, "%s", v);
            free(v);
        }
        p = e.after;
    }
    return 0;
}

const char *blob_item_meta(const struct blob_item *it, const char *name)
{
    for (size_t i = 0; i < it->nmeta; i++)
        if (strcmp(it->meta[i].name, name) == 0)
            return it->meta[i].value;
    return NULL;
}

static int parse_item(const char *p, const char *end, struct blob_item *it)
{
    struct xml_elem name, props, e;
    it->size = -1;
    int m = blob_find_elem(p, end, "Metadata", &e);
    if (m < 0 || (m > 0 && parse_metadata(e.text, e.text + e.text_len, it) != 0))
        return -1;
    if (blob_find_elem(p, end, "Name", &name) <= 0)
        return -1;
    it->name = blob_xml_unescape(name.text, name.text_len);
    if (!it->name || (attr_encoded(&name) && percent_decode_inplace(it->name) != 0))
        return -1;
    int f = blob_find_elem(name.after, end, "Properties", &props);
    if (f < 0)
        return -1;
    if (f == 0)
        return 0;
    const char *pe = props.text + props.text_len;
    f = blob_find_elem(props.text, pe, "Etag", &e);
    if (f < 0)
        return -1;
    if (f > 0 && e.text_len) {
        char *etag = blob_xml_unescape(e.text, e.text_len);
        bool quoted = etag && etag[0] == '"';
        int n = etag ? snprintf(it->etag, sizeof it->etag, quoted ? "%s" : "\"%s\"", etag) : -1;
        free(etag);
        if (n < 0 || (size_t)n >= sizeof it->etag)
            return -1;
    }
    f = blob_find_elem(props.text, pe, "LeaseState", &e);
    if (f < 0)
        return -1;
    if (f > 0 && e.text_len < sizeof it->lease_state) {
        memcpy(it->lease_state, e.text, e.text_len);
        it->lease_state[e.text_len] = '\0';
    }
    f = blob_find_elem(props.text, pe, "Content-Length", &e);
    if (f < 0)
        return -1;
    if (f > 0) {
        it->size = parse_count(e.text, e.text_len);
        if (it->size < 0)
            return -1;
    }
    return 0;
}

void blob_list_free(struct blob_list *l)
{
    for (size_t i = 0; i < l->count; i++) {
        free(l->items[i].name);
        free(l->items[i].meta);
    }
    free(l->items);
    free(l->next_marker);
    memset(l, 0, sizeof *l);
}

int blob_parse_list(const char *xml, size_t len, struct blob_list *out)
{
    const char *end = xml + len, *rest = xml;
    struct xml_elem blobs, b, m;
    size_t cap = 0;

    memset(out, 0, sizeof *out);
    if (blob_find_elem(xml, end, "EnumerationResults", &blobs) <= 0)
        goto bad;
    int f = blob_find_elem(xml, end, "Blobs", &blobs);
    if (f < 0)
        goto bad;
    if (f > 0) {
        const char *p = blobs.text, *bend = blobs.text + blobs.text_len;
        while ((f = blob_find_elem(p, bend, "Blob", &b)) > 0) {
            if (out->count == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct blob_item *ni = realloc(out->items, ncap * sizeof *ni);
                if (!ni)
                    goto bad;
                out->items = ni;
                cap = ncap;
            }
            struct blob_item *it = &out->items[out->count++];
            memset(it, 0, sizeof *it);
            if (parse_item(b.text, b.text + b.text_len, it) != 0)
                goto bad;
            p = b.after;
        }
        if (f < 0)
            goto bad;
        rest = blobs.after;
    }
    f = blob_find_elem(rest, end, "NextMarker", &m);
    if (f < 0)
        goto bad;
    if (f > 0 && m.text_len) {
        out->next_marker = blob_xml_unescape(m.text, m.text_len);
        if (!out->next_marker)
            goto bad;
    }
    return 0;
bad:
    blob_list_free(out);
    return -1;
}
