package io.mutexd;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * How a {@link Lease}, or a {@link LeaseSet} of {@link Client#lockOrdered}, is lost and
 * released, once each: why it was lost, the future completed with it, the listeners called
 * then, and what its release threw. Thread-safe; it calls nothing while it holds its lock, so
 * that its owner may call it while holding its own.
 */
final class Loss {
    private final CompletableFuture<MutexdException> future = new CompletableFuture<>();
    // Guarded by this.
    private final List<Consumer<MutexdException>> listeners = new ArrayList<>();
    private MutexdException error;
    private boolean released;
    private MutexdException releaseError;

    /** Why it was lost, or {@code null} while it is not. */
    synchronized MutexdException error() {
        return error;
    }

    /** Whether it is held: not lost and not released. */
    synchronized boolean held() {
        return error == null && !released;
    }

    /** Throws why it was lost; once released, an {@link IllegalStateException} saying {@code released}; else returns. */
    void check(Supplier<String> released) {
        MutexdException e;
        boolean r;
        synchronized (this) {
            e = error;
            r = this.released;
        }
        if (e != null) {
            throw e;
        }
        if (r) {
            throw new IllegalStateException(released.get());
        }
    }

    /** Completes with why, the moment it is lost (the owner hands out copies). */
    CompletableFuture<MutexdException> future() {
        return future;
    }

    /** Calls {@code listener} (from the thread that detects it) right after it is lost; at once if it is already. */
    void onLost(Consumer<MutexdException> listener) {
        MutexdException e;
        synchronized (this) {
            if (error == null) {
                listeners.add(listener);
                return;
            }
            e = error;
        }
        listener.accept(e);
    }

    /**
     * Marks it lost with {@code e}; returns the listeners to {@link #signal} it to, or
     * {@code null} when it was lost already (or released, when {@code unlessReleased}).
     */
    synchronized List<Consumer<MutexdException>> lose(MutexdException e, boolean unlessReleased) {
        if (error != null || unlessReleased && released) {
            return null;
        }
        error = e;
        List<Consumer<MutexdException>> call = new ArrayList<>(listeners);
        listeners.clear();
        return call;
    }

    /** Completes the future with {@code e} and calls {@code call} (from {@link #lose}); call it holding no lock. */
    void signal(List<Consumer<MutexdException>> call, MutexdException e) {
        if (call.isEmpty() && future.isDone()) {
            return;
        }
        future.complete(e);
        for (Consumer<MutexdException> f : call) {
            try {
                f.accept(e);
            } catch (RuntimeException x) {
                // a listener's failure is its own
            }
        }
    }

    /**
     * Releases it once: the first call runs {@code release} with why it was lost ({@code null}
     * if it was not) and throws what that returns, if anything; a later call throws that again,
     * or returns.
     */
    void release(Function<MutexdException, MutexdException> release) {
        MutexdException lostWith;
        synchronized (this) {
            if (released) {
                if (releaseError != null) {
                    throw releaseError;
                }
                return;
            }
            released = true;
            lostWith = error;
        }
        MutexdException err = release.apply(lostWith);
        synchronized (this) {
            releaseError = err;
        }
        if (err != null) {
            throw err;
        }
    }
}
