/*
 * The client of mutexd.h: one libcurl easy handle per client (so its connection is kept and
 * reused), one HTTP request per call.
 *
 * Layout: results and errors; the client; one request (URL, body, headers, answer); the
 * answer into a result; then one function per API call. Every call has the same shape: check
 * the arguments, build the path and the body, send, read the answer, and only then replace
 * the caller's output, so that a failed call leaves it as it was.
 */
#include "mutexd.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "client.h"
#include "decode.h"
#include "json.h"
#include "partition.h"

#define ANSWER_MAX  ((size_t)16 << 20) /* a list page of 1000 states with metadata: ~5 MB */
#define REQUEST_MAX ((size_t)4 << 20)  /* the server refuses more than 64 KiB; it says so */
#define URL_MAX     ((size_t)16 << 10)

#define DEFAULT_CONNECT_TIMEOUT_MS 5000L
#define DEFAULT_REQUEST_TIMEOUT_MS 30000L

/* Several servers: each call goes round them at most FAILOVER_ROUNDS times, pausing between
 * rounds for the Retry-After of a 503, else PAUSE_DEFAULT_MS, and never more than
 * PAUSE_MAX_MS. */
#define MAX_URLS         64
#define FAILOVER_ROUNDS  2
#define PAUSE_DEFAULT_MS 250
#define PAUSE_MAX_MS     2000

/* A partitioned group: the map is read again at most once a MAP_INTERVAL_MS (while partitions
 * move, every request may meet a surprise, and one reading a second is enough to follow), and
 * a reading takes at most MAP_TIMEOUT_MS, as it delays the call that saw the surprise. */
#define MAP_INTERVAL_MS 1000
#define MAP_TIMEOUT_MS  2000

/* ---- Results and errors ------------------------------------------------------------------- */

const char *mutexd_result_name(mutexd_result result)
{
    switch (result) {
    case MUTEXD_OK:
        return "ok";
    case MUTEXD_HELD:
        return "held";
    case MUTEXD_LOST:
        return "lost";
    case MUTEXD_ERR_API:
        return "api_error";
    case MUTEXD_ERR_TRANSPORT:
        return "transport_error";
    case MUTEXD_ERR_PROTOCOL:
        return "protocol_error";
    case MUTEXD_ERR_ARG:
        return "invalid_argument";
    case MUTEXD_ERR_NOMEM:
        return "out_of_memory";
    case MUTEXD_ERR_LIMIT_MISMATCH:
        return "limit_mismatch";
    }
    return "unknown";
}

int mutexd_error_is_temporary(mutexd_result result, const struct mutexd_error *error)
{
    if (result == MUTEXD_ERR_TRANSPORT)
        return 1;
    if (result != MUTEXD_ERR_API || error == NULL)
        return 0;
    return error->status == 503 || error->status == 429;
}

void mxc_error_vmessage(struct mutexd_error *err, const char *fmt, va_list ap)
{
    char text[1024];
    vsnprintf(text, sizeof(text), fmt, ap);
    free(err->message);
    err->message = strdup(text);
}

/* Sets the error's message (the library's own sentence) and returns `result`. */
__attribute__((format(printf, 3, 4))) static mutexd_result
fail(struct mutexd_error *err, mutexd_result result, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mxc_error_vmessage(err, fmt, ap);
    va_end(ap);
    return result;
}

/* Every call reports into the caller's error, or into a scratch one when it passed NULL. */
static struct mutexd_error *begin(struct mutexd_error *error, struct mutexd_error *scratch)
{
    memset(scratch, 0, sizeof(*scratch));
    struct mutexd_error *err = error != NULL ? error : scratch;
    mutexd_error_clear(err);
    return err;
}

static mutexd_result end(mutexd_result result, struct mutexd_error *err,
                         struct mutexd_error *scratch)
{
    if (result == MUTEXD_ERR_NOMEM && err->message == NULL)
        err->message = strdup("out of memory");
    if (err == scratch)
        mutexd_error_clear(scratch);
    return result;
}

/* ---- The client --------------------------------------------------------------------------- */

struct mutexd_client {
    CURL *curl;
    struct curl_slist *headers;
    char **urls; /* the servers, as given, without trailing '/' */
    size_t nurls;
    size_t next; /* the URL tried first: the one that last answered (or the active it named),
                  * or the one after the one that last failed */
    long request_timeout_ms;
    /* What the client was made with, for a copy of it (mxc_client_copy()). */
    char *token;
    char *ca_file;
    long connect_timeout_ms;
    int failed; /* the last request got no answer: the next one connects afresh */
    char errbuf[CURL_ERROR_SIZE];
    /* The partition map of GET /v1/servers: map_count is 0 until an answer shows a
     * partitioned group (then it is read), 1 once the group turned out not to be one (never
     * routed nor read again); above 1, owners[p] is the advertised URL of partition p's
     * owner, without trailing '/', or NULL while none owns it. */
    unsigned map_count;
    char **owners;
    int64_t map_read_at; /* mutexd_monotonic_ms() of the last reading; 0: never read */
    int map_due;         /* a surprise asked for a reading that the interval put off */
};

/* libcurl asks for curl_global_init() once, before any other call. */
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_code;

static void curl_init(void)
{
    curl_init_code = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t on_body(char *data, size_t size, size_t n, void *arg);
static size_t on_header(char *data, size_t size, size_t n, void *arg);

static int has_line_break(const char *s)
{
    return strpbrk(s, "\r\n") != NULL;
}

/* Adds the URL of `len` bytes at `url`, blanks around it left out. 0, or -1 when it is not
 * an http(s) URL (MUTEXD_ERR_ARG) or memory ran out (*nomem set). */
static int add_url(mutexd_client *c, const char *url, size_t len, int *nomem)
{
    while (len > 0 && (*url == ' ' || *url == '\t')) {
        url++;
        len--;
    }
    while (len > 0 && (url[len - 1] == ' ' || url[len - 1] == '\t'))
        len--;
    if ((len < 7 || strncasecmp(url, "http://", 7) != 0) &&
        (len < 8 || strncasecmp(url, "https://", 8) != 0))
        return -1;
    char *copy = strndup(url, len);
    if (copy == NULL || has_line_break(copy)) {
        *nomem = copy == NULL;
        free(copy);
        return -1;
    }
    for (size_t n = len; n > 0 && copy[n - 1] == '/'; n--)
        copy[n - 1] = '\0';
    c->urls[c->nurls++] = copy;
    return 0;
}

/* The URLs of the constructors: `count` of them, each split at commas when `split` is set. */
static mutexd_result add_urls(mutexd_client *c, const char *const *urls, size_t count, int split)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (urls[i] == NULL)
            return MUTEXD_ERR_ARG;
        total++;
        for (const char *p = urls[i]; split && *p != '\0'; p++)
            total += *p == ',';
    }
    if (total == 0 || total > MAX_URLS)
        return MUTEXD_ERR_ARG;
    c->urls = calloc(total, sizeof(*c->urls));
    if (c->urls == NULL)
        return MUTEXD_ERR_NOMEM;
    int nomem = 0;
    for (size_t i = 0; i < count; i++) {
        const char *p = urls[i];
        for (;;) {
            size_t len = split ? strcspn(p, ",") : strlen(p);
            if (add_url(c, p, len, &nomem) != 0)
                return nomem ? MUTEXD_ERR_NOMEM : MUTEXD_ERR_ARG;
            if (p[len] != ',' || !split)
                break;
            p += len + 1;
        }
    }
    return MUTEXD_OK;
}

