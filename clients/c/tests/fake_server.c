/*
 * The canned-answer HTTP server of fake_server.h: a thread that accepts, reads one request
 * (head to the blank line, then Content-Length bytes), answers (or passes it on upstream and
 * reads the answer the same way) and closes.
 */
#include "fake_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

struct fake_server {
    int fd;
    char url[64];
    char *response;
    int silent;
    int upstream_port; /* > 0: pass requests on there, answer nothing */
    atomic_int stop;
    pthread_t thread;
    pthread_mutex_t lock;
    char *last;   /* under lock */
    char *answer; /* under lock */
    int requests; /* under lock */
};

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

void fake_closed_url(char *out, unsigned long size)
{
    int port = 1;
    int fd = listen_any(&port);
    if (fd >= 0)
        close(fd); /* nothing listens there now */
    snprintf(out, size, "http://127.0.0.1:%d", port);
}

/* Reads one request (or answer); its text, or NULL when the peer went away. */
static char *read_request(struct fake_server *f, int c)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    long want = -1;
    while (buf != NULL && len < cap && !atomic_load(&f->stop)) {
        struct pollfd p = {.fd = c, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = read(c, buf + len, cap - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end == NULL)
            continue;
        if (want < 0) {
            want = 0;
            for (char *h = buf; h < end; h = strstr(h, "\r\n") + 2) {
                if (strncasecmp(h, "Content-Length:", 15) == 0)
                    want = atol(h + 15);
            }
        }
        if ((long)(len - (size_t)(end + 4 - buf)) >= want)
            return buf;
    }
    free(buf);
    return NULL;
}

static void write_all(int fd, const char *text)
{
    size_t off = 0, n = strlen(text);
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

/* Passes `req` on to the upstream server; its answer, or NULL. */
static char *pass_on(struct fake_server *f, const char *req)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)f->upstream_port)};
    char *answer = NULL;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        write_all(fd, req);
        answer = read_request(f, fd);
    }
    if (fd >= 0)
        close(fd);
    return answer;
}

static void *serve(void *arg)
{
    struct fake_server *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept(f->fd, NULL, NULL);
        if (c < 0)
            continue;
        char *req = read_request(f, c);
        if (req != NULL) {
            char *answer = f->upstream_port > 0 ? pass_on(f, req) : NULL;
            pthread_mutex_lock(&f->lock);
            free(f->last);
            f->last = req;
            f->requests++;
            if (answer != NULL) {
                free(f->answer);
                f->answer = answer;
            }
            pthread_mutex_unlock(&f->lock);
            if (!f->silent && f->upstream_port == 0)
                write_all(c, f->response);
        }
        while (f->silent && !atomic_load(&f->stop))
            usleep(20000);
        close(c);
    }
    return NULL;
}

static struct fake_server *start(const char *status_line, const char *headers, const char *body,
                                 int silent, int upstream_port)
{
    struct fake_server *f = calloc(1, sizeof(*f));
    int port = 0;
    if (f == NULL)
        return NULL;
    f->fd = listen_any(&port);
    f->silent = silent;
    f->upstream_port = upstream_port;
    pthread_mutex_init(&f->lock, NULL);
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d", port);
    if (asprintf(&f->response, "%s\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                 status_line, headers, strlen(body), body) < 0)
        f->response = NULL;
    if (f->fd < 0 || f->response == NULL || pthread_create(&f->thread, NULL, serve, f) != 0) {
        if (f->fd >= 0)
            close(f->fd);
        free(f->response);
        free(f);
        return NULL;
    }
    return f;
}

struct fake_server *fake_start(const char *status_line, const char *headers, const char *body,
                               int silent)
{
    return start(status_line, headers, body, silent, 0);
}

struct fake_server *fake_start_swallowing(const char *upstream)
{
    const char *colon = strrchr(upstream, ':');
    int port = colon != NULL ? atoi(colon + 1) : 0;
    if (strncmp(upstream, "http://127.0.0.1:", 17) != 0 || port <= 0)
        return NULL;
    return start("HTTP/1.1 500 Unused", "", "", 0, port);
}

char *fake_last_answer(struct fake_server *f)
{
    pthread_mutex_lock(&f->lock);
    char *copy = f->answer != NULL ? strdup(f->answer) : NULL;
    pthread_mutex_unlock(&f->lock);
    return copy;
}

int fake_requests(struct fake_server *f)
{
    pthread_mutex_lock(&f->lock);
    int n = f->requests;
    pthread_mutex_unlock(&f->lock);
    return n;
}

const char *fake_url(const struct fake_server *f)
{
    return f->url;
}

char *fake_last_request(struct fake_server *f)
{
    pthread_mutex_lock(&f->lock);
    char *copy = f->last != NULL ? strdup(f->last) : NULL;
    pthread_mutex_unlock(&f->lock);
    return copy;
}

void fake_stop(struct fake_server *f)
{
    if (f == NULL)
        return;
    atomic_store(&f->stop, 1);
    pthread_join(f->thread, NULL);
    close(f->fd);
    free(f->response);
    free(f->last);
    free(f->answer);
    pthread_mutex_destroy(&f->lock);
    free(f);
}
