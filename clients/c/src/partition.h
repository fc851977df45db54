/*
 * The partition of a resource name (docs/api.md, "Partitions"), inside the library:
 * mutexd_partition_of() is the public side. Pure; any thread.
 */
#ifndef MXC_PARTITION_H
#define MXC_PARTITION_H

#include <stddef.h>
#include <stdint.h>

/* The most partitions a count may name. */
#define MXC_PARTITIONS_MAX 256

/* The bytes of the NUL-terminated `name` that are hashed, *len of them: its hash tag (the
 * bytes between the first '{' and the first '}' after it, when there is at least one; Redis
 * Cluster's rule), or the whole name. */
const char *mxc_hash_tag(const char *name, size_t *len);

/* The CRC-32 (IEEE, zlib's) of what mxc_hash_tag() picks. */
uint32_t mxc_name_hash(const char *name);

#endif
