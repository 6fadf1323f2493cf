/* The runtime seam (DESIGN §10): what the E2B API, the native API, the data
 * plane and the reporter ask of "the thing that runs sandboxes", whether it
 * is the local runtime (namespaced processes) or the kube runtime (Pods).
 * Nothing above this header reads a runtime's files or compares its kind.
 *
 * Everything here runs on the loop thread, except rt_usage_read and
 * rt_log_read (see "Usage and logs" below), which run on a worker. Calls that can finish at once do
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
#include <stdio.h>
#include <string.h>
#include <jansson.h>

#include "agentbox/common.h"
#include "agent/runtime/revision.h"

#define RT_NAME_MAX 63
#define RT_ID_MAX 63
#define RT_ADDR_MAX 256
#define RT_TOKEN_MAX 512 /* an envd access token */
#define RT_ERR_MAX 256
#define RT_ENV_VARS_MAX 256 /* per claim */
#define RT_VALUE_MAX 16384  /* one env var or metadata value */

struct rt;

/* What the name of a claim refers to. E2B rules (reference §1.8): a bare name
 * is an env only; `local::name` is an env first, then a pool. */
enum rt_target { RT_TARGET_ENV = 1, RT_TARGET_POOL, RT_TARGET_ENV_OR_POOL };

struct rt_claim_options {
    const char *id;    /* sandbox id to give (the caller allocates ids: sbxid.h) */
    int64_t timeout_s; /* lifetime from claim; 0 → pool's default idle timeout or 300 */
    /* E2B's `timeout` (DESIGN §7): timeout_s is the sandbox's idle timeout,
     * counted from its last activity (rt_touch) and replacing the pool's,
     * instead of a lifetime; rt_set_timeout then sets it anew. */
    bool timeout_is_idle;
    int64_t startup_timeout_ms; /* wait for a ready sandbox; 0 → pool default or 120000 */
    const json_t *env_vars;     /* object of strings, or NULL; copied */
    const json_t *metadata;     /* object of strings, or NULL; copied */
    bool allow_internet;
    /* The E2B create's `network` object (allowOut, denyOut, ...), already
     * accepted by egress_policy_parse, or NULL; copied. With
     * allow_private_networks (the agentbox.scitix.ai/allow-private-networks
     * metadata) it is the sandbox's egress policy on a runtime with RT_CAP_EGRESS. */
    const json_t *network;
    bool allow_private_networks;
    const char *user;         /* NULL → "user" */
    const char *workdir;      /* NULL → "/home/user" */
    const char *access_token; /* envd access token, or NULL: the runtime's own random one */
    const char *team;         /* owner, recorded for list filters; may be NULL */
    const char *owner;
    /* The image the sandbox runs (`env//image`, the reserved image metadata
     * key), or NULL: the env's. Only with RT_CAP_IMAGE_OVERRIDE. */
    const char *image;
    /* The request's X-AgentBox-Trace id (agentbox/trace.h), or NULL: the
     * runtime logs its claim stages under it (a burst's claim split into
     * queue, envd /init and the state record). */
    const char *trace;
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
    /* The envd access token the sandbox was armed with: random per sandbox,
     * held by the runtime (never derived from the id); "" before a claim. */
    char envd_token[RT_TOKEN_MAX + 1];
    /* What the sandbox is given (its cgroup's limits); 0 when unknown. */
    int64_t cpu_milli;
    int64_t mem_bytes;
    int64_t disk_bytes;
    json_t *metadata;
};

struct rt_pool_status {
    int replicas; /* maximum concurrency: sandboxes in any state but stopping */
    int idle;
    int running;
    int starting;
    int stopping;
    int pending; /* claims waiting for a sandbox */
    /* rolls: the revision its sandboxes should be at, and how many are */
    char update_revision[RT_REV_LEN + 1];
    int updated;
};