static mutexd_result client_new(mutexd_client **client, const char *const *urls, size_t count,
                                int split, const struct mutexd_client_options *options)
{
    mutexd_result result = MUTEXD_ERR_ARG;
    mutexd_client *c = NULL;
    char *auth = NULL;
    struct mutexd_client_options none = {0};
    const struct mutexd_client_options *o = options != NULL ? options : &none;

    if (client == NULL)
        goto out;
    *client = NULL;
    if (urls == NULL || (o->token != NULL && has_line_break(o->token)) ||
        o->connect_timeout_ms < 0 || o->request_timeout_ms < 0)
        goto out;

    result = MUTEXD_ERR_NOMEM;
    pthread_once(&curl_once, curl_init);
    if (curl_init_code != CURLE_OK)
        goto out;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        goto out;
    result = add_urls(c, urls, count, split);
    if (result != MUTEXD_OK)
        goto out;
    result = MUTEXD_ERR_NOMEM;
    c->request_timeout_ms =
        o->request_timeout_ms > 0 ? o->request_timeout_ms : DEFAULT_REQUEST_TIMEOUT_MS;
    c->connect_timeout_ms = o->connect_timeout_ms;
    if ((o->token != NULL && (c->token = strdup(o->token)) == NULL) ||
        (o->ca_file != NULL && (c->ca_file = strdup(o->ca_file)) == NULL))
        goto out;
    struct curl_slist *h = NULL;
    const char *fixed[] = {"Accept: application/json", "Content-Type: application/json", "Expect:"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        h = curl_slist_append(c->headers, fixed[i]);
        if (h == NULL)
            goto out;
        c->headers = h;
    }
    if (o->token != NULL) {
        if (asprintf(&auth, "Authorization: Bearer %s", o->token) < 0) {
            auth = NULL;
            goto out;
        }
        h = curl_slist_append(c->headers, auth);
        if (h == NULL)
            goto out;
        c->headers = h;
    }

    c->curl = curl_easy_init();
    if (c->curl == NULL)
        goto out;
    CURL *e = c->curl;
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, "libmutexd/" MUTEXD_CLIENT_VERSION_STRING) !=
           CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                            o->connect_timeout_ms > 0 ? o->connect_timeout_ms
                                                      : DEFAULT_CONNECT_TIMEOUT_MS) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK;
    /* Names with "." or ".." segments must reach the server as they are, to be refused
     * there, not be folded into another name on the way. */
    bad |= curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L) != CURLE_OK;
    /* Long waits (acquire with wait_ms, watches) sit idle on the connection. */
    bad |= curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L) != CURLE_OK;
    /* Every new connection looks the name up again: a server that restarts may come back
     * at another address (a container's). */
    bad |= curl_easy_setopt(e, CURLOPT_DNS_CACHE_TIMEOUT, 0L) != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
    bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
#endif
    if (o->ca_file != NULL)
        bad |= curl_easy_setopt(e, CURLOPT_CAINFO, o->ca_file) != CURLE_OK;
    if (bad)
        goto out;
    *client = c;
    c = NULL;
    result = MUTEXD_OK;
out:
    free(auth);
    mutexd_client_free(c);
    return result;
}

mutexd_result mutexd_client_new(mutexd_client **client, const char *url,
                                const struct mutexd_client_options *options)
{
    return client_new(client, url != NULL ? &url : NULL, 1, 1, options);
}

mutexd_result mutexd_client_new_list(mutexd_client **client, const char *const *urls, size_t count,
                                     const struct mutexd_client_options *options)
{
    return client_new(client, urls, count, 0, options);
}

void mutexd_client_free(mutexd_client *client)
{
    if (client == NULL)
        return;
    if (client->curl != NULL)
        curl_easy_cleanup(client->curl);
    curl_slist_free_all(client->headers);
    for (size_t i = 0; i < client->nurls; i++)
        free(client->urls[i]);
    free(client->urls);
    for (unsigned p = 0; client->owners != NULL && p < client->map_count; p++)
        free(client->owners[p]);
    free(client->owners);
    free(client->token);
    free(client->ca_file);
    free(client);
}

mutexd_result mxc_client_copy(const mutexd_client *client, mutexd_client **copy)
{
    struct mutexd_client_options o = {
        .token = client->token,
        .ca_file = client->ca_file,
        .connect_timeout_ms = client->connect_timeout_ms,
        .request_timeout_ms = client->request_timeout_ms,
    };
    mutexd_result result =
        client_new(copy, (const char *const *)client->urls, client->nurls, 0, &o);
    if (result != MUTEXD_OK)
        return result;
    mutexd_client *c = *copy;
    /* What the client learned: the server that answered last goes first, and the partition
     * map routes as it does (a copy of it that could not be made is read again). */
    c->next = client->next;
    c->map_count = client->map_count;
    c->map_read_at = client->map_read_at;
    c->map_due = client->map_due;
    if (client->map_count > 1) {
        c->owners = calloc(client->map_count, sizeof(*c->owners));
        for (unsigned p = 0; c->owners != NULL && p < client->map_count; p++) {
            if (client->owners[p] != NULL && (c->owners[p] = strdup(client->owners[p])) == NULL)
                c->map_due = 1;
        }
        if (c->owners == NULL) {
            c->map_count = 0; /* learned again from the first answer */
            c->map_read_at = 0;
        }
    }
    return MUTEXD_OK;
}

long mxc_client_timeout(const mutexd_client *client)
{
    return client->request_timeout_ms;
}

const char *mutexd_client_url(const mutexd_client *client)
{
    return client != NULL ? client->urls[client->next] : NULL;
}

/* ---- One request -------------------------------------------------------------------------- */

struct answer {
    long status;
    struct mxc_buf body;
    long retry_after_s;
    char *request_id;
    char served_by[512]; /* Mutexd-Served-By: the active of a group that served it, or "" */
    int partitioned;     /* it had Mutexd-Partition: the server is one of a partitioned group */
};

static void answer_init(struct answer *a)
{
    memset(a, 0, sizeof(*a));
    mxc_buf_init(&a->body, ANSWER_MAX);
    a->retry_after_s = -1;
}

static void answer_free(struct answer *a)
{
    mxc_buf_free(&a->body);
    free(a->request_id);
    a->request_id = NULL;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct answer *a = arg;
    mxc_buf_add(&a->body, data, size * n);
    return mxc_buf_ok(&a->body) == 0 ? size * n : 0; /* 0 stops the transfer */
}

/* When `line` is the header `name`, its value (trimmed) and 1; else 0. */
static int header_value(const char *line, size_t len, const char *name, const char **value,
                        size_t *vlen)
{
    size_t n = strlen(name);
    if (len <= n || strncasecmp(line, name, n) != 0 || line[n] != ':')
        return 0;
    const char *p = line + n + 1, *end = line + len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *value = p;
    *vlen = (size_t)(end - p);
    return 1;
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct answer *a = arg;
    size_t len = size * n;
    const char *v;
    size_t vlen;
    if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
        /* A new status line (after a 100 Continue, say): forget the headers before it. */
        a->retry_after_s = -1;
        free(a->request_id);
        a->request_id = NULL;
        a->served_by[0] = '\0';
        a->partitioned = 0;
    } else if (header_value(data, len, "Mutexd-Partition", &v, &vlen)) {
        a->partitioned = 1;
    } else if (header_value(data, len, "Mutexd-Served-By", &v, &vlen)) {
        if (vlen < sizeof(a->served_by)) {
            memcpy(a->served_by, v, vlen);
            a->served_by[vlen] = '\0';
        }
    } else if (header_value(data, len, "Retry-After", &v, &vlen)) {
        /* The server sends whole seconds; an HTTP date is left as "not given". */
        long s = 0;
        size_t i = 0;
        for (; i < vlen && i < 9 && v[i] >= '0' && v[i] <= '9'; i++)
            s = s * 10 + (v[i] - '0');
        a->retry_after_s = i > 0 && i == vlen ? s : -1;
    } else if (header_value(data, len, "X-Request-Id", &v, &vlen)) {
        free(a->request_id);
        a->request_id = strndup(v, vlen); /* NULL if memory ran out: it is only for logs */
    }
    return len;
}

/* Sends one request to `base`: a POST when `body` is not NULL, else a GET. MUTEXD_OK once an
 * answer (any status) is in *a. */
static mutexd_result perform(mutexd_client *c, const char *base, const char *path, const char *body,
                             long timeout_ms, struct answer *a, struct mutexd_error *err)
{
    mutexd_result result = MUTEXD_ERR_NOMEM;
    struct mxc_buf ub;
    mxc_buf_init(&ub, URL_MAX);
    mxc_buf_str(&ub, base);
    mxc_buf_str(&ub, path);
    char *url = mxc_buf_take(&ub);
    if (url == NULL) {
        result = ub.too_big ? fail(err, MUTEXD_ERR_ARG, "the URL is too long") : MUTEXD_ERR_NOMEM;
        goto out;
    }
    CURL *e = c->curl;
    int bad = 0;
    bad |= curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK;
    if (body != NULL) {
        bad |= curl_easy_setopt(e, CURLOPT_POST, 1L) != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, body) != CURLE_OK;
        bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body)) != CURLE_OK;
    } else {
        bad |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) != CURLE_OK;
    }
    /* The whole request, connecting included, within timeout_ms. */
    bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK;
    /* After a request that got no answer, a kept-alive connection may lead nowhere. */
    bad |= curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, c->failed ? 1L : 0L) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, a) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, a) != CURLE_OK;
    if (bad)
        goto out;
    c->errbuf[0] = '\0';
    CURLcode rc = curl_easy_perform(e);
    c->failed = rc != CURLE_OK;
    if (rc != CURLE_OK) {
        if (a->body.too_big) {
            result = fail(err, MUTEXD_ERR_PROTOCOL, "the answer is over %zu bytes", ANSWER_MAX);
        } else if (a->body.nomem) {
            result = MUTEXD_ERR_NOMEM;
        } else {
            /* With several servers, say which one did not answer. */
            err->transport = 1;
            result = fail(err, MUTEXD_ERR_TRANSPORT, "%s%s%s", c->nurls > 1 ? base : "",
                          c->nurls > 1 ? ": " : "",
                          c->errbuf[0] != '\0' ? c->errbuf : curl_easy_strerror(rc));
        }
        goto out;
    }
    if (curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &a->status) != CURLE_OK)
        goto out;
    result = MUTEXD_OK;
