/*
 * The owner blob protocol (persistence/owner.h) against a real Azurite: every call, in a
 * container of the case's own, and what each answers when the lease is ours, another's, or
 * gone. Without MUTEXD_TEST_BLOB_CONNECTION_STRING (scripts/with-azurite.sh) every case fails.
 */
#include "tests/unit/azurite.h"

#include <string.h>
#include <unistd.h>

#include "persistence/owner.h"

#define EXPECT MX_AZ_EXPECT

#define ID    "6e8d5f33-5db8-44ef-a5c1-ec5e2c5ea949"
#define OTHER "0f0e0d0c-0b0a-4908-8706-050403020100"

/* What a holder publishes after it took the container. */
static const struct owner_meta named = {
    .url = "http://10.0.0.7:8080",
    .generation = (1ull << 40) + 7, /* more than 32 bits survive the round trip */
    .snapshot = "snapshots/1099511627783-120.jsonl",
    .journal = "journal/1099511627783/121",
    .since_ms = 1700000000123,
};

static void assert_meta_equal(const struct owner_meta *got, const struct owner_meta *want)
{
    assert_string_equal(got->url, want->url);
    assert_int_equal(got->generation, want->generation);
    assert_string_equal(got->snapshot, want->snapshot);
    assert_string_equal(got->journal, want->journal);
    assert_int_equal(got->since_ms, want->since_ms);
}

/* A fresh container whose owner blob exists and, with `lease_id`, is leased by it. */
static struct blob_client *container_with_owner(const char *lease_id)
{
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    EXPECT(owner_create(c, &r), OWNER_OK, 201, "");
    if (lease_id) {
        EXPECT(owner_take(c, lease_id, &r), OWNER_OK, 201, "");
        assert_string_equal(r.lease_id, lease_id);
    }
    blob_result_free(&r);
    return c;
}

/* Reads the owner blob, which must be there. */
static struct owner_view read_owner(struct blob_client *c)
{
    struct blob_result r = {0};
    struct owner_view v;
    EXPECT(owner_read(c, &v, &r), OWNER_OK, 200, "");
    assert_true(v.exists);
    assert_true(v.etag[0] == '"');
    blob_result_free(&r);
    return v;
}

static void read_new_container(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    struct owner_view v;
    memset(&v, 'x', sizeof v); /* whatever was there before is cleared */
    EXPECT(owner_read(c, &v, &r), OWNER_OK, 404, "BlobNotFound");
    assert_false(v.exists);
    assert_string_equal(v.lease_state, "");
    assert_string_equal(v.etag, "");
    assert_meta_equal(&v.meta, &(struct owner_meta){0});
    blob_result_free(&r);
    blob_client_free(c);
}

static void create_is_idempotent(void **st)
{
    (void)st;
    struct blob_result r = {0};
    struct blob_client *c = container_with_owner(NULL);
    struct owner_view v = read_owner(c);
    assert_string_equal(v.lease_state, "available");
    assert_true(owner_lease_free(v.lease_state));
    assert_meta_equal(&v.meta, &(struct owner_meta){0});
    char etag[BLOB_ETAG_MAX];
    snprintf(etag, sizeof etag, "%s", v.etag);

    /* Again: the existing blob is left as it is. */
    EXPECT(owner_create(c, &r), OWNER_OK, 409, NULL);
    v = read_owner(c);
    assert_string_equal(v.etag, etag);

    /* Leased and named by a holder: neither the lease nor the metadata is touched. */
    EXPECT(owner_take(c, ID, &r), OWNER_OK, 201, "");
    EXPECT(owner_publish(c, ID, &named, &r), OWNER_OK, 200, "");
    v = read_owner(c);
    snprintf(etag, sizeof etag, "%s", v.etag);
    assert_int_equal(owner_create(c, &r), OWNER_OK);
    assert_true(r.status == 409 || r.status == 412);
    v = read_owner(c);
    assert_string_equal(v.etag, etag);
    assert_string_equal(v.lease_state, "leased");
    assert_meta_equal(&v.meta, &named);
    EXPECT(owner_renew(c, ID, &r), OWNER_OK, 200, "");
    blob_result_free(&r);
    blob_client_free(c);
}

