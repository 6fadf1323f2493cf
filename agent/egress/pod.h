/* The egress gateway inside a Kubernetes Pod (the kube runtime's sidecar,
 * issue 15): the nftables redirect the init container installs in the Pod's
 * network namespace, and the sidecar that runs the gateway there.
 *
 *   Pod network namespace (shared by every container of the Pod)
 *   sandbox container (no NET_ADMIN, no NET_RAW)   egress-proxy sidecar (NET_RAW only)
 *     any TCP ──── nat output: REDIRECT ────────→  127.0.0.1:15001 gateway ── SO_MARK ──→ out
 *     DNS (53) ─── nat output: REDIRECT ────────→  127.0.0.1:15053 relay   ── SO_MARK ──→ resolver
 *     other UDP, ICMP, IPv6 TCP: dropped / reset in filter output
 *
 * Packets of the gateway's own sockets carry EGRESS_POD_MARK and pass
 * untouched. Setting a mark takes CAP_NET_RAW (or CAP_NET_ADMIN): the kube
 * runtime drops both from the sandbox container, so code inside cannot mark
 * its own packets, and without NET_ADMIN it cannot change the rules either.
 * (A uid exemption, Istio's, would not hold here: the sandbox runs as root
 * and could setuid to the sidecar's uid.) Loopback destinations pass, so a
 * sandbox still reaches its own 127.0.0.1 services; the sidecar's control
 * port listens on the Pod IP only, and the Pod IP from inside is redirected
 * to the gateway, which refuses the Pod's own addresses.
 *
 * Replies of connections that came in (the agent to envd, probes) are
 * `established` and pass. */
#ifndef AGENTBOX_AGENT_EGRESS_POD_H
#define AGENTBOX_AGENT_EGRESS_POD_H

#include <stddef.h>
#include <stdint.h>

#define EGRESS_POD_MARK 0xab0eu       /* SO_MARK of the gateway's outbound sockets */
#define EGRESS_POD_TCP_PORT 15001     /* the gateway on 127.0.0.1 */
#define EGRESS_POD_DNS_PORT 15053     /* the DNS relay on 127.0.0.1 */
#define EGRESS_POD_CONTROL_PORT 15000 /* the agent's policy pushes, on the Pod IP */
#define EGRESS_POD_RULESET_MAX 4096

struct egress_pod_config {
    uint32_t mark;
    uint16_t tcp_port;
    uint16_t dns_port;
};

/* The ruleset (an nft -f script replacing table inet agentbox_egress) into
 * buf. Its length, or AB_ELIMIT; AB_EINVAL for a zero mark or port. Pure. */
int egress_pod_ruleset(const struct egress_pod_config *c, char *buf, size_t len);

/* Installs it in the caller's network namespace (the init container). Blocks;
 * needs CAP_NET_ADMIN. 0 or an error with err saying what failed. */
int egress_pod_install(const struct egress_pod_config *c, char *err, size_t errlen);

#endif
