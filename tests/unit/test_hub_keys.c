/* hub/keys.c without a database: token format, hashing, prefix, names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/loop.h"
#include "hub/auth.h"
#include "hub/keys.h"

static void test_token_format(void **state)
{
    char a[KEYS_TOKEN_LEN + 1], b[KEYS_TOKEN_LEN + 1];

    (void)state;
    assert_int_equal(keys_token_new(a), 0);
    assert_int_equal(keys_token_new(b), 0);
    assert_int_equal(strlen(a), 69);
    assert_int_equal(strncmp(a, "agbx_", 5), 0);
    for (size_t i = 5; i < 69; i++)
        assert_true((a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f'));
    assert_true(keys_token_is_wellformed(a));
    assert_string_not_equal(a, b); /* 256 random bits */
}

static void test_token_wellformed(void **state)
{
    char t[KEYS_TOKEN_LEN + 2];

    (void)state;
    memcpy(t, "agbx_", 5);
    memset(t + 5, 'a', 64);
    t[69] = '\0';
    assert_true(keys_token_is_wellformed(t));
    t[10] = 'A'; /* upper case */
    assert_false(keys_token_is_wellformed(t));
    t[10] = 'g'; /* not hex */
    assert_false(keys_token_is_wellformed(t));
    t[10] = 'a';
    t[68] = '\0'; /* short */
    assert_false(keys_token_is_wellformed(t));
    t[68] = 'a';
    t[69] = 'a';
    t[70] = '\0'; /* long */
    assert_false(keys_token_is_wellformed(t));
    t[69] = '\0';
    t[0] = 'x'; /* wrong prefix */
    assert_false(keys_token_is_wellformed(t));
    assert_false(keys_token_is_wellformed("abxc_0000"));
    assert_false(keys_token_is_wellformed(""));
    assert_false(keys_token_is_wellformed(NULL));
}

static void test_hash_and_prefix(void **state)
{
    const char *tok = "agbx_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    char h[KEYS_HASH_LEN + 1], want[65], p[KEYS_PREFIX_LEN + 1];
    uint8_t d[32];

    (void)state;
    keys_token_hash(tok, h);
    crypto_sha256(tok, strlen(tok), d);
    crypto_hex_encode(d, sizeof(d), want);
    assert_string_equal(h, want); /* SHA-256 of the whole token, prefix included */
    assert_true(keys_hash_is_wellformed(h));
    assert_false(keys_hash_is_wellformed(tok));
    keys_token_prefix(tok, p);
    assert_string_equal(p, "agbx_0123");
    /* the hash of the empty string, as a fixed point */
    keys_token_hash("", h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(keys_role_name(KEYS_ROLE_ADMIN), "admin");
    assert_string_equal(keys_role_name(KEYS_ROLE_TENANT), "tenant");
    assert_string_equal(keys_mode_name(KEYS_MODE_AGENT), "agent");
    assert_string_equal(keys_mode_name(KEYS_MODE_UNRESTRICTED), "unrestricted");
    assert_string_equal(keys_status_name(KEYS_REVOKED), "revoked");
    assert_string_equal(keys_status_name(KEYS_EXPIRED), "expired");
    assert_string_equal(keys_status_name(KEYS_UNKNOWN), "unknown");
}

static int hook_calls;
static char hook_reason[16];

static void hook(void *arg, const char *id, const char *hash, const char *reason)
{
    (void)id;
    (void)hash;
    hook_calls += *(int *)arg;
    strcpy(hook_reason, reason);
}

/* The hook belongs to one identity context: two contexts do not share it. */
static void test_revocation_hook(void **state)
{
    static const char secret[] = "0123456789abcdef0123456789abcdef";
    struct loop_options lo = {0};
    struct auth_options o = {0};
    char err[256] = "";
    int one = 1;

    (void)state;
    struct loop *l = loop_new(&lo);
    assert_non_null(l);
    o.loop = l;
    o.hub_secret = secret;
    o.hub_secret_len = sizeof(secret) - 1;
    struct auth_ctx *a = NULL, *b = NULL;
    assert_int_equal(auth_new(&o, &a, err, sizeof(err)), 0);
    assert_int_equal(auth_new(&o, &b, err, sizeof(err)), 0);
    assert_non_null(a);
    assert_non_null(b);
    auth_notify_revoked(a, "ak_1", "00", "revoked"); /* no hook: nothing */
    auth_set_revocation_hook(a, hook, &one);
    auth_notify_revoked(b, "ak_1", "00", "revoked"); /* another context: not a's hook */
    assert_int_equal(hook_calls, 0);
    auth_notify_revoked(a, "ak_1", "00", "expired");
    assert_int_equal(hook_calls, 1);
    assert_string_equal(hook_reason, "expired");
    auth_set_revocation_hook(a, NULL, NULL);
    auth_notify_revoked(a, "ak_1", "00", "revoked");
    assert_int_equal(hook_calls, 1);
    auth_free(b);
    auth_free(a);
    loop_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_format),    cmocka_unit_test(test_token_wellformed),
        cmocka_unit_test(test_hash_and_prefix), cmocka_unit_test(test_names),
        cmocka_unit_test(test_revocation_hook),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
