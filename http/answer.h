/*
 * Who answers a lease request: the handler that sent it, or the thread its answer comes on.
 *
 * A lease request's answer may come on any thread (the HTTP thread that sent it, when the
 * resource's turn and its commit ran right there; the store's writer; the mirror's thread
 * in sync mode; an actor worker) and at any moment: before the handler has finished
 * sending, while it suspends the connection, or after. libmicrohttpd lets a suspended
 * connection be resumed from any thread, but a connection that was never suspended must be
 * answered by the handler itself. So the two sides settle it with one atomic state:
 *
 *   handler                          the thread the answer comes on
 *   answer_begin()                   ...
 *   (send the request)               answer_arrived(): true -> resume the connection
 *   answer_suspend(): true -> answer now, do not suspend
 *   (suspend the connection)
 *   answer_suspended(): true -> resume it yourself (the answer came while suspending)
 *
 * Exactly one resume follows a suspend, and an answer that came before the suspend is
 * answered by the handler at once. Any thread; lock-free.
 */
#ifndef MX_HTTP_ANSWER_H
#define MX_HTTP_ANSWER_H

#include <stdatomic.h>
#include <stdbool.h>

enum answer_state {
    ANS_NONE,       /* the handler is running, no answer yet */
    ANS_EARLY,      /* the answer came first: the handler answers on return from sending */
    ANS_SUSPENDING, /* the handler is suspending the connection */
    ANS_LATE,       /* the answer came while it suspended: the handler resumes it */
    ANS_SUSPENDED,  /* suspended: the answer resumes the connection */
};

struct answer {
    _Atomic int state; /* enum answer_state */
};

/* The handler, before sending the request. */
void answer_begin(struct answer *a);

/* The thread the answer comes on: true when it must resume the connection (the handler
 * has suspended it), false when the handler answers (EARLY, or LATE: it resumes). */
bool answer_arrived(struct answer *a);

/* The handler, after sending: true when the answer has come already (answer now, without
 * suspending); false: suspend the connection, then call answer_suspended(). */
bool answer_suspend(struct answer *a);

/* The handler, after suspending: true when the answer came meanwhile and the handler must
 * resume the connection itself; false: the answer's thread will. */
bool answer_suspended(struct answer *a);

#endif
