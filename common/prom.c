/*
 * Prometheus text exposition (see prom.h): the metric lines, and histograms whose buckets
 * are relaxed atomic counters, observed from any thread without a lock and written in
 * cumulative form (`_bucket`, `_sum`, `_count`) when /metrics is asked for.
 */
#include "common/prom.h"

#include <inttypes.h>
#include <stdarg.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double prom_latency_bounds[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                      0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                      0.5,     1,      2.5,     5,      10};
const int prom_latency_nbounds = sizeof prom_latency_bounds / sizeof prom_latency_bounds[0];

void prom_header(struct mx_buf *b, const char *name, const char *type, const char *help)
{
    mx_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_sample(struct mx_buf *b, const char *name, uint64_t value, ...)
{
    va_list ap;
    va_start(ap, value);
    mx_buf_append_str(b, name);
    const char *sep = "{";
    for (const char *k; (k = va_arg(ap, const char *)) != NULL;) {
        const char *v = va_arg(ap, const char *);
        mx_buf_append_str(b, sep);
        mx_buf_append_str(b, k);
        mx_buf_append_str(b, "=\"");
        for (; *v; v++) {
            if (*v == '\\' || *v == '"')
                mx_buf_append_char(b, '\\');
            if (*v == '\n')
                mx_buf_append_str(b, "\\n");
            else
                mx_buf_append_char(b, *v);
        }
        mx_buf_append_char(b, '"');
        sep = ",";
    }
    va_end(ap);
    mx_buf_printf(b, "%s %" PRIu64 "\n", sep[0] == ',' ? "}" : "", value);
}

void prom_counter(struct mx_buf *b, const char *name, const char *help, uint64_t value)
{
    prom_header(b, name, "counter", help);
    mx_buf_printf(b, "%s %" PRIu64 "\n", name, value);
}

void prom_gauge(struct mx_buf *b, const char *name, const char *help, int64_t value)
{
    prom_header(b, name, "gauge", help);
    mx_buf_printf(b, "%s %" PRId64 "\n", name, value);
}

void prom_gauge_f(struct mx_buf *b, const char *name, const char *help, double value)
{
    prom_header(b, name, "gauge", help);
    mx_buf_printf(b, "%s %.3f\n", name, value);
}

void prom_hist_init(struct prom_hist *h, const double *bounds, int nbounds, double scale)
{
    h->bounds = bounds;
    h->nbounds = nbounds > PROM_MAX_BUCKETS ? PROM_MAX_BUCKETS : nbounds;
    h->scale = scale;
    for (int i = 0; i <= PROM_MAX_BUCKETS; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum, 0);
}

void prom_hist_observe(struct prom_hist *h, uint64_t value)
{
    double v = (double)value / h->scale;
    int i = 0;
    while (i < h->nbounds && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, value, memory_order_relaxed);
}

void prom_hist_write(struct mx_buf *b, const char *name, const char *labels,
                     const struct prom_hist *h)
{
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    for (int i = 0; i <= h->nbounds; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < h->nbounds)
            mx_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep,
                          h->bounds[i], cum);
        else
            mx_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);
    }
    double sum = (double)atomic_load_explicit(&h->sum, memory_order_relaxed) / h->scale;
    if (labels[0]) {
        mx_buf_printf(b, "%s_sum{%s} %.9g\n%s_count{%s} %" PRIu64 "\n", name, labels, sum, name,
                      labels, cum);
    } else {
        mx_buf_printf(b, "%s_sum %.9g\n%s_count %" PRIu64 "\n", name, sum, name, cum);
    }
}

/* One family of prom_merge_labelled(): its header lines and its samples, labelled. */
struct family {
    char name[128];
    struct mx_buf head, samples;
    long head_from; /* the text its header came from (-1: none yet) */
};

/* The family named `name`, added last if new; NULL when memory ran out. */
static struct family *family_of(struct family **all, size_t *n, size_t *cap, const char *name,
                                size_t len)
{
    for (size_t i = 0; i < *n; i++)
        if (strlen((*all)[i].name) == len && memcmp((*all)[i].name, name, len) == 0)
            return &(*all)[i];
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 32;
        struct family *a = realloc(*all, c * sizeof *a);
        if (!a)
            return NULL;
        *all = a;
        *cap = c;
    }
    struct family *f = &(*all)[(*n)++];
    memset(f, 0, sizeof *f);
    f->head_from = -1;
    snprintf(f->name, sizeof f->name, "%.*s", (int)len, name);
    return f;
}

/* `line` (a sample, without its newline) with `label`="value" first among its labels. */
static void add_labelled(struct mx_buf *b, const char *line, size_t len, const char *label,
                         const char *value)
{
    size_t name = 0;
    while (name < len && line[name] != '{' && line[name] != ' ')
        name++;
    mx_buf_append(b, line, name);
    mx_buf_printf(b, "{%s=\"%s\"", label, value);
    if (name < len && line[name] == '{') {
        bool empty = name + 1 < len && line[name + 1] == '}';
        mx_buf_append(b, empty ? "" : ",", empty ? 0 : 1);
        mx_buf_append(b, line + name + 1, len - name - 1);
    } else {
        mx_buf_append(b, "}", 1);
        mx_buf_append(b, line + name, len - name);
    }
    mx_buf_append_char(b, '\n');
}

int prom_merge_labelled(struct mx_buf *out, const struct mx_buf *texts, const char *const *values,
                        size_t n, const char *label)
{
    struct family *all = NULL;
    size_t nf = 0, cap = 0;
    bool oom = false;
    for (size_t t = 0; t < n && !oom; t++) {
        const char *p = texts[t].p, *end = p ? p + texts[t].len : NULL;
        struct family *cur = NULL;
        while (p && p < end && !oom) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
            if (len > 7 && strncmp(p, "# TYPE ", 7) == 0) {
                const char *nm = p + 7, *sp = memchr(nm, ' ', len - 7);
                cur = family_of(&all, &nf, &cap, nm, sp ? (size_t)(sp - nm) : len - 7);
                oom = !cur;
            }
            if (!oom && p[0] == '#') {
                /* The header of the family this line opens (HELP comes before TYPE), kept
                 * from the first text that has it. */
                struct family *f = cur;
                if (len > 7 && strncmp(p, "# HELP ", 7) == 0) {
                    const char *nm = p + 7, *sp = memchr(nm, ' ', len - 7);
                    f = family_of(&all, &nf, &cap, nm, sp ? (size_t)(sp - nm) : len - 7);
                    oom = !f;
                }
                if (f && (f->head_from < 0 || f->head_from == (long)t)) {
                    f->head_from = (long)t;
                    mx_buf_append(&f->head, p, len);
                    mx_buf_append_char(&f->head, '\n');
                }
            } else if (!oom && len > 0) {
                if (!cur && !(cur = family_of(&all, &nf, &cap, "", 0)))
                    oom = true;
                else
                    add_labelled(&cur->samples, p, len, label, values[t]);
            }
            p = nl ? nl + 1 : end;
        }
    }
    for (size_t i = 0; i < nf; i++) {
        oom |= all[i].head.oom || all[i].samples.oom;
        if (!oom) {
            mx_buf_append(out, all[i].head.p ? all[i].head.p : "", all[i].head.len);
            mx_buf_append(out, all[i].samples.p ? all[i].samples.p : "", all[i].samples.len);
        }
        mx_buf_free(&all[i].head);
        mx_buf_free(&all[i].samples);
    }
    free(all);
    return oom || out->oom ? -1 : 0;
}
