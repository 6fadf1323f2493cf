/* agent/autoscale.c: the §6.6 decisions over snapshots, with a simulated
 * clock (T0 plus seconds): steps per mode, cooldown, idle threshold and the
 * quiet window, saturation, bounds, distribution by priority, scale-down
 * idle timeout, stabilization and the protection window. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agent/autoscale.h"
#include "agent/autoscaler.h"
#include "agent/reporter.h"
#include "agent/runtime/local/lrt.h"
#include "agent/runtime/local/manifest.h"

#define T0 1000000000LL
#define S(x) (T0 + (int64_t)(x)*1000)

static struct rt_scale_group G;

/* A group of n members a, b, c... with the default policy, enabled,
 * short windows left at the defaults unless a test sets them. */
static struct rt_scale_group *group(int n, enum rt_scale_mode mode)
{
    memset(&G, 0, sizeof(G));
    snprintf(G.ns, sizeof(G.ns), "default");
    snprintf(G.env, sizeof(G.env), "e");
    snprintf(G.name, sizeof(G.name), "1c2gi");
    snprintf(G.cluster, sizeof(G.cluster), "alpha");
    rt_scale_policy_defaults(&G.policy);
    G.policy.enabled = true;
    G.policy.mode = mode;
    G.nmembers = n;
    for (int i = 0; i < n; i++) {
        struct rt_scale_member *m = &G.members[i];
        snprintf(m->name, sizeof(m->name), "e-%c", 'a' + i);
        m->min_replicas = m->max_replicas = -1;
    }
    return &G;
}

/* Member i has r replicas, every one of them claimed (running). */
static void busy(int i, int r, int pending)
{
    struct rt_scale_member *m = &G.members[i];
    m->replicas = m->spec_replicas = r;
    m->status.replicas = r;
    m->status.running = r;
    m->status.idle = 0;
    m->status.starting = 0;
    m->status.pending = pending;
    m->nidle = 0;
}

/* Member i has r replicas, all idle since `since`. */
static void idle_since(int i, int r, int64_t since)
{
    struct rt_scale_member *m = &G.members[i];
    m->replicas = m->spec_replicas = r;
    m->status.replicas = r;
    m->status.idle = r;
    m->status.running = m->status.starting = m->status.pending = 0;
    m->nidle = r;
    for (int k = 0; k < r; k++)
        m->idle_since_ms[k] = since;
}

/* Applies a decision to the snapshot, as a runtime would. */
static void apply(const struct as_decision *d)
{
    for (int i = 0; i < G.nmembers; i++)
        G.members[i].replicas = d->replicas[i];
}

static void test_steps(void **state)
{
    (void)state;
    static const struct {
        enum rt_scale_mode mode;
        int n, max, up;
    } up[] = {
        {RT_SCALE_CONSERVATIVE, 0, -1, 1}, {RT_SCALE_CONSERVATIVE, 7, -1, 1},
        {RT_SCALE_DEFAULT, 0, -1, 1},      {RT_SCALE_DEFAULT, 1, -1, 1},
        {RT_SCALE_DEFAULT, 3, -1, 2},      {RT_SCALE_DEFAULT, 4, -1, 2},
        {RT_SCALE_DEFAULT, 5, -1, 3},      {RT_SCALE_AGGRESSIVE, 0, 8, 1},
        {RT_SCALE_AGGRESSIVE, 1, 8, 1},    {RT_SCALE_AGGRESSIVE, 3, 8, 3},
        {RT_SCALE_AGGRESSIVE, 5, 8, 3}, /* min(2N, max) */
        {RT_SCALE_AGGRESSIVE, 8, 8, 0},    {RT_SCALE_DEFAULT, 9, 10, 1},
        {RT_SCALE_CONSERVATIVE, 4, 4, 0},
    };
    for (size_t i = 0; i < sizeof(up) / sizeof(up[0]); i++)
        assert_int_equal(as_step_up(up[i].mode, up[i].n, up[i].max), up[i].up);
    assert_int_equal(as_step_down(RT_SCALE_CONSERVATIVE, 6), 1);
    assert_int_equal(as_step_down(RT_SCALE_DEFAULT, 6), 3);
    assert_int_equal(as_step_down(RT_SCALE_DEFAULT, 3), 1);
    assert_int_equal(as_step_down(RT_SCALE_DEFAULT, 1), 1);
    assert_int_equal(as_step_down(RT_SCALE_AGGRESSIVE, 6), 6);
    assert_int_equal(as_step_down(RT_SCALE_DEFAULT, 0), 0);
}

