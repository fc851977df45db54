/*
 * How far the store's commit sits above the disk's own flush (not a test). On one thread,
 * alternating round by round:
 *
 *   flush      a 4 KiB overwrite and fdatasync of a file in the store's directory: the
 *              disk's fdatasync as bench/compare.sh measures it for its floors
 *   hand-off   the store's commit of a contended key changing hands: the holder's lease
 *              forgotten, the next one's put, in one record (as a release with a waiter
 *              writes it)
 *   acquire    a lease put on a free key, then
 *   release    that key's row dropped (one connection's distinct cycle)
 *
 * Each commit is made as an idle server makes it: submitted through a batch and committed
 * on the caller's thread (store_batch_end with `here`), in WAL mode with synchronous=FULL.
 * The store holds 1,000 other leases. Prints p50 and p99 of each, per round and over all;
 * then, for each round trip given, the share of compare.sh's hot-key floor (one fdatasync
 * and one round trip a hand-off) that a server whose only cost is its commit would reach:
 * (flush + round trip) / (hand-off + round trip).
 *
 *   commit_bench [--dir D] [--rounds N] [--per-round N] [--rtt-us U[,U...]]
 *                defaults: D /tmp (the store goes in a new directory in it, removed at the
 *                end), 6 rounds of 300, round trips of 35 and 70 µs
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/str.h"
#include "persistence/store.h"

#define BACKGROUND 1000
#define MAX_RTTS   8

enum { K_FLUSH, K_HANDOFF, K_ACQUIRE, K_RELEASE, K_COUNT };
static const char *const kind_names[K_COUNT] = {"flush", "hand-off", "acquire", "release"};

struct waiter {
    struct store_wait w;
    _Atomic int status;
};

static void on_done(struct store_wait *w, int status)
{
    atomic_store(&((struct waiter *)w)->status, status);
}

static void die(const char *what)
{
    fprintf(stderr, "commit_bench: %s\n", what);
    exit(1);
}

static uint64_t token = 0;
static uint64_t ids = 0;

/* A held lease with a fresh id and the next token. */
static struct store_lease next_lease(void)
{
    struct store_lease l;
    memset(&l, 0, sizeof l);
    uint64_t id = ++ids;
    memcpy(l.lease_id, &id, sizeof id);
    memcpy(l.lease_id + 8, "commit-b", 8);
    l.held = true;
    l.token = ++token;
    l.ttl_ms = 10000;
    l.acquired_at_ms = l.renewed_at_ms = mx_wall_ms();
    l.deadline_ms = l.acquired_at_ms + 10000;
    l.owner = mx_str_new("lg-1234-17", 10);
    return l;
}

/* Commits `rec` as an idle server does, on this thread; returns the time it took. */
static uint64_t commit_here(struct store *s, struct store_rec *rec)
{
    uint64_t t0 = mx_mono_ns();
    uint64_t epoch = store_epoch(s);
    struct waiter w = {.w.done = on_done, .status = -1};
    struct store_batch b;
    store_batch_begin(s, &b);
    uint64_t seq = store_submit_in(s, rec, epoch, &b);
    if (seq == 0)
        die("the store refused a record");
    store_wait_in(s, &w.w, epoch, seq, &b);
    store_batch_end(&b, true);
    while (atomic_load(&w.status) == -1) /* the writer took it: not expected, but wait */
        sched_yield();
    if (atomic_load(&w.status) != STORE_OK)
        die("a commit failed");
    return mx_mono_ns() - t0;
}

/* The hot key: the holder's lease forgotten, the next one's put. */
static uint8_t hot_holder[16];
static uint64_t hot_index = 0;

static uint64_t handoff(struct store *s)
{
    bool first = hot_index == 0;
    struct store_rec *rec = store_rec_new("hot", 3, ++hot_index, 1, 1, first ? 0 : 1);
    if (!rec)
        die("out of memory");
    rec->put[0] = next_lease();
    if (rec->ndel)
        memcpy(rec->del[0], hot_holder, 16);
    memcpy(hot_holder, rec->put[0].lease_id, 16);
    return commit_here(s, rec);
}

static uint64_t acquire(struct store *s, const char *name, uint64_t index)
{
    struct store_rec *rec = store_rec_new(name, strlen(name), index, 1, 1, 0);
    if (!rec)
        die("out of memory");
    rec->put[0] = next_lease();
    return commit_here(s, rec);
}

static uint64_t release(struct store *s, const char *name, uint64_t index)
{
    struct store_rec *rec = store_rec_new(name, strlen(name), index, 1, 0, 0);
    if (!rec)
        die("out of memory");
    rec->drop = true;
    return commit_here(s, rec);
}

static uint64_t flush(int fd)
{
    static char page[4096];
    uint64_t t0 = mx_mono_ns();
    if (pwrite(fd, page, sizeof page, 0) != (ssize_t)sizeof page || fdatasync(fd) != 0)
        die(strerror(errno));
    return mx_mono_ns() - t0;
}

/* The store's files (the database, its WAL and shared memory, its lock), then the
 * directory itself. */
static void remove_store_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        die(strerror(errno));
    char path[4096];
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0)
            die(strerror(errno));
    }
    closedir(d);
    if (rmdir(dir) != 0)
        die(strerror(errno));
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of n sorted samples, in µs. */
static double quantile_us(const uint64_t *v, size_t n, double q)
{
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return (double)v[i] / 1000.0;
}

