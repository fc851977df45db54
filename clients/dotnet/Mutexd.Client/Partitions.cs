using System;
using System.Text;

namespace Mutexd;

/// <summary>
/// Which partition of a partitioned group serves a resource (docs/api.md, "Partitions"): the
/// CRC-32 (IEEE, as zlib's) of the name's hash tag, or of the whole name, modulo the count.
/// </summary>
public static class Partitions
{
    /// <summary>The most partitions a group may have.</summary>
    public const int Max = 256;

    private static readonly uint[] Table = MakeTable();

    private static uint[] MakeTable()
    {
        var t = new uint[256];
        for (uint n = 0; n < 256; n++)
        {
            uint c = n;
            for (int k = 0; k < 8; k++)
            {
                c = (c & 1) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            }
            t[n] = c;
        }
        return t;
    }

    /// <summary>The CRC-32 (IEEE) of <paramref name="data"/>.</summary>
    public static uint Crc32(ReadOnlySpan<byte> data)
    {
        uint c = 0xFFFFFFFFu;
        foreach (var b in data)
        {
            c = Table[(c ^ b) & 0xFF] ^ (c >> 8);
        }
        return c ^ 0xFFFFFFFFu;
    }

    /// <summary>
    /// The bytes of the name that are hashed: between the first <c>{</c> and the first
    /// <c>}</c> after it when at least one byte lies between them, else the whole name.
    /// </summary>
    public static ReadOnlySpan<byte> Hashed(ReadOnlySpan<byte> name)
    {
        int open = name.IndexOf((byte)'{');
        if (open >= 0)
        {
            int close = name[(open + 1)..].IndexOf((byte)'}');
            if (close > 0)
            {
                return name.Slice(open + 1, close);
            }
        }
        return name;
    }

    /// <summary>The partition of <paramref name="resource"/> in a group of <paramref name="count"/>.</summary>
    public static int Of(string resource, int count)
    {
        if (count < 1)
        {
            throw new ArgumentOutOfRangeException(nameof(count), "the partition count is at least 1");
        }
        return (int)(Crc32(Hashed(Encoding.UTF8.GetBytes(resource))) % (uint)count);
    }
}
