/* Native management API (reference §4.2, §4.4): envs, their member pools
 * and scaling groups, and env events, over the runtime's manifest seam
 * (rt_objects / rt_object_write in runtime.h — the local runtime keeps the
 * writes beside its manifest directory, the kube runtime will write CRDs).
 *
 *   POST   /v1/envs                                   201 {env, editable}
 *   GET    /v1/envs/{name}                            {env, editable}
 *   PUT    /v1/envs/{name}                            desired state → {env, editable}
 *   DELETE /v1/envs/{name}                            202 {name, namespace, status: Terminating}
 *   GET    /v1/envs/{name}/autoscaling                {spec}
 *   GET    /v1/envs/{name}/autoscaling/groups         {items, total}
 *   GET|PUT|DELETE /v1/envs/{name}/autoscaling/groups/{group}
 *   POST   /v1/envs/{name}/sandboxpools               202 {template: pool}
 *   GET    /v1/envs/{name}/sandboxpools               {items, total, limit, offset}
 *   GET|PUT|DELETE /v1/envs/{name}/sandboxpools/{pool}
 *   GET    /v1/envs/{name}/events                     {items, total}, newest first
 *
 * Who may: an admin anywhere (?namespace=, default "default"); a tenant in
 * its own namespace only (envs are namespaced objects; another namespace's
 * env is 404, as if it did not exist). Every write passes native_gate (below).
 * A write answers once the runtime has it in effect. Loop thread only. */
#include "agent/native/native.h"
#include "agent/native/put.h"

#include "agent/auth.h"
#include "agent/autoscaler.h"
#include "agent/hub_link.h"
#include "agent/runtime/runtime.h"

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/relay.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIST_DEFAULT 20
#define LIST_MAX 100
#define EVENTS_DEFAULT 100
#define EVENTS_MAX 500

/* ---- the approval gate (reference §4.5) ---------------------------------------------------- */

/* The hub answers from one database lookup; past this the write fails closed. */
#define GATE_TIMEOUT_MS 5000
#define GATE_ANSWER_MAX (16 * 1024) /* a 428 body is well under 1 KiB */
#define GATE_PATH "/internal/v1/approvals/gate"
/* The header an agent harness sets so a session grant applies (hub/approvals.h). */

/* A gated write waiting for the hub's answer. */
struct gate_wait {
    struct http_exchange *ex;
    /* a copy: the caller's principal lives only during its call */
    struct agent_principal p;
    native_then_fn then;
    void *arg;
    char op[32];
};

/* Whether the hub's /api/clusters/{id}/v1 front door relayed ex: it gated
 * the write already (dashboard-api/clusters_api.c), and a second gate would
 * ask a once-approval twice. Another cluster's relay reaches us over the
 * tunnel too, but always with X-Source-Cluster, which the hub sets from the
 * session (tunnel_server.c) — a caller can add that header (and be gated
 * here as well) but never remove it. */
static bool relayed_by_hub(const struct http_request *r)
{
    return r->peer && strcmp(r->peer, "tunnel:hub") == 0 &&
           !http_header_get(r, RELAY_HDR_SOURCE_CLUSTER);
}

static void gate_answer(const struct tun_call_result *res, void *arg)
{
    struct gate_wait *w = arg;
    json_t *body =
        res->status ? json_loadb(res->body ? res->body : "", res->body_len, 0, NULL) : NULL;

    if (res->status == 200 && json_is_true(json_object_get(body, "allowed"))) {
        w->then(w->ex, &w->p, w->arg);
    } else if ((res->status == 428 || res->status == 403) && json_is_object(body)) {
        /* the hub's words for the caller (approvalId, pollUrl), as it made them */
        http_respond(w->ex, res->status, "application/json", res->body, res->body_len, NULL, 0);
    } else if (res->status == 0) {
        native_error(w->ex, 503, NULL, NULL,
                     "the hub's approval gate could not be asked for %s over the tunnel: %s; the "
                     "write was not done, retry shortly",
                     w->op, res->error ? res->error : "tunnel error");
    } else {
        const char *why = json_string_value(json_object_get(body, "error"));
        if (!why)
            why = json_string_value(json_object_get(body, "message"));
        native_error(w->ex, 503, NULL, NULL,
                     "the hub's approval gate answered %d for %s (%s); the write was not done",
                     res->status, w->op, why ? why : "no reason given");
    }
    json_decref(body);
    explicit_bzero(w->p.assertion, sizeof(w->p.assertion));
    free(w);
}

