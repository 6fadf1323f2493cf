/* The hub's trust boundaries in hub/auth.c that need no database: which
 * assertions may make a claim row (auth_claim_allowed: a validation rid, or
 * one create credit per create the hub forwarded), the per-(principal,
 * audience) cache of signed assertions, and the per-user key churn limit.
 * The loop never runs here, so the scan tick (the only database user) never
 * fires. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/loop.h"
#include "hub/auth.h"

static const char SECRET[] = "0123456789abcdef0123456789abcdef";

struct fx {
    struct loop *loop;
    struct auth_ctx *a;
    struct keys_principal p;
};

static int setup(void **state)
{
    static struct fx f;
    struct loop_options lo = {0};
    struct auth_options ao = {0};
    char err[256];

    memset(&f, 0, sizeof(f));
    f.loop = loop_new(&lo);
    assert_non_null(f.loop);
    ao.loop = f.loop;
    ao.hub_secret = SECRET;
    ao.hub_secret_len = sizeof(SECRET) - 1;
    assert_int_equal(auth_new(&ao, &f.a, err, sizeof(err)), 0);
    strcpy(f.p.key_id, "ak_0123456789abcdef");
    strcpy(f.p.team, "acme");
    strcpy(f.p.user, "alice");
    strcpy(f.p.namespace, "t-acme-alice");
    f.p.role = KEYS_ROLE_TENANT;
    f.p.mode = KEYS_MODE_UNRESTRICTED;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;

    auth_free(f->a);
    loop_free(f->loop);
    return 0;
}

/* the rid of tok as the hub reads it back from cluster */
static void rid_of(struct fx *f, const char *cluster, const char *tok, char rid[ASRT_RID_MAX + 1])
{
    struct keys_principal back;
    char err[256];

    assert_int_equal(auth_verify_from(f->a, cluster, tok, &back, rid, err, sizeof(err)), 0);
    assert_string_equal(back.user, "alice");
}

static void test_claims_need_a_create(void **state)
{
    struct fx *f = *state;
    char tok[ASRT_TOKEN_MAX + 1], again[ASRT_TOKEN_MAX + 1], rid[ASRT_RID_MAX + 1], err[256];

    /* a read through the front door: the cluster holds a good assertion, and no claim */
    assert_int_equal(
        auth_assertion_for(f->a, &f->p, "rogue", NULL, false, tok, sizeof(tok), err, sizeof(err)),
        0);
    rid_of(f, "rogue", tok, rid);
    assert_false(auth_claim_allowed(f->a, "rogue", rid));
    /* two creates under the same (cached) assertion: two claims, not three */
    assert_int_equal(auth_assertion_for(f->a, &f->p, "rogue", NULL, true, again, sizeof(again), err,
                                        sizeof(err)),
                     0);
    assert_string_equal(again, tok);
    assert_int_equal(auth_assertion_for(f->a, &f->p, "rogue", NULL, true, again, sizeof(again), err,
                                        sizeof(err)),
                     0);
    assert_false(auth_claim_allowed(f->a, "beta", rid)); /* another cluster's credit: none */
    assert_true(auth_claim_allowed(f->a, "rogue", rid));
    assert_true(auth_claim_allowed(f->a, "rogue", rid));
    assert_false(auth_claim_allowed(f->a, "rogue", rid));
    /* a validation rid speaks for the validating cluster's client */
    assert_true(auth_claim_allowed(f->a, "rogue", AUTH_RID_VALIDATION "0011223344556677"));
    assert_true(auth_claim_allowed(f->a, "rogue", AUTH_RID_VALIDATION "0011223344556677"));
}

/* A relay copies the sender's rid, never the validation prefix: the target
 * cluster did not validate anything. */
