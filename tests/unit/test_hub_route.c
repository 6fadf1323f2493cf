/* The five-step placement (hub/route.c) and the registry queries it rests
 * on: every row of the test tables of reference §1.5 and §1.6, the scale-up
 * tier, the tie-breaks, the TTL edge, the group constraint, the hub front
 * door, and reservations spreading a burst and paid back by claims. (The [cluster::]name parsing
 * table of §1.7 is test_ref.c's.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "hub/federation.h"
#include "hub/route.h"

#define T0 1000000 /* the tests' "now" */
#define MAXR 16

struct set {
    struct route_record r[MAXR];
    const struct route_record *p[MAXR];
    size_t n;
};

/* A record sampled age_ms before T0. */
static struct route_record *add(struct set *s, const char *cluster, const char *pool,
                                const char *group, int idle, bool autoscaling, int headroom,
                                int64_t age_ms)
{
    struct route_record *r = &s->r[s->n];
    memset(r, 0, sizeof(*r));
    ab_strlcpy(r->cluster, cluster, sizeof(r->cluster));
    ab_strlcpy(r->ns, "team-a", sizeof(r->ns));
    ab_strlcpy(r->env, "python", sizeof(r->env));
    ab_strlcpy(r->pool, pool, sizeof(r->pool));
    ab_strlcpy(r->group, group, sizeof(r->group));
    r->idle = idle;
    r->autoscaling = autoscaling;
    r->headroom = headroom;
    r->sampled_ms = T0 - age_ms;
    s->p[s->n] = r;
    s->n++;
    return r;
}

static struct route_query query(const char *group, const char *local)
{
    struct route_query q = {.ns = "team-a",
                            .env = "python",
                            .group = group,
                            .local = local,
                            .local_idle = -1,
                            .local_can_grow = -1,
                            .now_ms = T0};
    return q;
}

static struct route_decision decide(struct set *s, const char *group)
{
    struct route_query q = query(group, "cluster-a");
    struct route_decision d;
    route_decide(&q, s->p, s->n, &d);
    return d;
}

/* --- reference §1.5: registry queries ---------------------------------------------- */

static void local_idle_sums_members_by_group(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a-cpu", "cpu", 2, false, 0, 0);
    add(&s, "cluster-a", "p-a-gpu", "gpu", 5, false, 0, 0);
    add(&s, "cluster-b", "p-b1", "cpu", 40, false, 0, 0);
    struct route_query q = query("", "cluster-a");
    assert_int_equal(route_local_idle(&q, s.p, s.n), 7);
    q.group = "cpu";
    assert_int_equal(route_local_idle(&q, s.p, s.n), 2);
    q.group = NULL;
    assert_int_equal(route_local_idle(&q, s.p, s.n), 7);
}

static void best_foreign_by_group_skips_stale_and_local(void **state)
{
    struct set s = {0};
    add(&s, "cluster-b", "p-b1", "cpu", 2, false, 0, 0);
    add(&s, "cluster-c", "p-c1", "cpu", 6, false, 0, 0);
    add(&s, "cluster-c", "p-c-gpu", "gpu", 8, false, 0, 0);
    add(&s, "cluster-d", "p-d1", "cpu", 99, false, 0, 40000); /* 40 s old, TTL 30 s */
    add(&s, "cluster-a", "p-a1", "cpu", 50, false, 0, 0);     /* local */
    struct route_query q = query("cpu", "cluster-a");
    const struct route_record *b = route_best_foreign(&q, s.p, s.n);
    assert_non_null(b);
    assert_string_equal(b->cluster, "cluster-c");
    assert_string_equal(b->pool, "p-c1");
    assert_int_equal(route_available(b), 6);
    q.group = "";
    b = route_best_foreign(&q, s.p, s.n);
    assert_non_null(b);
    assert_string_equal(b->pool, "p-c-gpu");
    assert_int_equal(route_available(b), 8);
}

static void best_foreign_none_when_foreign_has_nothing(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a1", "", 5, false, 0, 0);
    add(&s, "cluster-b", "p-b1", "", 0, false, 0, 0);
    add(&s, "cluster-c", "p-c1", "", 0, true, 0, 0); /* autoscaling at its ceiling */
    struct route_query q = query("", "cluster-a");
    assert_null(route_best_foreign(&q, s.p, s.n));
}

