/*
 * Azure Blob Storage REST client (see blob.h): results, the client and one request on libcurl,
 * and the operations.
 *
 * The other parts are in files of their own: accounts and connection strings in
 * account.c, SharedKey signing in sign.c, the listing parser in list.c; what they
 * share is in shared.h, and what the unit tests reach in internal.h.
 */
#include "blob/blob.h"
#include "blob/internal.h"
#include "blob/shared.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "common/buf.h"

#ifndef MUTEXD_VERSION
#define MUTEXD_VERSION "dev"
#endif

#define DEFAULT_CONNECT_TIMEOUT_MS 5000L
#define DEFAULT_TIMEOUT_MS         30000L
#define DEFAULT_MAX_BODY           ((size_t)64 << 20)
#define MAX_APPEND_BLOCK           ((size_t)4 << 20) /* the limit of version 2021-08-06 */

/* ---- Results ------------------------------------------------------------------------------- */

static void reset_headers(struct blob_result *r)
{
    r->error_code[0] = r->etag[0] = r->request_id[0] = r->lease_id[0] = '\0';
    r->lease_time = -1;
    r->append_offset = r->committed_blocks = r->content_length = -1;
    r->lease_state[0] = '\0';
    r->sealed = false;
    r->nmeta = 0;
}

const char *blob_result_meta(const struct blob_result *r, const char *name)
{
    for (size_t i = 0; i < r->nmeta; i++)
        if (strcmp(r->meta[i].name, name) == 0)
            return r->meta[i].value;
    return NULL;
}

void blob_result_free(struct blob_result *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = 0;
    r->status = 0;
    r->curl_code = 0;
    r->message[0] = '\0';
    reset_headers(r);
}

/* A failure of our own (bad argument, no memory): no status, no transport error. */
static int local_fail(struct blob_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int local_fail(struct blob_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    return -1;
}

bool blob_result_transient(const struct blob_result *r)
{
    switch (r->status) {
    case 408:
    case 429:
    case 500:
    case 502:
    case 503:
    case 504:
        return true;
    case 0:
        break;
    default:
        return false;
    }
    switch ((CURLcode)r->curl_code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_AGAIN:
        return true;
    default:
        return false;
    }
}

/* ---- One request on libcurl ---------------------------------------------------------------- */

struct blob_client {
    CURL *curl;
    struct blob_account account;
    char container[64];
    long connect_timeout_ms, timeout_ms, stall_s;
    size_t max_body;
    long connects;
    char prefix[BLOB_PREFIX_MAX + 1]; /* blob_options.prefix, or "" */
    char errbuf[CURL_ERROR_SIZE];
};

int blob_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void blob_global_cleanup(void)
{
    curl_global_cleanup();
}

bool blob_container_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 3 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        bool ok =
            ascii_digit(s[i]) || (s[i] >= 'a' && s[i] <= 'z') || (s[i] == '-' && s[i + 1] != '-');
        if (!ok)
            return false;
    }
    return true;
}

int blob_client_new(const struct blob_account *account, const char *container,
                    const struct blob_options *opts, struct blob_client **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (!container || !blob_container_name_ok(container)) {
        blob_set_err(err, errlen,
                     "a container name is 3 to 63 characters of a-z, 0-9 and single '-' inside");
        return -1;
    }
    if (!account || account->key_len == 0 || !blob_after_scheme(account->endpoint)) {
        blob_set_err(err, errlen, "the account is not initialized");
        return -1;
    }
    if (opts && opts->prefix && strlen(opts->prefix) > BLOB_PREFIX_MAX) {
        blob_set_err(err, errlen, "a blob name prefix is at most 63 bytes");
        return -1;
    }
    struct blob_client *c = calloc(1, sizeof *c);
    if (!c) {
        blob_set_err(err, errlen, "out of memory");
        return -1;
    }
    c->curl = curl_easy_init();
    if (!c->curl) {
        free(c);
        blob_set_err(err, errlen, "libcurl could not create a handle");
        return -1;
    }
    c->account = *account;
    memcpy(c->container, container, strlen(container) + 1);
    c->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    c->timeout_ms = DEFAULT_TIMEOUT_MS;
    c->max_body = DEFAULT_MAX_BODY;
    if (opts) {
        if (opts->connect_timeout_ms > 0)
            c->connect_timeout_ms = opts->connect_timeout_ms;
        if (opts->timeout_ms > 0)
            c->timeout_ms = opts->timeout_ms;
        if (opts->max_body > 0)
            c->max_body = opts->max_body;
        if (opts->stall_ms > 0)
            c->stall_s = (opts->stall_ms + 999) / 1000;
        if (opts->prefix)
            memcpy(c->prefix, opts->prefix, strlen(opts->prefix) + 1);
    }
    *out = c;
    return 0;
}

