/* logfmt lines: a value a client supplied can never start a line of its own, nor close
 * its quotes early. */
#include "tests/unit/testutil.h"

#include <string.h>
#include <unistd.h>

#include "common/log.h"

static const char *q(const char *s)
{
    static char out[256];
    return mx_log_quote(out, sizeof out, s);
}

static void quote_escapes(void **st)
{
    (void)st;
    assert_string_equal(q("plain words"), "\"plain words\"");
    assert_string_equal(q(""), "\"\"");
    assert_string_equal(q(NULL), "\"\"");
    assert_string_equal(q("a\nb\rc\td"), "\"a\\nb\\rc\\td\"");
    assert_string_equal(q("say \"hi\""), "\"say \\\"hi\\\"\"");
    assert_string_equal(q("c:\\dir"), "\"c:\\\\dir\"");
    assert_string_equal(q("\x01\x1b[31m\x7f"), "\"\\x01\\x1b[31m\\x7f\"");
    assert_string_equal(q("\xc3\xa9t\xc3\xa9"), "\"\xc3\xa9t\xc3\xa9\""); /* UTF-8 as it is */
    /* The forgery of the report: a reason that tries to end the line and start another. */
    assert_string_equal(q("x\nts=2026 level=error msg=\"forged\""),
                        "\"x\\nts=2026 level=error msg=\\\"forged\\\"\"");
}

static void quote_is_cut_short(void **st)
{
    (void)st;
    char out[16];
    mx_log_quote(out, sizeof out, "0123456789abcdefghij");
    assert_string_equal(out, "\"0123456789...\"");
    assert_true(strlen(out) < sizeof out);
    /* An escape is never cut in half. */
    mx_log_quote(out, sizeof out, "012345678\n\n\n\n");
    assert_string_equal(out, "\"012345678...\"");
}

/* Runs mx_log with stderr on a pipe; returns what it wrote. */
static size_t capture(char *buf, size_t len, const char *fmt, const char *arg)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    int saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    mx_log(MX_LOG_INFO, "break requested", fmt, arg);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n < len - 1 && (r = read(fds[0], buf + n, len - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(fds[0]);
    return n;
}

static size_t lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void one_call_is_one_line(void **st)
{
    (void)st;
    mx_log_set_level(MX_LOG_INFO);
    char buf[2048], quoted[256];
    const char *evil = "ok\nts=2026-01-01T00:00:00.000Z level=error msg=\"forged\"\r\n";
    /* Quoted by the caller, as every client-supplied value is. */
    size_t n = capture(buf, sizeof buf, "reason=%s", mx_log_quote(quoted, sizeof quoted, evil));
    assert_true(n > 0);
    assert_int_equal(lines(buf), 1);
    assert_int_equal(buf[n - 1], '\n');
    assert_non_null(strstr(buf, "reason=\"ok\\nts=2026-01-01T00:00:00.000Z level=error "
                                "msg=\\\"forged\\\"\\r\\n\"\n"));
    /* Not quoted by the caller: control characters are still escaped by mx_log itself. */
    n = capture(buf, sizeof buf, "reason=%s", evil);
    assert_int_equal(lines(buf), 1);
    assert_non_null(strstr(buf, "reason=ok\\nts=2026"));
    /* A line that does not fit is cut, and still ends with its one newline. */
    char big[3000];
    memset(big, '\n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    n = capture(buf, sizeof buf, "x=%s", big);
    assert_int_equal(lines(buf), 1);
    assert_int_equal(buf[n - 1], '\n');
    assert_true(n <= 1024);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(quote_escapes),
    cmocka_unit_test(quote_is_cut_short),
    cmocka_unit_test(one_call_is_one_line),
};
MX_TEST_MAIN(tests)
