using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace Mutexd;

/// <summary>
/// What a lease and a set of leases share: renewal in the background every third of the TTL,
/// retried every tenth of it (at most every second) until the deadline when a renewal fails,
/// and a loss signalled the moment it is known (<see cref="LostToken"/>): a renewal answered
/// <c>lease_lost</c>, or the deadline (on this process's monotonic clock, less a safety
/// margin of a fiftieth of the TTL, at most 1 s) passing with no renewal succeeded.
/// </summary>
public abstract class MutexdHolding : IAsyncDisposable, IDisposable
{
    private readonly object _lock = new();
    private readonly CancellationTokenSource _lost = new();
    private readonly CancellationTokenSource _stop = new();
    private readonly TaskCompletionSource<MutexdException> _lostTask = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly long _ttl;
    private readonly long _margin;
    private long _deadline;
    private long _base;
    private MutexdException? _error;
    private MutexdException? _lastError;
    private bool _inflight;
    private bool _released;
    private int _renewals;
    private Timer? _timer;
    private Task? _renewer;
    private int _disposed;

    private protected MutexdHolding(MutexdClient client, IReadOnlyList<MutexdGrant> grants, string label)
    {
        Client = client;
        Label = label;
        GrantsNow = grants;
        var ttl = grants.Min(g => g.Ttl);
        _ttl = Ticks(ttl);
        _margin = Ticks(SafetyMargin(ttl));
        var first = grants.MinBy(g => g.DeadlineTimestamp)!;
        _deadline = first.DeadlineTimestamp - _margin;
        _base = first.DeadlineTimestamp - Ticks(first.ExpiresIn);
    }

    private protected MutexdClient Client { get; }

    private protected string Label { get; }

    private protected IReadOnlyList<MutexdGrant> GrantsNow { get; private set; }

    /// <summary>The lease id (one for every lease of a set).</summary>
    public string LeaseId => GrantsNow[0].LeaseId;

    /// <summary>Cancelled the moment the lease is known lost. Never cancelled by a release.</summary>
    public CancellationToken LostToken => _lost.Token;

    /// <summary>Completes with the reason when the lease is lost (never on a release).</summary>
    public Task<MutexdException> Lost => _lostTask.Task;

    /// <summary>Whether the lease still holds: not lost, not released, and its deadline not passed on this process's clock.</summary>
    public bool IsHeld
    {
        get
        {
            ExpireIfDue();
            lock (_lock)
            {
                return _error == null && !_released;
            }
        }
    }

    /// <summary>Why the lease was lost, or null.</summary>
    public MutexdException? Error
    {
        get
        {
            ExpireIfDue();
            lock (_lock)
            {
                return _error;
            }
        }
    }

    /// <summary>The last renewal's failure while the lease still held, or null after a success.</summary>
    public MutexdException? LastError
    {
        get
        {
            lock (_lock)
            {
                return _lastError;
            }
        }
    }

    /// <summary>How many renewals succeeded.</summary>
    public int Renewals
    {
        get
        {
            lock (_lock)
            {
                return _renewals;
            }
        }
    }

    /// <summary>The time left before the deadline (zero when not held).</summary>
    public TimeSpan Remaining
    {
        get
        {
            if (!IsHeld)
            {
                return TimeSpan.Zero;
            }
            lock (_lock)
            {
                var left = _deadline - Stopwatch.GetTimestamp();
                return left > 0 ? TimeSpan.FromSeconds((double)left / Stopwatch.Frequency) : TimeSpan.Zero;
            }
        }
    }

    /// <summary>Throws the loss (<see cref="LeaseLostException"/> or <see cref="LeaseExpiredException"/>), or <see cref="ObjectDisposedException"/> after a release; call it right before each step of your work.</summary>
    public void ThrowIfLost()
    {
        ExpireIfDue();
        lock (_lock)
        {
            if (_error != null)
            {
                throw _error;
            }
            if (_released)
            {
                throw new ObjectDisposedException(Label, $"the {Label} was released");
            }
        }
    }

    /// <summary>The safety margin taken off every deadline: a fiftieth of the TTL, at most 1 s.</summary>
    public static TimeSpan SafetyMargin(TimeSpan ttl)
    {
        var m = ttl / 50;
        return m > TimeSpan.FromSeconds(1) ? TimeSpan.FromSeconds(1) : m;
    }

