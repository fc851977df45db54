package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** Any 5xx but 503. */
public class ServerErrorException extends ApiException {
    private static final long serialVersionUID = 1L;

    public ServerErrorException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }
}