out:
    free(url);
    return result;
}

/* 1 when `given` (as kept: no trailing '/') and `url` name one server: the same scheme and
 * host in any letter case, the same path, a trailing '/' of `url` aside. */
static int same_url(const char *given, const char *url)
{
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    const char *g = strstr(given, "://"), *u = strstr(url, "://");
    if (g == NULL || u == NULL || u >= url + n)
        return 0;
    size_t gauth = strcspn(g + 3, "/") + (size_t)(g + 3 - given);
    size_t uauth = strcspn(u + 3, "/") + (size_t)(u + 3 - url);
    if (uauth > n)
        uauth = n;
    return gauth == uauth && strncasecmp(given, url, gauth) == 0 &&
           strlen(given + gauth) == n - uauth &&
           strncmp(given + gauth, url + uauth, n - uauth) == 0;
}

/* Server `i` answered: it is tried first next time, unless it forwarded the request to the
 * active server of a group that is one of ours (Mutexd-Served-By): then that one is, so that
 * requests stop crossing a standby. */
static void answered_by(mutexd_client *c, size_t i, const struct answer *a)
{
    c->next = i;
    if (a->served_by[0] == '\0' || c->nurls < 2)
        return;
    for (size_t k = 0; k < c->nurls; k++) {
        if (same_url(c->urls[k], a->served_by)) {
            c->next = k;
            return;
        }
    }
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) != 0)
        ;
}

/* The servers a request tries in one round, in order: each one's URL, and its index among
 * the given ones (-1 for a partition's owner that is not one of them). */
struct route {
    const char *base[MAX_URLS + 1];
    long index[MAX_URLS + 1];
    size_t n;
};

/* The advertised URL of the owner of the partition of `resource`, when the map names one. */
static const char *owner_of(const mutexd_client *c, const char *resource)
{
    if (resource == NULL || c->map_count < 2)
        return NULL;
    return c->owners[mxc_name_hash(resource) % c->map_count];
}

/* A round's order: the owner of the resource's partition first, when the map names one, so
 * that no server has to forward the request; then the given servers from the one tried first
 * (c->next), each once. */
static void route(const mutexd_client *c, const char *resource, struct route *r)
{
    r->n = 0;
    long first = -1;
    const char *owner = owner_of(c, resource);
    if (owner != NULL) {
        for (size_t k = 0; k < c->nurls && first < 0; k++) {
            if (same_url(c->urls[k], owner))
                first = (long)k;
        }
        r->base[r->n] = first >= 0 ? c->urls[first] : owner;
        r->index[r->n++] = first;
    }
    for (size_t k = 0; k < c->nurls; k++) {
        size_t i = (c->next + k) % c->nurls;
        if ((long)i == first)
            continue;
        r->base[r->n] = c->urls[i];
        r->index[r->n++] = (long)i;
    }
}

/* Whether the answer to a request about a resource sent to `base` calls for reading the
 * partition map: the first that names a partition, and, with a map, one served by another
 * server than the one asked (the partition moved). */
static int surprising(const mutexd_client *c, const char *base, const struct answer *a)
{
    if (c->map_count == 0)
        return a->partitioned;
    return c->map_count > 1 && a->served_by[0] != '\0' && !same_url(base, a->served_by);
}

static void read_map(mutexd_client *c);

/*
 * The attempts of exchange(), round after round. A request about `resource` goes first to
 * its partition's owner when the map names one; *surprise is set when what happened calls
 * for reading the map again.
 */
static mutexd_result attempts(mutexd_client *c, const char *resource, const char *path,
                              const char *body, long timeout_ms, int64_t until, struct answer *a,
                              int64_t *sent, int *surprise, struct mutexd_error *err)
{
    mutexd_result result = MUTEXD_ERR_TRANSPORT;
    int rounds = c->nurls > 1 ? FAILOVER_ROUNDS : 1;
    int tried = 0;
    for (int round = 0; round < rounds; round++) {
        long pause_s = -1;
        struct route r;
        route(c, resource, &r);
        for (size_t k = 0; k < r.n; k++) {
            long t = timeout_ms;
            int64_t now = mutexd_monotonic_ms();
            if (until > 0 && tried && now >= until)
                return result;
            if (until > 0 && until - now < t)
                t = until - now > 1 ? (long)(until - now) : 1;
            if (tried) {
                mutexd_error_clear(err);
                answer_free(a);
                answer_init(a);
            }
            tried = 1;
            *sent = now;
            result = perform(c, r.base[k], path, body, t, a, err);
            int unavailable = result == MUTEXD_OK && a->status == 503;
            if (result != MUTEXD_ERR_TRANSPORT && !unavailable) {
                if (result == MUTEXD_OK && r.index[k] >= 0)
                    answered_by(c, (size_t)r.index[k], a);
                if (result == MUTEXD_OK && resource != NULL && surprising(c, r.base[k], a))
                    *surprise = 1;
                return result;
            }
            /* No answer, or a 503: on a partitioned group the partition may have moved. */
            if (resource != NULL && c->map_count > 1)
                *surprise = 1;
            if (r.index[k] >= 0)
                c->next = ((size_t)r.index[k] + 1) % c->nurls;
            if (unavailable && a->retry_after_s >= 0 && (pause_s < 0 || a->retry_after_s < pause_s))
                pause_s = a->retry_after_s;
        }
        if (round + 1 == rounds)
            break;
        int64_t pause = pause_s >= 0 ? (int64_t)pause_s * 1000 : PAUSE_DEFAULT_MS;
        pause = pause > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause;
        if (until > 0 && mutexd_monotonic_ms() + pause >= until)
            break;
        sleep_ms(pause);
    }
    return result;
}

/*
 * Sends one request to the servers: to the one tried first (c->next), and on to the next
 * when no answer comes (connection error, timeout) or the answer is 503, until one answers
 * or, with several servers, every one was tried FAILOVER_ROUNDS times. Before going round
 * again it pauses for the shortest Retry-After of the round's 503s (PAUSE_DEFAULT_MS
 * without one, at most PAUSE_MAX_MS). Each attempt takes at most `timeout_ms`; with `until`
 * (monotonic ms, 0: none) none begins once it has passed and none lasts beyond it. *sent
 * is when the last attempt was sent. Returns what the last attempt gave: MUTEXD_OK with its
 * answer in *a (a 503 too, for read_answer to report), or its error in *err.
 *
 * A request about `resource` (NULL for the others) on a partitioned group goes to the owner
 * of its partition first (see route()); the partition map is read when it is due, and again
 * after the request when it met a surprise.
 */
static mutexd_result exchange(mutexd_client *c, const char *resource, const char *path,
                              const char *body, long timeout_ms, int64_t until, struct answer *a,
                              int64_t *sent, struct mutexd_error *err)
{
    if (resource != NULL && c->map_due)
        read_map(c);
    int surprise = 0;
    mutexd_result result =
        attempts(c, resource, path, body, timeout_ms, until, a, sent, &surprise, err);
    /* Read after the request rather than during it: the map serves the next requests, and
     * this one's attempts and deadline stay as they were. */
    if (surprise)
        read_map(c);
    return result;
}

static const char *body_text(const struct answer *a)
{
    return a->body.data != NULL ? a->body.data : "";
}

