/*
 * The forwarder (see forward.h).
 *
 * One thread owns a libcurl multi handle, and with it a cache of keep-alive connections to
 * the active. Requests arrive on `incoming` (under the lock) and live on one of two lists
 * that only the thread touches: `held` (waiting for an active, or for the next attempt to
 * connect) and `sending` (a transfer in progress). Each turn of the loop:
 *   1. applies a role change that fell due, takes the new requests, and reads the role;
 *   2. aborts the transfers whose clients hung up; after a role change, takes back to
 *      `held` the transfers that have not sent a byte yet (their target may have moved);
 *   3. settles `held`: served here (SERVE), refused (FENCED, or the forward timeout from
 *      arrival passed), or sent (FORWARD, when its next attempt is due);
 *   4. runs the transfers and settles the finished ones: relayed; held again when the
 *      request was never offered to a connection (the active could not be connected to: it
 *      surely never reached it); refused `active_lost` when it may have been delivered;
 *   5. sleeps in curl_multi_poll() until a socket, the nearest deadline or a wake-up.
 * `done` is called with no lock held, after the request has left every list.
 */
#include "http/forward.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "http/hangup.h"
#include "http/stats.h"

#define URL_MAX        512
#define ANSWER_MAX     ((size_t)64 << 20)   /* a list of 1000 resources is far less */
#define RETRY_NS       (200 * MX_NS_PER_MS) /* between attempts to connect to the active */
#define CONNECT_MAX_MS 1000 /* then held again: a role change can redirect it meanwhile */
#define IDLE_TICK_MS   1000

const char *const fwd_header_names[FWD_NHEADERS] = {
    [FWD_H_CONTENT_TYPE] = "Content-Type",
    [FWD_H_RETRY_AFTER] = "Retry-After",
    [FWD_H_ALLOW] = "Allow",
    [FWD_H_WWW_AUTHENTICATE] = "WWW-Authenticate",
    [FWD_H_SERVED_BY] = "Mutexd-Served-By",
    [FWD_H_PARTITION] = "Mutexd-Partition",
    [FWD_H_REQUEST_ID] = "X-Request-Id",
};

/* One partition's role (a group of one partition has one). */
struct fwd_part {
    /* lock */
    char url[URL_MAX]; /* the owner's, for HTTP_ROLE_FORWARD */
    uint64_t gen;      /* changes with every role change */
    /* any thread: written under the lock, read without it */
    _Atomic int role;
    /* the forwarder thread's */
    char cur_url[URL_MAX];
    uint64_t cur_gen;
    bool moved;              /* this turn: the role changed since the last */
    enum http_role cur_role; /* this turn's */
};

struct fwd {
    uint64_t timeout_ns;
    unsigned partitions;
    struct fwd_part *parts;
    CURLM *multi;
    pthread_t thread;
    bool thread_started;
    bool stopped; /* fwd_stop() returned (the stopping thread's own) */

    pthread_mutex_t lock;
    /* lock */
    struct fwd_req *incoming, **incoming_tail;
    bool stopping;
    bool later; /* a role change of every partition is due at later_ns */
    uint64_t later_ns;
    enum http_role later_role;
    char later_url[URL_MAX];

    /* the forwarder thread's */
    struct fwd_req *held, *sending;

    /* metrics, any thread */
    _Atomic uint64_t relayed[HTTP_STATS_NCODES]; /* by http_code_slot() */
    _Atomic uint64_t no_active, lost, served_here, gone;
    _Atomic long n_held, n_sending;
    _Atomic uint64_t busy; /* refused FWD_BUSY */
    /* the forwarder thread's: transfers that wait at the active, and their bound */
    unsigned n_parked, max_parked;
};

static const char *role_name(enum http_role r)
{
    switch (r) {
    case HTTP_ROLE_SERVE:
        return "serve";
    case HTTP_ROLE_FORWARD:
        return "forward";
    case HTTP_ROLE_HOLD:
        return "hold";
    case HTTP_ROLE_FENCED:
        return "fenced";
    }
    return "unknown";
}

