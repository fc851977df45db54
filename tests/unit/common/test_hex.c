/* The hexadecimal decoder of common/: every char value, and bytes from two digits. */
#include "tests/unit/testutil.h"

#include "common/hex.h"

static void every_char(void **st)
{
    (void)st;
    static const char digits[] = "0123456789abcdef", upper[] = "0123456789ABCDEF";
    for (int c = -128; c < 256; c++) {
        char ch = (char)c;
        int want = -1;
        for (int d = 0; d < 16; d++)
            if (ch == digits[d] || ch == upper[d])
                want = d;
        if (mx_hex_digit(ch) != want)
            fail_msg("mx_hex_digit(0x%02x) = %d, want %d", (unsigned char)ch, mx_hex_digit(ch),
                     want);
    }
    /* The neighbours of each range, by name. */
    assert_int_equal(mx_hex_digit('/'), -1);
    assert_int_equal(mx_hex_digit(':'), -1);
    assert_int_equal(mx_hex_digit('@'), -1);
    assert_int_equal(mx_hex_digit('G'), -1);
    assert_int_equal(mx_hex_digit('`'), -1);
    assert_int_equal(mx_hex_digit('g'), -1);
    assert_int_equal(mx_hex_digit('\0'), -1);
}

static void bytes_from_two_digits(void **st)
{
    (void)st;
    assert_int_equal(mx_hex_byte('0', '0'), 0);
    assert_int_equal(mx_hex_byte('0', 'f'), 15);
    assert_int_equal(mx_hex_byte('7', 'F'), 127);
    assert_int_equal(mx_hex_byte('8', '0'), 128);
    assert_int_equal(mx_hex_byte('c', '3'), 0xc3);
    assert_int_equal(mx_hex_byte('F', 'f'), 255);
    assert_int_equal(mx_hex_byte('g', '0'), -1);
    assert_int_equal(mx_hex_byte('0', 'g'), -1);
    assert_int_equal(mx_hex_byte('G', '0'), -1);
    assert_int_equal(mx_hex_byte('0', '\0'), -1);
    assert_int_equal(mx_hex_byte('\0', '0'), -1);
    assert_int_equal(mx_hex_byte(' ', '1'), -1);
    assert_int_equal(mx_hex_byte('-', '1'), -1); /* not a sign */
    for (int v = 0; v < 256; v++) {
        char s[3];
        snprintf(s, sizeof s, v % 2 ? "%02x" : "%02X", (unsigned)v);
        assert_int_equal(mx_hex_byte(s[0], s[1]), v);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_char),
    cmocka_unit_test(bytes_from_two_digits),
};
MX_TEST_MAIN(tests)
