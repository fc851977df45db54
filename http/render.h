/*
 * The HTTP API's output side: JSON bodies for answers and errors (docs/api.md). Pure
 * functions; each fills a struct render: the status, the Retry-After to send (0: none),
 * and a body the caller frees with free(), which is NULL when memory ran out (the caller
 * then answers 503 without one).
 */
#ifndef MX_HTTP_RENDER_H
#define MX_HTTP_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "actors/resource.h"
#include "actors/events.h"
#include "actors/resource_actor.h"
#include "http/api.h"

struct render {
    int status;
    char *body;
    uint64_t retry_after_s; /* 0: no Retry-After header */
};

/* The answer to a lease request on `name`; sets status, body and Retry-After. */
void render_answer(const char *name, size_t len, const struct res_req *rq, struct render *out);
/* The answer to a request about several resources (`rq[i]` about `names[i]`), each part
 * answered `ok` when it went well: 200 {"leases": [each part's answer]}; else 409
 * `lease_lost` naming the first lost in `resource` and every lost one in `resources`; else
 * the first other refusal, naming its resource. A part answered RES_GONE (left its queue
 * when another was refused) is passed over. */
void render_many(const char *const *names, const size_t *lens, const struct res_req *const *rq,
                 size_t n, int ok, struct render *out);
/* An error of the contract. */
void render_error(const struct api_error *e, struct render *out);
/* A 503 `unavailable` with a reason; Retry-After `retry_after_s` (0: 1 s). */
void render_unavailable(const char *reason, uint32_t retry_after_s, struct render *out);
/* The same with a message of its own beside the reason. */
void render_unavailable_message(const char *reason, const char *message, uint32_t retry_after_s,
                                struct render *out);
/* The list of held resources; `next_cursor` NULL for the last page. */
/* A page of the list; `index`: the change index when it was read. */
void render_list(const struct ra_list *l, const char *next_cursor, uint64_t index,
                 struct render *out);
/* GET /v1/events: `n` events (never a lease id), `next`, `truncated`. */
void render_events(const struct ev_event *ev, size_t n, uint64_t next, bool truncated,
                   struct render *out);
/* GET /v1/whoami: the token's name (NULL: authorization off) and its scopes (enum
 * auth_scope bits). */
void render_whoami(const char *name, unsigned scopes, struct render *out);
/* {"status": "...", "reason": "...", <details>} for /healthz and /readyz (reason may be
 * NULL; details: NULL or JSON object members, as `"k":v,...`). */
void render_status(int status, const char *word, const char *reason, const char *details,
                   struct render *out);

#endif
