/* hub/vault.c: the key ring, AES-256-GCM sealing and its tamper detection,
 * the AAD binding, the hub secret rules and the input limits of reference
 * §5.5, each with its message.
 *
 * With AGENTBOX_TEST_DATABASE_URL (a migrated database) it also runs the
 * storage path: create, update, resolve, rotate-key, resolve again, and a
 * tampered row. tests/integration/vault.test.mjs runs it that way, and sets
 * AGENTBOX_TEST_RESOLVE_EXPECT ("ns\tuser\tname\tvalue" lines) plus
 * AGENTBOX_HUB_SECRET to check values written through the hub API resolve
 * after a rotation. Without the variables those tests are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "hub/vault.h"

static const char SECRET[] = "0123456789abcdef0123456789abcdef-test-secret";
static const char OTHER[] = "another hub secret of at least thirty-two bytes";

/* --- key ring ------------------------------------------------------------------------ */

static void test_keyring(void **state)
{
    struct vault_keyring kr, kr2;
    uint8_t k1[32], k2[32], k3[32], k4[32];
    char id1[VAULT_KEY_ID_MAX], id2[VAULT_KEY_ID_MAX], err[256] = "";

    (void)state;
    assert_int_equal(vault_keyring_init(&kr, "short", 5, NULL, 0, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "at least 32 bytes"));
    assert_int_equal(vault_keyring_init(&kr, SECRET, strlen(SECRET), NULL, 0, err, sizeof(err)), 0);
    assert_int_equal(vault_keyring_derive(&kr, VAULT_PURPOSE_SECRETS, 1, k1, id1), 0);
    assert_int_equal(vault_keyring_derive(&kr, VAULT_PURPOSE_SECRETS, 2, k2, id2), 0);
    assert_int_equal(vault_keyring_derive(&kr, VAULT_PURPOSE_TOKENS, 1, k3, id1), 0);
    assert_memory_not_equal(k1, k2, 32); /* generation matters */
    assert_memory_not_equal(k1, k3, 32); /* purpose matters */
    assert_int_equal(strncmp(id1, "v1.", 3), 0);
    assert_int_equal(strlen(id1), 11);
    assert_int_equal(strncmp(id2, "v2.", 3), 0);
    assert_string_equal(id1 + 3, id2 + 3); /* same secret, same fingerprint */
    assert_null(strstr(id1, SECRET));

    /* lookup by id finds the same key */
    assert_int_equal(vault_keyring_lookup(&kr, VAULT_PURPOSE_SECRETS, id2, k4), 0);
    assert_memory_equal(k2, k4, 32);
    assert_int_equal(vault_keyring_lookup(&kr, VAULT_PURPOSE_SECRETS, "v2.00000000", k4),
                     AB_ENOENT);
    assert_int_equal(vault_keyring_lookup(&kr, VAULT_PURPOSE_SECRETS, "x", k4), AB_EINVAL);
    assert_int_equal(vault_keyring_lookup(&kr, VAULT_PURPOSE_SECRETS, "v0.abc", k4), AB_EINVAL);

    /* a key ring with a new secret and the old one as previous finds old ids */
    assert_int_equal(
        vault_keyring_init(&kr2, OTHER, strlen(OTHER), SECRET, strlen(SECRET), err, sizeof(err)),
        0);
    assert_int_equal(vault_keyring_lookup(&kr2, VAULT_PURPOSE_SECRETS, id2, k4), 0);
    assert_memory_equal(k2, k4, 32);
    assert_int_equal(vault_keyring_derive(&kr2, VAULT_PURPOSE_SECRETS, 2, k4, id1), 0);
    assert_memory_not_equal(k2, k4, 32);
    assert_string_not_equal(id1, id2);
    vault_keyring_clear(&kr);
    vault_keyring_clear(&kr2);
}

/* --- sealing ----------------------------------------------------------------------------- */

