/*
 * libmutexd: the C client of mutexd, a lease server (HTTP API version 1).
 *
 * A client is bound to one server URL, or to several: the servers of one group (mutexd --ha),
 * any of which answers any request. Each call is one HTTP request, answered synchronously:
 * acquire, renew, release and break a lease; read a resource's state, watch it for the next
 * change, and list held resources page by page; watch a prefix's list, read and follow the
 * recent events, and ask who the token is. Besides, mutexd_partition_of() computes the
 * partition of a resource name, as the server does.
 *
 * Semaphores and shared leases. A resource grants one exclusive lease at a time unless the
 * acquire asks otherwise: with `limit` N > 1 (mutexd_acquire_options) it is a counting
 * semaphore that up to N leases hold at once, each with its own lease id and fencing token;
 * with `shared` the lease is a reader's, held together with other shared leases while no
 * exclusive one holds the resource. The limit belongs to the resource while it has holders:
 * an acquire that names another gets MUTEXD_ERR_LIMIT_MISMATCH with the limit in force in
 * error->limit. A state lists every holder (state->holders), oldest grant first.
 *
 * Several resources at once. mutexd_acquire_many() acquires a set of resources with one
 * request, a lease on each or on none, under one lease id and with a fencing token for each;
 * mutexd_renew_many() and mutexd_release_many() renew and release the set. A lock is leases
 * that a thread of the library renews: mutexd_lock_many() a set, mutexd_lock_ordered()
 * resources of different partitions taken one by one in name order; it is lost as soon as
 * any of its leases is.
 *
 * Several servers. A call goes first to the server that last answered. When no answer comes
 * from it (a connection error, a timeout) or it answers 503 (unavailable), the call sends the
 * same request to the next one, and so on round the list; before going round a second time
 * it pauses for the Retry-After of the 503s (250 ms without one, 2 s at most). It goes round
 * at most twice; when every attempt failed, it returns what the last one gave. With one
 * server a call is one attempt, as always. A request that got no answer may have been
 * carried out: an acquire is safe to send again, since it proposes the same lease id to every
 * server (the same lease comes back); a release sent again after that may answer
 * MUTEXD_LOST, a break broken = 0.
 *
 * Partitions. On a partitioned group (mutexd --partitions N) the first answer that names a
 * resource's partition makes the client read the partition map (GET /v1/servers); then a
 * call about one resource (acquire, renew, release, break, get, watch) goes first to the
 * owner of its partition (mutexd_partition_of()), at the URL that server advertises, so that
 * no server forwards it, and round the given servers as above when that fails. After a
 * surprise (an answer served by another server than the one asked, a 503, no answer) the
 * map is read again, at most once a second; a failed reading never fails the call.
 *
 * Results. Every call returns a mutexd_result: MUTEXD_OK, two "declined" answers that are part
 * of normal operation (MUTEXD_HELD: someone else holds the resource; MUTEXD_LOST: your lease is
 * no longer the resource's), and the errors. On anything but MUTEXD_OK the struct mutexd_error
 * passed in (it may be NULL) says what happened: the HTTP status, the API's error code, its
 * message and field, the Retry-After header, the holder for MUTEXD_HELD, or the transport
 * failure when no answer came.
 *
 * Memory. The structs that calls fill (mutexd_lease, mutexd_state, mutexd_page, mutexd_error,
 * mutexd_event_page, mutexd_whoami) belong to the caller, who creates them zeroed
 * (`struct mutexd_lease lease = {0};`). A call frees what a previous call left in them before
 * filling them again, so one struct can be reused for many calls; the matching *_clear()
 * function frees what the last call left and empties the struct. Every string in them is owned by
 * the struct: copy it to keep it past the next call or the clear. A call that fails leaves its
 * output struct (lease, state, page) as it was. Any output or error argument may be NULL when the
 * caller does not need it.
 *
 * Threads. mutexd_client_new() and mutexd_client_free() may be called on any thread. A client
 * is used by one thread at a time (it owns one libcurl handle and its connection); use one
 * client per thread, or a lock around a shared one. Different clients may be used by
 * different threads at once. The library initializes libcurl once, on the first
 * mutexd_client_new(); a program that also uses libcurl itself, or that starts threads early,
 * calls curl_global_init() first, before any thread exists, as libcurl asks.
 *
 * Time. Act on durations (ttl_ms, expires_in_ms) measured on your own monotonic clock from the
 * moment you sent the request, never on the *_at wall-clock times, which are informative.
 *
 * Compatibility. Fields are only ever added at the end of a struct, and a zeroed field means
 * what the library did before it existed, so code written for an older header compiles and
 * behaves the same (`struct mutexd_acquire_options o = {0};`, designated initializers, and
 * positional ones alike). A struct the caller allocates that grows changes the library's ABI:
 * the shared library's soname changes with it (libmutexd.so.1 since the semaphore fields), so
 * that a program built against the older header never runs against a library that would
 * write past its structs.
 */
