/* SandboxEnv specs: members per cluster segment, their sizing rendered into
 * resource keys and pool names (reference §6.4), scaling groups, overrides. */
#include "agent/runtime/local/mf_parse.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- SandboxEnv ------------------------------------------------------------------ */

/* Sizing of one member as written, before rendering. */
struct mf_member_in {
    struct mf_member *m;
    bool has_name;
    bool has_group;
    bool has_inline;
    bool has_type;
    int64_t req_cpu, req_mem, lim_cpu, lim_mem;
    int64_t disk, pids; /* ephemeral-storage and pids: the limit, else the request */
    bool req_any, lim_any;
    yaml_node_t *node;
    char path[WALK_PATH_MAX];
};

struct res_ctx {
    struct mf_member_in *mi;
    bool limits;
};

static int quantity_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct res_ctx *c = ctx;
    const char *s;
    int64_t x = 0;
    int rc;

    if (!v)
        return 0;
    if (!(s = mfw_scalar(w, v)))
        return AB_EINVAL;
    if (!strcmp(k, "cpu"))
        rc = mf_quantity_milli(s, &x);
    else
        rc = mf_quantity_bytes(s, &x);
    if (rc != 0)
        return mfw_fail_field(w, v,
                              "must be a non-negative quantity such as 500m, 2 or 8Gi (got "
                              "'%.40s')",
                              s);
    if (!strcmp(k, "cpu")) {
        *(c->limits ? &c->mi->lim_cpu : &c->mi->req_cpu) = x;
        *(c->limits ? &c->mi->lim_any : &c->mi->req_any) = true;
    } else if (!strcmp(k, "memory")) {
        *(c->limits ? &c->mi->lim_mem : &c->mi->req_mem) = x;
        *(c->limits ? &c->mi->lim_any : &c->mi->req_any) = true;
    } else if (!strcmp(k, "ephemeral-storage") && (c->limits || c->mi->disk == 0)) {
        c->mi->disk = x; /* the sandbox's writable space (home + /tmp) */
    } else if (!strcmp(k, "pids") && (c->limits || c->mi->pids == 0)) {
        c->mi->pids = x; /* the sandbox cgroup's pids.max */
    }
    return 0;
}

static int claim_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    char buf[MF_STR_MAX];

    (void)ctx;
    if (!strcmp(k, "name") || !strcmp(k, "request"))
        return mfw_str(w, v, buf, sizeof(buf));
    return mfw_unknown(w);
}

static int claim_item(struct mf_walk *w, int i, yaml_node_t *v, void *ctx)
{
    (void)i;
    return mfw_each_pair(w, v, claim_pair, ctx);
}

static int resources_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct res_ctx c = {ctx, false};

    if (!strcmp(k, "requests") || !strcmp(k, "limits")) {
        c.limits = k[0] == 'l';
        return v ? mfw_each_pair(w, v, quantity_pair, &c) : 0;
    }
    if (!strcmp(k, "claims"))
        return v ? mfw_each_item(w, v, LIST_ITEMS_MAX, claim_item, NULL) : 0;
    return mfw_unknown(w);
}

static int update_strategy_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    bool b;

    (void)ctx;
    if (!strcmp(k, "autoUpdate"))
        return mfw_bool(w, v, &b);
    if (!strcmp(k, "maxUnavailable"))
        return mfw_check_int_or_percent(w, v);
    return mfw_unknown(w);
}

/* The sizing fields shared by `config` and the legacy flat member. */
static int member_sizing_pair(struct mf_walk *w, const char *k, yaml_node_t *v,
                              struct mf_member_in *mi, bool *handled)
{
    struct mf_member *m = mi->m;
    char buf[MF_STR_MAX];
    int32_t x = 0;