void blob_client_free(struct blob_client *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    blob_account_wipe(&c->account);
    free(c);
}

long blob_client_connects(const struct blob_client *c)
{
    return c->connects;
}

static void copy_field(char *dst, size_t cap, const char *v, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    struct blob_result *r = arg;
    size_t n = size * nmemb;
    /* A new status line (after a 100 Continue, say) starts a new set of headers. */
    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        reset_headers(r);
        return n;
    }
    const char *colon = memchr(data, ':', n);
    if (!colon)
        return n;
    size_t name_len = (size_t)(colon - data);
    struct span v = span_trim(colon + 1, n - name_len - 1);
    if (ieq(data, name_len, "etag"))
        copy_field(r->etag, sizeof r->etag, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-error-code"))
        copy_field(r->error_code, sizeof r->error_code, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-request-id"))
        copy_field(r->request_id, sizeof r->request_id, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-lease-id"))
        copy_field(r->lease_id, sizeof r->lease_id, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-lease-time"))
        r->lease_time = (int)(v.n <= 9 ? parse_count(v.p, v.n) : -1);
    else if (ieq(data, name_len, "x-ms-blob-append-offset"))
        r->append_offset = parse_count(v.p, v.n);
    else if (ieq(data, name_len, "x-ms-blob-committed-block-count"))
        r->committed_blocks = parse_count(v.p, v.n);
    else if (ieq(data, name_len, "content-length"))
        r->content_length = parse_count(v.p, v.n);
    else if (ieq(data, name_len, "x-ms-lease-state"))
        copy_field(r->lease_state, sizeof r->lease_state, v.p, v.n);
    else if (ieq(data, name_len, "x-ms-blob-sealed"))
        r->sealed = ieq(v.p, v.n, "true");
    else if (name_len > 10 && name_len - 10 < BLOB_META_NAME_MAX && ieq(data, 10, "x-ms-meta-") &&
             r->nmeta < BLOB_META_MAX) {
        struct blob_meta *m = &r->meta[r->nmeta++];
        for (size_t i = 10; i < name_len; i++)
            m->name[i - 10] = (char)tolower((unsigned char)data[i]);
        m->name[name_len - 10] = '\0';
        copy_field(m->value, sizeof m->value, v.p, v.n);
    }
    return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct mx_buf *body = arg; /* capped at the client's max_body */
    size_t n = size * nmemb;
    mx_buf_append(body, data, n);
    return body->oom ? 0 : n; /* 0 aborts the transfer with CURLE_WRITE_ERROR */
}

/* HEAD answers and some proxies carry no x-ms-error-code: take <Code> from the body then. */
static void error_code_from_body(struct blob_result *r)
{
    struct xml_elem e;
    if (blob_find_elem(r->body, r->body + r->body_len, "Code", &e) > 0)
        copy_field(r->error_code, sizeof r->error_code, e.text, e.text_len);
}

static int add_header(struct curl_slist **list, const char *name, const char *value)
{
    char line[512];
    int n = snprintf(line, sizeof line, "%s:%s%s", name, value[0] ? " " : "", value);
    if (n < 0 || (size_t)n >= sizeof line)
        return -1;
    struct curl_slist *l = curl_slist_append(*list, line);
    if (!l)
        return -1;
    *list = l;
    return 0;
}

static struct curl_slist *build_headers(const struct blob_request *req, const char *date,
                                        const char *authorization)
{
    struct curl_slist *h = NULL;
    int bad = add_header(&h, "x-ms-date", date);
    bad |= add_header(&h, "x-ms-version", BLOB_API_VERSION);
    for (size_t i = 0; i < req->nxms; i++)
        bad |= add_header(&h, req->xms[i].name, req->xms[i].value);
    /* "Content-Type:" with no value removes the form type libcurl adds to a POSTFIELDS body;
     * unsigned, it costs a 403. "Expect:" keeps large bodies from waiting on 100 Continue. */
    bad |= add_header(&h, "Content-Type", req->content_type ? req->content_type : "");
    bad |= add_header(&h, "Expect", "");
    if (req->if_match)
        bad |= add_header(&h, "If-Match", req->if_match);
    if (req->if_none_match)
        bad |= add_header(&h, "If-None-Match", req->if_none_match);
    bad |= add_header(&h, "Authorization", authorization);
    if (bad) {
        curl_slist_free_all(h);
        return NULL;
    }
    return h;
}

/* Sends `req` and fills `res` (reset by the caller). Returns 0 when the status is `ok`. */
static int perform(struct blob_client *c, const struct blob_request *req, long ok,
                   struct blob_result *res)
{
    struct blob_signed sg;
    struct curl_slist *headers = NULL;
    struct mx_buf body = MX_BUF_INIT(c->max_body);
    char date[BLOB_DATE_LEN];
    int rc = -1;

    blob_format_date(time(NULL), date);
    if (blob_sign_request(&c->account, c->container, req, date, &sg) != 0) {
        local_fail(res, "could not build the request (out of memory)");
        return -1;
    }
    headers = build_headers(req, date, sg.authorization);
    if (!headers) {
        local_fail(res, "could not build the request headers");
        goto out;
    }

    CURL *h = c->curl;
    /* Reset keeps the connection cache: the next request reuses the open connection. */
    curl_easy_reset(h);
    c->errbuf[0] = '\0';
    CURLcode cc = CURLE_OK;
#define SET(opt, val)                                                                              \
    do {                                                                                           \
        if (cc == CURLE_OK)                                                                        \
            cc = curl_easy_setopt(h, opt, val);                                                    \
    } while (0)
    SET(CURLOPT_URL, sg.url);
    SET(CURLOPT_HTTPHEADER, headers);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_TCP_NODELAY, 1L);
    /* The path is signed as sent: curl must not squash "/./" or "/../" in a blob name. */
    SET(CURLOPT_PATH_AS_IS, 1L);
    SET(CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    SET(CURLOPT_TIMEOUT_MS, c->timeout_ms);
    if (c->stall_s > 0) {
        SET(CURLOPT_LOW_SPEED_LIMIT, 1L);
        SET(CURLOPT_LOW_SPEED_TIME, c->stall_s);
    }
    SET(CURLOPT_ERRORBUFFER, c->errbuf);
    SET(CURLOPT_USERAGENT, "mutexd/" MUTEXD_VERSION);
#if LIBCURL_VERSION_NUM >= 0x075500
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, res);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, &body);
    if (strcmp(req->verb, "GET") == 0) {
        SET(CURLOPT_HTTPGET, 1L);
    } else if (strcmp(req->verb, "HEAD") == 0) {
        SET(CURLOPT_NOBODY, 1L);
    } else {
        SET(CURLOPT_CUSTOMREQUEST, req->verb);
        if (strcmp(req->verb, "PUT") == 0) {
            /* Always a body, possibly empty: libcurl then sends Content-Length: 0. */
            SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
            SET(CURLOPT_POSTFIELDS, req->body ? req->body : "");
        }
    }
#undef SET
    if (cc != CURLE_OK) {
        local_fail(res, "libcurl option: %s", curl_easy_strerror(cc));
        goto out;
    }

    cc = curl_easy_perform(h);
    long connects = 0;
    if (curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK)
        c->connects += connects;
    if (cc != CURLE_OK) {
        reset_headers(res);
        if (body.too_big) {
            local_fail(res, "response body larger than %zu bytes", c->max_body);
        } else if (body.oom) {
            local_fail(res, "out of memory reading the response");
        } else {
            res->curl_code = (int)cc;
            local_fail(res, "%s", c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc));
        }
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &res->status);
    if (body.len) {
        res->body = body.p;
        res->body_len = body.len;
        body.p = NULL;
    }
    if (res->status >= 400 && !res->error_code[0] && res->body)
        error_code_from_body(res);
    rc = res->status == ok ? 0 : -1;
out:
    mx_buf_free(&body);
    curl_slist_free_all(headers);
    blob_signed_free(&sg);
    return rc;
}

