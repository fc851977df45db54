/*
 * Option parsing (see options.h). Defaults are written as text and parsed like any
 * value, so they pass the same bounds checks. Everything that can be checked without
 * the data directory is checked here (addresses, files, the blob connection string), so
 * that a bad option is refused before the disk is touched.
 */
#include "server/options.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <openssl/pem.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "blob/blob.h"
#include "persistence/mirror.h"

#define OFF(f) offsetof(struct options, f)

/* What --version says the build has: sd_notify for systemd (CMake MUTEXD_SYSTEMD), and the
 * fault seams of the tests (MUTEXD_FAULT_INJECTION). */
#ifdef MUTEXD_SYSTEMD
#define BUILT_SYSTEMD "+systemd"
#else
#define BUILT_SYSTEMD "-systemd"
#endif
#ifdef MUTEXD_FAULT_INJECTION
#define BUILT_FAULTS "+fault-injection"
#else
#define BUILT_FAULTS "-fault-injection"
#endif

static const struct option_def defs[] = {
    {"listen", "MUTEXD_LISTEN", "HOST:PORT", T_ADDR, OFF(listen), "127.0.0.1:8080", 0, 0,
     "address to serve HTTP on (PORT 0: any free port, logged at start)"},
    {"data-dir", "MUTEXD_DATA_DIR", "DIR", T_STR, OFF(data_dir), "./data", 0, 0,
     "directory of the SQLite store; created if missing, locked while running"},
    {"threads", "MUTEXD_THREADS", "N", T_U64, OFF(threads), NULL, 1, 1024,
     "worker threads for actors and for HTTP (default: the number of cores for actors, one fewer "
     "for HTTP, at least one: the store's writer keeps the last core busy)"},
    {"min-ttl-ms", "MUTEXD_MIN_TTL_MS", "MS", T_U64, OFF(min_ttl_ms), "1000", 1, 2592000000ull,
     "shortest lease TTL a client may ask for"},
    {"max-ttl-ms", "MUTEXD_MAX_TTL_MS", "MS", T_U64, OFF(max_ttl_ms), "3600000", 1, 2592000000ull,
     "longest lease TTL a client may ask for"},
    {"max-wait-ms", "MUTEXD_MAX_WAIT_MS", "MS", T_U64, OFF(max_wait_ms), "300000", 0, 86400000,
     "longest wait_ms of a blocking acquire or a watch"},
    {"max-waiters", "MUTEXD_MAX_WAITERS", "N", T_U64, OFF(max_waiters), "1024", 1, 1000000,
     "acquire requests queued on one resource at most (and watchers at most)"},
    {"max-holders", "MUTEXD_MAX_HOLDERS", "N", T_U64, OFF(max_holders), "1024", 1, 65536,
     "leases holding one resource at once at most (a semaphore's limit, shared leases)"},
    {"event-history", "MUTEXD_EVENT_HISTORY", "N", T_U64, OFF(event_history), "10000", 0, 100000,
     "recent changes kept in memory for GET /v1/events (0: none)"},
    {"max-connections", "MUTEXD_MAX_CONNECTIONS", "N", T_U64, OFF(max_connections), "10000", 16,
     1000000,
     "open HTTP connections at most (8 + N/64 more for health checks only); requests that "
     "wait (blocking acquires, watches) take three quarters of them at most"},
    {"idle-timeout-ms", "MUTEXD_IDLE_TIMEOUT_MS", "MS", T_U64, OFF(idle_timeout_ms), "60000", 1000,
     3600000, "a connection is closed after this long idle or sending one request's headers"},
    {"max-actors", "MUTEXD_MAX_ACTORS", "N", T_U64, OFF(max_actors), "4000000", 1000, 100000000,
     "resources in memory at most (waited on, watched, or used in the last seconds)"},
    {"auth-tokens", "MUTEXD_AUTH_TOKENS_FILE", "FILE", T_FILE, OFF(auth_tokens), NULL, 0, 0,
     "bearer tokens (SHA-256 hashes, scopes, prefixes): authorization on; reread on SIGHUP"},
    {"tls-cert", "MUTEXD_TLS_CERT", "FILE", T_FILE, OFF(tls_cert), NULL, 0, 0,
     "PEM certificate: serve HTTPS (with --tls-key)"},
    {"tls-key", "MUTEXD_TLS_KEY", "FILE", T_FILE, OFF(tls_key), NULL, 0, 0,
     "PEM private key for --tls-cert"},
    {"tls-priorities", "MUTEXD_TLS_PRIORITIES", "STRING", T_STR, OFF(tls_priorities),
     MX_TLS_PRIORITIES_DEFAULT, 0, 0,
     "GnuTLS priority string: the TLS versions and cipher suites offered (default: TLS 1.2 "
     "and 1.3, AEAD suites with forward secrecy)"},
    {"allowed-origins", "MUTEXD_ALLOWED_ORIGINS", "LIST", T_STR, OFF(allowed_origins), NULL, 0, 0,
     "comma-separated scheme://host[:port] whose requests are served; any other request "
     "with an Origin header (a web page's) is refused 403 (default: none)"},
    {"allowed-hosts", "MUTEXD_ALLOWED_HOSTS", "LIST", T_STR, OFF(allowed_hosts), NULL, 0, 0,
     "comma-separated host names the Host header may carry besides loopback ones, or *: "
     "any (default: on a loopback listener only loopback names; elsewhere unchecked)"},
    {"ui", "MUTEXD_UI", "on|off", T_ONOFF, OFF(ui), "on", 0, 0,
     "serve the dashboard, a web page of the resources, holders and events, at /ui/ "
     "(off: 404 there)"},
    {"blob-connection-string", "MUTEXD_BLOB_CONNECTION_STRING", "S", T_STR,
     OFF(blob_connection_string), NULL, 0, 0,
     "Azure Storage connection string of the blob mirror (else AZURE_STORAGE_CONNECTION_STRING; "
     "UseDevelopmentStorage=true for Azurite)"},
    {"blob-container", "MUTEXD_BLOB_CONTAINER", "NAME", T_STR, OFF(blob_container), "mutexd", 0, 0,
     "blob container of the mirror: the servers of a group (--ha) share one; a server "
     "without --ha needs one of its own"},
    {"mirror", "MUTEXD_MIRROR", "MODE", T_STR, OFF(mirror), NULL, 0, 0,
     "off, async (answer after the local commit) or sync (also after the blob write); "
     "default async with a connection string, else off"},
    {"restore-grace-ms", "MUTEXD_RESTORE_GRACE_MS", "MS", T_U64, OFF(restore_grace_ms), NULL, 0,
     2592000000ull,
     "after a restore from an async mirror, grant nothing for this long (default: --max-ttl-ms)"},
    {"snapshot-every-changes", "MUTEXD_SNAPSHOT_EVERY_CHANGES", "N", T_U64,
     OFF(snapshot_every_changes), "100000", 1, 100000000,
     "write a snapshot to blob storage after this many changes"},
    {"snapshot-every-ms", "MUTEXD_SNAPSHOT_EVERY_MS", "MS", T_U64, OFF(snapshot_every_ms), "300000",
     1000, 86400000, "or after this long, if anything changed"},
    {"mirror-takeover-ms", "MUTEXD_MIRROR_TAKEOVER_MS", "MS", T_U64, OFF(mirror_takeover_ms),
     "20000", 1000, 600000,
     "at start, how long to wait for another server's lease on the container to lapse"},
    {"ha", "MUTEXD_HA", "", T_BOOL, OFF(ha), NULL, 0, 0,
     "join a server group on the blob container: one active server serves, the others "
     "forward to it (needs --mirror sync and --advertise-url)"},
    {"advertise-url", "MUTEXD_ADVERTISE_URL", "URL", T_URL, OFF(advertise_url), NULL, 0, 0,
     "http://HOST:PORT or https://HOST:PORT the other servers of the group reach this one at"},
    {"failover-after-ms", "MUTEXD_FAILOVER_AFTER_MS", "MS", T_U64, OFF(failover_after_ms), "3000",
     500, 600000, "a standby takes over after the active has not answered for this long"},
    {"failover-grace-ms", "MUTEXD_FAILOVER_GRACE_MS", "MS", T_U64, OFF(failover_grace_ms), "15000",
     0, 3600000,
     "after a takeover, a lease that ran out while no server was active stays its holder's "
     "for this long"},
    {"forward-timeout-ms", "MUTEXD_FORWARD_TIMEOUT_MS", "MS", T_U64, OFF(forward_timeout_ms),
     "10000", 100, 600000,
     "a standby holds a request this long for an active server to forward it to (and waits "
     "this long for the active's answer beyond the request's own wait_ms)"},
    {"partitions", "MUTEXD_PARTITIONS", "N", T_U64, OFF(partitions), "1", 1, 256,
     "split the group's resources into N partitions, spread over its servers (needs --ha "
     "above 1; fixed when the group is created)"},
    {"log-level", "MUTEXD_LOG_LEVEL", "LEVEL", T_LEVEL, OFF(log_level), "info", 0, 0,
     "debug, info, warn, error or off"},
};
#define NDEFS (sizeof defs / sizeof defs[0])

