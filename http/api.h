/*
 * The HTTP API's input side as pure functions (no sockets, no libmicrohttpd): routing,
 * resource-name validation, and decoding of JSON bodies and query parameters into lease
 * requests, with every limit and error code of docs/api.md. The fuzzers drive these directly.
 */
#ifndef MX_HTTP_API_H
#define MX_HTTP_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actors/resource.h"
#include "common/names.h"

#define API_MAX_BODY           65536
#define API_MAX_METADATA       4096
#define API_MAX_METADATA_DEPTH 32
#define API_MAX_REASON         1024
#define API_DEFAULT_TTL_MS     15000
#define API_DEFAULT_LIMIT      100
#define API_MAX_LIMIT          1000
/* A partitioned group's list or events position: "v" and up to 256 numbers of up to 20
 * digits, each after a '.'. */
#define API_MIN_NAMES    2 /* resources named at once */
#define API_MAX_NAMES    64
#define API_MAX_POSITION (1 + 256 * 21)

enum api_route {
    ROUTE_NONE = 0,
    ROUTE_ACQUIRE,
    ROUTE_RENEW,
    ROUTE_RELEASE,
    ROUTE_BREAK,
    ROUTE_GET,
    ROUTE_LIST,
    ROUTE_HEALTHZ,
    ROUTE_READYZ,
    ROUTE_METRICS,
    ROUTE_SERVERS, /* GET /v1/servers: the server group, answered by every server itself */
    ROUTE_EVENTS,  /* GET /v1/events: the recent changes */
    ROUTE_WHOAMI,  /* GET /v1/whoami: the token's name and scopes, answered by every server */
    ROUTE_UI,      /* GET /ui and /ui/...: the dashboard's files (http/ui.h) */
    /* POST /v1/acquire, /v1/renew, /v1/release: several resources at once, all or none
     * (docs/api.md, "Several resources at once"); the names are in the body. */
    ROUTE_ACQUIRE_MANY,
    ROUTE_RENEW_MANY,
    ROUTE_RELEASE_MANY,
    ROUTE_COUNT
};

/* The route's name in metrics and logs. */
const char *api_route_name(enum api_route r);

struct api_error {
    int status;        /* HTTP status */
    const char *code;  /* the contract's code */
    const char *field; /* the field it is about, or NULL */
    const char *allow; /* 405: the Allow header */
    char message[160];
    char field_buf[64]; /* holds the name of an unknown field */
    const char *reason; /* a machine-readable why, for some 400s (or NULL) */
};

/* Fills `e` and returns false, for `return api_fail(...)`. */
bool api_fail(struct api_error *e, int status, const char *code, const char *field, const char *fmt,
              ...) __attribute__((format(printf, 5, 6)));

/* Routes `method` and `path` (decoded, without the query). On success sets `route` and,
 * for resource routes, `name` and `name_len` (pointing into `path`). */
bool api_route(const char *method, const char *path, enum api_route *route, const char **name,
               size_t *name_len, struct api_error *e);

/* Whether the path of a request target as received (`uri`, before percent-decoding; the
 * query is not looked at) is free of control characters, raw or percent-encoded: decoded,
 * a %00 would cut the path short. api_path_refused() fills the 400 for one that is not. */
bool api_path_clean(const char *uri);
bool api_path_refused(struct api_error *e);

/* Whether `name` is a valid resource name (docs/api.md, "Names"). */
bool api_valid_resource(const char *name, size_t len);

/* Whether `s` is valid UTF-8 (no overlong forms, no surrogates). */
bool api_utf8_valid(const char *s, size_t len);

/* Whether a Content-Type header value is JSON (`application/json`, parameters allowed). */
bool api_is_json_type(const char *content_type);

/*
 * Decodes a POST body (may be empty: the empty object) for `route` into `rq` (op, fields,
 * owner and metadata references, which res_req_clear releases). `reason` receives a
 * break's reason ("" when none). Returns false with `e` filled on bad input.
 */
bool api_decode_body(enum api_route route, const char *body, size_t len,
                     const struct res_limits *lim, struct res_req *rq, char *reason,
                     size_t reason_len, struct api_error *e);

/* The resources of a request about several at once, in the order given: distinct, each a
 * valid name. The names point into `buf` (malloc'd); api_names_free() releases it. */
struct api_names {
    uint32_t count;
    const char *name[API_MAX_NAMES];
    size_t len[API_MAX_NAMES];
    char *buf;
};

void api_names_free(struct api_names *n);

/*
 * api_decode_body for ROUTE_ACQUIRE_MANY, ROUTE_RENEW_MANY and ROUTE_RELEASE_MANY: the
 * other fields into `rq` as for one resource, and `resources` into `names`. `names` is
 * released on failure too.
 */
bool api_decode_many(enum api_route route, const char *body, size_t len,
                     const struct res_limits *lim, struct res_req *rq, struct api_names *names,
                     struct api_error *e);

/* Whether every name is in one partition of `partitions` (docs/api.md, "Partitions"): else
 * the contract's 400 (invalid_field resources, reason partitions_differ). */
bool api_names_one_partition(const struct api_names *n, unsigned partitions, struct api_error *e);

/* Query parameters, one at a time; then api_query_finish(). */
struct api_query {
    /* resource GET, list watch, events (index: `after` for events) */
    bool has_index, has_wait;
    uint64_t index, wait_ms;
    /* A list watch's `index` or an events request's `after` that is not a number: the
     * opaque position of a partitioned group ("v" and a number per partition, see
     * http/spread.h), which only a list or events request of every partition takes. */
    const char *index_text;
    /* A list or events request of some partitions of a partitioned group, as a server asks
     * another for those it owns: their numbers, ascending, joined by '.' (http/spread.h). */
    const char *partitions;
    /* list, events */
    const char *prefix, *cursor;
    bool has_limit;
    uint64_t limit;
};

bool api_query_param(enum api_route route, struct api_query *q, const char *key, const char *value,
                     const struct res_limits *lim, struct api_error *e);
/* How long a watch waits: wait_ms, or without it --max-wait-ms when an index is given. An
 * events request waits only when asked (the caller checks has_wait). */
uint64_t api_query_wait(const struct api_query *q, const struct res_limits *lim);
/* Applies defaults and fills `rq` for a GET. */
void api_query_finish(enum api_route route, const struct api_query *q, const struct res_limits *lim,
                      struct res_req *rq);

#endif
