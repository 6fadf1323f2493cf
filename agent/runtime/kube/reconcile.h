/* The kube runtime's reconcile decisions, as pure functions: given what the
 * reflectors observed (a pool, its template, its Pods), what the cluster
 * should look like and which requests get it there. No I/O, no clock of their
 * own, no globals: kube.c feeds them and sends the requests; the unit tests
 * (tests/unit/test_agent_kube_reconcile.c) feed them tables.
 *
 * Vocabulary (crds-and-charts.md §3.2-§3.5, agent-sandbox-behaviour.md §6):
 * a pool's Pods carry the labels below; `spec.replicas` of a pool counts every
 * Pod (idle + starting + running + stopping); the revision hash is fnv32a of
 * the pool's normalised spec, the running image excluded, so changing only
 * what claims run does not roll idle Pods. */
#ifndef AGENT_RUNTIME_KUBE_RECONCILE_H
#define AGENT_RUNTIME_KUBE_RECONCILE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KUBE_GROUP "agents.navix.sh"
#define KUBE_CR_VERSION "v1alpha1"
#define KUBE_CR_API_VERSION "agents.navix.sh/v1alpha1"

#define KUBE_L_POOL "agentbox.navix.sh/sandbox-pool"
#define KUBE_L_PHASE "agentbox.navix.sh/sandbox-phase"
#define KUBE_L_SANDBOX "agentbox.navix.sh/sandbox-id"
#define KUBE_L_MANAGED "agentbox.navix.sh/managed-by"
#define KUBE_L_HASH "agentbox.navix.sh/template-hash"
#define KUBE_L_ENV "agentbox.navix.sh/env"
#define KUBE_L_GROUP "agentbox.navix.sh/scaling-group"
#define KUBE_MANAGED_BY "sandbox-api-server"
/* The Pods the agent watches: every Pod it creates carries this. */
#define KUBE_POD_SELECTOR "agentbox.navix.sh/managed-by=sandbox-api-server"
#define KUBE_FINALIZER "agentbox.navix.sh/sandbox-protection"
#define KUBE_A_TEMPLATE_NAME "agentbox.navix.sh/template-name"
#define KUBE_A_CLAIMED_AT "agentbox.navix.sh/claimed-at"
#define KUBE_A_PRINCIPAL "agentbox.scitix.ai/principal"
#define KUBE_A_METADATA "agentbox.navix.sh/sandbox-metadata"
#define KUBE_A_END "agentbox.scitix.ai/end-at"

#define KUBE_ENVD_PORT 49983
#define KUBE_POD_NAME_MAX 253
#define KUBE_IMAGE_MAX 512
#define KUBE_REV_LEN 8

enum kube_phase {
    KUBE_PH_NONE = 0, /* no or an unknown phase label: not ours to count */
    KUBE_PH_IDLE,
    KUBE_PH_STARTING,
    KUBE_PH_RUNNING,
    KUBE_PH_STOPPING,
    KUBE_PH_FAILED,
};

const char *kube_phase_name(enum kube_phase p);
enum kube_phase kube_phase_parse(const char *s);

/* What the reconciler needs of one Pod, copied out of its JSON. */
struct kube_pod {
    char ns[64];
    char name[KUBE_POD_NAME_MAX + 1];
    char uid[64];
    char rv[32];
    char pool[64];
    char revision[KUBE_REV_LEN + 1];
    char sandbox_id[64];
    enum kube_phase phase;
    bool ready;                        /* condition Ready is True */
    bool deleting;                     /* deletionTimestamp set */
    bool finalizer;                    /* carries KUBE_FINALIZER */
    bool dead;                         /* status.phase Failed or Succeeded: it will not run again */
    char image[KUBE_IMAGE_MAX];        /* spec image of the first container */
    char status_image[KUBE_IMAGE_MAX]; /* the image the kubelet reports running (or pulling) */
    bool running;                      /* the first container is running */
    bool pull_failed;                  /* ErrImagePull / ImagePullBackOff / InvalidImageName */
    char waiting_reason[64];
    char waiting_message[512];
    char ip[64];
    int64_t created_ms; /* metadata.creationTimestamp; 0 when absent */
};

/* Fills *out from a Pod object. AB_EINVAL (err names the field) when it lacks
 * metadata.name or namespace. */
int kube_pod_observe(const json_t *pod, struct kube_pod *out, char *err, size_t errlen);

/* The revision (8 lower-case hex digits) of a SandboxPool spec: fnv32a of
 * its JSON with sorted keys after zeroing replicas, minReplicas, maxReplicas,
 * the default timeouts, maxUnavailable, templateName, and, under the
 * IdleImage policy (the default), containers[0].image replaced by idleImage;
 * the hash label itself is removed from template.metadata.labels. */
int kube_revision(const json_t *pool_spec, char out[KUBE_REV_LEN + 1]);

/* The image an idle Pod of this pool runs: idleImage, else the template's
 * first container's. NULL when neither is set. */
const char *kube_idle_image(const json_t *pool_spec);

/* The port of the spec's `envd` runtime (runtimes[]), else 49983. */
int kube_envd_port(const json_t *spec);

/* maxUnavailable as a count of replicas: an integer, or "N%" of replicas
 * rounded down; floor 1. NULL → "20%". */
int kube_max_unavailable(const json_t *v, int replicas);

struct kube_pool_counts {
    int total; /* Pods not being deleted */
    int idle, unavailable_idle, starting, running, stopping, failed;
    int updated; /* Pods at the pool's revision */
};