/* Sorts each kind's n samples, for quantile_us(). */
static void sort_samples(uint64_t *const v[K_COUNT], size_t n)
{
    for (int k = 0; k < K_COUNT; k++)
        qsort(v[k], n, sizeof v[k][0], cmp_u64);
}

/* One line of p50 / p99 per kind, from sorted samples. */
static void print_row(const char *label, uint64_t *const v[K_COUNT], size_t n)
{
    printf("%-8s", label);
    for (int k = 0; k < K_COUNT; k++) {
        printf("  %7.0f / %-7.0f", quantile_us(v[k], n, 0.5), quantile_us(v[k], n, 0.99));
    }
    printf("  %5.2f×\n", quantile_us(v[K_HANDOFF], n, 0.5) / quantile_us(v[K_FLUSH], n, 0.5));
}

int main(int argc, char **argv)
{
    const char *parent = "/tmp", *dir;
    int rounds = 6, per = 300, nrtt = 0;
    double rtt[MAX_RTTS];
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--dir") == 0) {
            parent = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0) {
            rounds = atoi(argv[++i]);
        } else if (i + 1 < argc && strcmp(argv[i], "--per-round") == 0) {
            per = atoi(argv[++i]);
        } else if (i + 1 < argc && strcmp(argv[i], "--rtt-us") == 0) {
            for (char *p = argv[++i], *end; *p && nrtt < MAX_RTTS; p = *end ? end + 1 : end) {
                rtt[nrtt++] = strtod(p, &end);
                if (end == p)
                    die("--rtt-us takes numbers separated by commas");
            }
        } else {
            fprintf(stderr, "usage: commit_bench [--dir D] [--rounds N] [--per-round N] "
                            "[--rtt-us U[,U...]]\n");
            return 2;
        }
    }
    if (rounds < 1 || per < 2)
        die("--rounds must be at least 1 and --per-round at least 2");
    if (nrtt == 0) {
        rtt[nrtt++] = 35;
        rtt[nrtt++] = 70;
    }
    /* A new directory of its own, removed at the end: never a store in use. */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s/mutexd-commit-bench-XXXXXX", parent) >= (int)sizeof tmp)
        die("--dir is too long");
    if (!(dir = mkdtemp(tmp)))
        die(strerror(errno));

    mx_log_set_level(MX_LOG_WARN); /* the store's open and migration lines are not figures */
    struct store_config cfg = {.dir = dir};
    struct store *s = NULL;
    char err[256];
    if (store_open(&s, &cfg, err, sizeof err) != 0)
        die(err);
    char path[4096];
    snprintf(path, sizeof path, "%s/commit-bench-flush", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        die(strerror(errno));

    /* Other leases, so that the tables have the pages of a server in use. */
    char name[32];
    for (int i = 0; i < BACKGROUND; i++) {
        snprintf(name, sizeof name, "background/%04d", i);
        acquire(s, name, 1);
    }
    for (int i = 0; i < per; i++) /* the WAL at its working size before measuring */
        handoff(s);

    size_t total = (size_t)rounds * (size_t)per;
    uint64_t *all[K_COUNT], *round[K_COUNT];
    for (int k = 0; k < K_COUNT; k++) {
        all[k] = calloc(total, sizeof **all);
        round[k] = calloc((size_t)per, sizeof **round);
        if (!all[k] || !round[k])
            die("out of memory");
    }
    printf("p50 / p99 µs of each, %d a round, in %s\n", per, dir);
    printf("%-8s", "round");
    for (int k = 0; k < K_COUNT; k++)
        printf("  %-17s", kind_names[k]);
    printf("  hand-off ÷ flush (p50)\n");
    uint64_t index = 1;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < per; i++)
            round[K_FLUSH][i] = flush(fd);
        for (int i = 0; i < per; i++)
            round[K_HANDOFF][i] = handoff(s);
        for (int i = 0; i < per; i++) {
            snprintf(name, sizeof name, "distinct/%02d", i % 64);
            round[K_ACQUIRE][i] = acquire(s, name, ++index);
            round[K_RELEASE][i] = release(s, name, ++index);
        }
        for (int k = 0; k < K_COUNT; k++)
            memcpy(all[k] + (size_t)r * (size_t)per, round[k], (size_t)per * sizeof **round);
        char label[16];
        snprintf(label, sizeof label, "%d", r + 1);
        sort_samples(round, (size_t)per);
        print_row(label, round, (size_t)per);
    }
    sort_samples(all, total);
    print_row("all", all, total);

    double f = quantile_us(all[K_FLUSH], total, 0.5), h = quantile_us(all[K_HANDOFF], total, 0.5);
    printf("\nThe hot-key floor is one flush and one round trip a hand-off. A server whose only\n"
           "cost is its commit reaches (flush + round trip) / (hand-off + round trip) of it:\n");
    for (int i = 0; i < nrtt; i++)
        printf("  round trip %3.0f µs: %.0f%%\n", rtt[i], 100.0 * (f + rtt[i]) / (h + rtt[i]));

    close(fd);
    unlink(path);
    store_close(s);
    for (int k = 0; k < K_COUNT; k++) {
        free(all[k]);
        free(round[k]);
    }
    remove_store_dir(dir);
    return 0;
}