const struct option_def *options_table(size_t *n)
{
    *n = NDEFS;
    return defs;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mutexd [OPTION]...\n\n"
               "A lease server: clients acquire, renew and release timed leases on named\n"
               "resources over HTTP/JSON. Every option can also be set by its environment\n"
               "variable; a flag wins over its variable.\n\n");
    for (size_t i = 0; i < NDEFS; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", defs[i].flag, *defs[i].metavar ? " " : "",
                 defs[i].metavar);
        fprintf(f, "  %-28s %s\n  %-28s env %s", left, defs[i].help, "", defs[i].env);
        if (defs[i].offset == OFF(blob_connection_string))
            fprintf(f, " or AZURE_STORAGE_CONNECTION_STRING");
        if (defs[i].type == T_BOOL)
            fprintf(f, "=1");
        if (defs[i].def)
            fprintf(f, ", default %s", defs[i].def);
        if (defs[i].type == T_U64 && defs[i].max)
            fprintf(f, ", %" PRIu64 " to %" PRIu64, defs[i].min, defs[i].max);
        fputc('\n', f);
    }
    fprintf(f, "  %-28s print this help and exit\n", "--help");
    fprintf(f, "  %-28s print the version and exit\n", "--version");
    fprintf(f,
            "  %-28s ask the server these options describe for /healthz; exit 0 if\n"
            "  %-28s it answers 200, else 1 (for container health checks)\n",
            "--probe", "");
}

