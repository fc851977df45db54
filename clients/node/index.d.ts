// Type declarations of the mutexd client (mutexd HTTP API, version 1).

/** The client's version. */
export declare const VERSION: string;

/** The default owner: "<host name>:<process id>". */
export declare function defaultOwner(): string;

/**
 * The partition of the resource `name` among `count` partitions (an integer from 1 to 256):
 * 0 to count - 1, as the server computes it (the CRC-32 of the name's UTF-8 bytes, or of its
 * hash tag only, modulo count). Throws a TypeError for a count out of range.
 */
export declare function partitionOf(name: string, count: number): number;

/** Any JSON object stored with a lease (at most 4096 bytes serialized). */
export type Metadata = { [key: string]: unknown };

/** What renew() and release() need of a lease. A Lease and a Lock both have it. */
export interface LeaseRef {
  resource: string;
  leaseId: string;
}

/** What renewMany() and releaseMany() need of a set of leases (of one lease id): a MultiLock
 * has it; an array of leases (what acquireMany() resolves with) is taken too. */
export interface LeasesRef {
  resources: string[];
  leaseId: string;
}

/** A granted lease, as acquire and renew answer it. */
export interface Lease {
  resource: string;
  /** The credential: whoever knows it can renew and release. */
  leaseId: string;
  owner: string;
  /** Unsigned 64-bit; strictly increasing across every grant. A renewal keeps it. */
  fencingToken: bigint;
  ttlMs: number;
  /** The remaining time when the server answered. Act on this, never on the `*At` times. */
  expiresInMs: number;
  /** Informative (RFC 3339 UTC). */
  acquiredAt: string;
  /** Informative (RFC 3339 UTC); null or a time for a lease never extended. */
  renewedAt: string | null;
  metadata: Metadata | null;
  /** How many leases may hold the resource at once; more than 1: a counting semaphore. */
  limit: number;
  /** Whether this is a shared lease (a reader). */
  shared: boolean;
}

/** A lease holding a resource as get(), watch() and list() show it (no lease id). */
export interface Holder {
  owner: string;
  fencingToken: bigint;
  ttlMs: number;
  expiresInMs: number;
  acquiredAt: string;
  renewedAt: string | null;
  metadata: Metadata | null;
  /** Whether it is a shared lease (a reader). */
  shared: boolean;
}

/** The holder named by a 409 lease_held (of several, the one whose lease ends first). */
export interface HolderInfo {
  owner: string;
  fencingToken: bigint;
  expiresInMs: number;
}

export interface ResourceState {
  resource: string;
  state: 'held' | 'free';
  /** Increases on every change of the resource; pass it to watch(). */
  index: number;
  /** The first of `holders`, or null. */
  holder: Holder | null;
  /** How many acquire requests are queued. */
  waiters: number;
  /** The limit in force: 1 for a free resource or an exclusive lease. */
  limit: number;
  /** Every lease holding the resource, oldest grant first. */
  holders: Holder[];
}

/**
 * Where a list watch or the events stand: a change index (bigint) on a lone server or a group of
 * one partition, an opaque string on a partitioned group (--partitions N, N > 1), where one
 * number cannot order the changes of every partition. Pass it back unchanged.
 */
export type Position = bigint | string;

export interface ResourcePage {
  resources: ResourceState[];
  /** null on the last page. */
  nextCursor: string | null;
  /** The server's change index when the page was read (absent from a server without it); a
   * string on a partitioned group. */
  index?: Position;
}

/** Every held resource under a prefix, as watchList() and watchPrefix() give it. */
export interface ResourceList {
  /** The server's change index when the list was read: watch on from it. Exact (bigint); a
   * string on a partitioned group. */
  index: Position;
  /** In name order, each with every holder. */
  resources: ResourceState[];
}

export type EventType = 'granted' | 'renewed' | 'released' | 'expired' | 'broken';