static void test_seal_round_trip_and_tamper(void **state)
{
    struct vault_keyring kr;
    uint8_t key[32], other[32], nonce[12], aad[512], aad2[512];
    uint8_t ct[64 + 16], pt[64];
    char id[VAULT_KEY_ID_MAX], err[256];
    const char *value = "canary-value-do-not-leak";
    size_t len = strlen(value), aadlen, aad2len;

    (void)state;
    assert_int_equal(vault_keyring_init(&kr, SECRET, strlen(SECRET), NULL, 0, err, sizeof(err)), 0);
    assert_int_equal(vault_keyring_derive(&kr, VAULT_PURPOSE_SECRETS, 1, key, id), 0);
    assert_int_equal(vault_keyring_derive(&kr, VAULT_PURPOSE_SECRETS, 2, other, id), 0);
    aadlen = vault_aad("t-ml-alice", "alice", "db_password", 3, aad, sizeof(aad));
    assert_true(aadlen <= sizeof(aad));

    assert_int_equal(vault_seal(key, aad, aadlen, value, len, nonce, ct), 0);
    assert_null(memmem(ct, len + 16, value, len)); /* not in clear */
    memset(pt, 0, sizeof(pt));
    assert_int_equal(vault_open(key, aad, aadlen, nonce, ct, len + 16, pt), 0);
    assert_memory_equal(pt, value, len);

    /* every byte of ciphertext and tag is covered */
    for (size_t i = 0; i < len + 16; i++) {
        ct[i] ^= 0x01;
        assert_int_equal(vault_open(key, aad, aadlen, nonce, ct, len + 16, pt), AB_EDENIED);
        ct[i] ^= 0x01;
    }
    nonce[0] ^= 0x80;
    assert_int_equal(vault_open(key, aad, aadlen, nonce, ct, len + 16, pt), AB_EDENIED);
    nonce[0] ^= 0x80;
    /* wrong key */
    assert_int_equal(vault_open(other, aad, aadlen, nonce, ct, len + 16, pt), AB_EDENIED);
    /* each part of the AAD: namespace, user, name, version */
    aad2len = vault_aad("t-ml-bob", "alice", "db_password", 3, aad2, sizeof(aad2));
    assert_int_equal(vault_open(key, aad2, aad2len, nonce, ct, len + 16, pt), AB_EDENIED);
    aad2len = vault_aad("t-ml-alice", "bob", "db_password", 3, aad2, sizeof(aad2));
    assert_int_equal(vault_open(key, aad2, aad2len, nonce, ct, len + 16, pt), AB_EDENIED);
    aad2len = vault_aad("t-ml-alice", "alice", "db_passwore", 3, aad2, sizeof(aad2));
    assert_int_equal(vault_open(key, aad2, aad2len, nonce, ct, len + 16, pt), AB_EDENIED);
    aad2len = vault_aad("t-ml-alice", "alice", "db_password", 4, aad2, sizeof(aad2));
    assert_int_equal(vault_open(key, aad2, aad2len, nonce, ct, len + 16, pt), AB_EDENIED);
    /* still fine with everything restored */
    assert_int_equal(vault_open(key, aad, aadlen, nonce, ct, len + 16, pt), 0);
    /* truncated below the tag */
    assert_int_equal(vault_open(key, aad, aadlen, nonce, ct, 15, pt), AB_EINVAL);
    vault_keyring_clear(&kr);
}

static void test_aad_is_unambiguous(void **state)
{
    uint8_t a[256], b[256];
    size_t la, lb;

    (void)state;
    la = vault_aad("ab", "c", "n", 1, a, sizeof(a));
    lb = vault_aad("a", "bc", "n", 1, b, sizeof(b));
    assert_true(la != lb || memcmp(a, b, la) != 0);
    la = vault_aad("ns", "", "un", 1, a, sizeof(a));
    lb = vault_aad("ns", "u", "n", 1, b, sizeof(b));
    assert_true(la != lb || memcmp(a, b, la) != 0);
    la = vault_aad("ns", "u", "n", 12, a, sizeof(a));
    lb = vault_aad("ns", "u", "n1", 2, b, sizeof(b));
    assert_true(la != lb || memcmp(a, b, la) != 0);
    la = vault_token_aad("ak_1", "ff", a, sizeof(a));
    lb = vault_token_aad("ak_2", "ff", b, sizeof(b));
    assert_true(la != lb || memcmp(a, b, la) != 0);
}