void native_gate(struct native *n, struct http_exchange *ex, const struct agent_principal *p,
                 const char *op, native_then_fn then, void *arg)
{
    const struct http_request *r = http_req(ex);
    const char *sid = http_header_get(r, RELAY_HDR_SESSION_ID);
    uint8_t sum[CRYPTO_SHA256_LEN];
    char sha[65], msg[256];
    struct gate_wait *w;
    json_t *q;
    char *txt;
    int rc;

    /* the hub's rule (approvals_gated): agent-mode keys that are not admin */
    if (!p->agent_mode || p->admin || relayed_by_hub(r)) {
        then(ex, p, arg);
        return;
    }
    if (!p->assertion[0]) {
        native_error(ex, 503, NULL, NULL,
                     "the hub gave no assertion for this agent-mode key, so the approval gate "
                     "for %s cannot be asked; the write was not done (upgrade the hub)",
                     op);
        return;
    }
    /* exactly the body the handler acts on: ex keeps it while suspended */
    crypto_sha256(r->body ? r->body : "", r->body ? r->body_len : 0, sum);
    crypto_hex_encode(sum, sizeof(sum), sha);
    q = json_pack("{s:s,s:s,s:s}", "method", r->method, "path", r->path, "bodySha256", sha);
    if (q && sid && sid[0])
        json_object_set_new(q, "sessionId", json_string(sid));
    txt = q ? json_dumps(q, JSON_COMPACT) : NULL;
    json_decref(q);
    if (!txt || !(w = calloc(1, sizeof(*w)))) {
        free(txt);
        native_error(ex, 503, NULL, NULL, "out of memory asking the approval gate for %s", op);
        return;
    }
    w->ex = ex;
    w->p = *p;
    w->then = then;
    w->arg = arg;
    ab_strlcpy(w->op, op, sizeof(w->op));
    const struct tun_header h[] = {{ASRT_HEADER, w->p.assertion},
                                   {"Content-Type", "application/json"}};
    rc = hub_link_call_within(n->d.hub, GATE_TIMEOUT_MS, "POST", GATE_PATH, h, 2, txt, strlen(txt),
                              GATE_ANSWER_MAX, gate_answer, w);
    free(txt);
    if (rc != 0) {
        /* never let a gated write through because the hub is away */
        if (rc == AB_ECLOSED)
            hub_link_unreachable(n->d.hub, NULL, msg, sizeof(msg));
        else
            snprintf(msg, sizeof(msg), "cannot ask the hub over the tunnel: %s", ab_strerror(rc));
        native_error(ex, 503, NULL, NULL,
                     "%s; the approval gate for %s cannot be checked, so the "
                     "write was not done",
                     msg, op);
        explicit_bzero(w->p.assertion, sizeof(w->p.assertion));
        free(w);
    }
}

const char *native_env_ns(const struct agent_principal *p, const char *asked)
{
    /* a tenant's own namespace whatever it asks for: envs of other namespaces
     * do not exist for it (answered 404, never 403, so none can be probed) */
    if (!p->admin)
        return p->namespace[0] ? p->namespace : "default";
    return asked && asked[0] ? asked : "default";
}

const char *native_caller_ns(struct http_exchange *ex, const struct agent_principal *p, char *buf,
                             size_t len)
{
    if (http_query_get(http_req(ex), "namespace", buf, len) != 0)
        buf[0] = 0;
    return native_env_ns(p, buf);
}

void native_iso_time(int64_t ms, char *out, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

static struct native_event *event_slot(struct native *n, int64_t ms, const char *ns,
                                       const char *env, const char *reason)
{
    struct native_event *e = &n->events[n->nevents % NATIVE_EVENTS_MAX];

    n->nevents++;
    e->ms = ms;
    ab_strlcpy(e->ns, ns, sizeof(e->ns));
    ab_strlcpy(e->env, env, sizeof(e->env));
    ab_strlcpy(e->reason, reason, sizeof(e->reason));
    return e;
}

void native_event_add(struct native *n, const char *ns, const char *env, const char *reason,
                      const char *fmt, ...)
{
    struct native_event *e;
    struct rt_event re = {0};
    va_list ap;

    if (!n->events)
        return;
    e = event_slot(n, ab_wall_ms(), ns, env, reason);
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    /* kept by the runtime too, so a restarted agent still lists it */
    re.ms = e->ms;
    ab_strlcpy(re.ns, e->ns, sizeof(re.ns));
    ab_strlcpy(re.env, e->env, sizeof(re.env));
    ab_strlcpy(re.reason, e->reason, sizeof(re.reason));
    ab_strlcpy(re.message, e->message, sizeof(re.message));
    rt_event_record(n->d.rt, &re);
}

static void event_restore(void *arg, const struct rt_event *re)
{
    struct native *n = arg;
    struct native_event *e = event_slot(n, re->ms, re->ns, re->env, re->reason);

    ab_strlcpy(e->message, re->message, sizeof(e->message));
}

/* ---- reading ----------------------------------------------------------------------------- */

struct found {
    json_t *obj; /* a copy */
    bool from_api, pull_secret;
};

static void found_one(void *arg, const struct rt_object *o)
{
    struct found *f = arg;
    if (!f->obj) {
        f->obj = json_deep_copy(o->obj);
        f->from_api = o->from_api;
        f->pull_secret = o->pull_secret;
    }
}

/* The env ns/name, or NULL (f->obj). */
static json_t *find_env(struct native *n, const char *ns, const char *name, struct found *f)
{
    memset(f, 0, sizeof(*f));
    if (n->d.rt)
        rt_objects(n->d.rt, RT_OBJ_ENV, ns, name, found_one, f);
    return f->obj;
}

struct pools_ctx {
    const char *env;
    json_t *byname; /* pool name → rt status object */
};

static void pool_status_one(void *arg, const struct rt_pool *p)
{
    struct pools_ctx *c = arg;
    if (strcmp(p->env, c->env) != 0)
        return;
    json_object_set_new(
        c->byname, p->name,
        json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:i}", "replicas", p->status.replicas, "idle",
                  p->status.idle, "running", p->status.running, "starting", p->status.starting,
                  "stopping", p->status.stopping, "pending", p->status.pending, "updateRevision",
                  p->status.update_revision, "updatedReplicas", p->status.updated));
}

/* The status of env's pools on this cluster, by pool name. */
static json_t *pool_statuses(struct native *n, const char *ns, const char *env)
{
    struct pools_ctx c = {env, json_object()};
    if (n->d.rt)
        rt_list_pools(n->d.rt, ns, pool_status_one, &c);
    return c.byname;
}

