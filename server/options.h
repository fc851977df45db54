/*
 * Server options: each has a flag, an environment variable (MUTEXD_*) and a default; a
 * flag wins over its variable. One table drives parsing, bounds checks and --help.
 */
#ifndef MX_OPTIONS_H
#define MX_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* TLS 1.2 and 1.3, AEAD suites with forward secrecy only (GnuTLS priority syntax). */
#define MX_TLS_PRIORITIES_DEFAULT                                                                  \
    "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:"         \
    "+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:%SERVER_PRECEDENCE"

struct options {
    const char *listen;
    const char *data_dir;
    uint64_t threads;
    uint64_t http_threads; /* computed: --threads when given, else one fewer than the cores */
    uint64_t min_ttl_ms, max_ttl_ms, max_wait_ms, max_waiters, max_holders, event_history;
    uint64_t max_connections, max_actors, idle_timeout_ms;
    const char *tls_cert, *tls_key;
    const char *tls_priorities;                  /* a GnuTLS priority string */
    const char *allowed_origins, *allowed_hosts; /* comma-separated lists, or NULL */
    const char *auth_tokens;
    bool ui; /* --ui: serve the dashboard at /ui/ */
    const char *blob_connection_string, *blob_container, *mirror;
    int mirror_mode; /* enum mirror_mode, decided from --mirror and the connection string */
    uint64_t restore_grace_ms, snapshot_every_changes, snapshot_every_ms, mirror_takeover_ms;
    uint64_t log_level;
    /* A server group (--ha): one active server, the others forward to it. */
    bool ha;
    const char *advertise_url; /* http(s)://host:port this server is reached at */
    uint64_t failover_after_ms, failover_grace_ms, forward_timeout_ms;
    uint64_t partitions; /* --partitions: of the group, 1 to 256 */
    bool probe;          /* --probe: check a running server's /healthz and exit */
    /* testing only: MUTEXD_FAULT_COMMIT (builds with MUTEXD_FAULT_INJECTION) */
    uint64_t fault_commit_every, fault_commit_first, fault_commit_count;
    uint64_t fault_append_pause_ms;  /* MUTEXD_FAULT_APPEND_PAUSE_MS */
    uint64_t fault_mirror_queue_max; /* MUTEXD_FAULT_MIRROR_QUEUE_MAX */
    /* testing only: MUTEXD_FAULT_ROLE ("forward:URL", "hold" or "fenced"), and
     * MUTEXD_FAULT_ROLE_AFTER_MS ("MS:ROLE", ROLE as before or "serve") split in two;
     * MUTEXD_FAULT_SERVED_BY (a Mutexd-Served-By without --ha). NULL: not set. */
    const char *fault_role, *fault_role_after, *fault_served_by;
    uint64_t fault_role_after_ms;
};

/* The option table: every flag, its environment variable, type, field and bounds (for the
 * usage text, and for tests that check every option alike). */
/* T_ADDR: HOST:PORT; T_FILE: a file that must be readable now; T_URL: http(s)://HOST:PORT;
 * T_BOOL: a flag without a value, its variable 1 or 0; T_ONOFF: on or off, flag and
 * variable alike. */
enum option_type { T_STR, T_U64, T_LEVEL, T_ADDR, T_FILE, T_URL, T_BOOL, T_ONOFF };

struct option_def {
    const char *flag, *env, *metavar;
    enum option_type type;
    size_t offset;   /* of its field in struct options */
    const char *def; /* NULL: none (strings) or computed (threads) */
    uint64_t min, max;
    const char *help;
};

const struct option_def *options_table(size_t *n);

/* Returns -1 to go on, or the exit status to leave with (0 after --help or --version, 2
 * after a bad option, which it has reported on stderr). */
int options_parse(struct options *o, int argc, char **argv);

#endif
