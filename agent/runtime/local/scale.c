/* The local runtime's half of the scaling-group seam (runtime.h "Scaling
 * groups"): Env member pools grouped by (namespace, env, scalingGroup), the
 * policy from the Env's autoscaling.groups[] entry, and the autoscaler's
 * replicas kept in memory beside the manifest's, never written to the YAML
 * (a restarted agent starts again from the manifest's replicas; the
 * autoscaler's bounds bring it back inside at once). Loop thread only. */
#include "agent/runtime/local/lrt.h"

#include "agentbox/common.h"
#include "agentbox/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lrt_pool_replicas(const struct lpool *p)
{
    return p->in_group && p->has_scaled ? p->scaled : p->replicas;
}

static int64_t secs_or(int32_t s, int64_t def_ms)
{
    return s >= 0 ? (int64_t)s * 1000 : def_ms;
}

void mf_group_policy(const struct mf_group *g, struct rt_scale_policy *o)
{
    struct rt_scale_policy d;

    rt_scale_policy_defaults(&d);
    *o = d;
    if (!g)
        return; /* declared by a member only: the defaults, off */
    o->enabled = g->enabled;
    o->min_replicas = g->min_replicas;
    o->max_replicas = g->max_replicas;
    o->mode = g->up_mode == MF_SCALE_CONSERVATIVE ? RT_SCALE_CONSERVATIVE
              : g->up_mode == MF_SCALE_AGGRESSIVE ? RT_SCALE_AGGRESSIVE
                                                  : RT_SCALE_DEFAULT;
    o->cooldown_ms = secs_or(g->cooldown_s, d.cooldown_ms);
    o->idle_threshold_ms = secs_or(g->idle_threshold_s, d.idle_threshold_ms);
    o->quiet_window_ms = secs_or(g->quiet_window_s, d.quiet_window_ms);
    o->saturation_ms = secs_or(g->saturation_s, d.saturation_ms);
    o->down_idle_timeout_ms = secs_or(g->down_idle_timeout_s, d.down_idle_timeout_ms);
    o->stabilization_ms = secs_or(g->stabilization_s, d.stabilization_ms);
    o->protection_ms = secs_or(g->protection_s, d.protection_ms);
}

const struct mf_group *mf_env_group(const struct mf_object *env, const char *name)
{
    for (int i = 0; env && env->kind == MF_ENV && i < env->u.env.ngroups; i++)
        if (!strcmp(env->u.env.groups[i].name, name))
            return &env->u.env.groups[i];
    return NULL;
}

void lrt_scale_from_view(struct lrt *rt, struct lpool *p, const struct mf_pool_view *v)
{
    const struct mf_member *m = v->member;
    const struct mf_group *g = NULL;
    bool was_enabled = p->in_group && p->policy.enabled;

    (void)rt;
    p->in_group = m && v->env[0] && v->scaling_group[0];
    if (!p->in_group) {
        p->has_scaled = false;
        return;
    }
    g = mf_env_group(v->obj, v->scaling_group);
    mf_group_policy(g, &p->policy);
    p->min_r = m->min_replicas;
    p->max_r = m->max_replicas;
    p->up_prio = m->has_up_priority ? m->up_priority : m->priority;
    p->down_prio = m->has_down_priority ? m->down_priority : m->priority;
    if (!p->policy.enabled) {
        if (was_enabled && p->has_scaled)
            LOG_INFO("autoscaling turned off: the manifest's replicas apply again", "pool",
                     p->name);
        p->has_scaled = false; /* the manifest's replicas are in force again */
    }
}

/* The sum of lrt_pool_replicas over p's group on this cluster. */
static int group_total(struct lrt *rt, const struct lpool *p)
{
    int total = 0;

    for (const struct lpool *q = rt->pools; q; q = q->next)
        if (!q->removed && q->in_group && !strcmp(q->ns, p->ns) && !strcmp(q->env, p->env) &&
            !strcmp(q->group, p->group))
            total += lrt_pool_replicas(q);
    return total;
}

void lrt_scale_fill_pool(struct lrt *rt, const struct lpool *p, struct rt_pool *info)
{
    int64_t since = ab_now_ms() - p->saturated_ms;

    info->autoscaling = false;
    info->headroom = 0;
    info->saturated_for_ms = 0;
    if (p->removed || !p->in_group || !p->policy.enabled)
        return;
    info->autoscaling = true;
    if (p->saturated_ms && since < p->policy.saturation_ms) {
        info->saturated_for_ms = p->policy.saturation_ms - since;
        return; /* saturated: no room to offer for the cooldown */
    }
    info->headroom = rt_scale_headroom(lrt_pool_replicas(p), p->max_r, p->policy.max_replicas,
                                       group_total(rt, p));
}

