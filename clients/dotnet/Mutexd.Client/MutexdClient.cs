using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Http;
using System.Net.Http.Headers;
using System.Net.Security;
using System.Runtime.CompilerServices;
using System.Security.Cryptography.X509Certificates;
using System.Text;
using System.Text.Json;
using System.Text.Json.Nodes;
using System.Threading;
using System.Threading.Tasks;

namespace Mutexd;

/// <summary>
/// A client of a mutexd server, or of a group of them. Thread-safe: share one per process.
/// Every call has a synchronous and an asynchronous form; every error is a
/// <see cref="MutexdException"/>. Requests go first to the server that answered last (or, for
/// a resource of a partitioned group, to its partition's owner), and move to the next server on
/// a connection error, a timeout or a 503.
/// </summary>
public partial class MutexdClient : IDisposable
{
    /// <summary>The client's version, sent as its User-Agent.</summary>
    public const string Version = "0.1.0";

    private static readonly TimeSpan RetryAfterCap = TimeSpan.FromSeconds(2);
    private static readonly TimeSpan RetryAfterMin = TimeSpan.FromMilliseconds(100);
    private static readonly TimeSpan RelearnInterval = TimeSpan.FromSeconds(1);

    private readonly List<Server> _servers = new();
    private readonly MutexdClientOptions _options = null!;
    private readonly X509Certificate2? _ca;
    private int _current;
    private readonly object _mapLock = new();
    private MapState _mapState;
    private Server?[]? _owners;
    private readonly Dictionary<string, Server> _others = new();
    private bool _fetching;
    private long _fetchedAt;
    private bool _disposed;

    /// <summary>A client of <c>MUTEXD_URL</c> (else <see cref="MutexdClientOptions.DefaultUrl"/>), with the environment's token and CA.</summary>
    public static MutexdClient FromEnvironment() => new(MutexdClientOptions.FromEnvironment());

    /// <summary>A client of one URL, or several separated by commas.</summary>
    public MutexdClient(string urls) : this(new MutexdClientOptions(urls))
    {
    }

    /// <summary>A client with these options.</summary>
    public MutexdClient(MutexdClientOptions options)
    {
        ArgumentNullException.ThrowIfNull(options);
        _options = options;
        var urls = options.Urls.Count > 0
            ? options.Urls.ToList()
            : MutexdClientOptions.SplitUrls(Environment.GetEnvironmentVariable("MUTEXD_URL") ?? "").ToList();
        if (urls.Count == 0)
        {
            urls.Add(MutexdClientOptions.DefaultUrl);
        }
        Token = options.Token ?? (options.Urls.Count == 0 ? MutexdClientOptions.Env("MUTEXD_TOKEN") : null);
        var caFile = options.CaFile ?? (options.Urls.Count == 0 ? MutexdClientOptions.Env("MUTEXD_CA_FILE") : null);
        _ca = options.CaCertificate ?? (caFile != null ? X509Certificate2.CreateFromPemFile(caFile) : null);
        Timeout = options.Timeout > TimeSpan.Zero ? options.Timeout : TimeSpan.FromSeconds(10);
        Owner = options.Owner ?? DefaultOwner();
        foreach (var u in urls)
        {
            _servers.Add(NewServer(u) ?? throw new ArgumentException($"not an http or https URL: {u}", nameof(options)));
        }
    }

    /// <summary>For mocking: a client that sends nothing unless its methods are overridden.</summary>
    protected MutexdClient()
    {
        Owner = DefaultOwner();
        Timeout = TimeSpan.FromSeconds(10);
    }

    /// <summary>The bearer token sent, or null.</summary>
    internal string? Token { get; }

    /// <summary>How long one request may take, waits aside.</summary>
    public TimeSpan Timeout { get; }

    /// <summary>The owner named in acquires.</summary>
    public string Owner { get; }

    /// <summary>The servers, as given.</summary>
    public IReadOnlyList<string> Urls => _servers.Select(s => s.Url).ToList();

    /// <summary>The server asked first now.</summary>
    public string Url => _servers[Volatile.Read(ref _current)].Url;

    /// <summary><c>host:pid</c>, the default owner.</summary>
    public static string DefaultOwner() => $"{HostName()}:{Environment.ProcessId}";

    /// <summary>This machine's host name.</summary>
    public static string HostName()
    {
        try
        {
            return Dns.GetHostName();
        }
        catch (System.Net.Sockets.SocketException)
        {
            return "localhost";
        }
    }

    /// <summary>A new random lease id.</summary>
    public static string NewLeaseId() => Guid.NewGuid().ToString("D");

    /// <summary>Sees every answer, in the tests: the server asked, method, path, status, served-by.</summary>
    internal Action<string, string, string, int, string?>? OnAnswer { get; set; }

    /// <summary>Closes the connections.</summary>
    public void Dispose()
    {
        Dispose(true);
        GC.SuppressFinalize(this);
    }

    /// <summary>Closes the connections.</summary>
    protected virtual void Dispose(bool disposing)
    {
        if (_disposed || !disposing)
        {
            return;
        }
        _disposed = true;
        foreach (var s in _servers)
        {
            s.Http.Dispose();
        }
        lock (_mapLock)
        {
            foreach (var s in _others.Values)
            {
                s.Http.Dispose();
            }
        }
    }

    // ---- servers and connections -----------------------------------------------------------

    private sealed class Server
    {
        public Server(string url, string key, HttpClient http)
        {
            Url = url;
            Key = key;
            Http = http;
        }

