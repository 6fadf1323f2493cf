/* The egress namespace (agent/egress/netns.c).
 *
 * Without arguments: cmocka tests of the pure parts (config refusals, slot
 * addresses, the ruleset text). With arguments it is the driver that
 * tests/integration/egress_netns.test.mjs runs as root against namespaces that
 * test makes itself:
 *   create|destroy NAME RANGE TCP DNS
 *   attach NAME RANGE TCP DNS SLOT NETNS_PATH   prints the link as JSON
 *   detach NAME RANGE TCP DNS SLOT
 *   listen NAME RANGE TCP DNS UDP   a stand-in gateway inside the egress
 *       namespace: prints "ready", then one JSON line per TCP connection on TCP
 *       (with its SO_ORIGINAL_DST, answered "gateway\n"), per datagram on DNS
 *       and per datagram on UDP (which must never come), until killed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/egress/netns.h"
#include "agentbox/common.h"

static struct egress_netns_config cfg(const char *name, const char *range, int tcp, int dns)
{
    struct egress_netns_config c = {
        .name = name, .tcp_port = (uint16_t)tcp, .dns_port = (uint16_t)dns};
    if (egress_cidr_parse(range, &c.range) != 0)
        c.range.net.family = 0;
    return c;
}

static void test_config_refusals(void **state)
{
    char err[256];
    struct egress_netns_config ok = cfg("abx-egress", "10.200.0.0/16", 15001, 15053);
    assert_int_equal(egress_netns_config_check(&ok, err, sizeof(err)), 0);
    const struct {
        struct egress_netns_config c;
        const char *msg;
    } bad[] = {
        {cfg("", "10.200.0.0/16", 1, 2), "namespace name"},
        {cfg("../etc", "10.200.0.0/16", 1, 2), "namespace name"},
        {cfg("a/b", "10.200.0.0/16", 1, 2), "namespace name"},
        {cfg("-x", "10.200.0.0/16", 1, 2), "namespace name"},
        {cfg("x", "fd00::/64", 1, 2), "IPv4 CIDR"},
        {cfg("x", "10.0.0.0/30", 1, 2), "IPv4 CIDR"},
        {cfg("x", "10.0.0.0/7", 1, 2), "IPv4 CIDR"},
        {cfg("x", "10.200.0.0/16", 0, 2), "ports"},
        {cfg("x", "10.200.0.0/16", 5, 5), "ports"},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        err[0] = '\0';
        assert_int_equal(egress_netns_config_check(&bad[i].c, err, sizeof(err)), AB_EINVAL);
        if (!strstr(err, bad[i].msg))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, bad[i].msg);
    }
}

static void test_slots(void **state)
{
    struct egress_netns_config c = cfg("x", "10.200.0.0/16", 15001, 15053);
    struct egress_link l;
    char ip[INET_ADDRSTRLEN];
    assert_int_equal(egress_netns_slots(&c), 16384);
    assert_int_equal(egress_netns_link(&c, 0, &l), 0);
    assert_string_equal(l.egress_if, "eg0");
    assert_string_equal(inet_ntop(AF_INET, l.gateway.a, ip, sizeof(ip)), "10.200.0.1");
    assert_string_equal(inet_ntop(AF_INET, l.sandbox.a, ip, sizeof(ip)), "10.200.0.2");
    assert_int_equal(egress_netns_link(&c, 65, &l), 0);
    assert_string_equal(l.egress_if, "eg65");
    assert_string_equal(inet_ntop(AF_INET, l.gateway.a, ip, sizeof(ip)), "10.200.1.5");
    assert_string_equal(inet_ntop(AF_INET, l.sandbox.a, ip, sizeof(ip)), "10.200.1.6");
    assert_int_equal(egress_netns_link(&c, 16383, &l), 0);
    assert_string_equal(inet_ntop(AF_INET, l.sandbox.a, ip, sizeof(ip)), "10.200.255.254");
    assert_int_equal(egress_netns_link(&c, 16384, &l), AB_ELIMIT);
    /* the addresses are in the policy's private tier: never dialled for a sandbox */
    assert_int_equal(egress_addr_tier(&l.gateway, NULL), EGRESS_TIER_PRIVATE);
    c = cfg("x", "192.168.77.0/28", 15001, 15053);
    assert_int_equal(egress_netns_slots(&c), 4);
    assert_int_equal(egress_netns_link(&c, 4, &l), AB_ELIMIT);
}