/* A member of this cluster's segment as the API shows a pool. */
static json_t *pool_json(const char *ns, const char *env, const json_t *member,
                         const json_t *statuses)
{
    const char *name = json_string_value(json_object_get(member, "name"));
    const json_t *cfg = json_object_get(member, "config");
    const json_t *spec = json_object_get(member, "spec");
    const json_t *st = json_object_get(statuses, name ? name : "");
    char gbuf[128];
    json_t *o;

    o = json_pack("{s:s,s:s,s:s,s:s,s:o}", "name", name ? name : "", "namespace", ns, "env", env,
                  "scalingGroup", native_member_group(member, env, gbuf, sizeof(gbuf)), "config",
                  cfg ? json_deep_copy(cfg) : json_object());
    if (json_object_get(spec, "replicas"))
        json_object_set(o, "replicas", json_object_get(spec, "replicas"));
    if (json_object_get(cfg, "minReplicas"))
        json_object_set(o, "minReplicas", json_object_get(cfg, "minReplicas"));
    if (json_object_get(cfg, "maxReplicas"))
        json_object_set(o, "maxReplicas", json_object_get(cfg, "maxReplicas"));
    if (json_object_get(cfg, "updateStrategy"))
        json_object_set(o, "updateStrategy", json_object_get(cfg, "updateStrategy"));
    json_object_set_new(o, "status",
                        st ? json_deep_copy(st)
                           : json_pack("{s:i,s:i,s:i,s:i,s:i,s:i}", "replicas", 0, "idle", 0,
                                       "running", 0, "starting", 0, "stopping", 0, "pending", 0));
    return o;
}

static json_t *segment_members(const json_t *env, const char *cluster)
{
    json_t *c;
    size_t i;

    json_array_foreach(json_object_get(json_object_get(env, "spec"), "clusters"), i, c)
    {
        const char *id = json_string_value(json_object_get(c, "clusterID"));
        if (id && !strcmp(id, cluster))
            return json_object_get(c, "members");
    }
    return NULL;
}

/* {env, editable}: the env as the API shows it (never the pull secret). */
static json_t *env_answer(struct native *n, const json_t *raw, bool from_api, bool pull_secret)
{
    const json_t *meta = json_object_get(raw, "metadata");
    const json_t *spec = json_object_get(raw, "spec");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    json_t *editable = native_env_editable(raw, pull_secret);
    json_t *statuses, *pools = json_array(), *m;
    int idle = 0, running = 0;
    size_t i;

    ns = ns ? ns : "default";
    name = name ? name : "";
    statuses = pool_statuses(n, ns, name);
    json_array_foreach(segment_members(raw, n->d.cluster), i, m)
    {
        json_t *p = pool_json(ns, name, m, statuses);
        idle += (int)json_integer_value(json_object_get(json_object_get(p, "status"), "idle"));
        running +=
            (int)json_integer_value(json_object_get(json_object_get(p, "status"), "running"));
        json_array_append_new(pools, p);
    }
    json_decref(statuses);
    json_t *env = json_pack(
        "{s:s,s:s,s:O,s:O,s:O,s:O,s:O,s:o,s:s,s:{s:i,s:i,s:i}}", "name", name, "namespace", ns,
        "templateRef", json_object_get(editable, "templateRef"), "mode",
        json_object_get(editable, "mode"), "overrides", json_object_get(editable, "overrides"),
        "labels", json_object_get(editable, "labels"), "annotations",
        json_object_get(editable, "annotations"), "pools", pools, "source",
        from_api ? "api" : "manifest", "status", "memberCount", (int)json_array_size(pools),
        "idleReplicas", idle, "runningReplicas", running);
    /* copies: the caller frees raw, the answer outlives nothing of it */
    json_t *clusters = json_object_get(spec, "clusters");
    json_t *autoscaling = json_object_get(spec, "autoscaling");
    json_object_set_new(env, "clusters", clusters ? json_deep_copy(clusters) : json_array());
    json_object_set_new(env, "autoscaling",
                        autoscaling ? json_deep_copy(autoscaling) : json_object());
    return json_pack("{s:o,s:o}", "env", env, "editable", editable);
}

/* ---- writing ----------------------------------------------------------------------------- */

enum after {
    AFTER_ENV,
    AFTER_ENV_DELETED,
    AFTER_POOL_ADDED,
    AFTER_POOL,
    AFTER_POOL_DELETED,
    AFTER_GROUP,
    AFTER_GROUP_DELETED
};

enum mop {
    MOP_ENV_CREATE,
    MOP_ENV_PUT,
    MOP_ENV_DELETE,
    MOP_GROUP_PUT,
    MOP_GROUP_DELETE,
    MOP_POOL_ADD,
    MOP_POOL_PUT,
    MOP_POOL_DELETE
};

/* A management write: queued (struct native's wq), then computed from the
 * object in force when its turn comes — so two concurrent writes to one env
 * (two pools scaled at once) both land, none computed from a stale copy —
 * then written, and answered when the runtime has it in effect. */
struct native_pending {
    struct native_pending *next;
    struct native *n;
    struct http_exchange *ex;
    enum mop op;
    json_t *body; /* the request's, owned; NULL for deletes */
    char team[64], user[64];
    enum after after;
    int status;
    char ns[64];
    char env[64];
    char item[128];  /* pool or group */
    size_t nmembers; /* AFTER_POOL_ADDED: members before, so the new one is at that index */
    char reason[32];
    char message[256];
};

static void pending_free(struct native_pending *w)
{
    json_decref(w->body);
    free(w);
}

static void wq_pump(struct native *n);

