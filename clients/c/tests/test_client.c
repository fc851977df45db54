/*
 * The library against a real mutexd: every call, and every error code a real server gives
 * on demand. Run through with-server.sh, which starts a fresh server for each case
 * (--min-ttl-ms 500) and exports MUTEXD_URL; the too_many_waiters case gets a server with
 * --max-waiters 1, the auth_ cases one with the tokens of tests/auth-tokens. The cases of
 * several servers put a dead port, or a fake_server.c that drops the answers, before it.
 */
#include "testing.h"

#include <pthread.h>
#include <unistd.h>

#include "fake_server.h"
#include "mutexd.h"

static mutexd_client *connect_with(const char *token)
{
    const char *url = getenv("MUTEXD_URL");
    if (url == NULL)
        fail_msg("MUTEXD_URL is not set: run this through with-server.sh");
    mutexd_client *c = NULL;
    struct mutexd_client_options o = {.token = token, .request_timeout_ms = 10000};
    assert_int_equal(mutexd_client_new(&c, url, &o), MUTEXD_OK);
    return c;
}

static mutexd_client *connect_server(void)
{
    return connect_with(NULL);
}

static int is_uuid(const char *s)
{
    if (s == NULL || strlen(s) != 36)
        return 0;
    for (int i = 0; i < 36; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : strchr("0123456789abcdef", s[i]) == NULL)
            return 0;
    }
    return 1;
}

static void acquire_grants_a_lease_with_every_field(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options o = {
        .owner = "worker-1", .ttl_ms = 5000, .metadata = "{\"addr\":\"10.0.0.1:8080\"}"};
    assert_int_equal(mutexd_acquire(c, "jobs/nightly-report", &o, &l, &e), MUTEXD_OK);
    assert_string_equal(l.resource, "jobs/nightly-report");
    assert_true(is_uuid(l.lease_id));
    assert_string_equal(l.owner, "worker-1");
    assert_true(l.fencing_token >= 1);
    assert_int_equal(l.ttl_ms, 5000);
    assert_in_range(l.expires_in_ms, 4000, 5000);
    assert_non_null(l.acquired_at);
    assert_non_null(l.renewed_at);
    assert_string_equal(l.metadata, "{\"addr\":\"10.0.0.1:8080\"}");
    assert_non_null(strstr(l.json, l.lease_id));
    /* A successful call leaves the error empty. */
    assert_null(e.message);
    assert_int_equal(e.status, 0);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void acquire_without_options_uses_the_defaults(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    assert_int_equal(mutexd_acquire(c, "defaults", NULL, &l, NULL), MUTEXD_OK);
    assert_int_equal(l.ttl_ms, 15000);
    assert_true(is_uuid(l.lease_id));
    char want[64];
    snprintf(want, sizeof(want), ":%ld", (long)getpid());
    assert_non_null(strstr(l.owner, want));
    assert_null(l.metadata);
    /* The lease may also be left out (the caller then knows only what it proposed). */
    assert_int_equal(mutexd_acquire(c, "defaults-2", NULL, NULL, NULL), MUTEXD_OK);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void acquire_held_names_the_holder_and_when_to_retry(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0}, other = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options o = {.owner = "first", .ttl_ms = 3000};
    assert_int_equal(mutexd_acquire(c, "r", &o, &l, &e), MUTEXD_OK);
    o.owner = "second";
    assert_int_equal(mutexd_acquire(c, "r", &o, &other, &e), MUTEXD_HELD);
    assert_int_equal(e.status, 409);
    assert_string_equal(e.code, "lease_held");
    assert_non_null(e.message);
    assert_int_equal(e.has_holder, 1);
    assert_string_equal(e.holder.owner, "first");
    assert_true(e.holder.fencing_token == l.fencing_token);
    assert_in_range(e.holder.expires_in_ms, 1, 3000);
    assert_in_range(e.retry_after_s, 1, 3);
    assert_non_null(e.request_id);
    assert_non_null(strstr(e.body, "\"lease_held\""));
    assert_false(mutexd_error_is_temporary(MUTEXD_HELD, &e));
    assert_null(other.lease_id); /* a failed call leaves its output alone */
    mutexd_error_clear(&e);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void acquire_again_with_the_same_lease_id_is_idempotent(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    char id[MUTEXD_LEASE_ID_LEN + 1];
    assert_int_equal(mutexd_new_lease_id(id), MUTEXD_OK);
    assert_true(is_uuid(id));
    assert_true(id[14] == '4');
    struct mutexd_lease a = {0}, b = {0};
    struct mutexd_acquire_options o = {.owner = "w", .ttl_ms = 2000, .lease_id = id};
    assert_int_equal(mutexd_acquire(c, "idem", &o, &a, NULL), MUTEXD_OK);
    o.ttl_ms = 4000;
    assert_int_equal(mutexd_acquire(c, "idem", &o, &b, NULL), MUTEXD_OK);
    assert_string_equal(a.lease_id, id);
    assert_string_equal(b.lease_id, id);
    assert_true(a.fencing_token == b.fencing_token);
    assert_int_equal(b.ttl_ms, 4000);
    mutexd_lease_clear(&a);
    mutexd_lease_clear(&b);
    mutexd_client_free(c);
}

struct waiter {
    const char *resource;
    int64_t wait_ms;
    mutexd_result result;
    struct mutexd_lease lease;
    struct mutexd_error error;
};

/* On its own thread, with its own client: one client per thread. */
static void *wait_for_lease(void *arg)
{
    struct waiter *w = arg;
    mutexd_client *c = connect_server();
    struct mutexd_acquire_options o = {.owner = "waiter", .ttl_ms = 5000, .wait_ms = w->wait_ms};
    w->result = mutexd_acquire(c, w->resource, &o, &w->lease, &w->error);
    mutexd_client_free(c);
    return NULL;
}

/* Polls until `resource` has `n` waiters. */
static void await_waiters(mutexd_client *c, const char *resource, int64_t n)
{
    struct mutexd_state s = {0};
    for (int i = 0; i < 200; i++) {
        assert_int_equal(mutexd_get(c, resource, &s, NULL), MUTEXD_OK);
        if (s.waiters == n)
            break;
        test_sleep_ms(10);
    }
    assert_int_equal(s.waiters, n);
    mutexd_state_clear(&s);
}

static void acquire_waits_in_line_until_released(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    struct mutexd_acquire_options o = {.owner = "holder", .ttl_ms = 10000};
    assert_int_equal(mutexd_acquire(c, "line", &o, &l, NULL), MUTEXD_OK);
    struct waiter w = {.resource = "line", .wait_ms = 10000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_lease, &w), 0);
    await_waiters(c, "line", 1);
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_release(c, "line", l.lease_id, NULL), MUTEXD_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.result, MUTEXD_OK);
    assert_true(test_now_ms() - t0 < 2000);
    assert_string_equal(w.lease.owner, "waiter");
    assert_true(w.lease.fencing_token > l.fencing_token);
    mutexd_lease_clear(&w.lease);
    mutexd_error_clear(&w.error);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void acquire_wait_that_runs_out_is_held(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_acquire_options o = {.owner = "holder", .ttl_ms = 10000};
    assert_int_equal(mutexd_acquire(c, "busy", &o, NULL, NULL), MUTEXD_OK);
    struct mutexd_error e = {0};
    o.wait_ms = 400;
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_acquire(c, "busy", &o, NULL, &e), MUTEXD_HELD);
    assert_in_range(test_now_ms() - t0, 350, 3000);
    assert_string_equal(e.holder.owner, "holder");
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

static void too_many_waiters(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_acquire_options o = {.owner = "holder", .ttl_ms = 10000};
    assert_int_equal(mutexd_acquire(c, "crowded", &o, NULL, NULL), MUTEXD_OK);
    struct waiter w = {.resource = "crowded", .wait_ms = 1500};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_lease, &w), 0);
    await_waiters(c, "crowded", 1);
    struct mutexd_error e = {0};
    o.wait_ms = 1000;
    mutexd_result r = mutexd_acquire(c, "crowded", &o, NULL, &e);
    assert_int_equal(r, MUTEXD_ERR_API);
    assert_int_equal(e.status, 429);
    assert_string_equal(e.code, "too_many_waiters");
    assert_true(mutexd_error_is_temporary(r, &e));
    pthread_join(t, NULL);
    assert_int_equal(w.result, MUTEXD_HELD);
    mutexd_error_clear(&w.error);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

