package io.mutexd;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A partitioned group ({@code --partitions 16}) of three real servers on a real Azurite: the
 * client sends each request about a resource straight to its partition's owner, so that no
 * server forwards it, and follows a partition when its owner leaves; lists, list watches and
 * events span the partitions, with positions (strings) for their index and next.
 */
final class RoutingTest {
    static final int PARTITIONS = 16;

    private RoutingTest() {
    }

    /** Runs {@code body} with three servers of 16 partitions on a fresh Azurite container, stopped after it. */
    interface GroupBody {
        void run(List<TestServer> group) throws Exception;
    }

    static void withGroup(GroupBody body) throws Exception {
        Path root = Path.of(System.getProperty("mutexd.root"));
        try (Azurite az = new Azurite(root)) {
            String container = "p" + UUID.randomUUID().toString().replace("-", "").substring(0, 16);
            List<TestServer> group = new ArrayList<>();
            try {
                for (int i = 0; i < 3; i++) {
                    group.add(new TestServer(List.of("--ha", "--advertise-url", "{url}", "--mirror", "sync",
                            "--blob-connection-string", az.connectionString, "--blob-container", container,
                            "--partitions", Integer.toString(PARTITIONS))).start());
                }
                body.run(group);
            } finally {
                TestServer.stopAll(); // before Azurite stops
            }
        }
    }

    /**
     * Waits until every running server of the group has the same map, every partition owned
     * by a running server and each owning its even share; returns it: partition to owner.
     */
    static List<TestServer> settledMap(List<TestServer> group, Duration d) {
        long end = System.nanoTime() + d.toNanos();
        String last = null;
        while (System.nanoTime() - end < 0) {
            Map<String, TestServer> byUrl = new HashMap<>();
            for (TestServer s : group) {
                if (s.running()) {
                    byUrl.put(s.url, s);
                }
            }
            List<List<String>> maps = new ArrayList<>();
            for (TestServer s : byUrl.values()) {
                ServerGroup.PartitionMap pm;
                try {
                    pm = Client.builder().urls(s.url).timeout(Duration.ofSeconds(2)).build().servers().partitions();
                } catch (MutexdException e) {
                    pm = null;
                }
                if (pm == null || pm.count() != PARTITIONS) {
                    maps = null;
                    break;
                }
                List<String> m = new ArrayList<>(Collections.nCopies(PARTITIONS, (String) null));
                for (ServerGroup.Owner o : pm.owners()) {
                    m.set(o.partition(), o.url());
                }
                maps.add(m);
            }
            if (maps != null && !maps.isEmpty() && maps.size() == byUrl.size()) {
                last = maps.get(0).toString();
                boolean ok = true;
                for (List<String> m : maps) {
                    ok &= m.equals(maps.get(0));
                }
                Map<String, Integer> share = new HashMap<>();
                for (String u : maps.get(0)) {
                    ok &= u != null && byUrl.containsKey(u);
                    share.merge(String.valueOf(u), 1, Integer::sum);
                }
                int lo = PARTITIONS / byUrl.size();
                for (int n : share.values()) {
                    ok &= n >= lo && n <= lo + 1;
                }
                if (ok) {
                    List<TestServer> out = new ArrayList<>();
                    for (String u : maps.get(0)) {
                        out.add(byUrl.get(u));
                    }
                    return out;
                }
            }
            T.sleep(100);
        }
        throw new AssertionError("the partitions did not settle within " + d.toSeconds() + " s: " + last);
    }

