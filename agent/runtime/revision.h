/* A pool's identity, shared by every runtime: the revision hash of a pool's
 * spec and the updateStrategy's maxUnavailable as a count. Both runtimes
 * decide "this idle sandbox is stale, replace it" from the same two
 * functions, so a spec change rolls (or does not) the same way on a
 * cluster as on one host (reference §6.6, last bullet). Pure; any thread. */
#ifndef AGENTBOX_RUNTIME_REVISION_H
#define AGENTBOX_RUNTIME_REVISION_H

#include <stdbool.h>

#include <jansson.h>

#define RT_REV_LEN 8
/* The Pod label that carries a revision on kube; removed from the spec's
 * template labels before hashing, so a spec never hashes its own hash. */
#define RT_REV_LABEL "agentbox.navix.sh/template-hash"

/* The revision (8 lower-case hex digits) of a SandboxPool spec: fnv32a of
 * its JSON with sorted keys after removing replicas, minReplicas,
 * maxReplicas, the default timeouts, maxUnavailable, templateName,
 * autoscaling and updateStrategy (sizing and rollout knobs, not identity),
 * and, under the IdleImage policy (the default), containers[0].image
 * replaced by idleImage; RT_REV_LABEL is removed from
 * template.metadata.labels. 0, AB_EINVAL (not an object), AB_ENOMEM. */
int rt_revision(const json_t *pool_spec, char out[RT_REV_LEN + 1]);

/* maxUnavailable as a count of replicas: an integer, or "N%" of replicas
 * rounded down; floor 1. NULL or malformed → "20%". */
int rt_max_unavailable(const json_t *v, int replicas);

/* The member entry named pool in env's spec.clusters[clusterID == cluster],
 * as stored (borrowed), or NULL. */
const json_t *rt_env_member(const json_t *env, const char *cluster, const char *pool);

/* The updateStrategy in force for a pool (reference §6.6, resolved member →
 * env → default). For an Env member (env not NULL), each field from the
 * member's config.updateStrategy (the member entry of env's
 * spec.clusters[clusterID == cluster].members named pool), else the Env's
 * spec.overrides.updateStrategy; for a plain SandboxPool (env NULL), the
 * pool_spec's maxUnavailable. *auto_update: false only when the field is
 * false. *max_unavailable: borrowed from the objects, NULL for the default
 * (give it to rt_max_unavailable). */
void rt_update_strategy(const json_t *env, const char *cluster, const char *pool,
                        const json_t *pool_spec, bool *auto_update, const json_t **max_unavailable);

#endif
