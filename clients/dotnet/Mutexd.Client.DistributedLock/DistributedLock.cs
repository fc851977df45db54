using System;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Medallion.Threading;

namespace Mutexd;

/// <summary>
/// DistributedLock's providers over mutexd: locks, semaphores and reader/writer locks with
/// real FIFO waits on the server (no polling), a handle whose <see cref="IDistributedSynchronizationHandle.HandleLostToken"/>
/// is the lease's loss signal, and the fencing token on the handle.
/// </summary>
public sealed class MutexdSynchronizationProvider : IDistributedLockProvider, IDistributedSemaphoreProvider, IDistributedReaderWriterLockProvider
{
    /// <summary>A provider over <paramref name="client"/>; names become resources under <paramref name="prefix"/>.</summary>
    public MutexdSynchronizationProvider(MutexdClient client, string prefix = "distributed-lock/")
    {
        Client = client ?? throw new ArgumentNullException(nameof(client));
        Prefix = prefix ?? "";
    }

    /// <summary>The client.</summary>
    public MutexdClient Client { get; }

    /// <summary>What every resource name starts with.</summary>
    public string Prefix { get; }

    /// <summary>The TTL of the leases (default 15 s): renewed in the background, a dead holder's place is free within it.</summary>
    public TimeSpan Ttl { get; set; } = TimeSpan.FromSeconds(15);

    /// <summary>
    /// The resource of a name: the prefix, then the name with every byte that a resource
    /// may not hold (and <c>~</c>) written <c>~XX</c>, so that different names never meet.
    /// </summary>
    public string ResourceOf(string name)
    {
        ArgumentNullException.ThrowIfNull(name);
        var b = new StringBuilder(Prefix);
        foreach (var by in Encoding.UTF8.GetBytes(name))
        {
            char c = (char)by;
            if (c is >= 'a' and <= 'z' or >= 'A' and <= 'Z' or >= '0' and <= '9' || "-._:@".IndexOf(c) >= 0)
            {
                b.Append(c);
            }
            else
            {
                b.Append('~').Append(by.ToString("X2", System.Globalization.CultureInfo.InvariantCulture));
            }
        }
        if (b.Length > 256 || b.Length == Prefix.Length)
        {
            throw new ArgumentException($"the name makes a resource of {b.Length} bytes: 1 to {256 - Prefix.Length} are possible", nameof(name));
        }
        return b.ToString();
    }

    /// <inheritdoc/>
    public IDistributedLock CreateLock(string name) => new MutexdDistributedLock(this, name);

    /// <inheritdoc/>
    public IDistributedSemaphore CreateSemaphore(string name, int maxCount) => new MutexdDistributedSemaphore(this, name, maxCount);

    /// <inheritdoc/>
    public IDistributedReaderWriterLock CreateReaderWriterLock(string name) => new MutexdDistributedReaderWriterLock(this, name);

    internal AcquireOptions Options(TimeSpan? timeout, int? limit, bool shared)
    {
        if (timeout is TimeSpan t && t < TimeSpan.Zero && t != Timeout.InfiniteTimeSpan)
        {
            throw new ArgumentOutOfRangeException(nameof(timeout), "a timeout is positive, zero, or Timeout.InfiniteTimeSpan");
        }
        return new AcquireOptions
        {
            Ttl = Ttl,
            Wait = timeout == Timeout.InfiniteTimeSpan ? null : timeout,
            Limit = limit,
            Shared = shared,
        };
    }

    internal async ValueTask<IDistributedSynchronizationHandle?> TryAsync(string resource, TimeSpan timeout, int? limit, bool shared, CancellationToken ct)
    {
        var o = Options(timeout, limit, shared);
        var lease = o.Wait == null ? await Client.LockAsync(resource, o, ct).ConfigureAwait(false)
            : await Client.TryLockAsync(resource, o, ct).ConfigureAwait(false);
        return lease == null ? null : new MutexdSynchronizationHandle(lease);
    }

