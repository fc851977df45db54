/*
 * Shared by the client's C tests: cmocka's headers in the order it needs, a main that runs
 * the one case ctest names (each case is its own ctest test and process, next to its own
 * server when run through with-server.sh), and small helpers.
 */
#ifndef MUTEXD_TESTING_H
#define MUTEXD_TESTING_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEST_MAIN(tests)                                                                           \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        if (argc > 1)                                                                              \
            cmocka_set_test_filter(argv[1]);                                                       \
        return cmocka_run_group_tests(tests, NULL, NULL);                                          \
    }

static inline void test_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static inline int64_t test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
