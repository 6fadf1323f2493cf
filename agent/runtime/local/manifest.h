/* Manifests of the local runtime: SandboxTemplate, SandboxPool and SandboxEnv
 * objects (agents.navix.sh/v1alpha1) read from YAML files, with the field names
 * of the CRDs so the same files apply to a Kubernetes cluster.
 *
 * Parsing is strict: an unknown kind, an unknown field or a bad value refuses
 * that object with "file:line: field 'spec.replicas' must be ..."; the other
 * objects of the file and of the directory are kept. `status` and the
 * schemaless `template` (a PodTemplateSpec) are accepted and not interpreted.
 *
 * Pure functions, no globals: callable from any thread; the agent calls the
 * directory loader from a worker and swaps the result in on the loop thread. */
#ifndef AGENTBOX_RUNTIME_LOCAL_MANIFEST_H
#define AGENTBOX_RUNTIME_LOCAL_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define MF_API_VERSION "agents.navix.sh/v1alpha1"
#define MF_NAME_MAX 63           /* pools, envs (labels), namespaces */
#define MF_TEMPLATE_NAME_MAX 253 /* templates are DNS subdomains */
#define MF_ENV_NAME_MAX 24       /* so pool and Pod names stay <= 63 (reference §6.4) */
#define MF_KEY_MAX 40            /* "<cpu>c<gi>gi" */
#define MF_STR_MAX 512           /* images, descriptions, other free text */
#define MF_PATH_MAX 512          /* file names in errors */
#define MF_ERR_MAX 640
#define MF_FILE_MAX (1024 * 1024) /* bytes per manifest file */
#define MF_DIR_FILES_MAX 1024
#define MF_OBJECTS_MAX 4096
#define MF_ERRORS_MAX 256
#define MF_RUNTIMES_MAX 8
#define MF_CLUSTERS_MAX 32
#define MF_MEMBERS_MAX 64 /* per cluster segment */
#define MF_GROUPS_MAX 64

enum mf_kind { MF_TEMPLATE = 1, MF_POOL, MF_ENV };
enum mf_image_policy { MF_IMAGE_IDLE = 0, MF_IMAGE_POOL_DEFAULT };
enum mf_env_mode { MF_MODE_WARM_POOL = 0, MF_MODE_ON_DEMAND_JOB };
enum mf_scale_mode { MF_SCALE_DEFAULT = 0, MF_SCALE_CONSERVATIVE, MF_SCALE_AGGRESSIVE };

#define MF_CMD_MAX 1024       /* runtimes[].config.startCommand */
#define MF_PROBE_PATH_MAX 256 /* readinessProbe.httpGet.path */

/* A runtime's readinessProbe, as far as the local runtime checks one:
 * tcpSocket (the port accepts a connection) or httpGet (GET path answers
 * 2xx), on the sandbox's own loopback. */
enum mf_probe_kind { MF_PROBE_NONE = 0, MF_PROBE_TCP, MF_PROBE_HTTP };
struct mf_probe {
    enum mf_probe_kind kind;
    int32_t port;
    char path[MF_PROBE_PATH_MAX]; /* httpGet; "/" when absent */
    int32_t period_s;             /* periodSeconds; 0 = unset (the runtime polls faster) */
    int32_t timeout_s;            /* timeoutSeconds; 0 = unset (1 s) */
    int32_t initial_delay_s;      /* initialDelaySeconds */
};

struct mf_runtime {
    char name[MF_NAME_MAX + 1];
    int32_t port; /* 0 when absent */
    char protocol[8];
    struct mf_probe probe;
    /* config.startCommand: a shell command line the local runtime starts
     * (as the user `user`, through envd) when it makes an idle sandbox; "" none */
    char start_command[MF_CMD_MAX];
};

/* SandboxPool.spec, and the `spec` of an Env member. Durations in ms, 0 = unset. */
struct mf_pool_spec {
    bool has_replicas;
    int32_t replicas;
    int32_t min_replicas, max_replicas; /* -1 when absent (deprecated fields) */
    char template_name[MF_TEMPLATE_NAME_MAX + 1];
    int64_t startup_timeout_ms;
    int64_t idle_timeout_ms;
    enum mf_image_policy image_policy;
    char idle_image[MF_STR_MAX];
    bool disable_egress; /* networkPolicy.disableEgress */
    int nruntimes;
    struct mf_runtime runtimes[MF_RUNTIMES_MAX];
};

struct mf_template {
    char idle_image[MF_STR_MAX];
    char version[MF_NAME_MAX + 1];
    char description[MF_STR_MAX];
    int nruntimes;
    struct mf_runtime runtimes[MF_RUNTIMES_MAX];
};

