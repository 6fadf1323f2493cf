/* templates_validate (hub/templates.c): a table of accepted and refused
 * SandboxTemplate objects, each refusal naming the field, and the object
 * the hub stores (normalised, with the sync label). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "hub/templates.h"

static const char *const OK[] = {
    "{\"metadata\":{\"name\":\"py\"},\"spec\":{}}",
    "{\"apiVersion\":\"agents.navix.sh/v1alpha1\",\"kind\":\"SandboxTemplate\","
    "\"metadata\":{\"name\":\"e2b.envd-2\",\"labels\":{\"a\":\"b\"},\"annotations\":"
    "{\"agentbox.navix.sh/docs\":\"# doc\"}},\"spec\":{\"idleImage\":\"i:1\",\"version\":\"0.1\","
    "\"description\":\"d\",\"runtimes\":[{\"name\":\"envd\",\"port\":49983,\"protocol\":\"TCP\"}],"
    "\"template\":{\"spec\":{\"containers\":[{\"name\":\"s\",\"image\":\"x\"}]}},"
    "\"visibility\":{\"rules\":[{\"team\":\"t\",\"users\":[\"u\"]}]}}}",
    /* status and server metadata are dropped, not refused */
    "{\"metadata\":{\"name\":\"a\",\"uid\":\"x\",\"resourceVersion\":\"3\"},\"spec\":{},"
    "\"status\":{\"conditions\":[]}}",
};

static const struct {
    const char *json;
    const char *path;
    const char *field; /* the error must name it */
} BAD[] = {
    {"[]", NULL, "crdJson"},
    {"{\"spec\":{}}", NULL, "metadata.name"},
    {"{\"metadata\":{\"name\":\"Py\"},\"spec\":{}}", NULL, "metadata.name"},
    {"{\"metadata\":{\"name\":\"-py\"},\"spec\":{}}", NULL, "metadata.name"},
    {"{\"metadata\":{\"name\":\"py\"},\"spec\":{}}", "other", "path names template 'other'"},
    {"{\"metadata\":{\"name\":\"py\",\"namespace\":\"default\"},\"spec\":{}}", NULL,
     "metadata.namespace"},
    {"{\"kind\":\"SandboxPool\",\"metadata\":{\"name\":\"py\"},\"spec\":{}}", NULL, "'kind'"},
    {"{\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"py\"},\"spec\":{}}", NULL, "'apiVersion'"},
    {"{\"metadata\":{\"name\":\"py\"}}", NULL, "'spec' is required"},
    {"{\"metadata\":{\"name\":\"py\"},\"spec\":{\"replicas\":1}}", NULL, "spec.replicas"},
    {"{\"metadata\":{\"name\":\"py\"},\"spec\":{\"idleImage\":3}}", NULL, "spec.idleImage"},
    {"{\"metadata\":{\"name\":\"py\"},\"spec\":{\"runtimes\":[{\"port\":1}]}}", NULL,
     "spec.runtimes[0].name"},
    {"{\"metadata\":{\"name\":\"py\"},\"spec\":{\"runtimes\":[{\"name\":\"e\",\"port\":0}]}}", NULL,
     "spec.runtimes[0].port"},
    {"{\"metadata\":{\"name\":\"py\"},\"spec\":{\"template\":[]}}", NULL, "spec.template"},
    {"{\"metadata\":{\"name\":\"py\"},\"spec\":{\"visibility\":{\"rules\":[{\"users\":[1]}]}}}",
     NULL, "spec.visibility.rules[0].users[0]"},
    {"{\"metadata\":{\"name\":\"py\",\"labels\":{\"a\":1}},\"spec\":{}}", NULL,
     "metadata.labels.a"},
};

static void test_accepted(void **state)
{
    (void)state;
    for (size_t i = 0; i < AB_ARRAY_LEN(OK); i++) {
        json_t *in = json_loads(OK[i], 0, NULL), *out = NULL;
        char err[512] = "";
        assert_non_null(in);
        if (templates_validate(in, NULL, &out, err, sizeof(err)) != 0)
            fail_msg("refused %s: %s", OK[i], err);
        const json_t *md = json_object_get(out, "metadata");
        assert_string_equal(json_string_value(json_object_get(out, "kind")), "SandboxTemplate");
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(md, "labels"), TEMPLATES_SYNC_LABEL)),
            "global");
        assert_null(json_object_get(out, "status"));
        assert_null(json_object_get(md, "uid"));
        assert_null(json_object_get(md, "resourceVersion"));
        json_decref(in);
        json_decref(out);
    }
}

static void test_refused(void **state)
{
    (void)state;
    for (size_t i = 0; i < AB_ARRAY_LEN(BAD); i++) {
        json_t *in = json_loads(BAD[i].json, JSON_DECODE_ANY, NULL), *out = NULL;
        char err[512] = "";
        assert_non_null(in);
        if (templates_validate(in, BAD[i].path, &out, err, sizeof(err)) != AB_EINVAL)
            fail_msg("accepted %s", BAD[i].json);
        assert_null(out);
        if (!strstr(err, BAD[i].field))
            fail_msg("%s: the error '%s' does not name '%s'", BAD[i].json, err, BAD[i].field);
        json_decref(in);
    }
}

static void test_size_limit(void **state)
{
    (void)state;
    char *big = malloc(TEMPLATES_OBJECT_MAX + 1);
    memset(big, 'x', TEMPLATES_OBJECT_MAX);
    big[TEMPLATES_OBJECT_MAX] = '\0';
    json_t *in = json_pack("{s:{s:s},s:{s:s}}", "metadata", "name", "big", "spec", "description",
                           big),
           *out = NULL;
    char err[512] = "";
    assert_int_equal(templates_validate(in, NULL, &out, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "65536-byte limit"));
    json_decref(in);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepted),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_size_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
