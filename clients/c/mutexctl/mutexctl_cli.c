/*
 * Durations, numbers and the command line of mutexctl, and its error reports (see
 * mutexctl_cli.h).
 */
#include "mutexctl_cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mxctl_parse_int(const char *text, int64_t min, int64_t max, int64_t *out)
{
    if (text == NULL)
        return -1;
    const char *digits = text[0] == '-' ? text + 1 : text;
    size_t n = strlen(digits);
    if (n == 0 || n > 19 || strspn(digits, "0123456789") != n)
        return -1;
    errno = 0;
    long long v = strtoll(text, NULL, 10);
    if (errno != 0 || v < min || v > max)
        return -1;
    *out = (int64_t)v;
    return 0;
}

int mxctl_parse_u64(const char *text, uint64_t *out)
{
    if (text == NULL)
        return -1;
    size_t n = strlen(text);
    if (n == 0 || n > 20 || strspn(text, "0123456789") != n)
        return -1;
    errno = 0;
    unsigned long long v = strtoull(text, NULL, 10);
    if (errno != 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

int mxctl_parse_duration(const char *text, int64_t *ms)
{
    static const struct {
        const char *suffix;
        int64_t ms;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    if (text == NULL)
        return -1;
    size_t n = strspn(text, "0123456789");
    if (n == 0 || n > 18)
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(text + n, units[i].suffix) != 0)
            continue;
        int64_t v = strtoll(text, NULL, 10); /* at most 18 digits: fits */
        if (v > INT64_MAX / units[i].ms)
            return -1;
        *ms = v * units[i].ms;
        return 0;
    }
    return -1;
}

static struct mxctl_opt *find(struct mxctl_opt *opts, size_t nopts, const char *name, size_t len)
{
    for (size_t i = 0; i < nopts; i++) {
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
            return &opts[i];
    }
    return NULL;
}

const char *mxctl_opt(const struct mxctl_opt *opts, size_t nopts, const char *name)
{
    for (size_t i = 0; i < nopts; i++) {
        if (strcmp(opts[i].name, name) == 0)
            return opts[i].value;
    }
    return NULL;
}

int mxctl_parse_args(int argc, char **argv, struct mxctl_opt *opts, size_t nopts,
                     int max_positional, int with_rest, struct mxctl_args *out, char *err,
                     size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (max_positional > MXCTL_MAX_POSITIONAL)
        max_positional = MXCTL_MAX_POSITIONAL;
    int only_positional = 0; /* after "--" when there is no rest */
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        int is_option = !only_positional && w[0] == '-' && w[1] != '\0';
        if (is_option && strcmp(w, "--") == 0) {
            if (with_rest) {
                out->rest = argv + i + 1;
                out->nrest = argc - i - 1;
                return 0;
            }
            only_positional = 1;
            continue;
        }
        if (is_option) {
            const char *name = strcmp(w, "-h") == 0 ? "--help" : w;
            const char *eq = strchr(name, '=');
            size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
            struct mxctl_opt *o = strncmp(name, "--", 2) == 0 ? find(opts, nopts, name, len) : NULL;
            if (o == NULL) {
                snprintf(err, errlen, "unknown option %.*s", (int)len, name);
                return -1;
            }
            if (!o->has_value) {
                if (eq != NULL) {
                    snprintf(err, errlen, "%s takes no value", o->name);
                    return -1;
                }
                o->value = "";
            } else if (eq != NULL) {
                o->value = eq + 1;
            } else if (i + 1 < argc) {
                o->value = argv[++i];
            } else {
                snprintf(err, errlen, "%s needs a value", o->name);
                return -1;
            }
            if (o->has_value == MXCTL_REPEATED) {
                if (out->nvalues == MXCTL_MAX_VALUES) {
                    snprintf(err, errlen, "%s is given more than %d times", o->name,
                             MXCTL_MAX_VALUES);
                    return -1;
                }
                out->values[out->nvalues++] = o->value;
            }
            continue;
        }
        if (out->npositional < max_positional) {
            out->positional[out->npositional++] = w;
            continue;
        }
        if (with_rest) {
            out->rest = argv + i;
            out->nrest = argc - i;
            return 0;
        }
        snprintf(err, errlen, "unexpected argument '%s'", w);
        return -1;
    }
    return 0;
}

