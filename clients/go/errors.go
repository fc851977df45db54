package mutexd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// kind is one class of the error table of docs/clients.md: a sentinel error that
// errors.Is matches for its own class and for every class above it (the parent chain).
type kind struct {
	name   string
	text   string
	parent *kind
}

func (k *kind) Error() string { return "mutexd: " + k.text }

// Is makes errors.Is(ErrLeaseHeld, ErrConflict) true: a class is also each of its parents.
func (k *kind) Is(target error) bool {
	for p := k.parent; p != nil; p = p.parent {
		if p == target {
			return true
		}
	}
	return false
}

func newKind(name, text string, parent *kind) *kind {
	return &kind{name: name, text: text, parent: parent}
}

// The sentinels, one for each row of the error table in docs/clients.md, with the same
// parents as the Python and Node.js classes. Test with errors.Is: an error answer matches
// the sentinel of its class and those of the classes above it, so that
// errors.Is(err, ErrConflict) is true for a lease_held answer as well as for a 409 with a
// code this client does not know. Every error of this package matches ErrMutexd.
var (
	errMutexd    = newKind("ErrMutexd", "error", nil)
	errTransport = newKind("ErrTransport", "no usable answer", errMutexd)
	errTimeout   = newKind("ErrTimeout", "no answer within the timeout", errTransport)
	errProtocol  = newKind("ErrProtocol", "an answer that is not the API's", errTransport)
	errExpired   = newKind("ErrLeaseExpired", "the lease's deadline passed without a successful renewal", errMutexd)
	errAPI       = newKind("ErrAPI", "the server answered with an error", errMutexd)
	errInvalid   = newKind("ErrInvalidRequest", "invalid request", errAPI)
	errUnauth    = newKind("ErrUnauthorized", "unauthorized", errAPI)
	errForbidden = newKind("ErrForbidden", "forbidden", errAPI)
	errNotFound  = newKind("ErrNotFound", "not found", errAPI)
	errMethod    = newKind("ErrMethodNotAllowed", "method not allowed", errAPI)
	errConflict  = newKind("ErrConflict", "conflict", errAPI)
	errHeld      = newKind("ErrLeaseHeld", "the lease is held", errConflict)
	errLost      = newKind("ErrLeaseLost", "the lease is lost", errConflict)
	errLimit     = newKind("ErrLimitMismatch", "the resource is held under another limit", errConflict)
	errTooLarge  = newKind("ErrBodyTooLarge", "the request body is too large", errAPI)
	errMedia     = newKind("ErrUnsupportedMediaType", "unsupported media type", errAPI)
	errWaiters   = newKind("ErrTooManyWaiters", "too many waiters", errAPI)
	errUnavail   = newKind("ErrUnavailable", "unavailable", errAPI)
	errServer    = newKind("ErrServerError", "server error", errAPI)

	// ErrMutexd is matched by every error of this package (not by the context's errors
	// when a call's context ends).
	ErrMutexd error = errMutexd
	// ErrTransport: no usable answer (refused, reset, timeout, TLS, an answer that is not
	// the API's). The server may or may not have acted on the request. The error is a
	// *TransportError.
	ErrTransport error = errTransport
	// ErrTimeout: no answer within the request's timeout (a *TransportError whose
	// Timeout() is true).
	ErrTimeout error = errTimeout
	// ErrProtocol: a 2xx answer that is not the JSON the API defines (a *TransportError).
	ErrProtocol error = errProtocol
	// ErrLeaseExpired: a held lease's deadline passed without a successful renewal
	// (Lease.Err).
	ErrLeaseExpired error = errExpired
	// ErrAPI: the server answered with an error; the error is an *APIError.
	ErrAPI error = errAPI
	// ErrInvalidRequest: 400, bad input (APIError.Field names the field).
	ErrInvalidRequest error = errInvalid
	// ErrUnauthorized: 401 unauthorized, no or a bad bearer token.
	ErrUnauthorized error = errUnauth
	// ErrForbidden: 403 forbidden, the token lacks the scope (admin for Break).
	ErrForbidden error = errForbidden
	// ErrNotFound: 404 not_found, no such route (a wrong base URL, usually).
	ErrNotFound error = errNotFound
	// ErrMethodNotAllowed: 405 method_not_allowed (APIError.Allow).
	ErrMethodNotAllowed error = errMethod
	// ErrConflict: 409, the parent of ErrLeaseHeld, ErrLeaseLost and ErrLimitMismatch.
	ErrConflict error = errConflict
	// ErrLeaseHeld: 409 lease_held, another lease holds the resource (APIError.Holder,
	// APIError.RetryAfter).
	ErrLeaseHeld error = errHeld
	// ErrLeaseLost: 409 lease_lost, the lease is no longer the resource's.
	ErrLeaseLost error = errLost
	// ErrLimitMismatch: 409 limit_mismatch, the resource is held under another limit
	// (APIError.Limit).
	ErrLimitMismatch error = errLimit
	// ErrBodyTooLarge: 413 body_too_large.
	ErrBodyTooLarge error = errTooLarge
	// ErrUnsupportedMediaType: 415 unsupported_media_type.
	ErrUnsupportedMediaType error = errMedia
	// ErrTooManyWaiters: 429 too_many_waiters, the resource's queue is full.
	ErrTooManyWaiters error = errWaiters
	// ErrUnavailable: 503 unavailable (APIError.Reason, APIError.RetryAfter).
	ErrUnavailable error = errUnavail
	// ErrServerError: any other 5xx answer.
	ErrServerError error = errServer
)

