// A lease kept alive in the background: Client#lock() returns a Lock. The leases of several
// resources taken at once (Client#lockMany(), one lease id) are kept alive as a set by a
// MultiLock, renewed and released with one request; Client#lockOrdered() takes a Lock per
// resource, in name order, and an OrderedLock holds them as one.
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

// What a subclass of Holding says: how a loss by the clock is seen (EXPIRE_IF_DUE: finds the
// deadline passed, then loses), how long it is certain to last while held (REMAINING), what ends
// with it (STOP: timers, a renewal in flight) and how it gives back what it holds (GIVE_BACK:
// options, whether it was lost -> release()'s promise). HELD: whether it is still held.
const EXPIRE_IF_DUE = Symbol('expireIfDue');
const REMAINING = Symbol('remaining');
const STOP = Symbol('stop');
const GIVE_BACK = Symbol('giveBack');
const HELD = Symbol('held');
// What a subclass of KeptAlive says: how to renew (SEND: options -> the answer), what to keep of
// an answer (TAKE: answer -> { expiresInMs, ttlMs }, the earliest of a set's), how to release
// (RELEASE: options -> promise), and what it holds, for messages (WHAT).
const SEND = Symbol('send');
const TAKE = Symbol('take');
const RELEASE = Symbol('release');
const WHAT = Symbol('what');
// Whether release() after a loss still asks the server (a set lost by one lease holds others).
const RELEASE_LOST = Symbol('releaseLost');
/** Loses a holder, with the reason: how the client tells an OrderedLock that one of its locks was
 * lost (not exported by index.js). */
export const LOSE = Symbol('lose');

// What the user sees of every lock the client makes, Lock, MultiLock and OrderedLock: held until
// released or lost (once and for good), `lost`, check(), `signal`, `onLost` and release().
class Holding {
  #state = 'held';
  #controller = new AbortController();
  #onLost;
  #releasing = null;

  constructor(onLost) {
    this.#onLost = onLost;
  }

  /**
   * True once the lease was lost (lease_lost, or its deadline passed without renewal). It
   * compares the clock with the deadline: true as soon as the deadline has passed, even if no
   * timer has run since. (An OrderedLock: once any lock was lost; it compares each lock's
   * deadline with the clock itself.)
   */
  get lost() {
    this[EXPIRE_IF_DUE]();
    return this.#state === 'lost';
  }

