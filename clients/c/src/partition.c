/*
 * The partition of a resource name (see partition.h and mutexd_partition_of() in mutexd.h).
 */
#include "partition.h"

#include <string.h>
#include <zlib.h>

#include "mutexd.h"

const char *mxc_hash_tag(const char *name, size_t *len)
{
    const char *open = strchr(name, '{');
    const char *close = open != NULL ? strchr(open + 1, '}') : NULL;
    if (close != NULL && close > open + 1) {
        *len = (size_t)(close - (open + 1));
        return open + 1;
    }
    *len = strlen(name);
    return name;
}

uint32_t mxc_name_hash(const char *name)
{
    size_t len;
    const char *tag = mxc_hash_tag(name, &len);
    return (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), (const Bytef *)tag, len);
}

mutexd_result mutexd_partition_of(const char *name, unsigned count, unsigned *partition)
{
    if (name == NULL || partition == NULL || count < 1 || count > MXC_PARTITIONS_MAX)
        return MUTEXD_ERR_ARG;
    *partition = mxc_name_hash(name) % count;
    return MUTEXD_OK;
}
