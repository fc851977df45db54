/*
 * Queueing a request's answer (see request.h): bodies with their headers (the request
 * id, Mutexd-Served-By, the dashboard's security headers, Retry-After), errors, and the
 * answers a server group gives when it cannot serve.
 */
#include "http/request.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/forward.h"
#include "http/render.h"
#include "http/role.h"
#include "http/server.h"
#include "http/ui.h"

/* Queues `r` (the caller destroys its reference) with `status`; every answer under /ui/, an
 * error too, carries the dashboard's security headers. */
enum MHD_Result http_i_queue(struct hreq *q, int status, struct MHD_Response *r)
{
    if (q->ui)
        for (const struct ui_header *u = ui_security_headers; u->name; u++)
            MHD_add_response_header(r, u->name, u->value);
    q->status = status;
    q->phase = PH_DONE;
    enum MHD_Result rc = MHD_queue_response(q->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

/* Queues `body` (taken; NULL means out of memory) with the contract's headers. */
enum MHD_Result http_i_send_body(struct hreq *q, int status, char *body, const char *type,
                                 uint64_t retry_after_s, const char *allow)
{
    /* A JSON answer ends with a newline, as a line of text does: a shell prompt after
     * `curl` then starts on a line of its own. */
    if (body && strncmp(type, "application/json", 16) == 0) {
        size_t len = strlen(body);
        if (len == 0 || body[len - 1] != '\n') {
            char *grown = realloc(body, len + 2);
            if (!grown)
                free(body);
            else
                memcpy(grown + len, "\n", 2);
            body = grown;
        }
    }
    if (!body) {
        status = 503;
        body = strdup("{\"error\":{\"code\":\"unavailable\",\"message\":\"out of memory\","
                      "\"reason\":\"out of memory\"}}\n");
        if (!body)
            return MHD_NO;
        retry_after_s = 1;
        type = "application/json; charset=utf-8";
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "X-Request-Id", q->rid);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (retry_after_s) {
        char ra[24];
        snprintf(ra, sizeof ra, "%" PRIu64, retry_after_s);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (allow)
        MHD_add_response_header(r, "Allow", allow);
    if (q->unauthorized)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"mutexd\"");
    /* Only the active names itself: a standby's own answers (a bad request, no active
     * server) were not served by the active. A list or events answer merged from every
     * partition was served by none of them alone: no name. */
    if (q->v1 && q->h->cfg.served_by && !q->spread &&
        fwd_role(q->h->fwd, q->partition) == HTTP_ROLE_SERVE)
        MHD_add_response_header(r, "Mutexd-Served-By", q->h->cfg.served_by);
    if (q->v1 && (q->name_len || q->names.count) && q->h->cfg.partitions > 1) {
        char part[12];
        snprintf(part, sizeof part, "%u", q->partition);
        MHD_add_response_header(r, "Mutexd-Partition", part);
    }
    if (q->close)
        MHD_add_response_header(r, "Connection", "close");
    return http_i_queue(q, status, r);
}

enum MHD_Result http_i_send_render(struct hreq *q, const struct render *rd, const char *allow)
{
    return http_i_send_body(q, rd->status, rd->body, "application/json; charset=utf-8",
                            rd->retry_after_s, allow);
}

enum MHD_Result http_i_send_error(struct hreq *q, const struct api_error *e)
{
    struct render rd;
    render_error(e, &rd);
    return http_i_send_render(q, &rd, e->allow);
}

enum MHD_Result http_i_send_unavailable(struct hreq *q, const char *reason)
{
    struct render rd;
    render_unavailable(reason, 0, &rd);
    return http_i_send_render(q, &rd, NULL);
}

/* The 503s with a reason of the contract (a server group's, or a server's bounds), and a
 * sentence for people. */
static const struct {
    const char *reason, *message;
} unavailable_messages[] = {
    {FWD_FENCED, "this server has just lost the blob container to another server and answers "
                 "no requests until it has rejoined the group as a standby"},
    {FWD_NO_ACTIVE, "no server of the group is active (a takeover is in progress): retry, here "
                    "or on another server"},
    {FWD_ACTIVE_LOST, "the connection to the active server was lost after the request may have "
                      "reached it: retry (acquire with the same lease_id)"},
    {FWD_BUSY, "this standby forwards no more waiting requests to the active at once: retry, or "
               "send it to the active server"},
    {HTTP_UNCONFIRMED, "this server cannot confirm with blob storage that it is still the active "
                       "one, and answers nothing until it can: retry, here or on another server"},
    {HTTP_TOO_MANY_WAITING, "this server holds as many waiting requests (blocking acquires, "
                            "watches) as it takes at once: retry later"},
    {HTTP_TOO_MANY_CONNECTIONS, "this server is at its connection limit, and serves only health "
                                "checks on this connection: retry later"},
};

enum MHD_Result http_i_send_group_unavailable(struct hreq *q, const char *reason)
{
    const char *msg = reason;
    for (size_t i = 0; i < sizeof unavailable_messages / sizeof unavailable_messages[0]; i++)
        if (strcmp(reason, unavailable_messages[i].reason) == 0)
            msg = unavailable_messages[i].message;
    struct render rd;
    render_unavailable_message(reason, msg, 1, &rd);
    return http_i_send_render(q, &rd, NULL);
}

/* The active's answer as it gave it: status, body, and the headers clients act on. */
enum MHD_Result http_i_send_relayed(struct hreq *q)
{
    struct fwd_req *f = &q->fwd;
    char *body = f->answer;
    size_t len = f->answer_len;
    f->answer = NULL;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body ? body : (void *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    for (int i = 0; i < FWD_NHEADERS; i++) {
        const char *v = f->headers[i];
        if (i == FWD_H_REQUEST_ID && !v)
            v = q->rid;
        if (v)
            MHD_add_response_header(r, fwd_header_names[i], v);
    }
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (q->close)
        MHD_add_response_header(r, "Connection", "close");
    q->status = f->status;
    q->phase = PH_DONE;
    enum MHD_Result rc = MHD_queue_response(q->conn, (unsigned)f->status, r);
    MHD_destroy_response(r);
    return rc;
}
