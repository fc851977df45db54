using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using Xunit;

namespace Mutexd.Tests;

/// <summary>The .NET table of errors in docs/clients.md is the code's: every type, its parent, and the statuses and codes it is chosen for.</summary>
public class ErrorTableTests
{
    private static List<string[]> Rows(string heading)
    {
        var lines = File.ReadAllLines(Path.Combine(T.Root, "docs", "clients.md"));
        int i = Array.IndexOf(lines, heading);
        Assert.True(i >= 0, $"no table {heading} in docs/clients.md");
        var rows = new List<string[]>();
        for (i += 2; i < lines.Length && lines[i].StartsWith('|'); i++)
        {
            rows.Add(lines[i].Trim().Trim('|').Split('|').Select(c => c.Trim()).ToArray());
        }
        return rows;
    }

    [Fact]
    public void EveryRowIsTheCodes()
    {
        var rows = Rows("| status | code | .NET | parent |");
        var types = typeof(MutexdException).Assembly.GetExportedTypes()
            .Where(t => typeof(MutexdException).IsAssignableFrom(t)).ToDictionary(t => t.Name);
        var seen = new HashSet<string>();
        foreach (var r in rows)
        {
            Assert.Equal(4, r.Length);
            var name = r[2].Trim('`');
            var parent = r[3].Trim('`');
            Assert.True(types.TryGetValue(name, out var type), $"no type {name}");
            Assert.Equal(parent, type!.BaseType!.Name);
            seen.Add(name);
            if (int.TryParse(r[0], out var status))
            {
                var code = r[1] == "any other" ? "something_new" : r[1].Trim('`');
                Assert.IsType(type, MutexdException.FromAnswer(status, code, "m", null, null, null, null));
            }
            else if (r[0] == "any other 5xx")
            {
                Assert.IsType(type, MutexdException.FromAnswer(502, "bad_gateway", "m", null, null, null, null));
            }
        }
        Assert.Empty(types.Keys.Except(seen)); // every exception type of the client has its row
    }
}
