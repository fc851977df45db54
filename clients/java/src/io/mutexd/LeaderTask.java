package io.mutexd;

/** The leader's work, run by {@link Client#runWhenLeader} while this process holds the lease. */
@FunctionalInterface
public interface LeaderTask {
    /**
     * Leads until {@code leadership.shouldStop()}; check it right before each step of the
     * work, and return at once when it is true.
     */
    void lead(Leadership leadership) throws Exception;
}