#ifndef MUTEXD_H
#define MUTEXD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MUTEXD_API __attribute__((visibility("default")))
#else
#define MUTEXD_API
#endif

#define MUTEXD_CLIENT_VERSION_STRING "0.1.0"

/* Length of a lease id (a UUID: 8-4-4-4-12 hexadecimal digits), without the final NUL. */
#define MUTEXD_LEASE_ID_LEN 36

typedef enum mutexd_result {
    MUTEXD_OK = 0,
    /* Declined, not failed: acquire found the resource held by another lease (409
     * lease_held, also when wait_ms ran out). error->holder says by whom, error->retry_after_s
     * when it may be free. */
    MUTEXD_HELD = 1,
    /* Declined, not failed: renew or release with a lease that is no longer the resource's
     * (409 lease_lost): it was released, broken, or another lease was granted after it
     * expired. Whoever holds a lost lease must stop the work it guards at once. */
    MUTEXD_LOST = 2,
    /* The server answered with any other error: see error->status and error->code. */
    MUTEXD_ERR_API = 3,
    /* No answer: the connection failed, TLS failed, or the request timed out. The request may
     * or may not have been carried out. error->transport is 1, error->message says why. */
    MUTEXD_ERR_TRANSPORT = 4,
    /* A successful status with a body that is not what the API promises. */
    MUTEXD_ERR_PROTOCOL = 5,
    /* Bad arguments, found before anything was sent (a NULL or empty resource, metadata that
     * is not a JSON object, a URL that is not http or https, ...). */
    MUTEXD_ERR_ARG = 6,
    /* Out of memory. */
    MUTEXD_ERR_NOMEM = 7,
    /* acquire named another limit than the one in force on the resource (409
     * limit_mismatch): error->limit is the one in force. An acquire without a limit names 1,
     * so it gets this on a semaphore too. Also the answer of a queued acquire whose limit
     * differs from the one in force when its turn comes. */
    MUTEXD_ERR_LIMIT_MISMATCH = 8,
} mutexd_result;

/* A static string naming a result: "ok", "held", "lost", "api_error", "limit_mismatch", ... */
MUTEXD_API const char *mutexd_result_name(mutexd_result result);

/* ---- Client ------------------------------------------------------------------------------- */

typedef struct mutexd_client mutexd_client;

struct mutexd_client_options {
    /* Sent as "Authorization: Bearer <token>"; NULL: none. Copied. */
    const char *token;
    /* PEM file of the certificate authorities that sign the server's certificate, for an
     * https URL; NULL: the system's. Copied. */
    const char *ca_file;
    /* Time to connect (TCP and TLS); 0: 5000 ms. */
    long connect_timeout_ms;
    /* Time for one whole request to one server; 0: 30000 ms. A request that asks the server
     * to wait (acquire with wait_ms, watch) gets its wait on top of this. */
    long request_timeout_ms;
};

/*
 * Creates a client for the server at `url`, for example "http://127.0.0.1:8080" (a path
 * prefix is kept: "https://host/mutexd" sends "https://host/mutexd/v1/..."), or for several
 * servers given as a comma-separated list ("http://10.0.0.1:8080,http://10.0.0.2:8080";
 * blanks around each URL are left out). `options` may be NULL. Nothing is sent until the first
 * call. On MUTEXD_OK *client is the new client, to be freed with mutexd_client_free(); on
 * failure *client is NULL: MUTEXD_ERR_ARG when a URL is not http or https (an empty item of
 * the list included), or there are more than 64.
 */
MUTEXD_API mutexd_result mutexd_client_new(mutexd_client **client, const char *url,
                                           const struct mutexd_client_options *options);

/*
 * Creates a client for the `count` servers of `urls`, tried in that order (see "Several
 * servers" above). Each string is one URL, as for mutexd_client_new(), and is not split at
 * commas. The strings are copied. MUTEXD_ERR_ARG when count is 0 or over 64, or a URL is NULL
 * or not http or https.
 */
MUTEXD_API mutexd_result mutexd_client_new_list(mutexd_client **client, const char *const *urls,
                                                size_t count,
                                                const struct mutexd_client_options *options);

/* The URL the next call goes to first: the server that last answered (after one that did
 * not, the one after it); at first, the first given. Without its trailing '/'. Owned by the
 * client; NULL for a NULL client. */
MUTEXD_API const char *mutexd_client_url(const mutexd_client *client);

/* Closes the connection and frees the client. NULL is allowed. */
MUTEXD_API void mutexd_client_free(mutexd_client *client);

/* ---- What calls fill ---------------------------------------------------------------------- */

