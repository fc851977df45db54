package io.mutexd;

import java.io.IOException;

/** Sends a signal the JDK has no call for (SIGSTOP, SIGCONT) with kill(1). */
final class Signals {
    private Signals() {
    }

    static void send(long pid, String signal) {
        try {
            Process p = new ProcessBuilder("kill", "-" + signal, Long.toString(pid))
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            p.waitFor();
        } catch (IOException e) {
            throw new RuntimeException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
