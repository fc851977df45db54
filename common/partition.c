/*
 * The partition of a resource (see partition.h).
 */
#include "common/partition.h"

#include <stdio.h>
#include <string.h>
#include <zlib.h>

const char *mx_hash_tag(const char *name, size_t len, size_t *tag_len)
{
    const char *open = memchr(name, '{', len);
    if (open) {
        size_t from = (size_t)(open - name) + 1;
        const char *close = memchr(name + from, '}', len - from);
        if (close && close > name + from) {
            *tag_len = (size_t)(close - (name + from));
            return name + from;
        }
    }
    *tag_len = len;
    return name;
}

uint32_t mx_name_hash(const char *name, size_t len)
{
    size_t n;
    const char *tag = mx_hash_tag(name, len, &n);
    return (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)tag, (uInt)n);
}

unsigned mx_partition(const char *name, size_t len, unsigned count)
{
    return count > 1 ? mx_name_hash(name, len) % count : 0;
}

void mx_partition_prefix(unsigned p, unsigned count, char out[MX_PARTITION_PREFIX_MAX])
{
    if (count <= 1)
        out[0] = '\0';
    else
        snprintf(out, MX_PARTITION_PREFIX_MAX, "p/%03u/", p % 1000u);
}