/* ---- Operations ---------------------------------------------------------------------------- */

/*
 * One operation's request and copies of every caller string that goes into a header. The copies
 * are taken before the result is reset, because callers chain calls on one result: If-Match set
 * to res->etag, a renewal of res->lease_id, the next page from list->next_marker.
 */
struct call {
    struct blob_request req;
    char if_match[BLOB_ETAG_MAX + 2];
    char if_none_match[BLOB_ETAG_MAX + 2];
    char lease_id[BLOB_LEASE_ID_MAX];
    char proposed_id[BLOB_LEASE_ID_MAX];
    char num[24];
    char name[BLOB_NAME_MAX + 1]; /* the blob's name with the client's prefix */
    const char *problem;          /* an argument that cannot be sent, found before the reset */
};

/* The operations below never add more than the arrays hold; the bounds are checked again when
 * signing. */
static void call_query(struct call *k, const char *name, const char *value)
{
    if (k->req.nquery < BLOB_REQ_MAX_QUERY)
        k->req.query[k->req.nquery++] = (struct blob_kv){name, value};
}

static void call_xms(struct call *k, const char *name, const char *value)
{
    if (k->req.nxms < BLOB_REQ_MAX_XMS)
        k->req.xms[k->req.nxms++] = (struct blob_kv){name, value};
}

