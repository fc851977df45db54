package io.mutexd;

import java.time.Duration;

/** The options of {@link Client#lock}: an exclusive lease of 15 s that does not wait, unless set. */
public final class LockOptions {
    Duration ttl = Lease.DEFAULT_TTL;
    Duration wait;
    String owner;
    Object metadata;
    Integer limit;
    Boolean shared;

    /** The lease's time to live; default 15 s. It is renewed every third of it. */
    public LockOptions ttl(Duration ttl) {
        this.ttl = ttl;
        return this;
    }

    /** How long to wait in the resource's queue when it is held; default: not at all. */
    public LockOptions waitFor(Duration wait) {
        this.wait = wait;
        return this;
    }

    /** As {@link AcquireOptions#owner}. */
    public LockOptions owner(String owner) {
        this.owner = owner;
        return this;
    }

    /** As {@link AcquireOptions#metadata}. */
    public LockOptions metadata(Object metadata) {
        this.metadata = metadata;
        return this;
    }

    /** As {@link AcquireOptions#limit}. */
    public LockOptions limit(int limit) {
        this.limit = limit;
        return this;
    }

    /** As {@link AcquireOptions#shared}. */
    public LockOptions shared(boolean shared) {
        this.shared = shared;
        return this;
    }

    /** A copy, for each lease of {@link Client#lockOrdered}. */
    LockOptions copy() {
        LockOptions c = new LockOptions();
        c.ttl = ttl;
        c.wait = wait;
        c.owner = owner;
        c.metadata = metadata;
        c.limit = limit;
        c.shared = shared;
        return c;
    }

    AcquireOptions acquireOptions(String leaseId) {
        AcquireOptions a = new AcquireOptions().owner(owner).ttl(ttl).waitFor(wait).leaseId(leaseId).metadata(metadata);
        a.limit = limit;
        a.shared = shared;
        return a;
    }
}
