using System;
using System.Globalization;
using System.Text.Json;

namespace Mutexd;

/// <summary>
/// Every error of the client: an error answer of the server (one subclass per error code of
/// the contract), a transport failure (no answer), or a lease that ended.
/// </summary>
public class MutexdException : Exception
{
    /// <summary>Creates an error; <paramref name="status"/> 0 means no answer was had.</summary>
    public MutexdException(string message, int status = 0, string? code = null, TimeSpan? retryAfter = null,
        string? requestId = null, string? servedBy = null, JsonElement? error = null, Exception? inner = null)
        : base(message, inner)
    {
        Status = status;
        Code = code;
        RetryAfter = retryAfter;
        RequestId = requestId;
        ServedBy = servedBy;
        Error = error;
    }

    /// <summary>The HTTP status of the answer, or 0 when there was none.</summary>
    public int Status { get; }

    /// <summary>The contract's error code (<c>lease_held</c>, ...), or null.</summary>
    public string? Code { get; }

    /// <summary>The answer's <c>Retry-After</c>, when it had one.</summary>
    public TimeSpan? RetryAfter { get; }

    /// <summary>The answer's <c>X-Request-Id</c>, to find the request in the server's log.</summary>
    public string? RequestId { get; }

    /// <summary>The answer's <c>Mutexd-Served-By</c>: the server that served it in a group.</summary>
    public string? ServedBy { get; }

    /// <summary>The answer's <c>error</c> object, with the extra fields of its code.</summary>
    public JsonElement? Error { get; }

    /// <summary>Whether sending the same request again may succeed: no answer, a 503, a 429, a 5xx.</summary>
    public virtual bool IsRetryable => Status == 0 || Status == 429 || Status >= 500;

    /// <summary>Whether <paramref name="e"/> is a <see cref="MutexdException"/> worth retrying.</summary>
    public static bool IsRetryableError(Exception? e) => e is MutexdException m && m.IsRetryable;

    internal string? Field(string name) =>
        Error is { ValueKind: JsonValueKind.Object } o && o.TryGetProperty(name, out var v)
            ? v.ValueKind == JsonValueKind.String ? v.GetString() : v.GetRawText()
            : null;

    /// <summary>The exception of an error answer: by its code, else by its status.</summary>
    internal static MutexdException FromAnswer(int status, string? code, string message, TimeSpan? retryAfter,
        string? requestId, string? servedBy, JsonElement? error)
    {
        var a = new Args(message, status, code, retryAfter, requestId, servedBy, error);
        switch (code)
        {
            case "invalid_json": return new InvalidJsonException(a);
            case "invalid_field": return new InvalidFieldException(a);
            case "unknown_field": return new UnknownFieldException(a);
            case "missing_field": return new MissingRequestFieldException(a);
            case "invalid_resource": return new InvalidResourceException(a);
            case "invalid_ttl": return new InvalidTtlException(a);
            case "invalid_wait": return new InvalidWaitException(a);
            case "invalid_lease_id": return new InvalidLeaseIdException(a);
            case "unauthorized": return new UnauthorizedException(a);
            case "forbidden": return new ForbiddenException(a);
            case "not_found": return new NotFoundException(a);
            case "method_not_allowed": return new MethodNotAllowedException(a);
            case "lease_held": return new LeaseHeldException(a);
            case "lease_lost": return new LeaseLostException(a);
            case "limit_mismatch": return new LimitMismatchException(a);
            case "body_too_large": return new BodyTooLargeException(a);
            case "unsupported_media_type": return new UnsupportedMediaTypeException(a);
            case "too_many_waiters": return new TooManyWaitersException(a);
            case "unavailable": return new UnavailableException(a);
        }
        return status switch
        {
            400 => new BadRequestException(a),
            401 => new UnauthorizedException(a),
            403 => new ForbiddenException(a),
            404 => new NotFoundException(a),
            405 => new MethodNotAllowedException(a),
            409 => new ConflictException(a),
            413 => new BodyTooLargeException(a),
            415 => new UnsupportedMediaTypeException(a),
            429 => new TooManyWaitersException(a),
            503 => new UnavailableException(a),
            >= 500 => new ServerErrorException(a),
            _ => new MutexdException(a.Message, a.Status, a.Code, a.RetryAfter, a.RequestId, a.ServedBy, a.Error),
        };
    }