static void test_hex_seal_open(void **state)
{
    struct vault_keyring kr, kr_other;
    uint8_t aad[128], *pt = NULL;
    char id[VAULT_KEY_ID_MAX], err[256];
    char *ct = NULL, *nonce = NULL;
    size_t aadlen = vault_token_aad("ak_1", "ab", aad, sizeof(aad)), len = 0;

    (void)state;
    assert_int_equal(vault_keyring_init(&kr, SECRET, strlen(SECRET), NULL, 0, err, sizeof(err)), 0);
    assert_int_equal(vault_keyring_init(&kr_other, OTHER, strlen(OTHER), NULL, 0, err, sizeof(err)),
                     0);
    assert_int_equal(
        vault_seal_hex(&kr, VAULT_PURPOSE_TOKENS, 3, aad, aadlen, "hello", 5, &ct, &nonce, id), 0);
    assert_int_equal(strlen(ct), 2 * (5 + 16));
    assert_int_equal(strlen(nonce), 24);
    assert_int_equal(
        vault_open_hex(&kr, VAULT_PURPOSE_TOKENS, id, ct, nonce, aad, aadlen, &pt, &len), 0);
    assert_int_equal(len, 5);
    assert_string_equal((char *)pt, "hello");
    free(pt);
    /* another purpose derives another key */
    assert_int_equal(
        vault_open_hex(&kr, VAULT_PURPOSE_SECRETS, id, ct, nonce, aad, aadlen, &pt, &len),
        AB_EDENIED);
    /* another hub secret does not know the key id */
    assert_int_equal(
        vault_open_hex(&kr_other, VAULT_PURPOSE_TOKENS, id, ct, nonce, aad, aadlen, &pt, &len),
        AB_ENOENT);
    ct[0] = ct[0] == '0' ? '1' : '0';
    assert_int_equal(
        vault_open_hex(&kr, VAULT_PURPOSE_TOKENS, id, ct, nonce, aad, aadlen, &pt, &len),
        AB_EDENIED);
    free(ct);
    free(nonce);
    vault_keyring_clear(&kr);
    vault_keyring_clear(&kr_other);
}

/* --- hub secret ------------------------------------------------------------------------------ */

static void test_hub_secret_load(void **state)
{
    char path[] = "/tmp/agentbox-test-secret-XXXXXX";
    char err[512] = "";
    char *s = NULL;
    size_t n = 0;
    int fd;

    (void)state;
    assert_int_equal(vault_hub_secret_load("hub_secret", NULL, NULL, &s, &n, err, sizeof(err)),
                     AB_EINVAL);
    assert_non_null(strstr(err, "hub_secret is required"));
    assert_non_null(strstr(err, "openssl rand -hex 32"));
    assert_non_null(strstr(err, "AGENTBOX_HUB_SECRET"));
    assert_int_equal(
        vault_hub_secret_load("hub_secret", "too-short", NULL, &s, &n, err, sizeof(err)),
        AB_EINVAL);
    assert_non_null(strstr(err, "at least 32 bytes, got 9"));
    assert_null(strstr(err, "too-short")); /* the value is never echoed */
    assert_int_equal(
        vault_hub_secret_load("hub_secret", SECRET, "/nonexistent", &s, &n, err, sizeof(err)),
        0); /* the value wins over the file */
    assert_int_equal(n, strlen(SECRET));
    assert_string_equal(s, SECRET);
    free(s);

    fd = mkstemp(path);
    assert_true(fd >= 0);
    {
        char content[256];
        int len = snprintf(content, sizeof(content), "%s\n# comment\n", SECRET);
        assert_int_equal(write(fd, content, (size_t)len), len);
    }
    close(fd);
    assert_int_equal(vault_hub_secret_load("hub_secret", "", path, &s, &n, err, sizeof(err)), 0);
    assert_string_equal(s, SECRET); /* first line, newline dropped */
    free(s);
    unlink(path);
    assert_int_equal(vault_hub_secret_load("hub_secret", NULL, path, &s, &n, err, sizeof(err)),
                     AB_EINVAL);
    assert_non_null(strstr(err, path));
}

