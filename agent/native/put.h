/* The whole-object rules of the native management API (reference §4.4) as
 * pure functions over manifest JSON ({apiVersion, kind, metadata, spec} as
 * rt_objects gives it): what a POST or PUT makes of the object in force.
 * No I/O, no runtime: the handlers (mgmt.c) write the result through
 * rt_object_write, the unit tests call these directly. Any thread.
 *
 * Every function returns 0 with *out a new object (the caller owns it), or
 * AB_EINVAL / AB_ENOENT / AB_EEXIST with err the message the API answers. */
#ifndef AGENTBOX_AGENT_NATIVE_PUT_H
#define AGENTBOX_AGENT_NATIVE_PUT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "agent/runtime/runtime.h"

#define NATIVE_ERR_MAX 512

/* What a write does to an Env's imagePullSecret (§4.4). */
struct native_secret {
    enum rt_secret_op op;
    json_t *value; /* RT_SECRET_SET: {registries:[...]}, owned by the caller after the call */
};

/* The `editable` of an Env (the PUT body that changes nothing):
 * {templateRef, mode, overrides, labels, annotations}; overrides carries
 * imagePullSecretConfigured when a secret is kept and never the secret. */
json_t *native_env_editable(const json_t *env, bool pull_secret);

/* POST /v1/envs: body {name, templateRef, mode?, overrides?, labels?,
 * annotations?} → a new SandboxEnv in ns. */
int native_env_create(const char *ns, const json_t *body, json_t **out, struct native_secret *sec,
                      char *err, size_t errlen);
/* PUT /v1/envs/{name}: body = editable; overrides replaced wholesale,
 * templateRef/mode/labels/annotations must come back unchanged. */
int native_env_put(const json_t *env, bool pull_secret, const json_t *body, json_t **out,
                   struct native_secret *sec, char *err, size_t errlen);

/* POST /v1/envs/{name}/sandboxpools: body {config, replicas?, name?} → the
 * Env with the member appended to cluster's segment. */
int native_pool_add(const json_t *env, const char *cluster, const json_t *body, json_t **out,
                    char *err, size_t errlen);
/* PUT /v1/envs/{name}/sandboxpools/{pool}: replicas, minReplicas,
 * maxReplicas, updateStrategy (omitted ones removed); name, scalingGroup,
 * instanceType, inlineResources, labels, annotations immutable; replicas
 * refused when the member's group has autoscaling enabled. */
int native_pool_put(const json_t *env, const char *cluster, const char *pool, const json_t *body,
                    json_t **out, char *err, size_t errlen);
/* DELETE .../sandboxpools/{pool}: the member removed; group entries no
 * member declares any more are garbage-collected with it. */
int native_pool_delete(const json_t *env, const char *cluster, const char *pool, json_t **out,
                       char *err, size_t errlen);

/* PUT .../autoscaling/groups/{g}: desired state {enabled?, minReplicas?,
 * maxReplicas?, scaleUpPolicy?, scaleDownPolicy?}; omitted fields removed.
 * AB_ENOENT when no member declares group g. */
int native_group_put(const json_t *env, const char *group, const json_t *body, json_t **out,
                     char *err, size_t errlen);
/* DELETE .../autoscaling/groups/{g}: the group's policy removed (members
 * keep declaring it, so it lives on with the defaults). AB_ENOENT. */
int native_group_delete(const json_t *env, const char *group, json_t **out, char *err,
                        size_t errlen);

/* Helpers the handlers share. The member object named pool in cluster's
 * segment (borrowed), or NULL. */
json_t *native_env_member(const json_t *env, const char *cluster, const char *pool);
/* The scaling group a member is in: config.scalingGroup, else the resource
 * key the name ends with (<env>-<key>). */
const char *native_member_group(const json_t *member, const char *env, char *buf, size_t len);
/* The policy entry of group g (borrowed), or NULL. */
json_t *native_env_group(const json_t *env, const char *group);

#endif
