/* rtnetlink for the sandboxes' veths (agent/egress/netlink.c) and the
 * attach / detach / prune of agent/egress/netns.c built on it.
 *
 * Root (namespaces). Every check that touches the kernel runs in a forked
 * child in network namespaces the test makes itself (unshare), with a mount
 * namespace of its own holding the egress namespace's /run/netns name: the
 * host's namespace, links and /run are never touched. The attach runs under
 * a seccomp filter that refuses every way of making a process (clone,
 * clone3, fork, vfork, execve): the veth must be made without one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/rtnetlink.h>

#include "agent/egress/netlink.h"
#include "agent/egress/netns.h"
#include "agentbox/common.h"

#define NS_NAME "abx-nltest"

/* --- the builder (pure) -------------------------------------------------------------- */

static void test_builder_bounds(void **state)
{
    (void)state;
    struct egress_nl_msg m;
    struct ifinfomsg ifi = {0};
    char big[300];
    memset(big, 'x', sizeof(big));

    egress_nl_msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    assert_false(m.full);
    size_t before = m.len;
    egress_nl_put_u32(&m, IFLA_MTU, 1500);
    assert_int_equal(m.len, before + RTA_SPACE(4));
    /* attributes past EGRESS_NL_MSG_MAX mark the message full, never write past it */
    for (int i = 0; i < 8; i++)
        egress_nl_put(&m, IFLA_IFALIAS, big, sizeof(big));
    assert_true(m.full);
    assert_true(m.len <= EGRESS_NL_MSG_MAX);

    /* nesting deeper than EGRESS_NL_NEST_MAX, or an end without a begin */
    egress_nl_msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    for (int i = 0; i < EGRESS_NL_NEST_MAX + 1; i++)
        egress_nl_nest_begin(&m, IFLA_LINKINFO);
    assert_true(m.full);
    egress_nl_msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    egress_nl_nest_end(&m);
    assert_true(m.full);

    /* a nest's length covers what was put inside it */
    egress_nl_msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    size_t at = m.len;
    egress_nl_nest_begin(&m, IFLA_LINKINFO);
    egress_nl_put_str(&m, IFLA_INFO_KIND, "veth");
    egress_nl_nest_end(&m);
    assert_false(m.full);
    const struct rtattr *a = (const struct rtattr *)(m.u.buf + at);
    assert_int_equal(a->rta_len, RTA_LENGTH(0) + RTA_SPACE(5));
}

/* A full message is refused before anything is sent, naming the limit. */
static void test_full_message_refused(void **state)
{
    (void)state;
    struct egress_nl nl;
    struct egress_nl_msg m;
    struct ifinfomsg ifi = {0};
    char err[256], big[600];
    memset(big, 'x', sizeof(big));

    assert_int_equal(egress_nl_open(NULL, &nl, err, sizeof(err)), 0);
    egress_nl_msg_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
    egress_nl_put(&m, IFLA_IFALIAS, big, sizeof(big));
    egress_nl_put(&m, IFLA_IFALIAS, big, sizeof(big));
    assert_int_equal(egress_nl_call(&nl, &m, "test", err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "longer than 1024 bytes"));
    egress_nl_close(&nl);
    assert_int_equal(egress_nl_open("/nonexistent/ns", &nl, err, sizeof(err)), AB_EIO);
    assert_non_null(strstr(err, "/nonexistent/ns"));
}

/* --- in namespaces of the test's own --------------------------------------------------- */

static int g_report = -1; /* the child's pipe to the parent: what failed */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            dprintf(g_report, "%s:%d: %s (errno %s; err '%s')", __FILE__, __LINE__, #cond,         \
                    strerror(errno), err);                                                         \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

/* Runs fn in a forked child; fails the test with the child's report. */
static void in_child(void (*fn)(void))
{
    int p[2];
    char msg[1024] = "";
    int st = 0;

    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        g_report = p[1];
        fn();
        _exit(0);
    }
    close(p[1]);
    ssize_t n = read(p[0], msg, sizeof(msg) - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(p[0]);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("child: %s (status %d)", msg[0] ? msg : "died", st);
}

