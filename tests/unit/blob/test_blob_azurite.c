/*
 * The blob client against a real Azurite. scripts/with-azurite.sh starts one and sets
 * MUTEXD_TEST_BLOB_CONNECTION_STRING; without it every case fails (it must never pass by not
 * running). Each case works in a container of its own.
 */
#include "tests/unit/azurite.h"

#include <string.h>
#include <unistd.h>

#include "blob/blob.h"
#include "blob/internal.h"

#define SPECIAL_NAME "dir one/sub+dir/\xC3\xA4 %#?=&;@'.txt"

#define EXPECT MX_AZ_EXPECT

static void container_create_is_idempotent(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    /* Again: already there, still success, and the status tells. */
    EXPECT(blob_create_container(c, &r), 0, 409, "ContainerAlreadyExists");
    EXPECT(blob_delete_container(c, &r), 0, 202, "");
    EXPECT(blob_put(c, "x", "y", 1, NULL, &r), -1, 404, "ContainerNotFound");
    EXPECT(blob_create_container(c, &r), 0, 201, "");
    blob_result_free(&r);
    blob_client_free(c);
}

static void put_get_special_name(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    char body[300];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (char)(i * 7);

    EXPECT(blob_put(c, SPECIAL_NAME, body, sizeof body, NULL, &r), 0, 201, "");
    assert_true(r.etag[0] == '"');
    char etag[BLOB_ETAG_MAX];
    strcpy(etag, r.etag);

    EXPECT(blob_get(c, SPECIAL_NAME, NULL, &r), 0, 200, "");
    assert_int_equal(r.body_len, sizeof body);
    assert_memory_equal(r.body, body, sizeof body);
    assert_string_equal(r.etag, etag);
    assert_int_equal(r.content_length, (int64_t)sizeof body);

    EXPECT(blob_head(c, SPECIAL_NAME, &r), 0, 200, "");
    assert_null(r.body);
    assert_int_equal(r.content_length, (int64_t)sizeof body);
    assert_string_equal(r.etag, etag);

    /* The listing gives the name back unescaped. */
    struct blob_list l = {0};
    EXPECT(blob_list_page(c, "dir one/", NULL, 0, &l, &r), 0, 200, "");
    assert_int_equal(l.count, 1);
    assert_string_equal(l.items[0].name, SPECIAL_NAME);
    assert_string_equal(l.items[0].etag, etag);
    assert_int_equal(l.items[0].size, (int64_t)sizeof body);
    assert_null(l.next_marker);
    blob_list_free(&l);
    blob_result_free(&r);
    blob_client_free(c);
}

static void empty_and_large_blobs(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    /* 0 bytes: Content-Length is signed as "". */
    EXPECT(blob_put(c, "empty", NULL, 0, NULL, &r), 0, 201, "");
    EXPECT(blob_get(c, "empty", NULL, &r), 0, 200, "");
    assert_int_equal(r.body_len, 0);
    assert_int_equal(r.content_length, 0);

    /* 2 MB: libcurl would wait on Expect: 100-continue without the suppression. */
    size_t n = 2u << 20;
    char *big = malloc(n);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(i * 31 + (i >> 12));
    EXPECT(blob_put(c, "big", big, n, NULL, &r), 0, 201, "");
    EXPECT(blob_get(c, "big", NULL, &r), 0, 200, "");
    assert_int_equal(r.body_len, n);
    assert_memory_equal(r.body, big, n);

    /* A client that accepts at most 1 MiB refuses the body, and says so. */
    struct blob_account a = mx_azurite_account();
    struct blob_client *small =
        mx_azurite_client(&a, name, &(struct blob_options){.max_body = 1u << 20});
    EXPECT(blob_get(small, "big", NULL, &r), -1, 0, "");
    assert_non_null(strstr(r.message, "larger than"));
    assert_null(r.body);
    assert_false(blob_result_transient(&r));
    EXPECT(blob_get(small, "empty", NULL, &r), 0, 200, "");
    blob_client_free(small);
    free(big);
    blob_result_free(&r);
    blob_client_free(c);
}