    internal IDistributedSynchronizationHandle? Try(string resource, TimeSpan timeout, int? limit, bool shared, CancellationToken ct)
    {
        var o = Options(timeout, limit, shared);
        var lease = o.Wait == null ? Client.Lock(resource, o, ct) : Client.TryLock(resource, o, ct);
        return lease == null ? null : new MutexdSynchronizationHandle(lease);
    }

    internal async ValueTask<IDistributedSynchronizationHandle> AcquireAsync(string resource, TimeSpan? timeout, int? limit, bool shared, CancellationToken ct)
    {
        var o = Options(timeout, limit, shared);
        try
        {
            return new MutexdSynchronizationHandle(await Client.LockAsync(resource, o, ct).ConfigureAwait(false));
        }
        catch (LeaseHeldException e)
        {
            throw new TimeoutException($"{resource} was not granted within {timeout}", e);
        }
    }

    internal IDistributedSynchronizationHandle Acquire(string resource, TimeSpan? timeout, int? limit, bool shared, CancellationToken ct)
    {
        var o = Options(timeout, limit, shared);
        try
        {
            return new MutexdSynchronizationHandle(Client.Lock(resource, o, ct));
        }
        catch (LeaseHeldException e)
        {
            throw new TimeoutException($"{resource} was not granted within {timeout}", e);
        }
    }
}

/// <summary>A held lock, semaphore place or reader/writer lock: a mutexd lease renewed in the background.</summary>
public sealed class MutexdSynchronizationHandle : IDistributedSynchronizationHandle
{
    internal MutexdSynchronizationHandle(MutexdLease lease)
    {
        Lease = lease;
    }

    /// <summary>The lease.</summary>
    public MutexdLease Lease { get; }

    /// <summary>The fencing token: pass it to the storage you protect.</summary>
    public ulong FencingToken => Lease.FencingToken;

    /// <summary>Cancelled the moment the lease is lost (never by a release).</summary>
    public CancellationToken HandleLostToken => Lease.LostToken;

    /// <summary>Releases the lease; never throws (a lost lease has nothing to give back).</summary>
    public void Dispose() => Lease.Dispose();

    /// <inheritdoc cref="Dispose"/>
    public ValueTask DisposeAsync() => Lease.DisposeAsync();
}

/// <summary>A lock (an exclusive lease).</summary>
public sealed class MutexdDistributedLock : IDistributedLock
{
    private readonly MutexdSynchronizationProvider _p;
    private readonly string _resource;

    internal MutexdDistributedLock(MutexdSynchronizationProvider p, string name)
    {
        _p = p;
        Name = name;
        _resource = p.ResourceOf(name);
    }

    /// <inheritdoc/>
    public string Name { get; }

    /// <inheritdoc/>
    public IDistributedSynchronizationHandle? TryAcquire(TimeSpan timeout = default, CancellationToken cancellationToken = default) =>
        _p.Try(_resource, timeout, null, false, cancellationToken);

