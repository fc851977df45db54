using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Net;
using System.Text.RegularExpressions;
using System.Threading.Tasks;
using Xunit;

namespace Mutexd.Tests;

/// <summary>
/// The example worker (clients/examples/dotnet/leader), half of its processes through
/// MutexdLeaderElection and half through MutexdDistributedMutex: exactly one leads, and a
/// SIGKILL of the leader is taken over within the TTL.
/// </summary>
public class LeaderTests
{
    private static readonly Regex Leading = new(@"^\[\d\d:\d\d:\d\d\] This process \((\d+)\) is currently the leader\. Host (\S+), fencing token (\d+)\.$");
    private static readonly Regex Waiting = new(@"^\[\d\d:\d\d:\d\d\] This process \((\d+)\) could not acquire lease\. Retrying in [\d.]+ seconds\. Host (\S+)\.$");

    private sealed class Worker : IDisposable
    {
        private readonly Process _p;
        private readonly object _lock = new();
        public readonly List<(long At, ulong Token)> Leads = new();
        public readonly List<string> Other = new();
        public int Waits;

        public Worker(string url, string resource, string api)
        {
            var dll = Environment.GetEnvironmentVariable("MUTEXD_DOTNET_LEADER");
            if (string.IsNullOrEmpty(dll) || !File.Exists(dll))
            {
                throw new InvalidOperationException($"no example worker at MUTEXD_DOTNET_LEADER={dll} (clients/dotnet/test.sh builds it)");
            }
            var psi = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true };
            psi.ArgumentList.Add(dll);
            psi.Environment["MUTEXD_URL"] = url;
            psi.Environment["MUTEXD_RESOURCE"] = resource;
            psi.Environment["MUTEXD_TTL_MS"] = "2000";
            psi.Environment["MUTEXD_RETRY_S"] = "0.5";
            psi.Environment["MUTEXD_LEADER_API"] = api;
            _p = new Process { StartInfo = psi };
            _p.OutputDataReceived += (_, e) => Line(e.Data);
            _p.ErrorDataReceived += (_, e) => Line(e.Data);
            _p.Start();
            _p.BeginOutputReadLine();
            _p.BeginErrorReadLine();
        }

        public int Pid => _p.Id;

        private void Line(string? l)
        {
            if (l == null)
            {
                return;
            }
            lock (_lock)
            {
                if (Leading.Match(l) is { Success: true } m)
                {
                    Assert.Equal(Pid.ToString(System.Globalization.CultureInfo.InvariantCulture), m.Groups[1].Value);
                    Assert.Equal(Dns.GetHostName(), m.Groups[2].Value);
                    Leads.Add((Stopwatch.GetTimestamp(), ulong.Parse(m.Groups[3].Value, System.Globalization.CultureInfo.InvariantCulture)));
                }
                else if (Waiting.IsMatch(l))
                {
                    Waits++;
                }
                else
                {
                    Other.Add(l);
                }
            }
        }

        public bool LedSince(long t)
        {
            lock (_lock)
            {
                return Leads.Any(x => x.At >= t);
            }
        }

        public ulong LastToken()
        {
            lock (_lock)
            {
                return Leads[^1].Token;
            }
        }

        public void Kill()
        {
            if (!_p.HasExited)
            {
                _p.Kill();
                _p.WaitForExit();
            }
        }

        public int Terminate()
        {
            if (!_p.HasExited)
            {
                Signals.Send(_p.Id, Signals.SIGTERM);
                if (!_p.WaitForExit(10000))
                {
                    _p.Kill();
                }
            }
            _p.WaitForExit();
            return _p.ExitCode;
        }

        public void Dispose()
        {
            Kill();
            _p.Dispose();
        }
    }

    private static long Ago(double s) => Stopwatch.GetTimestamp() - (long)(s * Stopwatch.Frequency);

    [Fact]
    public async Task SeveralProcessesElectOneLeaderAndASigkillIsTakenOverWithinTheTtl()
    {
        using var s = TestServer.Launch();
        var r = T.Name("leader");
        var workers = new List<Worker>();
        try
        {
            foreach (var api in new[] { "election", "mutex", "election", "mutex" })
            {
                workers.Add(new Worker(s.Url, r, api));
            }
            await T.Until(() => workers.Any(w => w.LedSince(0)), TimeSpan.FromSeconds(30), "a leader");
            await T.Until(() => workers.All(w => w.LedSince(0) || w.Waits > 0), TimeSpan.FromSeconds(30), "every worker running");
            await Task.Delay(2500);
            var leaders = workers.Where(w => w.LedSince(Ago(2))).ToList();
            Assert.True(leaders.Count == 1, $"{leaders.Count} leaders: {string.Join(" | ", workers.SelectMany(w => w.Other))}");
            var first = leaders[0];
            var token = first.LastToken();
            Assert.True(workers.Where(w => w != first).All(w => w.Waits > 0), "the others say they could not acquire the lease");

            first.Kill();
            var killed = Stopwatch.GetTimestamp();
            await T.Until(() => workers.Any(w => w != first && w.LedSince(killed)), TimeSpan.FromSeconds(2.5), "another leader within the TTL (2 s)");
            var took = T.Seconds(killed);
            Assert.True(took < 2.2, $"taken over {took:F2} s after the kill");
            var second = workers.Single(w => w != first && w.LedSince(killed));
            Assert.True(second.LastToken() > token, "a larger fencing token");
            await Task.Delay(2000);
            Assert.Single(workers, w => w.LedSince(Ago(1.5)));

            // SIGTERM releases the lease: the next leader at once, not after the TTL.
            Assert.Equal(0, second.Terminate());
            var stopped = Stopwatch.GetTimestamp();
            await T.Until(() => workers.Any(w => w != first && w != second && w.LedSince(stopped)), TimeSpan.FromSeconds(1.5), "a leader at once after a SIGTERM");
        }
        finally
        {
            foreach (var w in workers)
            {
                w.Dispose();
            }
        }
    }
}
