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

/* A probe port: int-or-string on Kubernetes; a named port means a container
 * port, which the local runtime has no list of, so only numbers. */
static int probe_port(struct mf_walk *w, yaml_node_t *v, int32_t *port)
{
    int64_t p = 0;
    int rc;

    if (!v)
        return mfw_fail_field(w, w->key, "is required");
    if (v->type == YAML_SCALAR_NODE && v->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return mfw_fail_field(w, v,
                              "must be a port number: named ports are not supported by the "
                              "local runtime");
    rc = mfw_int(w, v, 1, 65535, &p);
    *port = (int32_t)p;
    return rc;
}

/* A check's host: the sandbox's own loopback only. */
static int probe_host(struct mf_walk *w, yaml_node_t *v)
{
    char buf[MF_STR_MAX];

    if (mfw_str(w, v, buf, sizeof(buf)) != 0)
        return AB_EINVAL;
    if (v && strcmp(buf, "127.0.0.1") != 0 && strcmp(buf, "localhost") != 0)
        return mfw_fail_field(w, v,
                              "must be 127.0.0.1 or absent: the check runs on the sandbox's "
                              "loopback");
    return 0;
}

static int http_get_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_probe *p = ctx;
    char buf[MF_STR_MAX];

    if (!strcmp(k, "port"))
        return probe_port(w, v, &p->port);
    if (!strcmp(k, "path")) {
        if (mfw_str(w, v, p->path, sizeof(p->path)) != 0)
            return AB_EINVAL;
        if (v && p->path[0] != '/')
            return mfw_fail_field(w, v, "must start with '/'");
        if (strpbrk(p->path, " \r\n\t"))
            return mfw_fail_field(w, v, "may not contain spaces or line breaks");
        return 0;
    }
    if (!strcmp(k, "scheme")) {
        if (mfw_str(w, v, buf, sizeof(buf)) != 0)
            return AB_EINVAL;
        if (v && strcmp(buf, "HTTP") != 0)
            return mfw_fail_field(w, v, "must be HTTP: the local runtime checks plain HTTP only");
        return 0;
    }
    if (!strcmp(k, "host"))
        return probe_host(w, v);
    if (!strcmp(k, "httpHeaders"))
        return mfw_unsupported(w);
    return mfw_unknown(w);
}

static int tcp_socket_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_probe *p = ctx;

    if (!strcmp(k, "port"))
        return probe_port(w, v, &p->port);
    if (!strcmp(k, "host"))
        return probe_host(w, v);
    return mfw_unknown(w);
}

static int probe_handler(struct mf_walk *w, yaml_node_t *v, struct mf_probe *p,
                         enum mf_probe_kind kind, mfw_pair_fn fn)
{
    if (!v)
        return 0;
    if (p->kind != MF_PROBE_NONE)
        return mfw_fail_field(w, w->key,
                              "is a second check: a probe has one of httpGet, "
                              "tcpSocket");
    p->kind = kind;
    p->port = 0;
    if (kind == MF_PROBE_HTTP)
        ab_strlcpy(p->path, "/", sizeof(p->path));
    if (mfw_each_pair(w, v, fn, p) != 0)
        return AB_EINVAL;
    if (p->port == 0)
        return mfw_fail(w, v, "field '%s.port' is required", w->path);
    return 0;
}

static int probe_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_probe *p = ctx;
    int32_t x = 0;

    if (!strcmp(k, "httpGet"))
        return probe_handler(w, v, p, MF_PROBE_HTTP, http_get_pair);
    if (!strcmp(k, "tcpSocket"))
        return probe_handler(w, v, p, MF_PROBE_TCP, tcp_socket_pair);
    if (!strcmp(k, "exec") || !strcmp(k, "grpc"))
        return v ? mfw_unsupported(w) : 0;
    if (!strcmp(k, "periodSeconds"))
        return mfw_i32(w, v, 1, &p->period_s);
    if (!strcmp(k, "timeoutSeconds"))
        return mfw_i32(w, v, 1, &p->timeout_s);
    if (!strcmp(k, "initialDelaySeconds"))
        return mfw_i32(w, v, 0, &p->initial_delay_s);
    /* thresholds and the grace period mean nothing before the first pass:
     * the startup timeout bounds the wait (checked, not used) */
    if (!strcmp(k, "successThreshold") || !strcmp(k, "failureThreshold") ||
        !strcmp(k, "terminationGracePeriodSeconds"))
        return mfw_i32(w, v, 0, &x);
    return mfw_unknown(w);
}

static int runtime_config_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_runtime *rt = ctx;

    if (!strcmp(k, "startCommand")) {
        if (mfw_str(w, v, rt->start_command, sizeof(rt->start_command)) != 0)
            return AB_EINVAL;
        if (v && !rt->start_command[0])
            return mfw_fail_field(w, v, "must not be empty");
        return 0;
    }
    return 0; /* the rest is runtime-specific, any JSON */
}

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
    if (!strcmp(k, "readinessProbe")) {
        if (!v)
            return 0;
        if (mfw_each_pair(w, v, probe_pair, &c->cur->probe) != 0)
            return AB_EINVAL;
        if (c->cur->probe.kind == MF_PROBE_NONE)
            return mfw_fail_field(w, v, "needs httpGet or tcpSocket");
        return 0;
    }
    if (!strcmp(k, "config")) /* runtime-specific, any JSON; startCommand is ours */
        return v && v->type == YAML_MAPPING_NODE ? mfw_each_pair(w, v, runtime_config_pair, c->cur)
                                                 : 0;
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
    for (j = 0; j < *c->n; j++) {
        if (!strcmp(c->rt[j].name, c->cur->name))
            return mfw_fail(w, v, "field '%s.name': runtime '%s' is listed twice", w->path,
                            c->cur->name);
        /* one start command per sandbox: its output is the one the create
         * error quotes */
        if (c->rt[j].start_command[0] && c->cur->start_command[0])
            return mfw_fail(w, v,
                            "field '%s.config.startCommand': runtime '%s' has one already; "
                            "a sandbox runs at most one start command",
                            w->path, c->rt[j].name);
    }
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