/* Turns an answer into a result: a 2xx is parsed into *doc; anything else fills *err. */
static mutexd_result read_answer(struct answer *a, struct mxc_doc *doc, struct mutexd_error *err)
{
    mutexd_result result;
    if (a->status >= 200 && a->status < 300) {
        result = mxc_doc_parse(doc, body_text(a), a->body.len);
        if (result == MUTEXD_ERR_PROTOCOL)
            goto protocol;
        return result;
    }

    err->status = (int)a->status;
    err->retry_after_s = a->retry_after_s;
    err->request_id = a->request_id;
    a->request_id = NULL;
    err->body = strdup(body_text(a));
    if (err->body == NULL)
        return MUTEXD_ERR_NOMEM;
    struct mxc_doc edoc;
    result = mxc_doc_parse(&edoc, body_text(a), a->body.len);
    if (result == MUTEXD_OK)
        result = mxc_decode_error(&edoc, edoc.root, err);
    mxc_doc_free(&edoc);
    if (result == MUTEXD_ERR_NOMEM)
        return result;
    if (err->message == NULL)
        fail(err, MUTEXD_ERR_API, "the server answered HTTP %ld", a->status);
    if (a->status == 409 && err->code != NULL && strcmp(err->code, "lease_held") == 0)
        return MUTEXD_HELD;
    if (a->status == 409 && err->code != NULL && strcmp(err->code, "lease_lost") == 0)
        return MUTEXD_LOST;
    if (a->status == 409 && err->code != NULL && strcmp(err->code, "limit_mismatch") == 0)
        return MUTEXD_ERR_LIMIT_MISMATCH;
    return MUTEXD_ERR_API;

protocol:
    err->status = (int)a->status;
    err->request_id = a->request_id;
    a->request_id = NULL;
    err->body = strdup(body_text(a));
    return fail(err, MUTEXD_ERR_PROTOCOL, "the server's answer (HTTP %ld) is not the API's JSON",
                a->status);
}

/* Marks a successful answer whose JSON lacks what the API promises. */
static mutexd_result bad_answer(mutexd_result decoded, struct answer *a, struct mutexd_error *err)
{
    if (decoded != MUTEXD_ERR_PROTOCOL)
        return decoded;
    err->status = (int)a->status;
    err->request_id = a->request_id;
    a->request_id = NULL;
    free(err->body);
    err->body = strdup(body_text(a));
    return fail(err, MUTEXD_ERR_PROTOCOL,
                "the server's answer (HTTP %ld) lacks what the API promises", a->status);
}

/* ---- Building requests -------------------------------------------------------------------- */

/* The bytes a resource name may have (docs/api.md, "Names"), but a hash tag's '{' and '}',
 * which the contract has sent as %7B and %7D; anything else is percent-encoded so that the
 * request stays well formed and the server can refuse the name. */
static int keep_in_path(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           strchr("._~:@/-", c) != NULL;
}

static int keep_in_query(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           strchr("._~-", c) != NULL;
}

/* "/v1/resources/<resource>[/<action>]" */
static void add_resource_path(struct mxc_buf *b, const char *resource, const char *action)
{
    mxc_buf_str(b, "/v1/resources/");
    mxc_buf_url_encode(b, resource, keep_in_path);
    if (action != NULL) {
        mxc_buf_add(b, "/", 1);
        mxc_buf_str(b, action);
    }
}

static mutexd_result check_client(mutexd_client *c, const char *resource, struct mutexd_error *err)
{
    if (c == NULL)
        return fail(err, MUTEXD_ERR_ARG, "no client");
    if (resource == NULL || resource[0] == '\0')
        return fail(err, MUTEXD_ERR_ARG, "the resource name is empty");
    return MUTEXD_OK;
}

/* MUTEXD_OK when `text` is NULL or the text of one JSON object. */
static mutexd_result check_metadata(const char *text, struct mutexd_error *err)
{
    if (text == NULL)
        return MUTEXD_OK;
    cJSON *v = cJSON_ParseWithOpts(text, NULL, 1);
    int ok = cJSON_IsObject(v);
    cJSON_Delete(v);
    return ok ? MUTEXD_OK : fail(err, MUTEXD_ERR_ARG, "metadata must be a JSON object");
}

/* Takes the text of a built path or body; MUTEXD_OK, or why it could not be built. */
static mutexd_result take(struct mxc_buf *b, char **text, struct mutexd_error *err)
{
    int too_big = b->too_big;
    *text = mxc_buf_take(b);
    if (*text != NULL)
        return MUTEXD_OK;
    return too_big ? fail(err, MUTEXD_ERR_ARG, "the request is over %zu bytes", REQUEST_MAX)
                   : MUTEXD_ERR_NOMEM;
}

/* Sends a POST (or a GET when body is NULL), about `resource` or none (NULL), and reads the
 * answer into *doc. *sent (may be NULL): when the request that got the answer was sent. */
static mutexd_result call(mutexd_client *c, const char *resource, const char *path,
                          const char *body, long wait_ms, struct answer *a, struct mxc_doc *doc,
                          int64_t *sent, struct mutexd_error *err)
{
    long timeout = c->request_timeout_ms + (wait_ms > 0 ? wait_ms : 0);
    int64_t at;
    mutexd_result result =
        exchange(c, resource, path, body, timeout, 0, a, sent != NULL ? sent : &at, err);
    if (result != MUTEXD_OK)
        return result;
    return read_answer(a, doc, err);
}

/* ---- The partition map ------------------------------------------------------------------- */

/* Replaces the map by what the body of GET /v1/servers says: its "partitions" (absent, or a
 * count of 1: a group, or a server, that is not partitioned). MUTEXD_ERR_PROTOCOL, the map
 * as it was, when it makes no sense. */
static mutexd_result set_map(mutexd_client *c, const cJSON *root)
{
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(root, "partitions");
    unsigned count = 1;
    if (parts != NULL && !cJSON_IsNull(parts)) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(parts, "count");
        if (!cJSON_IsObject(parts) || !cJSON_IsNumber(n) || n->valuedouble < 1 ||
            n->valuedouble > MXC_PARTITIONS_MAX ||
            n->valuedouble != (double)(unsigned)n->valuedouble)
            return MUTEXD_ERR_PROTOCOL;
        count = (unsigned)n->valuedouble;
    }
    char **owners = NULL;
    if (count > 1) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(parts, "owners");
        if (!cJSON_IsArray(list))
            return MUTEXD_ERR_PROTOCOL;
        owners = calloc(count, sizeof(*owners));
        if (owners == NULL)
            return MUTEXD_ERR_NOMEM;
        const cJSON *entry;
        cJSON_ArrayForEach(entry, list)
        {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(entry, "partition");
            const cJSON *url = cJSON_GetObjectItemCaseSensitive(entry, "url");
            if (!cJSON_IsNumber(p) || p->valuedouble < 0 || p->valuedouble >= count ||
                (url != NULL && !cJSON_IsNull(url) && !cJSON_IsString(url))) {
                for (unsigned i = 0; i < count; i++)
                    free(owners[i]);
                free(owners);
                return MUTEXD_ERR_PROTOCOL;
            }
            const char *u = cJSON_IsString(url) ? url->valuestring : "";
            size_t len = strlen(u);
            while (len > 0 && u[len - 1] == '/')
                len--;
            /* An owner URL this client cannot use is left out: the given servers forward. */
            if (((len > 7 && strncasecmp(u, "http://", 7) == 0) ||
                 (len > 8 && strncasecmp(u, "https://", 8) == 0)) &&
                !has_line_break(u)) {
                unsigned i = (unsigned)p->valuedouble;
                free(owners[i]);
                owners[i] = strndup(u, len); /* NULL when memory ran out: not routed */
            }
        }
    }
    for (unsigned i = 0; c->owners != NULL && i < c->map_count; i++)
        free(c->owners[i]);
    free(c->owners);
    c->owners = owners;
    c->map_count = count;
    return MUTEXD_OK;
}

/* Reads the partition map (GET /v1/servers), unless it was read less than MAP_INTERVAL_MS
 * ago (then the next request about a resource reads it) or the group is known not to be
 * partitioned. A failure keeps the map as it was and is not reported: the request that
 * asked for the reading has its answer. */
static void read_map(mutexd_client *c)
{
    if (c->map_count == 1)
        return;
    int64_t now = mutexd_monotonic_ms();
    if (c->map_read_at != 0 && now - c->map_read_at < MAP_INTERVAL_MS) {
        c->map_due = 1;
        return;
    }
    c->map_read_at = now != 0 ? now : 1;
    c->map_due = 0;
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mutexd_error scratch = {0};
    int64_t sent;
    long timeout = c->request_timeout_ms < MAP_TIMEOUT_MS ? c->request_timeout_ms : MAP_TIMEOUT_MS;
    mutexd_result result = exchange(c, NULL, "/v1/servers", NULL, timeout, 0, &a, &sent, &scratch);
    if (result == MUTEXD_OK)
        result = read_answer(&a, &doc, &scratch);
    if (result == MUTEXD_OK)
        result = set_map(c, doc.root);
    if (result != MUTEXD_OK)
        c->map_due = 1;
    mutexd_error_clear(&scratch);
    mxc_doc_free(&doc);
    answer_free(&a);
}