var kindByCode = map[string]*kind{
	"invalid_json":           errInvalid,
	"invalid_field":          errInvalid,
	"unknown_field":          errInvalid,
	"missing_field":          errInvalid,
	"invalid_resource":       errInvalid,
	"invalid_ttl":            errInvalid,
	"invalid_wait":           errInvalid,
	"invalid_lease_id":       errInvalid,
	"unauthorized":           errUnauth,
	"forbidden":              errForbidden,
	"not_found":              errNotFound,
	"method_not_allowed":     errMethod,
	"lease_held":             errHeld,
	"lease_lost":             errLost,
	"limit_mismatch":         errLimit,
	"body_too_large":         errTooLarge,
	"unsupported_media_type": errMedia,
	"too_many_waiters":       errWaiters,
	"unavailable":            errUnavail,
}

var kindByStatus = map[int]*kind{
	400: errInvalid,
	401: errUnauth,
	403: errForbidden,
	404: errNotFound,
	405: errMethod,
	409: errConflict,
	413: errTooLarge,
	415: errMedia,
	429: errWaiters,
	503: errUnavail,
}

// kindOf is the class of an error answer: by its code first, then by its status.
func kindOf(status int, code string) *kind {
	if k, ok := kindByCode[code]; ok {
		return k
	}
	if k, ok := kindByStatus[status]; ok {
		return k
	}
	if status >= 500 {
		return errServer
	}
	return errAPI
}

// APIError is an error answer of the server. errors.Is matches it with the sentinel of
// its class (found by Code, else by Status) and with those above it: ErrLeaseHeld,
// ErrConflict, ErrAPI and ErrMutexd for a lease_held answer.
type APIError struct {
	Status int    // the HTTP status
	Code   string // the API's error code; "" when the answer had no API error body (a proxy's page)
	// Message is the server's sentence (not part of the contract).
	Message string
	// RetryAfter is the Retry-After header (0 when absent): for lease_held, the holder's
	// remaining time rounded up to whole seconds.
	RetryAfter time.Duration
	// Field is the request field at fault (400 answers), Reason why the server is
	// unavailable (503), Limit the limit in force (limit_mismatch), Allow the methods the
	// path serves (405), RequestID the answer's X-Request-Id.
	Field, Reason, Allow, RequestID string
	Limit                           int
	// Holder is who holds the resource (lease_held): of several holders, the one whose
	// lease ends first. Nil when the answer does not say.
	Holder *LeaseHolder
	// Resource is the resource the answer names, "" when it names none: of a request
	// about several resources (AcquireMany, RenewMany, ReleaseMany), the first held
	// (lease_held) or no longer held (lease_lost) in the order given; of LockOrdered, the
	// resource whose lock failed.
	Resource string
	// Resources is, of a lease_lost answer to RenewMany or ReleaseMany, every resource the
	// lease id no longer holds, in the order given (the others WERE renewed, or released);
	// nil when the answer names none.
	Resources []string
	// Details is the whole error object of the answer, every extra field included.
	Details map[string]json.RawMessage
	// Header is the answer's header.
	Header http.Header
}