static void ttl_found_then_gone_and_snapshot_empty(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    assert_non_null(g);
    struct set s = {0};
    add(&s, "cluster-b", "p-b1", "", 3, false, 0, 0);
    char err[256];
    assert_int_equal(fed_registry_apply(g, "cluster-b", s.r, 1, true, err, sizeof(err)), 0);
    struct route_query q = query("", "cluster-a");
    const struct route_entry *v;
    size_t n = fed_registry_env(g, "team-a", "python", &v);
    assert_int_equal(n, 1);
    const struct route_record *p[] = {v[0].rec};
    assert_non_null(route_best_foreign(&q, p, 1));
    struct route_decision d;
    fed_registry_decide(g, &q, &d);
    assert_int_equal(d.step, 2);
    q.now_ms = T0 + 31000;
    assert_null(route_best_foreign(&q, p, 1));
    fed_registry_decide(g, &q, &d);
    assert_int_equal(d.step, 5);
    assert_int_equal(fed_registry_expire(g, T0 + 31000), 1);
    assert_int_equal(fed_registry_count(g), 0);
    assert_int_equal(fed_registry_env(g, "team-a", "python", &v), 0);
    fed_registry_free(g);
}

static void upsert_same_key_keeps_latest(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    struct set s = {0};
    struct route_record *r = add(&s, "cluster-b", "p-b1", "", 3, false, 0, 0);
    char err[256];
    assert_int_equal(fed_registry_apply(g, "cluster-b", r, 1, true, err, sizeof(err)), 0);
    r->idle = 9;
    assert_int_equal(fed_registry_apply(g, "cluster-b", r, 1, false, err, sizeof(err)), 0);
    const struct route_entry *v;
    assert_int_equal(fed_registry_env(g, "team-a", "python", &v), 1);
    assert_int_equal(v[0].rec->idle, 9);
    assert_int_equal(v[0].idle, 9);
    assert_int_equal(fed_registry_count(g), 1);
    fed_registry_free(g);
}

/* --- reference §1.6: the selector table (local cluster "cluster-a") --------------------- */

static void no_federation_view_is_local(void **state)
{
    struct route_query q = query("", "cluster-a");
    struct route_decision d;
    route_decide(&q, NULL, 0, &d);
    assert_int_not_equal(d.action, ROUTE_FORWARD);
    assert_string_equal(d.cluster, "cluster-a");
    assert_int_equal(d.step, 5);
}

static void local_idle_beats_better_foreign(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a", "", 3, false, 0, 0);
    add(&s, "cluster-b", "p-b", "", 9, false, 0, 0);
    struct route_decision d = decide(&s, "");
    assert_int_equal(d.step, 1);
    assert_int_equal(d.action, ROUTE_LOCAL);
    assert_string_equal(d.cluster, "cluster-a");
}

static void foreign_idle_is_forwarded_pinned(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a", "", 0, false, 0, 0);
    add(&s, "cluster-b", "p-b", "", 4, false, 0, 0);
    struct route_decision d = decide(&s, "");
    assert_int_equal(d.step, 2);
    assert_int_equal(d.action, ROUTE_FORWARD);
    assert_string_equal(d.cluster, "cluster-b");
    assert_string_equal(d.pool, "p-b");
    assert_int_equal(d.idle, 4);
}

static void nobody_schedulable_queues_locally(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a", "", 0, false, 0, 0);
    add(&s, "cluster-b", "p-b", "", 0, false, 0, 0);
    add(&s, "cluster-c", "p-c", "", 0, true, 0, 0); /* at its ceiling */
    struct route_decision d = decide(&s, "");
    assert_int_equal(d.step, 5);
    assert_int_equal(d.action, ROUTE_QUEUE);
    assert_string_equal(d.cluster, "cluster-a");
}