/*
 * HOST:PORT as the HTTP front opens it: split at the last ':', the host in brackets for
 * IPv6 ([::1]:8080), PORT from 0 to 65535 (0: any free port; the server logs the one it
 * got, and the tests use it). The host must resolve. getaddrinfo() alone would not do:
 * it takes a port above 65535 modulo 65536 (99999 is 34463).
 */
static int check_addr(const struct option_def *d, const char *value, const char *from)
{
    const char *colon = strrchr(value, ':');
    char host[256];
    size_t hl = colon ? (size_t)(colon - value) : 0;
    if (!colon || hl == 0 || hl >= sizeof host) {
        fprintf(stderr,
                "mutexd: %s: --%s must be HOST:PORT (for example 127.0.0.1:8080), not '%s'\n", from,
                d->flag, value);
        return -1;
    }
    const char *port = colon + 1;
    size_t digits = strspn(port, "0123456789");
    if (digits == 0 || port[digits] || digits > 5 || strtoul(port, NULL, 10) > 65535) {
        fprintf(stderr,
                "mutexd: %s: --%s: the port must be a number from 0 to 65535 (0: any free port), "
                "not '%s'\n",
                from, d->flag, port);
        return -1;
    }
    memcpy(host, value, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0) {
        fprintf(stderr, "mutexd: %s: --%s: cannot resolve '%s': %s\n", from, d->flag, host,
                gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
        return -1;
    }
    freeaddrinfo(ai);
    return 0;
}

/* A file read at start (and, for tokens, on SIGHUP): it must be there and readable now. */
static int check_file(const struct option_def *d, const char *value, const char *from)
{
    int fd = open(value, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        fprintf(stderr, "mutexd: %s: --%s: cannot read '%s': %s\n", from, d->flag, value,
                fd < 0 ? strerror(errno) : "a directory");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static bool valid_url(const char *s);

static int set_value(struct options *o, const struct option_def *d, const char *value,
                     const char *from)
{
    void *field = (char *)o + d->offset;
    switch (d->type) {
    case T_STR:
    case T_ADDR:
    case T_FILE:
    case T_URL:
        if (!*value) {
            fprintf(stderr, "mutexd: %s: --%s must not be empty\n", from, d->flag);
            return -1;
        }
        if (d->type == T_ADDR && check_addr(d, value, from) != 0)
            return -1;
        if (d->type == T_FILE && check_file(d, value, from) != 0)
            return -1;
        if (d->type == T_URL && !valid_url(value)) {
            fprintf(stderr,
                    "mutexd: %s: --%s must be http://HOST:PORT or https://HOST:PORT (a port "
                    "from 1 to 65535, no path), not '%s'\n",
                    from, d->flag, value);
            return -1;
        }
        *(const char **)field = value;
        return 0;
    case T_BOOL:
        if (strcmp(value, "1") != 0 && strcmp(value, "0") != 0) {
            fprintf(stderr, "mutexd: %s: %s must be 1 or 0, not '%s'\n", from, d->env, value);
            return -1;
        }
        *(bool *)field = value[0] == '1';
        return 0;
    case T_ONOFF:
        if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0) {
            fprintf(stderr, "mutexd: %s: --%s must be on or off, not '%s'\n", from, d->flag, value);
            return -1;
        }
        *(bool *)field = value[1] == 'n';
        return 0;
    case T_LEVEL: {
        int lvl = mx_log_parse_level(value);
        if (lvl < 0) {
            fprintf(stderr, "mutexd: %s: --%s must be debug, info, warn, error or off, not '%s'\n",
                    from, d->flag, value);
            return -1;
        }
        *(uint64_t *)field = (uint64_t)lvl;
        return 0;
    }
    case T_U64: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(value, &end, 10);
        if (errno || end == value || *end || value[0] < '0' || value[0] > '9' || v < d->min ||
            v > d->max) {
            fprintf(stderr,
                    "mutexd: %s: --%s must be a whole number from %" PRIu64 " to %" PRIu64
                    ", not '%s'\n",
                    from, d->flag, d->min, d->max, value);
            return -1;
        }
        *(uint64_t *)field = v;
        return 0;
    }
    }
    return -1;
}

/* The first PEM object of the right kind in a file; an encrypted key is refused (the
 * server has no passphrase to give). */
static bool pem_has(const char *path, bool key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok;
    if (key) {
        EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, (void *)"");
        ok = k != NULL;
        EVP_PKEY_free(k);
    } else {
        X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
        ok = x != NULL;
        X509_free(x);
    }
    fclose(f);
    return ok;
}

