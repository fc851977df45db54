/*
 * The API's answers (parsed by json.h) into the public structs, and the structs' clear
 * functions. Each decoder checks what the API promises: a member that is missing or of the
 * wrong type is MUTEXD_ERR_PROTOCOL, never a half-filled struct. On failure the output is
 * cleared.
 */
#ifndef MXC_DECODE_H
#define MXC_DECODE_H

#include "json.h"
#include "mutexd.h"

/* The lease body of acquire and renew. */
mutexd_result mxc_decode_lease(const struct mxc_doc *doc, const cJSON *obj,
                               struct mutexd_lease *out);

/* A state, as GET answers it and as each element of a list. */
mutexd_result mxc_decode_state(const struct mxc_doc *doc, const cJSON *obj,
                               struct mutexd_state *out);

/* A list page. */
mutexd_result mxc_decode_page(const struct mxc_doc *doc, const cJSON *obj, struct mutexd_page *out);

/* The answer of GET /v1/events. */
mutexd_result mxc_decode_event_page(const struct mxc_doc *doc, const cJSON *obj,
                                    struct mutexd_event_page *out);

/* The answer of GET /v1/whoami. */
mutexd_result mxc_decode_whoami(const struct mxc_doc *doc, const cJSON *obj,
                                struct mutexd_whoami *out);

/* The "error" object of an error answer into code, message, field, reason, holder and limit of
 * *out (its other fields are left alone). MUTEXD_ERR_PROTOCOL when the body has no error
 * object with a code. */
mutexd_result mxc_decode_error(const struct mxc_doc *doc, const cJSON *obj,
                               struct mutexd_error *out);

#endif
