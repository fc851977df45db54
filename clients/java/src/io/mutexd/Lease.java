package io.mutexd;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A lease kept alive in the background ({@link Client#lock}, {@link Client#hold},
 * {@link Client#runWhenLeader}); {@code try (Lease l = client.lock(...)) {...}} releases it.
 * Thread-safe.
 *
 * <p>It is renewed every third of its TTL, by a thread of its own. It is lost the moment a
 * renewal is answered {@code lease_lost} ({@link LeaseLostException}), or no renewal
 * succeeded before its deadline ({@link LeaseExpiredException}); then {@link #lost()}
 * completes with that exception and the {@link #onLost} listeners are called. The deadline
 * is on this process's monotonic clock ({@link System#nanoTime()}): when the last
 * successful renewal (or the acquire) was sent, plus the remaining time it was answered,
 * less a safety margin ({@link #safetyMargin}). Renewals that fail for a reason that may
 * pass are tried again every tenth of the TTL (at most every second), each on a new
 * connection, until then; one attempt takes at most a third of the TTL, and never lasts
 * past the deadline.
 *
 * <p>Stop the guarded work at once when the lease is lost; check {@link #isHeld()} (or
 * {@link #check()}) right before each step of it: they compare the deadline with the clock
 * themselves, so a process paused past it (SIGSTOP, a frozen VM) knows at its first check
 * after resuming. Pass {@link #token()} to what you protect.
 */
public final class Lease implements AutoCloseable {
    /** The TTL of lock and runWhenLeader when none is given. */
    public static final Duration DEFAULT_TTL = Duration.ofSeconds(15);

    private static final ScheduledExecutorService TIMERS = timers();

    private static ScheduledExecutorService timers() {
        ScheduledThreadPoolExecutor e = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "mutexd-lease-deadlines");
            t.setDaemon(true);
            return t;
        });
        e.setRemoveOnCancelPolicy(true);
        return e;
    }

    private final Client client;
    private final String resource;
    private final String leaseId;
    private final long token;
    private final long margin;
    private final long ttlNanos;
    private final Loss loss = new Loss();
    /** What is held, in messages: "lease on jobs/x", or the leases of a {@link LeaseSet}. */
    private final String label;
    /** How it is renewed and released: its resource's calls, or (the core of a {@link LeaseSet}) the set's. */
    private final Renewal renewal;
    private final Runnable releaseCall;
    /** Whether {@link #release()} releases after a {@code lease_lost} answer too (a set: what it still holds). */
    private final boolean releaseLost;

    /** One renewal, within {@code limit} and no later than {@code deadline} (nanoTime). */
    interface Renewal {
        Grant renew(Duration limit, long deadline);
    }

    // Guarded by this.
    private Grant grant;
    private long deadline; // nanoTime: the last answer's deadline, less the margin
    private long base; // nanoTime: when the last successful renewal (or the acquire) was sent
    private MutexdException lastError;
    private long inflight; // nanoTime when the renewal under way was sent; 0: none
    private boolean inflightSet;
    private int renewals;
    private boolean stopped;
    private Thread renewer;
    private ScheduledFuture<?> timer;

    Lease(Client client, Grant g) {
        this(client, g, "lease on " + g.resource(),
                (limit, deadline) -> client.renew(g.resource(), g.leaseId(), null, null, limit, deadline),
                () -> client.release(g.resource(), g.leaseId()), false);
    }

    Lease(Client client, Grant g, String label, Renewal renewal, Runnable releaseCall, boolean releaseLost) {
        this.client = client;
        this.label = label;
        this.renewal = renewal;
        this.releaseCall = releaseCall;
        this.releaseLost = releaseLost;
        this.grant = g;
        this.resource = g.resource();
        this.leaseId = g.leaseId();
        this.token = g.fencingToken();
        this.ttlNanos = TimeUnit.MILLISECONDS.toNanos(g.ttlMs());
        this.margin = safetyMargin(Duration.ofMillis(g.ttlMs())).toNanos();
        this.deadline = g.deadlineNanos() - margin;
        this.base = g.deadlineNanos() - TimeUnit.MILLISECONDS.toNanos(g.expiresInMs());
    }

    /** A fiftieth of the TTL, at most 1 s: how long before the end of its TTL a lease is no longer counted on. */
    public static Duration safetyMargin(Duration ttl) {
        Duration m = ttl.dividedBy(50);
        return m.compareTo(Duration.ofSeconds(1)) > 0 ? Duration.ofSeconds(1) : m;
    }

    synchronized void start() {
        timer = TIMERS.schedule(this::expireIfDue, Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        renewer = new Thread(this::renewLoop, "mutexd-renew " + resource);
        renewer.setDaemon(true);
        renewer.start();
    }

    /** The lease's resource. */
    public String resource() {
        return resource;
    }

    /** The lease's id: the credential that renews and releases it. */
    public String leaseId() {
        return leaseId;
    }

    /** The fencing token (a renewal keeps it): pass it to what you protect. Unsigned 64-bit. */
    public long token() {
        return token;
    }

    /** The lease as the last successful acquire or renewal answered it. */
    public synchronized Grant grant() {
        return grant;
    }

    /**
     * Whether the lease is held: not lost (compared with the clock now) and not released.
     * Call it right before each step of the guarded work.
     */
    public boolean isHeld() {
        expireIfDue();
        return loss.held();
    }

    /**
     * Throws why the lease was lost ({@link LeaseLostException} or
     * {@link LeaseExpiredException}), comparing the deadline with the clock now; an
     * {@link IllegalStateException} once released; else returns.
     */
    public void check() {
        expireIfDue();
        loss.check(() -> "the lease on " + resource + " was released");
    }

    /** Why the lease was lost, or {@code null} while it is not. */
    public MutexdException error() {
        expireIfDue();
        return loss.error();
    }

    /**
     * Completes, with why ({@link LeaseLostException} or {@link LeaseExpiredException}), the
     * moment the lease is lost; never if it is released first. A copy: completing it does
     * nothing to the lease.
     */
    public CompletableFuture<MutexdException> lost() {
        expireIfDue();
        return loss.future().copy();
    }

    /** How the lease is lost and released: its {@link Leadership}, and a {@link LeaseSet} of its core, go by it too. */
    Loss loss() {
        return loss;
    }

    /** Calls {@code listener} (from the thread that detects it) right after the lease is lost; at once if it is already. */
    public void onLost(Consumer<MutexdException> listener) {
        expireIfDue();
        loss.onLost(listener);
    }

    /** The deadline on {@link System#nanoTime()}: when the lease ends unless renewed, less the safety margin. */
    public synchronized long deadlineNanos() {
        return deadline;
    }

    /** The time left until the deadline; zero once lost or released. */
    public Duration remaining() {
        return Duration.ofNanos(remainingNanos());
    }

    long remainingNanos() {
        if (!isHeld()) {
            return 0;
        }
        return Math.max(0, deadlineNanos() - System.nanoTime());
    }

    /** How many renewals succeeded. */
    public synchronized int renewals() {
        return renewals;
    }

    /** The last failed renewal's error ({@code null} after a success). */
    public synchronized MutexdException lastError() {
        return lastError;
    }

    @Override
    public String toString() {
        return "lease on " + resource + ", fencing token " + Long.toUnsignedString(token) + (isHeld() ? "" : " (not held)");
    }

    /** Declares the lease lost if its deadline has passed. */
    void expireIfDue() {
        List<Consumer<MutexdException>> call;
        MutexdException e;
        synchronized (this) {
            if (loss.error() != null || stopped || System.nanoTime() - deadline < 0) {
                return;
            }
            String why;
            if (lastError != null) {
                why = "last error: " + lastError.getMessage();
            } else if (inflightSet) {
                why = String.format("a renewal sent %.1f s before had no answer yet",
                        (System.nanoTime() - inflight) / 1e9);
            } else {
                why = "no renewal was tried since the last one succeeded: the process did not run in time (paused, or starved)";
            }
            e = new LeaseExpiredException("lease expired: no renewal of the " + label
                    + " succeeded before its deadline (" + why + ")", lastError);
            call = setLost(e);
        }
        loss.signal(call, e);
    }

    /** Marks the lease lost (this is locked); returns the listeners to call. */
    private List<Consumer<MutexdException>> setLost(MutexdException e) {
        List<Consumer<MutexdException>> call = stopped ? null : loss.lose(e, false);
        if (call == null) { // stopped, or lost already
            return List.of();
        }
        if (timer != null) {
            timer.cancel(false);
        }
        if (renewer != null && renewer != Thread.currentThread()) {
            renewer.interrupt();
        }
        return call;
    }

    private void renewLoop() {
        long period = ttlNanos / 3;
        long retry = Math.max(TimeUnit.MILLISECONDS.toNanos(20), Math.min(ttlNanos / 10, TimeUnit.SECONDS.toNanos(1)));
        long next;
        synchronized (this) {
            next = base + period;
        }
        while (true) {
            long sent;
            long dl;
            synchronized (this) {
                while (!stopped && loss.error() == null && next - System.nanoTime() > 0) {
                    long w = next - System.nanoTime();
                    try {
                        TimeUnit.NANOSECONDS.timedWait(this, w);
                    } catch (InterruptedException e) {
                        if (stopped || loss.error() != null) {
                            return;
                        }
                    }
                }
                if (stopped || loss.error() != null) {
                    return;
                }
                sent = System.nanoTime();
                dl = deadline;
                inflight = sent;
                inflightSet = dl - sent > 0;
            }
            if (dl - sent <= 0) { // the deadline passed before this renewal could be sent
                expireIfDue();
                return;
            }
            long limit = Math.min(Math.min(client.timeout().toNanos(), period), dl - sent);
            Grant g = null;
            MutexdException err = null;
            try {
                g = renewal.renew(Duration.ofNanos(limit), dl);
            } catch (CancelledException e) {
                Thread.interrupted();
                return; // stopped or lost meanwhile
            } catch (MutexdException e) {
                err = e;
            }
            List<Consumer<MutexdException>> call = List.of();
            synchronized (this) {
                inflightSet = false;
                Thread.interrupted(); // an interrupt that came after the answer
                if (stopped || loss.error() != null) {
                    return; // lost is final, even if this renewal crossed the deadline
                }
                if (err instanceof LeaseLostException) {
                    call = setLost(err);
                } else if (err != null) {
                    lastError = err; // may pass: tried again, on a new connection, until the deadline
                    next = System.nanoTime() + retry;
                    continue;
                } else if (System.nanoTime() - deadline >= 0) {
                    call = null; // answered after the deadline: the lease is lost
                } else {
                    grant = g;
                    base = sent;
                    deadline = g.deadlineNanos() - margin;
                    lastError = null;
                    renewals++;
                    if (timer != null) {
                        timer.cancel(false);
                    }
                    timer = TIMERS.schedule(this::expireIfDue, Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                    next = sent + period;
                    continue;
                }
            }
            if (call == null) {
                expireIfDue();
            } else {
                loss.signal(call, err);
            }
            return;
        }
    }

    /** Stops renewing, without releasing, and waits for the renewing thread to end. */
    public void stop() {
        Thread r;
        synchronized (this) {
            stopped = true;
            if (timer != null) {
                timer.cancel(false);
            }
            r = renewer;
            notifyAll();
        }
        if (r != null && r != Thread.currentThread()) {
            r.interrupt();
            boolean interrupted = false;
            while (true) {
                try {
                    r.join();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Stops renewing and releases the lease, so that the next waiter is granted at once. A
     * lease lost by a {@code lease_lost} answer is not released (it is another's now): that
     * exception is thrown. A lease lost by its deadline is still released if the server can be
     * reached (nothing may have been granted since); else the server's {@code lease_lost} is
     * thrown. A second call throws what the first threw, or returns.
     */
    public void release() {
        expireIfDue();
        loss.release(lostWith -> {
            stop();
            MutexdException err = lostWith instanceof LeaseLostException ? lostWith : null;
            if (err == null || releaseLost) {
                MutexdException e = Client.uninterrupted(releaseCall);
                if (err == null) {
                    err = e; // after a lease_lost answer, lease_lost again for the lost ones: the others are released
                }
            }
            return err;
        });
    }

    /**
     * Releases the lease ({@link #release()}), for try-with-resources; a lease already lost
     * (its loss was signalled) is released if it can be and throws nothing.
     */
    @Override
    public void close() {
        boolean wasLost = loss.error() != null;
        try {
            release();
        } catch (LeaseLostException e) {
            if (!wasLost && error() == null) {
                throw e;
            }
        }
    }
}
