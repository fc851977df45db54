package io.mutexd;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** 409 {@code lease_lost}: the lease is no longer the resource's (renew, release). */
public class LeaseLostException extends ConflictException {
    private static final long serialVersionUID = 1L;

    public LeaseLostException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status, code, message, retryAfter, error);
    }

    /**
     * Of an answer to {@link Client#renewMany} or {@link Client#releaseMany} (and a
     * {@link LeaseSet}'s loss), every resource the lease id no longer holds, in the order
     * given (the others WERE renewed, or released); {@code [resource()]} when the answer names
     * only one; else empty.
     */
    public List<String> resources() {
        Object o = errorObject().get("resources");
        if (o instanceof List) {
            List<String> out = new ArrayList<>();
            for (Object x : (List<?>) o) {
                if (x instanceof String) {
                    out.add((String) x);
                }
            }
            return List.copyOf(out);
        }
        return resource() != null ? List.of(resource()) : List.of();
    }
}