    private static long Ticks(TimeSpan t) => (long)(t.TotalSeconds * Stopwatch.Frequency);

    private static TimeSpan Span(long ticks) => TimeSpan.FromSeconds(Math.Max(0, (double)ticks / Stopwatch.Frequency));

    internal void Start()
    {
        lock (_lock)
        {
            _timer = new Timer(_ => OnTimer(), null, Due(_deadline), System.Threading.Timeout.InfiniteTimeSpan);
        }
        _renewer = Task.Run(RenewLoop);
    }

    private protected abstract ValueTask<IReadOnlyList<MutexdGrant>> RenewOnce(TimeSpan limit, long deadline, CancellationToken ct);

    private protected abstract ValueTask ReleaseOnce(bool async, CancellationToken ct);

    /// <summary>Whether a release is sent after a <c>lease_lost</c> too: a set still holds its other resources.</summary>
    private protected virtual bool ReleaseWhenLost => false;

    /// <summary>The time to <paramref name="deadline"/> in whole milliseconds, rounded up: a timer rounds down, and must not fire before it.</summary>
    private static TimeSpan Due(long deadline)
    {
        var left = deadline - Stopwatch.GetTimestamp();
        return left <= 0 ? TimeSpan.Zero : TimeSpan.FromMilliseconds(Math.Ceiling(left * 1000.0 / Stopwatch.Frequency) + 1);
    }

    /// <summary>The deadline timer: the loss when it is due, else armed again for what is left.</summary>
    private void OnTimer()
    {
        ExpireIfDue();
        lock (_lock)
        {
            if (_error == null && !_released)
            {
                _timer?.Change(Due(_deadline), System.Threading.Timeout.InfiniteTimeSpan);
            }
        }
    }

    private void ExpireIfDue()
    {
        MutexdException e;
        lock (_lock)
        {
            if (_error != null || _released || Stopwatch.GetTimestamp() < _deadline)
            {
                return;
            }
            string why = _lastError != null ? "last error: " + _lastError.Message
                : _inflight ? "a renewal had no answer yet"
                : "no renewal was tried since the last one succeeded: the process did not run in time (paused, or starved)";
            e = new LeaseExpiredException($"lease expired: no renewal of the {Label} succeeded before its deadline ({why})", _lastError);
            _error = e;
        }
        Signal(e);
    }

    private void Lose(MutexdException e)
    {
        lock (_lock)
        {
            if (_error != null || _released)
            {
                return;
            }
            _error = e;
        }
        Signal(e);
    }

    private void Signal(MutexdException e)
    {
        _timer?.Dispose();
        _stop.Cancel();
        _lostTask.TrySetResult(e);
        try
        {
            _lost.Cancel();
        }
        catch (AggregateException)
        {
            // a callback of the caller's threw: the loss is signalled all the same
        }
    }

    private async Task RenewLoop()
    {
        long period = _ttl / 3;
        long retry = Math.Max(Ticks(TimeSpan.FromMilliseconds(20)), Math.Min(_ttl / 10, Ticks(TimeSpan.FromSeconds(1))));
        long next;
        lock (_lock)
        {
            next = _base + period;
        }
        var ct = _stop.Token;
        while (true)
        {
            var wait = next - Stopwatch.GetTimestamp();
            try
            {
                if (wait > 0)
                {
                    await Task.Delay(Span(wait), ct).ConfigureAwait(false);
                }
            }
            catch (OperationCanceledException)
            {
                return;
            }
            long sent = Stopwatch.GetTimestamp();
            long dl;
            lock (_lock)
            {
                if (_error != null || _released || ct.IsCancellationRequested)
                {
                    return;
                }
                dl = _deadline;
                _inflight = true;
            }
            if (dl <= sent)
            {
                ExpireIfDue();
                return;
            }
            var limit = Span(Math.Min(Math.Min(Ticks(Client.Timeout), period), dl - sent));
            IReadOnlyList<MutexdGrant>? grants = null;
            MutexdException? err = null;
            try
            {
                grants = await RenewOnce(limit, dl, ct).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                return;
            }
            catch (MutexdException e)
            {
                err = e;
            }
            catch (ObjectDisposedException)
            {
                return;
            }
            lock (_lock)
            {
                _inflight = false;
                if (_error != null || _released)
                {
                    return;
                }
            }
            if (err is LeaseLostException)
            {
                Lose(err);
                return;
            }
            if (err != null)
            {
                lock (_lock)
                {
                    _lastError = err;
                }
                next = Stopwatch.GetTimestamp() + retry;
                continue;
            }
            lock (_lock)
            {
                if (Stopwatch.GetTimestamp() >= _deadline)
                {
                    // answered after the deadline: the lease may have been another's meanwhile
                }
                else
                {
                    GrantsNow = grants!;
                    _base = sent;
                    _deadline = grants!.Min(g => g.DeadlineTimestamp) - _margin;
                    _lastError = null;
                    _renewals++;
                    _timer?.Change(Due(_deadline), System.Threading.Timeout.InfiniteTimeSpan);
                    next = sent + period;
                    continue;
                }
            }
            ExpireIfDue();
            return;
        }
    }

