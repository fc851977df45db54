package io.mutexd;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Several resources at once, against real servers: acquireMany, renewMany and releaseMany;
 * lockMany, a set renewed and released with one request for all of its leases and lost as a
 * whole; lockOrdered, Curator's multi-lock; and, on a partitioned group, straight to the
 * owner of the names' partition.
 */
final class ManyTest {
    private ManyTest() {
    }

    /** {@code n} resource names of the test's own, sharing a prefix: .../a, .../b... */
    static List<String> names(int n) {
        String base = T.name();
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(base + "/" + (char) ('a' + i));
        }
        return out;
    }

    /** The fencing token of the resource's holder, 0 when it is free. */
    static long holderToken(Client c, String r) {
        ResourceState st = c.get(r);
        return st.holder() == null ? 0 : st.holder().fencingToken();
    }

    /** Counts a client's requests by method and path (the query left out). */
    static Map<String, Integer> countRequests(Client c) {
        Map<String, Integer> n = new ConcurrentHashMap<>();
        c.onAnswer = (to, method, path, status, h) -> {
            int q = path.indexOf('?');
            n.merge(method + " " + (q >= 0 ? path.substring(0, q) : path), 1, Integer::sum);
        };
        return n;
    }

    static int withSuffix(Map<String, Integer> n, String suffix) {
        int sum = 0;
        for (Map.Entry<String, Integer> e : n.entrySet()) {
            if (e.getKey().endsWith(suffix)) {
                sum += e.getValue();
            }
        }
        return sum;
    }

    /**
     * One name held by another owner, no wait: lease_held naming it and its holder, and
     * nothing granted (the other names stay free); the same through lockMany with a wait that
     * runs out.
     */
    static void testAcquireManyIsAllOrNone() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        Client other = T.client(s.url);
        List<String> rs = names(3);
        Grant held = other.acquire(rs.get(1), new AcquireOptions().owner("someone-else").ttl(Duration.ofSeconds(20)));
        LeaseHeldException e = T.expect(LeaseHeldException.class,
                () -> c.acquireMany(rs, new AcquireOptions().ttl(Duration.ofSeconds(5))));
        T.eq(rs.get(1), e.resource(), "the first held");
        T.eq("someone-else", e.holder().owner(), "its holder");
        T.eq(held.fencingToken(), e.holder().fencingToken(), "its holder's token");
        T.check(e.retryAfter() != null && e.retryAfter().getSeconds() >= 1, "Retry-After " + e.retryAfter());
        T.eq(0L, holderToken(other, rs.get(0)), rs.get(0) + " granted though " + rs.get(1) + " is held");
        T.eq(0L, holderToken(other, rs.get(2)), rs.get(2) + " granted though " + rs.get(1) + " is held");

        long start = System.nanoTime();
        e = T.expect(LeaseHeldException.class,
                () -> c.lockMany(rs, new LockOptions().ttl(Duration.ofMillis(1500)).waitFor(Duration.ofMillis(400))));
        long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        T.check(took >= 300 && took < 3000, "the wait ran out after " + took + " ms");
        T.eq(rs.get(1), e.resource(), "the first held");
        for (String r : List.of(rs.get(0), rs.get(2))) {
            ResourceState st = other.get(r);
            T.check(!st.isHeld() && st.waiters() == 0, r + " after the wait ran out: " + st);
        }
        T.eq(held.fencingToken(), holderToken(other, rs.get(1)), "the holder of " + rs.get(1));
    }

    /**
     * A granted set (one lease id, a token each, in the order given), its idempotent retry, a
     * batch renewal, and lease_lost naming the one broken while the others are renewed, then
     * released, all the same.
     */
    static void testAcquireRenewReleaseMany() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        Client other = T.client(s.url);
        List<String> sorted = names(3);
        List<String> rs = List.of(sorted.get(2), sorted.get(1), sorted.get(0)); // not in name order
        List<Grant> gs = c.acquireMany(rs, new AcquireOptions().owner("me").ttl(Duration.ofSeconds(5)).metadata(Map.of("v", 1L)));
        T.eq(3, gs.size(), "grants");
        for (int i = 0; i < 3; i++) {
            Grant g = gs.get(i);
            T.eq(rs.get(i), g.resource(), "in the order given");
            T.eq(gs.get(0).leaseId(), g.leaseId(), "one lease id");
            T.eq("me", g.owner(), "owner");
            T.eq(5000L, g.ttlMs(), "ttl");
            T.eq(Map.of("v", 1L), g.metadata(), "metadata");
            for (int j = 0; j < i; j++) {
                T.check(gs.get(j).fencingToken() != g.fencingToken(), "a token each");
            }
            long left = g.deadlineNanos() - System.nanoTime();
            T.check(left > TimeUnit.SECONDS.toNanos(4) && left <= TimeUnit.SECONDS.toNanos(5), "the deadline is 5 s away");
            T.eq(g.fencingToken(), holderToken(other, g.resource()), "the holder of " + g.resource());
        }
        List<Grant> again = c.acquireMany(rs, new AcquireOptions().owner("me").ttl(Duration.ofSeconds(5)).leaseId(gs.get(0).leaseId()));
        for (int i = 0; i < 3; i++) {
            T.eq(gs.get(i).fencingToken(), again.get(i).fencingToken(), "a retry with the lease id");
        }
        List<Grant> renewed = c.renewMany(rs, gs.get(0).leaseId(), Duration.ofSeconds(8), null);
        for (int i = 0; i < 3; i++) {
            T.eq(rs.get(i), renewed.get(i).resource(), "renewed, in order");
            T.eq(gs.get(i).fencingToken(), renewed.get(i).fencingToken(), "a renewal keeps the token");
            T.eq(8000L, renewed.get(i).ttlMs(), "renewed ttl");
        }

        other.breakLease(rs.get(1), "test", null);
        LeaseLostException lost = T.expect(LeaseLostException.class, () -> c.renewMany(rs, gs.get(0).leaseId(), null, null));
        T.eq(rs.get(1), lost.resource(), "the first lost");
        T.eq(List.of(rs.get(1)), lost.resources(), "the ones lost");
        T.eq(gs.get(0).fencingToken(), holderToken(other, rs.get(0)), "still held");
        T.eq(gs.get(2).fencingToken(), holderToken(other, rs.get(2)), "still held");
        lost = T.expect(LeaseLostException.class, () -> c.releaseMany(rs, gs.get(0).leaseId()));
        T.eq(List.of(rs.get(1)), lost.resources(), "the ones lost");
        for (String r : rs) {
            T.eq(0L, holderToken(other, r), r + " released");
        }
        lost = T.expect(LeaseLostException.class, () -> c.releaseMany(rs, gs.get(0).leaseId()));
        T.eq(rs, lost.resources(), "released twice");
    }

    /**
     * A set outlives several TTLs, renewed with one request for all of its leases, each keeping
     * its token; releasing it frees them all with one request.
     */
    static void testLockManyRenewsTheSetInTheBackground() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        Client other = T.client(s.url);
        Map<String, Integer> sent = countRequests(c);
        List<String> rs = names(3);
        LeaseSet kept;
        try (LeaseSet set = c.lockMany(rs, new LockOptions().ttl(Duration.ofSeconds(1)))) {
            kept = set;
            T.eq(rs, set.resources(), "resources");
            T.eq(36, set.leaseId().length(), "one lease id");
            List<Grant> gs = set.grants();
            for (int i = 0; i < 3; i++) {
                T.eq(rs.get(i), gs.get(i).resource(), "in order");
                T.eq(set.leaseId(), gs.get(i).leaseId(), "the set's lease id");
                T.eq(gs.get(i).fencingToken(), set.token(rs.get(i)), "its token");
            }
            T.expect(IllegalArgumentException.class, () -> set.token("tests/not-of-the-set"));
            long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(4000);
            while (System.nanoTime() - end < 0) {
                T.check(set.isHeld(), "held, " + set.error());
                set.check();
                T.check(set.remaining().toMillis() > 0 && set.remaining().toMillis() <= 1000, "remaining " + set.remaining());
                for (String r : rs) {
                    T.eq(set.token(r), holderToken(other, r), "the holder of " + r);
                }
                T.sleep(250);
            }
            T.check(set.renewals() >= 9, "renewed every third of the TTL: " + set.renewals());
            T.check(sent.getOrDefault("POST /v1/renew", 0) >= set.renewals(), "batch renewals: " + sent);
            T.eq(sent.getOrDefault("POST /v1/renew", 0), withSuffix(sent, "/renew"), "no renewal of one resource: " + sent);
            for (Grant g : set.grants()) {
                T.eq(set.token(g.resource()), g.fencingToken(), "a renewal keeps the token");
            }
            T.check(!set.lost().isDone(), "not lost");
            T.expect(LeaseHeldException.class, () -> other.acquireMany(List.of(rs.get(2), rs.get(0)), null));
        }
        T.eq(1, sent.getOrDefault("POST /v1/release", 0), "one batch release: " + sent);
        T.eq(1, withSuffix(sent, "/release"), "one release: " + sent);
        for (String r : rs) {
            T.eq(0L, holderToken(other, r), r + " released");
        }
        T.check(!kept.isHeld() && kept.error() == null, "released, not lost");
        T.expect(IllegalStateException.class, kept::check);
        kept.release(); // a second release: nothing thrown
    }

    /**
     * Breaking one lease of the set loses the whole set at its next renewal (lost(), the
     * listener, check() naming the resource); releasing it gives back the leases it still
     * holds and leaves the broken one's new holder alone.
     */
    static void testLockManyIsLostWhenOneLeaseIsBroken() throws Exception {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        Client other = T.client(s.url);
        List<String> rs = names(3);
        LeaseSet set = c.lockMany(rs, new LockOptions().ttl(Duration.ofMillis(1500)));
        AtomicReference<MutexdException> heard = new AtomicReference<>();
        set.onLost(heard::set);
        T.sleep(200);
        T.check(other.breakLease(rs.get(1), "test", null), "broken");
        long brokenAt = System.nanoTime();
        MutexdException why = set.lost().get(1200, TimeUnit.MILLISECONDS);
        T.check(System.nanoTime() - brokenAt < TimeUnit.MILLISECONDS.toNanos(1200), "lost at the next renewal");
        T.check(why instanceof LeaseLostException, "lost by lease_lost: " + why);
        T.eq(List.of(rs.get(1)), ((LeaseLostException) why).resources(), "the one broken");
        T.within(Duration.ofSeconds(1), "the listener heard it", () -> heard.get() == why);
        T.check(!set.isHeld() && set.remaining().isZero(), "not held");
        T.expect(LeaseLostException.class, set::check);
        Grant theirs = other.acquire(rs.get(1), new AcquireOptions().ttl(Duration.ofSeconds(5)));
        T.expect(LeaseLostException.class, set::release);
        T.eq(theirs.fencingToken(), holderToken(other, rs.get(1)), "the new holder keeps its lease");
        T.eq(0L, holderToken(other, rs.get(0)), rs.get(0) + ", still held by the lost set, released");
        T.eq(0L, holderToken(other, rs.get(2)), rs.get(2) + ", still held by the lost set, released");
        set.close(); // lost already: nothing thrown
    }

    /** Renewals of the set that fail until the deadline lose it (LeaseExpiredException), not before. */
    static void testLockManyIsLostAtItsDeadlineWhenTheServerDies() throws Exception {
        TestServer s = TestServer.launch();
        Client c = Client.builder().urls(s.url).timeout(Duration.ofSeconds(2)).build();
        LeaseSet set = c.lockMany(names(2), new LockOptions().ttl(Duration.ofMillis(1500)));
        T.within(Duration.ofSeconds(2), "a renewal", () -> set.renewals() >= 1);
        long deadline = set.deadlineNanos();
        s.kill();
        long early = deadline - System.nanoTime() - TimeUnit.MILLISECONDS.toNanos(150);
        T.check(!set.lost().isDone(), "not lost at the kill");
        T.sleep(Math.max(0, TimeUnit.NANOSECONDS.toMillis(early)));
        T.check(!set.lost().isDone(), "lost before the deadline: " + set.error());
        MutexdException why = set.lost().get(1500, TimeUnit.MILLISECONDS);
        long late = System.nanoTime() - deadline;
        T.check(late >= 0 && late < TimeUnit.MILLISECONDS.toNanos(500), "lost " + late / 1e6 + " ms after the deadline");
        T.check(why instanceof LeaseExpiredException, "expired: " + why);
        T.check(why.getMessage().contains("leases on "), "names the set: " + why.getMessage());
        T.check(set.lastError() instanceof TransportException, "the last error: " + set.lastError());
    }

    /** A set waiting for one held resource is granted once it is released, every lease at once. */
    static void testLockManyWaitsForEveryResource() throws Exception {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        Client other = T.client(s.url);
        List<String> rs = names(2);
        Lease first = other.lock(rs.get(1), new LockOptions().ttl(Duration.ofMillis(1500)));
        CompletableFuture.runAsync(() -> {
            T.sleep(600);
            first.release();
        });
        long start = System.nanoTime();
        try (LeaseSet set = c.lockMany(rs, new LockOptions().ttl(Duration.ofMillis(1500)).waitFor(Duration.ofSeconds(10)))) {
            long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            T.check(took >= 400 && took < 3000, "granted after " + took + " ms");
            T.check(Long.compareUnsigned(set.token(rs.get(1)), first.token()) > 0, "a larger token");
            for (String r : rs) {
                T.eq(set.token(r), holderToken(other, r), "the holder of " + r);
            }
            T.check(set.remaining().toMillis() > 1200, "its deadline counts from the grant: " + set.remaining());
        }
    }

    /**
     * The ordered helper takes a lease of its own on each resource, in sorted order, renews
     * each, and is lost as a whole when one is broken; releasing it gives back the others.
     */
    static void testLockOrderedTakesThemOneByOneInNameOrder() throws Exception {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        Client other = T.client(s.url);
        Map<String, Integer> sent = countRequests(c);
        List<String> rs = names(3);
        LeaseSet set = c.lockOrdered(List.of(rs.get(2), rs.get(0), rs.get(1)), new LockOptions().ttl(Duration.ofMillis(1500)));
        T.eq(rs, set.resources(), "in name order");
        T.eq(null, set.leaseId(), "no one lease id");
        List<Grant> gs = set.grants();
        for (int i = 0; i < 3; i++) {
            T.eq(rs.get(i), gs.get(i).resource(), "in order");
            T.eq(gs.get(i).fencingToken(), set.token(rs.get(i)), "its token");
            T.eq(gs.get(i).fencingToken(), holderToken(other, rs.get(i)), "the holder");
            if (i > 0) {
                T.check(Long.compareUnsigned(gs.get(i).fencingToken(), gs.get(i - 1).fencingToken()) > 0
                        && !gs.get(i).leaseId().equals(gs.get(i - 1).leaseId()), "taken one by one in name order: " + gs);
            }
        }
        T.eq(0, sent.getOrDefault("POST /v1/acquire", 0), "requests about several resources");
        T.within(Duration.ofSeconds(3), "two renewals of each", () -> set.renewals() >= 2);
        for (String r : rs) {
            T.eq(set.token(r), holderToken(other, r), "the holder of " + r);
        }
        set.check();
        other.breakLease(rs.get(1), null, null);
        MutexdException why = set.lost().get(1200, TimeUnit.MILLISECONDS);
        T.check(why instanceof LeaseLostException, "lost by lease_lost: " + why);
        T.check(!set.isHeld(), "not held");
        T.expect(LeaseLostException.class, set::release);
        for (String r : rs) {
            T.eq(0L, holderToken(other, r), r + " released");
        }
    }

    /**
     * The third name (in order) is held: the two taken before it are released, the last taken
     * first, the fourth is never taken, and the exception names the one held.
     */
    static void testLockOrderedReleasesWhatItTookWhenOneFails() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        Client other = T.client(s.url);
        List<String> rs = names(4);
        String prefix = rs.get(0).substring(0, rs.get(0).length() - 1);
        Grant held = other.acquire(rs.get(2), new AcquireOptions().ttl(Duration.ofSeconds(20)));
        long after = other.events(0, prefix, 1000, null).next();
        long start = System.nanoTime();
        LeaseHeldException e = T.expect(LeaseHeldException.class, () -> c.lockOrdered(
                List.of(rs.get(3), rs.get(2), rs.get(1), rs.get(0)),
                new LockOptions().ttl(Duration.ofSeconds(10)).waitFor(Duration.ofMillis(500))));
        long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        T.check(took >= 400 && took < 3000, "the wait ran out after " + took + " ms");
        T.eq(rs.get(2), e.resource(), "the one held");
        T.eq(held.fencingToken(), e.holder().fencingToken(), "its holder");
        for (String r : List.of(rs.get(0), rs.get(1), rs.get(3))) {
            T.eq(0L, holderToken(other, r), r + " released, or never taken");
        }
        List<String> got = new ArrayList<>();
        for (Event ev : other.events(after, prefix, 1000, null).events()) {
            if (!ev.type().equals("renewed")) { // a renewal may come between, as the machine goes
                got.add(ev.type() + " " + ev.resource().substring(ev.resource().length() - 1));
            }
        }
        T.eq(List.of("granted a", "granted b", "released b", "released a"), got, "events");
    }

    /** No name, an empty one, or one named twice: refused before any request. */
    static void testLockOrderedRefusesANameTwice() {
        Client c = T.client("http://127.0.0.1:" + TestServer.freePort());
        List<String> rs = names(2);
        IllegalArgumentException e = T.expect(IllegalArgumentException.class,
                () -> c.lockOrdered(List.of(rs.get(0), rs.get(1), rs.get(0)), null));
        T.check(e.getMessage().contains("twice"), e.getMessage());
        T.expect(IllegalArgumentException.class, () -> c.lockOrdered(List.of(), null));
        T.expect(IllegalArgumentException.class, () -> c.acquireMany(List.of(rs.get(0), ""), null));
    }

    /**
     * On a partitioned group (three real servers of 16 partitions on Azurite): acquireMany,
     * renewMany, releaseMany and a lockMany's renewals of hash-tagged names go straight to the
     * owner of their partition, and no server forwards one; names of different partitions are
     * refused (partitions_differ), and lockOrdered takes them.
     */
    static void testSeveralResourcesGoStraightToThePartitionsOwner() throws Exception {
        RoutingTest.withGroup(group -> {
            List<TestServer> owners = RoutingTest.settledMap(group, Duration.ofSeconds(60));
            Client c = Client.builder().urls(RoutingTest.urlsOf(group)).timeout(Duration.ofSeconds(10)).build();
            List<String> many = new ArrayList<>();
            List<String> astray = new ArrayList<>();
            c.onAnswer = (to, method, path, status, h) -> {
                if (!path.equals("/v1/acquire") && !path.equals("/v1/renew") && !path.equals("/v1/release")) {
                    return;
                }
                String by = h.firstValue("Mutexd-Served-By").orElse("");
                String line = method + " " + path + " sent to " + to + ", " + status + " served by " + by + ", partition "
                        + h.firstValue("Mutexd-Partition").orElse("");
                synchronized (many) {
                    many.add(line);
                    if (!by.equals(to)) {
                        astray.add(line);
                    }
                }
            };
            c.get(T.name());
            RoutingTest.learned(c, owners);

            // Two accounts in one partition, whose owner is not the server asked first.
            List<String> rs = null;
            int p = 0;
            for (int i = 0; rs == null; i++) {
                String tag = "{" + T.name().substring("tests/".length()) + "-" + i + "}";
                p = Partitions.of(tag, RoutingTest.PARTITIONS);
                if (owners.get(p) != group.get(0)) {
                    rs = List.of(tag + "/alice", tag + "/bob");
                }
            }
            TestServer owner = owners.get(p);
            // Before each request, one about a name of another server's: the server asked first
            // (the one that answered last) is then not the owner.
            String elsewhere = null;
            for (List<String> ns : RoutingTest.namesIn(T.name() + "/", 1)) {
                if (owners.get(Partitions.of(ns.get(0), RoutingTest.PARTITIONS)) != owner) {
                    elsewhere = ns.get(0);
                    break;
                }
            }
            String away = elsewhere;
            Runnable goAway = () -> {
                c.get(away);
                T.check(!c.url().equals(owner.url), "the client asks " + c.url() + " first");
            };
            List<String> names = rs;
            long before = RoutingTest.forwarded(group);
            goAway.run();
            List<Grant> gs = c.acquireMany(names, new AcquireOptions().ttl(Duration.ofSeconds(20)));
            goAway.run();
            c.renewMany(names, gs.get(0).leaseId(), null, null);
            for (int i = 0; i < 2; i++) {
                T.eq(gs.get(i).fencingToken(), holderToken(c, names.get(i)), "the holder of " + names.get(i));
            }
            goAway.run();
            c.releaseMany(names, gs.get(0).leaseId());
            goAway.run();
            try (LeaseSet set = c.lockMany(names, new LockOptions().ttl(Duration.ofMillis(1500)))) {
                T.within(Duration.ofSeconds(10), "two renewals of the set", () -> {
                    // Not checked here: the set's renewal, on its own thread, may answer
                    // between this request and a look at the client's first server.
                    c.get(away);
                    return set.renewals() >= 2;
                });
                c.get(away);
            }
            synchronized (many) {
                T.check(many.size() >= 6 && astray.isEmpty(), many.size() + " requests about several resources, "
                        + astray.size() + " not served where sent: " + astray);
                for (String line : many) {
                    T.check(line.contains("sent to " + owner.url + ",") && line.endsWith("partition " + p),
                            "not sent to the owner of partition " + p + " (" + owner.url + "): " + line);
                }
            }
            T.eq(0L, RoutingTest.forwarded(group) - before, "requests forwarded");

            // Names of two partitions: refused by acquireMany, taken by lockOrdered.
            List<List<String>> byPartition = RoutingTest.namesIn(T.name() + "/", 1);
            List<String> apart = List.of(byPartition.get(5).get(0), byPartition.get(11).get(0));
            InvalidRequestException e = T.expect(InvalidRequestException.class, () -> c.acquireMany(apart, null));
            T.eq("resources", e.field(), "the field");
            T.eq("partitions_differ", e.errorObject().get("reason"), "the reason");
            try (LeaseSet set = c.lockOrdered(apart, new LockOptions().ttl(Duration.ofSeconds(5)))) {
                for (String r : apart) {
                    T.eq(set.token(r), holderToken(c, r), "the holder of " + r);
                }
            }
        });
    }
}
