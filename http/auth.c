/*
 * Bearer tokens (see auth.h). A presented token is hashed with SHA-256 and compared with
 * every entry in constant time (CRYPTO_memcmp), so the time taken says nothing about how
 * close a guess was. The table is replaced whole on reload under a read-write lock.
 */
#include "http/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hex.h"
#include "common/log.h"
#include "common/prom.h"

struct auth {
    char *path;
    pthread_rwlock_t lock;
    struct auth_entry *entries; /* lock */
    size_t n;                   /* lock */
    _Atomic uint64_t missing, invalid, forbidden, reloads, reload_errors;
};

int auth_parse_line(const char *line, struct auth_entry *out, char *err, size_t errlen)
{
    char buf[1024];
    size_t len = strcspn(line, "\r\n");
    if (len >= sizeof buf) {
        snprintf(err, errlen, "line too long");
        return -1;
    }
    memcpy(buf, line, len);
    buf[len] = '\0';
    char *fields[5];
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        if (n == 0 && tok[0] == '#')
            return 0;
        if (n == 5) {
            snprintf(err, errlen, "too many fields: want NAME sha256:HEX SCOPES [PREFIX]");
            return -1;
        }
        fields[n++] = tok;
    }
    if (n == 0)
        return 0;
    if (n < 3 || n > 4) {
        snprintf(err, errlen, "want NAME sha256:HEX SCOPES [PREFIX]");
        return -1;
    }
    memset(out, 0, sizeof *out);
    if (strlen(fields[0]) >= sizeof out->name) {
        snprintf(err, errlen, "name too long");
        return -1;
    }
    strcpy(out->name, fields[0]);
    const char *h = fields[1];
    if (strncmp(h, "sha256:", 7) != 0 || strlen(h) != 7 + 64) {
        snprintf(err, errlen, "the hash must be sha256: and 64 hexadecimal digits");
        return -1;
    }
    for (int i = 0; i < 32; i++) {
        int byte = mx_hex_byte(h[7 + 2 * i], h[8 + 2 * i]);
        if (byte < 0) {
            snprintf(err, errlen, "the hash must be sha256: and 64 hexadecimal digits");
            return -1;
        }
        out->digest[i] = (uint8_t)byte;
    }
    char scopes[128];
    snprintf(scopes, sizeof scopes, "%s", fields[2]);
    for (char *save = NULL, *s = strtok_r(scopes, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (strcmp(s, "read") == 0)
            out->scopes |= AUTH_READ;
        else if (strcmp(s, "write") == 0)
            out->scopes |= AUTH_WRITE;
        else if (strcmp(s, "admin") == 0)
            out->scopes |= AUTH_ADMIN;
        else if (strcmp(s, "metrics") == 0)
            out->scopes |= AUTH_METRICS;
        else {
            snprintf(err, errlen, "unknown scope '%.20s': use read, write, admin and metrics", s);
            return -1;
        }
    }
    if (!out->scopes) {
        snprintf(err, errlen, "no scope");
        return -1;
    }
    if (n == 4) {
        if (strlen(fields[3]) > MX_NAME_MAX) {
            snprintf(err, errlen, "prefix too long");
            return -1;
        }
        strcpy(out->prefix, fields[3]);
    }
    return 1;
}

/* Whoever can write the tokens file can give themselves an admin token: it must be
 * writable by its owner alone, that owner root or this process's user, and it must not
 * sit in a directory where others can replace it. */
static int check_private(FILE *f, const char *path, char *err, size_t errlen)
{
    struct stat st, dst;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", path);
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen,
                 "%s is writable by other users (mode %04o): anyone who can write it can give "
                 "themselves a token; chmod go-w it",
                 path, (unsigned)(st.st_mode & 07777));
        return -1;
    }
    if (st.st_uid != 0 && st.st_uid != geteuid()) {
        snprintf(err, errlen,
                 "%s belongs to another user (uid %u), who can change it: give it to root or "
                 "to the user mutexd runs as",
                 path, (unsigned)st.st_uid);
        return -1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        slash[slash == dir ? 1 : 0] = '\0';
    if (stat(dir, &dst) == 0 && (dst.st_mode & (S_IWGRP | S_IWOTH)) && !(dst.st_mode & S_ISVTX)) {
        snprintf(err, errlen,
                 "%s is in %s, which other users can write (mode %04o): they can replace the "
                 "file; chmod go-w the directory",
                 path, dir, (unsigned)(dst.st_mode & 07777));
        return -1;
    }
    return 0;
}

/* Reads the whole file into a new table (see enum auth_file). */
static enum auth_file load(const char *path, struct auth_entry **out, size_t *count, char *err,
                           size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read %s", path);
        return AUTH_FILE_INVALID;
    }
    if (check_private(f, path, err, errlen) != 0) {
        fclose(f);
        return AUTH_FILE_REFUSED;
    }
    struct auth_entry *v = NULL;
    size_t n = 0, cap = 0;
    char line[1100];
    int lineno = 0;
    enum auth_file rc = AUTH_FILE_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        struct auth_entry e;
        char why[128];
        int r = auth_parse_line(line, &e, why, sizeof why);
        if (r < 0) {
            snprintf(err, errlen, "%s line %d: %s", path, lineno, why);
            rc = AUTH_FILE_INVALID;
            break;
        }
        if (r == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct auth_entry *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                snprintf(err, errlen, "out of memory");
                rc = AUTH_FILE_INVALID;
                break;
            }
            v = nv;
        }
        v[n++] = e;
    }
    fclose(f);
    if (rc != AUTH_FILE_OK) {
        free(v);
        return rc;
    }
    *out = v;
    *count = n;
    return AUTH_FILE_OK;
}