static void conditional_put(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    char e1[BLOB_ETAG_MAX], e2[BLOB_ETAG_MAX];

    EXPECT(blob_put(c, "cond", "one", 3, &(struct blob_cond){.if_none_match = "*"}, &r), 0, 201,
           "");
    strcpy(e1, r.etag);
    /* Create-only on an existing blob: 409, not 412. */
    EXPECT(blob_put(c, "cond", "two", 3, &(struct blob_cond){.if_none_match = "*"}, &r), -1, 409,
           "BlobAlreadyExists");
    EXPECT(blob_put(c, "cond", "two", 3, &(struct blob_cond){.if_match = e1}, &r), 0, 201, "");
    strcpy(e2, r.etag);
    assert_string_not_equal(e1, e2);
    /* A stale ETag. */
    EXPECT(blob_put(c, "cond", "three", 5, &(struct blob_cond){.if_match = e1}, &r), -1, 412,
           "ConditionNotMet");
    assert_false(blob_result_transient(&r));
    /* An ETag as a listing gives it (no quotes) is sent quoted. */
    char bare[BLOB_ETAG_MAX];
    snprintf(bare, sizeof bare, "%.*s", (int)strlen(e2) - 2, e2 + 1);
    EXPECT(blob_put(c, "cond", "three", 5, &(struct blob_cond){.if_match = bare}, &r), 0, 201, "");
    strcpy(e2, r.etag);
    /* Chained writes, each conditional on the ETag the one before returned. */
    for (int i = 0; i < 5; i++)
        EXPECT(blob_put(c, "cond", "three", 5, &(struct blob_cond){.if_match = r.etag}, &r), 0, 201,
               "");
    strcpy(e2, r.etag);
    /* Reading what we have is a 304. */
    EXPECT(blob_get(c, "cond", &(struct blob_cond){.if_none_match = e2}, &r), -1, 304,
           "ConditionNotMet");
    EXPECT(blob_get(c, "cond", &(struct blob_cond){.if_match = e2}, &r), 0, 200, "");
    assert_int_equal(r.body_len, 5);
    assert_memory_equal(r.body, "three", 5);
    blob_result_free(&r);
    blob_client_free(c);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void list_pages(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    enum { N = 8 };
    const char *names[N] = {"list/item-0",
                            "list/item-1",
                            "list/item-2",
                            "list/item-3",
                            "list/item-4",
                            "list/a&b<c>\"'",
                            "list/\xC3\xA9t\xC3\xA9",
                            "list/dir/x"};
    char etags[N][BLOB_ETAG_MAX];
    for (int i = 0; i < N; i++) {
        EXPECT(blob_put(c, names[i], names[i], (size_t)i, NULL, &r), 0, 201, "");
        strcpy(etags[i], r.etag);
    }
    EXPECT(blob_put(c, "other/x", "x", 1, NULL, &r), 0, 201, "");

    const char *sorted[N];
    memcpy(sorted, names, sizeof sorted);
    qsort(sorted, N, sizeof sorted[0], cmp_str);

    struct blob_list l = {0};
    const char *marker = NULL;
    int pages = 0, seen = 0;
    do {
        EXPECT(blob_list_page(c, "list/", marker, 3, &l, &r), 0, 200, "");
        pages++;
        assert_true(l.count <= 3);
        for (size_t i = 0; i < l.count; i++, seen++) {
            assert_true(seen < N);
            assert_string_equal(l.items[i].name, sorted[seen]);
            int k = 0;
            while (strcmp(names[k], sorted[seen]) != 0)
                k++;
            assert_string_equal(l.items[i].etag, etags[k]);
            assert_int_equal(l.items[i].size, k);
        }
        marker = l.next_marker; /* the next call may take it straight from the page */
    } while (marker);
    assert_int_equal(seen, N);
    assert_int_equal(pages, 3);

    /* Without a prefix the other blob shows too. */
    EXPECT(blob_list_page(c, NULL, NULL, 0, &l, &r), 0, 200, "");
    assert_int_equal(l.count, N + 1);
    blob_list_free(&l);
    blob_result_free(&r);
    blob_client_free(c);
}

static void delete_then_get(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    char e1[BLOB_ETAG_MAX];
    EXPECT(blob_put(c, "gone", "a", 1, NULL, &r), 0, 201, "");
    strcpy(e1, r.etag);
    EXPECT(blob_put(c, "gone", "b", 1, NULL, &r), 0, 201, "");
    EXPECT(blob_delete(c, "gone", &(struct blob_cond){.if_match = e1}, &r), -1, 412,
           "ConditionNotMet");
    EXPECT(blob_get(c, "gone", NULL, &r), 0, 200, "");
    /* The condition may point into the result the call fills. */
    EXPECT(blob_delete(c, "gone", &(struct blob_cond){.if_match = r.etag}, &r), 0, 202, "");
    EXPECT(blob_get(c, "gone", NULL, &r), -1, 404, "BlobNotFound");
    assert_false(blob_result_transient(&r));
    EXPECT(blob_delete(c, "gone", NULL, &r), -1, 404, "BlobNotFound");
    EXPECT(blob_head(c, "gone", &r), -1, 404, "BlobNotFound");
    blob_result_free(&r);
    blob_client_free(c);
}

static void append_blocks(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    const char *jn = "journal/1/0";
    const struct blob_cond create_only = {.if_none_match = "*"};
    EXPECT(blob_create_append(c, jn, &create_only, &r), 0, 201, "");
    char created[BLOB_ETAG_MAX];
    strcpy(created, r.etag);
    EXPECT(blob_create_append(c, jn, &create_only, &r), -1, 409, "BlobAlreadyExists");

    static const char *const blocks[] = {"aaa", "bbbbb", "cc"};
    int64_t pos = 0;
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(blocks[i]);
        EXPECT(blob_append_block(c, jn, blocks[i], n, pos, NULL, &r), 0, 201, "");
        assert_int_equal(r.append_offset, pos);
        assert_int_equal(r.committed_blocks, i + 1);
        pos += (int64_t)n;
    }
    char current[BLOB_ETAG_MAX];
    strcpy(current, r.etag);

    /* A second writer with a stale idea of the length is caught. */
    EXPECT(blob_append_block(c, jn, "zz", 2, 5, NULL, &r), -1, 412,
           "AppendPositionConditionNotMet");
    assert_false(blob_result_transient(&r));
    EXPECT(blob_append_block(c, jn, "zz", 2, pos, &(struct blob_cond){.if_match = created}, &r), -1,
           412, "ConditionNotMet");
    EXPECT(blob_append_block(c, jn, "dd", 2, pos, &(struct blob_cond){.if_match = current}, &r), 0,
           201, "");
    assert_int_equal(r.append_offset, pos);
    assert_int_equal(r.committed_blocks, 4);
    /* Without a position the block goes at the end. */
    EXPECT(blob_append_block(c, jn, "e", 1, -1, NULL, &r), 0, 201, "");
    assert_int_equal(r.append_offset, pos + 2);

    EXPECT(blob_head(c, jn, &r), 0, 200, "");
    assert_int_equal(r.content_length, 13);
    assert_int_equal(r.committed_blocks, 5);
    EXPECT(blob_get(c, jn, NULL, &r), 0, 200, "");
    assert_int_equal(r.body_len, 13);
    assert_memory_equal(r.body, "aaabbbbbccdde", 13);
    blob_result_free(&r);
    blob_client_free(c);
}

