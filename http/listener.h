/*
 * The HTTP front's listening socket, and the files its TLS setup reads.
 */
#ifndef MX_HTTP_LISTENER_H
#define MX_HTTP_LISTENER_H

#include <stdbool.h>
#include <stddef.h>

struct listener {
    int fd;           /* listening, close-on-exec; the caller's to close */
    char address[96]; /* as bound: "127.0.0.1:8080", "[::1]:8080" */
    bool loopback;    /* bound to a loopback address */
};

/* Resolves HOST:PORT (an empty host: every address), binds and listens. Returns 0, or -1
 * with a sentence in err. */
int listener_open(const char *listen_at, struct listener *out, char *err, size_t errlen);

/* The whole of a file as a NUL-terminated string the caller frees (a PEM certificate or
 * key), or NULL with a sentence in err. */
char *listener_read_file(const char *path, char *err, size_t errlen);

#endif
