/* rtnetlink from C for the sandboxes' veths (netns.c): the few requests an
 * attach and a detach need, sent on a NETLINK_ROUTE socket of the namespace
 * they act on, with no child process at all.
 *
 * Why not `ip` (what netns.c ran before): each attach took two nsenter + two
 * ip processes, each a few ms of CPU on a 2-core machine, once per spawn and
 * once per removal; a request here is one sendmsg + one recvmsg.
 *
 * A socket acts on the namespace it was made in (the kernel binds it at
 * socket()), so egress_nl_open enters the target namespace on the calling
 * thread for the socket() alone and returns to its own: afterwards the
 * thread is where it was and the socket is where the work is. Every
 * function blocks (a round trip to the kernel): workers, never the loop
 * thread. Needs CAP_NET_ADMIN (and CAP_SYS_ADMIN to enter a namespace). */
#ifndef AGENTBOX_AGENT_EGRESS_NETLINK_H
#define AGENTBOX_AGENT_EGRESS_NETLINK_H

#include "agent/egress/policy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One request message: header, fixed part and attributes, at most
 * EGRESS_NL_MSG_MAX bytes (a veth creation, the largest, is ~120). */
#define EGRESS_NL_MSG_MAX 1024
#define EGRESS_NL_NEST_MAX 4

struct egress_nl_msg {
    union {
        uint32_t align; /* netlink messages are 4-byte aligned */
        unsigned char buf[EGRESS_NL_MSG_MAX];
    } u;
    size_t len;
    size_t nest[EGRESS_NL_NEST_MAX]; /* offsets of the open nested attributes */
    int depth;
    bool full; /* an attribute did not fit: the message is refused when sent */
};

struct egress_nl {
    int fd;
    uint32_t seq;
};

/* The message builder (pure; tests check its bounds). egress_nl_msg_init
 * writes the nlmsghdr (type, flags | NLM_F_REQUEST | NLM_F_ACK) and hdr_len
 * bytes of the fixed part (ifinfomsg, ifaddrmsg, rtmsg) from hdr. Attributes
 * that would cross EGRESS_NL_MSG_MAX (or nest deeper than
 * EGRESS_NL_NEST_MAX) mark the message full instead of writing. */
void egress_nl_msg_init(struct egress_nl_msg *m, uint16_t type, uint16_t flags, const void *hdr,
                        size_t hdr_len);
void egress_nl_put(struct egress_nl_msg *m, uint16_t type, const void *data, size_t len);
void egress_nl_put_str(struct egress_nl_msg *m, uint16_t type, const char *s);
void egress_nl_put_u32(struct egress_nl_msg *m, uint16_t type, uint32_t v);
void egress_nl_nest_begin(struct egress_nl_msg *m, uint16_t type);
void egress_nl_nest_end(struct egress_nl_msg *m);

/* A NETLINK_ROUTE socket acting on the network namespace at ns_path (NULL:
 * the caller's). 0, or AB_EIO with err naming the namespace and the call
 * that failed. The calling thread is back in its own namespace on return
 * (the process aborts if it cannot be: a worker left in a sandbox's
 * namespace would dial from it). */
int egress_nl_open(const char *ns_path, struct egress_nl *nl, char *err, size_t errlen);
/* The same, for a namespace given by an open descriptor (-1: the caller's). */
int egress_nl_open_fd(int ns_fd, struct egress_nl *nl, char *err, size_t errlen);
void egress_nl_close(struct egress_nl *nl);

/* Sends m and waits for the kernel's answer. 0; AB_ENOENT for ENODEV /
 * ENOENT / ESRCH (what is absent); AB_EEXIST; else AB_EIO. err names what
 * (the caller's `what`), the errno text and the kernel's extended-ack
 * message when it gives one. */
int egress_nl_call(struct egress_nl *nl, struct egress_nl_msg *m, const char *what, char *err,
                   size_t errlen);

/* The interface index of ifname in nl's namespace: AB_ENOENT when absent. */
int egress_nl_ifindex(struct egress_nl *nl, const char *ifname, int *index, char *err,
                      size_t errlen);

/* A veth pair: name in nl's namespace, peer created straight in the
 * namespace of peer_ns_fd (so no other namespace ever holds it). */
int egress_nl_veth_add(struct egress_nl *nl, const char *name, const char *peer, int peer_ns_fd,
                       char *err, size_t errlen);

/* Sets ifname up. */
int egress_nl_link_up(struct egress_nl *nl, const char *ifname, char *err, size_t errlen);

/* Deletes ifname (a veth: both ends). AB_ENOENT when absent. */
int egress_nl_link_del(struct egress_nl *nl, const char *ifname, char *err, size_t errlen);

/* Adds the IPv4 address a/bits to the interface index (as `ip addr add`). */
int egress_nl_addr_add(struct egress_nl *nl, int index, const struct egress_addr *a, unsigned bits,
                       char *err, size_t errlen);

/* Creates or replaces the IPv4 default route of the main table via gw. */
int egress_nl_route_default(struct egress_nl *nl, const struct egress_addr *gw, char *err,
                            size_t errlen);

#endif