/* A lease, as acquire and renew answer it. */
struct mutexd_lease {
    char *resource;
    char *lease_id; /* the credential: whoever knows it can renew and release */
    char *owner;
    uint64_t fencing_token; /* pass it to what the lease protects */
    int64_t ttl_ms;
    int64_t expires_in_ms; /* from the moment the answer was made */
    char *acquired_at;     /* RFC 3339 UTC, informative only */
    char *renewed_at;      /* RFC 3339 UTC, informative only */
    char *metadata;        /* the lease's metadata as JSON text (an object), or NULL */
    char *json;            /* the whole answer, as the API's JSON */
    /* When the lease ends unless renewed, on mutexd_monotonic_ms()'s clock: the moment the
     * request that got this answer was sent (after a wait in the queue: the moment the
     * answer came), plus expires_in_ms, minus a safety margin (mutexd_safety_margin_ms()).
     * Set by mutexd_acquire() and mutexd_renew(); mutexd_lease_held() compares it with the
     * clock. 0 in a lease that did not come from them. */
    int64_t deadline_ms;
    /* How many leases may hold the resource at once: 1 for an exclusive or shared lease,
     * N for a lease of a counting semaphore of N. 1 from a server without semaphores. */
    int64_t limit;
    int shared; /* 1: a shared lease (a reader); 0: exclusive, or one of a semaphore */
};

/* Who holds a resource: in a state (every field), and in the error of MUTEXD_HELD (owner,
 * fencing_token and expires_in_ms, and shared when the server says; ttl_ms is -1 and the
 * strings NULL). The lease id is never shown to anyone but the holder. */
struct mutexd_holder {
    char *owner;
    uint64_t fencing_token;
    int64_t ttl_ms;
    int64_t expires_in_ms;
    char *acquired_at;
    char *renewed_at;
    char *metadata; /* JSON text of an object, or NULL */
    int shared;     /* 1: a shared lease (a reader) */
};

/* A resource's state, as GET and list answer it. */
struct mutexd_state {
    char *resource;
    int held;       /* 1: held (holder and holders are filled), 0: free */
    uint64_t index; /* changes on every change of the resource; give it to mutexd_watch() */
    struct mutexd_holder holder; /* the first of `holders`, for code written for one holder */
    int64_t waiters;             /* acquire requests queued */
    char *json;                  /* this state as the API's JSON */
    /* How many leases may hold it at once: the limit in force while it is held, else 1. */
    int64_t limit;
    /* Every holder, oldest grant first: `holder_count` of them (0 when free; NULL then). From
     * a server without semaphores, the one holder. */
    struct mutexd_holder *holders;
    size_t holder_count;
};

/* One page of mutexd_list(). */
struct mutexd_page {
    struct mutexd_state *resources; /* `count` states, in name order */
    size_t count;
    char *next_cursor; /* pass it as the next call's cursor; NULL: this was the last page */
    char *json;        /* the whole answer, as the API's JSON */
};

/* What went wrong. Every call empties it first (a successful call leaves it empty: status 0,
 * strings NULL, retry_after_s -1); a failed one fills what applies. */
struct mutexd_error {
    int status;         /* HTTP status; 0 when no answer came */
    char *code;         /* the API's error code ("lease_held", "invalid_ttl", ...), or NULL */
    char *message;      /* a sentence for people, the server's or the library's: set on every
                         * failure (NULL only if even that ran out of memory) */
    char *field;        /* the request field the server objects to, or NULL */
    char *reason;       /* why the server is unavailable (503), or NULL */
    long retry_after_s; /* the Retry-After header in seconds, or -1 */
    int has_holder;     /* 1 for lease_held: `holder` is filled */
    struct mutexd_holder holder;
    int transport;    /* 1: no answer came (MUTEXD_ERR_TRANSPORT); message says why */
    char *request_id; /* the answer's X-Request-Id, for the server's log, or NULL */
    char *body;       /* the answer's body (for an API error: the API's JSON), or NULL */
    int64_t limit;    /* MUTEXD_ERR_LIMIT_MISMATCH: the limit in force on the resource; else 0 */
};

/* Free what the struct holds and leave it empty (zeroed; an error's retry_after_s and
 * holder.ttl_ms are -1). NULL is allowed. */
MUTEXD_API void mutexd_lease_clear(struct mutexd_lease *lease);
MUTEXD_API void mutexd_state_clear(struct mutexd_state *state);
MUTEXD_API void mutexd_page_clear(struct mutexd_page *page);
MUTEXD_API void mutexd_error_clear(struct mutexd_error *error);

/* 1 when trying the same call again later may succeed: no answer came, or the server was
 * unavailable (503) or its waiter queue full (429); error->retry_after_s says when, if known.
 * 0 otherwise. */
MUTEXD_API int mutexd_error_is_temporary(mutexd_result result, const struct mutexd_error *error);

