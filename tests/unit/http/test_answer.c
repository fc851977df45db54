/* Who answers a lease request (http/answer.c): every order of "the answer came" and the
 * handler's two steps, and the same raced on two threads; in each, exactly one side
 * answers, and a suspended connection is resumed exactly once. */
#include "tests/unit/testutil.h"

#include <pthread.h>

#include "http/answer.h"

/* One run of the protocol with the answer arriving at `when` (0: before answer_suspend,
 * 1: between answer_suspend and answer_suspended, 2: after answer_suspended). Counts what
 * each side does. */
struct outcome {
    int handler_answers; /* answered without suspending */
    int suspends;        /* the connection was suspended */
    int resumes;         /* by the handler or the answer's thread */
};

static struct outcome run(int when)
{
    struct answer a;
    struct outcome o = {0};
    answer_begin(&a);
    if (when == 0 && answer_arrived(&a))
        o.resumes++;
    if (answer_suspend(&a)) {
        o.handler_answers++;
        return o;
    }
    o.suspends++;
    if (when == 1 && answer_arrived(&a))
        o.resumes++;
    if (answer_suspended(&a))
        o.resumes++;
    if (when == 2 && answer_arrived(&a))
        o.resumes++;
    return o;
}

static void answer_before_the_send_ends_is_the_handlers(void **st)
{
    (void)st;
    struct outcome o = run(0);
    assert_int_equal(o.handler_answers, 1);
    assert_int_equal(o.suspends, 0);
    assert_int_equal(o.resumes, 0);
}

static void answer_while_suspending_is_resumed_by_the_handler(void **st)
{
    (void)st;
    struct answer a;
    answer_begin(&a);
    assert_false(answer_suspend(&a));
    assert_false(answer_arrived(&a)); /* the handler will resume */
    assert_true(answer_suspended(&a));
    struct outcome o = run(1);
    assert_int_equal(o.handler_answers, 0);
    assert_int_equal(o.suspends, 1);
    assert_int_equal(o.resumes, 1);
}

static void answer_after_suspending_is_resumed_by_its_thread(void **st)
{
    (void)st;
    struct answer a;
    answer_begin(&a);
    assert_false(answer_suspend(&a));
    assert_false(answer_suspended(&a));
    assert_true(answer_arrived(&a)); /* this thread resumes */
    struct outcome o = run(2);
    assert_int_equal(o.suspends, 1);
    assert_int_equal(o.resumes, 1);
}

static void begin_starts_every_request_anew(void **st)
{
    (void)st;
    struct answer a;
    answer_begin(&a);
    assert_false(answer_arrived(&a));
    assert_true(answer_suspend(&a));
    answer_begin(&a); /* the next request on the connection */
    assert_false(answer_suspend(&a));
    assert_false(answer_suspended(&a));
    assert_true(answer_arrived(&a));
}

/* Raced: the handler on this thread, the answer on another, many times. */
struct race {
    struct answer a;
    pthread_barrier_t go;
    _Atomic int resumes_by_answer;
};

static void *answerer(void *arg)
{
    struct race *r = arg;
    pthread_barrier_wait(&r->go);
    if (answer_arrived(&r->a))
        atomic_fetch_add(&r->resumes_by_answer, 1);
    return NULL;
}

static void raced_on_two_threads_one_side_answers(void **st)
{
    (void)st;
    int early = 0, late = 0, by_answer = 0;
    for (int i = 0; i < 20000; i++) {
        struct race r = {0};
        answer_begin(&r.a);
        pthread_barrier_init(&r.go, NULL, 2);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, answerer, &r), 0);
        pthread_barrier_wait(&r.go);
        int handler_answers = 0, suspends = 0, resumes = 0;
        if (answer_suspend(&r.a)) {
            handler_answers = 1;
        } else {
            suspends = 1;
            if (answer_suspended(&r.a))
                resumes++;
        }
        pthread_join(t, NULL);
        pthread_barrier_destroy(&r.go);
        resumes += atomic_load(&r.resumes_by_answer);
        /* Either the handler answered and nothing was suspended, or one resume followed
         * the one suspend. */
        assert_int_equal(handler_answers + suspends, 1);
        assert_int_equal(resumes, suspends);
        early += handler_answers;
        late += suspends && !atomic_load(&r.resumes_by_answer);
        by_answer += atomic_load(&r.resumes_by_answer);
    }
    assert_int_equal(early + late + by_answer, 20000);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(answer_before_the_send_ends_is_the_handlers),
    cmocka_unit_test(answer_while_suspending_is_resumed_by_the_handler),
    cmocka_unit_test(answer_after_suspending_is_resumed_by_its_thread),
    cmocka_unit_test(begin_starts_every_request_anew),
    cmocka_unit_test(raced_on_two_threads_one_side_answers),
};
MX_TEST_MAIN(tests)
