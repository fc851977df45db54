/*
 * Partition placement (server/placement.h): the target is balanced and depends on the
 * membership alone; servers that each decide for themselves from the same view converge on
 * it, a join or a leave moves each partition at most once (no ping-pong) and no more than
 * the ideal (the newcomer's share; the leaver's partitions), a partition whose target does not come
 * is claimed by another, and a seeded random run of joins and leaves always settles balanced.
 *
 * The simulation: every server decides in turn, every tick, from the view all share (the
 * owner blobs' leases, the heartbeats); a claim of a free partition succeeds for the first
 * that makes it (the blob lease); a give frees it (seal, release) for its target to claim.
 */
#include "tests/unit/testutil.h"

#include <stdbool.h>

#include "common/partition.h"
#include "server/placement.h"

#define MAXS   16
#define TICK   100
#define SETTLE 10000
#define ORPHAN 2000

struct sim {
    unsigned partitions;
    char urls[MAXS][48];
    bool live[MAXS], stalled[MAXS];
    int64_t live_since[MAXS];
    int owner[MX_PARTITIONS_MAX]; /* index, or -1 */
    int64_t free_since[MX_PARTITIONS_MAX];
    unsigned moves[MX_PARTITIONS_MAX]; /* owner changes since the last reset */
    int64_t now;
    unsigned rng;
};

static const struct place_config config = {
    .orphan_after_ms = ORPHAN, .settle_ms = SETTLE, .max_gives = 2};

static void sim_init(struct sim *s, unsigned partitions, unsigned seed)
{
    memset(s, 0, sizeof *s);
    s->partitions = partitions;
    s->rng = seed;
    for (int i = 0; i < MAXS; i++)
        snprintf(s->urls[i], sizeof s->urls[i], "http://mutexd-%d.mutexd-hl:8080", i);
    for (unsigned p = 0; p < partitions; p++)
        s->owner[p] = -1;
}

static void join(struct sim *s, int i)
{
    s->live[i] = true;
    s->live_since[i] = s->now;
}

/* A server that stops: with SIGTERM it gives everything up at once; dead, its leases run
 * out. Either way its partitions are free from now on (the lease's own expiry is the
 * group's business, not placement's). */
static void leave(struct sim *s, int i)
{
    s->live[i] = false;
    for (unsigned p = 0; p < s->partitions; p++)
        if (s->owner[p] == i) {
            s->owner[p] = -1;
            s->free_since[p] = s->now;
        }
}

/* One tick: every live server, in a random order, decides and acts. */
static void tick(struct sim *s)
{
    const char *urls[MAXS], *owner[MX_PARTITIONS_MAX];
    int64_t since[MAXS];
    int idx[MAXS];
    size_t n = 0;
    for (int i = 0; i < MAXS; i++)
        if (s->live[i]) {
            idx[n] = i;
            urls[n] = s->urls[i];
            since[n++] = s->live_since[i];
        }
    int order[MAXS];
    for (size_t k = 0; k < n; k++)
        order[k] = (int)k;
    for (size_t k = n; k > 1; k--) {
        size_t j = (size_t)rand_r(&s->rng) % k;
        int t = order[k - 1];
        order[k - 1] = order[j];
        order[j] = t;
    }
    for (size_t k = 0; k < n; k++) {
        int me = idx[order[k]];
        if (s->stalled[me])
            continue;
        for (unsigned p = 0; p < s->partitions; p++)
            owner[p] = s->owner[p] >= 0 ? s->urls[s->owner[p]] : NULL;
        struct place_view v = {.partitions = s->partitions,
                               .self = s->urls[me],
                               .urls = urls,
                               .live_since_ms = since,
                               .nurls = n,
                               .owner = owner,
                               .free_since_ms = s->free_since,
                               .now_ms = s->now};
        struct place_move mv[MX_PARTITIONS_MAX * 2];
        size_t m = place_decide(&v, &config, mv, sizeof mv / sizeof mv[0]);
        for (size_t j = 0; j < m; j++) {
            unsigned p = mv[j].partition;
            if (mv[j].action == PLACE_CLAIM && s->owner[p] < 0) {
                s->owner[p] = me;
                s->moves[p]++;
            } else if (mv[j].action == PLACE_GIVE && s->owner[p] == me) {
                s->owner[p] = -1;
                s->free_since[p] = s->now;
            }
        }
    }
    s->now += TICK;
}

