package io.mutexd;

import java.time.Instant;
import java.util.Map;

/**
 * A lease as an acquire or a renewal answered it. {@code deadlineNanos} is on this process's
 * monotonic clock ({@link System#nanoTime()}): when the request was sent plus
 * {@code expiresInMs}, the time by which the lease ends unless renewed (before any safety
 * margin).
 */
public record Grant(String resource, String leaseId, String owner, long fencingToken, long ttlMs,
        long expiresInMs, Instant acquiredAt, Instant renewedAt, Object metadata, int limit,
        boolean shared, long deadlineNanos) {

    static Grant from(Map<String, Object> m, long sentNanos) {
        String id = Types.str(m, "lease_id");
        if (id == null || Types.str(m, "resource") == null || !m.containsKey("fencing_token")) {
            throw new IllegalArgumentException("not a lease: no resource, lease_id or fencing_token");
        }
        long limit = Types.num(m, "limit");
        long expires = Types.num(m, "expires_in_ms");
        return new Grant(Types.str(m, "resource"), id, Types.str(m, "owner"), Types.num(m, "fencing_token"),
                Types.num(m, "ttl_ms"), expires, Types.time(m, "acquired_at"), Types.time(m, "renewed_at"),
                m.get("metadata"), limit == 0 ? 1 : (int) limit, Types.bool(m, "shared"),
                sentNanos + expires * 1_000_000L);
    }
}
