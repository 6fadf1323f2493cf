/* Native sandbox API: claim, list, get, delete, and env summaries. See
 * sandboxes.h. A claim answers only once the sandbox is armed (envd /init
 * done), so the id and token it returns work on the data plane at once. */
#include "agent/native/sandboxes.h"

#include "agent/auth.h"
#include "agent/claim.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/ref.h"
#include "agentbox/sbxid.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIST_DEFAULT 20
#define LIST_MAX 100
#define TOKEN_BYTES 24
#define TIMEOUT_MAX_S (366LL * 24 * 3600)
#define SCALING_GROUP_KEY "agentbox.scitix.ai/scaling-group"
#define STATUS_FILTER_MAX 128

static void respond_error(struct http_exchange *ex, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void respond_error(struct http_exchange *ex, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    http_respond_json(ex, status, native_error_json(status, msg));
}

static int status_of_err(int err)
{
    return claim_status(CLAIM_NATIVE, err);
}

static const char *state_name(enum rt_state s)
{
    switch (s) {
    case RT_RUNNING:
        return "Running";
    case RT_IDLE:
        return "Idle";
    case RT_STOPPING:
        return "Stopping";
    default:
        return "Starting";
    }
}

/* The sandbox object of reference §4.2; token only on create. */
static json_t *sandbox_json(const struct rt_sandbox *s, const char *token)
{
    char created[40], ends[40];
    json_t *o;

    native_iso_time(s->claimed_ms, created, sizeof(created));
    native_iso_time(s->end_ms, ends, sizeof(ends));
    o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:b}", "sandboxId", s->id, "poolName",
                  s->pool, "envName", s->env, "namespace", s->ns, "templateName", s->template_name,
                  "status", state_name(s->state), "createdAt", created, "expiresAt", ends, "team",
                  s->team, "allowInternetAccess", s->internet);
    if (!o)
        return NULL;
    json_object_set_new(o, "metadata", s->metadata ? json_incref(s->metadata) : json_object());
    if (token)
        json_object_set_new(o, "envdAccessToken", json_string(token));
    return o;
}

/* The caller's namespace; admins may name one (default "default"). */
static const char *caller_ns(const struct agent_principal *p, const char *asked)
{
    if (p->admin)
        return asked && asked[0] ? asked : NULL;
    return p->namespace[0] ? p->namespace : "default";
}

bool native_may_touch(const struct agent_principal *p, const char *ns, const char *team,
                      const char *owner)
{
    if (p->admin)
        return true;
    /* an empty team or user on either side matches nothing: no wildcard by omission */
    if (!p->team[0] || !p->user[0] || !team || !owner)
        return false;
    return strcmp(ns, caller_ns(p, NULL)) == 0 && strcmp(team, p->team) == 0 &&
           strcmp(owner, p->user) == 0;
}

static bool may_see(const struct agent_principal *p, const struct rt_sandbox *s)
{
    return native_may_touch(p, s->ns, s->team, s->owner);
}

/* ---- POST /v1/sandboxes --------------------------------------------------------------------- */

struct create {
    struct http_exchange *ex;
    struct native *n;
    char ns[RT_NAME_MAX + 1];
    char name[RT_NAME_MAX + 1];
    char token[2 * TOKEN_BYTES + 1];
};

struct avail_ctx {
    json_t *pools;
    const char *name;         /* the env or pool asked for */
    struct rt_pool_status st; /* its pools' sums */
};

static void avail_one(void *arg, const struct rt_pool *p)
{
    struct avail_ctx *a = arg;
    json_array_append_new(a->pools, json_pack("{s:s,s:s,s:i,s:i,s:i}", "name", p->name, "namespace",
                                              p->ns, "idle", p->status.idle, "running",
                                              p->status.running, "starting", p->status.starting));
    if (!strcmp(p->name, a->name) || !strcmp(p->env, a->name)) {
        a->st.idle += p->status.idle;
        a->st.running += p->status.running;
        a->st.starting += p->status.starting;
        a->st.stopping += p->status.stopping;
    }
}

/* A refused create, with the detail reference §4.2 gives its status: 404
 * lists the pools the caller could have meant (detail.availablePools), 429
 * says how the pool stands (PoolStatusDetail). */
