package io.mutexd;

import java.time.Instant;
import java.util.List;
import java.util.Map;

/**
 * The answer of {@code GET /v1/servers}: the server that answered ({@code self}), the
 * active server of its group ({@code null} during a takeover, and in a partitioned group),
 * every server it knows, and the partition map of a partitioned group ({@code null} elsewhere).
 */
public record ServerGroup(Self self, Active active, List<Member> servers, PartitionMap partitions) {

    /** The answering server: its advertised URL and role ({@code active}, {@code standby}, {@code joining}). */
    public record Self(String url, String role) {
    }

    /** The active server: since when, and its generation. */
    public record Active(String url, Instant since, long generation) {
    }

    /** One server of the group, with its lag behind the active, and the partitions it owns (empty if none). */
    public record Member(String url, String role, long lagChanges, long lagMs, Instant seenAt, List<Integer> partitions) {
    }

    /** A partitioned group's map: the partition count, and the owner of each partition. */
    public record PartitionMap(int count, List<Owner> owners) {
    }

    /** The owner of one partition ({@code url} {@code null} while none owns it), since when, and its generation. */
    public record Owner(int partition, String url, long generation, Instant since) {
    }

    static ServerGroup from(Map<String, Object> m) {
        Map<String, Object> s = Types.mapOrNull(m.get("self"));
        Map<String, Object> a = Types.mapOrNull(m.get("active"));
        Map<String, Object> p = Types.mapOrNull(m.get("partitions"));
        return new ServerGroup(s == null ? null : new Self(Types.str(s, "url"), Types.str(s, "role")),
                a == null ? null : new Active(Types.str(a, "url"), Types.time(a, "since"), Types.num(a, "generation")),
                Types.each(m.get("servers"), x -> new Member(Types.str(x, "url"), Types.str(x, "role"),
                        Types.num(x, "lag_changes"), Types.num(x, "lag_ms"), Types.time(x, "seen_at"),
                        Types.list(x.get("partitions")).stream().map(n -> ((Number) n).intValue()).toList())),
                p == null ? null : new PartitionMap((int) Types.num(p, "count"),
                        Types.each(p.get("owners"), o -> new Owner((int) Types.num(o, "partition"), Types.str(o, "url"),
                                Types.num(o, "generation"), Types.time(o, "since")))));
    }
}