static void scale_up_only_foreign_and_local_can_grow_stays_local(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a", "", 0, true, 5, 0);
    add(&s, "cluster-b", "p-b", "", 0, true, -1, 0);
    struct route_decision d = decide(&s, "");
    assert_int_equal(d.step, 3);
    assert_int_equal(d.action, ROUTE_LOCAL);
    assert_string_equal(d.cluster, "cluster-a");
}

static void scale_up_only_foreign_and_local_cannot_grow_forwards(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a", "", 0, true, 0, 0); /* at its ceiling */
    add(&s, "cluster-b", "p-b", "", 0, true, 3, 0);
    struct route_decision d = decide(&s, "");
    assert_int_equal(d.step, 4);
    assert_int_equal(d.action, ROUTE_FORWARD);
    assert_string_equal(d.cluster, "cluster-b");
    assert_string_equal(d.pool, "p-b");
    assert_int_equal(d.idle, 0);
}

static void origin_statement_overrides_local_records(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a", "", 4, false, 0, 0); /* the hub's view is older */
    add(&s, "cluster-b", "p-b", "", 0, true, 2, 0);
    struct route_query q = query("", "cluster-a");
    q.local_idle = 0;
    q.local_can_grow = 1;
    struct route_decision d;
    route_decide(&q, s.p, s.n, &d);
    assert_int_equal(d.step, 3);
    q.local_can_grow = 0;
    route_decide(&q, s.p, s.n, &d);
    assert_int_equal(d.step, 4);
    assert_string_equal(d.cluster, "cluster-b");
}

/* --- ranking -------------------------------------------------------------------------- */

static void idle_tier_beats_scale_up_tier(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a", "", 0, false, 0, 0);
    add(&s, "cluster-b", "p-b", "", 0, true, -1, 0);
    add(&s, "cluster-c", "p-c", "", 1, false, 0, 0);
    struct route_decision d = decide(&s, "");
    assert_int_equal(d.step, 2);
    assert_string_equal(d.cluster, "cluster-c");
}

static void more_idle_wins(void **state)
{
    struct set s = {0};
    add(&s, "cluster-b", "p-b", "", 2, false, 0, 0);
    add(&s, "cluster-d", "p-d", "", 7, false, 0, 0);
    add(&s, "cluster-c", "p-c", "", 5, true, -1, 0);
    assert_string_equal(decide(&s, "").cluster, "cluster-d");
}

static void more_headroom_wins_and_unbounded_is_highest(void **state)
{
    struct set s = {0};
    add(&s, "cluster-b", "p-b", "", 0, true, 3, 0);
    add(&s, "cluster-c", "p-c", "", 0, true, 100, 0);
    struct route_decision d = decide(&s, "");
    assert_int_equal(d.step, 4);
    assert_string_equal(d.cluster, "cluster-c");
    add(&s, "cluster-z", "p-z", "", 0, true, -1, 0);
    d = decide(&s, "");
    assert_string_equal(d.cluster, "cluster-z");
    /* a non-autoscaling member with no idle is never a scale-up candidate */
    struct set t = {0};
    add(&t, "cluster-b", "p-b", "", 0, false, -1, 0);
    assert_int_equal(decide(&t, "").step, 5);
}

static void ties_by_cluster_then_pool(void **state)
{
    struct set s = {0};
    add(&s, "cluster-c", "p-a", "", 4, false, 0, 0);
    add(&s, "cluster-b", "p-z", "", 4, false, 0, 0);
    add(&s, "cluster-b", "p-m", "", 4, false, 0, 0);
    struct route_decision d = decide(&s, "");
    assert_string_equal(d.cluster, "cluster-b");
    assert_string_equal(d.pool, "p-m");
    /* byte order: upper case sorts before lower case */
    struct set t = {0};
    add(&t, "cluster-b", "p-b", "", 0, true, -1, 0);
    add(&t, "Cluster-b", "p-b", "", 0, true, -1, 0);
    assert_string_equal(decide(&t, "").cluster, "Cluster-b");
    struct set u = {0};
    add(&u, "cluster-b", "pool-b", "", 0, true, 6, 0);
    add(&u, "cluster-b", "pool-a", "", 0, true, 6, 0);
    assert_string_equal(decide(&u, "").pool, "pool-a");
}

