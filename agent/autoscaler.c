/* The autoscaler loop. See autoscaler.h. Decisions are collected while the
 * runtime walks its groups and applied after the walk: the snapshot callback
 * never calls back into the runtime. */
#include "agent/autoscaler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/autoscale.h"
#include "agent/runtime/runtime.h"
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"

struct as_group {
    char ns[RT_NAME_MAX + 1], env[RT_NAME_MAX + 1], name[RT_NAME_MAX + 1];
    struct as_state st;
    struct autoscaler_info info;
    uint64_t tick; /* the last tick the runtime reported it */
};

/* One member's new replicas, applied after the walk. */
struct as_change {
    char ns[RT_NAME_MAX + 1], pool[RT_NAME_MAX + 1];
    int replicas;
    int group; /* index into groups, for the reason */
};

struct autoscaler {
    struct autoscaler_deps d;
    struct loop_timer timer;
    struct as_group *groups;
    size_t ngroups, cap;
    struct as_change *changes;
    size_t nchanges, changes_cap;
    uint64_t tick;
    bool warned_full;
};

static struct metric_family *decisions(void)
{
    static const char *const labels[] = {"env", "group", "direction", NULL};
    return metrics_register(metrics_default(), "agentbox_autoscaler_decisions_total",
                            "Autoscaler scale decisions (replicas changed), by env, scaling group "
                            "and direction (up, down).",
                            METRIC_COUNTER, labels, NULL, 0);
}

static struct as_group *group_find(struct autoscaler *as, const char *ns, const char *env,
                                   const char *name)
{
    for (size_t i = 0; i < as->ngroups; i++) {
        struct as_group *g = &as->groups[i];
        if (!strcmp(g->ns, ns) && !strcmp(g->env, env) && !strcmp(g->name, name))
            return g;
    }
    return NULL;
}

static struct as_group *group_get(struct autoscaler *as, const struct rt_scale_group *sg)
{
    struct as_group *g = group_find(as, sg->ns, sg->env, sg->name);

    if (g)
        return g;
    if (as->ngroups >= AUTOSCALER_GROUPS_MAX) {
        if (!as->warned_full)
            LOG_WARN("more scaling groups than the autoscaler keeps; the rest are not scaled",
                     "limit", "4096");
        as->warned_full = true;
        return NULL;
    }
    if (as->ngroups == as->cap) {
        size_t cap = as->cap ? as->cap * 2 : 16;
        struct as_group *n = realloc(as->groups, cap * sizeof(*n));
        if (!n)
            return NULL;
        as->groups = n;
        as->cap = cap;
    }
    g = &as->groups[as->ngroups++];
    memset(g, 0, sizeof(*g));
    ab_strlcpy(g->ns, sg->ns, sizeof(g->ns));
    ab_strlcpy(g->env, sg->env, sizeof(g->env));
    ab_strlcpy(g->name, sg->name, sizeof(g->name));
    return g;
}

static int change_add(struct autoscaler *as, const char *ns, const char *pool, int replicas,
                      int group)
{
    if (as->nchanges == as->changes_cap) {
        size_t cap = as->changes_cap ? as->changes_cap * 2 : 16;
        struct as_change *n = realloc(as->changes, cap * sizeof(*n));
        if (!n)
            return AB_ENOMEM;
        as->changes = n;
        as->changes_cap = cap;
    }
    struct as_change *c = &as->changes[as->nchanges++];
    ab_strlcpy(c->ns, ns, sizeof(c->ns));
    ab_strlcpy(c->pool, pool, sizeof(c->pool));
    c->replicas = replicas;
    c->group = group;
    return 0;
}

static void event(struct autoscaler *as, const struct as_group *g, const char *reason)
{
    char msg[320];

    if (!as->d.event)
        return;
    snprintf(msg, sizeof(msg), "group %s: %s", g->name, g->info.reason);
    as->d.event(as->d.event_arg, g->ns, g->env, reason, msg);
}