/* Checks that need more than one option, or a parser of their own. */
static int check_together(const struct options *o)
{
    if (o->tls_cert && !pem_has(o->tls_cert, false)) {
        fprintf(stderr, "mutexd: --tls-cert: no PEM certificate in '%s'\n", o->tls_cert);
        return -1;
    }
    if (o->tls_key && !pem_has(o->tls_key, true)) {
        fprintf(stderr, "mutexd: --tls-key: no unencrypted PEM private key in '%s'\n", o->tls_key);
        return -1;
    }
    if (o->blob_connection_string) {
        struct blob_account a = {0};
        char err[256];
        int rc = blob_parse_connection_string(o->blob_connection_string, &a, err, sizeof err);
        blob_account_wipe(&a);
        if (rc != 0) {
            fprintf(stderr, "mutexd: --blob-connection-string: %s\n", err);
            return -1;
        }
    }
    if (!blob_container_name_ok(o->blob_container)) {
        fprintf(stderr,
                "mutexd: --blob-container: a container name is 3 to 63 characters of a-z, 0-9 "
                "and single '-' inside, not '%s'\n",
                o->blob_container);
        return -1;
    }
    return 0;
}

/* A host name or address as a Host header carries it, without the port. */
static bool valid_host_chars(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    if (s[0] == '[') /* [IPv6] */
        return n > 2 && s[n - 1] == ']' && strspn(s + 1, "0123456789abcdefABCDEF:.") == n - 2;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return false;
    }
    return true;
}