static void answer_after(struct native_pending *w)
{
    struct native *n = w->n;
    struct found f;
    json_t *env = find_env(n, w->ns, w->env, &f);

    switch (w->after) {
    case AFTER_ENV:
        if (!env) {
            native_error(w->ex, 500, NULL, NULL,
                         "env '%s' was written but did not load; see the agent's log", w->env);
            break;
        }
        http_respond_json(w->ex, w->status, env_answer(n, env, f.from_api, f.pull_secret));
        break;
    case AFTER_ENV_DELETED:
        http_respond_json(w->ex, 202,
                          json_pack("{s:s,s:s,s:s}", "name", w->env, "namespace", w->ns, "status",
                                    "Terminating"));
        break;
    case AFTER_POOL_ADDED:
    case AFTER_POOL: {
        json_t *members = env ? segment_members(env, n->d.cluster) : NULL;
        json_t *m = NULL;
        if (w->after == AFTER_POOL_ADDED)
            m = json_array_get(members, w->nmembers);
        else if (env)
            m = native_env_member(env, n->d.cluster, w->item);
        if (!m) {
            native_error(w->ex, 500, NULL, NULL,
                         "env '%s' was written but its pool did not load; see the agent's log",
                         w->env);
            break;
        }
        json_t *st = pool_statuses(n, w->ns, w->env);
        json_t *p = pool_json(w->ns, w->env, m, st);
        json_decref(st);
        if (w->after == AFTER_POOL_ADDED)
            http_respond_json(w->ex, 202, json_pack("{s:o}", "template", p));
        else
            http_respond_json(w->ex, 200, json_pack("{s:o}", "pool", p));
        break;
    }
    case AFTER_POOL_DELETED:
        http_respond_json(w->ex, 202,
                          json_pack("{s:s,s:s,s:s,s:s}", "name", w->item, "env", w->env,
                                    "namespace", w->ns, "status", "Terminating"));
        break;
    case AFTER_GROUP: {
        json_t *pol = env ? native_env_group(env, w->item) : NULL;
        json_t *g = pol ? json_deep_copy(pol) : json_pack("{s:s}", "name", w->item);
        json_t *editable = json_deep_copy(g);
        json_object_del(editable, "name");
        http_respond_json(w->ex, 200, json_pack("{s:o,s:o}", "group", g, "editable", editable));
        break;
    }
    case AFTER_GROUP_DELETED:
        http_respond_json(w->ex, 200, json_pack("{s:s,s:s}", "name", w->item, "status", "Deleted"));
        break;
    }
    json_decref(env);
}

static void write_done(void *arg, int err, const char *msg)
{
    struct native_pending *w = arg;

    if (err) {
        /* AB_EEXIST: the kube runtime's PUT met a newer resourceVersion (409) */
        native_error(w->ex,
                     err == AB_EBUSY || err == AB_ECLOSED ? 503
                     : err == AB_EEXIST                   ? 409
                     : err == AB_EINVAL                   ? 400
                                                          : 500,
                     NULL, NULL, "%s", msg ? msg : ab_strerror(err));
    } else {
        native_event_add(w->n, w->ns, w->env, w->reason, "%s", w->message);
        LOG_INFO("env written", "namespace", w->ns, "env", w->env, "change", w->reason);
        answer_after(w);
    }
    struct native *n = w->n;
    pending_free(w);
    n->wq_busy = false;
    wq_pump(n);
}

static int status_of(int rc)
{
    return rc == AB_ENOENT    ? 404
           : rc == AB_EEXIST  ? 409
           : rc == AB_EBUSY   ? 503
           : rc == AB_EDENIED ? 501
                              : 400;
}

/* Writes obj (NULL: delete) as env ns/name. 0: write_done runs later;
 * otherwise w was answered and the caller frees it. */
static int write_env(struct native *n, struct native_pending *w, json_t *obj,
                     const struct native_secret *sec)
{
    char err[RT_ERR_MAX];
    const struct rt_write rw = {.kind = RT_OBJ_ENV,
                                .ns = w->ns,
                                .name = w->env,
                                .obj = obj,
                                .secret = sec ? sec->op : RT_SECRET_DELETE,
                                .pull_secret = sec ? sec->value : NULL};
    int rc = n->d.rt ? rt_object_write(n->d.rt, &rw, write_done, w, err, sizeof(err)) : AB_EDENIED;

    if (rc != 0) {
        if (!n->d.rt)
            snprintf(err, sizeof(err), "this agent has no sandbox runtime");
        native_error(w->ex, status_of(rc), NULL, NULL, "%s", err);
    }
    return rc;
}

static json_t *body_json(struct http_exchange *ex)
{
    const struct http_request *r = http_req(ex);
    return r->body_len ? json_loadb(r->body, r->body_len, 0, NULL) : NULL;
}

/* The env of the request ({name}) for p, or NULL having answered 404. */
static json_t *env_of_request(struct native *n, struct http_exchange *ex,
                              const struct agent_principal *p, struct found *f, char *ns,
                              size_t nslen)
{
    const char *name = http_param(ex, "name");
    const char *in = native_caller_ns(ex, p, ns, nslen);
    json_t *env;

    if (in != ns)
        ab_strlcpy(ns, in, nslen);
    if (!rt_has(n->d.rt, RT_CAP_MANIFEST_WRITE)) {
        /* not "not found": the env may well exist, this runtime cannot show it */
        native_error(ex, 501, NULL, NULL,
                     "the %s runtime of cluster '%s' does not serve env objects yet",
                     n->d.rt ? n->d.rt->kind : "absent", n->d.cluster);
        return NULL;
    }
    if (!(env = find_env(n, ns, name, f)))
        native_error(ex, 404, NULL, NULL, "env '%.64s' not found in namespace '%s' on cluster '%s'",
                     name, ns, n->d.cluster);
    return env;
}

/* ---- envs -------------------------------------------------------------------------------- */

