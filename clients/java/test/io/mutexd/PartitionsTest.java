package io.mutexd;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;

/**
 * {@link Partitions#of} against the published test vectors (tests/vectors/partitions.json,
 * the table of docs/api.md, "Partitions"), which the server's tests and every client's run
 * too; and the hash-tag rule's edges. No server.
 */
final class PartitionsTest {
    private PartitionsTest() {
    }

    private static String tagOf(String name) {
        return new String(Partitions.hashTag(name.getBytes(StandardCharsets.UTF_8)), StandardCharsets.UTF_8);
    }

    static void testEveryPublishedVectorHolds() throws Exception {
        Path file = Path.of(System.getProperty("mutexd.root"), "tests", "vectors", "partitions.json");
        Map<String, Object> doc = Types.map(Json.parse(Files.readString(file)));
        int checked = 0;
        for (Object o : Types.list(doc.get("vectors"))) {
            Map<String, Object> v = Types.map(o);
            String name = Types.str(v, "name");
            T.eq(Types.str(v, "hashed"), tagOf(name), name + ": hashed");
            T.eq(Long.parseLong(Types.str(v, "crc32"), 16), Partitions.hash(name), name + ": CRC-32");
            for (Map.Entry<String, Object> p : Types.map(v.get("partitions")).entrySet()) {
                int count = Integer.parseInt(p.getKey());
                T.eq(((Number) p.getValue()).intValue(), Partitions.of(name, count), name + ": partition of " + count);
                checked++;
            }
        }
        T.check(checked >= 40, "only " + checked + " partitions checked");
    }

    static void testTheHashTagRule() {
        // Edges the vectors leave out: one byte between the braces is a tag, a tag may end the
        // name, and a '}' before the first '{' closes nothing.
        Map<String, String> edges = Map.of("{x}", "x", "x/{order-7}", "order-7", "a}b{c}", "c");
        for (Map.Entry<String, String> e : edges.entrySet()) {
            T.eq(e.getValue(), tagOf(e.getKey()), e.getKey());
        }
        // Bytes of UTF-8, not chars.
        CRC32 crc = new CRC32();
        crc.update("é".getBytes(StandardCharsets.UTF_8));
        T.eq(crc.getValue(), Partitions.hash("{é}/x"), "{é}/x");
        // Names that share a tag share a partition, whatever the count.
        for (int count = 1; count <= 256; count++) {
            T.eq(Partitions.of("{o}/a", count), Partitions.of("{o}/bb", count), "count " + count);
        }
    }

    static void testACountOutOfRangeIsRefused() {
        for (int count : List.of(0, -1, 257)) {
            T.expect(IllegalArgumentException.class, () -> Partitions.of("a", count));
        }
        T.expect(NullPointerException.class, () -> Partitions.of(null, 3));
    }

    /** A hash tag's braces go percent-encoded in a path, as the contract asks. */
    static void testHashTagBracesArePercentEncoded() {
        T.eq("%7Border-7%7D/lock", Client.escape("{order-7}/lock"), "escaped");
    }
}