static void renew_extends_and_replaces_metadata_in_place(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    struct mutexd_acquire_options o = {.owner = "w", .ttl_ms = 1000, .metadata = "{\"v\":1}"};
    assert_int_equal(mutexd_acquire(c, "renewed", &o, &l, NULL), MUTEXD_OK);
    uint64_t token = l.fencing_token;
    test_sleep_ms(300);
    /* Resource and lease id point into the lease being replaced. */
    struct mutexd_renew_options ro = {.ttl_ms = 3000, .metadata = "{\"v\":2}"};
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, &ro, &l, NULL), MUTEXD_OK);
    assert_string_equal(l.resource, "renewed");
    assert_true(l.fencing_token == token);
    assert_int_equal(l.ttl_ms, 3000);
    assert_in_range(l.expires_in_ms, 2500, 3000);
    assert_string_equal(l.metadata, "{\"v\":2}");
    /* Without options: the lease's own TTL, the metadata kept. */
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, &l, NULL), MUTEXD_OK);
    assert_int_equal(l.ttl_ms, 3000);
    assert_string_equal(l.metadata, "{\"v\":2}");
    /* Past its TTL, with nothing granted since, the lease is still renewable. */
    struct mutexd_renew_options shortest = {.ttl_ms = 500};
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, &shortest, &l, NULL), MUTEXD_OK);
    test_sleep_ms(700);
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, &l, NULL), MUTEXD_OK);
    assert_true(l.fencing_token == token);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void the_lease_deadline_is_checked_on_the_clock(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    assert_false(mutexd_lease_held(&l)); /* no deadline: not held */
    assert_false(mutexd_lease_held(NULL));
    assert_int_equal(mutexd_safety_margin_ms(1000), 20);
    assert_int_equal(mutexd_safety_margin_ms(600000), 1000);
    int64_t before = mutexd_monotonic_ms();
    struct mutexd_acquire_options o = {.owner = "w", .ttl_ms = 1000};
    assert_int_equal(mutexd_acquire(c, "deadline", &o, &l, NULL), MUTEXD_OK);
    int64_t after = mutexd_monotonic_ms();
    /* From when the request was sent, less the margin. */
    assert_in_range(l.deadline_ms, before + l.expires_in_ms - 20, after + l.expires_in_ms - 20);
    assert_true(mutexd_lease_held(&l));
    assert_in_range(mutexd_lease_remaining_ms(&l), 1, 980);
    /* Nothing runs in the background: after the deadline the check alone says so. */
    test_sleep_ms(l.deadline_ms - mutexd_monotonic_ms() + 10);
    assert_false(mutexd_lease_held(&l));
    assert_int_equal(mutexd_lease_remaining_ms(&l), 0);
    /* A renewal counts from its own sending. */
    before = mutexd_monotonic_ms();
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, &l, NULL), MUTEXD_OK);
    assert_true(mutexd_lease_held(&l));
    assert_true(l.deadline_ms >= before + l.expires_in_ms - 20);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void renew_after_a_break_is_lost(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    assert_int_equal(mutexd_acquire(c, "broken", NULL, &l, NULL), MUTEXD_OK);
    int broken = -1;
    assert_int_equal(mutexd_break(c, "broken", "test", &broken, NULL), MUTEXD_OK);
    assert_int_equal(broken, 1);
    struct mutexd_error e = {0};
    struct mutexd_lease kept = l;
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e), MUTEXD_LOST);
    assert_int_equal(e.status, 409);
    assert_string_equal(e.code, "lease_lost");
    assert_ptr_equal(l.lease_id, kept.lease_id); /* untouched */
    mutexd_error_clear(&e);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void release_frees_once_then_is_lost(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    assert_int_equal(mutexd_acquire(c, "released", NULL, &l, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_release(c, "released", l.lease_id, NULL), MUTEXD_OK);
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "released", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.held, 0);
    struct mutexd_error e = {0};
    assert_int_equal(mutexd_release(c, "released", l.lease_id, &e), MUTEXD_LOST);
    assert_string_equal(e.code, "lease_lost");
    /* A lost release leaves whoever holds it now in place. */
    struct mutexd_lease next = {0};
    assert_int_equal(mutexd_acquire(c, "released", NULL, &next, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_release(c, "released", l.lease_id, &e), MUTEXD_LOST);
    assert_int_equal(mutexd_get(c, "released", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.held, 1);
    assert_true(s.holder.fencing_token == next.fencing_token);
    mutexd_state_clear(&s);
    mutexd_error_clear(&e);
    mutexd_lease_clear(&l);
    mutexd_lease_clear(&next);
    mutexd_client_free(c);
}

static void break_says_whether_it_ended_a_lease(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    int broken = -1;
    assert_int_equal(mutexd_break(c, "nothing-here", NULL, &broken, NULL), MUTEXD_OK);
    assert_int_equal(broken, 0);
    struct mutexd_lease l = {0};
    assert_int_equal(mutexd_acquire(c, "b", NULL, &l, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_break(c, "b", "maintenance", &broken, NULL), MUTEXD_OK);
    assert_int_equal(broken, 1);
    assert_int_equal(mutexd_break(c, "b", NULL, NULL, NULL), MUTEXD_OK);
    struct mutexd_lease after = {0};
    assert_int_equal(mutexd_acquire(c, "b", NULL, &after, NULL), MUTEXD_OK);
    assert_true(after.fencing_token > l.fencing_token);
    mutexd_lease_clear(&l);
    mutexd_lease_clear(&after);
    mutexd_client_free(c);
}

static void get_shows_free_and_held_without_the_lease_id(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "never/used", &s, NULL), MUTEXD_OK);
    assert_string_equal(s.resource, "never/used");
    assert_int_equal(s.held, 0);
    assert_null(s.holder.owner);
    assert_int_equal(s.waiters, 0);

    struct mutexd_lease l = {0};
    struct mutexd_acquire_options o = {.owner = "me", .ttl_ms = 4000, .metadata = "{\"a\":[1]}"};
    assert_int_equal(mutexd_acquire(c, "shown", &o, &l, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_get(c, "shown", &s, NULL), MUTEXD_OK); /* reused: freed, refilled */
    assert_int_equal(s.held, 1);
    assert_string_equal(s.holder.owner, "me");
    assert_true(s.holder.fencing_token == l.fencing_token);
    assert_int_equal(s.holder.ttl_ms, 4000);
    assert_in_range(s.holder.expires_in_ms, 1, 4000);
    assert_non_null(s.holder.acquired_at);
    assert_string_equal(s.holder.metadata, "{\"a\":[1]}");
    assert_true(s.index > 0);
    assert_null(strstr(s.json, l.lease_id));
    assert_non_null(strstr(s.json, "\"state\":\"held\""));
    mutexd_state_clear(&s);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

struct changer {
    const char *resource;
    const char *lease_id;
};

static void *release_later(void *arg)
{
    struct changer *ch = arg;
    test_sleep_ms(300);
    mutexd_client *c = connect_server();
    assert_int_equal(mutexd_release(c, ch->resource, ch->lease_id, NULL), MUTEXD_OK);
    mutexd_client_free(c);
    return NULL;
}

static void watch_returns_at_the_next_change(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    assert_int_equal(mutexd_acquire(c, "watched", NULL, &l, NULL), MUTEXD_OK);
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "watched", &s, NULL), MUTEXD_OK);
    uint64_t index = s.index;
    struct changer ch = {"watched", l.lease_id};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_later, &ch), 0);
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_watch(c, "watched", index, 10000, &s, NULL), MUTEXD_OK);
    int64_t took = test_now_ms() - t0;
    pthread_join(t, NULL);
    assert_in_range(took, 200, 5000);
    assert_true(s.index != index);
    assert_int_equal(s.held, 0);
    mutexd_state_clear(&s);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void watch_without_a_change_answers_after_the_wait(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    struct mutexd_acquire_options o = {.ttl_ms = 10000};
    assert_int_equal(mutexd_acquire(c, "quiet", &o, &l, NULL), MUTEXD_OK);
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "quiet", &s, NULL), MUTEXD_OK);
    uint64_t index = s.index;
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_watch(c, "quiet", index, 600, &s, NULL), MUTEXD_OK);
    assert_in_range(test_now_ms() - t0, 550, 5000);
    assert_true(s.index == index);
    assert_int_equal(s.held, 1);
    /* An index that already differs answers at once. */
    t0 = test_now_ms();
    assert_int_equal(mutexd_watch(c, "quiet", index + 1000, 5000, &s, NULL), MUTEXD_OK);
    assert_true(test_now_ms() - t0 < 1000);
    mutexd_state_clear(&s);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