static bool valid_host(const char *s, size_t n)
{
    return (n == 1 && s[0] == '*') || valid_host_chars(s, n);
}

/* scheme://host[:port], as a browser writes an Origin header. */
static bool valid_origin(const char *s, size_t n)
{
    size_t skip = n >= 7 && strncmp(s, "http://", 7) == 0    ? 7
                  : n >= 8 && strncmp(s, "https://", 8) == 0 ? 8
                                                             : 0;
    if (!skip)
        return false;
    s += skip;
    n -= skip;
    const char *end = s + n, *colon = NULL;
    const char *close = s[0] == '[' ? memchr(s, ']', n) : NULL;
    const char *from = close ? close : s;
    colon = memchr(from, ':', (size_t)(end - from));
    size_t hn = colon ? (size_t)(colon - s) : n;
    if (colon) {
        size_t pn = (size_t)(end - colon - 1);
        if (pn == 0 || pn > 5 || strspn(colon + 1, "0123456789") < pn)
            return false;
    }
    return valid_host_chars(s, hn);
}

/* http(s)://host:port, a trailing '/' allowed: where the other servers of a group send
 * this one's requests. The port is required: a group's servers often share a host. */
static bool valid_url(const char *s)
{
    size_t n = strlen(s);
    if (n && s[n - 1] == '/')
        n--;
    if (!valid_origin(s, n))
        return false;
    const char *host = strstr(s, "://") + 3;
    const char *from = host[0] == '[' ? memchr(host, ']', n - (size_t)(host - s)) : host;
    const char *colon = from ? memchr(from, ':', n - (size_t)(from - s)) : NULL;
    return colon && strtoul(colon + 1, NULL, 10) >= 1 && strtoul(colon + 1, NULL, 10) <= 65535;
}

/* A comma-separated list (spaces around items allowed) whose every item passes `ok`. */
static int check_list(const char *list, const char *flag, bool (*ok)(const char *, size_t),
                      const char *want)
{
    if (!list)
        return 0;
    for (const char *p = list;;) {
        p += strspn(p, " ");
        size_t n = strcspn(p, ",");
        size_t m = n;
        while (m && p[m - 1] == ' ')
            m--;
        if (!ok(p, m)) {
            fprintf(stderr, "mutexd: --%s: '%.*s' is not %s\n", flag, (int)m, p, want);
            return -1;
        }
        if (!p[n])
            return 0;
        p += n + 1;
    }
}

/* A fault seam's number from the environment variable `name`: 0 when unset, -1 (said) when
 * set in a build without fault injection or out of [min, max]. */
static int parse_fault_u64(const char *name, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *f = getenv(name);
    if (!f || !*f)
        return 0;
#ifndef MUTEXD_FAULT_INJECTION
    (void)min;
    (void)max;
    (void)out;
    fprintf(stderr, "mutexd: %s is set but this build has no fault injection\n", name);
    return -1;
#else
    char *end;
    errno = 0;
    unsigned long long v = strtoull(f, &end, 10);
    if (*end || errno || v < min || v > max) {
        fprintf(stderr, "mutexd: %s must be %" PRIu64 " to %" PRIu64 "\n", name, min, max);
        return -1;
    }
    *out = v;
    fprintf(stderr, "mutexd: fault injection on: %s=%s\n", name, f);
    return 0;
#endif
}