/* A burst: claims wait with nothing idle; each mode's step. */
static void test_reactive_by_mode(void **state)
{
    (void)state;
    static const struct {
        enum rt_scale_mode mode;
        int from, max, to;
    } rows[] = {
        {RT_SCALE_CONSERVATIVE, 4, -1, 5}, {RT_SCALE_DEFAULT, 4, -1, 6},
        {RT_SCALE_DEFAULT, 0, -1, 1},      {RT_SCALE_AGGRESSIVE, 4, 10, 8},
        {RT_SCALE_AGGRESSIVE, 4, 6, 6},    {RT_SCALE_AGGRESSIVE, 0, 10, 1},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct as_state st = {0};
        struct as_decision d;
        group(1, rows[i].mode);
        G.policy.max_replicas = rows[i].max;
        busy(0, rows[i].from, 5);
        as_decide(&G, &st, S(0), &d);
        assert_int_equal(d.kind, AS_SCALED);
        assert_int_equal(d.direction, AS_UP);
        assert_int_equal(d.replicas[0], rows[i].to);
        assert_int_equal(d.from, rows[i].from);
        assert_int_equal(d.to, rows[i].to);
        assert_non_null(strstr(d.reason, "5 claim(s) waiting"));
        assert_int_equal(st.last_up_ms, S(0));
    }
}

/* Waiting claims that starting sandboxes will serve ask for nothing more. */
static void test_pending_covered(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(1, RT_SCALE_DEFAULT);
    busy(0, 4, 2);
    G.members[0].status.starting = 2;
    G.members[0].status.running = 2;
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.kind, AS_KEEP);
    assert_int_equal(d.replicas[0], 4);
    G.members[0].status.pending = 3; /* one more than covered */
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.replicas[0], 6);
}

/* A raise the runtime has not acted on yet (no Pod, not even starting) is on
 * its way: the claim that asked for it does not ask again past the cooldown. */
static void test_raise_not_acted_on(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.cooldown_ms = 1000;
    busy(0, 1, 1);
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.replicas[0], 2);
    apply(&d); /* desired 2; still 1 sandbox, claimed, and the claim waits */
    as_decide(&G, &st, S(5), &d);
    assert_int_equal(d.kind, AS_KEEP);
    assert_int_equal(d.replicas[0], 2);
    assert_non_null(strstr(d.reason, "covered by idle or starting"));
    G.members[0].status.starting = 1; /* the runtime made it */
    as_decide(&G, &st, S(6), &d);
    assert_int_equal(d.kind, AS_KEEP);
    G.members[0].status.pending = 2; /* a second claim: not covered */
    as_decide(&G, &st, S(7), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.replicas[0], 3);
}

static void test_cooldown(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.cooldown_ms = 30000;
    busy(0, 1, 3);
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.replicas[0], 2);
    apply(&d);
    busy(0, 2, 2);
    as_decide(&G, &st, S(29), &d);
    assert_int_equal(d.kind, AS_KEEP);
    assert_int_equal(d.replicas[0], 2);
    assert_non_null(strstr(d.reason, "cooldown"));
    as_decide(&G, &st, S(30), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.replicas[0], 3);
    assert_int_equal(st.last_up_ms, S(30));
}

/* Proactive: idle stayed 0 for the threshold, a create within the quiet
 * window; no create → nothing; a 0 window lifts the gate; a 0 threshold
 * turns the trigger off. */
