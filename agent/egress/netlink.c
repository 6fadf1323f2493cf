/* rtnetlink requests for the egress veths (netlink.h). */
#include "agent/egress/netlink.h"

#include "agentbox/common.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>

/* An answer: an NLMSG_ERROR (ack or error, with the extended ack's TLVs) or,
 * for RTM_GETLINK, the link and then the ack. */
#define NL_RECV_MAX 8192
#define NL_TIMEOUT_S 5 /* the kernel answers at once; a bound all the same */

/* --- the message builder ------------------------------------------------------------- */

static struct nlmsghdr *hdr_of(struct egress_nl_msg *m)
{
    return (struct nlmsghdr *)m->u.buf;
}

void egress_nl_msg_init(struct egress_nl_msg *m, uint16_t type, uint16_t flags, const void *hdr,
                        size_t hdr_len)
{
    memset(m, 0, sizeof(*m));
    m->len = NLMSG_LENGTH(hdr_len);
    if (NLMSG_ALIGN(m->len) > sizeof(m->u.buf)) {
        m->full = true;
        m->len = NLMSG_HDRLEN;
    } else if (hdr_len) {
        memcpy(m->u.buf + NLMSG_HDRLEN, hdr, hdr_len);
    }
    m->len = NLMSG_ALIGN(m->len);
    hdr_of(m)->nlmsg_type = type;
    hdr_of(m)->nlmsg_flags = (uint16_t)(flags | NLM_F_REQUEST | NLM_F_ACK);
}

void egress_nl_put(struct egress_nl_msg *m, uint16_t type, const void *data, size_t len)
{
    size_t need = RTA_SPACE(len);

    if (m->full || len > UINT16_MAX - RTA_LENGTH(0) || need > sizeof(m->u.buf) - m->len) {
        m->full = true;
        return;
    }
    struct rtattr *a = (struct rtattr *)(m->u.buf + m->len);
    a->rta_type = type;
    a->rta_len = (unsigned short)RTA_LENGTH(len);
    if (len)
        memcpy(RTA_DATA(a), data, len);
    memset((unsigned char *)RTA_DATA(a) + len, 0, need - RTA_LENGTH(len));
    m->len += need;
}

void egress_nl_put_str(struct egress_nl_msg *m, uint16_t type, const char *s)
{
    egress_nl_put(m, type, s, strlen(s) + 1);
}

void egress_nl_put_u32(struct egress_nl_msg *m, uint16_t type, uint32_t v)
{
    egress_nl_put(m, type, &v, sizeof(v));
}

void egress_nl_nest_begin(struct egress_nl_msg *m, uint16_t type)
{
    if (m->depth >= EGRESS_NL_NEST_MAX) {
        m->full = true;
        return;
    }
    size_t at = m->len;
    egress_nl_put(m, type, NULL, 0);
    m->nest[m->depth++] = at;
}

void egress_nl_nest_end(struct egress_nl_msg *m)
{
    if (m->depth <= 0) {
        m->full = true;
        return;
    }
    size_t at = m->nest[--m->depth];
    if (m->full)
        return;
    struct rtattr *a = (struct rtattr *)(m->u.buf + at);
    size_t len = m->len - at;
    if (len > UINT16_MAX) {
        m->full = true;
        return;
    }
    a->rta_len = (unsigned short)len;
}

/* Appends the fixed part of a nested message (VETH_INFO_PEER carries an
 * ifinfomsg before its attributes). */
static void put_raw(struct egress_nl_msg *m, const void *data, size_t len)
{
    size_t need = NLMSG_ALIGN(len);

    if (m->full || need > sizeof(m->u.buf) - m->len) {
        m->full = true;
        return;
    }
    memcpy(m->u.buf + m->len, data, len);
    memset(m->u.buf + m->len + len, 0, need - len);
    m->len += need;
}

/* --- the socket ---------------------------------------------------------------------- */

