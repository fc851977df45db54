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

/* The metrics of several cores as one text: each sample labelled with its partition, each
 * family's samples together under one header, a family only some texts have included. */
static void texts_merge_under_a_label(void **st)
{
    (void)st;
    struct mx_buf t[2] = {{0}, {0}}, out = {0};
    mx_buf_printf(&t[0], "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n"
                         "# HELP b B.\n# TYPE b gauge\nb{k=\"x\"} 2\n");
    mx_buf_printf(&t[1], "# HELP a_total A.\n# TYPE a_total counter\na_total 5\n"
                         "# HELP b B.\n# TYPE b gauge\nb{k=\"y\"} 3\nb{} 4\n"
                         "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 0.5\n"
                         "h_count 1\n");
    const char *values[2] = {"0", "7"};
    assert_int_equal(prom_merge_labelled(&out, t, values, 2, "partition"), 0);
    mx_buf_append_char(&out, '\0');
    assert_string_equal(out.p, "# HELP a_total A.\n# TYPE a_total counter\n"
                               "a_total{partition=\"0\"} 1\na_total{partition=\"7\"} 5\n"
                               "# HELP b B.\n# TYPE b gauge\n"
                               "b{partition=\"0\",k=\"x\"} 2\nb{partition=\"7\",k=\"y\"} 3\n"
                               "b{partition=\"7\"} 4\n"
                               "# HELP h H.\n# TYPE h histogram\n"
                               "h_bucket{partition=\"7\",le=\"1\"} 1\nh_sum{partition=\"7\"} 0.5\n"
                               "h_count{partition=\"7\"} 1\n");
    mx_buf_free(&t[0]);
    mx_buf_free(&t[1]);
    mx_buf_free(&out);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(labelled_samples),
    cmocka_unit_test(texts_merge_under_a_label),
};
MX_TEST_MAIN(tests)
