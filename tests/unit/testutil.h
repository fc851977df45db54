/*
 * Shared by the C unit tests: cmocka's headers in the order it needs, and a main that
 * runs one case when ctest names it (each case is its own ctest test and process).
 */
#ifndef MX_TESTUTIL_H
#define MX_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A case named on the command line must exist: cmocka's filter is a pattern, and one that
 * matches nothing runs zero cases and exits 0, so a renamed case would pass unseen. */
#define MX_TEST_MAIN(tests)                                                                        \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        if (argc > 1) {                                                                            \
            if (!mx_test_has_case(tests, sizeof tests / sizeof tests[0], argv[1])) {               \
                fprintf(stderr, "no test case named '%s' in %s\n", argv[1], argv[0]);              \
                return 2;                                                                          \
            }                                                                                      \
            cmocka_set_test_filter(argv[1]);                                                       \
        }                                                                                          \
        return cmocka_run_group_tests(tests, NULL, NULL);                                          \
    }

static inline int mx_test_has_case(const struct CMUnitTest *tests, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (tests[i].name && strcmp(tests[i].name, name) == 0)
            return 1;
    return 0;
}

/* The directories of mx_temp_dir(): `add` is kept; NULL removes every one kept, with all in
 * it. At most 16 per process (each case is a process of its own). */
static inline void mx_temp_dirs(const char *add)
{
    static char kept[16][64];
    static int n;
    if (add) {
        if (n < 16)
            snprintf(kept[n++], sizeof kept[0], "%s", add);
        return;
    }
    for (; n > 0; n--) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", kept[n - 1]);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", kept[n - 1]);
    }
}

static inline void mx_temp_dirs_remove(void)
{
    mx_temp_dirs(NULL);
}

/* A new, empty directory /tmp/mutexd-<what>-XXXXXX in `dir` (64 bytes), removed with all in
 * it when the process ends, whether the case passed or failed (a failed assertion leaves
 * the case before its own clean-up). */
static inline char *mx_temp_dir(char dir[64], const char *what)
{
    static int registered;
    snprintf(dir, 64, "/tmp/mutexd-%s-XXXXXX", what);
    assert_non_null(mkdtemp(dir));
    if (!registered++)
        atexit(mx_temp_dirs_remove);
    mx_temp_dirs(dir);
    return dir;
}

/* A seed for randomized tests: MX_SEED from the environment, else the clock. Printed, so
 * that a failing interleaving can be replayed. */
static inline unsigned mx_test_seed(void)
{
    const char *s = getenv("MX_SEED");
    unsigned seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
    printf("seed: MX_SEED=%u\n", seed);
    fflush(stdout);
    return seed;
}

static inline void mx_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* How many times the process's other threads have gone to sleep (their voluntary context
 * switches, from /proc): a thread woken for nothing goes back to sleep, and counts. */
static inline long mx_test_others_sleeps(void)
{
    long self = (long)syscall(SYS_gettid), total = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long tid = strtol(e->d_name, NULL, 10);
        if (tid <= 0 || tid == self)
            continue;
        char path[64], line[128];
        snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* it has just ended */
        long n;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1) {
                total += n;
                break;
            }
        fclose(f);
    }
    closedir(d);
    return total;
}

#endif
