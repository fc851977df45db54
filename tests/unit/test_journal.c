/*
 * The journal's line format: every kind of line round-trips, and malformed lines are
 * refused with a reason rather than half-read.
 */
#include "testutil.h"

#include <string.h>

#include "persistence/journal.h"

static struct jr_line decode_ok(const struct mx_buf *b)
{
    struct jr_line l;
    char err[128];
    assert_true(b->len > 0 && b->p[b->len - 1] == '\n');
    assert_non_null(memchr(b->p, '\n', b->len));
    assert_ptr_equal(memchr(b->p, '\n', b->len), b->p + b->len - 1); /* one line */
    bool ok = jr_decode(b->p, b->len - 1, &l, err, sizeof err);
    if (!ok)
        fail_msg("decode failed: %s: %s", err, b->p);
    return l;
}

static void put_and_del_round_trip(void **st)
{
    (void)st;
    struct store_row row = {.index = 42,
                            .has_lease = true,
                            .held = true,
                            .token = 9007199254740000ull,
                            .ttl_ms = 15000,
                            .acquired_at_ms = 1795329900929,
                            .renewed_at_ms = 1795329901000,
                            .deadline_ms = 1795329916000};
    for (int i = 0; i < 16; i++)
        row.lease_id[i] = (uint8_t)(i * 17);
    const char *owner = "host \"a\"\\:1\n\xc3\xa9";
    row.owner = mx_str_new(owner, strlen(owner));
    row.metadata = mx_str_new("{\"addr\":\"10.0.0.1:80\",\"n\":[1,2.5,null]}", 39);
    struct store_rec *rec = store_rec_new("jobs/nightly-report", 19, &row);
    rec->commit_seq = 123456;
    struct mx_buf b = {0};
    jr_encode_rec(&b, rec);
    struct jr_line l = decode_ok(&b);
    assert_int_equal(l.op, JR_PUT);
    assert_int_equal(l.seq, 123456);
    assert_string_equal(l.name, "jobs/nightly-report");
    assert_int_equal(l.row.index, 42);
    assert_true(l.row.has_lease && l.row.held);
    assert_memory_equal(l.row.lease_id, row.lease_id, 16);
    assert_string_equal(l.row.owner->s, owner);
    assert_int_equal(l.row.token, row.token);
    assert_int_equal(l.row.ttl_ms, 15000);
    assert_int_equal(l.row.acquired_at_ms, row.acquired_at_ms);
    assert_int_equal(l.row.renewed_at_ms, row.renewed_at_ms);
    assert_int_equal(l.row.deadline_ms, row.deadline_ms);
    assert_string_equal(l.row.metadata->s, row.metadata->s);
    jr_line_clear(&l);
    mx_buf_free(&b);

    /* An expired lease kept for renewal, without metadata. */
    store_row_clear(&rec->row);
    rec->row = (struct store_row){.index = 7, .has_lease = true, .held = false, .token = 3};
    rec->row.owner = mx_str_new("o", 1);
    jr_encode_rec(&b, rec);
    l = decode_ok(&b);
    assert_false(l.row.held);
    assert_null(l.row.metadata);
    jr_line_clear(&l);
    mx_buf_free(&b);

    /* A deleted row. */
    store_row_clear(&rec->row);
    rec->row = (struct store_row){.index = 99};
    jr_encode_rec(&b, rec);
    l = decode_ok(&b);
    assert_int_equal(l.op, JR_DEL);
    assert_int_equal(l.row.index, 99);
    assert_false(l.row.has_lease);
    jr_line_clear(&l);
    mx_buf_free(&b);
    store_rec_free(rec);
    store_row_clear(&row);
}