static void wrong_key_is_403(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *good = mx_azurite_container(name, sizeof name);
    struct blob_account a = mx_azurite_account();
    /* Another valid 64-byte key. */
    char err[128];
    assert_int_equal(
        blob_account_init(&a, a.endpoint, a.name, MX_AZURITE_OTHER_KEY, err, sizeof err), 0);
    assert_int_equal(a.key_len, 64);
    struct blob_client *bad = mx_azurite_client(&a, name, NULL);
    struct blob_result r = {0};
    assert_int_equal(blob_put(bad, "x", "y", 1, NULL, &r), -1);
    assert_int_equal(r.status, 403);
    assert_true(r.error_code[0] != '\0');
    assert_false(blob_result_transient(&r));
    assert_int_equal(blob_create_container(bad, &r), -1);
    assert_int_equal(r.status, 403);
    /* The right key still works on the same container. */
    EXPECT(blob_put(good, "x", "y", 1, NULL, &r), 0, 201, "");
    blob_result_free(&r);
    blob_client_free(bad);
    blob_client_free(good);
}

static void leases(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    const char *id = "6e8d5f33-5db8-44ef-a5c1-ec5e2c5ea949";
    const char *other = "0f0e0d0c-0b0a-4908-8706-050403020100";
    EXPECT(blob_put(c, "owner", "", 0, NULL, &r), 0, 201, "");

    EXPECT(blob_lease_acquire(c, "owner", 15, id, &r), 0, 201, "");
    assert_string_equal(r.lease_id, id);
    EXPECT(blob_lease_acquire(c, "owner", 15, other, &r), -1, 409, "LeaseAlreadyPresent");
    EXPECT(blob_put(c, "owner", "x", 1, NULL, &r), -1, 412, "LeaseIdMissing");
    EXPECT(blob_put(c, "owner", "x", 1, &(struct blob_cond){.lease_id = id}, &r), 0, 201, "");
    EXPECT(blob_lease_renew(c, "owner", id, &r), 0, 200, "");
    EXPECT(blob_lease_renew(c, "owner", r.lease_id, &r), 0, 200, ""); /* from the last answer */
    assert_string_equal(r.lease_id, id);
    EXPECT(blob_lease_release(c, "owner", id, &r), 0, 200, "");

    /* An infinite lease with an id the service picks, broken at once, then taken over. */
    EXPECT(blob_lease_acquire(c, "owner", -1, NULL, &r), 0, 201, "");
    assert_true(strlen(r.lease_id) >= 32);
    char picked[BLOB_LEASE_ID_MAX];
    strcpy(picked, r.lease_id);
    EXPECT(blob_delete(c, "owner", NULL, &r), -1, 412, "LeaseIdMissing");
    EXPECT(blob_lease_break(c, "owner", 0, &r), 0, 202, "");
    assert_int_equal(r.lease_time, 0);
    EXPECT(blob_lease_acquire(c, "owner", 15, other, &r), 0, 201, "");
    EXPECT(blob_lease_release(c, "owner", picked, &r), -1, 409,
           "LeaseIdMismatchWithLeaseOperation");
    /* A break with no period lets the lease run out. */
    EXPECT(blob_lease_break(c, "owner", -1, &r), 0, 202, "");
    assert_true(r.lease_time >= 14 && r.lease_time <= 15);
    EXPECT(blob_lease_release(c, "owner", other, &r), 0, 200, "");
    EXPECT(blob_delete(c, "owner", NULL, &r), 0, 202, "");
    blob_result_free(&r);
    blob_client_free(c);
}

