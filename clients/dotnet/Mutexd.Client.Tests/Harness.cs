using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Text.RegularExpressions;
using System.Threading;
using System.Threading.Tasks;

namespace Mutexd.Tests;

/// <summary>
/// A real mutexd process (MUTEXD_BIN) on a free loopback port with a data directory of its
/// own; Kill and Start again restart it on the same port and data. Dispose stops it and
/// deletes its data.
/// </summary>
public sealed class TestServer : IDisposable
{
    private static readonly string[] BaseArgs = { "--min-ttl-ms", "500", "--threads", "2" };
    private readonly List<string> _lines = new();
    private readonly string[] _args;
    private Process? _proc;

    public TestServer(params string[] args)
    {
        _args = args;
        DataDir = Directory.CreateTempSubdirectory("mutexd-dotnet-test-").FullName;
        Port = FreePort();
        Url = $"http://127.0.0.1:{Port}";
    }

    public string DataDir { get; }
    public int Port { get; }
    public string Url { get; }
    public int Pid => _proc!.Id;
    public bool Running => _proc is { HasExited: false };

    public static TestServer Launch(params string[] args)
    {
        var s = new TestServer(args);
        try
        {
            return s.Start();
        }
        catch
        {
            s.Dispose();
            throw;
        }
    }

    public static int FreePort()
    {
        using var l = new TcpListener(IPAddress.Loopback, 0);
        l.Start();
        return ((IPEndPoint)l.LocalEndpoint).Port;
    }

    public static string Bin()
    {
        var b = Environment.GetEnvironmentVariable("MUTEXD_BIN");
        if (string.IsNullOrEmpty(b) || !File.Exists(b))
        {
            throw new InvalidOperationException($"no mutexd binary at MUTEXD_BIN={b} (run make build)");
        }
        return b;
    }

    public TestServer Start()
    {
        var psi = new ProcessStartInfo(Bin()) { RedirectStandardError = true, RedirectStandardOutput = true, UseShellExecute = false };
        foreach (var a in new[] { "--listen", $"127.0.0.1:{Port}", "--data-dir", DataDir })
        {
            psi.ArgumentList.Add(a);
        }
        foreach (var a in BaseArgs)
        {
            psi.ArgumentList.Add(a);
        }
        foreach (var a in _args)
        {
            psi.ArgumentList.Add(a.Replace("{url}", Url, StringComparison.Ordinal));
        }
        var ready = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var p = new Process { StartInfo = psi };
        p.ErrorDataReceived += (_, e) =>
        {
            if (e.Data == null)
            {
                ready.TrySetResult();
                return;
            }
            lock (_lines)
            {
                _lines.Add(e.Data);
            }
            if (e.Data.Contains("msg=\"started\"", StringComparison.Ordinal) || e.Data.Contains("msg=started", StringComparison.Ordinal))
            {
                ready.TrySetResult();
            }
        };
        p.OutputDataReceived += (_, _) => { };
        p.Start();
        p.BeginErrorReadLine();
        p.BeginOutputReadLine();
        _proc = p;
        if (!ready.Task.Wait(TimeSpan.FromSeconds(20)) || p.HasExited)
        {
            Kill();
            throw new InvalidOperationException("mutexd did not start:\n" + Log());
        }
        return this;
    }

    public string Log()
    {
        lock (_lines)
        {
            return string.Join("\n", _lines.GetRange(Math.Max(0, _lines.Count - 40), Math.Min(40, _lines.Count)));
        }
    }

    /// <summary>SIGKILL, as a crash; waits for the process to end.</summary>
    public void Kill()
    {
        if (_proc is { HasExited: false })
        {
            Signals.Send(_proc.Id, Signals.SIGCONT);
            _proc.Kill();
            _proc.WaitForExit();
        }
    }

    /// <summary>SIGTERM; its exit code.</summary>
    public int Terminate()
    {
        if (_proc is not { HasExited: false })
        {
            return _proc?.ExitCode ?? 0;
        }
        Signals.Send(_proc.Id, Signals.SIGCONT);
        Signals.Send(_proc.Id, Signals.SIGTERM);
        if (!_proc.WaitForExit(20000))
        {
            _proc.Kill();
            _proc.WaitForExit();
        }
        return _proc.ExitCode;
    }

    /// <summary>SIGSTOP; waits until the process is stopped.</summary>
    public void Pause()
    {
        Signals.Send(_proc!.Id, Signals.SIGSTOP);
        var end = Environment.TickCount64 + 5000;
        while (!File.ReadAllText($"/proc/{_proc.Id}/stat").Contains(") T ", StringComparison.Ordinal))
        {
            if (Environment.TickCount64 > end)
            {
                throw new InvalidOperationException("mutexd did not stop on SIGSTOP");
            }
            Thread.Sleep(5);
        }
    }

