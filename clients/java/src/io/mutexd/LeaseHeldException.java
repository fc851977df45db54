package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 409 {@code lease_held}: another lease holds the resource; {@link #holder()} is the one whose lease ends first, {@link #retryAfter()} its remaining time. */
public class LeaseHeldException extends ConflictException {
    private static final long serialVersionUID = 1L;

    public LeaseHeldException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }

    /** The holder whose lease ends first, or {@code null} if the answer did not name one. */
    public Holder holder() {
        Object h = errorObject().get("holder");
        return h instanceof Map ? Holder.from(Types.map(h)) : null;
    }
}
