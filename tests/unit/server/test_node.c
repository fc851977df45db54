/*
 * The node (server/node.h): a lone server behind the interface main() uses, served from
 * the first request, with no ticks and nothing to leave; a data directory other users can
 * write refused before any store is opened; a server group's shape where the blob store
 * answers nothing: the front told it is joining, and every tick a look, not a start.
 */
#include "tests/unit/testutil.h"
#include "tests/unit/testhttp.h"

#include <string.h>
#include <sys/stat.h>

#include "server/core.h"
#include "server/node.h"

static void options_for(struct options *o, char **argv, int argc)
{
    optind = 0;
    assert_int_equal(options_parse(o, argc, argv), -1);
}

static void a_lone_node_serves_from_the_first_request(void **state)
{
    (void)state;
    char dir[64], err[512] = "", url[128];
    const char *failed = NULL;
    mx_temp_dir(dir, "node");
    char *argv[] = {"mutexd", "--data-dir", dir, "--listen", "127.0.0.1:0", "--threads", "2", NULL};
    struct options opt;
    options_for(&opt, argv, (int)(sizeof argv / sizeof argv[0]) - 1);
    struct res_limits lim;
    core_limits(&opt, &lim);
    struct node *n = NULL;
    assert_int_equal(node_open(&n, &opt, err, sizeof err, &failed), NODE_OK);
    struct http_config hc = {.listen = "127.0.0.1:0", .threads = 2, .lim = &lim};
    node_front(n, &hc);
    assert_non_null(hc.core); /* served from the first request */
    assert_int_equal(hc.partitions, 1);
    assert_null(hc.ready);
    assert_null(hc.servers);
    struct http *h = NULL;
    assert_int_equal(http_start(&h, &hc, err, sizeof err), 0);
    node_attach(n, h);
    snprintf(url, sizeof url, "http://%s", http_address(h));
    assert_int_equal(mx_test_request(url, "/v1/resources/node/a/acquire",
                                     "{\"owner\":\"t\",\"ttl_ms\":5000}", NULL, NULL),
                     200);
    assert_string_equal(node_role(n, true), "active");
    assert_null(node_role(n, false)); /* a lone server has no role to tell */
    assert_int_equal(node_tick_due(n), 0);
    int status = 0;
    assert_int_equal(node_tick(n, &status, err, sizeof err, &failed), NODE_GO_ON);
    assert_false(node_leave(n)); /* nothing to hand over: it stops at once */
    char why[256] = "";
    assert_true(node_healthy(n, why, sizeof why));
    http_quiesce(h);
    node_stop(n, h);
    http_stop(h);
    node_free(n);

    /* Opened again on the same directory: the lease is still there. */
    assert_int_equal(node_open(&n, &opt, err, sizeof err, &failed), NODE_OK);
    assert_int_equal(node_leases(n), 1);
    node_free(n);
}

static void a_data_directory_others_can_write_is_refused(void **state)
{
    (void)state;
    char dir[64], err[512] = "";
    const char *failed = NULL;
    mx_temp_dir(dir, "node");
    assert_int_equal(chmod(dir, 0777), 0);
    char *argv[] = {"mutexd", "--data-dir", dir, NULL};
    struct options opt;
    options_for(&opt, argv, (int)(sizeof argv / sizeof argv[0]) - 1);
    struct node *n = NULL;
    assert_int_equal(node_open(&n, &opt, err, sizeof err, &failed), NODE_FAILED);
    assert_string_equal(failed, "refusing the data directory");
    assert_non_null(strstr(err, "writable by other users"));
    char db[128];
    snprintf(db, sizeof db, "%s/mutexd.db", dir);
    struct stat st;
    assert_int_not_equal(stat(db, &st), 0); /* no store opened */
    node_free(n);
}

static void a_group_whose_blob_store_does_not_answer_is_joining(void **state)
{
    (void)state;
    char dir[64], err[512] = "";
    const char *failed = NULL;
    mx_temp_dir(dir, "node");
    /* A blob endpoint on a port nothing listens on (port 1 of loopback). */
    char *argv[] = {"mutexd",
                    "--data-dir",
                    dir,
                    "--ha",
                    "--advertise-url",
                    "http://127.0.0.1:9",
                    "--mirror",
                    "sync",
                    "--blob-connection-string",
                    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey="
                    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
                    "K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:1/devstoreaccount1",
                    "--blob-container",
                    "node",
                    NULL};
    struct options opt;
    options_for(&opt, argv, (int)(sizeof argv / sizeof argv[0]) - 1);
    struct node *n = NULL;
    assert_int_equal(node_open(&n, &opt, err, sizeof err, &failed), NODE_OK);
    assert_string_equal(node_role(n, true), "joining");
    assert_int_not_equal(node_tick_due(n), 0); /* it looks again, from the loop */
    struct res_limits lim;
    core_limits(&opt, &lim);
    struct http_config hc = {.listen = "127.0.0.1:0", .threads = 2, .lim = &lim};
    node_front(n, &hc);
    assert_null(hc.core);
    assert_non_null(hc.ready);
    char why[256] = "";
    struct mx_buf details = {0};
    assert_false(hc.ready(hc.ctx, why, sizeof why, &details));
    mx_buf_free(&details);
    assert_false(node_leave(n));
    node_free(n);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(a_lone_node_serves_from_the_first_request),
    cmocka_unit_test(a_data_directory_others_can_write_is_refused),
    cmocka_unit_test(a_group_whose_blob_store_does_not_answer_is_joining),
};
MX_TEST_MAIN(tests)
