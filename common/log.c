/*
 * logfmt lines on stderr. The level is read on every call from many threads, so it is
 * an atomic; relaxed order is enough because a late-seen level change only means a
 * line more or less.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int current_level = MX_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void mx_log_set_level(enum mx_log_level level)
{
    atomic_store_explicit(&current_level, (int)level, memory_order_relaxed);
}

enum mx_log_level mx_log_get_level(void)
{
    return (enum mx_log_level)atomic_load_explicit(&current_level, memory_order_relaxed);
}

int mx_log_parse_level(const char *s)
{
    for (int i = 0; i <= MX_LOG_OFF; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    if (strcmp(s, "warning") == 0)
        return MX_LOG_WARN;
    return -1;
}

/* The escape for byte `c` in a logfmt value, written into `esc` (up to 4 bytes and a NUL),
 * or NULL when `c` stands for itself. */
static const char *escape_of(unsigned char c, bool quoted, char esc[5])
{
    switch (c) {
    case '\n':
        return "\\n";
    case '\r':
        return "\\r";
    case '\t':
        return "\\t";
    case '"':
        return quoted ? "\\\"" : NULL;
    case '\\':
        return quoted ? "\\\\" : NULL;
    default:
        if (c < 0x20 || c == 0x7f) {
            snprintf(esc, 5, "\\x%02x", c);
            return esc;
        }
        return NULL;
    }
}

const char *mx_log_quote(char *out, size_t outlen, const char *s)
{
    /* Room kept at the end for `..."` and the NUL. */
    size_t n = 0, limit = outlen - 5;
    out[n++] = '"';
    for (; s && *s; s++) {
        char esc[5];
        const char *e = escape_of((unsigned char)*s, true, esc);
        size_t len = e ? strlen(e) : 1;
        if (n + len > limit) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        if (e)
            memcpy(out + n, e, len);
        else
            out[n] = *s;
        n += len;
    }
    out[n++] = '"';
    out[n] = '\0';
    return out;
}

void mx_log(enum mx_log_level level, const char *msg, const char *fmt, ...)
{
    if ((int)level < atomic_load_explicit(&current_level, memory_order_relaxed) ||
        level >= MX_LOG_OFF)
        return;

    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n =
        snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=\"%s\"",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, level_names[level], msg);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    if ((size_t)n < sizeof line - 2 && fmt && *fmt) {
        char rest[sizeof line];
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(rest, sizeof rest, fmt, ap);
        va_end(ap);
        if (m > (int)sizeof rest - 1)
            m = (int)sizeof rest - 1;
        line[n++] = ' ';
        /* A value the caller did not quote may still hold a newline: escaped here, it
         * cannot start a line of its own. */
        for (int i = 0; i < m && (size_t)n < sizeof line - 1; i++) {
            char esc[5];
            const char *e = escape_of((unsigned char)rest[i], false, esc);
            size_t len = e ? strlen(e) : 1;
            if ((size_t)n + len > sizeof line - 1)
                break;
            if (e)
                memcpy(line + n, e, len);
            else
                line[n] = rest[i];
            n += (int)len;
        }
    }
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w; /* nothing sensible to do when stderr is gone */
}
