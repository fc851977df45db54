package io.mutexd;

/** A 2xx answer that is not the API's JSON. */
public class ProtocolException extends TransportException {
    private static final long serialVersionUID = 1L;
    private final int status;

    public ProtocolException(String method, String url, int status, String message, Throwable cause) {
        super(method, url, message, cause);
        this.status = status;
    }

    /** The answer's status. */
    public int status() {
        return status;
    }
}
