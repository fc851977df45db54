package io.mutexd;

import java.time.Instant;
import java.util.List;
import java.util.Map;

/**
 * The answer of {@code GET /v1/servers}: the server that answered ({@code self}), the
 * active server of its group ({@code null} during a takeover) and every server it knows.
 */
public record ServerGroup(Self self, Active active, List<Member> servers) {

    /** The answering server: its advertised URL and role ({@code active}, {@code standby}, {@code joining}). */
    public record Self(String url, String role) {
    }

    /** The active server: since when, and its generation. */
    public record Active(String url, Instant since, long generation) {
    }

    /** One server of the group, with its lag behind the active. */
    public record Member(String url, String role, long lagChanges, long lagMs, Instant seenAt) {
    }

    static ServerGroup from(Map<String, Object> m) {
        Map<String, Object> s = Types.mapOrNull(m.get("self"));
        Map<String, Object> a = Types.mapOrNull(m.get("active"));
        return new ServerGroup(s == null ? null : new Self(Types.str(s, "url"), Types.str(s, "role")),
                a == null ? null : new Active(Types.str(a, "url"), Types.time(a, "since"), Types.num(a, "generation")),
                Types.each(m.get("servers"), x -> new Member(Types.str(x, "url"), Types.str(x, "role"),
                        Types.num(x, "lag_changes"), Types.num(x, "lag_ms"), Types.time(x, "seen_at"))));
    }
}
