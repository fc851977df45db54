/*
 * Clocks. CLOCK_MONOTONIC for every deadline the server keeps in memory; the wall
 * clock only for what is stored on disk or shown to people (see DESIGN.md).
 */
#ifndef MX_CLOCK_H
#define MX_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC. Any thread. */
static inline uint64_t mx_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Milliseconds since the Unix epoch on the wall clock. Any thread. */
static inline int64_t mx_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define MX_NS_PER_MS 1000000ull

#endif