/** One recent change of a resource (never with a lease id). */
export interface MutexdEvent {
  /** Its change index: pass it as `after` to read what came next. On a partitioned group, its
   * partition's change index: read on from a page's `next` there. */
  index: bigint;
  /** The server's wall-clock time (RFC 3339 UTC), informative only. */
  at: string | null;
  resource: string;
  type: EventType;
  owner: string;
  fencingToken: bigint;
  /** Whether the lease was a shared one (a reader). */
  shared: boolean;
  /** The resource's limit: more than 1 for a counting semaphore. */
  limit: number;
  /** On a partitioned group only: the resource's partition. */
  partition?: number;
}

export interface EventPage {
  /** Oldest first. */
  events: MutexdEvent[];
  /** The `after` of the next request; a string on a partitioned group. */
  next: Position;
  /** Events after the `after` asked for were dropped already: some were missed. */
  truncated: boolean;
}

export interface WhoAmI {
  /** The token's name in the server's tokens file; null with authorization off. */
  name: string | null;
  /** Of 'read', 'write', 'admin', 'metrics' (all four with authorization off). */
  scopes: string[];
}

export interface WatchListOptions extends CallOptions {
  /** Only names that start with it. */
  prefix?: string;
  /** Wait for a change under the prefix after this change index, or position (a list's
   * `index`). Default 0n; null, or 0n with waitMs 0: the list at once. */
  index?: Position | number | null;
  /** At most this long (default 60000; at most the server's --max-wait-ms); 0: at once. */
  waitMs?: number;
}

export interface WatchPrefixOptions extends CallOptions {
  /** How long each list watch waits on the server. Default 60000. */
  waitMs?: number;
  /** Yield only changes after this change index or position (default: the list now first). */
  index?: Position | number;
}

export interface EventsPageOptions extends CallOptions {
  /** After this change index, or position (a page's `next`). Default 0n: the oldest the server
   * keeps. */
  after?: Position | number | null;
  /** Only resources whose names start with it. */
  prefix?: string;
  /** At most this many (1 to 1000; the server's default is 100). */
  limit?: number;
  /** When there is none yet, wait up to this long for one. Default 0. */
  waitMs?: number;
}

export interface EventsOptions extends CallOptions {
  prefix?: string;
  /** After this change index, or position (a page's `next`); default: from the oldest the
   * server keeps. */
  after?: Position | number;
  /** Keep waiting for new events. Default false. */
  follow?: boolean;
  /** With follow, how long each request waits on the server. Default 60000. */
  waitMs?: number;
  /** Events per request (1 to 1000). Default 1000. */
  limit?: number;
  /** Called with the `after` whose next events were dropped (default: process.emitWarning). */
  // A method's parameter, so that a callback written for a lone server's (after: bigint) fits.
  onTruncated?(after: Position): void;
}

export interface ReleaseResult {
  resource: string;
  released: boolean;
}

export interface BreakResult {
  resource: string;
  /** Whether there was a lease to end. */
  broken: boolean;
}

export interface ClientOptions {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** PEM file of the CA certificate(s) to trust for an https: URL, instead of the system's. */
  caFile?: string;
  /** How long a request may take beyond any wait it asks the server for. Default 10000. */
  timeoutMs?: number;
  /** Default owner of acquire, lock and runWhenLeader. Default "<host name>:<pid>". */
  owner?: string;
}

/** Options every call takes. */
export interface CallOptions {
  /** Cancels the call: it rejects with `signal.reason` and its connection is closed. */
  signal?: AbortSignal;
  /** This call's timeout (beyond any wait), instead of the client's. */
  timeoutMs?: number;
}

export interface AcquireOptions extends CallOptions {
  /** Default: the client's owner. */
  owner?: string;
  /** Default: the server's (15000). */
  ttlMs?: number;
  /** Wait up to this long in the resource's FIFO queue. Default 0: answer at once. */
  waitMs?: number;
  /** Propose the lease id; default a new random UUID. Repeat it to retry idempotently. */
  leaseId?: string;
  metadata?: Metadata;
  /** How many leases may hold the resource at once (1 to the server's --max-holders); more
   * than 1 makes it a counting semaphore. Not sent when absent, which the server reads as 1;
   * another limit than the one in force rejects with LimitMismatchError. */
  limit?: number;
  /** A shared lease (a reader): shared leases hold the resource together while no exclusive
   * one does. Only with a `limit` of 1 (or none). */
  shared?: boolean;
}