static void test_proactive_and_quiet_window(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.idle_threshold_ms = 30000;
    G.policy.quiet_window_ms = 300000;
    busy(0, 2, 0);
    as_decide(&G, &st, S(0), &d); /* idle hits 0 now */
    assert_int_equal(d.kind, AS_KEEP);
    assert_int_equal(st.idle_zero_since_ms, S(0));
    as_decide(&G, &st, S(31), &d); /* no create ever: quiet */
    assert_int_equal(d.kind, AS_KEEP);
    G.members[0].last_create_ms = S(-200); /* 231 s ago: inside the window */
    as_decide(&G, &st, S(31), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.replicas[0], 3);
    assert_non_null(strstr(d.reason, "no idle sandbox for 31s"));

    /* the create outside the window */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_CONSERVATIVE);
    busy(0, 2, 0);
    G.members[0].last_create_ms = S(-400);
    as_decide(&G, &st, S(0), &d);
    as_decide(&G, &st, S(60), &d);
    assert_int_equal(d.kind, AS_KEEP);
    G.policy.quiet_window_ms = 0; /* gate off */
    as_decide(&G, &st, S(60), &d);
    assert_int_equal(d.kind, AS_SCALED);

    /* threshold 0: no proactive trigger at all */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.idle_threshold_ms = 0;
    busy(0, 2, 0);
    G.members[0].last_create_ms = S(0);
    as_decide(&G, &st, S(0), &d);
    as_decide(&G, &st, S(1000), &d);
    assert_int_equal(d.kind, AS_KEEP);

    /* idle comes back: the clock restarts */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_CONSERVATIVE);
    busy(0, 2, 0);
    G.members[0].last_create_ms = S(0);
    as_decide(&G, &st, S(0), &d);
    G.members[0].status.idle = 1;
    as_decide(&G, &st, S(20), &d);
    assert_int_equal(st.idle_zero_since_ms, 0);
    G.members[0].status.idle = 0;
    as_decide(&G, &st, S(21), &d);
    as_decide(&G, &st, S(40), &d);
    assert_int_equal(d.kind, AS_KEEP); /* 19 s of 30 */
    as_decide(&G, &st, S(51), &d);
    assert_int_equal(d.kind, AS_SCALED);
}

/* Reactive scale-up ignores the quiet window: no create was ever recorded. */
static void test_reactive_ignores_quiet_window(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(1, RT_SCALE_DEFAULT);
    G.policy.quiet_window_ms = 1000;
    busy(0, 0, 1);
    G.members[0].last_create_ms = 0;
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.replicas[0], 1);
}

/* Up by (priority, name), each member to its max first; saturated members
 * skipped for the saturation cooldown; group max caps the sum. */
static void test_distribution_up(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(3, RT_SCALE_AGGRESSIVE);
    G.policy.max_replicas = 20;
    busy(0, 1, 0);
    busy(1, 1, 0);
    busy(2, 1, 4);
    G.members[0].up_priority = 5; /* a: last */
    G.members[1].up_priority = 0; /* b and c tie: by name */
    G.members[2].up_priority = 0;
    G.members[1].max_replicas = 2;
    as_decide(&G, &st, S(0), &d); /* N=3 → +3: b to 2 (max), c +2 */
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.replicas[0], 1);
    assert_int_equal(d.replicas[1], 2);
    assert_int_equal(d.replicas[2], 3);

    /* c saturated: the growth goes to a */
    memset(&st, 0, sizeof(st));
    G.members[1].replicas = G.members[1].status.running = 2; /* made, and claimed */
    G.members[2].replicas = G.members[2].status.running = 3;
    G.members[2].saturated_ms = S(-10);
    G.policy.saturation_ms = 60000;
    as_decide(&G, &st, S(0), &d); /* N=6 → +6 */
    assert_int_equal(d.replicas[0], 7);
    assert_int_equal(d.replicas[1], 2);
    assert_int_equal(d.replicas[2], 3);
    /* the saturation cooldown passed: c again, before a */
    memset(&st, 0, sizeof(st));
    as_decide(&G, &st, S(50), &d);
    assert_int_equal(d.replicas[2], 9);
    assert_int_equal(d.replicas[0], 1);

    /* group max 7 with 6: +1 only */
    memset(&st, 0, sizeof(st));
    G.policy.max_replicas = 7;
    G.members[2].saturated_ms = 0;
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.to, 7);
    assert_int_equal(d.replicas[2], 4);

    /* at the group max: nothing, and it says why */
    memset(&st, 0, sizeof(st));
    G.members[2].replicas = G.members[2].status.running = 4;
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.kind, AS_KEEP);
    assert_non_null(strstr(d.reason, "maxReplicas"));

    /* every member saturated or at max: nothing */
    memset(&st, 0, sizeof(st));
    G.policy.max_replicas = -1;
    G.members[0].saturated_ms = G.members[2].saturated_ms = S(-1);
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.kind, AS_KEEP);
}

