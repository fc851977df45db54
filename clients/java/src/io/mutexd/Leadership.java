package io.mutexd;

import java.time.Duration;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

/** One term of leadership of {@link Client#runWhenLeader}: its lease, and when to stop. */
public final class Leadership {
    private final Lease lease;
    private final CompletableFuture<?> stop;
    private final CompletableFuture<Object> stopped;

    Leadership(Lease lease, CompletableFuture<?> stop) {
        this.lease = lease;
        this.stop = stop;
        this.stopped = CompletableFuture.anyOf(lease.loss().future(), stop);
    }

    /** The fencing token of this term: pass it to what the leader writes to. */
    public long token() {
        return lease.token();
    }

    /** The lease of this term. */
    public Lease lease() {
        return lease;
    }

    /**
     * Whether the task must stop: the lease is lost (compared with the clock now, so that a
     * process paused past its deadline knows at once), the loop is stopped, or this thread
     * was interrupted.
     */
    public boolean shouldStop() {
        return !lease.isHeld() || stop.isDone() || Thread.currentThread().isInterrupted();
    }

    /** Completes the moment the task must stop (the lease lost, or the loop stopped). */
    public CompletableFuture<Object> stopped() {
        return stopped.copy();
    }

    /** Waits {@code d}, or less if the task must stop meanwhile; returns {@link #shouldStop()}. */
    public boolean await(Duration d) {
        try {
            stopped.get(Math.max(0, d.toNanos()), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (java.util.concurrent.TimeoutException | ExecutionException | CancellationException e) {
            // the time is up
        }
        return shouldStop();
    }
}