    /// <summary>Stops renewing and releases the lease; throws what the release met, but never for a lease already lost.</summary>
    public async Task ReleaseAsync(CancellationToken cancellationToken = default)
    {
        if (!await StopAsync().ConfigureAwait(false))
        {
            return;
        }
        using var bound = ExpiredBound(cancellationToken);
        try
        {
            await ReleaseOnce(true, bound?.Token ?? cancellationToken).ConfigureAwait(false);
        }
        catch (LeaseLostException)
        {
            // lost already: nothing to give back
        }
        catch (OperationCanceledException) when (bound != null && !cancellationToken.IsCancellationRequested)
        {
            // an expired lease's release is a courtesy, bounded by a third of the TTL
        }
    }

    /// <summary>For a lease lost by its deadline, a token that ends its release within a third of the TTL; else null.</summary>
    private CancellationTokenSource? ExpiredBound(CancellationToken ct)
    {
        lock (_lock)
        {
            if (_error == null)
            {
                return null;
            }
        }
        var cts = CancellationTokenSource.CreateLinkedTokenSource(ct);
        cts.CancelAfter(Span(_ttl / 3));
        return cts;
    }

    /// <inheritdoc cref="ReleaseAsync"/>
    public void Release()
    {
        if (!StopAsync().AsTask().GetAwaiter().GetResult())
        {
            return;
        }
        using var bound = ExpiredBound(default);
        try
        {
            var t = ReleaseOnce(false, bound?.Token ?? default);
            if (!t.IsCompleted)
            {
                t.AsTask().GetAwaiter().GetResult();
            }
        }
        catch (LeaseLostException)
        {
        }
        catch (OperationCanceledException) when (bound != null)
        {
        }
    }

    /// <summary>Stops the renewals; whether the lease still held (and so is to be released).</summary>
    private async ValueTask<bool> StopAsync()
    {
        bool held;
        lock (_lock)
        {
            // A lease past its deadline may still be this client's on the server (renewals
            // failed, the server did not): releasing it lets the next waiter in at once.
            held = !_released && (_error is not LeaseLostException || ReleaseWhenLost);
            _released = true;
        }
        _timer?.Dispose();
        // The renewal loop ends on its own: a renewal under way is cancelled, and an answer
        // that comes anyway is ignored. It is not waited for: this may be called from the
        // loop itself (a LostToken callback that disposes the lease).
        _stop.Cancel();
        await Task.CompletedTask.ConfigureAwait(false);
        return held;
    }

    /// <summary>Releases the lease; never throws (a release that fails leaves the lease to its TTL).</summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) == 1)
        {
            return;
        }
        try
        {
            await ReleaseAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is MutexdException || e is ObjectDisposedException || e is OperationCanceledException)
        {
            // the lease runs out on its TTL
        }
        GC.SuppressFinalize(this);
    }

    /// <summary>Releases the lease; never throws.</summary>
    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) == 1)
        {
            return;
        }
        try
        {
            Release();
        }
        catch (Exception e) when (e is MutexdException || e is ObjectDisposedException || e is OperationCanceledException)
        {
        }
        GC.SuppressFinalize(this);
    }
}

/// <summary>A lease on one resource, renewed in the background until released (see <see cref="MutexdHolding"/>).</summary>
public sealed class MutexdLease : MutexdHolding
{
    internal MutexdLease(MutexdClient client, MutexdGrant grant) : base(client, new[] { grant }, "lease on " + grant.Resource)
    {
    }

    /// <summary>The resource.</summary>
    public string Resource => GrantsNow[0].Resource;

