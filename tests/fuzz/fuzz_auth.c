/*
 * Fuzzer: the tokens file's lines (auth_parse_line) and the Authorization header
 * (auth_check), both in http/auth.c. The first byte picks which one gets the rest.
 * An accepted line is complete; a header is allowed only with the one token the table
 * holds, exactly, and with the scopes that token has.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/auth.h"

#define TOKEN "fuzz-token"
/* sha256("fuzz-token"), from `printf fuzz-token | sha256sum` */
#define TOKEN_HASH "sha256:33cc09ba35314d19e32ed9a5a30fca56eebbfab5faec7247fd0403cd26e155b5"

static struct auth *table;

static struct auth *open_table(void)
{
    char path[] = "/tmp/mutexd-fuzz-auth-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    FILE *f = fdopen(fd, "w");
    fprintf(f, "fuzzer %s read,write jobs/\n", TOKEN_HASH);
    fclose(f);
    char err[256];
    struct auth *a = NULL;
    if (auth_open(&a, path, err, sizeof err) != AUTH_FILE_OK) {
        fprintf(stderr, "fuzz_auth: %s\n", err);
        abort();
    }
    unlink(path);
    return a;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size == 0)
        return 0;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (data[0] & 1) {
        struct auth_entry e;
        char err[128];
        int r = auth_parse_line(text, &e, err, sizeof err);
        if (r == 1 &&
            (!e.name[0] || !e.scopes ||
             (e.scopes & ~(unsigned)(AUTH_READ | AUTH_WRITE | AUTH_ADMIN | AUTH_METRICS)) ||
             strlen(e.prefix) > 256))
            abort(); /* accepted means complete */
        if (r < 0 && !err[0])
            abort(); /* refused means explained */
    } else {
        if (!table)
            table = open_table();
        struct auth_grant g;
        unsigned scope = 1u << (data[0] >> 1) % 4;
        int r = auth_check(table, text, scope, &g);
        if (r != 0 && r != 401 && r != 403)
            abort();
        if (r == 0 || r == 403) {
            /* Only the table's token is known: "Bearer" (any case), blanks, the token. */
            const char *t = text + 7;
            while (*t == ' ')
                t++;
            if (strncmp(t, TOKEN, sizeof TOKEN - 1) != 0)
                abort();
            /* The token has read and write, limited to jobs/: admin is refused, and metrics
             * too (a prefix-limited token gets it only when named). */
            if (r == 0 &&
                (scope == AUTH_ADMIN || scope == AUTH_METRICS || strcmp(g.prefix, "jobs/") != 0))
                abort();
        }
    }
    free(text);
    return 0;
}
