/*
 * A server's join of its group, tried again while the blob store does not answer (see
 * join.h).
 */
#include "server/join.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "server/layout.h"

/* A failure to join is logged at the first attempt, then at most this often. */
#define JOIN_SAY_NS (30000 * MX_NS_PER_MS)

/* A refusal ends the start only when this many attempts in a row met one (about 2 to 4 s
 * of backoff): one that does not repeat (a DNS lookup that timed out inside the open while
 * the check before and after it passed, a store answering an error while it starts) is
 * tried again as a silence is. */
#define JOIN_REFUSALS 5

struct join {
    const struct group_config *gc;
    const struct partitions_config *pc;
    /* What was joined, published once whole (the front's callbacks read them). */
    _Atomic(struct group *) group;
    _Atomic(struct partitions *) ps;
    /* The main thread's. */
    uint64_t first_ns, due_ns, said_ns, delay_ms, rand;
    /* The last failure, for /readyz; under `lock`. */
    pthread_mutex_t lock;
    char why[512];
    _Atomic uint64_t attempts, failures;
    unsigned refusals; /* attempts in a row that ended in a refusal; the main thread's */
};

struct join *join_new(const struct group_config *gc, const struct partitions_config *pc)
{
    struct join *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->gc = gc;
    j->pc = pc;
    pthread_mutex_init(&j->lock, NULL);
    snprintf(j->why, sizeof j->why, "joining the server group");
    j->rand = mx_mono_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    return j;
}

void join_free(struct join *j)
{
    if (!j)
        return;
    pthread_mutex_destroy(&j->lock);
    free(j);
}

uint64_t join_due(const struct join *j)
{
    return atomic_load(&j->group) || atomic_load(&j->ps) ? 0 : j->due_ns;
}

struct group *join_group(struct join *j)
{
    return atomic_load(&j->group);
}

struct partitions *join_partitions(struct join *j)
{
    return atomic_load(&j->ps);
}

/* xorshift64: the jitter needs no better. */
static uint64_t next_rand(struct join *j)
{
    uint64_t x = j->rand ? j->rand : 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return j->rand = x;
}

/* The blob store did not answer: the next attempt in half to all of the delay, which
 * doubles up to the cap. */
static void again(struct join *j, uint64_t now, const char *err)
{
    j->delay_ms = j->delay_ms ? j->delay_ms * 2 : JOIN_RETRY_FIRST_MS;
    if (j->delay_ms > JOIN_RETRY_MAX_MS)
        j->delay_ms = JOIN_RETRY_MAX_MS;
    uint64_t wait_ms = j->delay_ms / 2 + next_rand(j) % (j->delay_ms / 2 + 1);
    j->due_ns = now + wait_ms * MX_NS_PER_MS;
    atomic_fetch_add(&j->failures, 1);
    pthread_mutex_lock(&j->lock);
    snprintf(j->why, sizeof j->why, "waiting for the blob store: %s", err);
    pthread_mutex_unlock(&j->lock);
    if (!j->said_ns || now - j->said_ns >= JOIN_SAY_NS) {
        char quoted[1100];
        mx_warn("waiting for the blob store to join the server group; trying again",
                "attempts=%" PRIu64 " waited_ms=%" PRIu64 " retry_ms=%" PRIu64 " error=%s",
                atomic_load(&j->attempts), (uint64_t)((now - j->first_ns) / MX_NS_PER_MS), wait_ms,
                mx_log_quote(quoted, sizeof quoted, err));
        j->said_ns = now;
    }
}

/* The store answered with a refusal, or the open failed though the store answers: the
 * end of the start once it has happened JOIN_REFUSALS times in a row, else an attempt
 * again after the backoff, each refusal logged. */
static enum join_rc refused(struct join *j, uint64_t now, const char *err)
{
    if (++j->refusals >= JOIN_REFUSALS)
        return JOIN_FAILED;
    char quoted[1100];
    mx_warn("the blob store refused to join the server group; trying again",
            "refusals=%u of=%u error=%s", j->refusals, JOIN_REFUSALS,
            mx_log_quote(quoted, sizeof quoted, err));
    again(j, now, err);
    return JOIN_AGAIN;
}

enum join_rc join_try(struct join *j, uint64_t now_ns, char *err, size_t errlen,
                      const char **failed)
{
    *failed = "cannot join the server group";
    if (!j->first_ns)
        j->first_ns = now_ns;
    atomic_fetch_add(&j->attempts, 1);
    unsigned found = 0;
    switch (layout_check(j->gc->opt, &found, err, errlen)) {
    case LAYOUT_OK:
        break;
    case LAYOUT_AGAIN:
        j->refusals = 0;
        again(j, now_ns, err);
        return JOIN_AGAIN;
    case LAYOUT_MISMATCH:
        return JOIN_MISMATCH;
    case LAYOUT_FAILED:
        return refused(j, now_ns, err);
    }
    struct group *g = NULL;
    struct partitions *ps = NULL;
    if (j->pc->count > 1 ? partitions_open(&ps, j->pc, err, errlen, failed) != 0
                         : group_open(&g, j->gc, err, errlen, failed) != 0) {
        /* The open tries a blob store that stops answering for a while (a DNS lookup that
         * times out), then gives up: when the store still does not answer, that is a
         * wait, not a refusal. */
        char again_err[512];
        enum layout_rc rc = layout_check(j->gc->opt, &found, again_err, sizeof again_err);
        *failed = "cannot join the server group";
        if (rc == LAYOUT_AGAIN) {
            j->refusals = 0;
            again(j, mx_mono_ns(), err);
            return JOIN_AGAIN;
        }
        return refused(j, mx_mono_ns(), err);
    }
    if (atomic_load(&j->attempts) > 1)
        mx_info("joined the server group: the blob store answers",
                "attempts=%" PRIu64 " waited_ms=%" PRIu64, atomic_load(&j->attempts),
                (uint64_t)((mx_mono_ns() - j->first_ns) / MX_NS_PER_MS));
    atomic_store(&j->group, g);
    atomic_store(&j->ps, ps);
    return JOIN_OK;
}

bool join_ready(void *ctx, char *why, size_t len, struct mx_buf *details)
{
    struct join *j = ctx;
    struct group *g = atomic_load(&j->group);
    struct partitions *ps = atomic_load(&j->ps);
    if (g)
        return group_ready(g, why, len, details);
    if (ps)
        return partitions_ready(ps, why, len, details);
    mx_buf_printf(details, "\"role\":\"joining\"");
    pthread_mutex_lock(&j->lock);
    snprintf(why, len, "%s", j->why);
    pthread_mutex_unlock(&j->lock);
    return false;
}

void join_metrics(void *ctx, struct mx_buf *b)
{
    struct join *j = ctx;
    struct group *g = atomic_load(&j->group);
    struct partitions *ps = atomic_load(&j->ps);
    prom_gauge(b, "mutexd_group_joined",
               "1 once this server has joined its group (the blob store answered).",
               g || ps ? 1 : 0);
    prom_counter(b, "mutexd_group_join_failures_total",
                 "Attempts to join the group the blob store did not answer.",
                 atomic_load(&j->failures));
    if (g)
        group_metrics(g, b);
    else if (ps)
        partitions_metrics(ps, b);
}

int join_render_servers(void *ctx, struct mx_buf *out)
{
    struct join *j = ctx;
    struct group *g = atomic_load(&j->group);
    struct partitions *ps = atomic_load(&j->ps);
    if (g)
        return group_render_servers(g, out);
    if (ps)
        return partitions_render_servers(ps, out);
    return -1; /* not joined yet: 503 */
}