/* ---- Leases ------------------------------------------------------------------------------- */

struct mutexd_acquire_options {
    /* Who holds the lease, for people and tools; NULL: "<hostname>:<pid>". */
    const char *owner;
    /* 0: the server's default (15000). */
    int64_t ttl_ms;
    /* 0: answer at once; > 0: wait in the resource's queue at most this long. */
    int64_t wait_ms;
    /* A lease id proposed by the caller; NULL: the library makes a random one (a UUID v4),
     * the same for every server the call tries. Acquiring again with the same id returns the
     * same lease (same fencing token), so a caller that got no answer (MUTEXD_ERR_TRANSPORT)
     * can retry safely with the id it proposed. */
    const char *lease_id;
    /* JSON text of an object stored with the lease (at most 4096 bytes); NULL: none. */
    const char *metadata;
    /* How many leases may hold the resource at once, 1 to the server's --max-holders
     * (default 1024): N > 1 makes it a counting semaphore. 0: not sent, which the server
     * takes as 1 (and which a server without semaphores requires). Every holder must name
     * the same limit while the resource is held (else MUTEXD_ERR_LIMIT_MISMATCH). */
    int64_t limit;
    /* 1: a shared lease (a reader), held together with other shared leases while no
     * exclusive lease holds the resource; 0: exclusive (a writer). Not with a limit other
     * than 1 (the server answers 400 invalid_field, field "shared"). */
    int shared;
};

/*
 * Acquires `resource`. `options` may be NULL (all defaults). MUTEXD_OK: *lease is the
 * granted lease (lease may be NULL if the caller does not need it, though then the lease id
 * is unknown unless proposed). MUTEXD_HELD: the lease does not fit now (held by another
 * lease; for a semaphore, every place taken; for a shared lease, an exclusive holder); in
 * error->holder, the holder whose lease ends first. MUTEXD_ERR_LIMIT_MISMATCH: the resource
 * is held under another limit, error->limit. A retry with the same proposed lease id gets
 * the lease back only with the same limit and shared.
 */
MUTEXD_API mutexd_result mutexd_acquire(mutexd_client *client, const char *resource,
                                        const struct mutexd_acquire_options *options,
                                        struct mutexd_lease *lease, struct mutexd_error *error);

/* The monotonic clock (CLOCK_MONOTONIC) in ms, the clock of a lease's deadline_ms. */
MUTEXD_API int64_t mutexd_monotonic_ms(void);

/* How long before the end of its TTL a client stops counting on a lease: a fiftieth of the
 * TTL, at most 1000 ms. It covers the rate difference of two clocks and the moment between a
 * check and the action it guards. */
MUTEXD_API int64_t mutexd_safety_margin_ms(int64_t ttl_ms);

/* 1 while the clock is before lease->deadline_ms, 0 once it has passed (or lease is NULL or
 * has no deadline). This is the check to make right before every action the lease guards:
 * it is right even when the process was paused (SIGSTOP, a frozen VM) since its last
 * renewal, which a renewal thread or timer would only notice later. */
MUTEXD_API int mutexd_lease_held(const struct mutexd_lease *lease);

/* The ms left until lease->deadline_ms; 0 once it has passed. */
MUTEXD_API int64_t mutexd_lease_remaining_ms(const struct mutexd_lease *lease);

/* Generates a random (version 4) UUID into `out` (MUTEXD_LEASE_ID_LEN + 1 bytes), for
 * proposing a lease id. MUTEXD_OK, or MUTEXD_ERR_ARG if the system has no randomness. */
MUTEXD_API mutexd_result mutexd_new_lease_id(char *out);

struct mutexd_renew_options {
    int64_t ttl_ms;       /* 0: the lease's own */
    const char *metadata; /* JSON text of an object that replaces the metadata; NULL: keep */
    long timeout_ms;      /* the time for each attempt (each server tried); 0: the client's
                           * request timeout */
};

/*
 * Renews the lease `lease_id` on `resource`: same lease, same fencing token, a fresh TTL.
 * `options` may be NULL. MUTEXD_OK: *lease (may be NULL) is the renewed lease. MUTEXD_LOST:
 * the lease is gone; stop the work it guards. `resource` and `lease_id` may point into
 * *lease itself (`mutexd_renew(c, l.resource, l.lease_id, NULL, &l, &e)`): they are read
 * before *lease is replaced.
 *
 * When *lease holds this same lease and its deadline_ms is still ahead, the call keeps
 * within it: every attempt ends by the deadline, and none begins after it, so that with
 * several servers the call does not outlast the lease; once it has passed, the call returns
 * what the last attempt gave. A renewal begun after the deadline is not bounded by it (the
 * server may still hold the lease: see mutexd_lease_held() for what the holder must do).
 */
