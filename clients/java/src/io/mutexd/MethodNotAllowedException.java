package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 405 {@code method_not_allowed}. */
public class MethodNotAllowedException extends ApiException {
    private static final long serialVersionUID = 1L;

    public MethodNotAllowedException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
