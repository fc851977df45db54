package io.mutexd;

import java.time.Instant;
import java.util.Map;

/**
 * One lease holding a resource, as {@code get}, list and a {@code lease_held} answer show it
 * (never with its lease id). {@code fencingToken} is an unsigned 64-bit integer
 * ({@link Long#toUnsignedString(long)}). {@code metadata} is the JSON value the holder gave,
 * or {@code null}.
 */
public record Holder(String owner, long fencingToken, boolean shared, long ttlMs, long expiresInMs,
        Instant acquiredAt, Instant renewedAt, Object metadata) {

    static Holder from(Map<String, Object> m) {
        return new Holder(Types.str(m, "owner"), Types.num(m, "fencing_token"), Types.bool(m, "shared"),
                Types.num(m, "ttl_ms"), Types.num(m, "expires_in_ms"), Types.time(m, "acquired_at"),
                Types.time(m, "renewed_at"), m.get("metadata"));
    }
}
