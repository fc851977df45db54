/*
 * The partition count of a container's group (see layout.h).
 */
#include "server/layout.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "common/partition.h"
#include "persistence/owner.h"

/* LAYOUT_AGAIN when the blob store did not answer `r` (it may next time), else
 * LAYOUT_FAILED. */
static enum layout_rc failure(const struct blob_result *r)
{
    return blob_result_transient(r) ? LAYOUT_AGAIN : LAYOUT_FAILED;
}

/* The count the `group` blob holds: LAYOUT_OK with *found (0: no such blob), or a
 * failure. */
static enum layout_rc read_count(struct blob_client *c, unsigned *found, char *err, size_t errlen)
{
    struct blob_result r = {0};
    *found = 0;
    if (blob_get(c, LAYOUT_BLOB, NULL, &r) != 0) {
        enum layout_rc rc = r.status == 404 ? LAYOUT_OK : failure(&r);
        if (rc != LAYOUT_OK)
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

/* A container written before the count was written for every N: the container's own owner
 * blob, or a journal of its own, and no `group` blob. Its group is one of one partition. */
static enum layout_rc written_before(struct blob_client *c, bool *is, char *err, size_t errlen)
{
    struct blob_result r = {0};
    enum layout_rc out = LAYOUT_OK;
    *is = blob_head(c, OWNER_BLOB, &r) == 0;
    if (!*is && r.status != 404) {
        out = failure(&r);
        snprintf(err, errlen, "cannot read the owner blob: %ld %s %s", r.status, r.error_code,
                 r.message);
    }
    blob_result_free(&r);
    if (*is || out != LAYOUT_OK)
        return out;
    struct blob_list page = {0};
    r = (struct blob_result){0};
    if (blob_list_page(c, "journal/", NULL, 1, &page, &r) == 0) {
        *is = page.count > 0;
    } else {
        out = failure(&r);
        snprintf(err, errlen, "cannot list the journals: %ld %s %s", r.status, r.error_code,
                 r.message);
    }
    blob_list_free(&page);
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
    bool before;
    if ((rc = written_before(c, &before, err, errlen)) != LAYOUT_OK)
        return rc;
    /* The count is written for every N, 1 included, with a create that fails if the blob
     * exists: of servers started together on a new container with different counts, the
     * first create makes the group and every other server reads it and is refused. (With
     * nothing written for N = 1, a server of one partition and a server of four both
     * served the same resources.) A container written before is recorded as the group of
     * one partition it is. */
    unsigned count = before ? 1 : want;
    char text[96];
    snprintf(text, sizeof text, "{\"partitions\":%u,\"hash\":\"crc32\",\"version\":1}\n", count);
    struct blob_cond none = {.if_none_match = "*"};
    struct blob_result r = {0};
    int put = blob_put(c, LAYOUT_BLOB, text, strlen(text), &none, &r);
    long status = r.status;
    enum layout_rc put_rc = failure(&r);
    blob_result_free(&r);
    if (put == 0) {
        *found = count;
        return compare(want, count, err, errlen);
    }
    if (status != 409 && status != 412) {
        if (before) { /* its count is known without the blob: written next time */
            *found = 1;
            return compare(want, 1, err, errlen);
        }
        snprintf(err, errlen, "cannot write the %s blob: status %ld", LAYOUT_BLOB, status);
        return put_rc;
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
    struct blob_result r = {0};
    if (blob_create_container(c, &r) == 0 || r.status == 409) {
        rc = layout_settle(c, (unsigned)opt->partitions, found, err, errlen);
    } else {
        rc = failure(&r);
        snprintf(err, errlen, "cannot create the blob container '%s': %ld %s %s",
                 opt->blob_container, r.status, r.error_code, r.message);
    }
    blob_result_free(&r);
out:
    blob_client_free(c);
    blob_account_wipe(&account);
    return rc;
}