static void other_lines_round_trip(void **st)
{
    (void)st;
    struct mx_buf b = {0};
    jr_encode_reserve(&b, 200000);
    struct jr_line l = decode_ok(&b);
    assert_int_equal(l.op, JR_RESERVE);
    assert_int_equal(l.ceiling, 200000);
    mx_buf_free(&b);

    jr_encode_begin(&b, 3, JR_MODE_SYNC, 1001);
    l = decode_ok(&b);
    assert_int_equal(l.op, JR_BEGIN);
    assert_int_equal(l.generation, 3);
    assert_int_equal(l.mode, JR_MODE_SYNC);
    assert_int_equal(l.first_seq, 1001);
    mx_buf_free(&b);

    struct store_marks m = {
        .commit_seq = 1000, .token_hwm = 77, .index_hwm = 5000, .index_floor = 4000};
    jr_encode_snapshot(&b, 3, JR_MODE_ASYNC, &m, 100077);
    l = decode_ok(&b);
    assert_int_equal(l.op, JR_SNAPSHOT);
    assert_int_equal(l.mode, JR_MODE_ASYNC);
    assert_int_equal(l.marks.commit_seq, 1000);
    assert_int_equal(l.marks.token_hwm, 77);
    assert_int_equal(l.marks.index_hwm, 5000);
    assert_int_equal(l.marks.index_floor, 4000);
    assert_int_equal(l.ceiling, 100077);
    mx_buf_free(&b);
}

static void malformed_lines_are_refused(void **st)
{
    (void)st;
    const char *bad[] = {
        "",
        "{",
        "[]",
        "{\"op\":\"put\"}",
        "{\"op\":\"frob\"}",
        "{\"op\":5}",
        "{\"op\":\"del\",\"seq\":1,\"resource\":\"\",\"index\":1}",
        "{\"op\":\"del\",\"seq\":-1,\"resource\":\"a\",\"index\":1}",
        "{\"op\":\"del\",\"seq\":1.5,\"resource\":\"a\",\"index\":1}",
        "{\"op\":\"del\",\"seq\":1e300,\"resource\":\"a\",\"index\":1}",
        "{\"op\":\"reserve\",\"ceiling\":\"9\"}",
        "{\"op\":\"begin\",\"generation\":1,\"mode\":\"fast\",\"first_seq\":1}",
        "{\"op\":\"put\",\"seq\":1,\"resource\":\"a\",\"index\":1,\"lease_id\":\"x\","
        "\"owner\":\"o\",\"token\":1,\"ttl_ms\":1,\"acquired_at\":1,\"renewed_at\":1,"
        "\"deadline\":1,\"held\":true,\"metadata\":null}",
        "{\"op\":\"put\",\"seq\":1,\"resource\":\"a\",\"index\":1,"
        "\"lease_id\":\"0d3d9875-ffa5-4520-b3e4-367071dd8f0b\",\"owner\":\"o\",\"token\":1,"
        "\"ttl_ms\":1,\"acquired_at\":1,\"renewed_at\":1,\"deadline\":1,\"held\":1,"
        "\"metadata\":null}",
        "{\"op\":\"put\",\"seq\":1,\"resource\":\"a\",\"index\":1,"
        "\"lease_id\":\"0d3d9875-ffa5-4520-b3e4-367071dd8f0b\",\"owner\":\"o\",\"token\":1,"
        "\"ttl_ms\":1,\"acquired_at\":1,\"renewed_at\":1,\"deadline\":1,\"held\":true,"
        "\"metadata\":[1]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct jr_line l;
        char err[128] = "";
        if (jr_decode(bad[i], strlen(bad[i]), &l, err, sizeof err))
            fail_msg("accepted: %s", bad[i]);
        assert_true(err[0] != '\0');
    }
    struct jr_line l;
    char err[128];
    assert_false(jr_decode("{\"op\":\"reserve\",\"ceiling\":1}\0x", 30, &l, err, sizeof err));
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(put_and_del_round_trip),
    cmocka_unit_test(other_lines_round_trip),
    cmocka_unit_test(malformed_lines_are_refused),
};
MX_TEST_MAIN(tests)
