package io.mutexd;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

/**
 * Leases on several resources held together and kept alive in the background
 * ({@link Client#lockMany}, {@link Client#lockOrdered});
 * {@code try (LeaseSet set = client.lockMany(...)) {...}} releases them. Thread-safe.
 *
 * <p>It is lost as a whole: the moment any one of its leases is lost, {@link #lost()}
 * completes with why ({@link LeaseLostException}, whose {@link LeaseLostException#resources()}
 * names the resources lost, or {@link LeaseExpiredException}) and the {@link #onLost}
 * listeners are called, as for a {@link Lease}; {@link #isHeld()} and {@link #check()}
 * compare the deadlines with the clock themselves. Each resource's lease has its own fencing
 * token ({@link #token(String)}): pass each resource's token to what that resource guards.
 *
 * <p>A set of {@link Client#lockMany} has one lease id: one request renews every lease every
 * third of the TTL, and one releases them all. A set of {@link Client#lockOrdered} is a
 * {@link Lease} per resource, each with its own lease id, renewed on its own.
 */
public final class LeaseSet implements AutoCloseable {
    private final List<String> names; // in the order given (lockMany) or taken (lockOrdered)
    private final Map<String, Long> tokens; // never change
    private final String leaseId; // lockMany's; null for lockOrdered

    // lockMany: one lease renewed and released for the whole set with one request.
    private final Lease core;
    private List<Grant> grants; // guarded by this: the last answers

    // lockOrdered: a lease of its own per resource.
    private final List<Lease> parts;
    private final CompletableFuture<MutexdException> lost = new CompletableFuture<>();
    private final List<Consumer<MutexdException>> listeners = new ArrayList<>(); // guarded by this
    private MutexdException error; // guarded by this
    private boolean released; // guarded by this
    private MutexdException releaseError; // guarded by this

    private LeaseSet(List<String> names, Map<String, Long> tokens, String leaseId, Lease core, List<Grant> grants,
            List<Lease> parts) {
        this.names = names;
        this.tokens = tokens;
        this.leaseId = leaseId;
        this.core = core;
        this.grants = grants;
        this.parts = parts;
    }

    /** The granted leases of one lease id, kept alive as a set (lockMany). */
    static LeaseSet hold(Client client, List<Grant> gs) {
        List<String> names = new ArrayList<>();
        Map<String, Long> tokens = new LinkedHashMap<>();
        for (Grant g : gs) {
            names.add(g.resource());
            tokens.put(g.resource(), g.fencingToken());
        }
        List<String> ns = List.copyOf(names);
        String id = gs.get(0).leaseId();
        LeaseSet[] self = new LeaseSet[1];
        Lease core = new Lease(client, combined(gs), "leases on " + String.join(", ", ns), (limit, deadline) -> {
            List<Grant> renewed = client.renewMany(ns, id, null, null, limit, deadline);
            synchronized (self[0]) {
                self[0].grants = renewed;
            }
            return combined(renewed);
        }, () -> client.releaseMany(ns, id), true);
        LeaseSet s = new LeaseSet(ns, Map.copyOf(tokens), id, core, List.copyOf(gs), null);
        self[0] = s;
        core.start();
        return s;
    }

    /** What the set's renewer goes by: the lease that ends first, with the shortest TTL of the set. */
    private static Grant combined(List<Grant> gs) {
        Grant first = gs.get(0);
        long ttl = first.ttlMs();
        for (Grant g : gs) {
            if (g.deadlineNanos() - first.deadlineNanos() < 0) {
                first = g;
            }
            ttl = Math.min(ttl, g.ttlMs());
        }
        return new Grant(first.resource(), first.leaseId(), first.owner(), first.fencingToken(), ttl,
                first.expiresInMs(), first.acquiredAt(), first.renewedAt(), first.metadata(), first.limit(),
                first.shared(), first.deadlineNanos());
    }

    /** Leases taken one by one, each renewed on its own, lost as a set (lockOrdered). */
    static LeaseSet ordered(Client client, List<Lease> taken) {
        List<String> names = new ArrayList<>();
        Map<String, Long> tokens = new LinkedHashMap<>();
        for (Lease l : taken) {
            names.add(l.resource());
            tokens.put(l.resource(), l.token());
        }
        LeaseSet s = new LeaseSet(List.copyOf(names), Map.copyOf(tokens), null, null, null, List.copyOf(taken));
        for (Lease l : taken) {
            l.onLost(s::partLost);
        }
        return s;
    }

    /** One lease of an ordered set was lost: the set is. */
    private void partLost(MutexdException e) {
        List<Consumer<MutexdException>> call;
        synchronized (this) {
            if (error != null || released) {
                return;
            }
            error = e;
            call = new ArrayList<>(listeners);
            listeners.clear();
        }
        lost.complete(e);
        for (Consumer<MutexdException> f : call) {
            try {
                f.accept(e);
            } catch (RuntimeException x) {
                // a listener's failure is its own
            }
        }
    }

    private void expireIfDue() {
        if (core != null) {
            core.expireIfDue();
            return;
        }
        for (Lease l : parts) {
            l.expireIfDue();
        }
    }

    /** The resources: in the order given ({@link Client#lockMany}), or taken, sorted ({@link Client#lockOrdered}). */
    public List<String> resources() {
        return names;
    }

    /**
     * The fencing token of the lease on {@code resource} (a renewal keeps it; unsigned
     * 64-bit): pass it to what that resource guards.
     *
     * @throws IllegalArgumentException the resource is not of the set
     */
    public long token(String resource) {
        Long t = tokens.get(resource);
        if (t == null) {
            throw new IllegalArgumentException(resource + " is not of the set");
        }
        return t;
    }

