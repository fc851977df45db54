/*
 * mutexctl: the command-line client of mutexd, on libmutexd.
 *
 * Layout: the help texts; output (a lease, a state, a table, a watch line); one function per
 * command; and main, which finds the command, parses its options (the global ones are
 * accepted by every command, before or after its name) and runs it. `run` lives in
 * mutexctl_run.c, the parsing helpers in mutexctl_cli.c.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mutexctl_cli.h"
#include "mutexctl_run.h"
#include <openssl/evp.h>
#include "mutexd.h"

#define DEFAULT_URL "http://127.0.0.1:8080"

static const char main_usage[] =
    "usage: mutexctl [OPTIONS] COMMAND [ARGS...]\n"
    "\n"
    "The command-line client of mutexd, the lease server.\n"
    "\n"
    "Commands:\n"
    "  acquire RESOURCE             acquire a lease and print it\n"
    "  acquire RESOURCE RESOURCE... acquire a lease on each resource at once (all or none),\n"
    "                               under one lease id, and print them\n"
    "  renew RESOURCE LEASE_ID      renew a lease: same lease and fencing token, a fresh TTL\n"
    "                               (RESOURCE... LEASE_ID: every lease of a set)\n"
    "  release RESOURCE LEASE_ID    release a lease (RESOURCE... LEASE_ID: a set)\n"
    "  break RESOURCE               end the leases that hold a resource, or one of them\n"
    "                               (operators)\n"
    "  status RESOURCE              print a resource's state and every holder; get is the\n"
    "                               same\n"
    "  list                         list the held resources\n"
    "  watch RESOURCE               print a resource's state, then each change, until stopped\n"
    "  watch --prefix PREFIX        print the held resources under PREFIX, then the list at\n"
    "                               each change, until stopped (watch PREFIX/ is the same)\n"
    "  events                       print the recent changes (grants, renewals, releases,\n"
    "                               expiries, breaks); --follow keeps printing new ones\n"
    "  whoami                       print the name and scopes of the token given\n"
    "  run RESOURCE -- COMMAND...   run a command while holding a lease; stop it if the lease\n"
    "                               is lost\n"
    "  run --resource A --resource B -- COMMAND...\n"
    "                               the same, holding a set: stop it if any lease is lost\n"
    "\n"
    "acquire and run take --limit N (up to N holders at once: a counting semaphore) and\n"
    "--shared (a reader's lease, held with other readers while no writer holds it).\n"
    "  check                        in a command of `run`: exit 0 while its lease holds\n"
    "  token hash TOKEN             print the line of the server's --auth-tokens file for TOKEN\n"
    "\n"
    "Options of every command (before or after its name):\n"
    "  --url URLS       the server's URL, or the URLs of a group's servers separated by\n"
    "                   commas (env MUTEXD_URL, default " DEFAULT_URL ");\n"
    "                   --server is the same\n"
    "  --token TOKEN    bearer token (env MUTEXD_TOKEN)\n"
    "  --ca-file FILE   certificate authorities of an https server (env MUTEXD_CA_FILE)\n"
    "  --timeout DUR    time for one request to one server (default 30s; waits come on\n"
    "                   top)\n"
    "  --json           print the API's JSON; an error answer's JSON goes to stdout too\n"
    "  --quiet          say nothing on stderr when a resource is held (exit status 1)\n"
    "  --help, -h       this help; `mutexctl COMMAND --help` for a command's\n"
    "  --version        print the version\n"
    "\n"
    "Several servers: a request goes first to the one that last answered, and on to the\n"
    "next when no answer comes or it answers 503 (unavailable), at most twice round the\n"
    "list; the error shown is the last one's. An acquire proposes the same lease id to\n"
    "each, so that one carried out whose answer was lost gives the same lease back.\n"
    "\n"
    "Durations: 500ms, 15s, 2m, 1h, or plain milliseconds (1500).\n"
    "\n"
    "Exit status:\n"
    "  0  done\n"
    "  1  declined: the resource is held (acquire, run), or the lease is lost (renew,\n"
    "     release, run)\n"
    "  2  usage error, or input the server refuses as invalid (HTTP 400, 413)\n"
    "  3  any other error: the server's (401, 403, 409 limit_mismatch, 429, 503, ...), or\n"
    "     no answer\n"
    "  run exits with the command's own status (128+N when signal N ended it; 126 or 127\n"
    "  when it could not be started), and 1 when the lease was lost while it ran.\n";

static const char acquire_usage[] =
    "usage: mutexctl acquire RESOURCE... [--owner NAME] [--ttl DUR] [--wait DUR]\n"
    "                        [--lease-id ID] [--metadata JSON] [--limit N | --shared]\n"
    "\n"
    "Acquires a lease on RESOURCE and prints it: the lease_id is the credential that renews\n"
    "and releases it; pass the fencing_token to what the lease protects.\n"
    "\n"
    "With several RESOURCEs (2 to 64), acquires them all at once, with one request: a lease\n"
    "on each, or on none (when one is held nothing is granted, and stderr names the first\n"
    "held). The leases share one lease_id, the set's, and each has its own fencing_token;\n"
    "each is printed as one lease is, a blank line between them (with --json, the API's\n"
    "{\"leases\":[...]}). The options apply to each; a wait waits for all of them. Renew\n"
    "and release the set with `mutexctl renew` and `release` RESOURCE... LEASE_ID. On a group\n"
    "of several partitions the names must be in one partition: give them one hash tag\n"
    "({order-7}/lock, {order-7}/stock).\n"
    "\n"
    "  --owner NAME     who holds it, for people and tools (default: HOST:PID of the calling\n"
    "                   process)\n"
    "  --ttl DUR        how long the lease lasts unless renewed (default: the server's, 15s)\n"
    "  --wait DUR       wait in line this long while it is held (default 0: answer at once)\n"
    "  --lease-id ID    propose the lease id (a UUID): acquiring again with the same id gives\n"
    "                   the same lease back\n"
    "  --metadata JSON  a JSON object kept with the lease (for example the leader's address)\n"
    "  --limit N        let up to N leases hold RESOURCE at once, each with its own lease id\n"
    "                   and fencing token (a counting semaphore; default 1). Every holder\n"
    "                   must name the same N while it is held\n"
    "  --shared         a shared lease (a reader): held together with other shared leases,\n"
    "                   while no exclusive lease (the default, a writer) holds RESOURCE\n"
    "\n"
    "Exit status: 0 acquired; 1 held: no place for this lease (or one of the set) now (who\n"
    "holds it goes to stderr); 2 usage; 3 error, among them a limit other than the one in\n"
    "force (409 limit_mismatch; the limit in force goes to stderr). See mutexctl --help for\n"
    "the options of every command.\n";

static const char renew_usage[] =
    "usage: mutexctl renew RESOURCE... LEASE_ID [--ttl DUR] [--metadata JSON]\n"
    "\n"
    "Renews a lease: the same lease and fencing token, expiring TTL from now. Prints it.\n"
    "With several RESOURCEs, renews every lease of the set LEASE_ID (as `mutexctl acquire`\n"
    "RESOURCE... gave it) with one request, and prints them as acquire does. When the set no\n"
    "longer holds some of them, stderr names those (the others are renewed all the same) and\n"
    "the exit status is 1: the set is lost.\n"
    "\n"
    "  --ttl DUR        the new TTL (default: the lease's own)\n"
    "  --metadata JSON  replaces the lease's metadata\n"
    "\n"
    "Exit status: 0 renewed; 1 the lease (or one of the set) is lost (released, broken, or\n"
    "granted to another after it expired): stop the work it guards; 2 usage; 3 error.\n";

static const char release_usage[] =
    "usage: mutexctl release RESOURCE... LEASE_ID\n"
    "\n"
    "Releases a lease; the next waiter is granted at once. Prints \"released RESOURCE\".\n"
    "With several RESOURCEs, releases every lease of the set LEASE_ID with one request, and\n"
    "prints \"released RESOURCE\" for each one released; those the set no longer held are\n"
    "named on stderr (exit status 1).\n"
    "\n"
    "Exit status: 0 released; 1 the lease (or one of the set) was already lost (whoever holds\n"
    "the resource keeps it); 2 usage; 3 error.\n";

static const char break_usage[] =
    "usage: mutexctl break RESOURCE [--reason TEXT] [--lease-id ID]\n"
    "\n"
    "Ends every lease that holds RESOURCE, whoever holds it (an operator's tool; with\n"
    "authorization on it needs the admin scope). Prints \"broken RESOURCE\", or \"RESOURCE\n"
    "was not held\". The holder learns it at its next renewal.\n"
    "\n"
    "  --reason TEXT    why, for the server's log\n"
    "  --lease-id ID    end only this lease (one holder of a semaphore or of a shared\n"
    "                   resource); prints \"RESOURCE: lease ID was not held\" when it holds\n"
    "                   nothing\n"
    "\n"
    "Exit status: 0 done (held or not); 2 usage; 3 error.\n";

#define STATE_HELP                                                                                 \
    "Prints the state of RESOURCE: held or free, its index, its limit, the first holder\n"         \
    "(owner, fencing_token, ttl_ms, ... as before semaphores), then every holder, oldest\n"        \
    "first, one line each (never a lease id):\n"                                                   \
    "  holder:        owner=host-a:51635 fencing_token=3 exclusive expires_in_ms=14998\n"          \
    "and the number of waiters. A name never used is free. status and get are the same.\n"         \
    "\n"                                                                                           \
    "Exit status: 0 (held or free); 2 usage; 3 error.\n"

static const char status_usage[] = "usage: mutexctl status RESOURCE\n"
                                   "\n" STATE_HELP;
static const char get_usage[] = "usage: mutexctl get RESOURCE\n"
                                "\n" STATE_HELP;

static const char list_usage[] =
    "usage: mutexctl list [--prefix PREFIX] [--limit N] [--cursor CURSOR]\n"
    "\n"
    "Lists the held resources in name order: RESOURCE, OWNER, FENCING_TOKEN, EXPIRES_IN_MS,\n"
    "WAITERS. Without --limit and --cursor, all of them, page after page; with either, one\n"
    "page, and the cursor of the next one goes to stderr (with --json it is in the JSON).\n"
    "\n"
    "  --prefix PREFIX  only names that start with PREFIX (\"jobs/\")\n"
    "  --limit N        at most N per page (1 to 1000; the server's default is 100)\n"
    "  --cursor CURSOR  the page after CURSOR, as a previous page gave it\n"
    "\n"
    "Exit status: 0; 2 usage; 3 error.\n";

static const char watch_usage[] =
    "usage: mutexctl watch RESOURCE [--index N] [--wait DUR] [--count N]\n"
    "       mutexctl watch --prefix PREFIX [--wait DUR] [--count N]\n"
    "\n"
    "Prints the state of RESOURCE, then a line for each change, until stopped. A line:\n"
    "  index=7 state=held owner=host-a:51635 fencing_token=3 ttl_ms=15000 expires_in_ms=14998 "
    "waiters=0\n"
    "  index=8 state=free waiters=0\n"
    "With --json, each state is the API's JSON on one line. A failed request is tried again\n"
    "every second while the server cannot be reached or is unavailable.\n"
    "\n"
    "With --prefix (or a RESOURCE ending in '/', which no resource name does), prints the held\n"
    "resources whose names start with PREFIX (\"\" for all), then the whole list again at\n"
    "each change under PREFIX (a grant, renewal, release, break or expiry), through the\n"
    "server's list watch; changes elsewhere print nothing. Each list is a line\n"
    "  index=42 held=2\n"
    "(the server's change index, and how many resources are held) and a table of every\n"
    "holder: RESOURCE, LIMIT, OWNER, FENCING_TOKEN, MODE (exclusive or shared),\n"
    "EXPIRES_IN_MS, WAITERS. With --json, each list is one line: "
    "{\"index\":42,\"resources\":[...]}\n"
    "with the API's states.\n"
    "\n"
    "  --index N        print nothing until the index differs from N (default: print the\n"
    "                   current state first; not with --prefix)\n"
    "  --prefix PREFIX  watch the list of the resources under PREFIX\n"
    "  --wait DUR       how long each request waits on the server (default 60s)\n"
    "  --count N        stop after printing N states (lists)\n"
    "\n"
    "SIGINT or SIGTERM ends it (exit status 0) between two lines, never in the middle of one.\n"
    "\n"
    "Exit status: 0 after --count states or a signal; 2 usage; 3 error.\n";

static const char events_usage[] =
    "usage: mutexctl events [--prefix PREFIX] [--after N] [--limit N] [--follow] [--wait DUR]\n"
    "                       [--count N]\n"
    "\n"
    "Prints the server's recent changes, oldest first, one line each (logfmt):\n"
    "  index=12 at=2026-01-15T09:30:00.000Z resource=jobs/a type=granted owner=host-a:51635 "
    "fencing_token=7 shared=false limit=1\n"
    "type is granted, renewed, released, expired or broken; a lease id is never shown. With\n"
    "--json, each event is the API's JSON on one line. The server keeps the last\n"
    "--event-history changes in memory (10000 by default), and none from before its start.\n"
    "\n"
    "  --prefix PREFIX  only resources whose names start with PREFIX\n"
    "  --after N        only changes after change index N (an event's index); default: every\n"
    "                   change the server still has\n"
    "  --limit N        at most N events per request (1 to 1000; default 1000)\n"
    "  --follow         then keep waiting for new changes and print them as they come, until\n"
    "                   stopped (SIGINT or SIGTERM: exit status 0); a failed request is tried\n"
    "                   again every second while the server cannot be reached\n"
    "  --wait DUR       with --follow, how long each request waits on the server (default 60s)\n"
    "  --count N        stop after printing N events\n"
    "\n"
    "When changes after the index asked for were already dropped (the history is full, or the\n"
    "server restarted), a warning goes to stderr: some changes were missed.\n"
    "\n"
    "Exit status: 0; 2 usage; 3 error.\n";

static const char whoami_usage[] =
    "usage: mutexctl whoami\n"
    "\n"
    "Prints the name of the token given (--token, MUTEXD_TOKEN) in the server's tokens file,\n"
    "and its scopes:\n"
    "  name=ci scopes=read,write\n"
    "With authorization off: name=- scopes=read,write,admin,metrics. With --json, the API's\n"
    "JSON. Any valid token may ask; none or a bad one is refused (401).\n"
    "\n"
    "Exit status: 0; 2 usage; 3 error (among them 401).\n";

static const char run_usage[] =
    "usage: mutexctl run RESOURCE [--ttl DUR] [--wait DUR] [--owner NAME] [--grace DUR]\n"
    "                    [--metadata JSON] [--parent-pid PID] [--limit N | --shared]\n"
    "                    -- COMMAND [ARGS...]\n"
    "       mutexctl run --resource NAME --resource NAME... [OPTIONS] -- COMMAND [ARGS...]\n"
    "\n"
    "Acquires a lease on RESOURCE and runs COMMAND while holding it:\n"
    "  - COMMAND runs in its own process group, with MUTEXD_RESOURCE, MUTEXD_LEASE_ID and\n"
    "    MUTEXD_FENCING_TOKEN in its environment (pass the token to what you protect), and\n"
    "    MUTEXD_LEASE_FILE, where `mutexctl check` reads the lease's deadline;\n"
    "  - the lease is renewed at a third of its TTL, through whichever server answers; a\n"
    "    renewal that fails is tried again on a new connection until the lease's deadline;\n"
    "  - if the lease is lost (the server answers lease_lost, or renewals keep failing until\n"
    "    the lease's deadline passes), the whole group gets SIGTERM, and SIGKILL after the\n"
    "    grace period;\n"
    "  - SIGTERM, SIGINT and SIGHUP sent to mutexctl are forwarded to the group;\n"
    "  - when COMMAND exits, what it left running in its group is stopped the same way and\n"
    "    the lease is released;\n"
    "  - if mutexctl itself is killed (SIGKILL), COMMAND gets SIGTERM.\n"
    "COMMAND is not in the terminal's foreground group: it should not read the terminal.\n"
    "COMMAND should run `mutexctl check` right before each action the lease guards: a\n"
    "process paused past the lease's deadline (SIGSTOP, a frozen VM) learns there that the\n"
    "lease is lost, before mutexctl's SIGTERM can reach it.\n"
    "\n"
    "With several resources (--resource once for each, 2 to 64 in all; a RESOURCE before\n"
    "them is the first), it holds them as one set, as `mutexctl acquire` RESOURCE... does:\n"
    "acquired at once (all or none), renewed with one request, released together; COMMAND is\n"
    "stopped as soon as ANY lease of the set is lost. MUTEXD_LEASE_ID is the set's;\n"
    "MUTEXD_RESOURCES and MUTEXD_FENCING_TOKENS list every resource and its token, in the\n"
    "order given, separated by spaces (with one resource: its own); MUTEXD_RESOURCE and\n"
    "MUTEXD_FENCING_TOKEN are the first's. With --resource, COMMAND comes after --.\n"
    "\n"
    "  --ttl DUR        the lease's TTL (default 15s)\n"
    "  --wait DUR       wait this long for the lease while it is held (default 0: give up at\n"
    "                   once, exit status 1)\n"
    "  --owner NAME     who holds it (default: HOST:PID of mutexctl)\n"
    "  --resource NAME  a resource of the set to hold; once for each\n"
    "  --grace DUR      from SIGTERM to SIGKILL (default 5s)\n"
    "  --metadata JSON  a JSON object kept with the lease\n"
    "  --parent-pid PID mutexctl's parent: when it ends, even by SIGKILL, do as on SIGTERM\n"
    "                   (stop COMMAND, release the lease); exit 1 at once if PID is not the\n"
    "                   parent any more (Linux)\n"
    "  --limit N        let up to N commands hold RESOURCE at once (a counting semaphore):\n"
    "                   `mutexctl run --limit 3 jobs/encoder -- ./encode.sh` runs three\n"
    "                   encoders at most\n"
    "  --shared         a shared lease (a reader): run alongside other --shared commands,\n"
    "                   never while one without --shared (a writer) runs\n"
    "\n"
    "Exit status: COMMAND's (128+N when signal N ended it; 126 or 127 when it could not be\n"
    "started); 1 when the resource (one of the set) was held or a lease was lost; 2 usage; 3\n"
    "error before COMMAND started.\n";

static const char check_usage[] =
    "usage: mutexctl check [--lease-file FILE]\n"
    "\n"
    "For a command run by `mutexctl run`: exits 0 while its lease holds, 1 (saying so on\n"
    "stderr) once it is lost or its deadline has passed on this machine's monotonic clock,\n"
    "whether or not mutexctl run has noticed yet. Run it right before each action the lease\n"
    "guards. Asks no server.\n"
    "\n"
    "  --lease-file FILE  the file mutexctl run keeps the deadline in (default: env\n"
    "                     MUTEXD_LEASE_FILE)\n";

static const char token_usage[] =
    "usage: mutexctl token hash [--name NAME] [--scopes SCOPES] [--prefix PREFIX] TOKEN\n"
    "\n"
    "Prints the line of the server's --auth-tokens file for TOKEN: NAME sha256:HEX SCOPES\n"
    "[PREFIX]. The file keeps only the token's SHA-256; give the token itself to the client\n"
    "(--token, MUTEXD_TOKEN). TOKEN \"-\" reads it from the first line of stdin, so that it\n"
    "does not show in the process list. Nothing is sent to any server.\n"
    "\n"
    "  --name NAME      the token's name in the server's log (default: token)\n"
    "  --scopes SCOPES  comma-separated: read, write, admin, metrics (default: read)\n"
    "  --prefix PREFIX  limit the token to resources whose names start with PREFIX\n"
    "\n"
    "Exit status: 0; 2 usage.\n";

/* ---- Settings shared by every command ------------------------------------------------------ */

