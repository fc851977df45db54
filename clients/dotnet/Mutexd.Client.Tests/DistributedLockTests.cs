using System;
using System.Threading;
using System.Threading.Tasks;
using Medallion.Threading;
using Xunit;

namespace Mutexd.Tests;

/// <summary>DistributedLock's interfaces over mutexd: FIFO waits, the loss signal, the fencing token.</summary>
public class DistributedLockTests
{
    private static async Task Waiters(MutexdClient c, string resource, int n) =>
        await T.Until(async () => (await c.GetAsync(resource)).Waiters == n, TimeSpan.FromSeconds(5), $"{n} waiters on {resource}");

    [Fact]
    public async Task ASemaphoreOfTwoGrantsTwoAndAThirdWaitsFifo()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        IDistributedSemaphoreProvider p = new MutexdSynchronizationProvider(c);
        var name = "jobs " + Guid.NewGuid().ToString("N"); // a space: not a resource's character
        var sem = p.CreateSemaphore(name, 2);
        var resource = ((MutexdSynchronizationProvider)p).ResourceOf(name);
        Assert.Equal(name, sem.Name);
        var h1 = await sem.TryAcquireAsync();
        var h2 = await sem.TryAcquireAsync();
        Assert.NotNull(h1);
        Assert.NotNull(h2);
        Assert.Null(await sem.TryAcquireAsync());
        Assert.Equal(2, (await c.GetAsync(resource)).Holders.Count);
        var third = sem.AcquireAsync().AsTask();
        await Waiters(c, resource, 1);
        var fourth = sem.AcquireAsync().AsTask();
        await Waiters(c, resource, 2);
        await Assert.ThrowsAsync<TimeoutException>(() => sem.AcquireAsync(TimeSpan.FromMilliseconds(200)).AsTask());
        await h1!.DisposeAsync();
        var h3 = await third.WaitAsync(TimeSpan.FromSeconds(3));
        Assert.False(fourth.IsCompleted, "the fourth, queued after the third, still waits");
        h2!.Dispose();
        var h4 = await fourth.WaitAsync(TimeSpan.FromSeconds(3));
        var t3 = ((MutexdSynchronizationHandle)h3).FencingToken;
        var t4 = ((MutexdSynchronizationHandle)h4).FencingToken;
        Assert.True(t4 > t3, "granted in the order they asked");
        await h3.DisposeAsync();
        await h4.DisposeAsync();
        Assert.False((await c.GetAsync(resource)).IsHeld);
    }

    [Fact]
    public async Task AWriterIsNotStarvedByReaders()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        var p = new MutexdSynchronizationProvider(c);
        IDistributedReaderWriterLockProvider rwp = p;
        var rw = rwp.CreateReaderWriterLock("cfg/" + Guid.NewGuid().ToString("N"));
        var resource = p.ResourceOf(rw.Name);
        var r1 = await rw.AcquireReadLockAsync();
        var r2 = rw.TryAcquireReadLock();
        Assert.NotNull(r2);
        var writer = rw.AcquireWriteLockAsync(TimeSpan.FromSeconds(10)).AsTask();
        await Waiters(c, resource, 1);
        // Only readers hold, yet a reader that comes after the queued writer waits behind it.
        Assert.Null(await rw.TryAcquireReadLockAsync(TimeSpan.FromMilliseconds(300)));
        var lateReader = rw.AcquireReadLockAsync().AsTask();
        await Waiters(c, resource, 2);
        await r1.DisposeAsync();
        Assert.False(writer.IsCompleted);
        r2!.Dispose();
        var w = await writer.WaitAsync(TimeSpan.FromSeconds(3));
        await Task.Delay(200);
        Assert.False(lateReader.IsCompleted, "the late reader waits for the writer");
        await w.DisposeAsync();
        var r3 = await lateReader.WaitAsync(TimeSpan.FromSeconds(3));
        Assert.True(((MutexdSynchronizationHandle)r3).Lease.Grant.Shared);
        await r3.DisposeAsync();
    }

    [Fact]
    public async Task ALockHandleSignalsItsLossAndDisposesQuietly()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        using var admin = T.Client(s.Url);
        IDistributedLockProvider p = new MutexdSynchronizationProvider(c) { Ttl = TimeSpan.FromSeconds(2) };
        var l = p.CreateLock("orders/" + Guid.NewGuid().ToString("N"));
        var h = l.Acquire();
        Assert.Null(l.TryAcquire());
        Assert.Throws<TimeoutException>(() => l.Acquire(TimeSpan.FromMilliseconds(100)));
        var token = ((MutexdSynchronizationHandle)h).FencingToken;
        Assert.True(token > 0);
        Assert.False(h.HandleLostToken.IsCancellationRequested);
        var lost = new TaskCompletionSource();
        using var reg = h.HandleLostToken.Register(() => lost.TrySetResult());
        await admin.BreakAsync(((MutexdSynchronizationHandle)h).Lease.Resource);
        await lost.Task.WaitAsync(TimeSpan.FromSeconds(3));
        h.Dispose(); // no exception for a lost lease
        await using var again = await l.AcquireAsync(TimeSpan.FromSeconds(1));
        Assert.True(((MutexdSynchronizationHandle)again).FencingToken > token);
        // A cancelled wait leaves no waiter.
        using var cts = new CancellationTokenSource(300);
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => l.AcquireAsync(null, cts.Token).AsTask());
        await T.Until(async () => (await c.GetAsync(((MutexdSynchronizationHandle)again).Lease.Resource)).Waiters == 0, TimeSpan.FromSeconds(3), "no waiter");
    }

    [Fact]
    public void NamesMapToDistinctResources()
    {
        using var c = new MutexdClient("http://127.0.0.1:9");
        var p = new MutexdSynchronizationProvider(c);
        Assert.Equal("distributed-lock/a~2Fb", p.ResourceOf("a/b"));
        Assert.Equal("distributed-lock/a~7E2Fb", p.ResourceOf("a~2Fb"));
        Assert.Equal("distributed-lock/x~20y~C3~A9", p.ResourceOf("x yé"));
        Assert.Throws<ArgumentException>(() => p.ResourceOf(""));
        Assert.Throws<ArgumentException>(() => p.ResourceOf(new string('z', 300)));
    }
}
