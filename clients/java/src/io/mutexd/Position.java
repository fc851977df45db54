package io.mutexd;

/**
 * Where a list watch or the events stand, as the server said it: the change index in
 * decimal on a lone server or a group of one partition; on a partitioned group
 * ({@code --partitions N}, N > 1), where one number cannot order the changes of every
 * partition, an opaque string ("v" and a number per partition). Pass it back unchanged
 * ({@link Client#listWatch(String, Position, java.time.Duration, int, String)},
 * {@link Client#events(Position, String, int, java.time.Duration)}): it works on every group,
 * where the numbers ({@link ResourceList#index()}, {@link EventPage#next()}) work only on the
 * first two.
 */
public record Position(String value) {

    /** A position as the server wrote it. */
    public Position {
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("a position is not empty");
        }
    }

    /** The position of a change index (a lone server's, or a group of one partition's). */
    public static Position of(long index) {
        return new Position(Long.toUnsignedString(index));
    }

    /** Whether it is a change index (a lone server's, or a group of one partition's). */
    public boolean isIndex() {
        for (int i = 0; i < value.length(); i++) {
            if (value.charAt(i) < '0' || value.charAt(i) > '9') {
                return false;
            }
        }
        return true;
    }

    /** The position as sent: what the server wrote. */
    @Override
    public String toString() {
        return value;
    }
}