struct ctl {
    const char *server; /* one URL, or several separated by commas */
    const char *token;
    const char *ca_file;
    int64_t timeout_ms;
    int json;
    int quiet;
    mutexd_client *client;
};

#define GLOBAL_OPTS                                                                                \
    {"--url", 1, NULL}, {"--server", 1, NULL}, {"--token", 1, NULL}, {"--ca-file", 1, NULL},       \
        {"--timeout", 1, NULL}, {"--json", 0, NULL}, {"--quiet", 0, NULL}, {"--help", 0, NULL},    \
    {                                                                                              \
        "--version", 0, NULL                                                                       \
    }

__attribute__((format(printf, 2, 3))) static int usage_error(const char *command, const char *fmt,
                                                             ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mutexctl: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'mutexctl %s%s--help'.\n", command != NULL ? command : "",
            command != NULL ? " " : "");
    return MXCTL_EXIT_USAGE;
}

static int duration_opt(const struct mxctl_opt *opts, size_t n, const char *name, int64_t dflt,
                        int64_t *out, const char *command)
{
    const char *v = mxctl_opt(opts, n, name);
    *out = dflt;
    if (v != NULL && mxctl_parse_duration(v, out) != 0)
        return usage_error(command, "%s: not a duration: '%s' (500ms, 15s, 2m, 1h, or 1500)", name,
                           v);
    return 0;
}