/* --- input rules ------------------------------------------------------------------------------ */

static void test_name_rules(void **state)
{
    static const struct {
        const char *in, *want;
    } ok[] = {
        {"db_password", "db_password"}, {"sec_db", "db"},
        {"  Token-1 ", "token-1"},      {"SEC_x", "sec_x"},
        {"sec_sec_a", "sec_a"},
    };
    static const struct {
        const char *in, *msg;
    } bad[] = {
        {"", "secret name is required"},
        {"sec_", "secret name is required"},
        {"   ", "secret name is required"},
        {"a b", "may only contain letters, digits, '_' and '-' (character 2"},
        {"a.b", "may only contain"},
        {"x{y}", "must not contain '{' or '}'"},
        {"é", "may only contain"},
    };
    char out[VAULT_NAME_MAX + 1], err[256], long_name[200];

    (void)state;
    for (size_t i = 0; i < AB_ARRAY_LEN(ok); i++) {
        assert_int_equal(vault_name_normalize(ok[i].in, out, err, sizeof(err)), 0);
        assert_string_equal(out, ok[i].want);
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        err[0] = '\0';
        assert_int_equal(vault_name_normalize(bad[i].in, out, err, sizeof(err)), AB_EINVAL);
        if (strstr(err, bad[i].msg) == NULL)
            fail_msg("name '%s': message '%s' lacks '%s'", bad[i].in, err, bad[i].msg);
    }
    memset(long_name, 'a', 128);
    long_name[128] = '\0';
    assert_int_equal(vault_name_normalize(long_name, out, err, sizeof(err)), 0);
    long_name[128] = 'a';
    long_name[129] = '\0';
    assert_int_equal(vault_name_normalize(long_name, out, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "at most 128 characters, got 129"));
}

static void test_value_rules(void **state)
{
    char err[256];

    (void)state;
    assert_int_equal(vault_value_check(0, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "secret value must not be empty");
    assert_int_equal(vault_value_check(1, err, sizeof(err)), 0);
    assert_int_equal(vault_value_check(65536, err, sizeof(err)), 0);
    assert_int_equal(vault_value_check(65537, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "at most 65536 bytes (64 KiB), got 65537"));
}

static void test_metadata_rules(void **state)
{
    char err[256], key[200], val[1100];
    json_t *md;

    (void)state;
    assert_int_equal(vault_metadata_check(NULL, err, sizeof(err)), 0);
    md = json_pack("{s:s}", "a", "b");
    assert_int_equal(vault_metadata_check(md, err, sizeof(err)), 0);
    json_decref(md);

    md = json_pack("[]");
    assert_int_equal(vault_metadata_check(md, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "must be an object of string values"));
    json_decref(md);

    md = json_pack("{s:i}", "n", 1);
    assert_int_equal(vault_metadata_check(md, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "metadata value of 'n' must be a string"));
    json_decref(md);

    md = json_object();
    for (int i = 0; i < 33; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        json_object_set_new(md, key, json_string("v"));
        if (i == 31)
            assert_int_equal(vault_metadata_check(md, err, sizeof(err)), 0); /* 32 is fine */
    }
    assert_int_equal(vault_metadata_check(md, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "at most 32 entries, got 33"));
    json_decref(md);

    memset(key, 'k', 129);
    key[129] = '\0';
    md = json_object();
    json_object_set_new(md, key, json_string("v"));
    assert_int_equal(vault_metadata_check(md, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "longer than 128 bytes"));
    json_decref(md);
    key[128] = '\0';
    md = json_object();
    json_object_set_new(md, key, json_string("v"));
    assert_int_equal(vault_metadata_check(md, err, sizeof(err)), 0); /* 128 is fine */
    json_decref(md);

    memset(val, 'v', 1025);
    val[1025] = '\0';
    md = json_pack("{s:s}", "big", val);
    assert_int_equal(vault_metadata_check(md, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "metadata value of 'big' is longer than 1024 bytes (1025)"));
    json_decref(md);

    /* 8 × (2 + 1024) = 8208 > 8192, each entry within its own limit */
    val[1024] = '\0';
    md = json_object();
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        json_object_set_new(md, key, json_string(val));
    }
    assert_int_equal(vault_metadata_check(md, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "8208 bytes in all"));
    assert_non_null(strstr(err, "8192"));
    json_decref(md);
}

