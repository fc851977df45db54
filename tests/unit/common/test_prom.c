/* Prometheus text (common/prom.c): a labelled sample as the text format wants it. */
#include "tests/unit/testutil.h"

#include <string.h>

#include "common/prom.h"

static void labelled_samples(void **st)
{
    (void)st;
    struct mx_buf b = {0};
    prom_sample(&b, "mutexd_x_total", 7, "code", "200", NULL);
    prom_sample(&b, "mutexd_x_total", 18446744073709551615ull, "route", "get", "code", "other",
                NULL);
    prom_sample(&b, "mutexd_y", 0, NULL);
    prom_sample(&b, "mutexd_z", 1, "why", "a \"b\" \\ c\nd", NULL);
    mx_buf_append_char(&b, '\0');
    assert_string_equal(b.p, "mutexd_x_total{code=\"200\"} 7\n"
                             "mutexd_x_total{route=\"get\",code=\"other\"} 18446744073709551615\n"
                             "mutexd_y 0\n"
                             "mutexd_z{why=\"a \\\"b\\\" \\\\ c\\nd\"} 1\n");
    mx_buf_free(&b);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(labelled_samples),
};
MX_TEST_MAIN(tests)
