package io.mutexd;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/** The lock: background renewal, the lost-lease signals, cancelled waiters, the leader helper. */
final class LockTest {
    private LockTest() {
    }

    static void testALockHoldsAcrossSeveralTTLs() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String r = T.name();
        Lease kept;
        try (Lease l = c.lock(r, new LockOptions().ttl(Duration.ofSeconds(1)))) {
            kept = l;
            long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(3500);
            while (System.nanoTime() - end < 0) {
                T.check(l.isHeld(), "held, " + l.error());
                l.check();
                T.check(l.remaining().toMillis() > 0 && l.remaining().toMillis() <= 1000, "remaining " + l.remaining());
                T.sleep(50);
            }
            T.check(l.renewals() >= 8, "renewed every third of the TTL: " + l.renewals());
            T.eq(l.token(), c.get(r).holder().fencingToken(), "the server's holder");
            T.check(!l.lost().isDone(), "not lost");
        }
        T.check(!kept.isHeld(), "released by try-with-resources");
        T.check(!c.get(r).isHeld(), "free on the server");
        T.expect(IllegalStateException.class, kept::check);
    }

    static void testABrokenLeaseIsLostAtOnce() throws Exception {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String r = T.name();
        Lease l = c.lock(r, new LockOptions().ttl(Duration.ofSeconds(1)));
        AtomicReference<MutexdException> heard = new AtomicReference<>();
        l.onLost(heard::set);
        c.breakLease(r, "test", null);
        MutexdException why = l.lost().get(2, TimeUnit.SECONDS);
        T.check(why instanceof LeaseLostException, "lost by lease_lost: " + why);
        // The future completes first, then the listeners are called (Lease's contract).
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
        while (heard.get() == null && System.nanoTime() < until) {
            Thread.sleep(10);
        }
        T.check(heard.get() == why, "the listener heard it");
        T.check(!l.isHeld(), "not held");
        T.expect(LeaseLostException.class, l::check);
        l.close(); // a lease already lost: nothing thrown
        Grant other = c.acquire(r, null);
        T.check(c.get(r).holder().fencingToken() == other.fencingToken(), "the new holder keeps its lease");
    }

    /** An interrupted or cancelled blocking acquire hangs up: the server drops the waiter. */
    static void testAnInterruptedWaitHangsUp() throws Exception {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String r = T.name();
        Grant holder = c.acquire(r, new AcquireOptions().ttl(Duration.ofSeconds(30)));
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        AtomicReference<Boolean> flag = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                c.lock(r, new LockOptions().waitFor(Duration.ofSeconds(60)));
            } catch (Throwable e) {
                thrown.set(e);
                flag.set(Thread.currentThread().isInterrupted());
            }
        });
        t.start();
        T.within(Duration.ofSeconds(5), "one waiter", () -> c.get(r).waiters() == 1);
        t.interrupt();
        t.join(5000);
        T.check(!t.isAlive(), "the lock returned");
        T.check(thrown.get() instanceof CancelledException, "CancelledException: " + thrown.get());
        T.check(flag.get(), "the interrupt status is set again");
        T.within(Duration.ofSeconds(3), "the server dropped the waiter", () -> c.get(r).waiters() == 0);

        CompletableFuture<Lease> f = c.lockAsync(r, new LockOptions().waitFor(Duration.ofSeconds(60)));
        T.within(Duration.ofSeconds(5), "one waiter", () -> c.get(r).waiters() == 1);
        T.check(f.cancel(true), "cancelled");
        T.within(Duration.ofSeconds(3), "the server dropped the cancelled waiter", () -> c.get(r).waiters() == 0);
        c.release(r, holder.leaseId());
        T.sleep(200);
        T.check(!c.get(r).isHeld(), "nothing was granted to a waiter that went away");
    }

    static void testAWaitingLockIsGrantedInOrder() throws Exception {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String r = T.name();
        Lease first = c.lock(r, new LockOptions().ttl(Duration.ofSeconds(2)));
        CompletableFuture<Lease> second = c.lockAsync(r, new LockOptions().ttl(Duration.ofSeconds(2)).waitFor(Duration.ofSeconds(20)));
        T.within(Duration.ofSeconds(5), "queued", () -> c.get(r).waiters() == 1);
        T.sleep(2500); // past the first's TTL: renewed, still held
        T.check(first.isHeld() && !second.isDone(), "the first holds across its TTL; the second waits");
        first.release();
        try (Lease l = second.get(5, TimeUnit.SECONDS)) {
            T.check(l.isHeld(), "the second holds");
            T.check(Long.compareUnsigned(l.token(), first.token()) > 0, "a larger token");
        }
    }

    static void testSharedAndSemaphoreLocks() {
        TestServer s = TestServer.launch();
        Client c = T.client(s.url);
        String r = T.name();
        try (Lease a = c.lock(r, new LockOptions().shared(true)); Lease b = c.lock(r, new LockOptions().shared(true))) {
            T.check(a.grant().shared() && b.isHeld(), "two readers");
            T.expect(LeaseHeldException.class, () -> c.lock(r, null));
        }
        String sem = T.name();
        try (Lease a = c.lock(sem, new LockOptions().limit(2)); Lease b = c.lock(sem, new LockOptions().limit(2))) {
            T.eq(2, a.grant().limit(), "limit");
            T.eq(2, c.get(sem).holders().size(), "two holders");
            T.expect(LeaseHeldException.class, () -> c.lock(sem, new LockOptions().limit(2)));
            T.check(b.isHeld(), "held");
        }
    }

    static void testRunWhenLeaderHandsOver() throws Exception {
        TestServer s = TestServer.launch();
        String r = T.name();
        List<String> log = new CopyOnWriteArrayList<>();
        CompletableFuture<Void> stopA = new CompletableFuture<>();
        CompletableFuture<Void> stopB = new CompletableFuture<>();
        Thread a = leader(s.url, r, "a", stopA, log);
        T.within(Duration.ofSeconds(5), "a leads", () -> log.contains("a leads"));
        Thread b = leader(s.url, r, "b", stopB, log);
        T.within(Duration.ofSeconds(5), "b stands by", () -> log.contains("b standby LeaseHeldException"));
        T.check(!log.contains("b leads"), "one leader");
        stopA.complete(null);
        a.join(5000);
        T.check(!a.isAlive(), "a returned once stopped");
        T.within(Duration.ofSeconds(3), "b takes over", () -> log.contains("b leads"));
        T.check(log.indexOf("a stops") < log.indexOf("b leads"), "a stopped before b led: " + log);
        // Interrupting the thread stops the loop too, and releases.
        b.interrupt();
        b.join(5000);
        T.check(!b.isAlive(), "b returned once interrupted");
        T.within(Duration.ofSeconds(2), "released", () -> !T.client(s.url).get(r).isHeld());
    }

    private static Thread leader(String url, String r, String who, CompletableFuture<Void> stop, List<String> log) {
        Client c = T.client(url);
        Thread t = new Thread(() -> c.runWhenLeader(r, l -> {
            log.add(who + " leads");
            while (!l.await(Duration.ofMillis(100))) {
                T.check(l.lease().isHeld(), "held while leading");
            }
            log.add(who + " stops");
        }, new LeaderOptions().ttl(Duration.ofSeconds(2)).retryInterval(Duration.ofMillis(200)).stopOn(stop)
                .onStandby((e, d) -> {
                    if (!log.contains(who + " standby " + e.getClass().getSimpleName())) {
                        log.add(who + " standby " + e.getClass().getSimpleName());
                    }
                })));
        t.start();
        return t;
    }
}
