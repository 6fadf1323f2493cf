/* The agent's authorisation boundaries (issue 13) as tables of allowed and
 * refused cases: which sandboxes a principal may touch on the native API,
 * which data-plane requests count as a sandbox's activity, and which ws://
 * hub URLs are loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/auth.h"
#include "agent/dataplane.h"
#include "agent/native/sandboxes.h"

static struct agent_principal who(const char *team, const char *user, const char *ns, bool admin)
{
    struct agent_principal p;
    memset(&p, 0, sizeof(p));
    snprintf(p.team, sizeof(p.team), "%s", team);
    snprintf(p.user, sizeof(p.user), "%s", user);
    snprintf(p.namespace, sizeof(p.namespace), "%s", ns);
    p.admin = admin;
    return p;
}

static void test_may_touch(void **state)
{
    (void)state;
    struct agent_principal u = who("t", "u", "default", false);
    struct agent_principal v = who("t", "v", "default", false);
    struct agent_principal other_team = who("x", "u", "default", false);
    struct agent_principal no_ns = who("t", "u", "", false);
    struct agent_principal anon_user = who("t", "", "default", false);
    struct agent_principal admin = who("ops", "root", "", true);

    assert_true(native_may_touch(&u, "default", "t", "u"));
    assert_false(native_may_touch(&v, "default", "t", "u"));          /* another user */
    assert_false(native_may_touch(&other_team, "default", "t", "u")); /* another team */
    assert_false(native_may_touch(&u, "other", "t", "u"));            /* another namespace */
    assert_true(native_may_touch(&no_ns, "default", "t", "u"));       /* "" is "default" */
    assert_false(native_may_touch(&anon_user, "default", "t", ""));   /* empty matches nothing */
    assert_false(native_may_touch(&u, "default", NULL, NULL));        /* no recorded owner */
    assert_true(native_may_touch(&admin, "other", "t", "u"));
    assert_true(native_may_touch(&admin, "default", NULL, NULL));
}

static void test_counts_as_activity(void **state)
{
    (void)state;
    assert_true(dp_counts_as_activity(DP_ENVD_PORT, "/files?path=/x"));
    assert_true(dp_counts_as_activity(DP_ENVD_PORT, "/process.Process/Start"));
    assert_true(dp_counts_as_activity(DP_ENVD_PORT, "/healthz"));
    assert_false(dp_counts_as_activity(DP_ENVD_PORT, "/health"));
    assert_false(dp_counts_as_activity(DP_ENVD_PORT, "/health?x=1"));
    assert_false(dp_counts_as_activity(3000, "/"));
    /* other ports count only with the sandbox's own envd access token */
    assert_true(dp_token_matches("tok-123", "tok-123"));
    assert_false(dp_token_matches("tok-124", "tok-123"));
    assert_false(dp_token_matches("tok-12", "tok-123"));
    assert_false(dp_token_matches(NULL, "tok-123"));
    assert_false(dp_token_matches("", ""));
    assert_false(dp_counts_as_activity(8080, "/files"));
}

static void test_loopback(void **state)
{
    (void)state;
    assert_true(agent_url_is_loopback("127.0.0.1:7701"));
    assert_true(agent_url_is_loopback("127.1.2.3:7701/v1/tunnel"));
    assert_true(agent_url_is_loopback("localhost:7701"));
    assert_true(agent_url_is_loopback("LOCALHOST"));
    assert_true(agent_url_is_loopback("[::1]:7701"));
    assert_false(agent_url_is_loopback("10.0.0.1:7701"));
    assert_false(agent_url_is_loopback("hub.example.com:7701"));
    assert_false(agent_url_is_loopback("127.0.0.1.example.com:7701"));
    assert_false(agent_url_is_loopback("localhost.example.com"));
    assert_false(agent_url_is_loopback("[::2]:7701"));
    assert_false(agent_url_is_loopback("[::1"));
    assert_false(agent_url_is_loopback("127.0.0.256:1"));
    assert_false(agent_url_is_loopback(""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_may_touch),
        cmocka_unit_test(test_counts_as_activity),
        cmocka_unit_test(test_loopback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
