/* The native management API's whole-object rules (reference §4.4, put.h)
 * on JSON, and the local runtime's overlay (mf_write.c): what a write makes
 * of the object in force, and which of a hand edit and an API write wins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/auth.h"
#include "agent/native/native.h"
#include "agent/native/put.h"
#include "agent/runtime/local/manifest.h"
#include "agentbox/common.h"

static const char ENV_JSON[] =
    "{\"apiVersion\":\"agents.navix.sh/v1alpha1\",\"kind\":\"SandboxEnv\","
    "\"metadata\":{\"name\":\"demo\",\"namespace\":\"default\",\"labels\":{\"team\":\"ml\"}},"
    "\"spec\":{\"templateRef\":{\"name\":\"envd\"},"
    "\"overrides\":{\"defaultIdleTimeout\":\"5m\",\"image\":\"x:1\"},"
    "\"autoscaling\":{\"groups\":[{\"name\":\"1c0gi\",\"enabled\":true,\"maxReplicas\":4}]},"
    "\"clusters\":[{\"clusterID\":\"alpha\",\"members\":["
    "{\"name\":\"demo-1c0gi\",\"config\":{\"inlineResources\":{\"requests\":{\"cpu\":\"1\"}},"
    "\"minReplicas\":1},\"spec\":{\"replicas\":2}},"
    "{\"name\":\"demo-2c0gi\",\"config\":{\"inlineResources\":{\"requests\":{\"cpu\":\"2\"}}},"
    "\"spec\":{\"replicas\":1}}]}]}}";

static json_t *env(void)
{
    json_t *e = json_loads(ENV_JSON, 0, NULL);
    assert_non_null(e);
    return e;
}

/* Test values, freed together after each test (borrowed by the caller). */
static json_t *temps;

