/* The loop on each --event-loop: timers fire on time (never early, and a
 * short timer started while a long one is pending is not held back to the
 * long one's time: lws 4.1's libev plugin re-arms its one timer watcher only
 * when it is idle), completions from workers and loop_post run on the loop
 * thread, loop_stop from another thread ends loop_run, and a bad name is
 * refused; on poll, many timers fire in order and waiting for one does not
 * spin. Each case runs the loop on this thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agentbox/common.h"
#include "agentbox/loop.h"

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct timing {
    struct loop *loop;
    struct loop_timer long_timer, short_timer, guard;
    int64_t started_us, fired_us;
    bool long_fired, guard_fired;
};

static void short_fired(struct loop_timer *t)
{
    struct timing *s = t->arg;
    s->fired_us = now_us();
    loop_timer_cancel(&s->long_timer);
    loop_timer_cancel(&s->guard);
    loop_stop(s->loop);
}

static void long_fired(struct loop_timer *t)
{
    struct timing *s = t->arg;
    s->long_fired = true;
}

static void guard_fired(struct loop_timer *t)
{
    struct timing *s = t->arg;
    s->guard_fired = true;
    loop_stop(s->loop);
}

/* Runs on the loop thread from a worker's completion (an lws event, as a
 * socket's would be): the 30 ms timer starts while the 3 s one is armed. */
static void start_short(void *arg, int status)
{
    struct timing *s = arg;
    assert_int_equal(status, 0);
    assert_true(loop_on_loop_thread(s->loop));
    s->started_us = now_us();
    loop_timer_start(s->loop, &s->short_timer, 30, short_fired, s);
}

static void nothing(void *arg)
{
    (void)arg;
}

static void short_timer_not_held_back(enum loop_kind kind)
{
    struct timing s;
    memset(&s, 0, sizeof(s));
    char err[256];
    struct loop_options lo = {.workers = 1, .kind = kind};
    assert_int_equal(loop_create(&lo, &s.loop, err, sizeof(err)), 0);
    assert_string_equal(loop_kind_of(s.loop), loop_kind_name(kind));
    loop_timer_start(s.loop, &s.long_timer, 3000, long_fired, &s);
    loop_timer_start(s.loop, &s.guard, 10000, guard_fired, &s);
    assert_int_equal(loop_submit(s.loop, nothing, start_short, &s), 0);
    loop_run(s.loop);
    assert_false(s.guard_fired);
    assert_false(s.long_fired);
    int64_t took = s.fired_us - s.started_us;
    print_message("%s: a 30 ms timer fired after %lld us\n", loop_kind_name(kind), (long long)took);
    assert_true(took >= 30000);  /* never early */
    assert_true(took < 1000000); /* not at the 3 s timer's time */
    loop_free(s.loop);
}

static void test_short_timer_libev(void **state)
{
    (void)state;
    short_timer_not_held_back(LOOP_LIBEV);
}

static void test_short_timer_poll(void **state)
{
    (void)state;
    short_timer_not_held_back(LOOP_POLL);
}

/* A timer started before loop_run, with nothing else happening, fires. */
struct quiet {
    struct loop *loop;
    struct loop_timer t;
    int fired;
};

static void quiet_fired(struct loop_timer *t)
{
    struct quiet *q = t->arg;
    if (++q->fired < 3) {
        loop_timer_start(q->loop, &q->t, 5, quiet_fired, q); /* rescheduled from its own callback */
        return;
    }
    loop_stop(q->loop);
}

static void quiet_timer(enum loop_kind kind)
{
    struct quiet q = {0};
    struct loop_options lo = {.workers = 1, .kind = kind};
    char err[256];
    assert_int_equal(loop_create(&lo, &q.loop, err, sizeof(err)), 0);
    loop_timer_start(q.loop, &q.t, 10, quiet_fired, &q);
    int64_t t0 = now_us();
    loop_run(q.loop);
    assert_int_equal(q.fired, 3);
    assert_true(now_us() - t0 >= 20000);
    loop_free(q.loop);
}

static void test_quiet_timer_libev(void **state)
{
    (void)state;
    quiet_timer(LOOP_LIBEV);
}

static void test_quiet_timer_poll(void **state)
{
    (void)state;
    quiet_timer(LOOP_POLL);
}

/* loop_stop from another thread, started from a completion on the loop
 * thread: the loop is running (and soon blocked waiting) when it comes. */
struct stopper {
    struct loop *loop;
    pthread_t th;
    int posted;
};

static void *stop_now(void *arg)
{
    loop_stop(((struct stopper *)arg)->loop);
    return NULL;
}

static void posted(void *arg, int status)
{
    struct stopper *s = arg;
    assert_int_equal(status, 0);
    assert_true(loop_on_loop_thread(s->loop));
    s->posted++;
    assert_int_equal(pthread_create(&s->th, NULL, stop_now, s), 0);
}