    *handled = true;
    if (!strcmp(k, "instanceType")) {
        mi->has_type = v != NULL;
        return mfw_str(w, v, buf, sizeof(buf));
    }
    if (!strcmp(k, "multiplier"))
        return mfw_i32(w, v, 0, &x);
    if (!strcmp(k, "inlineResources")) {
        mi->has_inline = v != NULL;
        return v ? mfw_each_pair(w, v, resources_pair, mi) : 0;
    }
    if (!strcmp(k, "scalingGroup")) {
        mi->has_group = v != NULL;
        return mfw_str(w, v, m->scaling_group, sizeof(m->scaling_group));
    }
    if (!strcmp(k, "minReplicas"))
        return mfw_i32(w, v, 0, &m->min_replicas);
    if (!strcmp(k, "maxReplicas"))
        return mfw_i32(w, v, 0, &m->max_replicas);
    if (!strcmp(k, "priority"))
        return mfw_i32(w, v, INT32_MIN, &m->priority);
    if (!strcmp(k, "scaleUpPriority")) {
        m->has_up_priority = v != NULL;
        return mfw_i32(w, v, INT32_MIN, &m->up_priority);
    }
    if (!strcmp(k, "scaleDownPriority")) {
        m->has_down_priority = v != NULL;
        return mfw_i32(w, v, INT32_MIN, &m->down_priority);
    }
    *handled = false;
    return 0;
}

static int member_config_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_member_in *mi = ctx;
    json_t *scratch = NULL;
    bool handled;
    int rc;

    rc = member_sizing_pair(w, k, v, mi, &handled);
    if (handled)
        return rc;
    if (!strcmp(k, "labels") || !strcmp(k, "annotations")) {
        rc = mfw_map(w, v, &scratch);
        json_decref(scratch);
        return rc;
    }
    if (!strcmp(k, "updateStrategy"))
        return v ? mfw_each_pair(w, v, update_strategy_pair, NULL) : 0;
    return mfw_unknown(w);
}

static int member_meta_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    json_t *scratch = NULL;
    int rc;

    (void)ctx;
    if (!strcmp(k, "labels") || !strcmp(k, "annotations")) {
        rc = mfw_map(w, v, &scratch);
        json_decref(scratch);
        return rc;
    }
    return mfw_unknown(w);
}

static int member_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_member_in *mi = ctx;
    bool handled;
    int rc;

    if (!strcmp(k, "name")) {
        mi->has_name = v != NULL;
        return mfw_str(w, v, mi->m->name, sizeof(mi->m->name));
    }
    if (!strcmp(k, "config"))
        return v ? mfw_each_pair(w, v, member_config_pair, mi) : 0;
    if (!strcmp(k, "metadata"))
        return v ? mfw_each_pair(w, v, member_meta_pair, NULL) : 0;
    if (!strcmp(k, "spec")) {
        if (!v)
            return 0;
        mi->m->has_spec = true;
        if ((rc = mfw_each_pair(w, v, mf_pool_spec_pair, &mi->m->spec)) != 0)
            return rc;
        if (!mi->m->spec.has_replicas)
            return mfw_fail(w, v, "field '%s.replicas' is required", w->path);
        return 0;
    }
    rc = member_sizing_pair(w, k, v, mi, &handled); /* legacy flat member */
    return handled ? rc : mfw_unknown(w);
}

static int member_item(struct mf_walk *w, int i, yaml_node_t *v, void *ctx)
{
    struct mf_env_ctx *e = ctx;
    struct mf_member *m = &e->cur->members[e->cur->nmembers];
    struct mf_member_in *mi;
    int rc;

    if (e->nins == e->inscap) {
        int cap = e->inscap ? e->inscap * 2 : 16;
        struct mf_member_in *n = realloc(e->ins, (size_t)cap * sizeof(*n));
        if (!n)
            return AB_ENOMEM;
        e->ins = n;
        e->inscap = cap;
    }
    mi = &e->ins[e->nins];
    memset(mi, 0, sizeof(*mi));
    memset(m, 0, sizeof(*m));
    mf_pool_spec_init(&m->spec);
    m->min_replicas = m->max_replicas = -1;
    m->line = (int)v->start_mark.line + 1;
    mi->m = m;
    mi->node = v;
    ab_strlcpy(mi->path, w->path, sizeof(mi->path));
    if ((rc = mfw_each_pair(w, v, member_pair, mi)) != 0)
        return rc;
    if (mi->has_name && !m->name[0])
        return mfw_fail(w, v,
                        "field '%s.name' must not be empty (omit it: it is <env>-<resource key>)",
                        w->path);
    e->cur->nmembers++;
    e->nins++;
    (void)i;
    return 0;
}

