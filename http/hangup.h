/*
 * Hang-up detection for suspended connections. libmicrohttpd does not watch a connection
 * while it is suspended, so a client that gives up on a long acquire or watch would stay
 * queued until its wait ran out. Requests that may wait register their socket here; one
 * thread polls them all for EPOLLRDHUP and reports a hang-up once, by request id.
 *
 * Threads: hangup_watch() and hangup_unwatch() from any thread. on_hangup runs on the
 * watcher's thread with its lock held: it must not call hangup_*.
 */
#ifndef MX_HTTP_HANGUP_H
#define MX_HTTP_HANGUP_H

#include <stdbool.h>
#include <stdint.h>

struct hangup;

int hangup_start(struct hangup **out, void (*on_hangup)(void *ctx, uint64_t id, void *arg),
                 void *ctx);
/* Watches `fd` for request `id` (unique). Returns 0, or -1 (then nothing is watched). */
int hangup_watch(struct hangup *h, int fd, uint64_t id, void *arg);
/* Stops watching `id`; after it returns on_hangup will not be called for it. Must be called
 * before the request's connection may close. Harmless if `id` is not watched. */
void hangup_unwatch(struct hangup *h, uint64_t id);
/* From here on hang-ups are no longer reported (watch and unwatch still work). For
 * shutdown: what on_hangup calls into may be going away. */
void hangup_mute(struct hangup *h);
void hangup_stop(struct hangup *h);

/* Whether the peer of `fd` has hung up, without waiting. */
bool hangup_peer_gone(int fd);

#endif