MUTEXD_API mutexd_result mutexd_renew(mutexd_client *client, const char *resource,
                                      const char *lease_id,
                                      const struct mutexd_renew_options *options,
                                      struct mutexd_lease *lease, struct mutexd_error *error);

/* Releases the lease; the next waiter, if any, is granted at once (of a semaphore, the place
 * it frees). MUTEXD_OK, or MUTEXD_LOST when the lease was no longer the resource's (then
 * whoever holds it keeps it). */
MUTEXD_API mutexd_result mutexd_release(mutexd_client *client, const char *resource,
                                        const char *lease_id, struct mutexd_error *error);

/* Ends every lease that holds `resource` (an operator's action; with authorization on it
 * needs the admin scope). `reason` (NULL: none) goes to the server's log. *broken (may be
 * NULL) is 1 if a lease was ended, 0 if the resource was free. */
MUTEXD_API mutexd_result mutexd_break(mutexd_client *client, const char *resource,
                                      const char *reason, int *broken, struct mutexd_error *error);

/* As mutexd_break(), but ends only the lease `lease_id` (one holder of a semaphore or of a
 * shared resource), or every lease when lease_id is NULL. *broken is 0 when that lease holds
 * nothing. A server without semaphores refuses a lease id (400 unknown_field). */
MUTEXD_API mutexd_result mutexd_break_lease(mutexd_client *client, const char *resource,
                                            const char *lease_id, const char *reason, int *broken,
                                            struct mutexd_error *error);

/* ---- Several resources at once ------------------------------------------------------------ */

/*
 * A set: one request grants a lease on every resource it names (2 to MUTEXD_MANY_MAX), or on
 * none, all under one lease id and each with its own fencing token; one request renews the
 * set, one releases it. A wait waits in the queue of every resource named, and is granted all
 * at once (no deadlock, whatever the order of the names in requests of others).
 *
 * On a partitioned group every name of a set must be in one partition: give them one hash
 * tag ("{order-7}/lock", "{order-7}/stock"). The request goes where one about its first name
 * would (the owner of that partition), and the map is followed as for one resource. Names
 * in different partitions get MUTEXD_ERR_API, 400 invalid_field with error->field
 * "resources" and error->reason "partitions_differ": take those with mutexd_lock_ordered().
 */

/* The most resources one request about several may name. */
#define MUTEXD_MANY_MAX 64

/* A set of leases, as mutexd_acquire_many() and mutexd_renew_many() answer it. */
struct mutexd_leases {
    struct mutexd_lease *leases; /* `count` leases, one per resource, in the order named */
    size_t count;
    char *lease_id; /* the set's lease id: every lease's */
    /* The earliest deadline_ms of the leases, on mutexd_monotonic_ms()'s clock (see
     * mutexd_lease_held()): the set holds until then. 0 once mutexd_renew_many() answered
     * MUTEXD_LOST for it. */
    int64_t deadline_ms;
    char *json; /* the whole answer, as the API's JSON ({"leases": [...]}) */
};

/* Free what the set holds and leave it empty (zeroed). NULL is allowed. */
MUTEXD_API void mutexd_leases_clear(struct mutexd_leases *leases);

/* 1 while the clock is before leases->deadline_ms (every lease of the set holds), 0 once it
 * has passed or the set was found lost (or leases is NULL or empty). The check to make right
 * before every action the set guards, as mutexd_lease_held() for one lease. */
MUTEXD_API int mutexd_leases_held(const struct mutexd_leases *leases);

/*
 * Acquires the `count` resources of `resources` (2 to MUTEXD_MANY_MAX names, each once) at
 * once: a lease on each, or on none. `options` as for mutexd_acquire(), applying to each
 * (one owner, TTL, metadata, limit, shared; lease_id: the set's). MUTEXD_OK: *leases (may be
 * NULL) is the set, its leases in the order of `resources`. MUTEXD_HELD: nothing was granted;
 * error->holder is the holder of the first resource held, in the order given, and
 * mutexd_error_resources() names it. MUTEXD_ERR_LIMIT_MISMATCH as for one resource. A retry
 * with the same proposed lease id and the same names gets the same leases back.
 */
MUTEXD_API mutexd_result mutexd_acquire_many(mutexd_client *client, const char *const *resources,
                                             size_t count,
                                             const struct mutexd_acquire_options *options,
                                             struct mutexd_leases *leases,
                                             struct mutexd_error *error);

/*
 * Renews the leases of the set `lease_id` on the `count` resources of `resources`: the same
 * leases and fencing tokens, a fresh TTL. `options` may be NULL (ttl_ms, metadata and
 * timeout_ms as for mutexd_renew(), applying to each). MUTEXD_OK: *leases (may be NULL) is the
 * renewed set. MUTEXD_LOST: the lease id no longer holds some of them (mutexd_error_resources()
 * names them); the others were renewed all the same, but the set is lost: stop the work it
 * guards. Then, when *leases holds this set, its deadline_ms and that of each lease lost
 * become 0, so that mutexd_leases_held() says so. `resources` and `lease_id` may point into
 * *leases. When *leases holds this set (the same lease id) and its deadline is still ahead,
 * the call keeps within it, as mutexd_renew() does.
 */