static void list_pages_through_a_prefix_with_cursors(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    static const char *const names[] = {"jobs/e", "jobs/a", "jobs/c", "jobs/b", "jobs/d"};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(mutexd_acquire(c, names[i], NULL, NULL, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_acquire(c, "other/x", NULL, NULL, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_acquire(c, "jobsx", NULL, NULL, NULL), MUTEXD_OK);

    struct mutexd_page page = {0};
    struct mutexd_list_options o = {.prefix = "jobs/", .limit = 2};
    char seen[64] = "";
    int pages = 0;
    do {
        assert_int_equal(mutexd_list(c, &o, &page, NULL), MUTEXD_OK);
        assert_true(page.count <= 2);
        for (size_t i = 0; i < page.count; i++) {
            assert_int_equal(page.resources[i].held, 1);
            assert_non_null(page.resources[i].holder.owner);
            assert_non_null(strstr(page.json, page.resources[i].resource));
            strcat(seen, page.resources[i].resource);
            strcat(seen, " ");
        }
        o.cursor = page.next_cursor; /* read before *page is replaced, as the header says */
        pages++;
    } while (o.cursor != NULL && pages < 10);
    assert_string_equal(seen, "jobs/a jobs/b jobs/c jobs/d jobs/e ");
    assert_in_range(pages, 3, 4);

    /* Defaults: every held resource, in name order. */
    struct mutexd_page all = {0};
    assert_int_equal(mutexd_list(c, NULL, &all, NULL), MUTEXD_OK);
    assert_int_equal(all.count, 7);
    assert_string_equal(all.resources[0].resource, "jobs/a");
    assert_string_equal(all.resources[6].resource, "other/x");
    assert_null(all.next_cursor);
    mutexd_page_clear(&all);
    mutexd_page_clear(&page);
    mutexd_client_free(c);
}

/* ---- Watching a prefix, events, whoami ------------------------------------------------------ */

static void *acquire_later(void *arg)
{
    const char *const *names = arg;
    test_sleep_ms(300);
    mutexd_client *c = connect_server();
    for (size_t i = 0; names[i] != NULL; i++) {
        assert_int_equal(mutexd_acquire(c, names[i], NULL, NULL, NULL), MUTEXD_OK);
        test_sleep_ms(300);
    }
    mutexd_client_free(c);
    return NULL;
}

static void list_watch_wakes_on_a_change_under_its_prefix_only(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    assert_int_equal(mutexd_acquire(c, "jobs/a", NULL, NULL, NULL), MUTEXD_OK);
    struct mutexd_list_options o = {.prefix = "jobs/"};
    struct mutexd_page page = {0};
    uint64_t index = 0, at = 0;
    /* index 0, wait 0: the list now, and the index to watch from. */
    assert_int_equal(mutexd_list_watch(c, &o, 0, 0, &page, &index, NULL), MUTEXD_OK);
    assert_int_equal(page.count, 1);
    assert_true(index >= page.resources[0].index);

    /* A change elsewhere does not end the wait; one under the prefix does. */
    static const char *const names[] = {"other/x", "jobs/b", NULL};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, acquire_later, (void *)names), 0);
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_list_watch(c, &o, index, 10000, &page, &at, NULL), MUTEXD_OK);
    int64_t took = test_now_ms() - t0;
    pthread_join(t, NULL);
    assert_in_range(took, 500, 5000);
    if (page.count == 1) {
        /* The server may answer a moment before the grant reads in the list. */
        test_sleep_ms(100);
        assert_int_equal(mutexd_list_watch(c, &o, index, 0, &page, &at, NULL), MUTEXD_OK);
    }
    assert_int_equal(page.count, 2);
    assert_string_equal(page.resources[1].resource, "jobs/b");
    assert_true(at > index);
    assert_non_null(strstr(page.json, "\"index\""));

    /* Nothing changes: the wait runs out, and the list is as it was. */
    t0 = test_now_ms();
    assert_int_equal(mutexd_list_watch(c, &o, at, 500, &page, &index, NULL), MUTEXD_OK);
    assert_in_range(test_now_ms() - t0, 450, 5000);
    assert_int_equal(page.count, 2);
    assert_true(index >= at);

    struct mutexd_error e = {0};
    assert_int_equal(mutexd_list_watch(c, &o, at, -1, &page, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(page.count, 2); /* left as it was */
    mutexd_error_clear(&e);
    mutexd_page_clear(&page);
    mutexd_client_free(c);
}

static void events_come_in_order_and_follow_with_next(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l = {0};
    struct mutexd_acquire_options ao = {.owner = "alice", .limit = 2};
    assert_int_equal(mutexd_acquire(c, "ev/a", &ao, &l, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, NULL, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_release(c, l.resource, l.lease_id, NULL), MUTEXD_OK);
    struct mutexd_acquire_options so = {.owner = "bob", .shared = 1};
    assert_int_equal(mutexd_acquire(c, "other/b", &so, NULL, NULL), MUTEXD_OK);

    struct mutexd_event_page ev = {0};
    assert_int_equal(mutexd_events(c, 0, NULL, &ev, NULL), MUTEXD_OK);
    assert_int_equal(ev.count, 4);
    assert_int_equal(ev.truncated, 0);
    static const char *const types[] = {"granted", "renewed", "released", "granted"};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(ev.events[i].type, types[i]);
        assert_non_null(ev.events[i].at);
        assert_non_null(ev.events[i].json);
        assert_null(strstr(ev.events[i].json, l.lease_id));
        if (i > 0)
            assert_true(ev.events[i].index > ev.events[i - 1].index);
    }
    assert_string_equal(ev.events[0].resource, "ev/a");
    assert_string_equal(ev.events[0].owner, "alice");
    assert_int_equal(ev.events[0].fencing_token, l.fencing_token);
    assert_int_equal(ev.events[0].limit, 2);
    assert_int_equal(ev.events[3].shared, 1);
    assert_int_equal(ev.next, ev.events[3].index);
    uint64_t first = ev.events[0].index, next = ev.next;

    /* after, prefix and limit. */
    struct mutexd_events_options o = {.prefix = "ev/", .limit = 1};
    assert_int_equal(mutexd_events(c, first, &o, &ev, NULL), MUTEXD_OK);
    assert_int_equal(ev.count, 1);
    assert_string_equal(ev.events[0].type, "renewed");
    assert_int_equal(ev.next, ev.events[0].index);

    /* Following: a wait from `next` ends with a later event. */
    static const char *const names[] = {"ev/later", NULL};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, acquire_later, (void *)names), 0);
    struct mutexd_events_options fo = {.prefix = "ev/", .wait_ms = 10000};
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_events(c, next, &fo, &ev, NULL), MUTEXD_OK);
    pthread_join(t, NULL);
    assert_in_range(test_now_ms() - t0, 200, 5000);
    assert_int_equal(ev.count, 1);
    assert_string_equal(ev.events[0].resource, "ev/later");
    assert_true(ev.next > next);

    /* A wait that runs out answers no event. */
    fo.wait_ms = 400;
    next = ev.next;
    assert_int_equal(mutexd_events(c, next, &fo, &ev, NULL), MUTEXD_OK);
    assert_int_equal(ev.count, 0);
    assert_true(ev.next >= next);
    mutexd_event_page_clear(&ev);
    mutexd_event_page_clear(&ev); /* twice is fine */
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

/* With the server's --event-history 2. */
static void events_dropped_are_truncated(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    static const char *const names[] = {"t/1", "t/2", "t/3", "t/4", "t/5"};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(mutexd_acquire(c, names[i], NULL, NULL, NULL), MUTEXD_OK);
    struct mutexd_event_page ev = {0};
    assert_int_equal(mutexd_events(c, 1, NULL, &ev, NULL), MUTEXD_OK);
    assert_int_equal(ev.truncated, 1);
    assert_int_equal(ev.count, 2);
    assert_string_equal(ev.events[0].resource, "t/4");
    assert_int_equal(mutexd_events(c, ev.next, NULL, &ev, NULL), MUTEXD_OK);
    assert_int_equal(ev.truncated, 0);
    assert_int_equal(ev.count, 0);
    mutexd_event_page_clear(&ev);
    mutexd_client_free(c);
}

static void whoami_without_authorization_has_every_scope(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_whoami who = {0};
    assert_int_equal(mutexd_whoami(c, &who, NULL), MUTEXD_OK);
    assert_null(who.name);
    assert_int_equal(who.scope_count, 4);
    assert_string_equal(who.scopes[0], "read");
    assert_true(mutexd_whoami_has_scope(&who, "admin"));
    assert_true(mutexd_whoami_has_scope(&who, "metrics"));
    assert_false(mutexd_whoami_has_scope(&who, "root"));
    assert_false(mutexd_whoami_has_scope(NULL, "read"));
    mutexd_whoami_clear(&who);
    mutexd_whoami_clear(NULL);
    assert_int_equal(mutexd_whoami(NULL, &who, NULL), MUTEXD_ERR_ARG);
    mutexd_client_free(c);
}

/* One request the server refuses, and what the error says. */
static void expect_refusal(mutexd_result r, struct mutexd_error *e, int status, const char *code,
                           const char *field)
{
    if (r != MUTEXD_ERR_API)
        fail_msg("%s: got %s (%s)", code, mutexd_result_name(r), e->message);
    assert_int_equal(e->status, status);
    assert_string_equal(e->code, code);
    if (field != NULL)
        assert_string_equal(e->field, field);
    else
        assert_null(e->field);
    assert_non_null(e->message);
    assert_non_null(e->request_id);
    assert_false(mutexd_error_is_temporary(r, e));
}

