package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 409: a conflict (any code but those of its subclasses). */
public class ConflictException extends ApiException {
    private static final long serialVersionUID = 1L;

    public ConflictException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
