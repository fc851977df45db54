/*
 * Locks (mutexd.h, "Several resources at once"): leases that a thread of the library renews
 * until they are released, and that are lost together as soon as one of them is.
 *
 * A lock is its leases ("parts", in the order of the names given) and one thread, which
 * renews them through a client of its own: a set (mutexd_lock_many()) with one request about
 * every part, the leases of mutexd_lock_ordered() each with its own. The thread sleeps on a
 * condition variable until the next renewal is due or the earliest deadline comes; everything
 * it shares with the caller's threads is under the lock's mutex, but for what never changes
 * once a part is taken (its name, lease id and fencing token).
 *
 * Every call goes through the public functions of client.c; the deadlines are theirs
 * (deadline_ms: the moment the request was sent, plus expires_in_ms, minus the safety margin).
 */
#include "mutexd.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"

/* One lease of a lock. */
struct part {
    /* Set when the part is taken, and left alone until the lock is freed. */
    char *resource;
    char *lease_id;
    uint64_t fencing_token;
    int taken;
    /* Under the mutex: when the lease ends unless renewed, and when it is renewed next. */
    int64_t deadline;
    int64_t due;
    int64_t ttl_ms;
};

struct mutexd_lock {
    pthread_mutex_t mu;
    pthread_cond_t cond;   /* on the monotonic clock: a change, or a lock to end */
    mutexd_client *client; /* the thread's own, and the release's once it is stopped */
    int many;              /* a set: one lease id, renewed and released with one request */
    struct part *parts;
    size_t n;
    size_t *order; /* mutexd_lock_ordered(): the parts in the order they are taken */
    void (*on_lost)(mutexd_lock *lock, void *arg);
    void *arg;
    pthread_t thread;
    int running;
    /* Under the mutex. */
    int stop;
    int lost;
    struct mutexd_error why; /* why it was lost */
    char last_error[512];    /* why the last renewal failed, or "" */
};

/* ---- Errors ------------------------------------------------------------------------------- */

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

/* A copy of *from into *to (emptied first); strings that do not fit in memory are left out. */
static void error_copy(struct mutexd_error *to, const struct mutexd_error *from)
{
    mutexd_error_clear(to);
    to->status = from->status;
    to->code = dup_or_null(from->code);
    to->message = dup_or_null(from->message);
    to->field = dup_or_null(from->field);
    to->reason = dup_or_null(from->reason);
    to->retry_after_s = from->retry_after_s;
    to->has_holder = from->has_holder;
    to->holder = from->holder;
    to->holder.owner = dup_or_null(from->holder.owner);
    to->holder.acquired_at = dup_or_null(from->holder.acquired_at);
    to->holder.renewed_at = dup_or_null(from->holder.renewed_at);
    to->holder.metadata = dup_or_null(from->holder.metadata);
    to->transport = from->transport;
    to->request_id = dup_or_null(from->request_id);
    to->body = dup_or_null(from->body);
    to->limit = from->limit;
}

/* Replaces the error's message by the library's own sentence. */
__attribute__((format(printf, 2, 3))) static void set_message(struct mutexd_error *err,
                                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mxc_error_vmessage(err, fmt, ap);
    va_end(ap);
}

/* ---- The clock ---------------------------------------------------------------------------- */

