/*
 * Connection tracking for the limits libmicrohttpd does not enforce itself.
 *
 * Its timeout counts inactivity, so a client that sends one header byte a second never
 * times out, and idle keep-alive connections can fill the connection limit. Every
 * connection is tracked from accept to close; between requests (idle, or still sending
 * the next request's headers) it may stay at most `idle_timeout_ms`, after which the
 * reaper shuts its socket down and libmicrohttpd closes it. And when the number of
 * connections passes 90% of the limit, the reaper closes the connections that have been
 * between requests longest, so that new clients still get in.
 *
 * Threads: conns_* from libmicrohttpd's threads; the reaper has its own.
 */
#ifndef MX_HTTP_CONNS_H
#define MX_HTTP_CONNS_H

#include <stdint.h>

struct conns;
struct conn;

int conns_start(struct conns **out, unsigned max_connections, uint64_t idle_timeout_ms);
void conns_stop(struct conns *c);

/* libmicrohttpd's connection notifications. */
struct conn *conns_opened(struct conns *c, int fd);
void conns_closed(struct conns *c, struct conn *k);
/* A request's headers are complete / its answer is sent. */
void conns_request_begins(struct conns *c, struct conn *k);
void conns_request_ends(struct conns *c, struct conn *k);

uint64_t conns_reaped(struct conns *c); /* connections closed by the reaper so far */

#endif