/* ---- Leases ------------------------------------------------------------------------------- */

mutexd_result mutexd_new_lease_id(char *out)
{
    unsigned char r[16];
    ssize_t got = getrandom(r, sizeof(r), 0);
    if (got != (ssize_t)sizeof(r)) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        got = fd >= 0 ? read(fd, r, sizeof(r)) : -1;
        if (fd >= 0)
            close(fd);
        if (got != (ssize_t)sizeof(r))
            return MUTEXD_ERR_ARG;
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* version 4 */
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    snprintf(out, MUTEXD_LEASE_ID_LEN + 1,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0], r[1],
             r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14],
             r[15]);
    return MUTEXD_OK;
}

int64_t mutexd_monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mutexd_safety_margin_ms(int64_t ttl_ms)
{
    int64_t m = ttl_ms / 50;
    return m < 0 ? 0 : m > 1000 ? 1000 : m;
}

int mutexd_lease_held(const struct mutexd_lease *lease)
{
    return lease != NULL && lease->deadline_ms > 0 && mutexd_monotonic_ms() < lease->deadline_ms;
}

int64_t mutexd_lease_remaining_ms(const struct mutexd_lease *lease)
{
    if (!mutexd_lease_held(lease))
        return 0;
    return lease->deadline_ms - mutexd_monotonic_ms();
}

/* When a lease of an answer ends unless renewed: `base` (the monotonic ms its expires_in_ms
 * counts from) plus expires_in_ms, less the safety margin. */
static int64_t deadline_of(const struct mutexd_lease *lease, int64_t base)
{
    return base + lease->expires_in_ms - mutexd_safety_margin_ms(lease->ttl_ms);
}

/* Reads the lease body of *doc into *lease (when not NULL), replacing what it held. `base`:
 * the monotonic ms its expires_in_ms counts from. */
static mutexd_result give_lease(struct mxc_doc *doc, struct answer *a, int64_t base,
                                struct mutexd_lease *lease, struct mutexd_error *err)
{
    struct mutexd_lease fresh;
    mutexd_result result = mxc_decode_lease(doc, doc->root, &fresh);
    if (result != MUTEXD_OK)
        return bad_answer(result, a, err);
    fresh.deadline_ms = deadline_of(&fresh, base);
    if (lease != NULL) {
        mutexd_lease_clear(lease);
        *lease = fresh;
    } else {
        mutexd_lease_clear(&fresh);
    }
    return MUTEXD_OK;
}

/* An acquire's checks and defaults: its metadata, and the owner (HOST:PID) and lease id
 * (random) used when the options give none. */
static mutexd_result acquire_defaults(const struct mutexd_acquire_options *o, char owner[300],
                                      char lease_id[MUTEXD_LEASE_ID_LEN + 1],
                                      struct mutexd_error *err)
{
    mutexd_result result = check_metadata(o->metadata, err);
    if (result != MUTEXD_OK)
        return result;
    if (o->owner == NULL) {
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
            strcpy(host, "localhost");
        snprintf(owner, 300, "%s:%ld", host, (long)getpid());
    }
    if (o->lease_id == NULL) {
        result = mutexd_new_lease_id(lease_id);
        if (result != MUTEXD_OK)
            return fail(err, result, "no randomness for a lease id");
    }
    return MUTEXD_OK;
}

/* An acquire's fields after its owner and lease id, and the body's end. */
static void add_acquire_options(struct mxc_buf *b, const struct mutexd_acquire_options *o)
{
    if (o->ttl_ms != 0)
        mxc_buf_printf(b, ",\"ttl_ms\":%lld", (long long)o->ttl_ms);
    if (o->wait_ms != 0)
        mxc_buf_printf(b, ",\"wait_ms\":%lld", (long long)o->wait_ms);
    if (o->metadata != NULL) {
        mxc_buf_str(b, ",\"metadata\":");
        mxc_buf_str(b, o->metadata);
    }
    /* Sent only when asked for: a server without semaphores refuses both (unknown_field). */
    if (o->limit != 0)
        mxc_buf_printf(b, ",\"limit\":%lld", (long long)o->limit);
    if (o->shared)
        mxc_buf_str(b, ",\"shared\":true");
    mxc_buf_str(b, "}");
}

/* Ends the body of an acquire begun in *b with the options' fields, sends it about `resource`
 * (of a set, the first name) and reads the answer into *doc. *base: the monotonic ms the
 * answer's expires_in_ms count from. */
static mutexd_result send_acquire(mutexd_client *c, const char *resource, const char *path,
                                  struct mxc_buf *b, const struct mutexd_acquire_options *o,
                                  struct answer *a, struct mxc_doc *doc, int64_t *base,
                                  struct mutexd_error *err)
{
    char *body = NULL;
    add_acquire_options(b, o);
    mutexd_result result = take(b, &body, err);
    if (result != MUTEXD_OK)
        return result;
    long wait = o->wait_ms > 0 && o->wait_ms < 86400000 ? (long)o->wait_ms : 0;
    int64_t sent;
    result = call(c, resource, path, body, wait, a, doc, &sent, err);
    /* After a wait in the queue the grant came some time before the answer: count from it. */
    if (result == MUTEXD_OK)
        *base = wait > 0 ? mutexd_monotonic_ms() : sent;
    free(body);
    return result;
}

mutexd_result mutexd_acquire(mutexd_client *client, const char *resource,
                             const struct mutexd_acquire_options *options,
                             struct mutexd_lease *lease, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    struct mutexd_acquire_options none = {0};
    const struct mutexd_acquire_options *o = options != NULL ? options : &none;
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;
    char *path = NULL;
    char owner[300], lease_id[MUTEXD_LEASE_ID_LEN + 1];

    mutexd_result result = check_client(client, resource, err);
    if (result != MUTEXD_OK)
        goto out;
    result = acquire_defaults(o, owner, lease_id, err);
    if (result != MUTEXD_OK)
        goto out;

    mxc_buf_init(&b, URL_MAX);
    add_resource_path(&b, resource, "acquire");
    result = take(&b, &path, err);
    if (result != MUTEXD_OK)
        goto out;
    mxc_buf_init(&b, REQUEST_MAX);
    mxc_buf_str(&b, "{\"owner\":");
    mxc_buf_json_string(&b, o->owner != NULL ? o->owner : owner);
    mxc_buf_str(&b, ",\"lease_id\":");
    mxc_buf_json_string(&b, o->lease_id != NULL ? o->lease_id : lease_id);
    int64_t base;
    result = send_acquire(client, resource, path, &b, o, &a, &doc, &base, err);
    if (result != MUTEXD_OK)
        goto out;
    result = give_lease(&doc, &a, base, lease, err);
out:
    free(path);
    mxc_doc_free(&doc);
    answer_free(&a);
    return end(result, err, &scratch);
}

/* A lease id is given. */
static mutexd_result check_lease_id(const char *lease_id, struct mutexd_error *err)
{
    return lease_id != NULL ? MUTEXD_OK : fail(err, MUTEXD_ERR_ARG, "no lease id");
}

/* Ends the body of a renewal begun in *b with the options' fields, sends it about `resource`
 * (of a set, the first name), no attempt going past `until` (monotonic ms; 0: none), and
 * reads the answer into *doc. *sent: when the request that got the answer was sent. */
static mutexd_result send_renewal(mutexd_client *c, const char *resource, const char *path,
                                  struct mxc_buf *b, const struct mutexd_renew_options *o,
                                  int64_t until, struct answer *a, struct mxc_doc *doc,
                                  int64_t *sent, struct mutexd_error *err)
{
    char *body = NULL;
    if (o->ttl_ms != 0)
        mxc_buf_printf(b, ",\"ttl_ms\":%lld", (long long)o->ttl_ms);
    if (o->metadata != NULL) {
        mxc_buf_str(b, ",\"metadata\":");
        mxc_buf_str(b, o->metadata);
    }
    mxc_buf_str(b, "}");
    mutexd_result result = take(b, &body, err);
    if (result != MUTEXD_OK)
        return result;
    long timeout = o->timeout_ms > 0 ? o->timeout_ms : c->request_timeout_ms;
    result = exchange(c, resource, path, body, timeout, until, a, sent, err);
    if (result == MUTEXD_OK)
        result = read_answer(a, doc, err);
    free(body);
    return result;
}