static int64_t now_ms(void)
{
    return mutexd_monotonic_ms();
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Waits on the lock's condition until `until` (monotonic ms; < 0: no limit). */
static void wait_until(mutexd_lock *l, int64_t until)
{
    if (until < 0) {
        pthread_cond_wait(&l->cond, &l->mu);
        return;
    }
    struct timespec ts = {(time_t)(until / 1000), (long)(until % 1000) * 1000000L};
    pthread_cond_timedwait(&l->cond, &l->mu, &ts);
}

/* The earliest deadline of the parts taken; INT64_MAX while none is. Under the mutex. */
static int64_t earliest(const mutexd_lock *l)
{
    int64_t d = INT64_MAX;
    for (size_t i = 0; i < l->n; i++) {
        if (l->parts[i].taken)
            d = min64(d, l->parts[i].deadline);
    }
    return d;
}

/* Whether it holds: not lost, something taken, and the earliest deadline ahead. Under the
 * mutex. */
static int holds(const mutexd_lock *l)
{
    int64_t d = earliest(l);
    return !l->lost && d != INT64_MAX && now_ms() < d;
}

/* ---- The renewing thread ------------------------------------------------------------------ */

/* Marks the lock lost (once) and calls on_lost, outside the mutex. Under the mutex. */
static void lose(mutexd_lock *l, const struct mutexd_error *err)
{
    if (l->lost)
        return;
    l->lost = 1;
    error_copy(&l->why, err);
    pthread_cond_broadcast(&l->cond);
    if (l->on_lost != NULL) {
        pthread_mutex_unlock(&l->mu);
        l->on_lost(l, l->arg);
        pthread_mutex_lock(&l->mu);
    }
}

/* The lock's name for messages: "the set a, b", or "the lease on a". */
static void label(const mutexd_lock *l, const struct part *p, char *out, size_t cap)
{
    if (!l->many) {
        snprintf(out, cap, "the lease on %s", p->resource);
        return;
    }
    size_t len = (size_t)snprintf(out, cap, "the set");
    for (size_t i = 0; i < l->n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i == 0 ? " " : ", ",
                                l->parts[i].resource);
}

/* Why no renewal succeeded, for the message of a loss. Under the mutex. */
static const char *not_renewed(const mutexd_lock *l)
{
    return l->last_error[0] != '\0' ? l->last_error
                                    : "none was tried: the process did not run in time";
}

/* The earliest deadline passed with no renewal: lost. Under the mutex. */
static void expire(mutexd_lock *l)
{
    struct mutexd_error err = {0};
    char what[1024];
    size_t first = 0;
    int64_t d = earliest(l);
    for (size_t i = 0; i < l->n; i++) {
        if (l->parts[i].taken && l->parts[i].deadline == d)
            first = i;
    }
    label(l, &l->parts[first], what, sizeof(what));
    set_message(&err, "no renewal of %s succeeded before its deadline (%s)", what, not_renewed(l));
    lose(l, &err);
    mutexd_error_clear(&err);
}

/* Why a renewal failed, for the message of a loss; when to try again. Under the mutex. */
static int64_t failed(mutexd_lock *l, const struct part *p, const struct mutexd_error *err)
{
    snprintf(l->last_error, sizeof(l->last_error), "%s", err->message != NULL ? err->message : "?");
    int64_t retry = p->ttl_ms / 10;
    return now_ms() + (retry < 100 ? 100 : retry > 1000 ? 1000 : retry);
}

/* The budget of one attempt: a third of the TTL, at most the client's timeout, and never past
 * the deadline, so that a server gone silent leaves time for more attempts. */
static long attempt_ms(const mutexd_lock *l, int64_t ttl_ms, int64_t deadline)
{
    int64_t t = min64(ttl_ms / 3, deadline - now_ms());
    t = min64(t, mxc_client_timeout(l->client));
    return t > 1 ? (long)t : 1;
}

/* The names of the parts, in order, for a call about the set; NULL when memory ran out. The
 * caller frees the array (not the names). */
static const char **part_names(const mutexd_lock *l)
{
    const char **names = malloc(l->n * sizeof(*names));
    for (size_t i = 0; names != NULL && i < l->n; i++)
        names[i] = l->parts[i].resource;
    return names;
}

/* What a renewal of the `n` parts from part k answered (r, *err), sent at `sent` and answered
 * `late` (at the earliest deadline or after), with a lease for each part when r is MUTEXD_OK.
 * `ttl`: the parts' TTL. Under the mutex. */
static void renewed(mutexd_lock *l, size_t k, size_t n, mutexd_result r,
                    const struct mutexd_lease *leases, int64_t ttl, int64_t sent, int late,
                    struct mutexd_error *err)
{
    struct part *p = &l->parts[k];
    if (r == MUTEXD_OK && late) {
        /* Answered after the deadline: the loss is final, whatever the answer says. */
        snprintf(l->last_error, sizeof(l->last_error), "a renewal was answered too late");
        expire(l);
    } else if (r == MUTEXD_OK) {
        for (size_t i = 0; i < n; i++) {
            p[i].deadline = leases[i].deadline_ms;
            p[i].due = sent + ttl / 3;
        }
        l->last_error[0] = '\0';
    } else if (r == MUTEXD_LOST) {
        lose(l, err);
    } else {
        if (r == MUTEXD_ERR_NOMEM && err->message == NULL)
            set_message(err, "out of memory");
        int64_t again = failed(l, p, err);
        for (size_t i = 0; i < n; i++)
            p[i].due = again;
    }
}

/* Renews the set, all parts at once. Called and returns under the mutex, which it leaves
 * while the request is out; the parts' names and lease id do not change meanwhile. */
static void renew_set(mutexd_lock *l)
{
    int64_t deadline = earliest(l);
    int64_t ttl = l->parts[0].ttl_ms;
    const char **names = part_names(l);
    struct mutexd_leases set = {0};
    struct mutexd_error err = {0};
    /* The set as renewing it keeps within its earliest deadline. */
    set.lease_id = strdup(l->parts[0].lease_id);
    set.deadline_ms = deadline;
    struct mutexd_renew_options o = {.timeout_ms = attempt_ms(l, ttl, deadline)};
    pthread_mutex_unlock(&l->mu);

    int64_t sent = now_ms();
    mutexd_result r = names != NULL && set.lease_id != NULL
                          ? mutexd_renew_many(l->client, names, l->n, set.lease_id, &o, &set, &err)
                          : MUTEXD_ERR_NOMEM;
    int late = now_ms() >= deadline;

    pthread_mutex_lock(&l->mu);
    renewed(l, 0, l->n, r, set.leases, ttl, sent, late, &err);
    mutexd_leases_clear(&set);
    mutexd_error_clear(&err);
    free(names);
}

/* Renews part k of an ordered lock, as renew_set() does the set. */
static void renew_part(mutexd_lock *l, size_t k)
{
    const struct part *p = &l->parts[k];
    int64_t deadline = earliest(l);
    struct mutexd_lease lease = {0};
    struct mutexd_error err = {0};
    /* The lease as renewing it keeps within the lock's earliest deadline. */
    lease.resource = strdup(p->resource);
    lease.lease_id = strdup(p->lease_id);
    lease.deadline_ms = deadline;
    struct mutexd_renew_options o = {.timeout_ms = attempt_ms(l, p->ttl_ms, deadline)};
    const char *resource = p->resource, *lease_id = p->lease_id;
    int64_t ttl = p->ttl_ms;
    pthread_mutex_unlock(&l->mu);

    int64_t sent = now_ms();
    mutexd_result r = lease.resource != NULL && lease.lease_id != NULL
                          ? mutexd_renew(l->client, resource, lease_id, &o, &lease, &err)
                          : MUTEXD_ERR_NOMEM;
    int late = now_ms() >= deadline;
    /* Of several leases, the one lost is named. */
    if (r == MUTEXD_LOST && err.message != NULL)
        set_message(&err, "%s: %s", resource, err.message);

    pthread_mutex_lock(&l->mu);
    renewed(l, k, 1, r, &lease, ttl, sent, late, &err);
    mutexd_lease_clear(&lease);
    mutexd_error_clear(&err);
}

static void *renewer(void *arg)
{
    mutexd_lock *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (l->lost) {
            wait_until(l, -1);
            continue;
        }
        int64_t now = now_ms(), deadline = earliest(l);
        if (deadline != INT64_MAX && now >= deadline) {
            expire(l);
            continue;
        }
        /* The part due first (a set's parts are due together). */
        size_t k = l->n;
        for (size_t i = 0; i < l->n; i++) {
            if (l->parts[i].taken && (k == l->n || l->parts[i].due < l->parts[k].due))
                k = i;
        }
        if (k < l->n && now >= l->parts[k].due) {
            if (l->many)
                renew_set(l);
            else
                renew_part(l, k);
            continue;
        }
        wait_until(l, k < l->n ? min64(deadline, l->parts[k].due) : -1);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- Making and ending a lock ------------------------------------------------------------- */

static void lock_free(mutexd_lock *l)
{
    if (l == NULL)
        return;
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->mu);
    mutexd_client_free(l->client);
    for (size_t i = 0; i < l->n; i++) {
        free(l->parts[i].resource);
        free(l->parts[i].lease_id);
    }
    free(l->parts);
    free(l->order);
    mutexd_error_clear(&l->why);
    free(l);
}

/* A lock of `count` parts, none taken yet, and its client; its thread is not started. */
static mutexd_result lock_new(mutexd_client *client, size_t count, int many,
                              const struct mutexd_lock_options *lo, mutexd_lock **out)
{
    mutexd_lock *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return MUTEXD_ERR_NOMEM;
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) {
        free(l);
        return MUTEXD_ERR_NOMEM;
    }
    int ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&l->cond, &attr) == 0;
    pthread_condattr_destroy(&attr);
    if (ok && pthread_mutex_init(&l->mu, NULL) != 0) {
        pthread_cond_destroy(&l->cond);
        ok = 0;
    }
    if (!ok) {
        free(l);
        return MUTEXD_ERR_NOMEM;
    }
    mutexd_error_clear(&l->why);
    l->many = many;
    l->n = count;
    if (lo != NULL) {
        l->on_lost = lo->on_lost;
        l->arg = lo->arg;
    }
    l->parts = calloc(count, sizeof(*l->parts));
    mutexd_result result =
        l->parts != NULL ? mxc_client_copy(client, &l->client) : MUTEXD_ERR_NOMEM;
    if (result != MUTEXD_OK) {
        lock_free(l);
        return result;
    }
    *out = l;
    return MUTEXD_OK;
}

