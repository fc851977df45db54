package io.mutexd;

/** No answer within the timeout (or before a lease's deadline). */
public class RequestTimeoutException extends TransportException {
    private static final long serialVersionUID = 1L;

    public RequestTimeoutException(String method, String url, String message, Throwable cause) {
        super(method, url, message, cause);
    }
}
