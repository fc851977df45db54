package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 409 {@code lease_lost}: the lease is no longer the resource's (renew, release). */
public class LeaseLostException extends ConflictException {
    private static final long serialVersionUID = 1L;

    public LeaseLostException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
