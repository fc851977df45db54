// Leader election with mutexd: run several copies of this program; exactly one of them
// leads at a time, and when it stops (or dies) another takes over.
//
// The leader prints a line every second; the others print that they could not acquire the
// lease and when they will try again. Each line names the process (its PID, and the host
// name, which tells containers apart: in each container the worker is PID 1), and the
// leader's lines carry its fencing token. The leader checks that its lease still holds (on
// the clock, not only as the last renewal saw it) right before each of its actions.
// SIGTERM or Ctrl-C releases the lease (so that another process takes over at once) and
// exits 0.
//
// Configuration, by environment:
//
//   MUTEXD_URL         the server, or several comma-separated (default http://127.0.0.1:8080)
//   MUTEXD_RESOURCE    the resource to lead (default leader-election/demo)
//   MUTEXD_TTL_MS      the lease's TTL in ms (default 15000); renewed every third of it
//   MUTEXD_RETRY_S     seconds a follower waits in the queue before it says so (default 5)
//   MUTEXD_TOKEN       a bearer token, if the server asks for one
//   MUTEXD_CA_FILE     a CA file to verify an https:// server with
//   MUTEXD_LEADER_API  election (ILeaderElection, the default) or mutex (the sample's
//                      BlobDistributedMutex shape): the same behaviour through either

using System;
using System.Globalization;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using Mutexd;

namespace Mutexd.Examples;

public static class Program
{
    private static readonly string Host = MutexdClient.HostName();
    private static readonly int Pid = Environment.ProcessId;

    private static void Say(string text, string detail)
    {
        Console.Out.WriteLine($"[{DateTime.Now:HH:mm:ss}] This process ({Pid}) {text} Host {Host}{detail}.");
        Console.Out.Flush();
    }

    private static string Env(string name, string def) => Environment.GetEnvironmentVariable(name) is { Length: > 0 } v ? v : def;

    // The leader's job: runs until it must stop (the lease is lost, or shutting down).
    private static async Task Lead(MutexdLease lease, CancellationToken ct)
    {
        // IsHeld compares the clock with the lease's deadline: a leader paused past it
        // (SIGSTOP, a frozen VM) stops here instead of acting once more.
        while (!ct.IsCancellationRequested && lease.IsHeld)
        {
            // Here a real leader would do its work, passing lease.FencingToken to the
            // storage it writes to.
            Say("is currently the leader.", $", fencing token {lease.FencingToken}");
            try
            {
                await Task.Delay(TimeSpan.FromSeconds(1), ct);
            }
            catch (OperationCanceledException)
            {
                break;
            }
        }
        if (lease.Error is MutexdException why)
        {
            Say($"lost the lease ({why.Message}).", "");
        }
    }

    public static async Task<int> Main()
    {
        var url = Env("MUTEXD_URL", MutexdClientOptions.DefaultUrl);
        var resource = Env("MUTEXD_RESOURCE", "leader-election/demo");
        if (!long.TryParse(Env("MUTEXD_TTL_MS", "15000"), NumberStyles.Integer, CultureInfo.InvariantCulture, out var ttlMs) ||
            !double.TryParse(Env("MUTEXD_RETRY_S", "5"), NumberStyles.Float, CultureInfo.InvariantCulture, out var retryS) ||
            ttlMs <= 0 || !(retryS > 0))
        {
            Console.Error.WriteLine("error: MUTEXD_TTL_MS and MUTEXD_RETRY_S must be positive numbers");
            return 1;
        }
        var api = Env("MUTEXD_LEADER_API", "election");
        using var stop = new CancellationTokenSource();
        using var term = PosixSignalRegistration.Create(PosixSignal.SIGTERM, c => { c.Cancel = true; stop.Cancel(); });
        using var intr = PosixSignalRegistration.Create(PosixSignal.SIGINT, c => { c.Cancel = true; stop.Cancel(); });
        try
        {
            using var client = new MutexdClient(new MutexdClientOptions(url)
            {
                Token = Environment.GetEnvironmentVariable("MUTEXD_TOKEN") is { Length: > 0 } t ? t : null,
                CaFile = Environment.GetEnvironmentVariable("MUTEXD_CA_FILE") is { Length: > 0 } f ? f : null,
            });
            var settings = new MutexdSettings(client, resource)
            {
                Ttl = TimeSpan.FromMilliseconds(ttlMs),
                RetryInterval = TimeSpan.FromSeconds(retryS),
            };
            var retry = retryS.ToString(CultureInfo.InvariantCulture);
            void Standby(MutexdException? e)
            {
                Say($"could not acquire lease. Retrying in {retry} seconds.", "");
                if (e != null)
                {
                    Console.Error.WriteLine($"  ({e.Message})");
                }
            }
            if (api == "mutex")
            {
                MutexdDistributedMutex? mutex = null;
                mutex = new MutexdDistributedMutex(settings, ct => Lead(mutex!.CurrentLease!, ct), () => Standby(null));
                await mutex.RunTaskWhenMutexAcquired(stop.Token);
            }
            else
            {
                var election = new MutexdLeaderElection(settings) { OnStandby = Standby };
                await election.RunTaskWhenElectedLeaderAsync(Lead, stop.Token);
            }
            return 0;
        }
        catch (Exception e) when (e is MutexdException || e is ArgumentException)
        {
            Console.Error.WriteLine($"error: {e.Message}");
            return 1;
        }
    }
}
