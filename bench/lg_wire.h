/*
 * The bytes loadgen writes and reads: HTTP/1.1 requests and answers (mutexd, etcd's JSON
 * gateway), RESP commands and replies (Redis), and the little JSON and base64 those need.
 *
 * Only what fixed-shape lease requests need: a parser reads the status, the body's length
 * (Content-Length or chunked) and hands back the body; a field is looked up by name in a flat
 * JSON text. Pure functions on caller buffers: no allocation, no state, any thread.
 */
#ifndef LG_WIRE_H
#define LG_WIRE_H

#include <stdbool.h>
#include <stddef.h>

/* Parsers return the bytes one answer took, or one of these. */
enum { WIRE_MORE = -1 /* incomplete: read more */, WIRE_BAD = -2 /* not a valid answer */ };

struct wire_http {
    int status;
    const char *body; /* into the input, or into scratch when the body was chunked */
    size_t body_len;
    bool close;              /* the server closes the connection after this answer */
    unsigned served_by_port; /* the port of a Mutexd-Served-By URL, or 0 */
};

/*
 * Parses one HTTP/1.x answer at the start of buf[0..n). A chunked body is decoded into
 * scratch (cap bytes; a larger body is WIRE_BAD). Bodies delimited by the connection's close
 * are WIRE_BAD: none of the servers we talk to sends them.
 */
long wire_http_parse(const char *buf, size_t n, char *scratch, size_t cap, struct wire_http *r);

/* Writes a POST of a JSON body into out; returns its length, or -1 if cap is too small. */
int wire_http_post(char *out, size_t cap, const char *host, const char *path, const char *body);

struct wire_resp {
    char type; /* '+' simple string, '-' error, ':' integer, '$' bulk string */
    bool nil;  /* a nil bulk string ($-1) */
    long long integer;
    const char *str; /* '+', '-', '$': the text, into the input */
    size_t len;
};

/* Parses one RESP2 reply at the start of buf[0..n). Arrays are WIRE_BAD (never asked for). */
long wire_resp_parse(const char *buf, size_t n, struct wire_resp *r);

/* Writes a command as a RESP array of bulk strings; returns its length, or -1. */
int wire_resp_cmd(char *out, size_t cap, int argc, const char *const *argv);

/*
 * The value of the first "name": in a JSON text: a string's contents without its quotes (the
 * fields we read never hold escapes), or a bare token (number, true, null). Enough for the
 * small, known answers of the three servers; not a JSON parser.
 */
bool wire_json_field(const char *b, size_t n, const char *name, const char **val, size_t *vlen);

/* As wire_json_field, copied NUL-terminated into out; false if missing, empty or too long. */
bool wire_json_copy(const char *b, size_t n, const char *name, char *out, size_t cap);

/* Whether "name" is the string want. */
bool wire_json_is(const char *b, size_t n, const char *name, const char *want);

/* The partition of a mutexd resource name among count partitions (docs/api.md,
 * "Partitions"): the CRC-32 (zlib's) of its hash tag, or of the whole name, modulo count. */
unsigned wire_partition_of(const char *name, unsigned count);

/* Standard base64 with padding, NUL-terminated; truncated to fit cap. */
void wire_base64(const char *in, size_t n, char *out, size_t cap);

#endif