static void create_refused(struct http_exchange *ex, struct native *n, const char *ns,
                           const char *name, int err, const char *msg)
{
    int status = status_of_err(err);
    struct avail_ctx a = {json_array(), name, {0}};
    json_t *body = native_error_json(status, msg);

    if ((status == 404 || status == 429) && n->d.rt)
        rt_list_pools(n->d.rt, ns, avail_one, &a);
    if (status == 404) {
        json_object_set_new(body, "errorCode", json_string("POOL_NOT_FOUND"));
        json_object_set_new(body, "detail",
                            json_pack("{s:O,s:s}", "availablePools", a.pools, "hint",
                                      "poolName names an env or a pool of this namespace; GET "
                                      "/v1/envs lists them"));
    } else if (status == 429) {
        json_object_set_new(
            body, "detail",
            json_pack("{s:i,s:i,s:i,s:i,s:i,s:s,s:i}", "idle", a.st.idle, "running", a.st.running,
                      "starting", a.st.starting, "stopping", a.st.stopping, "failed", 0, "hint",
                      "every sandbox of the pool is taken or starting; retry, or scale the pool "
                      "(PUT /v1/envs/{name}/sandboxpools/{pool})",
                      "retryAfter", 5));
    }
    json_decref(a.pools);
    http_respond_json(ex, status, body);
}

static void create_done(void *arg, int err, const char *msg, const struct rt_sandbox *s)
{
    struct create *c = arg;

    if (err) {
        create_refused(c->ex, c->n, c->ns, c->name, err, msg ? msg : ab_strerror(err));
    } else {
        json_t *sb = sandbox_json(s, c->token);
        http_respond_json(c->ex, 201, json_pack("{s:o}", "sandbox", sb));
        LOG_INFO("sandbox claimed", "id", s->id, "pool", s->pool, "namespace", s->ns);
    }
    explicit_bzero(c->token, sizeof(c->token));
    free(c);
}

static int parse_timeout(json_t *v, int64_t *out, char *err, size_t errlen)
{
    int64_t ms;

    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= TIMEOUT_MAX_S) {
        *out = json_integer_value(v);
        return 0;
    }
    if (json_is_string(v) && cfg_parse_duration(json_string_value(v), &ms) == 0 && ms > 0 &&
        ms / 1000 <= TIMEOUT_MAX_S) {
        *out = (ms + 999) / 1000;
        return 0;
    }
    snprintf(err, errlen,
             "timeout must be a positive number of seconds or a duration such as "
             "\"30m\" (at most a year)");
    return AB_EINVAL;
}