        public string Url { get; }
        public string Key { get; }
        public HttpClient Http { get; set; }
    }

    private enum MapState
    {
        Unknown,
        Flat,
        Partitioned,
    }

    private Server? NewServer(string raw)
    {
        var key = KeyOf(raw);
        if (key == null)
        {
            return null;
        }
        return new Server(raw.Trim().TrimEnd('/'), key, NewHttp());
    }

    /// <summary>The normalised form of a URL: scheme, host and port in lower case, path without a trailing slash.</summary>
    internal static string? KeyOf(string raw)
    {
        if (!Uri.TryCreate(raw.Trim(), UriKind.Absolute, out var u) || (u.Scheme != "http" && u.Scheme != "https"))
        {
            return null;
        }
        return $"{u.Scheme}://{u.Host.ToLowerInvariant()}:{u.Port}{u.AbsolutePath.TrimEnd('/')}";
    }

    private HttpClient NewHttp()
    {
        var h = new SocketsHttpHandler
        {
            UseProxy = _options.Proxy != null,
            Proxy = _options.Proxy,
            AllowAutoRedirect = false,
            UseCookies = false,
            PooledConnectionIdleTimeout = TimeSpan.FromSeconds(30),
            ConnectTimeout = Timeout,
        };
        if (_ca != null)
        {
            var ca = _ca;
            h.SslOptions = new SslClientAuthenticationOptions
            {
                RemoteCertificateValidationCallback = (_, cert, _, errors) =>
                {
                    if (cert == null || (errors & SslPolicyErrors.RemoteCertificateNameMismatch) != 0 ||
                        (errors & SslPolicyErrors.RemoteCertificateNotAvailable) != 0)
                    {
                        return false;
                    }
                    using var chain = new X509Chain();
                    chain.ChainPolicy.TrustMode = X509ChainTrustMode.CustomRootTrust;
                    chain.ChainPolicy.CustomTrustStore.Add(ca);
                    chain.ChainPolicy.RevocationMode = X509RevocationMode.NoCheck;
                    return chain.Build(new X509Certificate2(cert));
                },
            };
        }
        return new HttpClient(h, disposeHandler: true) { Timeout = System.Threading.Timeout.InfiniteTimeSpan };
    }

    // ---- sending ---------------------------------------------------------------------------

    /// <summary>A 2xx answer.</summary>
    internal sealed record Answer(int Status, JsonElement Body, string? RequestId, string? ServedBy, string? Partition, long Sent);

    private sealed record Target(Server Server, int Index);

    private static long Now => Stopwatch.GetTimestamp();

    private static long Ticks(TimeSpan t) => (long)(t.TotalSeconds * Stopwatch.Frequency);

    private static TimeSpan Span(long ticks) => TimeSpan.FromSeconds((double)ticks / Stopwatch.Frequency);