mutexd_result mutexd_renew(mutexd_client *client, const char *resource, const char *lease_id,
                           const struct mutexd_renew_options *options, struct mutexd_lease *lease,
                           struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    struct mutexd_renew_options none = {0};
    const struct mutexd_renew_options *o = options != NULL ? options : &none;
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;
    char *path = NULL;

    mutexd_result result = check_client(client, resource, err);
    if (result != MUTEXD_OK)
        goto out;
    result = check_lease_id(lease_id, err);
    if (result == MUTEXD_OK)
        result = check_metadata(o->metadata, err);
    if (result != MUTEXD_OK)
        goto out;

    /* Renewing the lease that *lease holds, before its deadline: no attempt goes past it. */
    int64_t until = 0;
    if (lease != NULL && lease->deadline_ms > mutexd_monotonic_ms() && lease->lease_id != NULL &&
        strcasecmp(lease->lease_id, lease_id) == 0 && lease->resource != NULL &&
        strcmp(lease->resource, resource) == 0)
        until = lease->deadline_ms;

    /* Path and body are built before anything else, as they may point into *lease. */
    mxc_buf_init(&b, URL_MAX);
    add_resource_path(&b, resource, "renew");
    result = take(&b, &path, err);
    if (result != MUTEXD_OK)
        goto out;
    mxc_buf_init(&b, REQUEST_MAX);
    mxc_buf_str(&b, "{\"lease_id\":");
    mxc_buf_json_string(&b, lease_id);
    int64_t sent;
    result = send_renewal(client, resource, path, &b, o, until, &a, &doc, &sent, err);
    if (result != MUTEXD_OK)
        goto out;
    result = give_lease(&doc, &a, sent, lease, err);
out:
    free(path);
    mxc_doc_free(&doc);
    answer_free(&a);
    return end(result, err, &scratch);
}

/* release and break: a POST of string members (`n` keys and values; a NULL value is left
 * out) whose answer is {"resource", <flag>: true|false}. */
static mutexd_result post_flag(mutexd_client *client, const char *resource, const char *action,
                               const char *const *keys, const char *const *values, size_t n,
                               const char *flag, int *out, struct mutexd_error *err)
{
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;
    char *path = NULL, *body = NULL;

    mutexd_result result = check_client(client, resource, err);
    if (result != MUTEXD_OK)
        goto out;
    mxc_buf_init(&b, URL_MAX);
    add_resource_path(&b, resource, action);
    result = take(&b, &path, err);
    if (result != MUTEXD_OK)
        goto out;
    mxc_buf_init(&b, REQUEST_MAX);
    mxc_buf_str(&b, "{");
    const char *sep = "";
    for (size_t i = 0; i < n; i++) {
        if (values[i] == NULL)
            continue;
        mxc_buf_str(&b, sep);
        mxc_buf_json_string(&b, keys[i]);
        mxc_buf_str(&b, ":");
        mxc_buf_json_string(&b, values[i]);
        sep = ",";
    }
    mxc_buf_str(&b, "}");
    result = take(&b, &body, err);
    if (result != MUTEXD_OK)
        goto out;
    result = call(client, resource, path, body, 0, &a, &doc, NULL, err);
    if (result != MUTEXD_OK)
        goto out;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc.root, flag);
    if (!cJSON_IsBool(v)) {
        result = bad_answer(MUTEXD_ERR_PROTOCOL, &a, err);
        goto out;
    }
    *out = cJSON_IsTrue(v);
out:
    free(path);
    free(body);
    mxc_doc_free(&doc);
    answer_free(&a);
    return result;
}

mutexd_result mutexd_release(mutexd_client *client, const char *resource, const char *lease_id,
                             struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    int released = 0;
    const char *key = "lease_id";
    mutexd_result result = check_lease_id(lease_id, err);
    if (result == MUTEXD_OK)
        result =
            post_flag(client, resource, "release", &key, &lease_id, 1, "released", &released, err);
    if (result == MUTEXD_OK && !released)
        result = fail(err, MUTEXD_ERR_PROTOCOL, "the server answered released: false");
    return end(result, err, &scratch);
}

mutexd_result mutexd_break_lease(mutexd_client *client, const char *resource, const char *lease_id,
                                 const char *reason, int *broken, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    int flag = 0;
    /* Without a lease id the body is what it always was, which any server takes. */
    const char *keys[] = {"reason", "lease_id"};
    const char *values[] = {reason, lease_id};
    mutexd_result result =
        post_flag(client, resource, "break", keys, values, 2, "broken", &flag, err);
    if (result == MUTEXD_OK && broken != NULL)
        *broken = flag;
    return end(result, err, &scratch);
}

mutexd_result mutexd_break(mutexd_client *client, const char *resource, const char *reason,
                           int *broken, struct mutexd_error *error)
{
    return mutexd_break_lease(client, resource, NULL, reason, broken, error);
}

/* ---- Several resources at once ------------------------------------------------------------ */

/* The names of a call about several resources: `min` to MUTEXD_MANY_MAX of them, none NULL
 * or empty. */
static mutexd_result check_names(mutexd_client *c, const char *const *resources, size_t count,
                                 struct mutexd_error *err)
{
    if (c == NULL)
        return fail(err, MUTEXD_ERR_ARG, "no client");
    if (resources == NULL || count < 2 || count > MUTEXD_MANY_MAX)
        return fail(err, MUTEXD_ERR_ARG, "a set is 2 to %d resources, not %zu", MUTEXD_MANY_MAX,
                    resources == NULL ? (size_t)0 : count);
    for (size_t i = 0; i < count; i++) {
        if (resources[i] == NULL || resources[i][0] == '\0')
            return fail(err, MUTEXD_ERR_ARG, "resource name %zu of the set is empty", i + 1);
    }
    return MUTEXD_OK;
}

/* {"resources":[...],"lease_id":... : the start of every body about a set. */
static void add_names(struct mxc_buf *b, const char *const *resources, size_t count,
                      const char *lease_id)
{
    mxc_buf_str(b, "{\"resources\":[");
    for (size_t i = 0; i < count; i++) {
        if (i > 0)
            mxc_buf_str(b, ",");
        mxc_buf_json_string(b, resources[i]);
    }
    mxc_buf_str(b, "],\"lease_id\":");
    mxc_buf_json_string(b, lease_id);
}

void mutexd_leases_clear(struct mutexd_leases *leases)
{
    if (leases == NULL)
        return;
    for (size_t i = 0; i < leases->count; i++)
        mutexd_lease_clear(&leases->leases[i]);
    free(leases->leases);
    free(leases->lease_id);
    free(leases->json);
    memset(leases, 0, sizeof(*leases));
}

int mutexd_leases_held(const struct mutexd_leases *leases)
{
    return leases != NULL && leases->count > 0 && leases->deadline_ms > 0 &&
           mutexd_monotonic_ms() < leases->deadline_ms;
}

/* Reads {"leases": [lease body...]} of *doc into *leases (when not NULL), replacing what it
 * held: one lease per name of `resources`, in that order, all of one lease id. `base`: the
 * monotonic ms their expires_in_ms counts from. */
static mutexd_result give_leases(struct mxc_doc *doc, struct answer *a, int64_t base,
                                 const char *const *resources, size_t count,
                                 struct mutexd_leases *leases, struct mutexd_error *err)
{
    struct mutexd_leases fresh = {0};
    mutexd_result result = MUTEXD_ERR_PROTOCOL;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(doc->root, "leases");
    if (!cJSON_IsArray(list) || (size_t)cJSON_GetArraySize(list) != count)
        goto out;
    fresh.leases = calloc(count, sizeof(*fresh.leases));
    if (fresh.leases == NULL) {
        result = MUTEXD_ERR_NOMEM;
        goto out;
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, list)
    {
        struct mutexd_lease *l = &fresh.leases[fresh.count];
        result = mxc_decode_lease(doc, item, l);
        if (result != MUTEXD_OK)
            goto out;
        fresh.count++;
        result = MUTEXD_ERR_PROTOCOL;
        if (strcmp(l->resource, resources[fresh.count - 1]) != 0 ||
            strcasecmp(l->lease_id, fresh.leases[0].lease_id) != 0)
            goto out; /* not the set asked for */
        l->deadline_ms = deadline_of(l, base);
        if (fresh.count == 1 || l->deadline_ms < fresh.deadline_ms)
            fresh.deadline_ms = l->deadline_ms;
    }
    fresh.lease_id = strdup(fresh.leases[0].lease_id);
    fresh.json = mxc_doc_print(doc, doc->root);
    result = fresh.lease_id != NULL && fresh.json != NULL ? MUTEXD_OK : MUTEXD_ERR_NOMEM;
out:
    if (result != MUTEXD_OK) {
        mutexd_leases_clear(&fresh);
        return bad_answer(result, a, err);
    }
    if (leases != NULL) {
        mutexd_leases_clear(leases);
        *leases = fresh;
    } else {
        mutexd_leases_clear(&fresh);
    }
    return MUTEXD_OK;
}

