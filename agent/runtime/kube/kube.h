/* The kube runtime: runtime.h over a Kubernetes API server. SandboxTemplate,
 * SandboxEnv and SandboxPool objects (agents.navix.sh/v1alpha1) are
 * reconciled into warm Pods; a claim takes an idle Ready Pod and swaps its
 * main container's image in place (see README.md).
 *
 * Threads: four reflectors (templates, envs, pools, the managed Pods) run on
 * threads of their own and hand events to the loop thread through a bounded
 * queue; every other request goes through kube_submit (a loop worker). The
 * rt_ops and the reconciler run on the loop thread and never block on the
 * API. */
#ifndef AGENT_RUNTIME_KUBE_KUBE_H
#define AGENT_RUNTIME_KUBE_KUBE_H

#include <stddef.h>
#include <stdint.h>

#include "agent/runtime/runtime.h"

struct loop;
struct kube_client;

struct krt_options {
    struct loop *loop;
    const char *cluster_id; /* Env members of this cluster become pools here */
    const char *kubeconfig; /* NULL: in-cluster, then $KUBECONFIG, then ~/.kube/config */
    const char *ns;         /* namespace watched and written; NULL: the config's, else "default" */
    int64_t resync_ms;      /* full reconcile pass at least this often; 0 → 10000 */
    int waiters_max;        /* per pool; 0 → 1024 */
    /* The region's registry rewrite (registry.h), after each template's
     * agentbox.navix.sh/registry-rewrite annotation; NULL: none. */
    const char *registry_rewrite;
    /* Start the reconciler at once (true) or wait for krt_set_leader (false:
     * the Lease elector decides; claims are served either way). */
    bool lead_now;
    /* The egress sidecar's image (NULL: each pool's idle image) and the DNS
     * server it relays to (NULL: the Pod's resolv.conf); egress_pod.h. */
    const char *egress_image;
    const char *egress_resolver;
};

/* Connects (config only: the reflectors connect on their threads) and starts.
 * AB_EINVAL / AB_EIO with err naming what is wrong. */
int krt_new(const struct krt_options *o, struct rt **out, char *err, size_t errlen);

/* Leader election's hook (agent/runtime/kube/lease.c): while leading, the
 * reconciler creates, deletes and writes status; a follower only watches and
 * serves claims on what the leader keeps warm. Loop thread. */
void krt_set_leader(struct rt *rt, bool leading);

/* The runtime's API client and namespace, for the Lease elector (agent.c):
 * the client is thread-safe and lives until rt_free. */
struct kube_client *krt_client(struct rt *rt);
const char *krt_namespace(struct rt *rt);

/* API requests sent so far (tests, the benchmark). Any thread. */
uint64_t krt_requests(struct rt *rt);

#endif
