/*
 * The partition count of a container's group (see layout.h).
 */
#include "server/layout.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/partition.h"
#include "persistence/owner.h"

/* The count the `group` blob holds: LAYOUT_OK with *found (0: no such blob), or
 * LAYOUT_FAILED. */
static enum layout_rc read_count(struct blob_client *c, unsigned *found, char *err, size_t errlen)
{
    struct blob_result r = {0};
    *found = 0;
    if (blob_get(c, LAYOUT_BLOB, NULL, &r) != 0) {
        enum layout_rc rc = r.status == 404 ? LAYOUT_OK : LAYOUT_FAILED;
        if (rc == LAYOUT_FAILED)
            snprintf(err, errlen, "cannot read the %s blob: %ld %s %s", LAYOUT_BLOB, r.status,
                     r.error_code, r.message);
        blob_result_free(&r);
        return rc;
    }
    cJSON *o = r.body ? cJSON_ParseWithLength(r.body, r.body_len) : NULL;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "partitions");
    if (cJSON_IsNumber(n) && n->valuedouble >= 1 && n->valuedouble <= MX_PARTITIONS_MAX &&
        n->valuedouble == (double)(unsigned)n->valuedouble)
        *found = (unsigned)n->valuedouble;
    else
        snprintf(err, errlen, "the %s blob holds no partition count from 1 to %d", LAYOUT_BLOB,
                 MX_PARTITIONS_MAX);
    cJSON_Delete(o);
    blob_result_free(&r);
    return *found ? LAYOUT_OK : LAYOUT_FAILED;
}

/* A container holding a group of one partition (the container's own owner blob). */
static enum layout_rc one_partition_group(struct blob_client *c, bool *is, char *err, size_t errlen)
{
    struct blob_result r = {0};
    int rc = blob_head(c, OWNER_BLOB, &r);
    *is = rc == 0;
    enum layout_rc out = rc == 0 || r.status == 404 ? LAYOUT_OK : LAYOUT_FAILED;
    if (out == LAYOUT_FAILED)
        snprintf(err, errlen, "cannot read the owner blob: %ld %s %s", r.status, r.error_code,
                 r.message);
    blob_result_free(&r);
    return out;
}

static enum layout_rc compare(unsigned want, unsigned found, char *err, size_t errlen)
{
    if (found == want)
        return LAYOUT_OK;
    snprintf(err, errlen,
             "the group of this container has %u partition%s, fixed when it was created; this "
             "server asks for %u (--partitions)",
             found, found == 1 ? "" : "s", want);
    return LAYOUT_MISMATCH;
}

enum layout_rc layout_settle(struct blob_client *c, unsigned want, unsigned *found, char *err,
                             size_t errlen)
{
    enum layout_rc rc = read_count(c, found, err, errlen);
    if (rc != LAYOUT_OK)
        return rc;
    if (*found)
        return compare(want, *found, err, errlen);
    bool one;
    if ((rc = one_partition_group(c, &one, err, errlen)) != LAYOUT_OK)
        return rc;
    if (one || want == 1) {
        *found = 1;
        return compare(want, 1, err, errlen);
    }
    char text[96];
    snprintf(text, sizeof text, "{\"partitions\":%u,\"hash\":\"crc32\",\"version\":1}\n", want);
    struct blob_cond none = {.if_none_match = "*"};
    struct blob_result r = {0};
    int put = blob_put(c, LAYOUT_BLOB, text, strlen(text), &none, &r);
    long status = r.status;
    blob_result_free(&r);
    if (put == 0) {
        *found = want;
        return LAYOUT_OK;
    }
    if (status != 409 && status != 412) {
        snprintf(err, errlen, "cannot write the %s blob: status %ld", LAYOUT_BLOB, status);
        return LAYOUT_FAILED;
    }
    /* Another server created it first: its count is the group's. */
    if ((rc = read_count(c, found, err, errlen)) != LAYOUT_OK)
        return rc;
    return *found ? compare(want, *found, err, errlen) : LAYOUT_FAILED;
}

enum layout_rc layout_check(const struct options *opt, unsigned *found, char *err, size_t errlen)
{
    struct blob_account account;
    struct blob_client *c = NULL;
    struct blob_options quick = {.connect_timeout_ms = 1000, .timeout_ms = 2000};
    if (blob_parse_connection_string(opt->blob_connection_string, &account, err, errlen) != 0)
        return LAYOUT_FAILED;
    enum layout_rc rc = LAYOUT_FAILED;
    if (blob_client_new(&account, opt->blob_container, &quick, &c, err, errlen) != 0)
        goto out;
    uint64_t until = mx_mono_ns() + 30000 * MX_NS_PER_MS;
    for (;;) {
        struct blob_result r = {0};
        bool made = blob_create_container(c, &r) == 0 || r.status == 409;
        bool transient = !made && blob_result_transient(&r);
        if (!made)
            snprintf(err, errlen, "cannot create the blob container '%s': %ld %s %s",
                     opt->blob_container, r.status, r.error_code, r.message);
        blob_result_free(&r);
        if (made &&
            (rc = layout_settle(c, (unsigned)opt->partitions, found, err, errlen)) != LAYOUT_FAILED)
            break;
        if ((made ? false : !transient) || mx_mono_ns() >= until)
            break;
        char quoted[600];
        mx_warn("cannot read the group's partition count; trying again", "error=%s",
                mx_log_quote(quoted, sizeof quoted, err));
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
out:
    blob_client_free(c);
    blob_account_wipe(&account);
    return rc;
}
