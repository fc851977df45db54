/*
 * loadgen: a closed-loop load generator for lease servers, to compare mutexd with Redis and
 * etcd used as lock services on the same machine.
 *
 * One thread, N keep-alive connections, non-blocking sockets and epoll. Each connection runs
 * lease cycles (acquire -> [renew...] -> release) one request at a time: the next request is
 * sent when the previous answer has arrived (closed loop), so the offered load follows the
 * server and the generator spends its time in epoll, not spinning. It shares the machine's
 * cores with the server under test, hence the frugality: requests are fixed-shape and written
 * by hand; of an answer only the status (HTTP status line or RESP type), its length
 * (Content-Length or chunked) and the one JSON field a cycle needs are read.
 *
 * Layout: options; clock, histograms and counters; the three protocols (request writers and
 * reply parsers); the per-connection cycle state machine; the event loop with its timer heap;
 * the report (text or JSON).
 *
 * Targets:
 *   mutexd  POST /v1/resources/{key}/acquire|renew|release; waiting = "wait_ms". The pair
 *           scenario with --multi: POST /v1/acquire|release naming both resources at once.
 *   redis   SET key token NX PX ttl; release and renew are compare-and-delete and
 *           compare-and-PEXPIRE scripts run with EVALSHA (loaded with SCRIPT LOAD at start).
 *           With --limit (a counting semaphore), the key is a sorted set of holders scored by
 *           their deadline, and acquire, renew and release are scripts: drop the holders
 *           whose deadline passed, add one if fewer than the limit remain; update one's
 *           deadline if it is still there; remove one.
 *           Redis has no queue of waiters: a contender that finds the key held sleeps
 *           --spin-ms (default 1 ms) and tries again, as Redis lock clients do.
 *   etcd    v3 JSON gateway: /v3/lease/grant, /v3/lock/lock (blocks: FIFO waiting),
 *           /v3/lease/keepalive (renew), /v3/lock/unlock, /v3/lease/revoke.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lg_hist.h"
#include "lg_wire.h"

#define NS_PER_MS  1000000ull
#define NS_PER_SEC 1000000000ull

/* An answer larger than this is a protocol error here: every answer we expect is < 1 KiB. */
#define IN_CAP  16384
#define OUT_CAP 1024

#define MAX_CONNECTIONS      20000
#define MAX_DURATION_S       3600
#define DRAIN_NS             (3 * NS_PER_SEC)
#define ERROR_BACKOFF_NS     (1 * NS_PER_MS)
#define RECONNECT_BACKOFF_NS (100 * NS_PER_MS)

/* A partitioned group: the map is read again at most once a second (while partitions move,
 * many answers are surprises at once), over a blocking connection of at most MAP_TIMEOUT_S. */
#define MAP_INTERVAL_NS (1 * NS_PER_SEC)
#define MAP_TIMEOUT_S   2
#define MAP_CAP         (256 * 1024)
#define PARTITIONS_MAX  256

/* ---------------------------------------------------------------- options */

enum target { T_MUTEXD, T_REDIS, T_ETCD };
enum scenario { S_DISTINCT, S_RENEW, S_HOTKEY, S_MIXED, S_PING, S_FILL, S_HOLD, S_PAIR };

static const char *const target_names[] = {"mutexd", "redis", "etcd"};
static const char *const scenario_names[] = {"distinct", "renew", "hotkey", "mixed",
                                             "ping",     "fill",  "hold",   "pair"};
#define NSCENARIOS ((int)(sizeof scenario_names / sizeof scenario_names[0]))

struct opts {
    enum target target;
    enum scenario scenario;
    char host[64];
    unsigned port;
    unsigned connections;
    double duration_s, warmup_s;
    uint64_t max_requests;
    unsigned ttl_ms, renews, hold_ms, wait_ms, spin_ms, timeout_ms;
    unsigned hot_keys, holders; /* mixed */
    bool holders_set;
    bool json;
    bool fresh_keys; /* own keys: a never-used name every cycle */
    unsigned limit;  /* > 0: every own-key connection shares one semaphore of this limit */
    bool shared;     /* every own-key connection takes a shared lease of one key */
    bool multi;      /* pair: one request about both resources, not two in a row */
    char prefix[32];
    unsigned group_ports[8]; /* mutexd: the other servers of a group, on the same host */
    unsigned ngroup;
};

static void usage(FILE *f)
{
    fputs("usage: loadgen --target mutexd|redis|etcd --scenario "
          "distinct|renew|hotkey|mixed|ping|fill|hold|pair "
          "[OPTION]...\n"
          "\n"
          "Closed-loop load on N keep-alive connections against one lease server on loopback.\n"
          "A cycle is acquire -> release, or acquire -> renew x N -> release.\n"
          "\n"
          "  --target T          mutexd (HTTP API), redis (RESP), etcd (v3 JSON gateway)\n"
          "  --scenario S        distinct: each connection cycles on its own key\n"
          "                      renew:    acquire, renew x --renews, release\n"
          "                      hotkey:   every connection acquires the same key, waiting\n"
          "                                (mutexd wait_ms, etcd lock, redis spin), holds it\n"
          "                                --hold-ms, releases\n"
          "                      mixed:    --holders connections hold their own key and renew\n"
          "                                at a third of the TTL (--renews times, then release);\n"
          "                                the others contend on --hot-keys keys as in hotkey\n"
          "                      ping:     no lease: GET /healthz (mutexd), PING (redis), GET\n"
          "                                /health (etcd); the ceiling of loadgen and transport\n"
          "                      fill:     acquire a never-used key and keep the lease (no\n"
          "                                release): fills the server with held leases, up\n"
          "                                to --max-requests of them\n"
          "                      hold:     every connection holds a lease and renews it at\n"
          "                                a third of the TTL (--renews times, then release):\n"
          "                                background holders, with --limit or --shared many\n"
          "                                of them on one resource\n"
          "                      pair:     each connection cycles on its own two keys:\n"
          "                                acquire A, acquire B, release A, release B, or\n"
          "                                with --multi one acquire and one release naming\n"
          "                                both (mutexd only)\n"
          "  --multi             pair: POST /v1/acquire and /v1/release with both resources\n"
          "                      in one request each (mutexd only)\n"
          "  --host ADDR         loopback address only (127.0.0.0/8, ::1, localhost);\n"
          "                      default 127.0.0.1\n"
          "  --port N            default 8080 (mutexd), 6379 (redis), 2379 (etcd)\n"
          "  --connections N     default 16\n"
          "  --duration S        measured seconds, default 10\n"
          "  --warmup S          unmeasured seconds first, default 1\n"
          "  --max-requests N    stop measuring after N answers, default 10000000\n"
          "  --ttl-ms MS         lease TTL, default 10000 (etcd: rounded up to seconds)\n"
          "  --renews N          renewals per cycle (renew, mixed holders), default 3\n"
          "  --hold-ms MS        hotkey/mixed contenders: how long a lease is held, default 0\n"
          "  --wait-ms MS        mutexd wait_ms of a contended acquire, default 5000; 0: spin\n"
          "  --limit N           own-key connections (distinct, renew, hold) share one key,\n"
          "                      a counting semaphore of limit N (mutexd \"limit\", Redis a\n"
          "                      sorted set driven by Lua scripts)\n"
          "  --shared            own-key connections share one key with shared leases\n"
          "                      (mutexd only)\n"
          "                      as Redis clients do (etcd: how long the client gives a lock\n"
          "                      before it times out)\n"
          "  --spin-ms MS        sleep before retrying a held key (redis; mutexd with\n"
          "                      --wait-ms 0), default 1\n"
          "  --timeout-ms MS     per-request timeout beyond any wait, default 5000\n"
          "  --hot-keys N        mixed: keys the contenders share, default 4\n"
          "  --holders N         mixed: connections that hold and renew, default 3/4 of them\n"
          "  --fresh-keys        distinct, renew, mixed holders: a never-used key every cycle\n"
          "                      (default: each connection reuses its own key)\n"
          "  --group-ports P,P   mutexd: the other servers of a group on the same host. Each\n"
          "                      connection starts on --port; when an answer names the\n"
          "                      active (Mutexd-Served-By) on one of these ports or --port,\n"
          "                      it reconnects there, as the clients do. A partitioned\n"
          "                      group (--partitions N): each resource's requests go to\n"
          "                      its partition's owner (GET /v1/servers, read at start\n"
          "                      and after a surprise), the connections spread over the\n"
          "                      servers and own keys picked in their server's partitions\n"
          "  --key-prefix P      default lg (a run id is appended: runs never share keys)\n"
          "  --json              print the results as one JSON object\n"
          "  --help\n",
          f);
}

