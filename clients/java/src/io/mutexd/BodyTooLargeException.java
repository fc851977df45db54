package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 413 {@code body_too_large}: the request body is over 65536 bytes. */
public class BodyTooLargeException extends ApiException {
    private static final long serialVersionUID = 1L;

    public BodyTooLargeException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