static mutexd_result start(mutexd_lock *l)
{
    if (pthread_create(&l->thread, NULL, renewer, l) != 0)
        return MUTEXD_ERR_NOMEM;
    l->running = 1;
    return MUTEXD_OK;
}

/* Takes part i with the lease the caller's thread acquired; `lease` is emptied. */
static mutexd_result take_part(mutexd_lock *l, size_t i, struct mutexd_lease *lease, int64_t sent)
{
    struct part *p = &l->parts[i];
    char *resource = strdup(lease->resource), *lease_id = strdup(lease->lease_id);
    if (resource == NULL || lease_id == NULL) {
        free(resource);
        free(lease_id);
        return MUTEXD_ERR_NOMEM;
    }
    pthread_mutex_lock(&l->mu);
    p->resource = resource;
    p->lease_id = lease_id;
    p->fencing_token = lease->fencing_token;
    p->ttl_ms = lease->ttl_ms;
    p->deadline = lease->deadline_ms;
    p->due = sent + lease->ttl_ms / 3;
    p->taken = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
    mutexd_lease_clear(lease);
    return MUTEXD_OK;
}

/* Stops the thread and waits for it. */
static void stop(mutexd_lock *l)
{
    if (!l->running)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->running = 0;
}

/* Releases the parts taken (a set at once; else in the reverse of the order taken). The
 * thread is stopped. */
