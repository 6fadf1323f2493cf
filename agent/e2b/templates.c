/* GET /templates and GET /templates/{id} (reference §2.5): an E2B template
 * is a SandboxEnv of the caller's namespace; aliases are the env name and its
 * member pools. A pool name still answers GET /templates/{id} (the legacy
 * projection), but create never falls back from a bare name to a pool.
 * The list adds `cluster::env` for the same-namespace envs of other clusters
 * as the hub saw them last (one call to the hub, never a fan-out; a hub that
 * is down or slower than 1 s leaves them out). */
#include "agent/e2b/e2b.h"

#include "agent/auth.h"
#include "agent/hub_link.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/ref.h"
#include "agentbox/sbxid.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOLS_MAX 1024

struct pools {
    struct rt_pool *v;
    size_t n;
};

static void pool_cb(void *arg, const struct rt_pool *p)
{
    struct pools *ps = arg;
    if (ps->n < POOLS_MAX)
        ps->v[ps->n++] = *p;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

/* The member pools' size in the shapes' units: the first member named <env>-<N>c<M>gi. */
static void size_of(const struct pools *ps, const char *env, int64_t *cpu, int64_t *mem)
{
    *cpu = 0;
    *mem = 0;
    for (size_t i = 0; i < ps->n; i++) {
        long long c, g;
        char tail[4];
        const char *dash = strrchr(ps->v[i].name, '-');
        if (strcmp(ps->v[i].env, env) != 0 || !dash)
            continue;
        if (sscanf(dash + 1, "%lldc%lld%3s", &c, &g, tail) == 3 && strcmp(tail, "gi") == 0) {
            *cpu = c;
            *mem = g * 1024;
            return;
        }
    }
}

static json_t *template_json(struct e2b *e, const char *ns, const char *name, bool is_env,
                             const struct pools *ps, int running)
{
    char at[32], build[65];
    int64_t cpu = 0, mem = 0;
    json_t *aliases = json_array();
    json_t *arr[POOLS_MAX + 1];
    size_t n = 0;

    e2b_time(e->started_ms, at, sizeof(at));
    {
        /* sized so the key is never cut: ns is a principal's namespace (< 64
         * bytes), name an env or cluster::env (< REF_MAX) */
        char key[64 + 1 + REF_MAX];
        snprintf(key, sizeof(key), "%s/%s", ns, name);
        crypto_sha256_hex(key, build);
        build[32] = '\0';
    }
    arr[n++] = json_string(name);
    for (size_t i = 0; is_env && i < ps->n && n < AB_ARRAY_LEN(arr); i++)
        if (strcmp(ps->v[i].env, name) == 0 && strcmp(ps->v[i].name, name) != 0)
            arr[n++] = json_string(ps->v[i].name);
    qsort(arr, n, sizeof(arr[0]), cmp_str);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(aliases, arr[i]);
    if (is_env) {
        size_of(ps, name, &cpu, &mem);
    } else {
        struct pools one = {(struct rt_pool *)ps->v, ps->n};
        for (size_t i = 0; i < one.n; i++) {
            long long c, g;
            char tail[4];
            const char *dash = strrchr(one.v[i].name, '-');
            if (strcmp(one.v[i].name, name) == 0 && dash &&
                sscanf(dash + 1, "%lldc%lld%3s", &c, &g, tail) == 3 && !strcmp(tail, "gi")) {
                cpu = c;
                mem = g * 1024;
            }
        }
    }
    return json_pack("{s:s,s:s,s:s,s:b,s:o,s:[s],s:s,s:I,s:i,s:s,s:s,s:n,s:n,s:I,s:I,s:i}",
                     "templateID", name, "buildID", build, "buildStatus", "ready", "public",
                     !is_env, "aliases", aliases, "names", name, "envdVersion", E2B_ENVD_VERSION,
                     "spawnCount", (json_int_t)running, "buildCount", 1, "createdAt", at,
                     "updatedAt", at, "createdBy", "lastSpawnedAt", "cpuCount", (json_int_t)cpu,
                     "memoryMB", (json_int_t)mem, "diskSizeMB", 0);
}

struct envs {
    struct rt_env v[POOLS_MAX];
    size_t n;
};

static void env_cb(void *arg, const struct rt_env *e)
{
    struct envs *es = arg;
    if (es->n < POOLS_MAX)
        es->v[es->n++] = *e;
}

static int cmp_env(const void *a, const void *b)
{
    return strcmp(((const struct rt_env *)a)->name, ((const struct rt_env *)b)->name);
}

/* Loads envs and pools of ns; 0 or AB_ENOMEM. */
static int load(struct e2b *e, const char *ns, struct envs **es, struct pools *ps)
{
    struct rt *rt = e2b_rt(e);
    *es = calloc(1, sizeof(**es));
    ps->v = calloc(POOLS_MAX, sizeof(*ps->v));
    ps->n = 0;
    if (!*es || !ps->v) {
        free(*es);
        free(ps->v);
        return AB_ENOMEM;
    }
    if (rt) {
        rt_list_envs(rt, ns, env_cb, *es);
        rt_list_pools(rt, ns, pool_cb, ps);
    }
    qsort((*es)->v, (*es)->n, sizeof((*es)->v[0]), cmp_env);
    return 0;
}

/* --- other clusters' envs (DESIGN §6): from the hub's fresh view, one call ---------------- */

#define HUB_ENVS_TIMEOUT_MS 1000
#define HUB_ENVS_MAX_BODY (4 * 1024 * 1024)

/* A listing waiting for the hub (at most HUB_ENVS_TIMEOUT_MS). */
struct tlist {
    struct e2b *e;
    struct http_exchange *ex;
    json_t *arr;
    char ns[RT_NAME_MAX + 1];
};

/* The hub's answer, or its deadline (status 0: this cluster's envs only). */
static void tlist_hub(const struct tun_call_result *res, void *arg)
{
    struct tlist *t = arg;
    json_t *j = res->status == 200 ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;
    struct pools none = {NULL, 0};
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(j, "envs"), i, it)
    {
        const char *c = json_string_value(json_object_get(it, "cluster"));
        const char *env = json_string_value(json_object_get(it, "env"));
        char name[SBXID_CLUSTER_MAX + RT_NAME_MAX + 3];
        if (!c || !env || strcmp(c, t->e->cluster) == 0 || !sbxid_cluster_is_valid(c, NULL, 0) ||
            strlen(env) > RT_NAME_MAX)
            continue;
        snprintf(name, sizeof(name), "%s::%s", c, env);
        json_array_append_new(t->arr, template_json(t->e, t->ns, name, true, &none, 0));
    }
    json_decref(j);
    http_respond_json(t->ex, 200, t->arr);
    free(t);
}

