/*
 * The log-linear histogram: index arithmetic and percentile lookup. See lg_hist.h.
 */
#include "lg_hist.h"

static unsigned hist_index(uint64_t v)
{
    if (v < 2 * HIST_SUB)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    if (msb > HIST_MAX_MSB)
        return HIST_BUCKETS - 1;
    unsigned shift = msb - HIST_SUB_BITS;
    return HIST_SUB * (shift + 1) + (unsigned)(v >> shift) - HIST_SUB;
}

/* The middle of bucket i: the value a percentile that falls in it is reported as. */
static uint64_t hist_value(unsigned i)
{
    if (i < 2 * HIST_SUB)
        return i;
    unsigned shift = i / HIST_SUB - 1;
    uint64_t lo = (uint64_t)(i - HIST_SUB * (shift + 1) + HIST_SUB) << shift;
    return lo + ((1ull << shift) >> 1);
}

void hist_add(struct hist *h, uint64_t v)
{
    if (h->count == 0 || v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
    h->count++;
    h->sum += v;
    h->b[hist_index(v)]++;
}

uint64_t hist_pct(const struct hist *h, double p)
{
    if (h->count == 0)
        return 0;
    if (p >= 100)
        return h->max;
    /* The nearest-rank percentile: the smallest value with at least p% of them at or below. */
    uint64_t rank = (uint64_t)(p / 100.0 * (double)h->count);
    if ((double)rank < p / 100.0 * (double)h->count)
        rank++;
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t v = hist_value(i);
            return v < h->min ? h->min : v > h->max ? h->max : v;
        }
    }
    return h->max;
}

uint64_t hist_mean(const struct hist *h)
{
    return h->count ? h->sum / h->count : 0;
}