static mutexd_result release_parts(mutexd_lock *l, struct mutexd_error *err)
{
    if (l->many) {
        const char **names = part_names(l);
        if (names == NULL)
            return MUTEXD_ERR_NOMEM;
        mutexd_result r = l->parts[0].taken ? mutexd_release_many(l->client, names, l->n,
                                                                  l->parts[0].lease_id, err)
                                            : MUTEXD_OK;
        free(names);
        return r;
    }
    /* The first failure is the one reported; a lease lost wins over other failures, as it
     * says that the lock was not whole any more. */
    mutexd_result result = MUTEXD_OK;
    struct mutexd_error one = {0};
    for (size_t k = l->n; k-- > 0;) {
        const struct part *p = &l->parts[l->order != NULL ? l->order[k] : k];
        if (!p->taken)
            continue;
        mutexd_result r = mutexd_release(l->client, p->resource, p->lease_id, &one);
        if (r != MUTEXD_OK && (result == MUTEXD_OK || (r == MUTEXD_LOST && result != r))) {
            result = r;
            error_copy(err, &one);
            set_message(err, "%s: %s", p->resource, one.message != NULL ? one.message : "?");
        }
    }
    mutexd_error_clear(&one);
    return result;
}

mutexd_result mutexd_lock_release(mutexd_lock *lock, struct mutexd_error *error)
{
    struct mutexd_error scratch = {0};
    struct mutexd_error *err = error != NULL ? error : &scratch;
    mutexd_error_clear(err);
    if (lock == NULL)
        return MUTEXD_OK;
    stop(lock);
    mutexd_result result = release_parts(lock, err);
    if (result == MUTEXD_ERR_NOMEM && err->message == NULL)
        err->message = strdup("out of memory");
    lock_free(lock);
    mutexd_error_clear(&scratch);
    return result;
}

/* A lock that could not be made whole: what was taken is released, the lock freed. */
static void abandon(mutexd_lock *l)
{
    struct mutexd_error ignored = {0};
    stop(l);
    release_parts(l, &ignored);
    mutexd_error_clear(&ignored);
    lock_free(l);
}

