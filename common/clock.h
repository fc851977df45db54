/*
 * Clocks. CLOCK_MONOTONIC for every deadline the server keeps in memory; the wall
 * clock only for what is stored on disk or shown to people. Why, and what a server group
 * assumes of its clocks: docs/architecture.md, "Clocks".
 */
#ifndef MX_CLOCK_H
#define MX_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
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

/*
 * The lease clock: milliseconds since the epoch as the wall clock read the first time this
 * process asked, advanced since then by CLOCK_MONOTONIC alone. Lease deadlines are written
 * (the store, the journal) and read back on it, so that a step of the wall clock (NTP's
 * step, a resumed VM, `date -s`) moves no deadline while the process runs: a resource
 * that rests and is loaded again gets back the monotonic deadline it had. Only a restart
 * or a takeover reads the wall clock afresh. It drifts from the wall clock by the steps
 * taken since the process started, never by a rate. Any thread.
 */
int64_t mx_lease_ms(void);
/* The lease clock at `mono_ns` (a CLOCK_MONOTONIC reading of this process). */
int64_t mx_lease_ms_at(uint64_t mono_ns);

/* `wall_ms` as RFC 3339 UTC with milliseconds ("2026-11-23T09:20:11.032Z"); a time before
 * the epoch shows as the epoch. `out` has room for 32 bytes. Any thread. */
static inline void mx_wall_iso(int64_t wall_ms, char out[32])
{
    if (wall_ms < 0)
        wall_ms = 0;
    int64_t secs = wall_ms / 1000;
    unsigned ms = (unsigned)(wall_ms % 1000);
    if (secs > 253402300799) { /* after 9999-12-31T23:59:59: as the C library writes it */
        time_t t = (time_t)secs;
        struct tm tm;
        size_t n = gmtime_r(&t, &tm) ? strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm) : 0;
        snprintf(out + n, 32 - n, ".%03uZ", ms);
        return;
    }
    /* The civil date of a day count (the proleptic Gregorian calendar in eras of 400
     * years, as in H. Hinnant's "chrono-Compatible Low-Level Date Algorithms"): neither
     * gmtime_r, which takes the C library's time zone lock, nor strftime, on every
     * answer that shows a lease. */
    int64_t days = secs / 86400, sod = secs % 86400;
    int64_t z = days + 719468, era = z / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    unsigned d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
    unsigned m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
    unsigned y = (unsigned)(yoe + era * 400 + (m <= 2));
    unsigned hh = (unsigned)(sod / 3600), mi = (unsigned)(sod / 60 % 60), ss = (unsigned)(sod % 60);
    const unsigned part[] = {y, m, d, hh, mi, ss, ms};
    const int width[] = {4, 2, 2, 2, 2, 2, 3};
    const char after[] = "--T::.Z"; /* the character after each part */
    char *p = out;
    for (int i = 0; i < 7; i++) {
        unsigned v = part[i];
        for (int k = width[i] - 1; k >= 0; k--, v /= 10)
            p[k] = (char)('0' + v % 10);
        p += width[i];
        *p++ = after[i];
    }
    *p = '\0';
}

/* Initializes a condition variable whose timed waits count on CLOCK_MONOTONIC. */
static inline void mx_cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
}

/* Waits on `c` (made by mx_cond_init_mono) until signalled or until `deadline_ns` on
 * CLOCK_MONOTONIC; UINT64_MAX waits without a deadline. Returns what pthread returns
 * (ETIMEDOUT when the deadline passed). */
static inline int mx_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, uint64_t deadline_ns)
{
    if (deadline_ns == UINT64_MAX)
        return pthread_cond_wait(c, m);
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    return pthread_cond_timedwait(c, m, &ts);
}

/*
 * A thread that sleeps until a deadline, and the threads that may give it an earlier one,
 * all under one mutex of the caller's. It records the time it sleeps until, and a new
 * deadline wakes it only when it comes before that. One wake-up is enough until it sleeps
 * again: it looks at its deadlines before it does.
 */
struct mx_sleeper {
    pthread_cond_t wake;
    uint64_t until; /* 0 while the thread runs, or a wake-up is on its way */
};

static inline void mx_sleeper_init(struct mx_sleeper *s)
{
    mx_cond_init_mono(&s->wake);
    s->until = 0;
}

/* The sleeping thread, mutex held: sleeps until `until` (UINT64_MAX: no deadline) or a
 * wake-up. */
static inline void mx_sleeper_sleep(struct mx_sleeper *s, pthread_mutex_t *m, uint64_t until)
{
    s->until = until;
    mx_cond_wait_until(&s->wake, m, until);
    s->until = 0;
}

/* Mutex held: wakes the thread whatever it sleeps until (a stop, a change of plan). */
static inline void mx_sleeper_wake(struct mx_sleeper *s)
{
    s->until = 0;
    pthread_cond_signal(&s->wake);
}

/* Mutex held: wakes the thread if `deadline_ns` comes before the time it sleeps until. */
static inline void mx_sleeper_wake_for(struct mx_sleeper *s, uint64_t deadline_ns)
{
    if (deadline_ns < s->until)
        mx_sleeper_wake(s);
}

#endif
