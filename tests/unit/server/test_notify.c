/* The service manager's notifications (server/notify.c) as systemd receives them: a unix
 * datagram socket named by NOTIFY_SOCKET, bound here. Times are given, not read, so each
 * case says exactly what is due when. Built only with libsystemd (MUTEXD_SYSTEMD). */
#include "tests/unit/testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/notify.h"

#define MS 1000000ull
#define T0 (1000 * 1000 * MS) /* any start: 1000 s */

struct mgr {
    int fd;
    char dir[64], path[80];
};

/* Binds the manager's socket and points NOTIFY_SOCKET at it; `watchdog_usec` NULL: no
 * watchdog. */
static void mgr_open(struct mgr *m, const char *watchdog_usec)
{
    mx_temp_dir(m->dir, "notify");
    snprintf(m->path, sizeof m->path, "%s/notify", m->dir);
    m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(m->fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", m->path);
    assert_int_equal(bind(m->fd, (struct sockaddr *)&a, sizeof a), 0);
    setenv("NOTIFY_SOCKET", m->path, 1);
    unsetenv("WATCHDOG_PID");
    if (watchdog_usec)
        setenv("WATCHDOG_USEC", watchdog_usec, 1);
    else
        unsetenv("WATCHDOG_USEC");
}

static void mgr_close(struct mgr *m)
{
    close(m->fd);
    unlink(m->path);
    rmdir(m->dir);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
}

/* The next notification, or "" when none is waiting. */
static const char *next(struct mgr *m)
{
    static char buf[1024];
    ssize_t n = recv(m->fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void ready_once_with_status(void **st)
{
    (void)st;
    struct mgr m;
    mgr_open(&m, NULL);
    struct notify n;
    notify_init(&n, T0);
    assert_int_equal(notify_next_ns(&n), T0);

    notify_state(&n, T0, false, true, "not ready: recovering");
    const char *got = next(&m);
    assert_null(strstr(got, "READY=1"));
    assert_non_null(strstr(got, "STATUS=not ready: recovering\n"));
    /* Not ready yet: looked at again soon. */
    assert_int_equal(notify_next_ns(&n), T0 + 100 * MS);

    notify_state(&n, T0 + 100 * MS, true, true, "ready on 127.0.0.1:8080");
    got = next(&m);
    assert_non_null(strstr(got, "READY=1\n"));
    assert_non_null(strstr(got, "STATUS=ready on 127.0.0.1:8080\n"));
    assert_int_equal(notify_next_ns(&n), T0 + 1100 * MS);

    /* Nothing new: nothing sent; a new status alone. */
    notify_state(&n, T0 + 1100 * MS, true, true, "ready on 127.0.0.1:8080");
    assert_string_equal(next(&m), "");
    notify_state(&n, T0 + 2100 * MS, true, true, "ready (active) on\n127.0.0.1:8080");
    assert_string_equal(next(&m), "STATUS=ready (active) on 127.0.0.1:8080\n");
    mgr_close(&m);
}

static void pings_every_half_period_while_healthy(void **st)
{
    (void)st;
    struct mgr m;
    mgr_open(&m, "200000"); /* 200 ms: a ping every 100 ms */
    struct notify n;
    notify_init(&n, T0);
    notify_state(&n, T0, true, true, "ready");
    assert_non_null(strstr(next(&m), "WATCHDOG=1\n"));
    assert_int_equal(notify_next_ns(&n), T0 + 100 * MS);

    notify_state(&n, T0 + 50 * MS, true, true, "ready");
    assert_string_equal(next(&m), ""); /* not due */

    /* Unhealthy when due: no ping, and it stays due. */
    notify_state(&n, T0 + 100 * MS, true, false, "unhealthy: the store fails: disk I/O error");
    const char *got = next(&m);
    assert_null(strstr(got, "WATCHDOG=1"));
    assert_non_null(strstr(got, "STATUS=unhealthy"));
    for (uint64_t t = 200; t <= 1000; t += 100) {
        notify_state(&n, T0 + t * MS, true, false, "unhealthy: the store fails: disk I/O error");
        assert_string_equal(next(&m), "");
    }
    /* Healthy again: the ping goes out at once. */
    notify_state(&n, T0 + 1050 * MS, true, true, "ready");
    got = next(&m);
    assert_non_null(strstr(got, "WATCHDOG=1\n"));
    assert_non_null(strstr(got, "STATUS=ready\n"));
    assert_int_equal(notify_next_ns(&n), T0 + 1150 * MS);
    mgr_close(&m);
}

static void start_timeout_extended_while_waiting_and_healthy(void **st)
{
    (void)st;
    struct mgr m;
    mgr_open(&m, NULL);
    struct notify n;
    notify_init(&n, T0);
    notify_state(&n, T0, false, true, "not ready: restore grace period");
    assert_non_null(strstr(next(&m), "EXTEND_TIMEOUT_USEC=30000000\n"));
    notify_state(&n, T0 + 5000 * MS, false, true, "not ready: restore grace period");
    assert_string_equal(next(&m), "");
    notify_state(&n, T0 + 10000 * MS, false, true, "not ready: restore grace period");
    assert_string_equal(next(&m), "EXTEND_TIMEOUT_USEC=30000000\n");
    /* Unhealthy: the start may time out. */
    notify_state(&n, T0 + 20000 * MS, false, false, "unhealthy");
    assert_string_equal(next(&m), "STATUS=unhealthy\n");
    /* Ready: READY=1, and never an extension after it. */
    notify_state(&n, T0 + 30000 * MS, true, true, "ready");
    assert_string_equal(next(&m), "READY=1\nSTATUS=ready\n");
    notify_state(&n, T0 + 60000 * MS, false, true, "not ready: no_active_server");
    assert_string_equal(next(&m), "STATUS=not ready: no_active_server\n");
    mgr_close(&m);
}

static void reload_only_once_ready(void **st)
{
    (void)st;
    struct mgr m;
    mgr_open(&m, NULL);
    struct notify n;
    notify_init(&n, T0);
    notify_reloading(&n, T0, "reloading");
    notify_reloaded(&n, T0);
    assert_string_equal(next(&m), ""); /* a READY=1 now would end the start early */

    notify_state(&n, T0, true, true, "ready");
    assert_non_null(strstr(next(&m), "READY=1"));
    notify_reloading(&n, T0 + 5 * MS, "reloading: rereading the tokens file");
    assert_string_equal(next(&m),
                        "RELOADING=1\nMONOTONIC_USEC=1000005000\nSTATUS=reloading: rereading the "
                        "tokens file\n");
    notify_reloaded(&n, T0 + 6 * MS);
    assert_string_equal(next(&m), "READY=1");
    /* The state is said again at once. */
    assert_int_equal(notify_next_ns(&n), T0 + 6 * MS);
    notify_state(&n, T0 + 6 * MS, true, true, "ready");
    assert_string_equal(next(&m), "STATUS=ready\n");
    mgr_close(&m);
}

static void stopping_is_the_last_word(void **st)
{
    (void)st;
    struct mgr m;
    mgr_open(&m, "200000");
    struct notify n;
    notify_init(&n, T0);
    notify_state(&n, T0, true, true, "ready");
    next(&m);
    notify_stopping(&n, "stopping: answering the requests in flight");
    assert_string_equal(next(&m),
                        "STOPPING=1\nSTATUS=stopping: answering the requests in flight\n");
    assert_int_equal(notify_next_ns(&n), 0);
    notify_state(&n, T0 + 1000 * MS, true, true, "ready");
    notify_status(&n, "anything");
    assert_string_equal(next(&m), "");
    mgr_close(&m);
}

static void nothing_without_a_service_manager(void **st)
{
    (void)st;
    unsetenv("NOTIFY_SOCKET");
    setenv("WATCHDOG_USEC", "200000", 1);
    struct notify n;
    notify_init(&n, T0);
    assert_int_equal(notify_next_ns(&n), 0); /* the main loop waits for signals alone */
    notify_state(&n, T0, true, true, "ready");
    notify_reloading(&n, T0, "reloading");
    notify_reloaded(&n, T0);
    notify_stopping(&n, "stopping");
    assert_int_equal(notify_next_ns(&n), 0);
    unsetenv("WATCHDOG_USEC");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(ready_once_with_status),
    cmocka_unit_test(pings_every_half_period_while_healthy),
    cmocka_unit_test(start_timeout_extended_while_waiting_and_healthy),
    cmocka_unit_test(reload_only_once_ready),
    cmocka_unit_test(stopping_is_the_last_word),
    cmocka_unit_test(nothing_without_a_service_manager),
};
MX_TEST_MAIN(tests)
