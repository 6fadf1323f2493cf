/* hub/approvals.c: the gated table (reference §4.5) matched by method and
 * route, who is gated, the fingerprint; hub/users.c: scrypt hashes. No
 * database. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "hub/approvals.h"
#include "hub/users.h"

static void test_every_row_of_the_table(void **state)
{
    static const struct {
        const char *method, *path, *op, *params;
        bool once, forbidden;
    } rows[] = {
        {"POST", "/v1/sandboxes", "sandbox.create", "", false, false},
        {"DELETE", "/v1/sandboxes/s1", "sandbox.delete", "s1", true, false},
        {"PUT", "/v1/sandboxes/s1/timeout", "sandbox.update", "s1", false, false},
        {"POST", "/v1/sandboxes/s1/exec", "sandbox.exec", "s1", false, false},
        {"POST", "/v1/envs", "env.create", "", false, false},
        {"PUT", "/v1/envs/web", "env.update", "web", false, false},
        {"PATCH", "/v1/envs/web", "env.update", "web", false, false},
        {"DELETE", "/v1/envs/web", "env.delete", "web", true, false},
        {"POST", "/v1/envs/web/sandboxpools", "pool.create", "web", false, false},
        {"PUT", "/v1/envs/web/sandboxpools/p", "pool.update", "web/p", false, false},
        {"DELETE", "/v1/envs/web/sandboxpools/p", "pool.delete", "web/p", true, false},
        {"PUT", "/v1/envs/web/autoscaling/groups/g", "autoscaling.update", "web/g", false, false},
        {"DELETE", "/v1/envs/web/autoscaling/groups/g", "autoscaling.delete", "web/g", true, false},
        {"POST", "/v1/api-keys", "apikey.create", "", true, true},
        {"DELETE", "/v1/api-keys/k", "apikey.delete", "k", true, false},
        {"POST", "/v1/sandboxes/s1/exec-token", "sandbox.execToken", "s1", true, false},
        /* a query and doubled slashes change nothing */
        {"DELETE", "/v1//sandboxes/s1?force=1", "sandbox.delete", "s1", true, false},
    };
    char params[128];

    (void)state;
    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
        const struct approvals_op *op =
            approvals_match(rows[i].method, rows[i].path, params, sizeof(params));
        if (op == NULL)
            fail_msg("%s %s is not gated", rows[i].method, rows[i].path);
        assert_string_equal(op->op, rows[i].op);
        assert_string_equal(params, rows[i].params);
        assert_int_equal(op->once_only, rows[i].once);
        assert_int_equal(op->forbidden, rows[i].forbidden);
    }
}

static void test_ungated_routes(void **state)
{
    static const char *const rows[][2] = {
        {"GET", "/v1/sandboxes"},          {"GET", "/v1/envs/web"},
        {"POST", "/v1/admin/api-keys"},    {"DELETE", "/v1/admin/sandbox-templates/t"},
        {"GET", "/v1/sandboxes/s1/logs"},  {"POST", "/v1/sandboxes/s1/exec/extra"},
        {"PUT", "/v1/sandboxes"},          {"POST", "/v1/approvals/apr_1/decision"},
        {"DELETE", "/v1/envs/web/events"},
    };
    char params[128];

    (void)state;
    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++)
        if (approvals_match(rows[i][0], rows[i][1], params, sizeof(params)) != NULL)
            fail_msg("%s %s is gated", rows[i][0], rows[i][1]);
}

static void test_who_is_gated(void **state)
{
    struct keys_principal p;

    (void)state;
    memset(&p, 0, sizeof(p));
    assert_false(approvals_gated(&p)); /* an unrestricted key */
    p.mode = KEYS_MODE_AGENT;
    assert_true(approvals_gated(&p));
    p.role = KEYS_ROLE_ADMIN;
    assert_false(approvals_gated(&p)); /* admin keys are never gated */
    p.role = KEYS_ROLE_TENANT;
    p.kind = KEYS_KIND_SESSION;
    assert_false(approvals_gated(&p)); /* nor a human's session */
}

static void fp(const char *m, const char *c, const char *p, const char *body, char out[65])
{
    char sha[65];

    approvals_body_sha(body, strlen(body), sha);
    approvals_fingerprint(m, c, p, sha, out);
}

static void test_fingerprint(void **state)
{
    char a[65], b[65];

    (void)state;
    fp("DELETE", "alpha", "/v1/sandboxes/s1", "", a);
    fp("DELETE", "alpha", "/v1/sandboxes/s1?x=1", "", b);
    assert_string_equal(a, b); /* the query is not part of it */
    fp("DELETE", "alpha", "/v1/sandboxes/s2", "", b);
    assert_string_not_equal(a, b);
    fp("DELETE", "beta", "/v1/sandboxes/s1", "", b);
    assert_string_not_equal(a, b);
    fp("POST", "alpha", "/v1/sandboxes", "{\"a\":1}", a);
    fp("POST", "alpha", "/v1/sandboxes", "{\"a\":2}", b);
    assert_string_not_equal(a, b);
    /* the separators keep fields apart */
    fp("POST", "al", "pha/v1", "", a);
    fp("POST", "alpha", "/v1", "", b);
    assert_string_not_equal(a, b);
    /* the empty body's hash is SHA-256("") */
    approvals_body_sha(NULL, 0, a);
    assert_string_equal(a, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_password_hash(void **state)
{
    char h[USERS_HASH_MAX + 1], h2[USERS_HASH_MAX + 1], err[128];

    (void)state;
    assert_int_equal(users_password_hash("correct horse", h, err, sizeof(err)), 0);
    assert_true(strncmp(h, "$scrypt$ln=15,r=8,p=1$", 22) == 0);
    assert_true(users_password_verify("correct horse", h));
    assert_false(users_password_verify("correct horsf", h));
    assert_false(users_password_verify("", h));
    assert_int_equal(users_password_hash("correct horse", h2, err, sizeof(err)), 0);
    assert_string_not_equal(h, h2); /* a fresh salt each time */
    /* tampered or absurd parameters are refused, not run */
    assert_false(users_password_verify("correct horse", "$scrypt$ln=30,r=8,p=1$AAAA$AAAA"));
    assert_false(users_password_verify("correct horse", "plain"));
    assert_int_equal(users_password_hash("short", h, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "field 'password'"));
    assert_int_equal(users_check_name("Alice", err, sizeof(err)), AB_EINVAL);
    assert_int_equal(users_check_name("alice.b-c_d", err, sizeof(err)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_row_of_the_table), cmocka_unit_test(test_ungated_routes),
        cmocka_unit_test(test_who_is_gated),           cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_password_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