static int setup(struct ctl *ctl, const struct mxctl_opt *opts, size_t n, const char *command)
{
    const char *env;
    ctl->server = mxctl_opt(opts, n, "--url");
    if (ctl->server == NULL)
        ctl->server = mxctl_opt(opts, n, "--server");
    if (ctl->server == NULL)
        ctl->server = (env = getenv("MUTEXD_URL")) != NULL && env[0] != '\0' ? env : DEFAULT_URL;
    ctl->token = mxctl_opt(opts, n, "--token");
    if (ctl->token == NULL && (env = getenv("MUTEXD_TOKEN")) != NULL && env[0] != '\0')
        ctl->token = env;
    ctl->ca_file = mxctl_opt(opts, n, "--ca-file");
    if (ctl->ca_file == NULL && (env = getenv("MUTEXD_CA_FILE")) != NULL && env[0] != '\0')
        ctl->ca_file = env;
    ctl->json = mxctl_opt(opts, n, "--json") != NULL;
    ctl->quiet = mxctl_opt(opts, n, "--quiet") != NULL;
    int bad = duration_opt(opts, n, "--timeout", 30000, &ctl->timeout_ms, command);
    if (bad)
        return bad;
    if (ctl->timeout_ms <= 0 || ctl->timeout_ms > 86400000)
        return usage_error(command, "--timeout must be from 1ms to 24h");
    struct mutexd_client_options o = {
        .token = ctl->token,
        .ca_file = ctl->ca_file,
        .request_timeout_ms = (long)ctl->timeout_ms,
    };
    if (mutexd_client_new(&ctl->client, ctl->server, &o) != MUTEXD_OK)
        return usage_error(command,
                           "not a server URL, or a comma-separated list of them (http:// or "
                           "https://): '%s'",
                           ctl->server);
    return 0;
}

/* Reports a failed call; with --json, an error answer's JSON also goes to stdout. */
static int fail(const struct ctl *ctl, const char *what, mutexd_result r,
                const struct mutexd_error *err)
{
    if (ctl->json && err->status != 0 && err->body != NULL && err->body[0] != '\0') {
        fputs(err->body, stdout);
        if (err->body[strlen(err->body) - 1] != '\n')
            putchar('\n');
    }
    return mxctl_report(what, r, err, ctl->quiet);
}

/* ---- Output ------------------------------------------------------------------------------- */

static void field(const char *name, const char *value)
{
    char key[32];
    snprintf(key, sizeof(key), "%s:", name);
    printf("%-15s%s\n", key, value != NULL ? value : "null");
}

static void field_u64(const char *name, uint64_t v)
{
    char s[32];
    snprintf(s, sizeof(s), "%" PRIu64, v);
    field(name, s);
}

static void field_i64(const char *name, int64_t v)
{
    char s[32];
    snprintf(s, sizeof(s), "%" PRId64, v);
    field(name, s);
}

static void print_lease(const struct mutexd_lease *l)
{
    field("resource", l->resource);
    field("lease_id", l->lease_id);
    field("owner", l->owner);
    field_u64("fencing_token", l->fencing_token);
    field_i64("ttl_ms", l->ttl_ms);
    field_i64("expires_in_ms", l->expires_in_ms);
    field("acquired_at", l->acquired_at);
    field("renewed_at", l->renewed_at);
    field("metadata", l->metadata);
    field_i64("limit", l->limit);
    field("shared", l->shared ? "true" : "false");
}

static void print_value(const char *v);

static void print_state(const struct mutexd_state *s)
{
    field("resource", s->resource);
    field("state", s->held ? "held" : "free");
    field_u64("index", s->index);
    field_i64("limit", s->limit);
    if (s->held) {
        /* The first holder as before semaphores, for scripts that read these lines. */
        const struct mutexd_holder *h = &s->holder;
        field("owner", h->owner);
        field_u64("fencing_token", h->fencing_token);
        field_i64("ttl_ms", h->ttl_ms);
        field_i64("expires_in_ms", h->expires_in_ms);
        field("acquired_at", h->acquired_at);
        field("renewed_at", h->renewed_at);
        field("metadata", h->metadata);
    }
    field_i64("holders", (int64_t)s->holder_count);
    for (size_t i = 0; i < s->holder_count; i++) {
        const struct mutexd_holder *h = &s->holders[i];
        printf("%-15sowner=", "holder:");
        print_value(h->owner);
        printf(" fencing_token=%" PRIu64 " %s expires_in_ms=%" PRId64 "\n", h->fencing_token,
               h->shared ? "shared" : "exclusive", h->expires_in_ms);
    }
    field_i64("waiters", s->waiters);
}