static void take_is_exclusive(void **st)
{
    (void)st;
    struct blob_result r = {0};
    struct blob_client *c = container_with_owner(ID);
    struct owner_view v = read_owner(c);
    assert_string_equal(v.lease_state, "leased");
    assert_false(owner_lease_free(v.lease_state));

    /* Another lease id: held, try again later. */
    EXPECT(owner_take(c, OTHER, &r), OWNER_AGAIN, 409, NULL);
    /* The holder's own id takes it again at once (a restart keeps its id). */
    assert_int_equal(owner_take(c, ID, &r), OWNER_OK);
    assert_string_equal(r.lease_id, ID);
    EXPECT(owner_take(c, OTHER, &r), OWNER_AGAIN, 409, NULL);
    blob_result_free(&r);
    blob_client_free(c);

    /* No owner blob to lease: a refusal that no retry cures. */
    char name[64];
    c = mx_azurite_container(name, sizeof name);
    EXPECT(owner_take(c, ID, &r), OWNER_FENCED, 404, "BlobNotFound");
    blob_result_free(&r);
    blob_client_free(c);
}

static void renew_fences_a_wrong_id(void **st)
{
    (void)st;
    struct blob_result r = {0};
    struct blob_client *c = container_with_owner(ID);
    EXPECT(owner_renew(c, ID, &r), OWNER_OK, 200, "");
    assert_string_equal(r.lease_id, ID);
    EXPECT(owner_renew(c, OTHER, &r), OWNER_FENCED, 409, NULL);
    /* The refusal changed nothing for the holder. */
    EXPECT(owner_renew(c, ID, &r), OWNER_OK, 200, "");
    struct owner_view v = read_owner(c);
    assert_string_equal(v.lease_state, "leased");

    /* The blob gone: fenced too. */
    EXPECT(blob_delete(c, OWNER_BLOB, &(struct blob_cond){.lease_id = ID}, &r), 0, 202, "");
    EXPECT(owner_renew(c, ID, &r), OWNER_FENCED, 404, "BlobNotFound");
    blob_result_free(&r);
    blob_client_free(c);
}

static void publish_then_read(void **st)
{
    (void)st;
    struct blob_result r = {0};
    struct blob_client *c = container_with_owner(ID);
    char before[BLOB_ETAG_MAX];
    snprintf(before, sizeof before, "%s", read_owner(c).etag);

    EXPECT(owner_publish(c, ID, &named, &r), OWNER_OK, 200, "");
    struct owner_view v = read_owner(c);
    assert_meta_equal(&v.meta, &named);
    assert_string_equal(v.lease_state, "leased");
    assert_string_not_equal(v.etag, before); /* what owner_break_if relies on */

    /* Names left empty are written "-" and read back "". */
    struct owner_meta unnamed = {.generation = 3, .since_ms = 42};
    EXPECT(owner_publish(c, ID, &unnamed, &r), OWNER_OK, 200, "");
    EXPECT(blob_head(c, OWNER_BLOB, &r), 0, 200, "");
    assert_string_equal(blob_result_meta(&r, "url"), "-");
    assert_string_equal(blob_result_meta(&r, "snapshot"), "-");
    assert_string_equal(blob_result_meta(&r, "journal"), "-");
    assert_string_equal(blob_result_meta(&r, "generation"), "3");
    assert_string_equal(blob_result_meta(&r, "since"), "42");
    v = read_owner(c);
    assert_meta_equal(&v.meta, &unnamed);

    /* Under another lease id: fenced, and the metadata stays the holder's. */
    EXPECT(owner_publish(c, OTHER, &named, &r), OWNER_FENCED, 412, NULL);
    v = read_owner(c);
    assert_meta_equal(&v.meta, &unnamed);
    blob_result_free(&r);
    blob_client_free(c);
}