/* --- storage, with a database ------------------------------------------------------------------
 */

static PGconn *db_or_skip(void)
{
    const char *url = getenv("AGENTBOX_TEST_DATABASE_URL");
    PGconn *c;

    if (url == NULL || url[0] == '\0')
        return NULL;
    c = PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("AGENTBOX_TEST_DATABASE_URL: %s", PQerrorMessage(c));
    return c;
}

static int resolve_one(PGconn *c, const struct vault_keyring *kr, const char *ns, const char *user,
                       const char *name, char *out, size_t cap)
{
    struct vault_scope s = {ns, user};
    struct vault_value v[1];
    const char *names[1] = {name};
    char err[512];
    int rc = vault_resolve_conn(c, kr, &s, names, 1, v, err, sizeof(err));

    if (rc != 0)
        return rc;
    if (!v[0].found)
        return AB_ENOENT;
    ab_strlcpy(out, (const char *)v[0].value, cap);
    vault_values_free(v, 1);
    return 0;
}

static void test_db_round_trip_rotate_resolve(void **state)
{
    PGconn *c = db_or_skip();
    struct vault_keyring kr;
    char err[512], ns[64], got[256];
    struct vault_scope s;
    struct vault_write w;
    json_t *out = NULL, *md;
    size_t secrets = 0, tokens = 0;
    const char *secret = SECRET;
    int gen = 0;
    PGresult *r;

    (void)state;
    if (c == NULL) {
        skip();
        return;
    }
    snprintf(ns, sizeof(ns), "t-unit-%d", (int)getpid());
    s.ns = ns;
    s.user = "u";
    /* rotation re-encrypts every row of the database: use its hub secret */
    if (getenv("AGENTBOX_HUB_SECRET") != NULL)
        secret = getenv("AGENTBOX_HUB_SECRET");
    assert_int_equal(vault_keyring_init(&kr, secret, strlen(secret), NULL, 0, err, sizeof(err)), 0);
    md = json_pack("{s:s}", "owner", "unit");
    w = (struct vault_write){s, "tok", "value-one", 9, md, "test"};
    assert_int_equal(vault_create_conn(c, &kr, &w, &out, err, sizeof(err)), 0);
    assert_int_equal(json_integer_value(json_object_get(out, "currentVersion")), 1);
    assert_string_equal(json_string_value(json_object_get(out, "secretID")), "sec_tok");
    assert_null(json_object_get(out, "value"));
    json_decref(out);
    assert_int_equal(vault_create_conn(c, &kr, &w, &out, err, sizeof(err)), AB_EEXIST);
    assert_string_equal(err, "secret \"tok\" already exists; update it instead");

    w = (struct vault_write){s, "tok", "value-two", 9, NULL, "test"};
    assert_int_equal(vault_update_conn(c, &kr, &w, &out, err, sizeof(err)), 0);
    assert_int_equal(json_integer_value(json_object_get(out, "currentVersion")), 2);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(out, "metadata"), "owner")),
        "unit"); /* kept when not sent */
    json_decref(out);
    assert_int_equal(resolve_one(c, &kr, ns, "u", "sec_tok", got, sizeof(got)), 0);
    assert_string_equal(got, "value-two");
    assert_int_equal(resolve_one(c, &kr, ns, "other", "tok", got, sizeof(got)), AB_ENOENT);

    assert_int_equal(vault_rotate_conn(c, &kr, "test", &gen, &secrets, &tokens, err, sizeof(err)),
                     0);
    assert_true(gen >= 2);
    assert_true(secrets >= 1);
    assert_int_equal(resolve_one(c, &kr, ns, "u", "tok", got, sizeof(got)), 0);
    assert_string_equal(got, "value-two");
    assert_int_equal(vault_get_conn(c, &s, "tok", &out, err, sizeof(err)), 0);
    assert_int_equal(json_integer_value(json_object_get(out, "currentVersion")), 2);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(out, "metadata"), "owner")), "unit");
    json_decref(out);

    /* moving the ciphertext to another version breaks the AAD */
    {
        const char *vals[1] = {ns};
        r = PQexecParams(c, "UPDATE vault_secrets SET version = version + 1 WHERE namespace = $1",
                         1, NULL, vals, NULL, NULL, 0);
        assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
        PQclear(r);
    }
    assert_int_equal(resolve_one(c, &kr, ns, "u", "tok", got, sizeof(got)), AB_EDENIED);
    assert_int_equal(vault_delete_conn(c, &s, "tok", "test", err, sizeof(err)), 0);
    assert_int_equal(vault_delete_conn(c, &s, "tok", "test", err, sizeof(err)), AB_ENOENT);
    assert_string_equal(err, "secret \"tok\" not found");
    json_decref(md);
    vault_keyring_clear(&kr);
    PQfinish(c);
}

