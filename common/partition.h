/*
 * The partition of a resource (docs/api.md, "Partitions"): the CRC-32 (IEEE, zlib's) of its
 * name, or of its hash tag, modulo the group's partition count. The hash-tag rule is Redis
 * Cluster's: the bytes between the first `{` and the first `}` after it, when there is at
 * least one; else the whole name. Pure; any thread.
 */
#ifndef MX_PARTITION_H
#define MX_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#define MX_PARTITIONS_MAX 256

/* The bytes of `name` that are hashed: its hash tag, or the whole name. */
const char *mx_hash_tag(const char *name, size_t len, size_t *tag_len);

/* The CRC-32 of what mx_hash_tag() picks. */
uint32_t mx_name_hash(const char *name, size_t len);

/* The partition of `name` in a group of `count` partitions (1 to MX_PARTITIONS_MAX): 0 to
 * count - 1. */
unsigned mx_partition(const char *name, size_t len, unsigned count);

/* Where partition `p` of `count` keeps its blobs in the container (blob_options.prefix):
 * "p/<ppp>/" (three digits), or "" when there is one partition, whose blobs are the
 * container's own, as before partitions. `out`: MX_PARTITION_PREFIX_MAX bytes. */
#define MX_PARTITION_PREFIX_MAX 8
void mx_partition_prefix(unsigned p, unsigned count, char out[MX_PARTITION_PREFIX_MAX]);

#endif