/* A handover names the next holder and keeps every other name as the blob has it; under
 * another lease id it is fenced; the next holder's write drops it. */
static void name_next_keeps_the_rest(void **st)
{
    (void)st;
    struct blob_result r = {0};
    struct blob_client *c = container_with_owner(ID);
    EXPECT(owner_publish(c, ID, &named, &r), OWNER_OK, 200, "");
    EXPECT(owner_name_next(c, ID, NULL, "http://10.0.0.9:8080", &r), OWNER_OK, 200, "");
    struct owner_view v = read_owner(c);
    assert_meta_equal(&v.meta, &named);
    assert_string_equal(v.meta.to, "http://10.0.0.9:8080");
    EXPECT(owner_name_next(c, ID, &named, "http://10.0.0.8:8080", &r), OWNER_OK, 200, "");
    v = read_owner(c);
    assert_meta_equal(&v.meta, &named);
    assert_string_equal(v.meta.to, "http://10.0.0.8:8080");
    EXPECT(owner_name_next(c, OTHER, NULL, "http://10.0.0.1:8080", &r), OWNER_FENCED, 412, NULL);
    assert_string_equal(read_owner(c).meta.to, "http://10.0.0.8:8080");
    EXPECT(owner_publish(c, ID, &named, &r), OWNER_OK, 200, "");
    assert_string_equal(read_owner(c).meta.to, "");
    blob_result_free(&r);
    blob_client_free(c);
}

static void release_frees_it(void **st)
{
    (void)st;
    struct blob_result r = {0};
    struct blob_client *c = container_with_owner(ID);
    EXPECT(owner_release(c, OTHER, &r), OWNER_FENCED, 409, NULL);
    assert_string_equal(read_owner(c).lease_state, "leased");

    EXPECT(owner_release(c, ID, &r), OWNER_OK, 200, "");
    struct owner_view v = read_owner(c);
    assert_true(owner_lease_free(v.lease_state));
    /* Released: nothing more is written under it, and another server takes it at once. */
    EXPECT(owner_publish(c, ID, &named, &r), OWNER_FENCED, 412, NULL);
    EXPECT(owner_take(c, OTHER, &r), OWNER_OK, 201, "");
    EXPECT(owner_publish(c, OTHER, &named, &r), OWNER_OK, 200, "");

    /* The states Azure names: free are the ones an acquire succeeds in. */
    static const char *const free_states[] = {"available", "expired", "broken"};
    static const char *const held_states[] = {"leased", "breaking", ""};
    for (size_t i = 0; i < 3; i++) {
        assert_true(owner_lease_free(free_states[i]));
        assert_false(owner_lease_free(held_states[i]));
    }
    blob_result_free(&r);
    blob_client_free(c);
}

static void break_if_only_at_etag(void **st)
{
    (void)st;
    struct blob_result r = {0};
    struct blob_client *c = container_with_owner(ID);
    EXPECT(owner_publish(c, ID, &named, &r), OWNER_OK, 200, "");
    char decided[BLOB_ETAG_MAX];
    snprintf(decided, sizeof decided, "%s", read_owner(c).etag);

    /* The holder writes again after a standby read the blob: the standby's break, decided
     * on what it read, is refused and the lease stays held. */
    struct owner_meta rolled = named;
    snprintf(rolled.journal, sizeof rolled.journal, "journal/1099511627783/500");
    EXPECT(owner_publish(c, ID, &rolled, &r), OWNER_OK, 200, "");
    EXPECT(owner_break_if(c, decided, &r), OWNER_FENCED, 412, "ConditionNotMet");
    struct owner_view v = read_owner(c);
    assert_string_equal(v.lease_state, "leased");
    assert_meta_equal(&v.meta, &rolled);
    EXPECT(owner_renew(c, ID, &r), OWNER_OK, 200, "");

    /* At the ETag as it is now: broken at once, the old holder fenced, the blob free. */
    EXPECT(owner_break_if(c, v.etag, &r), OWNER_OK, 202, "");
    v = read_owner(c);
    assert_true(owner_lease_free(v.lease_state));
    EXPECT(owner_renew(c, ID, &r), OWNER_FENCED, 409, NULL);
    EXPECT(owner_publish(c, ID, &named, &r), OWNER_FENCED, 412, NULL);

    /* No lease to break: nothing to do, OK. */
    EXPECT(owner_take(c, OTHER, &r), OWNER_OK, 201, "");
    EXPECT(owner_release(c, OTHER, &r), OWNER_OK, 200, "");
    v = read_owner(c);
    EXPECT(owner_break_if(c, v.etag, &r), OWNER_OK, 409, NULL);
    blob_result_free(&r);
    blob_client_free(c);
}

