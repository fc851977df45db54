/*
 * epoll_wait() for the whole program: a call after a full batch does not wait.
 *
 * libmicrohttpd's epoll loop (0.9.75 to 1.0.1 at least) takes events 128 at a time and,
 * while a batch is full, calls epoll_wait() again with the loop's timeout before serving
 * any of them: when exactly 128 sockets are ready at once, it serves none until one more
 * event comes or that timeout ends, seconds away (a closed-loop load of 128 connections
 * on one HTTP thread stopped dead). This definition takes the place of the C library's
 * for the whole program, libmicrohttpd included: a call on the epoll set whose last call
 * on this thread filled its batch does not wait. Any other call is the C library's.
 *
 * Every program that links the front (mx_http) links this file as an object, not as a
 * member of the library's archive (see CMakeLists.txt): under a sanitizer, whose runtime
 * comes first on the link line and defines epoll_wait() as well, the linker took no member
 * for it, and the TSan build served a full batch seconds late.
 */
#include <stddef.h>
#include <sys/epoll.h>

int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    static _Thread_local int full = -1; /* the set whose last call filled its batch */
    int n = epoll_pwait(epfd, events, maxevents, full == epfd ? 0 : timeout, NULL);
    full = n == maxevents ? epfd : -1;
    return n;
}
