package io.mutexd;

/**
 * The root of every error of the client: a transport error (no usable answer), an error
 * answer of the server ({@link ApiException} and its subclasses, one for each error code of
 * the contract), a lease whose deadline passed ({@link LeaseExpiredException}), or a call
 * interrupted or cancelled ({@link CancelledException}). Unchecked.
 */
public class MutexdException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public MutexdException(String message) {
        super(message);
    }

    public MutexdException(String message, Throwable cause) {
        super(message, cause);
    }

    /**
     * Whether trying the same call again later may succeed: true for a transport error
     * (and its subclasses), {@code unavailable}, {@code too_many_waiters} and any other 5xx.
     */
    public static boolean isRetryable(Throwable e) {
        return e instanceof TransportException || e instanceof UnavailableException
                || e instanceof TooManyWaitersException || e instanceof ServerErrorException;
    }
}
