/*
 * The journal's line format: every kind of line round-trips, and malformed lines are
 * refused with a reason rather than half-read.
 */
#include "tests/unit/testutil.h"

#include <stdio.h>
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

static struct store_lease lease_of(uint64_t token, uint8_t seed, bool held, bool shared)
{
    struct store_lease l = {.held = held,
                            .shared = shared,
                            .token = token,
                            .ttl_ms = 15000,
                            .acquired_at_ms = 1795329900929,
                            .renewed_at_ms = 1795329901000,
                            .deadline_ms = 1795329916000};
    for (int i = 0; i < 16; i++)
        l.lease_id[i] = (uint8_t)(seed + i * 17);
    l.owner = mx_str_new("o", 1);
    return l;
}

static void same_lease(const struct store_lease *a, const struct store_lease *b)
{
    assert_memory_equal(a->lease_id, b->lease_id, 16);
    assert_int_equal(a->held, b->held);
    assert_int_equal(a->shared, b->shared);
    assert_int_equal(a->token, b->token);
    assert_int_equal(a->ttl_ms, b->ttl_ms);
    assert_int_equal(a->acquired_at_ms, b->acquired_at_ms);
    assert_int_equal(a->renewed_at_ms, b->renewed_at_ms);
    assert_int_equal(a->deadline_ms, b->deadline_ms);
    assert_string_equal(a->owner->s, b->owner->s);
    if (a->metadata)
        assert_string_equal(a->metadata->s, b->metadata->s);
    else
        assert_null(b->metadata);
}

/* A change: leases put (every field, big integers exact) and ids forgotten; a drop. */
static void set_and_del_round_trip(void **st)
{
    (void)st;
    struct store_rec *rec = store_rec_new("jobs/nightly-report", 19, 42, 3, 2, 2);
    rec->put[0] = lease_of(9007199254740000ull, 1, true, false);
    const char *owner = "host \"a\"\\:1\n\xc3\xa9";
    mx_str_unref(rec->put[0].owner);
    rec->put[0].owner = mx_str_new(owner, strlen(owner));
    rec->put[0].metadata = mx_str_new("{\"addr\":\"10.0.0.1:80\",\"n\":[1,2.5,null]}", 39);
    rec->put[1] = lease_of(3, 2, false, true);
    memset(rec->del[0], 0xab, 16);
    memset(rec->del[1], 0x01, 16);
    rec->commit_seq = 123456;
    struct mx_buf b = {0};
    jr_encode_rec(&b, rec);
    struct jr_line l = decode_ok(&b);
    assert_int_equal(l.op, JR_SET);
    assert_int_equal(l.seq, 123456);
    assert_string_equal(l.name, "jobs/nightly-report");
    assert_int_equal(l.row.index, 42);
    assert_int_equal(l.row.limit, 3);
    assert_int_equal(l.row.nleases, 2);
    same_lease(&l.row.leases[0], &rec->put[0]);
    same_lease(&l.row.leases[1], &rec->put[1]);
    assert_int_equal(l.ndel, 2);
    assert_memory_equal(l.del[0], rec->del[0], 16);
    assert_memory_equal(l.del[1], rec->del[1], 16);
    jr_line_clear(&l);
    mx_buf_free(&b);
    store_rec_free(rec);

    /* Nothing put, nothing forgotten: empty arrays. */
    rec = store_rec_new("a", 1, 7, 1, 0, 0);
    rec->commit_seq = 8;
    jr_encode_rec(&b, rec);
    l = decode_ok(&b);
    assert_int_equal(l.op, JR_SET);
    assert_int_equal(l.row.nleases, 0);
    assert_int_equal(l.ndel, 0);
    jr_line_clear(&l);
    mx_buf_free(&b);
    store_rec_free(rec);

    /* A drop. */
    rec = store_rec_new("a", 1, 99, 0, 0, 0);
    rec->drop = true;
    rec->commit_seq = 9;
    jr_encode_rec(&b, rec);
    assert_non_null(strstr(b.p, "\"op\":\"del\""));
    l = decode_ok(&b);
    assert_int_equal(l.op, JR_DEL);
    assert_int_equal(l.seq, 9);
    assert_int_equal(l.row.index, 99);
    assert_int_equal(l.row.nleases, 0);
    jr_line_clear(&l);
    mx_buf_free(&b);
    store_rec_free(rec);
}