static void ttl_edge_is_inclusive_at_30s(void **state)
{
    struct set s = {0};
    add(&s, "cluster-b", "p-b", "", 4, false, 0, 30000); /* exactly 30 s old */
    struct route_decision d = decide(&s, "");
    assert_int_equal(d.step, 2);
    assert_string_equal(d.cluster, "cluster-b");
    s.r[0].sampled_ms = T0 - 30001;
    d = decide(&s, "");
    assert_int_equal(d.step, 5);
    /* a local record past the edge no longer counts for step 1 */
    struct set t = {0};
    add(&t, "cluster-a", "p-a", "", 3, false, 0, 30000);
    assert_int_equal(decide(&t, "").step, 1);
    t.r[0].sampled_ms = T0 - 30001;
    assert_int_equal(decide(&t, "").step, 5);
    struct route_record r = s.r[0];
    r.sampled_ms = 0;
    assert_true(route_is_fresh(&r, 30000, 0));
    assert_false(route_is_fresh(&r, 30001, 0));
}

static void requested_group_is_a_hard_constraint(void **state)
{
    struct set s = {0};
    add(&s, "cluster-a", "p-a-gpu", "gpu", 6, false, 0, 0);
    add(&s, "cluster-b", "p-b-gpu", "gpu", 9, false, 0, 0);
    add(&s, "cluster-c", "p-c-cpu", "cpu", 3, true, -1, 0);
    struct route_decision d = decide(&s, "cpu");
    assert_int_equal(d.step, 2);
    assert_string_equal(d.cluster, "cluster-c");
    assert_string_equal(d.pool, "p-c-cpu");
    /* nobody in the group: no fallback to another group's idle */
    d = decide(&s, "tpu");
    assert_int_equal(d.step, 5);
    assert_int_equal(d.action, ROUTE_QUEUE);
    /* the local member of another group does not make step 1 */
    s.r[2].idle = 0;
    s.r[2].autoscaling = false;
    d = decide(&s, "cpu");
    assert_int_equal(d.step, 5);
}

static void other_envs_and_namespaces_are_ignored(void **state)
{
    struct set s = {0};
    struct route_record *r = add(&s, "cluster-b", "p-b", "", 9, false, 0, 0);
    ab_strlcpy(r->env, "node", sizeof(r->env));
    r = add(&s, "cluster-c", "p-c", "", 9, false, 0, 0);
    ab_strlcpy(r->ns, "team-b", sizeof(r->ns));
    assert_int_equal(decide(&s, "").step, 5);
}

/* --- the hub front door: steps 2, 4, then park on the first cluster by id --------------- */

static void front_door(void **state)
{
    struct set s = {0};
    add(&s, "cluster-c", "p-c", "", 0, false, 0, 0);
    add(&s, "cluster-b", "p-b", "", 0, false, 0, 0);
    struct route_query q = query("", NULL);
    struct route_decision d;
    route_decide(&q, s.p, s.n, &d);
    assert_int_equal(d.step, 5);
    assert_int_equal(d.action, ROUTE_QUEUE);
    assert_string_equal(d.cluster, "cluster-b");
    s.r[0].autoscaling = true;
    s.r[0].headroom = 2;
    route_decide(&q, s.p, s.n, &d);
    assert_int_equal(d.step, 4);
    assert_string_equal(d.cluster, "cluster-c");
    s.r[1].idle = 1;
    route_decide(&q, s.p, s.n, &d);
    assert_int_equal(d.step, 2);
    assert_string_equal(d.cluster, "cluster-b");
    route_decide(&q, NULL, 0, &d);
    assert_int_equal(d.step, 5);
    assert_string_equal(d.cluster, "");
}

/* --- reservations ---------------------------------------------------------------------- */

