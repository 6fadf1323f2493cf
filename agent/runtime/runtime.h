/* The runtime seam (DESIGN §10): what the E2B API, the native API, the data
 * plane and the reporter ask of "the thing that runs sandboxes", whether it
 * is the local runtime (namespaced processes) or the kube runtime (Pods).
 *
 * Everything here runs on the loop thread. Calls that can finish at once do
 * (get, list, pool status, release). claim finishes later through its
 * callback, on the loop thread, exactly once, unless the claim was refused
 * synchronously (non-zero return: the callback never comes) or cancelled
 * with rt_claim_cancel (the callback never comes either).
 *
 * Error codes (enum ab_err) and what an HTTP layer should answer:
 *   AB_ENOENT   unknown env/pool/sandbox                     404
 *   AB_EINVAL   a bad option (message names it)              400
 *   AB_EBUSY    too many waiting claims for the pool         429 / 503
 *   AB_ETIMEOUT no sandbox became ready in the startup time  504 (E2B: 500 with the message)
 *   AB_EIO      the sandbox failed (start, arm)              502
 *   AB_ECLOSED  the runtime is shutting down                 503
 * Messages never contain tokens or env var values. */
#ifndef AGENTBOX_RUNTIME_RUNTIME_H
#define AGENTBOX_RUNTIME_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define RT_NAME_MAX 63
#define RT_ID_MAX 63
#define RT_ADDR_MAX 256
#define RT_ERR_MAX 256
#define RT_ENV_VARS_MAX 256 /* per claim */
#define RT_VALUE_MAX 16384  /* one env var or metadata value */

struct rt;

/* What the name of a claim refers to. E2B rules (reference §1.8): a bare name
 * is an env only; `local::name` is an env first, then a pool. */
enum rt_target { RT_TARGET_ENV = 1, RT_TARGET_POOL, RT_TARGET_ENV_OR_POOL };

struct rt_claim_options {
    const char *id;             /* sandbox id to give (the caller allocates ids: sbxid.h) */
    int64_t timeout_s;          /* lifetime from claim; 0 → pool's default idle timeout or 300 */
    int64_t startup_timeout_ms; /* wait for a ready sandbox; 0 → pool default or 120000 */
    const json_t *env_vars;     /* object of strings, or NULL; copied */
    const json_t *metadata;     /* object of strings, or NULL; copied */
    bool allow_internet;
    const char *user;         /* NULL → "user" */
    const char *workdir;      /* NULL → "/home/user" */
    const char *access_token; /* envd access token, or NULL; kept only in memory */
    const char *team;         /* owner, recorded for list filters; may be NULL */
    const char *owner;
};

enum rt_state { RT_STARTING = 1, RT_IDLE, RT_RUNNING, RT_STOPPING };

/* A snapshot; strings are copies inside the struct, metadata is a new
 * reference the receiver must json_decref (NULL when none). */
struct rt_sandbox {
    char id[RT_ID_MAX + 1];
    char ns[RT_NAME_MAX + 1];
    char env[RT_NAME_MAX + 1]; /* "" when claimed from a pool directly */
    char pool[RT_NAME_MAX + 1];
    char scaling_group[RT_NAME_MAX + 1];
    char template_name[254];
    char team[RT_NAME_MAX + 1];
    char owner[RT_NAME_MAX + 1];
    enum rt_state state;
    bool internet;
    int64_t claimed_ms;          /* wall clock */
    int64_t end_ms;              /* wall clock; the timeout ends it then */
    char envd_addr[RT_ADDR_MAX]; /* "unix:/path" or "host:port" for the data plane */
    /* How the data plane reaches any other port P of the sandbox: an address
     * prefix for http_client ("netns:/proc/<pid>/ns/net|127.0.0.1" — append
     * ":P"), or "" when the runtime has no way (then only envd is proxied). */
    char port_addr[RT_ADDR_MAX];
    json_t *metadata;
};

struct rt_pool_status {
    int replicas; /* desired idle sandboxes */
    int idle;
    int running;
    int starting;
    int stopping;
    int pending; /* claims waiting for a sandbox */
};

struct rt_pool {
    char ns[RT_NAME_MAX + 1];
    char name[RT_NAME_MAX + 1];
    char env[RT_NAME_MAX + 1]; /* "" for a standalone pool */
    char scaling_group[RT_NAME_MAX + 1];
    char template_name[254];
    struct rt_pool_status status;
};

struct rt_env {
    char ns[RT_NAME_MAX + 1];
    char name[RT_NAME_MAX + 1];
    char template_name[254];
    int npools;        /* member pools on this cluster */
    int idle, running; /* sums over the member pools */
};

struct rt_filter {
    const char *ns;          /* NULL: any */
    const char *team;        /* NULL: any */
    const char *env_or_pool; /* NULL: any */
    bool include_idle;       /* idle and starting sandboxes too (operators' view) */
};

