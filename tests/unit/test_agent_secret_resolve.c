/* agent/secret_resolve.c: the claim record of the names the rules reference,
 * the hub's vault answer parsed into a sandbox's secrets (every asked name
 * must be found; a value that would split a header is refused), and that a
 * resolve never goes out without an assertion, names, or a tunnel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agent/egress/policy.h"
#include "agent/egress/secrets.h"
#include "agent/hub_link.h"
#include "agent/secret_resolve.h"
#include "agentbox/common.h"

static struct egress_policy *parse(const char *json)
{
    json_error_t je;
    json_t *net = json_loads(json, 0, &je);
    assert_non_null(net);
    struct egress_opts o = {.internet = true};
    struct egress_policy *p = NULL;
    char err[512];
    int rc = egress_policy_parse(net, &o, &p, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s", err);
    json_decref(net);
    return p;
}

static void test_names_json(void **state)
{
    (void)state;
    struct egress_policy *p =
        parse("{\"allowOut\":[\"api.example.com\",\"b.example.com\"],\"rules\":{"
              "\"api.example.com\":[{\"transform\":{\"headers\":{\"Authorization\":\"Bearer "
              "${e2b.secrets.OPENAI}\",\"X-Org\":\"${e2b.secrets.ORG}\"}}}],"
              "\"b.example.com\":[{\"transform\":{\"headers\":{\"X-K\":\"${e2b.secrets.OPENAI}"
              "\"}}}]}}");
    size_t n;
    json_t *a = secret_resolve_names_json(p, &n);
    assert_int_equal(n, 2);
    char *s = json_dumps(a, JSON_COMPACT);
    assert_string_equal(s, "[\"OPENAI\",\"ORG\"]");
    free(s);
    json_decref(a);
    egress_policy_free(p);
    p = parse("{\"allowOut\":[\"api.example.com\"]}");
    assert_null(secret_resolve_names_json(p, &n));
    assert_int_equal(n, 0);
    egress_policy_free(p);
}

static const char NAMES[2][EGRESS_SECRET_NAME_MAX + 1] = {"OPENAI", "ORG"};

static void test_parse(void **state)
{
    (void)state;
    char err[512];
    struct egress_secrets *s = egress_secrets_new();
    const char *ok = "{\"secrets\":[{\"name\":\"ORG\",\"found\":true,\"version\":1,\"value\":"
                     "\"org-1\"},{\"name\":\"OPENAI\",\"found\":true,\"version\":3,\"value\":"
                     "\"sk-abc\"}]}";
    assert_int_equal(secret_resolve_parse(ok, strlen(ok), NAMES, 2, s, err, sizeof(err)), 0);
    assert_int_equal(egress_secrets_count(s), 2);
    char out[64];
    size_t n;
    assert_int_equal(egress_secrets_fill(s, "${e2b.secrets.OPENAI}/${e2b.secrets.ORG}", out,
                                         sizeof(out), &n, err, sizeof(err)),
                     0);
    assert_string_equal(out, "sk-abc/org-1");
    egress_secrets_free(s);

    s = egress_secrets_new();
    const char *missing = "{\"secrets\":[{\"name\":\"OPENAI\",\"found\":true,\"value\":\"v\"},"
                          "{\"name\":\"ORG\",\"found\":false}]}";
    assert_int_equal(secret_resolve_parse(missing, strlen(missing), NAMES, 2, s, err, sizeof(err)),
                     AB_ENOENT);
    assert_non_null(strstr(err, "\"ORG\""));
    const char *absent = "{\"secrets\":[{\"name\":\"OPENAI\",\"found\":true,\"value\":\"v\"}]}";
    assert_int_equal(secret_resolve_parse(absent, strlen(absent), NAMES, 2, s, err, sizeof(err)),
                     AB_ENOENT);
    const char *crlf = "{\"secrets\":[{\"name\":\"OPENAI\",\"found\":true,\"value\":\"v\\r\\nX: "
                       "1\"},{\"name\":\"ORG\",\"found\":true,\"value\":\"o\"}]}";
    assert_int_equal(secret_resolve_parse(crlf, strlen(crlf), NAMES, 2, s, err, sizeof(err)),
                     AB_EINVAL);
    assert_null(strstr(err, "X: 1"));
    const char *notstr = "{\"secrets\":[{\"name\":\"OPENAI\",\"found\":true,\"value\":5}]}";
    assert_int_equal(secret_resolve_parse(notstr, strlen(notstr), NAMES, 1, s, err, sizeof(err)),
                     AB_EIO);
    assert_int_equal(secret_resolve_parse("nope", 4, NAMES, 1, s, err, sizeof(err)), AB_EIO);
    egress_secrets_free(s);
}

static int called;
static void cb(int rc, struct egress_secrets *s, const char *err, void *arg)
{
    (void)rc, (void)s, (void)err, (void)arg;
    called++;
}

static void test_no_call_without_what_it_needs(void **state)
{
    (void)state;
    const struct hub_link_deps d = {.cluster = "alpha", .hub_configured = true};
    struct hub_link *hl = hub_link_new(&d);
    struct egress_secrets *s = egress_secrets_new();
    char err[512];
    assert_int_equal(secret_resolve(hl, "isbx-1", "asrt", NAMES, 0, s, cb, NULL, err, sizeof(err)),
                     AB_EINVAL);
    assert_int_equal(secret_resolve(hl, "isbx-1", "", NAMES, 2, s, cb, NULL, err, sizeof(err)),
                     AB_EDENIED);
    /* the tunnel is down: at once, no callback */
    assert_int_equal(secret_resolve(hl, "isbx-1", "asrt", NAMES, 2, s, cb, NULL, err, sizeof(err)),
                     AB_ECLOSED);
    assert_non_null(strstr(err, "not reachable"));
    assert_int_equal(called, 0);
    egress_secrets_free(s);
    hub_link_free(hl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_json),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_no_call_without_what_it_needs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
