/* The kube runtime's half of the scaling-group seam (runtime.h "Scaling
 * groups"): groups of Env member pools with their policy from the SandboxEnv
 * (parsed by the manifest rules), idle-since times of idle Pods as this
 * agent first saw them idle, and the autoscaler's replicas, which the Env
 * reconciler writes into the member SandboxPool's spec.replicas (it is that
 * object's only writer of replicas; kscale_apply). kube.c feeds it what it
 * keeps of each pool. Loop thread only. */
#ifndef AGENT_RUNTIME_KUBE_SCALE_H
#define AGENT_RUNTIME_KUBE_SCALE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/runtime/runtime.h"

struct mf_set;
struct kscale;

/* What kube.c knows of one member pool (borrowed for the call). */
struct kscale_pool {
    const char *ns, *name, *env, *group;
    int replicas; /* the live SandboxPool's spec.replicas */
    struct rt_pool_status status;
    int64_t last_create_ms; /* ab_now_ms of its last claim; 0: none */
};

struct kscale *kscale_new(void);
void kscale_free(struct kscale *ks);

/* Every group of pools[0..n) (those with an env and a group), each once
 * through fn: policy and member bounds from set's segment for cluster, idle
 * Pods from pods (the Pod cache: key → Pod object). Also refreshes what
 * kscale_pool_info answers, and forgets the replicas of members whose group
 * is off (the Env's own replicas apply again). */
void kscale_groups(struct kscale *ks, const struct mf_set *set, const char *cluster,
                   const json_t *pods, const struct kscale_pool *pools, int n, rt_group_fn fn,
                   void *arg);
/* Records the autoscaler's replicas for ns/pool. */
int kscale_set(struct kscale *ks, const char *ns, const char *pool, int replicas);
/* A rendered member pool (kube_member_pool's object): its spec.replicas
 * becomes the autoscaler's, when it set one. */
void kscale_apply(const struct kscale *ks, const char *ns, const char *pool, json_t *want);
/* The reporter's numbers for ns/pool as of the last kscale_groups. */
void kscale_pool_info(const struct kscale *ks, const char *ns, const char *pool, bool *autoscaling,
                      int *headroom);

#endif
