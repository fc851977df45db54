/*
 * Authorization with bearer tokens (--auth-tokens FILE). The file holds no token, only
 * each token's SHA-256, its scopes and, optionally, the resource prefix it is limited to
 * (the sample's lines are wider than the code's, so the formatter leaves them alone):
 */
/* clang-format off */
/*
 *     # name    hash                                                                     scopes           prefix
 *     deployer  sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  read,write       jobs/
 *     operator  sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752  read,write,admin
 */
/* clang-format on */
/*
 * Scopes: `read` (GET a resource, list), `write` (acquire, renew, release), `admin` (break),
 * `metrics` (GET /metrics, which counts every resource and client: a token limited to a
 * prefix gets it only when named; one with `read` and no prefix has it, as before this
 * scope existed). The file is read again on SIGHUP; a file that does not parse, or that
 * others can write, leaves the tokens in force as they were.
 *
 * The header is `Authorization: Bearer TOKEN`, TOKEN in RFC 6750's b64token alphabet
 * (A-Z a-z 0-9 - . _ ~ + / and trailing =) with nothing after it but blanks.
 *
 * Threads: auth_check() from any thread; auth_reload() from one thread at a time.
 */
#ifndef MX_HTTP_AUTH_H
#define MX_HTTP_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/names.h"

enum auth_scope { AUTH_READ = 1, AUTH_WRITE = 2, AUTH_ADMIN = 4, AUTH_METRICS = 8 };

struct auth;

/* What reading the tokens file came to. */
enum auth_file {
    AUTH_FILE_OK = 0,
    AUTH_FILE_INVALID = -1, /* it does not parse, or cannot be read: err names the line */
    AUTH_FILE_REFUSED = -2, /* others can write it: err says how */
};

/* Reads the file. AUTH_FILE_OK, AUTH_FILE_INVALID with a sentence in err naming the line,
 * or AUTH_FILE_REFUSED with a sentence in err when the file is refused because others can
 * write it (group or world writable, owned by another user than root or ours, or in a
 * directory others can write without the sticky bit). */
enum auth_file auth_open(struct auth **out, const char *path, char *err, size_t errlen);
/* Reads the file again; on error keeps what was in force and returns AUTH_FILE_INVALID or
 * AUTH_FILE_REFUSED (as auth_open()) with err. */
enum auth_file auth_reload(struct auth *a, char *err, size_t errlen);
void auth_free(struct auth *a);

struct auth_grant {
    char name[64];                /* the token's name in the file, for logs */
    unsigned scopes;              /* its scopes in the file (enum auth_scope bits) */
    char prefix[MX_NAME_MAX + 1]; /* "" when not limited */
};

/*
 * Checks an Authorization header value (may be NULL) for `scope`. Returns 0 and fills
 * `grant` when allowed; 401 when there is no valid token; 403 when the token lacks the
 * scope. The resource prefix is the caller's to check with auth_prefix_allows().
 */
int auth_check(struct auth *a, const char *authorization, unsigned scope, struct auth_grant *grant);
/* Whether a grant limited to a prefix covers `name` (`len` bytes). */
bool auth_prefix_allows(const struct auth_grant *g, const char *name, size_t len);

/* Parses one line of the file (tests/fuzz/fuzz_auth.c and tests/unit/http/test_auth.c reach it
 * directly). Returns 1 for an entry, 0 for a blank or comment line, -1 (err) for a bad one. */
struct auth_entry {
    char name[64];
    uint8_t digest[32];
    unsigned scopes;
    char prefix[MX_NAME_MAX + 1];
};
int auth_parse_line(const char *line, struct auth_entry *out, char *err, size_t errlen);

void auth_metrics(struct auth *a, struct mx_buf *b);

#endif