static json_t *js(const char *s)
{
    json_t *v = json_loads(s, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    json_array_append_new(temps, v);
    return v;
}

static int setup(void **state)
{
    (void)state;
    temps = json_array();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(temps);
    temps = NULL;
    return 0;
}

/* The editable with one field replaced (NULL: removed). */
static json_t *editable_with(const json_t *e, const char *key, json_t *v)
{
    json_t *ed = native_env_editable(e, false);
    if (v)
        json_object_set(ed, key, v);
    else
        json_object_del(ed, key);
    return ed;
}

static void test_editable_round_trip_changes_nothing(void **state)
{
    json_t *e = env(), *ed = native_env_editable(e, false), *out = NULL;
    struct native_secret sec;
    char err[NATIVE_ERR_MAX];

    (void)state;
    assert_string_equal(json_string_value(json_object_get(ed, "mode")), "WarmPool");
    assert_int_equal(native_env_put(e, false, ed, &out, &sec, err, sizeof(err)), 0);
    assert_true(json_equal(json_object_get(out, "spec"), json_object_get(e, "spec")));
    assert_int_equal(sec.op, RT_SECRET_DELETE);
    json_decref(out);
    json_decref(ed);
    json_decref(e);
}

static void test_overrides_replaced_wholesale(void **state)
{
    json_t *e = env(), *out = NULL, *ed;
    struct native_secret sec;
    char err[NATIVE_ERR_MAX];

    (void)state;
    /* one field sent: the other (image) is gone, not merged */
    ed = editable_with(e, "overrides", js("{\"defaultIdleTimeout\":\"9m\"}"));
    assert_int_equal(native_env_put(e, false, ed, &out, &sec, err, sizeof(err)), 0);
    assert_true(json_equal(json_object_get(json_object_get(out, "spec"), "overrides"),
                           js("{\"defaultIdleTimeout\":\"9m\"}")));
    json_decref(out);
    json_decref(ed);
    /* {} clears every override */
    ed = editable_with(e, "overrides", js("{}"));
    assert_int_equal(native_env_put(e, false, ed, &out, &sec, err, sizeof(err)), 0);
    assert_null(json_object_get(json_object_get(out, "spec"), "overrides"));
    /* members and groups are untouched by an env PUT */
    assert_true(json_equal(json_object_get(json_object_get(out, "spec"), "clusters"),
                           json_object_get(json_object_get(e, "spec"), "clusters")));
    json_decref(out);
    json_decref(ed);
    json_decref(e);
}

static void test_immutable_fields_name_the_value_in_force(void **state)
{
    json_t *e = env(), *out = NULL, *ed;
    struct native_secret sec;
    char err[NATIVE_ERR_MAX];

    (void)state;
    ed = editable_with(e, "templateRef", js("{\"name\":\"other\"}"));
    assert_int_equal(native_env_put(e, false, ed, &out, &sec, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "field 'templateRef' is immutable"));
    assert_non_null(strstr(err, "{\"name\":\"envd\"}"));
    json_decref(ed);
    ed = editable_with(e, "labels", NULL); /* omitted counts as changed */
    assert_int_equal(native_env_put(e, false, ed, &out, &sec, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "field 'labels' is immutable"));
    assert_non_null(strstr(err, "{\"team\":\"ml\"}"));
    assert_non_null(strstr(err, "omitted"));
    json_decref(ed);
    ed = editable_with(e, "mode", js("\"OnDemandJob\""));
    assert_int_equal(native_env_put(e, false, ed, &out, &sec, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "\"WarmPool\""));
    json_decref(ed);
    ed = editable_with(e, "clusters", js("[]")); /* additional properties rejected */
    assert_int_equal(native_env_put(e, false, ed, &out, &sec, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "unknown field 'clusters'"));
    json_decref(ed);
    json_decref(e);
}

static void test_pull_secret_keep_signal(void **state)
{
    json_t *e = env(), *out = NULL, *ed, *ov;
    struct native_secret sec;
    char err[NATIVE_ERR_MAX];

    (void)state;
    /* GET shows the flag, never the secret */
    ed = native_env_editable(e, true);
    ov = json_object_get(ed, "overrides");
    assert_true(json_is_true(json_object_get(ov, "imagePullSecretConfigured")));
    /* echoing the flag keeps it, and it is not stored in the manifest */
    assert_int_equal(native_env_put(e, true, ed, &out, &sec, err, sizeof(err)), 0);
    assert_int_equal(sec.op, RT_SECRET_KEEP);
    assert_null(json_object_get(json_object_get(json_object_get(out, "spec"), "overrides"),
                                "imagePullSecretConfigured"));
    json_decref(out);
    /* neither the flag nor a secret: deleted */
    json_object_del(ov, "imagePullSecretConfigured");
    assert_int_equal(native_env_put(e, true, ed, &out, &sec, err, sizeof(err)), 0);
    assert_int_equal(sec.op, RT_SECRET_DELETE);
    json_decref(out);
    /* a present secret replaces, and never lands in the manifest */
    json_object_set(ov, "imagePullSecret",
                    js("{\"registries\":[{\"registry\":\"r.io\",\"username\":\"u\","
                       "\"password\":\"hunter2\"}]}"));
    assert_int_equal(native_env_put(e, true, ed, &out, &sec, err, sizeof(err)), 0);
    assert_int_equal(sec.op, RT_SECRET_SET);
    assert_string_equal(
        json_string_value(json_object_get(
            json_array_get(json_object_get(sec.value, "registries"), 0), "password")),
        "hunter2");
    char *dump = json_dumps(out, 0);
    assert_null(strstr(dump, "hunter2"));
    free(dump);
    json_decref(sec.value);
    json_decref(out);
    /* a malformed secret names the field */
    json_object_set(ov, "imagePullSecret", js("{\"registries\":[{\"registry\":\"r.io\"}]}"));
    assert_int_equal(native_env_put(e, true, ed, &out, &sec, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "registries[0].username is required"));
    json_decref(ed);
    json_decref(e);
}

static void test_pool_put_rules(void **state)
{
    json_t *e = env(), *out = NULL, *m;
    char err[NATIVE_ERR_MAX];

    (void)state;
    /* replicas belongs to the autoscaler when the group is enabled */
    assert_int_equal(
        native_pool_put(e, "alpha", "demo-1c0gi", js("{\"replicas\":3}"), &out, err, sizeof(err)),
        AB_EINVAL);
    assert_non_null(strstr(err, "belongs to the autoscaler"));
    assert_non_null(strstr(err, "'1c0gi'"));
    /* min/max accepted there; omitted ones removed (desired state) */
    assert_int_equal(native_pool_put(e, "alpha", "demo-1c0gi", js("{\"maxReplicas\":5}"), &out, err,
                                     sizeof(err)),
                     0);
    m = native_env_member(out, "alpha", "demo-1c0gi");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(m, "config"), "maxReplicas")), 5);
    assert_null(json_object_get(json_object_get(m, "config"), "minReplicas"));
    json_decref(out);
    /* scale a pool whose group is not autoscaled */
    assert_int_equal(
        native_pool_put(e, "alpha", "demo-2c0gi", js("{\"replicas\":4}"), &out, err, sizeof(err)),
        0);
    m = native_env_member(out, "alpha", "demo-2c0gi");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(m, "spec"), "replicas")),
                     4);
    json_decref(out);
    /* sizing is immutable: the value in force is named */
    assert_int_equal(native_pool_put(e, "alpha", "demo-2c0gi",
                                     js("{\"replicas\":1,\"inlineResources\":{\"requests\":{"
                                        "\"cpu\":\"4\"}}}"),
                                     &out, err, sizeof(err)),
                     AB_EINVAL);
    assert_non_null(strstr(err, "field 'inlineResources' is immutable"));
    assert_non_null(strstr(err, "\"cpu\":\"2\""));
    assert_int_equal(
        native_pool_put(e, "alpha", "demo-2c0gi", js("{\"image\":\"x\"}"), &out, err, sizeof(err)),
        AB_EINVAL);
    assert_non_null(strstr(err, "unknown field 'image'"));
    assert_int_equal(native_pool_put(e, "alpha", "nope", js("{}"), &out, err, sizeof(err)),
                     AB_ENOENT);
    json_decref(e);
}