/* MUTEXD_FAULT_APPEND_PAUSE_MS: how long the mirror stops before an append once asked to
 * (see fault_pause() in the mirror). MUTEXD_FAULT_MIRROR_QUEUE_MAX: the async mirror's
 * queue bound, small enough for a test to fill. */
static int parse_mirror_faults(struct options *o)
{
    if (parse_fault_u64("MUTEXD_FAULT_APPEND_PAUSE_MS", 1, 600000, &o->fault_append_pause_ms) != 0)
        return -1;
    return parse_fault_u64("MUTEXD_FAULT_MIRROR_QUEUE_MAX", 1, 100000000,
                           &o->fault_mirror_queue_max);
}

#ifdef MUTEXD_FAULT_INJECTION
/* A role of the HTTP front as the fault seam names it: forward:URL, hold, fenced, and
 * (when `serve` is true) serve. */
static bool valid_role(const char *r, bool serve)
{
    if (strncmp(r, "forward:", 8) == 0)
        return valid_url(r + 8);
    return strcmp(r, "hold") == 0 || strcmp(r, "fenced") == 0 || (serve && strcmp(r, "serve") == 0);
}
#endif

/* MUTEXD_FAULT_ROLE=ROLE, MUTEXD_FAULT_ROLE_AFTER_MS=MS:ROLE, MUTEXD_FAULT_SERVED_BY=URL:
 * the HTTP front's role set from outside, for tests of forwarding. */
static int parse_role_faults(struct options *o)
{
    const char *role = getenv("MUTEXD_FAULT_ROLE");
    const char *after = getenv("MUTEXD_FAULT_ROLE_AFTER_MS");
    const char *served = getenv("MUTEXD_FAULT_SERVED_BY");
    role = role && *role ? role : NULL;
    after = after && *after ? after : NULL;
    served = served && *served ? served : NULL;
    if (!role && !after && !served)
        return 0;
#ifndef MUTEXD_FAULT_INJECTION
    (void)o;
    fprintf(stderr, "mutexd: MUTEXD_FAULT_ROLE, MUTEXD_FAULT_ROLE_AFTER_MS or "
                    "MUTEXD_FAULT_SERVED_BY is set but this build has no fault injection\n");
    return -1;
#else
    if (role && !valid_role(role, true)) {
        fprintf(stderr, "mutexd: MUTEXD_FAULT_ROLE must be forward:URL, hold, fenced or serve\n");
        return -1;
    }
    if (after) {
        char *end;
        errno = 0;
        unsigned long long ms = strtoull(after, &end, 10);
        if (errno || end == after || *end != ':' || ms > 86400000 || !valid_role(end + 1, true)) {
            fprintf(stderr, "mutexd: MUTEXD_FAULT_ROLE_AFTER_MS must be MS:ROLE, ROLE "
                            "forward:URL, hold, fenced or serve\n");
            return -1;
        }
        o->fault_role_after_ms = ms;
        o->fault_role_after = end + 1;
    }
    if (served && !valid_url(served)) {
        fprintf(stderr, "mutexd: MUTEXD_FAULT_SERVED_BY must be http(s)://HOST:PORT\n");
        return -1;
    }
    o->fault_role = role;
    o->fault_served_by = served;
    fprintf(stderr,
            "mutexd: fault injection on: MUTEXD_FAULT_ROLE=%s MUTEXD_FAULT_ROLE_AFTER_MS=%s\n",
            role ? role : "", after ? after : "");
    return 0;
#endif
}

