/*
 * Which server should own which partition (see placement.h).
 */
#include "server/placement.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/partition.h"

/* Fixed and published: every server must weigh alike. Not a secret (the URLs are not
 * chosen by clients). */
static const struct mx_hash_key weight_key = {0x6d75746578642d70ull, 0x6c6163656d656e74ull};

uint64_t place_weight(const char *url, unsigned partition)
{
    char buf[1024];
    size_t n = strnlen(url, sizeof buf - 4);
    memcpy(buf, url, n);
    buf[n] = (char)(partition & 0xff);
    buf[n + 1] = (char)(partition >> 8);
    return mx_siphash(&weight_key, buf, n + 2);
}

/* True when server a outranks server b for partition p: a higher weight, or the same
 * weight and a smaller URL (so the order is total). */
static bool outranks(const char *a, uint64_t wa, const char *b, uint64_t wb)
{
    return wa != wb ? wa > wb : strcmp(a, b) < 0;
}

/* The live server of `urls` named `url`, or -1. */
static int find(const char *const *urls, size_t n, const char *url)
{
    for (size_t i = 0; url && i < n; i++)
        if (strcmp(urls[i], url) == 0)
            return (int)i;
    return -1;
}

void place_target(unsigned partitions, const char *const *urls, size_t nurls,
                  const char *const *owner, int *target)
{
    for (unsigned p = 0; p < partitions; p++)
        target[p] = -1;
    if (nurls == 0)
        return;
    size_t n = nurls < MX_PARTITIONS_MAX ? nurls : MX_PARTITIONS_MAX;
    /* Exactly balanced: every server takes `lo`, and `extra` of them one more: those that
     * own the most now (then by URL), so that a balanced map stays as it is. */
    unsigned lo = partitions / (unsigned)n, extra = partitions % (unsigned)n;
    unsigned owned[MX_PARTITIONS_MAX] = {0}, cap[MX_PARTITIONS_MAX], load[MX_PARTITIONS_MAX] = {0};
    int at[MX_PARTITIONS_MAX]; /* each partition's live owner, or -1 */
    for (unsigned p = 0; p < partitions; p++) {
        at[p] = owner ? find(urls, n, owner[p]) : -1;
        if (at[p] >= 0)
            owned[at[p]]++;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned ahead = 0; /* servers before i in that order */
        for (size_t j = 0; j < n; j++)
            ahead += owned[j] > owned[i] || (owned[j] == owned[i] && strcmp(urls[j], urls[i]) < 0);
        cap[i] = ahead < extra ? lo + 1 : lo;
    }
    /* Each server keeps what it owns up to its share, the partitions of highest weight
     * first: a membership change moves only what must move. */
    for (size_t i = 0; i < n; i++) {
        while (load[i] < cap[i] && load[i] < owned[i]) {
            int best = -1;
            uint64_t best_w = 0;
            for (unsigned p = 0; p < partitions; p++) {
                if (at[p] != (int)i || target[p] >= 0)
                    continue;
                uint64_t w = place_weight(urls[i], p);
                if (best < 0 || w > best_w || (w == best_w && p < (unsigned)best)) {
                    best = (int)p;
                    best_w = w;
                }
            }
            target[best] = (int)i;
            load[i]++;
        }
    }
    /* The rest, in order, each to the server of highest weight that has room. */
    for (unsigned p = 0; p < partitions; p++) {
        if (target[p] >= 0)
            continue;
        int best = -1;
        uint64_t best_w = 0;
        for (size_t i = 0; i < n; i++) {
            if (load[i] >= cap[i])
                continue;
            uint64_t w = place_weight(urls[i], p);
            if (best < 0 || outranks(urls[i], w, urls[best], best_w)) {
                best = (int)i;
                best_w = w;
            }
        }
        target[p] = best;
        if (best >= 0)
            load[best]++;
    }
}

static int index_of(const struct place_view *v, const char *url)
{
    return find(v->urls, v->nurls, url);
}

size_t place_decide(const struct place_view *v, const struct place_config *c,
                    struct place_move *out, size_t max)
{
    int target[MX_PARTITIONS_MAX];
    unsigned parts = v->partitions <= MX_PARTITIONS_MAX ? v->partitions : MX_PARTITIONS_MAX;
    place_target(parts, v->urls, v->nurls, v->owner, target);
    int self = index_of(v, v->self);
    size_t n = 0;
    if (self < 0)
        return 0; /* not live yet in its own view: it takes nothing */
    for (unsigned p = 0; p < parts && n < max; p++) {
        if (v->owner[p])
            continue;
        bool orphan = v->now_ms - v->free_since_ms[p] >= c->orphan_after_ms;
        bool as_target = target[p] == self && !(v->orphan_only && v->orphan_only[p]);
        const char *to = v->handed_to ? v->handed_to[p] : NULL;
        bool mine = to && strcmp(to, v->self) == 0;
        if (mine || (as_target && !to) || orphan)
            out[n++] = (struct place_move){.action = PLACE_CLAIM, .partition = p, .to = self};
    }
    unsigned gives = 0;
    for (unsigned p = 0; p < parts && n < max && gives < c->max_gives; p++) {
        if (index_of(v, v->owner[p]) != self || target[p] == self || target[p] < 0)
            continue;
        if (v->now_ms - v->live_since_ms[target[p]] < c->settle_ms)
            continue; /* a server that has just appeared may be gone again */
        out[n++] = (struct place_move){.action = PLACE_GIVE, .partition = p, .to = target[p]};
        gives++;
    }
    return n;
}
