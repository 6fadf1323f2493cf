/* Manifest parsing rules: kinds, fields, values, §6.4 naming, directories. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agent/runtime/local/manifest.h"

static const char *TEMPLATE_YAML = "apiVersion: agents.navix.sh/v1alpha1\n"
                                   "kind: SandboxTemplate\n"
                                   "metadata:\n"
                                   "  name: e2b-envd\n"
                                   "  annotations:\n"
                                   "    agentbox.navix.sh/docs: \"# hello\"\n"
                                   "spec:\n"
                                   "  version: 0.0.1\n"
                                   "  idleImage: ghcr.io/scitix/agent-sandbox-idle:0.0.10\n"
                                   "  runtimes:\n"
                                   "  - name: envd\n"
                                   "    port: 49983\n"
                                   "    readinessProbe: {httpGet: {port: 49983, path: /health}}\n"
                                   "  template:\n"
                                   "    spec:\n"
                                   "      automountServiceAccountToken: false\n"
                                   "      containers:\n"
                                   "      - name: sandbox\n"
                                   "        image: ghcr.io/scitix/agent-sandbox-envd:0.9.0-2\n"
                                   "        anythingGoes: {here: [1, 2]}\n"
                                   "status:\n"
                                   "  conditions: []\n";

static const char *ENV_YAML =
    "apiVersion: agents.navix.sh/v1alpha1\n"
    "kind: SandboxEnv\n"
    "metadata: {name: e2b, namespace: team-a}\n"
    "spec:\n"
    "  templateRef: {name: e2b-envd}\n"
    "  mode: WarmPool\n"
    "  autoscaling:\n"
    "    groups: [{name: 1c2gi, enabled: true, minReplicas: 0, maxReplicas: 4}]\n"
    "  overrides:\n"
    "    defaultIdleTimeout: 5m\n"
    "  clusters:\n"
    "  - clusterID: local\n"
    "    members:\n"
    "    - name: e2b-1c2gi\n"
    "      config:\n"
    "        scalingGroup: 1c2gi\n"
    "        inlineResources: {requests: {cpu: \"1\", memory: 2Gi}, limits: {cpu: \"1\", "
    "memory: 2Gi}}\n"
    "      spec: {replicas: 2, defaultStartupTimeout: 90s}\n"
    "    - name: e2b-4c64gi\n"
    "      config:\n"
    "        inlineResources: {requests: {cpu: 3500m, memory: 64Gi}}\n"
    "  - clusterID: other\n"
    "    members:\n"
    "    - name: e2b-2c8gi\n"
    "      inlineResources: {limits: {cpu: 2, memory: 8Gi}}\n"
    "      spec: {replicas: 7}\n";

static const char *POOL_YAML = "apiVersion: agents.navix.sh/v1alpha1\n"
                               "kind: SandboxPool\n"
                               "metadata:\n"
                               "  name: plain\n"
                               "spec:\n"
                               "  replicas: 3\n"
                               "  templateName: e2b-envd\n"
                               "  defaultStartupTimeout: 2m\n"
                               "  podCreationImagePolicy: PoolDefaultImage\n"
                               "  maxUnavailable: 20%\n"
                               "  networkPolicy: {disableEgress: true}\n";

/* Parses text as one file and returns the set; errors stay inside. */
static struct mf_set *parse(const char *text)
{
    struct mf_set *s = mf_set_new();

    assert_non_null(s);
    assert_int_equal(mf_parse_buffer(s, "m.yaml", text, strlen(text)), 0);
    return s;
}

/* Expects exactly one error containing want, on line. */
static void expect_error(const char *text, int line, const char *want)
{
    struct mf_set *s = parse(text);

    if (s->nerrs != 1 || !strstr(s->errs[0].text, want) || s->errs[0].line != line)
        fail_msg("want error at line %d containing \"%s\"; got %d error(s): %s", line, want,
                 s->nerrs, s->nerrs ? s->errs[0].text : "(none)");
    assert_int_equal(s->nobjs, 0);
    mf_set_free(s);
}

