package io.mutexd;

/** No usable answer: the connection failed, or the answer was not the API's. */
public class TransportException extends MutexdException {
    private static final long serialVersionUID = 1L;
    private final String method;
    private final String url;

    public TransportException(String method, String url, String message, Throwable cause) {
        super(method + " " + url + ": " + message, cause);
        this.method = method;
        this.url = url;
    }

    /** The request's method. */
    public String method() {
        return method;
    }

    /** The request's URL. */
    public String url() {
        return url;
    }
}