static void reservations_spread_a_burst(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    struct set s = {0};
    add(&s, "cluster-b", "p-b", "", 10, false, 0, 0);
    add(&s, "cluster-c", "p-c", "", 10, false, 0, 0);
    add(&s, "cluster-a", "p-a", "", 0, false, 0, 0);
    char err[256];
    for (size_t i = 0; i < s.n; i++)
        assert_int_equal(fed_registry_apply(g, s.r[i].cluster, &s.r[i], 1, true, err, sizeof(err)),
                         0);
    int to_b = 0, to_c = 0;
    struct route_query q = query("", "cluster-a");
    for (int i = 0; i < 20; i++) {
        struct route_decision d;
        fed_registry_decide(g, &q, &d);
        assert_int_equal(d.step, 2);
        if (strcmp(d.cluster, "cluster-b") == 0)
            to_b++;
        else if (strcmp(d.cluster, "cluster-c") == 0)
            to_c++;
        /* never more than one apart while both have idle */
        assert_true(abs(to_b - to_c) <= 1);
    }
    assert_int_equal(to_b, 10);
    assert_int_equal(to_c, 10);
    struct route_decision d;
    fed_registry_decide(g, &q, &d);
    assert_int_equal(d.step, 5); /* all promised away */
    /* a report counting b's ten claims pays its reservations back */
    s.r[0].idle = 3;
    s.r[0].claims = 10;
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    fed_registry_decide(g, &q, &d);
    assert_int_equal(d.step, 2);
    assert_string_equal(d.cluster, "cluster-b");
    assert_int_equal(d.idle, 3);
    fed_registry_free(g);
}

/* The registry's view of one member: idle less what is promised away. */
static int available(struct fed_registry *g, const char *cluster)
{
    const struct route_entry *v;
    size_t n = fed_registry_env(g, "team-a", "python", &v);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v[i].rec->cluster, cluster) == 0) {
            assert_int_equal(route_available(v[i].rec), v[i].idle - v[i].reserved);
            return v[i].idle - v[i].reserved;
        }
    }
    return -1;
}

static void reserve(struct fed_registry *g, int n)
{
    struct route_query q = query("", "cluster-a");
    struct route_decision d;
    for (int i = 0; i < n; i++) {
        fed_registry_decide(g, &q, &d);
        assert_int_equal(d.action, ROUTE_FORWARD);
    }
}

/* A report sampled after the forwards but before their claims frees no
 * promised place: only claims pay (a burst queued a create on the origin
 * when a report freed places its forwards were about to take). */
static void report_before_claims_keeps_reservations(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    struct set s = {0};
    add(&s, "cluster-b", "p-b", "", 10, false, 0, 0);
    char err[256];
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    reserve(g, 4);
    assert_int_equal(available(g, "cluster-b"), 6);
    /* sampled before any claim: idle 10, claims 0 */
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    assert_int_equal(available(g, "cluster-b"), 6);
    reserve(g, 2);
    assert_int_equal(available(g, "cluster-b"), 4);
    /* four claimed and refilled at once: idle back at 10, claims 4 pay the
     * older four; the newer two carry over */
    s.r[0].claims = 4;
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    assert_int_equal(available(g, "cluster-b"), 8);
    /* one more claim; the last forward never became one: let go after two
     * reports that did not count it */
    s.r[0].claims = 5;
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    assert_int_equal(available(g, "cluster-b"), 10);
    fed_registry_free(g);
}

/* A cluster's report pays only its own records' reservations: another
 * cluster reporting the same namespace, env and pool name with claims far
 * ahead (a rogue one, or a coincidence of names) frees nothing of b's. */
static void claims_pay_only_the_reporting_cluster(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    struct set s = {0};
    add(&s, "cluster-b", "p-b", "", 10, false, 0, 0);
    char err[256];
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    reserve(g, 3);
    assert_int_equal(available(g, "cluster-b"), 7);
    json_t *m = json_loads("{\"records\":[{\"cluster\":\"cluster-b\",\"namespace\":\"team-a\","
                           "\"env\":\"python\",\"pool\":\"p-b\",\"idle\":0,\"claims\":1000}]}",
                           0, NULL);
    assert_int_equal(fed_registry_report(g, "cluster-c", m, T0, err, sizeof(err)), 0);
    json_decref(m);
    assert_int_equal(available(g, "cluster-b"), 7);
    assert_int_equal(available(g, "cluster-c"), 0);
    fed_registry_free(g);
}

/* Claims that go backwards (the pool was made anew) or are not reported at
 * all clear every reservation; claims beyond the reservations pay no more
 * than there is. */
