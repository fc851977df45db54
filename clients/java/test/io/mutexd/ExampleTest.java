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
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The example worker (clients/examples/java/leader, its jar given as -Dmutexd.leader.jar)
 * against a real server: two workers elect one leader, with the lines of the Python
 * worker; SIGTERM makes the leader release and exit 0, and the other takes over at once.
 */
final class ExampleTest {
    private ExampleTest() {
    }

    private static final String HOST = Pattern.quote(Client.hostName());
    private static final Pattern LEADER = Pattern.compile("^\\[\\d\\d:\\d\\d:\\d\\d\\] This process \\((\\d+)\\) is currently "
            + "the leader\\. Host " + HOST + ", fencing token (\\d+)\\.$");
    private static final Pattern WAITING = Pattern.compile("^\\[\\d\\d:\\d\\d:\\d\\d\\] This process \\((\\d+)\\) could not "
            + "acquire lease\\. Retrying in 0\\.5 seconds\\. Host " + HOST + "\\.$");

    private static final class Worker {
        final Process proc;
        final List<String> lines = new CopyOnWriteArrayList<>();

        Worker(String url, String resource) throws IOException {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            ProcessBuilder pb = new ProcessBuilder(java, "-XX:TieredStopAtLevel=1", "-jar", System.getProperty("mutexd.leader.jar"))
                    .redirectErrorStream(true);
            pb.environment().put("MUTEXD_URL", url);
            pb.environment().put("MUTEXD_RESOURCE", resource);
            pb.environment().put("MUTEXD_TTL_MS", "3000");
            pb.environment().put("MUTEXD_RETRY_S", "0.5");
            proc = pb.start();
            Thread t = new Thread(() -> {
                try (BufferedReader in = new BufferedReader(new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = in.readLine()) != null) {
                        lines.add(line);
                    }
                } catch (IOException e) {
                    // it ended
                }
            });
            t.setDaemon(true);
            t.start();
        }

        boolean leads() {
            return lines.stream().anyMatch(l -> LEADER.matcher(l).matches());
        }

        long lastToken() {
            long token = -1;
            for (String l : lines) {
                Matcher m = LEADER.matcher(l);
                if (m.matches()) {
                    T.eq(Long.toString(proc.pid()), m.group(1), "the PID printed");
                    token = Long.parseLong(m.group(2));
                }
            }
            return token;
        }
    }

    static void testTheExampleWorkersElectOneLeaderAndHandOver() throws Exception {
        TestServer s = TestServer.launch();
        String r = T.name();
        Worker a = new Worker(s.url, r);
        Worker b = null;
        try {
            T.within(Duration.ofSeconds(15), "the first worker leads", a::leads);
            b = new Worker(s.url, r);
            Worker w = b;
            T.within(Duration.ofSeconds(15), "the second waits", () -> w.lines.stream().anyMatch(l -> WAITING.matcher(l).matches()));
            T.check(!b.leads(), "one leader");
            for (String l : a.lines) {
                T.check(LEADER.matcher(l).matches(), "a leader's line: " + l);
            }
            long token = a.lastToken();
            a.proc.destroy(); // SIGTERM
            T.check(a.proc.waitFor(5, TimeUnit.SECONDS), "the leader exits on SIGTERM");
            T.eq(0, a.proc.exitValue(), "its exit status");
            long stopped = System.nanoTime();
            T.within(Duration.ofSeconds(3), "the other takes over at once", w::leads);
            T.check(System.nanoTime() - stopped < TimeUnit.MILLISECONDS.toNanos(2000), "within the retry interval, not the TTL");
            T.check(b.lastToken() > token, "a larger fencing token");
            T.eq(b.lastToken(), T.client(s.url).get(r).holder().fencingToken(), "the server's holder");
            b.proc.destroy();
            T.check(b.proc.waitFor(5, TimeUnit.SECONDS), "the second exits on SIGTERM");
            T.eq(0, b.proc.exitValue(), "its exit status");
            T.check(!T.client(s.url).get(r).isHeld(), "released");
        } finally {
            a.proc.destroyForcibly().waitFor();
            if (b != null) {
                b.proc.destroyForcibly().waitFor();
            }
        }
    }
}