/* What a pool should do now. Pods being deleted are never counted or acted on
 * (but their finalizer is removed: nothing of ours waits on it). */
struct kube_pool_input {
    int replicas;                    /* spec.replicas: every Pod */
    int max_replicas;                /* <= 0: no ceiling */
    int pending;                     /* claims waiting for an idle Pod */
    int creating;                    /* creates sent and not yet observed */
    int unanswered;                  /* of those, creates the API server has not answered:
                                      * the watch may show such a Pod first, so it may be
                                      * counted twice; no scale-down while there are any */
    int max_unavailable;             /* from kube_max_unavailable */
    bool auto_update;                /* updateStrategy.autoUpdate */
    bool deleting;                   /* the pool is being deleted: scale to 0 */
    bool autoscaled;                 /* a member of an enabled scaling group: the autoscaler
                                      * grows it (spec.replicas), waiting claims add no Pods */
    char revision[KUBE_REV_LEN + 1]; /* the pool's */
};

#define KUBE_PLAN_MAX 256 /* deletes per pass; the next pass does the rest */

enum kube_delete_why { KUBE_DEL_SCALE = 1, KUBE_DEL_ROLL, KUBE_DEL_DEAD };

struct kube_plan {
    struct kube_pool_counts counts;
    int create; /* Pods to create */
    int ndelete;
    int del[KUBE_PLAN_MAX]; /* indices into the pods array */
    enum kube_delete_why why[KUBE_PLAN_MAX];
    int nunfinalize;
    int unfinalize[KUBE_PLAN_MAX]; /* deleting Pods whose finalizer to remove */
};

/* The decision for one pool over its pods (n of them, any order).
 *  - dead Pods (status.phase Failed/Succeeded) and idle Pods whose image pull
 *    failed are deleted: they are replaced by the count below;
 *  - desired = replicas + the claims no idle Pod can serve, at most
 *    max_replicas; Pods short of it are created;
 *  - above it, idle Pods are deleted: not Ready first, then stale, then newest;
 *  - with auto_update, idle Pods at another revision are deleted while the
 *    idle Pods not Ready (stale deletions included) stay within
 *    max_unavailable; claimed Pods roll when they come back to idle.
 * Claimed (starting/running/stopping) Pods are never deleted here. */
void kube_pool_plan(const struct kube_pool_input *in, const struct kube_pod *pods, int n,
                    struct kube_plan *out);

/* The pool's status object (§3.2): counts, phase, revisions, selectors and
 * the three conditions. prev is the current status (may be NULL): a
 * condition keeps its lastTransitionTime while its status does not change.
 * now_ms stamps the others. New reference. */
json_t *kube_pool_status(const struct kube_pool_counts *c, int replicas, int pending,
                         const char *pool, const char *revision, bool deleting, const json_t *prev,
                         int64_t now_ms);

/* Whether two status objects differ in anything but lastTransitionTime and
 * lastSnapshotTime (at any depth). */
bool kube_status_differs(const json_t *a, const json_t *b);

/* A new idle Pod of the pool (POST body): the pool's template (metadata +
 * spec) with containers[0].image = the idle image, resources fixed per pool
 * (res, may be NULL: the template's own), labels (pool, phase idle, managed,
 * revision, env), an owner reference to the pool (controller) and the
 * finalizer; generateName "<pool>-". NULL when the pool has no image. */
json_t *kube_pod_body(const char *pool, const char *pool_uid, const char *env,
                      const json_t *pool_spec, const char *revision, const json_t *res);

/* An Env member's SandboxPool (§4.1, §4.6): name, labels env and scaling
 * group, an owner reference to the Env, annotation template-name, spec = the
 * template's embedded fields (template, idleImage, runtimes) with the member's
 * spec on top and resources (requests/limits) on containers[0], templateName,
 * the Env's override image / timeouts. New reference, NULL on bad input. */
json_t *kube_member_pool(const json_t *env, const json_t *tpl, const char *member,
                         const char *scaling_group, int64_t cpu_milli, int64_t mem_bytes,
                         const json_t *member_spec);

/* Whether a live pool already carries what kube_member_pool rendered (spec,
 * labels, owner): no write needed. */
bool kube_pool_matches(const json_t *live, const json_t *want);

/* One member of an Env on this cluster, as observed (§4.5). */
struct kube_member_obs {
    char name[64];
    char scaling_group[64];
    bool present; /* its SandboxPool exists: Active, else Missing */
    int desired;  /* spec.replicas the Env asks for */
    int current;  /* the live pool's spec.replicas */
    int idle, running, pending, updated;
    char revision[KUBE_REV_LEN + 1];
};

/* The Env's status with this cluster's segment (isLocal) replaced by the
 * members observed; other clusters' segments are kept as they were. Sums
 * (memberCount over every segment, the replica roll-ups over this one) and
 * the Ready condition (every local member Active). lastSnapshotTime and
 * condition times move only when the rest changes (compare with
 * kube_status_differs, which ignores them too). New reference. */
json_t *kube_env_status(const json_t *prev, const char *cluster, const struct kube_member_obs *m,
                        int n, int64_t now_ms);

/* An Event (core/v1) about obj (kind/ns/name/uid) for operators. */
json_t *kube_event_body(const char *kind, const char *ns, const char *name, const char *uid,
                        const char *type, const char *reason, const char *message, int64_t now_ms);

#endif