bool fwd_parse_role(const char *spec, enum http_role *role, const char **url)
{
    *url = NULL;
    if (strncmp(spec, "forward:", 8) == 0 && spec[8]) {
        *role = HTTP_ROLE_FORWARD;
        *url = spec + 8;
    } else if (strcmp(spec, "hold") == 0) {
        *role = HTTP_ROLE_HOLD;
    } else if (strcmp(spec, "fenced") == 0) {
        *role = HTTP_ROLE_FENCED;
    } else if (strcmp(spec, "serve") == 0) {
        *role = HTTP_ROLE_SERVE;
    } else {
        return false;
    }
    return true;
}

/* ---- lists (the thread's) ---------------------------------------------------------- */

static void push(struct fwd_req **list, struct fwd_req *r)
{
    r->_next = *list;
    *list = r;
}

static void unlink_req(struct fwd_req **list, struct fwd_req *r)
{
    for (struct fwd_req **pp = list; *pp; pp = &(*pp)->_next)
        if (*pp == r) {
            *pp = r->_next;
            r->_next = NULL;
            return;
        }
}

static void free_headers(struct fwd_req *r)
{
    for (int i = 0; i < FWD_NHEADERS; i++) {
        free(r->headers[i]);
        r->headers[i] = NULL;
    }
}

static void end_transfer(struct fwd *f, struct fwd_req *r)
{
    if (r->_easy) {
        curl_multi_remove_handle(f->multi, r->_easy);
        curl_easy_cleanup(r->_easy);
        r->_easy = NULL;
        atomic_fetch_sub(&f->n_sending, 1);
        if (r->_parked)
            f->n_parked--;
        r->_parked = false;
    }
}

/* `r` is on no list. Settles it and hands it back: after `done` it is not touched. */
static void complete(struct fwd *f, struct fwd_req *r, enum fwd_outcome outcome, const char *reason)
{
    end_transfer(f, r);
    curl_slist_free_all(r->_send_headers);
    r->_send_headers = NULL;
    r->outcome = outcome;
    r->reason = reason;
    if (outcome == FWD_RELAYED) {
        atomic_fetch_add(&f->relayed[http_code_slot(r->status)], 1);
    } else {
        mx_buf_free(&r->_body);
        free_headers(r);
        if (outcome == FWD_SERVE_HERE)
            atomic_fetch_add(&f->served_here, 1);
        else if (outcome == FWD_GONE)
            atomic_fetch_add(&f->gone, 1);
        else if (strcmp(reason, FWD_NO_ACTIVE) == 0)
            atomic_fetch_add(&f->no_active, 1);
        else if (strcmp(reason, FWD_ACTIVE_LOST) == 0)
            atomic_fetch_add(&f->lost, 1);
        else if (strcmp(reason, FWD_BUSY) == 0)
            atomic_fetch_add(&f->busy, 1);
    }
    r->done(r);
}

/* ---- one transfer ------------------------------------------------------------------- */

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct fwd_req *r = arg;
    mx_buf_append(&r->_body, p, size * n);
    return r->_body.oom ? 0 : size * n; /* 0 aborts the transfer */
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct fwd_req *r = arg;
    size_t len = size * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        free_headers(r); /* a new answer begins (after a 1xx): only its own count */
        return len;
    }
    const char *colon = memchr(p, ':', len), *end = p + len;
    if (!colon)
        return len;
    size_t nl = (size_t)(colon - p);
    for (int i = 0; i < FWD_NHEADERS; i++) {
        if (strlen(fwd_header_names[i]) != nl || strncasecmp(p, fwd_header_names[i], nl) != 0)
            continue;
        const char *v = colon + 1;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
            end--;
        free(r->headers[i]);
        r->headers[i] = strndup(v, (size_t)(end - v)); /* NULL (out of memory): not relayed */
    }
    return len;
}

/*
 * Whether the active may have seen a request. libcurl calls this once a connection is
 * established (or taken from its cache) and before it writes a byte of the request, so a
 * request it was never called for cannot have reached the active, and is held to be sent
 * again (`_offered` == 0). Once it was called, the request may be in the active's socket
 * buffer and carried out even when the transfer ends in an error: the bytes libcurl reports
 * sent say nothing of that. And libcurl sends a request a second time by itself, on a new
 * connection, when a connection it reused closes before any answer (the peer may have
 * closed it idle, or died with the request read): it calls this again first. A request that
 * is not idempotent (a break, which would break the next holder; an acquire without a
 * lease_id, which would leave a second lease nobody holds) is refused that second sending:
 * the transfer fails and the client gets 503 `active_lost`, to retry knowingly. The cost
 * is such a 503 when the active closed an idle connection just as a break or an acquire
 * without a lease_id went out on it; a new connection for each of them
 * (CURLOPT_FRESH_CONNECT) would avoid it at a connection set up per request. Idempotent
 * requests may go twice, as libcurl does.
 */
