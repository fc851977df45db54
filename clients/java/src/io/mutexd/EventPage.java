package io.mutexd;

import java.util.List;
import java.util.Map;

/**
 * An answer of {@code GET /v1/events}: the events, oldest first; {@code next}, the
 * {@code after} of the next request; {@code truncated}, whether events after the index asked
 * for were dropped (some changes were missed); {@code nextPosition}, {@code next} as the server
 * wrote it: on a partitioned group, where {@code next} is 0, the only one to read on from (see
 * {@link Position}).
 */
public record EventPage(List<Event> events, long next, boolean truncated, Position nextPosition) {

    static EventPage from(Map<String, Object> m) {
        return new EventPage(Types.each(m.get("events"), Event::from), Types.index(m, "next"),
                Types.bool(m, "truncated"), Types.position(m, "next"));
    }
}