  /**
   * Throws the reason of the loss (a LeaseLostError or a LeaseExpiredError) if the lease is
   * lost, or its deadline has passed on the clock; call it right before each action the lease
   * guards. (An OrderedLock: the reason of the first loss, if any lock is lost or past its
   * deadline.)
   */
  check() {
    this[EXPIRE_IF_DUE]();
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

  /** While held, how long the lease is certain to last without another renewal, in ms; else 0.
   * (An OrderedLock: the least of the locks' remainingMs.) */
  get remainingMs() {
    this[EXPIRE_IF_DUE]();
    return this.#state === 'held' ? this[REMAINING]() : 0;
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
    const lost = this.#state === 'lost';
    if (this.#state === 'held') {
      this.#state = 'released';
      this[STOP]();
      this.#controller.abort(new DOMException('the lock was released', 'AbortError'));
    }
    const promise = this[GIVE_BACK](options, lost).then(undefined, (err) => {
      if (this.#releasing === promise) this.#releasing = null;
      throw err;
    });
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

  get [HELD]() {
    return this.#state === 'held';
  }

  // Nothing to stop but what a subclass says.
  [STOP]() {}

  [LOSE](err) {
    if (this.#state !== 'held') return;
    this.#state = 'lost';
    this[STOP]();
    this.#controller.abort(err);
    callOnLost(this.#onLost, err, this);
  }
}

// The renewal machinery and the deadline, shared by Lock and MultiLock.
class KeptAlive extends Holding {
  #client;
  #deadline = 0;
  #renewTimer = null;
  #deadlineTimer = null;
  #inflight = null;
  #lastError = undefined;
  #margin = 0;
  #sentAt = undefined;
  #ttlMs;

  constructor(client, { ttlMs, expiresInMs }, { sentAt, receivedAt, onLost }) {
    super(onLost);
    this.#client = client;
    this.#ttlMs = ttlMs;
    this.#margin = safetyMarginMs(ttlMs);
    const third = ttlMs / 3;
    if (receivedAt - sentAt < third) {
      this.#setDeadline(sentAt + expiresInMs);
      this.#schedule(third);
    } else {
      // The acquire waited in the queue: the grant happened somewhere between sending and the
      // answer. Take the answer's time for now and renew at once, which gives a deadline
      // measured from a request sent after the grant.
      this.#setDeadline(receivedAt + expiresInMs);
      this.#schedule(0);
    }
  }

  [REMAINING]() {
    return Math.max(0, this.#deadline - now());
  }

  [GIVE_BACK](options, lost) {
    // What a lost set still holds is given back, quietly; a lost lease holds nothing.
    if (lost) return this[RELEASE_LOST] ? this[RELEASE](options).then(() => false, () => false) : Promise.resolve(false);
    return this[RELEASE](options).then(
      () => true,
      (err) => {
        if (err instanceof LeaseLostError) return false;
        throw err;
      },
    );
  }

  #schedule(delay) {
    this.#renewTimer = setTimeout(() => {
      this.#renewTimer = null;
      this.#renew();
    }, delay);
  }

  [EXPIRE_IF_DUE]() {
    if (this[HELD] && now() >= this.#deadline) this.#expire();
  }

  #expire() {
    const last = this.#lastError;
    let why;
    if (last) why = `last failure: ${last.message}`;
    else if (this.#sentAt !== undefined)
      why = `a renewal sent ${Math.round(now() - this.#sentAt)} ms before had no answer yet`;
    else why = 'no renewal was tried since the last one succeeded: the process did not run in time (paused, or starved)';
    this[LOSE](
      new LeaseExpiredError(
        `${this[WHAT]()} could not be renewed before its deadline (${why})`,
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
    if (!this[HELD]) return;
    const controller = new AbortController();
    this.#inflight = controller;
    const sentAt = now();
    const left = this.#deadline - sentAt;
    if (left <= 0) {
      this.#expire();
      return;
    }
    this.#sentAt = sentAt;
    const timeoutMs = Math.max(1, Math.min(this.#client.timeoutMs, this.#ttlMs / 3, left));
    try {
      const answer = await this[SEND]({ signal: controller.signal, timeoutMs, deadline: this.#deadline });
      this.#sentAt = undefined;
      if (!this[HELD]) return;
      // Answered after the deadline: the loss is final, whatever the answer says.
      if (now() >= this.#deadline) {
        this.#expire();
        return;
      }
      const { expiresInMs, ttlMs } = this[TAKE](answer);
      this.#ttlMs = ttlMs;
      this.#lastError = undefined;
      this.#setDeadline(sentAt + expiresInMs);
      this.#schedule(ttlMs / 3);
    } catch (err) {
      this.#sentAt = undefined;
      if (!this[HELD]) return;
      if (err instanceof LeaseLostError) {
        this[LOSE](err);
        return;
      }
      this.#lastError = err;
      this.#schedule(Math.min(1000, Math.max(100, this.#ttlMs / 10)));
    } finally {
      if (this.#inflight === controller) this.#inflight = null;
    }
  }

  [STOP]() {
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#deadlineTimer);
    this.#renewTimer = null;
    this.#deadlineTimer = null;
    if (this.#inflight) {
      this.#inflight.abort();
      this.#inflight = null;
    }
  }
}

// Calls a user's onLost(err, holder). An exception in the callback is not swallowed: it is
// thrown as an uncaught exception, as it would be from an event listener.
function callOnLost(onLost, err, holder) {
  if (typeof onLost !== 'function') return;
  const rethrow = (e) =>
    process.nextTick(() => {
      throw e;
    });
  try {
    const r = onLost(err, holder);
    if (r && typeof r.then === 'function') r.then(undefined, rethrow);
  } catch (e) {
    rethrow(e);
  }
}

export class Lock extends KeptAlive {
  #client;
  #lease;

  /**
   * @param {import('./client.js').Client} client
   * @param {import('./model.js').Lease} lease
   * @param {{ sentAt: number, receivedAt: number, onLost?: Function }} info monotonic times of
   *   the acquire request
   */
  constructor(client, lease, info) {
    super(client, lease, info);
    this.#client = client;
    this.#lease = lease;
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

  [SEND](options) {
    return this.#client.renew({ resource: this.#lease.resource, leaseId: this.#lease.leaseId }, options);
  }

  [TAKE](lease) {
    this.#lease = lease;
    return lease;
  }

  [RELEASE](options) {
    return this.#client.release({ resource: this.#lease.resource, leaseId: this.#lease.leaseId }, options);
  }

  [WHAT]() {
    return `the lease on ${this.#lease.resource}`;
  }
}

// The earliest expiry and the shortest TTL of a set's leases.
function earliest(leases) {
  return {
    expiresInMs: Math.min(...leases.map((l) => l.expiresInMs)),
    ttlMs: Math.min(...leases.map((l) => l.ttlMs)),
  };
}

function tokensOf(leases) {
  return new Map(leases.map((l) => [l.resource, l.fencingToken]));
}

/**
 * The leases of several resources taken at once under one lease id (Client#lockMany()), kept
 * alive as a set: renewed with one request for all every third of the TTL, released with one.
 * Lost (`lost`, check(), `signal`, `onLost`) the moment a renewal of the set is answered
 * lease_lost (ANY lease of the set was lost: the error's `resources` names which) or the
 * deadline, the earliest of the leases', passes without a successful renewal of the set.
 */
export class MultiLock extends KeptAlive {
  #client;
  #leases;
  #resources;

  /**
   * @param {import('./client.js').Client} client
   * @param {import('./model.js').Lease[]} leases one per resource, of one lease id
   * @param {{ sentAt: number, receivedAt: number, onLost?: Function }} info monotonic times of
   *   the acquire request
   */
  constructor(client, leases, info) {
    if (!Array.isArray(leases) || leases.length === 0) throw new TypeError('no lease given');
    if (new Set(leases.map((l) => l.leaseId)).size !== 1) throw new TypeError('the leases of a set have one lease id');
    super(client, earliest(leases), info);
    this.#client = client;
    this.#leases = [...leases];
    this.#resources = leases.map((l) => l.resource);
  }

  /** The resources, in the order given. */
  get resources() {
    return [...this.#resources];
  }

  /** The lease id every lease of the set shares (the credential). */
  get leaseId() {
    return this.#leases[0].leaseId;
  }

  /** The owner given at acquire. */
  get owner() {
    return this.#leases[0].owner;
  }

  /** The leases' TTL in ms. */
  get ttlMs() {
    return earliest(this.#leases).ttlMs;
  }

  /** Every lease of the set as the last successful acquire or renewal answered it, in the
   * order given; each has its resource's fencing token. */
  get leases() {
    return [...this.#leases];
  }

  /** Each resource's fencing token (a renewal keeps them), by name. */
  get fencingTokens() {
    return tokensOf(this.#leases);
  }

  [SEND](options) {
    return this.#client.renewMany({ resources: this.#resources, leaseId: this.leaseId }, options);
  }

  [TAKE](leases) {
    this.#leases = leases;
    return earliest(leases);
  }

  // Releases what the set still holds: after a loss too (RELEASE_LOST).
  [RELEASE](options) {
    return this.#client.releaseMany({ resources: this.#resources, leaseId: this.leaseId }, options);
  }

  get [RELEASE_LOST]() {
    return true;
  }

  [WHAT]() {
    return `the leases on ${this.#resources.join(', ')}`;
  }
}

/**
 * The locks of Client#lockOrdered(): one Lock per resource, each with its own lease id and
 * renewed on its own, taken one by one in name order. As a whole it is lost (`lost`, check(),
 * `signal`, `onLost`) the moment ANY of them is, with that one's reason; `remainingMs` is the
 * least of theirs; release() releases every one, the last taken first.
 */
export class OrderedLock extends Holding {
  #locks;

  /**
   * @param {Lock[]} locks in the order taken
   * @param {{ onLost?: Function }} [options]
   */
  constructor(locks, { onLost } = {}) {
    super(onLost);
    this.#locks = [...locks];
  }

  // A lock's loss is this one's: each lock's onLost calls [LOSE] (the client makes them so).
  // Asking each lock makes it compare its own deadline with the clock.
  [EXPIRE_IF_DUE]() {
    if (this[HELD]) for (const l of this.#locks) void l.lost;
  }

  /** The locks, in the order taken (by name). */
  get locks() {
    return [...this.#locks];
  }

  /** The resources, in the order taken (sorted by name). */
  get resources() {
    return this.#locks.map((l) => l.resource);
  }

  /** Every lock's lease as last answered, in the order taken. */
  get leases() {
    return this.#locks.map((l) => l.lease);
  }

  /** Each resource's fencing token, by name. */
  get fencingTokens() {
    return tokensOf(this.leases);
  }

  [REMAINING]() {
    return Math.min(...this.#locks.map((l) => l.remainingMs));
  }

  // Every lock, the last taken first: true when every one was released, false when one had been
  // lost; rejects with the first failure to release (after trying every one).
  [GIVE_BACK](options) {
    return releaseInTurn([...this.#locks].reverse(), options);
  }
}

/**
 * Releases locks one after the other, in the order given; resolves true when every one was
 * released, rejects with the first failure after trying every one.
 * @param {Array<Lock>} locks
 */
export async function releaseInTurn(locks, options = {}) {
  let all = true;
  let failure;
  let failed = false;
  for (const l of locks) {
    try {
      all = (await l.release(options)) && all;
    } catch (err) {
      all = false;
      if (!failed) {
        failed = true;
        failure = err;
      }
    }
  }
  if (failed) throw failure;
  return all;
}