static int on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    (void)primary_ip;
    (void)local_ip;
    (void)primary_port;
    (void)local_port;
    struct fwd_req *r = arg;
    if (r->_offered++ > 0 && !r->idempotent)
        return CURL_PREREQFUNC_ABORT;
    return CURL_PREREQFUNC_OK;
}

static uint64_t deadline(const struct fwd *f, const struct fwd_req *r)
{
    return r->arrival_ns + f->timeout_ns;
}

/* The role `r` is handled in this turn: a request with a self URL is sent to it while
 * its partition is served here. */
static enum http_role role_of(const struct fwd *f, const struct fwd_req *r)
{
    enum http_role role = f->parts[r->partition].cur_role;
    return role == HTTP_ROLE_SERVE && r->self_url ? HTTP_ROLE_FORWARD : role;
}

/* Starts sending `r` (on no list) to the current URL; on success it is on `sending`. */
static bool start(struct fwd *f, struct fwd_req *r, uint64_t now)
{
    char url[URL_MAX + 8192];
    const char *to = f->parts[r->partition].cur_role == HTTP_ROLE_SERVE && r->self_url
                         ? r->self_url
                         : f->parts[r->partition].cur_url;
    size_t base = strlen(to);
    while (base && to[base - 1] == '/')
        base--;
    int n = snprintf(url, sizeof url, "%.*s%s", (int)base, to, r->target);
    if (n < 0 || (size_t)n >= sizeof url)
        return false;
    CURL *e = curl_easy_init();
    if (!e)
        return false;
    mx_buf_free(&r->_body);
    r->_body = MX_BUF_INIT(ANSWER_MAX);
    free_headers(r);
    uint64_t left_ms = (deadline(f, r) - now) / MX_NS_PER_MS + 1;
    bool ok =
        curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PROXY, "") == CURLE_OK && /* never *_proxy variables */
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->_send_headers) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PRIVATE, r) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEDATA, r) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_HEADERDATA, r) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PREREQDATA, r) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)(left_ms < CONNECT_MAX_MS ? left_ms : CONNECT_MAX_MS)) == CURLE_OK &&
        /* A blocking acquire or a watch waits at the active for its whole wait. */
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                         (long)(r->wait_ms + f->timeout_ns / MX_NS_PER_MS)) == CURLE_OK;
    if (ok && strcmp(r->method, "POST") == 0)
        ok =
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len) == CURLE_OK &&
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body_len ? r->body : "") == CURLE_OK;
    else if (ok)
        ok = curl_easy_setopt(e, CURLOPT_HTTPGET, 1L) == CURLE_OK;
    if (!ok || curl_multi_add_handle(f->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        return false;
    }
    r->_easy = e;
    r->_offered = 0;
    r->_sent_ns = now;
    r->_parked = r->wait_ms > 0;
    if (r->_parked)
        f->n_parked++;
    atomic_fetch_add(&f->n_sending, 1);
    push(&f->sending, r);
    return true;
}

/* Back on `held`, to be sent again at `not_before` or as the role says. */
static void hold(struct fwd *f, struct fwd_req *r, uint64_t not_before)
{
    end_transfer(f, r);
    r->_not_before_ns = not_before;
    push(&f->held, r);
    atomic_fetch_add(&f->n_held, 1);
}

/* Where `r` goes now, for the logs. */
static const char *to_url(const struct fwd *f, const struct fwd_req *r)
{
    const char *u = f->parts[r->partition].cur_url;
    return u[0] ? u : "none";
}

static void log_refused(const struct fwd *f, const struct fwd_req *r, const char *reason,
                        const char *detail)
{
    char t[300], d[200];
    mx_warn("forward: request refused",
            "reason=%s method=%s target=%s active=%s detail=%s request_id=%s", reason, r->method,
            mx_log_quote(t, sizeof t, r->target), to_url(f, r), mx_log_quote(d, sizeof d, detail),
            r->request_id ? r->request_id : "");
}

