package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 401 {@code unauthorized}: authorization is on and the bearer token is missing or unknown. */
public class UnauthorizedException extends ApiException {
    private static final long serialVersionUID = 1L;

    public UnauthorizedException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
