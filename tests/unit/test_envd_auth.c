/* /files signatures, the access token and the Basic-auth user. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "agentbox/common.h"
#include "agent/envd/auth.h"

#define TOK "tok_0123456789abcdef0123456789abcdef"

static void test_signature_vectors(void **state)
{
    char s[ENVD_SIG_MAX];

    /* Computed independently: v1_ + unpadded base64(sha256("path:op:user:token[:exp]")). */
    assert_int_equal(envd_sig_make("/home/user/a.txt", "read", "", TOK, -1, s, sizeof(s)), 0);
    assert_string_equal(s, "v1_WYDuzcXtnKsM+wZZJGqoINVGHLBBbQMBLjo065CsRkg");
    assert_int_equal(
        envd_sig_make("/home/user/a.txt", "write", "user", TOK, 1800000000, s, sizeof(s)), 0);
    assert_string_equal(s, "v1_DhI8DE9DosLOuE3G1pfMsURh7AzX2n/XunNGem7R4ig");
    assert_int_equal(envd_sig_make("/a", "read", "", TOK, -1, s, 10), AB_ELIMIT);
}

static void test_check_rules(void **state)
{
    char err[128];
    const char *good = "v1_WYDuzcXtnKsM+wZZJGqoINVGHLBBbQMBLjo065CsRkg";
    const char *exp_sig = "v1_DhI8DE9DosLOuE3G1pfMsURh7AzX2n/XunNGem7R4ig";

    /* No token configured: open. */
    assert_int_equal(envd_sig_check(NULL, NULL, NULL, NULL, "/a", "read", NULL, 0, err, 128), 0);
    /* Header token must match when present, signature then ignored. */
    assert_int_equal(envd_sig_check(TOK, TOK, NULL, NULL, "/a", "read", NULL, 0, err, 128), 0);
    assert_int_equal(
        envd_sig_check(TOK, "nope", good, NULL, "/home/user/a.txt", "read", NULL, 0, err, 128),
        AB_EDENIED);
    assert_non_null(strstr(err, "does not match"));
    /* Signature path. */
    assert_int_equal(
        envd_sig_check(TOK, NULL, good, NULL, "/home/user/a.txt", "read", NULL, 0, err, 128), 0);
    assert_int_equal(
        envd_sig_check(TOK, "", good, NULL, "/home/user/a.txt", "read", "", 0, err, 128), 0);
    assert_int_equal(
        envd_sig_check(TOK, NULL, good, NULL, "/home/user/a.txt", "write", NULL, 0, err, 128),
        AB_EDENIED);
    assert_non_null(strstr(err, "invalid signature"));
    assert_int_equal(
        envd_sig_check(TOK, NULL, good, NULL, "/home/user/b.txt", "read", NULL, 0, err, 128),
        AB_EDENIED);
    assert_int_equal(
        envd_sig_check(TOK, NULL, NULL, NULL, "/home/user/a.txt", "read", NULL, 0, err, 128),
        AB_EDENIED);
    assert_non_null(strstr(err, "missing signature"));
    /* Expiration: part of the signature, and checked against now. */
    assert_int_equal(envd_sig_check(TOK, NULL, exp_sig, "1800000000", "/home/user/a.txt", "write",
                                    "user", 1700000000, err, 128),
                     0);
    assert_int_equal(envd_sig_check(TOK, NULL, exp_sig, "1800000000", "/home/user/a.txt", "write",
                                    "user", 1800000001, err, 128),
                     AB_EDENIED);
    assert_non_null(strstr(err, "expired"));
    assert_int_equal(envd_sig_check(TOK, NULL, exp_sig, "1800000001", "/home/user/a.txt", "write",
                                    "user", 1700000000, err, 128),
                     AB_EDENIED);
    assert_int_equal(envd_sig_check(TOK, NULL, exp_sig, "soon", "/home/user/a.txt", "write", "user",
                                    0, err, 128),
                     AB_EINVAL);
}

static void test_token_matches(void **state)
{
    assert_true(envd_token_matches(TOK, TOK));
    assert_false(envd_token_matches(TOK, NULL));
    assert_false(envd_token_matches(TOK, TOK "x"));
    assert_false(envd_token_matches(TOK, "tok_0123456789abcdef0123456789abcdeX"));
}

static void test_basic_user(void **state)
{
    char u[64];

    assert_int_equal(envd_basic_user("Basic cm9vdDo=", u, sizeof(u)), 0); /* root: */
    assert_string_equal(u, "root");
    assert_int_equal(envd_basic_user("basic dXNlcjo=", u, sizeof(u)), 0); /* user: */
    assert_string_equal(u, "user");
    assert_int_equal(envd_basic_user(NULL, u, sizeof(u)), AB_ENOENT);
    assert_int_equal(envd_basic_user("Bearer x", u, sizeof(u)), AB_EINVAL);
    assert_int_equal(envd_basic_user("Basic !!!!", u, sizeof(u)), AB_EINVAL);
    assert_int_equal(envd_basic_user("Basic cm9vdA==", u, sizeof(u)), AB_EINVAL);     /* no ':' */
    assert_int_equal(envd_basic_user("Basic Li4vZXRjOg==", u, sizeof(u)), AB_EINVAL); /* ../etc: */
    assert_int_equal(envd_basic_user("Basic Og==", u, sizeof(u)), AB_EINVAL);         /* ":" */
}

static void test_username_rules(void **state)
{
    assert_true(envd_username_is_valid("user"));
    assert_true(envd_username_is_valid("_svc-1.a"));
    assert_true(envd_username_is_valid("machine$"));
    assert_false(envd_username_is_valid(""));
    assert_false(envd_username_is_valid("1abc"));
    assert_false(envd_username_is_valid("a/b"));
    assert_false(envd_username_is_valid("a$b"));
    assert_false(envd_username_is_valid("abcdefghijklmnopqrstuvwxyz0123456"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature_vectors), cmocka_unit_test(test_check_rules),
        cmocka_unit_test(test_token_matches),     cmocka_unit_test(test_basic_user),
        cmocka_unit_test(test_username_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
