/*
 * Writing JSON with cJSON (see json_out.h).
 */
#include "common/json_out.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/names.h"

void mx_json_add_u64(cJSON *o, const char *key, uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    cJSON_AddRawToObject(o, key, buf);
}

void mx_json_add_i64(cJSON *o, const char *key, int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    cJSON_AddRawToObject(o, key, buf);
}

void mx_json_add_name(cJSON *o, const char *key, const char *s, size_t len)
{
    char buf[MX_NAME_MAX + 1];
    if (len > MX_NAME_MAX)
        len = MX_NAME_MAX;
    memcpy(buf, s, len);
    buf[len] = '\0';
    cJSON_AddStringToObject(o, key, buf);
}

char *mx_json_print(cJSON *o)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}