/* A value in a key=value line: quoted when it has spaces, quotes, '=' or is empty. */
static void print_value(const char *v)
{
    if (v[0] != '\0' && strpbrk(v, " \t\"=\\") == NULL) {
        fputs(v, stdout);
        return;
    }
    putchar('"');
    for (const char *p = v; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            putchar('\\');
        putchar(*p);
    }
    putchar('"');
}

static void print_watch_line(const struct ctl *ctl, const struct mutexd_state *s)
{
    if (ctl->json) {
        puts(s->json);
    } else if (s->held) {
        printf("index=%" PRIu64 " state=held owner=", s->index);
        print_value(s->holder.owner);
        printf(" fencing_token=%" PRIu64 " ttl_ms=%" PRId64 " expires_in_ms=%" PRId64
               " waiters=%" PRId64 "\n",
               s->holder.fencing_token, s->holder.ttl_ms, s->holder.expires_in_ms, s->waiters);
    } else {
        printf("index=%" PRIu64 " state=free waiters=%" PRId64 "\n", s->index, s->waiters);
    }
    fflush(stdout);
}

static void print_row(const char *const *cell, const int *width, int ncols)
{
    for (int c = 0; c < ncols - 1; c++)
        printf("%-*s  ", width[c], cell[c]);
    printf("%s\n", cell[ncols - 1]);
}

/* The table of `list`: every state of every page. */
static void print_table(struct mutexd_page *pages, size_t npages)
{
    enum { COLS = 5 };
    static const char *const head[COLS] = {"RESOURCE", "OWNER", "FENCING_TOKEN", "EXPIRES_IN_MS",
                                           "WAITERS"};
    int width[COLS];
    for (int c = 0; c < COLS; c++)
        width[c] = (int)strlen(head[c]);
    char num[3][32];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            print_row(head, width, COLS);
        for (size_t p = 0; p < npages; p++) {
            for (size_t i = 0; i < pages[p].count; i++) {
                const struct mutexd_state *s = &pages[p].resources[i];
                snprintf(num[0], sizeof(num[0]), "%" PRIu64, s->holder.fencing_token);
                snprintf(num[1], sizeof(num[1]), "%" PRId64, s->holder.expires_in_ms);
                snprintf(num[2], sizeof(num[2]), "%" PRId64, s->waiters);
                const char *cell[COLS] = {s->resource, s->holder.owner ? s->holder.owner : "-",
                                          num[0], num[1], num[2]};
                for (int c = 0; pass == 0 && c < COLS; c++) {
                    int w = (int)strlen(cell[c]);
                    width[c] = w > width[c] ? w : width[c];
                }
                if (pass == 1)
                    print_row(cell, width, COLS);
            }
        }
    }
}

/* {"resource": ..., <flag>: true|false}, as the API answers release and break. */
static void print_flag_json(const char *resource, const char *flag, int value)
{
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    if (o != NULL && cJSON_AddStringToObject(o, "resource", resource) != NULL &&
        cJSON_AddBoolToObject(o, flag, value) != NULL)
        text = cJSON_PrintUnformatted(o);
    puts(text != NULL ? text : "{}");
    free(text);
    cJSON_Delete(o);
}

/* ---- Commands ----------------------------------------------------------------------------- */

#define NOPTS(a) (sizeof(a) / sizeof((a)[0]))

/* --limit and --shared, of acquire and run: *limit 0 when not given (not sent). */
static int holders_opts(const struct mxctl_opt *opts, size_t n, int64_t *limit, int *shared,
                        const char *command)
{
    const char *v = mxctl_opt(opts, n, "--limit");
    *limit = 0;
    *shared = mxctl_opt(opts, n, "--shared") != NULL;
    /* 65536: the most --max-holders allows; the server refuses more than its own setting. */
    if (v != NULL && mxctl_parse_int(v, 1, 65536, limit) != 0)
        return usage_error(command, "--limit must be a whole number from 1 to 65536, not '%s'", v);
    if (*shared && *limit > 1)
        return usage_error(command,
                           "--shared is a reader's lease of a resource of limit 1; it "
                           "does not go with --limit %" PRId64,
                           *limit);
    return 0;
}

/* The answer of acquire and renew: the lease (as JSON with --json) or the error; frees
 * both. Returns the exit status. */
static int show_lease(const struct ctl *ctl, const char *resource, mutexd_result r,
                      struct mutexd_lease *lease, struct mutexd_error *err)
{
    int status = 0;
    if (r != MUTEXD_OK)
        status = fail(ctl, resource, r, err);
    else if (ctl->json)
        puts(lease->json);
    else
        print_lease(lease);
    mutexd_lease_clear(lease);
    mutexd_error_clear(err);
    return status;
}

/* As fail(), for a call about the set `names`: the message names the resources the answer
 * names (the one held, those lost), else the whole set. */
static int fail_set(const struct ctl *ctl, const char *const *names, size_t n, mutexd_result r,
                    const struct mutexd_error *err)
{
    char *what = mxctl_error_names(err, names, n);
    int status = fail(ctl, what != NULL ? what : "the set", r, err);
    free(what);
    return status;
}

/* As show_lease(), for a set: each lease printed as one is, a blank line between them. */
static int show_leases(const struct ctl *ctl, const char *const *names, size_t n, mutexd_result r,
                       struct mutexd_leases *set, struct mutexd_error *err)
{
    int status = 0;
    if (r != MUTEXD_OK) {
        status = fail_set(ctl, names, n, r, err);
    } else if (ctl->json) {
        puts(set->json);
    } else {
        for (size_t i = 0; i < set->count; i++) {
            if (i > 0)
                putchar('\n');
            print_lease(&set->leases[i]);
        }
    }
    mutexd_leases_clear(set);
    mutexd_error_clear(err);
    return status;
}

static int cmd_acquire(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    const char *resource = a->positional[0];
    struct mutexd_lease lease = {0};
    struct mutexd_leases set = {0};
    struct mutexd_error err = {0};
    char owner[300];
    int64_t ttl, wait, limit;
    int shared;
    int status = duration_opt(opts, n, "--ttl", 0, &ttl, "acquire");
    if (status == 0)
        status = duration_opt(opts, n, "--wait", 0, &wait, "acquire");
    if (status == 0)
        status = holders_opts(opts, n, &limit, &shared, "acquire");
    if (status != 0)
        goto out;
    struct mutexd_acquire_options o = {
        .owner = mxctl_opt(opts, n, "--owner"),
        .ttl_ms = ttl,
        .wait_ms = wait,
        .lease_id = mxctl_opt(opts, n, "--lease-id"),
        .metadata = mxctl_opt(opts, n, "--metadata"),
        .limit = limit,
        .shared = shared,
    };
    if (o.owner == NULL) {
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
            strcpy(host, "localhost");
        snprintf(owner, sizeof(owner), "%s:%ld", host, (long)getppid());
        o.owner = owner;
    }
    if (a->npositional > 1) {
        /* Several names: one request for the set. */
        size_t count = (size_t)a->npositional;
        mutexd_result r = mutexd_acquire_many(ctl->client, a->positional, count, &o, &set, &err);
        return show_leases(ctl, a->positional, count, r, &set, &err);
    }
    mutexd_result r = mutexd_acquire(ctl->client, resource, &o, &lease, &err);
    return show_lease(ctl, resource, r, &lease, &err);
out:
    mutexd_lease_clear(&lease);
    mutexd_error_clear(&err);
    return status;
}

static int cmd_renew(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    const char *resource = a->positional[0];
    /* RESOURCE... LEASE_ID: the lease id is the last word. */
    size_t count = (size_t)a->npositional - 1;
    const char *lease_id = a->positional[count];
    struct mutexd_lease lease = {0};
    struct mutexd_leases set = {0};
    struct mutexd_error err = {0};
    int64_t ttl;
    int status = duration_opt(opts, n, "--ttl", 0, &ttl, "renew");
    if (status != 0)
        goto out;
    struct mutexd_renew_options o = {.ttl_ms = ttl, .metadata = mxctl_opt(opts, n, "--metadata")};
    if (count > 1) {
        mutexd_result r =
            mutexd_renew_many(ctl->client, a->positional, count, lease_id, &o, &set, &err);
        return show_leases(ctl, a->positional, count, r, &set, &err);
    }
    mutexd_result r = mutexd_renew(ctl->client, resource, lease_id, &o, &lease, &err);
    return show_lease(ctl, resource, r, &lease, &err);
out:
    mutexd_lease_clear(&lease);
    mutexd_error_clear(&err);
    return status;
}

