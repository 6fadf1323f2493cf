/* Native API, the cluster-level reads and the sandbox extras of reference
 * §4.1/§4.2, answering as the seed does where a feature is off:
 *
 *   GET /ping                          {"status":"ok"} (no key: a liveness probe)
 *   GET /v1/sandbox-templates[/{name}] the catalogue (the runtime's SandboxTemplates)
 *   GET /v1/clusters                   {clusters:[{id,name,local}]}: this cluster
 *   GET /v1/feature-gates              {quota, instanceType, volumes}: all false
 *   GET /v1/quotas                     501 naming the missing quota provider
 *   GET /v1/instancetypes              {items:[], total:0} (no instance catalogue)
 *   GET /v1/volumes                    {items:[], total:0} (no volume provider)
 *   GET /v1/statistics/sandboxes       {statistics:{namespace,total,byStatus}}
 *   PUT /v1/sandboxes/{id}/timeout     {timeout:"30m"} ("0" removes it) → 204
 *   GET /v1/sandboxes/{id}/logs        ?lines=0..10000 → {logs:[{timestamp,line}]}
 *   GET /v1/sandboxes/{id}/is_ready    deprecated: 200 Running / 503
 *   (exec and exec-token: exec.c)
 *
 * Loop thread only; the log read runs on a loop worker. */
#include "agent/native/native.h"
#include "agent/native/sandboxes.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/http.h"
#include "agentbox/loop.h"
#include "agentbox/visibility.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOG_LINES_MAX 10000
#define TIMEOUT_MAX_S (366LL * 24 * 3600)

static void h_ping(struct http_exchange *ex, void *arg)
{
    (void)arg;
    http_respond_json(ex, 200, json_pack("{s:s}", "status", "ok"));
}

/* ---- templates ----------------------------------------------------------------------------- */

struct tpl_ctx {
    const struct agent_principal *p;
    json_t *items;
};

/* Reference §6.1 (agentbox/visibility.h, the hub's rule too). */
bool native_template_visible(const struct agent_principal *p, const json_t *spec)
{
    return vis_template_visible(spec, p->admin, p->team, p->user);
}

static void tpl_one(void *arg, const struct rt_object *o)
{
    struct tpl_ctx *c = arg;
    const json_t *spec = json_object_get(o->obj, "spec");
    const json_t *meta = json_object_get(o->obj, "metadata");
    json_t *t;

    if (!native_template_visible(c->p, spec))
        return; /* as if it were not there */
    t = json_pack("{s:s}", "name", o->name);

    static const char *const fields[] = {"version", "description", "runtimes", "idleImage",
                                         "visibility"};
    for (size_t i = 0; i < AB_ARRAY_LEN(fields); i++)
        if (json_object_get(spec, fields[i]))
            json_object_set(t, fields[i], json_object_get(spec, fields[i]));
    if (json_object_get(meta, "annotations"))
        json_object_set(t, "annotations", json_object_get(meta, "annotations"));
    /* hub-synced templates carry the label (agent/catalogue.h) */
    const char *src = json_string_value(
        json_object_get(json_object_get(meta, "labels"), "agentbox.io/sync-source"));
    json_object_set_new(t, "syncSource",
                        json_string(src && !strcmp(src, "global") ? "global" : "local"));
    json_array_append_new(c->items, t);
}

static void templates_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    const char *name = http_param(ex, "name");
    struct tpl_ctx c = {p, json_array()};

    if (n->d.rt)
        rt_objects(n->d.rt, RT_OBJ_TEMPLATE, NULL, name, tpl_one, &c);
    if (!name) {
        http_respond_json(
            ex, 200,
            json_pack("{s:o,s:i}", "items", c.items, "total", (int)json_array_size(c.items)));
        return;
    }
    if (json_array_size(c.items) == 0)
        native_error(ex, 404, NULL, NULL, "sandbox template '%.200s' not found on cluster '%s'",
                     name, n->d.cluster);
    else
        http_respond_json(ex, 200, json_pack("{s:O}", "template", json_array_get(c.items, 0)));
    json_decref(c.items);
}

/* ---- cluster-level reads ------------------------------------------------------------------- */

static void clusters_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    (void)p;
    /* the agent knows itself; the hub's /api/clusters lists the platform */
    http_respond_json(ex, 200,
                      json_pack("{s:[{s:s,s:s,s:b}]}", "clusters", "id", n->d.cluster, "name",
                                n->d.cluster, "local", 1));
}

