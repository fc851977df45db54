package io.mutexd;

/**
 * The call was interrupted (the calling thread's interrupt status is set again) or its
 * future cancelled; its request was abandoned, its connection closed.
 */
public class CancelledException extends MutexdException {
    private static final long serialVersionUID = 1L;

    public CancelledException(String message, Throwable cause) {
        super(message, cause);
    }
}
