package io.mutexd;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import com.sun.net.httpserver.HttpServer;

/** Every call of the contract, and every error code, against real servers. */
final class CallsTest {
    private CallsTest() {
    }

    static void testAcquireRenewReleaseGet() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String r = T.name();
        Grant g = c.acquire(r, new AcquireOptions().ttl(Duration.ofSeconds(5)).owner("me").metadata(Map.of("addr", "x:1")));
        T.eq(r, g.resource(), "resource");
        T.eq("me", g.owner(), "owner");
        T.eq(5000L, g.ttlMs(), "ttl");
        T.eq(Map.of("addr", "x:1"), g.metadata(), "metadata");
        T.check(g.fencingToken() > 0, "a fencing token");
        T.check(g.deadlineNanos() - System.nanoTime() > TimeUnit.SECONDS.toNanos(4), "the deadline is 5 s away");
        // The same proposed lease id again: the same lease, the same token.
        Grant again = c.acquire(r, new AcquireOptions().ttl(Duration.ofSeconds(5)).leaseId(g.leaseId()));
        T.eq(g.fencingToken(), again.fencingToken(), "an acquire retried with its lease id");
        ResourceState st = c.get(r);
        T.check(st.isHeld(), "held");
        T.eq("me", st.holder().owner(), "the holder");
        T.eq(g.fencingToken(), st.holder().fencingToken(), "the holder's token");
        T.eq(0L, st.waiters(), "waiters");
        Grant n = c.renew(r, g.leaseId(), Duration.ofSeconds(8), Map.of("v", 2L));
        T.eq(8000L, n.ttlMs(), "renewed ttl");
        T.eq(g.fencingToken(), n.fencingToken(), "a renewal keeps the token");
        T.eq(Map.of("v", 2L), c.get(r).holder().metadata(), "metadata replaced");
        LeaseHeldException held = T.expect(LeaseHeldException.class, () -> c.acquire(r, new AcquireOptions().owner("other")));
        T.eq("lease_held", held.code(), "code");
        T.eq("me", held.holder().owner(), "the holder named");
        T.eq(g.fencingToken(), held.holder().fencingToken(), "its token");
        T.check(held.retryAfter() != null && held.retryAfter().getSeconds() >= 1 && held.retryAfter().getSeconds() <= 8,
                "Retry-After: " + held.retryAfter());
        c.release(r, g.leaseId());
        T.check(!c.get(r).isHeld(), "free after the release");
        T.eq("lease_lost", T.expect(LeaseLostException.class, () -> c.release(r, g.leaseId())).code(), "released twice");
        T.expect(LeaseLostException.class, () -> c.renew(r, g.leaseId(), null, null));
        Grant next = c.acquire(r, null);
        T.check(Long.compareUnsigned(next.fencingToken(), g.fencingToken()) > 0, "tokens increase");
    }

    static void testBreakListWatchEventsServersWhoami() throws Exception {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String prefix = T.name() + "/";
        Grant a = c.acquire(prefix + "a", null);
        c.acquire(prefix + "b", new AcquireOptions().limit(3));
        c.acquire(prefix + "b", new AcquireOptions().limit(3));
        ResourceList page = c.list(prefix, 1, null);
        T.eq(1, page.resources().size(), "a page of one");
        T.eq(prefix + "a", page.resources().get(0).resource(), "in name order");
        T.check(page.nextCursor() != null, "a next page");
        ResourceList rest = c.list(prefix, 0, page.nextCursor());
        T.eq(prefix + "b", rest.resources().get(0).resource(), "the next page");
        T.eq(2, rest.resources().get(0).holders().size(), "two holders of the semaphore");
        T.eq(3, rest.resources().get(0).limit(), "its limit");
        T.eq(3, T.expect(LimitMismatchException.class, () -> c.acquire(prefix + "b", null)).limit(), "the limit in force");

        // A watch of one resource, woken by a break.
        long index = c.get(prefix + "a").index();
        CompletableFuture<ResourceState> w = CompletableFuture.supplyAsync(() -> c.watch(prefix + "a", index, Duration.ofSeconds(20)));
        // A list watch of the prefix, woken by the same change.
        long listIndex = c.list(prefix, 0, null).index();
        T.check(listIndex > 0, "a list's change index");
        CompletableFuture<ResourceList> lw = CompletableFuture.supplyAsync(
                () -> c.listWatch(prefix, listIndex, Duration.ofSeconds(20), 0, null));
        T.sleep(300);
        T.check(!w.isDone() && !lw.isDone(), "the watches are held");
        T.check(c.breakLease(prefix + "a", "a test", null), "broken");
        ResourceState after = w.get(10, TimeUnit.SECONDS);
        T.check(!after.isHeld() && after.index() > index, "the watch answered the change");
        ResourceList l = lw.get(10, TimeUnit.SECONDS);
        T.check(l.index() > listIndex && l.resources().size() == 1, "the list watch answered the change");
        T.check(!c.breakLease(prefix + "a", null, null), "nothing to break");
        T.expect(LeaseLostException.class, () -> c.renew(prefix + "a", a.leaseId(), null, null));
        // A watch that times out answers the state unchanged.
        long i2 = c.get(prefix + "b").index();
        long t0 = System.nanoTime();
        T.eq(i2, c.watch(prefix + "b", i2, Duration.ofMillis(300)).index(), "unchanged");
        T.check(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(250), "held for its wait");

        EventPage ev = c.events(0, prefix, 0, null);
        List<String> types = ev.events().stream().map(e -> e.type() + " " + e.resource()).toList();
        T.check(types.contains("granted " + prefix + "a") && types.contains("broken " + prefix + "a"), "events: " + types);
        T.check(ev.next() >= ev.events().get(ev.events().size() - 1).index(), "next");
        CompletableFuture<EventPage> follow = CompletableFuture.supplyAsync(() -> c.events(ev.next(), prefix, 0, Duration.ofSeconds(20)));
        T.sleep(200);
        c.acquire(prefix + "c", new AcquireOptions().shared(true));
        EventPage more = follow.get(10, TimeUnit.SECONDS);
        T.eq("granted", more.events().get(0).type(), "a followed event");
        T.check(more.events().get(0).shared(), "shared");

        // Without --ha: role "alone", no active, no servers (GroupTest reads a group's).
        ServerGroup alone = c.servers();
        T.eq("alone", alone.self().role(), "servers without a group: role");
        T.eq(null, alone.self().url(), "servers without a group: url");
        T.eq(null, alone.active(), "servers without a group: active");
        T.eq(0, alone.servers().size(), "servers without a group: servers");
        Whoami me = c.whoami();
        T.eq(null, me.name(), "no token");
        T.eq(List.of("read", "write", "admin", "metrics"), me.scopes(), "every scope without authorization");
    }

    /** Every error code of the contract, each from a real server's answer. */
    static void testEveryErrorCode() throws Exception {
        TestServer s = TestServer.launch("--max-waiters", "1");
        Client c = T.client(s.url);
        String r = T.name();
        String p = "/v1/resources/" + r;
        Duration d = Duration.ofSeconds(5);
        InvalidRequestException e;
        e = T.expect(InvalidRequestException.class, () -> c.send("POST", p + "/acquire", "{", "application/json", d, 0));
        T.eq("invalid_json", e.code(), "code");
        e = T.expect(InvalidRequestException.class, () -> c.acquire(r, new AcquireOptions().limit(0)));
        T.eq("invalid_field", e.code(), "code");
        T.eq("limit", e.field(), "field");
        e = T.expect(InvalidRequestException.class, () -> c.send("POST", p + "/acquire", "{\"owner\":\"x\",\"ttl\":5}", "application/json", d, 0));
        T.eq("unknown_field", e.code(), "code");
        T.eq("ttl", e.field(), "field");
        e = T.expect(InvalidRequestException.class, () -> c.release(r, null));
        T.eq("missing_field", e.code(), "code");
        T.eq("lease_id", e.field(), "field");
        e = T.expect(InvalidRequestException.class, () -> c.get("a b"));
        T.eq("invalid_resource", e.code(), "code");
        e = T.expect(InvalidRequestException.class, () -> c.acquire("bad//name", null));
        T.eq("invalid_resource", e.code(), "code");
        e = T.expect(InvalidRequestException.class, () -> c.acquire(r, new AcquireOptions().ttl(Duration.ofMillis(10))));
        T.eq("invalid_ttl", e.code(), "code");
        e = T.expect(InvalidRequestException.class, () -> c.acquire(r, new AcquireOptions().waitFor(Duration.ofHours(2))));
        T.eq("invalid_wait", e.code(), "code");
        e = T.expect(InvalidRequestException.class, () -> c.release(r, "not-a-uuid"));
        T.eq("invalid_lease_id", e.code(), "code");
        T.eq("not_found", T.expect(NotFoundException.class, () -> c.send("GET", "/v1/nothing-here", null, null, d, 0)).code(), "code");
        T.eq("method_not_allowed", T.expect(MethodNotAllowedException.class,
                () -> c.send("DELETE", p, null, null, d, 0)).code(), "code");
        T.eq("unsupported_media_type", T.expect(UnsupportedMediaTypeException.class,
                () -> c.send("POST", p + "/acquire", "owner=x", "text/plain", d, 0)).code(), "code");
        T.eq("body_too_large", T.expect(BodyTooLargeException.class,
                () -> c.acquire(r, new AcquireOptions().metadata(Map.of("x", "y".repeat(70000))))).code(), "code");

        Grant g = c.acquire(r, null);
        T.expect(LeaseHeldException.class, () -> c.acquire(r, null));
        T.expect(LimitMismatchException.class, () -> c.acquire(r, new AcquireOptions().limit(2)));
        CompletableFuture<Grant> waiter = c.acquireAsync(r, new AcquireOptions().waitFor(Duration.ofSeconds(30)));
        T.within(Duration.ofSeconds(5), "one waiter", () -> c.get(r).waiters() == 1);
        TooManyWaitersException tm = T.expect(TooManyWaitersException.class,
                () -> c.acquire(r, new AcquireOptions().waitFor(Duration.ofSeconds(30))));
        T.eq("too_many_waiters", tm.code(), "code");
        c.release(r, g.leaseId());
        Grant granted = waiter.get(5, TimeUnit.SECONDS);
        T.check(Long.compareUnsigned(granted.fencingToken(), g.fencingToken()) > 0, "the waiter is granted");
        T.expect(LeaseLostException.class, () -> c.renew(r, g.leaseId(), null, null));

        // Authorization: no token, and a token without the scope.
        Path dir = Files.createTempDirectory("mutexd-java-tokens-");
        try {
            String secret = "reader-secret-1234567890";
            String hash = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(secret.getBytes(StandardCharsets.UTF_8)));
            Path tokens = dir.resolve("tokens");
            Files.writeString(tokens, "reader sha256:" + hash + " read\n");
            TestServer a = TestServer.launch("--auth-tokens", tokens.toString());
            T.eq("unauthorized", T.expect(UnauthorizedException.class, () -> T.client(a.url).get(r)).code(), "code");
            Client reader = Client.builder().urls(a.url).token(secret).build();
            T.eq(new Whoami("reader", List.of("read")), reader.whoami(), "whoami");
            T.eq("free", reader.get(r).state(), "a read");
            T.eq("forbidden", T.expect(ForbiddenException.class, () -> reader.acquire(r, null)).code(), "code");
        } finally {
            Files2.deleteTree(dir);
        }
    }

    /** A stand-in answering 503 (as a standby with no active does): the client moves to the next URL. */
    static void testA503MovesToTheNextServer() throws IOException {
        AtomicInteger hits = new AtomicInteger();
        HttpServer busy = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        busy.createContext("/", x -> {
            hits.incrementAndGet();
            byte[] b = "{\"error\":{\"code\":\"unavailable\",\"message\":\"no\",\"reason\":\"no_active_server\"}}".getBytes(StandardCharsets.UTF_8);
            x.getResponseHeaders().set("Content-Type", "application/json");
            x.getResponseHeaders().set("Retry-After", "1");
            x.sendResponseHeaders(503, b.length);
            x.getResponseBody().write(b);
            x.close();
        });
        busy.start();
        try {
            String busyUrl = "http://127.0.0.1:" + busy.getAddress().getPort();
            UnavailableException u = T.expect(UnavailableException.class, () -> T.client(busyUrl).get("x"));
            T.eq("no_active_server", u.reason(), "reason");
            T.eq(Duration.ofSeconds(1), u.retryAfter(), "Retry-After");
            TestServer s = TestServer.launch();
            String dead = "http://127.0.0.1:" + TestServer.freePort();
            Client c = T.client(dead + "," + busyUrl + "," + s.url);
            String r = T.name();
            Grant g = c.acquire(r, null);
            T.eq(s.url, c.url(), "the server that answered is asked first");
            int before = hits.get();
            c.renew(r, g.leaseId(), null, null);
            T.eq(before, hits.get(), "the next request goes straight to it");
            TransportException t = T.expect(TransportException.class, () -> T.client(dead).get("x"));
            T.check(t.url().startsWith(dead), "the transport error names the URL");
        } finally {
            busy.stop(0);
        }
    }
}