    /** How many requests the running servers of the group forwarded so far (mutexd_forwarded_requests_total of every status, summed). */
    static long forwarded(List<TestServer> group) throws IOException, InterruptedException {
        HttpClient http = HttpClient.newBuilder().proxy(HttpClient.Builder.NO_PROXY).build();
        long sum = 0;
        for (TestServer s : group) {
            if (!s.running()) {
                continue;
            }
            HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(s.url + "/metrics")).build(),
                    HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
            T.eq(200, r.statusCode(), s.url + "/metrics");
            for (String line : r.body().split("\n")) {
                if (line.startsWith("mutexd_forwarded_requests_total")) {
                    String[] f = line.trim().split("\\s+");
                    sum += (long) Double.parseDouble(f[f.length - 1]);
                }
            }
        }
        return sum;
    }

    /** {@code per} resource names in each partition, each starting with {@code prefix}. */
    static List<List<String>> namesIn(String prefix, int per) {
        List<List<String>> out = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            out.add(new ArrayList<>());
        }
        int filled = 0;
        for (int i = 0; filled < PARTITIONS; i++) {
            String n = prefix + "n" + i;
            List<String> in = out.get(Partitions.of(n, PARTITIONS));
            if (in.size() < per) {
                in.add(n);
                if (in.size() == per) {
                    filled++;
                }
            }
        }
        return out;
    }

    /**
     * What a client's answers about a resource say: how many, and which were served by another
     * server than the one they were sent to; and its readings of the map.
     */
    static final class Answers {
        final AtomicInteger fetches = new AtomicInteger();
        private int total;
        private final List<String> forwarded = new ArrayList<>();

        Answers(Client c) {
            c.onAnswer = (to, method, path, status, h) -> {
                if (path.equals("/v1/servers")) {
                    fetches.incrementAndGet();
                    return;
                }
                if (!path.startsWith("/v1/resources/")) {
                    return;
                }
                String by = h.firstValue("Mutexd-Served-By").orElse("");
                synchronized (this) {
                    total++;
                    if (!by.equals(to)) {
                        forwarded.add(method + " " + path + " sent to " + to + ", " + status + " served by " + by);
                    }
                }
            };
        }

        synchronized void reset() {
            total = 0;
            forwarded.clear();
        }

        synchronized void check(String what) {
            T.check(total > 0, what + ": no answer about a resource");
            T.check(forwarded.isEmpty(), what + ": " + forwarded.size() + " of " + total
                    + " answers were not served where they were sent, the first: " + (forwarded.isEmpty() ? "" : forwarded.get(0)));
        }
    }

    static List<String> urlsOf(List<TestServer> servers) {
        List<String> out = new ArrayList<>();
        for (TestServer s : servers) {
            out.add(s == null ? null : s.url);
        }
        return out;
    }

    /** Waits until the client routes by the map the servers agree on. */
    static void learned(Client c, List<TestServer> owners) {
        List<String> want = urlsOf(owners);
        T.within(Duration.ofSeconds(15), "the client read the map " + want, () -> want.equals(c.partitionOwners()));
    }

    /**
     * Once the client has read the map, its acquire, get, renew and release of names in every
     * partition are each served by the server they were sent to, and no server forwards one;
     * a lock's renewals likewise.
     */
    static void testRequestsGoStraightToThePartitionsOwner() throws Exception {
        withGroup(group -> {
            List<TestServer> owners = settledMap(group, Duration.ofSeconds(60));
            Client c = Client.builder().urls(urlsOf(group)).timeout(Duration.ofSeconds(10)).build();
            Answers seen = new Answers(c);

            // The first answer about a resource says the group is partitioned: the map is read.
            T.eq(null, c.partitionOwners(), "a map before any answer");
            c.get(T.name());
            learned(c, owners);
            T.eq(1, seen.fetches.get(), "readings of the map");

            seen.reset();
            long before = forwarded(group);
            int requests = 0;
            List<List<String>> names = namesIn(T.name() + "/", 2);
            for (int p = 0; p < PARTITIONS; p++) {
                for (String r : names.get(p)) {
                    Grant g = c.acquire(r, new AcquireOptions().ttl(Duration.ofSeconds(20)));
                    ResourceState st = c.get(r);
                    T.check(st.holder() != null && st.holder().fencingToken() == g.fencingToken(), "partition " + p + ": " + st);
                    c.renew(r, g.leaseId(), null, null);
                    c.release(r, g.leaseId());
                    requests += 4;
                }
            }
            seen.check("steady state");
            T.eq(0L, forwarded(group) - before, "requests forwarded of " + requests);

            // A lock and its background renewals go to the owner as well.
            before = forwarded(group);
            try (Lease l = c.lock(namesIn(T.name() + "/", 1).get(7).get(0), new LockOptions().ttl(Duration.ofMillis(1500)))) {
                T.within(Duration.ofSeconds(10), "two renewals", () -> l.renewals() >= 2);
            }
            seen.check("a lock");
            T.eq(0L, forwarded(group) - before, "a lock's requests forwarded");
            T.eq(1, seen.fetches.get(), "readings of the map in the steady state");
        });
    }

    /**
     * The owner of a partition the client holds a lease in stops (SIGTERM, handing its
     * partitions to the others): the renewals and the release of that lease succeed, and once
     * the map is read again they go straight to the new owner. Readers of the moving
     * partition read the map about once a second, not once each, and none of their reads fails.
     */
    static void testTheClientFollowsAPartitionWhoseOwnerLeaves() throws Exception {
        withGroup(group -> {
            List<TestServer> owners = settledMap(group, Duration.ofSeconds(60));
            Client c = Client.builder().urls(urlsOf(group)).timeout(Duration.ofSeconds(10)).build();
            Answers seen = new Answers(c);
            c.get(T.name());
            learned(c, owners);

            // A lease in a partition of the server that leaves; not the first URL of the
            // client's list, so that a request sent there was routed.
            TestServer victim = group.get(1);
            int p = owners.indexOf(victim);
            List<String> names = namesIn(T.name() + "/", 9).get(p);
            String r = names.get(0);
            Grant g = c.acquire(r, new AcquireOptions().ttl(Duration.ofSeconds(30)));

            AtomicBoolean stop = new AtomicBoolean();
            AtomicInteger readErrors = new AtomicInteger();
            List<Thread> readers = new ArrayList<>();
            for (String other : names.subList(1, names.size())) {
                Thread t = new Thread(() -> {
                    while (!stop.get()) {
                        try {
                            c.get(other);
                        } catch (MutexdException e) {
                            readErrors.incrementAndGet();
                        }
                        T.sleep(20);
                    }
                }, "reader");
                t.setDaemon(true);
                t.start();
                readers.add(t);
            }
            int fetchesBefore = seen.fetches.get();
            long moved = System.nanoTime();
            victim.stop(); // hands its partitions over, then exits 0 (checked)
            c.renew(r, g.leaseId(), null, null);
            List<TestServer> next = settledMap(group, Duration.ofSeconds(60));
            T.check(next.get(p) != null && next.get(p) != victim, "partition " + p + " moved");
            T.within(Duration.ofSeconds(15), "the client read the partition's new owner", () -> {
                List<String> m = c.partitionOwners();
                return m != null && next.get(p).url.equals(m.get(p));
            });
            stop.set(true);
            for (Thread t : readers) {
                t.join();
            }
            double elapsed = (System.nanoTime() - moved) / 1e9;
            T.eq(0, readErrors.get(), "reads failed while the partition moved");
            int fetches = seen.fetches.get() - fetchesBefore;
            T.check(fetches >= 1 && fetches <= elapsed / 0.9 + 1,
                    "the map was read " + fetches + " times in " + elapsed + " s");

            // The other partitions that moved are learned on their own first requests.
            List<List<String>> others = namesIn(T.name() + "/", 1);
            List<String> nextUrls = urlsOf(next);
            T.within(Duration.ofSeconds(15), "the client read the whole new map " + nextUrls, () -> {
                for (List<String> in : others) {
                    c.get(in.get(0));
                }
                return nextUrls.equals(c.partitionOwners());
            });

            // Straight to the new owner: nothing is forwarded any more, between requests on
            // every other partition (owned by either server left).
            seen.reset();
            long before = forwarded(group);
            for (int i = 0; i < 3; i++) {
                c.renew(r, g.leaseId(), null, null);
                ResourceState st = c.get(r);
                T.check(st.holder() != null && st.holder().fencingToken() == g.fencingToken(), "the holder: " + st);
                for (List<String> in : others) {
                    c.get(in.get(0));
                }
            }
            c.release(r, g.leaseId());
            seen.check("after the move");
            T.eq(0L, forwarded(group) - before, "requests forwarded after the move");
        });
    }

    static List<String> namesOf(List<ResourceState> states) {
        List<String> out = new ArrayList<>();
        for (ResourceState s : states) {
            out.add(s.resource());
        }
        return out;
    }

    /**
     * A list's index and the events' next are positions there, passed back unchanged: a list
     * watch wakes on a change in a partition another server owns, and paging the events gives
     * every event of several partitions once, oldest first.
     */
    static void testListsAndEventsSpanThePartitions() throws Exception {
        withGroup(group -> {
            List<TestServer> owners = settledMap(group, Duration.ofSeconds(60));
            Client c = Client.builder().urls(urlsOf(group)).timeout(Duration.ofSeconds(10)).build();

            // A list's index is a position, and a number is the server's to refuse.
            String prefix = T.name() + "/";
            List<List<String>> names = namesIn(prefix, 1);
            List<String> held = new ArrayList<>();
            for (int p : List.of(0, 5, 11)) {
                c.acquire(names.get(p).get(0), new AcquireOptions().ttl(Duration.ofSeconds(30)));
                held.add(names.get(p).get(0));
            }
            Collections.sort(held);
            ResourceList page = c.list(prefix, 0, null);
            T.eq(held, namesOf(page.resources()), "listed");
            T.check(page.index() == 0 && page.position() != null && page.position().value().startsWith("v")
                    && !page.position().isIndex(), "index " + page.index() + ", position " + page.position());
            long t0 = System.nanoTime();
            ResourceList now = c.listWatch(prefix, page.position(), Duration.ofMillis(300), 0, null);
            T.eq(page.position(), now.position(), "the watch's position, unchanged");
            T.check(System.nanoTime() - t0 >= 250_000_000L, "the watch waited");
            T.expect(InvalidRequestException.class, () -> c.listWatch(prefix, 3, Duration.ofMillis(300), 0, null));
            EventPage ev = c.events(0, prefix, 0, null);
            T.check(ev.nextPosition() != null && ev.nextPosition().value().startsWith("v") && ev.next() == 0,
                    "events' next: " + ev.nextPosition());
            T.eq(held.size(), ev.events().size(), "events");
            for (Event e : ev.events()) {
                T.check("granted".equals(e.type()) && e.partition() != null
                        && e.partition() == Partitions.of(e.resource(), PARTITIONS), "event " + e);
            }
            T.eq(0, c.events(ev.nextPosition(), prefix, 0, null).events().size(), "events after the last");

            // A list watch asked of one server wakes on a change in a partition another owns.
            TestServer asked = group.get(0);
            String prefix2 = T.name() + "/";
            List<List<String>> names2 = namesIn(prefix2, 1);
            List<String> elsewhere = new ArrayList<>();
            for (int p = 0; p < PARTITIONS; p++) {
                if (owners.get(p) != asked) {
                    elsewhere.add(names2.get(p).get(0));
                }
            }
            Client watcher = Client.builder().urls(asked.url).timeout(Duration.ofSeconds(10)).build();
            Position at = watcher.list(prefix2, 0, null).position();
            for (int i = 0; i < 2; i++) {
                String r = elsewhere.get(i);
                CompletableFuture<Void> later = CompletableFuture.runAsync(() -> {
                    T.sleep(500);
                    c.acquire(r, new AcquireOptions().ttl(Duration.ofSeconds(30)));
                });
                long start = System.nanoTime();
                ResourceList woken = watcher.listWatch(prefix2, at, Duration.ofSeconds(20), 0, null);
                later.join();
                T.check(System.nanoTime() - start < 10_000_000_000L, "woken within 10 s");
                List<String> want = new ArrayList<>(elsewhere.subList(0, i + 1));
                Collections.sort(want);
                T.eq(want, namesOf(woken.resources()), "listed after change " + i);
                T.check(!woken.position().equals(at), "the position " + at + " moved");
                at = woken.position();
            }

            // The events page through every event of several partitions, each once, oldest first.
            String prefix3 = T.name() + "/";
            List<List<String>> names3 = namesIn(prefix3, 2);
            List<String> done = new ArrayList<>();
            for (int p : List.of(1, 4, 7, 9, 14)) {
                for (String r : names3.get(p)) {
                    Grant g = c.acquire(r, new AcquireOptions().ttl(Duration.ofSeconds(30)));
                    c.release(r, g.leaseId());
                    done.add(r + " granted");
                    done.add(r + " released");
                }
            }
            List<Event> all = new ArrayList<>();
            Position after = null;
            for (int pages = 0; ; pages++) {
                T.check(pages <= 20, "the events did not end");
                EventPage pg = c.events(after, prefix3, 3, null);
                T.check(!pg.truncated(), "truncated");
                all.addAll(pg.events());
                after = pg.nextPosition();
                if (pg.events().size() < 3) {
                    break;
                }
            }
            List<String> got = new ArrayList<>();
            Set<String> once = new HashSet<>();
            Map<String, String> kinds = new HashMap<>();
            for (int i = 0; i < all.size(); i++) {
                Event e = all.get(i);
                got.add(e.resource() + " " + e.type());
                T.check(e.partition() != null && e.partition() == Partitions.of(e.resource(), PARTITIONS), "event " + e);
                once.add(e.partition() + "/" + e.index());
                kinds.merge(e.resource(), e.type(), (a, b) -> a + " " + b);
                if (i > 0) {
                    Event prev = all.get(i - 1);
                    Instant ta = e.at();
                    Instant tb = prev.at();
                    T.check(!ta.isBefore(tb) && !(ta.equals(tb) && e.partition() < prev.partition()),
                            "event " + i + " (" + e + ") before " + (i - 1) + " (" + prev + ")");
                }
            }
            Collections.sort(got);
            Collections.sort(done);
            T.eq(done, got, "the events");
            T.eq(done.size(), once.size(), "distinct events");
            for (String k : kinds.values()) {
                T.eq("granted released", k, "one resource's events");
            }
            // Waited for: a change after them, in yet another partition, comes next.
            String last = names3.get(12).get(0);
            CompletableFuture<Void> later = CompletableFuture.runAsync(() -> {
                T.sleep(500);
                c.acquire(last, new AcquireOptions().ttl(Duration.ofSeconds(30)));
            });
            EventPage waited = c.events(after, prefix3, 0, Duration.ofSeconds(20));
            later.join();
            T.check(waited.events().size() == 1 && waited.events().get(0).resource().equals(last)
                    && waited.events().get(0).partition() == 12, "after the wait: " + waited);
        });
    }

    /** A lone server keeps its numbers: a list's index and the events' next are change indexes, their positions the same in decimal. */
    static void testALoneServersPositionsAreItsIndexes() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String prefix = T.name() + "/";
        c.acquire(prefix + "a", null);
        ResourceList l = c.list(prefix, 0, null);
        T.check(l.index() > 0 && l.position().isIndex(), "index " + l.index() + ", position " + l.position());
        T.eq(Position.of(l.index()), l.position(), "the position of a lone server");
        T.eq(l.index(), c.listWatch(prefix, l.position(), Duration.ofMillis(200), 0, null).index(), "a watch from its position");
        EventPage ev = c.events(0, prefix, 0, null);
        T.eq(Position.of(ev.next()), ev.nextPosition(), "the events' next");
        T.eq(null, ev.events().get(0).partition(), "no partition on a lone server");
        T.eq(0, c.events(ev.nextPosition(), prefix, 0, null).events().size(), "after the last");
        T.eq(null, c.servers().partitions(), "no map");
    }

    /**
     * A stand-in whose answers about a resource say it is partitioned, and whose map cannot
     * be read (500): every request still succeeds, and the map is asked for at most once a
     * second however many answers ask for it.
     */
    static void testAMapThatCannotBeReadFailsNoRequest() throws IOException {
        AtomicInteger readings = new AtomicInteger();
        AtomicReference<String> self = new AtomicReference<>();
        HttpServer h = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        h.createContext("/", x -> {
            boolean map = x.getRequestURI().getPath().equals("/v1/servers");
            byte[] b = (map ? "{\"error\":{\"code\":\"internal\",\"message\":\"no\"}}"
                    : "{\"resource\":\"x\",\"state\":\"free\",\"index\":1,\"holders\":[],\"limit\":1,\"waiters\":0}")
                    .getBytes(StandardCharsets.UTF_8);
            if (map) {
                readings.incrementAndGet();
            } else {
                x.getResponseHeaders().set("Mutexd-Partition", "3");
                x.getResponseHeaders().set("Mutexd-Served-By", self.get());
            }
            x.getResponseHeaders().set("Content-Type", "application/json");
            x.sendResponseHeaders(map ? 500 : 200, b.length);
            x.getResponseBody().write(b);
            x.close();
        });
        h.start();
        try {
            self.set("http://127.0.0.1:" + h.getAddress().getPort());
            Client c = T.client(self.get());
            long start = System.nanoTime();
            int gets = 0;
            while (System.nanoTime() - start < 2_500_000_000L) {
                T.eq("free", c.get("x").state(), "a read while the map cannot be read");
                gets++;
                T.sleep(10);
            }
            double elapsed = (System.nanoTime() - start) / 1e9;
            T.within(Duration.ofSeconds(5), "the last reading ended", () -> readings.get() >= 2);
            T.check(readings.get() <= elapsed + 1, readings.get() + " readings of the map in " + elapsed + " s, " + gets + " reads");
            T.eq(null, c.partitionOwners(), "no map");
        } finally {
            h.stop(0);
        }
    }
}