struct rt_pool {
    char ns[RT_NAME_MAX + 1];
    char name[RT_NAME_MAX + 1];
    char env[RT_NAME_MAX + 1]; /* "" for a standalone pool */
    char scaling_group[RT_NAME_MAX + 1];
    char template_name[254];
    struct rt_pool_status status;
    /* Its scaling group's autoscaler is on, and how far it may grow
     * (rt_scale_headroom: -1 unbounded, 0 at a ceiling); false / 0 otherwise. */
    bool autoscaling;
    int headroom;
    int64_t saturated_for_ms; /* what is left of its saturation cooldown; 0: not saturated */
    /* Creates ever queued on it, counting from 0 when the pool came to be:
     * the hub pays its placement reservations back by how far this moved. */
    uint64_t claims;
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
/* A release's end: err 0 once every process of the sandbox is gone,
 * AB_ETIMEOUT (msg names the sandbox) when some survived the deadline,
 * AB_ECLOSED when the runtime shut down first. */
typedef void (*rt_release_cb)(void *arg, int err, const char *msg);

#define RT_RELEASE_WAIT_MS 10000 /* what the kill handlers give a release */

/* --- Usage and logs --------------------------------------------------------------
 *
 * Reading a sandbox's usage or its log blocks (files, /proc, a cgroup; the
 * network for a remote runtime), so it never runs on the loop thread. Each
 * read is split in two:
 *   1. rt_usage_probe / rt_log_probe, on the loop thread: the runtime copies
 *      into a struct rt_probe what the read needs (paths, pids, the claim
 *      time). Cheap, never blocks. AB_ENOENT for an unknown sandbox, one not
 *      claimed, or a runtime without RT_CAP_USAGE / RT_CAP_LOGS.
 *   2. rt_usage_read / rt_log_read, on any thread (a loop worker, through
 *      loop_submit): they use only the probe, never the struct rt, which may
 *      be freed meanwhile. The probe carries the runtime's ops table, which
 *      is static, not the instance.
 * A probe is plain data: copy it, keep it, nothing to free. */

#define RT_PROBE_DATA_MAX 1024
#define RT_LOG_LINES_MAX 1000     /* entries per read */
#define RT_LOG_TAIL_MAX (1 << 20) /* bytes of the log's end a read looks at */
#define RT_LOG_SEARCH_MAX 511

struct rt_probe {
    const struct rt_ops *ops; /* the runtime's static table: its read functions */
    char id[RT_ID_MAX + 1];
    char ns[RT_NAME_MAX + 1];
    int64_t claimed_ms; /* wall clock */
    /* The runtime's own data (copied in and out with memcpy). */
    _Alignas(8) unsigned char data[RT_PROBE_DATA_MAX];
};

/* One reading. Counters grow from the sandbox's start; a field the runtime
 * cannot tell is 0. */
struct rt_usage {
    int err;                /* 0, or AB_ENOENT: the sandbox was gone (rest is 0) */
    double cpu_seconds;     /* CPU time of all its processes */
    double mem_working_set; /* bytes the kernel could not reclaim */
    double mem_rss;         /* bytes resident */
    double mem_cache;       /* bytes of page cache charged to it */
    double disk_used;       /* bytes of its own files */
    uint64_t net_rx_bytes;  /* over its interfaces except loopback */
    uint64_t net_tx_bytes;
    int64_t cpu_count; /* CPUs it may use */
    int64_t mem_limit; /* bytes */
};

/* Levels inferred from a line's leading token (reference §2.6). */
enum rt_log_level { RT_LOG_DEBUG = 0, RT_LOG_INFO, RT_LOG_WARN, RT_LOG_ERROR };

/* Which entries a read returns: the last RT_LOG_TAIL_MAX bytes of the log,
 * at most RT_LOG_LINES_MAX lines, then these filters, oldest first unless
 * backward (then the newest first), at most limit. */
struct rt_log_query {
    int64_t start_ms; /* entries older than this are skipped; 0: none */
    int64_t limit;    /* <= 0 or > RT_LOG_LINES_MAX: RT_LOG_LINES_MAX */
    bool backward;
    enum rt_log_level min_level;
    char search[RT_LOG_SEARCH_MAX + 1]; /* a substring of the line; "": any */
};

struct rt_log_entry {
    int64_t ms;              /* the line's leading RFC 3339 time, else the claim time */
    enum rt_log_level level; /* inferred from the token after that time */
    const char *line;        /* the whole line (time included); lives in the rt_log */
};

/* A read's result; owns the lines. Free with rt_log_free. */
struct rt_log {
    struct rt_log_entry *entries;
    size_t n;
    char *buf;
};

/* --- Manifest objects (the native management API, reference §4.2/§4.4) -----------
 *
 * The objects a runtime runs from — SandboxTemplate, SandboxPool, SandboxEnv
 * (agents.navix.sh/v1alpha1) — read as JSON {apiVersion, kind, metadata,
 * spec} and written whole. The local runtime keeps writes in files beside its
 * manifest directory (persisting across restarts); the kube runtime's writes
 * are the CRDs. Only with RT_CAP_MANIFEST_WRITE. */
enum rt_obj_kind { RT_OBJ_TEMPLATE = 1, RT_OBJ_POOL, RT_OBJ_ENV };
/* An Env's imagePullSecret on a write (§4.4): removed, kept as is, or replaced. */
enum rt_secret_op { RT_SECRET_DELETE = 0, RT_SECRET_KEEP, RT_SECRET_SET };

struct rt_object {
    enum rt_obj_kind kind;
    const char *ns; /* "" for templates */
    const char *name;
    const json_t *obj; /* borrowed for the call; Env members carry their rendered names */
    bool from_api;     /* written through the API (else the operator's seed) */
    bool pull_secret;  /* an Env whose imagePullSecret is kept */
};

struct rt_write {
    enum rt_obj_kind kind;
    const char *ns;
    const char *name;
    const json_t *obj; /* the whole new object; NULL deletes it */
    enum rt_secret_op secret;
    const json_t *pull_secret; /* RT_SECRET_SET: {registries:[{registry,username,password}]} */
};

typedef void (*rt_object_fn)(void *arg, const struct rt_object *o);
/* A write's end, on the loop thread: err 0 once the change is in effect
 * (the runtime reconciles to it), else msg says why. */
typedef void (*rt_write_cb)(void *arg, int err, const char *msg);

/* --- Scaling groups (the autoscaler's seam, reference §6.6) -------------------------------
 *
 * A runtime that runs Envs with autoscaling groups (RT_CAP_AUTOSCALE) hands
 * the agent's autoscaler (agent/autoscale.h) a snapshot of every group with
 * members on this cluster, and takes back each member pool's desired
 * replicas. A group exists while a member declares it (scalingGroup; "" is
 * excluded); the Env's autoscaling.groups[] entry, if any, gives its policy,
 * else the defaults with enabled false. Times are ab_now_ms() (monotonic). */
#define RT_GROUP_MEMBERS_MAX 64
#define RT_IDLE_SAMPLES_MAX 64 /* idle sandboxes described per member (oldest first) */

enum rt_scale_mode { RT_SCALE_DEFAULT = 0, RT_SCALE_CONSERVATIVE, RT_SCALE_AGGRESSIVE };

/* A group's policy with every default applied (crds-and-charts.md §1.3, §4.3). */
struct rt_scale_policy {
    bool enabled;
    int32_t min_replicas; /* aggregate floor over this cluster's members */
    int32_t max_replicas; /* aggregate ceiling; -1: none */
    enum rt_scale_mode mode;
    int64_t cooldown_ms;          /* 30 s: between scale-ups */
    int64_t idle_threshold_ms;    /* 30 s: proactive after idle stayed 0 this long; 0 off */
    int64_t quiet_window_ms;      /* 300 s: proactive only with a create this recent; 0 off */
    int64_t saturation_ms;        /* 60 s: a saturated member is skipped this long */
    int64_t down_idle_timeout_ms; /* 300 s: idle this long to be removed */
    int64_t stabilization_ms;     /* 60 s: between scale-downs (and after a scale-up) */
    int64_t protection_ms;        /* 10 s: a marked sandbox may still be claimed */
};

struct rt_scale_member {
    char name[RT_NAME_MAX + 1]; /* the member pool */
    int32_t up_priority;        /* scaleUpPriority, else priority: lower grows first */
    int32_t down_priority;      /* scaleDownPriority, else priority: higher shrinks first */
    int32_t min_replicas;       /* -1: none */
    int32_t max_replicas;       /* -1: none */
    int replicas;               /* desired now: the autoscaler's if it set one, else the spec's */
    int spec_replicas;          /* what the manifest / CRD says */
    struct rt_pool_status status;
    int nidle;                                  /* entries of idle_since_ms */
    int64_t idle_since_ms[RT_IDLE_SAMPLES_MAX]; /* when each idle sandbox became idle */
    int64_t last_create_ms;                     /* the last claim on it; 0: none seen */
    int64_t saturated_ms; /* the last time it could not grow (no capacity); 0: never */
};

struct rt_scale_group {
    char ns[RT_NAME_MAX + 1];
    char env[RT_NAME_MAX + 1];
    char name[RT_NAME_MAX + 1];
    char cluster[RT_NAME_MAX + 1]; /* this cluster (the tie-break of §6.6's order) */
    struct rt_scale_policy policy;
    int nmembers;
    struct rt_scale_member members[RT_GROUP_MEMBERS_MAX];
};

/* g is valid during the call only. */
typedef void (*rt_group_fn)(void *arg, const struct rt_scale_group *g);

/* The defaults of a policy, enabled false. */
static inline void rt_scale_policy_defaults(struct rt_scale_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->max_replicas = -1;
    p->cooldown_ms = 30000;
    p->idle_threshold_ms = 30000;
    p->quiet_window_ms = 300000;
    p->saturation_ms = 60000;
    p->down_idle_timeout_ms = 300000;
    p->stabilization_ms = 60000;
    p->protection_ms = 10000;
}

/* A member's scale-up headroom as reported to the hub (DESIGN §6): how many
 * more replicas its own ceiling and its group's leave it, -1 when neither
 * bounds it, 0 at a ceiling. group_total: the replicas of all members. */
static inline int rt_scale_headroom(int replicas, int32_t member_max, int32_t group_max,
                                    int group_total)
{
    int h = -1;
    if (member_max >= 0)
        h = member_max > replicas ? member_max - replicas : 0;
    if (group_max >= 0) {
        int g = group_max > group_total ? group_max - group_total : 0;
        if (h < 0 || g < h)
            h = g;
    }
    return h;
}
/* --- Env events ------------------------------------------------------------------
 *
 * What the native API did to an env (GET /v1/envs/{name}/events), kept by the
 * runtime so a restarted agent still lists them: the local runtime appends
 * to a bounded file beside its API overlay; a runtime without the ops keeps
 * none (the native API's in-memory ring only). */
#define RT_EVENT_REASON_MAX 31
#define RT_EVENT_MESSAGE_MAX 255
struct rt_event {
    int64_t ms; /* wall clock */
    char ns[RT_NAME_MAX + 1];
    char env[RT_NAME_MAX + 1];
    char reason[RT_EVENT_REASON_MAX + 1];
    char message[RT_EVENT_MESSAGE_MAX + 1];
};
/* One kept event, oldest first; e valid during the call only. */
typedef void (*rt_event_fn)(void *arg, const struct rt_event *e);

struct rt_ops {
    int (*claim)(struct rt *rt, const char *ns, const char *name, enum rt_target target,
                 const char *scaling_group, const struct rt_claim_options *o, rt_claim_cb cb,
                 void *arg, uint64_t *ticket, char *err, size_t errlen);
    void (*claim_cancel)(struct rt *rt, uint64_t ticket);
    int (*release)(struct rt *rt, const char *id);
    /* Optional: release, and cb once the processes are gone (see rt_release_wait). */
    int (*release_wait)(struct rt *rt, const char *id, int64_t timeout_ms, rt_release_cb cb,
                        void *arg);
    int (*set_timeout)(struct rt *rt, const char *id, int64_t timeout_s);
    void (*touch)(struct rt *rt, const char *id);
    int (*get)(struct rt *rt, const char *id, struct rt_sandbox *out);
    void (*list)(struct rt *rt, const struct rt_filter *f, rt_sandbox_fn fn, void *arg);
    void (*list_pools)(struct rt *rt, const char *ns, rt_pool_fn fn, void *arg);
    void (*list_envs)(struct rt *rt, const char *ns, rt_env_fn fn, void *arg);
    int (*pool_status)(struct rt *rt, const char *ns, const char *pool, struct rt_pool_status *o);
    void (*free)(struct rt *rt);
    /* Optional (NULL without the matching capability). */
    int (*usage_probe)(struct rt *rt, const char *id, struct rt_probe *out);
    void (*usage_read)(const struct rt_probe *p, size_t n, struct rt_usage *out);
    int (*log_probe)(struct rt *rt, const char *id, struct rt_probe *out);
    int (*log_read)(const struct rt_probe *p, const struct rt_log_query *q, struct rt_log *out);
    /* RT_CAP_NETWORK_UPDATE: a running sandbox's new egress policy. */
    int (*set_network)(struct rt *rt, const char *id, const json_t *network, bool internet,
                       char *err, size_t errlen);
    /* RT_CAP_MANIFEST_WRITE: see rt_objects / rt_object_write. */
    void (*objects)(struct rt *rt, enum rt_obj_kind kind, const char *ns, const char *name,
                    rt_object_fn fn, void *arg);
    int (*object_write)(struct rt *rt, const struct rt_write *w, rt_write_cb cb, void *arg,
                        char *err, size_t errlen);
    /* RT_CAP_AUTOSCALE: see rt_scale_groups / rt_scale_set. */
    void (*scale_groups)(struct rt *rt, rt_group_fn fn, void *arg);
    int (*scale_set)(struct rt *rt, const char *ns, const char *pool, int replicas,
                     const char *reason, char *err, size_t errlen);
    /* Optional: env events kept across restarts (see rt_event_record). */
    void (*event_record)(struct rt *rt, const struct rt_event *e);
    int (*events_load)(struct rt *rt, rt_event_fn fn, void *arg);
};

/* What a runtime can do beyond the basics. The layers above ask with rt_has;
 * they never compare kinds. */
enum rt_cap {
    RT_CAP_IMAGE_OVERRIDE = 1u << 0, /* a create may name an image (`env//image`) */
    RT_CAP_NETWORK_UPDATE = 1u << 1, /* a running sandbox's egress can be changed */
    RT_CAP_USAGE = 1u << 2,          /* rt_usage_probe / rt_usage_read answer */
    RT_CAP_LOGS = 1u << 3,           /* rt_log_probe / rt_log_read answer */
    RT_CAP_EGRESS = 1u << 4, /* every sandbox's traffic passes an egress gateway that enforces
                                the claim's network policy (allowOut, denyOut, the tiers) */
    RT_CAP_MANIFEST_WRITE = 1u << 5, /* rt_objects / rt_object_write answer */
    RT_CAP_AUTOSCALE = 1u << 6,      /* rt_scale_groups / rt_scale_set answer */
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
/* Destroys a claimed sandbox (and starts its replacement). AB_ENOENT when unknown.
 * A claim not answered yet (a no-wait create's: rt_get shows it RT_STARTING)
 * is killed too: its claim callback runs with AB_ECLOSED, now when it still
 * waits for a sandbox, once arming ends when it is being armed; no sandbox of
 * it runs afterwards. */
static inline int rt_release(struct rt *rt, const char *id)
{
    return rt->ops->release(rt, id);
}
/* rt_release, then cb on the loop thread exactly once when every process
 * of the sandbox is gone or timeout_ms passed (kill handlers answer only
 * then: "killing returns when they are gone"). A non-zero return (AB_ENOENT)
 * means nothing was released and cb never runs; for a claim still waiting
 * for a sandbox cb runs before this returns. A runtime that cannot tell
 * (no release_wait) releases and runs cb before this returns. */
static inline int rt_release_wait(struct rt *rt, const char *id, int64_t timeout_ms,
                                  rt_release_cb cb, void *arg)
{
    int rc;

    if (rt->ops->release_wait)
        return rt->ops->release_wait(rt, id, timeout_ms, cb, arg);
    rc = rt->ops->release(rt, id);
    if (rc == 0)
        cb(arg, 0, NULL);
    return rc;
}
/* The sandbox now ends timeout_s seconds from now (E2B semantics); for a
 * timeout_is_idle claim, timeout_s is its idle timeout from now on. */
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
/* Replaces a running sandbox's egress policy: network as in
 * rt_claim_options (NULL: no lists), internet its allow_internet_access.
 * Open connections keep going; new ones see the new policy. AB_ENOENT for an
 * unknown sandbox (or no RT_CAP_NETWORK_UPDATE), AB_EINVAL with err naming
 * the field. */
static inline int rt_set_network(struct rt *rt, const char *id, const json_t *network,
                                 bool internet, char *err, size_t errlen)
{
    if (!rt_has(rt, RT_CAP_NETWORK_UPDATE) || !rt->ops->set_network)
        return AB_ENOENT;
    return rt->ops->set_network(rt, id, network, internet, err, errlen);
}
/* Loop thread: prepares a usage read of claimed sandbox id (see "Usage and
 * logs"). 0, or AB_ENOENT (unknown, not claimed, or no RT_CAP_USAGE). */
static inline int rt_usage_probe(struct rt *rt, const char *id, struct rt_probe *out)
{
    memset(out, 0, sizeof(*out));
    if (!rt_has(rt, RT_CAP_USAGE) || !rt->ops->usage_probe)
        return AB_ENOENT;
    return rt->ops->usage_probe(rt, id, out);
}
/* Any thread, blocking: reads n probes of one runtime at once (one pass over
 * what they share, e.g. /proc), out[i] for p[i]. */
static inline void rt_usage_read(const struct rt_probe *p, size_t n, struct rt_usage *out)
{
    if (n > 0)
        p[0].ops->usage_read(p, n, out);
}
/* Loop thread: prepares a read of claimed sandbox id's log. 0 or AB_ENOENT. */
static inline int rt_log_probe(struct rt *rt, const char *id, struct rt_probe *out)
{
    memset(out, 0, sizeof(*out));
    if (!rt_has(rt, RT_CAP_LOGS) || !rt->ops->log_probe)
        return AB_ENOENT;
    return rt->ops->log_probe(rt, id, out);
}
/* Any thread, blocking: the entries of q. *out is always set (possibly empty)
 * and must be freed with rt_log_free; returns 0, AB_ENOMEM, or AB_EIO when
 * the log cannot be read (then *out is empty). */
static inline int rt_log_read(const struct rt_probe *p, const struct rt_log_query *q,
                              struct rt_log *out)
{
    return p->ops->log_read(p, q, out);
}
void rt_log_free(struct rt_log *l);

/* For runtimes (claim_check.c): the checks every claim makes first (id,
 * timeout, envVars and metadata, access token), in the same words on every
 * runtime. 0, or AB_EINVAL with err naming the field. */
int rt_claim_options_check(const struct rt_claim_options *o, char *err, size_t errlen);
/* For runtimes (claim_check.c): whether a list with filter f (NULL: none)
 * shows a sandbox of this namespace, team, env and pool (env "" when claimed
 * from the pool directly); running false: idle or starting, shown only with
 * include_idle. The tenant boundary of every runtime's list. */
bool rt_filter_admits(const struct rt_filter *f, bool running, const char *ns, const char *team,
                      const char *env, const char *pool);
/* For runtimes (claim_check.c): the snapshot of a claim not started yet
 * (waiting for a sandbox of its pool: a no-wait create answered before it),
 * RT_STARTING with no address, so its owner can see and kill it. metadata:
 * a new reference is taken (NULL: none). */
void rt_fill_pending(struct rt_sandbox *o, const char *id, const char *ns, const char *env,
                     const char *pool, const char *group, const char *team, const char *owner,
                     json_t *metadata);

/* For runtimes (log_text.c): splits text (len bytes and a NUL after them,
 * malloc'ed, owned from now on, freed on error too) into entries and applies
 * q. partial_first: text starts mid-log, its first line is cut and dropped. default_ms: the time of
 * a line without one. Any thread. 0 or AB_ENOMEM. */
int rt_log_from_text(char *text, size_t len, bool partial_first, int64_t default_ms,
                     const struct rt_log_query *q, struct rt_log *out);
/* The level of a line (already without its leading time), reference §2.6. */
enum rt_log_level rt_log_infer_level(const char *s);
/* Parses a leading RFC 3339 time into *ms; returns its length (0: none). */
size_t rt_log_leading_time(const char *s, int64_t *ms);

/* The manifest objects of kind in ns (NULL: any) named name (NULL: any),
 * each once through fn. Nothing without RT_CAP_MANIFEST_WRITE. */
static inline void rt_objects(struct rt *rt, enum rt_obj_kind kind, const char *ns,
                              const char *name, rt_object_fn fn, void *arg)
{
    if (rt_has(rt, RT_CAP_MANIFEST_WRITE) && rt->ops->objects)
        rt->ops->objects(rt, kind, ns, name, fn, arg);
}
/* The write seam: creates, replaces or (w->obj NULL) deletes one object.
 * The runtime validates it first: AB_EINVAL with err naming the field
 * (cb never runs). Otherwise 0 and cb runs later, once, on the loop thread.
 * AB_EDENIED without RT_CAP_MANIFEST_WRITE. */
static inline int rt_object_write(struct rt *rt, const struct rt_write *w, rt_write_cb cb,
                                  void *arg, char *err, size_t errlen)
{
    if (!rt_has(rt, RT_CAP_MANIFEST_WRITE) || !rt->ops->object_write) {
        snprintf(err, errlen, "the %s runtime cannot write manifests", rt ? rt->kind : "absent");
        return AB_EDENIED;
    }
    return rt->ops->object_write(rt, w, cb, arg, err, errlen);
}

/* Every scaling group with members on this cluster, each once through fn.
 * Nothing without RT_CAP_AUTOSCALE. */
static inline void rt_scale_groups(struct rt *rt, rt_group_fn fn, void *arg)
{
    if (rt_has(rt, RT_CAP_AUTOSCALE) && rt->ops->scale_groups)
        rt->ops->scale_groups(rt, fn, arg);
}
/* The autoscaler's word on member pool ns/pool: keep `replicas` sandboxes
 * (it overrides the spec's; on local it is not written to the manifest, on
 * kube it is the SandboxPool's spec.replicas). reason is the decision's, for
 * the runtime's own record (a Kubernetes Event on kube). 0, AB_ENOENT for an
 * unknown pool (or no RT_CAP_AUTOSCALE), AB_EINVAL with err. */
static inline int rt_scale_set(struct rt *rt, const char *ns, const char *pool, int replicas,
                               const char *reason, char *err, size_t errlen)
{
    if (!rt_has(rt, RT_CAP_AUTOSCALE) || !rt->ops->scale_set) {
        snprintf(err, errlen, "the %s runtime has no autoscaler seam", rt ? rt->kind : "absent");
        return AB_ENOENT;
    }
    return rt->ops->scale_set(rt, ns, pool, replicas, reason, err, errlen);
}
/* Keeps e (best effort: a failure is logged by the runtime). Loop thread;
 * a short append, no fsync. No-op without the op. */
static inline void rt_event_record(struct rt *rt, const struct rt_event *e)
{
    if (rt && rt->ops->event_record)
        rt->ops->event_record(rt, e);
}
/* Calls fn for each kept event, oldest first (at most the last few thousand).
 * 0, or AB_EDENIED without the op. Loop thread, at start (reads a file). */
static inline int rt_events_load(struct rt *rt, rt_event_fn fn, void *arg)
{
    if (!rt || !rt->ops->events_load)
        return AB_EDENIED;
    return rt->ops->events_load(rt, fn, arg);
}

/* Stops timers and in-flight requests; sandboxes keep running (a restarted
 * agent re-adopts them). */
static inline void rt_free(struct rt *rt)
{
    if (rt)
        rt->ops->free(rt);
}

#endif
