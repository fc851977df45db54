package io.mutexd;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.function.BiConsumer;

/** The options of {@link Client#runWhenLeader}. */
public final class LeaderOptions {
    Duration ttl = Lease.DEFAULT_TTL;
    Duration retryInterval = Duration.ofSeconds(5);
    String owner;
    Object metadata;
    BiConsumer<MutexdException, Duration> onStandby;
    CompletableFuture<?> stop = new CompletableFuture<>();

    /** The lease's time to live; default 15 s. It is renewed every third of it. */
    public LeaderOptions ttl(Duration ttl) {
        this.ttl = ttl;
        return this;
    }

    /** The pause between two tries to acquire the lease; default 5 s. */
    public LeaderOptions retryInterval(Duration retryInterval) {
        this.retryInterval = retryInterval;
        return this;
    }

    /** As {@link AcquireOptions#owner}. */
    public LeaderOptions owner(String owner) {
        this.owner = owner;
        return this;
    }

    /** As {@link AcquireOptions#metadata}. */
    public LeaderOptions metadata(Object metadata) {
        this.metadata = metadata;
        return this;
    }

    /**
     * Called each time the lease could not be acquired (held by another, or a failure that
     * may pass), with the error and the pause before the next try.
     */
    public LeaderOptions onStandby(BiConsumer<MutexdException, Duration> onStandby) {
        this.onStandby = onStandby;
        return this;
    }

    /**
     * Ends the loop when completed (in any way): the task is told to stop, the lease is
     * released, and {@code runWhenLeader} returns. Interrupting its thread does the same.
     */
    public LeaderOptions stopOn(CompletableFuture<?> stop) {
        this.stop = stop;
        return this;
    }
}
