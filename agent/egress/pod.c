/* The Pod's nftables redirect (pod.h). */
#include "agent/egress/pod.h"

#include "agent/egress/netns.h"

#include "agentbox/common.h"

#include <stdio.h>

int egress_pod_ruleset(const struct egress_pod_config *c, char *buf, size_t len)
{
    if (!c->mark || !c->tcp_port || !c->dns_port || c->tcp_port == c->dns_port)
        return AB_EINVAL;
    /* nat output runs before filter output; filter sees a redirected packet
     * with its first route's oif still (the hook's state), so it is let
     * through by its conntrack status (dnat), not by the interface. Order in nat: the gateway's own
     * (marked) packets first, then loopback (the sandbox's own services), then DNS, then every
     * other IPv4 TCP connection. IPv6 has no gateway listener: its TCP is reset and the rest
     * dropped, fail closed. */
    int n = snprintf(buf, len,
                     "table inet " EGRESS_NFT_TABLE "\n"
                     "delete table inet " EGRESS_NFT_TABLE "\n"
                     "table inet " EGRESS_NFT_TABLE " {\n"
                     "  chain nat_out {\n"
                     "    type nat hook output priority -100; policy accept;\n"
                     "    meta mark 0x%x return\n"
                     "    ip daddr 127.0.0.0/8 return\n"
                     "    ip6 daddr ::1 return\n"
                     "    meta nfproto ipv4 udp dport 53 redirect to :%u\n"
                     "    meta nfproto ipv4 tcp dport 53 redirect to :%u\n"
                     "    meta nfproto ipv4 meta l4proto tcp redirect to :%u\n"
                     "  }\n"
                     "  chain filter_out {\n"
                     "    type filter hook output priority 0; policy drop;\n"
                     "    ct status dnat accept\n"
                     "    ip daddr 127.0.0.0/8 accept\n"
                     "    ip6 daddr ::1 accept\n"
                     "    meta mark 0x%x accept\n"
                     "    ct state established,related accept\n"
                     "    meta l4proto tcp reject with tcp reset\n"
                     "  }\n"
                     "}\n",
                     c->mark, c->dns_port, c->dns_port, c->tcp_port, c->mark);
    if (n < 0 || (size_t)n >= len)
        return AB_ELIMIT;
    return n;
}

int egress_pod_install(const struct egress_pod_config *c, char *err, size_t errlen)
{
    char rules[EGRESS_POD_RULESET_MAX];
    int n = egress_pod_ruleset(c, rules, sizeof(rules));
    if (n < 0) {
        snprintf(err, errlen, "the mark and both ports must be non-zero and the ports distinct");
        return n;
    }
    return egress_netns_nft(NULL, rules, err, errlen);
}
