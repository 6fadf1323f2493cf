/* agent/hub_link.c without a tunnel: the relay headers every relay carries,
 * the one "not reachable" message, and that every call fails at once (no
 * callback, no waiting) while the tunnel is down or no hub is configured. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agent/hub_link.h"
#include "agentbox/common.h"
#include "agentbox/loop.h"
#include "agentbox/relay.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

static int called;

static void never(const struct tun_call_result *res, void *arg)
{
    (void)res, (void)arg;
    called++;
}

static void test_relay_headers(void **state)
{
    const struct hub_link_deps d = {.cluster = "alpha", .hub_configured = true};
    struct hub_link *hl = hub_link_new(&d);
    struct tun_header h[1 + HUB_LINK_RELAY_HEADERS] = {{"X-API-Key", "k"}};
    (void)state;
    assert_non_null(hl);
    int n = hub_link_relay_headers(hl, "beta", RELAY_SVC_DATA, h, 1);
    assert_int_equal(n, 1 + HUB_LINK_RELAY_HEADERS);
    assert_string_equal(h[0].name, "X-API-Key"); /* what was there stays */
    assert_string_equal(h[1].name, "X-AgentBox-Target-Cluster");
    assert_string_equal(h[1].value, "beta");
    assert_string_equal(h[2].name, "X-AgentBox-Target-Service");
    assert_string_equal(h[2].value, "data");
    assert_string_equal(h[3].name, "X-Source-Cluster");
    assert_string_equal(h[3].value, "alpha");
    hub_link_free(hl);
}

static void test_unreachable_words(void **state)
{
    char msg[256];
    const struct hub_link_deps up = {.cluster = "alpha", .hub_configured = true};
    const struct hub_link_deps solo = {.cluster = "alpha", .hub_configured = false};
    struct hub_link *a = hub_link_new(&up), *b = hub_link_new(&solo);
    (void)state;
    hub_link_unreachable(a, "beta", msg, sizeof(msg));
    assert_string_equal(msg, "cluster 'beta' is not reachable: the tunnel to the hub is down; "
                             "retry once the agent is reconnected");
    hub_link_unreachable(b, "beta", msg, sizeof(msg));
    assert_string_equal(msg, "cluster 'beta' is not reachable: this agent has no hub configured");
    hub_link_unreachable(a, NULL, msg, sizeof(msg));
    assert_non_null(strstr(msg, "the hub is not reachable: the tunnel to the hub is down"));
    assert_true(hub_link_configured(a));
    assert_false(hub_link_configured(b));
    assert_false(hub_link_configured(NULL));
    hub_link_free(a);
    hub_link_free(b);
}

static void test_down_fails_fast(void **state)
{
    struct loop *l = loop_new(NULL);
    const struct hub_link_deps d = {.loop = l, .cluster = "alpha", .hub_configured = true};
    struct hub_link *hl = hub_link_new(&d);
    struct tun_head head = {.service = RELAY_SVC_HUB, .method = "GET", .path = "/x"};
    struct tun_stream *st = NULL;
    (void)state;
    assert_non_null(l);
    called = 0;
    assert_null(hub_link_session(hl));
    assert_int_equal(hub_link_epoch(hl), 0);
    assert_int_equal(hub_link_call(hl, "GET", "/x", NULL, 0, NULL, 0, 1024, never, NULL),
                     AB_ECLOSED);
    assert_int_equal(
        hub_link_call_within(hl, 1000, "GET", "/x", NULL, 0, NULL, 0, 1024, never, NULL),
        AB_ECLOSED);
    assert_int_equal(hub_link_open(hl, &head, NULL, &st), AB_ECLOSED);
    assert_null(st);
    assert_int_equal(called, 0); /* refused calls never call back */
    hub_link_free(hl);
    loop_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relay_headers),
        cmocka_unit_test(test_unreachable_words),
        cmocka_unit_test(test_down_fails_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