/* Adds `cluster::env` for the same-namespace envs other clusters report, as
 * the hub last saw them (fresh records only). Takes arr; answers ex. */
static void list_with_hub(struct e2b *e, struct http_exchange *ex, const char *ns, json_t *arr)
{
    struct hub_link *hub = e2b_hub(e);
    struct tlist *t = hub_link_session(hub) ? calloc(1, sizeof(*t)) : NULL;
    char path[64 + RT_NAME_MAX + 1]; /* the prefix and a namespace always fit */
    if (!t) {
        http_respond_json(ex, 200, arr);
        return;
    }
    t->e = e;
    t->ex = ex;
    t->arr = arr;
    ab_strlcpy(t->ns, ns, sizeof(t->ns));
    snprintf(path, sizeof(path), "/internal/v1/federation/envs?namespace=%s", ns);
    if (hub_link_call_within(hub, HUB_ENVS_TIMEOUT_MS, "GET", path, NULL, 0, NULL, 0,
                             HUB_ENVS_MAX_BODY, tlist_hub, t) != 0) {
        free(t);
        http_respond_json(ex, 200, arr);
    }
}

static void list_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    struct envs *es;
    struct pools ps;
    if (load(e, p->namespace, &es, &ps) != 0) {
        http_respond_error(ex, 503, "out of memory while listing templates");
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < es->n; i++)
        json_array_append_new(
            arr, template_json(e, p->namespace, es->v[i].name, true, &ps, es->v[i].running));
    free(es);
    free(ps.v);
    list_with_hub(e, ex, p->namespace, arr);
}

static void get_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    const char *id = http_param(ex, "id");
    struct envs *es;
    struct pools ps;
    json_t *t = NULL;
    struct ref ref;

    /* cluster::env (as GET /templates lists other clusters' envs) */
    if (id && strstr(id, "::") && ref_parse(id, &ref) == 0 && ref.name[0]) {
        if (ref.cluster[0] && strcmp(ref.cluster, e->cluster) != 0) {
            char target[REF_MAX + 16];
            snprintf(target, sizeof(target), "/templates/%s", ref.name);
            e2b_forward(e, ex, p, ref.cluster, target);
            return;
        }
        id = ref.name;
    }

    if (load(e, p->namespace, &es, &ps) != 0) {
        http_respond_error(ex, 503, "out of memory while reading templates");
        return;
    }
    for (size_t i = 0; !t && i < es->n; i++)
        if (strcmp(es->v[i].name, id) == 0)
            t = template_json(e, p->namespace, id, true, &ps, es->v[i].running);
    for (size_t i = 0; !t && i < ps.n; i++)
        if (strcmp(ps.v[i].name, id) == 0)
            t = template_json(e, p->namespace, id, false, &ps, ps.v[i].status.running);
    free(es);
    free(ps.v);
    if (!t) {
        http_respond_error(ex, 404,
                           "template not found: pass a SandboxEnv name (GET /templates lists "
                           "them)");
        return;
    }
    json_object_set_new(t, "builds", json_array());
    http_respond_json(ex, 200, t);
}

int e2b_template_routes(struct e2b *e, char *err, size_t errlen)
{
    int rc = e2b_route(e, "GET", "/templates", list_op, 0, err, errlen);
    if (rc == 0)
        rc = e2b_route(e, "GET", "/templates/{id}", get_op, 0, err, errlen);
    return rc;
}