/* Ticks until nothing has moved for twice the settle time; fails past `max_ms`. */
static void settle(struct sim *s, int64_t max_ms)
{
    int64_t end = s->now + max_ms, quiet_since = s->now;
    int prev[MX_PARTITIONS_MAX];
    while (s->now - quiet_since < 2 * SETTLE) {
        memcpy(prev, s->owner, sizeof prev);
        tick(s);
        if (memcmp(prev, s->owner, sizeof prev) != 0)
            quiet_since = s->now;
        if (s->now > end)
            fail_msg("no settling within %lld ms", (long long)max_ms);
    }
}

/* Settled: every partition owned by a live server, each owning floor or ceil of its share,
 * as the target says. */
static void check_balanced(const struct sim *s)
{
    const char *urls[MAXS];
    int idx[MAXS], target[MX_PARTITIONS_MAX];
    size_t n = 0;
    for (int i = 0; i < MAXS; i++)
        if (s->live[i]) {
            idx[n] = i;
            urls[n++] = s->urls[i];
        }
    const char *owner[MX_PARTITIONS_MAX];
    for (unsigned p = 0; p < s->partitions; p++)
        owner[p] = s->owner[p] >= 0 ? s->urls[s->owner[p]] : NULL;
    place_target(s->partitions, urls, n, owner, target);
    unsigned count[MAXS] = {0};
    for (unsigned p = 0; p < s->partitions; p++) {
        assert_true(s->owner[p] >= 0);
        assert_true(s->live[s->owner[p]]);
        if (s->owner[p] != idx[target[p]])
            fail_msg("partition %u is with %d, its target is %d", p, s->owner[p], idx[target[p]]);
        count[s->owner[p]]++;
    }
    unsigned lo = s->partitions / (unsigned)n, hi = (s->partitions + (unsigned)n - 1) / (unsigned)n;
    for (size_t k = 0; k < n; k++)
        if (count[idx[k]] < lo || count[idx[k]] > hi)
            fail_msg("server %d owns %u of %u (want %u to %u)", idx[k], count[idx[k]],
                     s->partitions, lo, hi);
}

/* Moves since the last call: how many partitions moved, and none twice. */
static unsigned moved_once(struct sim *s)
{
    unsigned moved = 0;
    for (unsigned p = 0; p < s->partitions; p++) {
        if (s->moves[p] > 1)
            fail_msg("partition %u moved %u times", p, s->moves[p]);
        moved += s->moves[p];
        s->moves[p] = 0;
    }
    return moved;
}

static void the_target_is_balanced_and_depends_on_the_members_alone(void **st)
{
    (void)st;
    static const unsigned counts[] = {1, 2, 16, 64, 256};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        for (size_t n = 1; n <= 10; n++) {
            char names[10][32];
            const char *urls[10], *reversed[10];
            for (size_t i = 0; i < n; i++) {
                snprintf(names[i], sizeof names[i], "http://10.0.0.%zu:8080", i + 1);
                urls[i] = names[i];
                reversed[n - 1 - i] = names[i];
            }
            int t[MX_PARTITIONS_MAX], r[MX_PARTITIONS_MAX];
            unsigned load[10] = {0};
            place_target(counts[c], urls, n, NULL, t);
            place_target(counts[c], reversed, n, NULL, r);
            for (unsigned p = 0; p < counts[c]; p++) {
                assert_true(t[p] >= 0 && (size_t)t[p] < n);
                assert_string_equal(urls[t[p]], reversed[r[p]]); /* the same server */
                load[t[p]]++;
            }
            unsigned hi = (unsigned)((counts[c] + n - 1) / n), lo = counts[c] / (unsigned)n;
            for (size_t i = 0; i < n; i++)
                assert_true(load[i] >= lo && load[i] <= hi);
        }
    }
    int t[4];
    place_target(4, NULL, 0, NULL, t);
    assert_int_equal(t[0], -1);
}