/* A caller's string as a header value: 1 to max-1 printable bytes. */
static bool header_value_ok(const char *s, size_t max)
{
    size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || s[n] == 0x7f || n + 1 >= max)
            return false;
    return n > 0;
}

/* ETags go out quoted ("0x..."), whether they came from a header (quoted) or a listing. */
static bool etag_header(const char *etag, char *out, size_t cap)
{
    if (!header_value_ok(etag, BLOB_ETAG_MAX))
        return false;
    bool bare = strcmp(etag, "*") != 0 && etag[0] != '"' && strncmp(etag, "W/", 2) != 0;
    snprintf(out, cap, bare ? "\"%s\"" : "%s", etag);
    return true;
}

static void copy_id(struct call *k, char *dst, const char *id, const char *what)
{
    if (!id || !header_value_ok(id, BLOB_LEASE_ID_MAX)) {
        if (!k->problem)
            k->problem = what;
        return;
    }
    memcpy(dst, id, strlen(id) + 1);
}

/* Starts an operation on `blob` (NULL: the container): checks and copies the name and the
 * conditions. Call call_start() next, after any other argument is copied. */
static void call_init(const struct blob_client *c, struct call *k, const char *verb,
                      const char *blob, const struct blob_cond *cond)
{
    memset(k, 0, sizeof *k);
    k->req.verb = verb;
    k->req.blob = blob; /* names are not in any result, so no copy is needed */
    if (blob) {
        size_t n = strnlen(blob, BLOB_NAME_MAX + 1), np = strlen(c->prefix);
        if (n == 0 || n + np > BLOB_NAME_MAX) {
            k->problem = "a blob name is 1 to 1024 bytes";
        } else if (np) {
            memcpy(k->name, c->prefix, np);
            memcpy(k->name + np, blob, n + 1);
            k->req.blob = k->name;
        }
    }
    if (!cond)
        return;
    if (cond->if_match) {
        if (etag_header(cond->if_match, k->if_match, sizeof k->if_match))
            k->req.if_match = k->if_match;
        else if (!k->problem)
            k->problem = "if_match is not a valid ETag";
    }
    if (cond->if_none_match) {
        if (etag_header(cond->if_none_match, k->if_none_match, sizeof k->if_none_match))
            k->req.if_none_match = k->if_none_match;
        else if (!k->problem)
            k->problem = "if_none_match is not a valid ETag";
    }
    if (cond->lease_id) {
        copy_id(k, k->lease_id, cond->lease_id, "lease_id is not a valid lease id");
        call_xms(k, "x-ms-lease-id", k->lease_id);
    }
}

