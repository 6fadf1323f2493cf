/* The kube runtime's manifest seam, its pure parts (agent/runtime/kube/objects.c):
 * the ips-<env> dockerconfigjson Secret body and the member pools'
 * imagePullSecrets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agent/runtime/kube/objects.h"
#include "agent/runtime/kube/reconcile.h"

#include "agentbox/crypto.h"

static json_t *decode_config(const json_t *secret)
{
    const char *b64 =
        json_string_value(json_object_get(json_object_get(secret, "data"), ".dockerconfigjson"));
    size_t n = strlen(b64), len = 0;
    uint8_t *raw = malloc(n);
    assert_int_equal(crypto_base64_decode(b64, n, raw, n, &len), 0);
    json_t *j = json_loadb((const char *)raw, len, 0, NULL);
    free(raw);
    return j;
}

static void test_secret_body(void **state)
{
    (void)state;
    json_t *ps = json_pack("{s:[{s:s,s:s,s:s},{s:s,s:s,s:s}]}", "registries", "registry",
                           "r.example", "username", "bot", "password", "pw", "registry",
                           "other.example:5000", "username", "u2", "password", "p:2");
    char err[256] = "";
    json_t *s = kobj_secret_body("default", "priv", "uid-1", ps, err, sizeof(err));
    assert_non_null(s);
    const json_t *md = json_object_get(s, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "name")), "ips-priv");
    assert_string_equal(json_string_value(json_object_get(md, "namespace")), "default");
    assert_string_equal(json_string_value(json_object_get(s, "type")),
                        "kubernetes.io/dockerconfigjson");
    const json_t *own = json_array_get(json_object_get(md, "ownerReferences"), 0);
    assert_string_equal(json_string_value(json_object_get(own, "kind")), "SandboxEnv");
    assert_string_equal(json_string_value(json_object_get(own, "uid")), "uid-1");
    assert_true(json_is_true(json_object_get(own, "controller")));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(md, "labels"), KUBE_L_ENV)), "priv");
    json_t *cfg = decode_config(s);
    assert_non_null(cfg);
    const json_t *a = json_object_get(json_object_get(cfg, "auths"), "other.example:5000");
    assert_string_equal(json_string_value(json_object_get(a, "username")), "u2");
    /* auth = base64("user:password"), the password's own ':' kept */
    assert_string_equal(json_string_value(json_object_get(a, "auth")), "dTI6cDoy");
    json_decref(cfg);
    json_decref(s);
    json_decref(ps);
}

static void test_secret_refused(void **state)
{
    (void)state;
    const char *bad[] = {
        "{}", "{\"registries\":[]}", "{\"registries\":[{\"registry\":\"r\"}]}",
        "{\"registries\":[{\"registry\":\"\",\"username\":\"u\",\"password\":\"p\"}]}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *ps = json_loads(bad[i], 0, NULL);
        char err[256] = "";
        assert_null(kobj_secret_body("default", "e", "u", ps, err, sizeof(err)));
        if (!strstr(err, "imagePullSecret"))
            fail_msg("%s: '%s' does not name the field", bad[i], err);
        json_decref(ps);
    }
}

static void test_member_pull_secret(void **state)
{
    (void)state;
    json_t *env = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "name", "priv", "annotations",
                            KOBJ_A_PULL_SECRET, "ips-priv");
    json_t *pool = json_pack("{s:{s:{s:{s:[{s:s}]}}}}", "spec", "template", "spec", "containers",
                             "name", "sandbox");
    kobj_member_pull_secret(env, pool);
    kobj_member_pull_secret(env, pool); /* once only */
    const json_t *list = json_object_get(
        json_object_get(json_object_get(json_object_get(pool, "spec"), "template"), "spec"),
        "imagePullSecrets");
    assert_int_equal(json_array_size(list), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "name")),
                        "ips-priv");
    /* an Env without one leaves the pool alone */
    json_t *plain = json_pack("{s:{s:s}}", "metadata", "name", "plain");
    json_t *p2 = json_pack("{s:{s:{s:{}}}}", "spec", "template", "spec");
    kobj_member_pull_secret(plain, p2);
    assert_null(json_object_get(
        json_object_get(json_object_get(json_object_get(p2, "spec"), "template"), "spec"),
        "imagePullSecrets"));
    json_decref(env);
    json_decref(pool);
    json_decref(plain);
    json_decref(p2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secret_body),
        cmocka_unit_test(test_secret_refused),
        cmocka_unit_test(test_member_pull_secret),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