/* A transfer ended. */
static void finished(struct fwd *f, CURL *e, CURLcode rc, uint64_t now)
{
    struct fwd_req *r = NULL;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
    if (!r)
        return;
    unlink_req(&f->sending, r);
    if (rc == CURLE_OK) {
        long status = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        r->status = (int)status;
        r->answer_len = r->_body.len;
        r->answer = mx_buf_take(&r->_body);
        if (!r->answer) {
            log_refused(f, r, FWD_ACTIVE_LOST, "out_of_memory");
            complete(f, r, FWD_REFUSED, FWD_ACTIVE_LOST);
            return;
        }
        char t[300];
        mx_debug("forwarded",
                 "method=%s target=%s status=%d ms=%" PRIu64 " active=%s request_id=%s", r->method,
                 mx_log_quote(t, sizeof t, r->target), r->status,
                 (uint64_t)((now - r->_sent_ns) / MX_NS_PER_MS), to_url(f, r),
                 r->request_id ? r->request_id : "");
        complete(f, r, FWD_RELAYED, NULL);
        return;
    }
    if (r->_offered == 0) {
        /* Never offered to a connection (refused, unreachable, connect timeout): the active
         * never saw it, so it can go again, there or wherever the role says (on_prereq). */
        char d[200];
        mx_debug("forward: cannot reach the active; holding", "active=%s error=%s request_id=%s",
                 to_url(f, r), mx_log_quote(d, sizeof d, curl_easy_strerror(rc)),
                 r->request_id ? r->request_id : "");
        hold(f, r, now + RETRY_NS);
        return;
    }
    log_refused(f, r, FWD_ACTIVE_LOST,
                rc == CURLE_WRITE_ERROR           ? "answer_too_large"
                : rc == CURLE_ABORTED_BY_CALLBACK ? "connection_lost_not_sent_again"
                                                  : curl_easy_strerror(rc));
    complete(f, r, FWD_REFUSED, FWD_ACTIVE_LOST);
}

/* ---- the thread ---------------------------------------------------------------------- */

/* lock held */
static void apply_role(struct fwd *f, unsigned p, enum http_role role, const char *url)
{
    struct fwd_part *pt = &f->parts[p];
    if (role == HTTP_ROLE_FORWARD && (!url || !*url || strlen(url) >= URL_MAX))
        role = HTTP_ROLE_HOLD;
    const char *new_url = role == HTTP_ROLE_FORWARD ? url : "";
    /* A server group sets the role at every turn of its loop, changed or not: only a
     * change is worth a line. */
    bool same_url = strcmp(pt->url, new_url) == 0;
    snprintf(pt->url, sizeof pt->url, "%s", new_url);
    pt->gen++;
    enum http_role old = (enum http_role)atomic_exchange(&pt->role, (int)role);
    if (old == role && same_url)
        return;
    if (f->partitions > 1)
        mx_info("http role", "partition=%u role=%s previous=%s owner=%s", p, role_name(role),
                role_name(old), pt->url[0] ? pt->url : "none");
    else
        mx_info("http role", "role=%s previous=%s active=%s", role_name(role), role_name(old),
                pt->url[0] ? pt->url : "none");
}

/* Settles what is held, and returns the nearest time something held is due. */
static uint64_t settle_held(struct fwd *f, uint64_t now, uint64_t wake)
{
    struct fwd_req *list = f->held;
    f->held = NULL;
    while (list) {
        struct fwd_req *r = list;
        list = r->_next;
        r->_next = NULL;
        atomic_fetch_sub(&f->n_held, 1);
        enum http_role role = role_of(f, r);
        if (atomic_load(&r->_cancel) || (r->client_fd >= 0 && hangup_peer_gone(r->client_fd))) {
            complete(f, r, FWD_GONE, NULL);
        } else if (role == HTTP_ROLE_SERVE) {
            complete(f, r, FWD_SERVE_HERE, NULL);
        } else if (role == HTTP_ROLE_FENCED) {
            complete(f, r, FWD_REFUSED, FWD_FENCED);
        } else if (now >= deadline(f, r)) {
            log_refused(f, r, FWD_NO_ACTIVE, "held_for_the_forward_timeout");
            complete(f, r, FWD_REFUSED, FWD_NO_ACTIVE);
        } else if (role == HTTP_ROLE_FORWARD && r->hops >= FWD_HOPS_MAX) {
            log_refused(f, r, FWD_NO_ACTIVE, "forwarded_too_many_times");
            complete(f, r, FWD_REFUSED, FWD_NO_ACTIVE);
        } else if (role == HTTP_ROLE_FORWARD && now >= r->_not_before_ns && r->wait_ms > 0 &&
                   f->max_parked && f->n_parked >= f->max_parked) {
            log_refused(f, r, FWD_BUSY, "waiting_requests_at_their_bound");
            complete(f, r, FWD_REFUSED, FWD_BUSY);
        } else if (role == HTTP_ROLE_FORWARD && now >= r->_not_before_ns) {
            if (!start(f, r, now)) {
                log_refused(f, r, FWD_ACTIVE_LOST, "cannot_start_a_transfer");
                complete(f, r, FWD_REFUSED, FWD_ACTIVE_LOST);
            }
        } else {
            hold(f, r, r->_not_before_ns);
            if (deadline(f, r) < wake)
                wake = deadline(f, r);
            if (role == HTTP_ROLE_FORWARD && r->_not_before_ns < wake)
                wake = r->_not_before_ns;
        }
    }
    return wake;
}

