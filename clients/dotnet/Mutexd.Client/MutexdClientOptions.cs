using System;
using System.Collections.Generic;
using System.Net;
using System.Security.Cryptography.X509Certificates;

namespace Mutexd;

/// <summary>How a <see cref="MutexdClient"/> reaches its servers.</summary>
public sealed class MutexdClientOptions
{
    /// <summary>The URL used when none is given and <c>MUTEXD_URL</c> is not set.</summary>
    public const string DefaultUrl = "http://127.0.0.1:8080";

    /// <summary>Options with no URL: the client then takes <c>MUTEXD_URL</c>, else <see cref="DefaultUrl"/>.</summary>
    public MutexdClientOptions()
    {
    }

    /// <summary>Options for one URL, or several separated by commas.</summary>
    public MutexdClientOptions(string urls)
    {
        foreach (var u in SplitUrls(urls))
        {
            Urls.Add(u);
        }
    }

    /// <summary>The servers of the group, tried in turn (the one that answered last first).</summary>
    public IList<string> Urls { get; } = new List<string>();

    /// <summary>A bearer token, when the server asks for one (default: <c>MUTEXD_TOKEN</c>).</summary>
    public string? Token { get; set; }

    /// <summary>A PEM file of the CA that signed the server's certificate (default: the system's CAs, or <c>MUTEXD_CA_FILE</c>).</summary>
    public string? CaFile { get; set; }

    /// <summary>A CA certificate to trust instead of the system's.</summary>
    public X509Certificate2? CaCertificate { get; set; }

    /// <summary>How long one request may take, waits aside (default 10 s).</summary>
    public TimeSpan Timeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>The owner named in acquires (default: host name and process id).</summary>
    public string? Owner { get; set; }

    /// <summary>A proxy to send through; none by default, whatever the environment says.</summary>
    public IWebProxy? Proxy { get; set; }

    /// <summary>The options of the environment: <c>MUTEXD_URL</c>, <c>MUTEXD_TOKEN</c>, <c>MUTEXD_CA_FILE</c>.</summary>
    public static MutexdClientOptions FromEnvironment()
    {
        var o = new MutexdClientOptions(Environment.GetEnvironmentVariable("MUTEXD_URL") ?? "");
        o.Token = Env("MUTEXD_TOKEN");
        o.CaFile = Env("MUTEXD_CA_FILE");
        return o;
    }

    internal static string? Env(string name) => Environment.GetEnvironmentVariable(name) is { Length: > 0 } v ? v : null;

    internal static IEnumerable<string> SplitUrls(string urls)
    {
        foreach (var part in urls.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
        {
            yield return part;
        }
    }
}
