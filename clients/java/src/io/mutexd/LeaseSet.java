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

    // The leases renewed: lockMany's core, or lockOrdered's, one of its own per resource.
    private final List<Lease> parts;
    // How the set is lost and released: its core's (lockMany), or its own (lockOrdered).
    private final Loss loss;

    private LeaseSet(List<String> names, Map<String, Long> tokens, String leaseId, Lease core, List<Grant> grants,
            List<Lease> parts) {
        this.names = names;
        this.tokens = tokens;
        this.leaseId = leaseId;
        this.core = core;
        this.grants = grants;
        this.parts = parts;
        this.loss = core != null ? core.loss() : new Loss();
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
        LeaseSet s = new LeaseSet(ns, Map.copyOf(tokens), id, core, List.copyOf(gs), List.of(core));
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
        List<Consumer<MutexdException>> call = loss.lose(e, true);
        if (call != null) {
            loss.signal(call, e);
        }
    }

    private void expireIfDue() {
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
        expireIfDue();
        return loss.held();
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
        loss.check(() -> "the " + this + " were released");
    }

    /** Why the set was lost, or {@code null} while it is not. */
    public MutexdException error() {
        expireIfDue();
        return loss.error();
    }

    /** Completes, with why, the moment the set is lost; never if it is released first. A copy. */
    public CompletableFuture<MutexdException> lost() {
        expireIfDue();
        return loss.future().copy();
    }

    /** Calls {@code listener} (from the thread that detects it) right after the set is lost; at once if it is already. */
    public void onLost(Consumer<MutexdException> listener) {
        expireIfDue();
        loss.onLost(listener);
    }

    /** The earliest deadline of the leases on {@link System#nanoTime()}, less the safety margin. */
    public long deadlineNanos() {
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
        int n = Integer.MAX_VALUE;
        for (Lease l : parts) {
            n = Math.min(n, l.renewals());
        }
        return n;
    }

    /** The last failed renewal's error ({@code null} after a success; lockOrdered: the first lease's that has one). */
    public MutexdException lastError() {
        for (Lease l : parts) {
            MutexdException e = l.lastError();
            if (e != null) {
                return e;
            }
        }
        return null;
    }

    /** Stops renewing, without releasing, and waits for the renewing threads to end. */
    public void stop() {
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
        loss.release(lostWith -> {
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
            return first;
        });
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
