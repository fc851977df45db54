using System;
using System.Threading;
using System.Threading.Tasks;

namespace Mutexd;

/// <summary>Where a leader election's lease lives: the server (or its client) and the resource.</summary>
public sealed class MutexdSettings
{
    /// <summary>Settings for a server at <paramref name="url"/> (one URL, or several separated by commas).</summary>
    public MutexdSettings(string url, string resource) : this(new MutexdClient(url), resource)
    {
    }

    /// <summary>Settings over an existing client.</summary>
    public MutexdSettings(MutexdClient client, string resource)
    {
        Client = client ?? throw new ArgumentNullException(nameof(client));
        Resource = string.IsNullOrEmpty(resource) ? throw new ArgumentException("name the resource", nameof(resource)) : resource;
    }

    /// <summary>The client.</summary>
    public MutexdClient Client { get; }

    /// <summary>The resource the leader holds.</summary>
    public string Resource { get; }

    /// <summary>The lease's TTL (default 15 s): a dead leader is replaced within it.</summary>
    public TimeSpan Ttl { get; set; } = TimeSpan.FromSeconds(15);

    /// <summary>How long a follower waits in the queue before it says so and waits again (default 5 s).</summary>
    public TimeSpan RetryInterval { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>The owner shown to people and tools (default: the client's, host:pid).</summary>
    public string? Owner { get; set; }
}

/// <summary>Runs a task while this process is the leader (the package's interface).</summary>
public interface ILeaderElection
{
    /// <summary>Whether this candidate holds the leader's lease now (checked on the clock).</summary>
    bool IsLeader { get; }

    /// <summary>Competes for leadership until <paramref name="cancellationToken"/> is cancelled, running <paramref name="task"/> during each term; its token is cancelled the moment the term ends.</summary>
    Task RunTaskWhenElectedLeaderAsync(Func<CancellationToken, Task> task, CancellationToken cancellationToken);
}

/// <summary>
/// Leader election over a mutexd lease. Each instance is one candidate with its own lease.
/// A term begins when the lease is granted and ends when the task returns or the lease is
/// lost; the task's token is cancelled at once on a loss (a renewal answered
/// <c>lease_lost</c>, or the deadline passing while renewals fail: a renewal that fails
/// while the lease has time left is tried again, it does not end the term). The next term
/// begins only after the task of the last one has returned, and its lease was released.
/// The fencing token of the term is <see cref="FencingToken"/> (or the lease handed to the
/// task by the overload that takes one).
/// </summary>
public sealed class MutexdLeaderElection : ILeaderElection
{
    private readonly MutexdSettings _settings;
    private volatile MutexdLease? _lease;

    /// <summary>A candidate for the resource of <paramref name="settings"/>.</summary>
    public MutexdLeaderElection(MutexdSettings settings)
    {
        _settings = settings ?? throw new ArgumentNullException(nameof(settings));
    }

    /// <summary>A candidate for <paramref name="resource"/> through <paramref name="client"/>.</summary>
    public MutexdLeaderElection(MutexdClient client, string resource) : this(new MutexdSettings(client, resource))
    {
    }

    /// <summary>The settings.</summary>
    public MutexdSettings Settings => _settings;

    /// <inheritdoc/>
    public bool IsLeader => _lease?.IsHeld == true;

    /// <summary>The lease of the term under way, or null.</summary>
    public MutexdLease? CurrentLease => _lease;

    /// <summary>The fencing token of the term under way, or null: pass it to what the leader writes to.</summary>
    public ulong? FencingToken => _lease?.FencingToken;

    /// <summary>Called when an attempt did not win: with the error, or null when the lease stayed another's.</summary>
    public Action<MutexdException?>? OnStandby { get; set; }

    /// <summary>Called with what a term's task threw (the election goes on).</summary>
    public Action<Exception>? OnTaskError { get; set; }

    /// <inheritdoc/>
    public Task RunTaskWhenElectedLeaderAsync(Func<CancellationToken, Task> task, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(task);
        return RunAsync((_, ct) => task(ct), cancellationToken);
    }

    /// <summary>As the other overload, with the term's lease (its <see cref="MutexdLease.FencingToken"/>) handed to the task.</summary>
    public Task RunTaskWhenElectedLeaderAsync(Func<MutexdLease, CancellationToken, Task> task, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(task);
        return RunAsync(task, cancellationToken);
    }

    private async Task RunAsync(Func<MutexdLease, CancellationToken, Task> task, CancellationToken ct)
    {
        var s = _settings;
        while (!ct.IsCancellationRequested)
        {
            MutexdLease? lease;
            try
            {
                lease = await s.Client.TryLockAsync(s.Resource, new AcquireOptions { Ttl = s.Ttl, Wait = s.RetryInterval, Owner = s.Owner }, ct)
                    .ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (ct.IsCancellationRequested)
            {
                return;
            }
            catch (MutexdException e)
            {
                OnStandby?.Invoke(e);
                if (!await Pause(s.RetryInterval, ct).ConfigureAwait(false))
                {
                    return;
                }
                continue;
            }
            if (lease == null)
            {
                OnStandby?.Invoke(null);
                continue; // it waited RetryInterval in the queue already
            }
            bool finished = false;
            _lease = lease;
            try
            {
                using var term = CancellationTokenSource.CreateLinkedTokenSource(ct, lease.LostToken);
                try
                {
                    await Task.Run(() => task(lease, term.Token), CancellationToken.None).ConfigureAwait(false);
                    finished = lease.IsHeld;
                }
                catch (OperationCanceledException) when (term.IsCancellationRequested)
                {
                    // the term ended: lost, or shutting down
                }
                catch (Exception e)
                {
                    OnTaskError?.Invoke(e);
                }
            }
            finally
            {
                _lease = null;
                await lease.DisposeAsync().ConfigureAwait(false);
            }
            if (finished && !await Pause(s.RetryInterval, ct).ConfigureAwait(false))
            {
                return;
            }
        }
    }

    private static async Task<bool> Pause(TimeSpan t, CancellationToken ct)
    {
        try
        {
            await Task.Delay(t, ct).ConfigureAwait(false);
            return true;
        }
        catch (OperationCanceledException)
        {
            return false;
        }
    }
}

/// <summary>
/// The Leader Election sample's <c>BlobDistributedMutex</c>, over mutexd: the same
/// constructor and <see cref="RunTaskWhenMutexAcquired"/>, without its gaps (a transient
/// error does not end a lease with time left; a lost lease cancels the task at once; terms
/// never overlap; the fencing token is <see cref="FencingToken"/>).
/// </summary>
public sealed class MutexdDistributedMutex
{
    private readonly MutexdLeaderElection _election;
    private readonly Func<CancellationToken, Task> _task;

    /// <summary>The sample's constructor: the settings, the task to run while leader, and what to call when an attempt did not win.</summary>
    public MutexdDistributedMutex(MutexdSettings settings, Func<CancellationToken, Task> taskToRunWhenLeaseAcquired, Action? onLeaseTimeoutRetry = null)
    {
        _task = taskToRunWhenLeaseAcquired ?? throw new ArgumentNullException(nameof(taskToRunWhenLeaseAcquired));
        _election = new MutexdLeaderElection(settings);
        if (onLeaseTimeoutRetry != null)
        {
            _election.OnStandby = _ => onLeaseTimeoutRetry();
        }
    }

    /// <summary>Whether the lease is held now.</summary>
    public bool IsLeader => _election.IsLeader;

    /// <summary>The fencing token of the term under way, or null.</summary>
    public ulong? FencingToken => _election.FencingToken;

    /// <summary>The lease of the term under way, or null.</summary>
    public MutexdLease? CurrentLease => _election.CurrentLease;

    /// <summary>Competes for the lease until <paramref name="token"/> is cancelled, running the task while it is held.</summary>
    public Task RunTaskWhenMutexAcquired(CancellationToken token) => _election.RunTaskWhenElectedLeaderAsync(_task, token);
}