MUTEXD_API mutexd_result mutexd_renew_many(mutexd_client *client, const char *const *resources,
                                           size_t count, const char *lease_id,
                                           const struct mutexd_renew_options *options,
                                           struct mutexd_leases *leases,
                                           struct mutexd_error *error);

/* Releases the leases of the set `lease_id` on the `count` resources of `resources`; the
 * next waiters are granted at once. MUTEXD_OK: every one was released. MUTEXD_LOST: some were
 * no longer held by the set (mutexd_error_resources() names them); the others were released
 * all the same. */
MUTEXD_API mutexd_result mutexd_release_many(mutexd_client *client, const char *const *resources,
                                             size_t count, const char *lease_id,
                                             struct mutexd_error *error);

/*
 * The resources the error answer of a call about several resources names (read from
 * error->body): for MUTEXD_HELD, the resource found held (the first, in the order given);
 * for MUTEXD_LOST, every resource the set no longer holds. *names is an array of *count names
 * and a NULL, in one block for the caller to free(); NULL (and *count 0) when the answer names
 * none. MUTEXD_OK, MUTEXD_ERR_NOMEM, or MUTEXD_ERR_ARG for a NULL argument.
 */
MUTEXD_API mutexd_result mutexd_error_resources(const struct mutexd_error *error, char ***names,
                                                size_t *count);

/*
 * Locks: leases renewed in the background. mutexd_lock_many() acquires a set (one request, as
 * mutexd_acquire_many()); mutexd_lock_ordered() acquires resources that may be in different
 * partitions one by one, each its own lease. Either way a thread of the library then renews
 * every lease of the lock at a third of its TTL (a set with one request), through a client of
 * its own (a copy of the one given: the same servers, token and timeouts), until
 * mutexd_lock_release(). The client given is left free for other calls, or to be freed.
 *
 * The lock is lost, for good, as soon as ANY lease of it is: a renewal answers lease_lost
 * (the lease was broken, or another lease was granted after it expired), or no renewal of it
 * succeeded before its deadline (one that fails for want of an answer, or with an error, is
 * tried again on a new connection every tenth of the TTL, from 100 ms to 1 s; no attempt
 * lasts past the deadline). Then renewing stops, mutexd_lock_held() answers 0,
 * mutexd_lock_wait_lost() returns 1, mutexd_lock_status() says why, and the on_lost callback
 * is called. Whoever holds the lock stops the work it guards at once: another process may
 * hold some of its resources now.
 *
 * Threads: the functions below may be called from any thread, at the same time as the
 * renewals, but for mutexd_lock_release(), which ends the lock.
 */
typedef struct mutexd_lock mutexd_lock;

struct mutexd_lock_options {
    /* Called once, on the lock's renewing thread, when the lock is found lost; NULL: none.
     * It should return soon, and must not call mutexd_lock_release() on this lock. */
    void (*on_lost)(mutexd_lock *lock, void *arg);
    void *arg;
};

/*
 * Acquires a set, as mutexd_acquire_many() (same arguments and answers), and starts renewing
 * it. MUTEXD_OK: *lock is the lock, to be ended with mutexd_lock_release(). Otherwise *lock
 * is NULL and nothing is held. `lock_options` may be NULL.
 */
MUTEXD_API mutexd_result mutexd_lock_many(mutexd_client *client, const char *const *resources,
                                          size_t count,
                                          const struct mutexd_acquire_options *options,
                                          const struct mutexd_lock_options *lock_options,
                                          mutexd_lock **lock, struct mutexd_error *error);

/*
 * The ordered helper, for resources of different partitions (Curator's
 * InterProcessMultiLock): acquires the `count` resources of `resources` (1 to
 * MUTEXD_MANY_MAX, each once) one by one with mutexd_acquire(), each its own lease, in name
 * order (strcmp) whatever the order given, so that processes that lock overlapping sets never
 * wait for each other in a circle. `options` apply to each; its wait_ms is the wait of the
 * whole, and the leases taken are renewed while the next ones are waited for. If one cannot
 * be taken, those taken are released, in reverse order, and the call returns what that one
 * got (MUTEXD_HELD, an error; error->message starts with its name), or MUTEXD_LOST when one
 * taken was lost before the last was; *lock is NULL then. The lock is lost when any of its
 * leases is lost.
 */
MUTEXD_API mutexd_result mutexd_lock_ordered(mutexd_client *client, const char *const *resources,
                                             size_t count,
                                             const struct mutexd_acquire_options *options,
                                             const struct mutexd_lock_options *lock_options,
                                             mutexd_lock **lock, struct mutexd_error *error);