static void stop_from_thread(enum loop_kind kind)
{
    struct stopper s = {0};
    struct loop_options lo = {.workers = 2, .kind = kind};
    char err[256];
    assert_int_equal(loop_create(&lo, &s.loop, err, sizeof(err)), 0);
    assert_int_equal(loop_post(s.loop, posted, &s), 0);
    loop_run(s.loop);
    pthread_join(s.th, NULL);
    assert_true(loop_is_stopping(s.loop));
    assert_int_equal(s.posted, 1);
    loop_free(s.loop);
}

static void test_stop_libev(void **state)
{
    (void)state;
    stop_from_thread(LOOP_LIBEV);
}

static void test_stop_poll(void **state)
{
    (void)state;
    stop_from_thread(LOOP_POLL);
}

/* loop_defer: queued items run once, in queue order, on a later turn; one
 * queued while they run waits for the turn after; queueing a queued item
 * keeps its place; a cancelled one (even by an item of the same run) does
 * not run. */
struct deferrals {
    struct loop *loop;
    struct loop_defer d[5];
    int order[16];
    int n;
    int requeued; /* d[3] queued itself once from its own run */
    struct loop_timer guard;
};

static struct deferrals *the_deferrals;

static void defer_item(struct loop_defer *d)
{
    struct deferrals *x = the_deferrals;
    int i = (int)(d - x->d);
    x->order[x->n++] = i;
    if (i == 0)
        loop_defer_cancel(&x->d[2]); /* queued behind it in the same run: must not run */
    if (i == 3 && !x->requeued) {
        x->requeued = 1;
        loop_defer(x->loop, &x->d[3], defer_item); /* next turn, after this run ends */
        assert_true(x->d[3].loop != NULL);
    }
    if (i == 3 && x->n > 3)
        loop_stop(x->loop);
}

static void defer_guard(struct loop_timer *t)
{
    struct deferrals *x = t->arg;
    loop_stop(x->loop);
}

static void defer_start(void *arg, int status)
{
    struct deferrals *x = arg;
    assert_int_equal(status, 0);
    loop_defer(x->loop, &x->d[0], defer_item);
    loop_defer(x->loop, &x->d[1], defer_item);
    loop_defer(x->loop, &x->d[2], defer_item);
    loop_defer(x->loop, &x->d[3], defer_item);
    loop_defer(x->loop, &x->d[1], defer_item); /* already queued: keeps its place */
    loop_defer(x->loop, &x->d[4], defer_item);
    loop_defer_cancel(&x->d[4]); /* never runs */
    assert_int_equal(x->n, 0);   /* nothing runs from inside loop_defer */
}

static void defer_order(enum loop_kind kind)
{
    struct deferrals x;
    memset(&x, 0, sizeof(x));
    the_deferrals = &x;
    struct loop_options lo = {.workers = 1, .kind = kind};
    char err[256];
    assert_int_equal(loop_create(&lo, &x.loop, err, sizeof(err)), 0);
    loop_timer_start(x.loop, &x.guard, 10000, defer_guard, &x);
    assert_int_equal(loop_submit(x.loop, nothing, defer_start, &x), 0);
    loop_run(x.loop);
    loop_timer_cancel(&x.guard);
    /* 0, 1, 3 in the first run (2 cancelled by 0, 4 before it), then 3 again */
    assert_int_equal(x.n, 4);
    assert_int_equal(x.order[0], 0);
    assert_int_equal(x.order[1], 1);
    assert_int_equal(x.order[2], 3);
    assert_int_equal(x.order[3], 3);
    for (int i = 0; i < 5; i++)
        assert_null(x.d[i].loop);
    loop_free(x.loop);
}

static void test_defer_libev(void **state)
{
    (void)state;
    defer_order(LOOP_LIBEV);
}

static void test_defer_poll(void **state)
{
    (void)state;
    defer_order(LOOP_POLL);
}