static int open_here(struct egress_nl *nl)
{
    struct timeval tv = {.tv_sec = NL_TIMEOUT_S};
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    int one = 1;

    nl->seq = 0;
    nl->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (nl->fd < 0)
        return -1;
    /* best effort: the kernel's reason in errors ("File exists" alone says
     * little about which attribute) */
    (void)setsockopt(nl->fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
    if (setsockopt(nl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        bind(nl->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(nl->fd);
        nl->fd = -1;
        errno = e;
        return -1;
    }
    return 0;
}

int egress_nl_open_fd(int ns_fd, struct egress_nl *nl, char *err, size_t errlen)
{
    int saved = -1, rc = AB_EIO;

    nl->fd = -1;
    if (ns_fd < 0) {
        if (open_here(nl) == 0)
            return 0;
        snprintf(err, errlen, "netlink socket: %s", strerror(errno));
        return AB_EIO;
    }
    if ((saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "/proc/thread-self/ns/net: %s", strerror(errno));
        return AB_EIO;
    }
    if (setns(ns_fd, CLONE_NEWNET) != 0) {
        snprintf(err, errlen, "entering the network namespace: %s", strerror(errno));
        goto out;
    }
    if (open_here(nl) == 0)
        rc = 0;
    else
        snprintf(err, errlen, "netlink socket in the network namespace: %s", strerror(errno));
    if (setns(saved, CLONE_NEWNET) != 0)
        abort(); /* a worker left in another namespace would dial from it */
out:
    close(saved);
    return rc;
}

int egress_nl_open(const char *ns_path, struct egress_nl *nl, char *err, size_t errlen)
{
    char why[256];
    int fd, rc;

    nl->fd = -1;
    if (!ns_path)
        return egress_nl_open_fd(-1, nl, err, errlen);
    if ((fd = open(ns_path, O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "network namespace %.200s: %s", ns_path, strerror(errno));
        return AB_EIO;
    }
    rc = egress_nl_open_fd(fd, nl, why, sizeof(why));
    if (rc)
        snprintf(err, errlen, "network namespace %.200s: %s", ns_path, why);
    close(fd);
    return rc;
}

void egress_nl_close(struct egress_nl *nl)
{
    if (nl->fd >= 0)
        close(nl->fd);
    nl->fd = -1;
}

/* The extended ack's message, if the kernel sent one (NLM_F_ACK_TLVS). */
static const char *ext_ack_msg(const struct nlmsghdr *h)
{
    const struct nlmsgerr *e = NLMSG_DATA(h);
    size_t off;

    if (!(h->nlmsg_flags & NLM_F_ACK_TLVS))
        return NULL;
    /* the request is echoed whole unless capped (then its header only) */
    off = NLMSG_HDRLEN + sizeof(*e);
    if (!(h->nlmsg_flags & NLM_F_CAPPED))
        off += NLMSG_ALIGN(e->msg.nlmsg_len) - NLMSG_HDRLEN;
    off = NLMSG_ALIGN(off);
    while (off + sizeof(struct nlattr) <= h->nlmsg_len) {
        const struct nlattr *a = (const struct nlattr *)((const char *)h + off);
        if (a->nla_len < sizeof(*a) || off + a->nla_len > h->nlmsg_len)
            break;
        if ((a->nla_type & NLA_TYPE_MASK) == NLMSGERR_ATTR_MSG && a->nla_len > sizeof(*a)) {
            const char *s = (const char *)a + NLA_HDRLEN;
            size_t n = a->nla_len - NLA_HDRLEN;
            return memchr(s, '\0', n) ? s : NULL;
        }
        off += NLA_ALIGN(a->nla_len);
    }
    return NULL;
}

/* Sends m; answers of type `want` (0: none expected) are passed to on_reply.
 * Returns at the ack (or error) for m's sequence number. */
static int call(struct egress_nl *nl, struct egress_nl_msg *m, const char *what, uint16_t want,
                void (*on_reply)(void *arg, const struct nlmsghdr *h), void *arg, char *err,
                size_t errlen)
{
    struct sockaddr_nl to = {.nl_family = AF_NETLINK};
    struct nlmsghdr *h = hdr_of(m);
    union {
        struct nlmsghdr align;
        char buf[NL_RECV_MAX];
    } rx;

    if (m->full || m->depth != 0) {
        snprintf(err, errlen, "%s: netlink request longer than %d bytes", what, EGRESS_NL_MSG_MAX);
        return AB_ELIMIT;
    }
    h->nlmsg_len = (uint32_t)m->len;
    h->nlmsg_seq = ++nl->seq;
    for (;;) {
        ssize_t w = sendto(nl->fd, m->u.buf, m->len, 0, (struct sockaddr *)&to, sizeof(to));
        if (w == (ssize_t)m->len)
            break;
        if (w < 0 && errno == EINTR)
            continue;
        snprintf(err, errlen, "%s: netlink send: %s", what, w < 0 ? strerror(errno) : "short");
        return AB_EIO;
    }
    for (;;) {
        ssize_t r = recv(nl->fd, rx.buf, sizeof(rx.buf), 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(err, errlen, "%s: no answer from the kernel: %s", what,
                     r < 0 ? strerror(errno) : "socket closed");
            return AB_EIO;
        }
        size_t left = (size_t)r;
        for (const struct nlmsghdr *a = &rx.align; NLMSG_OK(a, left); a = NLMSG_NEXT(a, left)) {
            if (a->nlmsg_seq != h->nlmsg_seq)
                continue; /* a late answer to an earlier request that timed out */
            if (a->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(a);
                if (a->nlmsg_len < NLMSG_LENGTH(sizeof(*e))) {
                    snprintf(err, errlen, "%s: truncated netlink answer", what);
                    return AB_EIO;
                }
                if (e->error == 0)
                    return 0;
                int code = -e->error;
                const char *msg = ext_ack_msg(a);
                snprintf(err, errlen, "%s: %s%s%s", what, strerror(code), msg ? ": " : "",
                         msg ? msg : "");
                if (code == ENODEV || code == ENOENT || code == ESRCH)
                    return AB_ENOENT;
                return code == EEXIST ? AB_EEXIST : AB_EIO;
            }
            if (want && a->nlmsg_type == want && on_reply)
                on_reply(arg, a);
        }
    }
}

int egress_nl_call(struct egress_nl *nl, struct egress_nl_msg *m, const char *what, char *err,
                   size_t errlen)
{
    return call(nl, m, what, 0, NULL, NULL, err, errlen);
}

/* --- the requests -------------------------------------------------------------------- */

static void got_index(void *arg, const struct nlmsghdr *h)
{
    if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct ifinfomsg)))
        *(int *)arg = ((const struct ifinfomsg *)NLMSG_DATA(h))->ifi_index;
}

static bool name_ok(const char *ifname, const char *what, char *err, size_t errlen)
{
    size_t n = ifname ? strlen(ifname) : 0;
    if (n == 0 || n >= IF_NAMESIZE) {
        snprintf(err, errlen, "%s: interface name must be 1-%d characters", what, IF_NAMESIZE - 1);
        return false;
    }
    return true;
}

int egress_nl_ifindex(struct egress_nl *nl, const char *ifname, int *index, char *err,
                      size_t errlen)
{
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct egress_nl_msg m;
    char what[48];
    int rc;

    snprintf(what, sizeof(what), "looking up %s", ifname ? ifname : "");
    if (!name_ok(ifname, what, err, errlen))
        return AB_EINVAL;
    *index = 0;
    egress_nl_msg_init(&m, RTM_GETLINK, 0, &ifi, sizeof(ifi));
    egress_nl_put_str(&m, IFLA_IFNAME, ifname);
    if ((rc = call(nl, &m, what, RTM_NEWLINK, got_index, index, err, errlen)))
        return rc;
    if (*index <= 0) {
        snprintf(err, errlen, "%s: the kernel answered without the link", what);
        return AB_EIO;
    }
    return 0;
}

int egress_nl_veth_add(struct egress_nl *nl, const char *name, const char *peer, int peer_ns_fd,
                       char *err, size_t errlen)
{
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct egress_nl_msg m;
    char what[64];

    snprintf(what, sizeof(what), "creating veth %s", name ? name : "");
    if (!name_ok(name, what, err, errlen) || !name_ok(peer, what, err, errlen))
        return AB_EINVAL;
    /* One queue each way on both ends, not one per possible CPU: a
     * sandbox's link carries one sandbox's traffic, and each queue is
     * sysfs objects and memory made and torn down with every sandbox: a
     * pair's create, up and delete take about half the CPU with one (300
     * pairs on 2 CPUs: 0.50-0.67 -> 0.27-0.33 ms each, agent/egress/README.md). */
    egress_nl_msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
    egress_nl_put_str(&m, IFLA_IFNAME, name);
    egress_nl_put_u32(&m, IFLA_NUM_TX_QUEUES, 1);
    egress_nl_put_u32(&m, IFLA_NUM_RX_QUEUES, 1);
    egress_nl_nest_begin(&m, IFLA_LINKINFO);
    egress_nl_put_str(&m, IFLA_INFO_KIND, "veth");
    egress_nl_nest_begin(&m, IFLA_INFO_DATA);
    egress_nl_nest_begin(&m, VETH_INFO_PEER);
    put_raw(&m, &ifi, sizeof(ifi));
    egress_nl_put_str(&m, IFLA_IFNAME, peer);
    egress_nl_put_u32(&m, IFLA_NUM_TX_QUEUES, 1);
    egress_nl_put_u32(&m, IFLA_NUM_RX_QUEUES, 1);
    if (peer_ns_fd >= 0)
        egress_nl_put_u32(&m, IFLA_NET_NS_FD, (uint32_t)peer_ns_fd);
    egress_nl_nest_end(&m);
    egress_nl_nest_end(&m);
    egress_nl_nest_end(&m);
    return egress_nl_call(nl, &m, what, err, errlen);
}

int egress_nl_link_up(struct egress_nl *nl, const char *ifname, char *err, size_t errlen)
{
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
    struct egress_nl_msg m;
    char what[48];

    snprintf(what, sizeof(what), "setting %s up", ifname ? ifname : "");
    if (!name_ok(ifname, what, err, errlen))
        return AB_EINVAL;
    egress_nl_msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    egress_nl_put_str(&m, IFLA_IFNAME, ifname);
    return egress_nl_call(nl, &m, what, err, errlen);
}

int egress_nl_link_del(struct egress_nl *nl, const char *ifname, char *err, size_t errlen)
{
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct egress_nl_msg m;
    char what[48];

    snprintf(what, sizeof(what), "deleting %s", ifname ? ifname : "");
    if (!name_ok(ifname, what, err, errlen))
        return AB_EINVAL;
    egress_nl_msg_init(&m, RTM_DELLINK, 0, &ifi, sizeof(ifi));
    egress_nl_put_str(&m, IFLA_IFNAME, ifname);
    return egress_nl_call(nl, &m, what, err, errlen);
}

int egress_nl_addr_add(struct egress_nl *nl, int index, const struct egress_addr *a, unsigned bits,
                       char *err, size_t errlen)
{
    struct ifaddrmsg ifa = {.ifa_family = AF_INET,
                            .ifa_prefixlen = (unsigned char)bits,
                            .ifa_scope = RT_SCOPE_UNIVERSE,
                            .ifa_index = (unsigned)index};
    struct egress_nl_msg m;

    if (a->family != AF_INET || bits > 32 || index <= 0) {
        snprintf(err, errlen,
                 "adding an address: an IPv4 address, a prefix of 0-32 bits and "
                 "an interface are required");
        return AB_EINVAL;
    }
    egress_nl_msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof(ifa));
    /* as `ip addr add` on a broadcast link: local and address the same */
    egress_nl_put(&m, IFA_LOCAL, a->a, 4);
    egress_nl_put(&m, IFA_ADDRESS, a->a, 4);
    return egress_nl_call(nl, &m, "adding an address", err, errlen);
}

int egress_nl_route_default(struct egress_nl *nl, const struct egress_addr *gw, char *err,
                            size_t errlen)
{
    struct rtmsg rt = {.rtm_family = AF_INET,
                       .rtm_table = RT_TABLE_MAIN,
                       .rtm_protocol = RTPROT_BOOT,
                       .rtm_scope = RT_SCOPE_UNIVERSE,
                       .rtm_type = RTN_UNICAST};
    struct egress_nl_msg m;

    if (gw->family != AF_INET) {
        snprintf(err, errlen, "default route: the gateway must be an IPv4 address");
        return AB_EINVAL;
    }
    egress_nl_msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof(rt));
    egress_nl_put(&m, RTA_GATEWAY, gw->a, 4);
    return egress_nl_call(nl, &m, "adding the default route", err, errlen);
}
