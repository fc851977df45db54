package io.mutexd;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/** An Azurite (the Azure Storage emulator) started by scripts/azurite.sh; {@link #close()} stops it and deletes its directory. */
final class Azurite implements AutoCloseable {
    final Path dir;
    final String connectionString;
    private final Path script;

    Azurite(Path root) throws IOException, InterruptedException {
        script = root.resolve("scripts/azurite.sh");
        dir = Files.createTempDirectory("mutexd-java-azurite-");
        try {
            run("install");
            run("start", dir.toString());
            connectionString = Files.readString(dir.resolve("connection-string"), StandardCharsets.UTF_8).trim();
        } catch (IOException | InterruptedException | RuntimeException e) {
            close();
            throw e;
        }
    }

    private void run(String... args) throws IOException, InterruptedException {
        String[] cmd = new String[args.length + 1];
        cmd[0] = script.toString();
        System.arraycopy(args, 0, cmd, 1, args.length);
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (p.waitFor() != 0) {
            throw new IllegalStateException("scripts/azurite.sh " + String.join(" ", args) + " failed:\n" + out);
        }
    }

    @Override
    public void close() {
        try {
            if (Files.exists(dir.resolve("pid"))) {
                run("stop", dir.toString());
            }
        } catch (IOException | InterruptedException e) {
            throw new RuntimeException(e);
        } finally {
            Files2.deleteTree(dir);
        }
    }
}