/* Resets the result; -1 (with the reason in it) when an argument was refused. */
static int call_start(struct call *k, struct blob_result *res)
{
    blob_result_free(res);
    return k->problem ? local_fail(res, "%s", k->problem) : 0;
}

int blob_create_container(struct blob_client *c, struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "PUT", NULL, NULL);
    call_query(&k, "restype", "container");
    call_start(&k, res);
    int rc = perform(c, &k.req, 201, res);
    if (rc != 0 && res->status == 409 && strcmp(res->error_code, "ContainerAlreadyExists") == 0)
        rc = 0;
    return rc;
}

int blob_delete_container(struct blob_client *c, struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "DELETE", NULL, NULL);
    call_query(&k, "restype", "container");
    call_start(&k, res);
    return perform(c, &k.req, 202, res);
}

int blob_put(struct blob_client *c, const char *name, const void *data, size_t len,
             const struct blob_cond *cond, struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "PUT", name, cond);
    if (!data && len && !k.problem)
        k.problem = "no data for a non-empty blob";
    if (call_start(&k, res) != 0)
        return -1;
    call_xms(&k, "x-ms-blob-type", "BlockBlob");
    k.req.body = data;
    k.req.body_len = len;
    k.req.content_type = "application/octet-stream";
    return perform(c, &k.req, 201, res);
}

int blob_get(struct blob_client *c, const char *name, const struct blob_cond *cond,
             struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "GET", name, cond);
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 200, res);
}

int blob_get_from(struct blob_client *c, const char *name, int64_t offset, struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "GET", name, NULL);
    if (offset < 0 && !k.problem)
        k.problem = "a negative offset";
    if (call_start(&k, res) != 0)
        return -1;
    snprintf(k.num, sizeof k.num, "bytes=%" PRId64 "-", offset);
    call_xms(&k, "x-ms-range", k.num);
    int rc = perform(c, &k.req, 206, res);
    if (rc != 0 && res->status == 416) { /* nothing from there: the end */
        free(res->body);
        res->body = NULL;
        res->body_len = 0;
        rc = 0;
    }
    return rc;
}

int blob_head(struct blob_client *c, const char *name, struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "HEAD", name, NULL);
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 200, res);
}

int blob_delete(struct blob_client *c, const char *name, const struct blob_cond *cond,
                struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "DELETE", name, cond);
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 202, res);
}

int blob_create_append(struct blob_client *c, const char *name, const struct blob_cond *cond,
                       struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "PUT", name, cond);
    if (call_start(&k, res) != 0)
        return -1;
    call_xms(&k, "x-ms-blob-type", "AppendBlob");
    return perform(c, &k.req, 201, res);
}

int blob_append_block(struct blob_client *c, const char *name, const void *data, size_t len,
                      int64_t append_pos, const struct blob_cond *cond, struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "PUT", name, cond);
    if ((!data || len == 0 || len > MAX_APPEND_BLOCK) && !k.problem)
        k.problem = "an appended block is 1 byte to 4 MiB";
    if (call_start(&k, res) != 0)
        return -1;
    call_query(&k, "comp", "appendblock");
    if (append_pos >= 0) {
        snprintf(k.num, sizeof k.num, "%" PRId64, append_pos);
        call_xms(&k, "x-ms-blob-condition-appendpos", k.num);
    }
    k.req.body = data;
    k.req.body_len = len;
    k.req.content_type = "application/octet-stream";
    return perform(c, &k.req, 201, res);
}