static bool parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_seconds(const char *s, double *out)
{
    char *end;
    if (!s || !*s)
        return false;
    double v = strtod(s, &end);
    if (*end || !(v >= 0) || v > MAX_DURATION_S)
        return false;
    *out = v;
    return true;
}

/* Loopback only: this tool must never be pointed at another machine. */
static bool host_is_loopback(const char *host, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        *len = sizeof *in4;
        return (ntohl(in4->sin_addr.s_addr) >> 24) == 127;
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        *len = sizeof *in6;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return false;
}

/* Returns 0, or 2 with a message for a bad command line. */
static int parse_opts(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){
        .target = T_MUTEXD,
        .scenario = S_DISTINCT,
        .host = "127.0.0.1",
        .connections = 16,
        .duration_s = 10,
        .warmup_s = 1,
        .max_requests = 10000000,
        .ttl_ms = 10000,
        .renews = 3,
        .wait_ms = 5000,
        .spin_ms = 1,
        .timeout_ms = 5000,
        .hot_keys = 4,
        .prefix = "lg",
    };
    bool have_target = false, have_scenario = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n = 0;
        bool ok = true, takes = true;
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
            takes = false;
        } else if (strcmp(a, "--fresh-keys") == 0) {
            o->fresh_keys = true;
            takes = false;
        } else if (strcmp(a, "--shared") == 0) {
            o->shared = true;
            takes = false;
        } else if (strcmp(a, "--multi") == 0) {
            o->multi = true;
            takes = false;
        } else if (strcmp(a, "--limit") == 0) {
            ok = parse_uint(v, 65536, &n) && n > 0;
            o->limit = (unsigned)n;
        } else if (strcmp(a, "--target") == 0) {
            ok = false;
            for (int t = 0; v && t < 3; t++)
                if (strcmp(v, target_names[t]) == 0) {
                    o->target = (enum target)t;
                    ok = have_target = true;
                }
        } else if (strcmp(a, "--scenario") == 0) {
            ok = false;
            for (int s = 0; v && s < NSCENARIOS; s++)
                if (strcmp(v, scenario_names[s]) == 0) {
                    o->scenario = (enum scenario)s;
                    ok = have_scenario = true;
                }
        } else if (strcmp(a, "--group-ports") == 0) {
            ok = v != NULL;
            for (const char *p = v; ok && *p;) {
                char *e;
                unsigned long port = strtoul(p, &e, 10);
                ok = e != p && port > 0 && port < 65536 && o->ngroup < 8 && (*e == ',' || !*e);
                if (ok)
                    o->group_ports[o->ngroup++] = (unsigned)port;
                p = *e == ',' ? e + 1 : e;
            }
        } else if (strcmp(a, "--host") == 0) {
            ok = v && strlen(v) < sizeof o->host;
            if (ok)
                strcpy(o->host, v);
        } else if (strcmp(a, "--key-prefix") == 0) {
            ok = v && *v && strlen(v) < sizeof o->prefix &&
                 strspn(v, "abcdefghijklmnopqrstuvwxyz"
                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789-_.") == strlen(v);
            if (ok)
                strcpy(o->prefix, v);
        } else if (strcmp(a, "--duration") == 0) {
            ok = parse_seconds(v, &o->duration_s) && o->duration_s > 0;
        } else if (strcmp(a, "--warmup") == 0) {
            ok = parse_seconds(v, &o->warmup_s);
        } else if (strcmp(a, "--port") == 0) {
            ok = parse_uint(v, 65535, &n) && n > 0;
            o->port = (unsigned)n;
        } else if (strcmp(a, "--connections") == 0) {
            ok = parse_uint(v, MAX_CONNECTIONS, &n) && n > 0;
            o->connections = (unsigned)n;
        } else if (strcmp(a, "--max-requests") == 0) {
            ok = parse_uint(v, UINT64_MAX / 2, &n) && n > 0;
            o->max_requests = n;
        } else if (strcmp(a, "--ttl-ms") == 0) {
            ok = parse_uint(v, 86400000, &n) && n > 0;
            o->ttl_ms = (unsigned)n;
        } else if (strcmp(a, "--renews") == 0) {
            ok = parse_uint(v, 1000000, &n);
            o->renews = (unsigned)n;
        } else if (strcmp(a, "--hold-ms") == 0) {
            ok = parse_uint(v, 3600000, &n);
            o->hold_ms = (unsigned)n;
        } else if (strcmp(a, "--wait-ms") == 0) {
            ok = parse_uint(v, 3600000, &n);
            o->wait_ms = (unsigned)n;
        } else if (strcmp(a, "--spin-ms") == 0) {
            ok = parse_uint(v, 60000, &n);
            o->spin_ms = (unsigned)n;
        } else if (strcmp(a, "--timeout-ms") == 0) {
            ok = parse_uint(v, 3600000, &n) && n > 0;
            o->timeout_ms = (unsigned)n;
        } else if (strcmp(a, "--hot-keys") == 0) {
            ok = parse_uint(v, 100000, &n) && n > 0;
            o->hot_keys = (unsigned)n;
        } else if (strcmp(a, "--holders") == 0) {
            ok = parse_uint(v, MAX_CONNECTIONS, &n);
            o->holders = (unsigned)n;
            o->holders_set = true;
        } else {
            fprintf(stderr, "loadgen: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "loadgen: bad or missing value for %s\n", a);
            return 2;
        }
        if (takes)
            i++;
    }
    if (!have_target || !have_scenario) {
        fprintf(stderr, "loadgen: --target and --scenario are required (see --help)\n");
        return 2;
    }
    if (o->scenario == S_FILL)
        o->fresh_keys = true;
    if ((o->scenario == S_PAIR || o->multi) && (o->target != T_MUTEXD || o->scenario != S_PAIR)) {
        fprintf(stderr, "loadgen: --scenario pair and --multi (with pair only) are for mutexd "
                        "only\n");
        return 2;
    }
    if ((o->limit || o->shared) &&
        (o->fresh_keys || o->scenario == S_FILL || o->scenario == S_PAIR ||
         (o->limit && o->shared) || (o->shared && o->target != T_MUTEXD) ||
         (o->limit && o->target == T_ETCD))) {
        fprintf(stderr, "loadgen: --limit or --shared (not both) with distinct, renew, hold "
                        "and without --fresh-keys; --shared for mutexd, --limit for mutexd "
                        "and redis\n");
        return 2;
    }
    if (!o->port)
        o->port = o->target == T_MUTEXD ? 8080 : o->target == T_REDIS ? 6379 : 2379;
    if (o->scenario == S_MIXED) {
        if (!o->holders_set)
            o->holders = o->connections * 3 / 4;
        if (o->holders >= o->connections) {
            fprintf(stderr, "loadgen: mixed needs --holders below --connections\n");
            return 2;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- clock */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- state */

enum op { OP_GRANT, OP_ACQUIRE, OP_RENEW, OP_RELEASE, OP_REVOKE, OP_PING, OP_COUNT };
static const char *const op_names[] = {"grant", "acquire", "renew", "release", "revoke", "ping"};

/* How one answer came out. */
enum outcome {
    OUT_OK,
    OUT_BUSY, /* acquire: held by another lease (after waiting, if we waited) */
    OUT_LOST, /* renew/release: the lease is no longer ours */
    OUT_FAIL, /* any other error answer: non-2xx, RESP error */
};

enum err {
    E_NON2XX,   /* error answers other than the two below */
    E_CONFLICT, /* 409 lease_held where nothing should hold, lease_lost, compare-and-x = 0 */
    E_TIMEOUT,  /* no answer within the client's timeout */
    E_WAIT,     /* a waiting acquire ran out of wait_ms (mutexd 409 after waiting) */
    E_IO,       /* connect failures, resets, closes, unparseable answers */
    E_COUNT,
};
static const char *const err_names[] = {"non2xx", "conflicts", "timeouts", "wait_expired", "io"};

/* What a connection's timer does when it fires. */
enum timer_kind { TM_NONE, TM_START, TM_RENEW, TM_RELEASE, TM_SPIN, TM_RECONNECT };

enum role { R_OWN_KEY, R_CONTENDER, R_HOLDER };

struct conn {
    unsigned id;
    int fd;
    unsigned port; /* where it connects: --port, or the active a server named */
    enum role role;
    bool connecting, in_flight, want_out, done, failed;
    enum op op;           /* the request in flight */
    uint64_t sent_ns;     /* when it was written */
    uint64_t deadline_ns; /* when it times out */
    uint64_t cycle_ns;    /* when this cycle's first request was written */
    unsigned renews_left;
    unsigned gen; /* own-key generation: bumped after a failure that may leave a lease behind */
    uint64_t seq; /* cycles started, for Redis tokens */
    char key[96];
    char lease[64];     /* mutexd lease_id, Redis token, etcd lease ID */
    char key_b[96];     /* pair: the second resource */
    char lease_b[64];   /* pair, two singles: the second resource's lease_id */
    unsigned part;      /* pair, two singles: 0 while the request is about key, 1 key_b */
    char lock_key[256]; /* etcd: the lock's key, base64 as returned */
    /* timer */
    enum timer_kind tk;
    uint64_t wake_ns;
    int heap_pos; /* -1: not in the heap */
    /* I/O */
    size_t out_len, out_off, in_len;
    char out[OUT_CAP];
    char in[IN_CAP];
};

struct lg {
    struct opts o;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char host_hdr[96];
    char run_id[48];
    char sha_release[48], sha_renew[48]; /* Redis scripts */
    char sha_sem_acquire[48], sha_sem_renew[48], sha_sem_release[48];
    int ep;
    struct conn *conns;
    struct conn **heap;
    unsigned heap_len;
    unsigned active;
    /* measurement window */
    uint64_t t_start, win_start, win_end, drain_end;
    bool draining, stop_now;
    struct rusage ru_start, ru_end;
    uint64_t cpu_wall_start, cpu_wall_end;
    bool cpu_started, cpu_ended;
    /* results */
    uint64_t requests, cycles, holder_cycles, spins;
    uint64_t moves;     /* connections that moved to the active a server named, or to an owner */
    uint64_t forwarded; /* answers served by another server than the one asked */
    /* mutexd, a partitioned group: the partition count (0 or 1: none) and each partition's
     * owner, by its port (0: none, or not one of --port and --group-ports). */
    unsigned parts;
    unsigned owner_port[PARTITIONS_MAX];
    uint64_t map_read_ns;
    bool map_due; /* a surprise asked for a reading of the map */
    uint64_t errors[E_COUNT];
    struct hist req_all, req_op[OP_COUNT], cycle, to_lease;
    char scratch[IN_CAP]; /* de-chunked bodies */
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static bool recording(const struct lg *g, uint64_t now)
{
    return !g->draining && now >= g->win_start && now < g->win_end;
}

static void count_error(struct lg *g, enum err e, uint64_t now)
{
    if (recording(g, now))
        g->errors[e]++;
}

/* ---------------------------------------------------------------- requests per target */

/* Contenders wait for a held key: mutexd queues them (wait_ms), etcd's lock blocks, and Redis
 * clients spin. */
static bool waits(const struct conn *c)
{
    return c->role == R_CONTENDER;
}

/* The pair scenario without --multi: each of its requests is about one of the two keys. */
static bool two_singles(const struct lg *g)
{
    return g->o.scenario == S_PAIR && !g->o.multi;
}

/* The resource the request in hand is about, and the lease held on it. */
static const char *cur_key(const struct conn *c)
{
    return c->part ? c->key_b : c->key;
}

static char *cur_lease(struct conn *c)
{
    return c->part ? c->lease_b : c->lease;
}

/* Writes the request for op into c->out. */
static int write_request(struct lg *g, struct conn *c, enum op op)
{
    char body[512], path[256];
    const struct opts *o = &g->o;
    if (op == OP_PING) {
        if (o->target == T_REDIS) {
            const char *argv[] = {"PING"};
            return wire_resp_cmd(c->out, sizeof c->out, 1, argv);
        }
        int n = snprintf(c->out, sizeof c->out, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n",
                         o->target == T_MUTEXD ? "/healthz" : "/health", g->host_hdr);
        return n > 0 && (size_t)n < sizeof c->out ? n : -1;
    }
    switch (o->target) {
    case T_MUTEXD: {
        static const char *const action[] = {"", "acquire", "renew", "release", ""};
        if (o->multi) {
            /* Both resources in one request: one lease_id for the set. */
            if (op == OP_ACQUIRE)
                snprintf(body, sizeof body,
                         "{\"resources\":[\"%s\",\"%s\"],\"owner\":\"%s-%u\",\"ttl_ms\":%u}",
                         c->key, c->key_b, g->run_id, c->id, o->ttl_ms);
            else
                snprintf(body, sizeof body, "{\"resources\":[\"%s\",\"%s\"],\"lease_id\":\"%s\"}",
                         c->key, c->key_b, c->lease);
            snprintf(path, sizeof path, "/v1/%s", action[op]);
            return wire_http_post(c->out, sizeof c->out, g->host_hdr, path, body);
        }
        if (op == OP_ACQUIRE) {
            char kind[32] = "";
            if (o->limit && c->role != R_CONTENDER)
                snprintf(kind, sizeof kind, ",\"limit\":%u", o->limit);
            else if (o->shared && c->role != R_CONTENDER)
                snprintf(kind, sizeof kind, ",\"shared\":true");
            if (waits(c))
                snprintf(body, sizeof body, "{\"owner\":\"%s-%u\",\"ttl_ms\":%u,\"wait_ms\":%u}",
                         g->run_id, c->id, o->ttl_ms, o->wait_ms);
            else
                snprintf(body, sizeof body, "{\"owner\":\"%s-%u\",\"ttl_ms\":%u%s}", g->run_id,
                         c->id, o->ttl_ms, kind);
        } else {
            snprintf(body, sizeof body, "{\"lease_id\":\"%s\"}", cur_lease(c));
        }
        snprintf(path, sizeof path, "/v1/resources/%s/%s", cur_key(c), action[op]);
        return wire_http_post(c->out, sizeof c->out, g->host_hdr, path, body);
    }
    case T_ETCD: {
        char name[160];
        switch (op) {
        case OP_GRANT:
            snprintf(body, sizeof body, "{\"TTL\":%u}", (o->ttl_ms + 999) / 1000);
            return wire_http_post(c->out, sizeof c->out, g->host_hdr, "/v3/lease/grant", body);
        case OP_ACQUIRE:
            wire_base64(c->key, strlen(c->key), name, sizeof name);
            snprintf(body, sizeof body, "{\"name\":\"%s\",\"lease\":\"%s\"}", name, c->lease);
            return wire_http_post(c->out, sizeof c->out, g->host_hdr, "/v3/lock/lock", body);
        case OP_RENEW:
            snprintf(body, sizeof body, "{\"ID\":\"%s\"}", c->lease);
            return wire_http_post(c->out, sizeof c->out, g->host_hdr, "/v3/lease/keepalive", body);
        case OP_RELEASE:
            snprintf(body, sizeof body, "{\"key\":\"%s\"}", c->lock_key);
            return wire_http_post(c->out, sizeof c->out, g->host_hdr, "/v3/lock/unlock", body);
        case OP_REVOKE:
            snprintf(body, sizeof body, "{\"ID\":\"%s\"}", c->lease);
            return wire_http_post(c->out, sizeof c->out, g->host_hdr, "/v3/lease/revoke", body);
        default:
            return -1;
        }
    }
    case T_REDIS: {
        char ttl[24], limit[24];
        snprintf(ttl, sizeof ttl, "%u", o->ttl_ms);
        snprintf(limit, sizeof limit, "%u", o->limit);
        if (o->limit && c->role != R_CONTENDER) {
            switch (op) {
            case OP_ACQUIRE: {
                const char *argv[] = {"EVALSHA", g->sha_sem_acquire, "1", c->key, c->lease, ttl,
                                      limit};
                return wire_resp_cmd(c->out, sizeof c->out, 7, argv);
            }
            case OP_RENEW: {
                const char *argv[] = {"EVALSHA", g->sha_sem_renew, "1", c->key, c->lease, ttl};
                return wire_resp_cmd(c->out, sizeof c->out, 6, argv);
            }
            case OP_RELEASE: {
                const char *argv[] = {"EVALSHA", g->sha_sem_release, "1", c->key, c->lease};
                return wire_resp_cmd(c->out, sizeof c->out, 5, argv);
            }
            default:
                return -1;
            }
        }
        switch (op) {
        case OP_ACQUIRE: {
            const char *argv[] = {"SET", c->key, c->lease, "NX", "PX", ttl};
            return wire_resp_cmd(c->out, sizeof c->out, 6, argv);
        }
        case OP_RENEW: {
            const char *argv[] = {"EVALSHA", g->sha_renew, "1", c->key, c->lease, ttl};
            return wire_resp_cmd(c->out, sizeof c->out, 6, argv);
        }
        case OP_RELEASE: {
            const char *argv[] = {"EVALSHA", g->sha_release, "1", c->key, c->lease};
            return wire_resp_cmd(c->out, sizeof c->out, 5, argv);
        }
        default:
            return -1;
        }
    }
    }
    return -1;
}

/*
 * Parses one answer from c->in. Returns bytes consumed, WIRE_MORE or WIRE_BAD; *out says how it
 * came out, and the fields the next request needs are copied into c.
 */
static long read_answer(struct lg *g, struct conn *c, enum outcome *out, bool *close_after)
{
    *close_after = false;
    if (g->o.target == T_REDIS) {
        struct wire_resp r;
        long used = wire_resp_parse(c->in, c->in_len, &r);
        if (used < 0)
            return used;
        if (r.type == '-')
            *out = OUT_FAIL;
        else if (c->op == OP_PING)
            *out = r.type == '+' ? OUT_OK : OUT_FAIL;
        else if (c->op == OP_ACQUIRE && g->o.limit)
            *out = r.type != ':' ? OUT_FAIL : r.integer == 1 ? OUT_OK : OUT_BUSY;
        else if (c->op == OP_ACQUIRE)
            *out = r.type == '+' ? OUT_OK : r.nil ? OUT_BUSY : OUT_FAIL;
        else
            *out = r.type != ':' ? OUT_FAIL : r.integer == 1 ? OUT_OK : OUT_LOST;
        return used;
    }
    struct wire_http r;
    long used = wire_http_parse(c->in, c->in_len, g->scratch, sizeof g->scratch, &r);
    if (used < 0)
        return used;
    *close_after = r.close;
    bool ok = r.status >= 200 && r.status < 300;
    if (g->o.target == T_MUTEXD && r.served_by_port && r.served_by_port != c->port &&
        recording(g, now_ns()))
        g->forwarded++;
    if (g->o.target == T_MUTEXD && g->parts > 1 && r.served_by_port &&
        r.served_by_port != c->port) {
        g->map_due = true; /* the partition moved: the next requests follow the map */
    } else if (g->o.target == T_MUTEXD && r.served_by_port && r.served_by_port != c->port) {
        bool ours = r.served_by_port == g->o.port;
        for (unsigned i = 0; i < g->o.ngroup; i++)
            ours |= r.served_by_port == g->o.group_ports[i];
        if (ours) {
            c->port = r.served_by_port; /* reconnect there after this answer */
            *close_after = true;
            g->moves++;
        }
    }
    if (g->o.target == T_MUTEXD && r.status == 503 && g->parts > 1)
        g->map_due = true;
    if (g->o.target == T_MUTEXD) {
        if (ok) {
            *out = OUT_OK;
            if (c->op == OP_ACQUIRE &&
                !wire_json_copy(r.body, r.body_len, "lease_id", cur_lease(c), sizeof c->lease))
                *out = OUT_FAIL;
        } else if (r.status == 409 && wire_json_is(r.body, r.body_len, "code", "lease_held")) {
            *out = OUT_BUSY;
        } else if (r.status == 409 && wire_json_is(r.body, r.body_len, "code", "lease_lost")) {
            *out = OUT_LOST;
        } else {
            *out = OUT_FAIL;
        }
        return used;
    }
    /* etcd: gRPC errors come as non-2xx with {"error","code"}. */
    if (!ok) {
        *out = OUT_FAIL;
        return used;
    }
    *out = OUT_OK;
    switch (c->op) {
    case OP_GRANT:
        if (!wire_json_copy(r.body, r.body_len, "ID", c->lease, sizeof c->lease))
            *out = OUT_FAIL;
        break;
    case OP_ACQUIRE:
        if (!wire_json_copy(r.body, r.body_len, "key", c->lock_key, sizeof c->lock_key))
            *out = OUT_FAIL;
        break;
    case OP_RENEW: {
        /* A keepalive of a lease that is gone answers 200 without a TTL (zero is left out). */
        const char *v;
        size_t vl;
        if (wire_json_field(r.body, r.body_len, "error", &v, &vl))
            *out = OUT_FAIL;
        else if (!wire_json_field(r.body, r.body_len, "TTL", &v, &vl) || atoi(v) <= 0)
            *out = OUT_LOST;
        break;
    }
    default:
        break;
    }
    return used;
}

/* ---------------------------------------------------------------- timer heap */

static bool heap_less(const struct conn *a, const struct conn *b)
{
    return a->wake_ns < b->wake_ns;
}

static void heap_swap(struct lg *g, unsigned i, unsigned j)
{
    struct conn *t = g->heap[i];
    g->heap[i] = g->heap[j];
    g->heap[j] = t;
    g->heap[i]->heap_pos = (int)i;
    g->heap[j]->heap_pos = (int)j;
}

static void heap_up(struct lg *g, unsigned i)
{
    while (i > 0 && heap_less(g->heap[i], g->heap[(i - 1) / 2])) {
        heap_swap(g, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(struct lg *g, unsigned i)
{
    for (;;) {
        unsigned l = 2 * i + 1, r = l + 1, m = i;
        if (l < g->heap_len && heap_less(g->heap[l], g->heap[m]))
            m = l;
        if (r < g->heap_len && heap_less(g->heap[r], g->heap[m]))
            m = r;
        if (m == i)
            return;
        heap_swap(g, i, m);
        i = m;
    }
}

static void timer_cancel(struct lg *g, struct conn *c)
{
    if (c->heap_pos < 0)
        return;
    unsigned i = (unsigned)c->heap_pos;
    c->heap_pos = -1;
    c->tk = TM_NONE;
    g->heap_len--;
    if (i == g->heap_len)
        return;
    g->heap[i] = g->heap[g->heap_len];
    g->heap[i]->heap_pos = (int)i;
    heap_up(g, i);
    heap_down(g, (unsigned)g->heap[i]->heap_pos);
}

static void timer_set(struct lg *g, struct conn *c, enum timer_kind tk, uint64_t wake_ns)
{
    timer_cancel(g, c);
    c->tk = tk;
    c->wake_ns = wake_ns;
    c->heap_pos = (int)g->heap_len;
    g->heap[g->heap_len++] = c;
    heap_up(g, (unsigned)c->heap_pos);
}

/* ---------------------------------------------------------------- the partition map */

/* Whether port is one of the group's: --port or one of --group-ports. */
static bool group_port(const struct lg *g, unsigned port)
{
    bool ours = port == g->o.port;
    for (unsigned i = 0; i < g->o.ngroup; i++)
        ours |= port == g->o.group_ports[i];
    return port && ours;
}

/* GET /v1/servers from the server on port, over a short blocking connection: the body, NUL-
 * terminated, in out (cap bytes); false when no whole 200 came. */
static bool get_servers(struct lg *g, unsigned port, char *out, size_t cap)
{
    bool ok = false;
    int fd = socket(g->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct timeval tv = {.tv_sec = MAP_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_storage to = g->addr;
    if (to.ss_family == AF_INET)
        ((struct sockaddr_in *)&to)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&to)->sin6_port = htons((uint16_t)port);
    char req[256];
    int n =
        snprintf(req, sizeof req,
                 "GET /v1/servers HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", g->host_hdr);
    char *in = malloc(MAP_CAP), *scratch = malloc(MAP_CAP);
    if (!in || !scratch || connect(fd, (struct sockaddr *)&to, g->addr_len) != 0 ||
        send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        goto out;
    size_t len = 0;
    for (;;) {
        ssize_t r = recv(fd, in + len, MAP_CAP - len, 0);
        if (r <= 0)
            goto out;
        len += (size_t)r;
        struct wire_http h;
        long used = wire_http_parse(in, len, scratch, MAP_CAP, &h);
        if (used == WIRE_MORE && len < MAP_CAP)
            continue;
        if (used < 0 || h.status != 200 || h.body_len >= cap)
            goto out;
        memcpy(out, h.body, h.body_len);
        out[h.body_len] = 0;
        ok = true;
        goto out;
    }
out:
    free(in);
    free(scratch);
    close(fd);
    return ok;
}

/*
 * Reads the partition map from the first of the group's servers that answers: its
 * "partitions" {"count", "owners": [{"partition", "url", ...}]}; none, or a count of 1, is a
 * group that is not partitioned. Owners are kept by port (the servers are all on --host);
 * one on a port that is not the group's is left out, and its requests go where they would.
 */
static void read_map(struct lg *g)
{
    g->map_read_ns = now_ns();
    g->map_due = false;
    char *body = malloc(MAP_CAP);
    if (!body)
        return;
    bool got = false;
    for (unsigned i = 0; i <= g->o.ngroup && !got; i++)
        got = get_servers(g, i == 0 ? g->o.port : g->o.group_ports[i - 1], body, MAP_CAP);
    if (!got) {
        g->map_due = true;
        free(body);
        return;
    }
    const char *parts = strstr(body, "\"partitions\":{");
    const char *v;
    size_t vl;
    unsigned count = 1;
    if (parts && wire_json_field(parts, strlen(parts), "count", &v, &vl))
        count = (unsigned)strtoul(v, NULL, 10);
    const char *owners = parts ? strstr(parts, "\"owners\":[") : NULL;
    if (count < 2 || count > PARTITIONS_MAX || !owners) {
        g->parts = count >= 2 ? g->parts : 1;
        free(body);
        return;
    }
    unsigned ports[PARTITIONS_MAX] = {0};
    const char *end = strchr(owners, ']'); /* owner objects hold no array */
    for (const char *o = strchr(owners, '{'); o && end && o < end; o = strchr(o + 1, '{')) {
        const char *close = strchr(o, '}');
        if (!close)
            break;
        size_t olen = (size_t)(close - o + 1);
        if (!wire_json_field(o, olen, "partition", &v, &vl))
            continue;
        unsigned p = (unsigned)strtoul(v, NULL, 10);
        if (p >= count || !wire_json_field(o, olen, "url", &v, &vl))
            continue;
        unsigned port = 0;
        for (const char *q = v + vl; q > v; q--) {
            if (q[-1] == ':') {
                port = (unsigned)strtoul(q, NULL, 10);
                break;
            }
        }
        ports[p] = group_port(g, port) ? port : 0;
    }
    memcpy(g->owner_port, ports, sizeof ports);
    g->parts = count;
    free(body);
}

/* The port of the owner of key's partition, or 0 when the map names none. */
static unsigned owner_of(const struct lg *g, const char *key)
{
    if (g->parts < 2)
        return 0;
    return g->owner_port[wire_partition_of(key, g->parts)];
}

/* ---------------------------------------------------------------- connections */

static void conn_close(struct lg *g, struct conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->in_flight = c->want_out = c->connecting = false;
    c->in_len = c->out_len = c->out_off = 0;
}

/* The connection stops for good (end of run). */
static void conn_finish(struct lg *g, struct conn *c)
{
    if (c->done)
        return;
    timer_cancel(g, c);
    conn_close(g, c);
    c->done = true;
    g->active--;
}

static void set_events(struct lg *g, struct conn *c, bool want_out)
{
    if (c->want_out == want_out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(g->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = want_out;
}

static int conn_open(struct lg *g, struct conn *c)
{
    int fd = socket(g->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_storage to = g->addr;
    if (to.ss_family == AF_INET)
        ((struct sockaddr_in *)&to)->sin_port = htons((uint16_t)c->port);
    else
        ((struct sockaddr_in6 *)&to)->sin6_port = htons((uint16_t)c->port);
    if (connect(fd, (struct sockaddr *)&to, g->addr_len) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->connecting = true;
    c->want_out = true;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

static void start_cycle(struct lg *g, struct conn *c, uint64_t now);
static void on_failure(struct lg *g, struct conn *c, uint64_t now);

/* A transport failure: the connection is dropped and a new one made after a pause. */
static void conn_broken(struct lg *g, struct conn *c, enum err e, uint64_t now)
{
    count_error(g, e, now);
    conn_close(g, c);
    c->gen++;
    if (g->parts > 1)
        g->map_due = true; /* its server may have left, its partitions moved */
    if (g->draining) {
        conn_finish(g, c);
        return;
    }
    timer_set(g, c, TM_RECONNECT, now + RECONNECT_BACKOFF_NS);
}

static void flush_out(struct lg *g, struct conn *c, uint64_t now)
{
    if (c->connecting)
        return; /* sent when the connection is up */
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w > 0) {
            c->out_off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            set_events(g, c, true);
            return;
        } else {
            conn_broken(g, c, E_IO, now);
            return;
        }
    }
    set_events(g, c, false);
}

static void send_op(struct lg *g, struct conn *c, enum op op, uint64_t now)
{
    /* A partitioned group: the request goes to the owner of its resource's partition, so
     * that no server forwards it; the connection moves there first. */
    unsigned owner = op != OP_PING && g->o.target == T_MUTEXD ? owner_of(g, cur_key(c)) : 0;
    if (owner && owner != c->port) {
        conn_close(g, c);
        c->port = owner;
        g->moves++;
        if (conn_open(g, c) != 0) {
            conn_broken(g, c, E_IO, now);
            return;
        }
    }
    int n = write_request(g, c, op);
    if (n < 0) {
        fprintf(stderr, "loadgen: request too large\n");
        exit(1);
    }
    c->op = op;
    c->out_len = (size_t)n;
    c->out_off = 0;
    c->in_flight = true;
    c->sent_ns = now;
    uint64_t wait = 0;
    if (op == OP_ACQUIRE && waits(c) && g->o.target != T_REDIS)
        wait = (uint64_t)g->o.wait_ms * NS_PER_MS;
    c->deadline_ns = now + wait + (uint64_t)g->o.timeout_ms * NS_PER_MS;
    flush_out(g, c, now);
}

/* ---------------------------------------------------------------- the cycle */

static void set_key(struct lg *g, struct conn *c)
{
    switch (c->role) {
    case R_OWN_KEY:
    case R_HOLDER:
        if (g->o.limit || g->o.shared)
            snprintf(c->key, sizeof c->key, "%s/sem", g->run_id); /* one key for all */
        else
            snprintf(c->key, sizeof c->key, "%s/k%u.%u", g->run_id, c->id, c->gen);
        /* A partitioned group: a name in a partition of the connection's own server, so that
         * the connections stay spread over the servers. A server that owns nothing (it
         * left) keeps the first name, and the connection moves to that name's owner. */
        for (unsigned j = 1; !g->o.limit && !g->o.shared && g->parts > 1 && j < 64 &&
                             owner_of(g, c->key) != c->port;
             j++)
            snprintf(c->key, sizeof c->key, "%s/k%u.%u.%u", g->run_id, c->id, c->gen, j);
        if (g->o.scenario == S_PAIR) {
            /* Two names of that one partition: the connection's own name as their hash tag
             * (a set must not span partitions). A server of one partition needs none. */
            snprintf(c->key_b, sizeof c->key_b, "%s", c->key); /* the name, for a moment */
            if (g->parts > 1)
                snprintf(c->key, sizeof c->key, "{%.80s}/a", c->key_b);
            else
                snprintf(c->key, sizeof c->key, "%.80s/a", c->key_b);
            memcpy(c->key_b, c->key, sizeof c->key_b);
            c->key_b[strlen(c->key_b) - 1] = 'b';
        }
        break;
    case R_CONTENDER:
        if (g->o.scenario == S_HOTKEY)
            snprintf(c->key, sizeof c->key, "%s/hot", g->run_id);
        else
            snprintf(c->key, sizeof c->key, "%s/hot%u", g->run_id, c->id % g->o.hot_keys);
        break;
    }
}

static void start_cycle(struct lg *g, struct conn *c, uint64_t now)
{
    if (g->draining) {
        conn_finish(g, c);
        return;
    }
    if (g->o.fresh_keys && c->role != R_CONTENDER && c->seq > 0)
        c->gen++;
    set_key(g, c);
    c->failed = false;
    c->seq++;
    c->cycle_ns = now;
    c->renews_left = g->o.scenario == S_RENEW || c->role == R_HOLDER ? g->o.renews : 0;
    c->lock_key[0] = 0;
    c->lease[0] = 0;
    c->lease_b[0] = 0;
    c->part = 0;
    if (g->o.target == T_REDIS)
        snprintf(c->lease, sizeof c->lease, "%s-%u-%" PRIu64, g->run_id, c->id, c->seq);
    if (g->o.scenario == S_PING)
        send_op(g, c, OP_PING, now);
    else
        send_op(g, c, g->o.target == T_ETCD ? OP_GRANT : OP_ACQUIRE, now);
}

static uint64_t renew_every_ns(const struct lg *g)
{
    return (uint64_t)g->o.ttl_ms * NS_PER_MS / 3;
}

static void cycle_done(struct lg *g, struct conn *c, uint64_t now);

/* The lease is held: renew, hold, or release (fill: keep it). */
static void holding(struct lg *g, struct conn *c, uint64_t now)
{
    c->part = 0; /* a pair releases its first resource first */
    if (g->o.scenario == S_FILL) {
        cycle_done(g, c, now); /* the lease stays held */
    } else if (g->draining) {
        send_op(g, c, OP_RELEASE, now);
    } else if (c->renews_left > 0) {
        if (c->role == R_HOLDER)
            timer_set(g, c, TM_RENEW, now + renew_every_ns(g));
        else
            send_op(g, c, OP_RENEW, now);
    } else if (c->role == R_CONTENDER && g->o.hold_ms > 0) {
        timer_set(g, c, TM_RELEASE, now + (uint64_t)g->o.hold_ms * NS_PER_MS);
    } else {
        send_op(g, c, OP_RELEASE, now);
    }
}

static void cycle_done(struct lg *g, struct conn *c, uint64_t now)
{
    if (!c->failed && recording(g, now)) {
        if (c->role == R_HOLDER) {
            g->holder_cycles++;
        } else {
            g->cycles++;
            hist_add(&g->cycle, now - c->cycle_ns);
        }
    }
    if (c->failed)
        timer_set(g, c, TM_START, now + ERROR_BACKOFF_NS);
    else
        start_cycle(g, c, now);
}

/*
 * A cycle went wrong in an answer (not in the transport). What we may still hold is given
 * back where the protocol allows it (etcd: revoke the lease, which also drops its lock key);
 * own keys move to a new name so a lease left behind cannot block the next cycle.
 */
static void on_failure(struct lg *g, struct conn *c, uint64_t now)
{
    c->failed = true;
    c->gen++;
    if (g->o.target == T_ETCD && c->lease[0] && c->op != OP_REVOKE && c->op != OP_GRANT) {
        send_op(g, c, OP_REVOKE, now);
        return;
    }
    cycle_done(g, c, now);
}

static void on_answer(struct lg *g, struct conn *c, enum outcome out, uint64_t now)
{
    uint64_t dt = now - c->sent_ns;
    if (recording(g, now)) {
        g->requests++;
        hist_add(&g->req_all, dt);
        hist_add(&g->req_op[c->op], dt);
        if (g->requests >= g->o.max_requests)
            g->win_end = now; /* the run ends on the next turn of the loop */
    }
    if (out == OUT_FAIL) {
        count_error(g, E_NON2XX, now);
        on_failure(g, c, now);
        return;
    }
    switch (c->op) {
    case OP_GRANT:
        send_op(g, c, OP_ACQUIRE, now);
        return;
    case OP_ACQUIRE:
        if (out == OUT_BUSY) {
            /* Redis has no queue, and mutexd without wait_ms answers at once: spin. */
            bool spin = g->o.target == T_REDIS || g->o.wait_ms == 0;
            if (spin && waits(c) && !g->draining) {
                if (recording(g, now))
                    g->spins++;
                timer_set(g, c, TM_SPIN, now + (uint64_t)g->o.spin_ms * NS_PER_MS);
            } else if (waits(c) && !g->draining) {
                count_error(g, E_WAIT, now);
                send_op(g, c, OP_ACQUIRE, now); /* queue again: the cycle goes on */
            } else if (waits(c)) {
                cycle_done(g, c, now); /* draining: stop waiting */
            } else {
                count_error(g, E_CONFLICT, now);
                on_failure(g, c, now);
            }
            return;
        }
        if (two_singles(g) && c->part == 0) {
            c->part = 1; /* the second resource, as soon as the first is held */
            send_op(g, c, OP_ACQUIRE, now);
            return;
        }
        if (!c->failed && recording(g, now))
            hist_add(&g->to_lease, now - c->cycle_ns);
        holding(g, c, now);
        return;
    case OP_RENEW:
        if (out != OUT_OK) {
            count_error(g, E_CONFLICT, now);
            c->lease[0] = 0; /* gone: nothing to revoke */
            on_failure(g, c, now);
            return;
        }
        c->renews_left--;
        holding(g, c, now);
        return;
    case OP_RELEASE:
        if (out != OUT_OK) {
            count_error(g, E_CONFLICT, now);
            on_failure(g, c, now);
            return;
        }
        if (g->o.target == T_ETCD) {
            send_op(g, c, OP_REVOKE, now);
        } else if (two_singles(g) && c->part == 0) {
            c->part = 1;
            send_op(g, c, OP_RELEASE, now);
        } else {
            cycle_done(g, c, now);
        }
        return;
    case OP_REVOKE:
    case OP_PING:
    case OP_COUNT:
        cycle_done(g, c, now);
        return;
    }
}

static void on_timer(struct lg *g, struct conn *c, enum timer_kind tk, uint64_t now)
{
    switch (tk) {
    case TM_START:
        start_cycle(g, c, now);
        break;
    case TM_RENEW:
        send_op(g, c, OP_RENEW, now);
        break;
    case TM_RELEASE:
        send_op(g, c, OP_RELEASE, now);
        break;
    case TM_SPIN:
        if (g->draining)
            conn_finish(g, c);
        else
            send_op(g, c, OP_ACQUIRE, now);
        break;
    case TM_RECONNECT:
        if (g->draining) {
            conn_finish(g, c);
        } else if (conn_open(g, c) != 0) {
            count_error(g, E_IO, now);
            timer_set(g, c, TM_RECONNECT, now + RECONNECT_BACKOFF_NS);
        }
        break;
    case TM_NONE:
        break;
    }
}

static void on_readable(struct lg *g, struct conn *c, uint64_t now)
{
    for (;;) {
        if (c->in_len == sizeof c->in) {
            conn_broken(g, c, E_IO, now);
            return;
        }
        ssize_t r = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);
        if (r > 0) {
            c->in_len += (size_t)r;
            if (c->in_len < sizeof c->in)
                break; /* a short read: the socket is drained */
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        conn_broken(g, c, E_IO, now); /* closed or reset */
        return;
    }
    if (!c->in_flight) {
        conn_broken(g, c, E_IO, now); /* bytes nobody asked for */
        return;
    }
    enum outcome out = OUT_FAIL;
    bool close_after;
    long used = read_answer(g, c, &out, &close_after);
    if (used == WIRE_MORE)
        return;
    if (used == WIRE_BAD || (size_t)used != c->in_len) {
        conn_broken(g, c, E_IO, now); /* unparseable, or more than one answer */
        return;
    }
    c->in_len = 0;
    c->in_flight = false;
    if (close_after) {
        /* The server ends the connection after this answer: reopen, then go on. */
        conn_close(g, c);
        if (conn_open(g, c) != 0) {
            conn_broken(g, c, E_IO, now);
            return;
        }
    }
    on_answer(g, c, out, now);
}

static void on_event(struct lg *g, struct conn *c, uint32_t ev, uint64_t now)
{
    if (c->fd < 0)
        return;
    if (c->connecting) {
        if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            conn_broken(g, c, E_IO, now);
            return;
        }
        c->connecting = false;
        if (c->in_flight || c->out_len)
            flush_out(g, c, now); /* a request written while connecting */
        else
            set_events(g, c, false);
        if (c->fd >= 0 && !c->in_flight && c->tk == TM_NONE)
            start_cycle(g, c, now);
        return;
    }
    if (ev & EPOLLOUT) {
        flush_out(g, c, now);
        if (c->fd < 0)
            return;
    }
    if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
        on_readable(g, c, now);
}

/* ---------------------------------------------------------------- run */

static void begin_drain(struct lg *g, uint64_t now)
{
    if (!g->cpu_ended) {
        getrusage(RUSAGE_SELF, &g->ru_end);
        g->cpu_wall_end = now;
        g->cpu_ended = true;
    }
    if (g->win_end > now)
        g->win_end = now;
    g->draining = true;
    g->drain_end = now + DRAIN_NS;
    /* Holders give their leases back now; whoever holds nothing stops. */
    for (unsigned i = 0; i < g->o.connections; i++) {
        struct conn *c = &g->conns[i];
        if (c->done || c->in_flight)
            continue;
        if (c->tk == TM_RENEW || c->tk == TM_RELEASE) {
            timer_cancel(g, c);
            send_op(g, c, OP_RELEASE, now);
        } else if (!c->connecting) {
            conn_finish(g, c);
        }
    }
}

static void check_timeouts(struct lg *g, uint64_t now)
{
    for (unsigned i = 0; i < g->o.connections; i++) {
        struct conn *c = &g->conns[i];
        if (c->fd >= 0 && c->in_flight && now >= c->deadline_ns)
            conn_broken(g, c, E_TIMEOUT, now);
    }
}

/* Redis: SCRIPT LOAD over a short blocking connection, before the run. */
static int redis_load(struct lg *g, const char *script, char *sha, size_t cap)
{
    int rc = -1;
    int fd = socket(g->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char out[1024], in[256];
    const char *argv[] = {"SCRIPT", "LOAD", script};
    int n = wire_resp_cmd(out, sizeof out, 3, argv);
    if (connect(fd, (struct sockaddr *)&g->addr, g->addr_len) != 0 || n < 0 ||
        send(fd, out, (size_t)n, MSG_NOSIGNAL) != n)
        goto out;
    size_t len = 0;
    for (;;) {
        ssize_t r = recv(fd, in + len, sizeof in - len, 0);
        if (r <= 0)
            goto out;
        len += (size_t)r;
        struct wire_resp rep;
        long used = wire_resp_parse(in, len, &rep);
        if (used == WIRE_MORE && len < sizeof in)
            continue;
        if (used < 0 || rep.type != '$' || rep.nil || rep.len >= cap) {
            fprintf(stderr, "loadgen: SCRIPT LOAD failed: %.*s\n", (int)len, in);
            goto out;
        }
        memcpy(sha, rep.str, rep.len);
        sha[rep.len] = 0;
        rc = 0;
        goto out;
    }
out:
    close(fd);
    return rc;
}

/* Fails fast when nothing listens, rather than counting connect errors for the whole run. */
static int probe(struct lg *g)
{
    int fd = socket(g->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc = connect(fd, (struct sockaddr *)&g->addr, g->addr_len);
    close(fd);
    return rc;
}

static void run(struct lg *g)
{
    struct epoll_event evs[256];
    uint64_t now = now_ns(), next_scan = now;
    g->t_start = now;
    g->win_start = now + (uint64_t)(g->o.warmup_s * 1e9);
    g->win_end = g->win_start + (uint64_t)(g->o.duration_s * 1e9);
    for (unsigned i = 0; i < g->o.connections; i++) {
        struct conn *c = &g->conns[i];
        if (c->role == R_HOLDER) {
            /* Spread the holders over one renew interval, as a fleet started long ago. */
            uint64_t spread = renew_every_ns(g) ? (uint64_t)rand() % renew_every_ns(g) : 0;
            timer_set(g, c, TM_START, now + spread);
            if (conn_open(g, c) == 0)
                continue;
        } else if (conn_open(g, c) == 0) {
            continue;
        }
        count_error(g, E_IO, now);
        timer_set(g, c, TM_RECONNECT, now + RECONNECT_BACKOFF_NS);
    }
    while (g->active > 0) {
        now = now_ns();
        if (!g->cpu_started && now >= g->win_start) {
            getrusage(RUSAGE_SELF, &g->ru_start);
            g->cpu_wall_start = now;
            g->cpu_started = true;
        }
        if (interrupted && !g->stop_now) {
            g->stop_now = true;
            if (!g->draining)
                begin_drain(g, now);
            g->drain_end = now + NS_PER_SEC;
        }
        if (!g->draining && now >= g->win_end)
            begin_drain(g, now);
        if (g->draining && now >= g->drain_end)
            break;
        while (g->heap_len > 0 && g->heap[0]->wake_ns <= now) {
            struct conn *c = g->heap[0];
            enum timer_kind tk = c->tk;
            timer_cancel(g, c);
            on_timer(g, c, tk, now);
        }
        if (g->map_due && now >= g->map_read_ns + MAP_INTERVAL_NS) {
            read_map(g);
            now = now_ns();
        }
        if (now >= next_scan) {
            check_timeouts(g, now);
            next_scan = now + 20 * NS_PER_MS;
        }
        uint64_t wake = next_scan;
        if (!g->draining && g->win_end < wake)
            wake = g->win_end;
        if (!g->cpu_started && g->win_start < wake)
            wake = g->win_start;
        if (g->heap_len > 0 && g->heap[0]->wake_ns < wake)
            wake = g->heap[0]->wake_ns;
        now = now_ns();
        uint64_t dt = wake > now ? wake - now : 0;
        struct timespec ts = {.tv_sec = (time_t)(dt / NS_PER_SEC),
                              .tv_nsec = (long)(dt % NS_PER_SEC)};
        int n = epoll_pwait2(g->ep, evs, 256, &ts, NULL);
        if (n < 0 && errno == ENOSYS) {
            n = epoll_wait(g->ep, evs, 256, (int)((dt + NS_PER_MS - 1) / NS_PER_MS));
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("loadgen: epoll");
            break;
        }
        now = now_ns();
        for (int i = 0; i < n; i++)
            on_event(g, evs[i].data.ptr, evs[i].events, now);
    }
    if (!g->cpu_ended) {
        getrusage(RUSAGE_SELF, &g->ru_end);
        g->cpu_wall_end = now_ns();
        g->cpu_ended = true;
    }
    for (unsigned i = 0; i < g->o.connections; i++)
        conn_finish(g, &g->conns[i]);
}

/* ---------------------------------------------------------------- report */

static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void json_hist(const char *name, const struct hist *h, bool comma)
{
    printf("\"%s\":{\"count\":%" PRIu64 ",\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,"
           "\"max_ms\":%.3f,\"mean_ms\":%.3f}%s",
           name, h->count, ms(hist_pct(h, 50)), ms(hist_pct(h, 99)), ms(hist_pct(h, 99.9)),
           ms(h->max), ms(hist_mean(h)), comma ? "," : "");
}

static void text_hist(const char *name, const struct hist *h)
{
    if (h->count == 0)
        return;
    printf("  %-16s %10" PRIu64 " %9.3f %9.3f %9.3f %9.3f %9.3f\n", name, h->count,
           ms(hist_pct(h, 50)), ms(hist_pct(h, 99)), ms(hist_pct(h, 99.9)), ms(h->max),
           ms(hist_mean(h)));
}

static void report(const struct lg *g)
{
    const struct opts *o = &g->o;
    double secs = g->win_end > g->win_start ? (double)(g->win_end - g->win_start) / 1e9 : 0;
    double cpu = 0, cpu_user = 0, cpu_sys = 0;
    if (g->cpu_started && g->cpu_ended && g->cpu_wall_end > g->cpu_wall_start) {
        cpu_user = tv_s(g->ru_end.ru_utime) - tv_s(g->ru_start.ru_utime);
        cpu_sys = tv_s(g->ru_end.ru_stime) - tv_s(g->ru_start.ru_stime);
        cpu = 100.0 * (cpu_user + cpu_sys) / ((double)(g->cpu_wall_end - g->cpu_wall_start) / 1e9);
    }
    double rps = secs > 0 ? (double)g->requests / secs : 0;
    double cps = secs > 0 ? (double)(g->cycles + g->holder_cycles) / secs : 0;
    if (o->json) {
        printf("{\"target\":\"%s\",\"scenario\":\"%s\",\"connections\":%u,\"seconds\":%.3f,",
               target_names[o->target], scenario_names[o->scenario], o->connections, secs);
        printf("\"ttl_ms\":%u,\"renews\":%u,\"hold_ms\":%u,\"wait_ms\":%u,\"spin_ms\":%u,",
               o->ttl_ms, o->renews, o->hold_ms, o->wait_ms, o->spin_ms);
        if (o->scenario == S_MIXED)
            printf("\"holders\":%u,\"hot_keys\":%u,", o->holders, o->hot_keys);
        printf("\"fresh_keys\":%s,", o->fresh_keys ? "true" : "false");
        if (o->scenario == S_PAIR)
            printf("\"multi\":%s,", o->multi ? "true" : "false");
        printf("\"requests\":%" PRIu64 ",\"cycles\":%" PRIu64 ",\"holder_cycles\":%" PRIu64
               ",\"requests_per_s\":%.1f,\"cycles_per_s\":%.1f,\"spins\":%" PRIu64 ",",
               g->requests, g->cycles, g->holder_cycles, rps, cps, g->spins);
        printf("\"moves\":%" PRIu64 ",\"forwarded\":%" PRIu64 ",\"partitions\":%u,", g->moves,
               g->forwarded, g->parts > 1 ? g->parts : 1);
        printf("\"errors\":{");
        for (int e = 0; e < E_COUNT; e++)
            printf("\"%s\":%" PRIu64 "%s", err_names[e], g->errors[e], e + 1 < E_COUNT ? "," : "");
        printf("},\"latency\":{");
        json_hist("request", &g->req_all, true);
        json_hist("cycle", &g->cycle, true);
        json_hist("to_lease", &g->to_lease, true);
        for (int op = 0; op < OP_COUNT; op++)
            json_hist(op_names[op], &g->req_op[op], op + 1 < OP_COUNT);
        printf(
            "},\"loadgen_cpu_pct\":%.1f,\"loadgen_cpu_user_s\":%.3f,\"loadgen_cpu_sys_s\":%.3f}\n",
            cpu, cpu_user, cpu_sys);
        return;
    }
    printf("target %s  scenario %s  connections %u  measured %.2f s (warmup %.1f s)\n",
           target_names[o->target], scenario_names[o->scenario], o->connections, secs, o->warmup_s);
    if (o->scenario == S_PAIR)
        printf("pair: %s\n", o->multi ? "one acquire and one release naming both resources"
                                      : "two acquires in a row, then two releases");
    if (o->scenario == S_MIXED)
        printf("holders %u (renew every %u ms, %u renewals a cycle)  contenders %u on %u keys\n",
               o->holders, o->ttl_ms / 3, o->renews, o->connections - o->holders, o->hot_keys);
    printf("cycles    %10" PRIu64 "  %10.1f /s", g->cycles + g->holder_cycles, cps);
    if (g->holder_cycles)
        printf("  (holders %" PRIu64 ", contenders %" PRIu64 ")", g->holder_cycles, g->cycles);
    printf("\nrequests  %10" PRIu64 "  %10.1f /s", g->requests, rps);
    if (g->spins)
        printf("  (of which %" PRIu64 " acquire retries after a %u ms sleep)", g->spins,
               o->spin_ms);
    if (g->moves)
        printf("\nmoves     %10" PRIu64 "  connections moved to the active a server named, or "
               "to an owner",
               g->moves);
    if (o->target == T_MUTEXD)
        printf("\nforwarded %10" PRIu64 "  answers served by another server than the one asked"
               "%s",
               g->forwarded, g->parts > 1 ? " (a partitioned group)" : "");
    printf("\nlatency ms            count       p50       p99      p999       max      mean\n");
    text_hist("request", &g->req_all);
    text_hist("cycle", &g->cycle);
    text_hist("to lease", &g->to_lease);
    for (int op = 0; op < OP_COUNT; op++)
        text_hist(op_names[op], &g->req_op[op]);
    printf("errors   ");
    for (int e = 0; e < E_COUNT; e++)
        printf(" %s %" PRIu64, err_names[e], g->errors[e]);
    printf("\nloadgen cpu %.1f%% of one core (user %.2f s, sys %.2f s)\n", cpu, cpu_user, cpu_sys);
}

/* Fills in the address and the Host header; 2 for a host that is not loopback. */
static int resolve(struct lg *g)
{
    struct opts *o = &g->o;
    if (!host_is_loopback(o->host, &g->addr, &g->addr_len)) {
        fprintf(stderr, "loadgen: --host %s is not a loopback address; refusing\n", o->host);
        return 2;
    }
    if (g->addr.ss_family == AF_INET) {
        ((struct sockaddr_in *)&g->addr)->sin_port = htons((uint16_t)o->port);
        snprintf(g->host_hdr, sizeof g->host_hdr, "%s:%u",
                 strcmp(o->host, "localhost") ? o->host : "127.0.0.1", o->port);
    } else {
        ((struct sockaddr_in6 *)&g->addr)->sin6_port = htons((uint16_t)o->port);
        snprintf(g->host_hdr, sizeof g->host_hdr, "[%s]:%u", o->host, o->port);
    }
    return 0;
}

/* The counting semaphore as Redis users write it: a sorted set of holder tokens scored by
 * their deadline on the server's clock (TIME; scripts replicate their effects). */
static int redis_sem_scripts(struct lg *g)
{
    if (redis_load(g,
                   "local t=redis.call('time') local now=t[1]*1000+math.floor(t[2]/1000) "
                   "redis.call('zremrangebyscore',KEYS[1],'-inf',now) "
                   "if redis.call('zcard',KEYS[1])<tonumber(ARGV[3]) then "
                   "redis.call('zadd',KEYS[1],now+tonumber(ARGV[2]),ARGV[1]) "
                   "redis.call('pexpire',KEYS[1],ARGV[2]) return 1 end return 0",
                   g->sha_sem_acquire, sizeof g->sha_sem_acquire) != 0 ||
        redis_load(g,
                   "local t=redis.call('time') local now=t[1]*1000+math.floor(t[2]/1000) "
                   "local s=redis.call('zscore',KEYS[1],ARGV[1]) "
                   "if s and tonumber(s)>now then "
                   "redis.call('zadd',KEYS[1],now+tonumber(ARGV[2]),ARGV[1]) "
                   "if redis.call('pttl',KEYS[1])<tonumber(ARGV[2]) then "
                   "redis.call('pexpire',KEYS[1],ARGV[2]) end return 1 end return 0",
                   g->sha_sem_renew, sizeof g->sha_sem_renew) != 0 ||
        redis_load(g, "return redis.call('zrem',KEYS[1],ARGV[1])", g->sha_sem_release,
                   sizeof g->sha_sem_release) != 0) {
        fprintf(stderr, "loadgen: could not load the Redis semaphore scripts\n");
        return -1;
    }
    return 0;
}

static int redis_scripts(struct lg *g)
{
    if (g->o.limit && redis_sem_scripts(g) != 0)
        return -1;
    if (redis_load(g,
                   "if redis.call('get',KEYS[1])==ARGV[1] then "
                   "return redis.call('del',KEYS[1]) else return 0 end",
                   g->sha_release, sizeof g->sha_release) != 0 ||
        redis_load(g,
                   "if redis.call('get',KEYS[1])==ARGV[1] then "
                   "return redis.call('pexpire',KEYS[1],ARGV[2]) else return 0 end",
                   g->sha_renew, sizeof g->sha_renew) != 0) {
        fprintf(stderr, "loadgen: could not load the Redis scripts\n");
        return -1;
    }
    return 0;
}

/*
 * Exit status: 0 after a run, 1 when it could not start (nothing listening, no memory),
 * 2 for a bad command line, 3 when the run got no answer at all in its measured time.
 */
int main(int argc, char **argv)
{
    int rc = 1;
    struct lg *g = calloc(1, sizeof *g);
    if (!g) {
        perror("loadgen");
        return 1;
    }
    g->ep = -1;
    struct opts *o = &g->o;
    if ((rc = parse_opts(argc, argv, o)) != 0 || (rc = resolve(g)) != 0)
        goto out;
    rc = 1;
    srand((unsigned)(now_ns() ^ (uint64_t)getpid()));
    snprintf(g->run_id, sizeof g->run_id, "%s-%x", o->prefix,
             (unsigned)((now_ns() / 1000) ^ ((uint64_t)getpid() << 20)) & 0xffffffu);
    if (probe(g) != 0) {
        fprintf(stderr, "loadgen: cannot connect to %s: %s\n", g->host_hdr, strerror(errno));
        goto out;
    }
    if (o->target == T_REDIS && redis_scripts(g) != 0)
        goto out;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < o->connections + 64u) {
        rl.rlim_cur = rl.rlim_max < o->connections + 64u ? rl.rlim_max : o->connections + 64u;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    g->conns = calloc(o->connections, sizeof *g->conns);
    g->heap = calloc(o->connections, sizeof *g->heap);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    if (!g->conns || !g->heap || g->ep < 0) {
        perror("loadgen");
        goto out;
    }
    for (unsigned i = 0; i < o->connections; i++) {
        struct conn *c = &g->conns[i];
        c->id = i;
        c->fd = -1;
        c->port = o->port;
        c->heap_pos = -1;
        if (o->scenario == S_HOTKEY)
            c->role = R_CONTENDER;
        else if (o->scenario == S_MIXED)
            c->role = i < o->holders ? R_HOLDER : R_CONTENDER;
        else if (o->scenario == S_HOLD)
            c->role = R_HOLDER;
        else
            c->role = R_OWN_KEY;
    }
    if (o->target == T_MUTEXD) {
        read_map(g);
        g->map_due = false; /* a group whose map could not be read is not routed */
    }
    /* A partitioned group: the connections start spread over its servers. */
    for (unsigned i = 0; g->parts > 1 && i < o->connections; i++)
        g->conns[i].port =
            i % (o->ngroup + 1) == 0 ? o->port : o->group_ports[i % (o->ngroup + 1) - 1];
    g->active = o->connections;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    run(g);
    report(g);
    rc = g->requests > 0 ? 0 : 3;
out:
    if (g->ep >= 0)
        close(g->ep);
    free(g->heap);
    free(g->conns);
    free(g);
    return rc;
}
