// mutexd client for Node.js: timed, exclusive leases on named resources over HTTP/JSON.

export { Client, defaultOwner } from './src/client.js';
export { Lock } from './src/lock.js';
export {
  MutexdError,
  BadRequestError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  MethodNotAllowedError,
  LeaseHeldError,
  LeaseLostError,
  BodyTooLargeError,
  UnsupportedMediaTypeError,
  TooManyWaitersError,
  UnavailableError,
  MutexdTransportError,
  MutexdTimeoutError,
  LeaseExpiredError,
  isRetryable,
} from './src/errors.js';
export { VERSION } from './src/transport.js';