static void test_template_sample(void **state)
{
    struct mf_set *s = parse(TEMPLATE_YAML);
    const struct mf_object *o;

    (void)state;
    assert_int_equal(s->nerrs, 0);
    assert_int_equal(s->nobjs, 1);
    o = s->objs[0];
    assert_int_equal(o->kind, MF_TEMPLATE);
    assert_string_equal(o->name, "e2b-envd");
    assert_string_equal(o->ns, "");
    assert_int_equal(o->line, 1);
    assert_string_equal(o->u.tpl.version, "0.0.1");
    assert_int_equal(o->u.tpl.nruntimes, 1);
    assert_string_equal(o->u.tpl.runtimes[0].name, "envd");
    assert_int_equal(o->u.tpl.runtimes[0].port, 49983);
    assert_string_equal(o->u.tpl.runtimes[0].protocol, "TCP");
    assert_string_equal(
        json_string_value(json_object_get(o->annotations, "agentbox.navix.sh/docs")), "# hello");
    mf_set_free(s);
}

static void test_env_sample_renders_pools(void **state)
{
    struct mf_set *s = parse(ENV_YAML);
    struct mf_pool_view v[8];
    const struct mf_env *env;
    int n = 0;

    (void)state;
    if (s->nerrs)
        fail_msg("%s", s->errs[0].text);
    assert_int_equal(s->nobjs, 1);
    env = &s->objs[0]->u.env;
    assert_string_equal(s->objs[0]->ns, "team-a");
    assert_string_equal(env->template_ref, "e2b-envd");
    assert_int_equal(env->nclusters, 2);
    assert_int_equal(env->ngroups, 1);
    assert_true(env->groups[0].enabled);
    assert_int_equal(env->groups[0].max_replicas, 4);
    assert_string_equal(env->clusters[0].members[0].resource_key, "1c2gi");
    /* 3500m rounds up to 4 CPUs */
    assert_string_equal(env->clusters[0].members[1].resource_key, "4c64gi");
    /* legacy flat member; limits used when requests are empty */
    assert_string_equal(env->clusters[1].members[0].resource_key, "2c8gi");

    assert_int_equal(mf_set_pools(s, "local", v, 8, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(v[0].name, "e2b-1c2gi");
    assert_string_equal(v[0].env, "e2b");
    assert_string_equal(v[0].ns, "team-a");
    assert_string_equal(v[0].scaling_group, "1c2gi");
    assert_int_equal(v[0].replicas, 2);
    assert_int_equal(v[0].startup_timeout_ms, 90000);
    assert_int_equal(v[0].idle_timeout_ms, 300000); /* env override */
    assert_string_equal(v[1].name, "e2b-4c64gi");
    assert_string_equal(v[1].scaling_group, "4c64gi"); /* absent → resource key */
    assert_int_equal(v[1].replicas, 0);

    assert_int_equal(mf_set_pools(s, "other", v, 8, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(v[0].replicas, 7);
    assert_int_equal(mf_set_pools(s, "nowhere", v, 8, &n), 0);
    assert_int_equal(n, 0);
    mf_set_free(s);
}

static void test_pool_sample(void **state)
{
    struct mf_set *s = parse(POOL_YAML);
    struct mf_pool_view v[2];
    int n;

    (void)state;
    assert_int_equal(s->nerrs, 0);
    assert_int_equal(s->objs[0]->kind, MF_POOL);
    assert_string_equal(s->objs[0]->ns, "default");
    assert_int_equal(s->objs[0]->u.pool.replicas, 3);
    assert_int_equal(s->objs[0]->u.pool.image_policy, MF_IMAGE_POOL_DEFAULT);
    assert_int_equal(mf_set_pools(s, "local", v, 2, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].env, "");
    assert_int_equal(v[0].startup_timeout_ms, 120000);
    assert_true(v[0].disable_egress);
    mf_set_free(s);
}

static void test_resource_keys(void **state)
{
    static const struct {
        const char *cpu, *mem, *key;
    } cases[] = {
        {"500m", "512Mi", "1c0gi"}, {"4", "64Gi", "4c64gi"},      {"2", "8Gi", "2c8gi"},
        {"1", "2Gi", "1c2gi"},      {"1.5", "1G", "2c0gi"},       {"1001m", "2147483649", "2c2gi"},
        {"0", "1Gi", "0c1gi"},      {"100m", "0", "1c0gi"},       {"2", "1.5Gi", "2c1gi"},
        {"1e3", "1e9", "1000c0gi"}, {"0.001", "2048Mi", "1c2gi"}, {"3", "3221225471", "3c2gi"},
    };
    char key[MF_KEY_MAX + 1];
    size_t i;

    (void)state;
    for (i = 0; i < AB_ARRAY_LEN(cases); i++) {
        int64_t cpu, mem;
        assert_int_equal(mf_quantity_milli(cases[i].cpu, &cpu), 0);
        assert_int_equal(mf_quantity_bytes(cases[i].mem, &mem), 0);
        assert_int_equal(mf_resource_key(cpu, mem, key, sizeof(key)), 0);
        if (strcmp(key, cases[i].key) != 0)
            fail_msg("cpu %s mem %s: want %s, got %s", cases[i].cpu, cases[i].mem, cases[i].key,
                     key);
    }
    assert_int_equal(mf_resource_key(0, 1024 * 1024, key, sizeof(key)), AB_EINVAL);
}

static void test_quantities(void **state)
{
    int64_t v;

    (void)state;
    assert_int_equal(mf_quantity_bytes("2Gi", &v), 0);
    assert_int_equal(v, 2147483648LL);
    assert_int_equal(mf_quantity_bytes("1k", &v), 0);
    assert_int_equal(v, 1000);
    assert_int_equal(mf_quantity_bytes("500m", &v), 0);
    assert_int_equal(v, 1); /* rounded up to a whole byte */
    assert_int_equal(mf_quantity_milli("250m", &v), 0);
    assert_int_equal(v, 250);
    assert_int_equal(mf_quantity_milli("1n", &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(mf_quantity_bytes("1E", &v), 0);
    assert_int_equal(v, 1000000000000000000LL);
    assert_int_equal(mf_quantity_bytes("-1", &v), AB_EINVAL);
    assert_int_equal(mf_quantity_bytes("1 Gi", &v), AB_EINVAL);
    assert_int_equal(mf_quantity_bytes("1GB", &v), AB_EINVAL);
    assert_int_equal(mf_quantity_bytes("", &v), AB_EINVAL);
    assert_int_equal(mf_quantity_bytes("9Ei", &v), AB_EINVAL); /* > int64 */
    assert_int_equal(mf_quantity_bytes("1e", &v), AB_EINVAL);
    assert_int_equal(mf_quantity_bytes("99999999999999999999999999999999Ei", &v), AB_EINVAL);
}

static void test_durations(void **state)
{
    int64_t ms;

    (void)state;
    assert_int_equal(mf_duration_ms("90s", &ms), 0);
    assert_int_equal(ms, 90000);
    assert_int_equal(mf_duration_ms("1h30m", &ms), 0);
    assert_int_equal(ms, 5400000);
    assert_int_equal(mf_duration_ms("250ms", &ms), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(mf_duration_ms("1.5s", &ms), 0);
    assert_int_equal(ms, 1500);
    assert_int_equal(mf_duration_ms("1us", &ms), 0);
    assert_int_equal(ms, 1); /* rounded up */
    assert_int_equal(mf_duration_ms("0", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(mf_duration_ms("90", &ms), AB_EINVAL);
    assert_int_equal(mf_duration_ms("-5s", &ms), AB_EINVAL);
    assert_int_equal(mf_duration_ms("5d", &ms), AB_EINVAL);
    assert_int_equal(mf_duration_ms("s", &ms), AB_EINVAL);
    assert_int_equal(mf_duration_ms("", &ms), AB_EINVAL);
    assert_int_equal(mf_duration_ms("999999999h", &ms), AB_EINVAL);
}

static void test_names(void **state)
{
    (void)state;
    assert_true(mf_name_is_label("e2b", 24, true));
    assert_true(mf_name_is_label("a-b-c9", 24, true));
    assert_false(mf_name_is_label("9abc", 24, true));
    assert_true(mf_name_is_label("9abc", 63, false));
    assert_false(mf_name_is_label("abc-", 24, true));
    assert_false(mf_name_is_label("Abc", 24, true));
    assert_false(mf_name_is_label("a_b", 24, true));
    assert_false(mf_name_is_label("", 24, true));
    assert_true(mf_name_is_label("abcdefghijklmnopqrstuvwx", 24, true));
    assert_false(mf_name_is_label("abcdefghijklmnopqrstuvwxy", 24, true));
    assert_true(mf_name_is_subdomain("e2b.envd-1"));
    assert_false(mf_name_is_subdomain("e2b..envd"));
    assert_false(mf_name_is_subdomain(".e2b"));
}

#define HEAD_POOL "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\nmetadata: {name: p}\n"
#define HEAD_ENV "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxEnv\nmetadata: {name: e}\n"

static void test_errors_name_file_line_and_field(void **state)
{
    (void)state;
    expect_error(HEAD_POOL "spec:\n  replicas: -1\n", 5,
                 "m.yaml:5: field 'spec.replicas' must be a non-negative integer");
    expect_error(HEAD_POOL "spec:\n  replicas: \"2\"\n", 5,
                 "field 'spec.replicas' must be a non-negative integer");
    expect_error(HEAD_POOL "spec:\n  replicas: 1\n  replicsa: 2\n", 6,
                 "m.yaml:6: unknown field 'spec.replicsa' in SandboxPool");
    expect_error(HEAD_POOL "spec:\n  templateName: x\n", 4, "field 'spec.replicas' is required");
    expect_error(HEAD_POOL "spec: {replicas: 1, defaultIdleTimeout: 5 minutes}\n", 4,
                 "field 'spec.defaultIdleTimeout' must be a duration");
    expect_error(HEAD_POOL "spec: {replicas: 1, podCreationImagePolicy: Idle}\n", 4,
                 "field 'spec.podCreationImagePolicy' must be IdleImage or PoolDefaultImage");
    expect_error(HEAD_POOL "spec: {replicas: 1, maxUnavailable: 20 percent}\n", 4,
                 "field 'spec.maxUnavailable' must be a count or a percentage");
    expect_error(HEAD_POOL "spec:\n  replicas: 1\n  networkPolicy: {disableEgress: maybe}\n", 6,
                 "field 'spec.networkPolicy.disableEgress' must be true or false");
    expect_error(HEAD_POOL "spec:\n  replicas: 1\n  runtimes:\n  - {port: 1}\n", 7,
                 "field 'spec.runtimes[0].name' is required");
    expect_error(HEAD_POOL "spec:\n  replicas: 1\n  runtimes:\n  - {name: a, port: 70000}\n", 7,
                 "field 'spec.runtimes[0].port' must be an integer from 1 to 65535");
    expect_error(HEAD_POOL "spec:\n  replicas: [1]\n", 5,
                 "field 'spec.replicas' must be a single value, not a list");
    expect_error(HEAD_POOL "spec:\n  replicas: 1\n  template: 3\n", 6,
                 "field 'spec.template' must be a mapping");
    expect_error("apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPod\nmetadata: {name: p}\n", 2,
                 "m.yaml:2: unknown kind 'SandboxPod'");
    expect_error("apiVersion: v1\nkind: SandboxPool\nmetadata: {name: p}\nspec: {replicas: 1}\n", 1,
                 "field 'apiVersion' must be agents.navix.sh/v1alpha1");
    expect_error("kind: SandboxPool\nmetadata: {name: p}\nspec: {replicas: 1}\n", 1,
                 "field 'apiVersion' must be");
    expect_error("apiVersion: agents.navix.sh/v1alpha1\nmetadata: {name: p}\n", 1,
                 "field 'kind' is required");
    expect_error("apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\nspec: {replicas: 1}\n",
                 1, "field 'metadata.name' is required");
    expect_error("apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\n"
                 "metadata: {name: Pool_1}\nspec: {replicas: 1}\n",
                 3, "field 'metadata.name' must be an RFC 1123 label");
    expect_error("apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\n"
                 "metadata: {name: p, colour: red}\nspec: {replicas: 1}\n",
                 3, "unknown field 'metadata.colour'");
    expect_error(HEAD_POOL, 1, "field 'spec' is required");
    expect_error(HEAD_POOL "spec: {replicas: 1}\nextra: 1\n", 5, "unknown field 'extra'");
    expect_error("- a\n- b\n", 1, "a manifest must be a mapping");
    expect_error(HEAD_POOL "spec: {replicas: 1\n", 5, "YAML syntax error");
}

static void test_env_rules(void **state)
{
    (void)state;
    expect_error("apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxEnv\n"
                 "metadata: {name: abcdefghijklmnopqrstuvwxy}\nspec: {templateRef: {name: t}}\n",
                 3, "env name \"abcdefghijklmnopqrstuvwxy\" exceeds 24-char cap");
    expect_error("apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxEnv\n"
                 "metadata: {name: 1e}\nspec: {templateRef: {name: t}}\n",
                 3, "field 'metadata.name' must be an RFC 1123 label starting with a letter");
    expect_error(HEAD_ENV "spec: {mode: WarmPool}\n", 4,
                 "field 'spec.templateRef.name' is required");
    expect_error(HEAD_ENV "spec: {templateRef: {name: t}, mode: Cold}\n", 4,
                 "field 'spec.mode' must be WarmPool or OnDemandJob");
    expect_error(HEAD_ENV "spec: {templateRef: {name: t}, mode: OnDemandJob}\n", 4,
                 "only WarmPool is implemented");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  clusters:\n  - clusterID: c\n"
                          "    members:\n    - name: e-2c8gi\n      config: {instanceType: big}\n",
                 9,
                 "field 'spec.clusters[0].members[0].config.instanceType' needs an instance "
                 "catalogue");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  clusters:\n  - clusterID: c\n"
                          "    members:\n    - name: e-2c8gi\n",
                 9, "one of instanceType or inlineResources must be supplied");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  clusters:\n  - clusterID: c\n"
                          "    members:\n    - name: e-2c8gi\n"
                          "      config: {inlineResources: {requests: {cpu: 0, memory: 100Mi}}}\n",
                 9, "could not derive a non-empty ResourceKey from the supplied resources");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  clusters:\n  - clusterID: c\n"
                          "    members:\n    - name: e-big\n"
                          "      config: {inlineResources: {requests: {cpu: 2, memory: 8Gi}}}\n",
                 9, "field 'spec.clusters[0].members[0].name' must be 'e-2c8gi'");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  clusters:\n  - clusterID: c\n"
                          "    members:\n    - name: e-2c8gi\n"
                          "      config: {inlineResources: {requests: {cpu: two}}}\n",
                 10,
                 "field 'spec.clusters[0].members[0].config.inlineResources.requests.cpu' "
                 "must be a non-negative quantity");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  clusters:\n  - clusterID: c\n"
                          "    members:\n    - name: e-2c8gi\n"
                          "      config: {inlineResources: {requests: {cpu: 2, memory: 8Gi}}}\n"
                          "      spec: {templateName: t}\n",
                 11, "field 'spec.clusters[0].members[0].spec.replicas' is required");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  clusters:\n  - clusterID: c\n"
                          "    members:\n    - name: e-2c8gi\n"
                          "      config: {inlineResources: {requests: {cpu: 2, memory: 8Gi}}}\n"
                          "    - name: e-2c8gi\n"
                          "      config: {inlineResources: {requests: {cpu: 2, memory: 8Gi}}}\n",
                 11, "member 'e-2c8gi' is listed twice");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  autoscaling:\n    groups:\n"
                          "    - {name: g, scaleUpPolicy: {mode: Aggressive}}\n",
                 8, "maxReplicas' is required with scaleUpPolicy.mode Aggressive");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  autoscaling:\n    groups:\n"
                          "    - {name: g, maxReplicas: 3}\n",
                 8, "group 'g' is used by no member's scalingGroup");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  overrides:\n"
                          "    volumes: [{claimName: c, mountPath: /data}]\n",
                 7, "not supported by the local runtime");
    expect_error(HEAD_ENV "spec:\n  templateRef: {name: t}\n  clusters:\n  - members: []\n", 7,
                 "field 'spec.clusters[0].clusterID' is required");
}

