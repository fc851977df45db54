using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Xunit;

namespace Mutexd.Tests;

/// <summary>The hosting package: registration, and a leader service that nothing stops but the host.</summary>
public class HostingTests
{
    private sealed class Service : MutexdLeaderService
    {
        public readonly ConcurrentQueue<ulong> Terms = new();
        public readonly ConcurrentQueue<Exception> Errors = new();
        public volatile bool Running;

        public Service(MutexdLeaderElection e) : base(e)
        {
        }

        protected override async Task ExecuteAsLeaderAsync(MutexdLease lease, CancellationToken stoppingToken)
        {
            Terms.Enqueue(lease.FencingToken);
            if (Terms.Count == 1)
            {
                throw new InvalidOperationException("the first term fails");
            }
            Running = true;
            try
            {
                await Task.Delay(Timeout.Infinite, stoppingToken);
            }
            finally
            {
                Running = false;
            }
        }

        protected override void OnError(Exception error)
        {
            Errors.Enqueue(error);
            throw new InvalidOperationException("an error handler that throws");
        }
    }

    [Fact]
    public async Task TheLeaderServiceRidesOutErrorsAndLossesUntilTheHostStops()
    {
        using var s = TestServer.Launch();
        var r = T.Name("svc");
        var services = new ServiceCollection();
        services.AddMutexdClient(o => o.Urls.Add(s.Url));
        services.AddMutexdLeaderElection(r, st => { st.Ttl = TimeSpan.FromSeconds(2); st.RetryInterval = TimeSpan.FromMilliseconds(200); });
        services.AddSingleton<Service>();
        await using var sp = services.BuildServiceProvider();
        var election = sp.GetRequiredService<ILeaderElection>();
        Assert.Same(sp.GetRequiredService<MutexdLeaderElection>(), election);
        var svc = sp.GetRequiredService<Service>();
        await svc.StartAsync(CancellationToken.None);
        await T.Until(() => svc.Running, TimeSpan.FromSeconds(10), "the second term runs after the first threw");
        Assert.IsType<InvalidOperationException>(Assert.Single(svc.Errors));
        Assert.True(svc.IsLeader);
        using var admin = T.Client(s.Url);
        await admin.BreakAsync(r); // a loss: the term ends at once, and another begins
        await T.Until(() => svc.Terms.Count >= 3 && svc.Running, TimeSpan.FromSeconds(10), "a third term after the break");
        var tokens = svc.Terms.ToArray();
        Assert.True(tokens[2] > tokens[1]);
        Assert.Null(svc.ExecuteTask!.Exception);
        await svc.StopAsync(CancellationToken.None);
        Assert.False(svc.Running);
        Assert.True(svc.ExecuteTask.IsCompletedSuccessfully);
        Assert.False((await admin.GetAsync(r)).IsHeld, "stopping released the lease");
    }
}