static int cluster_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_env_ctx *e = ctx;

    if (!strcmp(k, "clusterID")) {
        e->has_id = v != NULL;
        return mfw_str(w, v, e->cur->id, sizeof(e->cur->id));
    }
    if (!strcmp(k, "members")) {
        if (!v)
            return 0;
        if (!e->cur->members &&
            !(e->cur->members = calloc(MF_MEMBERS_MAX, sizeof(*e->cur->members))))
            return AB_ENOMEM;
        return mfw_each_item(w, v, MF_MEMBERS_MAX - e->cur->nmembers, member_item, e);
    }
    return mfw_unknown(w);
}

static int cluster_item(struct mf_walk *w, int i, yaml_node_t *v, void *ctx)
{
    struct mf_env_ctx *e = ctx;
    int j, rc;

    e->cur = &e->env->clusters[e->env->nclusters];
    memset(e->cur, 0, sizeof(*e->cur));
    e->env->nclusters++; /* counted at once so the env frees its members on failure */
    e->has_id = false;
    if ((rc = mfw_each_pair(w, v, cluster_pair, e)) != 0)
        return rc;
    if (!e->has_id || !e->cur->id[0])
        return mfw_fail(w, v, "field '%s.clusterID' is required", w->path);
    for (j = 0; j < e->env->nclusters - 1; j++)
        if (!strcmp(e->env->clusters[j].id, e->cur->id))
            return mfw_fail(w, v, "field '%s.clusterID': cluster '%s' is listed twice", w->path,
                            e->cur->id);
    (void)i;
    return 0;
}

static int scale_up_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_group *g = ctx;
    const char *s;

    if (!strcmp(k, "mode")) {
        if (!v)
            return 0;
        if (!(s = mfw_scalar(w, v)))
            return AB_EINVAL;
        if (!strcmp(s, "Default"))
            g->up_mode = MF_SCALE_DEFAULT;
        else if (!strcmp(s, "Conservative"))
            g->up_mode = MF_SCALE_CONSERVATIVE;
        else if (!strcmp(s, "Aggressive"))
            g->up_mode = MF_SCALE_AGGRESSIVE;
        else
            return mfw_fail_field(w, v, "must be Conservative, Default or Aggressive (got '%.40s')",
                                  s);
        return 0;
    }
    if (!strcmp(k, "cooldownSeconds"))
        return mfw_i32(w, v, 0, &g->cooldown_s);
    if (!strcmp(k, "idleThresholdSeconds"))
        return mfw_i32(w, v, 0, &g->idle_threshold_s);
    if (!strcmp(k, "idleZeroQuietWindowSeconds"))
        return mfw_i32(w, v, 0, &g->quiet_window_s);
    if (!strcmp(k, "saturationCooldownSeconds"))
        return mfw_i32(w, v, 0, &g->saturation_s);
    return mfw_unknown(w);
}

static int scale_down_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_group *g = ctx;

    if (!strcmp(k, "idleTimeoutSeconds"))
        return mfw_i32(w, v, 0, &g->down_idle_timeout_s);
    if (!strcmp(k, "stabilizationSeconds"))
        return mfw_i32(w, v, 0, &g->stabilization_s);
    if (!strcmp(k, "protectionWindowSeconds"))
        return mfw_i32(w, v, 0, &g->protection_s);
    return mfw_unknown(w);
}