static void test_relayed_validation_rid_is_not_claim_capable(void **state)
{
    struct fx *f = *state;
    char tok[ASRT_TOKEN_MAX + 1], rid[ASRT_RID_MAX + 1], err[256];

    assert_int_equal(auth_sign_for(f->a, &f->p, "beta", AUTH_RID_VALIDATION "0011223344556677", tok,
                                   sizeof(tok), err, sizeof(err)),
                     0);
    rid_of(f, "beta", tok, rid);
    assert_string_equal(rid, "r." AUTH_RID_VALIDATION "0011223344556677");
    assert_false(auth_claim_allowed(f->a, "beta", rid));
    /* the same through the cache of signed assertions */
    strcpy(f->p.user, "bob");
    assert_int_equal(auth_assertion_for(f->a, &f->p, "beta", AUTH_RID_VALIDATION "aa", false, tok,
                                        sizeof(tok), err, sizeof(err)),
                     0);
    {
        struct keys_principal back;
        assert_int_equal(auth_verify_from(f->a, "beta", tok, &back, rid, err, sizeof(err)), 0);
    }
    assert_string_equal(rid, "r." AUTH_RID_VALIDATION "aa");
    strcpy(f->p.user, "alice");
}

/* The cache is per principal and audience, and a revocation empties it for
 * the key (the next assertion is a new one). */
static void test_signed_cache(void **state)
{
    struct fx *f = *state;
    char a1[ASRT_TOKEN_MAX + 1], a2[ASRT_TOKEN_MAX + 1], b[ASRT_TOKEN_MAX + 1], err[256];
    struct keys_principal admin = f->p;

    admin.role = KEYS_ROLE_ADMIN;
    assert_int_equal(
        auth_assertion_for(f->a, &f->p, "alpha", NULL, false, a1, sizeof(a1), err, sizeof(err)), 0);
    assert_int_equal(
        auth_assertion_for(f->a, &f->p, "alpha", NULL, false, a2, sizeof(a2), err, sizeof(err)), 0);
    assert_string_equal(a1, a2);
    assert_int_equal(
        auth_assertion_for(f->a, &f->p, "gamma", NULL, false, b, sizeof(b), err, sizeof(err)), 0);
    assert_string_not_equal(a1, b);
    assert_int_equal(
        auth_assertion_for(f->a, &admin, "alpha", NULL, false, b, sizeof(b), err, sizeof(err)), 0);
    assert_string_not_equal(a1, b); /* another role is another principal */
    auth_notify_revoked(f->a, f->p.key_id, "", "revoked");
    assert_int_equal(
        auth_assertion_for(f->a, &f->p, "alpha", NULL, false, a2, sizeof(a2), err, sizeof(err)), 0);
    assert_string_not_equal(a1, a2);
    /* and the hub itself refuses both now: the key is revoked */
    {
        struct keys_principal back;
        assert_int_equal(auth_verify_from(f->a, "alpha", a1, &back, NULL, err, sizeof(err)),
                         ASRT_EREVOKED);
    }
    /* too small a buffer is refused, never truncated */
    assert_int_equal(
        auth_assertion_for(f->a, &admin, "alpha", NULL, false, b, 10, err, sizeof(err)), AB_ELIMIT);
}

static void test_key_churn(void **state)
{
    struct fx *f = *state;
    struct keys_principal other = f->p, admin = f->p;
    char err[256];

    strcpy(other.user, "carol");
    admin.role = KEYS_ROLE_ADMIN;
    for (int i = 0; i < AUTH_KEY_CHURN_PER_MIN; i++)
        assert_int_equal(auth_key_churn(f->a, &f->p, err, sizeof(err)), 0);
    assert_int_equal(auth_key_churn(f->a, &f->p, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "at most 30 creates and revokes per user per minute"));
    assert_int_equal(auth_key_churn(f->a, &other, err, sizeof(err)), 0);
    for (int i = 0; i < 2 * AUTH_KEY_CHURN_PER_MIN; i++)
        assert_int_equal(auth_key_churn(f->a, &admin, err, sizeof(err)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_claims_need_a_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relayed_validation_rid_is_not_claim_capable, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_signed_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_churn, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