/* Leaves the calling process in a fresh network namespace ("egress", named
 * /run/netns/NS_NAME in a mount namespace of its own) and returns a
 * descriptor of a second fresh one ("sandbox"). */
static int make_namespaces(int *egress_fd)
{
    char err[8] = "";
    CHECK(unshare(CLONE_NEWNS) == 0);
    CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
    CHECK(mount("tmpfs", "/run", "tmpfs", 0, "size=1m") == 0); /* this child's /run only */
    CHECK(mkdir("/run/netns", 0755) == 0);
    CHECK(unshare(CLONE_NEWNET) == 0);
    int fd = open("/run/netns/" NS_NAME, O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0);
    close(fd);
    CHECK(mount("/proc/thread-self/ns/net", "/run/netns/" NS_NAME, NULL, MS_BIND, NULL) == 0);
    *egress_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    CHECK(*egress_fd >= 0);
    CHECK(unshare(CLONE_NEWNET) == 0);
    int sandbox = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    CHECK(sandbox >= 0);
    CHECK(setns(*egress_fd, CLONE_NEWNET) == 0);
    return sandbox;
}

/* No process may be made from here on (EPERM): what an attach may not need. */
static void forbid_processes(void)
{
    char err[8] = "";
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    CHECK(ctx != NULL);
    const int calls[] = {SCMP_SYS(clone), SCMP_SYS(clone3), SCMP_SYS(fork),
                         SCMP_SYS(vfork), SCMP_SYS(execve), SCMP_SYS(execveat)};
    for (size_t i = 0; i < AB_ARRAY_LEN(calls); i++)
        CHECK(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), calls[i], 0) == 0);
    CHECK(seccomp_load(ctx) == 0);
    seccomp_release(ctx);
}

static struct egress_netns_config test_cfg(void)
{
    struct egress_netns_config c = {.name = NS_NAME, .tcp_port = 15001, .dns_port = 15053};
    if (egress_cidr_parse("10.77.0.0/24", &c.range) != 0)
        c.range.net.family = 0;
    return c;
}

/* The IPv4 address (text) of ifname in the calling thread's namespace, and
 * whether it is up; "" when it has none. */
static void addr_of(const char *ifname, char *out, size_t len, bool *up)
{
    struct ifaddrs *ifa = NULL;
    out[0] = '\0';
    *up = false;
    if (getifaddrs(&ifa) != 0)
        return;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
        if (strcmp(i->ifa_name, ifname) == 0 && i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)len);
            *up = (i->ifa_flags & IFF_UP) != 0;
        }
    freeifaddrs(ifa);
}

/* From the sandbox's namespace: a TCP connection to the gateway address is
 * accepted by a listener in the egress namespace, and any other address
 * routes out of eth0 (the default route) with the sandbox's address. */
