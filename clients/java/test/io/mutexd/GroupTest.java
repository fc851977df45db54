package io.mutexd;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;

/** Three --ha servers on a real Azurite: routing to the active, and a takeover. */
final class GroupTest {
    private GroupTest() {
    }

    static TestServer activeOf(List<TestServer> group, Duration d) {
        long end = System.nanoTime() + d.toNanos();
        while (System.nanoTime() - end < 0) {
            String agreed = null;
            boolean ok = true;
            int actives = 0;
            for (TestServer s : group) {
                if (!s.running()) {
                    continue;
                }
                try {
                    ServerGroup g = Client.builder().urls(s.url).timeout(Duration.ofSeconds(2)).build().servers();
                    if (g.active() == null || (agreed != null && !agreed.equals(g.active().url()))) {
                        ok = false;
                        break;
                    }
                    agreed = g.active().url();
                    if ("active".equals(g.self().role())) {
                        actives++;
                    }
                } catch (MutexdException e) {
                    ok = false;
                    break;
                }
            }
            if (ok && agreed != null && actives == 1) {
                for (TestServer s : group) {
                    if (s.url.equals(agreed)) {
                        return s;
                    }
                }
            }
            T.sleep(100);
        }
        throw new AssertionError("no agreed active server");
    }

    static void testALockKeepsItsLeaseAcrossASIGKILLOfTheActive() throws Exception {
        Path root = Path.of(System.getProperty("mutexd.root"));
        try (Azurite az = new Azurite(root)) {
            String container = "j" + UUID.randomUUID().toString().replace("-", "").substring(0, 16);
            List<TestServer> group = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                group.add(new TestServer(List.of("--ha", "--advertise-url", "{url}", "--mirror", "sync",
                        "--blob-connection-string", az.connectionString, "--blob-container", container,
                        "--forward-timeout-ms", "1000")).start());
            }
            TestServer active = activeOf(group, Duration.ofSeconds(30));
            List<String> urls = new ArrayList<>(); // the active last: the client starts with a standby
            List<TestServer> standbys = new ArrayList<>();
            for (TestServer s : group) {
                if (s != active) {
                    urls.add(s.url);
                    standbys.add(s);
                }
            }
            urls.add(active.url);
            Client c = Client.builder().urls(urls).timeout(Duration.ofSeconds(5)).build();
            String r = T.name();
            Lease l = c.lock(r, new LockOptions().ttl(Duration.ofSeconds(10)));
            T.eq(active.url, c.url(), "after an answer relayed by a standby, the active is asked first");
            long token = l.token();
            T.sleep(1500);
            int n = l.renewals();
            active.kill();
            long killed = System.nanoTime();
            // A standby with no active to forward to answers 503 unavailable.
            Client viaStandby = T.client(standbys.get(0).url);
            boolean saw503 = false;
            while (!saw503 && System.nanoTime() - killed < 2_500_000_000L) {
                try {
                    viaStandby.get(r);
                } catch (UnavailableException e) {
                    saw503 = "no_active_server".equals(e.reason()) && e.retryAfter() != null;
                } catch (MutexdException e) {
                    // a timeout meanwhile: asked again
                }
            }
            T.check(saw503, "a standby answered 503 no_active_server during the takeover");
            Client observer = Client.builder().urls(urls).timeout(Duration.ofSeconds(2)).build();
            int seen = 0;
            while (System.nanoTime() - killed < 12_000_000_000L) {
                T.check(l.isHeld(), "lost after the kill: " + l.error());
                try {
                    ResourceState st = observer.get(r);
                    T.check(st.holder() != null && st.holder().fencingToken() == token, "the holder: " + st.holder());
                    seen++;
                } catch (UnavailableException | TransportException e) {
                    // the takeover
                }
                T.sleep(200);
            }
            T.check(seen > 0, "the group answered after the kill");
            T.check(l.renewals() > n + 1 && l.token() == token && l.lastError() == null,
                    n + " renewals before the kill, " + l.renewals() + " after; last error " + l.lastError());
            TestServer next = activeOf(group, Duration.ofSeconds(10));
            T.check(next != active, "a new active");
            T.eq(next.url, c.url(), "the lock's client asks the new active first");
            Grant g = c.acquire(T.name(), null);
            T.check(Long.compareUnsigned(g.fencingToken(), token) > 0, "tokens keep increasing across the takeover");
            l.release();
            T.check(!observer.get(r).isHeld(), "released through the group");
            TestServer.stopAll(); // before Azurite stops
        }
    }
}