    public void Resume() => Signals.Send(_proc!.Id, Signals.SIGCONT);

    public void Dispose()
    {
        try
        {
            Terminate();
        }
        finally
        {
            _proc?.Dispose();
            try
            {
                Directory.Delete(DataDir, true);
            }
            catch (IOException)
            {
            }
        }
    }
}

public static class Signals
{
    public const int SIGKILL = 9;
    public const int SIGTERM = 15;
    public const int SIGCONT = 18;
    public const int SIGSTOP = 19;

    [DllImport("libc", SetLastError = true, EntryPoint = "kill")]
    private static extern int SysKill(int pid, int sig);

    public static void Send(int pid, int sig) => SysKill(pid, sig);
}

/// <summary>An Azurite started by scripts/azurite.sh; Dispose stops it and deletes its directory.</summary>
public sealed class Azurite : IDisposable
{
    public Azurite()
    {
        Dir = Directory.CreateTempSubdirectory("mutexd-dotnet-azurite-").FullName;
        try
        {
            Run("install");
            Run("start", Dir);
            ConnectionString = File.ReadAllText(Path.Combine(Dir, "connection-string")).Trim();
        }
        catch
        {
            Dispose();
            throw;
        }
    }

    public string Dir { get; }
    public string ConnectionString { get; } = "";

    private static void Run(params string[] args)
    {
        var psi = new ProcessStartInfo(Path.Combine(T.Root, "scripts", "azurite.sh")) { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var a in args)
        {
            psi.ArgumentList.Add(a);
        }
        using var p = Process.Start(psi)!;
        var err = p.StandardError.ReadToEndAsync();
        var output = p.StandardOutput.ReadToEnd();
        p.WaitForExit();
        if (p.ExitCode != 0)
        {
            throw new InvalidOperationException($"scripts/azurite.sh {string.Join(" ", args)} failed:\n{output}{err.Result}");
        }
    }

    public void Dispose()
    {
        try
        {
            if (File.Exists(Path.Combine(Dir, "pid")))
            {
                Run("stop", Dir);
            }
        }
        finally
        {
            Directory.Delete(Dir, true);
        }
    }
}

/// <summary>Helpers of the tests.</summary>
public static class T
{
    private static int _n;

    /// <summary>The repository's root: MUTEXD_ROOT, else the folder above that has tests/vectors.</summary>
    public static string Root
    {
        get
        {
            var r = Environment.GetEnvironmentVariable("MUTEXD_ROOT");
            if (!string.IsNullOrEmpty(r))
            {
                return r;
            }
            var d = new DirectoryInfo(AppContext.BaseDirectory);
            while (d != null && !Directory.Exists(Path.Combine(d.FullName, "tests", "vectors")))
            {
                d = d.Parent;
            }
            return d?.FullName ?? throw new InvalidOperationException("set MUTEXD_ROOT to the repository");
        }
    }

    /// <summary>A resource name no other test uses.</summary>
    public static string Name(string prefix = "t") => $"{prefix}/{Interlocked.Increment(ref _n)}-{Guid.NewGuid():N}";

    public static MutexdClient Client(string url, TimeSpan? timeout = null) =>
        new(new MutexdClientOptions(url) { Timeout = timeout ?? TimeSpan.FromSeconds(5) });

    public static double Seconds(long fromTimestamp) => (double)(Stopwatch.GetTimestamp() - fromTimestamp) / Stopwatch.Frequency;

    /// <summary>Waits until <paramref name="cond"/> holds, or fails after <paramref name="within"/>.</summary>
    public static Task Until(Func<Task<bool>> cond, TimeSpan within, string what) => Until(cond, within, () => what);

    /// <summary>As above, with the failure's words made when it fails.</summary>
    public static async Task Until(Func<Task<bool>> cond, TimeSpan within, Func<string> what)
    {
        var end = Stopwatch.GetTimestamp() + (long)(within.TotalSeconds * Stopwatch.Frequency);
        while (Stopwatch.GetTimestamp() < end)
        {
            if (await cond())
            {
                return;
            }
            await Task.Delay(50);
        }
        throw new Xunit.Sdk.XunitException($"not within {within.TotalSeconds} s: {what()}");
    }

    public static Task Until(Func<bool> cond, TimeSpan within, string what) => Until(() => Task.FromResult(cond()), within, what);

    public static Task Until(Func<bool> cond, TimeSpan within, Func<string> what) => Until(() => Task.FromResult(cond()), within, what);
}