/* Bounds are enforced at once, without cooldown. */
static void test_bounds(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(2, RT_SCALE_CONSERVATIVE);
    G.policy.min_replicas = 3;
    idle_since(0, 0, S(0));
    idle_since(1, 0, S(0));
    G.members[1].up_priority = -1; /* b first */
    G.members[1].max_replicas = 2;
    st.last_up_ms = S(0); /* in a cooldown: the floor does not wait */
    as_decide(&G, &st, S(1), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.direction, AS_UP);
    assert_int_equal(d.replicas[1], 2);
    assert_int_equal(d.replicas[0], 1);
    assert_non_null(strstr(d.reason, "minReplicas 3"));

    /* a member above its own max comes down */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_DEFAULT);
    G.members[0].max_replicas = 2;
    busy(0, 5, 0);
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.direction, AS_DOWN);
    assert_int_equal(d.replicas[0], 2);

    /* and one below its own min goes up */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_DEFAULT);
    G.members[0].min_replicas = 2;
    idle_since(0, 0, S(0));
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.replicas[0], 2);

    /* min above max: the max wins, and it stays put (no flapping) */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_DEFAULT);
    G.members[0].min_replicas = 3;
    G.members[0].max_replicas = 2;
    idle_since(0, 0, S(0));
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.replicas[0], 2);
    apply(&d);
    as_decide(&G, &st, S(1), &d);
    assert_int_equal(d.kind, AS_KEEP);
    assert_int_equal(d.replicas[0], 2);

    /* group above its max */
    memset(&st, 0, sizeof(st));
    group(2, RT_SCALE_DEFAULT);
    G.policy.max_replicas = 3;
    idle_since(0, 2, S(0));
    idle_since(1, 2, S(0));
    G.members[0].down_priority = 1; /* a shrinks first */
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.to, 3);
    assert_int_equal(d.replicas[0], 1);
    assert_int_equal(d.replicas[1], 2);
}

static void test_disabled(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(1, RT_SCALE_AGGRESSIVE);
    G.policy.enabled = false;
    G.policy.min_replicas = 5;
    busy(0, 1, 10);
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.kind, AS_KEEP);
    assert_int_equal(d.replicas[0], 1);
    assert_non_null(strstr(d.reason, "off"));
}

/* Idle timeout, stabilization, no protection window: straight down. */
static void test_scale_down(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.protection_ms = 0;
    G.policy.down_idle_timeout_ms = 300000;
    G.policy.stabilization_ms = 60000;
    idle_since(0, 4, S(0));
    as_decide(&G, &st, S(299), &d);
    assert_int_equal(d.kind, AS_KEEP); /* not idle long enough */
    as_decide(&G, &st, S(300), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.direction, AS_DOWN);
    assert_int_equal(d.replicas[0], 3);
    apply(&d);
    idle_since(0, 3, S(0));
    as_decide(&G, &st, S(359), &d);
    assert_int_equal(d.kind, AS_KEEP);
    assert_non_null(strstr(d.reason, "stabilizing"));
    as_decide(&G, &st, S(360), &d);
    assert_int_equal(d.replicas[0], 2);

    /* Default halves, Aggressive drops every candidate, floors hold */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_DEFAULT);
    G.policy.protection_ms = 0;
    idle_since(0, 6, S(0));
    as_decide(&G, &st, S(300), &d);
    assert_int_equal(d.replicas[0], 3);
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_AGGRESSIVE);
    G.policy.protection_ms = 0;
    G.policy.min_replicas = 1;
    idle_since(0, 6, S(0));
    as_decide(&G, &st, S(300), &d);
    assert_int_equal(d.replicas[0], 1);

    /* only idle-long sandboxes count; running ones never */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_AGGRESSIVE);
    G.policy.protection_ms = 0;
    busy(0, 5, 0);
    G.members[0].status.idle = 2;
    G.members[0].status.running = 3;
    G.members[0].nidle = 2;
    G.members[0].idle_since_ms[0] = S(0);
    G.members[0].idle_since_ms[1] = S(250);
    as_decide(&G, &st, S(300), &d);
    assert_int_equal(d.replicas[0], 4);

    /* claims waiting: no scale-down */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.protection_ms = 0;
    idle_since(0, 3, S(0));
    G.members[0].status.pending = 1;
    as_decide(&G, &st, S(400), &d);
    assert_int_equal(d.kind, AS_KEEP);
}

