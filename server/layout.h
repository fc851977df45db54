/*
 * How many partitions the group of a container has, fixed when the group is created
 * (docs/architecture.md, "Beyond one group: partitions"): the first server writes the `group`
 * blob once, {"partitions":N,"hash":"crc32","version":1}, for every N (1 included), with a
 * create that fails if it exists; every later server reads it and must ask for the same N.
 * Of servers started together on a new container with different counts, the first create
 * wins and the others are refused. Every server that uses a container checks it, with --ha
 * or not. A container without it that has its own owner blob or journals was written
 * before the count was written for N = 1: a group of one partition (the blob is then
 * written with 1).
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
    LAYOUT_AGAIN,    /* the blob store did not answer (it may next time): err */
    LAYOUT_FAILED,   /* refused (credentials, a count that cannot be read...): err */
};

enum layout_rc layout_settle(struct blob_client *c, unsigned want, unsigned *found, char *err,
                             size_t errlen);

/* One attempt of the same on the container of a server's options
 * (--blob-connection-string, --blob-container, --partitions): creates the container if it
 * is missing. The caller tries again after LAYOUT_AGAIN. */
enum layout_rc layout_check(const struct options *opt, unsigned *found, char *err, size_t errlen);

#endif