/* One Env member, after rendering: its resource key and pool name follow
 * reference §6.4. cpu/mem are the effective requests the key came from. */
struct mf_member {
    char name[MF_NAME_MAX + 1];          /* = pool name = <env>-<key> */
    char resource_key[MF_KEY_MAX + 1];   /* e.g. "2c8gi" */
    char scaling_group[MF_NAME_MAX + 1]; /* absent → the resource key; "" = excluded */
    int64_t cpu_milli;
    int64_t mem_bytes;
    int64_t disk_bytes; /* inlineResources ephemeral-storage; 0 → the runtime's default */
    int64_t pids_max;   /* inlineResources pids; 0 → the runtime's default */
    int32_t min_replicas, max_replicas; /* -1 when absent */
    int32_t priority;
    /* scaleUpPriority / scaleDownPriority; priority when absent */
    bool has_up_priority, has_down_priority;
    int32_t up_priority, down_priority;
    int line;
    bool has_spec;
    struct mf_pool_spec spec;
};

struct mf_cluster {
    char id[MF_NAME_MAX + 1];
    int nmembers;
    struct mf_member *members; /* nmembers entries */
};

struct mf_group {
    char name[MF_NAME_MAX + 1];
    bool enabled;
    int32_t min_replicas;
    int32_t max_replicas; /* -1 = no ceiling */
    enum mf_scale_mode up_mode;
    /* scaleUpPolicy / scaleDownPolicy seconds; -1 when absent (the default) */
    int32_t cooldown_s, idle_threshold_s, quiet_window_s, saturation_s;
    int32_t down_idle_timeout_s, stabilization_s, protection_s;
    int line;
};

struct mf_env {
    char template_ref[MF_TEMPLATE_NAME_MAX + 1];
    char template_version[MF_NAME_MAX + 1];
    enum mf_env_mode mode;
    int nclusters;
    struct mf_cluster *clusters;
    int ngroups;
    struct mf_group *groups;
    /* overrides */
    char image[MF_STR_MAX];
    bool has_image_policy;
    enum mf_image_policy image_policy;
    int64_t startup_timeout_ms, idle_timeout_ms; /* 0 = unset */
    bool gateway_enabled;
    bool disable_egress;
};

struct mf_object {
    enum mf_kind kind;
    char name[MF_TEMPLATE_NAME_MAX + 1];
    char ns[MF_NAME_MAX + 1]; /* "" for templates (cluster-scoped); "default" when absent */
    char file[MF_PATH_MAX];
    int line;       /* line of the document's first key */
    json_t *labels; /* object of strings, owned; never NULL */
    json_t *annotations;
    /* The document as JSON ({apiVersion, kind, metadata, spec, ...}), owned,
     * never NULL: what the native API shows and merges writes into. Env
     * members without a name get the rendered one (<env>-<key>). */
    json_t *raw;
    int64_t mtime_ns; /* of the file it came from (mf_load_dir); 0 when parsed from memory */
    bool from_api;    /* loaded from the API's overlay directory (mf_write.c) */
    bool pull_secret; /* an Env whose imagePullSecret the agent keeps (mf_write.c) */
    union {
        struct mf_template tpl;
        struct mf_pool_spec pool;
        struct mf_env env;
    } u;
};

struct mf_error {
    char file[MF_PATH_MAX];
    int line;              /* 1-based; 0 when the file itself failed */
    char text[MF_ERR_MAX]; /* "file:line: field 'spec.replicas' must be ..." */
};

/* Objects and errors of one load. Owns everything it points to. */
struct mf_set {
    struct mf_object **objs;
    int nobjs, objcap;
    struct mf_error *errs;
    int nerrs, errcap;
    int errs_dropped; /* errors beyond MF_ERRORS_MAX */
};

struct mf_set *mf_set_new(void);
void mf_set_free(struct mf_set *s);
/* First object of kind/ns/name; ns ignored for templates. Borrowed pointer. */
const struct mf_object *mf_set_find(const struct mf_set *s, enum mf_kind kind, const char *ns,
                                    const char *name);

/* Parses every document of buf (len bytes, not necessarily terminated) and
 * appends good objects and errors to s. `file` names the source in errors.
 * Returns 0, AB_ENOMEM, or AB_ELIMIT when s is full; errors in the YAML are
 * not a failure of the call (they land in s->errs). */
int mf_parse_buffer(struct mf_set *s, const char *file, const char *buf, size_t len);

/* Loads every *.yaml / *.yml of dir (sorted by name, not recursive), then
 * checks cross-object rules (duplicates, pool-name collisions, Env templates
 * that exist). *out is always set on 0 (possibly with errors inside). Returns
 * AB_EIO when dir cannot be read (err says why), AB_ENOMEM. */