    /// <summary>What an error answer said, handed to the subclasses' constructors.</summary>
    internal readonly record struct Args(string Message, int Status, string? Code, TimeSpan? RetryAfter,
        string? RequestId, string? ServedBy, JsonElement? Error);

    private protected MutexdException(Args a)
        : this(a.Message, a.Status, a.Code, a.RetryAfter, a.RequestId, a.ServedBy, a.Error)
    {
    }
}

/// <summary>No answer: a connection refused or reset, a name that does not resolve, a TLS failure.</summary>
public class MutexdTransportException : MutexdException
{
    /// <summary>Creates one.</summary>
    public MutexdTransportException(string message, Exception? inner = null) : base(message, inner: inner) { }
}

/// <summary>No answer within the time given (the client's timeout, or the caller's deadline).</summary>
public class MutexdTimeoutException : MutexdTransportException
{
    /// <summary>Creates one.</summary>
    public MutexdTimeoutException(string message, Exception? inner = null) : base(message, inner) { }
}

/// <summary>An answer that is not the API's (not JSON, or not the shape the contract gives).</summary>
public class MutexdProtocolException : MutexdTransportException
{
    /// <summary>Creates one.</summary>
    public MutexdProtocolException(string message, Exception? inner = null) : base(message, inner) { }
}

/// <summary>A lease whose deadline passed while no renewal succeeded: it may be another's now.</summary>
public class LeaseExpiredException : MutexdException
{
    /// <summary>Creates one; <paramref name="inner"/> is the last renewal's failure.</summary>
    public LeaseExpiredException(string message, Exception? inner = null) : base(message, inner: inner) { }

    /// <inheritdoc/>
    public override bool IsRetryable => false;
}

/// <summary>400: the request is not one the server accepts (<see cref="FieldName"/> names the field).</summary>
public class BadRequestException : MutexdException
{
    internal BadRequestException(Args a) : base(a) { }

    /// <summary>The field the server named, when it named one.</summary>
    public string? FieldName => Field("field");
}

/// <summary>400 <c>invalid_json</c>.</summary>
public sealed class InvalidJsonException : BadRequestException { internal InvalidJsonException(Args a) : base(a) { } }

/// <summary>400 <c>invalid_field</c>.</summary>
public sealed class InvalidFieldException : BadRequestException
{
    internal InvalidFieldException(Args a) : base(a) { }

    /// <summary>The error's <c>reason</c>, e.g. <c>partitions_differ</c>.</summary>
    public string? Reason => Field("reason");
}

/// <summary>400 <c>unknown_field</c>.</summary>
public sealed class UnknownFieldException : BadRequestException { internal UnknownFieldException(Args a) : base(a) { } }

/// <summary>400 <c>missing_field</c>.</summary>
public sealed class MissingRequestFieldException : BadRequestException { internal MissingRequestFieldException(Args a) : base(a) { } }

/// <summary>400 <c>invalid_resource</c>.</summary>
public sealed class InvalidResourceException : BadRequestException { internal InvalidResourceException(Args a) : base(a) { } }

/// <summary>400 <c>invalid_ttl</c>.</summary>
public sealed class InvalidTtlException : BadRequestException { internal InvalidTtlException(Args a) : base(a) { } }

/// <summary>400 <c>invalid_wait</c>.</summary>
public sealed class InvalidWaitException : BadRequestException { internal InvalidWaitException(Args a) : base(a) { } }