static void the_server_refuses_bad_input_with_its_codes(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_error e = {0};
    struct mutexd_lease l = {0};
    struct mutexd_acquire_options o = {0};

    static const char *const bad_names[] = {"a//b",   "/a",  "a/",  "a/./b",
                                            "a/../b", "a b", "a?b", "x%41"};
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        expect_refusal(mutexd_acquire(c, bad_names[i], NULL, &l, &e), &e, 400, "invalid_resource",
                       NULL);
        expect_refusal(mutexd_get(c, bad_names[i], NULL, &e), &e, 400, "invalid_resource", NULL);
    }
    char long_name[300];
    memset(long_name, 'n', 257);
    long_name[257] = '\0';
    expect_refusal(mutexd_get(c, long_name, NULL, &e), &e, 400, "invalid_resource", NULL);

    o.ttl_ms = 100;
    expect_refusal(mutexd_acquire(c, "r", &o, &l, &e), &e, 400, "invalid_ttl", "ttl_ms");
    o.ttl_ms = -1;
    expect_refusal(mutexd_acquire(c, "r", &o, &l, &e), &e, 400, "invalid_ttl", "ttl_ms");
    o.ttl_ms = 0;
    o.wait_ms = 400000;
    expect_refusal(mutexd_acquire(c, "r", &o, &l, &e), &e, 400, "invalid_wait", "wait_ms");
    o.wait_ms = 0;
    expect_refusal(mutexd_watch(c, "r", 0, 400000, NULL, &e), &e, 400, "invalid_wait", "wait_ms");
    o.lease_id = "not-a-uuid";
    expect_refusal(mutexd_acquire(c, "r", &o, &l, &e), &e, 400, "invalid_lease_id", "lease_id");
    o.lease_id = NULL;
    expect_refusal(mutexd_renew(c, "r", "nope", NULL, &l, &e), &e, 400, "invalid_lease_id",
                   "lease_id");
    expect_refusal(mutexd_release(c, "r", "nope", &e), &e, 400, "invalid_lease_id", "lease_id");
    o.owner = "bad\x01owner";
    expect_refusal(mutexd_acquire(c, "r", &o, &l, &e), &e, 400, "invalid_field", "owner");
    o.owner = "";
    expect_refusal(mutexd_acquire(c, "r", &o, &l, &e), &e, 400, "invalid_field", "owner");
    o.owner = NULL;
    char meta[6000];
    snprintf(meta, sizeof(meta), "{\"k\":\"%05000d\"}", 0);
    o.metadata = meta;
    expect_refusal(mutexd_acquire(c, "r", &o, &l, &e), &e, 400, "invalid_field", "metadata");
    o.metadata = NULL;
    struct mutexd_list_options lo = {.limit = 5000};
    expect_refusal(mutexd_list(c, &lo, NULL, &e), &e, 400, "invalid_field", "limit");
    lo.limit = -1;
    expect_refusal(mutexd_list(c, &lo, NULL, &e), &e, 400, "invalid_field", "limit");

    char *big = malloc(70001);
    memset(big, 'o', 70000);
    big[70000] = '\0';
    o.owner = big;
    expect_refusal(mutexd_acquire(c, "r", &o, &l, &e), &e, 413, "body_too_large", NULL);
    free(big);
    assert_null(l.lease_id);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