int mxctl_exit_status(mutexd_result result, const struct mutexd_error *error)
{
    switch (result) {
    case MUTEXD_OK:
        return MXCTL_EXIT_OK;
    case MUTEXD_HELD:
    case MUTEXD_LOST:
        return MXCTL_EXIT_DECLINED;
    case MUTEXD_ERR_ARG:
        return MXCTL_EXIT_USAGE;
    case MUTEXD_ERR_API:
        return error != NULL && (error->status == 400 || error->status == 413) ? MXCTL_EXIT_USAGE
                                                                               : MXCTL_EXIT_FAILED;
    default:
        return MXCTL_EXIT_FAILED;
    }
}

int mxctl_report(const char *what, mutexd_result result, const struct mutexd_error *error,
                 int quiet)
{
    const char *msg = error->message != NULL ? error->message : mutexd_result_name(result);
    const char *w = what != NULL ? what : "";
    const char *sep = what != NULL ? ": " : "";
    switch (result) {
    case MUTEXD_OK:
        break;
    case MUTEXD_HELD:
        if (quiet)
            break;
        if (error->has_holder)
            fprintf(stderr, "mutexctl: %s is held by %s (fencing token %llu, expires in %lld ms)\n",
                    w, error->holder.owner, (unsigned long long)error->holder.fencing_token,
                    (long long)error->holder.expires_in_ms);
        else
            fprintf(stderr, "mutexctl: %s%s%s\n", w, sep, msg);
        break;
    case MUTEXD_LOST:
        fprintf(stderr,
                "mutexctl: %s%sthe lease is lost: it was released, broken, or granted to "
                "another after it expired\n",
                w, sep);
        break;
    case MUTEXD_ERR_API:
        fprintf(stderr, "mutexctl: %s%s%s (%s%s%s, HTTP %d)\n", w, sep, msg,
                error->code != NULL ? error->code : "no code",
                error->field != NULL ? ", field " : "", error->field != NULL ? error->field : "",
                error->status);
        break;
    case MUTEXD_ERR_TRANSPORT:
        fprintf(stderr, "mutexctl: %s%sno answer from the server: %s\n", w, sep, msg);
        break;
    case MUTEXD_ERR_LIMIT_MISMATCH:
        if (error->limit > 0)
            fprintf(stderr,
                    "mutexctl: %s%sits holders hold it under limit %lld, not the limit asked "
                    "for (limit_mismatch; without --limit the limit asked for is 1)\n",
                    w, sep, (long long)error->limit);
        else
            fprintf(stderr, "mutexctl: %s%s%s (limit_mismatch)\n", w, sep, msg);
        break;
    default:
        fprintf(stderr, "mutexctl: %s%s%s\n", w, sep, msg);
        break;
    }
    return mxctl_exit_status(result, error);
}

char *mxctl_join_names(const char *const *names, size_t n)
{
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(names[i]) + 2;
    char *out = malloc(len), *p = out;
    for (size_t i = 0; out != NULL && i < n; i++)
        p += sprintf(p, "%s%s", i > 0 ? ", " : "", names[i]);
    if (out != NULL && n == 0)
        out[0] = '\0';
    return out;
}

char *mxctl_error_names(const struct mutexd_error *err, const char *const *names, size_t n)
{
    char **named = NULL;
    size_t count = 0;
    char *text;
    if (mutexd_error_resources(err, &named, &count) == MUTEXD_OK && count > 0)
        text = mxctl_join_names((const char *const *)named, count);
    else
        text = mxctl_join_names(names, n);
    free(named);
    return text;
}
