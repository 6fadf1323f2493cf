/* The console's view of the federation registry (authenticated like the
 * identity API, auth.h: a tenant sees its own namespace only, an admin every
 * namespace):
 *
 *   GET /api/v1/federation             fresh records; ?namespace= ?env= ?cluster=
 *   GET /api/clusters/{id}/federation  one cluster's envs and member pools
 *
 * Loop thread; reads the registry in memory (hub/federation.h). */
#include "dashboard-api/dashboard_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/json.h"
#include "hub/auth.h"
#include "hub/federation.h"
#include "hub/hub.h"

#define LIST_MAX 100000 /* records in one answer */

/* --- public listings -------------------------------------------------------------------- */

static json_t *record_json(const struct route_record *r, int64_t now_ms)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:b,s:i,s:I,s:I,s:i,s:I}", "cluster",
                     r->cluster, "namespace", r->ns, "env", r->env, "pool", r->pool, "scalingGroup",
                     r->group, "idle", r->idle, "running", r->running, "pending", r->pending,
                     "desired", r->desired, "autoscaling", r->autoscaling, "headroom", r->headroom,
                     "saturatedForMs", (json_int_t)r->saturated_for_ms, "ageMs",
                     (json_int_t)(now_ms - r->sampled_ms), "reserved", r->reserved, "claims",
                     (json_int_t)r->claims);
}

struct collect {
    const char *ns, *env, *cluster; /* NULL: any */
    int64_t now_ms;
    const struct route_record **v;
    size_t n, cap;
    bool truncated;
};

static void collect_one(void *arg, const struct route_record *r)
{
    struct collect *c = arg;
    if ((c->ns && strcmp(c->ns, r->ns) != 0) || (c->env && strcmp(c->env, r->env) != 0) ||
        (c->cluster && strcmp(c->cluster, r->cluster) != 0) ||
        !route_is_fresh(r, c->now_ms, ROUTE_TTL_MS))
        return;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        if (cap > LIST_MAX)
            cap = LIST_MAX;
        const struct route_record **v = cap > c->cap ? realloc(c->v, cap * sizeof(*v)) : NULL;
        if (!v) {
            c->truncated = true;
            return;
        }
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = r;
}

/* (cluster, env, pool), as the reference's snapshot sorts; namespace last. */
static int by_key(const void *a, const void *b)
{
    const struct route_record *x = *(const struct route_record *const *)a;
    const struct route_record *y = *(const struct route_record *const *)b;
    int c = strcmp(x->cluster, y->cluster);
    if (c == 0)
        c = strcmp(x->env, y->env);
    if (c == 0)
        c = strcmp(x->pool, y->pool);
    if (c == 0)
        c = strcmp(x->ns, y->ns);
    return c;
}

static void collect_run(struct federation *f, struct collect *c)
{
    c->now_ms = federation_now_ms();
    fed_registry_each(federation_registry(f), collect_one, c);
    if (c->n > 1)
        qsort(c->v, c->n, sizeof(*c->v), by_key);
}

/* The namespace a principal may see: its own, or for an admin what it asks
 * (NULL: all). Answers 403 itself and returns false when a tenant asks for
 * another namespace. */
static bool scope(struct http_exchange *ex, const struct keys_principal *p, char *ns, size_t len,
                  const char **out)
{
    int rc = http_query_get(http_req(ex), "namespace", ns, len);
    if (rc == AB_ELIMIT) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "query namespace must be at most %d bytes", ROUTE_NAME_MAX);
        return false;
    }
    if (p->role == KEYS_ROLE_ADMIN) {
        *out = rc == 0 && ns[0] ? ns : NULL;
        return true;
    }
    if (rc == 0 && ns[0] && strcmp(ns, p->namespace) != 0) {
        auth_respond_api_error(ex, 403, "PERMISSION_DENIED",
                               "namespace '%s' is not yours: a tenant key sees only namespace "
                               "'%s'",
                               ns, p->namespace);
        return false;
    }
    *out = p->namespace;
    return true;
}

static void list_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    struct federation *f = h->fed;
    char ns[ROUTE_NAME_MAX + 2] = "", env[ROUTE_NAME_MAX + 2] = "", cl[AB_CLUSTER_ID_MAX + 2] = "";
    struct collect c = {0};
    if (!f) {
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "federation is shutting down");
        return;
    }
    if (!scope(ex, p, ns, sizeof(ns), &c.ns))
        return;
    if (http_query_get(http_req(ex), "env", env, sizeof(env)) == AB_ELIMIT ||
        http_query_get(http_req(ex), "cluster", cl, sizeof(cl)) == AB_ELIMIT) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "query env or cluster is too long");
        return;
    }
    c.env = env[0] ? env : NULL;
    c.cluster = cl[0] ? cl : NULL;
    collect_run(f, &c);
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < c.n; i++)
        json_array_append_new(arr, record_json(c.v[i], c.now_ms));
    free(c.v);
    http_respond_json(ex, 200,
                      json_pack("{s:o,s:i,s:b,s:i}", "records", arr ? arr : json_array(), "count",
                                (int)c.n, "truncated", c.truncated, "ttlMs", ROUTE_TTL_MS));
}

/* ok with the caller's principal, or 503 on a hub without authentication. */
static void authed(struct http_exchange *ex, struct hub *h, auth_ok_fn ok)
{
    if (!h->auth) {
        http_respond_error(ex, 503, "authentication is not configured on this hub");
        return;
    }
    auth_request(h->auth, ex, AUTH_SURFACE_API, ok, h);
}

static void h_list(struct http_exchange *ex, void *arg)
{
    authed(ex, arg, list_ok);
}

/* {cluster, envs: [{namespace, env, idle, running, pools: [record...]}]} */
static void cluster_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    struct federation *f = h->fed;
    const char *id = http_param(ex, "id");
    char ns[ROUTE_NAME_MAX + 2] = "";
    struct collect c = {0};
    if (!f) {
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "federation is shutting down");
        return;
    }
    if (!scope(ex, p, ns, sizeof(ns), &c.ns))
        return;
    c.cluster = id ? id : "";
    collect_run(f, &c);
    json_t *envs = json_array(), *cur = NULL, *pools = NULL;
    const struct route_record *prev = NULL;
    for (size_t i = 0; envs && i < c.n; i++) {
        const struct route_record *r = c.v[i];
        if (!prev || strcmp(prev->env, r->env) != 0 || strcmp(prev->ns, r->ns) != 0) {
            pools = json_array();
            cur = json_pack("{s:s,s:s,s:i,s:i,s:o}", "namespace", r->ns, "env", r->env, "idle", 0,
                            "running", 0, "pools", pools ? pools : json_array());
            if (!cur)
                break;
            json_array_append_new(envs, cur);
        }
        json_object_set_new(
            cur, "idle", json_integer(json_integer_value(json_object_get(cur, "idle")) + r->idle));
        json_object_set_new(
            cur, "running",
            json_integer(json_integer_value(json_object_get(cur, "running")) + r->running));
        json_array_append_new(json_object_get(cur, "pools"), record_json(r, c.now_ms));
        prev = r;
    }
    free(c.v);
    http_respond_json(
        ex, 200,
        json_pack("{s:s,s:o}", "cluster", id ? id : "", "envs", envs ? envs : json_array()));
}

static void h_cluster(struct http_exchange *ex, void *arg)
{
    authed(ex, arg, cluster_ok);
}

int federation_api_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/api/v1/federation", h_list, h, 0},
        {"GET", "/api/clusters/{id}/federation", h_cluster, h, 0},
    };
    return hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