static int list_page(struct blob_client *c, const char *prefix, const char *marker,
                     unsigned max_results, bool meta, struct blob_list *out,
                     struct blob_result *res);

int blob_list_page(struct blob_client *c, const char *prefix, const char *marker,
                   unsigned max_results, struct blob_list *out, struct blob_result *res)
{
    return list_page(c, prefix, marker, max_results, false, out, res);
}

int blob_list_page_meta(struct blob_client *c, const char *prefix, const char *marker,
                        unsigned max_results, struct blob_list *out, struct blob_result *res)
{
    return list_page(c, prefix, marker, max_results, true, out, res);
}

int blob_list_each(struct blob_client *c, const char *prefix, bool meta, unsigned max_pages,
                   void (*each)(const struct blob_item *it, void *ctx), void *ctx,
                   struct blob_result *res)
{
    struct blob_list page = {0};
    char *marker = NULL;
    int rc = 0;
    for (unsigned pages = 0; pages < max_pages; pages++) {
        if (list_page(c, prefix, marker, 0, meta, &page, res) != 0) {
            rc = -1;
            break;
        }
        for (size_t i = 0; i < page.count; i++)
            each(&page.items[i], ctx);
        free(marker);
        marker = page.next_marker ? strdup(page.next_marker) : NULL;
        if (!marker)
            break;
    }
    free(marker);
    blob_list_free(&page);
    return rc;
}

static int list_page(struct blob_client *c, const char *prefix, const char *marker,
                     unsigned max_results, bool meta, struct blob_list *out,
                     struct blob_result *res)
{
    struct call k;
    int rc = -1;
    /* Copied before `out` is freed: the marker is usually out->next_marker. */
    size_t np = strlen(c->prefix);
    const char *asked = prefix ? prefix : "";
    char *pfx = NULL;
    if (np || asked[0]) {
        size_t na = strlen(asked);
        if ((pfx = malloc(np + na + 1)) != NULL) {
            memcpy(pfx, c->prefix, np);
            memcpy(pfx + np, asked, na + 1);
        }
    }
    char *mark = marker && marker[0] ? strdup(marker) : NULL;
    bool oom = ((np || asked[0]) && !pfx) || (marker && marker[0] && !mark);
    blob_list_free(out);
    call_init(c, &k, "GET", NULL, NULL);
    call_start(&k, res);
    if (oom) {
        local_fail(res, "out of memory");
        goto out;
    }
    call_query(&k, "restype", "container");
    call_query(&k, "comp", "list");
    if (pfx)
        call_query(&k, "prefix", pfx);
    if (mark)
        call_query(&k, "marker", mark);
    if (max_results) {
        snprintf(k.num, sizeof k.num, "%u", max_results);
        call_query(&k, "maxresults", k.num);
    }
    if (meta)
        call_query(&k, "include", "metadata");
    if (perform(c, &k.req, 200, res) != 0)
        goto out;
    if (blob_parse_list(res->body ? res->body : "", res->body_len, out) != 0) {
        local_fail(res, "the listing could not be parsed");
        goto out;
    }
    /* Every name listed starts with the prefix asked for: the client's is cut. */
    for (size_t i = 0; np && i < out->count; i++) {
        char *name = out->items[i].name;
        if (strncmp(name, c->prefix, np) == 0)
            memmove(name, name + np, strlen(name + np) + 1);
    }
    rc = 0;
out:
    free(pfx);
    free(mark);
    return rc;
}

int blob_seal(struct blob_client *c, const char *name, const struct blob_cond *cond,
              struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "PUT", name, cond);
    if (call_start(&k, res) != 0)
        return -1;
    call_query(&k, "comp", "seal");
    return perform(c, &k.req, 200, res);
}

