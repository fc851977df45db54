/*
 * Lists, list watches and events of a partitioned server: every partition asked, the
 * answers merged (docs/api.md, "Partitions").
 *
 * A list or events request without `partition=P` on a server of N > 1 partitions asks
 * every partition, in parts: each partition this server serves is read in-process (its
 * core entered as a request dispatched here enters it, and checked as one: fenced, handed
 * over, ownership unconfirmed), and each other owner gets one request through the
 * forwarder for all of its partitions, `partitions=a.b.c` (a partition with no owner known
 * gets one of its own, held by the forwarder until it has one). That server serves such a
 * request the same way, its own partitions in-process and any it no longer owns sent on
 * (Mutexd-Hops bounds the hops), and answers positions of those partitions only. So a
 * list watch holds one forwarded wait per other server, not one per partition: the
 * forwarder's bound on waiting requests (a quarter of the connections) is met at 1,250
 * watches on a group of three where it was met at 157 on 16 partitions. The answers are
 * merged:
 *
 * - a list: every partition's first `limit` names after the cursor, merged by name and
 *   cut at `limit`; names order the list across partitions, so the cursor is the last
 *   name given, as on one partition, and nothing is skipped or shown twice;
 * - events: each partition's in its index order, a prefix of what it gave (so that its
 *   position never passes an event not given), interleaved oldest first (by time, then
 *   partition) and cut at `limit`, each with its `partition`;
 * - `index` (a list) and `next` (events) are positions: "v" and each partition's index,
 *   joined by '.' ("v12.0.7" for three partitions), given back as `index` or `after`.
 *
 * A list watch waits on every partition at once, each from its own index (a local one in
 * its core's change log, actors/events.h); the first that changes ends the others' waits,
 * which are then read afresh. An events wait ends at the first partition with an event;
 * the others' positions stay as given.
 *
 * Threads: spread_start() and spread_answer() on the connection's thread; the parts'
 * completions on the forwarder's, a change log's (its timer's or a committing thread) or
 * the actors'; spread_cancel() on the hang-up watcher's.
 */
#ifndef MX_HTTP_SPREAD_H
#define MX_HTTP_SPREAD_H

#include <microhttpd.h>
#include <stdint.h>

struct hreq;
struct http;
struct spread;

/* Asks every partition for `q` (a list or events request, its query parsed and checked),
 * waiting up to `held_ms` (a list watch, an events wait; 0: none). The connection is
 * suspended until every part is answered; spread_answer() then answers it. */
enum MHD_Result spread_start(struct hreq *q, uint64_t held_ms);
/* On the connection's resumption: asks again what a watch's change left unread, or merges
 * and answers. */
enum MHD_Result spread_answer(struct hreq *q);
/* The client has gone: the parts still out are cancelled. */
void spread_cancel(struct http *h, struct spread *s);
void spread_free(struct spread *s);

#endif
