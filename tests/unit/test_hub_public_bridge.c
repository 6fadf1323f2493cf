/* The hub's public bridge (hub/public_bridge.c) refuses what it must before
 * any database work: a raw API key in any of the three credential headers
 * (raw keys never cross the tunnel, DESIGN §9), and paths it does not bridge.
 * (The relayed round trip with an assertion is tests/integration/e2b.test.mjs;
 * bare hashes and bad assertions are tests/integration/trust_rogue.test.mjs.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/http.h"
#include "hub/hub.h"
#include "hub/sandbox_events.h"

#include "capture.h"

/* One request through the internal router of a hub that only has the bridge. */
static void call(const char *path, const char *hname, const char *hvalue, struct capture *c)
{
    static struct hub h; /* large: keep it off the stack */
    char err[256];
    struct http_request head;
    struct http_exchange *ex;

    memset(&h, 0, sizeof(h));
    assert_int_equal(public_bridge_add_routes(&h, err, sizeof(err)), 0);
    struct http_router *r = http_router_new(h.internal_routes, h.ninternal);
    assert_non_null(r);
    memset(&head, 0, sizeof(head));
    memset(c, 0, sizeof(*c));
    head.method = "GET";
    head.target = path;
    head.path = path;
    head.query = "";
    head.peer = "tunnel:alpha";
    head.transport_data = "alpha";
    head.headers[0] = (struct http_header){"X-AgentBox-Key-Hash", "00"};
    head.nheaders = 1;
    if (hname) {
        head.headers[1] = (struct http_header){hname, hvalue};
        head.nheaders = 2;
    }
    ex = http_exchange_new(r, &head, &cap_ops, c);
    assert_non_null(ex);
    http_exchange_start(ex);
    http_exchange_body_end(ex);
    assert_true(c->finished);
    http_exchange_release(ex);
    http_router_free(r);
}

static void raw_keys_are_refused(void **state)
{
    static const char *const hdrs[] = {"X-API-Key", "AGENTBOX-API-KEY", "Authorization",
                                       "x-api-key"};
    const char *key = "agbx_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    struct capture c;
    (void)state;
    for (size_t i = 0; i < sizeof(hdrs) / sizeof(hdrs[0]); i++) {
        call("/internal/v1/public/e2b/secrets", hdrs[i], key, &c);
        assert_int_equal(c.status, 400);
        assert_non_null(strstr(c.body, "X-AgentBox-Assertion"));
        assert_null(strstr(c.body, "0123456789abcdef"));
        call("/internal/v1/public/api/v1/api-keys", hdrs[i], key, &c);
        assert_int_equal(c.status, 400);
    }
}

static void only_public_routes_are_bridged(void **state)
{
    struct capture c;
    (void)state;
    call("/internal/v1/public/api/v1/admin/api-keys", NULL, NULL, &c);
    assert_int_equal(c.status, 404);
    call("/internal/v1/public/e2b/secretsx", NULL, NULL, &c);
    assert_int_equal(c.status, 404);
    /* allowed, with a hash, but the hub has no router yet: 503, not a dispatch */
    call("/internal/v1/public/e2b/secrets", NULL, NULL, &c);
    assert_int_equal(c.status, 503);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(raw_keys_are_refused),
        cmocka_unit_test(only_public_routes_are_bridged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