/* {"leases":[{"resource":...,"released":true}...]}, as the API answers the release of a set. */
static void print_released_json(const char *const *names, size_t n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *list = o != NULL ? cJSON_AddArrayToObject(o, "leases") : NULL;
    char *text = NULL;
    int ok = list != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *item = cJSON_CreateObject();
        ok = item != NULL && cJSON_AddItemToArray(list, item) &&
             cJSON_AddStringToObject(item, "resource", names[i]) != NULL &&
             cJSON_AddBoolToObject(item, "released", 1) != NULL;
    }
    if (ok)
        text = cJSON_PrintUnformatted(o);
    puts(text != NULL ? text : "{}");
    free(text);
    cJSON_Delete(o);
}

/* Whether the error of a call about a set names `name` (a resource held, or lost). */
static int error_names_it(const struct mutexd_error *err, const char *name)
{
    char **named = NULL;
    size_t count = 0;
    int found = 0;
    if (mutexd_error_resources(err, &named, &count) == MUTEXD_OK) {
        for (size_t i = 0; i < count && !found; i++)
            found = strcmp(named[i], name) == 0;
    }
    free(named);
    return found;
}

static int cmd_release(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    (void)opts;
    (void)n;
    const char *resource = a->positional[0];
    size_t count = (size_t)a->npositional - 1;
    const char *lease_id = a->positional[count];
    struct mutexd_error err = {0};
    int status = 0;
    if (count > 1) {
        mutexd_result r = mutexd_release_many(ctl->client, a->positional, count, lease_id, &err);
        if (r == MUTEXD_OK && ctl->json) {
            print_released_json(a->positional, count);
        } else if (r == MUTEXD_OK || (r == MUTEXD_LOST && !ctl->json)) {
            /* Lost: the others were released all the same. */
            for (size_t i = 0; i < count; i++) {
                if (r == MUTEXD_OK || !error_names_it(&err, a->positional[i]))
                    printf("released %s\n", a->positional[i]);
            }
        }
        if (r != MUTEXD_OK)
            status = fail_set(ctl, a->positional, count, r, &err);
        mutexd_error_clear(&err);
        return status;
    }
    mutexd_result r = mutexd_release(ctl->client, resource, lease_id, &err);
    if (r != MUTEXD_OK)
        status = fail(ctl, resource, r, &err);
    else if (ctl->json)
        print_flag_json(resource, "released", 1);
    else
        printf("released %s\n", resource);
    mutexd_error_clear(&err);
    return status;
}

static int cmd_break(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    const char *resource = a->positional[0];
    struct mutexd_error err = {0};
    int status = 0, broken = 0;
    const char *lease_id = mxctl_opt(opts, n, "--lease-id");
    mutexd_result r = mutexd_break_lease(ctl->client, resource, lease_id,
                                         mxctl_opt(opts, n, "--reason"), &broken, &err);
    if (r != MUTEXD_OK)
        status = fail(ctl, resource, r, &err);
    else if (ctl->json)
        print_flag_json(resource, "broken", broken);
    else if (broken)
        printf("broken %s\n", resource);
    else if (lease_id != NULL)
        printf("%s: lease %s was not held\n", resource, lease_id);
    else
        printf("%s was not held\n", resource);
    mutexd_error_clear(&err);
    return status;
}

static int cmd_status(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    (void)opts;
    (void)n;
    const char *resource = a->positional[0];
    struct mutexd_state state = {0};
    struct mutexd_error err = {0};
    int status = 0;
    mutexd_result r = mutexd_get(ctl->client, resource, &state, &err);
    if (r != MUTEXD_OK)
        status = fail(ctl, resource, r, &err);
    else if (ctl->json)
        puts(state.json);
    else
        print_state(&state);
    mutexd_state_clear(&state);
    mutexd_error_clear(&err);
    return status;
}

static int cmd_list(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    (void)a;
    struct mutexd_list_options o = {
        .prefix = mxctl_opt(opts, n, "--prefix"),
        .cursor = mxctl_opt(opts, n, "--cursor"),
    };
    const char *limit = mxctl_opt(opts, n, "--limit");
    int64_t lim = 0;
    if (limit != NULL && mxctl_parse_int(limit, 1, 1000, &lim) != 0)
        return usage_error("list", "--limit must be a whole number from 1 to 1000, not '%s'",
                           limit);
    int one_page = limit != NULL || o.cursor != NULL;
    o.limit = one_page ? (int)lim : 1000;

    struct mutexd_page *pages = NULL;
    size_t npages = 0;
    struct mutexd_error err = {0};
    int status = MXCTL_EXIT_FAILED;
    for (;;) {
        struct mutexd_page *grown = realloc(pages, (npages + 1) * sizeof(*pages));
        if (grown == NULL) {
            fprintf(stderr, "mutexctl: out of memory\n");
            goto out;
        }
        pages = grown;
        memset(&pages[npages], 0, sizeof(*pages));
        mutexd_result r = mutexd_list(ctl->client, &o, &pages[npages], &err);
        if (r != MUTEXD_OK) {
            status = fail(ctl, NULL, r, &err);
            goto out;
        }
        o.cursor = pages[npages].next_cursor;
        npages++;
        if (one_page || o.cursor == NULL)
            break;
    }
    status = 0;
    if (ctl->json && one_page) {
        puts(pages[0].json);
    } else if (ctl->json) {
        fputs("{\"resources\":[", stdout);
        const char *sep = "";
        for (size_t p = 0; p < npages; p++) {
            for (size_t i = 0; i < pages[p].count; i++) {
                printf("%s%s", sep, pages[p].resources[i].json);
                sep = ",";
            }
        }
        puts("],\"next_cursor\":null}");
    } else {
        print_table(pages, npages);
        if (one_page && pages[0].next_cursor != NULL)
            fprintf(stderr, "next cursor: %s\n", pages[0].next_cursor);
    }
out:
    for (size_t p = 0; p < npages; p++)
        mutexd_page_clear(&pages[p]);
    free(pages);
    mutexd_error_clear(&err);
    return status;
}

/* ---- Until stopped: watch and events ------------------------------------------------------ */

/* SIGINT and SIGTERM end the loops of watch and events with status 0: at once while they
 * wait on the server, or right after the line being printed. */
static volatile sig_atomic_t stop_requested, printing;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
    if (!printing)
        _exit(MXCTL_EXIT_OK);
}

static void stop_on_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Around every line (or list) printed by a loop: 1 when a signal asked to stop meanwhile. */
static void begin_output(void)
{
    printing = 1;
}

static int end_output(void)
{
    fflush(stdout);
    printing = 0;
    return stop_requested;
}

/* A list of the held resources under a prefix, every page of it. */
struct prefix_list {
    struct mutexd_page *pages;
    size_t npages;
    uint64_t index; /* the first page's change index */
};

static void prefix_list_clear(struct prefix_list *l)
{
    for (size_t p = 0; p < l->npages; p++)
        mutexd_page_clear(&l->pages[p]);
    free(l->pages);
    memset(l, 0, sizeof(*l));
}

/* Reads the list under `prefix`: the first page by a list watch from `index` (wait_ms 0:
 * at once), the others after it with the cursor. */
static mutexd_result read_prefix_list(struct ctl *ctl, const char *prefix, uint64_t index,
                                      int64_t wait_ms, struct prefix_list *out,
                                      struct mutexd_error *err)
{
    struct prefix_list l = {0};
    struct mutexd_list_options o = {.prefix = prefix, .limit = 1000};
    mutexd_result r = MUTEXD_OK;
    for (;;) {
        struct mutexd_page *grown = realloc(l.pages, (l.npages + 1) * sizeof(*l.pages));
        if (grown == NULL) {
            r = MUTEXD_ERR_NOMEM;
            break;
        }
        l.pages = grown;
        memset(&l.pages[l.npages], 0, sizeof(*l.pages));
        r = l.npages == 0
                ? mutexd_list_watch(ctl->client, &o, index, wait_ms, &l.pages[0], &l.index, err)
                : mutexd_list(ctl->client, &o, &l.pages[l.npages], err);
        if (r != MUTEXD_OK)
            break;
        o.cursor = l.pages[l.npages].next_cursor;
        l.npages++;
        if (o.cursor == NULL)
            break;
    }
    if (r != MUTEXD_OK) {
        prefix_list_clear(&l);
        return r;
    }
    prefix_list_clear(out);
    *out = l;
    return MUTEXD_OK;
}