/* MUTEXD_FAULT_COMMIT: "N" fails commit N, "N:K" K commits from N, "every:N" every Nth. */
static int parse_faults(struct options *o)
{
    if (parse_mirror_faults(o) != 0 || parse_role_faults(o) != 0)
        return -1;
    const char *f = getenv("MUTEXD_FAULT_COMMIT");
    if (!f || !*f)
        return 0;
#ifndef MUTEXD_FAULT_INJECTION
    (void)o;
    fprintf(stderr, "mutexd: MUTEXD_FAULT_COMMIT is set but this build has no fault injection\n");
    return -1;
#else
    char *end;
    if (strncmp(f, "every:", 6) == 0) {
        o->fault_commit_every = strtoull(f + 6, &end, 10);
    } else {
        o->fault_commit_first = strtoull(f, &end, 10);
        o->fault_commit_count = 1;
        if (*end == ':')
            o->fault_commit_count = strtoull(end + 1, &end, 10);
    }
    if (*end) {
        fprintf(stderr, "mutexd: MUTEXD_FAULT_COMMIT must be N, N:K or every:N\n");
        return -1;
    }
    fprintf(stderr, "mutexd: fault injection on: MUTEXD_FAULT_COMMIT=%s\n", f);
    return 0;
#endif
}

/* --ha needs the container it coordinates on, written synchronously (no 2xx may escape the
 * fence), and the URL the others forward to. Everything missing is named at once. */
static int check_ha(const struct options *o)
{
    const char *missing[3];
    int n = 0;
    if (!o->blob_connection_string)
        missing[n++] = "--blob-connection-string (or MUTEXD_BLOB_CONNECTION_STRING or "
                       "AZURE_STORAGE_CONNECTION_STRING)";
    if (o->mirror_mode != MIRROR_SYNC)
        missing[n++] = "--mirror sync";
    if (!o->advertise_url)
        missing[n++] = "--advertise-url";
    if (n == 0)
        return 0;
    fprintf(stderr, "mutexd: --ha needs");
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s %s", i == 0 ? "" : i == n - 1 ? " and" : ",", missing[i]);
    fprintf(stderr, "\n");
    return -1;
}

