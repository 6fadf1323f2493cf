/* The egress gateway: accepts the TCP connections nftables redirects out of
 * the sandboxes (netns.h), asks the policy (policy.h) about each original
 * destination, dials the allowed ones from the agent's own namespace and
 * splices bytes both ways with bounded buffers and backpressure.
 *
 * DNS queries on the DNS port are refused at once (REFUSED) when the
 * sandbox's internet is off and relayed to the resolver otherwise; the
 * addresses of each answer are remembered per sandbox (a ring of 4096, TTL
 * clamped to 60 s .. 24 h). On ports 80 and 443, when the policy names hosts,
 * a connection is held (not dialled) until its first bytes give a TLS SNI or
 * HTTP Host (sniff.h; at most 16 KiB or 5 s), and that name counts only if
 * this sandbox resolved it, through the gateway, to the address it dialled.
 *
 * A verified name with a rule (policy.h) is intercepted (intercept.h): TLS
 * terminated with the sandbox CA's leaf on 443, plain on 80, every request
 * rewritten with the rule's headers and secrets. With egressProxy, every
 * allowed connection is dialled to the proxy and opened with a SOCKS5
 * CONNECT to the original destination (socks5.h) before any byte of the
 * sandbox's goes out; a proxy that fails is a refusal with its reason.
 * Loop thread only. */
#ifndef AGENTBOX_AGENT_EGRESS_GATEWAY_H
#define AGENTBOX_AGENT_EGRESS_GATEWAY_H

#include "agent/egress/netns.h"
#include "agent/egress/policy.h"

#include <stddef.h>
#include <stdint.h>

struct loop;
struct egress_gateway;
struct egress_ca;
struct egress_secrets;
struct ssl_ctx_st;

#define EGRESS_SPLICE_BUF (64 * 1024) /* bytes held per direction of a connection */
#define EGRESS_CONNS_PER_SANDBOX 1024 /* default limit of open connections per sandbox */
#define EGRESS_PROXY_TIMEOUT_MS 10000 /* egressProxy: connect + SOCKS5 handshake */

/* The sandbox a connection came from, as the owner of the gateway knows it. */
struct egress_sandbox_ref {
    const struct egress_policy *policy; /* borrowed; NULL refuses (internet off) */
    uint64_t key;                       /* identifies the sandbox for the limit */
    /* Interception of hosts with rules (intercept.h): the sandbox's CA and the
     * secret values it holds, borrowed for the call. An intercepted connection
     * keeps a reference to the CA (egress_ca_ref) and its own copies of the
     * rule and the secrets, so the owner may replace or free them at any
     * time. NULL ca: a rule's host on port 443 is refused ("intercept"),
     * never spliced unread. */
    struct egress_ca *ca;
    const struct egress_secrets *secrets;
};

struct egress_gateway_deps {
    struct loop *loop;
    /* Which sandbox owns the veth address a connection came from. Returns 0
     * and fills *ref, or < 0 for an address of no sandbox (refused). */
    int (*sandbox_of)(void *arg, const struct egress_addr *peer, struct egress_sandbox_ref *ref);
    /* Told about every refusal (metrics, a log line per destination); may be NULL. */
    void (*denied)(void *arg, uint64_t key, enum egress_reason why, const struct egress_dest *d);
    void *arg;
    const struct egress_addr *self; /* this machine's addresses, copied */
    size_t n_self;
    int max_conns_per_sandbox; /* 0 → EGRESS_CONNS_PER_SANDBOX */
    /* DNS: the UDP socket on the DNS port inside the egress namespace
     * (egress_gateway_listen_dns; 0 or -1: none) and the resolver queries are
     * relayed to from the agent's namespace (family 0: refuse every query). */
    int dns_fd;
    struct egress_addr resolver;
    uint16_t resolver_port;
    /* The TLS client context toward intercepted hosts
     * (egress_intercept_client_ctx: system trust store plus
     * --egress-upstream-ca); borrowed. NULL: port 443 rules are refused. */
    struct ssl_ctx_st *upstream_ctx;
    /* SO_MARK on every socket the gateway dials out on (upstream TCP, the
     * resolver's UDP), 0 for none: the Pod sidecar's nftables redirect lets
     * marked packets pass (pod.h). Setting it needs CAP_NET_RAW or
     * CAP_NET_ADMIN; a dial that cannot set it fails (refused), never goes
     * out unmarked into the redirect. */
    uint32_t out_mark;
};

#define EGRESS_DNS_PENDING_MAX 1024 /* relayed queries awaiting an answer */
#define EGRESS_DNS_TIMEOUT_MS 5000  /* then the sandbox's own retry takes over */

/* Opens the gateway's listening socket on port inside the egress namespace of
 * c (the wildcard address, so REDIRECT's target is covered). Returns the fd or
 * a negative error with err set. Blocks briefly (setns); call at startup. */
int egress_gateway_listen(const struct egress_netns_config *c, uint16_t port, char *err,
                          size_t errlen);

/* The UDP socket for the DNS port inside the egress namespace. Returns the fd
 * or a negative error with err set. */
int egress_gateway_listen_dns(const struct egress_netns_config *c, uint16_t port, char *err,
                              size_t errlen);

/* Takes ownership of listen_fd and deps->dns_fd. NULL with err set on failure (fd closed). */
struct egress_gateway *egress_gateway_new(const struct egress_gateway_deps *deps, int listen_fd,
                                          char *err, size_t errlen);
/* Closes the listener and every connection. Loop thread. */
void egress_gateway_free(struct egress_gateway *g);

/* Kills every connection of the sandbox key (before its CA and secrets are
 * freed). Loop thread. */
void egress_gateway_drop_sandbox(struct egress_gateway *g, uint64_t key);

/* Open spliced connections (for tests and a gauge). */
size_t egress_gateway_conns(const struct egress_gateway *g);

#endif
