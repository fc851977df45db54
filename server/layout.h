/*
 * How many partitions the group of a container has, fixed when the group is created
 * (docs/architecture.md, "Beyond one group: partitions"): the first server of a group of
 * N > 1 writes the `group` blob once, {"partitions":N,"hash":"crc32","version":1}, with a
 * create that fails if it exists; every later server reads it and must ask for the same N.
 * A container without it is a group of one partition, as every container written before
 * partitions is: its owner blob is the container's own, and no `group` blob is written for
 * N = 1, so that layout stays blob for blob.
 *
 * Threads: any; the caller's blob client is its own.
 */
#ifndef MX_LAYOUT_H
#define MX_LAYOUT_H

#include <stddef.h>

#include "blob/blob.h"
#include "server/options.h"

#define LAYOUT_BLOB "group"

enum layout_rc {
    LAYOUT_OK,       /* the container's group has `want` partitions (written now, or read) */
    LAYOUT_MISMATCH, /* it has *found, another count: err names both */
    LAYOUT_FAILED,   /* the blob store did not answer, or the blob cannot be read: err */
};

enum layout_rc layout_settle(struct blob_client *c, unsigned want, unsigned *found, char *err,
                             size_t errlen);

/* The same on the container of a server's options (--blob-connection-string,
 * --blob-container), for --partitions: creates the container if it is missing, and tries
 * for up to 30 s while the blob store does not answer, as joining the group does. */
enum layout_rc layout_check(const struct options *opt, unsigned *found, char *err, size_t errlen);

#endif