static size_t prefix_list_count(const struct prefix_list *l)
{
    size_t n = 0;
    for (size_t p = 0; p < l->npages; p++)
        n += l->pages[p].count;
    return n;
}

/* 1 when both lists hold the same resources at the same indexes (nothing under the prefix
 * changed between them, or what changed changed back). */
static int same_resources(const struct prefix_list *a, const struct prefix_list *b)
{
    if (prefix_list_count(a) != prefix_list_count(b))
        return 0;
    size_t pa = 0, ia = 0;
    for (size_t pb = 0; pb < b->npages; pb++) {
        for (size_t ib = 0; ib < b->pages[pb].count; ib++) {
            while (ia >= a->pages[pa].count) {
                pa++;
                ia = 0;
            }
            const struct mutexd_state *x = &a->pages[pa].resources[ia++];
            const struct mutexd_state *y = &b->pages[pb].resources[ib];
            if (x->index != y->index || strcmp(x->resource, y->resource) != 0)
                return 0;
        }
    }
    return 1;
}

/* One list of watch --prefix: {"index":N,"resources":[...]} with --json, else a line and a
 * table with a row for every holder. */
static void print_prefix_list(const struct ctl *ctl, const struct prefix_list *l)
{
    if (ctl->json) {
        printf("{\"index\":%" PRIu64 ",\"resources\":[", l->index);
        const char *sep = "";
        for (size_t p = 0; p < l->npages; p++) {
            for (size_t i = 0; i < l->pages[p].count; i++) {
                printf("%s%s", sep, l->pages[p].resources[i].json);
                sep = ",";
            }
        }
        puts("]}");
        return;
    }
    printf("index=%" PRIu64 " held=%zu\n", l->index, prefix_list_count(l));
    enum { COLS = 7 };
    static const char *const head[COLS] = {"RESOURCE", "LIMIT",         "OWNER",  "FENCING_TOKEN",
                                           "MODE",     "EXPIRES_IN_MS", "WAITERS"};
    int width[COLS];
    for (int c = 0; c < COLS; c++)
        width[c] = (int)strlen(head[c]);
    char num[4][32];
    for (int pass = 0; pass < 2 && prefix_list_count(l) > 0; pass++) {
        if (pass == 1)
            print_row(head, width, COLS);
        for (size_t p = 0; p < l->npages; p++) {
            for (size_t i = 0; i < l->pages[p].count; i++) {
                const struct mutexd_state *s = &l->pages[p].resources[i];
                for (size_t h = 0; h < s->holder_count; h++) {
                    const struct mutexd_holder *hd = &s->holders[h];
                    snprintf(num[0], sizeof(num[0]), "%" PRId64, s->limit);
                    snprintf(num[1], sizeof(num[1]), "%" PRIu64, hd->fencing_token);
                    snprintf(num[2], sizeof(num[2]), "%" PRId64, hd->expires_in_ms);
                    snprintf(num[3], sizeof(num[3]), "%" PRId64, s->waiters);
                    const char *cell[COLS] = {s->resource,
                                              num[0],
                                              hd->owner != NULL ? hd->owner : "-",
                                              num[1],
                                              hd->shared ? "shared" : "exclusive",
                                              num[2],
                                              num[3]};
                    for (int c = 0; pass == 0 && c < COLS; c++) {
                        int w = (int)strlen(cell[c]);
                        width[c] = w > width[c] ? w : width[c];
                    }
                    if (pass == 1)
                        print_row(cell, width, COLS);
                }
            }
        }
    }
}

static int watch_prefix(struct ctl *ctl, const char *prefix, int64_t wait, int64_t count)
{
    struct prefix_list seen = {0}, now = {0};
    struct mutexd_error err = {0};
    int64_t printed = 0;
    int status = 0, first = 1;
    stop_on_signals();
    for (;;) {
        int64_t started = mutexd_monotonic_ms();
        mutexd_result r = read_prefix_list(ctl, prefix, seen.index, first ? 0 : wait, &now, &err);
        /* Answered before the wait ran out, yet the list reads the same: the server may
         * answer a moment before the change reads in the list. Read it once more, shortly. */
        if (r == MUTEXD_OK && !first && mutexd_monotonic_ms() - started < wait - 50 &&
            same_resources(&seen, &now)) {
            usleep(100000);
            r = read_prefix_list(ctl, prefix, seen.index, 0, &now, &err);
        }
        if (r != MUTEXD_OK && mutexd_error_is_temporary(r, &err)) {
            fprintf(stderr, "mutexctl: %s: %s; trying again\n", prefix, err.message);
            sleep(1);
            continue;
        }
        if (r != MUTEXD_OK) {
            status = fail(ctl, prefix, r, &err);
            break;
        }
        int changed = first || !same_resources(&seen, &now);
        /* Watch on from the newest index, whether or not the list changed. */
        prefix_list_clear(&seen);
        seen = now;
        memset(&now, 0, sizeof(now));
        first = 0;
        if (!changed)
            continue;
        begin_output();
        print_prefix_list(ctl, &seen);
        if (!ctl->json)
            putchar('\n');
        if (end_output() || (count > 0 && ++printed >= count))
            break;
    }
    prefix_list_clear(&seen);
    prefix_list_clear(&now);
    mutexd_error_clear(&err);
    return status;
}

static int cmd_watch(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    const char *resource = a->npositional > 0 ? a->positional[0] : NULL;
    const char *prefix = mxctl_opt(opts, n, "--prefix");
    if (prefix != NULL && resource != NULL)
        return usage_error("watch", "give RESOURCE or --prefix, not both");
    if (prefix == NULL && resource == NULL)
        return usage_error("watch", "missing RESOURCE or --prefix");
    /* No resource name ends with '/': "jobs/" can only mean the resources under it. */
    if (resource != NULL && resource[0] != '\0' && resource[strlen(resource) - 1] == '/')
        prefix = resource;
    struct mutexd_state state = {0};
    struct mutexd_error err = {0};
    uint64_t index = 0;
    int64_t wait, count = 0, printed = 0;
    const char *v;
    int status = duration_opt(opts, n, "--wait", 60000, &wait, "watch");
    if (status != 0)
        goto out;
    if ((v = mxctl_opt(opts, n, "--count")) != NULL &&
        mxctl_parse_int(v, 1, INT64_MAX, &count) != 0) {
        status = usage_error("watch", "--count must be a whole number from 1, not '%s'", v);
        goto out;
    }
    int have_index = (v = mxctl_opt(opts, n, "--index")) != NULL;
    if (have_index && prefix != NULL) {
        status = usage_error("watch", "--index does not go with a prefix");
        goto out;
    }
    if (have_index && mxctl_parse_u64(v, &index) != 0) {
        status = usage_error("watch", "--index must be a whole number, not '%s'", v);
        goto out;
    }
    if (prefix != NULL) {
        status = watch_prefix(ctl, prefix, wait, count);
        goto out;
    }
    int first = !have_index;
    for (;;) {
        mutexd_result r = first ? mutexd_get(ctl->client, resource, &state, &err)
                                : mutexd_watch(ctl->client, resource, index, wait, &state, &err);
        if (r != MUTEXD_OK && mutexd_error_is_temporary(r, &err)) {
            fprintf(stderr, "mutexctl: %s: %s; trying again\n", resource, err.message);
            sleep(1);
            continue;
        }
        if (r != MUTEXD_OK) {
            status = fail(ctl, resource, r, &err);
            goto out;
        }
        if (first || state.index != index) {
            print_watch_line(ctl, &state);
            index = state.index;
            if (count > 0 && ++printed >= count)
                break;
        }
        first = 0;
    }
    status = 0;
out:
    mutexd_state_clear(&state);
    mutexd_error_clear(&err);
    return status;
}

/* An event as a logfmt line. */
static void print_event(const struct ctl *ctl, const struct mutexd_event *e)
{
    if (ctl->json) {
        puts(e->json);
        return;
    }
    printf("index=%" PRIu64 " at=", e->index);
    print_value(e->at != NULL ? e->at : "");
    fputs(" resource=", stdout);
    print_value(e->resource);
    fputs(" type=", stdout);
    print_value(e->type);
    fputs(" owner=", stdout);
    print_value(e->owner != NULL ? e->owner : "");
    printf(" fencing_token=%" PRIu64 " shared=%s limit=%" PRId64 "\n", e->fencing_token,
           e->shared ? "true" : "false", e->limit);
}