mutexd_result mutexd_acquire_many(mutexd_client *client, const char *const *resources, size_t count,
                                  const struct mutexd_acquire_options *options,
                                  struct mutexd_leases *leases, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    struct mutexd_acquire_options none = {0};
    const struct mutexd_acquire_options *o = options != NULL ? options : &none;
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;
    char owner[300], lease_id[MUTEXD_LEASE_ID_LEN + 1];

    mutexd_result result = check_names(client, resources, count, err);
    if (result != MUTEXD_OK)
        goto out;
    result = acquire_defaults(o, owner, lease_id, err);
    if (result != MUTEXD_OK)
        goto out;

    mxc_buf_init(&b, REQUEST_MAX);
    add_names(&b, resources, count, o->lease_id != NULL ? o->lease_id : lease_id);
    mxc_buf_str(&b, ",\"owner\":");
    mxc_buf_json_string(&b, o->owner != NULL ? o->owner : owner);
    /* Every name is in the first one's partition: the request goes where one about it would. */
    int64_t base;
    result = send_acquire(client, resources[0], "/v1/acquire", &b, o, &a, &doc, &base, err);
    if (result != MUTEXD_OK)
        goto out;
    result = give_leases(&doc, &a, base, resources, count, leases, err);
out:
    mxc_doc_free(&doc);
    answer_free(&a);
    return end(result, err, &scratch);
}

/* The names of the "resources" member of an error answer's "error" object, or of its
 * "resource" member when it has no list: as mutexd_error_resources(). */
static mutexd_result names_of(const char *body, char ***names, size_t *count)
{
    *names = NULL;
    *count = 0;
    if (body == NULL)
        return MUTEXD_OK;
    struct mxc_doc doc;
    mutexd_result result = mxc_doc_parse(&doc, body, strlen(body));
    if (result != MUTEXD_OK)
        return result == MUTEXD_ERR_NOMEM ? result : MUTEXD_OK; /* not JSON: names none */
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(doc.root, "error");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(e, "resources");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(e, "resource");
    const cJSON *item;
    size_t n = 0, bytes = 0;
    if (cJSON_IsArray(list)) {
        cJSON_ArrayForEach(item, list)
        {
            if (cJSON_IsString(item) && item->valuestring != NULL) {
                n++;
                bytes += strlen(item->valuestring) + 1;
            }
        }
    } else if (cJSON_IsString(one) && one->valuestring != NULL) {
        n = 1;
        bytes = strlen(one->valuestring) + 1;
    }
    if (n > 0) {
        /* One block: the pointers, the NULL after them, then the strings. */
        char **out = malloc((n + 1) * sizeof(*out) + bytes);
        if (out == NULL) {
            result = MUTEXD_ERR_NOMEM;
            goto done;
        }
        char *text = (char *)(out + n + 1);
        size_t k = 0;
        if (cJSON_IsArray(list)) {
            cJSON_ArrayForEach(item, list)
            {
                if (!cJSON_IsString(item) || item->valuestring == NULL)
                    continue;
                out[k++] = strcpy(text, item->valuestring);
                text += strlen(text) + 1;
            }
        } else {
            out[k++] = strcpy(text, one->valuestring);
        }
        out[k] = NULL;
        *names = out;
        *count = n;
    }
done:
    mxc_doc_free(&doc);
    return result;
}

mutexd_result mutexd_error_resources(const struct mutexd_error *error, char ***names, size_t *count)
{
    if (names == NULL || count == NULL)
        return MUTEXD_ERR_ARG;
    *names = NULL;
    *count = 0;
    if (error == NULL)
        return MUTEXD_ERR_ARG;
    return names_of(error->body, names, count);
}

/* After a lease_lost answer to the renewal of the set *leases holds: the set and every lease
 * the answer names are lost (deadline 0). */
static void mark_lost(struct mutexd_leases *leases, const struct mutexd_error *err)
{
    char **names;
    size_t n;
    leases->deadline_ms = 0;
    if (names_of(err->body, &names, &n) != MUTEXD_OK)
        return;
    for (size_t i = 0; i < leases->count; i++) {
        for (size_t k = 0; k < n; k++) {
            if (leases->leases[i].resource != NULL &&
                strcmp(leases->leases[i].resource, names[k]) == 0)
                leases->leases[i].deadline_ms = 0;
        }
    }
    free(names);
}

mutexd_result mutexd_renew_many(mutexd_client *client, const char *const *resources, size_t count,
                                const char *lease_id, const struct mutexd_renew_options *options,
                                struct mutexd_leases *leases, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    struct mutexd_renew_options none = {0};
    const struct mutexd_renew_options *o = options != NULL ? options : &none;
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;

    mutexd_result result = check_names(client, resources, count, err);
    if (result != MUTEXD_OK)
        goto out;
    result = check_lease_id(lease_id, err);
    if (result == MUTEXD_OK)
        result = check_metadata(o->metadata, err);
    if (result != MUTEXD_OK)
        goto out;

    /* Renewing the set that *leases holds, before its deadline: no attempt goes past it. */
    int same =
        leases != NULL && leases->lease_id != NULL && strcasecmp(leases->lease_id, lease_id) == 0;
    int64_t until = same && leases->deadline_ms > mutexd_monotonic_ms() ? leases->deadline_ms : 0;

    /* The body is built before anything else, as the names may point into *leases. */
    mxc_buf_init(&b, REQUEST_MAX);
    add_names(&b, resources, count, lease_id);
    int64_t sent;
    result = send_renewal(client, resources[0], "/v1/renew", &b, o, until, &a, &doc, &sent, err);
    if (result == MUTEXD_LOST && same)
        mark_lost(leases, err);
    if (result != MUTEXD_OK)
        goto out;
    result = give_leases(&doc, &a, sent, resources, count, leases, err);
out:
    mxc_doc_free(&doc);
    answer_free(&a);
    return end(result, err, &scratch);
}

mutexd_result mutexd_release_many(mutexd_client *client, const char *const *resources, size_t count,
                                  const char *lease_id, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;
    char *body = NULL;

    mutexd_result result = check_names(client, resources, count, err);
    if (result == MUTEXD_OK)
        result = check_lease_id(lease_id, err);
    if (result != MUTEXD_OK)
        goto out;
    mxc_buf_init(&b, REQUEST_MAX);
    add_names(&b, resources, count, lease_id);
    mxc_buf_str(&b, "}");
    result = take(&b, &body, err);
    if (result != MUTEXD_OK)
        goto out;
    result = call(client, resources[0], "/v1/release", body, 0, &a, &doc, NULL, err);
    if (result != MUTEXD_OK)
        goto out;
    /* {"leases": [{"resource", "released": true}...]}, one per name, in order. */
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(doc.root, "leases"), *item;
    size_t i = 0;
    result = MUTEXD_ERR_PROTOCOL;
    if (!cJSON_IsArray(list) || (size_t)cJSON_GetArraySize(list) != count)
        goto bad;
    cJSON_ArrayForEach(item, list)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "resource");
        const cJSON *released = cJSON_GetObjectItemCaseSensitive(item, "released");
        if (!cJSON_IsString(name) || strcmp(name->valuestring, resources[i++]) != 0 ||
            !cJSON_IsBool(released))
            goto bad;
        if (!cJSON_IsTrue(released)) {
            result = fail(err, MUTEXD_ERR_PROTOCOL, "the server answered released: false");
            goto out;
        }
    }
    result = MUTEXD_OK;
bad:
    result = bad_answer(result, &a, err);
out:
    free(body);
    mxc_doc_free(&doc);
    answer_free(&a);
    return end(result, err, &scratch);
}

/* ---- Reading state ------------------------------------------------------------------------ */

/* GET of a resource, watching when wait_ms >= 0. */
static mutexd_result get_state(mutexd_client *client, const char *resource, int watch,
                               uint64_t index, int64_t wait_ms, struct mutexd_state *state,
                               struct mutexd_error *err)
{
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;
    char *path = NULL;
    struct mutexd_state fresh;