/* The deepest metadata the API accepts (32 levels) reads back from
 * a change line and a snapshot row, where it sits three levels deeper: a line the decoder
 * cannot read stops every takeover and every restore. */
#define MAX_DEPTH 32 /* http/api.h: API_MAX_METADATA_DEPTH */

static void deepest_metadata_reads_back(void **st)
{
    (void)st;
    char md[200];
    size_t n = 0;
    for (int i = 1; i < MAX_DEPTH; i++)
        n += (size_t)snprintf(md + n, sizeof md - n, "{\"k\":");
    n += (size_t)snprintf(md + n, sizeof md - n, "[]");
    for (int i = 1; i < MAX_DEPTH; i++)
        n += (size_t)snprintf(md + n, sizeof md - n, "}");
    struct store_rec *rec = store_rec_new("deep", 4, 3, 1, 1, 0);
    rec->put[0] = lease_of(7, 1, true, false);
    rec->put[0].metadata = mx_str_new(md, n);
    rec->commit_seq = 5;
    struct mx_buf b = {0};
    jr_encode_rec(&b, rec);
    struct jr_line l = decode_ok(&b);
    assert_int_equal(l.op, JR_SET);
    same_lease(&l.row.leases[0], &rec->put[0]);
    mx_buf_free(&b);
    jr_encode_row(&b, "deep", 4, &l.row);
    struct jr_line r = decode_ok(&b);
    assert_int_equal(r.op, JR_ROW);
    same_lease(&r.row.leases[0], &rec->put[0]);
    jr_line_clear(&r);
    jr_line_clear(&l);
    mx_buf_free(&b);
    store_rec_free(rec);
}

/* A snapshot's row: every lease, in order. */
static void row_round_trips(void **st)
{
    (void)st;
    struct store_row row = {.index = 5, .limit = 1};
    for (int i = 0; i < 3; i++) {
        struct store_lease l = lease_of(10 + (uint64_t)i, (uint8_t)i, i != 1, true);
        if (i == 2)
            l.metadata = mx_str_new("{\"big\":9007199254740993}", 24);
        assert_int_equal(store_row_add(&row, &l), 0);
        store_lease_clear(&l);
    }
    struct mx_buf b = {0};
    jr_encode_row(&b, "r", 1, &row);
    struct jr_line l = decode_ok(&b);
    assert_int_equal(l.op, JR_ROW);
    assert_int_equal(l.row.index, 5);
    assert_int_equal(l.row.limit, 1);
    assert_int_equal(l.row.nleases, 3);
    for (int i = 0; i < 3; i++)
        same_lease(&l.row.leases[i], &row.leases[i]);
    jr_line_clear(&l);
    mx_buf_free(&b);
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
    assert_int_equal(l.format, JR_FORMAT);
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
    assert_int_equal(l.format, JR_FORMAT);
    mx_buf_free(&b);
}

/* A begin or snapshot line of a newer format is refused, and the reason names it. */
static void a_newer_format_is_refused(void **st)
{
    (void)st;
    const char *lines[] = {
        "{\"op\":\"begin\",\"format\":3,\"generation\":1,\"mode\":\"sync\",\"first_seq\":1}",
        "{\"op\":\"snapshot\",\"format\":3,\"generation\":1,\"mode\":\"sync\",\"seq\":1,"
        "\"token_hwm\":1,\"index_hwm\":1,\"index_floor\":0,\"ceiling\":1}",
    };
    for (size_t i = 0; i < 2; i++) {
        struct jr_line l;
        char err[160] = "";
        assert_false(jr_decode(lines[i], strlen(lines[i]), &l, err, sizeof err));
        assert_non_null(strstr(err, "newer version"));
        assert_non_null(strstr(err, "format 3"));
    }
    /* format 1 and 2 are read; no format is 1 */
    const char *ok = "{\"op\":\"begin\",\"generation\":1,\"mode\":\"sync\",\"first_seq\":1}";
    struct jr_line l;
    char err[160];
    assert_true(jr_decode(ok, strlen(ok), &l, err, sizeof err));
    assert_int_equal(l.format, 1);
}

/* Every line the first release wrote (tests/fixtures/v1, made by 0.1.0) is read: a "put"
 * as a whole row of limit 1 with its one exclusive lease. */
