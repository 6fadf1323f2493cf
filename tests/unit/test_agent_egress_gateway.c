/* The egress gateway (agent/egress/gateway.c).
 *
 * Without arguments: cmocka tests of what needs no namespace (the refusals of
 * egress_gateway_new). With arguments it is the gateway that
 * tests/integration/egress_gateway.test.mjs runs as root, in the agent's (the
 * host's) namespace with its listener in a test-made egress namespace:
 *   serve NAME RANGE TCP DNS INTERNET ALLOW_PRIVATE MAX_CONNS NETWORK_JSON [RESOLVER:PORT]
 * Every sandbox of RANGE gets the one policy; DNS is relayed to RESOLVER; the host's own addresses
 * come from getifaddrs. Prints "ready", then a JSON line per refusal; SIGTERM stops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/egress/gateway.h"
#include "agentbox/common.h"
#include "agentbox/loop.h"

static void test_new_refusals(void **state)
{
    char err[256] = "";
    struct egress_gateway_deps d = {0};
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    close(fds[1]);
    assert_null(egress_gateway_new(&d, fds[0], err, sizeof(err)));
    assert_non_null(strstr(err, "needs a loop and a sandbox lookup"));
    /* the listener was taken and closed */
    assert_int_equal(close(fds[0]), -1);
}

static void test_listen_refusal(void **state)
{
    char err[256] = "";
    struct egress_netns_config c = {.name = "../x", .tcp_port = 1, .dns_port = 2};
    egress_cidr_parse("10.200.0.0/16", &c.range);
    assert_true(egress_gateway_listen(&c, 15001, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "egress namespace name"));
}

/* --- the driver ----------------------------------------------------------------------- */

static struct loop *g_loop;
static struct egress_policy *g_policy;
static struct egress_cidr g_range;

static void on_term(int sig)
{
    (void)sig;
    if (g_loop)
        loop_stop(g_loop);
}

static int sandbox_of(void *arg, const struct egress_addr *peer, struct egress_sandbox_ref *ref)
{
    if (!egress_cidr_contains(&g_range, peer))
        return AB_ENOENT;
    ref->policy = g_policy;
    ref->key = peer->a[3] / 4; /* the slot */
    return 0;
}

static void denied(void *arg, uint64_t key, enum egress_reason why, const struct egress_dest *d)
{
    char ip[INET6_ADDRSTRLEN] = "-";
    if (d)
        inet_ntop(d->addr.family, d->addr.a, ip, sizeof(ip));
    printf("{\"denied\":\"%s\",\"dst\":\"%s:%u\",\"slot\":%llu}\n", egress_reason_label(why), ip,
           d ? d->port : 0, (unsigned long long)key);
    fflush(stdout);
}

static size_t host_addrs(struct egress_addr *out, size_t max)
{
    struct ifaddrs *ifa, *i;
    size_t n = 0;
    if (getifaddrs(&ifa) != 0)
        return 0;
    for (i = ifa; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        if (i->ifa_addr->sa_family == AF_INET) {
            out[n].family = AF_INET;
            memcpy(out[n].a, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
            n++;
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            out[n].family = AF_INET6;
            memcpy(out[n].a, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
            n++;
        }
    }
    freeifaddrs(ifa);
    return n;
}

static int serve(int argc, char **argv)
{
    char err[512] = "";
    struct egress_addr self[256];
    struct egress_netns_config c = {
        .name = argv[2], .tcp_port = (uint16_t)atoi(argv[4]), .dns_port = (uint16_t)atoi(argv[5])};
    struct egress_opts o = {.internet = strcmp(argv[6], "true") == 0,
                            .allow_private = strcmp(argv[7], "true") == 0};
    json_t *net = json_loads(argv[9], JSON_DECODE_ANY, NULL);

    if (egress_cidr_parse(argv[3], &c.range) || !net ||
        egress_policy_parse(net, &o, &g_policy, err, sizeof(err))) {
        fprintf(stderr, "bad arguments: %s\n", err);
        return 2;
    }
    json_decref(net);
    g_range = c.range;
    g_loop = loop_new(NULL);
    if (!g_loop)
        return 1;
    int fd = egress_gateway_listen(&c, c.tcp_port, err, sizeof(err));
    if (fd < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int dns = egress_gateway_listen_dns(&c, c.dns_port, err, sizeof(err));
    if (dns < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct egress_gateway_deps d = {
        .loop = g_loop,
        .dns_fd = dns,
        .sandbox_of = sandbox_of,
        .denied = denied,
        .self = self,
        .n_self = host_addrs(self, AB_ARRAY_LEN(self)),
        .max_conns_per_sandbox = atoi(argv[8]),
    };
    if (argc > 10) {
        char host[64];
        const char *colon = strrchr(argv[10], ':');
        size_t hn = colon ? (size_t)(colon - argv[10]) : 0;
        if (!colon || hn >= sizeof(host)) {
            fprintf(stderr, "resolver must be ip:port\n");
            return 2;
        }
        memcpy(host, argv[10], hn);
        host[hn] = '\0';
        if (egress_addr_parse(host, &d.resolver) != 0) {
            fprintf(stderr, "resolver must be ip:port\n");
            return 2;
        }
        d.resolver_port = (uint16_t)atoi(colon + 1);
    }
    struct egress_gateway *g = egress_gateway_new(&d, fd, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    signal(SIGPIPE, SIG_IGN);
    printf("ready\n");
    fflush(stdout);
    loop_run(g_loop);
    egress_gateway_free(g);
    loop_free(g_loop);
    egress_policy_free(g_policy);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        if (strcmp(argv[1], "serve") != 0 || argc < 10 || argc > 11) {
            fprintf(stderr,
                    "usage: %s serve NAME RANGE TCP DNS INTERNET ALLOW_PRIVATE MAX_CONNS JSON "
                    "[RESOLVER:PORT]\n",
                    argv[0]);
            return 2;
        }
        return serve(argc, argv);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_refusals),
        cmocka_unit_test(test_listen_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