static void create_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    const struct http_request *r = http_req(ex);
    json_t *body = json_loadb(r->body, r->body_len, 0, NULL);
    const struct claim_deps d = {n->d.rt, n->d.fed, n->d.hub, n->d.cluster};
    struct claim_request req = {.target = RT_TARGET_ENV_OR_POOL};
    struct rt_claim_options o = {0};
    struct ref ref;
    struct create *c = NULL;
    char id[SBXID_MAX + 1], err[RT_ERR_MAX];
    uint8_t raw[TOKEN_BYTES];
    const char *pool, *ns, *g;
    char group[RT_NAME_MAX + 1] = "";
    json_t *v, *md = NULL;
    int rc = AB_EINVAL;

    if (!json_is_object(body)) {
        respond_error(ex, 400,
                      "request body must be a JSON object such as "
                      "{\"poolName\": \"demo\", \"timeout\": 300}");
        goto out;
    }
    v = json_object_get(body, "image");
    if (v && !json_is_null(v) && !claim_image_ok(n->d.rt)) {
        /* refused as the E2B path refuses it: this runtime runs the env's own image */
        respond_error(ex, 400,
                      "image overrides need the kube runtime: cluster '%s' runs the %s runtime, "
                      "where a sandbox runs its env's own image; drop 'image' or create on a "
                      "cluster running --runtime kube",
                      n->d.cluster, n->d.rt && n->d.rt->kind ? n->d.rt->kind : "current");
        goto out;
    }
    if (v && !json_is_null(v)) {
        /* the seam passes no image to a claim yet, whatever the runtime */
        respond_error(ex, 400, "image overrides on the native create are not supported yet");
        goto out;
    }
    pool = json_string_value(json_object_get(body, "poolName"));
    if (!pool || !pool[0]) {
        respond_error(ex, 400, "poolName is required");
        goto out;
    }
    if (ref_parse(pool, &ref) != 0) {
        respond_error(ex, 400, "poolName is longer than %d characters", REF_MAX - 1);
        goto out;
    }
    if (ref.image[0]) {
        /* the native create passes no image to the runtime on any runtime yet */
        respond_error(ex, 400,
                      "poolName '%s' asks for image '%s': image overrides need the kube "
                      "runtime; this cluster runs the %s runtime",
                      pool, ref.image, n->d.rt && n->d.rt->kind ? n->d.rt->kind : "current");
        goto out;
    }
    /* the native API places nothing: a bare name and this cluster's prefix claim here */
    if (claim_where(n->d.cluster, &ref, err, sizeof(err)) != CLAIM_HERE && ref.cluster[0]) {
        respond_error(ex, 400,
                      "poolName '%s' names cluster '%s': this agent creates sandboxes "
                      "on cluster '%s' only; ask that cluster's agent or the hub",
                      pool, ref.cluster, n->d.cluster);
        goto out;
    }
    if (!ref.name[0]) {
        respond_error(ex, 400, "poolName is required");
        goto out;
    }
    if (parse_timeout(json_object_get(body, "timeout"), &o.timeout_s, err, sizeof(err)) != 0) {
        respond_error(ex, 400, "%s", err);
        goto out;
    }
    v = json_object_get(body, "allowInternetAccess");
    if (v && !json_is_boolean(v)) {
        respond_error(ex, 400, "allowInternetAccess must be true or false");
        goto out;
    }
    /* absent: allowed, as on the E2B API (a runtime without a gateway
     * refuses a create that asks for internet off rather than ignore it) */
    o.allow_internet = !v || json_is_true(v);
    ns = caller_ns(p, json_string_value(json_object_get(body, "namespace")));
    if (!ns)
        ns = "default";
    if (!n->d.rt) {
        respond_error(ex, 503, "this agent has no sandbox runtime");
        goto out;
    }
    if (claim_new_id(&d, id, sizeof(id)) != 0 || crypto_random(raw, sizeof(raw)) != 0 ||
        !(c = calloc(1, sizeof(*c)))) {
        respond_error(ex, 503, "cannot allocate a sandbox id; try again");
        goto out;
    }
    crypto_hex_encode(raw, sizeof(raw), c->token);
    explicit_bzero(raw, sizeof(raw));
    c->ex = ex;
    c->n = n;
    ab_strlcpy(c->ns, ns, sizeof(c->ns));
    ab_strlcpy(c->name, ref.name, sizeof(c->name));
    o.id = id;
    o.env_vars = json_object_get(body, "envVars");
    /* the reserved key picks the Env member's scaling group (reference §4.2),
     * as on the E2B create; it is not the sandbox's metadata */
    v = json_object_get(body, "metadata");
    if (v && !json_is_object(v)) {
        respond_error(ex, 400, "metadata must be an object of strings");
        goto out;
    }
    if ((g = json_string_value(json_object_get(v, SCALING_GROUP_KEY)))) {
        if (strlen(g) > RT_NAME_MAX) {
            respond_error(ex, 400, "metadata '" SCALING_GROUP_KEY "' is longer than %d characters",
                          RT_NAME_MAX);
            goto out;
        }
        ab_strlcpy(group, g, sizeof(group));
    }
    if (v && !(md = json_deep_copy(v))) {
        respond_error(ex, 503, "out of memory");
        goto out;
    }
    json_object_del(md, SCALING_GROUP_KEY);
    o.metadata = md;
    o.access_token = c->token;
    o.team = p->team;
    o.owner = p->user;
    /* cluster::name is an env first, then a pool (reference §1.8); so is a bare name here */
    req.ns = ns;
    req.name = ref.name;
    req.o = o;
    req.group = group;
    rc = claim_start(&d, &req, create_done, c, err, sizeof(err));
    if (rc != 0)
        create_refused(ex, n, ns, ref.name, rc, err);