static void check_path(int egress_fd, int sandbox_fd, const char *gw, const char *sbx)
{
    char err[8] = "", ip[64];
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(15999)};
    socklen_t sl = sizeof(sa);
    int one = 1;

    inet_pton(AF_INET, gw, &sa.sin_addr);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* in the egress namespace */
    CHECK(l >= 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    CHECK(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 4) == 0);
    CHECK(setns(sandbox_fd, CLONE_NEWNET) == 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(c >= 0);
    CHECK(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in far = {.sin_family = AF_INET, .sin_port = htons(9)};
    inet_pton(AF_INET, "192.0.2.1", &far.sin_addr);
    CHECK(u >= 0 && connect(u, (struct sockaddr *)&far, sizeof(far)) == 0);
    CHECK(getsockname(u, (struct sockaddr *)&sa, &sl) == 0);
    inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
    CHECK(strcmp(ip, sbx) == 0);
    close(u);
    CHECK(setns(egress_fd, CLONE_NEWNET) == 0);
    struct pollfd pfd = {.fd = l, .events = POLLIN};
    CHECK(poll(&pfd, 1, 5000) == 1);
    int a = accept(l, NULL, NULL);
    CHECK(a >= 0);
    close(a);
    close(c);
    close(l);
}

static bool keep_none(void *arg, uint32_t slot)
{
    (void)arg;
    (void)slot;
    return false;
}

static void attach_child(void)
{
    char err[512] = "", ip[64], fdpath[64];
    bool up;
    int egress_fd, sandbox_fd = make_namespaces(&egress_fd);
    struct egress_netns_config c = test_cfg();
    struct egress_link l;

    snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", sandbox_fd);
    forbid_processes();
    CHECK(fork() < 0 && errno == EPERM); /* the filter holds */

    CHECK(egress_netns_attach(&c, 3, fdpath, &l, err, sizeof(err)) == 0);
    CHECK(strcmp(l.egress_if, "eg3") == 0);
    addr_of("eg3", ip, sizeof(ip), &up);
    CHECK(strcmp(ip, "10.77.0.13") == 0 && up);
    CHECK(if_nametoindex("eth0") == 0); /* the peer never appears here */
    CHECK(setns(sandbox_fd, CLONE_NEWNET) == 0);
    addr_of("eth0", ip, sizeof(ip), &up);
    CHECK(strcmp(ip, "10.77.0.14") == 0 && up);
    addr_of("lo", ip, sizeof(ip), &up);
    CHECK(up);
    CHECK(setns(egress_fd, CLONE_NEWNET) == 0);
    check_path(egress_fd, sandbox_fd, "10.77.0.13", "10.77.0.14");

    /* a leftover link of the slot is replaced: the sandbox's side is fresh */
    int sandbox2 = -1;
    {
        CHECK(unshare(CLONE_NEWNET) == 0);
        sandbox2 = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        CHECK(sandbox2 >= 0 && setns(egress_fd, CLONE_NEWNET) == 0);
    }
    snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", sandbox2);
    CHECK(egress_netns_attach(&c, 3, fdpath, NULL, err, sizeof(err)) == 0);
    CHECK(setns(sandbox_fd, CLONE_NEWNET) == 0);
    CHECK(if_nametoindex("eth0") == 0); /* the old pair went whole */
    CHECK(setns(egress_fd, CLONE_NEWNET) == 0);
    check_path(egress_fd, sandbox2, "10.77.0.13", "10.77.0.14");

    /* detach removes both ends; absent is not an error */
    CHECK(egress_netns_detach(&c, 3, err, sizeof(err)) == 0);
    CHECK(if_nametoindex("eg3") == 0);
    CHECK(setns(sandbox2, CLONE_NEWNET) == 0);
    CHECK(if_nametoindex("eth0") == 0);
    CHECK(setns(egress_fd, CLONE_NEWNET) == 0);
    CHECK(egress_netns_detach(&c, 3, err, sizeof(err)) == 0);

    /* a slot outside the range, a bad namespace path: errors that name them, nothing left */
    CHECK(egress_netns_attach(&c, 64, fdpath, NULL, err, sizeof(err)) == AB_ELIMIT);
    CHECK(strstr(err, "slot 64") != NULL);
    CHECK(egress_netns_attach(&c, 5, "/proc/self/fd/999", NULL, err, sizeof(err)) == AB_EIO);
    CHECK(strstr(err, "/proc/self/fd/999") != NULL);
    CHECK(if_nametoindex("eg5") == 0);

    /* prune: links of slots nobody keeps go */
    CHECK(egress_netns_attach(&c, 7, fdpath, NULL, err, sizeof(err)) == 0);
    CHECK(if_nametoindex("eg7") != 0);
    CHECK(egress_netns_prune(&c, keep_none, NULL, err, sizeof(err)) == 1);
    CHECK(if_nametoindex("eg7") == 0);
}

static void test_attach_without_processes(void **state)
{
    (void)state;
    in_child(attach_child);
}

/* IFLA_NUM_TX_QUEUES / IFLA_NUM_RX_QUEUES of a link, asked of the kernel
 * with a netlink socket of the test's own. */
static void link_queues(const char *ifname, unsigned *tx, unsigned *rx)
{
    struct {
        struct nlmsghdr h;
        struct ifinfomsg i;
        char attrs[64];
    } req = {.h = {.nlmsg_type = RTM_GETLINK, .nlmsg_flags = NLM_F_REQUEST}};
    char buf[16384], err[1] = ""; /* for CHECK */
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    struct rtattr *a = (struct rtattr *)req.attrs;
    ssize_t n;

    *tx = *rx = 0;
    CHECK(fd >= 0);
    a->rta_type = IFLA_IFNAME;
    a->rta_len = (unsigned short)RTA_LENGTH(strlen(ifname) + 1);
    memcpy(RTA_DATA(a), ifname, strlen(ifname) + 1);
    req.h.nlmsg_len = NLMSG_LENGTH(sizeof(req.i)) + RTA_ALIGN(a->rta_len);
    CHECK(send(fd, &req, req.h.nlmsg_len, 0) == (ssize_t)req.h.nlmsg_len);
    n = recv(fd, buf, sizeof(buf), 0);
    close(fd);
    CHECK(n > 0);
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    CHECK(NLMSG_OK(h, (unsigned)n) && h->nlmsg_type == RTM_NEWLINK);
    int len = (int)IFLA_PAYLOAD(h);
    for (a = IFLA_RTA(NLMSG_DATA(h)); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type == IFLA_NUM_TX_QUEUES)
            memcpy(tx, RTA_DATA(a), sizeof(*tx));
        else if (a->rta_type == IFLA_NUM_RX_QUEUES)
            memcpy(rx, RTA_DATA(a), sizeof(*rx));
    }
}

