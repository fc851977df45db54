/*
 * The canned-answer HTTP server of fake_server.h: a thread that accepts, reads one request
 * (head to the blank line, then Content-Length bytes), answers and closes.
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
    atomic_int stop;
    pthread_t thread;
    pthread_mutex_t lock;
    char *last; /* under lock */
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

/* Reads one request; its text, or NULL when the peer went away. */
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
            pthread_mutex_lock(&f->lock);
            free(f->last);
            f->last = req;
            pthread_mutex_unlock(&f->lock);
            if (!f->silent) {
                size_t off = 0, n = strlen(f->response);
                while (off < n) {
                    ssize_t w = write(c, f->response + off, n - off);
                    if (w <= 0)
                        break;
                    off += (size_t)w;
                }
            }
        }
        while (f->silent && !atomic_load(&f->stop))
            usleep(20000);
        close(c);
    }
    return NULL;
}

struct fake_server *fake_start(const char *status_line, const char *headers, const char *body,
                               int silent)
{
    struct fake_server *f = calloc(1, sizeof(*f));
    int port = 0;
    if (f == NULL)
        return NULL;
    f->fd = listen_any(&port);
    f->silent = silent;
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
    pthread_mutex_destroy(&f->lock);
    free(f);
}