/* 1 while every lease of the lock holds: none was found lost, and the earliest of their
 * deadlines (as mutexd_lease_held() has it) is still ahead on the clock. 0 once lost (or lock
 * is NULL). The check to make right before every action the lock guards: it is right even
 * when the process was paused and the renewing thread has not run since. */
MUTEXD_API int mutexd_lock_held(const mutexd_lock *lock);

/* The ms left until the earliest deadline of the lock's leases; 0 once lost. */
MUTEXD_API int64_t mutexd_lock_remaining_ms(const mutexd_lock *lock);

/* Waits until the lock is lost, at most timeout_ms (< 0: without a limit). 1: it is lost;
 * 0: the time ran out while it holds. */
MUTEXD_API int mutexd_lock_wait_lost(mutexd_lock *lock, int64_t timeout_ms);

/* MUTEXD_OK while the lock holds (the error emptied); MUTEXD_LOST once it is lost, with why
 * in *error (may be NULL): the lease_lost answer of the server, or, when no renewal succeeded
 * before the deadline, a message with the last renewal's failure. */
MUTEXD_API mutexd_result mutexd_lock_status(const mutexd_lock *lock, struct mutexd_error *error);

/* The lock's leases, in the order of the resources given: how many; and of lease `i`, its
 * resource, fencing token (pass it to what that resource protects) and lease id (the same for
 * every lease of mutexd_lock_many()). They do not change while the lock lives (a renewal keeps
 * the token); the strings belong to the lock. NULL or 0 for an `i` out of range. */
MUTEXD_API size_t mutexd_lock_count(const mutexd_lock *lock);
MUTEXD_API const char *mutexd_lock_resource(const mutexd_lock *lock, size_t i);
MUTEXD_API uint64_t mutexd_lock_fencing_token(const mutexd_lock *lock, size_t i);
MUTEXD_API const char *mutexd_lock_lease_id(const mutexd_lock *lock, size_t i);

/*
 * Stops the renewals, releases every lease of the lock (a set with one request; the leases of
 * mutexd_lock_ordered() one by one, in the reverse of the order they were taken), and frees
 * the lock, whatever the answer. MUTEXD_OK: all released. MUTEXD_LOST: some were no longer the
 * lock's (a lost lock), the others released. Another error: some could not be released (they
 * end with their TTL). NULL is allowed (MUTEXD_OK).
 */
MUTEXD_API mutexd_result mutexd_lock_release(mutexd_lock *lock, struct mutexd_error *error);

/* ---- Reading state ------------------------------------------------------------------------ */

/* The state of `resource` (a name never used is simply free). */
MUTEXD_API mutexd_result mutexd_get(mutexd_client *client, const char *resource,
                                    struct mutexd_state *state, struct mutexd_error *error);

/*
 * Waits until the index of `resource` differs from `index`, or `wait_ms` pass, and then fills
 * *state (on a timeout, with the unchanged state: compare state->index with `index`). Give it
 * the index of the last state seen, so that no change falls between two calls. wait_ms is at
 * most the server's --max-wait-ms (default 300000).
 */
MUTEXD_API mutexd_result mutexd_watch(mutexd_client *client, const char *resource, uint64_t index,
                                      int64_t wait_ms, struct mutexd_state *state,
                                      struct mutexd_error *error);

struct mutexd_list_options {
    const char *prefix; /* only names starting with it; NULL: all */
    int limit;          /* states per page, 1 to 1000; 0: the server's default (100) */
    const char *cursor; /* NULL: the first page; else the previous page's next_cursor */
};

/*
 * One page of the held resources, in name order. `options` may be NULL. To see them all,
 * call again with cursor = page->next_cursor until it is NULL (a page may be empty). Copy
 * the cursor first, or pass a second page struct: the call replaces *page only on success,
 * so `o.cursor = page.next_cursor; mutexd_list(c, &o, &page, &e)` is also fine.
 */
MUTEXD_API mutexd_result mutexd_list(mutexd_client *client,
                                     const struct mutexd_list_options *options,
                                     struct mutexd_page *page, struct mutexd_error *error);

/* ---- Watching many resources, and recent events ------------------------------------------- */

/*
 * Every change of any resource (grant, renewal, release, break, expiry) takes the next value
 * of one server-wide change index; a state's `index` is the change index of its last change.
 */

