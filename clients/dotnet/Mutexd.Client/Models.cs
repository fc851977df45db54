using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using System.Text.Json.Nodes;

namespace Mutexd;

/// <summary>What a lease is asked with: every field is optional.</summary>
public sealed class AcquireOptions
{
    /// <summary>Who holds it, for people and tools (default: the client's owner, host:pid).</summary>
    public string? Owner { get; set; }

    /// <summary>The lease's TTL (default 15 s).</summary>
    public TimeSpan? Ttl { get; set; }

    /// <summary>How long to wait in the resource's FIFO queue when it is held (default: not at all).</summary>
    public TimeSpan? Wait { get; set; }

    /// <summary>The lease id to propose (default: a new random one); the same one makes a retry idempotent.</summary>
    public string? LeaseId { get; set; }

    /// <summary>A JSON object kept with the lease (for example the leader's address).</summary>
    public JsonObject? Metadata { get; set; }

    /// <summary>How many leases may hold the resource at once (a counting semaphore when above 1).</summary>
    public int? Limit { get; set; }

    /// <summary>A shared lease (a reader): holds together with other shared leases.</summary>
    public bool Shared { get; set; }

    /// <summary>How long the place stays granted to nobody when this lease ends other than by release.</summary>
    public TimeSpan? LockDelay { get; set; }

    internal AcquireOptions Copy() => (AcquireOptions)MemberwiseClone();
}

/// <summary>One lease as the server granted or renewed it (the contract's lease body).</summary>
public sealed record MutexdGrant
{
    /// <summary>The resource.</summary>
    public string Resource { get; init; } = "";
    /// <summary>The lease id: the credential to renew and release with.</summary>
    public string LeaseId { get; init; } = "";
    /// <summary>Who holds it.</summary>
    public string Owner { get; init; } = "";
    /// <summary>The fencing token: pass it to the storage you protect.</summary>
    public ulong FencingToken { get; init; }
    /// <summary>The lease's TTL.</summary>
    public TimeSpan Ttl { get; init; }
    /// <summary>How long the lease had left when the answer was made.</summary>
    public TimeSpan ExpiresIn { get; init; }
    /// <summary>When it was granted (informative only: act on durations).</summary>
    public DateTimeOffset? AcquiredAt { get; init; }
    /// <summary>When it was last renewed (informative only).</summary>
    public DateTimeOffset? RenewedAt { get; init; }
    /// <summary>The lease's metadata, or null.</summary>
    public JsonObject? Metadata { get; init; }
    /// <summary>The resource's limit in force.</summary>
    public int Limit { get; init; } = 1;
    /// <summary>Whether this is a shared lease.</summary>
    public bool Shared { get; init; }
    /// <summary>How many requests waited for the resource when the answer was made, when the server said.</summary>
    public int? Waiters { get; init; }
    /// <summary>The lock-delay kept with the lease.</summary>
    public TimeSpan LockDelay { get; init; }
    /// <summary>The server that served the answer (<c>Mutexd-Served-By</c>), in a group.</summary>
    public string? ServedBy { get; init; }

    /// <summary>The deadline on this process's monotonic clock (<see cref="Stopwatch.GetTimestamp"/>): when the request was sent plus <see cref="ExpiresIn"/>.</summary>
    public long DeadlineTimestamp { get; init; }

    internal static MutexdGrant From(JsonElement e, long sentTimestamp, string? servedBy)
    {
        var expires = Json.Long(e, "expires_in_ms") ?? 0;
        return new MutexdGrant
        {
            Resource = Json.Str(e, "resource") ?? "",
            LeaseId = Json.Str(e, "lease_id") ?? "",
            Owner = Json.Str(e, "owner") ?? "",
            FencingToken = Json.ULong(e, "fencing_token") ?? 0,
            Ttl = TimeSpan.FromMilliseconds(Json.Long(e, "ttl_ms") ?? 0),
            ExpiresIn = TimeSpan.FromMilliseconds(expires),
            AcquiredAt = Json.Time(e, "acquired_at"),
            RenewedAt = Json.Time(e, "renewed_at"),
            Metadata = Json.Obj(e, "metadata"),
            Limit = (int)(Json.Long(e, "limit") ?? 1),
            Shared = Json.Bool(e, "shared") ?? false,
            Waiters = Json.Long(e, "waiters") is long w ? (int)w : null,
            LockDelay = TimeSpan.FromMilliseconds(Json.Long(e, "lock_delay_ms") ?? 0),
            ServedBy = servedBy,
            DeadlineTimestamp = sentTimestamp + expires * Stopwatch.Frequency / 1000,
        };
    }
}

