using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading.Tasks;
using Xunit;

namespace Mutexd.Tests;

[CollectionDefinition("azurite")]
public class AzuriteCollection : ICollectionFixture<Azurite>
{
}

/// <summary>Server groups on a real Azurite: a takeover under a held lock, and a partitioned group's routing.</summary>
[Collection("azurite")]
public class GroupTests
{
    private const int Partitions16 = 16;
    private readonly Azurite _az;

    public GroupTests(Azurite az)
    {
        _az = az;
    }

    private List<TestServer> Group(params string[] extra)
    {
        var container = "d" + Guid.NewGuid().ToString("N")[..16];
        var group = new List<TestServer>();
        try
        {
            for (int i = 0; i < 3; i++)
            {
                var args = new List<string> { "--ha", "--advertise-url", "{url}", "--mirror", "sync", "--blob-connection-string", _az.ConnectionString, "--blob-container", container };
                args.AddRange(extra);
                var s = new TestServer(args.ToArray());
                group.Add(s);
                s.Start();
            }
        }
        catch
        {
            Stop(group);
            throw;
        }
        return group;
    }

    private static void Stop(List<TestServer> group)
    {
        foreach (var s in group)
        {
            s.Dispose();
        }
    }

    private static async Task<TestServer> ActiveOf(List<TestServer> group, TimeSpan within)
    {
        TestServer? found = null;
        await T.Until(async () =>
        {
            string? agreed = null;
            int actives = 0;
            foreach (var s in group.Where(s => s.Running))
            {
                try
                {
                    using var c = T.Client(s.Url, TimeSpan.FromSeconds(2));
                    var g = await c.ServersAsync();
                    if (g.ActiveUrl == null || (agreed != null && agreed != g.ActiveUrl))
                    {
                        return false;
                    }
                    agreed = g.ActiveUrl;
                    actives += g.SelfRole == "active" ? 1 : 0;
                }
                catch (MutexdException)
                {
                    return false;
                }
            }
            found = group.FirstOrDefault(s => s.Url == agreed);
            return actives == 1 && found != null;
        }, within, "an agreed active server");
        return found!;
    }