static void env_get(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct found f;
    char ns[64];
    json_t *env = env_of_request(n, ex, p, &f, ns, sizeof(ns));

    if (!env)
        return;
    http_respond_json(ex, 200, env_answer(n, env, f.from_api, f.pull_secret));
    json_decref(env);
}

/* ---- autoscaling and groups -------------------------------------------------------------- */

static void autoscaling_get(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct found f;
    char ns[64];
    json_t *env = env_of_request(n, ex, p, &f, ns, sizeof(ns)), *as;

    if (!env)
        return;
    as = json_object_get(json_object_get(env, "spec"), "autoscaling");
    http_respond_json(ex, 200, json_pack("{s:o}", "spec", as ? json_deep_copy(as) : json_object()));
    json_decref(env);
}

struct live {
    struct native *n;
    const char *ns, *env;
    json_t *by_group; /* group name -> status */
};

static void wall_time(json_t *o, const char *key, int64_t ms)
{
    char t[40];
    if (ms <= 0)
        return;
    native_iso_time(ms, t, sizeof(t));
    json_object_set_new(o, key, json_string(t));
}

/* The live numbers of one group on this cluster (the runtime's snapshot and
 * the autoscaler's last decision): what `abx get group` shows. */
static void live_group(void *arg, const struct rt_scale_group *g)
{
    struct live *l = arg;
    struct autoscaler_info info;
    int idle = 0, running = 0, starting = 0, pending = 0, desired = 0;
    json_t *members, *st;

    if (strcmp(g->ns, l->ns) || strcmp(g->env, l->env))
        return;
    members = json_array();
    for (int i = 0; i < g->nmembers; i++) {
        const struct rt_scale_member *m = &g->members[i];
        idle += m->status.idle;
        running += m->status.running;
        starting += m->status.starting;
        pending += m->status.pending;
        desired += m->replicas;
    }
    for (int i = 0; i < g->nmembers; i++) {
        const struct rt_scale_member *m = &g->members[i];
        json_t *o =
            json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "name", m->name, "desiredReplicas",
                      m->replicas, "specReplicas", m->spec_replicas, "idleCount", m->status.idle,
                      "runningCount", m->status.running, "startingCount", m->status.starting,
                      "pendingRequests", m->status.pending, "scaleUpPriority", m->up_priority,
                      "scaleDownPriority", m->down_priority);
        if (m->min_replicas >= 0)
            json_object_set_new(o, "minReplicas", json_integer(m->min_replicas));
        if (m->max_replicas >= 0)
            json_object_set_new(o, "maxReplicas", json_integer(m->max_replicas));
        if (g->policy.enabled) {
            int h =
                rt_scale_headroom(m->replicas, m->max_replicas, g->policy.max_replicas, desired);
            /* null headroom = unbounded (crds-and-charts.md §4.5) */
            json_object_set_new(o, "scaleUpHeadroom", h < 0 ? json_null() : json_integer(h));
        }
        json_array_append_new(members, o);
    }
    st = json_pack("{s:b,s:i,s:i,s:i,s:i,s:i,s:o}", "autoscalingActive", g->policy.enabled,
                   "totalIdle", idle, "totalRunning", running, "totalStarting", starting,
                   "totalPending", pending, "totalDesired", desired, "members", members);
    if (autoscaler_info(l->n->d.autoscaler, g->ns, g->env, g->name, &info) == 0) {
        wall_time(st, "lastScaleUpTime", info.last_up_wall_ms);
        wall_time(st, "lastScaleDownTime", info.last_down_wall_ms);
        wall_time(st, "lastDecisionTime", info.decided_wall_ms);
        json_object_set_new(st, "lastDecision", json_string(info.reason));
        json_object_set_new(st, "scaleDownMarked", json_boolean(info.marked));
    }
    json_object_set_new(l->by_group, g->name, st);
}

/* Every group of env: its policy entry if any, else the defaults
 * (enabled false), with its members on this cluster and, under "status",
 * its live numbers here. */
static json_t *groups_of(struct native *n, const char *ns, const json_t *env)
{
    const char *name = json_string_value(json_object_get(json_object_get(env, "metadata"), "name"));
    json_t *out = json_object(), *c, *m, *g, *items = json_array();
    struct live l = {n, ns, name ? name : "", json_object()};
    const char *k;
    char buf[128];
    size_t i, j;

    rt_scale_groups(n->d.rt, live_group, &l);
    json_array_foreach(json_object_get(json_object_get(env, "spec"), "clusters"), i, c)
    {
        const char *id = json_string_value(json_object_get(c, "clusterID"));
        json_array_foreach(json_object_get(c, "members"), j, m)
        {
            const char *gn = native_member_group(m, name ? name : "", buf, sizeof(buf));
            if (!gn[0])
                continue; /* scalingGroup "": excluded from groups */
            if (!(g = json_object_get(out, gn))) {
                json_t *pol = native_env_group(env, gn);
                json_t *live = json_object_get(l.by_group, gn);
                g = pol ? json_deep_copy(pol) : json_pack("{s:s,s:b}", "name", gn, "enabled", 0);
                json_object_set_new(g, "members", json_array());
                if (live)
                    json_object_set(g, "status", live);
                json_object_set_new(out, gn, g);
            }
            if (id && !strcmp(id, n->d.cluster))
                json_array_append(json_object_get(g, "members"), json_object_get(m, "name"));
        }
    }
    json_object_foreach(out, k, g) json_array_append(items, g);
    json_decref(out);
    json_decref(l.by_group);
    return items;
}