/// <summary>A holder of a resource, as <c>GET</c> and <c>lease_held</c> show it (never its lease id).</summary>
public sealed record MutexdHolder
{
    /// <summary>Who holds it.</summary>
    public string Owner { get; init; } = "";
    /// <summary>Its fencing token.</summary>
    public ulong FencingToken { get; init; }
    /// <summary>Whether its lease is shared.</summary>
    public bool Shared { get; init; }
    /// <summary>Its TTL, when shown.</summary>
    public TimeSpan? Ttl { get; init; }
    /// <summary>Its time left when the answer was made.</summary>
    public TimeSpan ExpiresIn { get; init; }
    /// <summary>When granted (informative).</summary>
    public DateTimeOffset? AcquiredAt { get; init; }
    /// <summary>When last renewed (informative).</summary>
    public DateTimeOffset? RenewedAt { get; init; }
    /// <summary>Its metadata.</summary>
    public JsonObject? Metadata { get; init; }

    internal static MutexdHolder From(JsonElement e) => new()
    {
        Owner = Json.Str(e, "owner") ?? "",
        FencingToken = Json.ULong(e, "fencing_token") ?? 0,
        Shared = Json.Bool(e, "shared") ?? false,
        Ttl = Json.Long(e, "ttl_ms") is long t ? TimeSpan.FromMilliseconds(t) : null,
        ExpiresIn = TimeSpan.FromMilliseconds(Json.Long(e, "expires_in_ms") ?? 0),
        AcquiredAt = Json.Time(e, "acquired_at"),
        RenewedAt = Json.Time(e, "renewed_at"),
        Metadata = Json.Obj(e, "metadata"),
    };
}

/// <summary>A resource's state (<c>GET /v1/resources/{resource}</c>).</summary>
public sealed record MutexdResourceState
{
    /// <summary>The resource.</summary>
    public string Resource { get; init; } = "";
    /// <summary>Whether at least one lease holds it.</summary>
    public bool IsHeld { get; init; }
    /// <summary>The resource's index: it changes on every change of the resource.</summary>
    public MutexdPosition Index { get; init; }
    /// <summary>The first holder, or null.</summary>
    public MutexdHolder? Holder { get; init; }
    /// <summary>Every holder, oldest grant first.</summary>
    public IReadOnlyList<MutexdHolder> Holders { get; init; } = Array.Empty<MutexdHolder>();
    /// <summary>How many requests are queued.</summary>
    public int Waiters { get; init; }
    /// <summary>The limit in force (1 when free).</summary>
    public int Limit { get; init; } = 1;
    /// <summary>The longest lock-delay still to run.</summary>
    public TimeSpan Delay { get; init; }

    internal static MutexdResourceState From(JsonElement e)
    {
        var holders = new List<MutexdHolder>();
        if (e.TryGetProperty("holders", out var hs) && hs.ValueKind == JsonValueKind.Array)
        {
            foreach (var h in hs.EnumerateArray())
            {
                holders.Add(MutexdHolder.From(h));
            }
        }
        MutexdHolder? holder = e.TryGetProperty("holder", out var ho) && ho.ValueKind == JsonValueKind.Object ? MutexdHolder.From(ho) : null;
        if (holders.Count == 0 && holder != null)
        {
            holders.Add(holder);
        }
        return new MutexdResourceState
        {
            Resource = Json.Str(e, "resource") ?? "",
            IsHeld = Json.Str(e, "state") == "held",
            Index = MutexdPosition.From(e, "index"),
            Holder = holder,
            Holders = holders,
            Waiters = (int)(Json.Long(e, "waiters") ?? 0),
            Limit = (int)(Json.Long(e, "limit") ?? 1),
            Delay = TimeSpan.FromMilliseconds(Json.Long(e, "delay_ms") ?? 0),
        };
    }
}

