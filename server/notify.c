/*
 * The service manager's notifications (see notify.h). The decisions (what is due, when to
 * look next) are made the same way in every build; only the send, sd_notify(), and the
 * reading of the environment need libsystemd, and without it notify_init() leaves the
 * module off, so that nothing else runs.
 */
#include "server/notify.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

#ifdef MUTEXD_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

/* How often the state is looked at before READY=1 (readiness comes from other threads:
 * a restore grace ending, a standby learning the active), and after it. */
#define LOOK_STARTING_NS (100 * MX_NS_PER_MS)
#define LOOK_READY_NS    (1000 * MX_NS_PER_MS)
/* While healthy and not ready, the start timeout is pushed this far ahead, this often. */
#define EXTEND_BY_US    30000000ull
#define EXTEND_EVERY_NS (10000 * MX_NS_PER_MS)

/* One datagram of NEWLINE-separated assignments. A failure is logged once: the service
 * manager then decides (a missed READY=1 fails the start, a missed ping the watchdog). */
static void send_text(struct notify *n, const char *text)
{
#ifdef MUTEXD_SYSTEMD
    static bool said;
    int rc = sd_notify(0, text);
    if (rc < 0 && !said) {
        mx_warn("cannot notify the service manager", "error=%s", strerror(-rc));
        said = true;
    }
#else
    (void)text;
#endif
    (void)n;
}

void notify_init(struct notify *n, uint64_t now_ns)
{
    memset(n, 0, sizeof *n);
#ifdef MUTEXD_SYSTEMD
    const char *sock = getenv("NOTIFY_SOCKET");
    if (!sock || !*sock)
        return;
    n->_on = true;
    uint64_t usec = 0;
    /* > 0: enabled for this process (WATCHDOG_PID, when set, names it). */
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
        n->_watchdog_ns = usec * 1000u / 2;
    n->_next_ns = now_ns;
    n->_ping_ns = now_ns;
    n->_extend_ns = now_ns;
#else
    (void)now_ns;
#endif
}

uint64_t notify_next_ns(const struct notify *n)
{
    return n->_on ? n->_next_ns : 0;
}

/* Appends "STATUS=<status>\n" to msg when it differs from the last one sent, newlines
 * turned into spaces (each line of a notification is an assignment). */
static void add_status(struct notify *n, char *msg, size_t len, const char *status)
{
    if (!status || strcmp(status, n->_status) == 0)
        return;
    snprintf(n->_status, sizeof n->_status, "%s", status);
    for (char *p = n->_status; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    size_t used = strlen(msg);
    snprintf(msg + used, len - used, "STATUS=%s\n", n->_status);
}

void notify_state(struct notify *n, uint64_t now_ns, bool ready, bool healthy, const char *status)
{
    if (!n->_on)
        return;
    char msg[512] = "";
    if (ready && !n->_ready) {
        strcat(msg, "READY=1\n");
        n->_ready = true;
    }
    if (healthy && n->_watchdog_ns && now_ns >= n->_ping_ns) {
        strcat(msg, "WATCHDOG=1\n");
        n->_ping_ns = now_ns + n->_watchdog_ns;
    }
    if (healthy && !n->_ready && now_ns >= n->_extend_ns) {
        snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "EXTEND_TIMEOUT_USEC=%" PRIu64 "\n",
                 (uint64_t)EXTEND_BY_US);
        n->_extend_ns = now_ns + EXTEND_EVERY_NS;
    }
    add_status(n, msg, sizeof msg, status);
    if (msg[0])
        send_text(n, msg);
    n->_next_ns = now_ns + (n->_ready ? LOOK_READY_NS : LOOK_STARTING_NS);
    /* Unhealthy, the ping stays due: it goes out at the first healthy look. */
    if (n->_watchdog_ns && n->_ping_ns < n->_next_ns)
        n->_next_ns = n->_ping_ns > now_ns ? n->_ping_ns : n->_next_ns;
}

void notify_reloading(struct notify *n, uint64_t now_ns, const char *status)
{
    if (!n->_on || !n->_ready)
        return;
    /* systemd 253 and later want the time of the request with RELOADING=1. */
    char msg[512];
    snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64 "\n", now_ns / 1000u);
    add_status(n, msg, sizeof msg, status);
    send_text(n, msg);
}

void notify_reloaded(struct notify *n, uint64_t now_ns)
{
    if (!n->_on || !n->_ready)
        return;
    send_text(n, "READY=1");
    n->_status[0] = '\0'; /* the next look says the state again */
    n->_next_ns = now_ns;
}

void notify_stopping(struct notify *n, const char *status)
{
    if (!n->_on)
        return;
    char msg[512] = "STOPPING=1\n";
    add_status(n, msg, sizeof msg, status);
    send_text(n, msg);
    n->_on = false;
}

void notify_status(struct notify *n, const char *status)
{
    if (!n->_on)
        return;
    char msg[512] = "";
    add_status(n, msg, sizeof msg, status);
    if (msg[0])
        send_text(n, msg);
}
