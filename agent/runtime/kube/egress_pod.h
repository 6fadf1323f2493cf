/* The egress gateway in the kube runtime's Pods (issue 15; agent/egress/pod.h
 * for what runs inside): a SandboxEnv with `overrides.gateway.enabled` gets,
 * in every member pool's Pods, the `egress-init` init container (installs the
 * nftables redirect; the only container with NET_ADMIN) and the
 * `egress-proxy` native sidecar (initContainers, restartPolicy Always: the
 * gateway, NET_RAW only), and the sandbox container loses NET_ADMIN and
 * NET_RAW. A claim pushes its policy to the sidecar (PUT /policy on the Pod
 * IP, the Pod's own bearer token) before envd's /init, so it is in force
 * before any code of the claim runs; PUT /sandboxes/{id}/network pushes
 * again; a release clears it (DELETE /policy).
 *
 * The token: random per Pod, written into the sidecar's environment in the
 * Pod spec at creation. Not on any disk of the Pod, not visible from the
 * sandbox container (no shared PID namespace, no service account in the
 * samples); the sandbox cannot reach the control port anyway (its TCP to the
 * Pod IP is redirected to the gateway, which refuses the Pod's own address).
 * The agent reads it back from the Pod it watches, so a restarted agent
 * still holds it.
 *
 * Pure functions (unit tests: tests/unit/test_agent_kube_egress.c) but for
 * kube_egress_push, which runs an HTTP request on the loop. */
#ifndef AGENT_RUNTIME_KUBE_EGRESS_POD_H
#define AGENT_RUNTIME_KUBE_EGRESS_POD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct loop;

#define KUBE_EGRESS_SIDECAR "egress-proxy"
#define KUBE_EGRESS_INIT "egress-init"
#define KUBE_EGRESS_BINARY "agentbox-egress"
#define KUBE_EGRESS_TOKEN_ENV "AGENTBOX_EGRESS_TOKEN"
#define KUBE_EGRESS_CONTROL_PORT 15000
#define KUBE_EGRESS_TOKEN_MAX 128

struct kube_egress_config {
    const char *image;    /* the sidecar's image; NULL or "": the pool's idle image */
    const char *resolver; /* the sidecar's DNS server; NULL: the Pod's resolv.conf */
};

/* Whether an Env (SandboxEnv JSON) turns the gateway on: spec.overrides.gateway.enabled. */
bool kube_egress_env_enabled(const json_t *env);

/* Adds the init container and the sidecar to a pool's effective spec (the
 * template's Pod spec) and takes NET_ADMIN and NET_RAW from its sandbox
 * container (containers[0]). AB_EINVAL with err when the sandbox container
 * is privileged (nothing could hold it inside the redirect). Idempotent. */
int kube_egress_inject(json_t *pool_spec, const struct kube_egress_config *c, char *err,
                       size_t errlen);

/* Whether a pool's effective spec (or a Pod's spec, `spec`) carries the sidecar. */
bool kube_egress_spec_has(const json_t *pod_spec);

/* Puts a fresh random token into the sidecar's environment of a Pod body
 * (POST). 0, or AB_ENOENT when it has no sidecar (nothing to do). */
int kube_egress_pod_token(json_t *pod);

/* The sidecar's token of a Pod (as watched) into out. 0 or AB_ENOENT. */
int kube_egress_token_of(const json_t *pod, char *out, size_t n);

/* The body of PUT /policy. New reference. */
json_t *kube_egress_policy_body(const json_t *network, bool internet, bool allow_private);

/* The claim's refusals on a pool with or without the sidecar: network lists
 * or a proxy need it (the seed's 400), rules are not available in the sidecar
 * yet. 0 or AB_EINVAL with err. */
int kube_egress_claim_check(bool has_sidecar, const json_t *network, bool internet, char *err,
                            size_t errlen);

/* PUT (body non-NULL) or DELETE (body NULL) /policy at ip's control port
 * with the token; cb(arg, NULL) on 204, cb(arg, message) otherwise, once, on
 * the loop thread. Returns a handle for kube_egress_push_cancel (then cb never
 * comes), or NULL when it could not start (cb never comes). */
struct kube_egress_push;
typedef void (*kube_egress_push_cb)(void *arg, const char *err);
struct kube_egress_push *kube_egress_push(struct loop *l, const char *ip, const char *token,
                                          const json_t *body, kube_egress_push_cb cb, void *arg);
void kube_egress_push_cancel(struct kube_egress_push *p);

#endif
