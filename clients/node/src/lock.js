// A lease kept alive in the background: Client#lock() returns a Lock.
//
// Renewal: every third of the lease's TTL. After a failure that is not lease_lost (no answer,
// 503, anything else) it tries again every tenth of the TTL (at least 100 ms, at most 1 s), on
// a new connection, until the deadline. One attempt may take at most a third of the TTL, so
// that a request to a server that went silent leaves time for others; no attempt (to any of
// the client's servers) is started or lasts past the deadline.
//
// Loss: the lock is lost, once and for good, when a renewal is answered lease_lost, or when
// the lease's deadline passes without a successful renewal. The deadline is measured on this
// process's monotonic clock (performance.now()), never on the server's wall clock: it is the
// moment the last successful renewal was sent plus the `expires_in_ms` it was answered with.
// The server started that TTL after the request was sent, so the deadline falls no later than
// the server's expiry. A safety margin (a fiftieth of the TTL, at most 1 s) is taken off it, for
// the rate difference of two clocks and the moment between a check and the action it guards.
// `lost`, `check()` and `remainingMs` compare the clock with that deadline themselves: a
// process paused past it (SIGSTOP, a frozen VM) sees the loss at its first check after
// resuming, before any timer has run. When the lease was lost, `lost` is true, `signal` is
// aborted with the reason (a LeaseLostError or a LeaseExpiredError) and `onLost` is called
// once. The signal is a plain AbortSignal: a timer aborts it at the deadline, and each of those
// checks aborts it at once when it finds the deadline passed.
//
// Timers: the renewal timer keeps the process alive while the lock is held, as any work in
// progress does; release() and loss clear every timer, and the client's idle connections are
// unref'd, so that nothing of the lock keeps the process alive after it.

import { LeaseLostError, LeaseExpiredError } from './errors.js';

const now = () => performance.now();

// The method `await using` calls at the end of its block. Node 18.18 and 20.4 and later define
// Symbol.asyncDispose, as Symbol.for('nodejs.asyncDispose') when the engine has none; older
// versions do not, and get the same symbol here.
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

/** How long before the end of its TTL a client stops counting on a lease, in ms. */
export function safetyMarginMs(ttlMs) {
  return Math.min(1000, ttlMs / 50);
}

export class Lock {
  #client;
  #lease;
  #state = 'held';
  #controller = new AbortController();
  #onLost;
  #deadline = 0;
  #renewTimer = null;
  #deadlineTimer = null;
  #inflight = null;
  #lastError = undefined;
  #releasing = null;
  #margin = 0;
  #sentAt = undefined;

  /**
   * @param {import('./client.js').Client} client
   * @param {import('./model.js').Lease} lease
   * @param {{ sentAt: number, receivedAt: number, onLost?: Function }} info monotonic times of
   *   the acquire request
   */
  constructor(client, lease, { sentAt, receivedAt, onLost }) {
    this.#client = client;
    this.#lease = lease;
    this.#onLost = onLost;
    this.#margin = safetyMarginMs(lease.ttlMs);
    const third = lease.ttlMs / 3;
    if (receivedAt - sentAt < third) {
      this.#setDeadline(sentAt + lease.expiresInMs);
      this.#schedule(third);
    } else {
      // The acquire waited in the queue: the grant happened somewhere between sending and the
      // answer. Take the answer's time for now and renew at once, which gives a deadline
      // measured from a request sent after the grant.
      this.#setDeadline(receivedAt + lease.expiresInMs);
      this.#schedule(0);
    }
  }

  /** The resource. */
  get resource() {
    return this.#lease.resource;
  }

  /** The lease id (the credential that renews and releases). */
  get leaseId() {
    return this.#lease.leaseId;
  }

  /** The owner given at acquire. */
  get owner() {
    return this.#lease.owner;
  }

  /** The fencing token of the lease (a renewal keeps it). */
  get fencingToken() {
    return this.#lease.fencingToken;
  }

  /** The lease's TTL in ms. */
  get ttlMs() {
    return this.#lease.ttlMs;
  }

  /** How many leases may hold the resource at once (more than 1: a counting semaphore). */
  get limit() {
    return this.#lease.limit;
  }

  /** Whether this is a shared lease (a reader). */
  get shared() {
    return this.#lease.shared;
  }

  /** The lease as the last successful acquire or renewal answered it. */
  get lease() {
    return this.#lease;
  }

  /**
   * True once the lease was lost (lease_lost, or its deadline passed without renewal). It
   * compares the clock with the deadline: true as soon as the deadline has passed, even if no
   * timer has run since.
   */
  get lost() {
    this.#expireIfDue();
    return this.#state === 'lost';
  }