static int cmd_events(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    (void)a;
    struct mutexd_event_page page = {0};
    struct mutexd_error err = {0};
    struct mutexd_events_options o = {.prefix = mxctl_opt(opts, n, "--prefix"), .limit = 1000};
    int follow = mxctl_opt(opts, n, "--follow") != NULL;
    uint64_t after = 0;
    int64_t wait, count = 0, printed = 0, lim = 0;
    const char *v;
    int status = duration_opt(opts, n, "--wait", 60000, &wait, "events");
    if (status != 0)
        goto out;
    if (wait <= 0 || wait > 86400000) {
        status = usage_error("events", "--wait must be from 1ms to 24h");
        goto out;
    }
    if ((v = mxctl_opt(opts, n, "--count")) != NULL &&
        mxctl_parse_int(v, 1, INT64_MAX, &count) != 0) {
        status = usage_error("events", "--count must be a whole number from 1, not '%s'", v);
        goto out;
    }
    if ((v = mxctl_opt(opts, n, "--limit")) != NULL && mxctl_parse_int(v, 1, 1000, &lim) != 0) {
        status =
            usage_error("events", "--limit must be a whole number from 1 to 1000, not '%s'", v);
        goto out;
    }
    if (lim > 0)
        o.limit = (int)lim;
    int have_after = (v = mxctl_opt(opts, n, "--after")) != NULL;
    if (have_after && mxctl_parse_u64(v, &after) != 0) {
        status = usage_error("events", "--after must be a whole number, not '%s'", v);
        goto out;
    }
    stop_on_signals();
    /* Without --after, the first answer starts at the oldest event kept, whatever went
     * before it: no warning for that one. */
    int warn = have_after, waiting = 0;
    for (;;) {
        o.wait_ms = waiting ? wait : 0;
        mutexd_result r = mutexd_events(ctl->client, after, &o, &page, &err);
        if (r != MUTEXD_OK && follow && mutexd_error_is_temporary(r, &err)) {
            fprintf(stderr, "mutexctl: events: %s; trying again\n", err.message);
            sleep(1);
            continue;
        }
        if (r != MUTEXD_OK) {
            status = fail(ctl, NULL, r, &err);
            goto out;
        }
        if (page.truncated && warn)
            fprintf(stderr,
                    "mutexctl: warning: changes after index %" PRIu64
                    " were dropped by the server (it keeps the last --event-history only, and "
                    "none from before its start); some were missed\n",
                    after);
        warn = 1;
        begin_output();
        for (size_t i = 0; i < page.count && (count == 0 || printed < count); i++, printed++)
            print_event(ctl, &page.events[i]);
        if (end_output() || (count > 0 && printed >= count))
            break;
        after = page.next > after ? page.next : after;
        /* A full answer may have more behind it: ask again at once. */
        if (page.count >= (size_t)o.limit) {
            waiting = 0;
            continue;
        }
        if (!follow)
            break;
        waiting = 1;
    }
out:
    mutexd_event_page_clear(&page);
    mutexd_error_clear(&err);
    return status;
}

static int cmd_whoami(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    (void)opts;
    (void)n;
    (void)a;
    struct mutexd_whoami who = {0};
    struct mutexd_error err = {0};
    int status = 0;
    mutexd_result r = mutexd_whoami(ctl->client, &who, &err);
    if (r != MUTEXD_OK) {
        status = fail(ctl, NULL, r, &err);
    } else if (ctl->json) {
        puts(who.json);
    } else {
        fputs("name=", stdout);
        print_value(who.name != NULL ? who.name : "-");
        fputs(" scopes=", stdout);
        for (size_t i = 0; i < who.scope_count; i++)
            printf("%s%s", i > 0 ? "," : "", who.scopes[i]);
        putchar('\n');
    }
    mutexd_whoami_clear(&who);
    mutexd_error_clear(&err);
    return status;
}

static int cmd_run(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    /* The resources: RESOURCE, then every --resource. */
    const char *resources[MUTEXD_MANY_MAX];
    size_t count = 0;
    for (int i = 0; i < a->npositional; i++)
        resources[count++] = a->positional[i];
    for (int i = 0; i < a->nvalues; i++) {
        if (count == MUTEXD_MANY_MAX)
            return usage_error("run", "a set is at most %d resources", MUTEXD_MANY_MAX);
        resources[count++] = a->values[i];
    }
    if (count == 0)
        return usage_error("run", "missing RESOURCE");
    if (a->nrest == 0)
        return usage_error("run", "%s",
                           a->nvalues > 0 ? "no command to run (with --resource, "
                                            "give it after --)"
                                          : "no command to run");
    struct mxctl_run_config cfg = {
        .resource = resources[0],
        .resources = resources,
        .nresources = count,
        .owner = mxctl_opt(opts, n, "--owner"),
        .metadata = mxctl_opt(opts, n, "--metadata"),
        .request_timeout_ms = (long)ctl->timeout_ms,
        .quiet = ctl->quiet,
        .argv = a->rest,
    };
    int status = duration_opt(opts, n, "--ttl", 15000, &cfg.ttl_ms, "run");
    if (status == 0)
        status = duration_opt(opts, n, "--wait", 0, &cfg.wait_ms, "run");
    if (status == 0)
        status = duration_opt(opts, n, "--grace", 5000, &cfg.grace_ms, "run");
    if (status == 0)
        status = holders_opts(opts, n, &cfg.limit, &cfg.shared, "run");
    if (status != 0)
        return status;
    if (cfg.ttl_ms < 3)
        return usage_error("run", "--ttl must be at least 3ms");
    const char *parent = mxctl_opt(opts, n, "--parent-pid");
    if (parent != NULL) {
        char *end;
        errno = 0;
        long v = strtol(parent, &end, 10);
        if (errno != 0 || end == parent || *end != '\0' || v < 1 || v > INT_MAX)
            return usage_error("run", "--parent-pid: not a process id: '%s'", parent);
        cfg.parent_pid = (int)v;
    }
    return mxctl_run(ctl->client, &cfg);
}

static int cmd_check(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    (void)ctl;
    (void)a;
    const char *file = mxctl_opt(opts, n, "--lease-file");
    if (file == NULL)
        file = getenv("MUTEXD_LEASE_FILE");
    if (file == NULL || file[0] == '\0')
        return usage_error("check", "no lease file: run under `mutexctl run`, or give "
                                    "--lease-file");
    int held = mxctl_check_lease_file(file);
    if (held < 0) {
        fprintf(stderr, "mutexctl: check: cannot read %s: %s\n", file, strerror(errno));
        return 1;
    }
    if (!held) {
        fprintf(stderr, "mutexctl: check: the lease is lost (or its deadline has passed)\n");
        return 1;
    }
    return 0;
}

/* The token file splits lines at blanks and takes '#' for a comment. */
static int is_file_word(const char *s, size_t max)
{
    size_t n = strlen(s);
    return n > 0 && n <= max && s[0] != '#' && strpbrk(s, " \t\r\n") == NULL;
}

