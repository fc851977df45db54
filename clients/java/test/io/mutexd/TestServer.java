package io.mutexd;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

/**
 * A real mutexd process (MUTEXD_BIN) on a free loopback port with a data directory of its
 * own; {@link #kill()} and {@link #start()} again restart it on the same port and data.
 * Every server started is stopped by {@link #stopAll()}, which the runner calls after each
 * test, and its data directory deleted.
 */
final class TestServer {
    static final List<String> BASE_ARGS = List.of("--min-ttl-ms", "500", "--threads", "2");
    private static final List<TestServer> ALL = new ArrayList<>();
    private static final Pattern STARTED = Pattern.compile("msg=\"started\".* address=(\\S+)");

    final List<String> args;
    final Path dataDir;
    int port;
    String url;
    private Process proc;
    private final List<String> lines = new ArrayList<>();
    private boolean killed;

    TestServer(List<String> args) {
        this.args = args;
        try {
            this.dataDir = Files.createTempDirectory("mutexd-java-test-");
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
        this.port = freePort();
        this.url = "http://127.0.0.1:" + port;
        synchronized (ALL) {
            ALL.add(this);
        }
    }

    static TestServer launch(String... args) {
        return new TestServer(List.of(args)).start();
    }

    static int freePort() {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    static String bin() {
        String b = System.getenv("MUTEXD_BIN");
        if (b == null || b.isEmpty()) {
            throw new IllegalStateException("MUTEXD_BIN is not set");
        }
        if (!Files.isExecutable(Path.of(b))) {
            throw new IllegalStateException("no mutexd binary at " + b + " (run make build)");
        }
        return b;
    }

    TestServer start() {
        List<String> cmd = new ArrayList<>(List.of(bin(), "--listen", "127.0.0.1:" + port, "--data-dir", dataDir.toString()));
        cmd.addAll(BASE_ARGS);
        for (String a : args) {
            cmd.add(a.replace("{url}", url));
        }
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.DISCARD);
        CountDownLatch ready = new CountDownLatch(1);
        try {
            proc = pb.start();
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
        killed = false;
        Process p = proc;
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getErrorStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    synchronized (lines) {
                        lines.add(line);
                    }
                    if (STARTED.matcher(line).find()) {
                        ready.countDown();
                    }
                }
            } catch (IOException e) {
                // the process ended
            }
            ready.countDown();
        }, "server-log");
        reader.setDaemon(true);
        reader.start();
        try {
            if (!ready.await(15, TimeUnit.SECONDS) || !p.isAlive()) {
                p.destroyForcibly();
                throw new AssertionError("mutexd did not start:\n" + log());
            }
        } catch (InterruptedException e) {
            throw new RuntimeException(e);
        }
        return this;
    }

    boolean running() {
        return proc != null && proc.isAlive();
    }

    long pid() {
        return proc.pid();
    }

    /** SIGKILL, as a crash; waits for the process to end. */
    void kill() {
        if (!running()) {
            return;
        }
        killed = true;
        proc.destroyForcibly(); // SIGKILL
        try {
            proc.waitFor();
        } catch (InterruptedException e) {
            throw new RuntimeException(e);
        }
    }

    /** SIGTERM; fails unless it exits 0 within 20 s. */
    void stop() {
        if (!running()) {
            return;
        }
        Signals.send(proc.pid(), "CONT");
        proc.destroy(); // SIGTERM
        try {
            if (!proc.waitFor(20, TimeUnit.SECONDS)) {
                proc.destroyForcibly().waitFor();
                throw new AssertionError("mutexd did not stop within 20 s:\n" + log());
            }
        } catch (InterruptedException e) {
            throw new RuntimeException(e);
        }
        if (proc.exitValue() != 0 && !killed) {
            throw new AssertionError("mutexd exited " + proc.exitValue() + ":\n" + log());
        }
    }

    String log() {
        synchronized (lines) {
            return String.join("\n", lines.subList(Math.max(0, lines.size() - 40), lines.size()));
        }
    }

    /** For the shutdown hook: kills what is left, deletes its data. */
    static void stopAllQuietly() {
        synchronized (ALL) {
            for (TestServer s : ALL) {
                if (s.proc != null) {
                    s.proc.destroyForcibly();
                }
                Files2.deleteTree(s.dataDir);
            }
            ALL.clear();
        }
    }

    /** Stops every server started (failing on a bad exit) and deletes their data. */
    static void stopAll() {
        List<TestServer> all;
        synchronized (ALL) {
            all = new ArrayList<>(ALL);
            ALL.clear();
        }
        AssertionError failed = null;
        for (TestServer s : all) {
            try {
                s.stop();
            } catch (AssertionError e) {
                failed = e;
            } finally {
                if (s.proc != null) {
                    s.proc.destroyForcibly();
                }
                Files2.deleteTree(s.dataDir);
            }
        }
        if (failed != null) {
            throw failed;
        }
    }
}