    /// <inheritdoc/>
    public IDistributedSynchronizationHandle Acquire(TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        _p.Acquire(_resource, timeout, null, false, cancellationToken);

    /// <inheritdoc/>
    public ValueTask<IDistributedSynchronizationHandle?> TryAcquireAsync(TimeSpan timeout = default, CancellationToken cancellationToken = default) =>
        _p.TryAsync(_resource, timeout, null, false, cancellationToken);

    /// <inheritdoc/>
    public ValueTask<IDistributedSynchronizationHandle> AcquireAsync(TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        _p.AcquireAsync(_resource, timeout, null, false, cancellationToken);
}

/// <summary>A counting semaphore: up to <see cref="MaxCount"/> holders, waiting in FIFO order.</summary>
public sealed class MutexdDistributedSemaphore : IDistributedSemaphore
{
    private readonly MutexdSynchronizationProvider _p;
    private readonly string _resource;

    internal MutexdDistributedSemaphore(MutexdSynchronizationProvider p, string name, int maxCount)
    {
        if (maxCount < 1)
        {
            throw new ArgumentOutOfRangeException(nameof(maxCount), "at least 1");
        }
        _p = p;
        Name = name;
        MaxCount = maxCount;
        _resource = p.ResourceOf(name);
    }

    /// <inheritdoc/>
    public string Name { get; }

    /// <inheritdoc/>
    public int MaxCount { get; }

    /// <inheritdoc/>
    public IDistributedSynchronizationHandle? TryAcquire(TimeSpan timeout = default, CancellationToken cancellationToken = default) =>
        _p.Try(_resource, timeout, MaxCount, false, cancellationToken);

    /// <inheritdoc/>
    public IDistributedSynchronizationHandle Acquire(TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        _p.Acquire(_resource, timeout, MaxCount, false, cancellationToken);

    /// <inheritdoc/>
    public ValueTask<IDistributedSynchronizationHandle?> TryAcquireAsync(TimeSpan timeout = default, CancellationToken cancellationToken = default) =>
        _p.TryAsync(_resource, timeout, MaxCount, false, cancellationToken);

    /// <inheritdoc/>
    public ValueTask<IDistributedSynchronizationHandle> AcquireAsync(TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        _p.AcquireAsync(_resource, timeout, MaxCount, false, cancellationToken);
}

/// <summary>A reader/writer lock: readers are shared leases, a writer an exclusive one; FIFO, so a writer is not starved.</summary>
public sealed class MutexdDistributedReaderWriterLock : IDistributedReaderWriterLock
{
    private readonly MutexdSynchronizationProvider _p;
    private readonly string _resource;

    internal MutexdDistributedReaderWriterLock(MutexdSynchronizationProvider p, string name)
    {
        _p = p;
        Name = name;
        _resource = p.ResourceOf(name);
    }

    /// <inheritdoc/>
    public string Name { get; }

    /// <inheritdoc/>
    public IDistributedSynchronizationHandle? TryAcquireReadLock(TimeSpan timeout = default, CancellationToken cancellationToken = default) =>
        _p.Try(_resource, timeout, null, true, cancellationToken);

    /// <inheritdoc/>
    public IDistributedSynchronizationHandle AcquireReadLock(TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        _p.Acquire(_resource, timeout, null, true, cancellationToken);

    /// <inheritdoc/>
    public ValueTask<IDistributedSynchronizationHandle?> TryAcquireReadLockAsync(TimeSpan timeout = default, CancellationToken cancellationToken = default) =>
        _p.TryAsync(_resource, timeout, null, true, cancellationToken);

    /// <inheritdoc/>
    public ValueTask<IDistributedSynchronizationHandle> AcquireReadLockAsync(TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        _p.AcquireAsync(_resource, timeout, null, true, cancellationToken);

    /// <inheritdoc/>
    public IDistributedSynchronizationHandle? TryAcquireWriteLock(TimeSpan timeout = default, CancellationToken cancellationToken = default) =>
        _p.Try(_resource, timeout, null, false, cancellationToken);

    /// <inheritdoc/>
    public IDistributedSynchronizationHandle AcquireWriteLock(TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        _p.Acquire(_resource, timeout, null, false, cancellationToken);

    /// <inheritdoc/>
    public ValueTask<IDistributedSynchronizationHandle?> TryAcquireWriteLockAsync(TimeSpan timeout = default, CancellationToken cancellationToken = default) =>
        _p.TryAsync(_resource, timeout, null, false, cancellationToken);

    /// <inheritdoc/>
    public ValueTask<IDistributedSynchronizationHandle> AcquireWriteLockAsync(TimeSpan? timeout = null, CancellationToken cancellationToken = default) =>
        _p.AcquireAsync(_resource, timeout, null, false, cancellationToken);
}