static void test_multi_document_keeps_good_objects(void **state)
{
    char buf[4096];
    struct mf_set *s;

    (void)state;
    snprintf(buf, sizeof(buf), "%s---\n%s---\n---\n%s", TEMPLATE_YAML,
             HEAD_POOL "spec: {replicas: x}\n", POOL_YAML);
    s = parse(buf);
    assert_int_equal(s->nobjs, 2);
    assert_int_equal(s->nerrs, 1);
    assert_int_equal(s->errs[0].line, 27);
    assert_string_equal(s->objs[1]->name, "plain");
    assert_int_equal(s->objs[1]->line, 30);
    mf_set_free(s);
}

static void test_aliases_are_bounded(void **state)
{
    struct mf_set *s;

    (void)state;
    /* A cyclic alias in a schemaless part and a billion-laughs style list. */
    s = parse(HEAD_POOL "spec: &a {replicas: 1, template: {x: *a}}\n");
    assert_int_equal(s->nobjs, 1);
    mf_set_free(s);
    s = parse(HEAD_POOL "x: &a [1,2,3,4,5,6,7,8,9]\ny: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                        "spec: {replicas: 1, runtimes: [*b]}\n");
    assert_int_equal(s->nobjs, 0);
    assert_int_equal(s->nerrs, 1);
    mf_set_free(s);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_directory_load_and_signature(void **state)
{
    char dir[] = "/tmp/test-manifest-XXXXXX";
    char err[256], path[600];
    struct mf_set *s = NULL;
    uint64_t sig1, sig2, sig3;
    int i, found_dup = 0, found_ref = 0, found_clash = 0, found_kind = 0;

    (void)state;
    assert_non_null(mkdtemp(dir));
    write_file(dir, "a-template.yaml", TEMPLATE_YAML);
    write_file(dir, "b-env.yml", ENV_YAML);
    write_file(dir, "c-pool.yaml", POOL_YAML);
    write_file(dir, "d-dup.yaml", POOL_YAML);
    write_file(dir, "e-noref.yaml",
               "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\n"
               "metadata: {name: q}\nspec: {replicas: 1, templateName: nope}\n");
    write_file(dir, "f-clash.yaml",
               "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\n"
               "metadata: {name: e2b-1c2gi, namespace: team-a}\n"
               "spec: {replicas: 1}\n");
    write_file(dir, "g-bad.yaml", "apiVersion: agents.navix.sh/v1alpha1\nkind: Nope\n");
    write_file(dir, "notes.txt", "kind: ignored\n");

    assert_int_equal(mf_load_dir(dir, &s, err, sizeof(err)), 0);
    assert_int_equal(s->nobjs, 3); /* template, env, the first pool */
    assert_non_null(mf_set_find(s, MF_ENV, "team-a", "e2b"));
    assert_non_null(mf_set_find(s, MF_POOL, "default", "plain"));
    assert_null(mf_set_find(s, MF_POOL, "default", "q"));
    for (i = 0; i < s->nerrs; i++) {
        const char *t = s->errs[i].text;
        found_dup += strstr(t, "d-dup.yaml:1: duplicate SandboxPool 'default/plain'") != NULL;
        found_ref += strstr(t, "e-noref.yaml:1: field 'spec.templateName' names SandboxTemplate "
                               "'nope'") != NULL;
        found_clash += strstr(t, "f-clash.yaml:1: SandboxPool 'team-a/e2b-1c2gi'") != NULL;
        found_kind += strstr(t, "g-bad.yaml:2: unknown kind 'Nope'") != NULL;
    }
    assert_int_equal(s->nerrs, 4);
    assert_int_equal(found_dup + found_ref + found_clash + found_kind, 4);
    mf_set_free(s);

    assert_int_equal(mf_dir_signature(dir, &sig1), 0);
    assert_int_equal(mf_dir_signature(dir, &sig2), 0);
    assert_true(sig1 == sig2);
    write_file(dir, "c-pool.yaml", "# changed\n");
    assert_int_equal(mf_dir_signature(dir, &sig2), 0);
    assert_true(sig1 != sig2);
    write_file(dir, "h-new.yaml", "");
    assert_int_equal(mf_dir_signature(dir, &sig3), 0);
    assert_true(sig3 != sig2);

    assert_int_equal(mf_load_dir("/nonexistent-dir-xyz", &s, err, sizeof(err)), AB_EIO);
    assert_non_null(strstr(err, "/nonexistent-dir-xyz"));

    {
        const char *names[] = {"a-template.yaml", "b-env.yml",    "c-pool.yaml",
                               "d-dup.yaml",      "e-noref.yaml", "f-clash.yaml",
                               "g-bad.yaml",      "notes.txt",    "h-new.yaml"};
        for (i = 0; i < (int)AB_ARRAY_LEN(names); i++) {
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
            unlink(path);
        }
        rmdir(dir);
    }
}

#define HEAD_RT HEAD_POOL "spec:\n  replicas: 1\n  runtimes:\n"

/* runtimes[].readinessProbe and config.startCommand: what the local runtime
 * starts and waits for before a sandbox is idle. */
static void test_start_command_and_readiness(void **state)
{
    struct mf_set *s;
    struct mf_pool_view v[4];
    int n = 0;
    const struct mf_runtime *r;

    (void)state;
    s = parse(HEAD_RT
              "  - name: envd\n    port: 49983\n"
              "  - name: app\n    port: 49999\n"
              "    readinessProbe: {httpGet: {port: 49999, path: /health}, periodSeconds: 2,"
              " timeoutSeconds: 3, failureThreshold: 5}\n"
              "    config: {startCommand: \"python3 -m server --port 49999\", other: [1]}\n"
              "  - name: db\n    readinessProbe: {tcpSocket: {port: 5432}}\n");
    assert_int_equal(s->nerrs, 0);
    assert_int_equal(s->nobjs, 1);
    r = s->objs[0]->u.pool.runtimes;
    assert_int_equal(s->objs[0]->u.pool.nruntimes, 3);
    assert_int_equal(r[0].probe.kind, MF_PROBE_NONE);
    assert_string_equal(r[0].start_command, "");
    assert_int_equal(r[1].probe.kind, MF_PROBE_HTTP);
    assert_int_equal(r[1].probe.port, 49999);
    assert_string_equal(r[1].probe.path, "/health");
    assert_int_equal(r[1].probe.period_s, 2);
    assert_int_equal(r[1].probe.timeout_s, 3);
    assert_string_equal(r[1].start_command, "python3 -m server --port 49999");
    assert_int_equal(r[2].probe.kind, MF_PROBE_TCP);
    assert_int_equal(r[2].probe.port, 5432);
    assert_int_equal(mf_set_pools(s, "any", v, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_ptr_equal(v[0].runtimes, r);
    assert_int_equal(v[0].nruntimes, 3);
    mf_set_free(s);

    /* httpGet without a path checks "/" */
    s = parse(HEAD_RT "  - {name: a, readinessProbe: {httpGet: {port: 80}}}\n");
    assert_int_equal(s->nerrs, 0);
    assert_string_equal(s->objs[0]->u.pool.runtimes[0].probe.path, "/");
    mf_set_free(s);

    expect_error(HEAD_RT "  - {name: a, readinessProbe: {periodSeconds: 1}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe' needs httpGet or tcpSocket");
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {httpGet: {path: /x}}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe.httpGet.port' is required");
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {tcpSocket: {port: \"http\"}}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe.tcpSocket.port' must be a port number: "
                 "named ports are not supported");
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {tcpSocket: {port: 0}}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe.tcpSocket.port' must be an integer from "
                 "1 to 65535");
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {httpGet: {port: 1, path: health}}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe.httpGet.path' must start with '/'");
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {httpGet: {port: 1, scheme: HTTPS}}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe.httpGet.scheme' must be HTTP");
    /* both kinds check the sandbox's own loopback only */
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {httpGet: {port: 1, host: 10.0.0.1}}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe.httpGet.host' must be 127.0.0.1 or "
                 "absent: the check runs on the sandbox's loopback");
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {tcpSocket: {port: 1, host: db}}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe.tcpSocket.host' must be 127.0.0.1 or "
                 "absent: the check runs on the sandbox's loopback");
    s = parse(HEAD_RT "  - {name: a, readinessProbe: {tcpSocket: {port: 1, host: localhost}}}\n");
    assert_int_equal(s->nerrs, 0);
    mf_set_free(s);
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {exec: {command: [true]}}}\n", 7,
                 "field 'spec.runtimes[0].readinessProbe.exec' is not supported by the local "
                 "runtime");
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {tcpSocket: {port: 1}, httpGet: {port: "
                         "1}}}\n",
                 7, "field 'spec.runtimes[0].readinessProbe.httpGet' is a second check");
    expect_error(HEAD_RT
                 "  - {name: a, readinessProbe: {tcpSocket: {port: 1}, periodSeconds: 0}}\n",
                 7, "field 'spec.runtimes[0].readinessProbe.periodSeconds' must be");
    expect_error(HEAD_RT "  - {name: a, readinessProbe: {tcpSocket: {port: 1}, period: 1}}\n", 7,
                 "unknown field 'spec.runtimes[0].readinessProbe.period'");
    expect_error(HEAD_RT "  - {name: a, config: {startCommand: \"\"}}\n", 7,
                 "field 'spec.runtimes[0].config.startCommand' must not be empty");
    expect_error(HEAD_RT "  - {name: a, config: {startCommand: [x]}}\n", 7,
                 "field 'spec.runtimes[0].config.startCommand' must be a single value");
    expect_error(HEAD_RT "  - {name: a, config: {startCommand: x}}\n"
                         "  - {name: b, config: {startCommand: y}}\n",
                 8, "field 'spec.runtimes[1].config.startCommand': runtime 'a' has one already");
}

/* A pool without runtimes of its own takes its template's. */
static void test_pool_takes_template_runtimes(void **state)
{
    struct mf_set *s = mf_set_new();
    struct mf_pool_view v[2];
    int n = 0;
    const char *text =
        "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxTemplate\nmetadata: {name: t}\n"
        "spec:\n  runtimes:\n  - name: app\n    readinessProbe: {tcpSocket: {port: 8080}}\n"
        "    config: {startCommand: run-app}\n"
        "---\n" HEAD_POOL "spec: {replicas: 1, templateName: t}\n";

    (void)state;
    assert_int_equal(mf_parse_buffer(s, "m.yaml", text, strlen(text)), 0);
    assert_int_equal(s->nerrs, 0);
    assert_int_equal(mf_set_pools(s, "any", v, 2, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(v[0].nruntimes, 1);
    assert_string_equal(v[0].runtimes[0].start_command, "run-app");
    assert_int_equal(v[0].runtimes[0].probe.port, 8080);
    mf_set_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_sample),
        cmocka_unit_test(test_env_sample_renders_pools),
        cmocka_unit_test(test_pool_sample),
        cmocka_unit_test(test_resource_keys),
        cmocka_unit_test(test_quantities),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_errors_name_file_line_and_field),
        cmocka_unit_test(test_env_rules),
        cmocka_unit_test(test_multi_document_keeps_good_objects),
        cmocka_unit_test(test_aliases_are_bounded),
        cmocka_unit_test(test_directory_load_and_signature),
        cmocka_unit_test(test_start_command_and_readiness),
        cmocka_unit_test(test_pool_takes_template_runtimes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