/* Values written elsewhere (the hub API) resolve with the hub's secret. */
static void test_db_resolve_expected(void **state)
{
    const char *expect = getenv("AGENTBOX_TEST_RESOLVE_EXPECT");
    const char *secret = getenv("AGENTBOX_HUB_SECRET");
    PGconn *c = db_or_skip();
    struct vault_keyring kr;
    char err[512], got[1024], *copy, *line, *save = NULL;
    int checked = 0;

    (void)state;
    if (c == NULL || expect == NULL || secret == NULL) {
        if (c != NULL)
            PQfinish(c);
        skip();
        return;
    }
    assert_int_equal(vault_keyring_init(&kr, secret, strlen(secret), NULL, 0, err, sizeof(err)), 0);
    copy = strdup(expect);
    for (line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *f[4], *p = line;
        for (int i = 0; i < 4; i++) {
            f[i] = strsep(&p, "\t");
            assert_non_null(f[i]);
        }
        assert_int_equal(resolve_one(c, &kr, f[0], f[1], f[2], got, sizeof(got)), 0);
        if (strcmp(got, f[3]) != 0)
            fail_msg("secret %s/%s/%s resolved to another value", f[0], f[1], f[2]);
        checked++;
    }
    assert_true(checked > 0);
    printf("resolved %d expected secret(s)\n", checked);
    free(copy);
    vault_keyring_clear(&kr);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keyring),
        cmocka_unit_test(test_seal_round_trip_and_tamper),
        cmocka_unit_test(test_aad_is_unambiguous),
        cmocka_unit_test(test_hex_seal_open),
        cmocka_unit_test(test_hub_secret_load),
        cmocka_unit_test(test_name_rules),
        cmocka_unit_test(test_value_rules),
        cmocka_unit_test(test_metadata_rules),
        cmocka_unit_test(test_db_round_trip_rotate_resolve),
        cmocka_unit_test(test_db_resolve_expected),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
