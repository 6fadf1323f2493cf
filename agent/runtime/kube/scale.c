/* The kube runtime's scaling groups. See scale.h. */
#include "agent/runtime/kube/scale.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/runtime/kube/reconcile.h"
#include "agent/runtime/local/manifest.h"
#include "agentbox/common.h"
#include "agentbox/log.h"

#define VIEWS_MAX 1024

struct kscale {
    json_t *replicas;   /* "ns/pool" → the autoscaler's replicas */
    json_t *idle_since; /* "ns/pod" → ab_now_ms when first seen idle */
    json_t *info;       /* "ns/pool" → [autoscaling, headroom] */
};

struct kscale *kscale_new(void)
{
    struct kscale *ks = calloc(1, sizeof(*ks));

    if (!ks)
        return NULL;
    ks->replicas = json_object();
    ks->idle_since = json_object();
    ks->info = json_object();
    if (!ks->replicas || !ks->idle_since || !ks->info) {
        kscale_free(ks);
        return NULL;
    }
    return ks;
}

void kscale_free(struct kscale *ks)
{
    if (!ks)
        return;
    json_decref(ks->replicas);
    json_decref(ks->idle_since);
    json_decref(ks->info);
    free(ks);
}

static void key_of(char *out, size_t len, const char *ns, const char *name)
{
    snprintf(out, len, "%s/%s", ns, name);
}

static const struct mf_pool_view *view_of(const struct mf_pool_view *v, int n, const char *ns,
                                          const char *name)
{
    for (int i = 0; i < n; i++)
        if (v[i].member && !strcmp(v[i].ns, ns) && !strcmp(v[i].name, name))
            return &v[i];
    return NULL;
}

/* Idle Pods of member m (pool ns/name), oldest first by when this agent
 * first saw them idle; marks their keys in seen. */
static void idle_of(struct kscale *ks, const json_t *pods, const char *ns, const char *pool,
                    int64_t now, struct rt_scale_member *m, json_t *seen)
{
    const char *k;
    json_t *pod;
    char key[400];

    m->nidle = 0;
    json_object_foreach((json_t *)pods, k, pod)
    {
        const json_t *md = json_object_get(pod, "metadata");
        const json_t *labels = json_object_get(md, "labels");
        const char *pns = json_string_value(json_object_get(md, "namespace"));
        const char *pn = json_string_value(json_object_get(labels, KUBE_L_POOL));
        const char *ph = json_string_value(json_object_get(labels, KUBE_L_PHASE));
        if (!pns || !pn || !ph || strcmp(pns, ns) || strcmp(pn, pool) || strcmp(ph, "idle") ||
            json_object_get(md, "deletionTimestamp"))
            continue;
        key_of(key, sizeof(key), pns, json_string_value(json_object_get(md, "name")));
        json_t *v = json_object_get(ks->idle_since, key);
        int64_t since = v ? (int64_t)json_integer_value(v) : now;
        if (!v)
            json_object_set_new(ks->idle_since, key, json_integer(since));
        json_object_set_new(seen, key, json_true());
        /* keep the RT_IDLE_SAMPLES_MAX oldest, in order */
        int j;
        if (m->nidle == RT_IDLE_SAMPLES_MAX) {
            if (m->idle_since_ms[m->nidle - 1] <= since)
                continue;
            j = m->nidle - 1;
        } else {
            j = m->nidle++;
        }
        while (j > 0 && m->idle_since_ms[j - 1] > since) {
            m->idle_since_ms[j] = m->idle_since_ms[j - 1];
            j--;
        }
        m->idle_since_ms[j] = since;
    }
}

