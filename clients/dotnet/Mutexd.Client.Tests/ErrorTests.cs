using System;
using System.IO;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json.Nodes;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace Mutexd.Tests;

/// <summary>Every error code of the contract, answered by a real server, and the exception each one is.</summary>
public class ErrorTests
{
    private static async Task<TE> Raw<TE>(MutexdClient c, string method, string path, string? body, string? type = "application/json")
        where TE : MutexdException
    {
        var e = await Assert.ThrowsAsync<TE>(async () =>
            await c.SendAsync(null, method, path, body == null ? null : Encoding.UTF8.GetBytes(body), type, c.Timeout, 0, true, default));
        Assert.False(string.IsNullOrEmpty(e.RequestId), "X-Request-Id");
        return e;
    }

    private static void Is(MutexdException e, int status, string code)
    {
        Assert.Equal(status, e.Status);
        Assert.Equal(code, e.Code);
        Assert.False(string.IsNullOrEmpty(e.RequestId));
    }

    [Fact]
    public async Task EveryBadRequestCodeIsItsOwnException()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        var r = T.Name();
        var p = "/v1/resources/" + r + "/acquire";
        Is(await Raw<InvalidJsonException>(c, "POST", p, "{"), 400, "invalid_json");
        var u = await Raw<UnknownFieldException>(c, "POST", p, "{\"owner\":\"x\",\"ttl\":5}");
        Is(u, 400, "unknown_field");
        Assert.Equal("ttl", u.FieldName);
        Is(await Raw<MissingRequestFieldException>(c, "POST", p, "{}"), 400, "missing_field");
        Is(await Assert.ThrowsAsync<InvalidFieldException>(() => c.AcquireAsync(r, new AcquireOptions { Shared = true, Limit = 2 })), 400, "invalid_field");
        Is(await Assert.ThrowsAsync<InvalidResourceException>(() => c.AcquireAsync("a//b")), 400, "invalid_resource");
        Is(await Assert.ThrowsAsync<InvalidTtlException>(() => c.AcquireAsync(r, new AcquireOptions { Ttl = TimeSpan.FromMilliseconds(1) })), 400, "invalid_ttl");
        Is(await Assert.ThrowsAsync<InvalidWaitException>(() => c.AcquireAsync(r, new AcquireOptions { Wait = TimeSpan.FromHours(2) })), 400, "invalid_wait");
        Is(await Assert.ThrowsAsync<InvalidLeaseIdException>(() => c.AcquireAsync(r, new AcquireOptions { LeaseId = "nope" })), 400, "invalid_lease_id");
        Is(await Raw<NotFoundException>(c, "POST", "/v1/resources/" + r + "/bogus", "{}"), 404, "not_found");
        Is(await Raw<MethodNotAllowedException>(c, "DELETE", "/v1/resources/" + r, null, null), 405, "method_not_allowed");
        Is(await Raw<UnsupportedMediaTypeException>(c, "POST", p, "owner=x", "text/plain"), 415, "unsupported_media_type");
        var big = new JsonObject { ["pad"] = new string('x', 70000) };
        Is(await Assert.ThrowsAsync<BodyTooLargeException>(() => c.AcquireAsync(r, new AcquireOptions { Metadata = big })), 413, "body_too_large");
        // The synchronous form throws the same.
        Is(Assert.Throws<InvalidTtlException>(() => c.Acquire(r, new AcquireOptions { Ttl = TimeSpan.FromMilliseconds(1) })), 400, "invalid_ttl");
    }

    [Fact]
    public async Task ConflictsCarryTheirFields()
    {
        using var s = TestServer.Launch();
        using var a = T.Client(s.Url);
        using var b = T.Client(s.Url);
        var r = T.Name();
        var g = await a.AcquireAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(30), Owner = "alice" });
        var held = await Assert.ThrowsAsync<LeaseHeldException>(() => b.AcquireAsync(r));
        Is(held, 409, "lease_held");
        Assert.Equal("alice", held.Holder!.Owner);
        Assert.Equal(g.FencingToken, held.Holder.FencingToken);
        Assert.NotNull(held.RetryAfter);
        Assert.True(held.RetryAfter > TimeSpan.FromSeconds(25));
        Assert.False(held.IsRetryable);
        Is(await Assert.ThrowsAsync<LeaseLostException>(() => b.RenewAsync(r, MutexdClient.NewLeaseId())), 409, "lease_lost");
        Is(await Assert.ThrowsAsync<LeaseLostException>(() => b.ReleaseAsync(r, MutexdClient.NewLeaseId())), 409, "lease_lost");
        var sem = T.Name();
        await a.AcquireAsync(sem, new AcquireOptions { Limit = 2 });
        var lm = await Assert.ThrowsAsync<LimitMismatchException>(() => b.AcquireAsync(sem, new AcquireOptions { Limit = 3 }));
        Is(lm, 409, "limit_mismatch");
        Assert.Equal(2, lm.Limit);
        Assert.IsAssignableFrom<ConflictException>(lm);
    }

    [Fact]
    public async Task TooManyWaitersAndUnavailable()
    {
        using var s = TestServer.Launch("--max-waiters", "1");
        using var a = T.Client(s.Url);
        using var b = T.Client(s.Url);
        using var c = T.Client(s.Url);
        var r = T.Name();
        await a.AcquireAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(30) });
        var waiting = b.AcquireAsync(r, new AcquireOptions { Wait = TimeSpan.FromSeconds(20) });
        await T.Until(async () => (await a.GetAsync(r)).Waiters == 1, TimeSpan.FromSeconds(5), "one waiter");
        var tm = await Assert.ThrowsAsync<TooManyWaitersException>(() => c.AcquireAsync(r, new AcquireOptions { Wait = TimeSpan.FromSeconds(5) }));
        Is(tm, 429, "too_many_waiters");
        Assert.True(tm.IsRetryable);
        // A server shutting down answers its waiter 503 unavailable.
        Assert.Equal(0, s.Terminate());
        var un = await Assert.ThrowsAsync<UnavailableException>(() => waiting);
        Is(un, 503, "unavailable");
        Assert.NotNull(un.Reason);
        Assert.NotNull(un.RetryAfter);
        Assert.True(un.IsRetryable);
        // Nothing listens now: a transport error, no status.
        var te = await Assert.ThrowsAsync<MutexdTransportException>(() => a.GetAsync(r));
        Assert.Equal(0, te.Status);
        Assert.True(te.IsRetryable);
    }

    [Fact]
    public async Task UnauthorizedAndForbidden()
    {
        static string H(string t) => Convert.ToHexString(SHA256.HashData(Encoding.UTF8.GetBytes(t))).ToLowerInvariant();
        var dir = Directory.CreateTempSubdirectory("mutexd-dotnet-tokens-").FullName;
        try
        {
            var file = Path.Combine(dir, "tokens");
            File.WriteAllText(file, $"reader sha256:{H("reader-token")} read\nadmin sha256:{H("admin-token")} read,write,admin\n");
            using var s = TestServer.Launch("--auth-tokens", file);
            var r = T.Name();
            using var none = T.Client(s.Url);
            Is(await Assert.ThrowsAsync<UnauthorizedException>(() => none.GetAsync(r)), 401, "unauthorized");
            using var reader = new MutexdClient(new MutexdClientOptions(s.Url) { Token = "reader-token" });
            Assert.False((await reader.GetAsync(r)).IsHeld);
            Is(await Assert.ThrowsAsync<ForbiddenException>(() => reader.AcquireAsync(r)), 403, "forbidden");
            using var admin = new MutexdClient(new MutexdClientOptions(s.Url) { Token = "admin-token" });
            var who = await admin.WhoamiAsync();
            Assert.Equal("admin", who.Name);
            Assert.Contains("write", who.Scopes);
            await admin.AcquireAsync(r);
            Assert.True(await admin.BreakAsync(r, "test"));
        }
        finally
        {
            Directory.Delete(dir, true);
        }
    }

    [Fact]
    public void ByStatusWithoutTheApisBody()
    {
        Assert.IsType<BadRequestException>(MutexdException.FromAnswer(400, null, "m", null, null, null, null));
        Assert.IsType<ConflictException>(MutexdException.FromAnswer(409, "something_new", "m", null, null, null, null));
        Assert.IsType<UnavailableException>(MutexdException.FromAnswer(503, null, "m", null, null, null, null));
        Assert.IsType<ServerErrorException>(MutexdException.FromAnswer(502, "bad_gateway", "m", null, null, null, null));
        Assert.IsType<MutexdException>(MutexdException.FromAnswer(418, null, "m", null, null, null, null));
        Assert.True(MutexdException.IsRetryableError(new MutexdTimeoutException("t")));
        Assert.False(MutexdException.IsRetryableError(new LeaseExpiredException("e")));
        Assert.False(MutexdException.IsRetryableError(new InvalidOperationException()));
    }
}