static void member_of(struct lrt *rt, struct lpool *p, int64_t now, struct rt_scale_member *m)
{
    struct lsb *s, *order[RT_IDLE_SAMPLES_MAX];
    int n = 0;

    memset(m, 0, sizeof(*m));
    ab_strlcpy(m->name, p->name, sizeof(m->name));
    m->up_priority = p->up_prio;
    m->down_priority = p->down_prio;
    m->min_replicas = p->min_r;
    m->max_replicas = p->max_r;
    m->replicas = lrt_pool_replicas(p);
    m->spec_replicas = p->replicas;
    m->status.replicas = m->replicas;
    m->status.idle = lrt_count(rt, p, PH_IDLE, PH_IDLE);
    m->status.running = lrt_count(rt, p, PH_ATTACHING, PH_RUNNING);
    m->status.starting = lrt_count(rt, p, PH_SPAWNING, PH_STARTING);
    m->status.stopping = lrt_count(rt, p, PH_STOPPING, PH_REMOVING);
    m->status.pending = p->nwaiters;
    m->last_create_ms = p->last_create_ms;
    m->saturated_ms = p->saturated_ms;
    /* the oldest idle first (by seq), the RT_IDLE_SAMPLES_MAX oldest kept */
    for (s = rt->sbxs; s; s = s->next) {
        int j;
        if (s->pool != p || s->phase != PH_IDLE)
            continue;
        if (!s->idle_since_ms)
            s->idle_since_ms = now; /* adopted: idle from when this agent saw it */
        if (n == RT_IDLE_SAMPLES_MAX) {
            if (order[n - 1]->seq < s->seq)
                continue;
            j = n - 1; /* replaces the newest kept */
        } else {
            j = n++;
        }
        while (j > 0 && order[j - 1]->seq > s->seq) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = s;
    }
    m->nidle = n;
    for (int i = 0; i < n; i++)
        m->idle_since_ms[i] = order[i]->idle_since_ms;
}

void lrt_scale_groups(struct rt *base, rt_group_fn fn, void *arg)
{
    struct lrt *rt = (struct lrt *)base;
    struct rt_scale_group *g = malloc(sizeof(*g));
    int64_t now = ab_now_ms();
    struct lpool *p, *q;

    if (!g) {
        LOG_WARN("out of memory building a scaling-group snapshot: the autoscaler skips a tick");
        return;
    }
    for (p = rt->pools; p; p = p->next)
        p->snapped = false;
    for (p = rt->pools; p; p = p->next) {
        if (p->removed || !p->in_group || p->snapped)
            continue;
        memset(g, 0, offsetof(struct rt_scale_group, members));
        ab_strlcpy(g->ns, p->ns, sizeof(g->ns));
        ab_strlcpy(g->env, p->env, sizeof(g->env));
        ab_strlcpy(g->name, p->group, sizeof(g->name));
        ab_strlcpy(g->cluster, rt->cluster, sizeof(g->cluster));
        g->policy = p->policy;
        for (q = p; q; q = q->next) {
            if (q->removed || !q->in_group || q->snapped || strcmp(q->ns, p->ns) ||
                strcmp(q->env, p->env) || strcmp(q->group, p->group))
                continue;
            q->snapped = true;
            if (g->nmembers < RT_GROUP_MEMBERS_MAX)
                member_of(rt, q, now, &g->members[g->nmembers++]);
        }
        fn(arg, g);
    }
    free(g);
}

int lrt_scale_set(struct rt *base, const char *ns, const char *pool, int replicas,
                  const char *reason, char *err, size_t errlen)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p = lrt_pool_find(rt, ns, pool);
    char from[16], to[16];

    if (!p || !p->in_group) {
        snprintf(err, errlen, "pool '%s/%s' is not a member of a scaling group on cluster '%s'", ns,
                 pool, rt->cluster);
        return AB_ENOENT;
    }
    if (replicas < 0 || replicas > rt->max_sandboxes) {
        snprintf(err, errlen, "replicas must be between 0 and %d (max_sandboxes), got %d",
                 rt->max_sandboxes, replicas);
        return AB_EINVAL;
    }
    snprintf(from, sizeof(from), "%d", lrt_pool_replicas(p));
    snprintf(to, sizeof(to), "%d", replicas);
    p->has_scaled = true;
    p->scaled = replicas;
    LOG_INFO("autoscaler set replicas", "pool", p->name, "from", from, "to", to, "reason",
             reason ? reason : "");
    lrt_reconcile(rt, p);
    return 0;
}