static int group_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_env_ctx *e = ctx;
    struct mf_group *g = e->gcur;

    if (!strcmp(k, "name")) {
        e->has_gname = v != NULL;
        return mfw_str(w, v, g->name, sizeof(g->name));
    }
    if (!strcmp(k, "enabled"))
        return mfw_bool(w, v, &g->enabled);
    if (!strcmp(k, "minReplicas"))
        return mfw_i32(w, v, 0, &g->min_replicas);
    if (!strcmp(k, "maxReplicas")) {
        e->has_gmax = v != NULL;
        return mfw_i32(w, v, 0, &g->max_replicas);
    }
    if (!strcmp(k, "scaleUpPolicy"))
        return v ? mfw_each_pair(w, v, scale_up_pair, g) : 0;
    if (!strcmp(k, "scaleDownPolicy"))
        return v ? mfw_each_pair(w, v, scale_down_pair, g) : 0;
    return mfw_unknown(w);
}

static int group_item(struct mf_walk *w, int i, yaml_node_t *v, void *ctx)
{
    struct mf_env_ctx *e = ctx;
    struct mf_group *g = &e->env->groups[e->env->ngroups];
    int j, rc;

    memset(g, 0, sizeof(*g));
    g->max_replicas = -1;
    g->cooldown_s = g->idle_threshold_s = g->quiet_window_s = g->saturation_s = -1;
    g->down_idle_timeout_s = g->stabilization_s = g->protection_s = -1;
    g->line = (int)v->start_mark.line + 1;
    e->gcur = g;
    e->has_gname = e->has_gmax = false;
    if ((rc = mfw_each_pair(w, v, group_pair, e)) != 0)
        return rc;
    if (!e->has_gname || !g->name[0])
        return mfw_fail(w, v, "field '%s.name' is required", w->path);
    if (g->up_mode == MF_SCALE_AGGRESSIVE && !e->has_gmax)
        return mfw_fail(w, v,
                        "field '%s.maxReplicas' is required with scaleUpPolicy.mode "
                        "Aggressive (it doubles every cooldown)",
                        w->path);
    if (g->max_replicas >= 0 && g->min_replicas > g->max_replicas)
        return mfw_fail(w, v, "field '%s.minReplicas' (%d) exceeds maxReplicas (%d)", w->path,
                        g->min_replicas, g->max_replicas);
    for (j = 0; j < e->env->ngroups; j++)
        if (!strcmp(e->env->groups[j].name, g->name))
            return mfw_fail(w, v, "field '%s.name': group '%s' is listed twice", w->path, g->name);
    e->env->ngroups++;
    (void)i;
    return 0;
}

static int autoscaling_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_env_ctx *e = ctx;
    bool b;

    if (!strcmp(k, "groups"))
        return v ? mfw_each_item(w, v, MF_GROUPS_MAX - e->env->ngroups, group_item, e) : 0;
    if (!strcmp(k, "enabled"))
        return mfw_bool(w, v, &b); /* earlier revisions: one switch per Env */
    return mfw_unknown(w);
}

static int volume_item(struct mf_walk *w, int i, yaml_node_t *v, void *ctx)
{
    (void)i;
    (void)ctx;
    return mfw_fail_field(w, v,
                          "is not supported by the local runtime (PVC mounts need the kube "
                          "runtime); remove spec.overrides.volumes");
}

static int gateway_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    if (!strcmp(k, "enabled"))
        return mfw_bool(w, v, ctx);
    return mfw_unknown(w);
}