static void test_groups_desired_state_and_gc(void **state)
{
    json_t *e = env(), *out = NULL, *g, *out2 = NULL;
    char err[NATIVE_ERR_MAX];

    (void)state;
    /* PUT replaces the entry: maxReplicas omitted is lifted */
    assert_int_equal(native_group_put(e, "1c0gi", js("{\"enabled\":false,\"minReplicas\":1}"), &out,
                                      err, sizeof(err)),
                     0);
    g = native_env_group(out, "1c0gi");
    assert_non_null(g);
    assert_null(json_object_get(g, "maxReplicas"));
    assert_int_equal(json_integer_value(json_object_get(g, "minReplicas")), 1);
    json_decref(out);
    /* no member declares it: no group to write */
    assert_int_equal(native_group_put(e, "9c9gi", js("{}"), &out, err, sizeof(err)), AB_ENOENT);
    assert_non_null(strstr(err, "declared by no member"));
    /* the last member of a group leaves: its policy goes with it */
    assert_int_equal(native_pool_delete(e, "alpha", "demo-1c0gi", &out, err, sizeof(err)), 0);
    assert_null(native_env_group(out, "1c0gi"));
    assert_null(native_env_member(out, "alpha", "demo-1c0gi"));
    assert_non_null(native_env_member(out, "alpha", "demo-2c0gi"));
    /* add a member back: appended to this cluster's segment, name rendered later */
    assert_int_equal(native_pool_add(out, "alpha",
                                     js("{\"config\":{\"inlineResources\":{\"requests\":{\"cpu\":"
                                        "\"1\"}}},\"replicas\":1}"),
                                     &out2, err, sizeof(err)),
                     0);
    assert_int_equal(
        json_array_size(json_object_get(
            json_array_get(json_object_get(json_object_get(out2, "spec"), "clusters"), 0),
            "members")),
        2);
    json_decref(out2);
    /* a cluster without a segment gets one */
    assert_int_equal(native_pool_add(out, "beta", js("{\"config\":{}}"), &out2, err, sizeof(err)),
                     0);
    assert_int_equal(json_array_size(json_object_get(json_object_get(out2, "spec"), "clusters")),
                     2);
    json_decref(out2);
    json_decref(out);
    assert_int_equal(native_group_delete(e, "2c0gi", &out, err, sizeof(err)), AB_ENOENT);
    assert_int_equal(native_group_delete(e, "1c0gi", &out, err, sizeof(err)), 0);
    assert_null(native_env_group(out, "1c0gi"));
    json_decref(out);
    json_decref(e);
}