int options_parse(struct options *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    struct option longopts[NDEFS + 4];
    for (size_t i = 0; i < NDEFS; i++)
        longopts[i] = (struct option){
            defs[i].flag, defs[i].type == T_BOOL ? no_argument : required_argument, NULL, (int)i};
    longopts[NDEFS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NDEFS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    longopts[NDEFS + 2] = (struct option){"probe", no_argument, NULL, 'P'};
    longopts[NDEFS + 3] = (struct option){0};

    bool given[NDEFS] = {false};
    const char *values[NDEFS] = {NULL};
    int c;
    opterr = 0;
    /* The leading ':' makes a flag without its value come back as ':', told apart from an
     * unknown flag (for a long option getopt sets optopt to its index, 0 for --listen). */
    for (;;) {
        int before = optind;
        if ((c = getopt_long(argc, argv, ":h", longopts, NULL)) == -1)
            break;
        /* getopt leaves optind where it was while a group of short flags goes on: the
         * element it is reading is argv[optind] then, else argv[optind - 1]. */
        const char *arg = optind == before ? argv[optind] : argv[optind - 1];
        if (c == 'h' && optind == before) { /* -hh, -hx: no short flag but -h */
            fprintf(stderr, "mutexd: unknown option: %s\nTry 'mutexd --help'.\n", arg);
            return 2;
        }
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == 'V') {
            /* The first line is the version alone (scripts read its last word); the second
             * names what the build was made with. */
            printf("mutexd %s\nfeatures: %s %s\n", MUTEXD_VERSION, BUILT_SYSTEMD, BUILT_FAULTS);
            return 0;
        }
        if (c == 'P') {
            o->probe = true;
            continue;
        }
        if (c == ':' && optopt >= 0 && (size_t)optopt < NDEFS) {
            fprintf(stderr, "mutexd: --%s needs a value: --%s %s\n", defs[optopt].flag,
                    defs[optopt].flag, defs[optopt].metavar);
            fprintf(stderr, "Try 'mutexd --help'.\n");
            return 2;
        }
        if (c == '?' || c == ':' || c < 0 || (size_t)c >= NDEFS) {
            if (c == '?' && strncmp(arg, "--", 2) == 0 &&
                (optopt == 'h' || optopt == 'V' || optopt == 'P' ||
                 (optopt > 0 && (size_t)optopt < NDEFS && defs[optopt].type == T_BOOL)))
                fprintf(stderr, "mutexd: %s takes no value\n", arg);
            else
                fprintf(stderr, "mutexd: unknown option: %s\n", arg);
            fprintf(stderr, "Try 'mutexd --help'.\n");
            return 2;
        }
        given[c] = true;
        values[c] = defs[c].type == T_BOOL ? "1" : optarg;
    }
    if (optind < argc) {
        fprintf(stderr, "mutexd: unexpected argument: %s\nTry 'mutexd --help'.\n", argv[optind]);
        return 2;
    }
    bool grace_set = false; /* 0 is a valid grace: "not set" must be told apart */
    for (size_t i = 0; i < NDEFS; i++) {
        const char *v = values[i], *from = "flag";
        if (!given[i]) {
            v = getenv(defs[i].env);
            from = defs[i].env;
            if ((!v || !*v) && defs[i].offset == OFF(blob_connection_string)) {
                v = getenv("AZURE_STORAGE_CONNECTION_STRING"); /* the Azure tools' variable */
                from = "AZURE_STORAGE_CONNECTION_STRING";
            }
            if (!v || !*v) {
                v = defs[i].def;
                from = "default";
            }
        }
        if (v && set_value(o, &defs[i], v, from) != 0)
            return 2;
        if (v && defs[i].offset == OFF(restore_grace_ms))
            grace_set = true;
    }
    if (o->threads == 0) {
        /* Under load the store's writer thread is always busy, committing or in its fsync:
         * HTTP threads on every core would take turns with it and with each other. */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = n > 0 ? (uint64_t)n : 1;
        o->http_threads = o->threads > 1 ? o->threads - 1 : 1;
    } else {
        o->http_threads = o->threads;
    }
    if (o->min_ttl_ms > o->max_ttl_ms) {
        fprintf(stderr, "mutexd: --min-ttl-ms (%" PRIu64 ") is above --max-ttl-ms (%" PRIu64 ")\n",
                o->min_ttl_ms, o->max_ttl_ms);
        return 2;
    }
    if (!grace_set)
        o->restore_grace_ms = o->max_ttl_ms;
    if (o->mirror) {
        o->mirror_mode = (int)mirror_parse_mode(o->mirror);
        if (o->mirror_mode < 0) {
            fprintf(stderr, "mutexd: --mirror must be off, async or sync, not '%s'\n", o->mirror);
            return 2;
        }
    } else {
        o->mirror_mode = o->blob_connection_string ? MIRROR_ASYNC : MIRROR_OFF;
    }
    if (o->ha && check_ha(o) != 0)
        return 2;
    if (o->partitions > 1 && !o->ha) {
        fprintf(stderr,
                "mutexd: --partitions %" PRIu64 " needs --ha (a partitioned group is a "
                "server group)\n",
                o->partitions);
        return 2;
    }
    if (o->mirror_mode != MIRROR_OFF && !o->blob_connection_string) {
        fprintf(stderr,
                "mutexd: --mirror %s needs --blob-connection-string (or "
                "MUTEXD_BLOB_CONNECTION_STRING or AZURE_STORAGE_CONNECTION_STRING)\n",
                o->mirror);
        return 2;
    }
    if (!o->tls_cert != !o->tls_key) {
        fprintf(stderr, "mutexd: --tls-cert and --tls-key go together\n");
        return 2;
    }
    if (check_together(o) != 0 ||
        check_list(o->allowed_origins, "allowed-origins", valid_origin,
                   "scheme://host[:port] (http or https, no path)") != 0 ||
        check_list(o->allowed_hosts, "allowed-hosts", valid_host,
                   "a host name, an IPv4 address, an [IPv6] address, or *") != 0)
        return 2;
    if (parse_faults(o) != 0)
        return 2;
    return -1;
}
