/*
 * Bearer-token authorization: the tokens file's lines, the Authorization header, scopes,
 * prefixes and reloads, against real files in a temporary directory. Hashes are written as
 * `printf TOKEN | sha256sum` prints them, not computed by the code under test.
 */
#include "tests/unit/testutil.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/auth.h"

/* sha256("deploy-secret") and sha256("ops-secret") */
#define DEPLOY_HASH "sha256:4051165c0729ce02a80c56e01af1bfa5a0f1670cb29f4d07fc270098f4379af4"
#define OPS_HASH    "sha256:32323cfa9ec9d62750daad0836a4cf3d7b60d23723b7852a529667deed01669f"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(path, 0600);
}

static void lines_parse_into_entries(void **state)
{
    (void)state;
    struct auth_entry e;
    char err[128];
    assert_int_equal(
        auth_parse_line("deployer " DEPLOY_HASH " read,write jobs/\n", &e, err, sizeof err), 1);
    assert_string_equal(e.name, "deployer");
    assert_int_equal(e.scopes, AUTH_READ | AUTH_WRITE);
    assert_string_equal(e.prefix, "jobs/");
    assert_int_equal(e.digest[0], 0x40);
    assert_int_equal(e.digest[31], 0xf4);
    assert_int_equal(auth_parse_line("\tops\t" OPS_HASH "\tadmin", &e, err, sizeof err), 1);
    assert_int_equal(e.scopes, AUTH_ADMIN);
    assert_string_equal(e.prefix, "");
    assert_int_equal(auth_parse_line("# a comment " DEPLOY_HASH, &e, err, sizeof err), 0);
    assert_int_equal(auth_parse_line("   \r\n", &e, err, sizeof err), 0);

    const char *bad[] = {
        "deployer " DEPLOY_HASH,                     /* no scopes */
        "deployer sha256:abc read",                  /* short hash */
        "deployer md5:" DEPLOY_HASH " read",         /* not sha256 */
        "deployer " DEPLOY_HASH " read,root",        /* unknown scope */
        "deployer " DEPLOY_HASH " , ",               /* no scope */
        "deployer " DEPLOY_HASH " read jobs/ extra", /* too many fields */
        "deployer sha256:zz51165c0729ce02a80c56e01af1bfa5a0f1670cb29f4d07fc270098f4379af4 read",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(auth_parse_line(bad[i], &e, err, sizeof err), -1);
        assert_true(err[0] != '\0');
    }
}

static void headers_are_checked_for_token_and_scope(void **state)
{
    (void)state;
    char dir[64], path[80], err[256];
    mx_temp_dir(dir, "auth");
    snprintf(path, sizeof path, "%s/tokens", dir);
    write_file(path, "deployer " DEPLOY_HASH " read,write jobs/\nops " OPS_HASH " read,admin\n");
    struct auth *a = NULL;
    assert_int_equal(auth_open(&a, path, err, sizeof err), AUTH_FILE_OK);
    struct auth_grant g;

    assert_int_equal(auth_check(a, NULL, AUTH_READ, &g), 401);
    assert_int_equal(auth_check(a, "Basic ZGVwbG95LXNlY3JldA==", AUTH_READ, &g), 401);
    assert_int_equal(auth_check(a, "Bearer wrong", AUTH_READ, &g), 401);
    assert_int_equal(auth_check(a, "Bearer ", AUTH_READ, &g), 401);
    assert_int_equal(auth_check(a, "Bearer deploy-secretX", AUTH_READ, &g), 401);
    assert_int_equal(auth_check(a, "Bearer deploy-secret", AUTH_WRITE, &g), 0);
    assert_string_equal(g.name, "deployer");
    assert_string_equal(g.prefix, "jobs/");
    assert_true(auth_prefix_allows(&g, "jobs/a", 6));
    assert_false(auth_prefix_allows(&g, "job", 3));
    assert_false(auth_prefix_allows(&g, "other/jobs/a", 12));
    assert_int_equal(auth_check(a, "bearer  deploy-secret ", AUTH_READ, &g), 0);
    assert_int_equal(auth_check(a, "Bearer deploy-secret", AUTH_ADMIN, &g), 403);
    assert_int_equal(auth_check(a, "Bearer ops-secret", AUTH_ADMIN, &g), 0);
    assert_true(auth_prefix_allows(&g, "anything", 8));
    assert_int_equal(auth_check(a, "Bearer ops-secret", AUTH_WRITE, &g), 403);

    /* A file that does not parse leaves the tokens in force; a good one replaces them. */
    write_file(path, "deployer " DEPLOY_HASH " read,fly\n");
    assert_int_equal(auth_reload(a, err, sizeof err), AUTH_FILE_INVALID);
    assert_non_null(strstr(err, "line 1"));
    assert_int_equal(auth_check(a, "Bearer ops-secret", AUTH_ADMIN, &g), 0);
    write_file(path, "deployer " DEPLOY_HASH " read\n");
    assert_int_equal(auth_reload(a, err, sizeof err), AUTH_FILE_OK);
    assert_int_equal(auth_check(a, "Bearer ops-secret", AUTH_READ, &g), 401);
    assert_int_equal(auth_check(a, "Bearer deploy-secret", AUTH_WRITE, &g), 403);
    auth_free(a);

    write_file(path, "only-two-fields " DEPLOY_HASH "\n");
    a = NULL;
    assert_int_equal(auth_open(&a, path, err, sizeof err), AUTH_FILE_INVALID);
    assert_null(a);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv);
static const struct CMUnitTest tests[] = {
    cmocka_unit_test(lines_parse_into_entries),
    cmocka_unit_test(headers_are_checked_for_token_and_scope),
};
MX_TEST_MAIN(tests)
