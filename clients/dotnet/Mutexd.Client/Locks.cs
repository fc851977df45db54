using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace Mutexd;

public partial class MutexdClient
{
    /// <summary>The longest one blocking acquire waits before it is sent again (a wait without end is sent in pieces).</summary>
    internal static TimeSpan WaitPiece { get; set; } = TimeSpan.FromSeconds(60);

    /// <summary>
    /// Takes a lock: waits in the resource's FIFO queue (for <see cref="AcquireOptions.Wait"/>,
    /// or until granted or cancelled when it is null) and returns a lease renewed in the
    /// background. Throws <see cref="LeaseHeldException"/> when the wait runs out. Cancelling
    /// hangs up, so the server drops the waiter. Transport errors and 503 answers are retried
    /// with the same proposed lease id, so a retry is idempotent.
    /// </summary>
    public virtual Task<MutexdLease> LockAsync(string resource, AcquireOptions? options = null, CancellationToken cancellationToken = default) =>
        LockCore(resource, options ?? new AcquireOptions(), false, true, cancellationToken).AsTask()!;

    /// <inheritdoc cref="LockAsync"/>
    public virtual MutexdLease Lock(string resource, AcquireOptions? options = null, CancellationToken cancellationToken = default) =>
        Sync(LockCore(resource, options ?? new AcquireOptions(), false, false, cancellationToken))!;

    /// <summary>As <see cref="LockAsync"/>, but null when the resource stays held (by default it does not wait).</summary>
    public virtual Task<MutexdLease?> TryLockAsync(string resource, AcquireOptions? options = null, CancellationToken cancellationToken = default) =>
        LockCore(resource, options ?? new AcquireOptions(), true, true, cancellationToken).AsTask();

    /// <inheritdoc cref="TryLockAsync"/>
    public virtual MutexdLease? TryLock(string resource, AcquireOptions? options = null, CancellationToken cancellationToken = default) =>
        Sync(LockCore(resource, options ?? new AcquireOptions(), true, false, cancellationToken));

    private async ValueTask<MutexdLease?> LockCore(string resource, AcquireOptions o, bool tryOnly, bool async, CancellationToken ct)
    {
        var gs = await AcquireOwn(resource, null, o, tryOnly, async, ct).ConfigureAwait(false);
        if (gs == null)
        {
            return null;
        }
        var lease = new MutexdLease(this, gs[0]);
        lease.Start();
        return lease;
    }

    /// <summary>
    /// Leases on every resource named, granted all at once or not at all, renewed as one
    /// (see <see cref="AcquireMany"/>); lost the moment any of them is.
    /// </summary>
    public virtual async Task<MutexdLeaseSet> LockManyAsync(IEnumerable<string> resources, AcquireOptions? options = null,
        CancellationToken cancellationToken = default)
    {
        var names = Names(resources);
        var gs = await AcquireOwn(null, names, options ?? new AcquireOptions(), false, true, cancellationToken).ConfigureAwait(false);
        var set = new MutexdLeaseSet(this, names, gs!);
        set.Start();
        return set;
    }

    /// <inheritdoc cref="LockManyAsync"/>
    public virtual MutexdLeaseSet LockMany(IEnumerable<string> resources, AcquireOptions? options = null, CancellationToken cancellationToken = default)
    {
        var names = Names(resources);
        var gs = Sync(AcquireOwn(null, names, options ?? new AcquireOptions(), false, false, cancellationToken));
        var set = new MutexdLeaseSet(this, names, gs!);
        set.Start();
        return set;
    }