static void a_wrong_base_path_is_not_found(void **state)
{
    (void)state;
    char url[512];
    snprintf(url, sizeof(url), "%s/not-mutexd/", getenv("MUTEXD_URL"));
    mutexd_client *c = NULL;
    assert_int_equal(mutexd_client_new(&c, url, NULL), MUTEXD_OK);
    struct mutexd_error e = {0};
    expect_refusal(mutexd_get(c, "r", NULL, &e), &e, 404, "not_found", NULL);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

static void bad_arguments_are_caught_before_sending(void **state)
{
    (void)state;
    mutexd_client *c = NULL;
    struct mutexd_error e = {0};
    assert_int_equal(mutexd_client_new(&c, "ftp://x", NULL), MUTEXD_ERR_ARG);
    assert_null(c);
    assert_int_equal(mutexd_client_new(&c, NULL, NULL), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_client_new(NULL, "http://x", NULL), MUTEXD_ERR_ARG);
    struct mutexd_client_options bad_token = {.token = "a\r\nX-Evil: 1"};
    assert_int_equal(mutexd_client_new(&c, "http://x", &bad_token), MUTEXD_ERR_ARG);
    struct mutexd_client_options bad_timeout = {.request_timeout_ms = -1};
    assert_int_equal(mutexd_client_new(&c, "http://x", &bad_timeout), MUTEXD_ERR_ARG);

    c = connect_server();
    assert_int_equal(mutexd_acquire(NULL, "r", NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_non_null(e.message);
    assert_int_equal(mutexd_acquire(c, NULL, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_get(c, "", NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_watch(c, "", 0, 10, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_break(c, "", NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_list(NULL, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_renew(c, "r", NULL, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_release(c, "r", NULL, &e), MUTEXD_ERR_ARG);
    struct mutexd_acquire_options o = {.metadata = "[1]"};
    assert_int_equal(mutexd_acquire(c, "r", &o, NULL, &e), MUTEXD_ERR_ARG);
    assert_string_equal(e.message, "metadata must be a JSON object");
    o.metadata = "{\"a\":1} trailing";
    assert_int_equal(mutexd_acquire(c, "r", &o, NULL, &e), MUTEXD_ERR_ARG);
    struct mutexd_renew_options ro = {.metadata = "nope"};
    assert_int_equal(mutexd_renew(c, "r", "6ccb3e43-0489-4885-ac1c-bf894cffbd13", &ro, NULL, &e),
                     MUTEXD_ERR_ARG);
    /* Nothing was sent: the resource was never touched. */
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "r", &s, &e), MUTEXD_OK);
    assert_int_equal(s.held, 0);
    assert_null(e.message);
    mutexd_state_clear(&s);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
    mutexd_client_free(NULL);
}

static void result_names_and_empty_structs(void **state)
{
    (void)state;
    assert_string_equal(mutexd_result_name(MUTEXD_OK), "ok");
    assert_string_equal(mutexd_result_name(MUTEXD_HELD), "held");
    assert_string_equal(mutexd_result_name(MUTEXD_LOST), "lost");
    assert_string_equal(mutexd_result_name(MUTEXD_ERR_API), "api_error");
    assert_string_equal(mutexd_result_name(MUTEXD_ERR_TRANSPORT), "transport_error");
    assert_string_equal(mutexd_result_name(MUTEXD_ERR_PROTOCOL), "protocol_error");
    assert_string_equal(mutexd_result_name(MUTEXD_ERR_ARG), "invalid_argument");
    assert_string_equal(mutexd_result_name(MUTEXD_ERR_NOMEM), "out_of_memory");
    assert_string_equal(mutexd_result_name(MUTEXD_ERR_LIMIT_MISMATCH), "limit_mismatch");
    struct mutexd_lease l = {0};
    struct mutexd_state s = {0};
    struct mutexd_page p = {0};
    struct mutexd_error e = {0};
    mutexd_lease_clear(&l);
    mutexd_state_clear(&s);
    mutexd_page_clear(&p);
    mutexd_error_clear(&e);
    mutexd_lease_clear(NULL);
    mutexd_state_clear(NULL);
    mutexd_page_clear(NULL);
    mutexd_error_clear(NULL);
}

static void fencing_tokens_increase_with_every_grant(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    uint64_t last = 0;
    for (int i = 0; i < 10; i++) {
        struct mutexd_lease l = {0};
        assert_int_equal(mutexd_acquire(c, i % 2 ? "t/a" : "t/b", NULL, &l, NULL), MUTEXD_OK);
        assert_true(l.fencing_token > last);
        last = l.fencing_token;
        assert_int_equal(mutexd_release(c, l.resource, l.lease_id, NULL), MUTEXD_OK);
        mutexd_lease_clear(&l);
    }
    mutexd_client_free(c);
}

/* With the server's --auth-tokens tests/auth-tokens. */
static void auth_without_a_valid_token_is_unauthorized(void **state)
{
    (void)state;
    static const char *const tokens[] = {NULL, "not-a-token", ""};
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
        mutexd_client *c = connect_with(tokens[i]);
        struct mutexd_error e = {0};
        expect_refusal(mutexd_get(c, "jobs/a", NULL, &e), &e, 401, "unauthorized", NULL);
        expect_refusal(mutexd_acquire(c, "jobs/a", NULL, NULL, &e), &e, 401, "unauthorized", NULL);
        struct mutexd_list_options o = {.prefix = "jobs/"};
        expect_refusal(mutexd_list(c, &o, NULL, &e), &e, 401, "unauthorized", NULL);
        expect_refusal(mutexd_whoami(c, NULL, &e), &e, 401, "unauthorized", NULL);
        mutexd_error_clear(&e);
        mutexd_client_free(c);
    }
}

static void auth_scopes_and_prefixes_are_enforced(void **state)
{
    (void)state;
    mutexd_client *reader = connect_with("test-reader-token");
    mutexd_client *writer = connect_with("test-writer-token");
    mutexd_client *admin = connect_with("test-admin-token");
    struct mutexd_error e = {0};
    struct mutexd_lease l = {0};

    assert_int_equal(mutexd_get(reader, "jobs/a", NULL, &e), MUTEXD_OK);
    struct mutexd_whoami who = {0};
    assert_int_equal(mutexd_whoami(reader, &who, &e), MUTEXD_OK);
    assert_string_equal(who.name, "reader");
    assert_int_equal(who.scope_count, 1);
    assert_true(mutexd_whoami_has_scope(&who, "read"));
    assert_false(mutexd_whoami_has_scope(&who, "write"));
    assert_int_equal(mutexd_whoami(admin, &who, &e), MUTEXD_OK);
    assert_string_equal(who.name, "admin");
    assert_true(mutexd_whoami_has_scope(&who, "admin"));
    mutexd_whoami_clear(&who);
    struct mutexd_event_page ev = {0};
    struct mutexd_events_options eo = {.prefix = "jobs/"};
    assert_int_equal(mutexd_events(writer, 0, &eo, &ev, &e), MUTEXD_OK);
    mutexd_event_page_clear(&ev);
    expect_refusal(mutexd_acquire(reader, "jobs/a", NULL, NULL, &e), &e, 403, "forbidden", NULL);
    assert_int_equal(mutexd_acquire(writer, "jobs/a", NULL, &l, &e), MUTEXD_OK);
    expect_refusal(mutexd_acquire(writer, "other/a", NULL, NULL, &e), &e, 403, "forbidden", NULL);
    expect_refusal(mutexd_get(writer, "other/a", NULL, &e), &e, 403, "forbidden", NULL);
    expect_refusal(mutexd_break(writer, "jobs/a", NULL, NULL, &e), &e, 403, "forbidden", NULL);
    assert_int_equal(mutexd_renew(writer, l.resource, l.lease_id, NULL, &l, &e), MUTEXD_OK);
    int broken = 0;
    assert_int_equal(mutexd_break(admin, "jobs/a", "test", &broken, &e), MUTEXD_OK);
    assert_int_equal(broken, 1);
    assert_int_equal(mutexd_renew(writer, l.resource, l.lease_id, NULL, &l, &e), MUTEXD_LOST);
    mutexd_error_clear(&e);
    mutexd_lease_clear(&l);
    mutexd_client_free(reader);
    mutexd_client_free(writer);
    mutexd_client_free(admin);
}

static void a_dead_server_first_is_passed_over(void **state)
{
    (void)state;
    const char *live = getenv("MUTEXD_URL");
    char dead[64], urls[256];
    fake_closed_url(dead, sizeof(dead));
    snprintf(urls, sizeof(urls), "%s,%s", dead, live);
    mutexd_client *c = NULL;
    struct mutexd_client_options o = {.request_timeout_ms = 10000};
    assert_int_equal(mutexd_client_new(&c, urls, &o), MUTEXD_OK);
    assert_string_equal(mutexd_client_url(c), dead);
    struct mutexd_lease l = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options ao = {.owner = "w", .ttl_ms = 3000};
    assert_int_equal(mutexd_acquire(c, "ha/r", &ao, &l, &e), MUTEXD_OK);
    assert_null(e.message);
    assert_string_equal(mutexd_client_url(c), live);
    assert_int_equal(mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e), MUTEXD_OK);
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "ha/r", &s, &e), MUTEXD_OK);
    assert_true(s.held && s.holder.fencing_token == l.fencing_token);
    assert_int_equal(mutexd_release(c, l.resource, l.lease_id, &e), MUTEXD_OK);
    mutexd_state_clear(&s);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);

    /* The same through the list constructor, and with the dead one last. */
    const char *list[] = {live, dead};
    assert_int_equal(mutexd_client_new_list(&c, list, 2, &o), MUTEXD_OK);
    assert_int_equal(mutexd_acquire(c, "ha/r", &ao, &l, &e), MUTEXD_OK);
    assert_string_equal(mutexd_client_url(c), live);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
}

/* The first server carries the acquire out and its answer is lost on the way back: the
 * second, asked with the same proposed lease id, gives that same lease. */
static void an_acquire_whose_answer_was_lost_gets_the_same_lease(void **state)
{
    (void)state;
    const char *live = getenv("MUTEXD_URL");
    struct fake_server *lossy = fake_start_swallowing(live);
    assert_non_null(lossy);
    char urls[256];
    snprintf(urls, sizeof(urls), "%s,%s", fake_url(lossy), live);
    mutexd_client *c = NULL;
    struct mutexd_client_options o = {.request_timeout_ms = 10000};
    assert_int_equal(mutexd_client_new(&c, urls, &o), MUTEXD_OK);
    struct mutexd_lease l = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options ao = {.owner = "w", .ttl_ms = 5000};
    mutexd_result r = mutexd_acquire(c, "ha/lost-answer", &ao, &l, &e);
    if (r != MUTEXD_OK)
        fail_msg("acquire: %s: %s", mutexd_result_name(r), e.message);
    assert_int_equal(fake_requests(lossy), 1);
    char *first = fake_last_answer(lossy);
    assert_non_null(first);
    assert_non_null(strstr(first, " 200 "));
    char want[64];
    snprintf(want, sizeof(want), "\"fencing_token\":%llu,", (unsigned long long)l.fencing_token);
    if (strstr(first, want) == NULL || strstr(first, l.lease_id) == NULL)
        fail_msg("the lease granted first:\n%s\nis not the one given: %s", first, l.json);
    free(first);
    assert_string_equal(mutexd_client_url(c), live);
    mutexd_lease_clear(&l);
    mutexd_client_free(c);
    fake_stop(lossy);
}

/* ---- Semaphores and shared leases ---------------------------------------------------------- */

static void semaphore_grants_up_to_its_limit(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease l[4] = {{0}};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options o = {.owner = "enc", .ttl_ms = 5000, .limit = 3};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(mutexd_acquire(c, "jobs/encoder", &o, &l[i], &e), MUTEXD_OK);
        assert_int_equal(l[i].limit, 3);
        assert_int_equal(l[i].shared, 0);
        assert_true(i == 0 || l[i].fencing_token > l[i - 1].fencing_token);
        assert_true(i == 0 || strcmp(l[i].lease_id, l[i - 1].lease_id) != 0);
    }
    /* Full: held, naming the holder whose lease ends first. */
    assert_int_equal(mutexd_acquire(c, "jobs/encoder", &o, &l[3], &e), MUTEXD_HELD);
    assert_int_equal(e.has_holder, 1);
    assert_true(e.holder.fencing_token == l[0].fencing_token);
    assert_null(l[3].lease_id);

    /* Another limit, and no limit (which names 1), while it has holders. */
    struct mutexd_acquire_options other = {.owner = "enc", .limit = 2};
    assert_int_equal(mutexd_acquire(c, "jobs/encoder", &other, &l[3], &e),
                     MUTEXD_ERR_LIMIT_MISMATCH);
    assert_int_equal(e.status, 409);
    assert_string_equal(e.code, "limit_mismatch");
    assert_int_equal(e.limit, 3);
    assert_false(mutexd_error_is_temporary(MUTEXD_ERR_LIMIT_MISMATCH, &e));
    assert_int_equal(mutexd_acquire(c, "jobs/encoder", NULL, &l[3], &e), MUTEXD_ERR_LIMIT_MISMATCH);
    assert_int_equal(e.limit, 3);

    /* Every holder, oldest grant first; holder is the first. */
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "jobs/encoder", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.held, 1);
    assert_int_equal(s.limit, 3);
    assert_int_equal(s.holder_count, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_true(s.holders[i].fencing_token == l[i].fencing_token);
        assert_string_equal(s.holders[i].owner, "enc");
        assert_int_equal(s.holders[i].shared, 0);
        assert_int_equal(s.holders[i].ttl_ms, 5000);
        assert_null(strstr(s.json, l[i].lease_id));
    }
    assert_true(s.holder.fencing_token == l[0].fencing_token);

    /* Releasing one frees one place; renewing one keeps its token. */
    assert_int_equal(mutexd_release(c, "jobs/encoder", l[1].lease_id, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_renew(c, "jobs/encoder", l[2].lease_id, NULL, &l[2], NULL), MUTEXD_OK);
    assert_int_equal(l[2].limit, 3);
    assert_int_equal(mutexd_acquire(c, "jobs/encoder", &o, &l[3], &e), MUTEXD_OK);
    assert_true(l[3].fencing_token > l[2].fencing_token);

    /* The list shows the same. */
    struct mutexd_list_options lo = {.prefix = "jobs/"};
    struct mutexd_page p = {0};
    assert_int_equal(mutexd_list(c, &lo, &p, NULL), MUTEXD_OK);
    assert_int_equal(p.count, 1);
    assert_int_equal(p.resources[0].limit, 3);
    assert_int_equal(p.resources[0].holder_count, 3);

    /* Once free, the next acquire sets the limit anew. */
    for (int i = 0; i < 4; i++) {
        if (i != 1)
            assert_int_equal(mutexd_release(c, "jobs/encoder", l[i].lease_id, NULL), MUTEXD_OK);
    }
    assert_int_equal(mutexd_get(c, "jobs/encoder", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.held, 0);
    assert_int_equal(s.limit, 1);
    assert_int_equal(s.holder_count, 0);
    assert_null(s.holders);
    assert_int_equal(mutexd_acquire(c, "jobs/encoder", &other, &l[0], &e), MUTEXD_OK);
    assert_int_equal(l[0].limit, 2);

    mutexd_page_clear(&p);
    mutexd_state_clear(&s);
    mutexd_error_clear(&e);
    for (int i = 0; i < 4; i++)
        mutexd_lease_clear(&l[i]);
    mutexd_client_free(c);
}

static void shared_leases_hold_together_and_keep_a_writer_out(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease r1 = {0}, r2 = {0}, w = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options reader = {.owner = "reader", .ttl_ms = 5000, .shared = 1};
    assert_int_equal(mutexd_acquire(c, "cache", &reader, &r1, &e), MUTEXD_OK);
    assert_int_equal(r1.shared, 1);
    assert_int_equal(r1.limit, 1);
    assert_int_equal(mutexd_acquire(c, "cache", &reader, &r2, &e), MUTEXD_OK);
    assert_true(r2.fencing_token > r1.fencing_token);

    /* A writer waits for every reader. */
    struct mutexd_acquire_options writer = {.owner = "writer", .ttl_ms = 5000};
    assert_int_equal(mutexd_acquire(c, "cache", &writer, &w, &e), MUTEXD_HELD);
    assert_int_equal(e.has_holder, 1);

    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "cache", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.holder_count, 2);
    assert_int_equal(s.holders[0].shared, 1);
    assert_int_equal(s.holders[1].shared, 1);
    assert_int_equal(s.holder.shared, 1);

    /* Shared with a limit is not a thing. */
    struct mutexd_acquire_options bad = {.owner = "x", .shared = 1, .limit = 2};
    assert_int_equal(mutexd_acquire(c, "other", &bad, NULL, &e), MUTEXD_ERR_API);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "invalid_field");
    assert_string_equal(e.field, "shared");

    /* With the readers gone, the writer holds it alone, and a reader waits. */
    assert_int_equal(mutexd_release(c, "cache", r1.lease_id, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_release(c, "cache", r2.lease_id, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_acquire(c, "cache", &writer, &w, &e), MUTEXD_OK);
    assert_int_equal(w.shared, 0);
    assert_int_equal(mutexd_acquire(c, "cache", &reader, &r1, &e), MUTEXD_HELD);
    assert_int_equal(e.holder.shared, 0);

    mutexd_state_clear(&s);
    mutexd_error_clear(&e);
    mutexd_lease_clear(&r1);
    mutexd_lease_clear(&r2);
    mutexd_lease_clear(&w);
    mutexd_client_free(c);
}

static void break_of_one_lease_leaves_the_others(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_lease a = {0}, b = {0};
    struct mutexd_acquire_options o = {.owner = "w", .limit = 2};
    assert_int_equal(mutexd_acquire(c, "pool", &o, &a, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_acquire(c, "pool", &o, &b, NULL), MUTEXD_OK);
    int broken = -1;
    assert_int_equal(mutexd_break_lease(c, "pool", a.lease_id, "stuck", &broken, NULL), MUTEXD_OK);
    assert_int_equal(broken, 1);
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, "pool", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.holder_count, 1);
    assert_true(s.holders[0].fencing_token == b.fencing_token);
    assert_int_equal(mutexd_renew(c, "pool", a.lease_id, NULL, NULL, NULL), MUTEXD_LOST);
    assert_int_equal(mutexd_renew(c, "pool", b.lease_id, NULL, NULL, NULL), MUTEXD_OK);
    /* That lease holds nothing now. */
    assert_int_equal(mutexd_break_lease(c, "pool", a.lease_id, NULL, &broken, NULL), MUTEXD_OK);
    assert_int_equal(broken, 0);
    /* Without a lease id, every lease. */
    assert_int_equal(mutexd_acquire(c, "pool", &o, &a, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_break(c, "pool", NULL, &broken, NULL), MUTEXD_OK);
    assert_int_equal(broken, 1);
    assert_int_equal(mutexd_get(c, "pool", &s, NULL), MUTEXD_OK);
    assert_int_equal(s.held, 0);
    assert_int_equal(s.holder_count, 0);
    mutexd_state_clear(&s);
    mutexd_lease_clear(&a);
    mutexd_lease_clear(&b);
    mutexd_client_free(c);
}

static void a_retry_with_the_same_lease_id_must_name_the_same_limit(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    char id[MUTEXD_LEASE_ID_LEN + 1];
    assert_int_equal(mutexd_new_lease_id(id), MUTEXD_OK);
    struct mutexd_lease l = {0}, again = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options o = {.owner = "w", .lease_id = id, .limit = 3};
    assert_int_equal(mutexd_acquire(c, "retry", &o, &l, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_acquire(c, "retry", &o, &again, NULL), MUTEXD_OK);
    assert_true(again.fencing_token == l.fencing_token);
    o.limit = 4;
    assert_int_equal(mutexd_acquire(c, "retry", &o, NULL, &e), MUTEXD_ERR_LIMIT_MISMATCH);
    assert_int_equal(e.limit, 3);
    mutexd_error_clear(&e);
    mutexd_lease_clear(&l);
    mutexd_lease_clear(&again);
    mutexd_client_free(c);
}

/* ---- Several resources at once ---- */

/* 1 when `resource` is held, with `token` when it is not 0. */
static int held_with(mutexd_client *c, const char *resource, uint64_t token)
{
    struct mutexd_state s = {0};
    assert_int_equal(mutexd_get(c, resource, &s, NULL), MUTEXD_OK);
    int held = s.held && (token == 0 || s.holder.fencing_token == token);
    mutexd_state_clear(&s);
    return held;
}

/* The names an error answer names, joined by spaces ("" when none). */
static void named(const struct mutexd_error *e, char *out, size_t cap)
{
    char **names = NULL;
    size_t n = 99;
    assert_int_equal(mutexd_error_resources(e, &names, &n), MUTEXD_OK);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i > 0 ? " " : "", names[i]);
    if (n > 0)
        assert_null(names[n]);
    else
        assert_null(names);
    free(names);
}

/* One name held by another: lease_held naming it, and nothing granted, the others stay free;
 * once it is free, the set is granted. */
static void many_is_all_or_none(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    const char *names[] = {"account/alice", "account/bob", "account/carol"};
    struct mutexd_lease other = {0};
    struct mutexd_leases set = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options oo = {.owner = "other", .ttl_ms = 5000};
    assert_int_equal(mutexd_acquire(c, "account/bob", &oo, &other, NULL), MUTEXD_OK);

    struct mutexd_acquire_options o = {.owner = "mover", .ttl_ms = 5000};
    assert_int_equal(mutexd_acquire_many(c, names, 3, &o, &set, &e), MUTEXD_HELD);
    assert_int_equal(e.status, 409);
    assert_string_equal(e.code, "lease_held");
    assert_int_equal(e.has_holder, 1);
    assert_string_equal(e.holder.owner, "other");
    assert_true(e.holder.fencing_token == other.fencing_token);
    assert_in_range(e.retry_after_s, 1, 5);
    char which[256];
    named(&e, which, sizeof(which));
    assert_string_equal(which, "account/bob");
    assert_null(set.leases); /* a failed call leaves its output alone */
    assert_false(held_with(c, "account/alice", 0));
    assert_false(held_with(c, "account/carol", 0));
    assert_true(held_with(c, "account/bob", other.fencing_token));

    assert_int_equal(mutexd_release(c, "account/bob", other.lease_id, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_acquire_many(c, names, 3, &o, &set, &e), MUTEXD_OK);
    assert_int_equal(set.count, 3);
    for (size_t i = 0; i < 3; i++)
        assert_true(held_with(c, names[i], set.leases[i].fencing_token));
    mutexd_leases_clear(&set);
    mutexd_leases_clear(&set); /* twice is fine */
    mutexd_error_clear(&e);
    mutexd_lease_clear(&other);
    mutexd_client_free(c);
}

/* A set: one lease per name in the order given, one lease id, a token each; acquiring again
 * with the same lease id gives the same leases back. */
static void many_grants_a_set_with_a_token_each(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    const char *names[] = {"set/x", "set/b", "set/m"};
    char id[MUTEXD_LEASE_ID_LEN + 1];
    assert_int_equal(mutexd_new_lease_id(id), MUTEXD_OK);
    struct mutexd_leases set = {0}, again = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options o = {
        .owner = "w", .ttl_ms = 4000, .lease_id = id, .metadata = "{\"job\":7}"};
    int64_t t0 = mutexd_monotonic_ms();
    assert_int_equal(mutexd_acquire_many(c, names, 3, &o, &set, &e), MUTEXD_OK);
    assert_null(e.message);
    assert_int_equal(set.count, 3);
    assert_string_equal(set.lease_id, id);
    assert_non_null(strstr(set.json, "\"leases\""));
    assert_true(mutexd_leases_held(&set));
    for (size_t i = 0; i < 3; i++) {
        const struct mutexd_lease *l = &set.leases[i];
        assert_string_equal(l->resource, names[i]);
        assert_string_equal(l->lease_id, id);
        assert_string_equal(l->owner, "w");
        assert_int_equal(l->ttl_ms, 4000);
        assert_string_equal(l->metadata, "{\"job\":7}");
        assert_true(l->fencing_token >= 1);
        for (size_t k = 0; k < i; k++)
            assert_true(l->fencing_token != set.leases[k].fencing_token);
        assert_in_range(l->deadline_ms, t0 + 3000, t0 + 4000);
        assert_true(set.deadline_ms <= l->deadline_ms);
        assert_true(held_with(c, names[i], l->fencing_token));
    }
    assert_int_equal(mutexd_acquire_many(c, names, 3, &o, &again, &e), MUTEXD_OK);
    for (size_t i = 0; i < 3; i++)
        assert_true(again.leases[i].fencing_token == set.leases[i].fencing_token);
    mutexd_leases_clear(&set);
    mutexd_leases_clear(&again);
    mutexd_client_free(c);
}

/* A wait waits for every name, and is granted once the last one is free. */
static void many_waits_for_every_resource(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    const char *names[] = {"wait/a", "wait/b"};
    struct mutexd_acquire_options oo = {.owner = "other", .ttl_ms = 1000};
    assert_int_equal(mutexd_acquire(c, "wait/b", &oo, NULL, NULL), MUTEXD_OK);
    struct mutexd_leases set = {0};
    struct mutexd_acquire_options o = {.owner = "patient", .ttl_ms = 5000, .wait_ms = 10000};
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_acquire_many(c, names, 2, &o, &set, NULL), MUTEXD_OK);
    assert_in_range(test_now_ms() - t0, 500, 5000); /* once wait/b expired */
    assert_string_equal(set.leases[1].owner, "patient");
    assert_true(mutexd_leases_held(&set));
    mutexd_leases_clear(&set);
    mutexd_client_free(c);
}

/* Renewing the set; after a break of one lease, the batch renew answers lease_lost naming
 * it (and renews the other), and the set says it is lost; the release of the set releases
 * what it still holds and names the one lost. */
static void many_renew_and_release_and_a_broken_lease(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    const char *names[] = {"pair/a", "pair/b"};
    struct mutexd_leases set = {0};
    struct mutexd_error e = {0};
    struct mutexd_acquire_options o = {.owner = "w", .ttl_ms = 2000};
    assert_int_equal(mutexd_acquire_many(c, names, 2, &o, &set, &e), MUTEXD_OK);
    uint64_t ta = set.leases[0].fencing_token, tb = set.leases[1].fencing_token;

    /* The names and the lease id may point into the set itself. */
    const char *own[] = {set.leases[0].resource, set.leases[1].resource};
    struct mutexd_renew_options ro = {.ttl_ms = 6000};
    int64_t before = set.deadline_ms;
    assert_int_equal(mutexd_renew_many(c, own, 2, set.lease_id, &ro, &set, &e), MUTEXD_OK);
    assert_int_equal(set.count, 2);
    assert_true(set.leases[0].fencing_token == ta && set.leases[1].fencing_token == tb);
    assert_int_equal(set.leases[0].ttl_ms, 6000);
    assert_true(set.deadline_ms > before);

    int broken = 0;
    assert_int_equal(mutexd_break(c, "pair/b", "test", &broken, NULL), MUTEXD_OK);
    assert_true(broken);
    assert_int_equal(mutexd_renew_many(c, names, 2, set.lease_id, NULL, &set, &e), MUTEXD_LOST);
    assert_int_equal(e.status, 409);
    assert_string_equal(e.code, "lease_lost");
    char which[256];
    named(&e, which, sizeof(which));
    assert_string_equal(which, "pair/b");
    assert_false(mutexd_leases_held(&set));
    assert_int_equal(set.deadline_ms, 0);
    assert_int_equal(set.leases[1].deadline_ms, 0);
    assert_true(mutexd_lease_held(&set.leases[0])); /* the one still held was renewed */
    assert_true(held_with(c, "pair/a", ta));

    assert_int_equal(mutexd_release_many(c, names, 2, set.lease_id, &e), MUTEXD_LOST);
    named(&e, which, sizeof(which));
    assert_string_equal(which, "pair/b");
    assert_false(held_with(c, "pair/a", 0));

    /* A whole set released; a second release names both. */
    assert_int_equal(mutexd_acquire_many(c, names, 2, &o, &set, &e), MUTEXD_OK);
    assert_int_equal(mutexd_release_many(c, names, 2, set.lease_id, &e), MUTEXD_OK);
    assert_null(e.message);
    assert_false(held_with(c, "pair/a", 0));
    assert_false(held_with(c, "pair/b", 0));
    assert_int_equal(mutexd_release_many(c, names, 2, set.lease_id, &e), MUTEXD_LOST);
    named(&e, which, sizeof(which));
    assert_string_equal(which, "pair/a pair/b");
    mutexd_error_clear(&e);
    mutexd_leases_clear(&set);
    mutexd_client_free(c);
}

static void many_bad_arguments(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    struct mutexd_error e = {0};
    const char *one[] = {"a"}, *empty[] = {"a", ""}, *null[] = {"a", NULL}, *twice[] = {"a", "a"};
    const char *many[MUTEXD_MANY_MAX + 1];
    for (size_t i = 0; i <= MUTEXD_MANY_MAX; i++)
        many[i] = "x";
    assert_int_equal(mutexd_acquire_many(c, one, 1, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_non_null(e.message);
    assert_int_equal(mutexd_acquire_many(c, empty, 2, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_acquire_many(c, null, 2, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_acquire_many(c, NULL, 2, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_acquire_many(NULL, twice, 2, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_acquire_many(c, many, MUTEXD_MANY_MAX + 1, NULL, NULL, &e),
                     MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_renew_many(c, twice, 2, NULL, NULL, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_release_many(c, twice, 2, NULL, &e), MUTEXD_ERR_ARG);
    assert_int_equal(mutexd_lock_ordered(c, twice, 2, NULL, NULL, NULL, &e), MUTEXD_ERR_ARG);
    mutexd_lock *lock = (mutexd_lock *)&e;
    assert_int_equal(mutexd_lock_ordered(c, twice, 2, NULL, NULL, &lock, &e), MUTEXD_ERR_ARG);
    assert_null(lock);
    /* Twice the same name: the server says so. */
    assert_int_equal(mutexd_acquire_many(c, twice, 2, NULL, NULL, &e), MUTEXD_ERR_API);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.field, "resources");
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(mutexd_error_resources(NULL, &names, &n), MUTEXD_ERR_ARG);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

struct lost_calls {
    pthread_mutex_t mu;
    int count;
    mutexd_lock *lock;
};

static void count_lost(mutexd_lock *lock, void *arg)
{
    struct lost_calls *calls = arg;
    pthread_mutex_lock(&calls->mu);
    calls->count++;
    calls->lock = lock;
    pthread_mutex_unlock(&calls->mu);
}

static int lost_count(struct lost_calls *calls)
{
    pthread_mutex_lock(&calls->mu);
    int n = calls->count;
    pthread_mutex_unlock(&calls->mu);
    return n;
}

/* The count once on_lost had a second to be called: it is called right after the lock is
 * found lost, on the renewing thread. */
static int lost_count_later(struct lost_calls *calls)
{
    for (int i = 0; i < 100 && lost_count(calls) == 0; i++)
        test_sleep_ms(10);
    return lost_count(calls);
}

/* A lock on a set outlives its TTL several times over: its thread renews the set. The
 * caller's client may be freed meanwhile. */
static void lock_many_renews_the_set_in_the_background(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    const char *names[] = {"bg/a", "bg/b"};
    struct lost_calls calls = {PTHREAD_MUTEX_INITIALIZER, 0, NULL};
    struct mutexd_lock_options lo = {.on_lost = count_lost, .arg = &calls};
    struct mutexd_acquire_options o = {.owner = "w", .ttl_ms = 900};
    mutexd_lock *lock = NULL;
    struct mutexd_error e = {0};
    assert_int_equal(mutexd_lock_many(c, names, 2, &o, &lo, &lock, &e), MUTEXD_OK);
    assert_non_null(lock);
    assert_int_equal(mutexd_lock_count(lock), 2);
    uint64_t ta = mutexd_lock_fencing_token(lock, 0), tb = mutexd_lock_fencing_token(lock, 1);
    assert_string_equal(mutexd_lock_resource(lock, 0), "bg/a");
    assert_string_equal(mutexd_lock_resource(lock, 1), "bg/b");
    assert_string_equal(mutexd_lock_lease_id(lock, 0), mutexd_lock_lease_id(lock, 1));
    assert_null(mutexd_lock_resource(lock, 2));
    assert_true(ta != tb);
    mutexd_client_free(c);

    /* Over three TTLs. */
    assert_int_equal(mutexd_lock_wait_lost(lock, 3000), 0);
    assert_true(mutexd_lock_held(lock));
    assert_in_range(mutexd_lock_remaining_ms(lock), 1, 900);
    assert_int_equal(mutexd_lock_status(lock, &e), MUTEXD_OK);
    assert_null(e.message);
    assert_int_equal(lost_count(&calls), 0);
    c = connect_server();
    assert_true(held_with(c, "bg/a", ta));
    assert_true(held_with(c, "bg/b", tb));

    assert_int_equal(mutexd_lock_release(lock, &e), MUTEXD_OK);
    assert_false(held_with(c, "bg/a", 0));
    assert_false(held_with(c, "bg/b", 0));
    assert_int_equal(lost_count(&calls), 0);
    assert_int_equal(mutexd_lock_release(NULL, &e), MUTEXD_OK);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

/* A break of one lease of a locked set: the lock is lost (at the next renewal, within a third
 * of the TTL), on_lost is called once, and the release releases the other lease. */
static void lock_many_is_lost_when_one_lease_is_broken(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    const char *names[] = {"brk/a", "brk/b", "brk/c"};
    struct lost_calls calls = {PTHREAD_MUTEX_INITIALIZER, 0, NULL};
    struct mutexd_lock_options lo = {.on_lost = count_lost, .arg = &calls};
    struct mutexd_acquire_options o = {.owner = "w", .ttl_ms = 1500};
    mutexd_lock *lock = NULL;
    struct mutexd_error e = {0};
    assert_int_equal(mutexd_lock_many(c, names, 3, &o, &lo, &lock, &e), MUTEXD_OK);
    assert_int_equal(mutexd_lock_wait_lost(lock, 700), 0);

    int broken = 0;
    int64_t t0 = test_now_ms();
    assert_int_equal(mutexd_break(c, "brk/b", "test", &broken, NULL), MUTEXD_OK);
    assert_true(broken);
    assert_int_equal(mutexd_lock_wait_lost(lock, 5000), 1);
    assert_in_range(test_now_ms() - t0, 0, 1500 / 3 + 500);
    assert_false(mutexd_lock_held(lock));
    assert_int_equal(mutexd_lock_remaining_ms(lock), 0);
    assert_int_equal(lost_count_later(&calls), 1);
    assert_ptr_equal(calls.lock, lock);
    assert_int_equal(mutexd_lock_status(lock, &e), MUTEXD_LOST);
    assert_string_equal(e.code, "lease_lost");
    char which[256];
    named(&e, which, sizeof(which));
    assert_string_equal(which, "brk/b");
    /* No more renewals: the others end with their TTL, unless released. */
    assert_true(held_with(c, "brk/a", mutexd_lock_fencing_token(lock, 0)));

    assert_int_equal(mutexd_lock_release(lock, &e), MUTEXD_LOST);
    named(&e, which, sizeof(which));
    assert_string_equal(which, "brk/b");
    assert_false(held_with(c, "brk/a", 0));
    assert_false(held_with(c, "brk/c", 0));
    assert_int_equal(lost_count(&calls), 1);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

/* The ordered helper takes the names in name order, each its own lease, and renews them in
 * the background; when one cannot be taken, it releases those taken, in reverse order. */
static void lock_ordered_takes_in_name_order_and_releases_on_failure(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    const char *names[] = {"ord/c", "ord/a", "ord/b"};
    mutexd_lock *lock = NULL;
    struct mutexd_error e = {0};
    struct mutexd_acquire_options o = {.owner = "w", .ttl_ms = 900};
    assert_int_equal(mutexd_lock_ordered(c, names, 3, &o, NULL, &lock, &e), MUTEXD_OK);
    assert_int_equal(mutexd_lock_count(lock), 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(mutexd_lock_resource(lock, i), names[i]);
        assert_true(held_with(c, names[i], mutexd_lock_fencing_token(lock, i)));
    }
    /* Taken in name order: tokens grow with every grant. */
    assert_true(mutexd_lock_fencing_token(lock, 1) < mutexd_lock_fencing_token(lock, 2));
    assert_true(mutexd_lock_fencing_token(lock, 2) < mutexd_lock_fencing_token(lock, 0));
    assert_string_not_equal(mutexd_lock_lease_id(lock, 0), mutexd_lock_lease_id(lock, 1));
    assert_int_equal(mutexd_lock_wait_lost(lock, 2500), 0); /* renewed past its TTL */
    for (size_t i = 0; i < 3; i++)
        assert_true(held_with(c, names[i], mutexd_lock_fencing_token(lock, i)));
    assert_int_equal(mutexd_lock_release(lock, &e), MUTEXD_OK);
    for (size_t i = 0; i < 3; i++)
        assert_false(held_with(c, names[i], 0));

    /* ord/c, the last in name order, is held by another. */
    struct mutexd_acquire_options oo = {.owner = "other", .ttl_ms = 5000};
    assert_int_equal(mutexd_acquire(c, "ord/c", &oo, NULL, NULL), MUTEXD_OK);
    struct mutexd_event_page ev = {0};
    struct mutexd_events_options eo = {.prefix = "ord/"};
    assert_int_equal(mutexd_events(c, 0, &eo, &ev, NULL), MUTEXD_OK);
    uint64_t after = ev.next;
    lock = (mutexd_lock *)&e;
    assert_int_equal(mutexd_lock_ordered(c, names, 3, &o, NULL, &lock, &e), MUTEXD_HELD);
    assert_null(lock);
    assert_string_equal(e.code, "lease_held");
    assert_string_equal(e.holder.owner, "other");
    assert_true(strncmp(e.message, "ord/c: ", 7) == 0);
    assert_false(held_with(c, "ord/a", 0));
    assert_false(held_with(c, "ord/b", 0));
    assert_int_equal(mutexd_events(c, after, &eo, &ev, NULL), MUTEXD_OK);
    static const char *const want[][2] = {
        {"granted", "ord/a"}, {"granted", "ord/b"}, {"released", "ord/b"}, {"released", "ord/a"}};
    assert_int_equal(ev.count, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(ev.events[i].type, want[i][0]);
        assert_string_equal(ev.events[i].resource, want[i][1]);
    }
    mutexd_event_page_clear(&ev);
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

/* An ordered lock is lost when any of its leases is. */
static void lock_ordered_is_lost_when_one_lease_is_broken(void **state)
{
    (void)state;
    mutexd_client *c = connect_server();
    const char *names[] = {"ol/b", "ol/a"};
    struct lost_calls calls = {PTHREAD_MUTEX_INITIALIZER, 0, NULL};
    struct mutexd_lock_options lo = {.on_lost = count_lost, .arg = &calls};
    struct mutexd_acquire_options o = {.owner = "w", .ttl_ms = 1500};
    mutexd_lock *lock = NULL;
    struct mutexd_error e = {0};
    assert_int_equal(mutexd_lock_ordered(c, names, 2, &o, &lo, &lock, &e), MUTEXD_OK);
    int broken = 0;
    assert_int_equal(mutexd_break(c, "ol/b", "test", &broken, NULL), MUTEXD_OK);
    assert_int_equal(mutexd_lock_wait_lost(lock, 5000), 1);
    assert_false(mutexd_lock_held(lock));
    assert_int_equal(lost_count_later(&calls), 1);
    assert_int_equal(mutexd_lock_status(lock, &e), MUTEXD_LOST);
    assert_string_equal(e.code, "lease_lost");
    assert_non_null(strstr(e.message, "ol/b"));
    assert_int_equal(mutexd_lock_release(lock, &e), MUTEXD_LOST);
    assert_non_null(strstr(e.message, "ol/b"));
    assert_false(held_with(c, "ol/a", 0));
    mutexd_error_clear(&e);
    mutexd_client_free(c);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(acquire_grants_a_lease_with_every_field),
    cmocka_unit_test(acquire_without_options_uses_the_defaults),
    cmocka_unit_test(acquire_held_names_the_holder_and_when_to_retry),
    cmocka_unit_test(acquire_again_with_the_same_lease_id_is_idempotent),
    cmocka_unit_test(acquire_waits_in_line_until_released),
    cmocka_unit_test(acquire_wait_that_runs_out_is_held),
    cmocka_unit_test(too_many_waiters),
    cmocka_unit_test(renew_extends_and_replaces_metadata_in_place),
    cmocka_unit_test(the_lease_deadline_is_checked_on_the_clock),
    cmocka_unit_test(renew_after_a_break_is_lost),
    cmocka_unit_test(release_frees_once_then_is_lost),
    cmocka_unit_test(break_says_whether_it_ended_a_lease),
    cmocka_unit_test(get_shows_free_and_held_without_the_lease_id),
    cmocka_unit_test(watch_returns_at_the_next_change),
    cmocka_unit_test(watch_without_a_change_answers_after_the_wait),
    cmocka_unit_test(list_pages_through_a_prefix_with_cursors),
    cmocka_unit_test(list_watch_wakes_on_a_change_under_its_prefix_only),
    cmocka_unit_test(events_come_in_order_and_follow_with_next),
    cmocka_unit_test(events_dropped_are_truncated),
    cmocka_unit_test(whoami_without_authorization_has_every_scope),
    cmocka_unit_test(the_server_refuses_bad_input_with_its_codes),
    cmocka_unit_test(a_wrong_base_path_is_not_found),
    cmocka_unit_test(bad_arguments_are_caught_before_sending),
    cmocka_unit_test(result_names_and_empty_structs),
    cmocka_unit_test(fencing_tokens_increase_with_every_grant),
    cmocka_unit_test(auth_without_a_valid_token_is_unauthorized),
    cmocka_unit_test(auth_scopes_and_prefixes_are_enforced),
    cmocka_unit_test(a_dead_server_first_is_passed_over),
    cmocka_unit_test(an_acquire_whose_answer_was_lost_gets_the_same_lease),
    cmocka_unit_test(semaphore_grants_up_to_its_limit),
    cmocka_unit_test(shared_leases_hold_together_and_keep_a_writer_out),
    cmocka_unit_test(break_of_one_lease_leaves_the_others),
    cmocka_unit_test(a_retry_with_the_same_lease_id_must_name_the_same_limit),
    cmocka_unit_test(many_is_all_or_none),
    cmocka_unit_test(many_grants_a_set_with_a_token_each),
    cmocka_unit_test(many_waits_for_every_resource),
    cmocka_unit_test(many_renew_and_release_and_a_broken_lease),
    cmocka_unit_test(many_bad_arguments),
    cmocka_unit_test(lock_many_renews_the_set_in_the_background),
    cmocka_unit_test(lock_many_is_lost_when_one_lease_is_broken),
    cmocka_unit_test(lock_ordered_takes_in_name_order_and_releases_on_failure),
    cmocka_unit_test(lock_ordered_is_lost_when_one_lease_is_broken),
};
TEST_MAIN(tests)
