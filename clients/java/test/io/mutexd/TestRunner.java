package io.mutexd;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Runs the tests: every static method named {@code test...} of the classes below, in name
 * order, each at most {@link #LIMIT_S} seconds, stopping the servers it started after it.
 * Arguments, if any, keep only the tests whose names contain one of them. Prints one line
 * per test and, last, {@code N passed, N failed} alone on its line; exits 1 if a test failed.
 */
public final class TestRunner {
    static final long LIMIT_S = 120;
    static final Class<?>[] CLASSES = {JsonTest.class, PartitionsTest.class, ErrorsTest.class, CallsTest.class,
        LockTest.class, ManyTest.class, FaultsTest.class, ExampleTest.class, GroupTest.class, RoutingTest.class};

    private TestRunner() {
    }

    public static void main(String[] args) {
        Runtime.getRuntime().addShutdownHook(new Thread(TestServer::stopAllQuietly));
        int passed = 0;
        int failed = 0;
        for (Class<?> c : CLASSES) {
            List<Method> tests = new ArrayList<>();
            for (Method m : c.getDeclaredMethods()) {
                if (m.getName().startsWith("test") && Modifier.isStatic(m.getModifiers()) && m.getParameterCount() == 0
                        && selected(c.getSimpleName() + "." + m.getName(), args)) {
                    tests.add(m);
                }
            }
            tests.sort(Comparator.comparing(Method::getName));
            for (Method m : tests) {
                String name = c.getSimpleName() + "." + m.getName();
                long t0 = System.nanoTime();
                Throwable err = run(m);
                try {
                    TestServer.stopAll();
                } catch (Throwable e) {
                    if (err == null) {
                        err = e;
                    }
                }
                double s = (System.nanoTime() - t0) / 1e9;
                if (err == null) {
                    passed++;
                    System.out.printf("ok    %s (%.1f s)%n", name, s);
                } else {
                    failed++;
                    System.out.printf("FAIL  %s (%.1f s)%n", name, s);
                    err.printStackTrace(System.out);
                }
                System.out.flush();
            }
        }
        System.out.println(passed + " passed, " + failed + " failed");
        System.out.flush();
        System.exit(failed == 0 && passed > 0 ? 0 : 1);
    }

    private static boolean selected(String name, String[] args) {
        if (args.length == 0) {
            return true;
        }
        for (String a : args) {
            if (name.contains(a)) {
                return true;
            }
        }
        return false;
    }

    private static Throwable run(Method m) {
        CompletableFuture<Throwable> done = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                m.invoke(null);
                done.complete(null);
            } catch (InvocationTargetException e) {
                done.complete(e.getCause());
            } catch (Throwable e) {
                done.complete(e);
            }
        }, m.getName());
        t.setDaemon(true);
        t.start();
        try {
            return done.get(LIMIT_S, TimeUnit.SECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            t.interrupt();
            return new AssertionError("did not end within " + LIMIT_S + " s");
        } catch (Exception e) {
            return e;
        }
    }
}
