// mutexd client for Node.js: timed leases on named resources over HTTP/JSON (exclusive,
// shared, or a counting semaphore's).

export { Client, defaultOwner } from './src/client.js';
export { Lock, MultiLock, OrderedLock } from './src/lock.js';
export {
  MutexdError,
  TransportError,
  TimeoutError,
  ProtocolError,
  APIError,
  InvalidRequestError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  MethodNotAllowedError,
  ConflictError,
  LeaseHeldError,
  LeaseLostError,
  LimitMismatchError,
  BodyTooLargeError,
  UnsupportedMediaTypeError,
  TooManyWaitersError,
  UnavailableError,
  ServerError,
  LeaseExpiredError,
  // Deprecated names of earlier versions, the same classes.
  BadRequestError,
  MutexdTransportError,
  MutexdTimeoutError,
  isRetryable,
} from './src/errors.js';
export { partitionOf } from './src/partition.js';
export { VERSION } from './src/transport.js';