export interface RenewOptions extends CallOptions {
  /** A performance.now() value that bounds the whole call (every attempt, on every server):
   * nothing is sent, or waited for, past it. */
  deadline?: number;
  /** Default: the lease's own TTL. */
  ttlMs?: number;
  /** Replaces the lease's metadata. */
  metadata?: Metadata;
}

export interface BreakOptions extends CallOptions {
  reason?: string;
  /** End only this lease (else every lease of the resource). */
  leaseId?: string;
}

export interface WatchOptions extends CallOptions {
  /** Default 60000; at most the server's --max-wait-ms. */
  waitMs?: number;
}

export interface ListOptions extends CallOptions {
  prefix?: string;
  /** Resources per page: 1 to 1000, default 100. */
  limit?: number;
  /** Start after this cursor (a `nextCursor`). */
  cursor?: string;
}

/** Why a lock was lost. */
export type LostReason = LeaseLostError | LeaseExpiredError;

export interface LockOptions extends CallOptions {
  ttlMs?: number;
  waitMs?: number;
  owner?: string;
  metadata?: Metadata;
  leaseId?: string;
  /** As AcquireOptions.limit: a place of a counting semaphore. */
  limit?: number;
  /** As AcquireOptions.shared: a shared lease (a reader). */
  shared?: boolean;
  /** Called once, the moment the lease is lost. */
  onLost?: (error: LostReason, lock: Lock) => void | Promise<void>;
}

/** lockMany()'s options: acquireMany()'s and `onLost`. */
export interface LockManyOptions extends AcquireOptions {
  /** Called once, the moment the set is lost (any lease of it). */
  onLost?: (error: LostReason, lock: MultiLock) => void | Promise<void>;
}

/** lockOrdered()'s options: lock()'s but `leaseId`. */
export interface LockOrderedOptions extends CallOptions {
  ttlMs?: number;
  /** How long all the locks may wait in all, each waiting for what is left of it. Default 0. */
  waitMs?: number;
  owner?: string;
  metadata?: Metadata;
  limit?: number;
  shared?: boolean;
  /** Called once, the moment the first of the locks is lost. */
  onLost?: (error: LostReason, lock: OrderedLock) => void | Promise<void>;
}

export interface RunWhenLeaderOptions {
  ttlMs?: number;
  /** Pause between attempts, and after a loss. Default 5000. */
  retryMs?: number;
  /** Wait in the server's queue on each attempt. Default 0. */
  waitMs?: number;
  owner?: string;
  metadata?: Metadata;
  /** Stops the runner: the task's signal is aborted, the lease released. */
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Called when an attempt did not get the lease (LeaseHeldError, or a retryable error). */
  onRetry?: (error: Error, delayMs: number) => void;
  /** Called once per lost lease. */
  onLost?: (error: LostReason, lock: Lock) => void | Promise<void>;
}

export interface RequestOptions extends CallOptions {
  query?: Record<string, string | number | boolean | null | undefined>;
  /** An object is sent as JSON; a string or bytes as they are, typed application/json unless `headers` says otherwise. */
  body?: unknown;
  /** Extra headers; null or undefined removes a default one. */
  headers?: Record<string, string | null | undefined>;
}

/** A partitioned group's map, as the client last learned it (GET /v1/servers). */
export interface PartitionMap {
  /** The number of partitions (2 to 256). */
  count: number;
  /** owners[p]: the base URL of partition p's owner, null while none owns it. */
  owners: Array<string | null>;
}

