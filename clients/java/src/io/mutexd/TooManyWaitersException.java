package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 429 {@code too_many_waiters}: the resource's queue of waiters is full. */
public class TooManyWaitersException extends ApiException {
    private static final long serialVersionUID = 1L;

    public TooManyWaitersException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