    /// <summary>The fencing token: pass it to the storage you protect. Renewals keep it.</summary>
    public ulong FencingToken => GrantsNow[0].FencingToken;

    /// <summary>How many requests waited for the resource at the last renewal (or the grant), when the server said.</summary>
    public int? Waiters => GrantsNow[0].Waiters;

    /// <summary>The last answer about the lease (the grant, or the latest renewal).</summary>
    public MutexdGrant Grant => GrantsNow[0];

    private protected override async ValueTask<IReadOnlyList<MutexdGrant>> RenewOnce(TimeSpan limit, long deadline, CancellationToken ct) =>
        new[] { await Client.RenewCore(Resource, LeaseId, null, null, limit, deadline, true, ct).ConfigureAwait(false) };

    private protected override async ValueTask ReleaseOnce(bool async, CancellationToken ct) =>
        await Client.ReleaseCore(Resource, LeaseId, async, ct).ConfigureAwait(false);

    /// <inheritdoc/>
    public override string ToString() => $"lease on {Resource}, fencing token {FencingToken}" + (IsHeld ? "" : " (not held)");
}

/// <summary>Leases on several resources, granted at once, renewed and released with one request each, lost when any is.</summary>
public sealed class MutexdLeaseSet : MutexdHolding
{
    private readonly IReadOnlyList<string> _names;

    internal MutexdLeaseSet(MutexdClient client, IReadOnlyList<string> names, IReadOnlyList<MutexdGrant> grants)
        : base(client, grants, "set of leases on " + string.Join(", ", names))
    {
        _names = names;
    }

    /// <summary>The resources, in the order given.</summary>
    public IReadOnlyList<string> Resources => _names;

    /// <summary>Every lease of the set, as last renewed.</summary>
    public IReadOnlyList<MutexdGrant> Grants => GrantsNow;

    /// <summary>The lease on one resource of the set.</summary>
    public MutexdGrant this[string resource] => GrantsNow.First(g => g.Resource == resource);

    /// <summary>The fencing token of one resource of the set.</summary>
    public ulong FencingTokenOf(string resource) => this[resource].FencingToken;

    private protected override bool ReleaseWhenLost => true;

    private protected override ValueTask<IReadOnlyList<MutexdGrant>> RenewOnce(TimeSpan limit, long deadline, CancellationToken ct) =>
        Client.RenewManyCore(_names, LeaseId, null, limit, deadline, true, ct);

    private protected override async ValueTask ReleaseOnce(bool async, CancellationToken ct) =>
        await Client.ReleaseManyCore(_names, LeaseId, async, ct).ConfigureAwait(false);
}

/// <summary>Locks on resources of different partitions, taken one by one in name order (<see cref="MutexdClient.LockOrderedAsync"/>).</summary>
public sealed class MutexdOrderedLocks : IAsyncDisposable, IDisposable
{
    private readonly CancellationTokenSource _lost;

    internal MutexdOrderedLocks(IReadOnlyList<MutexdLease> leases)
    {
        Leases = leases;
        _lost = CancellationTokenSource.CreateLinkedTokenSource(leases.Select(l => l.LostToken).ToArray());
    }

    /// <summary>The leases, in name order.</summary>
    public IReadOnlyList<MutexdLease> Leases { get; }

    /// <summary>The lease on one resource.</summary>
    public MutexdLease this[string resource] => Leases.First(l => l.Resource == resource);

    /// <summary>Cancelled the moment any lease is lost.</summary>
    public CancellationToken LostToken => _lost.Token;

    /// <summary>Whether every lease still holds.</summary>
    public bool IsHeld => Leases.All(l => l.IsHeld);

    /// <summary>Throws the first loss.</summary>
    public void ThrowIfLost()
    {
        foreach (var l in Leases)
        {
            l.ThrowIfLost();
        }
    }

    /// <summary>Releases every lease, in reverse order; never throws.</summary>
    public async ValueTask DisposeAsync()
    {
        for (int i = Leases.Count - 1; i >= 0; i--)
        {
            await Leases[i].DisposeAsync().ConfigureAwait(false);
        }
        _lost.Dispose();
    }

    /// <summary>Releases every lease, in reverse order; never throws.</summary>
    public void Dispose()
    {
        for (int i = Leases.Count - 1; i >= 0; i--)
        {
            Leases[i].Dispose();
        }
        _lost.Dispose();
    }
}