out:
    if (c && rc != 0) { /* not handed to the claim: nothing else frees it */
        explicit_bzero(c->token, sizeof(c->token));
        free(c);
    }
    json_decref(md);
    json_decref(body);
}

NATIVE_GATED(create_gated, "sandbox.create", create_authed)

static void h_create(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, create_gated, n);
}

/* ---- GET /v1/sandboxes ------------------------------------------------------------------------
 */

struct list_ctx {
    const struct agent_principal *p;
    json_t *items;
    long total, offset, limit;
    char status[STATUS_FILTER_MAX + 3]; /* ",Running,Starting," or "" for any */
};

static void list_one(void *arg, const struct rt_sandbox *s)
{
    struct list_ctx *l = arg;
    char want[24];
    if (!may_see(l->p, s))
        return;
    snprintf(want, sizeof(want), ",%s,", state_name(s->state));
    if (l->status[0] && !strstr(l->status, want))
        return;
    if (l->total >= l->offset && (long)json_array_size(l->items) < l->limit)
        json_array_append_new(l->items, sandbox_json(s, NULL));
    l->total++;
}

static void list_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    const struct http_request *r = http_req(ex);
    struct list_ctx l = {.p = p};
    struct rt_filter f = {0};
    char pool[RT_NAME_MAX + 1];

    if (http_query_long(r, "limit", LIST_DEFAULT, 1, LIST_MAX, &l.limit) != 0) {
        respond_error(ex, 400, "limit must be an integer from 1 to %d", LIST_MAX);
        return;
    }
    if (http_query_long(r, "offset", 0, 0, 1000000, &l.offset) != 0) {
        respond_error(ex, 400, "offset must be a non-negative integer");
        return;
    }
    if (http_query_get(r, "poolName", pool, sizeof(pool)) == 0 && pool[0])
        f.env_or_pool = pool;
    char st[STATUS_FILTER_MAX + 1];
    int src = http_query_get(r, "status", st, sizeof(st));
    if (src == AB_ELIMIT) {
        respond_error(ex, 400, "status is a comma list of at most %d characters",
                      STATUS_FILTER_MAX);
        return;
    }
    if (src == 0 && st[0])
        snprintf(l.status, sizeof(l.status), ",%s,", st);
    f.ns = p->admin ? NULL : caller_ns(p, NULL);
    l.items = json_array();
    if (n->d.rt)
        rt_list(n->d.rt, &f, list_one, &l);
    http_respond_json(ex, 200,
                      json_pack("{s:o,s:i,s:i,s:i}", "items", l.items, "total", (int)l.total,
                                "limit", (int)l.limit, "offset", (int)l.offset));
}

static void h_list(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, list_authed, n);
}

/* ---- GET / DELETE /v1/sandboxes/{id} ------------------------------------------------------------
 */

/* Looks the sandbox up for p; answers 404 itself when it is not there (or not p's). */
static bool lookup(struct http_exchange *ex, struct native *n, const struct agent_principal *p,
                   struct rt_sandbox *s)
{
    const char *id = http_param(ex, "id");
    if (!n->d.rt || rt_get(n->d.rt, id, s) != 0) {
        respond_error(ex, 404, "sandbox '%.80s' not found on cluster '%s'", id, n->d.cluster);
        return false;
    }
    if (!may_see(p, s)) {
        json_decref(s->metadata);
        respond_error(ex, 404, "sandbox '%.80s' not found on cluster '%s'", id, n->d.cluster);
        return false;
    }
    return true;
}

static void get_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct rt_sandbox s;
    if (!lookup(ex, arg, p, &s))
        return;
    http_respond_json(ex, 200, json_pack("{s:o}", "sandbox", sandbox_json(&s, NULL)));
    json_decref(s.metadata);
}

static void h_get(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, get_authed, n);
}

/* A DELETE in flight: answered once the sandbox's processes are gone. */
struct delete_ctx {
    struct http_exchange *ex;
    char id[RT_ID_MAX + 1];
    char ns[RT_NAME_MAX + 1];
    char pool[RT_NAME_MAX + 1];
};