static void groups_list(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct found f;
    char ns[64];
    json_t *env = env_of_request(n, ex, p, &f, ns, sizeof(ns)), *items;

    if (!env)
        return;
    items = groups_of(n, ns, env);
    http_respond_json(ex, 200,
                      json_pack("{s:o,s:i}", "items", items, "total", (int)json_array_size(items)));
    json_decref(env);
}

static void group_get(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    const char *gname = http_param(ex, "group");
    struct found f;
    char ns[64];
    json_t *env = env_of_request(n, ex, p, &f, ns, sizeof(ns)), *items, *g, *hit = NULL;
    size_t i;

    if (!env)
        return;
    items = groups_of(n, ns, env);
    json_array_foreach(items, i, g)
    {
        const char *name = json_string_value(json_object_get(g, "name"));
        if (name && !strcmp(name, gname)) {
            hit = g;
            break;
        }
    }
    if (hit) {
        json_t *editable = json_deep_copy(hit);
        json_object_del(editable, "name");
        json_object_del(editable, "members");
        json_object_del(editable, "status");
        http_respond_json(ex, 200, json_pack("{s:O,s:o}", "group", hit, "editable", editable));
    } else {
        native_error(ex, 404, NULL, NULL,
                     "scaling group '%.64s' is declared by no member of env '%s'", gname,
                     http_param(ex, "name"));
    }
    json_decref(items);
    json_decref(env);
}

/* ---- member pools ------------------------------------------------------------------------ */

static void pools_list(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct found f;
    char ns[64];
    long limit, offset;
    json_t *env, *items, *m, *st;
    size_t i, total;

    if (http_query_long(http_req(ex), "limit", LIST_DEFAULT, 1, LIST_MAX, &limit) != 0 ||
        http_query_long(http_req(ex), "offset", 0, 0, 1000000, &offset) != 0) {
        native_error(ex, 400, NULL, NULL,
                     "limit must be an integer from 1 to %d and offset a non-negative integer",
                     LIST_MAX);
        return;
    }
    if (!(env = env_of_request(n, ex, p, &f, ns, sizeof(ns))))
        return;
    const char *name = http_param(ex, "name");
    json_t *members = segment_members(env, n->d.cluster);
    st = pool_statuses(n, ns, name);
    items = json_array();
    total = json_array_size(members);
    json_array_foreach(members, i, m)
    {
        if ((long)i >= offset && (long)json_array_size(items) < limit)
            json_array_append_new(items, pool_json(ns, name, m, st));
    }
    json_decref(st);
    http_respond_json(ex, 200,
                      json_pack("{s:o,s:i,s:i,s:i}", "items", items, "total", (int)total, "limit",
                                (int)limit, "offset", (int)offset));
    json_decref(env);
}

static void pool_get(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    const char *pool = http_param(ex, "pool");
    struct found f;
    char ns[64];
    json_t *env = env_of_request(n, ex, p, &f, ns, sizeof(ns)), *m, *st;

    if (!env)
        return;
    if (!(m = native_env_member(env, n->d.cluster, pool))) {
        native_error(ex, 404, NULL, NULL,
                     "pool '%.64s' is not a member of env '%s' on cluster '%s'", pool,
                     http_param(ex, "name"), n->d.cluster);
    } else {
        st = pool_statuses(n, ns, http_param(ex, "name"));
        http_respond_json(ex, 200,
                          json_pack("{s:o}", "pool", pool_json(ns, http_param(ex, "name"), m, st)));
        json_decref(st);
    }
    json_decref(env);
}

/* ---- the write queue ------------------------------------------------------------------- */

/* Computes w's new object from the one in force and hands it to the
 * runtime. 0: write_done comes later; otherwise w was answered. */
