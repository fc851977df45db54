package io.mutexd;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/** Real faults: a leader process paused past its TTL, a server killed and restarted. */
final class FaultsTest {
    private FaultsTest() {
    }

    /**
     * A leader process paused (SIGSTOP) past its lease's TTL while another client waits for
     * the resource: the other is granted, and the leader, resumed, finds its lease lost at
     * its first check: a LOST line, and no LEAD after it resumed.
     */
    static void testALeaderPausedPastItsTTLStopsActing() throws Exception {
        TestServer s = TestServer.launch();
        String r = T.name();
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        ProcessBuilder pb = new ProcessBuilder(java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp",
                System.getProperty("java.class.path"), LeaderChild.class.getName())
                .redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put("MUTEXD_URL", s.url);
        pb.environment().put("MUTEXD_RESOURCE", r);
        pb.environment().put("MUTEXD_TTL_MS", "1500");
        Process child = pb.start();
        List<String> lines = new CopyOnWriteArrayList<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    lines.add(line);
                }
            } catch (IOException e) {
                // it ended
            }
        });
        reader.setDaemon(true);
        reader.start();
        try {
            T.within(Duration.ofSeconds(15), "the child leads", () -> lines.size() >= 3);
            String token = lines.get(0).substring(5);
            Signals.send(child.pid(), "STOP");
            T.sleep(300); // every line written before the pause is read by now
            int before = lines.size();
            Client c = T.client(s.url);
            long t0 = System.nanoTime();
            Lease other = c.lock(r, new LockOptions().ttl(Duration.ofSeconds(5)).waitFor(Duration.ofSeconds(10)));
            T.check(System.nanoTime() - t0 > TimeUnit.MILLISECONDS.toNanos(500), "granted once the paused lease ran out");
            T.check(Long.compareUnsigned(other.token(), Long.parseLong(token)) > 0, "a larger token");
            T.sleep(500);
            Signals.send(child.pid(), "CONT");
            T.within(Duration.ofSeconds(5), "the leader says it lost its lease",
                    () -> lines.stream().skip(before).anyMatch(l -> l.startsWith("LOST")));
            T.sleep(1000);
            List<String> after = lines.subList(before, lines.size());
            T.check(after.get(0).startsWith("LOST io.mutexd.LeaseExpiredException"), "the first line after the pause: " + after);
            T.check(after.stream().noneMatch(l -> l.startsWith("LEAD " + token)), "no beat after the pause: " + after);
            T.check(other.isHeld(), "the other keeps its lease");
            T.eq(other.token(), c.get(r).holder().fencingToken(), "the other holds on the server");
            other.close();
        } finally {
            Signals.send(child.pid(), "CONT");
            child.destroyForcibly();
            child.waitFor();
        }
    }

    /** SIGKILL of the server, restarted on its port and data: the lease and its token are kept. */
    static void testALeaseOutlivesASIGKILLOfTheServer() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String r = T.name();
        try (Lease l = c.lock(r, new LockOptions().ttl(Duration.ofSeconds(4)))) {
            T.sleep(1500);
            int n = l.renewals();
            s.kill();
            T.sleep(700);
            T.check(l.isHeld(), "held while the server is down");
            s.start();
            T.within(Duration.ofSeconds(5), "renewed after the restart", () -> l.renewals() > n && l.lastError() == null);
            T.check(l.isHeld(), "held: " + l.error());
            T.eq(l.token(), c.get(r).holder().fencingToken(), "the same token on the restarted server");
            T.sleep(2000);
            T.check(l.isHeld() && l.lastError() == null, "still renewed");
        }
        T.check(!c.get(r).isHeld(), "released");
    }
}
