/*
 * mutexd: process entry point. Starts the actor runtime and waits for SIGTERM or SIGINT,
 * then shuts everything down and exits 0.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "actors/runtime.h"
#include "common/log.h"

static void noop_activate(struct rt_actor *self, void *state)
{
    (void)self;
    (void)state;
}

static void noop_receive(struct rt_actor *self, void *state, struct rt_msg *m)
{
    (void)self;
    (void)state;
    (void)m;
}

static bool noop_idle(struct rt_actor *self, void *state, uint64_t *barrier)
{
    (void)self;
    (void)state;
    (void)barrier;
    return true;
}

static void noop_deactivate(struct rt_actor *self, void *state, bool shutdown)
{
    (void)self;
    (void)state;
    (void)shutdown;
}

static const struct rt_behavior noop_behavior = {
    .activate = noop_activate,
    .receive = noop_receive,
    .idle = noop_idle,
    .deactivate = noop_deactivate,
};

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("mutexd %s\n", MUTEXD_VERSION);
            return 0;
        }
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: mutexd [--help] [--version]\n");
            return 0;
        }
        fprintf(stderr, "mutexd: unknown option %s\n", argv[i]);
        return 2;
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* threads started below inherit the mask */

    struct rt *rt;
    struct rt_config cfg = {.behavior = &noop_behavior};
    int rc = rt_start(&rt, &cfg);
    if (rc != 0) {
        mx_error("cannot start the actor runtime", "error=%d", rc);
        return 1;
    }
    mx_info("started", "version=%s", MUTEXD_VERSION);
    int sig = 0;
    sigwait(&set, &sig);
    mx_info("shutting down", "signal=%s", sig == SIGTERM ? "TERM" : "INT");
    rt_shutdown(rt);
    mx_info("stopped", NULL);
    return 0;
}
