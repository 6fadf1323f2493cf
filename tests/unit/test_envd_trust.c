/* agent/envd/trust.c under a temporary root: the CA lands in its own file and
 * in the system bundle between markers, a second install replaces the first
 * (the bundle's other certificates untouched), and anything that is not only
 * certificates (a private key, text outside the blocks, NUL) is refused
 * without touching a file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/envd/trust.h"
#include "agentbox/common.h"

#define CERT_A "-----BEGIN CERTIFICATE-----\nQUFBQQ==\n-----END CERTIFICATE-----\n"
#define CERT_B "-----BEGIN CERTIFICATE-----\nQkJCQg==\n-----END CERTIFICATE-----\n"
#define SYSTEM "-----BEGIN CERTIFICATE-----\nU1lTVEVN\n-----END CERTIFICATE-----\n"

static char root[64];

static char *slurp(const char *rel)
{
    char p[256];
    snprintf(p, sizeof(p), "%s%s", root, rel);
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_install_and_replace(void **state)
{
    (void)state;
    char err[256], p[256];
    struct envd_trust_paths w;
    snprintf(root, sizeof(root), "/tmp/envd-trust-%d", (int)getpid());
    snprintf(p, sizeof(p), "mkdir -p %s/etc/ssl/certs", root);
    assert_int_equal(system(p), 0);
    snprintf(p, sizeof(p), "%s%s", root, ENVD_TRUST_BUNDLE);
    FILE *f = fopen(p, "w");
    fputs(SYSTEM, f);
    fclose(f);

    assert_int_equal(envd_trust_install(root, CERT_A, strlen(CERT_A), &w, err, sizeof(err)), 0);
    assert_string_equal(slurp(ENVD_TRUST_CA_FILE), CERT_A);
    char *b = slurp(ENVD_TRUST_BUNDLE);
    assert_non_null(strstr(b, SYSTEM));
    assert_non_null(strstr(b, CERT_A));

    assert_int_equal(envd_trust_install(root, CERT_B, strlen(CERT_B), &w, err, sizeof(err)), 0);
    b = slurp(ENVD_TRUST_BUNDLE);
    assert_int_equal(count(b, "QUFBQQ=="), 0); /* the earlier CA is gone */
    assert_int_equal(count(b, "QkJCQg=="), 1);
    assert_int_equal(count(b, "U1lTVEVN"), 1);
    assert_string_equal(slurp(ENVD_TRUST_CA_FILE), CERT_B);
    struct stat st;
    snprintf(p, sizeof(p), "%s%s", root, ENVD_TRUST_CA_FILE);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);

    /* Refused, and nothing changes. */
    const char *bad[] = {
        "-----BEGIN PRIVATE KEY-----\nQUFB\n-----END PRIVATE KEY-----\n",
        CERT_A "-----BEGIN EC PRIVATE KEY-----\nQUFB\n-----END EC PRIVATE KEY-----\n",
        "junk\n" CERT_A,
        "-----BEGIN CERTIFICATE-----\nQUFB\n",
        "",
        "-----BEGIN CERTIFICATE-----\nQU FB\n-----END CERTIFICATE-----\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        assert_int_equal(envd_trust_install(root, bad[i], strlen(bad[i]), &w, err, sizeof(err)),
                         AB_EINVAL);
    assert_int_equal(
        envd_trust_install(root, "-----BEGIN CERTIFICATE-----\n\0", 29, &w, err, sizeof(err)),
        AB_EINVAL);
    assert_string_equal(slurp(ENVD_TRUST_CA_FILE), CERT_B);

    json_t *vars = json_pack("{s:s}", "NODE_EXTRA_CA_CERTS", "/mine.pem");
    envd_trust_env(vars, &w);
    assert_string_equal(json_string_value(json_object_get(vars, "NODE_EXTRA_CA_CERTS")),
                        "/mine.pem");
    assert_string_equal(json_string_value(json_object_get(vars, "REQUESTS_CA_BUNDLE")),
                        ENVD_TRUST_BUNDLE);
    json_decref(vars);
    snprintf(p, sizeof(p), "rm -rf %s", root);
    assert_int_equal(system(p), 0);
}

static void test_no_bundle_yet(void **state)
{
    (void)state;
    char err[256], p[256];
    struct envd_trust_paths w;
    snprintf(root, sizeof(root), "/tmp/envd-trust-empty-%d", (int)getpid());
    assert_int_equal(envd_trust_install(root, CERT_A, strlen(CERT_A) - 1, &w, err, sizeof(err)), 0);
    assert_string_equal(slurp(ENVD_TRUST_CA_FILE), CERT_A);
    assert_non_null(strstr(slurp(ENVD_TRUST_BUNDLE), CERT_A));
    snprintf(p, sizeof(p), "rm -rf %s", root);
    assert_int_equal(system(p), 0);
}

/* A read-only /etc (the local runtime binds the host's): the CA and a bundle
 * with it go under /tmp/.agentbox-egress, and the environment points there. */
static void test_read_only_etc(void **state)
{
    (void)state;
    char err[256], p[512];
    struct envd_trust_paths w;
    snprintf(root, sizeof(root), "/tmp/envd-trust-ro-%d", (int)getpid());
    snprintf(p, sizeof(p),
             "mkdir -p %s/etc/ssl/certs && printf '%%s' '%s' > %s%s && chmod 555 %s/etc/ssl/certs",
             root, SYSTEM, root, ENVD_TRUST_BUNDLE, root);
    assert_int_equal(system(p), 0);
    if (access(root, W_OK) == 0 && geteuid() == 0) {
        /* root ignores modes: make the directory truly read-only with a bind */
        snprintf(p, sizeof(p),
                 "mount --bind -o ro %s/etc/ssl/certs %s/etc/ssl/certs 2>/dev/null || "
                 "(mount --bind %s/etc/ssl/certs %s/etc/ssl/certs && mount -o remount,bind,ro "
                 "%s/etc/ssl/certs)",
                 root, root, root, root, root);
        assert_int_equal(system(p), 0);
    }
    assert_int_equal(envd_trust_install(root, CERT_A, strlen(CERT_A), &w, err, sizeof(err)), 0);
    assert_true(w.fallback);
    assert_string_equal(slurp(ENVD_TRUST_FALLBACK_CA), CERT_A);
    char *b = slurp(ENVD_TRUST_FALLBACK_BUNDLE);
    assert_non_null(strstr(b, SYSTEM));
    assert_non_null(strstr(b, CERT_A));
    assert_null(strstr(slurp(ENVD_TRUST_BUNDLE), "QUFBQQ=="));
    json_t *vars = json_object();
    envd_trust_env(vars, &w);
    assert_string_equal(json_string_value(json_object_get(vars, "SSL_CERT_FILE")),
                        ENVD_TRUST_FALLBACK_BUNDLE);
    assert_string_equal(json_string_value(json_object_get(vars, "NODE_EXTRA_CA_CERTS")),
                        ENVD_TRUST_FALLBACK_CA);
    json_decref(vars);
    if (geteuid() == 0) {
        snprintf(p, sizeof(p), "umount %s/etc/ssl/certs", root);
        assert_int_equal(system(p), 0);
    }
    snprintf(p, sizeof(p), "rm -rf %s", root);
    assert_int_equal(system(p), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_install_and_replace),
        cmocka_unit_test(test_no_bundle_yet),
        cmocka_unit_test(test_read_only_etc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
