/*
 * Leader election with mutexd: run several copies of this program; exactly one of them
 * leads at a time, and when it stops (or dies) another takes over.
 *
 * The leader prints a line every second; the others print that they could not acquire the
 * lease and when they will try again. Each line names the process (its PID, and the host
 * name, which tells containers apart: in each container the worker is PID 1), and the
 * leader's lines carry its fencing token. The leader checks that its lease still holds (on
 * the clock, not only as the last renewal saw it) right before each of its actions.
 * SIGTERM or Ctrl-C releases the lease (so that another process takes over at once) and
 * exits 0.
 *
 * Configuration, by environment:
 *
 *   MUTEXD_URL        the server, or several comma-separated (default http://127.0.0.1:8080)
 *   MUTEXD_RESOURCE   the resource to lead (default leader-election/demo)
 *   MUTEXD_TTL_MS     the lease's TTL in ms (default 15000); renewed every third of it
 *   MUTEXD_RETRY_S    seconds between two tries of a follower (default 5)
 *   MUTEXD_TOKEN      a bearer token, if the server asks for one
 *   MUTEXD_CA_FILE    a CA file to verify an https:// server with
 */

import io.mutexd.Client;
import io.mutexd.LeaderOptions;
import io.mutexd.LeaseHeldException;
import io.mutexd.Leadership;
import io.mutexd.MutexdException;
import java.math.BigDecimal;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

public final class Leader {
    private static final Duration BEAT = Duration.ofSeconds(1);
    private static final DateTimeFormatter CLOCK = DateTimeFormatter.ofPattern("HH:mm:ss");
    private static final String HOST = Client.hostName();
    private static final long PID = ProcessHandle.current().pid();

    private Leader() {
    }

    private static void say(String text, String detail) {
        System.out.println("[" + LocalTime.now().format(CLOCK) + "] This process (" + PID + ") " + text
                + " Host " + HOST + detail + ".");
        System.out.flush();
    }

    /** The leader's job: runs until it must stop (the lease is lost, or shutting down). */
    private static void lead(Leadership leadership) {
        // shouldStop() compares the clock with the lease's deadline: a leader paused past it
        // (SIGSTOP, a frozen VM) stops here instead of acting once more.
        while (!leadership.shouldStop()) {
            // Here a real leader would do its work, passing leadership.token() to the
            // storage it writes to.
            say("is currently the leader.", ", fencing token " + Long.toUnsignedString(leadership.token()));
            if (leadership.await(BEAT)) { // true as soon as it must stop
                break;
            }
        }
        MutexdException why = leadership.lease().error();
        if (why != null) {
            say("lost the lease (" + why.getMessage() + ").", "");
        }
    }

    private static void standby(MutexdException error, Duration retry) {
        BigDecimal s = BigDecimal.valueOf(retry.toMillis()).movePointLeft(3).stripTrailingZeros();
        say("could not acquire lease. Retrying in " + s.toPlainString() + " seconds.", "");
        if (!(error instanceof LeaseHeldException)) {
            System.err.println("  (" + error.getMessage() + ")");
        }
    }

    private static String env(String name, String def) {
        String v = System.getenv(name);
        return v != null ? v : def;
    }

    private static int run(CompletableFuture<Void> stop) {
        String url = env("MUTEXD_URL", "http://127.0.0.1:8080");
        String resource = env("MUTEXD_RESOURCE", "leader-election/demo");
        long ttlMs;
        double retryS;
        try {
            ttlMs = Long.parseLong(env("MUTEXD_TTL_MS", "15000"));
            retryS = Double.parseDouble(env("MUTEXD_RETRY_S", "5"));
        } catch (NumberFormatException e) {
            System.err.println("error: MUTEXD_TTL_MS and MUTEXD_RETRY_S must be numbers: " + e.getMessage());
            return 1;
        }
        if (ttlMs <= 0 || !(retryS > 0)) {
            System.err.println("error: MUTEXD_TTL_MS and MUTEXD_RETRY_S must be positive");
            return 1;
        }
        String token = env("MUTEXD_TOKEN", "");
        String caFile = env("MUTEXD_CA_FILE", "");
        try (Client client = Client.builder().urls(url).token(token)
                .caFile(caFile.isEmpty() ? null : Path.of(caFile)).build()) {
            client.runWhenLeader(resource, Leader::lead, new LeaderOptions()
                    .ttl(Duration.ofMillis(ttlMs))
                    .retryInterval(Duration.ofMillis(Math.round(retryS * 1000)))
                    .onStandby(Leader::standby)
                    .stopOn(stop));
            return 0;
        } catch (MutexdException | IllegalArgumentException e) {
            System.err.println("error: " + e.getMessage());
            return 1;
        }
    }

    public static void main(String[] args) {
        CompletableFuture<Void> stop = new CompletableFuture<>();
        CountDownLatch done = new CountDownLatch(1);
        AtomicBoolean finished = new AtomicBoolean();
        // SIGTERM and SIGINT run the shutdown hooks: stop leading, let the loop release the
        // lease, and exit 0.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (finished.get()) {
                return; // an exit of the program's own
            }
            stop.complete(null);
            try {
                done.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            System.out.flush();
            Runtime.getRuntime().halt(0);
        }));
        int code = run(stop);
        finished.set(true);
        done.countDown();
        System.exit(code);
    }
}
