/*
 * The role of a server's HTTP front in a server group (docs/ha.md): serve here, forward to
 * the active, hold while no server is active, or refuse as a server that has just lost the
 * container. Its own header so that the forwarder and the server share it alone.
 */
#ifndef MX_HTTP_ROLE_H
#define MX_HTTP_ROLE_H

enum http_role {
    HTTP_ROLE_SERVE,   /* answer requests here (the active server, or no group) */
    HTTP_ROLE_FORWARD, /* a standby: send /v1 requests to active_url */
    HTTP_ROLE_HOLD,    /* a standby while no server is active: hold /v1 requests */
    HTTP_ROLE_FENCED,  /* just lost the container: 503 unavailable, reason "fenced" */
};

#endif
