/*
 * container_of: from a pointer to a member to the struct that embeds it. Intrusive links
 * (mailbox nodes, timers, wait-queue entries) are members of the object they link, and the
 * code that pops one needs the object back.
 */
#ifndef MX_CONTAINER_OF_H
#define MX_CONTAINER_OF_H

#include <stddef.h>

/* `ptr` points at member `field` of a `type`; the result points at that `type`. The caller
 * vouches for it: nothing here can check that the member really is inside one. */
#define container_of(ptr, type, field) ((type *)(void *)((char *)(ptr)-offsetof(type, field)))

#endif