static void *fwd_main(void *arg)
{
    struct fwd *f = arg;
    for (;;) {
        uint64_t now = mx_mono_ns(), wake = now + IDLE_TICK_MS * MX_NS_PER_MS;
        pthread_mutex_lock(&f->lock);
        if (f->later && now >= f->later_ns) {
            f->later = false;
            for (unsigned p = 0; p < f->partitions; p++)
                apply_role(f, p, f->later_role, f->later_url);
        }
        if (f->later && f->later_ns < wake)
            wake = f->later_ns;
        while (f->incoming) {
            struct fwd_req *r = f->incoming;
            f->incoming = r->_next;
            r->_next = NULL;
            hold(f, r, 0);
        }
        f->incoming_tail = &f->incoming;
        bool stopping = f->stopping;
        for (unsigned p = 0; p < f->partitions; p++) {
            struct fwd_part *pt = &f->parts[p];
            pt->moved = pt->gen != pt->cur_gen;
            pt->cur_role = (enum http_role)atomic_load(&pt->role);
            if (pt->moved) {
                memcpy(pt->cur_url, pt->url, sizeof pt->cur_url);
                pt->cur_gen = pt->gen;
            }
        }
        pthread_mutex_unlock(&f->lock);
        if (stopping)
            break;

        for (struct fwd_req *r = f->sending, *next; r; r = next) {
            next = r->_next;
            if (atomic_load(&r->_cancel)) {
                /* Closing the connection is what tells the active its waiter has gone. */
                unlink_req(&f->sending, r);
                complete(f, r, FWD_GONE, NULL);
            } else if (f->parts[r->partition].moved && r->_offered == 0) {
                unlink_req(&f->sending, r);
                hold(f, r, 0);
            }
        }
        wake = settle_held(f, now, wake);

        int running = 0, left = 0;
        curl_multi_perform(f->multi, &running);
        CURLMsg *m;
        while ((m = curl_multi_info_read(f->multi, &left)))
            if (m->msg == CURLMSG_DONE)
                finished(f, m->easy_handle, m->data.result, mx_mono_ns());
        /* What finished unsent is due again later: settle_held() sees it next turn. */
        for (struct fwd_req *r = f->held; r; r = r->_next) {
            if (deadline(f, r) < wake)
                wake = deadline(f, r);
            if (r->_not_before_ns < wake)
                wake = r->_not_before_ns;
        }
        now = mx_mono_ns();
        int timeout = wake > now ? (int)((wake - now + MX_NS_PER_MS - 1) / MX_NS_PER_MS) : 0;
        curl_multi_poll(f->multi, NULL, 0, timeout, NULL);
    }

    /* Shutting down: nothing more is taken (fwd_submit() sees `stopping`). */
    pthread_mutex_lock(&f->lock);
    while (f->incoming) {
        struct fwd_req *r = f->incoming;
        f->incoming = r->_next;
        r->_next = NULL;
        hold(f, r, 0);
    }
    pthread_mutex_unlock(&f->lock);
    while (f->sending) {
        struct fwd_req *r = f->sending;
        f->sending = r->_next;
        r->_next = NULL;
        complete(f, r, FWD_REFUSED, FWD_SHUTTING_DOWN);
    }
    while (f->held) {
        struct fwd_req *r = f->held;
        f->held = r->_next;
        r->_next = NULL;
        atomic_fetch_sub(&f->n_held, 1);
        complete(f, r, FWD_REFUSED, FWD_SHUTTING_DOWN);
    }
    return NULL;
}