static void test_kind_names(void **state)
{
    (void)state;
    enum loop_kind k = LOOP_POLL;
    char err[128] = "";
    k = LOOP_LIBEV;
    assert_int_equal(loop_kind_parse(NULL, &k, err, sizeof(err)), 0);
    assert_int_equal(k, LOOP_POLL); /* the default (the hub's own default is libev) */
    assert_int_equal(loop_kind_parse("poll", &k, err, sizeof(err)), 0);
    assert_int_equal(k, LOOP_POLL);
    assert_int_equal(loop_kind_parse("libev", &k, err, sizeof(err)), 0);
    assert_int_equal(k, LOOP_LIBEV);
    assert_int_equal(loop_kind_parse("epoll", &k, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "event_loop 'epoll' must be libev or poll");
    struct loop *l = loop_new(NULL);
    assert_non_null(l);
    assert_string_equal(loop_kind_of(l), "poll");
    assert_string_equal(loop_backend_of(l), "poll");
    loop_free(l);
}

/* Many timers at once, started, moved and cancelled in a fixed pseudo-random
 * order: each one not cancelled fires once, never before its time, and the
 * poll loop fires them earliest first (its timers are a heap of ours). */
#define MANY 300
struct many {
    struct loop *loop;
    struct loop_timer t[MANY];
    int64_t due_us[MANY];
    bool live[MANY];
    int fired[MANY];
    int64_t last_due;
    int left, early, disorder;
};

static void many_fired(struct loop_timer *t)
{
    struct many *m = t->arg;
    int i = (int)(t - m->t);
    m->fired[i]++;
    if (now_us() < m->due_us[i])
        m->early++;
    if (m->due_us[i] + 100 < m->last_due) /* 100 us: our clock is read just before the loop's */
        m->disorder++;
    m->last_due = m->due_us[i];
    if (--m->left == 0)
        loop_stop(m->loop);
}

static void many_timers(enum loop_kind kind)
{
    struct many *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    struct loop_options lo = {.workers = 1, .kind = kind};
    char err[256];
    assert_int_equal(loop_create(&lo, &m->loop, err, sizeof(err)), 0);
    uint32_t x = 12345;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < MANY; i++) {
            x = x * 1103515245u + 12345u;
            int op = (int)((x >> 16) % 8);
            if (op == 0 && m->live[i]) { /* cancel */
                loop_timer_cancel(&m->t[i]);
                m->live[i] = false;
                continue;
            }
            int delay = (int)((x >> 8) % 40);       /* 0..39 ms: many equal */
            m->due_us[i] = now_us() + delay * 1000; /* read first: the loop's is no earlier */
            loop_timer_start(m->loop, &m->t[i], delay, many_fired, m); /* a started one moves */
            m->live[i] = true;
        }
    }
    for (int i = 0; i < MANY; i++)
        m->left += m->live[i];
    m->last_due = INT64_MIN;
    loop_run(m->loop);
    for (int i = 0; i < MANY; i++)
        assert_int_equal(m->fired[i], m->live[i] ? 1 : 0);
    assert_int_equal(m->early, 0);
    if (kind == LOOP_POLL) /* libev orders by its own clock's float time */
        assert_int_equal(m->disorder, 0);
    loop_free(m->loop);
    free(m);
}

static void test_many_timers_libev(void **state)
{
    (void)state;
    many_timers(LOOP_LIBEV);
}

static void test_many_timers_poll(void **state)
{
    (void)state;
    many_timers(LOOP_POLL);
}

/* Waiting for a timer is one wake-up, not a spin: lws 4.1 rounds the time to
 * its next timer down to whole milliseconds for poll's timeout, so with its
 * own timers the poll loop polled with timeout 0 through the last
 * millisecond before each one (hundreds of turns a timer). 40 timers one
 * after the other, 3 ms apart: a few turns each (libev: the timer, then the
 * wake-up for lws's own due work). */
struct chain {
    struct loop *loop;
    struct loop_timer t;
    int fired;
};

static void chain_fired(struct loop_timer *t)
{
    struct chain *c = t->arg;
    if (++c->fired < 40) {
        loop_timer_start(c->loop, &c->t, 3, chain_fired, c);
        return;
    }
    loop_stop(c->loop);
}

static void no_spin(enum loop_kind kind)
{
    struct chain c = {0};
    struct loop_options lo = {.workers = 1, .kind = kind};
    char err[256];
    assert_int_equal(loop_create(&lo, &c.loop, err, sizeof(err)), 0);
    loop_timer_start(c.loop, &c.t, 3, chain_fired, &c);
    uint64_t turns0 = loop_turns(c.loop);
    loop_run(c.loop);
    uint64_t turns = loop_turns(c.loop) - turns0;
    print_message("%s: 40 timers in %llu loop turns\n", loop_kind_name(kind),
                  (unsigned long long)turns);
    assert_int_equal(c.fired, 40);
    assert_true(turns <= 40 * 4 + 10);
    loop_free(c.loop);
}

static void test_no_spin_libev(void **state)
{
    (void)state;
    no_spin(LOOP_LIBEV);
}

static void test_no_spin_poll(void **state)
{
    (void)state;
    no_spin(LOOP_POLL);
}

/* A loop made and freed leaves no descriptor behind (the poll loop's
 * timerfd is closed with the context). */
static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static void test_no_fd_left(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        enum loop_kind kind = k ? LOOP_LIBEV : LOOP_POLL;
        struct loop *l;
        char err[256];
        struct loop_options lo = {.workers = 1, .kind = kind};
        assert_int_equal(loop_create(&lo, &l, err, sizeof(err)), 0); /* libev: opens the library */
        loop_free(l);
        int before = open_fds();
        for (int i = 0; i < 20; i++) {
            assert_int_equal(loop_create(&lo, &l, err, sizeof(err)), 0);
            loop_free(l);
        }
        assert_int_equal(open_fds(), before);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_timer_libev), cmocka_unit_test(test_short_timer_poll),
        cmocka_unit_test(test_quiet_timer_libev), cmocka_unit_test(test_quiet_timer_poll),
        cmocka_unit_test(test_stop_libev),        cmocka_unit_test(test_stop_poll),
        cmocka_unit_test(test_defer_libev),       cmocka_unit_test(test_defer_poll),
        cmocka_unit_test(test_many_timers_libev), cmocka_unit_test(test_many_timers_poll),
        cmocka_unit_test(test_no_spin_libev),     cmocka_unit_test(test_no_spin_poll),
        cmocka_unit_test(test_no_fd_left),        cmocka_unit_test(test_kind_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