enum auth_file auth_open(struct auth **out, const char *path, char *err, size_t errlen)
{
    struct auth *a = calloc(1, sizeof *a);
    if (!a || !(a->path = strdup(path))) {
        free(a);
        snprintf(err, errlen, "out of memory");
        return AUTH_FILE_INVALID;
    }
    pthread_rwlock_init(&a->lock, NULL);
    enum auth_file rc = load(path, &a->entries, &a->n, err, errlen);
    if (rc != AUTH_FILE_OK) {
        auth_free(a);
        return rc;
    }
    mx_info("authorization on", "tokens=%zu file=%s", a->n, path);
    *out = a;
    return AUTH_FILE_OK;
}

enum auth_file auth_reload(struct auth *a, char *err, size_t errlen)
{
    struct auth_entry *v;
    size_t n;
    enum auth_file rc = load(a->path, &v, &n, err, errlen);
    if (rc != AUTH_FILE_OK) {
        atomic_fetch_add(&a->reload_errors, 1);
        return rc;
    }
    pthread_rwlock_wrlock(&a->lock);
    struct auth_entry *old = a->entries;
    a->entries = v;
    a->n = n;
    pthread_rwlock_unlock(&a->lock);
    free(old); /* digests, not tokens: nothing secret to wipe */
    atomic_fetch_add(&a->reloads, 1);
    mx_info("authorization tokens reloaded", "tokens=%zu", n);
    return AUTH_FILE_OK;
}

void auth_free(struct auth *a)
{
    if (!a)
        return;
    free(a->entries);
    free(a->path);
    pthread_rwlock_destroy(&a->lock);
    free(a);
}

int auth_check(struct auth *a, const char *authorization, unsigned scope, struct auth_grant *grant)
{
    static const char bearer[] = "Bearer ";
    if (!authorization || strncasecmp(authorization, bearer, sizeof bearer - 1) != 0) {
        atomic_fetch_add(&a->missing, 1);
        return 401;
    }
    const char *token = authorization + sizeof bearer - 1;
    while (*token == ' ')
        token++;
    /* The token is RFC 6750's b64token and nothing may follow it but blanks: a token
     * with anything after it is not that token. */
    size_t len = strspn(token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789-._~+/");
    len += strspn(token + len, "=");
    unsigned char digest[32];
    unsigned int dlen = 0;
    if (len == 0 || token[len + strspn(token + len, " \t")] != '\0' ||
        EVP_Digest(token, len, digest, &dlen, EVP_sha256(), NULL) != 1) {
        atomic_fetch_add(&a->invalid, 1);
        return 401;
    }
    const struct auth_entry *match = NULL;
    pthread_rwlock_rdlock(&a->lock);
    for (size_t i = 0; i < a->n; i++)
        if (CRYPTO_memcmp(digest, a->entries[i].digest, 32) == 0)
            match = &a->entries[i]; /* no early exit: every entry costs the same */
    int rc = 401;
    if (match) {
        unsigned has = match->scopes;
        /* Tokens files from before the metrics scope: a read token for every resource
         * could read /metrics, and still can. One limited to a prefix needs `metrics`. */
        if ((has & AUTH_READ) && match->prefix[0] == '\0')
            has |= AUTH_METRICS;
        rc = (has & scope) == scope ? 0 : 403;
        grant->scopes = match->scopes;
        snprintf(grant->name, sizeof grant->name, "%s", match->name);
        snprintf(grant->prefix, sizeof grant->prefix, "%s", match->prefix);
    }
    pthread_rwlock_unlock(&a->lock);
    if (rc == 401)
        atomic_fetch_add(&a->invalid, 1);
    else if (rc == 403)
        atomic_fetch_add(&a->forbidden, 1);
    return rc;
}

bool auth_prefix_allows(const struct auth_grant *g, const char *name, size_t len)
{
    size_t p = strlen(g->prefix);
    return p == 0 || (len >= p && memcmp(name, g->prefix, p) == 0);
}

void auth_metrics(struct auth *a, struct mx_buf *b)
{
    prom_header(b, "mutexd_auth_failures_total", "counter", "Requests refused by authorization.");
    prom_sample(b, "mutexd_auth_failures_total", atomic_load(&a->missing), "reason", "missing",
                NULL);
    prom_sample(b, "mutexd_auth_failures_total", atomic_load(&a->invalid), "reason", "invalid",
                NULL);
    prom_sample(b, "mutexd_auth_failures_total", atomic_load(&a->forbidden), "reason", "forbidden",
                NULL);
    prom_header(b, "mutexd_auth_reloads_total", "counter", "Token file reloads by result.");
    prom_sample(b, "mutexd_auth_reloads_total", atomic_load(&a->reloads), "result", "ok", NULL);
    prom_sample(b, "mutexd_auth_reloads_total", atomic_load(&a->reload_errors), "result", "error",
                NULL);
}