/* ---- the interface --------------------------------------------------------------------- */

int fwd_start(struct fwd **out, unsigned partitions, uint64_t timeout_ms, unsigned max_parked,
              char *err, size_t errlen)
{
    struct fwd *f = calloc(1, sizeof *f);
    if (f) {
        f->partitions = partitions ? partitions : 1;
        if (!(f->parts = calloc(f->partitions, sizeof *f->parts))) {
            free(f);
            f = NULL;
        }
    }
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    f->timeout_ns = (timeout_ms ? timeout_ms : 10000) * MX_NS_PER_MS;
    f->max_parked = max_parked;
    f->incoming_tail = &f->incoming;
    for (unsigned p = 0; p < f->partitions; p++)
        atomic_init(&f->parts[p].role, HTTP_ROLE_SERVE);
    pthread_mutex_init(&f->lock, NULL);
    /* libcurl's global state is set up once by whoever comes first; the blob client's
     * blob_global_init() does the same, and curl counts the calls. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "cannot initialize libcurl");
        pthread_mutex_destroy(&f->lock);
        free(f->parts);
        free(f);
        return -1;
    }
    f->multi = curl_multi_init();
    if (!f->multi || pthread_create(&f->thread, NULL, fwd_main, f) != 0) {
        snprintf(err, errlen, "cannot start the forwarder");
        if (f->multi)
            curl_multi_cleanup(f->multi);
        curl_global_cleanup();
        pthread_mutex_destroy(&f->lock);
        free(f->parts);
        free(f);
        return -1;
    }
    f->thread_started = true;
    *out = f;
    return 0;
}

void fwd_set_role(struct fwd *f, unsigned partition, enum http_role role, const char *url)
{
    if (partition >= f->partitions)
        return;
    pthread_mutex_lock(&f->lock);
    apply_role(f, partition, role, url);
    pthread_mutex_unlock(&f->lock);
    curl_multi_wakeup(f->multi);
}

void fwd_set_role_later(struct fwd *f, uint64_t after_ms, enum http_role role, const char *url)
{
    pthread_mutex_lock(&f->lock);
    f->later = true;
    f->later_ns = mx_mono_ns() + after_ms * MX_NS_PER_MS;
    f->later_role = role;
    snprintf(f->later_url, sizeof f->later_url, "%s", url ? url : "");
    pthread_mutex_unlock(&f->lock);
    curl_multi_wakeup(f->multi);
}

enum http_role fwd_role(struct fwd *f, unsigned partition)
{
    return (enum http_role)atomic_load(&f->parts[partition < f->partitions ? partition : 0].role);
}

enum http_role fwd_owner(struct fwd *f, unsigned partition, char *url, size_t len)
{
    struct fwd_part *pt = &f->parts[partition < f->partitions ? partition : 0];
    pthread_mutex_lock(&f->lock);
    enum http_role role = (enum http_role)atomic_load(&pt->role);
    snprintf(url, len, "%s", role == HTTP_ROLE_FORWARD ? pt->url : "");
    pthread_mutex_unlock(&f->lock);
    return role;
}

static struct curl_slist *add_header(struct curl_slist *l, bool *ok, const char *name,
                                     const char *value)
{
    char line[8300];
    /* "Name:" alone keeps libcurl from sending its own (an Accept of any type, a form's
     * Content-Type). */
    snprintf(line, sizeof line, "%s:%s%s", name, value ? " " : "", value ? value : "");
    struct curl_slist *n = curl_slist_append(l, line);
    if (!n) {
        *ok = false;
        return l;
    }
    return n;
}

