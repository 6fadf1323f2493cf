/* timerwheel: never early, at most a tick late, rounds beyond a turn,
 * cancel and reschedule from callbacks, catch-up after a long gap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/timerwheel.h"

struct rec {
    struct tw_timer t;
    int64_t fired_at; /* the advance's now; 0 until fired */
    int fires;
    struct timerwheel *w;
    int64_t now;
    struct tw_timer *cancel_other; /* cancelled from the callback */
    int64_t resched_ms;            /* rescheduled from the callback, if > 0 */
};

static int64_t g_now;

static void on_fire(struct tw_timer *t, void *arg)
{
    struct rec *r = arg;
    assert_ptr_equal(&r->t, t);
    r->fires++;
    r->fired_at = g_now;
    if (r->cancel_other)
        timerwheel_cancel(r->w, r->cancel_other);
    if (r->resched_ms > 0)
        timerwheel_schedule(r->w, t, r->resched_ms, on_fire, r);
}

static struct timerwheel *mk(int64_t tick, size_t slots, int64_t now)
{
    struct timerwheel *w = NULL;
    char err[128];
    assert_int_equal(timerwheel_new(tick, slots, now, &w, err, sizeof(err)), 0);
    return w;
}

static size_t adv(struct timerwheel *w, int64_t now)
{
    g_now = now;
    return timerwheel_advance(w, now);
}

static void test_refuses_bad_sizes(void **state)
{
    struct timerwheel *w = NULL;
    char err[128] = "";
    assert_int_equal(timerwheel_new(0, 64, 0, &w, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "tick_ms"));
    assert_int_equal(timerwheel_new(10, 0, 0, &w, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(timerwheel_new(10, ((size_t)1 << 20) + 1, 0, &w, err, sizeof(err)), AB_EINVAL);
    assert_null(w);
}

/* Each timer fires in the first advance at or after its due time, and only
 * there, whatever its distance (many turns of the wheel included). */
static void test_never_early_at_most_a_tick_late(void **state)
{
    enum { N = 500 };
    struct timerwheel *w = mk(10, 64, 1000); /* one turn = 640 ms */
    struct rec *r = calloc(N, sizeof(*r));
    for (int i = 0; i < N; i++) {
        r[i].w = w;
        timerwheel_schedule(w, &r[i].t, 1000 + (int64_t)i * 37 % 5000 + 1, on_fire, &r[i]);
    }
    assert_int_equal(timerwheel_count(w), N);
    size_t total = 0;
    for (int64_t now = 1000; now <= 7000; now += 10)
        total += adv(w, now);
    assert_int_equal(total, N);
    assert_int_equal(timerwheel_count(w), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].fires, 1);
        assert_true(r[i].fired_at >= r[i].t.due_ms);
        assert_true(r[i].fired_at < r[i].t.due_ms + 10);
        assert_false(timerwheel_armed(&r[i].t));
    }
    free(r);
    timerwheel_free(w);
}

static void test_cancel_and_move(void **state)
{
    struct timerwheel *w = mk(5, 16, 0);
    struct rec a = {.w = w}, b = {.w = w};
    timerwheel_schedule(w, &a.t, 50, on_fire, &a);
    timerwheel_schedule(w, &b.t, 50, on_fire, &b);
    timerwheel_cancel(w, &a.t);
    timerwheel_cancel(w, &a.t);                     /* twice: nothing */
    timerwheel_schedule(w, &b.t, 400, on_fire, &b); /* moved, beyond a turn */
    assert_int_equal(timerwheel_count(w), 1);
    assert_int_equal(adv(w, 100), 0);
    assert_int_equal(adv(w, 399), 0);
    assert_int_equal(adv(w, 400), 1);
    assert_int_equal(a.fires, 0);
    assert_int_equal(b.fires, 1);
    timerwheel_free(w);
}

/* A callback cancels a timer due in the same tick (it must not fire) and
 * reschedules itself in the past (next advance, not this one: no spin). */
static void test_callbacks_cancel_and_reschedule(void **state)
{
    struct timerwheel *w = mk(10, 8, 0);
    struct rec a = {.w = w}, b = {.w = w}, c = {.w = w};
    timerwheel_schedule(w, &a.t, 20, on_fire, &a);
    timerwheel_schedule(w, &b.t, 21, on_fire, &b);
    timerwheel_schedule(w, &c.t, 22, on_fire, &c);
    /* the list is LIFO: c fires first and cancels a and b */
    c.cancel_other = &b.t;
    c.resched_ms = 1; /* in the past */
    assert_int_equal(adv(w, 25), 2);
    assert_int_equal(c.fires, 1);
    assert_int_equal(b.fires, 0);
    assert_int_equal(a.fires, 1);
    assert_true(timerwheel_armed(&c.t));
    c.resched_ms = 0;
    assert_int_equal(adv(w, 29), 0); /* same tick: already visited */
    assert_int_equal(adv(w, 30), 1);
    assert_int_equal(c.fires, 2);
    assert_int_equal(timerwheel_count(w), 0);
    timerwheel_free(w);
}

/* A loop that stalled for many turns fires everything due once and keeps
 * what is still in the future. */
static void test_long_gap(void **state)
{
    struct timerwheel *w = mk(10, 4, 0);
    struct rec a = {.w = w}, b = {.w = w}, c = {.w = w};
    timerwheel_schedule(w, &a.t, 15, on_fire, &a);
    timerwheel_schedule(w, &b.t, 990, on_fire, &b);
    timerwheel_schedule(w, &c.t, 5000, on_fire, &c);
    assert_int_equal(adv(w, 1000), 2);
    assert_int_equal(a.fires + b.fires, 2);
    assert_int_equal(c.fires, 0);
    assert_int_equal(adv(w, 4999), 0);
    assert_int_equal(adv(w, 5003), 1);
    timerwheel_free(w);
}

/* Freeing with timers armed leaves them unarmed and touches nothing else. */
static void test_free_with_armed(void **state)
{
    struct timerwheel *w = mk(10, 8, 0);
    struct rec a = {.w = w};
    timerwheel_schedule(w, &a.t, 100, on_fire, &a);
    timerwheel_free(w);
    assert_false(timerwheel_armed(&a.t));
    assert_int_equal(a.fires, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refuses_bad_sizes),
        cmocka_unit_test(test_never_early_at_most_a_tick_late),
        cmocka_unit_test(test_cancel_and_move),
        cmocka_unit_test(test_callbacks_cancel_and_reschedule),
        cmocka_unit_test(test_long_gap),
        cmocka_unit_test(test_free_with_armed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
