/*
 * The service manager's notifications (systemd's sd_notify protocol): READY=1 once the
 * server is ready as /readyz says, WATCHDOG=1 every half of WATCHDOG_USEC while it is
 * healthy, RELOADING=1 and READY=1 around a SIGHUP, STOPPING=1 at shutdown, and a STATUS=
 * line that `systemctl status` shows. While the server is healthy but not ready yet (a
 * restore grace period, a standby that knows no active server) it extends the start
 * timeout, so that the service manager does not kill a server that is waiting on purpose.
 *
 * Built without libsystemd (CMake MUTEXD_SYSTEMD=OFF, or AUTO without it), or started
 * without $NOTIFY_SOCKET, nothing is sent and notify_next_ns() says "never": the main loop
 * then waits for signals alone, as it did before.
 *
 * Threads: the main thread's. The fields are its alone.
 */
#ifndef MX_NOTIFY_H
#define MX_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

struct notify {
    /* private */
    bool _on;              /* a service manager listens */
    bool _ready;           /* READY=1 was sent */
    uint64_t _watchdog_ns; /* between two pings: half of WATCHDOG_USEC; 0: no watchdog */
    uint64_t _next_ns;     /* the next look (mono ns); 0: never */
    uint64_t _ping_ns;     /* the next WATCHDOG=1 is due (mono ns) */
    uint64_t _extend_ns;   /* the next EXTEND_TIMEOUT_USEC is due (mono ns) */
    char _status[256];     /* the STATUS= sent last */
};

/* Reads $NOTIFY_SOCKET and the watchdog's settings ($WATCHDOG_USEC, $WATCHDOG_PID). The
 * environment is left as it is: a fenced server starts itself again (execv) and keeps
 * notifying under the same process id. */
void notify_init(struct notify *n, uint64_t now_ns);

/* When the server's state should next be given to notify_state() (mono ns); 0: never. */
uint64_t notify_next_ns(const struct notify *n);

/*
 * The server's state at one look, at notify_next_ns() or later: `ready` as /readyz
 * answers, `healthy` while its store commits (a server whose commits keep failing stops
 * pinging the watchdog, and the service manager restarts it after WatchdogSec), `status`
 * one line for people. Sends what is due: READY=1 the first time it is ready, WATCHDOG=1,
 * EXTEND_TIMEOUT_USEC while healthy and not ready yet, STATUS= when it changed.
 */
void notify_state(struct notify *n, uint64_t now_ns, bool ready, bool healthy, const char *status);

/* Around a reload (SIGHUP): RELOADING=1, then READY=1 (only once ready: a reload during
 * the start would otherwise end it early). */
void notify_reloading(struct notify *n, uint64_t now_ns, const char *status);
void notify_reloaded(struct notify *n, uint64_t now_ns);

/* STOPPING=1 with `status`; nothing more is sent after it. */
void notify_stopping(struct notify *n, const char *status);

/* A STATUS= line alone (a failure to start, a fenced server starting again). */
void notify_status(struct notify *n, const char *status);

#endif