  /**
   * Throws the reason of the loss (a LeaseLostError or a LeaseExpiredError) if the lease is
   * lost, or its deadline has passed on the clock; call it right before each action the lease
   * guards.
   */
  check() {
    this.#expireIfDue();
    if (this.#state === 'lost') throw this.#controller.signal.reason;
  }

  /** True once release() was called. */
  get released() {
    return this.#state === 'released';
  }

  /**
   * Aborted when the lease is lost (reason: a LeaseLostError or a LeaseExpiredError), and when
   * it is released (reason: a DOMException named AbortError). Pass it to the work the lease
   * guards. A loss by the deadline aborts it from a timer, or at once from `lost`, check() or
   * `remainingMs` when they find the deadline passed; right before an action, call check().
   */
  get signal() {
    return this.#controller.signal;
  }

  /** While held, how long the lease is certain to last without another renewal, in ms; else 0. */
  get remainingMs() {
    this.#expireIfDue();
    return this.#state === 'held' ? Math.max(0, this.#deadline - now()) : 0;
  }

  /**
   * Stop renewing and release the lease. Resolves true when released, false when the lease
   * had already been lost. Calling it again returns the same promise (or, after a failure,
   * tries again).
   * @param {{ signal?: AbortSignal, timeoutMs?: number }} [options]
   * @returns {Promise<boolean>}
   */
  release(options = {}) {
    if (this.#releasing) return this.#releasing;
    if (this.#state === 'lost') {
      this.#releasing = Promise.resolve(false);
      return this.#releasing;
    }
    if (this.#state === 'held') {
      this.#state = 'released';
      this.#stop();
      this.#controller.abort(new DOMException('the lock was released', 'AbortError'));
    }
    const promise = this.#client
      .release({ resource: this.#lease.resource, leaseId: this.#lease.leaseId }, options)
      .then(
        () => true,
        (err) => {
          if (err instanceof LeaseLostError) return false;
          if (this.#releasing === promise) this.#releasing = null;
          throw err;
        },
      );
    this.#releasing = promise;
    return promise;
  }

  /**
   * `await using lock = await client.lock(...)` releases the lock at the end of the block, as
   * `finally { await lock.release(); }` does: it rejects as release() does (a lease already
   * lost is no error).
   * @returns {Promise<void>}
   */
  async [asyncDispose]() {
    await this.release();
  }

  #schedule(delay) {
    this.#renewTimer = setTimeout(() => {
      this.#renewTimer = null;
      this.#renew();
    }, delay);
  }

  #expireIfDue() {
    if (this.#state === 'held' && now() >= this.#deadline) this.#expire();
  }

  #expire() {
    const last = this.#lastError;
    let why;
    if (last) why = `last failure: ${last.message}`;
    else if (this.#sentAt !== undefined)
      why = `a renewal sent ${Math.round(now() - this.#sentAt)} ms before had no answer yet`;
    else why = 'no renewal was tried since the last one succeeded: the process did not run in time (paused, or starved)';
    this.#lose(
      new LeaseExpiredError(
        `the lease on ${this.#lease.resource} could not be renewed before its deadline (${why})`,
        last === undefined ? undefined : { cause: last },
      ),
    );
  }

  #setDeadline(deadline) {
    this.#deadline = deadline - this.#margin;
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = setTimeout(() => this.#expire(), Math.max(0, this.#deadline - now()));
    // The renewal cycle keeps the process alive while held; this watchdog need not.
    this.#deadlineTimer.unref?.();
  }

  async #renew() {
    if (this.#state !== 'held') return;
    const controller = new AbortController();
    this.#inflight = controller;
    const sentAt = now();
    const left = this.#deadline - sentAt;
    if (left <= 0) {
      this.#expire();
      return;
    }
    this.#sentAt = sentAt;
    const timeoutMs = Math.max(1, Math.min(this.#client.timeoutMs, this.#lease.ttlMs / 3, left));
    try {
      const lease = await this.#client.renew(
        { resource: this.#lease.resource, leaseId: this.#lease.leaseId },
        { signal: controller.signal, timeoutMs, deadline: this.#deadline },
      );
      this.#sentAt = undefined;
      if (this.#state !== 'held') return;
      // Answered after the deadline: the loss is final, whatever the answer says.
      if (now() >= this.#deadline) {
        this.#expire();
        return;
      }
      this.#lease = lease;
      this.#lastError = undefined;
      this.#setDeadline(sentAt + lease.expiresInMs);
      this.#schedule(lease.ttlMs / 3);
    } catch (err) {
      this.#sentAt = undefined;
      if (this.#state !== 'held') return;
      if (err instanceof LeaseLostError) {
        this.#lose(err);
        return;
      }
      this.#lastError = err;
      this.#schedule(Math.min(1000, Math.max(100, this.#lease.ttlMs / 10)));
    } finally {
      if (this.#inflight === controller) this.#inflight = null;
    }
  }

  #stop() {
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#deadlineTimer);
    this.#renewTimer = null;
    this.#deadlineTimer = null;
    if (this.#inflight) {
      this.#inflight.abort();
      this.#inflight = null;
    }
  }

  #lose(err) {
    if (this.#state !== 'held') return;
    this.#state = 'lost';
    this.#stop();
    this.#controller.abort(err);
    const onLost = this.#onLost;
    if (typeof onLost !== 'function') return;
    // An exception in the callback is not swallowed: it is thrown as an uncaught exception,
    // as it would be from an event listener.
    const rethrow = (e) =>
      process.nextTick(() => {
        throw e;
      });
    try {
      const r = onLost(err, this);
      if (r && typeof r.then === 'function') r.then(undefined, rethrow);
    } catch (e) {
      rethrow(e);
    }
  }
}
