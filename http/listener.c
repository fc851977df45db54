/*
 * The listening socket (see listener.h): resolved, bound and listening before
 * libmicrohttpd is given it, so that a bad address is an error with its reason and the
 * bound address (port 0: the one the kernel chose) is known.
 */
#include "http/listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int listener_open(const char *listen_at, struct listener *out, char *err, size_t errlen)
{
    out->fd = -1;
    out->address[0] = '\0';
    out->loopback = false;
    char host[256], port[16];
    const char *colon = strrchr(listen_at, ':');
    if (!colon || colon == listen_at || strlen(colon + 1) == 0 ||
        strlen(colon + 1) >= sizeof port || (size_t)(colon - listen_at) >= sizeof host) {
        snprintf(err, errlen, "--listen must be HOST:PORT, got '%s'", listen_at);
        return -1;
    }
    size_t hl = (size_t)(colon - listen_at);
    memcpy(host, listen_at, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') { /* [::1]:8080 */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    snprintf(port, sizeof port, "%s", colon + 1);

    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "cannot resolve --listen %s: %s", listen_at, gai_strerror(gai));
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *p = ai; p; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, p->ai_addr, p->ai_addrlen) == 0 && listen(fd, 4096) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", listen_at, strerror(saved));
        return -1;
    }
    struct sockaddr_storage ss = {0};
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int bound = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
            bound = ntohs(s6->sin6_port);
            snprintf(out->address, sizeof out->address, "[%s]:%d", ip, bound);
        } else {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
            bound = ntohs(s4->sin_port);
            snprintf(out->address, sizeof out->address, "%s:%d", ip, bound);
        }
    }
    if (ss.ss_family == AF_INET6)
        out->loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
    else
        out->loopback = (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    out->fd = fd;
    return 0;
}

char *listener_read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "out of memory reading %s", path);
                return NULL;
            }
            buf = b;
        }
        size_t n = fread(buf + len, 1, 4096, f);
        len += n;
        if (n < 4096)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}