/* Three servers start together on 16 partitions: each ends with 5 or 6, each partition
 * claimed once. A fourth joins: its share comes to it a few at a time, each partition moving
 * once, about as many as the ideal (16 / 4). */
static void a_join_moves_a_share_once(void **st)
{
    (void)st;
    struct sim s;
    sim_init(&s, 16, 7);
    for (int i = 0; i < 3; i++)
        join(&s, i);
    settle(&s, 120000);
    check_balanced(&s);
    assert_int_equal(moved_once(&s), 16);
    join(&s, 3);
    settle(&s, 300000);
    check_balanced(&s);
    unsigned moved = moved_once(&s);
    printf("16 partitions, a fourth server joins: %u moved (ideal 4)\n", moved);
    assert_int_equal(moved, 4);
}

/* A join where the shares do not divide evenly: the newcomer takes the smaller share (the
 * larger stays with those that own the most), whatever the seed, however the partitions in
 * transit make the counts look while it goes on. */
static void a_join_takes_the_smaller_share(void **st)
{
    (void)st;
    static const struct {
        unsigned partitions, before;
    } cases[] = {{16, 2}, {16, 4}, {64, 3}, {7, 2}, {100, 6}, {10, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (unsigned seed = 1; seed <= 8; seed++) {
            struct sim s;
            sim_init(&s, cases[c].partitions, seed);
            for (unsigned i = 0; i < cases[c].before; i++)
                join(&s, (int)i);
            settle(&s, 300000);
            moved_once(&s);
            join(&s, (int)cases[c].before);
            settle(&s, 600000);
            check_balanced(&s);
            unsigned moved = moved_once(&s), want = cases[c].partitions / (cases[c].before + 1);
            if (moved != want)
                fail_msg("%u partitions, %u servers and one joins (seed %u): %u moved, want %u",
                         cases[c].partitions, cases[c].before, seed, moved, want);
        }
}

/* One of four leaves (or dies): only its partitions move, each once, to the others. */
static void a_leave_moves_its_partitions_only(void **st)
{
    (void)st;
    struct sim s;
    sim_init(&s, 64, 11);
    for (int i = 0; i < 4; i++)
        join(&s, i);
    settle(&s, 300000);
    check_balanced(&s);
    moved_once(&s);
    int before[MX_PARTITIONS_MAX];
    memcpy(before, s.owner, sizeof before);
    leave(&s, 2);
    settle(&s, 300000);
    check_balanced(&s);
    unsigned moved = moved_once(&s), had = 0, others_moved = 0;
    for (unsigned p = 0; p < 64; p++) {
        had += before[p] == 2;
        others_moved += before[p] != 2 && s.owner[p] != before[p];
    }
    printf("64 partitions, one of four leaves: %u moved, it had %u, others moved %u\n", moved, had,
           others_moved);
    assert_int_equal(moved, had);
    assert_int_equal(others_moved, 0);
}

/* A free partition whose target does not claim it (a server stalled after its heartbeat)
 * is claimed by another once the orphan time has passed, not before. */
static void an_orphan_is_claimed_by_another(void **st)
{
    (void)st;
    struct sim s;
    sim_init(&s, 8, 3);
    join(&s, 0);
    join(&s, 1);
    s.stalled[1] = true;
    int64_t start = s.now;
    while (s.now - start < ORPHAN - TICK) {
        tick(&s);
        for (unsigned p = 0; p < 8; p++)
            assert_true(s.owner[p] != 1);
    }
    unsigned owned = 0;
    for (unsigned p = 0; p < 8; p++)
        owned += s.owner[p] == 0;
    assert_true(owned >= 4 && owned < 8); /* its own share only, so far */
    for (int k = 0; k < 3; k++)
        tick(&s);
    for (unsigned p = 0; p < 8; p++)
        assert_int_equal(s.owner[p], 0);
    /* Back: its share goes to it once it has been live long enough, and no sooner. */
    s.stalled[1] = false;
    settle(&s, 120000);
    check_balanced(&s);
}

/* A partition `self` may take only as an orphan (another server broke its lease, or holds
 * it gone) is not claimed as its target, only once it has been free for the orphan time. */
static void a_partition_claimed_only_as_an_orphan_waits_for_the_orphan_time(void **st)
{
    (void)st;
    const char *urls[] = {"http://a:8080", "http://b:8080"};
    int64_t since[] = {0, 0};
    const char *owner[4] = {NULL, NULL, NULL, NULL};
    int64_t free_since[4] = {0, 0, 0, 0};
    bool only[4] = {true, true, true, true};
    struct place_view v = {.partitions = 4,
                           .self = urls[0],
                           .urls = urls,
                           .live_since_ms = since,
                           .nurls = 2,
                           .owner = owner,
                           .free_since_ms = free_since,
                           .now_ms = ORPHAN - 1};
    struct place_move mv[8];
    size_t free_claims = place_decide(&v, &config, mv, 8);
    assert_int_equal(free_claims, 2); /* its share of 4 among 2, as its target */
    v.orphan_only = only;
    assert_int_equal(place_decide(&v, &config, mv, 8), 0);
    v.now_ms = ORPHAN;
    assert_int_equal(place_decide(&v, &config, mv, 8), 4); /* every orphan */
}

/* A partition handed to a server (named in its owner blob) is claimed by that server at
 * once, even where its view makes another the target, and by any other only as an orphan:
 * a server whose view lacks a newcomer yet does not take the newcomer's partition. */
static void a_partition_handed_to_a_server_is_claimed_by_it_alone(void **st)
{
    (void)st;
    const char *urls[] = {"http://a:8080", "http://b:8080"};
    int64_t since[] = {0, 0};
    const char *owner[2] = {NULL, NULL};
    int64_t free_since[2] = {0, 0};
    const char *to[2] = {"http://c:8080", "http://b:8080"}; /* c: not in this view yet */
    struct place_view v = {.partitions = 2,
                           .urls = urls,
                           .live_since_ms = since,
                           .nurls = 2,
                           .owner = owner,
                           .free_since_ms = free_since,
                           .handed_to = to,
                           .now_ms = ORPHAN - 1};
    struct place_move mv[4];
    for (int i = 0; i < 2; i++) {
        v.self = urls[i];
        size_t n = place_decide(&v, &config, mv, 4);
        if (i == 0) {
            assert_int_equal(n, 0); /* neither is a's, whatever its targets */
        } else {
            assert_int_equal(n, 1);
            assert_int_equal(mv[0].partition, 1);
        }
    }
    v.now_ms = ORPHAN; /* c never came: an orphan, anyone's */
    v.self = urls[0];
    assert_int_equal(place_decide(&v, &config, mv, 4), 2);
}

/* Seeded: servers join and leave at random; after each change the group settles balanced,
 * and between changes no partition moves twice. */
static void random_joins_and_leaves_always_settle(void **st)
{
    (void)st;
    unsigned seed = mx_test_seed();
    struct sim s;
    sim_init(&s, 32, seed);
    join(&s, 0);
    settle(&s, 300000);
    moved_once(&s);
    unsigned total = 0;
    for (int round = 0; round < 40; round++) {
        int i = rand_r(&s.rng) % 8;
        int live = 0;
        for (int k = 0; k < 8; k++)
            live += s.live[k];
        if (s.live[i] && live > 1)
            leave(&s, i);
        else if (!s.live[i])
            join(&s, i);
        settle(&s, 600000);
        check_balanced(&s);
        total += moved_once(&s);
    }
    printf("32 partitions, 40 joins and leaves among 8 servers: %u moves\n", total);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(the_target_is_balanced_and_depends_on_the_members_alone),
    cmocka_unit_test(a_join_moves_a_share_once),
    cmocka_unit_test(a_join_takes_the_smaller_share),
    cmocka_unit_test(a_leave_moves_its_partitions_only),
    cmocka_unit_test(an_orphan_is_claimed_by_another),
    cmocka_unit_test(a_partition_claimed_only_as_an_orphan_waits_for_the_orphan_time),
    cmocka_unit_test(a_partition_handed_to_a_server_is_claimed_by_it_alone),
    cmocka_unit_test(random_joins_and_leaves_always_settle),
};
MX_TEST_MAIN(tests)
