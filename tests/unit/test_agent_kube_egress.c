/* The egress sidecar in kube Pods (agent/runtime/kube/egress_pod.c): what an
 * Env with the gateway adds to its pools' Pods, that the sandbox container
 * loses the capabilities that would let it leave the redirect, per-Pod
 * tokens, and which claims are refused with and without the sidecar. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agent/runtime/kube/egress_pod.h"
#include "agentbox/common.h"

static json_t *spec(const char *sc)
{
    char buf[512];
    snprintf(buf, sizeof(buf),
             "{\"idleImage\":\"idle:1\",\"template\":{\"spec\":{\"containers\":[{\"name\":"
             "\"sandbox\",\"image\":\"run:1\"%s%s}]}}}",
             sc ? ",\"securityContext\":" : "", sc ? sc : "");
    json_t *j = json_loads(buf, 0, NULL);
    assert_non_null(j);
    return j;
}

static json_t *init_named(json_t *s, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(
        json_object_get(json_object_get(json_object_get(s, "template"), "spec"), "initContainers"),
        i, c) if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0) return c;
    return NULL;
}

static void inject_adds_sidecar_and_confines_sandbox(void **state)
{
    (void)state;
    char err[256];
    json_t *s = spec("{\"capabilities\":{\"add\":[\"NET_ADMIN\",\"SYS_PTRACE\"]}}");
    const struct kube_egress_config c = {.image = "egress:1", .resolver = "10.0.0.10"};
    assert_int_equal(kube_egress_inject(s, &c, err, sizeof(err)), 0);
    assert_true(kube_egress_spec_has(json_object_get(json_object_get(s, "template"), "spec")));
    json_t *init = init_named(s, KUBE_EGRESS_INIT), *side = init_named(s, KUBE_EGRESS_SIDECAR);
    assert_non_null(init);
    assert_non_null(side);
    assert_string_equal(json_string_value(json_object_get(side, "restartPolicy")), "Always");
    assert_string_equal(json_string_value(json_object_get(side, "image")), "egress:1");
    /* only the init container has NET_ADMIN; the sidecar NET_RAW only */
    char *ij = json_dumps(json_object_get(init, "securityContext"), JSON_COMPACT);
    char *sj = json_dumps(json_object_get(side, "securityContext"), JSON_COMPACT);
    assert_non_null(strstr(ij, "\"add\":[\"NET_ADMIN\"]"));
    assert_non_null(strstr(sj, "\"add\":[\"NET_RAW\"]"));
    assert_non_null(strstr(sj, "\"drop\":[\"ALL\"]"));
    free(ij);
    free(sj);
    json_t *c0 = json_array_get(
        json_object_get(json_object_get(json_object_get(s, "template"), "spec"), "containers"), 0);
    char *cj = json_dumps(json_object_get(c0, "securityContext"), JSON_COMPACT);
    assert_null(strstr(cj, "NET_ADMIN\",\"SYS")); /* the add is gone ... */
    assert_non_null(strstr(cj, "\"add\":[\"SYS_PTRACE\"]"));
    assert_non_null(strstr(cj, "\"drop\":[\"NET_ADMIN\",\"NET_RAW\"]")); /* ... and dropped */
    free(cj);
    /* idempotent: a second pass adds nothing */
    assert_int_equal(kube_egress_inject(s, &c, err, sizeof(err)), 0);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(json_object_get(s, "template"), "spec"),
                                        "initContainers")),
        2);
    json_decref(s);
}

static void inject_refuses_privileged_and_follows_idle_image(void **state)
{
    (void)state;
    char err[256];
    json_t *s = spec("{\"privileged\":true}");
    assert_int_equal(kube_egress_inject(s, NULL, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "privileged"));
    json_decref(s);
    s = spec(NULL);
    assert_int_equal(kube_egress_inject(s, NULL, err, sizeof(err)), 0);
    assert_string_equal(
        json_string_value(json_object_get(init_named(s, KUBE_EGRESS_SIDECAR), "image")), "idle:1");
    json_decref(s);
}

static void tokens_per_pod(void **state)
{
    (void)state;
    char err[256], t1[KUBE_EGRESS_TOKEN_MAX + 1], t2[KUBE_EGRESS_TOKEN_MAX + 1];
    json_t *s = spec(NULL);
    assert_int_equal(kube_egress_inject(s, NULL, err, sizeof(err)), 0);
    json_t *p1 =
        json_pack("{s:O}", "spec", json_object_get(json_object_get(s, "template"), "spec"));
    json_t *p2 = json_deep_copy(p1);
    assert_int_equal(kube_egress_token_of(p1, t1, sizeof(t1)), AB_ENOENT);
    assert_int_equal(kube_egress_pod_token(p1), 0);
    assert_int_equal(kube_egress_pod_token(p2), 0);
    assert_int_equal(kube_egress_token_of(p1, t1, sizeof(t1)), 0);
    assert_int_equal(kube_egress_token_of(p2, t2, sizeof(t2)), 0);
    assert_true(strlen(t1) >= 32);
    assert_string_not_equal(t1, t2);
    json_t *bare = json_pack("{s:{}}", "spec");
    assert_int_equal(kube_egress_pod_token(bare), AB_ENOENT);
    json_decref(bare);
    json_decref(p1);
    json_decref(p2);
    json_decref(s);
}

static void claims_without_and_with_sidecar(void **state)
{
    (void)state;
    char err[512];
    json_t *lists = json_loads("{\"allowOut\":[\"example.com\"]}", 0, NULL);
    json_t *rules = json_loads("{\"rules\":{\"a.com\":[{\"transform\":{\"headers\":{\"x\":\"${"
                               "e2b.secrets.k}\"}}}]}}",
                               0, NULL);
    json_t *none = json_object();
    assert_int_equal(kube_egress_claim_check(false, none, true, err, sizeof(err)), 0);
    assert_int_equal(kube_egress_claim_check(false, NULL, true, err, sizeof(err)), 0);
    assert_int_equal(kube_egress_claim_check(false, lists, true, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "overrides.gateway.enabled"));
    assert_int_equal(kube_egress_claim_check(false, NULL, false, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(kube_egress_claim_check(true, lists, true, err, sizeof(err)), 0);
    assert_int_equal(kube_egress_claim_check(true, NULL, false, err, sizeof(err)), 0);
    assert_int_equal(kube_egress_claim_check(true, rules, true, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "network.rules"));
    json_decref(lists);
    json_decref(rules);
    json_decref(none);
}

static void env_switch(void **state)
{
    (void)state;
    json_t *on = json_loads("{\"spec\":{\"overrides\":{\"gateway\":{\"enabled\":true}}}}", 0, NULL);
    json_t *off =
        json_loads("{\"spec\":{\"overrides\":{\"gateway\":{\"enabled\":false}}}}", 0, NULL);
    assert_true(kube_egress_env_enabled(on));
    assert_false(kube_egress_env_enabled(off));
    assert_false(kube_egress_env_enabled(NULL));
    json_decref(on);
    json_decref(off);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(inject_adds_sidecar_and_confines_sandbox),
        cmocka_unit_test(inject_refuses_privileged_and_follows_idle_image),
        cmocka_unit_test(tokens_per_pod),
        cmocka_unit_test(claims_without_and_with_sidecar),
        cmocka_unit_test(env_switch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