static void delete_done(void *arg, int err, const char *msg)
{
    struct delete_ctx *d = arg;

    if (err == 0)
        http_respond_json(d->ex, 202,
                          json_pack("{s:s,s:s,s:s,s:s,s:s}", "sandboxId", d->id, "namespace", d->ns,
                                    "poolName", d->pool, "podName", "", "status", "Terminated"));
    else
        respond_error(d->ex, status_of_err(err), "%s", msg ? msg : ab_strerror(err));
    free(d);
}

static void delete_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct rt_sandbox s;
    struct delete_ctx *d;

    if (!lookup(ex, n, p, &s))
        return;
    json_decref(s.metadata);
    if (!(d = calloc(1, sizeof(*d)))) {
        respond_error(ex, 500, "out of memory");
        return;
    }
    d->ex = ex;
    ab_strlcpy(d->id, s.id, sizeof(d->id));
    ab_strlcpy(d->ns, s.ns, sizeof(d->ns));
    ab_strlcpy(d->pool, s.pool, sizeof(d->pool));
    if (rt_release_wait(n->d.rt, s.id, RT_RELEASE_WAIT_MS, delete_done, d) != 0) {
        respond_error(ex, 404, "sandbox '%s' not found on cluster '%s'", s.id, n->d.cluster);
        free(d);
    }
}

NATIVE_GATED(delete_gated, "sandbox.delete", delete_authed)

static void h_delete(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, delete_gated, n);
}

/* ---- GET /v1/envs ------------------------------------------------------------------------------
 */

struct envs_ctx {
    json_t *items;
    json_t *pools; /* env key "ns/name" → array of pools */
};

static void env_pool(void *arg, const struct rt_pool *p)
{
    struct envs_ctx *e = arg;
    char key[2 * RT_NAME_MAX + 2];
    json_t *arr;

    snprintf(key, sizeof(key), "%s/%s", p->ns, p->env);
    if (!(arr = json_object_get(e->pools, key))) {
        arr = json_array();
        json_object_set_new(e->pools, key, arr);
    }
    json_array_append_new(
        arr, json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i}", "name", p->name, "namespace", p->ns,
                       "scalingGroup", p->scaling_group, "replicas", p->status.replicas, "idle",
                       p->status.idle, "running", p->status.running, "starting", p->status.starting,
                       "stopping", p->status.stopping, "pending", p->status.pending));
}

static void env_one(void *arg, const struct rt_env *v)
{
    struct envs_ctx *e = arg;
    char key[2 * RT_NAME_MAX + 2];
    json_t *pools;

    snprintf(key, sizeof(key), "%s/%s", v->ns, v->name);
    pools = json_object_get(e->pools, key);
    pools = pools ? json_incref(pools) : json_array();
    json_array_append_new(e->items,
                          json_pack("{s:s,s:s,s:s,s:i,s:i,s:o}", "name", v->name, "namespace",
                                    v->ns, "templateName", v->template_name, "idle", v->idle,
                                    "running", v->running, "pools", pools));
}

static void envs_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct envs_ctx e = {json_array(), json_object()};
    const char *ns = p->admin ? NULL : caller_ns(p, NULL);

    if (n->d.rt) {
        rt_list_pools(n->d.rt, ns, env_pool, &e);
        rt_list_envs(n->d.rt, ns, env_one, &e);
    }
    json_decref(e.pools);
    http_respond_json(
        ex, 200, json_pack("{s:o,s:i}", "items", e.items, "total", (int)json_array_size(e.items)));
}

static void h_envs(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, envs_authed, n);
}

int native_sandboxes_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"POST", "/v1/sandboxes", h_create, n, 0},
        {"GET", "/v1/sandboxes", h_list, n, 0},
        {"GET", "/v1/sandboxes/{id}", h_get, n, 0},
        {"DELETE", "/v1/sandboxes/{id}", h_delete, n, 0},
        {"GET", "/v1/envs", h_envs, n, 0},
    };
    return native_add(n, routes, AB_ARRAY_LEN(routes), err, errlen);
}