static void lines_of_the_first_release_decode(void **st)
{
    (void)st;
    const char *end = strstr(__FILE__, "unit/persistence/test_journal.c");
    assert_non_null(end);
    const char *files[] = {"snapshot.jsonl", "journal.jsonl"};
    size_t puts = 0, dels = 0, heads = 0;
    for (size_t f = 0; f < 2; f++) {
        char path[1024];
        snprintf(path, sizeof path, "%.*sfixtures/v1/%s", (int)(end - __FILE__), __FILE__,
                 files[f]);
        FILE *in = fopen(path, "r");
        assert_non_null(in);
        char line[4096];
        while (fgets(line, sizeof line, in)) {
            size_t n = strcspn(line, "\n");
            struct jr_line l;
            char err[160];
            if (!jr_decode(line, n, &l, err, sizeof err))
                fail_msg("%s: %s: %s", files[f], err, line);
            if (l.op == JR_PUT) {
                puts++;
                assert_int_equal(l.row.limit, 1);
                assert_int_equal(l.row.nleases, 1);
                assert_false(l.row.leases[0].shared);
                assert_non_null(l.row.leases[0].owner);
                if (strcmp(l.name, "mirror/meta") == 0)
                    assert_string_equal(
                        l.row.leases[0].metadata->s,
                        "{\"addr\":\"10.0.0.1:80\",\"n\":[1,2.5,null],\"big\":9007199254740993}");
            } else if (l.op == JR_DEL) {
                dels++;
            } else {
                assert_true(l.op == JR_BEGIN || l.op == JR_SNAPSHOT);
                assert_int_equal(l.format, 1);
                heads++;
            }
            jr_line_clear(&l);
        }
        fclose(in);
    }
    assert_int_equal(heads, 2);
    assert_int_equal(puts, 7);
    assert_int_equal(dels, 1);
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
        /* format 2 */
        "{\"op\":\"begin\",\"format\":0,\"generation\":1,\"mode\":\"sync\",\"first_seq\":1}",
        "{\"op\":\"begin\",\"format\":\"2\",\"generation\":1,\"mode\":\"sync\",\"first_seq\":1}",
        "{\"op\":\"set\",\"seq\":1,\"resource\":\"a\",\"index\":1,\"limit\":1,\"put\":[]}",
        "{\"op\":\"set\",\"seq\":1,\"resource\":\"a\",\"index\":1,\"limit\":0,\"put\":[],"
        "\"del\":[]}",
        "{\"op\":\"set\",\"seq\":1,\"resource\":\"a\",\"index\":1,\"limit\":1,\"put\":{},"
        "\"del\":[]}",
        "{\"op\":\"set\",\"seq\":1,\"resource\":\"a\",\"index\":1,\"limit\":1,\"put\":[],"
        "\"del\":[\"x\"]}",
        "{\"op\":\"set\",\"seq\":1,\"resource\":\"a\",\"index\":1,\"limit\":1,\"put\":[1],"
        "\"del\":[]}",
        "{\"op\":\"row\",\"seq\":0,\"resource\":\"a\",\"index\":1,\"limit\":1,\"leases\":["
        "{\"lease_id\":\"0d3d9875-ffa5-4520-b3e4-367071dd8f0b\",\"owner\":\"o\",\"token\":1,"
        "\"ttl_ms\":1,\"acquired_at\":1,\"renewed_at\":1,\"deadline\":1,\"held\":true,"
        "\"metadata\":null}]}",
        "{\"op\":\"row\",\"seq\":0,\"resource\":\"a\",\"index\":1,\"limit\":1,\"leases\":["
        "{\"lease_id\":\"0d3d9875-ffa5-4520-b3e4-367071dd8f0b\",\"owner\":\"o\",\"token\":1,"
        "\"ttl_ms\":1,\"acquired_at\":1,\"renewed_at\":1,\"deadline\":1,\"held\":true,"
        "\"shared\":false,\"metadata\":[]}]}",
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
    cmocka_unit_test(set_and_del_round_trip),
    cmocka_unit_test(deepest_metadata_reads_back),
    cmocka_unit_test(row_round_trips),
    cmocka_unit_test(other_lines_round_trip),
    cmocka_unit_test(a_newer_format_is_refused),
    cmocka_unit_test(lines_of_the_first_release_decode),
    cmocka_unit_test(malformed_lines_are_refused),
};
MX_TEST_MAIN(tests)
