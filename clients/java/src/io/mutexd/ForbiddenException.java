package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 403 {@code forbidden}: the token lacks the scope. */
public class ForbiddenException extends ApiException {
    private static final long serialVersionUID = 1L;

    public ForbiddenException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
