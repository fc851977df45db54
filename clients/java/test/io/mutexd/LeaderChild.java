package io.mutexd;

import java.time.Duration;

/**
 * A leader process for the fault tests: leads MUTEXD_RESOURCE on MUTEXD_URL with a TTL of
 * MUTEXD_TTL_MS; before each beat (every 200 ms) it checks its leadership, which compares
 * the lease's deadline with the clock, and prints "LEAD token"; once it must stop, "LOST why".
 */
public final class LeaderChild {
    private LeaderChild() {
    }

    public static void main(String[] args) {
        Client c = Client.builder().fromEnv().timeout(Duration.ofSeconds(2)).build();
        Duration ttl = Duration.ofMillis(Long.parseLong(System.getenv("MUTEXD_TTL_MS")));
        c.runWhenLeader(System.getenv("MUTEXD_RESOURCE"), l -> {
            while (!l.shouldStop()) {
                System.out.println("LEAD " + l.token());
                System.out.flush();
                l.await(Duration.ofMillis(200));
            }
            System.out.println("LOST " + l.lease().error());
            System.out.flush();
        }, new LeaderOptions().ttl(ttl).retryInterval(Duration.ofMillis(500)));
    }
}