/* Down order: higher down_priority first, then name; each to its floor. */
static void test_distribution_down(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(3, RT_SCALE_AGGRESSIVE);
    G.policy.protection_ms = 0;
    idle_since(0, 2, S(0));
    idle_since(1, 2, S(0));
    idle_since(2, 2, S(0));
    G.members[0].min_replicas = 1;
    G.members[2].down_priority = 9;
    G.policy.min_replicas = 2;
    as_decide(&G, &st, S(300), &d); /* 6 → 2: c first, then a to its floor 1, then b -1 */
    assert_int_equal(d.to, 2);
    assert_int_equal(d.replicas[2], 0);
    assert_int_equal(d.replicas[0], 1);
    assert_int_equal(d.replicas[1], 1);
}

/* The protection window: marked first, removed when it ends, unless the
 * member was claimed from meanwhile; demand in between cancels it. */
static void test_protection_window(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(2, RT_SCALE_AGGRESSIVE);
    G.policy.protection_ms = 10000;
    idle_since(0, 2, S(0));
    idle_since(1, 2, S(0));
    as_decide(&G, &st, S(300), &d);
    assert_int_equal(d.kind, AS_MARKED);
    assert_int_equal(d.replicas[0], 2); /* nothing removed yet */
    assert_int_equal(d.replicas[1], 2);
    assert_int_equal(st.mark_ms, S(300));
    as_decide(&G, &st, S(309), &d);
    assert_int_equal(d.kind, AS_KEEP);
    assert_non_null(strstr(d.reason, "protected"));
    /* a claim on a meanwhile: a keeps its two; b goes */
    G.members[0].last_create_ms = S(305);
    G.members[0].status.idle = 1;
    G.members[0].status.running = 1;
    G.members[0].nidle = 1;
    as_decide(&G, &st, S(310), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.direction, AS_DOWN);
    assert_int_equal(d.replicas[0], 2);
    assert_int_equal(d.replicas[1], 0);
    assert_non_null(strstr(d.reason, "claimed meanwhile"));
    assert_int_equal(st.mark_ms, 0);

    /* every marked member claimed from: cancelled */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.protection_ms = 10000;
    idle_since(0, 3, S(0));
    as_decide(&G, &st, S(300), &d);
    assert_int_equal(d.kind, AS_MARKED);
    G.members[0].last_create_ms = S(301);
    as_decide(&G, &st, S(311), &d);
    assert_int_equal(d.kind, AS_CANCELLED);
    assert_int_equal(d.replicas[0], 3);
    assert_non_null(strstr(d.reason, "cancelled"));

    /* a burst in the window: the mark is dropped and it scales up */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.protection_ms = 10000;
    idle_since(0, 3, S(0));
    as_decide(&G, &st, S(300), &d);
    assert_int_equal(d.kind, AS_MARKED);
    busy(0, 3, 2);
    as_decide(&G, &st, S(302), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.direction, AS_UP);
    assert_int_equal(st.mark_ms, 0);

    /* the marked sandboxes got claimed by someone else's create time? a
     * marked member whose candidates shrank keeps what is no longer idle */
    memset(&st, 0, sizeof(st));
    group(1, RT_SCALE_AGGRESSIVE);
    G.policy.protection_ms = 10000;
    idle_since(0, 3, S(0));
    as_decide(&G, &st, S(300), &d);
    G.members[0].nidle = 1; /* two became running, recorded as no create */
    G.members[0].status.idle = 1;
    G.members[0].status.running = 2;
    as_decide(&G, &st, S(310), &d);
    assert_int_equal(d.kind, AS_SCALED);
    assert_int_equal(d.replicas[0], 2);
}

