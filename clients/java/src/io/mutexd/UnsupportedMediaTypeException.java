package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 415 {@code unsupported_media_type}: the body is not JSON. */
public class UnsupportedMediaTypeException extends ApiException {
    private static final long serialVersionUID = 1L;

    public UnsupportedMediaTypeException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