export declare class Client {
  /** `url`: one server, or several of a group (an array, or comma-separated); default
   * MUTEXD_URL, else http://127.0.0.1:8080. */
  constructor(url?: string | URL | ReadonlyArray<string | URL> | null, options?: ClientOptions);
  /** The base URL of the server asked first (the one that answered last), without a
   * trailing slash. */
  readonly url: string;
  /** Every server's base URL, in the order given. */
  readonly urls: string[];
  readonly owner: string;
  readonly timeoutMs: number;
  /** The partition map last learned from a partitioned group; null when the servers are not
   * partitioned or the map is not known yet. */
  readonly partitions: PartitionMap | null;
  acquire(resource: string, options?: AcquireOptions): Promise<Lease>;
  renew(lease: LeaseRef, options?: RenewOptions): Promise<Lease>;
  release(lease: LeaseRef, options?: CallOptions): Promise<ReleaseResult>;
  breakLease(resource: string, options?: BreakOptions): Promise<BreakResult>;
  get(resource: string, options?: CallOptions): Promise<ResourceState>;
  watch(resource: string, index: number, options?: WatchOptions): Promise<ResourceState>;
  list(options?: ListOptions): AsyncGenerator<ResourcePage, void, undefined>;
  /** A list watch: the held resources under `prefix` once one changed after `index`, or
   * when `waitMs` ran out. */
  watchList(options?: WatchListOptions): Promise<ResourceList>;
  /** The held resources under `prefix` now, then after each change under it. */
  watchPrefix(prefix?: string, options?: WatchPrefixOptions): AsyncGenerator<ResourceList, never, undefined>;
  /** One request of the recent changes. */
  eventsPage(options?: EventsPageOptions): Promise<EventPage>;
  /** The recent changes, oldest first; with `follow`, then each new one as it comes. */
  events(options?: EventsOptions): AsyncGenerator<MutexdEvent, void, undefined>;
  /** The client's token: its name and scopes. */
  whoami(options?: CallOptions): Promise<WhoAmI>;
  lock(resource: string, options?: LockOptions): Promise<Lock>;
  /** A lease on every resource named (2 to 64, each once), or on none, with one request: one
   * lease per resource in the order given, of one lease id. */
  acquireMany(resources: readonly string[], options?: AcquireOptions): Promise<Lease[]>;
  /** Renew the leases of a set with one request. */
  renewMany(leases: readonly LeaseRef[] | LeasesRef, options?: RenewOptions): Promise<Lease[]>;
  /** Release the leases of a set with one request. */
  releaseMany(leases: readonly LeaseRef[] | LeasesRef, options?: CallOptions): Promise<ReleaseResult[]>;
  /** acquireMany(), then renewed as a set in the background until released or lost. */
  lockMany(resources: readonly string[], options?: LockManyOptions): Promise<MultiLock>;
  /** One lock() per resource, in any partitions, taken in name order; what was taken is
   * released when one fails. */
  lockOrdered(resources: readonly string[], options?: LockOrderedOptions): Promise<OrderedLock>;
  runWhenLeader<T>(
    resource: string,
    task: (signal: AbortSignal, lock: Lock) => T | PromiseLike<T>,
    options?: RunWhenLeaderOptions,
  ): Promise<T>;
  request<T = unknown>(method: string, path: string, options?: RequestOptions): Promise<T>;
  close(): void;
}

