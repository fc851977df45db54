package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 400: bad input ({@code invalid_json}, {@code invalid_field}, {@code unknown_field}, {@code missing_field}, {@code invalid_resource}, {@code invalid_ttl}, {@code invalid_wait}, {@code invalid_lease_id}); {@link #field()} names the field. */
public class InvalidRequestException extends ApiException {
    private static final long serialVersionUID = 1L;

    public InvalidRequestException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