    /** Each resource's fencing token, by name. */
    public Map<String, Long> tokens() {
        return tokens;
    }

    /** The lease id every lease of a {@link Client#lockMany} set shares; {@code null} for {@link Client#lockOrdered} (see {@link #grants()}). */
    public String leaseId() {
        return leaseId;
    }

    /** Each lease as the last successful acquire or renewal answered it, in the order of {@link #resources()}. */
    public List<Grant> grants() {
        if (core != null) {
            synchronized (this) {
                return grants;
            }
        }
        List<Grant> out = new ArrayList<>();
        for (Lease l : parts) {
            out.add(l.grant());
        }
        return List.copyOf(out);
    }

    /** Whether every lease of the set is held: not lost (compared with the clock now) and not released. */
    public boolean isHeld() {
        if (core != null) {
            return core.isHeld();
        }
        expireIfDue();
        synchronized (this) {
            return error == null && !released;
        }
    }

    /**
     * Throws why the set was lost ({@link LeaseLostException} or {@link LeaseExpiredException}),
     * comparing the deadlines with the clock now; an {@link IllegalStateException} once
     * released; else returns. Call it right before each step of the guarded work.
     */
    public void check() {
        if (core != null) {
            core.check();
            return;
        }
        expireIfDue();
        synchronized (this) {
            if (error != null) {
                throw error;
            }
            if (released) {
                throw new IllegalStateException("the " + this + " were released");
            }
        }
    }

    /** Why the set was lost, or {@code null} while it is not. */
    public MutexdException error() {
        if (core != null) {
            return core.error();
        }
        expireIfDue();
        synchronized (this) {
            return error;
        }
    }

    /** Completes, with why, the moment the set is lost; never if it is released first. A copy. */
    public CompletableFuture<MutexdException> lost() {
        if (core != null) {
            return core.lost();
        }
        expireIfDue();
        return lost.copy();
    }

    /** Calls {@code listener} (from the thread that detects it) right after the set is lost; at once if it is already. */
    public void onLost(Consumer<MutexdException> listener) {
        if (core != null) {
            core.onLost(listener);
            return;
        }
        expireIfDue();
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

    /** The earliest deadline of the leases on {@link System#nanoTime()}, less the safety margin. */
    public long deadlineNanos() {
        if (core != null) {
            return core.deadlineNanos();
        }
        long d = parts.get(0).deadlineNanos();
        for (Lease l : parts) {
            if (l.deadlineNanos() - d < 0) {
                d = l.deadlineNanos();
            }
        }
        return d;
    }

    /** The time left until the earliest deadline; zero once lost or released. */
    public Duration remaining() {
        if (!isHeld()) {
            return Duration.ZERO;
        }
        return Duration.ofNanos(Math.max(0, deadlineNanos() - System.nanoTime()));
    }

    /** How many renewals of the set succeeded ({@link Client#lockOrdered}: the fewest of its leases'). */
    public int renewals() {
        if (core != null) {
            return core.renewals();
        }
        int n = Integer.MAX_VALUE;
        for (Lease l : parts) {
            n = Math.min(n, l.renewals());
        }
        return n;
    }

    /** The last failed renewal's error ({@code null} after a success; lockOrdered: the first lease's that has one). */
    public MutexdException lastError() {
        if (core != null) {
            return core.lastError();
        }
        for (Lease l : parts) {
            if (l.lastError() != null) {
                return l.lastError();
            }
        }
        return null;
    }

    /** Stops renewing, without releasing, and waits for the renewing threads to end. */
    public void stop() {
        if (core != null) {
            core.stop();
            return;
        }
        for (Lease l : parts) {
            l.stop();
        }
    }

    /**
     * Stops renewing and releases the leases, so that the next waiters are granted at once. A
     * {@link Client#lockMany} set is released with one request; when it was lost by a
     * {@code lease_lost} answer, the leases it still holds are released all the same and that
     * exception is thrown. A {@link Client#lockOrdered} set releases each lease, the last taken
     * first, as {@link Lease#release()} does, and throws the first error. A second call throws
     * what the first threw, or returns.
     */
    public void release() {
        if (core != null) {
            core.release();
            return;
        }
        synchronized (this) {
            if (released) {
                if (releaseError != null) {
                    throw releaseError;
                }
                return;
            }
            released = true;
        }
        MutexdException first = null;
        for (int i = parts.size() - 1; i >= 0; i--) {
            try {
                parts.get(i).release();
            } catch (MutexdException e) {
                if (first == null) {
                    first = e;
                }
            }
        }
        synchronized (this) {
            releaseError = first;
        }
        if (first != null) {
            throw first;
        }
    }

    /**
     * Releases the set ({@link #release()}), for try-with-resources; a set already lost (its
     * loss was signalled) is released as far as it can be and throws nothing.
     */
    @Override
    public void close() {
        if (core != null) {
            core.close();
            return;
        }
        boolean wasLost = error() != null;
        try {
            release();
        } catch (LeaseLostException e) {
            if (!wasLost) {
                throw e;
            }
        }
    }

    @Override
    public String toString() {
        StringBuilder b = new StringBuilder("leases on ");
        for (int i = 0; i < names.size(); i++) {
            b.append(i > 0 ? ", " : "").append(names.get(i)).append(" (fencing token ")
                    .append(Long.toUnsignedString(tokens.get(names.get(i)))).append(')');
        }
        return b.toString();
    }
}