/// <summary>400 <c>invalid_lease_id</c>.</summary>
public sealed class InvalidLeaseIdException : BadRequestException { internal InvalidLeaseIdException(Args a) : base(a) { } }

/// <summary>401 <c>unauthorized</c>: no bearer token, or not one the server knows.</summary>
public sealed class UnauthorizedException : MutexdException { internal UnauthorizedException(Args a) : base(a) { } }

/// <summary>403 <c>forbidden</c>: the token lacks the scope.</summary>
public sealed class ForbiddenException : MutexdException { internal ForbiddenException(Args a) : base(a) { } }

/// <summary>404 <c>not_found</c>.</summary>
public sealed class NotFoundException : MutexdException { internal NotFoundException(Args a) : base(a) { } }

/// <summary>405 <c>method_not_allowed</c>.</summary>
public sealed class MethodNotAllowedException : MutexdException { internal MethodNotAllowedException(Args a) : base(a) { } }

/// <summary>409: the resource's state refuses the request.</summary>
public class ConflictException : MutexdException { internal ConflictException(Args a) : base(a) { } }

/// <summary>409 <c>lease_held</c>: another lease holds the resource (or its lock-delay runs).</summary>
public sealed class LeaseHeldException : ConflictException
{
    internal LeaseHeldException(Args a) : base(a) { }

    /// <summary>The holder whose lease ends first, or null during a lock-delay.</summary>
    public MutexdHolder? Holder =>
        Error is { ValueKind: JsonValueKind.Object } o && o.TryGetProperty("holder", out var h) && h.ValueKind == JsonValueKind.Object
            ? MutexdHolder.From(h)
            : null;

    /// <summary>For a set: the first resource held, in the order given.</summary>
    public string? Resource => Field("resource");

    /// <summary>The lock-delay still to run, when that is why.</summary>
    public TimeSpan? Delay => long.TryParse(Field("delay_ms"), NumberStyles.Integer, CultureInfo.InvariantCulture, out var ms)
        ? TimeSpan.FromMilliseconds(ms)
        : null;
}

/// <summary>409 <c>lease_lost</c>: the lease is no longer the resource's.</summary>
public sealed class LeaseLostException : ConflictException { internal LeaseLostException(Args a) : base(a) { } }

/// <summary>409 <c>limit_mismatch</c>: the resource is in force with another <c>limit</c>.</summary>
public sealed class LimitMismatchException : ConflictException
{
    internal LimitMismatchException(Args a) : base(a) { }

    /// <summary>The limit in force.</summary>
    public int? Limit => int.TryParse(Field("limit"), NumberStyles.Integer, CultureInfo.InvariantCulture, out var l) ? l : null;
}

/// <summary>413 <c>body_too_large</c>.</summary>
public sealed class BodyTooLargeException : MutexdException { internal BodyTooLargeException(Args a) : base(a) { } }

/// <summary>415 <c>unsupported_media_type</c>.</summary>
public sealed class UnsupportedMediaTypeException : MutexdException { internal UnsupportedMediaTypeException(Args a) : base(a) { } }

/// <summary>429 <c>too_many_waiters</c>: the resource's queue of waiters is full.</summary>
public sealed class TooManyWaitersException : MutexdException { internal TooManyWaitersException(Args a) : base(a) { } }

/// <summary>503 <c>unavailable</c>: not ready, no active server, a partition moving, shutting down.</summary>
public sealed class UnavailableException : MutexdException
{
    internal UnavailableException(Args a) : base(a) { }

    /// <summary>The error's <c>reason</c> (<c>no_active_server</c>, <c>fenced</c>, <c>partition_moved</c>...).</summary>
    public string? Reason => Field("reason");
}

/// <summary>Another 5xx answer (a proxy's, or a server fault).</summary>
public sealed class ServerErrorException : MutexdException { internal ServerErrorException(Args a) : base(a) { } }