mutexd_result mutexd_lock_many(mutexd_client *client, const char *const *resources, size_t count,
                               const struct mutexd_acquire_options *options,
                               const struct mutexd_lock_options *lock_options, mutexd_lock **lock,
                               struct mutexd_error *error)
{
    struct mutexd_error scratch = {0};
    struct mutexd_error *err = error != NULL ? error : &scratch;
    struct mutexd_leases set = {0};
    mutexd_lock *l = NULL;
    mutexd_result result;

    if (lock == NULL) {
        mutexd_error_clear(err);
        result = MUTEXD_ERR_ARG;
        set_message(err, "no lock to fill");
        goto out;
    }
    *lock = NULL;
    int64_t sent = now_ms();
    result = mutexd_acquire_many(client, resources, count, options, &set, err);
    if (result != MUTEXD_OK)
        goto out;
    /* After a wait in the queues the grant came some time before the answer: count from it. */
    int64_t base = options != NULL && options->wait_ms > 0 ? now_ms() : sent;
    /* Every part is taken before the thread starts: it renews the set whole. */
    result = lock_new(client, count, 1, lock_options, &l);
    for (size_t i = 0; i < count && result == MUTEXD_OK; i++)
        result = take_part(l, i, &set.leases[i], base);
    if (result == MUTEXD_OK)
        result = start(l);
    if (result != MUTEXD_OK) {
        /* The set is held, but cannot be kept: let it go at once. */
        lock_free(l);
        mutexd_release_many(client, resources, count, set.lease_id, NULL);
        set_message(err, "out of memory");
        goto out;
    }
    *lock = l;
out:
    mutexd_leases_clear(&set);
    mutexd_error_clear(&scratch);
    return result;
}

/* strcmp order of the names, for qsort_r. */
static int by_name(const void *a, const void *b, void *names)
{
    const char *const *n = names;
    return strcmp(n[*(const size_t *)a], n[*(const size_t *)b]);
}

