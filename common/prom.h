/*
 * Prometheus text exposition: writers of metric lines (the `# HELP`/`# TYPE` header, and
 * metrics of one unlabelled sample) and lock-free histograms, all appending to a
 * struct mx_buf (common/buf.h, which holds the text and its cap). Each module keeps its
 * own counters and histograms and writes them with these when /metrics is asked for
 * (store_metrics(), res_domain_metrics(), ...), so no module depends on the HTTP layer;
 * the HTTP front only concatenates what they write. A labelled series is its header, then
 * one prom_sample() per sample.
 */
#ifndef MX_PROM_H
#define MX_PROM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* `# HELP` and `# TYPE` lines. */
void prom_header(struct mx_buf *b, const char *name, const char *type, const char *help);
/* A metric of one unlabelled sample: its header lines and `name value`. prom_gauge_f
 * writes the value with three decimals (seconds, ratios). */
void prom_counter(struct mx_buf *b, const char *name, const char *help, uint64_t value);
void prom_gauge(struct mx_buf *b, const char *name, const char *help, int64_t value);
void prom_gauge_f(struct mx_buf *b, const char *name, const char *help, double value);

/* One sample of a labelled series: `name{k1="v1",k2="v2"} value`, the label pairs after
 * `value`, ending with NULL; the values escaped as the text format wants (\\, \", \n). */
void prom_sample(struct mx_buf *b, const char *name, uint64_t value, ...) __attribute__((sentinel));

/* Several texts of the same metrics (the cores of a server's partitions) as one: every
 * sample of texts[i] gains the label `label`="values[i]" (first), and the samples of each
 * family stay together, under its first header, in the order the families first came.
 * A family is a `# TYPE` line's name and the samples after it. 0, or -1 when memory ran
 * out. */
int prom_merge_labelled(struct mx_buf *out, const struct mx_buf *texts, const char *const *values,
                        size_t n, const char *label);

#define PROM_MAX_BUCKETS 20

/* A histogram with fixed upper bounds. observe() from any thread. */
struct prom_hist {
    const double *bounds; /* ascending; +Inf is implicit */
    int nbounds;
    double scale; /* observed values are divided by this when written (ns -> s: 1e9) */
    _Atomic uint64_t counts[PROM_MAX_BUCKETS + 1];
    _Atomic uint64_t sum;
};

void prom_hist_init(struct prom_hist *h, const double *bounds, int nbounds, double scale);
void prom_hist_observe(struct prom_hist *h, uint64_t value);
/* Writes the _bucket, _sum and _count lines; `labels` is "" or `key="v"` pairs. */
void prom_hist_write(struct mx_buf *b, const char *name, const char *labels,
                     const struct prom_hist *h);

/* Bounds in seconds for latencies from 50 µs to 10 s. */
extern const double prom_latency_bounds[];
extern const int prom_latency_nbounds;

#endif
