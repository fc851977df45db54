using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Text.Json.Nodes;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace Mutexd.Tests;

/// <summary>Locks renewed in the background, and what happens to them when the server stops, dies or restarts.</summary>
public class LockTests
{
    [Fact]
    public async Task ALockIsHeldAcrossADozenTtls()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        using var other = T.Client(s.Url);
        var r = T.Name();
        var ttl = TimeSpan.FromMilliseconds(1500);
        await using var lease = await c.LockAsync(r, new AcquireOptions { Ttl = ttl, Metadata = new JsonObject { ["addr"] = "a:1" } });
        var token = lease.FencingToken;
        Assert.True(lease.FencingToken > 0);
        await Task.Delay(ttl * 12);
        Assert.True(lease.IsHeld, $"lost: {lease.Error}");
        lease.ThrowIfLost();
        Assert.Equal(token, lease.FencingToken);
        Assert.True(lease.Renewals >= 30, $"{lease.Renewals} renewals in 12 TTLs");
        Assert.False(lease.LostToken.IsCancellationRequested);
        Assert.Null(await other.TryLockAsync(r));
        var st = await other.GetAsync(r);
        Assert.True(st.IsHeld);
        Assert.Equal(token, st.Holder!.FencingToken);
        Assert.Equal("a:1", st.Holder.Metadata!["addr"]!.GetValue<string>());
        await lease.ReleaseAsync();
        Assert.False(lease.IsHeld);
        Assert.False(lease.LostToken.IsCancellationRequested);
        Assert.False((await other.GetAsync(r)).IsHeld);
        Assert.Throws<ObjectDisposedException>(lease.ThrowIfLost);
    }

    [Fact]
    public async Task ASigstopOfTheServerCancelsLostTokenBeforeTheDeadline()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        var r = T.Name();
        var election = new MutexdLeaderElection(c, r) { Settings = { Ttl = TimeSpan.FromSeconds(6), RetryInterval = TimeSpan.FromSeconds(1) } };
        var started = new TaskCompletionSource<MutexdLease>();
        long taskStopped = 0;
        using var stop = new CancellationTokenSource();
        var run = election.RunTaskWhenElectedLeaderAsync(async (lease, ct) =>
        {
            started.TrySetResult(lease);
            try
            {
                await Task.Delay(Timeout.Infinite, ct);
            }
            finally
            {
                Interlocked.Exchange(ref taskStopped, Stopwatch.GetTimestamp());
                stop.Cancel(); // one term is enough here
            }
        }, stop.Token);
        var lease = await started.Task.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.True(election.IsLeader);
        Assert.Equal(lease.FencingToken, election.FencingToken);
        await T.Until(() => lease.Renewals >= 1, TimeSpan.FromSeconds(5), "a renewal");
        s.Pause();
        try
        {
            // The deadline the server keeps is at least this one: the last renewal's send plus its expires_in.
            var lost = new TaskCompletionSource<long>();
            using var reg = lease.LostToken.Register(() => lost.TrySetResult(Stopwatch.GetTimestamp()));
            var done = await Task.WhenAny(lost.Task, Task.Delay(9000));
            Assert.True(done == lost.Task, $"not lost: renewals {lease.Renewals}, last error {lease.LastError?.Message}, remaining {lease.Remaining}, held {lease.IsHeld}, error {lease.Error}");
            var at = await lost.Task; // with a 6 s TTL the margin is 120 ms: room for a timer that a loaded machine runs late
            var deadline = lease.Grant.DeadlineTimestamp;
            Assert.True(at < deadline, $"lost {(double)(at - deadline) / Stopwatch.Frequency:F3} s after the deadline");
            Assert.IsType<LeaseExpiredException>(lease.Error);
            Assert.IsAssignableFrom<MutexdTransportException>(lease.Error!.InnerException);
            Assert.False(lease.IsHeld);
            Assert.Throws<LeaseExpiredException>(lease.ThrowIfLost);
            await run.WaitAsync(TimeSpan.FromSeconds(5));
            var stopped = Interlocked.Read(ref taskStopped);
            Assert.True(stopped != 0, "the task stopped");
            Assert.True(stopped - at < Stopwatch.Frequency, $"the task stopped {(double)(stopped - at) / Stopwatch.Frequency:F3} s after the loss");
            Assert.False(election.IsLeader);
        }
        finally
        {
            s.Resume();
        }
    }

    [Fact]
    public async Task ASigkillAndRestartOfTheServerKeepsTheLease()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        using var observer = T.Client(s.Url);
        var r = T.Name();
        await using var lease = await c.LockAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(3) });
        var token = lease.FencingToken;
        await T.Until(() => lease.Renewals >= 1, TimeSpan.FromSeconds(5), "a renewal");
        var n = lease.Renewals;
        s.Kill();
        s.Start();
        // Renewals go on against the restarted server (the one under way at the kill may be
        // retried first), and the lease was never lost on the way.
        await T.Until(() => lease.Renewals > n + 1 || !lease.IsHeld, TimeSpan.FromSeconds(8),
            $"two renewals after the restart ({n} before)");
        Assert.True(lease.IsHeld, $"lost: {lease.Error}");
        Assert.Equal(token, lease.FencingToken);
        Assert.True(lease.Renewals > n + 1, $"{n} renewals before, {lease.Renewals} after");
        var st = await observer.GetAsync(r);
        Assert.Equal(token, st.Holder!.FencingToken);
        var g = await observer.AcquireAsync(T.Name());
        Assert.True(g.FencingToken > token, "tokens keep increasing across a restart");
    }

    [Fact]
    public async Task LeaseLostCancelsAtOnceAndDisposeDoesNotThrow()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        using var admin = T.Client(s.Url);
        var r = T.Name();
        var lease = await c.LockAsync(r, new AcquireOptions { Ttl = TimeSpan.FromMilliseconds(900) });
        Assert.True(await admin.BreakAsync(r, "test"));
        var why = await lease.Lost.WaitAsync(TimeSpan.FromSeconds(3));
        Assert.IsType<LeaseLostException>(why);
        Assert.True(lease.LostToken.IsCancellationRequested);
        Assert.Throws<LeaseLostException>(lease.ThrowIfLost);
        var next = await admin.LockAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(5) });
        await lease.DisposeAsync(); // never throws for a lost lease, and frees nothing of the next holder's
        Assert.True(next.IsHeld);
        Assert.Equal(next.FencingToken, (await admin.GetAsync(r)).Holder!.FencingToken);
        next.Dispose(); // the synchronous form
        Assert.False((await admin.GetAsync(r)).IsHeld);
    }

    [Fact]
    public async Task ACancelledBlockingAcquireLeavesNoWaiter()
    {
        using var s = TestServer.Launch();
        using var a = T.Client(s.Url);
        using var b = T.Client(s.Url);
        var r = T.Name();
        var holder = await a.LockAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(30) });
        using var cts = new CancellationTokenSource();
        var waiting = b.LockAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(30) }, cts.Token); // waits without end
        await T.Until(async () => (await a.GetAsync(r)).Waiters == 1, TimeSpan.FromSeconds(5), "one waiter");
        cts.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => waiting);
        await T.Until(async () => (await a.GetAsync(r)).Waiters == 0, TimeSpan.FromSeconds(3), "no waiter after the cancel");
        await holder.ReleaseAsync();
        await Task.Delay(300);
        Assert.False((await a.GetAsync(r)).IsHeld, "the dropped waiter was never granted");
    }

    [Fact]
    public async Task AWaiterIsGrantedAtTheReleaseAndSeesTheWaiters()
    {
        using var s = TestServer.Launch();
        using var a = T.Client(s.Url);
        using var b = T.Client(s.Url);
        var r = T.Name();
        var first = await a.LockAsync(r, new AcquireOptions { Ttl = TimeSpan.FromMilliseconds(600) });
        Assert.True(first.Waiters is null or 0); // sent by servers that count waiters in the lease body
        var waiting = b.LockAsync(r, new AcquireOptions { Wait = TimeSpan.FromSeconds(10) });
        await T.Until(async () => (await a.GetAsync(r)).Waiters == 1, TimeSpan.FromSeconds(5), "one waiter");
        await first.DisposeAsync();
        await using var second = await waiting.WaitAsync(TimeSpan.FromSeconds(3));
        Assert.True(second.FencingToken > first.FencingToken);
        // A wait that runs out: lease_held.
        var e = await Assert.ThrowsAsync<LeaseHeldException>(() => a.LockAsync(r, new AcquireOptions { Wait = TimeSpan.FromMilliseconds(300) }));
        Assert.Equal(second.FencingToken, e.Holder!.FencingToken);
        // The synchronous forms.
        Assert.Null(a.TryLock(r));
        var sync = a.Lock(T.Name(), new AcquireOptions { Ttl = TimeSpan.FromSeconds(2) });
        Assert.True(sync.IsHeld);
        sync.Release();
        Assert.False(sync.IsHeld);
    }

    [Fact]
    public async Task AnAcquireRetriedWithItsLeaseIdGetsItsLeaseBack()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        var r = T.Name();
        var id = MutexdClient.NewLeaseId();
        var g1 = await c.AcquireAsync(r, new AcquireOptions { LeaseId = id });
        var g2 = await c.AcquireAsync(r, new AcquireOptions { LeaseId = id.ToUpperInvariant() });
        Assert.Equal(g1.FencingToken, g2.FencingToken);
        Assert.Equal(id, g2.LeaseId);
        // A lock whose first attempt finds no server: sent again, with the same lease id, to the next URL.
        var dead = $"http://127.0.0.1:{TestServer.FreePort()}";
        using var two = new MutexdClient(new MutexdClientOptions(dead + "," + s.Url) { Timeout = TimeSpan.FromSeconds(2) });
        await using var l = await two.LockAsync(T.Name(), new AcquireOptions { LeaseId = id });
        Assert.Equal(id, l.LeaseId);
        Assert.Equal(s.Url, two.Url);
    }

    [Fact]
    public async Task SetsAreGrantedWhole()
    {
        using var s = TestServer.Launch();
        using var a = T.Client(s.Url);
        using var b = T.Client(s.Url);
        var x = "{" + T.Name("acct") + "}/alice";
        var y = x.Replace("/alice", "/bob", StringComparison.Ordinal);
        await using (var set = await a.LockManyAsync(new[] { x, y }, new AcquireOptions { Ttl = TimeSpan.FromMilliseconds(1500) }))
        {
            Assert.Equal(new[] { x, y }, set.Resources);
            Assert.NotEqual(set.FencingTokenOf(x), set.FencingTokenOf(y));
            Assert.Equal(set[x].LeaseId, set[y].LeaseId);
            await Task.Delay(2200);
            Assert.True(set.IsHeld, $"lost: {set.Error}");
            Assert.True(set.Renewals >= 2, $"{set.Renewals} renewals");
            // Any one held: nothing granted, the first held named.
            var e = await Assert.ThrowsAsync<LeaseHeldException>(() => b.AcquireManyAsync(new[] { y, "{" + T.Name() + "}" }));
            Assert.Equal(y, e.Resource);
            // Breaking one loses the set.
            await b.BreakAsync(y);
            Assert.IsType<LeaseLostException>(await set.Lost.WaitAsync(TimeSpan.FromSeconds(3)));
        }
        Assert.False((await b.GetAsync(x)).IsHeld, "the set's release freed what it still held");
        using var sync = a.LockMany(new[] { x, y });
        Assert.True(sync.IsHeld);
    }

    [Fact]
    public async Task TheOrderedHelperTakesInNameOrderAndGivesBackOnFailure()
    {
        using var s = TestServer.Launch();
        using var a = T.Client(s.Url);
        using var b = T.Client(s.Url);
        var p = T.Name("ord");
        string n1 = p + "/a", n2 = p + "/b", n3 = p + "/c";
        await using (var locks = await a.LockOrderedAsync(new[] { n3, n1, n2 }))
        {
            Assert.Equal(new[] { n1, n2, n3 }, locks.Leases.Select(l => l.Resource));
            Assert.True(locks.IsHeld);
            Assert.True(locks[n2].FencingToken > locks[n1].FencingToken);
            await b.BreakAsync(n3);
            await T.Until(() => locks.LostToken.IsCancellationRequested, TimeSpan.FromSeconds(20), "lost with one of its leases");
        }
        var blocker = await b.LockAsync(n3);
        var e = await Assert.ThrowsAsync<LeaseHeldException>(() => a.LockOrderedAsync(new[] { n1, n2, n3 }, new AcquireOptions { Wait = TimeSpan.FromMilliseconds(200) }));
        Assert.Equal(blocker.FencingToken, e.Holder!.FencingToken);
        Assert.False((await b.GetAsync(n1)).IsHeld, "what it took was given back");
        Assert.False((await b.GetAsync(n2)).IsHeld);
        await blocker.DisposeAsync();
    }

    [Fact]
    public async Task SemaphoresAndSharedLeases()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        var sem = T.Name();
        var o = new AcquireOptions { Limit = 2 };
        await using var l1 = await c.LockAsync(sem, o);
        await using var l2 = await c.LockAsync(sem, o);
        Assert.Equal(2, l1.Grant.Limit);
        Assert.Null(await c.TryLockAsync(sem, o));
        var st = await c.GetAsync(sem);
        Assert.Equal(2, st.Holders.Count);
        Assert.Equal(2, st.Limit);
        var rw = T.Name();
        await using var r1 = await c.LockAsync(rw, new AcquireOptions { Shared = true });
        await using var r2 = await c.LockAsync(rw, new AcquireOptions { Shared = true });
        Assert.True(r1.Grant.Shared);
        Assert.Null(await c.TryLockAsync(rw));
    }

    [Fact]
    public async Task WatchesAndEventsAsStreams()
    {
        using var s = TestServer.Launch();
        using var c = T.Client(s.Url);
        using var w = T.Client(s.Url);
        var prefix = T.Name("w");
        var r = prefix + "/x";
        using var cts = new CancellationTokenSource(TimeSpan.FromSeconds(20));
        var states = new List<MutexdResourceState>();
        var watching = Task.Run(async () =>
        {
            await foreach (var st in w.WatchChangesAsync(r, cts.Token))
            {
                states.Add(st);
                if (states.Count == 3)
                {
                    break;
                }
            }
        });
        await T.Until(() => states.Count == 1, TimeSpan.FromSeconds(15), "the first state");
        var g = await c.AcquireAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(30) });
        await T.Until(() => states.Count == 2, TimeSpan.FromSeconds(5), "the grant seen");
        await c.ReleaseAsync(r, g.LeaseId);
        await watching.WaitAsync(TimeSpan.FromSeconds(5));
        Assert.False(states[0].IsHeld);
        Assert.True(states[1].IsHeld);
        Assert.False(states[2].IsHeld);

        var types = new List<string>();
        await foreach (var e in w.EventStreamAsync(prefix, default, cts.Token))
        {
            types.Add(e.Type + " " + e.FencingToken);
            if (types.Count == 2)
            {
                break;
            }
        }
        Assert.Equal(new[] { "granted " + g.FencingToken, "released " + g.FencingToken }, types);

        var lists = new List<MutexdResourceList>();
        var listing = Task.Run(async () =>
        {
            await foreach (var l in w.WatchListAsync(prefix, cts.Token))
            {
                lists.Add(l);
                if (lists.Count == 2)
                {
                    break;
                }
            }
        });
        await T.Until(() => lists.Count == 1, TimeSpan.FromSeconds(15), "the first list");
        await c.AcquireAsync(prefix + "/y");
        await listing.WaitAsync(TimeSpan.FromSeconds(5));
        Assert.Empty(lists[0].Resources);
        Assert.Equal(prefix + "/y", lists[1].Resources.Single().Resource);
        var page = c.List(prefix);
        Assert.Single(page.Resources);
        Assert.Equal("alone", (await c.ServersAsync()).SelfRole);
        Assert.True(await c.IsReadyAsync());
    }
}
