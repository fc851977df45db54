/*
 * A one-thread HTTP server on a free loopback port that answers every request with the same
 * canned response, and keeps the last request it read: for answers a real mutexd does not
 * give on demand (401, 403, 503, broken bodies) and for looking at what the client sent. Or
 * one that passes each request on to a real server and drops its answer: a request carried
 * out whose answer is lost.
 */
#ifndef MUTEXD_FAKE_SERVER_H
#define MUTEXD_FAKE_SERVER_H

struct fake_server;

/* Starts answering every request with `status_line` ("HTTP/1.1 503 Service Unavailable"),
 * `headers` (each line ending in "\r\n", or ""), Content-Length and `body`. With `silent`, it
 * reads requests and never answers. NULL on failure. */
struct fake_server *fake_start(const char *status_line, const char *headers, const char *body,
                               int silent);

/* Passes every request on to the server at `upstream` ("http://127.0.0.1:PORT"), keeps its
 * answer, and closes the connection without answering. NULL on failure. */
struct fake_server *fake_start_swallowing(const char *upstream);

/* A copy of the last answer fake_start_swallowing() kept, or NULL; the caller frees. */
char *fake_last_answer(struct fake_server *f);

/* How many requests it has read. */
int fake_requests(struct fake_server *f);

/* "http://127.0.0.1:PORT" */
const char *fake_url(const struct fake_server *f);

/* A copy of the last request read (head and body), or NULL before any; the caller frees. */
char *fake_last_request(struct fake_server *f);

void fake_stop(struct fake_server *f);

/* A loopback URL where nothing listens. */
void fake_closed_url(char *out, unsigned long size);

#endif
