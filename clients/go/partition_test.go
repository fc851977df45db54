package mutexd

// PartitionOf against the published test vectors (tests/vectors/partitions.json, the table
// of docs/api.md, "Partitions"), which the server's tests and every client's run too; and
// the hash-tag rule's edges. No server.

import (
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var vectorsFile = filepath.Join("..", "..", "tests", "vectors", "partitions.json")

func TestEveryPublishedPartitionVectorHolds(t *testing.T) {
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []struct {
			Name, Hashed, CRC32 string
			Partitions          map[string]int
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, v := range doc.Vectors {
		if got := hashTag(v.Name); got != v.Hashed {
			t.Errorf("%s: hashes %q, want %q", v.Name, got, v.Hashed)
		}
		want, err := strconv.ParseUint(v.CRC32, 16, 32)
		if err != nil {
			t.Fatalf("%s: crc32 %q: %v", v.Name, v.CRC32, err)
		}
		if got := nameHash(v.Name); got != uint32(want) {
			t.Errorf("%s: CRC-32 %08x, want %s", v.Name, got, v.CRC32)
		}
		for n, p := range v.Partitions {
			count, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("%s: count %q: %v", v.Name, n, err)
			}
			if got := PartitionOf(v.Name, count); got != p {
				t.Errorf("%s: partition %d of %d, want %d", v.Name, got, count, p)
			}
			checked++
		}
	}
	if checked < 40 {
		t.Fatalf("only %d partitions checked", checked)
	}
}

func TestTheHashTagRule(t *testing.T) {
	// Edges the vectors leave out: one byte between the braces is a tag, a tag may end the
	// name, and a '}' before the first '{' closes nothing.
	for name, tag := range map[string]string{"{x}": "x", "x/{order-7}": "order-7", "a}b{c}": "c"} {
		if got := hashTag(name); got != tag {
			t.Errorf("%s: %q, want %q", name, got, tag)
		}
	}
	// Bytes of UTF-8, not runes.
	if got, want := nameHash("{é}/x"), crc32.ChecksumIEEE([]byte("é")); got != want {
		t.Errorf("{é}/x: %08x, want %08x", got, want)
	}
	// Names that share a tag share a partition, whatever the count.
	for count := 1; count <= 256; count++ {
		if a, b := PartitionOf("{o}/a", count), PartitionOf("{o}/bb", count); a != b {
			t.Errorf("count %d: %d and %d", count, a, b)
		}
	}
}

func TestAPartitionCountOutOfRangePanics(t *testing.T) {
	for _, count := range []int{0, -1, 257} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "partition count") {
					t.Errorf("count %d: recovered %v", count, r)
				}
			}()
			PartitionOf("a", count)
		}()
	}
}

// A hash tag's braces go percent-encoded in a path, as the contract asks.
func TestHashTagBracesArePercentEncoded(t *testing.T) {
	path, err := resourcePath("{order-7}/lock")
	if err != nil || path != "/v1/resources/%7Border-7%7D/lock" {
		t.Fatalf("%q, %v", path, err)
	}
}
