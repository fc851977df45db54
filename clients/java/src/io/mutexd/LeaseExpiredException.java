package io.mutexd;

/** A held lease's deadline passed without a successful renewal. */
public class LeaseExpiredException extends MutexdException {
    private static final long serialVersionUID = 1L;

    public LeaseExpiredException(String message, Throwable cause) {
        super(message, cause);
    }
}
