/* The Pod's egress redirect (agent/egress/pod.c) and the sidecar's policy
 * pushes (agent/egress/sidecar.c, egress_sidecar_apply): the ruleset lets
 * only marked packets and loopback past the redirect and refuses bad
 * configs; a push is parsed by the one policy parser and refuses what the
 * sidecar cannot enforce. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agent/egress/pod.h"
#include "agentbox/common.h"

static void ruleset_redirects_all_but_marked(void **state)
{
    (void)state;
    char buf[EGRESS_POD_RULESET_MAX];
    const struct egress_pod_config c = {.mark = 0xab0e, .tcp_port = 15001, .dns_port = 15053};
    int n = egress_pod_ruleset(&c, buf, sizeof(buf));
    assert_true(n > 0);
    /* replaced atomically: declared, deleted, defined */
    assert_non_null(strstr(buf, "delete table inet agentbox_egress\n"));
    /* the gateway's own packets pass first, then loopback, then the redirects */
    const char *mark = strstr(buf, "meta mark 0xab0e return");
    const char *lo = strstr(buf, "ip daddr 127.0.0.0/8 return");
    const char *dns = strstr(buf, "udp dport 53 redirect to :15053");
    const char *tcp = strstr(buf, "meta l4proto tcp redirect to :15001");
    assert_non_null(mark);
    assert_non_null(lo);
    assert_non_null(dns);
    assert_non_null(tcp);
    assert_true(mark < lo && lo < dns && dns < tcp);
    /* what is not redirected or marked does not leave */
    assert_non_null(strstr(buf, "type filter hook output priority 0; policy drop;"));
    assert_non_null(strstr(buf, "ct status dnat accept"));
    assert_non_null(strstr(buf, "meta l4proto tcp reject with tcp reset"));
    /* never exempted by uid: a root sandbox could become any uid */
    assert_null(strstr(buf, "skuid"));
}

static void ruleset_refuses_bad_config(void **state)
{
    (void)state;
    char buf[EGRESS_POD_RULESET_MAX], small[64];
    struct egress_pod_config c = {.mark = 0, .tcp_port = 15001, .dns_port = 15053};
    assert_int_equal(egress_pod_ruleset(&c, buf, sizeof(buf)), AB_EINVAL);
    c.mark = 1;
    c.dns_port = 15001;
    assert_int_equal(egress_pod_ruleset(&c, buf, sizeof(buf)), AB_EINVAL);
    c.dns_port = 0;
    assert_int_equal(egress_pod_ruleset(&c, buf, sizeof(buf)), AB_EINVAL);
    c.dns_port = 15053;
    assert_int_equal(egress_pod_ruleset(&c, small, sizeof(small)), AB_ELIMIT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ruleset_redirects_all_but_marked),
        cmocka_unit_test(ruleset_refuses_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
