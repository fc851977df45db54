// Errors of the mutexd client.
//
// One hierarchy, the same as the Python client's class for class, with the same parents
// (docs/clients.md has the table). Everything derives from MutexdError:
//
// - TransportError (with TimeoutError and ProtocolError): no usable answer (connection
//   refused or reset, TLS failure, timeout, an answer that is not the API's JSON). Whether
//   the server acted on the request is unknown.
// - APIError and its subclasses: the server answered with an error status. `code` is the
//   API's error code, `status` the HTTP status; the extra fields of the error object are on
//   the instance. The class is found by the code, else by the status.
// - LeaseExpiredError: how a Lock reports that it could not renew its lease before the
//   lease's deadline, measured on this process's monotonic clock.
//
// The names of earlier versions stay as aliases of the same classes: BadRequestError
// (InvalidRequestError), MutexdTransportError (TransportError), MutexdTimeoutError
// (TimeoutError).
//
// A call cancelled by its AbortSignal rejects with the signal's reason (by default a
// DOMException named "AbortError"), as fetch() does.

import { toHolderInfo } from './model.js';

/** The base class of every error of this client. */
export class MutexdError extends Error {
  /**
   * @param {string} [message]
   * @param {{ cause?: unknown }} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The server answered with an error status. */
export class APIError extends MutexdError {
  /**
   * @param {number} status HTTP status
   * @param {Record<string, unknown>} error the `error` object of the answer
   * @param {Record<string, string | string[] | undefined>} [headers] the answer's headers
   */
  constructor(status, error, headers = {}) {
    const code = typeof error.code === 'string' ? error.code : 'unknown';
    const message = typeof error.message === 'string' && error.message ? error.message : `HTTP ${status}`;
    super(message);
    /** @type {string} */
    this.code = code;
    /** @type {number} */
    this.status = status;
    /** The whole `error` object, with every extra field as the server sent it. */
    this.details = error;
    /** @type {string | undefined} */
    this.requestId = header(headers, 'x-request-id');
    /** The Retry-After header in seconds, when the answer had one. */
    this.retryAfter = parseRetryAfter(header(headers, 'retry-after'));
  }
}

/** 400: bad input. `field` names the field (every code but invalid_json and invalid_resource). */
export class InvalidRequestError extends APIError {
  constructor(status, error, headers) {
    super(status, error, headers);
    /** @type {string | undefined} */
    this.field = typeof error.field === 'string' ? error.field : undefined;
  }
}

/** 401 unauthorized: authorization is on and the bearer token is missing or bad. */
export class UnauthorizedError extends APIError {}

/** 403 forbidden: the token lacks the scope (`admin` for break). */
export class ForbiddenError extends APIError {}

/** 404 not_found: no such route (usually a wrong base URL) or an unknown action. */
export class NotFoundError extends APIError {}

/** 405 method_not_allowed; `allow` is the Allow header. */
export class MethodNotAllowedError extends APIError {
  constructor(status, error, headers) {
    super(status, error, headers);
    /** @type {string | undefined} */
    this.allow = header(headers, 'allow');
  }
}

/**
 * 409: base of LeaseHeldError, LeaseLostError and LimitMismatchError (and of a 409 code this
 * client does not know).
 */
export class ConflictError extends APIError {
  constructor(status, error, headers) {
    super(status, error, headers);
    /**
     * The resource the conflict is about, when the server names it: an answer to a request
     * about several resources (acquireMany, renewMany, releaseMany) names the first held or
     * lost, in the order given; undefined otherwise.
     */
    this.resource = typeof error.resource === 'string' ? error.resource : undefined;
  }
}

/** 409 lease_held: another lease holds the resource (at once, or when the wait ran out). */
export class LeaseHeldError extends ConflictError {
  constructor(status, error, headers) {
    super(status, error, headers);
    /**
     * Who holds it: owner, fencingToken (bigint), expiresInMs; of several holders (a semaphore,
     * shared leases) the one whose lease ends first; null if the server did not say.
     */
    this.holder = toHolderInfo(error.holder);
  }
}

/** 409 lease_lost: the lease is no longer the resource's. Stop the work it guarded. */
export class LeaseLostError extends ConflictError {
  constructor(status, error, headers) {
    super(status, error, headers);
    /**
     * Of a request about several resources (renewMany, releaseMany): the names the lease no
     * longer holds, in the order given (the others were renewed, or released); [resource]
     * when the answer names only one, else empty.
     */
    this.resources =
      Array.isArray(error.resources) && error.resources.every((n) => typeof n === 'string')
        ? [...error.resources]
        : this.resource !== undefined
          ? [this.resource]
          : [];
  }
}

/**
 * 409 limit_mismatch: the acquire named another `limit` than the one in force on the resource
 * (an acquire without `limit` names 1), at once or when its turn in the queue came; or it was
 * retried with its own lease id and another `limit`.
 */
export class LimitMismatchError extends ConflictError {
  constructor(status, error, headers) {
    super(status, error, headers);
    /** The limit in force; undefined if the server did not say. */
    this.limit = Number.isSafeInteger(error.limit) ? error.limit : undefined;
  }
}

/** 413 body_too_large: the request body is over 65536 bytes. */
export class BodyTooLargeError extends APIError {}

/** 415 unsupported_media_type. */
export class UnsupportedMediaTypeError extends APIError {}

/** 429 too_many_waiters: the resource's queue of waiters is full. */
export class TooManyWaitersError extends APIError {}

/** 503 unavailable: not ready, overloaded or shutting down. */
export class UnavailableError extends APIError {
  constructor(status, error, headers) {
    super(status, error, headers);
    /** @type {string | undefined} */
    this.reason = typeof error.reason === 'string' ? error.reason : undefined;
  }
}

/** Any other 5xx answer (an unexpected failure, or a proxy in front of the server). */
export class ServerError extends APIError {}

/** @deprecated The earlier name of InvalidRequestError. */
export const BadRequestError = InvalidRequestError;

const BY_CODE = {
  invalid_json: InvalidRequestError,
  invalid_field: InvalidRequestError,
  unknown_field: InvalidRequestError,
  missing_field: InvalidRequestError,
  invalid_resource: InvalidRequestError,
  invalid_ttl: InvalidRequestError,
  invalid_wait: InvalidRequestError,
  invalid_lease_id: InvalidRequestError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  lease_held: LeaseHeldError,
  lease_lost: LeaseLostError,
  limit_mismatch: LimitMismatchError,
  body_too_large: BodyTooLargeError,
  unsupported_media_type: UnsupportedMediaTypeError,
  too_many_waiters: TooManyWaitersError,
  unavailable: UnavailableError,
};

const BY_STATUS = {
  400: InvalidRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  405: MethodNotAllowedError,
  409: ConflictError,
  413: BodyTooLargeError,
  415: UnsupportedMediaTypeError,
  429: TooManyWaitersError,
  503: UnavailableError,
};

/**
 * The error for an error answer: by `code`, or by status for a code this client does not
 * know (a newer server) or an answer without the API's error body (a proxy's page), then
 * ServerError for any other 5xx, else the base class.
 */
export function apiError(status, error, headers) {
  const Class = Object.hasOwn(BY_CODE, error.code)
    ? BY_CODE[error.code]
    : Object.hasOwn(BY_STATUS, status)
      ? BY_STATUS[status]
      : status >= 500
        ? ServerError
        : APIError;
  return new Class(status, error, headers);
}

/** No usable answer; the server may or may not have acted on the request. */
export class TransportError extends MutexdError {
  /**
   * @param {string} message
   * @param {{ cause?: unknown, code?: string, status?: number, method?: string, url?: string }} [info]
   */
  constructor(message, info = {}) {
    super(message, info.cause === undefined ? undefined : { cause: info.cause });
    /** A system error code such as ECONNREFUSED, ETIMEDOUT for a timeout, or ERR_INVALID_RESPONSE. */
    this.code = info.code ?? (info.cause && typeof info.cause.code === 'string' ? info.cause.code : undefined);
    /** The HTTP status when an answer came but was not the API's JSON. */
    this.status = info.status;
    this.method = info.method;
    this.url = info.url;
  }
}

/** The request took longer than the client's timeout (beyond any wait it asked for). */
export class TimeoutError extends TransportError {}

/** The server's answer could not be understood (a 2xx that is not the JSON object the API
 * defines, or an answer over the size limit). `code` is ERR_INVALID_RESPONSE. */
export class ProtocolError extends TransportError {}

/** @deprecated The earlier name of TransportError. */
export const MutexdTransportError = TransportError;

/** @deprecated The earlier name of TimeoutError. */
export const MutexdTimeoutError = TimeoutError;

/**
 * A Lock could not renew its lease before the lease's deadline (measured on this process's
 * monotonic clock from the last successful renewal): the server may already have granted the
 * resource to someone else. `cause` is the last renewal failure.
 */
export class LeaseExpiredError extends MutexdError {
  constructor(message, options) {
    super(message, options);
    this.code = 'lease_expired';
  }
}

/**
 * Whether trying the same call again later may succeed: no usable answer (TransportError),
 * 503 unavailable, 429 too_many_waiters, or another 5xx (ServerError).
 * @param {unknown} err
 */
export function isRetryable(err) {
  return (
    err instanceof TransportError ||
    err instanceof UnavailableError ||
    err instanceof TooManyWaitersError ||
    err instanceof ServerError
  );
}

function header(headers, name) {
  const v = headers?.[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

function parseRetryAfter(value) {
  if (value === undefined) return undefined;
  const s = String(value).trim();
  return /^\d+$/.test(s) ? Number(s) : undefined;
}
