package mutexd

import (
	"fmt"
	"hash/crc32"
	"strings"
)

// maxPartitions is the largest partition count the contract allows.
const maxPartitions = 256

// PartitionOf is the partition of the resource name among count partitions (1 to 256): 0
// to count-1, as the server computes it (docs/api.md, "Partitions"). It is the CRC-32 (IEEE)
// of the name's bytes, or of its hash tag only (the bytes between the first '{' and the
// first '}' after it, when there is at least one), modulo count: names that share a tag,
// "{order-7}/lock" and "{order-7}/stock", share a partition whatever the count. With a
// count of 1 every name is in partition 0.
//
// It panics if count is out of range, as a bad argument to rand.Intn does.
func PartitionOf(name string, count int) int {
	if count < 1 || count > maxPartitions {
		panic(fmt.Sprintf("mutexd: the partition count must be 1 to %d, not %d", maxPartitions, count))
	}
	return int(nameHash(name) % uint32(count))
}

// hashTag is what of name is hashed: its hash tag, or the whole name (Redis Cluster's rule).
func hashTag(name string) string {
	if open := strings.IndexByte(name, '{'); open >= 0 {
		if n := strings.IndexByte(name[open+1:], '}'); n > 0 {
			return name[open+1 : open+1+n]
		}
	}
	return name
}

// nameHash is the CRC-32 (IEEE) of what hashTag picks.
func nameHash(name string) uint32 {
	return crc32.ChecksumIEEE([]byte(hashTag(name)))
}
