/*
 * The parsing helpers of mutexctl, apart from the program so that they are unit-tested:
 * durations ("500ms", "15s", "2m", "1h", or plain milliseconds), numbers, and the command
 * line of one command (long options anywhere, "--opt value" or "--opt=value", "--" ends the
 * options); and what its commands share to report an error (of a set: the names it names).
 */
#ifndef MUTEXCTL_CLI_H
#define MUTEXCTL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "mutexd.h"

/* mutexctl's exit statuses. */
enum {
    MXCTL_EXIT_OK = 0,
    MXCTL_EXIT_DECLINED = 1, /* held, or the lease was lost */
    MXCTL_EXIT_USAGE = 2,    /* bad command line, or input the server refuses (400, 413) */
    MXCTL_EXIT_FAILED = 3,   /* any other error, or no answer */
};

/* A duration in milliseconds: digits, then nothing (milliseconds) or one of the units ms, s,
 * m, h. 0, or -1 when it is anything else, or longer than about 292 years. */
int mxctl_parse_duration(const char *text, int64_t *ms);

/* A whole number from min to max, in decimal. 0 or -1. */
int mxctl_parse_int(const char *text, int64_t min, int64_t max, int64_t *out);
int mxctl_parse_u64(const char *text, uint64_t *out);

/* One option a command accepts. The parser sets `value` when the option is given: its
 * value, or "" for a flag (has_value 0). Given twice, the last one counts; but an option of
 * has_value MXCTL_REPEATED may be given several times, and every value it is given is kept,
 * in order, in mxctl_args.values (one such option a command). */
struct mxctl_opt {
    const char *name; /* with its dashes: "--ttl" */
    int has_value;    /* 0: a flag; 1: takes a value; MXCTL_REPEATED: one each time given */
    const char *value;
};

#define MXCTL_REPEATED 2

/* The most positional words: the names of a set (MUTEXD_MANY_MAX) and a lease id. */
#define MXCTL_MAX_POSITIONAL (MUTEXD_MANY_MAX + 1)
/* The most values of a repeated option: the names of a set. */
#define MXCTL_MAX_VALUES MUTEXD_MANY_MAX

struct mxctl_args {
    const char *positional[MXCTL_MAX_POSITIONAL];
    int npositional;
    char **rest; /* the words of the command to run, for `run`; NULL when none */
    int nrest;
    const char *values[MXCTL_MAX_VALUES]; /* of the option of has_value MXCTL_REPEATED */
    int nvalues;
};

/*
 * Parses the `argc` words of `argv` (what follows the command's name). "-h" is "--help".
 * Words that are not options are positional, at most `max_positional` of them. When
 * `with_rest` is set (run), the word after "--", or else the first word past max_positional,
 * starts the rest (out->rest), which is not parsed; otherwise "--" only means that the words
 * after it are positional. 0, or -1 with a message for the user in `err`.
 */
int mxctl_parse_args(int argc, char **argv, struct mxctl_opt *opts, size_t nopts,
                     int max_positional, int with_rest, struct mxctl_args *out, char *err,
                     size_t errlen);

/* The value of option `name` after parsing, or NULL when it was not given. */
const char *mxctl_opt(const struct mxctl_opt *opts, size_t nopts, const char *name);

/* The exit status for a library result. */
int mxctl_exit_status(mutexd_result result, const struct mutexd_error *error);

/* Says on stderr what went wrong with `what` (a resource name, or NULL), unless `quiet` and
 * the resource is held; returns mxctl_exit_status(). */
int mxctl_report(const char *what, mutexd_result result, const struct mutexd_error *error,
                 int quiet);

/* "a, b, c": `n` names for a message; NULL when memory ran out. The caller frees it. */
char *mxctl_join_names(const char *const *names, size_t n);

/* What the error of a call about the set `names` is about, for its message: the resources
 * the answer names (the one held, those lost), else the whole set; NULL when memory ran out.
 * The caller frees it. */
char *mxctl_error_names(const struct mutexd_error *err, const char *const *names, size_t n);

#endif
