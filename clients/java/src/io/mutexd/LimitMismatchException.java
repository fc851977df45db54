package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 409 {@code limit_mismatch}: the acquire names another limit than the one in force, {@link #limit()}. */
public class LimitMismatchException extends ConflictException {
    private static final long serialVersionUID = 1L;

    public LimitMismatchException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }

    /** The limit in force on the resource, or 0 if the answer did not say. */
    public int limit() {
        Object l = errorObject().get("limit");
        return l instanceof Number ? ((Number) l).intValue() : 0;
    }
}