    mutexd_result result = check_client(client, resource, err);
    if (result != MUTEXD_OK)
        goto out;
    mxc_buf_init(&b, URL_MAX);
    add_resource_path(&b, resource, NULL);
    if (watch)
        mxc_buf_printf(&b, "?index=%llu&wait_ms=%lld", (unsigned long long)index,
                       (long long)wait_ms);
    result = take(&b, &path, err);
    if (result != MUTEXD_OK)
        goto out;
    long wait = watch && wait_ms > 0 && wait_ms < 86400000 ? (long)wait_ms : 0;
    result = call(client, resource, path, NULL, wait, &a, &doc, NULL, err);
    if (result != MUTEXD_OK)
        goto out;
    result = mxc_decode_state(&doc, doc.root, &fresh);
    if (result != MUTEXD_OK) {
        result = bad_answer(result, &a, err);
        goto out;
    }
    if (state != NULL) {
        mutexd_state_clear(state);
        *state = fresh;
    } else {
        mutexd_state_clear(&fresh);
    }
out:
    free(path);
    mxc_doc_free(&doc);
    answer_free(&a);
    return result;
}

mutexd_result mutexd_get(mutexd_client *client, const char *resource, struct mutexd_state *state,
                         struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    mutexd_result result = get_state(client, resource, 0, 0, 0, state, err);
    return end(result, err, &scratch);
}

mutexd_result mutexd_watch(mutexd_client *client, const char *resource, uint64_t index,
                           int64_t wait_ms, struct mutexd_state *state, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    mutexd_result result = get_state(client, resource, 1, index, wait_ms, state, err);
    return end(result, err, &scratch);
}

/* GET of the list, watching from `index` when `watch` is set; *index_out (may be NULL) the
 * answer's change index. */
static mutexd_result list_page(mutexd_client *client, const struct mutexd_list_options *options,
                               int watch, uint64_t index, int64_t wait_ms, struct mutexd_page *page,
                               uint64_t *index_out, struct mutexd_error *err)
{
    struct mutexd_list_options none = {0};
    const struct mutexd_list_options *o = options != NULL ? options : &none;
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;
    char *path = NULL;
    struct mutexd_page fresh;
    mutexd_result result = MUTEXD_ERR_ARG;

    if (client == NULL) {
        result = fail(err, MUTEXD_ERR_ARG, "no client");
        goto out;
    }
    if (watch && wait_ms < 0) {
        result = fail(err, MUTEXD_ERR_ARG, "wait_ms must not be negative");
        goto out;
    }
    mxc_buf_init(&b, URL_MAX);
    mxc_buf_str(&b, "/v1/resources");
    char sep = '?';
    if (o->prefix != NULL) {
        mxc_buf_printf(&b, "%cprefix=", sep);
        mxc_buf_url_encode(&b, o->prefix, keep_in_query);
        sep = '&';
    }
    if (o->limit != 0) {
        mxc_buf_printf(&b, "%climit=%d", sep, o->limit);
        sep = '&';
    }
    if (o->cursor != NULL) {
        mxc_buf_printf(&b, "%ccursor=", sep);
        mxc_buf_url_encode(&b, o->cursor, keep_in_query);
        sep = '&';
    }
    if (watch)
        mxc_buf_printf(&b, "%cindex=%llu&wait_ms=%lld", sep, (unsigned long long)index,
                       (long long)wait_ms);
    result = take(&b, &path, err);
    if (result != MUTEXD_OK)
        goto out;
    long wait = watch && wait_ms > 0 && wait_ms < 86400000 ? (long)wait_ms : 0;
    result = call(client, NULL, path, NULL, wait, &a, &doc, NULL, err);
    if (result != MUTEXD_OK)
        goto out;
    uint64_t at = 0;
    const cJSON *idx = cJSON_GetObjectItemCaseSensitive(doc.root, "index");
    if (watch && (idx == NULL || mxc_json_u64(idx, &at) != 0)) {
        result = bad_answer(MUTEXD_ERR_PROTOCOL, &a, err);
        goto out;
    }
    result = mxc_decode_page(&doc, doc.root, &fresh);
    if (result != MUTEXD_OK) {
        result = bad_answer(result, &a, err);
        goto out;
    }
    if (page != NULL) {
        mutexd_page_clear(page);
        *page = fresh;
    } else {
        mutexd_page_clear(&fresh);
    }
    if (index_out != NULL)
        *index_out = at;
out:
    free(path);
    mxc_doc_free(&doc);
    answer_free(&a);
    return result;
}

mutexd_result mutexd_list(mutexd_client *client, const struct mutexd_list_options *options,
                          struct mutexd_page *page, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    mutexd_result result = list_page(client, options, 0, 0, 0, page, NULL, err);
    return end(result, err, &scratch);
}

mutexd_result mutexd_list_watch(mutexd_client *client, const struct mutexd_list_options *options,
                                uint64_t index, int64_t wait_ms, struct mutexd_page *page,
                                uint64_t *index_out, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    mutexd_result result = list_page(client, options, 1, index, wait_ms, page, index_out, err);
    return end(result, err, &scratch);
}

/* ---- Watching many resources, and recent events ------------------------------------------- */

mutexd_result mutexd_events(mutexd_client *client, uint64_t after,
                            const struct mutexd_events_options *options,
                            struct mutexd_event_page *events, struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    struct mutexd_events_options none = {0};
    const struct mutexd_events_options *o = options != NULL ? options : &none;
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mxc_buf b;
    char *path = NULL;
    struct mutexd_event_page fresh;
    mutexd_result result = MUTEXD_ERR_ARG;

    if (client == NULL) {
        result = fail(err, MUTEXD_ERR_ARG, "no client");
        goto out;
    }
    if (o->wait_ms < 0) {
        result = fail(err, MUTEXD_ERR_ARG, "wait_ms must not be negative");
        goto out;
    }
    mxc_buf_init(&b, URL_MAX);
    mxc_buf_printf(&b, "/v1/events?after=%llu", (unsigned long long)after);
    if (o->prefix != NULL) {
        mxc_buf_str(&b, "&prefix=");
        mxc_buf_url_encode(&b, o->prefix, keep_in_query);
    }
    if (o->limit != 0)
        mxc_buf_printf(&b, "&limit=%d", o->limit);
    if (o->wait_ms > 0)
        mxc_buf_printf(&b, "&wait_ms=%lld", (long long)o->wait_ms);
    result = take(&b, &path, err);
    if (result != MUTEXD_OK)
        goto out;
    long wait = o->wait_ms > 0 && o->wait_ms < 86400000 ? (long)o->wait_ms : 0;
    result = call(client, NULL, path, NULL, wait, &a, &doc, NULL, err);
    if (result != MUTEXD_OK)
        goto out;
    result = mxc_decode_event_page(&doc, doc.root, &fresh);
    if (result != MUTEXD_OK) {
        result = bad_answer(result, &a, err);
        goto out;
    }
    if (events != NULL) {
        mutexd_event_page_clear(events);
        *events = fresh;
    } else {
        mutexd_event_page_clear(&fresh);
    }
out:
    free(path);
    mxc_doc_free(&doc);
    answer_free(&a);
    return end(result, err, &scratch);
}

mutexd_result mutexd_whoami(mutexd_client *client, struct mutexd_whoami *who,
                            struct mutexd_error *error)
{
    struct mutexd_error scratch;
    struct mutexd_error *err = begin(error, &scratch);
    struct answer a;
    answer_init(&a);
    struct mxc_doc doc = {0};
    struct mutexd_whoami fresh;
    mutexd_result result;

    if (client == NULL) {
        result = fail(err, MUTEXD_ERR_ARG, "no client");
        goto out;
    }
    result = call(client, NULL, "/v1/whoami", NULL, 0, &a, &doc, NULL, err);
    if (result != MUTEXD_OK)
        goto out;
    result = mxc_decode_whoami(&doc, doc.root, &fresh);
    if (result != MUTEXD_OK) {
        result = bad_answer(result, &a, err);
        goto out;
    }
    if (who != NULL) {
        mutexd_whoami_clear(who);
        *who = fresh;
    } else {
        mutexd_whoami_clear(&fresh);
    }
out:
    mxc_doc_free(&doc);
    answer_free(&a);
    return end(result, err, &scratch);
}

int mutexd_whoami_has_scope(const struct mutexd_whoami *who, const char *scope)
{
    if (who == NULL || scope == NULL)
        return 0;
    for (size_t i = 0; i < who->scope_count; i++) {
        if (who->scopes[i] != NULL && strcmp(who->scopes[i], scope) == 0)
            return 1;
    }
    return 0;
}