static int wq_run(struct native_pending *w)
{
    static const struct native_secret keep = {RT_SECRET_KEEP, NULL};
    struct native *n = w->n;
    struct native_secret sec = {0};
    json_t *env = NULL, *obj = NULL;
    struct found f;
    char err[NATIVE_ERR_MAX];
    int rc;

    if (w->op == MOP_ENV_CREATE) {
        if ((rc = native_env_create(w->ns, w->body, &obj, &sec, err, sizeof(err))) != 0)
            goto refuse;
        const char *name =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        ab_strlcpy(w->env, name, sizeof(w->env));
        if ((env = find_env(n, w->ns, name, &f))) {
            snprintf(err, sizeof(err),
                     "env '%s' already exists in namespace '%s': PUT /v1/envs/%s changes it", name,
                     w->ns, name);
            rc = AB_EEXIST;
            goto refuse;
        }
        snprintf(w->message, sizeof(w->message), "env created by %s/%s", w->team, w->user);
        rc = write_env(n, w, obj, &sec);
        goto out;
    }
    if (!(env = find_env(n, w->ns, w->env, &f))) {
        snprintf(err, sizeof(err), "env '%.64s' not found in namespace '%s' on cluster '%s'",
                 w->env, w->ns, n->d.cluster);
        rc = AB_ENOENT;
        goto refuse;
    }
    switch (w->op) {
    case MOP_ENV_PUT:
        if ((rc = native_env_put(env, f.pull_secret, w->body, &obj, &sec, err, sizeof(err))) != 0)
            goto refuse;
        snprintf(w->message, sizeof(w->message), "env updated by %s/%s (pull secret %s)", w->team,
                 w->user,
                 sec.op == RT_SECRET_SET    ? "replaced"
                 : sec.op == RT_SECRET_KEEP ? "kept"
                                            : "removed");
        rc = write_env(n, w, obj, &sec);
        break;
    case MOP_ENV_DELETE:
        snprintf(w->message, sizeof(w->message), "env deleted by %s/%s", w->team, w->user);
        rc = write_env(n, w, NULL, NULL);
        break;
    case MOP_GROUP_PUT:
    case MOP_GROUP_DELETE:
        rc = w->op == MOP_GROUP_DELETE
                 ? native_group_delete(env, w->item, &obj, err, sizeof(err))
                 : native_group_put(env, w->item, w->body, &obj, err, sizeof(err));
        if (rc != 0)
            goto refuse;
        snprintf(w->message, sizeof(w->message), "scaling group '%s' %s by %s/%s", w->item,
                 w->op == MOP_GROUP_DELETE ? "policy removed" : "set", w->team, w->user);
        rc = write_env(n, w, obj, &keep); /* a group write leaves the secret alone */
        break;
    default: /* pools */
        w->nmembers = json_array_size(segment_members(env, n->d.cluster));
        rc = w->op == MOP_POOL_ADD
                 ? native_pool_add(env, n->d.cluster, w->body, &obj, err, sizeof(err))
             : w->op == MOP_POOL_PUT
                 ? native_pool_put(env, n->d.cluster, w->item, w->body, &obj, err, sizeof(err))
                 : native_pool_delete(env, n->d.cluster, w->item, &obj, err, sizeof(err));
        if (rc != 0)
            goto refuse;
        json_t *r = w->op == MOP_POOL_PUT ? json_object_get(w->body, "replicas") : NULL;
        if (r)
            snprintf(w->message, sizeof(w->message), "pool '%s' scaled to %lld replicas by %s/%s",
                     w->item, (long long)json_integer_value(r), w->team, w->user);
        else
            snprintf(w->message, sizeof(w->message), "member pool %s%s by %s/%s",
                     w->op == MOP_POOL_ADD   ? "added"
                     : w->op == MOP_POOL_PUT ? "updated: "
                                             : "removed: ",
                     w->item, w->team, w->user);
        if (r)
            ab_strlcpy(w->reason, "Scaled", sizeof(w->reason));
        rc = write_env(n, w, obj, &keep);
        break;
    }
    goto out;
refuse:
    native_error(w->ex, status_of(rc), rc == AB_EEXIST ? "ALREADY_EXISTS" : NULL, NULL, "%s", err);
out:
    json_decref(sec.value);
    json_decref(obj);
    json_decref(env);
    return rc;
}

/* Runs queued writes, one at a time. */
static void wq_pump(struct native *n)
{
    while (!n->wq_busy && n->wq_head) {
        struct native_pending *w = n->wq_head;
        n->wq_head = w->next;
        if (!n->wq_head)
            n->wq_tail = NULL;
        n->wq_len--;
        n->wq_busy = true;
        if (wq_run(w) != 0) {
            pending_free(w);
            n->wq_busy = false;
        }
    }
}

static const struct {
    const char *gate;   /* op id of reference §4.5 */
    const char *reason; /* the event's */
    enum after after;
    int status;
} MOPS[] = {
    [MOP_ENV_CREATE] = {"env.create", "Created", AFTER_ENV, 201},
    [MOP_ENV_PUT] = {"env.update", "Updated", AFTER_ENV, 200},
    [MOP_ENV_DELETE] = {"env.delete", "Deleted", AFTER_ENV_DELETED, 202},
    [MOP_GROUP_PUT] = {"autoscaling.update", "ScalingGroupUpdated", AFTER_GROUP, 200},
    [MOP_GROUP_DELETE] = {"autoscaling.delete", "ScalingGroupDeleted", AFTER_GROUP_DELETED, 200},
    [MOP_POOL_ADD] = {"pool.create", "PoolAdded", AFTER_POOL_ADDED, 202},
    [MOP_POOL_PUT] = {"pool.update", "PoolUpdated", AFTER_POOL, 200},
    [MOP_POOL_DELETE] = {"pool.delete", "PoolDeleted", AFTER_POOL_DELETED, 202},
};

/* Queues the write op of request ex for p (answering it itself on refusal);
 * the gate passed already. */
static void wq_add(struct http_exchange *ex, const struct agent_principal *p, struct native *n,
                   enum mop op)
{
    struct native_pending *w;
    char ns[64];
    const char *in;

    if (!rt_has(n->d.rt, RT_CAP_MANIFEST_WRITE)) {
        native_error(ex, 501, NULL, NULL, "the %s runtime of cluster '%s' cannot write envs yet",
                     n->d.rt ? n->d.rt->kind : "absent", n->d.cluster);
        return;
    }
    if (n->wq_len >= NATIVE_WRITES_MAX) {
        native_error(ex, 503, NULL, NULL,
                     "%d management writes are already waiting on cluster '%s'; try again",
                     NATIVE_WRITES_MAX, n->d.cluster);
        return;
    }
    if (!(w = calloc(1, sizeof(*w)))) {
        native_error(ex, 503, NULL, NULL, "out of memory");
        return;
    }
    in = native_caller_ns(ex, p, ns, sizeof(ns));
    w->n = n;
    w->ex = ex;
    w->op = op;
    w->after = MOPS[op].after;
    w->status = MOPS[op].status;
    ab_strlcpy(w->reason, MOPS[op].reason, sizeof(w->reason));
    ab_strlcpy(w->ns, in, sizeof(w->ns));
    ab_strlcpy(w->env, http_param(ex, "name") ? http_param(ex, "name") : "", sizeof(w->env));
    ab_strlcpy(w->item,
               http_param(ex, "pool")    ? http_param(ex, "pool")
               : http_param(ex, "group") ? http_param(ex, "group")
                                         : "",
               sizeof(w->item));
    ab_strlcpy(w->team, p->team, sizeof(w->team));
    ab_strlcpy(w->user, p->user, sizeof(w->user));
    if (op != MOP_ENV_DELETE && op != MOP_GROUP_DELETE && op != MOP_POOL_DELETE)
        w->body = body_json(ex);
    if (n->wq_tail)
        n->wq_tail->next = w;
    else
        n->wq_head = w;
    n->wq_tail = w;
    n->wq_len++;
    wq_pump(n);
}

