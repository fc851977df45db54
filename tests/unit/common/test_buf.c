/*
 * The capped growable buffer of common/: growth keeps every byte, the cap is an error and
 * not a truncation, and a failed allocation sticks until the buffer is freed.
 *
 * realloc is wrapped at link time (-Wl,--wrap=realloc, see CMakeLists.txt) so that a case can
 * make the next reallocations fail without exhausting the machine's memory.
 */
#include "tests/unit/testutil.h"

#include <stdint.h>
#include <string.h>

#include "common/buf.h"

void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);

static int fail_reallocs; /* how many of the next reallocations fail */

void *__wrap_realloc(void *p, size_t n)
{
    if (fail_reallocs > 0) {
        fail_reallocs--;
        return NULL;
    }
    return __real_realloc(p, n);
}

static void growth_keeps_every_byte(void **st)
{
    (void)st;
    struct mx_buf b = {0};
    char want[20000];
    size_t n = 0;
    /* Pieces of every kind, across many doublings of the capacity. */
    for (int i = 0; n + 64 < sizeof want; i++) {
        switch (i % 4) {
        case 0:
            mx_buf_append(&b, "abc", 3);
            memcpy(want + n, "abc", 3);
            n += 3;
            break;
        case 1:
            mx_buf_append_char(&b, (char)('A' + i % 26));
            want[n++] = (char)('A' + i % 26);
            break;
        case 2:
            mx_buf_append_str(&b, "-str-");
            memcpy(want + n, "-str-", 5);
            n += 5;
            break;
        default:
            mx_buf_printf(&b, "%d;", i);
            n += (size_t)snprintf(want + n, sizeof want - n, "%d;", i);
            break;
        }
        assert_false(b.oom);
        assert_int_equal(b.len, n);
        assert_true(b.cap >= b.len + 1);
        assert_int_equal(b.p[b.len], '\0');
    }
    assert_memory_equal(b.p, want, n);
    /* Bytes, not strings: a NUL in the data is kept. */
    mx_buf_append(&b, "x\0y", 3);
    assert_int_equal(b.len, n + 3);
    assert_memory_equal(b.p + n, "x\0y", 3);
    mx_buf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

static void take_hands_the_text_over(void **st)
{
    (void)st;
    struct mx_buf b = MX_BUF_INIT(100);
    char *s = mx_buf_take(&b);
    assert_non_null(s); /* nothing appended: "" and not NULL */
    assert_string_equal(s, "");
    free(s);
    mx_buf_append_str(&b, "hello");
    s = mx_buf_take(&b);
    assert_string_equal(s, "hello");
    free(s);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.max, 100); /* the cap stays for the next use */
}

static void cap_is_an_error_not_a_truncation(void **st)
{
    (void)st;
    struct mx_buf b;
    mx_buf_init(&b, 10);
    mx_buf_append(&b, "0123456789", 10); /* exactly the cap */
    assert_false(b.oom);
    assert_int_equal(b.len, 10);
    assert_true(b.cap <= 11); /* no more memory than the cap and its NUL */
    mx_buf_append_char(&b, 'x');
    assert_true(b.oom);
    assert_true(b.too_big);
    assert_int_equal(b.len, 10);
    assert_string_equal(b.p, "0123456789");
    /* Sticky: a later append that would fit does nothing either. */
    mx_buf_free(&b);
    assert_false(b.oom);
    assert_false(b.too_big);
    assert_int_equal(b.max, 10);

    mx_buf_append_str(&b, "01234");
    mx_buf_printf(&b, "%s", "567890"); /* 11 bytes in all */
    assert_true(b.too_big);
    assert_int_equal(b.len, 5);
    mx_buf_append(&b, "5", 1);
    assert_int_equal(b.len, 5);
    assert_null(mx_buf_take(&b));
    assert_null(b.p);
    assert_false(b.oom); /* taken: empty and usable again */

    /* One append larger than the cap is refused before anything is read or allocated. */
    mx_buf_append(&b, "x", 11);
    assert_true(b.too_big);
    assert_null(b.p);
    mx_buf_free(&b);
}

static void zeroed_buffer_has_the_default_cap(void **st)
{
    (void)st;
    struct mx_buf b = {0};
    mx_buf_append_str(&b, "ab");
    /* Lengths that cannot be held are refused, never wrapped around; the data pointer is not
     * read because nothing is copied. */
    mx_buf_append(&b, "x", MX_BUF_MAX_DEFAULT);
    assert_true(b.too_big);
    assert_int_equal(b.len, 2);
    mx_buf_free(&b);

    b = MX_BUF_INIT(SIZE_MAX);
    mx_buf_append_str(&b, "ab");
    mx_buf_append(&b, "x", SIZE_MAX - 1);
    assert_true(b.too_big);
    assert_int_equal(b.len, 2);
    mx_buf_free(&b);
}

static void failed_allocation_sticks(void **st)
{
    (void)st;
    struct mx_buf b = {0};
    mx_buf_append_str(&b, "kept");
    char big[1000];
    memset(big, 'z', sizeof big);
    fail_reallocs = 1;
    mx_buf_append(&b, big, sizeof big); /* needs more room: the realloc fails */
    assert_int_equal(fail_reallocs, 0);
    assert_true(b.oom);
    assert_false(b.too_big);
    assert_int_equal(b.len, 4);
    assert_string_equal(b.p, "kept"); /* what was there is still there, to be freed */
    /* Memory is back, but the buffer stays failed: a caller checks once at the end. */
    mx_buf_append_str(&b, "more");
    mx_buf_printf(&b, "%d", 1);
    assert_int_equal(b.len, 4);
    assert_null(mx_buf_take(&b));

    /* The first allocation of an empty buffer failing is the same. */
    fail_reallocs = 1;
    mx_buf_printf(&b, "%s", "x");
    assert_true(b.oom);
    assert_null(b.p);
    mx_buf_free(&b);
    assert_false(b.oom);
    mx_buf_append_str(&b, "ok");
    assert_string_equal(b.p, "ok");
    mx_buf_free(&b);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(growth_keeps_every_byte),
    cmocka_unit_test(take_hands_the_text_over),
    cmocka_unit_test(cap_is_an_error_not_a_truncation),
    cmocka_unit_test(zeroed_buffer_has_the_default_cap),
    cmocka_unit_test(failed_allocation_sticks),
};
MX_TEST_MAIN(tests)