/*
 * A list watch: as mutexd_list(), but the request is held until a resource whose name starts
 * with options->prefix changes after change index `index` (also when it becomes free and so
 * leaves the list), or `wait_ms` pass; then *page is the list as it is (on a timeout, as it
 * was). *index_out (may be NULL) is the server's change index when the list was read: give
 * it as `index` to the next call, so that no change falls between two calls. With wait_ms 0
 * the list is read at once (index 0 and wait_ms 0: the first read of a watch loop). wait_ms
 * is at most the server's --max-wait-ms (default 300000). The server answers when anything
 * under the prefix changed, which may leave the list as it was (a lease granted and released
 * meanwhile); compare the states' indexes to tell. The server may answer a moment before the
 * change reads in the list: an answer before wait_ms whose list reads the same is worth one
 * more read (wait_ms 0) a little later. Paging works as with mutexd_list(): the
 * pages after the first are read with mutexd_list() and the cursor, and the first page's
 * index is the one to watch from.
 */
MUTEXD_API mutexd_result mutexd_list_watch(mutexd_client *client,
                                           const struct mutexd_list_options *options,
                                           uint64_t index, int64_t wait_ms,
                                           struct mutexd_page *page, uint64_t *index_out,
                                           struct mutexd_error *error);

/* One recent change of a resource. Never with a lease id. */
struct mutexd_event {
    uint64_t index; /* its change index */
    char *at;       /* RFC 3339 UTC, informative only */
    char *resource;
    char *type; /* "granted", "renewed", "released", "expired" or "broken" */
    char *owner;
    uint64_t fencing_token;
    int shared;    /* 1: a shared lease's (a reader's) */
    int64_t limit; /* the resource's limit: 1, or N for a counting semaphore of N */
    char *json;    /* this event as the API's JSON */
};

/* What mutexd_events() fills. */
struct mutexd_event_page {
    struct mutexd_event *events; /* `count` events, oldest first */
    size_t count;
    uint64_t next; /* the `after` of the next call */
    /* 1: events after `after` were dropped already (the server keeps the last
     * --event-history, and starts afresh on a restart or a takeover): `events` starts at the
     * oldest it has, and some changes were missed. */
    int truncated;
    char *json; /* the whole answer, as the API's JSON */
};

struct mutexd_events_options {
    const char *prefix; /* only resources whose name starts with it; NULL: all */
    int limit;          /* events per answer, 1 to 1000; 0: the server's default (100) */
    /* > 0: when there is no event after `after` yet, wait at most this long for one (at
     * most the server's --max-wait-ms); 0: answer at once. */
    int64_t wait_ms;
};

/*
 * The recent changes after change index `after` (0: the oldest the server has), oldest
 * first, into *events (replaced only on success). To follow them, call again with after =
 * events->next (and a wait_ms): every event is then seen once, in order, unless `truncated`
 * says some were dropped. Events are for people and tools watching, not a durable log: the
 * server keeps them in memory only. Needs the read scope.
 */
MUTEXD_API mutexd_result mutexd_events(mutexd_client *client, uint64_t after,
                                       const struct mutexd_events_options *options,
                                       struct mutexd_event_page *events,
                                       struct mutexd_error *error);

/* Who the client's token is, as the server sees it. */
struct mutexd_whoami {
    char *name;         /* the token's name in the server's tokens file; NULL with
                         * authorization off */
    char **scopes;      /* `scope_count` of "read", "write", "admin", "metrics" */
    size_t scope_count; /* with authorization off, all four */
    char *json;         /* the whole answer, as the API's JSON */
};

/* The name and scopes of the token the client sends (any valid token, no scope needed;
 * without a valid token, 401 unauthorized). */
MUTEXD_API mutexd_result mutexd_whoami(mutexd_client *client, struct mutexd_whoami *who,
                                       struct mutexd_error *error);

/* 1 when who->scopes has `scope` ("admin", ...), else 0. */
MUTEXD_API int mutexd_whoami_has_scope(const struct mutexd_whoami *who, const char *scope);

/* Free what the struct holds and leave it empty (zeroed). NULL is allowed. */
MUTEXD_API void mutexd_event_page_clear(struct mutexd_event_page *events);
MUTEXD_API void mutexd_whoami_clear(struct mutexd_whoami *who);

/* ---- Partitions --------------------------------------------------------------------------- */

/*
 * The partition of the resource `name` among `count` partitions (1 to 256), as the server
 * computes it (docs/api.md, "Partitions"): the CRC-32 (zlib's) of the name's bytes, or of its
 * hash tag only (the bytes between the first '{' and the first '}' after it, when there is at
 * least one), modulo count. Names that share a tag ("{order-7}/lock", "{order-7}/stock")
 * share a partition whatever the count; with a count of 1 every name is in partition 0.
 * MUTEXD_OK with *partition set (0 to count - 1); MUTEXD_ERR_ARG, *partition untouched, when
 * name or partition is NULL or count is out of range. Sends nothing; any thread.
 */
MUTEXD_API mutexd_result mutexd_partition_of(const char *name, unsigned count, unsigned *partition);

#ifdef __cplusplus
}
#endif

#endif