static void test_create(void **state)
{
    json_t *out = NULL;
    struct native_secret sec;
    char err[NATIVE_ERR_MAX];

    (void)state;
    assert_int_equal(native_env_create("t-ml", js("{\"name\":\"x\",\"templateRef\":\"envd\"}"),
                                       &out, &sec, err, sizeof(err)),
                     0);
    assert_null(sec.value);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(out, "metadata"), "namespace")), "t-ml");
    json_decref(out);
    assert_int_equal(
        native_env_create("d", js("{\"templateRef\":\"envd\"}"), &out, &sec, err, sizeof(err)),
        AB_EINVAL);
    assert_string_equal(err, "name is required");
    assert_int_equal(native_env_create("d",
                                       js("{\"name\":\"x\",\"templateRef\":\"e\",\"spec\":{}}"),
                                       &out, &sec, err, sizeof(err)),
                     AB_EINVAL);
    assert_non_null(strstr(err, "unknown field 'spec'"));
}

/* ---- the overlay ---------------------------------------------------------------------------- */

static const char TPL[] = "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxTemplate\n"
                          "metadata: {name: envd}\nspec: {idleImage: i}\n";
static const char POOL_SEED[] = "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\n"
                                "metadata: {name: p}\nspec: {replicas: 1, templateName: envd}\n";

static void write_file(const char *path, const char *text, time_t mtime)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    if (mtime) {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "touch -d @%lld '%s'", (long long)mtime, path);
        assert_int_equal(system(cmd), 0);
    }
}

static int32_t replicas_of(const char *dir)
{
    struct mf_set *s;
    char err[256];
    const struct mf_object *o;
    int32_t r;

    assert_int_equal(mf_load_dir(dir, &s, err, sizeof(err)), 0);
    o = mf_set_find(s, MF_POOL, "default", "p");
    r = o ? o->u.pool.replicas : -1;
    mf_set_free(s);
    return r;
}

static void test_overlay_newer_file_wins(void **state)
{
    char dir[] = "/tmp/agentbox-ovl-XXXXXX", path[256], overlay[300], err[256];
    struct mf_set *v;
    json_t *obj;
    time_t now = time(NULL);

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/t.yaml", dir);
    write_file(path, TPL, 0);
    snprintf(path, sizeof(path), "%s/p.yaml", dir);
    write_file(path, POOL_SEED, now - 100);
    assert_int_equal(replicas_of(dir), 1);

    /* an API write replaces the seed's object and survives a reload */
    assert_int_equal(mf_overlay_dir(dir, overlay, sizeof(overlay)), 0);
    obj = js("{\"apiVersion\":\"agents.navix.sh/v1alpha1\",\"kind\":\"SandboxPool\","
             "\"metadata\":{\"name\":\"p\",\"namespace\":\"default\"},"
             "\"spec\":{\"replicas\":3,\"templateName\":\"envd\"}}");
    assert_int_equal(mf_validate_json(obj, &v, err, sizeof(err)), 0);
    mf_set_free(v);
    assert_int_equal(mf_write_object(overlay, MF_POOL, "default", "p", obj, NULL, err, sizeof(err)),
                     0);
    assert_int_equal(replicas_of(dir), 3);

    /* a hand edit made later takes the object back */
    write_file(path,
               "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\n"
               "metadata: {name: p}\nspec: {replicas: 5, templateName: envd}\n",
               now + 100);
    assert_int_equal(replicas_of(dir), 5);

    /* a delete through the API hides the seed object until its file changes */
    assert_int_equal(
        mf_write_object(overlay, MF_POOL, "default", "p", NULL, NULL, err, sizeof(err)), 0);
    snprintf(path, sizeof(path), "%s/pool.default.p.deleted", overlay);
    write_file(path, "", now + 200);
    assert_int_equal(replicas_of(dir), -1);

    /* the document kept as JSON reads back the same: YAML 1.1 booleans,
     * integers, quoted numbers stay strings */
    assert_int_equal(mf_validate_json(js("{\"apiVersion\":\"agents.navix.sh/v1alpha1\","
                                         "\"kind\":\"SandboxPool\",\"metadata\":{\"name\":\"q\"},"
                                         "\"spec\":{\"replicas\":1}}"),
                                      &v, err, sizeof(err)),
                     0);
    mf_set_free(v);
    struct mf_set *y = mf_set_new();
    static const char yaml[] = "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\n"
                               "metadata: {name: q, labels: {a: \"3\"}}\n"
                               "spec: {replicas: 2, networkPolicy: {disableEgress: yes}}\n";
    assert_int_equal(mf_parse_buffer(y, "y", yaml, strlen(yaml)), 0);
    assert_int_equal(y->nobjs, 1);
    json_t *raw = y->objs[0]->raw;
    assert_true(json_is_true(json_object_get(
        json_object_get(json_object_get(raw, "spec"), "networkPolicy"), "disableEgress")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(raw, "spec"), "replicas")),
                     2);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(raw, "metadata"), "labels"), "a")),
                        "3");
    assert_int_equal(mf_validate_json(raw, &v, err, sizeof(err)), 0);
    assert_true(v->objs[0]->u.pool.disable_egress);
    mf_set_free(v);
    mf_set_free(y);

    /* validation is the seed parser's, without the file prefix */
    json_object_set_new(json_object_get(obj, "spec"), "replicas", json_string("many"));
    assert_int_equal(mf_validate_json(obj, &v, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "field 'spec.replicas'"));
    assert_null(strstr(err, "request:"));
    json_decref(obj);

    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The namespace boundary of the management API: allowed and refused. */
