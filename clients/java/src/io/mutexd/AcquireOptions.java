package io.mutexd;

import java.time.Duration;

/**
 * The options of {@link Client#acquire}. Unset fields are not sent (the server's defaults
 * apply), but for the lease id: {@code acquire} proposes a random one when none is given,
 * and sends the same one to every server it tries, so that a retry is idempotent.
 */
public final class AcquireOptions {
    String owner;
    Duration ttl;
    Duration wait;
    String leaseId;
    Object metadata;
    Integer limit;
    Boolean shared;

    /** The lease's owner; default the client's ({@code <host name>:<pid>}). */
    public AcquireOptions owner(String owner) {
        this.owner = owner;
        return this;
    }

    /** The lease's time to live (whole milliseconds); default the server's, 15 s. */
    public AcquireOptions ttl(Duration ttl) {
        this.ttl = ttl;
        return this;
    }

    /** How long to wait in the resource's FIFO queue when it is held; default 0: not at all. */
    public AcquireOptions waitFor(Duration wait) {
        this.wait = wait;
        return this;
    }

    /** The lease id to propose (a UUID); default a random one. */
    public AcquireOptions leaseId(String leaseId) {
        this.leaseId = leaseId;
        return this;
    }

    /** A JSON value (a {@code Map}) to attach to the lease, for example the leader's address. */
    public AcquireOptions metadata(Object metadata) {
        this.metadata = metadata;
        return this;
    }

    /** How many leases may hold the resource at once (a counting semaphore); default 1. */
    public AcquireOptions limit(int limit) {
        this.limit = limit;
        return this;
    }

    /** A shared lease (a reader); default an exclusive one. */
    public AcquireOptions shared(boolean shared) {
        this.shared = shared;
        return this;
    }
}