/// <summary>
/// An index or position as the server gave it: a number, or on a partitioned group an opaque
/// string. Pass it back unchanged.
/// </summary>
public readonly record struct MutexdPosition(string Value)
{
    /// <summary>No position: from the start.</summary>
    public static MutexdPosition None => default;

    /// <summary>Whether this is a position the server gave.</summary>
    public bool IsSet => !string.IsNullOrEmpty(Value);

    /// <summary>The number, when the position is one.</summary>
    public ulong? Number => ulong.TryParse(Value, NumberStyles.None, CultureInfo.InvariantCulture, out var n) ? n : null;

    /// <summary>A position of a number.</summary>
    public static MutexdPosition Of(ulong n) => new(n.ToString(CultureInfo.InvariantCulture));

    /// <inheritdoc/>
    public override string ToString() => Value ?? "";

    internal static MutexdPosition From(JsonElement e, string name)
    {
        if (!e.TryGetProperty(name, out var v))
        {
            return default;
        }
        return v.ValueKind switch
        {
            JsonValueKind.Number => new MutexdPosition(v.GetRawText()),
            JsonValueKind.String => new MutexdPosition(v.GetString() ?? ""),
            _ => default,
        };
    }
}

/// <summary>A page of held resources (<c>GET /v1/resources</c>).</summary>
public sealed record MutexdResourceList
{
    /// <summary>The resources, in name order.</summary>
    public IReadOnlyList<MutexdResourceState> Resources { get; init; } = Array.Empty<MutexdResourceState>();
    /// <summary>The cursor of the next page, or null.</summary>
    public string? NextCursor { get; init; }
    /// <summary>The change index when it was read: pass it to a list watch.</summary>
    public MutexdPosition Index { get; init; }

    internal static MutexdResourceList From(JsonElement e)
    {
        var list = new List<MutexdResourceState>();
        if (e.TryGetProperty("resources", out var rs) && rs.ValueKind == JsonValueKind.Array)
        {
            foreach (var r in rs.EnumerateArray())
            {
                list.Add(MutexdResourceState.From(r));
            }
        }
        return new MutexdResourceList { Resources = list, NextCursor = Json.Str(e, "next_cursor"), Index = MutexdPosition.From(e, "index") };
    }
}

/// <summary>One change of a resource in the events feed.</summary>
public sealed record MutexdEvent
{
    /// <summary>Its change index (a position on a partitioned group).</summary>
    public MutexdPosition Index { get; init; }
    /// <summary>When (informative).</summary>
    public DateTimeOffset? At { get; init; }
    /// <summary>The resource.</summary>
    public string Resource { get; init; } = "";
    /// <summary><c>granted</c>, <c>renewed</c>, <c>released</c>, <c>expired</c> or <c>broken</c>.</summary>
    public string Type { get; init; } = "";
    /// <summary>The lease's owner.</summary>
    public string? Owner { get; init; }
    /// <summary>The lease's fencing token.</summary>
    public ulong FencingToken { get; init; }
    /// <summary>Whether the lease was shared.</summary>
    public bool Shared { get; init; }
    /// <summary>The resource's limit.</summary>
    public int Limit { get; init; } = 1;

    internal static MutexdEvent From(JsonElement e) => new()
    {
        Index = MutexdPosition.From(e, "index"),
        At = Json.Time(e, "at"),
        Resource = Json.Str(e, "resource") ?? "",
        Type = Json.Str(e, "type") ?? "",
        Owner = Json.Str(e, "owner"),
        FencingToken = Json.ULong(e, "fencing_token") ?? 0,
        Shared = Json.Bool(e, "shared") ?? false,
        Limit = (int)(Json.Long(e, "limit") ?? 1),
    };
}

/// <summary>A page of the events feed.</summary>
public sealed record MutexdEventPage
{
    /// <summary>The events, oldest first.</summary>
    public IReadOnlyList<MutexdEvent> Events { get; init; } = Array.Empty<MutexdEvent>();
    /// <summary>The position to pass as <c>after</c> next time.</summary>
    public MutexdPosition Next { get; init; }
    /// <summary>Whether events after the position asked were already dropped.</summary>
    public bool Truncated { get; init; }

    internal static MutexdEventPage From(JsonElement e)
    {
        var list = new List<MutexdEvent>();
        if (e.TryGetProperty("events", out var es) && es.ValueKind == JsonValueKind.Array)
        {
            foreach (var x in es.EnumerateArray())
            {
                list.Add(MutexdEvent.From(x));
            }
        }
        return new MutexdEventPage { Events = list, Next = MutexdPosition.From(e, "next"), Truncated = Json.Bool(e, "truncated") ?? false };
    }
}

/// <summary>The answer of a token check (<c>POST .../check</c>).</summary>
public sealed record MutexdCheck(string Resource, ulong FencingToken, bool Current, ulong NewestToken);

/// <summary>Who a token is (<c>GET /v1/whoami</c>).</summary>
public sealed record MutexdWhoami(string? Name, IReadOnlyList<string> Scopes);

