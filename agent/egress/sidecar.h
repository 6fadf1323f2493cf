/* The egress sidecar of a kube Pod (pod.h): the gateway for the one sandbox
 * of its Pod, on 127.0.0.1, and a small control API on the Pod IP through
 * which the agent sets the sandbox's policy. One per process
 * (agentbox-egress, agent/egress/main.c). Loop thread.
 *
 * Control API (HTTP/1.1, `Authorization: Bearer <token>`, the token the
 * agent put in the sidecar's environment when it made the Pod):
 *   PUT    /policy  {"network": {...}|null, "internet": bool,
 *                    "allowPrivateNetworks": bool}
 *                   → 204; 400 {error} naming the field (egress_policy_parse);
 *                   open connections keep going, new ones see the new policy
 *   DELETE /policy  → 204: back to refusing everything, open connections reset
 *                   (the sandbox was released)
 *   GET    /healthz → 204, no token (the readiness probe)
 * Before the first PUT every connection and DNS query is refused. Network
 * rules (secret injection) are refused with 400 for now: the sidecar has no
 * CA and no secrets. */
#ifndef AGENTBOX_AGENT_EGRESS_SIDECAR_H
#define AGENTBOX_AGENT_EGRESS_SIDECAR_H

#include "agent/egress/policy.h"

#include <stddef.h>
#include <stdint.h>

struct loop;
struct egress_sidecar;

#define EGRESS_SIDECAR_TOKEN_MIN 16
#define EGRESS_SIDECAR_TOKEN_MAX 256
#define EGRESS_SIDECAR_BODY_MAX (256 * 1024) /* a policy push */

struct egress_sidecar_deps {
    struct loop *loop;
    const char *token;           /* the control API's bearer token; copied */
    const char *control_listen;  /* "<Pod IP>:15000": never loopback (the sandbox reaches that) */
    uint16_t tcp_port, dns_port; /* on 127.0.0.1 */
    uint32_t mark;               /* SO_MARK of outbound sockets */
    const char *resolver;        /* "IP[:port]"; NULL: /etc/resolv.conf's first nameserver */
    const struct egress_addr *extra_self; /* refused besides this namespace's own (the node) */
    size_t n_extra_self;
    int max_conns; /* 0: EGRESS_CONNS_PER_SANDBOX */
};

/* 0 and *out, or an error with err naming the setting that failed. */
int egress_sidecar_new(const struct egress_sidecar_deps *deps, struct egress_sidecar **out,
                       char *err, size_t errlen);
void egress_sidecar_free(struct egress_sidecar *s);

/* The body of PUT /policy, applied (also for tests). 0 or AB_EINVAL with err. */
int egress_sidecar_apply(struct egress_sidecar *s, const char *body, size_t len, char *err,
                         size_t errlen);

#endif