mutexd_result mutexd_lock_ordered(mutexd_client *client, const char *const *resources, size_t count,
                                  const struct mutexd_acquire_options *options,
                                  const struct mutexd_lock_options *lock_options,
                                  mutexd_lock **lock, struct mutexd_error *error)
{
    struct mutexd_error scratch = {0};
    struct mutexd_error *err = error != NULL ? error : &scratch;
    struct mutexd_acquire_options none = {0};
    struct mutexd_acquire_options o = options != NULL ? *options : none;
    struct mutexd_lease lease = {0};
    mutexd_lock *l = NULL;
    mutexd_result result = MUTEXD_ERR_ARG;

    mutexd_error_clear(err);
    if (lock != NULL)
        *lock = NULL;
    if (lock == NULL || client == NULL || resources == NULL || count == 0 ||
        count > MUTEXD_MANY_MAX) {
        set_message(err, "a lock is 1 to %d resources, and needs a client and a lock to fill",
                    MUTEXD_MANY_MAX);
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        if (resources[i] == NULL || resources[i][0] == '\0') {
            set_message(err, "resource name %zu of the lock is empty", i + 1);
            goto out;
        }
        for (size_t k = 0; k < i; k++) {
            if (strcmp(resources[k], resources[i]) == 0) {
                set_message(err, "the lock names %s twice: each resource once", resources[i]);
                goto out;
            }
        }
    }
    /* on_lost is for the lock handed over, not for one that never is: set at the end. */
    result = lock_new(client, count, 0, NULL, &l);
    if (result == MUTEXD_OK && (l->order = malloc(count * sizeof(*l->order))) == NULL)
        result = MUTEXD_ERR_NOMEM;
    /* The thread runs from the start, so that the leases taken are renewed while the next
     * ones are waited for. */
    if (result == MUTEXD_OK)
        result = start(l);
    if (result != MUTEXD_OK) {
        lock_free(l);
        set_message(err, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < count; i++)
        l->order[i] = i;
    qsort_r(l->order, count, sizeof(*l->order), by_name, (void *)resources);

    int64_t until = now_ms() + (o.wait_ms > 0 ? o.wait_ms : 0);
    for (size_t k = 0; k < count; k++) {
        size_t i = l->order[k];
        if (options != NULL && options->wait_ms > 0) {
            o.wait_ms = until - now_ms();
            if (o.wait_ms <= 0)
                o.wait_ms = 1; /* the time is up: one last try that answers at once */
        }
        int64_t sent = now_ms();
        result = mutexd_acquire(client, resources[i], &o, &lease, err);
        if (result != MUTEXD_OK) {
            set_message(err, "%s: %s", resources[i], err->message != NULL ? err->message : "?");
            break;
        }
        result = take_part(l, i, &lease, o.wait_ms > 0 ? now_ms() : sent);
        if (result != MUTEXD_OK) {
            set_message(err, "out of memory");
            break;
        }
        pthread_mutex_lock(&l->mu);
        int lost = l->lost;
        if (lost) {
            /* One taken earlier was lost while the next ones were waited for. */
            error_copy(err, &l->why);
            result = MUTEXD_LOST;
        }
        pthread_mutex_unlock(&l->mu);
        if (lost)
            break;
    }
    if (result == MUTEXD_OK) {
        pthread_mutex_lock(&l->mu);
        if (l->lost) {
            /* Lost after the last one was taken: not whole, as above. */
            error_copy(err, &l->why);
            result = MUTEXD_LOST;
        } else if (lock_options != NULL) {
            l->on_lost = lock_options->on_lost;
            l->arg = lock_options->arg;
        }
        pthread_mutex_unlock(&l->mu);
    }
    if (result != MUTEXD_OK) {
        abandon(l);
        goto out;
    }
    *lock = l;
out:
    mutexd_lease_clear(&lease);
    mutexd_error_clear(&scratch);
    return result;
}

/* ---- Asking a lock ------------------------------------------------------------------------ */

/* The mutex of a lock asked through a const pointer: asking changes nothing. */
static pthread_mutex_t *mutex_of(const mutexd_lock *l)
{
    return (pthread_mutex_t *)&l->mu;
}

int mutexd_lock_held(const mutexd_lock *lock)
{
    if (lock == NULL)
        return 0;
    pthread_mutex_lock(mutex_of(lock));
    int held = holds(lock);
    pthread_mutex_unlock(mutex_of(lock));
    return held;
}

int64_t mutexd_lock_remaining_ms(const mutexd_lock *lock)
{
    if (lock == NULL)
        return 0;
    pthread_mutex_lock(mutex_of(lock));
    int64_t left = holds(lock) ? earliest(lock) - now_ms() : 0;
    pthread_mutex_unlock(mutex_of(lock));
    return left > 0 ? left : 0;
}

int mutexd_lock_wait_lost(mutexd_lock *lock, int64_t timeout_ms)
{
    if (lock == NULL)
        return 1;
    int64_t end = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;
    pthread_mutex_lock(&lock->mu);
    for (;;) {
        if (!holds(lock))
            break;
        int64_t now = now_ms();
        if (end >= 0 && now >= end)
            break;
        /* Woken by the thread when it finds the lock lost; the deadline is looked at here
         * too, in case the thread is late. */
        int64_t wake = earliest(lock);
        wait_until(lock, end >= 0 ? min64(end, wake) : wake);
    }
    int lost = !holds(lock);
    pthread_mutex_unlock(&lock->mu);
    return lost;
}

mutexd_result mutexd_lock_status(const mutexd_lock *lock, struct mutexd_error *error)
{
    struct mutexd_error scratch = {0};
    struct mutexd_error *err = error != NULL ? error : &scratch;
    mutexd_error_clear(err);
    if (lock == NULL) {
        set_message(err, "no lock");
        mutexd_error_clear(&scratch);
        return MUTEXD_ERR_ARG;
    }
    mutexd_result result = MUTEXD_OK;
    pthread_mutex_lock(mutex_of(lock));
    if (lock->lost) {
        error_copy(err, &lock->why);
        result = MUTEXD_LOST;
    } else if (!holds(lock)) {
        /* Past the deadline, and the thread has not said so yet. */
        set_message(err, "no renewal succeeded before the lock's deadline (%s)", not_renewed(lock));
        result = MUTEXD_LOST;
    }
    pthread_mutex_unlock(mutex_of(lock));
    mutexd_error_clear(&scratch);
    return result;
}

size_t mutexd_lock_count(const mutexd_lock *lock)
{
    return lock != NULL ? lock->n : 0;
}

const char *mutexd_lock_resource(const mutexd_lock *lock, size_t i)
{
    return lock != NULL && i < lock->n ? lock->parts[i].resource : NULL;
}

uint64_t mutexd_lock_fencing_token(const mutexd_lock *lock, size_t i)
{
    return lock != NULL && i < lock->n ? lock->parts[i].fencing_token : 0;
}

const char *mutexd_lock_lease_id(const mutexd_lock *lock, size_t i)
{
    return lock != NULL && i < lock->n ? lock->parts[i].lease_id : NULL;
}
