/*
 * Who answers a lease request (see answer.h).
 */
#include "http/answer.h"

void answer_begin(struct answer *a)
{
    atomic_store(&a->state, ANS_NONE);
}

bool answer_arrived(struct answer *a)
{
    int s = atomic_load(&a->state);
    for (;;) {
        int to = s == ANS_NONE ? ANS_EARLY : s == ANS_SUSPENDING ? ANS_LATE : -1;
        if (to < 0)
            return true; /* ANS_SUSPENDED */
        if (atomic_compare_exchange_weak(&a->state, &s, to))
            return false;
    }
}

bool answer_suspend(struct answer *a)
{
    int s = ANS_NONE;
    return !atomic_compare_exchange_strong(&a->state, &s, ANS_SUSPENDING); /* ANS_EARLY */
}

bool answer_suspended(struct answer *a)
{
    int s = ANS_SUSPENDING;
    return !atomic_compare_exchange_strong(&a->state, &s, ANS_SUSPENDED); /* ANS_LATE */
}
