package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** 503 {@code unavailable}: not ready, overloaded, shutting down, or no active server of a group; {@link #reason()} says which, {@link #retryAfter()} when to try again. */
public class UnavailableException extends ApiException {
    private static final long serialVersionUID = 1L;

    public UnavailableException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }

    /** The reason ({@code no_active_server}, {@code fenced}, {@code ownership_unconfirmed}, {@code forward_busy}...), or {@code null}. */
    public String reason() {
        Object r = errorObject().get("reason");
        return r instanceof String ? (String) r : null;
    }
}