int mf_load_dir(const char *dir, struct mf_set **out, char *err, size_t errlen);

/* --- the write side (mf_write.c): the native API's overlay ---------------------------------
 *
 * What the API writes lives in <dir>/.agentbox-api/, one file per object;
 * mf_load_dir and mf_dir_signature include it: an overlay object replaces
 * the seed's of the same kind/namespace/name unless the seed file is newer,
 * a tombstone hides a seed object unless its file is newer. Blocking file
 * operations: workers only. */
#define MF_OVERLAY_NAME ".agentbox-api"
#define MF_SECRET_SUFFIX ".pull-secret.json"

/* "<manifests>/.agentbox-api". AB_ELIMIT when it does not fit. */
int mf_overlay_dir(const char *manifests, char *out, size_t outlen);
/* Writes obj (a whole manifest object) for kind/ns/name atomically, or
 * with obj NULL deletes it (a tombstone, so a seed object stays deleted);
 * *mtime_ns (may be NULL) gets the written file's modification time.
 * 0, AB_EIO / AB_ELIMIT / AB_ENOMEM with err naming the file. */
int mf_write_object(const char *overlay, enum mf_kind kind, const char *ns, const char *name,
                    const json_t *obj, int64_t *mtime_ns, char *err, size_t errlen);
/* Keeps (secret non-NULL, written 0600) or removes an Env's imagePullSecret. */
int mf_write_secret(const char *overlay, const char *ns, const char *env, const json_t *secret,
                    char *err, size_t errlen);
/* Parses obj as one manifest: on 0 *out holds it (free with mf_set_free);
 * AB_EINVAL with err the parser's message without its file:line prefix. */
int mf_validate_json(const json_t *obj, struct mf_set **out, char *err, size_t errlen);

/* Cross-object rules over a set already filled by mf_parse_buffer: drops
 * the offending objects and records an error for each. mf_load_dir calls it. */
void mf_set_check(struct mf_set *s);

/* Change detection: a signature of the directory's manifest files (names,
 * sizes, mtimes, inodes). Cheap; call it on a timer and reload when it moves. */
int mf_dir_signature(const char *dir, uint64_t *sig);

/* --- rules exposed for the runtime and the tests ------------------------- */

/* Kubernetes quantity → value rounded up to a whole milli-unit (cpu) or byte
 * (memory). Returns 0 or AB_EINVAL (malformed, negative or too large). */
int mf_quantity_milli(const char *s, int64_t *milli);
int mf_quantity_bytes(const char *s, int64_t *bytes);
/* Go duration ("90s", "1h30m", "250ms", "0") → milliseconds, rounded up. */
int mf_duration_ms(const char *s, int64_t *ms);
/* "<ceil cpu>c<floor GiB>gi"; AB_EINVAL when both are 0 (the message is
 * "could not derive a non-empty ResourceKey from the supplied resources"). */
int mf_resource_key(int64_t cpu_milli, int64_t mem_bytes, char *out, size_t outlen);
/* RFC 1123 label of 1..max characters starting with a letter when
 * letter_first (env names), otherwise with a letter or digit. */
bool mf_name_is_label(const char *s, size_t max, bool letter_first);
bool mf_name_is_subdomain(const char *s);

/* A pool the runtime should keep: a SandboxPool, or a member of an Env's
 * segment for cluster_id. Pointers borrow from the set. */
struct mf_pool_view {
    const struct mf_object *obj;    /* the SandboxPool or SandboxEnv */
    const struct mf_member *member; /* NULL for a SandboxPool */
    const char *ns;
    const char *name;
    const char *env;           /* "" for a standalone pool */
    const char *scaling_group; /* resource key for a standalone pool: "" */
    const char *template_name;
    int32_t replicas;
    int64_t startup_timeout_ms, idle_timeout_ms; /* 0 = unset */
    bool disable_egress;
    /* the pool's (or Env member's) runtimes when it lists any, else its
     * template's; start commands and readiness probes come from these */
    const struct mf_runtime *runtimes;
    int nruntimes;
};
/* Fills up to max views; *n gets the total found (may exceed max). */
int mf_set_pools(const struct mf_set *s, const char *cluster_id, struct mf_pool_view *out, int max,
                 int *n);

const char *mf_kind_name(enum mf_kind k);

/* A group's policy (runtime.h struct rt_scale_policy) with every default
 * applied; g NULL (a group only a member declares): the defaults, off.
 * Shared by both runtimes (agent/runtime/local/scale.c). */
struct rt_scale_policy;
void mf_group_policy(const struct mf_group *g, struct rt_scale_policy *out);
/* The group g of Env object env named name, or NULL. */
const struct mf_group *mf_env_group(const struct mf_object *env, const char *name);

#endif