#define WRITER(fn, op)                                                                             \
    static void fn##_passed(struct http_exchange *ex, const struct agent_principal *p, void *arg)  \
    {                                                                                              \
        wq_add(ex, p, arg, op);                                                                    \
    }                                                                                              \
    NATIVE_GATED(fn, MOPS[op].gate, fn##_passed)

WRITER(env_create, MOP_ENV_CREATE)
WRITER(env_put, MOP_ENV_PUT)
WRITER(env_delete, MOP_ENV_DELETE)
WRITER(group_put, MOP_GROUP_PUT)
WRITER(group_delete, MOP_GROUP_DELETE)
WRITER(pool_add, MOP_POOL_ADD)
WRITER(pool_put, MOP_POOL_PUT)
WRITER(pool_delete, MOP_POOL_DELETE)

void native_mgmt_free(struct native *n)
{
    /* writes never handed to the runtime: their exchanges are answered so
     * they can be freed (the runtime answered its own already) */
    while (n->wq_head) {
        struct native_pending *w = n->wq_head;
        n->wq_head = w->next;
        native_error(w->ex, 503, NULL, NULL, "the agent is shutting down");
        pending_free(w);
    }
    n->wq_tail = NULL;
    n->wq_len = 0;
}

/* ---- events ------------------------------------------------------------------------------ */

static void events_get(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct found f;
    char ns[64], when[40];
    long limit;
    json_t *env, *items;
    size_t k, kept;

    if (http_query_long(http_req(ex), "limit", EVENTS_DEFAULT, 1, EVENTS_MAX, &limit) != 0) {
        native_error(ex, 400, NULL, NULL, "limit must be an integer from 1 to %d", EVENTS_MAX);
        return;
    }
    if (!(env = env_of_request(n, ex, p, &f, ns, sizeof(ns))))
        return;
    json_decref(env);
    items = json_array();
    kept = n->nevents < NATIVE_EVENTS_MAX ? n->nevents : NATIVE_EVENTS_MAX;
    for (k = 0; k < kept && (long)json_array_size(items) < limit; k++) {
        const struct native_event *e = &n->events[(n->nevents - 1 - k) % NATIVE_EVENTS_MAX];
        if (strcmp(e->ns, ns) != 0 || strcmp(e->env, http_param(ex, "name")) != 0)
            continue;
        native_iso_time(e->ms, when, sizeof(when));
        json_array_append_new(items, json_pack("{s:s,s:s,s:s,s:s}", "type", "Normal", "reason",
                                               e->reason, "message", e->message, "time", when));
    }
    http_respond_json(ex, 200,
                      json_pack("{s:o,s:i}", "items", items, "total", (int)json_array_size(items)));
}

/* ---- routes ------------------------------------------------------------------------------ */

#define AUTHED(fn)                                                                                 \
    static void h_##fn(struct http_exchange *ex, void *arg)                                        \
    {                                                                                              \
        struct native *n = arg;                                                                    \
        agent_auth_request(n->d.auth, ex, fn, n);                                                  \
    }

AUTHED(env_get)
AUTHED(env_create)
AUTHED(env_put)
AUTHED(env_delete)
AUTHED(autoscaling_get)
AUTHED(groups_list)
AUTHED(group_get)
AUTHED(group_put)
AUTHED(group_delete)
AUTHED(pools_list)
AUTHED(pool_get)
AUTHED(pool_add)
AUTHED(pool_put)
AUTHED(pool_delete)
AUTHED(events_get)

int native_mgmt_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"POST", "/v1/envs", h_env_create, n, 0},
        {"GET", "/v1/envs/{name}", h_env_get, n, 0},
        {"PUT", "/v1/envs/{name}", h_env_put, n, 0},
        {"DELETE", "/v1/envs/{name}", h_env_delete, n, 0},
        {"GET", "/v1/envs/{name}/autoscaling", h_autoscaling_get, n, 0},
        {"GET", "/v1/envs/{name}/autoscaling/groups", h_groups_list, n, 0},
        {"GET", "/v1/envs/{name}/autoscaling/groups/{group}", h_group_get, n, 0},
        {"PUT", "/v1/envs/{name}/autoscaling/groups/{group}", h_group_put, n, 0},
        {"DELETE", "/v1/envs/{name}/autoscaling/groups/{group}", h_group_delete, n, 0},
        {"POST", "/v1/envs/{name}/sandboxpools", h_pool_add, n, 0},
        {"GET", "/v1/envs/{name}/sandboxpools", h_pools_list, n, 0},
        {"GET", "/v1/envs/{name}/sandboxpools/{pool}", h_pool_get, n, 0},
        {"PUT", "/v1/envs/{name}/sandboxpools/{pool}", h_pool_put, n, 0},
        {"DELETE", "/v1/envs/{name}/sandboxpools/{pool}", h_pool_delete, n, 0},
        {"GET", "/v1/envs/{name}/events", h_events_get, n, 0},
    };
    if (!n->events && !(n->events = calloc(NATIVE_EVENTS_MAX, sizeof(*n->events)))) {
        snprintf(err, errlen, "native: out of memory");
        return AB_ENOMEM;
    }
    if (n->d.rt && n->nevents == 0)
        rt_events_load(n->d.rt, event_restore, n); /* a runtime without them keeps none */
    return native_add(n, routes, AB_ARRAY_LEN(routes), err, errlen);
}
