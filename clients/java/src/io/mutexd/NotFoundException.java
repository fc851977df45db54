package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 404 {@code not_found}: no such route. */
public class NotFoundException extends ApiException {
    private static final long serialVersionUID = 1L;

    public NotFoundException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
