/*
 * Which server should own which partition of a partitioned group, and what one server does
 * about it now (docs/architecture.md, "Beyond one group: partitions"). Pure: no clock, no blob
 * store; every server computes the same answer from the same view, so ownership converges without a
 * coordinator and without ping-pong.
 *
 * The target is balanced and sticky: every live server is given floor or ceil of
 * partitions / servers (the ceil to those that own the most now, then by URL); each keeps
 * the partitions it owns up to that share (those of highest weight first), and every other
 * partition, in order, goes to the live server of highest weight (SipHash of its URL and the
 * partition, under a fixed, published key) that has room: bounded-load rendezvous hashing
 * for what must move, nothing moved that need not be. A server's death moves its partitions
 * only; a join moves the newcomer's share only; a balanced map is its own target. A server
 * then claims at once a free partition whose target it is; claims any other free partition
 * once it has been free long enough that its target is surely not coming (an orphan); and
 * gives away a partition it owns whose target is another server that has been live long
 * enough, a few at a time.
 *
 * Threads: any; nothing is shared.
 */
#ifndef MX_PLACEMENT_H
#define MX_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A partition's weight for a server: the rendezvous hash. */
uint64_t place_weight(const char *url, unsigned partition);

/* The target owner of every partition: target[p] is an index into `urls` (the live
 * servers, in any order: the answer does not depend on it), or -1 when there are none.
 * `owner`: each partition's owner now (a URL, or NULL), or NULL for none at all. */
void place_target(unsigned partitions, const char *const *urls, size_t nurls,
                  const char *const *owner, int *target);

struct place_view {
    unsigned partitions;
    const char *self; /* this server's URL: one of `urls` */
    /* The live servers (their heartbeats are fresh), and since when each has been seen
     * live (ms, any clock the caller keeps; the same as now_ms). */
    const char *const *urls;
    const int64_t *live_since_ms;
    size_t nurls;
    /* Per partition: its owner's URL, or NULL when none holds it; and since when it has
     * been seen free (ms; ignored when owned). */
    const char *const *owner;
    const int64_t *free_since_ms;
    /* Per partition: true when `self` may claim it only as an orphan, not as its target
     * (another server broke self's lease of it, or holds self gone: it could not reach
     * self, and would give it up again). NULL: none. */
    const bool *orphan_only;
    /* Per partition: the server its last owner handed it to (named in its owner blob), or
     * NULL: that server claims it at once whatever its view (which may not know yet what
     * the giver's did), and any other only once it is an orphan. NULL: none. */
    const char *const *handed_to;
    int64_t now_ms;
};

struct place_config {
    int64_t orphan_after_ms; /* a free partition may be claimed by a non-target after this */
    int64_t settle_ms;       /* a partition is given only to a target live at least this long */
    unsigned max_gives;      /* handovers a server starts at once */
};

enum place_action { PLACE_CLAIM, PLACE_GIVE };

struct place_move {
    enum place_action action;
    unsigned partition;
    int to; /* PLACE_GIVE: the index in `urls` of the server it goes to */
};

/* What `self` should do now: up to `max` moves into `out`, claims first, then gives.
 * Returns how many. */
size_t place_decide(const struct place_view *v, const struct place_config *c,
                    struct place_move *out, size_t max);

#endif