/* The kernel's refusals come back as codes and messages naming the request. */
static void errors_child(void)
{
    char err[512] = "";
    int egress_fd, sandbox_fd = make_namespaces(&egress_fd), index = 0;
    struct egress_nl nl;
    struct egress_addr a = {.family = AF_INET, .a = {10, 1, 2, 3}};

    CHECK(egress_nl_open(NULL, &nl, err, sizeof(err)) == 0);
    CHECK(egress_nl_ifindex(&nl, "nope0", &index, err, sizeof(err)) == AB_ENOENT);
    CHECK(strstr(err, "looking up nope0") != NULL);
    CHECK(egress_nl_link_del(&nl, "nope0", err, sizeof(err)) == AB_ENOENT);
    CHECK(egress_nl_link_up(&nl, "this-name-is-too-long", err, sizeof(err)) == AB_EINVAL);
    CHECK(strstr(err, "interface name") != NULL);
    CHECK(egress_nl_veth_add(&nl, "ta0", "tb0", -1, err, sizeof(err)) == 0);
    /* one queue each way on both ends, whatever the CPUs */
    unsigned tx, rx;
    link_queues("ta0", &tx, &rx);
    CHECK(tx == 1 && rx == 1);
    link_queues("tb0", &tx, &rx);
    CHECK(tx == 1 && rx == 1);
    CHECK(egress_nl_veth_add(&nl, "ta0", "tb1", -1, err, sizeof(err)) == AB_EEXIST);
    CHECK(strstr(err, "creating veth ta0") != NULL);
    CHECK(egress_nl_ifindex(&nl, "tb0", &index, err, sizeof(err)) == 0 && index > 0);
    CHECK(egress_nl_addr_add(&nl, index, &a, 24, err, sizeof(err)) == 0);
    CHECK(egress_nl_addr_add(&nl, index, &a, 24, err, sizeof(err)) == AB_EEXIST);
    CHECK(egress_nl_addr_add(&nl, 1 << 20, &a, 24, err, sizeof(err)) < 0);
    /* a gateway no interface reaches */
    struct egress_addr far = {.family = AF_INET, .a = {192, 0, 2, 1}};
    CHECK(egress_nl_route_default(&nl, &far, err, sizeof(err)) < 0);
    CHECK(strstr(err, "default route") != NULL);
    CHECK(egress_nl_link_del(&nl, "ta0", err, sizeof(err)) == 0);
    CHECK(if_nametoindex("tb0") == 0); /* the pair goes whole */
    egress_nl_close(&nl);
    close(sandbox_fd);
}

static void test_kernel_errors(void **state)
{
    (void)state;
    in_child(errors_child);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builder_bounds),
        cmocka_unit_test(test_full_message_refused),
        cmocka_unit_test(test_attach_without_processes),
        cmocka_unit_test(test_kernel_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