    [Fact]
    public async Task ALockKeepsItsLeaseAcrossASigkillOfTheActive()
    {
        var group = Group("--forward-timeout-ms", "1000");
        try
        {
            var active = await ActiveOf(group, TimeSpan.FromSeconds(30));
            var standbys = group.Where(s => s != active).ToList();
            var urls = string.Join(",", standbys.Select(s => s.Url).Append(active.Url)); // a standby first
            using var c = new MutexdClient(new MutexdClientOptions(urls) { Timeout = TimeSpan.FromSeconds(5) });
            var r = T.Name();
            await using var lease = await c.LockAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(10) });
            Assert.Equal(active.Url, c.Url); // the standby's answer named the active: asked first now
            var token = lease.FencingToken;
            await Task.Delay(1500);
            var n = lease.Renewals;
            active.Kill();
            var killed = Stopwatch.GetTimestamp();
            using var viaStandby = T.Client(standbys[0].Url, TimeSpan.FromSeconds(3));
            bool saw503 = false;
            while (!saw503 && T.Seconds(killed) < 2.5)
            {
                try
                {
                    await viaStandby.GetAsync(r);
                }
                catch (UnavailableException e)
                {
                    saw503 = e.Reason == "no_active_server" && e.RetryAfter != null;
                }
                catch (MutexdException)
                {
                }
            }
            Assert.True(saw503, "a standby answered 503 no_active_server during the takeover");
            while (T.Seconds(killed) < 9)
            {
                Assert.True(lease.IsHeld, $"lost after the kill: {lease.Error}");
                await Task.Delay(200);
            }
            Assert.True(lease.Renewals > n + 1, $"{n} renewals before the kill, {lease.Renewals} after");
            Assert.Equal(token, lease.FencingToken);
            var next = await ActiveOf(group, TimeSpan.FromSeconds(10));
            Assert.NotSame(active, next);
            var st = await c.GetAsync(r);
            Assert.Equal(token, st.Holder!.FencingToken);
            Assert.Equal(next.Url, c.Url);
            var g = await c.AcquireAsync(T.Name());
            Assert.True(g.FencingToken > token, "tokens keep increasing across the takeover");
            await lease.ReleaseAsync();
            Assert.False((await c.GetAsync(r)).IsHeld);
        }
        finally
        {
            Stop(group);
        }
    }

    private static async Task<List<string>> SettledMap(List<TestServer> group, TimeSpan within)
    {
        List<string> map = new();
        await T.Until(async () =>
        {
            var running = group.Where(s => s.Running).ToList();
            List<string?>? first = null;
            foreach (var s in running)
            {
                try
                {
                    using var c = T.Client(s.Url, TimeSpan.FromSeconds(2));
                    var g = await c.ServersAsync();
                    if (g.PartitionCount != Partitions16 || (first != null && !first.SequenceEqual(g.PartitionOwners)))
                    {
                        return false;
                    }
                    first = g.PartitionOwners.ToList();
                }
                catch (MutexdException)
                {
                    return false;
                }
            }
            if (first == null || first.Any(u => u == null || running.All(s => s.Url != u)))
            {
                return false;
            }
            int lo = Partitions16 / running.Count;
            if (first.GroupBy(u => u).Any(x => x.Count() < lo || x.Count() > lo + 1))
            {
                return false;
            }
            map = first.Select(u => u!).ToList();
            return true;
        }, within, "a settled partition map");
        return map;
    }

    private static List<string> NamesIn(string prefix, int partition)
    {
        var list = new List<string>();
        for (int i = 0; list.Count < 3; i++)
        {
            var n = prefix + "n" + i;
            if (Partitions.Of(n, Partitions16) == partition)
            {
                list.Add(n);
            }
        }
        return list;
    }

    [Fact]
    public async Task APartitionedGroupIsReachedWithoutForwardsAndAMoveIsFollowed()
    {
        var group = Group("--partitions", Partitions16.ToString(System.Globalization.CultureInfo.InvariantCulture));
        try
        {
            var owners = await SettledMap(group, TimeSpan.FromSeconds(60));
            using var c = new MutexdClient(new MutexdClientOptions(string.Join(",", group.Select(s => s.Url))) { Timeout = TimeSpan.FromSeconds(10) });
            var forwarded = new List<string>();
            int answers = 0, fetches = 0;
            c.OnAnswer = (to, method, path, status, by) =>
            {
                lock (forwarded)
                {
                    if (path == "/v1/servers")
                    {
                        fetches++;
                    }
                    else if (path.StartsWith("/v1/resources/", StringComparison.Ordinal))
                    {
                        answers++;
                        if (by != to)
                        {
                            forwarded.Add($"{method} {path} sent to {to}, {status} served by {by}");
                        }
                    }
                }
            };
            Assert.Null(c.PartitionOwners());
            await c.GetAsync(T.Name());
            await T.Until(() => c.PartitionOwners()?.SequenceEqual(owners) == true, TimeSpan.FromSeconds(15), "the client read the map");
            // On a loaded machine a partition may move meanwhile (an owner late to renew its
            // own lease): then the pass is made again on the new map, which the client learns
            // from that very surprise. Forwards without a move fail the test.
            var prefix = T.Name("p") + "/";
            for (int pass = 0; ; pass++)
            {
                lock (forwarded)
                {
                    forwarded.Clear();
                    answers = 0;
                    fetches = 0;
                }
                for (int p = 0; p < Partitions16; p++)
                {
                    var r = NamesIn(prefix, p)[pass % 3];
                    var g = await c.AcquireAsync(r, new AcquireOptions { Ttl = TimeSpan.FromSeconds(20) });
                    Assert.Equal(g.FencingToken, (await c.GetAsync(r)).Holder!.FencingToken);
                    await c.RenewAsync(r, g.LeaseId);
                    await c.ReleaseAsync(r, g.LeaseId);
                }
                int n;
                lock (forwarded)
                {
                    Assert.True(answers >= 64, $"{answers} answers");
                    n = forwarded.Count;
                    if (n == 0)
                    {
                        Assert.Equal(0, fetches);
                        break;
                    }
                }
                var now = await SettledMap(group, TimeSpan.FromSeconds(60));
                Assert.True(pass < 2 && !now.SequenceEqual(owners), $"{n} of 64 forwarded with no move of a partition, the first: {forwarded.FirstOrDefault()}");
                owners = now;
                await T.Until(() => c.PartitionOwners()?.SequenceEqual(owners) == true, TimeSpan.FromSeconds(15), "the client read the new map");
            }

            // The owner of a partition where a lock is held leaves (SIGTERM): the lock holds,
            // and once the map is read again its requests go to the new owner.
            var victim = group[1];
            var part = owners.IndexOf(victim.Url);
            await using var lease = await c.LockAsync(NamesIn(prefix + "m/", part)[0], new AcquireOptions { Ttl = TimeSpan.FromSeconds(6) });
            var token = lease.FencingToken;
            Assert.Equal(0, victim.Terminate());
            var moved = await SettledMap(group, TimeSpan.FromSeconds(60));
            Assert.NotEqual(victim.Url, moved[part]);
            // The client reads the map again when its requests meet the move; what it learns
            // of the partitions it uses is what counts.
            await T.Until(() => c.PartitionOwners()?[part] == moved[part], TimeSpan.FromSeconds(20),
                $"the client followed the move of partition {part} to {moved[part]}: it has {string.Join(" ", c.PartitionOwners() ?? new List<string?>())}");
            // Two renewals, each through the map the client now has; a takeover on a loaded
            // machine may take seconds (the lease's 6-s TTL leaves it room). A partition may
            // move once more as placement evens the two survivors' shares: then the client,
            // told by that forward, must go straight to the new owner for the next two.
            for (int round = 0; ; round++)
            {
                lock (forwarded)
                {
                    forwarded.Clear();
                    answers = 0;
                }
                var before = lease.Renewals;
                await T.Until(() => lease.Renewals >= before + 2, TimeSpan.FromSeconds(15),
                    () => $"two renewals after the move: {lease.Renewals - before}, held {lease.IsHeld}, error {lease.Error?.Message}, last {lease.LastError?.Message}\n{string.Join("\n---\n", group.Select(s => s.Url + ":\n" + s.Log()))}");
                Assert.True(lease.IsHeld, $"lost: {lease.Error}");
                Assert.Equal(token, lease.FencingToken);
                string? first;
                int n;
                lock (forwarded)
                {
                    n = forwarded.Count;
                    first = forwarded.FirstOrDefault();
                }
                if (n == 0)
                {
                    break;
                }
                var now = await SettledMap(group, TimeSpan.FromSeconds(60));
                Assert.True(round == 0 && now[part] != moved[part],
                    $"after the move, {n} of {answers} forwarded with no further move of partition {part} ({moved[part]}): {first}\n{string.Join("\n---\n", group.Select(s => s.Url + ":\n" + s.Log()))}");
                moved = now;
            }
        }
        finally
        {
            Stop(group);
        }
    }
}
