/* SandboxPool specs (also the `spec` of an Env member) and SandboxTemplate
 * specs, read through the walker. */
#include "agent/runtime/local/mf_parse.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <string.h>

/* ---- shared spec pieces ----------------------------------------------------- */

struct runtimes_ctx {
    struct mf_runtime *rt;
    int *n;
    struct mf_runtime *cur;
    bool has_name;
};

static int runtime_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct runtimes_ctx *c = ctx;
    int64_t port = 0;
    char buf[MF_STR_MAX];
    int rc;

    if (!strcmp(k, "name")) {
        c->has_name = v != NULL;
        return mfw_str(w, v, c->cur->name, sizeof(c->cur->name));
    }
    if (!strcmp(k, "port")) {
        rc = mfw_int(w, v, 1, 65535, &port);
        c->cur->port = (int32_t)port;
        return rc;
    }
    if (!strcmp(k, "protocol"))
        return mfw_str(w, v, c->cur->protocol, sizeof(c->cur->protocol));
    if (!strcmp(k, "description") || !strcmp(k, "logDir"))
        return mfw_str(w, v, buf, sizeof(buf));
    if (!strcmp(k, "readinessProbe"))
        return mfw_need_mapping(w, v);
    if (!strcmp(k, "config"))
        return 0; /* runtime-specific, any JSON */
    return mfw_unknown(w);
}

static int runtime_item(struct mf_walk *w, int i, yaml_node_t *v, void *ctx)
{
    struct runtimes_ctx *c = ctx;
    int j, rc;

    c->cur = &c->rt[*c->n];
    memset(c->cur, 0, sizeof(*c->cur));
    ab_strlcpy(c->cur->protocol, "TCP", sizeof(c->cur->protocol));
    c->has_name = false;
    if ((rc = mfw_each_pair(w, v, runtime_pair, c)) != 0)
        return rc;
    if (!c->has_name || !c->cur->name[0])
        return mfw_fail(w, v, "field '%s.name' is required", w->path);
    for (j = 0; j < *c->n; j++)
        if (!strcmp(c->rt[j].name, c->cur->name))
            return mfw_fail(w, v, "field '%s.name': runtime '%s' is listed twice", w->path,
                            c->cur->name);
    (*c->n)++;
    (void)i;
    return 0;
}

static int get_runtimes(struct mf_walk *w, yaml_node_t *v, struct mf_runtime *rt, int *n)
{
    struct runtimes_ctx c = {rt, n, NULL, false};

    return v ? mfw_each_item(w, v, MF_RUNTIMES_MAX - *n, runtime_item, &c) : 0;
}

static int egress_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    (void)ctx;
    if (!strcmp(k, "allowedDomains") || !strcmp(k, "allowedCIDRs") || !strcmp(k, "deniedCIDRs"))
        return mfw_check_str_list(w, v);
    return mfw_unknown(w);
}

int mf_netpol_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    bool *disable = ctx, b = false;

    if (!strcmp(k, "disableEgress"))
        return mfw_bool(w, v, disable);
    if (!strcmp(k, "allowPrivateNetworks"))
        return mfw_bool(w, v, &b);
    if (!strcmp(k, "egress"))
        return v ? mfw_each_pair(w, v, egress_pair, NULL) : 0;
    if (!strcmp(k, "secretInjection"))
        return mfw_need_mapping(w, v);
    return mfw_unknown(w);
}

int mf_pool_spec_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_pool_spec *p = ctx;

    if (!strcmp(k, "replicas")) {
        p->has_replicas = v != NULL;
        return mfw_i32(w, v, 0, &p->replicas);
    }
    if (!strcmp(k, "minReplicas"))
        return mfw_i32(w, v, 0, &p->min_replicas);
    if (!strcmp(k, "maxReplicas"))
        return mfw_i32(w, v, 0, &p->max_replicas);
    if (!strcmp(k, "templateName"))
        return mfw_str(w, v, p->template_name, sizeof(p->template_name));
    if (!strcmp(k, "defaultStartupTimeout"))
        return mfw_duration(w, v, &p->startup_timeout_ms);
    if (!strcmp(k, "defaultIdleTimeout"))
        return mfw_duration(w, v, &p->idle_timeout_ms);
    if (!strcmp(k, "podCreationImagePolicy"))
        return mfw_image_policy(w, v, &p->image_policy);
    if (!strcmp(k, "maxUnavailable"))
        return mfw_check_int_or_percent(w, v);
    if (!strcmp(k, "networkPolicy"))
        return v ? mfw_each_pair(w, v, mf_netpol_pair, &p->disable_egress) : 0;
    if (!strcmp(k, "autoscaling") || !strcmp(k, "template"))
        return mfw_need_mapping(w, v); /* deprecated / schemaless */
    if (!strcmp(k, "idleImage"))
        return mfw_str(w, v, p->idle_image, sizeof(p->idle_image));
    if (!strcmp(k, "runtimes"))
        return get_runtimes(w, v, p->runtimes, &p->nruntimes);
    return mfw_unknown(w);
}

void mf_pool_spec_init(struct mf_pool_spec *p)
{
    memset(p, 0, sizeof(*p));
    p->min_replicas = -1;
    p->max_replicas = -1;
}

/* ---- SandboxTemplate ----------------------------------------------------------- */

static int vis_rule_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    char buf[MF_STR_MAX];

    (void)ctx;
    if (!strcmp(k, "team"))
        return mfw_str(w, v, buf, sizeof(buf));
    if (!strcmp(k, "users"))
        return mfw_check_str_list(w, v);
    return mfw_unknown(w);
}

static int vis_rule_item(struct mf_walk *w, int i, yaml_node_t *v, void *ctx)
{
    (void)i;
    return mfw_each_pair(w, v, vis_rule_pair, ctx);
}

static int vis_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    if (!strcmp(k, "rules"))
        return v ? mfw_each_item(w, v, LIST_ITEMS_MAX, vis_rule_item, ctx) : 0;
    return mfw_unknown(w);
}

int mf_tpl_spec_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_template *t = ctx;

    if (!strcmp(k, "template"))
        return mfw_need_mapping(w, v);
    if (!strcmp(k, "idleImage"))
        return mfw_str(w, v, t->idle_image, sizeof(t->idle_image));
    if (!strcmp(k, "runtimes"))
        return get_runtimes(w, v, t->runtimes, &t->nruntimes);
    if (!strcmp(k, "version"))
        return mfw_str(w, v, t->version, sizeof(t->version));
    if (!strcmp(k, "description"))
        return mfw_str(w, v, t->description, sizeof(t->description));
    if (!strcmp(k, "visibility"))
        return v ? mfw_each_pair(w, v, vis_pair, NULL) : 0;
    return mfw_unknown(w);
}