/// <summary>A server group as one server sees it (<c>GET /v1/servers</c>).</summary>
public sealed record MutexdServerGroup
{
    /// <summary>The server's own URL (null when alone).</summary>
    public string? SelfUrl { get; init; }
    /// <summary><c>active</c>, <c>standby</c>, <c>joining</c> or <c>alone</c>.</summary>
    public string SelfRole { get; init; } = "";
    /// <summary>The active server's URL, or null.</summary>
    public string? ActiveUrl { get; init; }
    /// <summary>The active server's generation.</summary>
    public ulong? ActiveGeneration { get; init; }
    /// <summary>The servers of the group: URL and role.</summary>
    public IReadOnlyList<(string Url, string Role)> Servers { get; init; } = Array.Empty<(string, string)>();
    /// <summary>The partition count (1 when not partitioned).</summary>
    public int PartitionCount { get; init; } = 1;
    /// <summary>The owner URL of each partition (null while none owns it).</summary>
    public IReadOnlyList<string?> PartitionOwners { get; init; } = Array.Empty<string?>();

    internal static MutexdServerGroup From(JsonElement e)
    {
        var servers = new List<(string, string)>();
        if (e.TryGetProperty("servers", out var ss) && ss.ValueKind == JsonValueKind.Array)
        {
            foreach (var s in ss.EnumerateArray())
            {
                servers.Add((Json.Str(s, "url") ?? "", Json.Str(s, "role") ?? ""));
            }
        }
        int count = 1;
        var owners = new List<string?>();
        if (e.TryGetProperty("partitions", out var p) && p.ValueKind == JsonValueKind.Object)
        {
            count = (int)(Json.Long(p, "count") ?? 1);
            var arr = new string?[Math.Clamp(count, 1, Partitions.Max)];
            if (p.TryGetProperty("owners", out var os) && os.ValueKind == JsonValueKind.Array)
            {
                foreach (var o in os.EnumerateArray())
                {
                    var n = Json.Long(o, "partition") ?? -1;
                    if (n >= 0 && n < arr.Length)
                    {
                        arr[n] = Json.Str(o, "url");
                    }
                }
            }
            owners.AddRange(arr);
        }
        JsonElement self = e.TryGetProperty("self", out var sf) ? sf : default;
        JsonElement active = e.TryGetProperty("active", out var ac) ? ac : default;
        return new MutexdServerGroup
        {
            SelfUrl = self.ValueKind == JsonValueKind.Object ? Json.Str(self, "url") : null,
            SelfRole = self.ValueKind == JsonValueKind.Object ? Json.Str(self, "role") ?? "" : "",
            ActiveUrl = active.ValueKind == JsonValueKind.Object ? Json.Str(active, "url") : null,
            ActiveGeneration = active.ValueKind == JsonValueKind.Object ? Json.ULong(active, "generation") : null,
            Servers = servers,
            PartitionCount = count,
            PartitionOwners = owners,
        };
    }
}

/// <summary>Reading the API's JSON leniently: a field of another type reads as absent.</summary>
internal static class Json
{
    public static string? Str(JsonElement e, string name) =>
        e.ValueKind == JsonValueKind.Object && e.TryGetProperty(name, out var v) && v.ValueKind == JsonValueKind.String ? v.GetString() : null;

    public static long? Long(JsonElement e, string name) =>
        e.ValueKind == JsonValueKind.Object && e.TryGetProperty(name, out var v) && v.ValueKind == JsonValueKind.Number && v.TryGetInt64(out var n) ? n : null;

    public static ulong? ULong(JsonElement e, string name) =>
        e.ValueKind == JsonValueKind.Object && e.TryGetProperty(name, out var v) && v.ValueKind == JsonValueKind.Number && v.TryGetUInt64(out var n) ? n : null;

    public static bool? Bool(JsonElement e, string name) =>
        e.ValueKind == JsonValueKind.Object && e.TryGetProperty(name, out var v) && (v.ValueKind == JsonValueKind.True || v.ValueKind == JsonValueKind.False) ? v.GetBoolean() : null;

    public static JsonObject? Obj(JsonElement e, string name) =>
        e.ValueKind == JsonValueKind.Object && e.TryGetProperty(name, out var v) && v.ValueKind == JsonValueKind.Object ? JsonNode.Parse(v.GetRawText()) as JsonObject : null;

    public static DateTimeOffset? Time(JsonElement e, string name) =>
        Str(e, name) is string s && DateTimeOffset.TryParse(s, CultureInfo.InvariantCulture, DateTimeStyles.AssumeUniversal, out var t) ? t : null;
}