/* A sealed append blob refuses every append; metadata on a leased blob needs the lease. */
static void seal_and_metadata(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    const char *id = "6e8d5f33-5db8-44ef-a5c1-ec5e2c5ea949";
    const char *other = "0f0e0d0c-0b0a-4908-8706-050403020100";
    EXPECT(blob_create_append(c, "j", NULL, &r), 0, 201, "");
    EXPECT(blob_append_block(c, "j", "a\n", 2, 0, NULL, &r), 0, 201, "");
    EXPECT(blob_append_block(c, "j", "bc\n", 3, 2, NULL, &r), 0, 201, "");
    EXPECT(blob_get_from(c, "j", 2, &r), 0, 206, "");
    assert_int_equal(r.body_len, 3);
    assert_memory_equal(r.body, "bc\n", 3);
    EXPECT(blob_get_from(c, "j", 0, &r), 0, 206, "");
    assert_int_equal(r.body_len, 5);
    /* At the end: nothing new (Azure answers 416, Azurite an empty 206). */
    assert_int_equal(blob_get_from(c, "j", 5, &r), 0);
    assert_int_equal(r.body_len, 0);
    EXPECT(blob_get_from(c, "missing", 0, &r), -1, 404, "BlobNotFound");
    EXPECT(blob_seal(c, "j", NULL, &r), 0, 200, "");
    EXPECT(blob_append_block(c, "j", "b\n", 2, 5, NULL, &r), -1, 409, "BlobIsSealed");
    EXPECT(blob_append_block(c, "j", "b\n", 2, -1, NULL, &r), -1, 409, "BlobIsSealed");
    EXPECT(blob_seal(c, "j", NULL, &r), 0, 200, "");
    EXPECT(blob_head(c, "j", &r), 0, 200, "");
    assert_true(r.sealed);
    assert_int_equal(r.content_length, 5);
    EXPECT(blob_seal(c, "missing", NULL, &r), -1, 404, "BlobNotFound");

    EXPECT(blob_put(c, "owner", "", 0, NULL, &r), 0, 201, "");
    EXPECT(blob_lease_acquire(c, "owner", 15, id, &r), 0, 201, "");
    struct blob_meta meta[2] = {{"url", "http://127.0.0.1:1"}, {"generation", "7"}};
    EXPECT(blob_set_metadata(c, "owner", meta, 2, NULL, &r), -1, 412, "LeaseIdMissing");
    EXPECT(blob_set_metadata(c, "owner", meta, 2, &(struct blob_cond){.lease_id = id}, &r), 0, 200,
           "");
    EXPECT(blob_head(c, "owner", &r), 0, 200, "");
    assert_string_equal(r.lease_state, "leased");
    assert_non_null(blob_result_meta(&r, "url"));
    assert_string_equal(blob_result_meta(&r, "url"), "http://127.0.0.1:1");
    assert_string_equal(blob_result_meta(&r, "generation"), "7");
    assert_null(blob_result_meta(&r, "journal"));
    /* A break on a condition: the owner's metadata changed since it was read, no break. */
    char etag[BLOB_ETAG_MAX];
    snprintf(etag, sizeof etag, "%s", r.etag);
    EXPECT(blob_set_metadata(c, "owner", meta, 2, &(struct blob_cond){.lease_id = id}, &r), 0, 200,
           "");
    EXPECT(blob_lease_break_if(c, "owner", 0, etag, &r), -1, 412, "ConditionNotMet");
    EXPECT(blob_head(c, "owner", &r), 0, 200, "");
    assert_string_equal(r.lease_state, "leased");
    snprintf(etag, sizeof etag, "%s", r.etag);
    /* After a break and a new holder, the old lease id writes nothing. */
    EXPECT(blob_lease_break_if(c, "owner", 0, etag, &r), 0, 202, "");
    EXPECT(blob_lease_acquire(c, "owner", 15, other, &r), 0, 201, "");
    EXPECT(blob_set_metadata(c, "owner", meta, 1, &(struct blob_cond){.lease_id = id}, &r), -1, 412,
           "LeaseIdMismatchWithBlobOperation");
    struct blob_meta bad[1] = {{"Bad-Name", "x"}};
    assert_int_equal(blob_set_metadata(c, "owner", bad, 1, NULL, &r), -1);
    assert_int_equal(r.status, 0);
    EXPECT(blob_lease_release(c, "owner", other, &r), 0, 200, "");
    blob_result_free(&r);
    blob_client_free(c);
}

