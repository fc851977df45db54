package io.mutexd;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.zip.CRC32;

/**
 * The partition of a resource name, as the server computes it (docs/api.md, "Partitions"):
 * the CRC-32 of the name's UTF-8 bytes, or of its hash tag only, modulo the partition count.
 */
public final class Partitions {
    /** The largest partition count the contract allows. */
    static final int MAX = 256;

    private Partitions() {
    }

    /**
     * The partition of the resource {@code name} among {@code count} partitions (1 to 256):
     * 0 to {@code count - 1}. The hash tag is the bytes between the first <code>{</code> and
     * the first <code>}</code> after it, when there is at least one; names that share a tag,
     * <code>{order-7}/lock</code> and <code>{order-7}/stock</code>, share a partition
     * whatever the count. With a count of 1 every name is in partition 0.
     *
     * @throws IllegalArgumentException if {@code count} is not 1 to 256
     * @throws NullPointerException if {@code name} is null
     */
    public static int of(String name, int count) {
        if (name == null) {
            throw new NullPointerException("the name is null");
        }
        if (count < 1 || count > MAX) {
            throw new IllegalArgumentException("the partition count must be 1 to " + MAX + ", not " + count);
        }
        return (int) (hash(name) % count);
    }

    /** The bytes of {@code name} that are hashed: its hash tag, or all of them (Redis Cluster's rule). */
    static byte[] hashTag(byte[] name) {
        for (int open = 0; open < name.length; open++) {
            if (name[open] == '{') {
                for (int close = open + 1; close < name.length; close++) {
                    if (name[close] == '}') {
                        return close > open + 1 ? Arrays.copyOfRange(name, open + 1, close) : name;
                    }
                }
                return name;
            }
        }
        return name;
    }

    /** The CRC-32 of what {@link #hashTag} picks of the name's UTF-8 bytes. */
    static long hash(String name) {
        CRC32 crc = new CRC32();
        crc.update(hashTag(name.getBytes(StandardCharsets.UTF_8)));
        return crc.getValue();
    }
}