    /// <summary>
    /// Sends a request to the servers in turn. <paramref name="limit"/> bounds each attempt;
    /// <paramref name="deadline"/>, a <see cref="Stopwatch"/> timestamp or 0, the whole call.
    /// </summary>
    internal async ValueTask<Answer> SendAsync(string? resource, string method, string path, byte[]? body, string? contentType,
        TimeSpan limit, long deadline, bool async, CancellationToken ct)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        var targets = Targets(resource);
        int k = 0;
        long end = Now + Ticks(limit);
        if (deadline != 0 && deadline < end)
        {
            end = deadline;
        }
        MutexdException? last = null;
        TimeSpan? pause = null;
        for (; ; )
        {
            ct.ThrowIfCancellationRequested();
            if (k == targets.Count)
            {
                if (targets.Count == 1 || pause == null)
                {
                    throw last!;
                }
                var wait = pause.Value < RetryAfterMin ? RetryAfterMin : pause.Value > RetryAfterCap ? RetryAfterCap : pause.Value;
                if (Now + Ticks(wait) >= end)
                {
                    throw last!;
                }
                if (async)
                {
                    await Task.Delay(wait, ct).ConfigureAwait(false);
                }
                else
                {
                    ct.WaitHandle.WaitOne(wait);
                    ct.ThrowIfCancellationRequested();
                }
                pause = null;
                targets = Targets(resource);
                k = 0;
            }
            var t = targets[k++];
            var each = limit;
            if (deadline != 0)
            {
                var left = deadline - Now;
                if (left <= 0)
                {
                    throw last ?? new MutexdTimeoutException($"{method} {t.Server.Url}{path}: the deadline passed before the request was sent");
                }
                if (Span(left) < each)
                {
                    each = Span(left);
                }
            }
            Raw r;
            try
            {
                r = await ExchangeAsync(t.Server, method, path, body, contentType, each, async, ct).ConfigureAwait(false);
            }
            catch (MutexdTransportException e)
            {
                last = e;
                if (resource != null)
                {
                    Failed(false);
                }
                continue;
            }
            OnAnswer?.Invoke(t.Server.Url, method, path, r.Status, r.ServedBy);
            if (r.Status >= 200 && r.Status < 300)
            {
                JsonElement root;
                try
                {
                    using var doc = JsonDocument.Parse(r.Body);
                    root = doc.RootElement.Clone();
                }
                catch (JsonException e)
                {
                    root = default;
                    last = new MutexdProtocolException($"{method} {t.Server.Url}{path}: answer {r.Status} is not JSON", e);
                }
                if (root.ValueKind != JsonValueKind.Object)
                {
                    last ??= new MutexdProtocolException($"{method} {t.Server.Url}{path}: answer {r.Status} is not a JSON object");
                    t.Server.Http = NewHttp();
                    continue;
                }
                Served(t.Index, r.ServedBy);
                if (resource != null)
                {
                    Answered(t.Server, r, resource);
                }
                return new Answer(r.Status, root, r.RequestId, r.ServedBy, r.Partition, r.Sent);
            }
            var err = ApiError(method, t.Server.Url + path, r);
            if (r.Status == 503)
            {
                last = err;
                var ra = err.RetryAfter ?? TimeSpan.Zero;
                if (pause == null || ra < pause)
                {
                    pause = ra;
                }
                if (resource != null)
                {
                    Failed(r.Partition != null);
                }
                continue;
            }
            Served(t.Index, r.ServedBy);
            if (resource != null)
            {
                Answered(t.Server, r, resource);
            }
            throw err;
        }
    }

    private sealed record Raw(int Status, byte[] Body, string? RequestId, string? ServedBy, string? Partition, string? RetryAfter, long Sent);

    private static string? Header(HttpResponseMessage m, string name) =>
        m.Headers.TryGetValues(name, out var v) ? v.FirstOrDefault() : null;

    private async ValueTask<Raw> ExchangeAsync(Server s, string method, string path, byte[]? body, string? contentType,
        TimeSpan limit, bool async, CancellationToken ct)
    {
        var target = s.Url + path;
        if (limit < TimeSpan.FromMilliseconds(1))
        {
            limit = TimeSpan.FromMilliseconds(1);
        }
        using var req = new HttpRequestMessage(new HttpMethod(method), target);
        req.Headers.Accept.Add(new MediaTypeWithQualityHeaderValue("application/json"));
        req.Headers.UserAgent.Add(new ProductInfoHeaderValue("mutexd-dotnet", Version));
        if (Token != null)
        {
            req.Headers.Authorization = new AuthenticationHeaderValue("Bearer", Token);
        }
        if (body != null)
        {
            req.Content = new ByteArrayContent(body);
            if (contentType != null)
            {
                req.Content.Headers.ContentType = MediaTypeHeaderValue.Parse(contentType);
            }
        }
        var http = s.Http;
        using var cts = CancellationTokenSource.CreateLinkedTokenSource(ct);
        cts.CancelAfter(limit);
        long sent = Now;
        try
        {
            using var resp = async
                ? await http.SendAsync(req, HttpCompletionOption.ResponseHeadersRead, cts.Token).ConfigureAwait(false)
                : http.Send(req, HttpCompletionOption.ResponseHeadersRead, cts.Token);
            byte[] bytes;
            if (async)
            {
                bytes = await resp.Content.ReadAsByteArrayAsync(cts.Token).ConfigureAwait(false);
            }
            else
            {
                using var st = resp.Content.ReadAsStream(cts.Token);
                using var ms = new MemoryStream();
                st.CopyTo(ms);
                bytes = ms.ToArray();
            }
            var ra = resp.Headers.RetryAfter?.Delta is TimeSpan d ? ((long)d.TotalSeconds).ToString(CultureInfo.InvariantCulture) : null;
            return new Raw((int)resp.StatusCode, bytes, Header(resp, "X-Request-Id"), Header(resp, "Mutexd-Served-By"),
                Header(resp, "Mutexd-Partition"), ra, sent);
        }
        catch (OperationCanceledException) when (ct.IsCancellationRequested)
        {
            throw;
        }
        catch (OperationCanceledException e)
        {
            // The connection may lead nowhere (a paused or moved server): connect afresh next time.
            if (s.Http == http)
            {
                s.Http = NewHttp();
            }
            throw new MutexdTimeoutException($"{method} {target}: no answer within {(long)limit.TotalMilliseconds} ms", e);
        }
        catch (Exception e) when (e is HttpRequestException || e is IOException)
        {
            if (s.Http == http)
            {
                s.Http = NewHttp();
            }
            throw new MutexdTransportException($"{method} {target}: {e.Message}", e);
        }
    }

    private static MutexdException ApiError(string method, string target, Raw r)
    {
        TimeSpan? retryAfter = long.TryParse(r.RetryAfter, NumberStyles.Integer, CultureInfo.InvariantCulture, out var sec)
            ? TimeSpan.FromSeconds(sec)
            : null;
        string? code = null;
        string message = $"HTTP {r.Status}";
        JsonElement? error = null;
        try
        {
            using var doc = JsonDocument.Parse(r.Body);
            if (doc.RootElement.ValueKind == JsonValueKind.Object && doc.RootElement.TryGetProperty("error", out var e) &&
                e.ValueKind == JsonValueKind.Object)
            {
                error = e.Clone();
                code = Json.Str(e, "code");
                message = Json.Str(e, "message") ?? message;
            }
        }
        catch (JsonException)
        {
            // not the API's error body: the class of its status
        }
        return MutexdException.FromAnswer(r.Status, code, $"{method} {target}: {r.Status} {code}: {message}", retryAfter,
            r.RequestId, r.ServedBy, error);
    }

    /// <summary>Notes who answered: asked first next time, or the active server its answer names, when that is one of ours.</summary>
    private void Served(int i, string? servedBy)
    {
        if (servedBy != null && KeyOf(servedBy) is string key)
        {
            for (int j = 0; j < _servers.Count; j++)
            {
                if (_servers[j].Key == key)
                {
                    i = j;
                    break;
                }
            }
        }
        if (i >= 0)
        {
            Volatile.Write(ref _current, i);
        }
    }

    // ---- routing by the partition map --------------------------------------------------------

    private List<Target> Targets(string? resource)
    {
        int n = _servers.Count;
        int first = Volatile.Read(ref _current);
        var owner = OwnerOf(resource);
        var list = new List<Target>(n + 1);
        if (owner != null)
        {
            list.Add(new Target(owner, _servers.IndexOf(owner)));
        }
        for (int a = 0; a < n; a++)
        {
            var s = _servers[(first + a) % n];
            if (s != owner)
            {
                list.Add(new Target(s, (first + a) % n));
            }
        }
        return list;
    }

    private Server? OwnerOf(string? resource)
    {
        if (resource == null)
        {
            return null;
        }
        lock (_mapLock)
        {
            return _mapState == MapState.Partitioned && _owners != null ? _owners[Partitions.Of(resource, _owners.Length)] : null;
        }
    }

    /// <summary>The owner URL of each partition as last read, or null while nothing is routed.</summary>
    internal IReadOnlyList<string?>? PartitionOwners()
    {
        lock (_mapLock)
        {
            return _mapState == MapState.Partitioned && _owners != null ? _owners.Select(o => o?.Url).ToList() : null;
        }
    }

    /// <summary>
    /// Looks at an answer about a resource from <paramref name="s"/>: the first sign of a
    /// partitioned group has the map read; so has an answer served by another server than
    /// <paramref name="s"/> (the partition moved), or one about a partition the map names no
    /// owner for (it was read during a move).
    /// </summary>
    private void Answered(Server s, Raw r, string resource)
    {
        if (r.Partition == null)
        {
            return;
        }
        bool relearn;
        lock (_mapLock)
        {
            relearn = _mapState == MapState.Unknown ||
                (_mapState == MapState.Partitioned &&
                 ((r.ServedBy != null && KeyOf(r.ServedBy) != s.Key) || _owners![Partitions.Of(resource, _owners.Length)] == null));
        }
        if (relearn)
        {
            Relearn();
        }
    }

    private void Failed(bool partitioned)
    {
        MapState state;
        lock (_mapLock)
        {
            state = _mapState;
        }
        if (state == MapState.Partitioned || (state == MapState.Unknown && partitioned))
        {
            Relearn();
        }
    }

    private void Relearn()
    {
        lock (_mapLock)
        {
            var now = Now;
            if (_fetching || (_fetchedAt != 0 && now - _fetchedAt < Ticks(RelearnInterval)))
            {
                return;
            }
            _fetching = true;
            _fetchedAt = now;
        }
        _ = Task.Run(LearnAsync);
    }

    private async Task LearnAsync()
    {
        MutexdServerGroup? g = null;
        try
        {
            g = await ServersAsync().ConfigureAwait(false);
        }
        catch (MutexdException)
        {
            // kept as it was: the next surprise reads it again
        }
        catch (ObjectDisposedException)
        {
        }
        lock (_mapLock)
        {
            _fetching = false;
            if (g == null)
            {
                return;
            }
            if (g.PartitionCount <= 1)
            {
                _mapState = MapState.Flat;
                _owners = null;
                return;
            }
            var owners = new Server?[g.PartitionOwners.Count];
            for (int i = 0; i < owners.Length; i++)
            {
                owners[i] = g.PartitionOwners[i] is string u ? ServerFor(u) : null;
            }
            _owners = owners;
            _mapState = MapState.Partitioned;
        }
    }

    private Server? ServerFor(string raw)
    {
        var key = KeyOf(raw);
        if (key == null)
        {
            return null;
        }
        foreach (var s in _servers)
        {
            if (s.Key == key)
            {
                return s;
            }
        }
        if (!_others.TryGetValue(key, out var o))
        {
            o = NewServer(raw);
            if (o != null)
            {
                _others[key] = o;
            }
        }
        return o;
    }

    // ---- requests ----------------------------------------------------------------------------

    private static readonly byte[] Empty = Encoding.UTF8.GetBytes("{}");

    /// <summary>Percent-encodes all but the characters the API allows unencoded in a path (a hash tag's braces too).</summary>
    internal static string Escape(string s)
    {
        var b = new StringBuilder();
        foreach (var by in Encoding.UTF8.GetBytes(s))
        {
            char c = (char)by;
            if (c is >= 'a' and <= 'z' or >= 'A' and <= 'Z' or >= '0' and <= '9' || "-._~/:@".IndexOf(c) >= 0)
            {
                b.Append(c);
            }
            else
            {
                b.Append('%').Append(by.ToString("X2", CultureInfo.InvariantCulture));
            }
        }
        return b.ToString();
    }

    private static string ResourcePath(string resource)
    {
        if (string.IsNullOrEmpty(resource))
        {
            throw new ArgumentException("the resource must not be empty", nameof(resource));
        }
        return "/v1/resources/" + Escape(resource);
    }

    private static string Query(params (string Name, string? Value)[] pairs)
    {
        var parts = pairs.Where(p => p.Value != null).Select(p => p.Name + "=" + Uri.EscapeDataString(p.Value!)).ToList();
        return parts.Count == 0 ? "" : "?" + string.Join("&", parts);
    }

    private static string Ms(TimeSpan t) => ((long)Math.Ceiling(t.TotalMilliseconds)).ToString(CultureInfo.InvariantCulture);

    private static byte[] Body(JsonObject o) => Encoding.UTF8.GetBytes(o.ToJsonString());

    internal ValueTask<Answer> PostAsync(string? resource, string path, JsonObject? body, TimeSpan? extra, long deadline, bool async,
        CancellationToken ct) =>
        SendAsync(resource, "POST", path, body == null ? Empty : Body(body), "application/json",
            extra is TimeSpan e ? Timeout + e : Timeout, deadline, async, ct);

    internal ValueTask<Answer> GetAsync(string? resource, string path, TimeSpan? extra, bool async, CancellationToken ct) =>
        SendAsync(resource, "GET", path, null, null, extra is TimeSpan e ? Timeout + e : Timeout, 0, async, ct);

    private static T Sync<T>(ValueTask<T> t) => t.IsCompleted ? t.Result : t.AsTask().GetAwaiter().GetResult();

    private JsonObject AcquireBody(AcquireOptions o, IReadOnlyList<string>? resources)
    {
        var b = new JsonObject();
        if (resources != null)
        {
            b["resources"] = new JsonArray(resources.Select(r => (JsonNode?)JsonValue.Create(r)).ToArray());
        }
        b["owner"] = o.Owner ?? Owner;
        b["lease_id"] = o.LeaseId ?? NewLeaseId();
        if (o.Ttl is TimeSpan ttl)
        {
            b["ttl_ms"] = (long)ttl.TotalMilliseconds;
        }
        if (o.Wait is TimeSpan w && w > TimeSpan.Zero)
        {
            b["wait_ms"] = (long)w.TotalMilliseconds;
        }
        if (o.Metadata != null)
        {
            b["metadata"] = o.Metadata.DeepClone();
        }
        if (o.Limit is int l)
        {
            b["limit"] = l;
        }
        if (o.Shared)
        {
            b["shared"] = true;
        }
        if (o.LockDelay is TimeSpan d)
        {
            b["lock_delay_ms"] = (long)d.TotalMilliseconds;
        }
        return b;
    }

    /// <summary>Asks for a lease (<c>POST .../acquire</c>); with <see cref="AcquireOptions.Wait"/> it waits in the FIFO queue.</summary>
    public virtual MutexdGrant Acquire(string resource, AcquireOptions? options = null, CancellationToken cancellationToken = default) =>
        Sync(AcquireCore(resource, options ?? new AcquireOptions(), false, cancellationToken));

    /// <inheritdoc cref="Acquire"/>
    public virtual Task<MutexdGrant> AcquireAsync(string resource, AcquireOptions? options = null, CancellationToken cancellationToken = default) =>
        AcquireCore(resource, options ?? new AcquireOptions(), true, cancellationToken).AsTask();

    internal async ValueTask<MutexdGrant> AcquireCore(string resource, AcquireOptions o, bool async, CancellationToken ct)
    {
        var a = await PostAsync(resource, ResourcePath(resource) + "/acquire", AcquireBody(o, null), o.Wait, 0, async, ct).ConfigureAwait(false);
        return MutexdGrant.From(a.Body, a.Sent, a.ServedBy);
    }

    /// <summary>Renews a lease (<c>POST .../renew</c>); <see cref="LeaseLostException"/> when it is no longer the resource's.</summary>
    public virtual MutexdGrant Renew(string resource, string leaseId, TimeSpan? ttl = null, JsonObject? metadata = null,
        CancellationToken cancellationToken = default) =>
        Sync(RenewCore(resource, leaseId, ttl, metadata, null, 0, false, cancellationToken));

    /// <inheritdoc cref="Renew"/>
    public virtual Task<MutexdGrant> RenewAsync(string resource, string leaseId, TimeSpan? ttl = null, JsonObject? metadata = null,
        CancellationToken cancellationToken = default) =>
        RenewCore(resource, leaseId, ttl, metadata, null, 0, true, cancellationToken).AsTask();

    private static JsonObject RenewBody(IReadOnlyList<string>? resources, string leaseId, TimeSpan? ttl, JsonObject? metadata)
    {
        var b = new JsonObject();
        if (resources != null)
        {
            b["resources"] = new JsonArray(resources.Select(r => (JsonNode?)JsonValue.Create(r)).ToArray());
        }
        b["lease_id"] = leaseId;
        if (ttl is TimeSpan t)
        {
            b["ttl_ms"] = (long)t.TotalMilliseconds;
        }
        if (metadata != null)
        {
            b["metadata"] = metadata.DeepClone();
        }
        return b;
    }

    internal async ValueTask<MutexdGrant> RenewCore(string resource, string leaseId, TimeSpan? ttl, JsonObject? metadata,
        TimeSpan? limit, long deadline, bool async, CancellationToken ct)
    {
        var a = await SendAsync(resource, "POST", ResourcePath(resource) + "/renew", Body(RenewBody(null, leaseId, ttl, metadata)),
            "application/json", limit ?? Timeout, deadline, async, ct).ConfigureAwait(false);
        return MutexdGrant.From(a.Body, a.Sent, a.ServedBy);
    }

    /// <summary>Releases a lease (<c>POST .../release</c>); the next waiter is granted at once.</summary>
    public virtual void Release(string resource, string leaseId, CancellationToken cancellationToken = default) =>
        Sync(ReleaseCore(resource, leaseId, false, cancellationToken));

    /// <inheritdoc cref="Release"/>
    public virtual Task ReleaseAsync(string resource, string leaseId, CancellationToken cancellationToken = default) =>
        ReleaseCore(resource, leaseId, true, cancellationToken).AsTask();

    internal async ValueTask<bool> ReleaseCore(string resource, string leaseId, bool async, CancellationToken ct)
    {
        await PostAsync(resource, ResourcePath(resource) + "/release", new JsonObject { ["lease_id"] = leaseId }, null, 0, async, ct)
            .ConfigureAwait(false);
        return true;
    }

    /// <summary>Ends every lease of the resource, or only <paramref name="leaseId"/>'s (<c>POST .../break</c>, admin scope); whether one was ended.</summary>
    public virtual bool Break(string resource, string? reason = null, string? leaseId = null, CancellationToken cancellationToken = default) =>
        Sync(BreakCore(resource, reason, leaseId, false, cancellationToken));

    /// <inheritdoc cref="Break"/>
    public virtual Task<bool> BreakAsync(string resource, string? reason = null, string? leaseId = null, CancellationToken cancellationToken = default) =>
        BreakCore(resource, reason, leaseId, true, cancellationToken).AsTask();

    private async ValueTask<bool> BreakCore(string resource, string? reason, string? leaseId, bool async, CancellationToken ct)
    {
        var b = new JsonObject();
        if (reason != null)
        {
            b["reason"] = reason;
        }
        if (leaseId != null)
        {
            b["lease_id"] = leaseId;
        }
        var a = await PostAsync(resource, ResourcePath(resource) + "/break", b, null, 0, async, ct).ConfigureAwait(false);
        return Json.Bool(a.Body, "broken") ?? false;
    }

    /// <summary>Whether a lease with this fencing token holds the resource now (<c>POST .../check</c>).</summary>
    public virtual MutexdCheck Check(string resource, ulong fencingToken, CancellationToken cancellationToken = default) =>
        Sync(CheckCore(resource, fencingToken, false, cancellationToken));

    /// <inheritdoc cref="Check"/>
    public virtual Task<MutexdCheck> CheckAsync(string resource, ulong fencingToken, CancellationToken cancellationToken = default) =>
        CheckCore(resource, fencingToken, true, cancellationToken).AsTask();

    private async ValueTask<MutexdCheck> CheckCore(string resource, ulong token, bool async, CancellationToken ct)
    {
        var a = await PostAsync(resource, ResourcePath(resource) + "/check", new JsonObject { ["fencing_token"] = token }, null, 0, async, ct)
            .ConfigureAwait(false);
        return new MutexdCheck(Json.Str(a.Body, "resource") ?? resource, Json.ULong(a.Body, "fencing_token") ?? token,
            Json.Bool(a.Body, "current") ?? false, Json.ULong(a.Body, "newest_token") ?? 0);
    }

    /// <summary>A resource's state (<c>GET /v1/resources/{resource}</c>).</summary>
    public virtual MutexdResourceState Get(string resource, CancellationToken cancellationToken = default) =>
        Sync(WatchCore(resource, default, null, false, cancellationToken));

    /// <inheritdoc cref="Get"/>
    public virtual Task<MutexdResourceState> GetAsync(string resource, CancellationToken cancellationToken = default) =>
        WatchCore(resource, default, null, true, cancellationToken).AsTask();

    /// <summary>A resource's state once its index differs from <paramref name="index"/>, or after <paramref name="wait"/> unchanged.</summary>
    public virtual MutexdResourceState Watch(string resource, MutexdPosition index, TimeSpan wait, CancellationToken cancellationToken = default) =>
        Sync(WatchCore(resource, index, wait, false, cancellationToken));

    /// <inheritdoc cref="Watch"/>
    public virtual Task<MutexdResourceState> WatchAsync(string resource, MutexdPosition index, TimeSpan wait, CancellationToken cancellationToken = default) =>
        WatchCore(resource, index, wait, true, cancellationToken).AsTask();

    private async ValueTask<MutexdResourceState> WatchCore(string resource, MutexdPosition index, TimeSpan? wait, bool async, CancellationToken ct)
    {
        var q = wait is TimeSpan w ? Query(("index", index.Value ?? "0"), ("wait_ms", Ms(w))) : "";
        var a = await GetAsync(resource, ResourcePath(resource) + q, wait, async, ct).ConfigureAwait(false);
        return MutexdResourceState.From(a.Body);
    }

    /// <summary>A page of held resources whose names start with <paramref name="prefix"/>.</summary>
    public virtual MutexdResourceList List(string? prefix = null, int? limit = null, string? cursor = null, CancellationToken cancellationToken = default) =>
        Sync(ListCore(prefix, limit, cursor, default, null, false, cancellationToken));

    /// <inheritdoc cref="List"/>
    public virtual Task<MutexdResourceList> ListAsync(string? prefix = null, int? limit = null, string? cursor = null, CancellationToken cancellationToken = default) =>
        ListCore(prefix, limit, cursor, default, null, true, cancellationToken).AsTask();

    /// <summary>A list watch: the list once a resource under <paramref name="prefix"/> changes after <paramref name="index"/>, or after <paramref name="wait"/>.</summary>
    public virtual MutexdResourceList ListWatch(string? prefix, MutexdPosition index, TimeSpan wait, int? limit = null, string? cursor = null,
        CancellationToken cancellationToken = default) =>
        Sync(ListCore(prefix, limit, cursor, index, wait, false, cancellationToken));

    /// <inheritdoc cref="ListWatch"/>
    public virtual Task<MutexdResourceList> ListWatchAsync(string? prefix, MutexdPosition index, TimeSpan wait, int? limit = null, string? cursor = null,
        CancellationToken cancellationToken = default) =>
        ListCore(prefix, limit, cursor, index, wait, true, cancellationToken).AsTask();

    private async ValueTask<MutexdResourceList> ListCore(string? prefix, int? limit, string? cursor, MutexdPosition index, TimeSpan? wait,
        bool async, CancellationToken ct)
    {
        var q = Query(("prefix", prefix), ("limit", limit?.ToString(CultureInfo.InvariantCulture)), ("cursor", cursor),
            ("index", wait != null ? index.Value ?? "0" : null), ("wait_ms", wait is TimeSpan w ? Ms(w) : null));
        var a = await GetAsync(null, "/v1/resources" + q, wait, async, ct).ConfigureAwait(false);
        return MutexdResourceList.From(a.Body);
    }

    /// <summary>The recent changes after <paramref name="after"/> (<c>GET /v1/events</c>); with <paramref name="wait"/>, held until there is one.</summary>
    public virtual MutexdEventPage Events(MutexdPosition after = default, string? prefix = null, int? limit = null, TimeSpan? wait = null,
        CancellationToken cancellationToken = default) =>
        Sync(EventsCore(after, prefix, limit, wait, false, cancellationToken));

    /// <inheritdoc cref="Events"/>
    public virtual Task<MutexdEventPage> EventsAsync(MutexdPosition after = default, string? prefix = null, int? limit = null, TimeSpan? wait = null,
        CancellationToken cancellationToken = default) =>
        EventsCore(after, prefix, limit, wait, true, cancellationToken).AsTask();

    private async ValueTask<MutexdEventPage> EventsCore(MutexdPosition after, string? prefix, int? limit, TimeSpan? wait, bool async, CancellationToken ct)
    {
        var q = Query(("after", after.IsSet ? after.Value : null), ("prefix", prefix), ("limit", limit?.ToString(CultureInfo.InvariantCulture)),
            ("wait_ms", wait is TimeSpan w ? Ms(w) : null));
        var a = await GetAsync(null, "/v1/events" + q, wait, async, ct).ConfigureAwait(false);
        return MutexdEventPage.From(a.Body);
    }

    /// <summary>The server group as the server asked sees it (<c>GET /v1/servers</c>).</summary>
    public virtual MutexdServerGroup Servers(CancellationToken cancellationToken = default) =>
        Sync(ServersCore(false, cancellationToken));

    /// <inheritdoc cref="Servers"/>
    public virtual Task<MutexdServerGroup> ServersAsync(CancellationToken cancellationToken = default) =>
        ServersCore(true, cancellationToken).AsTask();

    private async ValueTask<MutexdServerGroup> ServersCore(bool async, CancellationToken ct)
    {
        var a = await GetAsync(null, "/v1/servers", null, async, ct).ConfigureAwait(false);
        return MutexdServerGroup.From(a.Body);
    }

    /// <summary>Who the token is, and its scopes (<c>GET /v1/whoami</c>).</summary>
    public virtual MutexdWhoami Whoami(CancellationToken cancellationToken = default) => Sync(WhoamiCore(false, cancellationToken));

    /// <inheritdoc cref="Whoami"/>
    public virtual Task<MutexdWhoami> WhoamiAsync(CancellationToken cancellationToken = default) => WhoamiCore(true, cancellationToken).AsTask();

    private async ValueTask<MutexdWhoami> WhoamiCore(bool async, CancellationToken ct)
    {
        var a = await GetAsync(null, "/v1/whoami", null, async, ct).ConfigureAwait(false);
        var scopes = new List<string>();
        if (a.Body.TryGetProperty("scopes", out var s) && s.ValueKind == JsonValueKind.Array)
        {
            scopes.AddRange(s.EnumerateArray().Where(x => x.ValueKind == JsonValueKind.String).Select(x => x.GetString()!));
        }
        return new MutexdWhoami(Json.Str(a.Body, "name"), scopes);
    }

    /// <summary>Whether the server asked first is ready (<c>GET /readyz</c> answered 200).</summary>
    public virtual async Task<bool> IsReadyAsync(CancellationToken cancellationToken = default)
    {
        try
        {
            await SendAsync(null, "GET", "/readyz", null, null, Timeout, 0, true, cancellationToken).ConfigureAwait(false);
            return true;
        }
        catch (MutexdException)
        {
            return false;
        }
    }

    // ---- several resources at once ------------------------------------------------------------

    private static IReadOnlyList<string> Names(IEnumerable<string> resources)
    {
        var list = resources.ToList();
        if (list.Count < 2 || list.Count > 64 || list.Distinct(StringComparer.Ordinal).Count() != list.Count)
        {
            throw new ArgumentException("a set names 2 to 64 distinct resources", nameof(resources));
        }
        return list;
    }

    private static IReadOnlyList<MutexdGrant> Grants(Answer a)
    {
        var list = new List<MutexdGrant>();
        if (a.Body.TryGetProperty("leases", out var ls) && ls.ValueKind == JsonValueKind.Array)
        {
            foreach (var l in ls.EnumerateArray())
            {
                list.Add(MutexdGrant.From(l, a.Sent, a.ServedBy));
            }
        }
        return list;
    }

    /// <summary>A lease on every resource named, or on none (<c>POST /v1/acquire</c>).</summary>
    public virtual IReadOnlyList<MutexdGrant> AcquireMany(IEnumerable<string> resources, AcquireOptions? options = null,
        CancellationToken cancellationToken = default) =>
        Sync(AcquireManyCore(Names(resources), options ?? new AcquireOptions(), false, cancellationToken));

    /// <inheritdoc cref="AcquireMany"/>
    public virtual Task<IReadOnlyList<MutexdGrant>> AcquireManyAsync(IEnumerable<string> resources, AcquireOptions? options = null,
        CancellationToken cancellationToken = default) =>
        AcquireManyCore(Names(resources), options ?? new AcquireOptions(), true, cancellationToken).AsTask();

    internal async ValueTask<IReadOnlyList<MutexdGrant>> AcquireManyCore(IReadOnlyList<string> names, AcquireOptions o, bool async, CancellationToken ct)
    {
        var a = await PostAsync(names[0], "/v1/acquire", AcquireBody(o, names), o.Wait, 0, async, ct).ConfigureAwait(false);
        return Grants(a);
    }

    /// <summary>Renews every lease of a set at once (<c>POST /v1/renew</c>).</summary>
    public virtual IReadOnlyList<MutexdGrant> RenewMany(IEnumerable<string> resources, string leaseId, TimeSpan? ttl = null,
        CancellationToken cancellationToken = default) =>
        Sync(RenewManyCore(Names(resources), leaseId, ttl, null, 0, false, cancellationToken));

    /// <inheritdoc cref="RenewMany"/>
    public virtual Task<IReadOnlyList<MutexdGrant>> RenewManyAsync(IEnumerable<string> resources, string leaseId, TimeSpan? ttl = null,
        CancellationToken cancellationToken = default) =>
        RenewManyCore(Names(resources), leaseId, ttl, null, 0, true, cancellationToken).AsTask();

    internal async ValueTask<IReadOnlyList<MutexdGrant>> RenewManyCore(IReadOnlyList<string> names, string leaseId, TimeSpan? ttl,
        TimeSpan? limit, long deadline, bool async, CancellationToken ct)
    {
        var a = await SendAsync(names[0], "POST", "/v1/renew", Body(RenewBody(names, leaseId, ttl, null)), "application/json",
            limit ?? Timeout, deadline, async, ct).ConfigureAwait(false);
        return Grants(a);
    }

    /// <summary>Releases every lease of a set at once (<c>POST /v1/release</c>).</summary>
    public virtual void ReleaseMany(IEnumerable<string> resources, string leaseId, CancellationToken cancellationToken = default) =>
        Sync(ReleaseManyCore(Names(resources), leaseId, false, cancellationToken));

    /// <inheritdoc cref="ReleaseMany"/>
    public virtual Task ReleaseManyAsync(IEnumerable<string> resources, string leaseId, CancellationToken cancellationToken = default) =>
        ReleaseManyCore(Names(resources), leaseId, true, cancellationToken).AsTask();

    internal async ValueTask<bool> ReleaseManyCore(IReadOnlyList<string> names, string leaseId, bool async, CancellationToken ct)
    {
        await PostAsync(names[0], "/v1/release", RenewBody(names, leaseId, null, null), null, 0, async, ct).ConfigureAwait(false);
        return true;
    }

    // ---- watches as streams -------------------------------------------------------------------

    private static readonly TimeSpan StreamWait = TimeSpan.FromSeconds(30);

    /// <summary>The resource's state now, then each time it changes, until cancelled. Retryable errors are ridden out.</summary>
    public virtual async IAsyncEnumerable<MutexdResourceState> WatchChangesAsync(string resource,
        [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        MutexdPosition index = default;
        bool first = true;
        while (!cancellationToken.IsCancellationRequested)
        {
            MutexdResourceState? s = null;
            try
            {
                s = first ? await GetAsync(resource, cancellationToken).ConfigureAwait(false)
                    : await WatchAsync(resource, index, StreamWait, cancellationToken).ConfigureAwait(false);
            }
            catch (MutexdException e) when (e.IsRetryable)
            {
                await Task.Delay(TimeSpan.FromSeconds(1), cancellationToken).ConfigureAwait(false);
                continue;
            }
            if (first || s.Index != index)
            {
                first = false;
                index = s.Index;
                yield return s;
            }
        }
    }

    /// <summary>The list under <paramref name="prefix"/> now, then each time a resource under it changes, until cancelled.</summary>
    public virtual async IAsyncEnumerable<MutexdResourceList> WatchListAsync(string? prefix = null,
        [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        MutexdPosition index = default;
        bool first = true;
        while (!cancellationToken.IsCancellationRequested)
        {
            MutexdResourceList l;
            try
            {
                l = first ? await ListAsync(prefix, null, null, cancellationToken).ConfigureAwait(false)
                    : await ListWatchAsync(prefix, index, StreamWait, null, null, cancellationToken).ConfigureAwait(false);
            }
            catch (MutexdException e) when (e.IsRetryable)
            {
                await Task.Delay(TimeSpan.FromSeconds(1), cancellationToken).ConfigureAwait(false);
                continue;
            }
            if (first || l.Index != index)
            {
                first = false;
                index = l.Index;
                yield return l;
            }
        }
    }

    /// <summary>Every event after <paramref name="after"/> (default: from the oldest kept), as they happen, until cancelled.</summary>
    public virtual async IAsyncEnumerable<MutexdEvent> EventStreamAsync(string? prefix = null, MutexdPosition after = default,
        [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        while (!cancellationToken.IsCancellationRequested)
        {
            MutexdEventPage p;
            try
            {
                p = await EventsAsync(after, prefix, null, StreamWait, cancellationToken).ConfigureAwait(false);
            }
            catch (MutexdException e) when (e.IsRetryable)
            {
                await Task.Delay(TimeSpan.FromSeconds(1), cancellationToken).ConfigureAwait(false);
                continue;
            }
            foreach (var e in p.Events)
            {
                yield return e;
            }
            if (p.Next.IsSet)
            {
                after = p.Next;
            }
        }
    }
}
