/* The agent's egress, assembled (issue 12): the agent's egress namespace,
 * the gateway's listeners inside it, the gateway on the agent's loop, the
 * slot table the local runtime fills, the refusal counter
 * agentbox_egress_denied_total{reason} and one log line per sandbox and
 * destination. struct agent owns one (agent.c); the runtime borrows its
 * config and table.
 *
 * egress_wiring_new blocks (it runs `ip` and `nft`): call it at startup,
 * before the loop runs. The rest is loop thread. */
#ifndef AGENTBOX_AGENT_EGRESS_WIRING_H
#define AGENTBOX_AGENT_EGRESS_WIRING_H

#include "agent/egress/gateway.h"
#include "agent/egress/netns.h"
#include "agent/egress/table.h"

#include <stddef.h>

struct loop;
struct egress_wiring;

#define EGRESS_TCP_PORT 15001 /* the gateway's ports inside the egress namespace */
#define EGRESS_DNS_PORT 15053
#define EGRESS_DEFAULT_RANGE "10.200.0.0/16"
#define EGRESS_LOG_PER_SEC 20      /* refusal log lines per second, all sandboxes */
#define EGRESS_LOG_SEEN 4096       /* sandbox+destination pairs remembered ... */
#define EGRESS_LOG_QUIET_MS 600000 /* ... and not logged again for this long */

struct egress_wiring_deps {
    struct loop *loop;
    const char *cluster; /* with state_dir, names the namespace: two agents never share one */
    const char *state_dir;
    const char *range;    /* IPv4 CIDR of the veths (NULL: EGRESS_DEFAULT_RANGE) */
    const char *resolver; /* "IP", "IP:port" or "[IPv6]:port"; NULL: /etc/resolv.conf's first */
    /* PEM bundle trusted besides the system store for intercepted upstreams
     * (--egress-upstream-ca); NULL: the system store only */
    const char *upstream_ca;
    int max_conns_per_sandbox; /* 0: EGRESS_CONNS_PER_SANDBOX */
};

/* 0 and *out, or an error with err naming the flag or the step that failed. */
int egress_wiring_new(const struct egress_wiring_deps *deps, struct egress_wiring **out, char *err,
                      size_t errlen);
/* Sets agentbox_egress_connections (the gateway's open connections); the
 * agent calls it when /metrics renders. NULL is a no-op. */
void egress_wiring_refresh_metrics(struct egress_wiring *w);

/* The agent will not run after all (its runtime refused to start): removes
 * the namespace if this agent made it (a predecessor's, which may hold live
 * sandboxes, stays). Then egress_wiring_free as usual. */
void egress_wiring_discard(struct egress_wiring *w);

/* Closes the gateway (its sockets and connections). Loop thread, before
 * loop_free. The namespace and its veths stay: the sandboxes keep running
 * and the next agent adopts them. */
void egress_wiring_stop(struct egress_wiring *w);
/* Frees the rest (the table): after the runtime and after loop_free, whose
 * last worker callbacks still clear slots. */
void egress_wiring_free(struct egress_wiring *w);

const struct egress_netns_config *egress_wiring_config(const struct egress_wiring *w);
struct egress_table *egress_wiring_table(struct egress_wiring *w);

/* Parses a resolver address ("IP", "IP:port", "[IPv6]:port"). 0 or AB_EINVAL. */
int egress_resolver_parse(const char *s, struct egress_addr *a, uint16_t *port);
/* The first nameserver line of a resolv.conf file. 0, AB_ENOENT or AB_EINVAL. */
int egress_resolver_from_file(const char *path, struct egress_addr *a);

/* This machine's addresses as the calling thread's network namespace has
 * them (the always-denied "host" tier): up to max into out; 0 when they
 * cannot be read. The agent's wiring and the Pod sidecar both use it. */
size_t egress_self_addrs(struct egress_addr *out, size_t max);

/* Makes the gateway of gd (the caller fills loop, callbacks, limits,
 * resolver, upstream context, mark) with this machine's addresses
 * (egress_self_addrs, then extra: the sidecar's Pod addresses) as its
 * always-denied tier, listening on lfd, answering DNS on dfd; it takes both
 * fds, also on failure. The agent's wiring and the Pod sidecar both start
 * theirs so. 0, or AB_EIO with err "egress gateway: <why>". */
int egress_start_gateway(struct egress_gateway_deps *gd, int lfd, int dfd,
                         const struct egress_addr *extra, size_t n_extra,
                         struct egress_gateway **out, char *err, size_t errlen);

#endif
