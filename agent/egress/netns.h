/* The egress network namespace of one agent and the veth of each sandbox
 * into it (DESIGN §10a "Network").
 *
 *   sandbox netns            egress netns (one per agent)
 *   eth0 10.200.0.2/30  ───  eg<slot> 10.200.0.1/30      no route anywhere else
 *   default via .1           nftables: TCP → gateway tcp_port, DNS → dns_port,
 *                            everything else from a sandbox dropped
 *
 * The host's own namespace gets no interface and no rule: the veth is created
 * inside the egress namespace with its peer placed straight into the sandbox's.
 * The gateway's listening sockets are opened inside the egress namespace
 * (egress_netns_enter) and it dials out from the agent's namespace.
 *
 * Mechanism (recorded choice): a sandbox's veth (attach, detach, prune) is
 * made and removed with rtnetlink requests from this process (netlink.h):
 * they run once per spawn and once per removal, where the processes they
 * replaced (two nsenter + two ip per attach, a few ms of CPU each) were most
 * of a spawn's CPU. Once per agent, the namespace itself (`ip netns add`:
 * the bind mount under /run/netns) and the ruleset (`nft -f -` on stdin, so
 * it is replaced atomically) still use the tools of iproute2 and nftables,
 * run with posix_spawn through `nsenter --net=<ns>` (argv, never a shell;
 * util-linux). No nft runs per sandbox: the ruleset matches every "eg*"
 * link. Every function blocks: call them from a worker, never the loop
 * thread. Needs CAP_SYS_ADMIN and CAP_NET_ADMIN (the agent). */
#ifndef AGENTBOX_AGENT_EGRESS_NETNS_H
#define AGENTBOX_AGENT_EGRESS_NETNS_H

#include "agent/egress/policy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGRESS_NETNS_NAME_MAX 48 /* a file name under /run/netns */
#define EGRESS_NFT_TABLE "agentbox_egress"
#define EGRESS_SANDBOX_IF "eth0"

struct egress_netns_config {
    const char *name;         /* the egress namespace: /run/netns/<name> */
    struct egress_cidr range; /* IPv4, /8../28; one /30 per sandbox slot */
    uint16_t tcp_port;        /* the gateway's TCP port inside the egress namespace */
    uint16_t dns_port;        /* the gateway's DNS port (UDP and TCP) */
};

/* The addresses of one sandbox's veth. */
struct egress_link {
    uint32_t slot;
    char egress_if[16];         /* "eg<slot>", in the egress namespace */
    struct egress_addr gateway; /* egress side: the sandbox's default route */
    struct egress_addr sandbox; /* sandbox side, on EGRESS_SANDBOX_IF */
};

/* Checks a config: name a safe file name, range IPv4 with room for a slot,
 * ports non-zero and distinct. 0 or AB_EINVAL with err naming the field. */
int egress_netns_config_check(const struct egress_netns_config *c, char *err, size_t errlen);

/* How many sandbox slots the range holds. */
uint32_t egress_netns_slots(const struct egress_netns_config *c);

/* The link of slot (0-based) in c's range. AB_ELIMIT when the range has no
 * such slot. Pure. */
int egress_netns_link(const struct egress_netns_config *c, uint32_t slot, struct egress_link *out);

/* The nftables ruleset installed in the egress namespace, into buf (at most
 * len bytes). Returns its length, or AB_ELIMIT. Pure: tests read it. */
int egress_netns_ruleset(const struct egress_netns_config *c, char *buf, size_t len);

/* Creates the egress namespace (or adopts one a previous agent left, keeping
 * its links) and installs the ruleset, replacing any older one. */
int egress_netns_create(const struct egress_netns_config *c, char *err, size_t errlen);

/* Removes the egress namespace's name; the namespace and its links go when
 * the last socket in it closes. Absent is not an error. */
int egress_netns_destroy(const struct egress_netns_config *c, char *err, size_t errlen);

/* Creates slot's veth pair between the egress namespace and the sandbox's
 * network namespace (a path such as /proc/<pid>/ns/net or /run/netns/x), sets
 * both addresses, brings them and the sandbox's lo up and routes the sandbox's
 * default via the gateway address. A leftover link of the same slot is
 * replaced. *out (may be NULL) gets the addresses. */
int egress_netns_attach(const struct egress_netns_config *c, uint32_t slot,
                        const char *sandbox_netns, struct egress_link *out, char *err,
                        size_t errlen);

/* Deletes slot's veth pair (both ends). Absent is not an error. */
int egress_netns_detach(const struct egress_netns_config *c, uint32_t slot, char *err,
                        size_t errlen);

/* Deletes every sandbox link ("eg<slot>") of the egress namespace whose slot
 * keep() disowns: what a predecessor left for sandboxes that are gone (at
 * most EGRESS_PRUNE_MAX a call). Returns how many went, or a negative error. */
#define EGRESS_PRUNE_MAX 4096
int egress_netns_prune(const struct egress_netns_config *c, bool (*keep)(void *arg, uint32_t slot),
                       void *arg, char *err, size_t errlen);

/* Replaces ruleset text with `nft -f -` inside the network namespace at
 * ns_path (NULL: the caller's own). Blocks. 0, or AB_EIO with err holding
 * nft's first line of complaint. */
int egress_netns_nft(const char *ns_path, const char *ruleset, char *err, size_t errlen);

/* Runs on the calling thread inside the egress namespace until
 * egress_netns_leave: for opening the gateway's listening sockets, which stay
 * in the namespace they were made in. *saved gets the caller's namespace fd. */
int egress_netns_enter(const struct egress_netns_config *c, int *saved, char *err, size_t errlen);
int egress_netns_leave(int saved);

#endif