/* curl_easy_reset between requests keeps the connection open. */
static void connection_is_reused(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    for (int i = 0; i < 50; i++) {
        EXPECT(blob_put(c, "reuse", "abc", 3, NULL, &r), 0, 201, "");
        EXPECT(blob_get(c, "reuse", NULL, &r), 0, 200, "");
        EXPECT(blob_get(c, "missing", NULL, &r), -1, 404, "BlobNotFound");
    }
    assert_int_equal(blob_client_connects(c), 1);
    blob_result_free(&r);
    blob_client_free(c);
}

/* A client with a name prefix sees the blobs under it as a container of its own: its
 * names, leases and listings, and nothing outside it (a partition's blobs, "p/003/"). */
static void a_prefix_is_a_container_of_its_own(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *whole = mx_azurite_container(name, sizeof name);
    struct blob_account a = mx_azurite_account();
    struct blob_options three = {.prefix = "p/003/"}, four = {.prefix = "p/004/"};
    struct blob_client *p3 = mx_azurite_client(&a, name, &three);
    struct blob_client *p4 = mx_azurite_client(&a, name, &four);
    struct blob_result r = {0};
    EXPECT(blob_put(p3, "owner", "3", 1, NULL, &r), 0, 201, "");
    EXPECT(blob_put(p3, "journal/1", "j", 1, NULL, &r), 0, 201, "");
    EXPECT(blob_put(p4, "owner", "4", 1, NULL, &r), 0, 201, "");
    EXPECT(blob_put(whole, "owner", "0", 1, NULL, &r), 0, 201, "");
    /* The names are the prefixed ones in the container. */
    EXPECT(blob_get(whole, "p/003/owner", NULL, &r), 0, 200, "");
    assert_int_equal(r.body_len, 1);
    assert_int_equal(r.body[0], '3');
    EXPECT(blob_get(p4, "owner", NULL, &r), 0, 200, "");
    assert_int_equal(r.body[0], '4');
    EXPECT(blob_get(p4, "journal/1", NULL, &r), -1, 404, "BlobNotFound");
    /* A lease on one partition's owner blob is that blob's alone. */
    EXPECT(blob_lease_acquire(p3, "owner", 15, NULL, &r), 0, 201, "");
    EXPECT(blob_lease_acquire(p4, "owner", 15, NULL, &r), 0, 201, "");
    char p4_lease[BLOB_LEASE_ID_MAX];
    snprintf(p4_lease, sizeof p4_lease, "%s", r.lease_id);
    EXPECT(blob_lease_acquire(whole, "owner", 15, NULL, &r), 0, 201, "");
    /* Listings: the client's blobs only, named without the prefix. */
    struct blob_list l = {0};
    EXPECT(blob_list_page(p3, NULL, NULL, 0, &l, &r), 0, 200, "");
    assert_int_equal(l.count, 2);
    assert_string_equal(l.items[0].name, "journal/1");
    assert_string_equal(l.items[1].name, "owner");
    EXPECT(blob_list_page(p3, "jour", NULL, 0, &l, &r), 0, 200, "");
    assert_int_equal(l.count, 1);
    assert_string_equal(l.items[0].name, "journal/1");
    EXPECT(blob_list_page(whole, "p/", NULL, 0, &l, &r), 0, 200, "");
    assert_int_equal(l.count, 3);
    assert_string_equal(l.items[2].name, "p/004/owner");
    assert_string_equal(l.items[2].lease_state, "leased");
    assert_null(l.items[2].meta); /* listed without metadata */
    /* With metadata: each owner blob's, and its lease state, in one listing. */
    const struct blob_meta meta[] = {{"url", "http://a:8080/x?y=<&>"}, {"generation", "7"}};
    struct blob_cond held = {.lease_id = p4_lease};
    EXPECT(blob_set_metadata(p4, "owner", meta, 2, &held, &r), 0, 200, "");
    EXPECT(blob_list_page_meta(whole, "p/", NULL, 0, &l, &r), 0, 200, "");
    assert_int_equal(l.count, 3);
    assert_string_equal(l.items[2].name, "p/004/owner");
    assert_string_equal(l.items[2].lease_state, "leased");
    assert_string_equal(blob_item_meta(&l.items[2], "url"), "http://a:8080/x?y=<&>");
    assert_string_equal(blob_item_meta(&l.items[2], "generation"), "7");
    assert_null(blob_item_meta(&l.items[1], "url"));
    EXPECT(blob_lease_break(p3, "owner", 0, &r), 0, 202, "");
    EXPECT(blob_list_page_meta(whole, "p/", NULL, 0, &l, &r), 0, 200, "");
    assert_string_equal(l.items[1].name, "p/003/owner");
    assert_string_equal(l.items[1].lease_state, "broken");
    blob_list_free(&l);
    /* A prefix longer than the client takes. */
    char long_prefix[80], err[128];
    memset(long_prefix, 'p', sizeof long_prefix - 1);
    long_prefix[sizeof long_prefix - 1] = '\0';
    struct blob_options too_long = {.prefix = long_prefix};
    struct blob_client *none = NULL;
    assert_int_equal(blob_client_new(&a, name, &too_long, &none, err, sizeof err), -1);
    assert_null(none);
    blob_result_free(&r);
    blob_client_free(p3);
    blob_client_free(p4);
    blob_client_free(whole);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(container_create_is_idempotent, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(put_get_special_name, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(a_prefix_is_a_container_of_its_own, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(empty_and_large_blobs, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(conditional_put, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(list_pages, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(delete_then_get, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(append_blocks, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(wrong_key_is_403, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(leases, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(seal_and_metadata, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(connection_is_reused, mx_azurite_setup, mx_azurite_teardown),
};
MX_TEST_MAIN(tests)