static void test_env_namespace_boundary(void **state)
{
    struct agent_principal t, a;
    (void)state;
    memset(&t, 0, sizeof(t));
    memset(&a, 0, sizeof(a));
    snprintf(t.namespace, sizeof(t.namespace), "t-ml-ada");
    a.admin = true;
    const struct {
        const struct agent_principal *p;
        const char *asked, *want;
    } cases[] = {
        {&t, NULL, "t-ml-ada"},       {&t, "default", "t-ml-ada"}, /* a tenant cannot pick */
        {&t, "t-ml-bob", "t-ml-ada"}, {&t, "", "t-ml-ada"},         {&a, NULL, "default"},
        {&a, "", "default"},          {&a, "t-ml-bob", "t-ml-bob"},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++)
        assert_string_equal(native_env_ns(cases[i].p, cases[i].asked), cases[i].want);
    memset(t.namespace, 0, sizeof(t.namespace)); /* a key without a namespace: default */
    assert_string_equal(native_env_ns(&t, "x"), "default");
}

static void test_template_visibility(void **state)
{
    struct agent_principal ada, bob, root;
    (void)state;
    memset(&ada, 0, sizeof(ada));
    snprintf(ada.team, sizeof(ada.team), "ml");
    snprintf(ada.user, sizeof(ada.user), "ada");
    bob = ada;
    snprintf(bob.user, sizeof(bob.user), "bob");
    memset(&root, 0, sizeof(root));
    root.admin = true;
    json_t *pub = js("{}");
    json_t *team = js("{\"visibility\":{\"rules\":[{\"team\":\"ml\"}]}}");
    json_t *only_ada = js("{\"visibility\":{\"rules\":[{\"team\":\"ml\",\"users\":[\"ada\"]}]}}");
    json_t *other = js("{\"visibility\":{\"rules\":[{\"team\":\"web\"},{\"users\":[\"bob\"]}]}}");
    assert_true(native_template_visible(&bob, pub));
    assert_true(native_template_visible(&bob, team));
    assert_true(native_template_visible(&ada, only_ada));
    assert_false(native_template_visible(&bob, only_ada)); /* AND inside a rule */
    assert_false(native_template_visible(&ada, other));
    assert_true(native_template_visible(&bob, other)); /* OR across rules */
    assert_true(native_template_visible(&root, only_ada));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_editable_round_trip_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overrides_replaced_wholesale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_immutable_fields_name_the_value_in_force, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pull_secret_keep_signal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_put_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_groups_desired_state_and_gc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overlay_newer_file_wins, setup, teardown),
        cmocka_unit_test(test_env_namespace_boundary),
        cmocka_unit_test_setup_teardown(test_template_visibility, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
