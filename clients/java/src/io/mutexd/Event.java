package io.mutexd;

import java.time.Instant;
import java.util.Map;

/**
 * One recent change of a resource: {@code type} is {@code granted}, {@code renewed},
 * {@code released}, {@code expired} or {@code broken}. On a partitioned group
 * {@code partition} is the resource's partition ({@code null} elsewhere) and {@code index}
 * that partition's change index, not a position: read on from the page's
 * {@link EventPage#nextPosition()}.
 */
public record Event(long index, Instant at, String resource, String type, String owner, long fencingToken,
        boolean shared, int limit, Integer partition) {

    static Event from(Map<String, Object> m) {
        return new Event(Types.num(m, "index"), Types.time(m, "at"), Types.str(m, "resource"),
                Types.str(m, "type"), Types.str(m, "owner"), Types.num(m, "fencing_token"),
                Types.bool(m, "shared"), (int) Types.num(m, "limit"), Types.intOrNull(m, "partition"));
    }
}
