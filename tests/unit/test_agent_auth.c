/* agent/auth.c with principal assertions (issue 13): a request from the tunnel
 * authenticates by X-AgentBox-Assertion, verified with the keys of the last
 * WELCOME, for this cluster only, unexpired, not for a revoked key id; from
 * anywhere else, or with a key header too, it is refused. No hub is needed:
 * an assertion is checked on the agent alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "agent/auth.h"
#include "agent/hub_link.h"
#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/http.h"

#include "capture.h"

static struct agent_auth *g_au;
static struct agent_principal g_seen;
static int g_done;

static void authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    (void)arg;
    g_seen = *p;
    g_done++;
    http_respond(ex, 200, NULL, "", 0, NULL, 0);
}

static void h_any(struct http_exchange *ex, void *arg)
{
    (void)arg;
    agent_auth_request(g_au, ex, authed, NULL);
}

/* One GET with the assertion (and an optional extra header) from peer. */
static int call(const char *peer, const char *tok, const char *hname, const char *hvalue,
                struct capture *c)
{
    static const struct http_route routes[] = {{"*", "/{*rest}", h_any, NULL, 0}};
    struct http_router *r = http_router_new(routes, 1);
    struct http_request head;
    struct http_exchange *ex;

    assert_non_null(r);
    memset(&head, 0, sizeof(head));
    memset(c, 0, sizeof(*c));
    head.method = "GET";
    head.target = head.path = "/sandboxes";
    head.query = "";
    head.peer = peer;
    head.headers[head.nheaders++] = (struct http_header){ASRT_HEADER, tok};
    if (hname)
        head.headers[head.nheaders++] = (struct http_header){hname, hvalue};
    ex = http_exchange_new(r, &head, &cap_ops, c);
    assert_non_null(ex);
    http_exchange_start(ex);
    http_exchange_body_end(ex);
    assert_true(c->finished);
    http_exchange_release(ex);
    http_router_free(r);
    return c->status;
}

static void sign(struct asrt_signer *s, const char *aud, const char *key, int64_t iat, int64_t exp,
                 char *out)
{
    struct asrt_claims cl;
    char err[200];
    memset(&cl, 0, sizeof(cl));
    strcpy(cl.key, key);
    strcpy(cl.team, "acme");
    strcpy(cl.user, "victim");
    strcpy(cl.ns, "acme-victim");
    strcpy(cl.role, "tenant");
    strcpy(cl.mode, "unrestricted");
    strcpy(cl.aud, aud);
    strcpy(cl.rid, "r1");
    cl.iat = iat;
    cl.exp = exp;
    assert_int_equal(asrt_sign(s, &cl, out, ASRT_TOKEN_MAX + 1, err, sizeof(err)), 0);
}

static void welcome(struct agent_auth *au, const char *pub)
{
    json_t *ev = json_pack("{s:s,s:[s]}", "type", "welcome", "assertionKeys", pub);
    agent_auth_on_event(au, ev);
    json_decref(ev);
}

static void test_assertions(void **state)
{
    const struct hub_link_deps d = {.cluster = "alpha", .hub_configured = true};
    struct hub_link *hl = hub_link_new(&d);
    struct asrt_signer *s = NULL;
    char pub[ASRT_PUBKEY_TEXT_MAX + 1];
    static char tok[ASRT_TOKEN_MAX + 1], other[ASRT_TOKEN_MAX + 1];
    int64_t now = (int64_t)time(NULL);
    struct capture c;
    (void)state;

    assert_non_null(hl);
    assert_int_equal(agent_auth_new(hl, &g_au), 0);
    assert_int_equal(asrt_signer_generate(&s), 0);
    assert_int_equal(asrt_signer_public_text(s, pub, sizeof(pub)), 0);
    sign(s, "alpha", "ak_0123456789abcdef", now, now + 120, tok);

    /* no WELCOME yet: no keys, fail closed */
    g_done = 0;
    assert_int_equal(call("tunnel:hub", tok, NULL, NULL, &c), 401);
    assert_int_equal(g_done, 0);

    welcome(g_au, pub);
    assert_int_equal(call("tunnel:hub", tok, NULL, NULL, &c), 200);
    assert_int_equal(g_done, 1);
    assert_string_equal(g_seen.user, "victim");
    assert_string_equal(g_seen.namespace, "acme-victim");
    assert_string_equal(g_seen.key_id, "ak_0123456789abcdef");
    assert_string_equal(g_seen.assertion, tok); /* what this agent presents to the hub */
    assert_false(g_seen.admin);

    /* not from the tunnel: a good signature is not enough */
    assert_int_equal(call("127.0.0.1:5555", tok, NULL, NULL, &c), 401);
    assert_non_null(strstr(c.body, "only from the hub"));
    /* an assertion and a key: refused */
    assert_int_equal(call("tunnel:hub", tok, "X-API-Key", "agbx_x", &c), 400);
    /* made for another cluster, expired */
    sign(s, "beta", "ak_0123456789abcdef", now, now + 120, other);
    assert_int_equal(call("tunnel:hub", other, NULL, NULL, &c), 401);
    assert_non_null(strstr(c.body, "'beta'"));
    sign(s, "alpha", "ak_0123456789abcdef", now - 400, now - 200, other);
    assert_int_equal(call("tunnel:hub", other, NULL, NULL, &c), 401);
    assert_non_null(strstr(c.body, "expired"));

    /* the hub's revocation EVENT names the key: a replay is refused */
    json_t *ev = json_pack("{s:s,s:s,s:s}", "type", "key_revoked", "hash", "00", "keyId",
                           "ak_0123456789abcdef");
    agent_auth_on_event(g_au, ev);
    json_decref(ev);
    g_done = 0;
    assert_int_equal(call("tunnel:hub", tok, NULL, NULL, &c), 401);
    assert_non_null(strstr(c.body, "revoked"));
    assert_int_equal(g_done, 0);

    /* a WELCOME with another key (rotation): the old one stops verifying */
    struct asrt_signer *s2 = NULL;
    char pub2[ASRT_PUBKEY_TEXT_MAX + 1];
    assert_int_equal(asrt_signer_generate(&s2), 0);
    assert_int_equal(asrt_signer_public_text(s2, pub2, sizeof(pub2)), 0);
    welcome(g_au, pub2);
    sign(s, "alpha", "ak_fedcba9876543210", now, now + 120, other);
    assert_int_equal(call("tunnel:hub", other, NULL, NULL, &c), 401);
    sign(s2, "alpha", "ak_fedcba9876543210", now, now + 120, other);
    assert_int_equal(call("tunnel:hub", other, NULL, NULL, &c), 200);

    asrt_signer_free(s);
    asrt_signer_free(s2);
    agent_auth_free(g_au);
    hub_link_free(hl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assertions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
