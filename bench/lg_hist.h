/*
 * A log-linear latency histogram for loadgen (the HdrHistogram layout): values below 2*SUB
 * are exact; above, each power of two is cut into SUB equal buckets, so a reported percentile
 * is within 1/SUB (0.8%) of the true one, p999 included, in fixed memory however long the run.
 * Single-threaded: the caller owns a histogram and uses it from one thread.
 */
#ifndef LG_HIST_H
#define LG_HIST_H

#include <stdint.h>

#define HIST_SUB_BITS 7
#define HIST_SUB      (1u << HIST_SUB_BITS)
/* Values up to 2^45 ns (9.7 hours); larger ones land in the last bucket. */
#define HIST_MAX_MSB 44
#define HIST_BUCKETS (HIST_SUB * (HIST_MAX_MSB - HIST_SUB_BITS + 2))

struct hist {
    uint64_t count, sum, min, max;
    uint64_t b[HIST_BUCKETS];
};

/* Records one value (zero-initialize the histogram first). */
void hist_add(struct hist *h, uint64_t v);

/* The p-th percentile (0 < p <= 100), clamped to [min, max]; 0 for an empty histogram. */
uint64_t hist_pct(const struct hist *h, double p);

/* The mean; 0 for an empty histogram. */
uint64_t hist_mean(const struct hist *h);

#endif
