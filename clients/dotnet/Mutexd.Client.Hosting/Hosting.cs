using System;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;

namespace Mutexd;

/// <summary>Registers mutexd's client and leader election with a host's services.</summary>
public static class MutexdServiceCollectionExtensions
{
    /// <summary>
    /// Registers one <see cref="MutexdClient"/> (a singleton: it is thread-safe), with the
    /// environment's options (<c>MUTEXD_URL</c>, <c>MUTEXD_TOKEN</c>, <c>MUTEXD_CA_FILE</c>)
    /// changed by <paramref name="configure"/>.
    /// </summary>
    public static IServiceCollection AddMutexdClient(this IServiceCollection services, Action<MutexdClientOptions>? configure = null)
    {
        ArgumentNullException.ThrowIfNull(services);
        services.AddSingleton(_ =>
        {
            var o = MutexdClientOptions.FromEnvironment();
            configure?.Invoke(o);
            return new MutexdClient(o);
        });
        return services;
    }

    /// <summary>
    /// Registers a <see cref="MutexdLeaderElection"/> for <paramref name="resource"/> (also as
    /// <see cref="ILeaderElection"/>), over the registered <see cref="MutexdClient"/>.
    /// </summary>
    public static IServiceCollection AddMutexdLeaderElection(this IServiceCollection services, string resource, Action<MutexdSettings>? configure = null)
    {
        ArgumentNullException.ThrowIfNull(services);
        services.AddSingleton(sp =>
        {
            var s = new MutexdSettings(sp.GetRequiredService<MutexdClient>(), resource);
            configure?.Invoke(s);
            return new MutexdLeaderElection(s);
        });
        services.AddSingleton<ILeaderElection>(sp => sp.GetRequiredService<MutexdLeaderElection>());
        return services;
    }
}

/// <summary>
/// A hosted service that runs <see cref="ExecuteAsLeaderAsync"/> while this process leads:
/// its token is cancelled the moment the lease is lost or the host stops, and it runs again
/// in the next term. Nothing it throws, and no loss or error of the server, stops the host
/// (an exception escaping a <see cref="BackgroundService"/> does): it is handed to
/// <see cref="OnError"/> and the election goes on.
/// </summary>
public abstract class MutexdLeaderService : BackgroundService
{
    private readonly MutexdLeaderElection _election;

    /// <summary>A service over <paramref name="election"/>.</summary>
    protected MutexdLeaderService(MutexdLeaderElection election)
    {
        _election = election ?? throw new ArgumentNullException(nameof(election));
    }

    /// <summary>The election.</summary>
    protected MutexdLeaderElection Election => _election;

    /// <summary>Whether this process leads now.</summary>
    public bool IsLeader => _election.IsLeader;

    /// <summary>The leader's work; <paramref name="lease"/> has the term's fencing token; stop when <paramref name="stoppingToken"/> is cancelled.</summary>
    protected abstract Task ExecuteAsLeaderAsync(MutexdLease lease, CancellationToken stoppingToken);

    /// <summary>Called with what the leader's work threw, or an error of the election; by default nothing.</summary>
    protected virtual void OnError(Exception error)
    {
    }

    /// <inheritdoc/>
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        await Task.Yield(); // the host's start goes on
        while (!stoppingToken.IsCancellationRequested)
        {
            try
            {
                await _election.RunTaskWhenElectedLeaderAsync(async (lease, ct) =>
                {
                    try
                    {
                        await ExecuteAsLeaderAsync(lease, ct).ConfigureAwait(false);
                    }
                    catch (OperationCanceledException) when (ct.IsCancellationRequested)
                    {
                    }
                    catch (Exception e)
                    {
                        Report(e);
                    }
                }, stoppingToken).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (stoppingToken.IsCancellationRequested)
            {
                return;
            }
            catch (Exception e)
            {
                Report(e);
                try
                {
                    await Task.Delay(TimeSpan.FromSeconds(1), stoppingToken).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return;
                }
            }
        }
    }

    private void Report(Exception e)
    {
        try
        {
            OnError(e);
        }
        catch (Exception)
        {
            // an error handler's own error must not stop the host either
        }
    }
}
