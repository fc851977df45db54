package io.mutexd;

import java.time.Duration;
import java.util.Map;

/** The classes of error answers, by code and by status, as docs/clients.md's tables have them. */
final class ErrorsTest {
    private ErrorsTest() {
    }

    private static void is(Class<?> want, Class<?> parent, int status, String code) {
        ApiException e = ApiException.of(status, code, "m", null, null);
        T.eq(want, e.getClass(), status + " " + code);
        T.check(parent.isInstance(e), want.getSimpleName() + " is a " + parent.getSimpleName());
        T.check(e instanceof ApiException && e instanceof MutexdException, "an ApiException and a MutexdException");
        T.eq(status, e.status(), "status");
        T.eq(code, e.code(), "code");
    }

    static void testClassesByCodeAndByStatus() {
        for (String code : new String[] {"invalid_json", "invalid_field", "unknown_field", "missing_field",
            "invalid_resource", "invalid_ttl", "invalid_wait", "invalid_lease_id"}) {
            is(InvalidRequestException.class, ApiException.class, 400, code);
        }
        is(UnauthorizedException.class, ApiException.class, 401, "unauthorized");
        is(ForbiddenException.class, ApiException.class, 403, "forbidden");
        is(NotFoundException.class, ApiException.class, 404, "not_found");
        is(MethodNotAllowedException.class, ApiException.class, 405, "method_not_allowed");
        is(ConflictException.class, ApiException.class, 409, "something_new");
        is(LeaseHeldException.class, ConflictException.class, 409, "lease_held");
        is(LeaseLostException.class, ConflictException.class, 409, "lease_lost");
        is(LimitMismatchException.class, ConflictException.class, 409, "limit_mismatch");
        is(BodyTooLargeException.class, ApiException.class, 413, "body_too_large");
        is(UnsupportedMediaTypeException.class, ApiException.class, 415, "unsupported_media_type");
        is(TooManyWaitersException.class, ApiException.class, 429, "too_many_waiters");
        is(UnavailableException.class, ApiException.class, 503, "unavailable");
        is(ServerErrorException.class, ApiException.class, 500, null);
        is(ServerErrorException.class, ApiException.class, 502, "bad_gateway");
        // Without the API's error body (a proxy's page): the class of the status.
        is(InvalidRequestException.class, ApiException.class, 400, null);
        is(ConflictException.class, ApiException.class, 409, null);
        is(UnavailableException.class, ApiException.class, 503, null);
        is(ApiException.class, MutexdException.class, 418, null);
        T.check(TransportException.class.getSuperclass() == MutexdException.class, "TransportException's parent");
        T.check(RequestTimeoutException.class.getSuperclass() == TransportException.class, "RequestTimeoutException's parent");
        T.check(ProtocolException.class.getSuperclass() == TransportException.class, "ProtocolException's parent");
        T.check(LeaseExpiredException.class.getSuperclass() == MutexdException.class, "LeaseExpiredException's parent");
    }

    static void testRetryable() {
        T.check(MutexdException.isRetryable(new TransportException("GET", "u", "m", null)), "transport");
        T.check(MutexdException.isRetryable(new RequestTimeoutException("GET", "u", "m", null)), "timeout");
        T.check(MutexdException.isRetryable(ApiException.of(503, "unavailable", "m", Duration.ofSeconds(1),
                Map.of("reason", "fenced"))), "unavailable");
        T.check(MutexdException.isRetryable(ApiException.of(429, "too_many_waiters", "m", null, null)), "too_many_waiters");
        T.check(MutexdException.isRetryable(ApiException.of(500, null, "m", null, null)), "a 500");
        T.check(!MutexdException.isRetryable(ApiException.of(409, "lease_held", "m", null, null)), "lease_held");
        T.check(!MutexdException.isRetryable(ApiException.of(400, "invalid_ttl", "m", null, null)), "invalid_ttl");
        UnavailableException u = (UnavailableException) ApiException.of(503, "unavailable", "m", Duration.ofSeconds(1),
                Map.of("reason", "fenced"));
        T.eq("fenced", u.reason(), "reason");
    }
}