int blob_set_metadata(struct blob_client *c, const char *name, const struct blob_meta *meta,
                      size_t n, const struct blob_cond *cond, struct blob_result *res)
{
    struct call k;
    char names[BLOB_META_MAX][BLOB_META_NAME_MAX + 10];
    call_init(c, &k, "PUT", name, cond);
    if (n > BLOB_META_MAX && !k.problem)
        k.problem = "too many metadata pairs";
    for (size_t i = 0; i < n && !k.problem; i++) {
        bool ok = meta[i].name[0] != '\0';
        for (const char *p = meta[i].name; *p; p++)
            ok = ok && ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'));
        if (!ok || !header_value_ok(meta[i].value, BLOB_META_VALUE_MAX))
            k.problem = "a metadata name is lower-case letters and digits, a value printable";
    }
    if (call_start(&k, res) != 0)
        return -1;
    call_query(&k, "comp", "metadata");
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "x-ms-meta-%s", meta[i].name);
        call_xms(&k, names[i], meta[i].value);
    }
    return perform(c, &k.req, 200, res);
}

/* A lease action on `name`; `id` (may be NULL) goes in x-ms-lease-id. */
static void lease_init(const struct blob_client *c, struct call *k, const char *name,
                       const char *action, const char *id)
{
    call_init(c, k, "PUT", name, NULL);
    call_query(k, "comp", "lease");
    call_xms(k, "x-ms-lease-action", action);
    if (id) {
        copy_id(k, k->lease_id, id, "lease_id is not a valid lease id");
        call_xms(k, "x-ms-lease-id", k->lease_id);
    }
}

int blob_lease_acquire(struct blob_client *c, const char *name, int duration,
                       const char *proposed_id, struct blob_result *res)
{
    struct call k;
    lease_init(c, &k, name, "acquire", NULL);
    if (duration != -1 && (duration < 15 || duration > 60) && !k.problem)
        k.problem = "a lease lasts 15 to 60 seconds, or -1 for ever";
    snprintf(k.num, sizeof k.num, "%d", duration);
    call_xms(&k, "x-ms-lease-duration", k.num);
    if (proposed_id) {
        copy_id(&k, k.proposed_id, proposed_id, "proposed_id is not a valid lease id");
        call_xms(&k, "x-ms-proposed-lease-id", k.proposed_id);
    }
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 201, res);
}

static int lease_with_id(struct blob_client *c, const char *name, const char *action,
                         const char *lease_id, struct blob_result *res)
{
    struct call k;
    lease_init(c, &k, name, action, lease_id);
    if (!lease_id && !k.problem)
        k.problem = "no lease_id";
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 200, res);
}

int blob_lease_renew(struct blob_client *c, const char *name, const char *lease_id,
                     struct blob_result *res)
{
    return lease_with_id(c, name, "renew", lease_id, res);
}

int blob_lease_release(struct blob_client *c, const char *name, const char *lease_id,
                       struct blob_result *res)
{
    return lease_with_id(c, name, "release", lease_id, res);
}

static int lease_break(struct blob_client *c, const char *name, int break_period,
                       const char *if_match, struct blob_result *res)
{
    struct call k;
    call_init(c, &k, "PUT", name, &(struct blob_cond){.if_match = if_match});
    call_query(&k, "comp", "lease");
    call_xms(&k, "x-ms-lease-action", "break");
    if (break_period > 60 && !k.problem)
        k.problem = "a break period is 0 to 60 seconds";
    if (break_period >= 0) {
        snprintf(k.num, sizeof k.num, "%d", break_period);
        call_xms(&k, "x-ms-lease-break-period", k.num);
    }
    if (call_start(&k, res) != 0)
        return -1;
    return perform(c, &k.req, 202, res);
}

int blob_lease_break(struct blob_client *c, const char *name, int break_period,
                     struct blob_result *res)
{
    return lease_break(c, name, break_period, NULL, res);
}

int blob_lease_break_if(struct blob_client *c, const char *name, int break_period,
                        const char *if_match, struct blob_result *res)
{
    if (!if_match) {
        blob_result_free(res);
        snprintf(res->message, sizeof res->message, "no ETag to break the lease on");
        return -1;
    }
    return lease_break(c, name, break_period, if_match, res);
}
