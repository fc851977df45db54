/*
 * One line per event on stderr, in logfmt: `ts=... level=info msg="..." key=value`.
 * Thread-safe: each line is written with one write(2).
 */
#ifndef MX_LOG_H
#define MX_LOG_H

#include <stddef.h>

enum mx_log_level { MX_LOG_DEBUG, MX_LOG_INFO, MX_LOG_WARN, MX_LOG_ERROR, MX_LOG_OFF };

/* Sets the lowest level written. Call before threads start. */
void mx_log_set_level(enum mx_log_level level);
enum mx_log_level mx_log_get_level(void);

/* Parses "debug", "info", "warn", "error" or "off"; returns -1 for anything else. */
int mx_log_parse_level(const char *s);

/*
 * Writes one event. `msg` is quoted for you; `fmt` (may be NULL) appends the rest of
 * the line, which the caller writes as logfmt pairs (`key=%s`). Any control character
 * that reaches the line (a newline above all) is written escaped, so one call is always
 * one line; a value that may hold quotes, spaces or backslashes (anything a client or a
 * file supplied) goes through mx_log_quote().
 */
void mx_log(enum mx_log_level level, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Writes `s` into `out` as one quoted logfmt value: `"..."` with `\"`, `\\`, `\n`, `\r`,
 * `\t` and `\xHH` for the other control characters (and DEL). Cut short with `...` when
 * it does not fit. Returns `out`, which must have room for at least 8 bytes.
 */
const char *mx_log_quote(char *out, size_t outlen, const char *s);

#define mx_debug(msg, ...) mx_log(MX_LOG_DEBUG, msg, __VA_ARGS__)
#define mx_info(msg, ...)  mx_log(MX_LOG_INFO, msg, __VA_ARGS__)
#define mx_warn(msg, ...)  mx_log(MX_LOG_WARN, msg, __VA_ARGS__)
#define mx_error(msg, ...) mx_log(MX_LOG_ERROR, msg, __VA_ARGS__)

#endif