void kscale_groups(struct kscale *ks, const struct mf_set *set, const char *cluster,
                   const json_t *pods, const struct kscale_pool *pools, int n, rt_group_fn fn,
                   void *arg)
{
    struct mf_pool_view *views = malloc(VIEWS_MAX * sizeof(*views));
    struct rt_scale_group *g = malloc(sizeof(*g));
    bool *done = calloc((size_t)(n > 0 ? n : 1), sizeof(*done));
    json_t *seen = json_object(), *info = json_object();
    int64_t now = ab_now_ms();
    int nv = 0;
    char key[400];

    if (!views || !g || !done || !seen || !info) {
        LOG_WARN("out of memory building a scaling-group snapshot: the autoscaler skips a tick");
        goto out;
    }
    if (!set || mf_set_pools(set, cluster, views, VIEWS_MAX, &nv) != 0)
        nv = 0;
    if (nv > VIEWS_MAX)
        nv = VIEWS_MAX;
    for (int i = 0; i < n; i++) {
        const struct kscale_pool *p = &pools[i];
        const struct mf_pool_view *v;
        if (done[i] || !p->env[0] || !p->group[0] || !(v = view_of(views, nv, p->ns, p->name)))
            continue;
        memset(g, 0, offsetof(struct rt_scale_group, members));
        ab_strlcpy(g->ns, p->ns, sizeof(g->ns));
        ab_strlcpy(g->env, p->env, sizeof(g->env));
        ab_strlcpy(g->name, p->group, sizeof(g->name));
        ab_strlcpy(g->cluster, cluster, sizeof(g->cluster));
        mf_group_policy(mf_env_group(v->obj, p->group), &g->policy);
        int total = 0;
        for (int j = i; j < n; j++) {
            const struct kscale_pool *q = &pools[j];
            const struct mf_pool_view *qv;
            if (done[j] || strcmp(q->ns, p->ns) || strcmp(q->env, p->env) ||
                strcmp(q->group, p->group) || !(qv = view_of(views, nv, q->ns, q->name)))
                continue;
            done[j] = true;
            if (g->nmembers >= RT_GROUP_MEMBERS_MAX)
                continue;
            struct rt_scale_member *m = &g->members[g->nmembers++];
            const struct mf_member *mb = qv->member;
            key_of(key, sizeof(key), q->ns, q->name);
            if (!g->policy.enabled)
                json_object_del(ks->replicas, key); /* the Env's replicas again */
            json_t *o = json_object_get(ks->replicas, key);
            memset(m, 0, sizeof(*m));
            ab_strlcpy(m->name, q->name, sizeof(m->name));
            m->up_priority = mb->has_up_priority ? mb->up_priority : mb->priority;
            m->down_priority = mb->has_down_priority ? mb->down_priority : mb->priority;
            m->min_replicas = mb->min_replicas;
            m->max_replicas = mb->max_replicas;
            m->replicas = o ? (int)json_integer_value(o) : q->replicas;
            m->spec_replicas = qv->replicas;
            m->status = q->status;
            m->status.replicas = m->replicas;
            m->last_create_ms = q->last_create_ms;
            idle_of(ks, pods, q->ns, q->name, now, m, seen);
            total += m->replicas;
        }
        for (int k = 0; k < g->nmembers; k++) {
            const struct rt_scale_member *m = &g->members[k];
            int h = g->policy.enabled ? rt_scale_headroom(m->replicas, m->max_replicas,
                                                          g->policy.max_replicas, total)
                                      : 0;
            key_of(key, sizeof(key), g->ns, m->name);
            json_object_set_new(info, key, json_pack("[b,i]", g->policy.enabled, h));
        }
        fn(arg, g);
    }
    /* Pods no longer idle (or gone) start afresh when they are idle again */
    const char *k;
    json_t *v, *tmp;
    json_object_foreach_safe(ks->idle_since, tmp, k, v)
    {
        if (!json_object_get(seen, k))
            json_object_del(ks->idle_since, k);
    }
    json_decref(ks->info);
    ks->info = info;
    info = NULL;
out:
    json_decref(seen);
    json_decref(info);
    free(done);
    free(g);
    free(views);
}

int kscale_set(struct kscale *ks, const char *ns, const char *pool, int replicas)
{
    char key[400];

    if (replicas < 0)
        return AB_EINVAL;
    key_of(key, sizeof(key), ns, pool);
    return json_object_set_new(ks->replicas, key, json_integer(replicas)) == 0 ? 0 : AB_ENOMEM;
}

void kscale_apply(const struct kscale *ks, const char *ns, const char *pool, json_t *want)
{
    char key[400];
    json_t *v, *spec = json_object_get(want, "spec");

    key_of(key, sizeof(key), ns, pool);
    if (spec && (v = json_object_get(ks->replicas, key)))
        json_object_set_new(spec, "replicas", json_integer(json_integer_value(v)));
}

void kscale_pool_info(const struct kscale *ks, const char *ns, const char *pool, bool *autoscaling,
                      int *headroom)
{
    char key[400];
    json_t *v;

    key_of(key, sizeof(key), ns, pool);
    v = json_object_get(ks->info, key);
    *autoscaling = v && json_is_true(json_array_get(v, 0));
    *headroom = v ? (int)json_integer_value(json_array_get(v, 1)) : 0;
}