/** A lease kept alive in the background; made by Client#lock(). */
export declare class Lock {
  private constructor();
  readonly resource: string;
  readonly leaseId: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly ttlMs: number;
  /** How many leases may hold the resource at once (more than 1: a counting semaphore). */
  readonly limit: number;
  /** Whether this is a shared lease (a reader). */
  readonly shared: boolean;
  /** The last acquire or renewal answer. */
  readonly lease: Lease;
  /** True once lost (lease_lost, or the deadline passed without a renewal); compares the
   * clock with the deadline itself. */
  readonly lost: boolean;
  /** Throws the reason of the loss if the lease is lost or its deadline has passed: call it
   * right before each action the lease guards. */
  check(): void;
  /** True once release() was called. */
  readonly released: boolean;
  /** Aborted when lost (reason: LostReason) and when released. A loss by the deadline aborts it
   * from a timer, or at once from `lost`, check() or `remainingMs` finding the deadline passed:
   * right before an action, call check(). */
  readonly signal: AbortSignal;
  /** While held: how long the lease is certain to last without another renewal; else 0. */
  readonly remainingMs: number;
  /** Stop renewing and release: true when released, false when already lost. */
  release(options?: CallOptions): Promise<boolean>;
  /** `await using lock = await client.lock(...)` releases it at the end of the block, as
   * `finally { await lock.release(); }` does. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** The leases of several resources taken at once (one lease id), kept alive as a set; made by
 * Client#lockMany(). Lost when any lease of the set is. */
export declare class MultiLock {
  private constructor();
  /** The resources, in the order given. */
  readonly resources: string[];
  /** The lease id every lease of the set shares. */
  readonly leaseId: string;
  readonly owner: string;
  readonly ttlMs: number;
  /** Every lease of the set as last answered, in the order given. */
  readonly leases: Lease[];
  /** Each resource's fencing token, by name. */
  readonly fencingTokens: Map<string, bigint>;
  /** True once lost (a renewal of the set answered lease_lost, or the deadline passed). */
  readonly lost: boolean;
  /** Throws the reason of the loss if the set is lost or its deadline has passed. */
  check(): void;
  /** True once release() was called. */
  readonly released: boolean;
  /** Aborted when lost (reason: LostReason) and when released. */
  readonly signal: AbortSignal;
  /** While held: how long the set is certain to last without another renewal; else 0. */
  readonly remainingMs: number;
  /** Stop renewing and release the set with one request: true when every lease was released,
   * false when the set had been lost (what it still held is released too). */
  release(options?: CallOptions): Promise<boolean>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** One Lock per resource, taken in name order; made by Client#lockOrdered(). Lost when any of
 * its locks is. */
export declare class OrderedLock {
  private constructor();
  /** The locks, in the order taken. */
  readonly locks: Lock[];
  /** The resources, in the order taken (by name). */
  readonly resources: string[];
  /** Each lock's lease as last answered, in the order taken. */
  readonly leases: Lease[];
  /** Each resource's fencing token, by name. */
  readonly fencingTokens: Map<string, bigint>;
  /** True once any lock was lost. */
  readonly lost: boolean;
  /** Throws the reason of the first loss. */
  check(): void;
  /** True once release() was called. */
  readonly released: boolean;
  /** Aborted when any lock is lost (reason: LostReason) and when released. */
  readonly signal: AbortSignal;
  /** While held: the least of the locks' remainingMs; else 0. */
  readonly remainingMs: number;
  /** Stop renewing and release every lock, the last taken first. */
  release(options?: CallOptions): Promise<boolean>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** The error codes of the API. */
export type ErrorCode =
  | 'invalid_json'
  | 'invalid_field'
  | 'unknown_field'
  | 'missing_field'
  | 'invalid_resource'
  | 'invalid_ttl'
  | 'invalid_wait'
  | 'invalid_lease_id'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'lease_held'
  | 'lease_lost'
  | 'limit_mismatch'
  | 'body_too_large'
  | 'unsupported_media_type'
  | 'too_many_waiters'
  | 'unavailable';

// The errors: one hierarchy, the same as the Python client's class for class, with the
// same parents (docs/clients.md has the table).
//
// MutexdError
// ├── TransportError
// │   ├── TimeoutError
// │   └── ProtocolError
// ├── APIError
// │   ├── InvalidRequestError, UnauthorizedError, ForbiddenError, NotFoundError,
// │   │   MethodNotAllowedError, BodyTooLargeError, UnsupportedMediaTypeError,
// │   │   TooManyWaitersError, UnavailableError, ServerError
// │   └── ConflictError
// │       ├── LeaseHeldError
// │       ├── LeaseLostError
// │       └── LimitMismatchError
// └── LeaseExpiredError

/** The base class of every error of this client. */
export declare class MutexdError extends Error {
  constructor(message?: string, options?: { cause?: unknown });
}

/** No usable answer (connection, TLS, timeout, not the API's JSON). */
export declare class TransportError extends MutexdError {
  constructor(
    message: string,
    info?: { cause?: unknown; code?: string; status?: number; method?: string; url?: string },
  );
  /** ECONNREFUSED, ECONNRESET, ETIMEDOUT (a timeout), ERR_INVALID_RESPONSE... */
  code: string | undefined;
  /** The HTTP status when an answer came that was not the API's. */
  status: number | undefined;
  method: string | undefined;
  url: string | undefined;
}

/** The request took longer than its timeout. */
export declare class TimeoutError extends TransportError {}

/** An answer that is not the JSON the API defines (code ERR_INVALID_RESPONSE). */
export declare class ProtocolError extends TransportError {}

/** The server answered with an error status. */
export declare class APIError extends MutexdError {
  constructor(status: number, error: Record<string, unknown>, headers?: Record<string, string | string[] | undefined>);
  /** The API's error code (a code unknown to this client is kept as sent; 'unknown' when the
   * answer was not an API error, as from a proxy). */
  code: ErrorCode | (string & {});
  /** The HTTP status. */
  status: number;
  /** The whole `error` object, with every extra field. */
  details: Record<string, unknown>;
  /** The answer's X-Request-Id. */
  requestId: string | undefined;
  /** The Retry-After header in seconds. */
  retryAfter: number | undefined;
}

/** 400. */
export declare class InvalidRequestError extends APIError {
  /** The field at fault (every code but invalid_json and invalid_resource). */
  field: string | undefined;
}
/** 401 unauthorized. */
export declare class UnauthorizedError extends APIError {}
/** 403 forbidden. */
export declare class ForbiddenError extends APIError {}
/** 404 not_found. */
export declare class NotFoundError extends APIError {}
/** 405 method_not_allowed. */
export declare class MethodNotAllowedError extends APIError {
  /** The Allow header. */
  allow: string | undefined;
}
/** 409: base of LeaseHeldError, LeaseLostError and LimitMismatchError. */
export declare class ConflictError extends APIError {
  /** The resource named by an answer about several resources (the first held or lost). */
  resource: string | undefined;
}
/** 409 lease_held. */
export declare class LeaseHeldError extends ConflictError {
  holder: HolderInfo | null;
}
/** 409 lease_lost. */
export declare class LeaseLostError extends ConflictError {
  /** Of renewMany() or releaseMany(): the resources no longer held (the others were renewed or
   * released). */
  resources: string[];
}
/** 409 limit_mismatch: the acquire named another limit than the one in force. */
export declare class LimitMismatchError extends ConflictError {
  /** The limit in force. */
  limit: number | undefined;
}
/** 413 body_too_large. */
export declare class BodyTooLargeError extends APIError {}
/** 415 unsupported_media_type. */
export declare class UnsupportedMediaTypeError extends APIError {}
/** 429 too_many_waiters. */
export declare class TooManyWaitersError extends APIError {}
/** 503 unavailable. */
export declare class UnavailableError extends APIError {
  reason: string | undefined;
}
/** Any other 5xx. */
export declare class ServerError extends APIError {}

/** A lock's lease passed its deadline without a successful renewal. */
export declare class LeaseExpiredError extends MutexdError {
  constructor(message?: string, options?: { cause?: unknown });
  code: 'lease_expired';
}

/** @deprecated The earlier name of InvalidRequestError. */
export declare const BadRequestError: typeof InvalidRequestError;
/** @deprecated The earlier name of InvalidRequestError. */
export type BadRequestError = InvalidRequestError;
/** @deprecated The earlier name of TransportError. */
export declare const MutexdTransportError: typeof TransportError;
/** @deprecated The earlier name of TransportError. */
export type MutexdTransportError = TransportError;
/** @deprecated The earlier name of TimeoutError. */
export declare const MutexdTimeoutError: typeof TimeoutError;
/** @deprecated The earlier name of TimeoutError. */
export type MutexdTimeoutError = TimeoutError;

/** Transport errors, 503 unavailable, 429 too_many_waiters and other 5xx: trying again later
 * may work. */
export declare function isRetryable(err: unknown): boolean;