static int cmd_token(struct ctl *ctl, struct mxctl_opt *opts, size_t n, struct mxctl_args *a)
{
    (void)ctl;
    char line[4096];
    const char *token = a->positional[1];
    const char *name = mxctl_opt(opts, n, "--name");
    const char *scopes = mxctl_opt(opts, n, "--scopes");
    const char *prefix = mxctl_opt(opts, n, "--prefix");
    name = name != NULL ? name : "token";
    scopes = scopes != NULL ? scopes : "read";
    if (strcmp(a->positional[0], "hash") != 0)
        return usage_error("token", "unknown token command '%s': use hash", a->positional[0]);
    if (strcmp(token, "-") == 0) {
        if (fgets(line, sizeof(line), stdin) == NULL)
            return usage_error("token", "no token on stdin");
        line[strcspn(line, "\r\n")] = '\0';
        token = line;
    }
    if (token[0] == '\0')
        return usage_error("token", "the token is empty");
    if (!is_file_word(name, 63))
        return usage_error("token", "--name must be 1 to 63 bytes without blanks, not '%s'", name);
    if (prefix != NULL && !is_file_word(prefix, 256))
        return usage_error("token", "--prefix must be 1 to 256 bytes without blanks");
    char list[128];
    if (!is_file_word(scopes, sizeof(list) - 1))
        return usage_error("token",
                           "--scopes: a comma-separated list of read, write, admin, metrics");
    snprintf(list, sizeof(list), "%s", scopes);
    for (char *save = NULL, *s = strtok_r(list, ",", &save); s != NULL;
         s = strtok_r(NULL, ",", &save)) {
        if (strcmp(s, "read") != 0 && strcmp(s, "write") != 0 && strcmp(s, "admin") != 0 &&
            strcmp(s, "metrics") != 0)
            return usage_error("token", "unknown scope '%s': use read, write, admin and metrics",
                               s);
    }
    if (strspn(scopes, ",") == strlen(scopes))
        return usage_error("token",
                           "--scopes: a comma-separated list of read, write, admin, metrics");

    uint8_t digest[32];
    unsigned int dlen = 0;
    if (EVP_Digest(token, strlen(token), digest, &dlen, EVP_sha256(), NULL) != 1 || dlen != 32) {
        fprintf(stderr, "mutexctl: token hash: SHA-256 failed\n");
        return 3;
    }
    printf("%s sha256:", name);
    for (unsigned i = 0; i < dlen; i++)
        printf("%02x", digest[i]);
    printf(" %s%s%s\n", scopes, prefix != NULL ? " " : "", prefix != NULL ? prefix : "");
    return 0;
}

/* ---- main --------------------------------------------------------------------------------- */

#define MAX_COMMAND_OPTS 10

struct command {
    const char *name;
    const char *usage;
    int min_positional, max_positional, with_rest;
    int offline;                             /* sends nothing: needs no server URL */
    struct mxctl_opt opts[MAX_COMMAND_OPTS]; /* beyond the global ones; unused: no name */
    int (*fn)(struct ctl *, struct mxctl_opt *, size_t, struct mxctl_args *);
};

#define OPT(name)                                                                                  \
    {                                                                                              \
        name, 1, NULL                                                                              \
    }
#define FLAG(name)                                                                                 \
    {                                                                                              \
        name, 0, NULL                                                                              \
    }
#define REPEATED(name)                                                                             \
    {                                                                                              \
        name, MXCTL_REPEATED, NULL                                                                 \
    }

static const struct command commands[] = {
    {.name = "acquire",
     .usage = acquire_usage,
     .min_positional = 1,
     .max_positional = MUTEXD_MANY_MAX,
     .opts = {OPT("--owner"), OPT("--ttl"), OPT("--wait"), OPT("--lease-id"), OPT("--metadata"),
              OPT("--limit"), FLAG("--shared")},
     .fn = cmd_acquire},
    {.name = "renew",
     .usage = renew_usage,
     .min_positional = 2,
     .max_positional = MUTEXD_MANY_MAX + 1,
     .opts = {OPT("--ttl"), OPT("--metadata")},
     .fn = cmd_renew},
    {.name = "release",
     .usage = release_usage,
     .min_positional = 2,
     .max_positional = MUTEXD_MANY_MAX + 1,
     .fn = cmd_release},
    {.name = "break",
     .usage = break_usage,
     .min_positional = 1,
     .max_positional = 1,
     .opts = {OPT("--reason"), OPT("--lease-id")},
     .fn = cmd_break},
    {.name = "status",
     .usage = status_usage,
     .min_positional = 1,
     .max_positional = 1,
     .fn = cmd_status},
    {.name = "get", .usage = get_usage, .min_positional = 1, .max_positional = 1, .fn = cmd_status},
    {.name = "list",
     .usage = list_usage,
     .opts = {OPT("--prefix"), OPT("--limit"), OPT("--cursor")},
     .fn = cmd_list},
    {.name = "watch",
     .usage = watch_usage,
     .min_positional = 0,
     .max_positional = 1,
     .opts = {OPT("--index"), OPT("--wait"), OPT("--count"), OPT("--prefix")},
     .fn = cmd_watch},
    {.name = "events",
     .usage = events_usage,
     .opts = {OPT("--prefix"), OPT("--after"), OPT("--limit"), FLAG("--follow"), OPT("--wait"),
              OPT("--count")},
     .fn = cmd_events},
    {.name = "whoami", .usage = whoami_usage, .fn = cmd_whoami},
    {.name = "run",
     .usage = run_usage,
     .min_positional = 0, /* RESOURCE, or --resource */
     .max_positional = 1,
     .with_rest = 1,
     .opts = {OPT("--ttl"), OPT("--wait"), OPT("--owner"), OPT("--grace"), OPT("--metadata"),
              OPT("--parent-pid"), OPT("--limit"), FLAG("--shared"), REPEATED("--resource")},
     .fn = cmd_run},
    {.name = "check",
     .usage = check_usage,
     .offline = 1,
     .opts = {OPT("--lease-file")},
     .fn = cmd_check},
    {.name = "token",
     .usage = token_usage,
     .min_positional = 2,
     .max_positional = 2,
     .offline = 1,
     .opts = {OPT("--name"), OPT("--scopes"), OPT("--prefix")},
     .fn = cmd_token},
};

static const struct mxctl_opt global_opts[] = {GLOBAL_OPTS};

/* Whether `word` is a global option that takes a value (so the next word is its value). */
static int global_takes_value(const char *word)
{
    for (size_t i = 0; i < NOPTS(global_opts); i++) {
        if (strcmp(word, global_opts[i].name) == 0)
            return global_opts[i].has_value;
    }
    return 0;
}

static int run_command(const struct command *cmd, int argc, char **argv)
{
    struct mxctl_opt opts[NOPTS(global_opts) + MAX_COMMAND_OPTS];
    size_t n = 0;
    for (size_t i = 0; i < NOPTS(global_opts); i++)
        opts[n++] = global_opts[i];
    for (size_t i = 0; i < MAX_COMMAND_OPTS && cmd->opts[i].name != NULL; i++)
        opts[n++] = cmd->opts[i];

    struct mxctl_args args;
    char err[256];
    if (mxctl_parse_args(argc, argv, opts, n, cmd->max_positional, cmd->with_rest, &args, err,
                         sizeof(err)) != 0)
        return usage_error(cmd->name, "%s", err);
    if (mxctl_opt(opts, n, "--help") != NULL) {
        fputs(cmd->usage, stdout);
        return 0;
    }
    if (mxctl_opt(opts, n, "--version") != NULL) {
        printf("mutexctl %s\n", MUTEXD_CLIENT_VERSION_STRING);
        return 0;
    }
    if (args.npositional < cmd->min_positional)
        return usage_error(cmd->name, "%s",
                           cmd->offline               ? "missing arguments"
                           : cmd->min_positional == 1 ? "missing RESOURCE"
                                                      : "missing RESOURCE or LEASE_ID");
    struct ctl ctl = {0};
    int status = cmd->offline ? 0 : setup(&ctl, opts, n, cmd->name);
    if (status == 0)
        status = cmd->fn(&ctl, opts, n, &args);
    mutexd_client_free(ctl.client);
    return status;
}

int main(int argc, char **argv)
{
    /* The command is the first word that is neither a global option nor the value of one. */
    int at = 1;
    while (at < argc && argv[at][0] == '-' && strcmp(argv[at], "--") != 0) {
        if (strcmp(argv[at], "--help") == 0 || strcmp(argv[at], "-h") == 0) {
            fputs(main_usage, stdout);
            return 0;
        }
        if (strcmp(argv[at], "--version") == 0) {
            printf("mutexctl %s\n", MUTEXD_CLIENT_VERSION_STRING);
            return 0;
        }
        at += global_takes_value(argv[at]) ? 2 : 1;
    }
    if (at >= argc) {
        fputs(main_usage, stderr);
        return MXCTL_EXIT_USAGE;
    }
    const struct command *cmd = NULL;
    for (size_t i = 0; i < NOPTS(commands); i++) {
        if (strcmp(argv[at], commands[i].name) == 0)
            cmd = &commands[i];
    }
    if (cmd == NULL)
        return usage_error(NULL, "unknown command '%s'", argv[at]);

    /* The command's words: the global options before its name, then those after it. */
    char **words = calloc((size_t)argc, sizeof(*words));
    if (words == NULL) {
        fprintf(stderr, "mutexctl: out of memory\n");
        return MXCTL_EXIT_FAILED;
    }
    int nwords = 0;
    for (int i = 1; i < argc; i++) {
        if (i != at)
            words[nwords++] = argv[i];
    }
    int status = run_command(cmd, nwords, words);
    free(words);
    return status;
}