/* A scale-up resets the stabilization clock for scale-down. */
static void test_down_after_up_waits(void **state)
{
    struct as_state st = {0};
    struct as_decision d;
    (void)state;
    group(1, RT_SCALE_CONSERVATIVE);
    G.policy.protection_ms = 0;
    G.policy.down_idle_timeout_ms = 1000;
    G.policy.stabilization_ms = 60000;
    busy(0, 1, 1);
    as_decide(&G, &st, S(0), &d);
    assert_int_equal(d.direction, AS_UP);
    idle_since(0, 2, S(0));
    as_decide(&G, &st, S(30), &d);
    assert_int_equal(d.kind, AS_KEEP);
    as_decide(&G, &st, S(60), &d);
    assert_int_equal(d.direction, AS_DOWN);
}

static void test_idle_candidates(void **state)
{
    struct rt_scale_member m;
    (void)state;
    memset(&m, 0, sizeof(m));
    m.nidle = 3;
    m.idle_since_ms[0] = S(0);
    m.idle_since_ms[1] = S(5);
    m.idle_since_ms[2] = S(9);
    assert_int_equal(as_idle_candidates(&m, 5000, S(10)), 2);
    assert_int_equal(as_idle_candidates(&m, 0, S(10)), 3);
    assert_int_equal(as_idle_candidates(&m, 60000, S(10)), 0);
}

static void test_headroom(void **state)
{
    (void)state;
    assert_int_equal(rt_scale_headroom(2, -1, -1, 5), -1);
    assert_int_equal(rt_scale_headroom(2, 4, -1, 5), 2);
    assert_int_equal(rt_scale_headroom(4, 4, -1, 5), 0);
    assert_int_equal(rt_scale_headroom(2, -1, 8, 5), 3);
    assert_int_equal(rt_scale_headroom(2, 10, 8, 5), 3);
    assert_int_equal(rt_scale_headroom(2, 3, 8, 5), 1);
    assert_int_equal(rt_scale_headroom(2, -1, 5, 7), 0);
}

/* The local runtime reads a group's policy from the Env (seconds → ms,
 * absent → default) and a member's priorities (scaleUp/DownPriority, else
 * priority); a member declaring a group with no entry gets the defaults, off. */