static void on_group(void *arg, const struct rt_scale_group *sg)
{
    struct autoscaler *as = arg;
    struct as_group *g = group_get(as, sg);
    struct as_decision d;
    int64_t now = ab_now_ms(), wall = ab_wall_ms();

    if (!g)
        return;
    g->tick = as->tick;
    as_decide(sg, &g->st, now, &d);
    if (d.kind == AS_KEEP && strcmp(d.reason, g->info.reason) != 0)
        LOG_DEBUG("autoscaler keeps", "namespace", sg->ns, "env", sg->env, "group", sg->name,
                  "reason", d.reason);
    g->info.decided_wall_ms = wall;
    g->info.marked = g->st.mark_ms != 0;
    snprintf(g->info.reason, sizeof(g->info.reason), "%s", d.reason);
    switch (d.kind) {
    case AS_SCALED: {
        int idx = (int)(g - as->groups);
        for (int i = 0; i < sg->nmembers; i++)
            if (d.replicas[i] != sg->members[i].replicas &&
                change_add(as, sg->ns, sg->members[i].name, d.replicas[i], idx) != 0)
                LOG_WARN("out of memory: an autoscaler change is dropped", "pool",
                         sg->members[i].name);
        if (d.direction == AS_UP)
            g->info.last_up_wall_ms = wall;
        else
            g->info.last_down_wall_ms = wall;
        const char *lv[] = {sg->env, sg->name, d.direction == AS_UP ? "up" : "down"};
        metrics_add(decisions(), lv, 1);
        LOG_INFO("autoscaler decision", "namespace", sg->ns, "env", sg->env, "group", sg->name,
                 "reason", d.reason);
        event(as, g, d.direction == AS_UP ? "ScaledUp" : "ScaledDown");
        break;
    }
    case AS_MARKED:
        event(as, g, "ScaleDownMarked");
        break;
    case AS_CANCELLED:
        event(as, g, "ScaleDownCancelled");
        break;
    default:
        break;
    }
}

void autoscaler_tick(struct autoscaler *as)
{
    size_t k = 0;

    if (as->d.active && !as->d.active(as->d.active_arg))
        return;
    as->tick++;
    as->nchanges = 0;
    rt_scale_groups(as->d.rt, on_group, as);
    for (size_t i = 0; i < as->nchanges; i++) {
        const struct as_change *c = &as->changes[i];
        char err[256];
        if (rt_scale_set(as->d.rt, c->ns, c->pool, c->replicas, as->groups[c->group].info.reason,
                         err, sizeof(err)) != 0)
            LOG_WARN("the runtime refused the autoscaler's replicas", "pool", c->pool, "error",
                     err);
    }
    /* groups the runtime no longer reports: no member declares them */
    for (size_t i = 0; i < as->ngroups; i++) {
        if (as->groups[i].tick != as->tick) {
            LOG_DEBUG("scaling group gone", "env", as->groups[i].env, "group", as->groups[i].name);
            continue;
        }
        if (k != i)
            as->groups[k] = as->groups[i];
        k++;
    }
    as->ngroups = k;
}

static void tick_fired(struct loop_timer *t)
{
    struct autoscaler *as = t->arg;

    autoscaler_tick(as);
    loop_timer_start(as->d.loop, &as->timer, as->d.interval_ms, tick_fired, as);
}

struct autoscaler *autoscaler_new(const struct autoscaler_deps *deps)
{
    struct autoscaler *as = calloc(1, sizeof(*as));

    if (!as)
        return NULL;
    as->d = *deps;
    if (as->d.interval_ms <= 0)
        as->d.interval_ms = 1000;
    if (as->d.loop)
        loop_timer_start(as->d.loop, &as->timer, as->d.interval_ms, tick_fired, as);
    return as;
}

void autoscaler_free(struct autoscaler *as)
{
    if (!as)
        return;
    if (as->d.loop)
        loop_timer_cancel(&as->timer);
    free(as->groups);
    free(as->changes);
    free(as);
}

int autoscaler_info(const struct autoscaler *as, const char *ns, const char *env, const char *group,
                    struct autoscaler_info *out)
{
    if (!as)
        return AB_ENOENT;
    const struct as_group *g = group_find((struct autoscaler *)as, ns, env, group);
    if (!g)
        return AB_ENOENT;
    *out = g->info;
    return 0;
}