int fwd_submit(struct fwd *f, struct fwd_req *r)
{
    bool ok = true;
    struct curl_slist *h = NULL;
    if (r->authorization)
        h = add_header(h, &ok, "Authorization", r->authorization);
    h = add_header(h, &ok, "Content-Type", r->content_type);
    h = add_header(h, &ok, "Accept", r->accept);
    h = add_header(h, &ok, "X-Request-Id", r->request_id);
    char hops[16];
    snprintf(hops, sizeof hops, "%u", r->hops + 1);
    h = add_header(h, &ok, FWD_HOPS_HEADER, hops);
    h = add_header(h, &ok, "Expect", NULL); /* no 100-continue round trip */
    r->_next = NULL;
    r->_easy = NULL;
    r->_send_headers = h;
    r->_body = MX_BUF_INIT(ANSWER_MAX);
    r->_not_before_ns = 0;
    atomic_init(&r->_cancel, false);
    r->answer = NULL;
    r->answer_len = 0;
    r->status = 0;
    r->reason = NULL;
    memset(r->headers, 0, sizeof r->headers);
    pthread_mutex_lock(&f->lock);
    bool stopping = f->stopping;
    if (ok && !stopping) {
        *f->incoming_tail = r;
        f->incoming_tail = &r->_next;
    }
    pthread_mutex_unlock(&f->lock);
    if (!ok || stopping) {
        curl_slist_free_all(h);
        r->_send_headers = NULL;
        return -1;
    }
    curl_multi_wakeup(f->multi);
    return 0;
}

void fwd_cancel(struct fwd *f, struct fwd_req *r)
{
    atomic_store(&r->_cancel, true);
    curl_multi_wakeup(f->multi);
}

void fwd_stop(struct fwd *f)
{
    if (f->stopped)
        return;
    pthread_mutex_lock(&f->lock);
    f->stopping = true;
    pthread_mutex_unlock(&f->lock);
    curl_multi_wakeup(f->multi);
    pthread_join(f->thread, NULL);
    f->stopped = true;
}

void fwd_free(struct fwd *f)
{
    if (!f)
        return;
    fwd_stop(f);
    curl_multi_cleanup(f->multi);
    curl_global_cleanup();
    pthread_mutex_destroy(&f->lock);
    free(f->parts);
    free(f);
}

void fwd_req_clear(struct fwd_req *r)
{
    free(r->answer);
    r->answer = NULL;
    free_headers(r);
    mx_buf_free(&r->_body);
}

void fwd_metrics(struct fwd *f, struct mx_buf *b)
{
    prom_header(b, "mutexd_http_role", "gauge",
                "The HTTP front's role: 1 for the one in force (serve: answer here; forward: "
                "send to the active; hold: wait for an active; fenced: refuse).");
    for (unsigned p = 0; p < f->partitions; p++) {
        enum http_role role = fwd_role(f, p);
        char part[12];
        snprintf(part, sizeof part, "%u", p);
        for (int r = HTTP_ROLE_SERVE; r <= HTTP_ROLE_FENCED; r++)
            prom_sample(b, "mutexd_http_role", r == (int)role, "role", role_name((enum http_role)r),
                        f->partitions > 1 ? "partition" : NULL, part, NULL);
    }
    prom_header(b, "mutexd_forwarded_requests_total", "counter",
                "Requests forwarded to the active server and answered by it, by status.");
    for (size_t i = 0; i < HTTP_STATS_NCODES; i++) {
        uint64_t n = atomic_load(&f->relayed[i]);
        if (!n)
            continue;
        prom_sample(b, "mutexd_forwarded_requests_total", n, "code", http_code_name((int)i), NULL);
    }
    prom_header(b, "mutexd_forward_refused_total", "counter",
                "Requests to forward answered 503 here: no active server within the forward "
                "timeout, the active lost after the request may have reached it, or too many "
                "waiting requests forwarded at once.");
    prom_sample(b, "mutexd_forward_refused_total", atomic_load(&f->no_active), "reason",
                FWD_NO_ACTIVE, NULL);
    prom_sample(b, "mutexd_forward_refused_total", atomic_load(&f->lost), "reason", FWD_ACTIVE_LOST,
                NULL);
    prom_sample(b, "mutexd_forward_refused_total", atomic_load(&f->busy), "reason", FWD_BUSY, NULL);
    prom_counter(b, "mutexd_forward_served_here_total",
                 "Held requests served here after all, the role having become serve.",
                 atomic_load(&f->served_here));
    prom_counter(b, "mutexd_forward_abandoned_total",
                 "Forwarded or held requests whose client hung up first.", atomic_load(&f->gone));
    prom_gauge(b, "mutexd_forward_held", "Requests held for an active server to send them to.",
               atomic_load(&f->n_held));
    prom_gauge(b, "mutexd_forward_in_flight", "Requests being sent to or answered by the active.",
               atomic_load(&f->n_sending));
}