static int overrides_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_env *env = ctx;

    if (!strcmp(k, "image"))
        return mfw_str(w, v, env->image, sizeof(env->image));
    if (!strcmp(k, "podCreationImagePolicy")) {
        env->has_image_policy = v != NULL;
        return mfw_image_policy(w, v, &env->image_policy);
    }
    if (!strcmp(k, "defaultStartupTimeout"))
        return mfw_duration(w, v, &env->startup_timeout_ms);
    if (!strcmp(k, "defaultIdleTimeout"))
        return mfw_duration(w, v, &env->idle_timeout_ms);
    if (!strcmp(k, "gateway"))
        return v ? mfw_each_pair(w, v, gateway_pair, &env->gateway_enabled) : 0;
    if (!strcmp(k, "networkPolicy"))
        return v ? mfw_each_pair(w, v, mf_netpol_pair, &env->disable_egress) : 0;
    if (!strcmp(k, "updateStrategy"))
        return v ? mfw_each_pair(w, v, update_strategy_pair, NULL) : 0;
    if (!strcmp(k, "volumes"))
        return v ? mfw_each_item(w, v, 8, volume_item, NULL) : 0;
    if (!strcmp(k, "imagePullSecret") || !strcmp(k, "envd"))
        return 0; /* REST-level settings; nothing for the local runtime */
    return mfw_unknown(w);
}

static int template_ref_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_env_ctx *e = ctx;

    if (!strcmp(k, "name")) {
        e->has_ref_name = v != NULL;
        return mfw_str(w, v, e->env->template_ref, sizeof(e->env->template_ref));
    }
    if (!strcmp(k, "version"))
        return mfw_str(w, v, e->env->template_version, sizeof(e->env->template_version));
    return mfw_unknown(w);
}

static int defaults_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    char buf[MF_STR_MAX];
    int32_t x;

    (void)ctx;
    if (!strcmp(k, "instanceType"))
        return mfw_str(w, v, buf, sizeof(buf));
    if (!strcmp(k, "multiplier"))
        return mfw_i32(w, v, 1, &x);
    return mfw_unknown(w);
}

int mf_env_spec_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_env_ctx *e = ctx;
    const char *s;

    if (!strcmp(k, "templateRef")) {
        if (!v)
            return 0;
        return mfw_each_pair(w, v, template_ref_pair, e);
    }
    if (!strcmp(k, "mode")) {
        if (!v)
            return 0;
        if (!(s = mfw_scalar(w, v)))
            return AB_EINVAL;
        if (!strcmp(s, "WarmPool"))
            return 0;
        if (!strcmp(s, "OnDemandJob"))
            return mfw_fail_field(w, v,
                                  "is OnDemandJob, which is reserved; only WarmPool is "
                                  "implemented");
        return mfw_fail_field(w, v, "must be WarmPool or OnDemandJob (got '%.40s')", s);
    }
    if (!strcmp(k, "defaults"))
        return v ? mfw_each_pair(w, v, defaults_pair, NULL) : 0;
    if (!strcmp(k, "clusters")) {
        if (!v)
            return 0;
        if (!e->env->clusters &&
            !(e->env->clusters = calloc(MF_CLUSTERS_MAX, sizeof(*e->env->clusters))))
            return AB_ENOMEM;
        return mfw_each_item(w, v, MF_CLUSTERS_MAX - e->env->nclusters, cluster_item, e);
    }
    if (!strcmp(k, "autoscaling")) {
        if (!v)
            return 0;
        if (!e->env->groups && !(e->env->groups = calloc(MF_GROUPS_MAX, sizeof(*e->env->groups))))
            return AB_ENOMEM;
        return mfw_each_pair(w, v, autoscaling_pair, e);
    }
    if (!strcmp(k, "overrides"))
        return v ? mfw_each_pair(w, v, overrides_pair, e->env) : 0;
    return mfw_unknown(w);
}

/* Which cluster segment member m is in (members live in per-cluster arrays). */
static int cluster_of(const struct mf_env *env, const struct mf_member *m)
{
    for (int c = 0; c < env->nclusters; c++)
        if (m >= env->clusters[c].members &&
            m < env->clusters[c].members + env->clusters[c].nmembers)
            return c;
    return -1;
}

