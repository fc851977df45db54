/*
 * Connection tracking for the limits libmicrohttpd does not enforce itself.
 *
 * Its timeout counts inactivity, so a client that sends one byte a second never times
 * out, and idle keep-alive connections can fill the connection limit. Every connection
 * is tracked from accept to close. While the server waits on its client it has a
 * deadline that no byte moves: between requests (idle, or still sending the next request
 * line) at most `idle_timeout_ms`; from a request's request line, `idle_timeout_ms` for
 * the whole request to arrive, headers and body. Past it the reaper shuts the socket
 * down and libmicrohttpd closes it. A connection whose request is complete (being
 * answered, or waiting for its lease) has no deadline here. And when the number of
 * connections passes 90% of the limit, the reaper closes the connections that have been
 * waiting on their client longest, so that new clients still get in.
 *
 * The HTTP server takes conns_spares() connections beyond the limit: a connection opened
 * while the limit is reached is a spare one (conns_spare()), on which only health checks
 * are served, so that /healthz and /readyz answer even when every other connection is
 * taken (by requests that wait, which are never closed to make room).
 *
 * Closing many connections leaves their memory in the C library's free lists; the reaper
 * gives it back to the system after a wave of closes (see conns.c).
 *
 * Threads: conns_* from libmicrohttpd's threads; the reaper has its own.
 */
#ifndef MX_HTTP_CONNS_H
#define MX_HTTP_CONNS_H

#include <stdbool.h>
#include <stdint.h>

struct conns;
struct conn;

int conns_start(struct conns **out, unsigned max_connections, uint64_t idle_timeout_ms);
void conns_stop(struct conns *c);

/* libmicrohttpd's connection notifications. */
struct conn *conns_opened(struct conns *c, int fd);
void conns_closed(struct conns *c, struct conn *k);
/* A request's line has arrived: its deadline starts. */
void conns_request_begins(struct conns *c, struct conn *k);
/* The request is complete (or answered before its body): no deadline while it is served. */
void conns_request_received(struct conns *c, struct conn *k);
/* Its answer is sent: the connection is idle again. */
void conns_request_ends(struct conns *c, struct conn *k);

/* The connections kept beyond `max_connections` for health checks. */
unsigned conns_spares(unsigned max_connections);
/* True when `k` was opened beyond the limit (NULL: untracked, false). Immutable: any
 * thread. */
bool conns_spare(const struct conn *k);

uint64_t conns_reaped(struct conns *c); /* connections closed by the reaper so far */
unsigned conns_open(struct conns *c);   /* connections open now, on every thread */

/* True when some connection has input waiting that no thread has read yet (a request
 * queued behind the caller's work, or a hang-up). One system call; any thread. */
bool conns_others_readable(struct conns *c);

#endif
