package io.mutexd;

import java.time.Duration;
import java.util.UUID;
import java.util.function.BooleanSupplier;

/** The tests' assertions. */
final class T {
    private T() {
    }

    interface Call {
        void run() throws Exception;
    }

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new AssertionError(what);
        }
    }

    static void eq(Object want, Object got, String what) {
        if (want == null ? got != null : !want.equals(got)) {
            throw new AssertionError(what + ": want " + want + ", got " + got);
        }
    }

    /** Runs call, which must throw a {@code want}; returns it. */
    static <E extends Throwable> E expect(Class<E> want, Call call) {
        try {
            call.run();
        } catch (Throwable e) {
            if (want.isInstance(e)) {
                return want.cast(e);
            }
            throw new AssertionError("want a " + want.getSimpleName() + ", got " + e, e);
        }
        throw new AssertionError("want a " + want.getSimpleName() + ", nothing was thrown");
    }

    static void within(Duration d, String what, BooleanSupplier cond) {
        long end = System.nanoTime() + d.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() - end > 0) {
                throw new AssertionError("not within " + d.toMillis() + " ms: " + what);
            }
            sleep(20);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted");
        }
    }

    /** A resource name of the test's own. */
    static String name() {
        return "tests/" + UUID.randomUUID().toString().substring(0, 12);
    }

    static Client client(String url) {
        return Client.builder().urls(url).timeout(Duration.ofSeconds(5)).build();
    }
}