static void test_local_policy_from_manifest(void **state)
{
    static const char text[] = "apiVersion: agents.navix.sh/v1alpha1\n"
                               "kind: SandboxEnv\n"
                               "metadata: {name: e, namespace: default}\n"
                               "spec:\n"
                               "  templateRef: {name: t}\n"
                               "  autoscaling:\n"
                               "    groups:\n"
                               "    - name: g\n"
                               "      enabled: true\n"
                               "      minReplicas: 1\n"
                               "      maxReplicas: 6\n"
                               "      scaleUpPolicy: {mode: Aggressive, cooldownSeconds: 2, "
                               "idleThresholdSeconds: 0, idleZeroQuietWindowSeconds: 7, "
                               "saturationCooldownSeconds: 9}\n"
                               "      scaleDownPolicy: {idleTimeoutSeconds: 3, "
                               "stabilizationSeconds: 4}\n"
                               "  clusters:\n"
                               "  - clusterID: c\n"
                               "    members:\n"
                               "    - config: {scalingGroup: g, priority: 3, scaleDownPriority: 8, "
                               "maxReplicas: 5, inlineResources: {requests: {cpu: '1', memory: "
                               "1Gi}}}\n"
                               "      spec: {replicas: 2}\n"
                               "    - config: {scalingGroup: lone, inlineResources: {requests: "
                               "{cpu: '2', memory: 1Gi}}}\n"
                               "      spec: {replicas: 1}\n";
    struct mf_set *s = mf_set_new();
    struct mf_pool_view v[4];
    struct lpool p[2];
    int n = 0;
    (void)state;
    assert_int_equal(mf_parse_buffer(s, "m.yaml", text, strlen(text)), 0);
    assert_int_equal(s->nerrs, 0);
    assert_int_equal(mf_set_pools(s, "c", v, 4, &n), 0);
    assert_int_equal(n, 2);
    memset(p, 0, sizeof(p));
    for (int i = 0; i < 2; i++)
        lrt_scale_from_view(NULL, &p[i], &v[i]);
    struct lpool *g = !strcmp(v[0].scaling_group, "g") ? &p[0] : &p[1];
    struct lpool *lone = g == &p[0] ? &p[1] : &p[0];
    assert_true(g->in_group);
    assert_true(g->policy.enabled);
    assert_int_equal(g->policy.mode, RT_SCALE_AGGRESSIVE);
    assert_int_equal(g->policy.min_replicas, 1);
    assert_int_equal(g->policy.max_replicas, 6);
    assert_int_equal(g->policy.cooldown_ms, 2000);
    assert_int_equal(g->policy.idle_threshold_ms, 0);
    assert_int_equal(g->policy.quiet_window_ms, 7000);
    assert_int_equal(g->policy.saturation_ms, 9000);
    assert_int_equal(g->policy.down_idle_timeout_ms, 3000);
    assert_int_equal(g->policy.stabilization_ms, 4000);
    assert_int_equal(g->policy.protection_ms, 10000); /* absent: the default */
    assert_int_equal(g->up_prio, 3);
    assert_int_equal(g->down_prio, 8);
    assert_int_equal(g->max_r, 5);
    assert_int_equal(g->min_r, -1);
    assert_true(lone->in_group);
    assert_false(lone->policy.enabled);
    assert_int_equal(lone->policy.cooldown_ms, 30000);
    assert_int_equal(lone->policy.max_replicas, -1);
    /* the autoscaler's replicas apply only while the group is on */
    g->has_scaled = true;
    g->scaled = 4;
    g->replicas = 2;
    assert_int_equal(lrt_pool_replicas(g), 4);
    g->policy.enabled = true;
    lrt_scale_from_view(NULL, g, g == &p[0] ? &v[0] : &v[1]);
    assert_int_equal(lrt_pool_replicas(g), 4);
    mf_set_free(s);
}

/* A runtime that hands one group and records what it is told. */
struct drv {
    struct rt base;
    bool has_group;
    int sets;
    char pool[64];
    int replicas;
    char reason[256];
    int events;
    char ev_reason[32], ev_msg[400], ev_env[64];
    bool active;
};

static void drv_groups(struct rt *rt, rt_group_fn fn, void *arg)
{
    struct drv *d = (struct drv *)rt;
    if (d->has_group)
        fn(arg, &G);
}

static int drv_set(struct rt *rt, const char *ns, const char *pool, int replicas,
                   const char *reason, char *err, size_t errlen)
{
    struct drv *d = (struct drv *)rt;
    (void)ns;
    (void)err;
    (void)errlen;
    d->sets++;
    snprintf(d->pool, sizeof(d->pool), "%s", pool);
    d->replicas = replicas;
    snprintf(d->reason, sizeof(d->reason), "%s", reason);
    return 0;
}

static void drv_pools(struct rt *rt, const char *ns, rt_pool_fn fn, void *arg)
{
    struct rt_pool p;
    (void)rt;
    (void)ns;
    memset(&p, 0, sizeof(p));
    snprintf(p.ns, sizeof(p.ns), "default");
    snprintf(p.env, sizeof(p.env), "e");
    snprintf(p.name, sizeof(p.name), "e-a");
    snprintf(p.scaling_group, sizeof(p.scaling_group), "1c2gi");
    p.status.replicas = 2;
    p.autoscaling = true;
    p.headroom = 3;
    p.saturated_for_ms = 1500;
    fn(arg, &p);
}

static const struct rt_ops drv_ops = {
    .list_pools = drv_pools,
    .scale_groups = drv_groups,
    .scale_set = drv_set,
};

static void drv_event(void *arg, const char *ns, const char *env, const char *reason,
                      const char *msg)
{
    struct drv *d = arg;
    (void)ns;
    d->events++;
    snprintf(d->ev_env, sizeof(d->ev_env), "%s", env);
    snprintf(d->ev_reason, sizeof(d->ev_reason), "%s", reason);
    snprintf(d->ev_msg, sizeof(d->ev_msg), "%s", msg);
}

