/*
 * Shared by the C unit tests that run against a real Azurite (registered with
 * WRAPPER scripts/with-azurite.sh, which starts one and sets
 * MUTEXD_TEST_BLOB_CONNECTION_STRING): its account, a client, a container of the case's own,
 * a check of a call's outcome, and a local URL that answers nothing. Without the variable
 * every case fails: it must never pass by not running.
 */
#ifndef MX_TEST_AZURITE_H
#define MX_TEST_AZURITE_H

#include "tests/unit/testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "blob/blob.h"

#define MX_AZURITE_ENV "MUTEXD_TEST_BLOB_CONNECTION_STRING"

/* `call` (with `r`, the struct blob_result it fills, in scope) must return `want_rc` with
 * HTTP status `want_status` and error code `want_code` ("" for none; NULL: any code); the
 * case fails saying what came instead. */
#define MX_AZ_EXPECT(call, want_rc, want_status, want_code)                                        \
    do {                                                                                           \
        int rc_ = (int)(call);                                                                     \
        const char *code_ = (want_code);                                                           \
        if (rc_ != (int)(want_rc) || r.status != (want_status) ||                                  \
            (code_ && strcmp(r.error_code, code_) != 0))                                           \
            fail_msg("%s: rc %d status %ld code '%s' message '%s' (want %d %d '%s')", #call, rc_,  \
                     r.status, r.error_code, r.message, (int)(want_rc), (want_status),             \
                     code_ ? code_ : "(any)");                                                     \
    } while (0)

/* A valid account key (64 bytes) that is not Azurite's. */
#define MX_AZURITE_OTHER_KEY                                                                       \
    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw=="

/* The connection string of the Azurite this case runs next to. */
static inline const char *mx_azurite_connection_string(void)
{
    const char *cs = getenv(MX_AZURITE_ENV);
    if (!cs || !cs[0])
        fail_msg(MX_AZURITE_ENV " is not set: run this test through scripts/with-azurite.sh");
    return cs;
}

static inline struct blob_account mx_azurite_account(void)
{
    struct blob_account a;
    char err[256];
    if (blob_parse_connection_string(mx_azurite_connection_string(), &a, err, sizeof err) != 0)
        fail_msg(MX_AZURITE_ENV ": %s", err);
    return a;
}

static inline struct blob_client *mx_azurite_client(const struct blob_account *a,
                                                    const char *container,
                                                    const struct blob_options *opts)
{
    struct blob_client *c;
    char err[256];
    if (blob_client_new(a, container, opts, &c, err, sizeof err) != 0)
        fail_msg("client: %s", err);
    return c;
}

/* A container name no other case of this run uses (not created). */
static inline char *mx_azurite_name(char *container, size_t cap)
{
    static unsigned n;
    snprintf(container, cap, "t%ld-%u-%ld", (long)getpid(), n++, (long)time(NULL));
    return container;
}

/* A client on a fresh container of its own, created here; its name in `container`. */
static inline struct blob_client *mx_azurite_container(char *container, size_t cap)
{
    struct blob_account a = mx_azurite_account();
    struct blob_client *c = mx_azurite_client(&a, mx_azurite_name(container, cap), NULL);
    struct blob_result r = {0};
    if (blob_create_container(c, &r) != 0)
        fail_msg("create container: status %ld %s %s", r.status, r.error_code, r.message);
    assert_int_equal(r.status, 201);
    blob_result_free(&r);
    return c;
}

/* libcurl's global state, around each case. */
static inline int mx_azurite_setup(void **st)
{
    (void)st;
    return blob_global_init();
}

static inline int mx_azurite_teardown(void **st)
{
    (void)st;
    blob_global_cleanup();
    return 0;
}

/* "http://127.0.0.1:<port>" in `url`, a port that refuses every connection: bound (so that
 * nothing else takes it) and never listened on. Close *fd when done. */
static inline char *mx_closed_url(char *url, size_t cap, int *fd)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sin;
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(*fd >= 0);
    assert_int_equal(bind(*fd, (struct sockaddr *)&sin, sizeof sin), 0);
    assert_int_equal(getsockname(*fd, (struct sockaddr *)&sin, &len), 0);
    snprintf(url, cap, "http://127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
    return url;
}

#endif