static void gates_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    (void)p;
    (void)arg;
    http_respond_json(ex, 200,
                      json_pack("{s:b,s:b,s:b}", "quota", 0, "instanceType", 0, "volumes", 0));
}

static void quotas_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    (void)p;
    native_error(ex, 501, "QUOTA_PROVIDER_DISABLED", NULL,
                 "quotas need a quota provider (feature gate 'quota'), and cluster '%s' has none "
                 "configured",
                 n->d.cluster);
}

static void empty_list_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    (void)p;
    (void)arg;
    http_respond_json(ex, 200, json_pack("{s:[],s:i}", "items", "total", 0));
}

struct stats_ctx {
    const struct agent_principal *p;
    json_t *by;
    int total;
};

static const char *status_name(enum rt_state s)
{
    return s == RT_RUNNING ? "Running" : s == RT_STOPPING ? "Stopping" : "Starting";
}

static void stats_one(void *arg, const struct rt_sandbox *s)
{
    struct stats_ctx *c = arg;
    const char *k;

    if (!native_may_touch(c->p, s->ns, s->team, s->owner))
        return;
    k = status_name(s->state);
    json_object_set_new(c->by, k, json_integer(json_integer_value(json_object_get(c->by, k)) + 1));
    c->total++;
}

static void stats_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct stats_ctx c = {p, json_object(), 0};
    char buf[64];
    const char *ns = native_caller_ns(ex, p, buf, sizeof(buf));
    struct rt_filter f = {.ns = ns};

    if (n->d.rt)
        rt_list(n->d.rt, &f, stats_one, &c);
    http_respond_json(ex, 200,
                      json_pack("{s:{s:s,s:i,s:o}}", "statistics", "namespace", ns, "total",
                                c.total, "byStatus", c.by));
}

/* ---- sandbox extras ------------------------------------------------------------------------ */

/* The sandbox {id} for p into *s (metadata released), or false having
 * answered 404. */
static bool own_sandbox(struct http_exchange *ex, struct native *n, const struct agent_principal *p,
                        struct rt_sandbox *s)
{
    const char *id = http_param(ex, "id");
    if (!n->d.rt || rt_get(n->d.rt, id, s) != 0) {
        native_error(ex, 404, NULL, NULL, "sandbox '%.80s' not found on cluster '%s'", id,
                     n->d.cluster);
        return false;
    }
    json_decref(s->metadata);
    s->metadata = NULL;
    if (!native_may_touch(p, s->ns, s->team, s->owner)) {
        native_error(ex, 404, NULL, NULL, "sandbox '%.80s' not found on cluster '%s'", id,
                     n->d.cluster);
        return false;
    }
    return true;
}

static void timeout_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    const struct http_request *r = http_req(ex);
    json_t *body = json_loadb(r->body, r->body_len, 0, NULL);
    const char *t = json_string_value(json_object_get(body, "timeout"));
    struct rt_sandbox s;
    int64_t ms = 0;

    if (!own_sandbox(ex, n, p, &s))
        goto out;
    if (!t || cfg_parse_duration(t, &ms) != 0 || ms < 0 || ms / 1000 > TIMEOUT_MAX_S) {
        native_error(ex, 400, NULL, NULL,
                     "timeout must be a duration string such as \"30m\" (\"0\" removes it, at "
                     "most a year)");
        goto out;
    }
    /* "0" removes the timeout: the longest lifetime this agent gives */
    if (rt_set_timeout(n->d.rt, s.id, ms == 0 ? TIMEOUT_MAX_S : (ms + 999) / 1000) != 0) {
        native_error(ex, 404, NULL, NULL, "sandbox '%s' not found on cluster '%s'", s.id,
                     n->d.cluster);
        goto out;
    }
    http_respond(ex, 204, NULL, NULL, 0, NULL, 0);
out:
    json_decref(body);
}

static void ready_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct rt_sandbox s;
    if (!own_sandbox(ex, arg, p, &s))
        return;
    if (s.state == RT_RUNNING)
        http_respond_json(ex, 200, json_pack("{s:b}", "ready", 1));
    else
        native_error(ex, 503, "NOT_READY", NULL, "sandbox '%s' is %s, not Running", s.id,
                     status_name(s.state));
}

struct logs {
    struct http_exchange *ex;
    struct rt_probe probe;
    struct rt_log_query q;
    struct rt_log out;
    int rc;
};