/* Rules that need the whole object: sizing → resource key → pool name (§6.4),
 * scaling groups that some member uses. */
int mf_env_finish(struct mf_walk *w, struct mf_object *o, struct mf_env_ctx *e, yaml_node_t *spec)
{
    struct mf_env *env = &o->u.env;
    char pool[MF_TEMPLATE_NAME_MAX + MF_KEY_MAX + 2];
    int i, j, c, m;

    if (strlen(o->name) > MF_ENV_NAME_MAX)
        return mfw_fail(w, spec, "env name \"%s\" exceeds %d-char cap", o->name, MF_ENV_NAME_MAX);
    if (!e->has_ref_name || !env->template_ref[0])
        return mfw_fail(w, spec, "field 'spec.templateRef.name' is required");
    for (i = 0; i < e->nins; i++) {
        struct mf_member_in *mi = &e->ins[i];
        struct mf_member *mb = mi->m;
        bool use_req = mi->req_any;

        if (!mi->has_inline) {
            if (mi->has_type)
                return mfw_fail(w, mi->node,
                                "field '%s.config.instanceType' needs an instance "
                                "catalogue, which the local runtime does not have; "
                                "give config.inlineResources",
                                mi->path);
            return mfw_fail(w, mi->node,
                            "field '%s': one of instanceType or inlineResources must "
                            "be supplied",
                            mi->path);
        }
        mb->cpu_milli = use_req ? mi->req_cpu : mi->lim_cpu;
        mb->mem_bytes = use_req ? mi->req_mem : mi->lim_mem;
        mb->disk_bytes = mi->disk;
        mb->pids_max = mi->pids;
        if (mf_resource_key(mb->cpu_milli, mb->mem_bytes, mb->resource_key,
                            sizeof(mb->resource_key)) != 0)
            return mfw_fail(w, mi->node,
                            "field '%s.config.inlineResources': could not derive a "
                            "non-empty ResourceKey from the supplied resources",
                            mi->path);
        snprintf(pool, sizeof(pool), "%s-%s", o->name, mb->resource_key);
        if (!mi->has_name)
            ab_strlcpy(mb->name, pool, sizeof(mb->name)); /* written by the API: rendered here */
        if (strcmp(pool, mb->name) != 0)
            return mfw_fail(w, mi->node,
                            "field '%s.name' must be '%s' (<env>-<resource key>), "
                            "not '%s'",
                            mi->path, pool, mb->name);
        if (!mi->has_group)
            ab_strlcpy(mb->scaling_group, mb->resource_key, sizeof(mb->scaling_group));
        for (j = 0; j < i; j++)
            if (!strcmp(e->ins[j].m->name, mb->name) &&
                cluster_of(env, e->ins[j].m) == cluster_of(env, mb))
                return mfw_fail(w, mi->node, "field '%s.name': member '%s' is listed twice",
                                mi->path, mb->name);
        if (mb->min_replicas >= 0 && mb->max_replicas >= 0 && mb->min_replicas > mb->max_replicas)
            return mfw_fail(w, mi->node,
                            "field '%s.config.minReplicas' (%d) exceeds maxReplicas "
                            "(%d)",
                            mi->path, mb->min_replicas, mb->max_replicas);
    }
    for (j = 0; j < env->ngroups; j++) {
        bool used = false;
        for (c = 0; c < env->nclusters && !used; c++)
            for (m = 0; m < env->clusters[c].nmembers && !used; m++)
                used = !strcmp(env->clusters[c].members[m].scaling_group, env->groups[j].name);
        if (!used) {
            yaml_node_t at = {0};
            at.start_mark.line = (size_t)(env->groups[j].line - 1);
            return mfw_fail(w, &at,
                            "field 'spec.autoscaling.groups[%d].name': group '%s' is used "
                            "by no member's scalingGroup",
                            j, env->groups[j].name);
        }
    }
    return 0;
}