static void claims_reset_or_absent_clear_reservations(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    struct set s = {0};
    add(&s, "cluster-b", "p-b", "", 10, false, 0, 0);
    s.r[0].claims = 50;
    char err[256];
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    reserve(g, 2);
    s.r[0].claims = 5; /* made anew */
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    assert_int_equal(available(g, "cluster-b"), 10);
    reserve(g, 1);
    s.r[0].claims = 100; /* local creates too: never below nothing reserved */
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    assert_int_equal(available(g, "cluster-b"), 10);
    reserve(g, 2);
    json_t *m = json_loads("{\"records\":[{\"namespace\":\"team-a\",\"env\":\"python\","
                           "\"pool\":\"p-b\",\"idle\":10}]}",
                           0, NULL);
    assert_int_equal(fed_registry_report(g, "cluster-b", m, T0, err, sizeof(err)), 0);
    assert_int_equal(available(g, "cluster-b"), 10); /* an agent that reports no claims */
    json_decref(m);
    m = json_loads("{\"records\":[{\"namespace\":\"team-a\",\"env\":\"python\","
                   "\"pool\":\"p-b\",\"idle\":10,\"claims\":-1}]}",
                   0, NULL);
    assert_int_equal(fed_registry_report(g, "cluster-b", m, T0, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "'claims'"));
    json_decref(m);
    fed_registry_free(g);
}

static void reserved_member_falls_to_scale_up_tier(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    struct set s = {0};
    add(&s, "cluster-b", "p-b", "", 1, true, -1, 0);
    add(&s, "cluster-c", "p-c", "", 0, true, 4, 0);
    char err[256];
    assert_int_equal(fed_registry_apply(g, "cluster-b", &s.r[0], 1, true, err, sizeof(err)), 0);
    assert_int_equal(fed_registry_apply(g, "cluster-c", &s.r[1], 1, true, err, sizeof(err)), 0);
    struct route_query q = query("", "cluster-a");
    struct route_decision d;
    fed_registry_decide(g, &q, &d);
    assert_int_equal(d.step, 2);
    assert_string_equal(d.cluster, "cluster-b");
    fed_registry_decide(g, &q, &d);
    assert_int_equal(d.step, 4); /* b's one idle is promised; unbounded b still ranks first */
    assert_string_equal(d.cluster, "cluster-b");
    fed_registry_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(local_idle_sums_members_by_group),
        cmocka_unit_test(best_foreign_by_group_skips_stale_and_local),
        cmocka_unit_test(best_foreign_none_when_foreign_has_nothing),
        cmocka_unit_test(ttl_found_then_gone_and_snapshot_empty),
        cmocka_unit_test(upsert_same_key_keeps_latest),
        cmocka_unit_test(no_federation_view_is_local),
        cmocka_unit_test(local_idle_beats_better_foreign),
        cmocka_unit_test(foreign_idle_is_forwarded_pinned),
        cmocka_unit_test(nobody_schedulable_queues_locally),
        cmocka_unit_test(scale_up_only_foreign_and_local_can_grow_stays_local),
        cmocka_unit_test(scale_up_only_foreign_and_local_cannot_grow_forwards),
        cmocka_unit_test(origin_statement_overrides_local_records),
        cmocka_unit_test(idle_tier_beats_scale_up_tier),
        cmocka_unit_test(more_idle_wins),
        cmocka_unit_test(more_headroom_wins_and_unbounded_is_highest),
        cmocka_unit_test(ties_by_cluster_then_pool),
        cmocka_unit_test(ttl_edge_is_inclusive_at_30s),
        cmocka_unit_test(requested_group_is_a_hard_constraint),
        cmocka_unit_test(other_envs_and_namespaces_are_ignored),
        cmocka_unit_test(front_door),
        cmocka_unit_test(reservations_spread_a_burst),
        cmocka_unit_test(report_before_claims_keeps_reservations),
        cmocka_unit_test(claims_reset_or_absent_clear_reservations),
        cmocka_unit_test(claims_pay_only_the_reporting_cluster),
        cmocka_unit_test(reserved_member_falls_to_scale_up_tier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
