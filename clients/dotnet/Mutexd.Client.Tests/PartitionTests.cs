using System.Globalization;
using System.IO;
using System.Text;
using System.Text.Json;
using Xunit;

namespace Mutexd.Tests;

/// <summary>The shared vectors of tests/vectors/partitions.json, which every client and the server run.</summary>
public class PartitionTests
{
    [Fact]
    public void EveryVectorHashesAndMapsAsPublished()
    {
        using var doc = JsonDocument.Parse(File.ReadAllText(Path.Combine(T.Root, "tests", "vectors", "partitions.json")));
        int n = 0;
        foreach (var v in doc.RootElement.GetProperty("vectors").EnumerateArray())
        {
            var name = v.GetProperty("name").GetString()!;
            var hashed = Partitions.Hashed(Encoding.UTF8.GetBytes(name));
            Assert.Equal(v.GetProperty("hashed").GetString(), Encoding.UTF8.GetString(hashed));
            Assert.Equal(v.GetProperty("crc32").GetString(), Partitions.Crc32(hashed).ToString("x8", CultureInfo.InvariantCulture));
            foreach (var p in v.GetProperty("partitions").EnumerateObject())
            {
                Assert.Equal(p.Value.GetInt32(), Partitions.Of(name, int.Parse(p.Name, CultureInfo.InvariantCulture)));
            }
            n++;
        }
        Assert.True(n >= 5, $"{n} vectors");
    }

    [Fact]
    public void BracesOfAHashTagArePercentEncodedInAPath()
    {
        Assert.Equal("%7Border-7%7D/lock", MutexdClient.Escape("{order-7}/lock"));
        Assert.Equal("a%20b/%C3%A9", MutexdClient.Escape("a b/é"));
    }
}