typedef void (*rt_claim_cb)(void *arg, int err, const char *msg, const struct rt_sandbox *s);
typedef void (*rt_pool_fn)(void *arg, const struct rt_pool *p);
typedef void (*rt_env_fn)(void *arg, const struct rt_env *e);
typedef void (*rt_sandbox_fn)(void *arg, const struct rt_sandbox *s); /* s->metadata borrowed */

struct rt_ops {
    int (*claim)(struct rt *rt, const char *ns, const char *name, enum rt_target target,
                 const char *scaling_group, const struct rt_claim_options *o, rt_claim_cb cb,
                 void *arg, uint64_t *ticket, char *err, size_t errlen);
    void (*claim_cancel)(struct rt *rt, uint64_t ticket);
    int (*release)(struct rt *rt, const char *id);
    int (*set_timeout)(struct rt *rt, const char *id, int64_t timeout_s);
    void (*touch)(struct rt *rt, const char *id);
    int (*get)(struct rt *rt, const char *id, struct rt_sandbox *out);
    void (*list)(struct rt *rt, const struct rt_filter *f, rt_sandbox_fn fn, void *arg);
    void (*list_pools)(struct rt *rt, const char *ns, rt_pool_fn fn, void *arg);
    void (*list_envs)(struct rt *rt, const char *ns, rt_env_fn fn, void *arg);
    int (*pool_status)(struct rt *rt, const char *ns, const char *pool, struct rt_pool_status *o);
    void (*free)(struct rt *rt);
};

/* What a runtime can do beyond the basics. The layers above ask with rt_has;
 * they never compare kinds. */
enum rt_cap {
    RT_CAP_IMAGE_OVERRIDE = 1u << 0, /* a create may name an image (`env//image`) */
    RT_CAP_NETWORK_UPDATE = 1u << 1, /* a running sandbox's egress can be changed */
};

/* Every implementation's object starts with this. */
struct rt {
    const struct rt_ops *ops;
    const char *kind; /* "local" or "kube": for logs and /metrics labels only */
    unsigned caps;    /* enum rt_cap bits */
};

static inline bool rt_has(const struct rt *rt, enum rt_cap cap)
{
    return rt && (rt->caps & cap) != 0;
}

/* Starts a claim for env or pool `name` in namespace ns. scaling_group
 * selects an Env member (NULL or "": the member with the most idle
 * sandboxes, then the lowest priority, then the name). *ticket (may be NULL)
 * identifies the claim for rt_claim_cancel. On a non-zero return err says
 * why and cb never runs. */
static inline int rt_claim(struct rt *rt, const char *ns, const char *name, enum rt_target target,
                           const char *scaling_group, const struct rt_claim_options *o,
                           rt_claim_cb cb, void *arg, uint64_t *ticket, char *err, size_t errlen)
{
    return rt->ops->claim(rt, ns, name, target, scaling_group, o, cb, arg, ticket, err, errlen);
}
/* The caller went away: cb will not run; a sandbox being armed for it is released. */
static inline void rt_claim_cancel(struct rt *rt, uint64_t ticket)
{
    rt->ops->claim_cancel(rt, ticket);
}
/* Destroys a claimed sandbox (and starts its replacement). AB_ENOENT when unknown. */
static inline int rt_release(struct rt *rt, const char *id)
{
    return rt->ops->release(rt, id);
}
/* The sandbox now ends timeout_s seconds from now (E2B semantics). */
static inline int rt_set_timeout(struct rt *rt, const char *id, int64_t timeout_s)
{
    return rt->ops->set_timeout(rt, id, timeout_s);
}
/* Activity (data-plane traffic): restarts the pool's idle timeout. */
static inline void rt_touch(struct rt *rt, const char *id)
{
    rt->ops->touch(rt, id);
}
static inline int rt_get(struct rt *rt, const char *id, struct rt_sandbox *out)
{
    return rt->ops->get(rt, id, out);
}
static inline void rt_list(struct rt *rt, const struct rt_filter *f, rt_sandbox_fn fn, void *arg)
{
    rt->ops->list(rt, f, fn, arg);
}
static inline void rt_list_pools(struct rt *rt, const char *ns, rt_pool_fn fn, void *arg)
{
    rt->ops->list_pools(rt, ns, fn, arg);
}
static inline void rt_list_envs(struct rt *rt, const char *ns, rt_env_fn fn, void *arg)
{
    rt->ops->list_envs(rt, ns, fn, arg);
}
static inline int rt_pool_status(struct rt *rt, const char *ns, const char *pool,
                                 struct rt_pool_status *out)
{
    return rt->ops->pool_status(rt, ns, pool, out);
}
/* Stops timers and in-flight requests; sandboxes keep running (a restarted
 * agent re-adopts them). */
static inline void rt_free(struct rt *rt)
{
    if (rt)
        rt->ops->free(rt);
}

#endif