static void logs_work(void *arg)
{
    struct logs *l = arg;
    l->rc = rt_log_read(&l->probe, &l->q, &l->out);
}

static void logs_done(void *arg, int status)
{
    struct logs *l = arg;
    char when[40];

    if (status != 0 || l->rc != 0) {
        native_error(l->ex, 503, NULL, NULL, "the sandbox's log cannot be read now");
    } else {
        json_t *items = json_array();
        for (size_t i = 0; i < l->out.n; i++) {
            time_t t = (time_t)(l->out.entries[i].ms / 1000);
            struct tm tm;
            gmtime_r(&t, &tm);
            strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
            json_array_append_new(
                items, json_pack("{s:s,s:s}", "timestamp", when, "line", l->out.entries[i].line));
        }
        http_respond_json(l->ex, 200, json_pack("{s:o}", "logs", items));
    }
    rt_log_free(&l->out);
    free(l);
}

static void logs_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    char buf[32];
    struct rt_sandbox s;
    long lines = 100;
    struct logs *l;

    if (http_query_long(http_req(ex), "lines", 100, 0, LOG_LINES_MAX, &lines) != 0) {
        native_error(ex, 400, NULL, NULL, "lines must be an integer from 0 to %d", LOG_LINES_MAX);
        return;
    }
    if (http_query_get(http_req(ex), "source", buf, sizeof(buf)) == 0 && buf[0] &&
        strcmp(buf, "stdout") != 0) {
        native_error(ex, 400, NULL, NULL,
                     "source '%.31s' is not available: the %s runtime keeps the sandbox's stdout "
                     "only (source=stdout)",
                     buf, n->d.rt ? n->d.rt->kind : "current");
        return;
    }
    if (!own_sandbox(ex, n, p, &s))
        return;
    if (!n->d.loop || !(l = calloc(1, sizeof(*l)))) {
        native_error(ex, 503, NULL, NULL, "cannot read logs now");
        return;
    }
    if (rt_log_probe(n->d.rt, s.id, &l->probe) != 0) {
        free(l);
        native_error(ex, 404, NULL, NULL, "sandbox '%s' has no log on cluster '%s'", s.id,
                     n->d.cluster);
        return;
    }
    l->ex = ex;
    l->q.limit = lines == 0 ? RT_LOG_LINES_MAX : AB_MIN(lines, RT_LOG_LINES_MAX);
    l->q.backward = false;
    if (loop_submit(n->d.loop, logs_work, logs_done, l) != 0) {
        free(l);
        native_error(ex, 503, NULL, NULL, "too many log reads in flight; try again");
    }
}

/* ---- routes -------------------------------------------------------------------------------- */

#define AUTHED(fn)                                                                                 \
    static void h_##fn(struct http_exchange *ex, void *arg)                                        \
    {                                                                                              \
        struct native *n = arg;                                                                    \
        agent_auth_request(n->d.auth, ex, fn##_authed, n);                                         \
    }

AUTHED(templates)
AUTHED(clusters)
AUTHED(gates)
AUTHED(quotas)
AUTHED(empty_list)
AUTHED(stats)
NATIVE_GATED(timeout_gated, "sandbox.update", timeout_authed)
static void h_timeout(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, timeout_gated, n);
}
AUTHED(ready)
AUTHED(logs)

int native_system_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/ping", h_ping, n, 0},
        {"GET", "/v1/sandbox-templates", h_templates, n, 0},
        {"GET", "/v1/sandbox-templates/{name}", h_templates, n, 0},
        {"GET", "/v1/clusters", h_clusters, n, 0},
        {"GET", "/v1/feature-gates", h_gates, n, 0},
        {"GET", "/v1/quotas", h_quotas, n, 0},
        {"GET", "/v1/instancetypes", h_empty_list, n, 0},
        {"GET", "/v1/volumes", h_empty_list, n, 0},
        {"GET", "/v1/statistics/sandboxes", h_stats, n, 0},
        {"PUT", "/v1/sandboxes/{id}/timeout", h_timeout, n, 0},
        {"GET", "/v1/sandboxes/{id}/is_ready", h_ready, n, 0},
        {"GET", "/v1/sandboxes/{id}/logs", h_logs, n, 0},
    };
    return native_add(n, routes, AB_ARRAY_LEN(routes), err, errlen);
}