static void seal_journal(void **st)
{
    (void)st;
    char name[64];
    struct blob_client *c = mx_azurite_container(name, sizeof name);
    struct blob_result r = {0};
    const char *jn = "journal/7/1";
    EXPECT(blob_create_append(c, jn, NULL, &r), 0, 201, "");
    EXPECT(blob_append_block(c, jn, "a\n", 2, 0, NULL, &r), 0, 201, "");

    EXPECT(owner_seal(c, jn, &r), OWNER_OK, 200, "");
    EXPECT(blob_append_block(c, jn, "b\n", 2, -1, NULL, &r), -1, 409, "BlobIsSealed");
    EXPECT(blob_head(c, jn, &r), 0, 200, "");
    assert_true(r.sealed);
    assert_int_equal(r.content_length, 2);
    /* Sealed already, or gone: OK as well. */
    assert_int_equal(owner_seal(c, jn, &r), OWNER_OK);
    EXPECT(owner_seal(c, "journal/7/999", &r), OWNER_OK, 404, "BlobNotFound");
    blob_result_free(&r);
    blob_client_free(c);
}

/* A blob store that answers nothing: every call says try again, none says fenced (a server
 * cut off for a moment must not take itself for ousted, nor a standby the active for free). */
static void no_answer_is_again(void **st)
{
    (void)st;
    int fd;
    char url[64];
    struct blob_account a = mx_azurite_account();
    snprintf(a.endpoint, sizeof a.endpoint, "%s/%s", mx_closed_url(url, sizeof url, &fd), a.name);
    struct blob_client *c =
        mx_azurite_client(&a, "nobody", &(struct blob_options){.connect_timeout_ms = 1000});
    struct blob_result r = {0};
    struct owner_view v;
    EXPECT(owner_read(c, &v, &r), OWNER_AGAIN, 0, "");
    assert_false(v.exists);
    assert_true(blob_result_transient(&r));
    EXPECT(owner_create(c, &r), OWNER_AGAIN, 0, "");
    EXPECT(owner_take(c, ID, &r), OWNER_AGAIN, 0, "");
    EXPECT(owner_renew(c, ID, &r), OWNER_AGAIN, 0, "");
    EXPECT(owner_publish(c, ID, &named, &r), OWNER_AGAIN, 0, "");
    EXPECT(owner_release(c, ID, &r), OWNER_AGAIN, 0, "");
    EXPECT(owner_break_if(c, "\"0x1\"", &r), OWNER_AGAIN, 0, "");
    EXPECT(owner_seal(c, "journal/1/1", &r), OWNER_AGAIN, 0, "");
    blob_result_free(&r);
    blob_client_free(c);
    close(fd);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(read_new_container, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(create_is_idempotent, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(take_is_exclusive, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(renew_fences_a_wrong_id, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(publish_then_read, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(name_next_keeps_the_rest, mx_azurite_setup,
                                    mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(release_frees_it, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(break_if_only_at_etag, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(seal_journal, mx_azurite_setup, mx_azurite_teardown),
    cmocka_unit_test_setup_teardown(no_answer_is_again, mx_azurite_setup, mx_azurite_teardown),
};
MX_TEST_MAIN(tests)