func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = "error"
	}
	if e.Message == "" {
		return fmt.Sprintf("mutexd: %d %s", e.Status, code)
	}
	return fmt.Sprintf("mutexd: %d %s: %s", e.Status, code, e.Message)
}

// Is reports whether target is the sentinel of the error's class or of a class above it.
func (e *APIError) Is(target error) bool {
	k := kindOf(e.Status, e.Code)
	return k == target || k.Is(target)
}

// TransportError is a request that got no usable answer: the connection was refused or
// reset, no answer came within the timeout, TLS failed, or the answer was not the API's
// (a 2xx that is not the JSON it defines). Whether the server acted on the request is
// unknown. errors.Is matches it with ErrTransport, with ErrTimeout when Timeout() is true
// and with ErrProtocol for an answer that is not the API's.
type TransportError struct {
	Method string // the request's method
	URL    string // the request's URL
	Err    error  // the cause
	// Status is the answer's status for a protocol error, else 0.
	Status   int
	timeout  bool
	protocol bool
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("mutexd: %s %s: %v", e.Method, e.URL, e.Err)
}

// Unwrap gives the cause (a *net.OpError, a *tls.CertificateVerificationError...).
func (e *TransportError) Unwrap() error { return e.Err }

// Timeout reports whether no answer came within the timeout.
func (e *TransportError) Timeout() bool { return e.timeout }

// Is matches ErrTransport and ErrMutexd, ErrTimeout for a timeout and ErrProtocol for an
// answer that is not the API's.
func (e *TransportError) Is(target error) bool {
	switch target {
	case errTransport, errMutexd:
		return true
	case errTimeout:
		return e.timeout
	case errProtocol:
		return e.protocol
	}
	return false
}

// expiredError is why a lease was lost by its deadline: it matches ErrLeaseExpired.
type expiredError struct{ msg string }

func (e *expiredError) Error() string { return "mutexd: " + e.msg }

func (e *expiredError) Is(target error) bool {
	return target == errExpired || errExpired.Is(target)
}

// IsRetryable reports whether trying the same call again later may succeed: no usable
// answer (ErrTransport, ErrTimeout, ErrProtocol), ErrUnavailable, ErrTooManyWaiters or
// ErrServerError.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrTransport) || errors.Is(err, ErrUnavailable) ||
		errors.Is(err, ErrTooManyWaiters) || errors.Is(err, ErrServerError)
}

// newAPIError builds the error of an answer with status, header and body.
func newAPIError(status int, header http.Header, body []byte) *APIError {
	e := &APIError{Status: status, Header: header}
	if header != nil {
		e.RequestID = header.Get("X-Request-Id")
		e.Allow = header.Get("Allow")
		if v := strings.TrimSpace(header.Get("Retry-After")); v != "" {
			if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 1e9 {
				e.RetryAfter = time.Duration(s * float64(time.Second))
			}
		}
	}
	var wire struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	var code string
	if json.Unmarshal(body, &wire) == nil && wire.Error != nil &&
		json.Unmarshal(wire.Error["code"], &code) == nil && code != "" {
		e.Code = code
		e.Details = wire.Error
		_ = json.Unmarshal(wire.Error["message"], &e.Message)
		_ = json.Unmarshal(wire.Error["field"], &e.Field)
		_ = json.Unmarshal(wire.Error["reason"], &e.Reason)
		_ = json.Unmarshal(wire.Error["limit"], &e.Limit)
		_ = json.Unmarshal(wire.Error["resource"], &e.Resource)
		if raw, ok := wire.Error["resources"]; ok {
			var names []string
			if json.Unmarshal(raw, &names) == nil {
				e.Resources = names
			}
		}
		if raw, ok := wire.Error["holder"]; ok {
			var h LeaseHolder
			if h.UnmarshalJSON(raw) == nil {
				e.Holder = &h
			}
		}
		return e
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200]
	}
	if text == "" {
		text = http.StatusText(status)
	}
	e.Message = text
	return e
}
