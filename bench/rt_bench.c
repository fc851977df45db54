/*
 * Micro-benchmark of the actor runtime (not a test): messages per second from sender
 * threads through mailboxes and turns, for 1, 1,000 and 1,000,000 actors and 1 and N
 * worker threads; and the memory an active but idle actor costs.
 *
 *   rt_bench [messages] [senders]      defaults: 2000000 messages, 2 senders
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/runtime.h"
#include "common/clock.h"

static _Atomic uint64_t received;

struct state {
    uint64_t count;
};

static void b_activate(struct rt_actor *self, void *state)
{
    (void)self;
    (void)state;
}

static void b_receive(struct rt_actor *self, void *state, struct rt_msg *m)
{
    (void)self;
    (void)m;
    ((struct state *)state)->count++;
    atomic_fetch_add_explicit(&received, 1, memory_order_relaxed);
}

static bool b_idle(struct rt_actor *self, void *state, uint64_t *barrier)
{
    (void)self;
    (void)state;
    (void)barrier;
    return true;
}

static void b_deactivate(struct rt_actor *self, void *state, bool shutdown)
{
    (void)self;
    (void)state;
    (void)shutdown;
}

static const struct rt_behavior behavior = {
    .state_size = sizeof(struct state),
    .activate = b_activate,
    .receive = b_receive,
    .idle = b_idle,
    .deactivate = b_deactivate,
};

struct sender {
    struct rt *rt;
    struct rt_msg *msgs;
    uint64_t first, count, nactors;
};

static void *send_main(void *p)
{
    struct sender *s = p;
    char name[24];
    for (uint64_t k = 0; k < s->count; k++) {
        uint64_t i = s->first + k;
        int n = snprintf(name, sizeof name, "actor-%" PRIu64, (i % s->nactors));
        while (rt_send(s->rt, name, (size_t)n, &s->msgs[i], 0) == RT_EFULL)
            sched_yield();
    }
    return NULL;
}

static double run(uint64_t nactors, unsigned workers, uint64_t total, unsigned senders)
{
    struct rt *rt;
    struct rt_config cfg = {.behavior = &behavior, .workers = workers, .idle_ms = 600000};
    if (rt_start(&rt, &cfg) != 0)
        exit(1);
    struct rt_msg *msgs = calloc(total, sizeof *msgs);
    struct sender s[16];
    pthread_t th[16];
    atomic_store(&received, 0);
    uint64_t t0 = mx_mono_ns();
    for (unsigned i = 0; i < senders; i++) {
        s[i] = (struct sender){rt, msgs, total / senders * i, total / senders, nactors};
        pthread_create(&th[i], NULL, send_main, &s[i]);
    }
    for (unsigned i = 0; i < senders; i++)
        pthread_join(th[i], NULL);
    uint64_t want = total / senders * senders;
    while (atomic_load(&received) < want)
        sched_yield();
    double secs = (double)(mx_mono_ns() - t0) / 1e9;
    rt_shutdown(rt);
    free(msgs);
    return (double)want / secs;
}

static long rss_kib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv)
{
    uint64_t total = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
    unsigned senders = argc > 2 ? (unsigned)atoi(argv[2]) : 2;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t actor_counts[] = {1, 1000, 1000000};
    unsigned worker_counts[] = {1, (unsigned)cores};

    printf("actor runtime: %" PRIu64 " messages from %u sender threads, %ld cores\n\n", total,
           senders, cores);
    printf("| actors | workers | messages/s |\n|---:|---:|---:|\n");
    for (int a = 0; a < 3; a++)
        for (int w = 0; w < 2; w++)
            printf("| %" PRIu64 " | %u | %.0f |\n", actor_counts[a], worker_counts[w],
                   run(actor_counts[a], worker_counts[w], total, senders));

    /* Memory: activate a million actors with one message each and keep them. */
    struct rt *rt;
    struct rt_config cfg = {.behavior = &behavior, .workers = (unsigned)cores, .idle_ms = 600000};
    rt_start(&rt, &cfg);
    enum { N = 1000000 };
    struct rt_msg *msgs = calloc(N, sizeof *msgs);
    atomic_store(&received, 0);
    long before = rss_kib();
    char name[24];
    for (int i = 0; i < N; i++) {
        int n = snprintf(name, sizeof name, "actor-%07d", i);
        rt_send(rt, name, (size_t)n, &msgs[i], 0);
    }
    while (atomic_load(&received) < N)
        sched_yield();
    long after = rss_kib();
    struct rt_stats st;
    rt_get_stats(rt, &st);
    printf("\nidle but active actors: %zu; resident memory +%ld KiB: %.0f bytes per actor "
           "(13-byte names, %zu-byte state)\n",
           st.active, after - before, (double)(after - before) * 1024 / N, sizeof(struct state));
    rt_shutdown(rt);
    free(msgs);
    return 0;
}
