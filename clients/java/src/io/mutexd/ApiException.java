package io.mutexd;

import java.time.Duration;
import java.util.Map;

/**
 * An error answer of the server: its status, its {@code code} ({@code null} for an answer
 * without the API's error body, such as a proxy's page), its message and extra fields.
 * The subclass is chosen by the code, else by the status ({@link ApiException#of}).
 */
public class ApiException extends MutexdException {
    private static final long serialVersionUID = 1L;
    private final int status;
    private final String code;
    private final String serverMessage;
    private final Duration retryAfter;
    private final transient Map<String, Object> error;
    private volatile String resource; // the resource that failed, when the answer names none (lockOrdered)

    public ApiException(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        super(status + (code != null ? " " + code : "") + ": " + message);
        this.status = status;
        this.code = code;
        this.serverMessage = message;
        this.retryAfter = retryAfter;
        this.error = error == null ? Map.of() : error;
    }

    /** The HTTP status. */
    public int status() {
        return status;
    }

    /** The error code, or {@code null} when the answer had no API error body. */
    public String code() {
        return code;
    }

    /** The server's message (not part of the contract). */
    public String serverMessage() {
        return serverMessage;
    }

    /** The {@code Retry-After} header, or {@code null}. */
    public Duration retryAfter() {
        return retryAfter;
    }

    /** The {@code field} the error names (400 answers), or {@code null}. */
    public String field() {
        Object f = error.get("field");
        return f instanceof String ? (String) f : null;
    }

    /**
     * The resource the error is about, or {@code null}: the answer's {@code resource} (of a
     * request about several resources, the first held, or no longer held, in the order
     * given), or of {@link Client#lockOrdered} the resource whose lock failed.
     */
    public String resource() {
        Object r = error.get("resource");
        return r instanceof String ? (String) r : resource;
    }

    void resource(String name) {
        this.resource = name;
    }

    /** The whole {@code error} object of the answer (empty without one). */
    public Map<String, Object> errorObject() {
        return error;
    }

    /** The exception for an error answer: by its code, else by its status. */
    public static ApiException of(int status, String code, String message, Duration retryAfter, Map<String, Object> error) {
        if (code != null) {
            switch (code) {
                case "invalid_json": case "invalid_field": case "unknown_field": case "missing_field":
                case "invalid_resource": case "invalid_ttl": case "invalid_wait": case "invalid_lease_id":
                    return new InvalidRequestException(status, code, message, retryAfter, error);
                case "unauthorized":
                    return new UnauthorizedException(status, code, message, retryAfter, error);
                case "forbidden":
                    return new ForbiddenException(status, code, message, retryAfter, error);
                case "not_found":
                    return new NotFoundException(status, code, message, retryAfter, error);
                case "method_not_allowed":
                    return new MethodNotAllowedException(status, code, message, retryAfter, error);
                case "lease_held":
                    return new LeaseHeldException(status, code, message, retryAfter, error);
                case "lease_lost":
                    return new LeaseLostException(status, code, message, retryAfter, error);
                case "limit_mismatch":
                    return new LimitMismatchException(status, code, message, retryAfter, error);
                case "body_too_large":
                    return new BodyTooLargeException(status, code, message, retryAfter, error);
                case "unsupported_media_type":
                    return new UnsupportedMediaTypeException(status, code, message, retryAfter, error);
                case "too_many_waiters":
                    return new TooManyWaitersException(status, code, message, retryAfter, error);
                case "unavailable":
                    return new UnavailableException(status, code, message, retryAfter, error);
                default:
                    break;
            }
        }
        switch (status) {
            case 400: return new InvalidRequestException(status, code, message, retryAfter, error);
            case 401: return new UnauthorizedException(status, code, message, retryAfter, error);
            case 403: return new ForbiddenException(status, code, message, retryAfter, error);
            case 404: return new NotFoundException(status, code, message, retryAfter, error);
            case 405: return new MethodNotAllowedException(status, code, message, retryAfter, error);
            case 409: return new ConflictException(status, code, message, retryAfter, error);
            case 413: return new BodyTooLargeException(status, code, message, retryAfter, error);
            case 415: return new UnsupportedMediaTypeException(status, code, message, retryAfter, error);
            case 429: return new TooManyWaitersException(status, code, message, retryAfter, error);
            case 503: return new UnavailableException(status, code, message, retryAfter, error);
            default:
                if (status >= 500) {
                    return new ServerErrorException(status, code, message, retryAfter, error);
                }
                return new ApiException(status, code, message, retryAfter, error);
        }
    }
}