static bool drv_active(void *arg)
{
    return ((struct drv *)arg)->active;
}

/* The loop: decisions applied through the seam after the walk, an Event
 * per decision, nothing while not leading, a group's state dropped when the
 * runtime no longer reports it. */
static void test_autoscaler_loop(void **state)
{
    struct drv d;
    struct autoscaler_info info;
    (void)state;
    memset(&d, 0, sizeof(d));
    d.base.ops = &drv_ops;
    d.base.kind = "fake";
    d.base.caps = RT_CAP_AUTOSCALE;
    d.has_group = true;
    group(2, RT_SCALE_CONSERVATIVE);
    busy(0, 2, 1);
    busy(1, 1, 0);
    G.members[1].up_priority = -1; /* e-b grows first */
    const struct autoscaler_deps deps = {
        .rt = &d.base, .event = drv_event, .event_arg = &d, .active = drv_active, .active_arg = &d};
    struct autoscaler *as = autoscaler_new(&deps);
    assert_non_null(as);

    autoscaler_tick(as); /* a follower: nothing */
    assert_int_equal(d.sets, 0);
    assert_int_equal(autoscaler_info(as, "default", "e", "1c2gi", &info), AB_ENOENT);

    d.active = true;
    autoscaler_tick(as);
    assert_int_equal(d.sets, 1);
    assert_string_equal(d.pool, "e-b");
    assert_int_equal(d.replicas, 2);
    assert_non_null(strstr(d.reason, "scale-up: 1 claim(s) waiting"));
    assert_int_equal(d.events, 1);
    assert_string_equal(d.ev_reason, "ScaledUp");
    assert_string_equal(d.ev_env, "e");
    assert_non_null(strstr(d.ev_msg, "group 1c2gi: scale-up"));
    assert_int_equal(autoscaler_info(as, "default", "e", "1c2gi", &info), 0);
    assert_true(info.last_up_wall_ms > 0);

    /* in the cooldown: no change, no Event */
    autoscaler_tick(as);
    assert_int_equal(d.sets, 1);
    assert_int_equal(d.events, 1);
    assert_int_equal(autoscaler_info(as, "default", "e", "1c2gi", &info), 0);
    assert_non_null(strstr(info.reason, "cooldown"));

    /* no member declares the group any more: its state goes */
    d.has_group = false;
    autoscaler_tick(as);
    assert_int_equal(autoscaler_info(as, "default", "e", "1c2gi", &info), AB_ENOENT);
    autoscaler_free(as);
}

/* The reporter sends the runtime's autoscaling, headroom and saturation. */
static void test_reporter_headroom(void **state)
{
    struct drv d;
    uint64_t sig = 0;
    (void)state;
    memset(&d, 0, sizeof(d));
    d.base.ops = &drv_ops;
    d.base.kind = "fake";
    json_t *msg = fed_reporter_build(&d.base, 7, &sig);
    assert_non_null(msg);
    json_t *r = json_array_get(json_object_get(msg, "records"), 0);
    assert_true(json_is_true(json_object_get(r, "autoscaling")));
    assert_int_equal(json_integer_value(json_object_get(r, "headroom")), 3);
    assert_int_equal(json_integer_value(json_object_get(r, "saturatedForMs")), 1500);
    assert_int_equal(json_integer_value(json_object_get(r, "desired")), 2);
    json_decref(msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_reactive_by_mode),
        cmocka_unit_test(test_pending_covered),
        cmocka_unit_test(test_raise_not_acted_on),
        cmocka_unit_test(test_cooldown),
        cmocka_unit_test(test_proactive_and_quiet_window),
        cmocka_unit_test(test_reactive_ignores_quiet_window),
        cmocka_unit_test(test_distribution_up),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_scale_down),
        cmocka_unit_test(test_distribution_down),
        cmocka_unit_test(test_protection_window),
        cmocka_unit_test(test_down_after_up_waits),
        cmocka_unit_test(test_idle_candidates),
        cmocka_unit_test(test_headroom),
        cmocka_unit_test(test_local_policy_from_manifest),
        cmocka_unit_test(test_autoscaler_loop),
        cmocka_unit_test(test_reporter_headroom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