    /// <summary>
    /// Locks on resources of different partitions: one lock per name, taken in name order
    /// (so that no two callers deadlock), each with its own lease; if one fails, what was
    /// taken is released and the failure thrown.
    /// </summary>
    public virtual async Task<MutexdOrderedLocks> LockOrderedAsync(IEnumerable<string> resources, AcquireOptions? options = null,
        CancellationToken cancellationToken = default)
    {
        var names = resources.Distinct(StringComparer.Ordinal).OrderBy(n => n, StringComparer.Ordinal).ToList();
        if (names.Count == 0)
        {
            throw new ArgumentException("name at least one resource", nameof(resources));
        }
        var taken = new List<MutexdLease>();
        try
        {
            foreach (var n in names)
            {
                var o = (options ?? new AcquireOptions()).Copy();
                o.LeaseId = null;
                taken.Add(await LockAsync(n, o, cancellationToken).ConfigureAwait(false));
            }
        }
        catch
        {
            for (int i = taken.Count - 1; i >= 0; i--)
            {
                await taken[i].DisposeAsync().ConfigureAwait(false);
            }
            throw;
        }
        return new MutexdOrderedLocks(taken);
    }

    /// <summary>
    /// An acquire of the caller's own lease: in pieces of <see cref="WaitPiece"/> when it waits
    /// without end, sent again with the same lease id after a transport error or a 503 while
    /// its wait (plus the timeout) lasts; null for a <paramref name="tryOnly"/> that found the
    /// resource held. Cancelled, it hangs up and gives back a lease the server may have granted
    /// meanwhile.
    /// </summary>
    private async ValueTask<IReadOnlyList<MutexdGrant>?> AcquireOwn(string? resource, IReadOnlyList<string>? names, AcquireOptions given,
        bool tryOnly, bool async, CancellationToken ct)
    {
        var o = given.Copy();
        o.LeaseId ??= NewLeaseId();
        bool forever = !tryOnly && given.Wait == null;
        long start = Stopwatch.GetTimestamp();
        long waitEnd = forever ? long.MaxValue : start + Ticks(given.Wait ?? TimeSpan.Zero);
        long retryEnd = forever ? long.MaxValue : waitEnd + Ticks(Timeout);
        while (true)
        {
            var left = forever ? WaitPiece : Span(Math.Max(0, waitEnd - Stopwatch.GetTimestamp()));
            o.Wait = left > WaitPiece ? WaitPiece : left;
            try
            {
                if (names != null)
                {
                    return await AcquireManyCore(names, o, async, ct).ConfigureAwait(false);
                }
                return new[] { await AcquireCore(resource!, o, async, ct).ConfigureAwait(false) };
            }
            catch (LeaseHeldException) when (forever || Stopwatch.GetTimestamp() < waitEnd)
            {
                if (o.Wait == TimeSpan.Zero)
                {
                    await Pause(TimeSpan.FromMilliseconds(100), async, ct).ConfigureAwait(false); // a lock-delay answers at once
                }
            }
            catch (LeaseHeldException) when (tryOnly)
            {
                return null;
            }
            catch (MutexdException e) when ((e.Status == 0 || e.Status == 503) && Stopwatch.GetTimestamp() < retryEnd)
            {
                var p = e.RetryAfter is TimeSpan ra && ra > TimeSpan.Zero ? (ra > RetryAfterCap ? RetryAfterCap : ra) : TimeSpan.FromMilliseconds(200);
                await Pause(p, async, ct).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                GiveBack(resource, names, o.LeaseId);
                throw;
            }
        }
    }

    private static async ValueTask Pause(TimeSpan t, bool async, CancellationToken ct)
    {
        if (async)
        {
            await Task.Delay(t, ct).ConfigureAwait(false);
        }
        else
        {
            ct.WaitHandle.WaitOne(t);
            ct.ThrowIfCancellationRequested();
        }
    }

    /// <summary>Releases, in the background, a lease that a cancelled acquire may have been granted.</summary>
    private void GiveBack(string? resource, IReadOnlyList<string>? names, string leaseId)
    {
        _ = Task.Run(async () =>
        {
            try
            {
                if (names != null)
                {
                    await ReleaseManyCore(names, leaseId, true, default).ConfigureAwait(false);
                }
                else
                {
                    await ReleaseCore(resource!, leaseId, true, default).ConfigureAwait(false);
                }
            }
            catch (Exception e) when (e is MutexdException || e is ObjectDisposedException)
            {
                // nothing was granted: the usual case
            }
        });
    }
}