static void test_ruleset(void **state)
{
    struct egress_netns_config c = cfg("x", "10.200.0.0/16", 15001, 15053);
    char buf[2048];
    int n = egress_netns_ruleset(&c, buf, sizeof(buf));
    assert_true(n > 0);
    /* replaced atomically: declare, delete, define, in one nft -f */
    assert_non_null(strstr(buf, "delete table inet " EGRESS_NFT_TABLE "\n"));
    assert_non_null(strstr(buf, "udp dport 53 redirect to :15053"));
    assert_non_null(strstr(buf, "tcp dport 53 redirect to :15053"));
    assert_non_null(strstr(buf, "meta l4proto tcp redirect to :15001"));
    /* whatever is not redirected (other UDP, ICMP) is dropped, nothing is forwarded */
    assert_non_null(strstr(buf, "hook input priority filter; policy drop;"));
    assert_non_null(strstr(buf, "hook forward priority filter; policy drop;"));
    assert_int_equal(egress_netns_ruleset(&c, buf, 100), AB_ELIMIT);
}

/* --- the driver ----------------------------------------------------------------------- */

static int listen_main(const struct egress_netns_config *c, int udp_port)
{
    char err[512];
    int saved, one = 1;
    int fds[3];
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};

    if (egress_netns_enter(c, &saved, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    fds[1] = socket(AF_INET, SOCK_DGRAM, 0);
    fds[2] = socket(AF_INET, SOCK_DGRAM, 0);
    if (egress_netns_leave(saved)) {
        fprintf(stderr, "leaving the egress namespace failed\n");
        return 1;
    }
    const int ports[3] = {c->tcp_port, c->dns_port, udp_port};
    for (int i = 0; i < 3; i++) {
        setsockopt(fds[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        a.sin_port = htons((uint16_t)ports[i]);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0) {
            fprintf(stderr, "bind %d: %s\n", ports[i], strerror(errno));
            return 1;
        }
    }
    listen(fds[0], 16);
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        struct pollfd p[3] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}, {fds[2], POLLIN, 0}};
        if (poll(p, 3, -1) < 0 && errno != EINTR)
            return 1;
        if (p[0].revents & POLLIN) {
            struct sockaddr_in dst;
            socklen_t dl = sizeof(dst);
            char ip[INET_ADDRSTRLEN] = "?";
            int s = accept(fds[0], NULL, NULL);
            if (s < 0)
                continue;
            if (getsockopt(s, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) == 0)
                inet_ntop(AF_INET, &dst.sin_addr, ip, sizeof(ip));
            printf("{\"tcp\":true,\"orig\":\"%s:%d\"}\n", ip, ntohs(dst.sin_port));
            fflush(stdout);
            if (write(s, "gateway\n", 8) != 8)
                fprintf(stderr, "write: %s\n", strerror(errno));
            close(s);
        }
        for (int i = 1; i < 3; i++) {
            if (!(p[i].revents & POLLIN))
                continue;
            char b[512];
            ssize_t r = recv(fds[i], b, sizeof(b) - 1, 0);
            if (r < 0)
                continue;
            b[r] = '\0';
            b[strcspn(b, "\"\\\n")] = '\0';
            printf("{\"%s\":\"%s\"}\n", i == 1 ? "dns" : "udp", b);
            fflush(stdout);
        }
    }
}

static int driver(int argc, char **argv)
{
    char err[512] = "";
    int rc = AB_EINVAL;
    if (argc < 6) {
        fprintf(stderr, "usage: %s create|destroy|attach|detach|listen NAME RANGE TCP DNS ...\n",
                argv[0]);
        return 2;
    }
    struct egress_netns_config c = cfg(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    const char *cmd = argv[1];
    if (strcmp(cmd, "create") == 0) {
        rc = egress_netns_create(&c, err, sizeof(err));
    } else if (strcmp(cmd, "destroy") == 0) {
        rc = egress_netns_destroy(&c, err, sizeof(err));
    } else if (strcmp(cmd, "attach") == 0 && argc == 8) {
        struct egress_link l;
        rc = egress_netns_attach(&c, (uint32_t)atoi(argv[6]), argv[7], &l, err, sizeof(err));
        if (rc == 0) {
            char gw[INET_ADDRSTRLEN], sb[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, l.gateway.a, gw, sizeof(gw));
            inet_ntop(AF_INET, l.sandbox.a, sb, sizeof(sb));
            printf("{\"egress_if\":\"%s\",\"gateway\":\"%s\",\"sandbox\":\"%s\"}\n", l.egress_if,
                   gw, sb);
        }
    } else if (strcmp(cmd, "detach") == 0 && argc == 7) {
        rc = egress_netns_detach(&c, (uint32_t)atoi(argv[6]), err, sizeof(err));
    } else if (strcmp(cmd, "listen") == 0 && argc == 7) {
        return listen_main(&c, atoi(argv[6]));
    } else {
        snprintf(err, sizeof(err), "unknown command or wrong arguments: %s", cmd);
    }
    if (rc)
        fprintf(stderr, "%s: %s (%s)\n", cmd, err, ab_strerror(rc));
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return driver(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_ruleset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
