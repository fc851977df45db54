/*
 * The lease clock's origin (clock.h): one pair of readings, wall and monotonic, taken
 * once per process. Everything else about clocks is inline in clock.h.
 */
#include "common/clock.h"

static pthread_once_t origin_once = PTHREAD_ONCE_INIT;
static int64_t origin_wall_ms;
static uint64_t origin_mono_ns;

static void take_origin(void)
{
    origin_mono_ns = mx_mono_ns();
    origin_wall_ms = mx_wall_ms();
}

int64_t mx_lease_ms_at(uint64_t mono_ns)
{
    pthread_once(&origin_once, take_origin);
    /* Signed: a reading taken before the origin (a caller's earlier mono_ns) is fine. */
    return origin_wall_ms + ((int64_t)mono_ns - (int64_t)origin_mono_ns) / (int64_t)MX_NS_PER_MS;
}

int64_t mx_lease_ms(void)
{
    return mx_lease_ms_at(mx_mono_ns());
}
