package io.mutexd;

import java.util.List;
import java.util.Map;

/**
 * An answer of {@code GET /v1/events}: the events, oldest first; {@code next}, the
 * {@code after} of the next request; {@code truncated}, whether events after the index asked
 * for were dropped (some changes were missed).
 */
public record EventPage(List<Event> events, long next, boolean truncated) {

    static EventPage from(Map<String, Object> m) {
        return new EventPage(Types.each(m.get("events"), Event::from), Types.num(m, "next"),
                Types.bool(m, "truncated"));
    }
}
