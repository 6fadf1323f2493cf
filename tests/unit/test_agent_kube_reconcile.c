/* The kube runtime's reconcile decisions (agent/runtime/kube/reconcile.c):
 * Env member naming through the manifest rules, revision hashing (what rolls
 * and what does not), scale up/down, rolls within maxUnavailable, dead Pods,
 * status numbers and conditions, and the bodies of Pods and member pools. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agent/runtime/kube/reconcile.h"
#include "agent/runtime/local/manifest.h"

static json_t *jparse(const char *s)
{
    json_error_t e;
    json_t *v = json_loads(s, 0, &e);
    if (!v)
        fail_msg("bad test JSON: %s", e.text);
    return v;
}

static const char *SPEC = "{\"replicas\":2,\"templateName\":\"t\",\"idleImage\":\"idle:1\","
                          "\"defaultStartupTimeout\":\"60s\",\"template\":{\"metadata\":{"
                          "\"labels\":{\"a\":\"b\"}},\"spec\":{\"containers\":[{\"name\":\"main\","
                          "\"image\":\"run:1\"}]}}}";

static void rev_of(const char *spec, char out[KUBE_REV_LEN + 1])
{
    json_t *s = jparse(spec);
    assert_int_equal(kube_revision(s, out), 0);
    json_decref(s);
}

static void revision_rules(void **state)
{
    (void)state;
    char base[9], r[9];
    json_t *s = jparse(SPEC);
    rev_of(SPEC, base);
    assert_int_equal(strlen(base), 8);

    /* Not identity: replicas, timeouts, template name, the running image. */
    json_t *c = json_deep_copy(s);
    json_object_set_new(c, "replicas", json_integer(9));
    json_object_set_new(c, "defaultStartupTimeout", json_string("5m"));
    json_object_set_new(c, "templateName", json_string("other"));
    json_object_set_new(
        json_array_get(
            json_object_get(json_object_get(json_object_get(c, "template"), "spec"), "containers"),
            0),
        "image", json_string("run:2"));
    json_object_set_new(
        json_object_get(json_object_get(json_object_get(c, "template"), "metadata"), "labels"),
        KUBE_L_HASH, json_string("deadbeef"));
    assert_int_equal(kube_revision(c, r), 0);
    assert_string_equal(r, base);
    json_decref(c);

    /* Identity: the idle image, template metadata, sidecars. */
    c = json_deep_copy(s);
    json_object_set_new(c, "idleImage", json_string("idle:2"));
    assert_int_equal(kube_revision(c, r), 0);
    assert_string_not_equal(r, base);
    json_decref(c);
    c = json_deep_copy(s);
    json_object_set_new(
        json_object_get(json_object_get(json_object_get(c, "template"), "metadata"), "labels"), "a",
        json_string("c"));
    assert_int_equal(kube_revision(c, r), 0);
    assert_string_not_equal(r, base);
    json_decref(c);

    /* Under PoolDefaultImage the template's image is what idle Pods run. */
    c = json_deep_copy(s);
    json_object_set_new(c, "podCreationImagePolicy", json_string("PoolDefaultImage"));
    char p1[9], p2[9];
    assert_int_equal(kube_revision(c, p1), 0);
    json_object_set_new(
        json_array_get(
            json_object_get(json_object_get(json_object_get(c, "template"), "spec"), "containers"),
            0),
        "image", json_string("run:2"));
    assert_int_equal(kube_revision(c, p2), 0);
    assert_string_not_equal(p1, p2);
    json_decref(c);
    json_decref(s);
}

static void max_unavailable(void **state)
{
    (void)state;
    json_t *v;
    assert_int_equal(kube_max_unavailable(NULL, 10), 2);
    assert_int_equal(kube_max_unavailable(NULL, 3), 1); /* floor 1 */
    v = json_string("50%");
    assert_int_equal(kube_max_unavailable(v, 5), 2); /* rounded down */
    json_decref(v);
    v = json_integer(3);
    assert_int_equal(kube_max_unavailable(v, 5), 3);
    json_decref(v);
    v = json_integer(0);
    assert_int_equal(kube_max_unavailable(v, 5), 1);
    json_decref(v);
}

static struct kube_pod pod(const char *name, enum kube_phase ph, bool ready, const char *rev,
                           int64_t created)
{
    struct kube_pod p;
    memset(&p, 0, sizeof(p));
    snprintf(p.ns, sizeof(p.ns), "default");
    snprintf(p.name, sizeof(p.name), "%s", name);
    snprintf(p.revision, sizeof(p.revision), "%s", rev);
    p.phase = ph;
    p.ready = ready;
    p.finalizer = true;
    p.created_ms = created;
    return p;
}

static struct kube_pool_input input(int replicas)
{
    struct kube_pool_input in;
    memset(&in, 0, sizeof(in));
    in.replicas = replicas;
    in.max_unavailable = 1;
    in.auto_update = true;
    snprintf(in.revision, sizeof(in.revision), "aaaaaaaa");
    return in;
}

static void scale_up(void **state)
{
    (void)state;
    struct kube_plan pl;
    struct kube_pool_input in = input(3);
    struct kube_pod pods[2] = {pod("p-a", KUBE_PH_IDLE, true, "aaaaaaaa", 1),
                               pod("p-b", KUBE_PH_RUNNING, true, "aaaaaaaa", 2)};
    kube_pool_plan(&in, pods, 2, &pl);
    assert_int_equal(pl.create, 1);
    assert_int_equal(pl.ndelete, 0);
    assert_int_equal(pl.counts.total, 2);
    assert_int_equal(pl.counts.idle, 1);
    assert_int_equal(pl.counts.running, 1);

    /* Creates in flight count: no second create for the same gap. */
    in.creating = 1;
    kube_pool_plan(&in, pods, 2, &pl);
    assert_int_equal(pl.create, 0);

    /* Waiting claims no idle Pod serves add Pods, within maxReplicas. */
    in.creating = 0;
    in.pending = 4; /* one idle Ready serves one */
    kube_pool_plan(&in, pods, 2, &pl);
    assert_int_equal(pl.create, 1 + 3);
    in.max_replicas = 4;
    kube_pool_plan(&in, pods, 2, &pl);
    assert_int_equal(pl.create, 2);
    /* ...but not in an autoscaled member pool: its autoscaler grows it */
    in.autoscaled = true;
    kube_pool_plan(&in, pods, 2, &pl);
    assert_int_equal(pl.create, 1);
    in.autoscaled = false;
}

static void scale_down(void **state)
{
    (void)state;
    struct kube_plan pl;
    struct kube_pool_input in = input(1);
    struct kube_pod pods[4] = {
        pod("p-old", KUBE_PH_IDLE, true, "aaaaaaaa", 1),
        pod("p-new", KUBE_PH_IDLE, true, "aaaaaaaa", 5),
        pod("p-unready", KUBE_PH_IDLE, false, "aaaaaaaa", 2),
        pod("p-run", KUBE_PH_RUNNING, true, "aaaaaaaa", 0),
    };
    kube_pool_plan(&in, pods, 4, &pl);
    assert_int_equal(pl.create, 0);
    /* 4 Pods for 1: the running one stays; not Ready first, then newest. */
    assert_int_equal(pl.ndelete, 3);
    assert_int_equal(pl.del[0], 2);
    assert_int_equal(pl.del[1], 1);
    assert_int_equal(pl.del[2], 0);
    for (int i = 0; i < pl.ndelete; i++)
        assert_int_equal(pl.why[i], KUBE_DEL_SCALE);

    /* Not while a claim waits (the Ready idle Pod made for it is about to
     * be taken), nor while a create is unanswered (its Pod may be counted
     * twice, in `pods` and in `creating`). */
    in.pending = 1;
    kube_pool_plan(&in, pods, 4, &pl);
    assert_int_equal(pl.ndelete, 0);
    in.pending = 0;
    in.creating = in.unanswered = 1;
    kube_pool_plan(&in, pods, 4, &pl);
    assert_int_equal(pl.ndelete, 0);
    in.creating = in.unanswered = 0;

    /* A pool being deleted goes to zero, but claimed Pods are never deleted. */
    in.deleting = true;
    kube_pool_plan(&in, pods, 4, &pl);
    assert_int_equal(pl.ndelete, 3);
    for (int i = 0; i < pl.ndelete; i++)
        assert_int_not_equal(pl.del[i], 3);
}

static void roll(void **state)
{
    (void)state;
    struct kube_plan pl;
    struct kube_pool_input in = input(4);
    struct kube_pod pods[5] = {
        pod("p-1", KUBE_PH_IDLE, true, "bbbbbbbb", 1),
        pod("p-2", KUBE_PH_IDLE, true, "bbbbbbbb", 2),
        pod("p-3", KUBE_PH_IDLE, false, "bbbbbbbb", 3),
        pod("p-4", KUBE_PH_RUNNING, true, "bbbbbbbb", 4),
        pod("p-5", KUBE_PH_IDLE, true, "aaaaaaaa", 5),
    };
    /* The stale Pod not Ready goes first and costs nothing (it was
     * unavailable already), but its replacement will be: a Ready stale one
     * waits; the running one waits for its release. */
    in.replicas = 5;
    kube_pool_plan(&in, pods, 5, &pl);
    assert_int_equal(pl.create, 0);
    assert_int_equal(pl.ndelete, 1);
    assert_int_equal(pl.del[0], 2);
    assert_int_equal(pl.why[0], KUBE_DEL_ROLL);
    assert_int_equal(pl.counts.updated, 1);
    /* All Ready: exactly maxUnavailable of them at a time. */
    pods[2].ready = true;
    in.max_unavailable = 2;
    kube_pool_plan(&in, pods, 5, &pl);
    assert_int_equal(pl.ndelete, 2);
    assert_int_equal(pl.del[0], 0);
    assert_int_equal(pl.del[1], 1);
    pods[2].ready = false;
    in.max_unavailable = 1;

    /* A replacement still starting (created, not Ready) uses the budget. */
    in.creating = 1;
    in.replicas = 6;
    kube_pool_plan(&in, pods, 5, &pl);
    assert_int_equal(pl.create, 0);
    assert_int_equal(pl.ndelete, 1); /* only the not-Ready stale one */
    assert_int_equal(pl.del[0], 2);

    /* autoUpdate false: nothing rolls. */
    in.creating = 0;
    in.replicas = 5;
    in.auto_update = false;
    kube_pool_plan(&in, pods, 5, &pl);
    assert_int_equal(pl.ndelete, 0);
}

static void dead_and_deleting(void **state)
{
    (void)state;
    struct kube_plan pl;
    struct kube_pool_input in = input(2);
    struct kube_pod pods[3] = {
        pod("p-dead", KUBE_PH_RUNNING, false, "aaaaaaaa", 1),
        pod("p-pull", KUBE_PH_IDLE, false, "aaaaaaaa", 2),
        pod("p-gone", KUBE_PH_IDLE, false, "aaaaaaaa", 3),
    };
    pods[0].dead = true;
    pods[1].pull_failed = true;
    pods[2].deleting = true;
    kube_pool_plan(&in, pods, 3, &pl);
    assert_int_equal(pl.ndelete, 2);
    assert_int_equal(pl.why[0], KUBE_DEL_DEAD);
    assert_int_equal(pl.why[1], KUBE_DEL_DEAD);
    assert_int_equal(pl.create, 2); /* both replaced */
    assert_int_equal(pl.nunfinalize, 1);
    assert_int_equal(pl.unfinalize[0], 2);
    assert_int_equal(pl.counts.total, 2); /* the deleting one is not counted */
}

static void status_numbers(void **state)
{
    (void)state;
    struct kube_pool_counts c = {
        .total = 3, .idle = 2, .unavailable_idle = 1, .running = 1, .updated = 3};
    json_t *st = kube_pool_status(&c, 3, 2, "e-1c2gi", "aaaaaaaa", false, NULL, 1000);
    assert_non_null(st);
    assert_string_equal(json_string_value(json_object_get(st, "phase")), "Degraded");
    assert_int_equal(json_integer_value(json_object_get(st, "idleReplicas")), 2);
    assert_int_equal(json_integer_value(json_object_get(st, "unavailableIdleReplicas")), 1);
    assert_int_equal(json_integer_value(json_object_get(st, "runningReplicas")), 1);
    assert_int_equal(json_integer_value(json_object_get(st, "pendingRequests")), 2);
    assert_string_equal(json_string_value(json_object_get(st, "currentRevision")), "aaaaaaaa");
    assert_string_equal(json_string_value(json_object_get(st, "selector")), KUBE_L_POOL "=e-1c2gi");
    json_t *conds = json_object_get(st, "conditions");
    assert_int_equal(json_array_size(conds), 3);
    json_t *deg = json_array_get(conds, 2);
    assert_string_equal(json_string_value(json_object_get(deg, "reason")), "UnhealthyIdlePods");
    const char *t0 = json_string_value(json_object_get(deg, "lastTransitionTime"));

    /* Same statuses later: transition times kept, nothing to write. */
    json_t *st2 = kube_pool_status(&c, 3, 2, "e-1c2gi", "aaaaaaaa", false, st, 999999999);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(st2, "conditions"), 2),
                                          "lastTransitionTime")),
        t0);
    assert_false(kube_status_differs(st, st2));
    c.unavailable_idle = 0;
    json_t *st3 = kube_pool_status(&c, 3, 2, "e-1c2gi", "aaaaaaaa", false, st2, 999999999);
    assert_true(kube_status_differs(st2, st3));
    assert_string_equal(json_string_value(json_object_get(st3, "phase")), "Ready");
    c.total = 2;
    json_t *st4 = kube_pool_status(&c, 3, 0, "e-1c2gi", "aaaaaaaa", false, NULL, 0);
    assert_string_equal(json_string_value(json_object_get(st4, "phase")), "ScalingUp");
    json_t *st5 = kube_pool_status(&c, 3, 0, "e-1c2gi", "aaaaaaaa", true, NULL, 0);
    assert_string_equal(json_string_value(json_object_get(st5, "phase")), "Terminating");
    json_decref(st);
    json_decref(st2);
    json_decref(st3);
    json_decref(st4);
    json_decref(st5);
}

static void pod_body(void **state)
{
    (void)state;
    json_t *s = jparse(SPEC);
    json_t *res = jparse("{\"requests\":{\"cpu\":\"1\"}}");
    json_t *p = kube_pod_body("e-1c2gi", "uid-1", "e", s, "aaaaaaaa", res);
    assert_non_null(p);
    json_t *md = json_object_get(p, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "generateName")), "e-1c2gi-");
    json_t *l = json_object_get(md, "labels");
    assert_string_equal(json_string_value(json_object_get(l, KUBE_L_PHASE)), "idle");
    assert_string_equal(json_string_value(json_object_get(l, KUBE_L_HASH)), "aaaaaaaa");
    assert_string_equal(json_string_value(json_object_get(l, KUBE_L_MANAGED)), KUBE_MANAGED_BY);
    assert_string_equal(json_string_value(json_object_get(l, "a")), "b"); /* template's kept */
    assert_string_equal(json_string_value(json_array_get(json_object_get(md, "finalizers"), 0)),
                        KUBE_FINALIZER);
    json_t *own = json_array_get(json_object_get(md, "ownerReferences"), 0);
    assert_string_equal(json_string_value(json_object_get(own, "kind")), "SandboxPool");
    assert_true(json_is_true(json_object_get(own, "controller")));
    json_t *c0 = json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "image")), "idle:1");
    assert_true(json_equal(json_object_get(c0, "resources"), res));
    json_decref(p);

    /* Observed back. */
    json_t *live =
        jparse("{\"metadata\":{\"name\":\"e-1c2gi-x\",\"namespace\":\"default\","
               "\"labels\":{\"" KUBE_L_PHASE "\":\"idle\",\"" KUBE_L_POOL "\":\"e-1c2gi\"},"
               "\"finalizers\":[\"" KUBE_FINALIZER "\"]},"
               "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"img:2\"}]},"
               "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.3.4\","
               "\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}],"
               "\"containerStatuses\":[{\"name\":\"side\",\"image\":\"x\"},"
               "{\"name\":\"main\",\"image\":\"img:2\",\"state\":{\"waiting\":{"
               "\"reason\":\"ErrImagePull\",\"message\":\"not found\"}}}]}}");
    struct kube_pod o;
    char err[128];
    assert_int_equal(kube_pod_observe(live, &o, err, sizeof(err)), 0);
    assert_int_equal(o.phase, KUBE_PH_IDLE);
    assert_true(o.ready);
    assert_true(o.finalizer);
    assert_true(o.pull_failed);
    assert_string_equal(o.status_image, "img:2");
    assert_string_equal(o.waiting_message, "not found");
    assert_string_equal(o.ip, "127.0.3.4");
    json_decref(live);
    live = jparse("{\"metadata\":{\"name\":\"x\"}}");
    assert_int_equal(kube_pod_observe(live, &o, err, sizeof(err)), AB_EINVAL);
    json_decref(live);
    json_decref(res);
    json_decref(s);
}

/* An Env as the API server returns it, named by the manifest rules (§6.4),
 * rendered into its member pool. */
static void member_pool(void **state)
{
    (void)state;
    const char *env_json =
        "{\"apiVersion\":\"agents.navix.sh/v1alpha1\",\"kind\":\"SandboxEnv\","
        "\"metadata\":{\"name\":\"demo\",\"namespace\":\"default\",\"uid\":\"u-env\","
        "\"resourceVersion\":\"7\",\"creationTimestamp\":\"2026-01-01T00:00:00Z\"},"
        "\"spec\":{\"templateRef\":{\"name\":\"envd\"},\"mode\":\"WarmPool\","
        "\"overrides\":{\"image\":\"run:9\"},"
        "\"clusters\":[{\"clusterID\":\"alpha\",\"members\":[{\"name\":\"demo-1c0gi\","
        "\"config\":{\"inlineResources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"512Mi\"}}},"
        "\"spec\":{\"replicas\":2}}]}]}}";
    struct mf_set *set = mf_set_new();
    assert_int_equal(mf_parse_buffer(set, "api", env_json, strlen(env_json)), 0);
    assert_int_equal(set->nerrs, 0);
    struct mf_pool_view v[4];
    int n = 0;
    assert_int_equal(mf_set_pools(set, "alpha", v, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(v[0].name, "demo-1c0gi"); /* 500m → 1 CPU, 512Mi → 0 GiB */
    assert_string_equal(v[0].member->resource_key, "1c0gi");
    assert_string_equal(v[0].scaling_group, "1c0gi");
    assert_int_equal(v[0].replicas, 2);

    json_t *env = jparse(env_json);
    json_t *tpl = jparse("{\"metadata\":{\"name\":\"envd\"},\"spec\":{\"idleImage\":\"idle:1\","
                         "\"runtimes\":[{\"name\":\"envd\",\"port\":49983}]}}");
    json_t *mspec = jparse("{\"replicas\":2}");
    json_t *p = kube_member_pool(env, tpl, v[0].name, v[0].scaling_group, v[0].member->cpu_milli,
                                 v[0].member->mem_bytes, mspec);
    assert_non_null(p);
    json_t *md = json_object_get(p, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "name")), "demo-1c0gi");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(md, "labels"), KUBE_L_GROUP)), "1c0gi");
    json_t *own = json_array_get(json_object_get(md, "ownerReferences"), 0);
    assert_string_equal(json_string_value(json_object_get(own, "kind")), "SandboxEnv");
    assert_string_equal(json_string_value(json_object_get(own, "uid")), "u-env");
    json_t *spec = json_object_get(p, "spec");
    assert_int_equal(json_integer_value(json_object_get(spec, "replicas")), 2);
    assert_string_equal(json_string_value(json_object_get(spec, "templateName")), "envd");
    assert_string_equal(kube_idle_image(spec), "idle:1");
    json_t *c0 = json_array_get(
        json_object_get(json_object_get(json_object_get(spec, "template"), "spec"), "containers"),
        0);
    assert_string_equal(json_string_value(json_object_get(c0, "image")), "run:9");
    json_t *req = json_object_get(json_object_get(c0, "resources"), "requests");
    assert_string_equal(json_string_value(json_object_get(req, "cpu")), "500m");
    assert_string_equal(json_string_value(json_object_get(req, "memory")), "512Mi");

    /* A live pool with the server's additions still matches; a changed
     * replicas does not. */
    json_t *live = json_deep_copy(p);
    json_object_set_new(json_object_get(live, "metadata"), "uid", json_string("u-pool"));
    json_object_set_new(json_object_get(live, "spec"), "podCreationImagePolicy",
                        json_string("IdleImage"));
    assert_true(kube_pool_matches(live, p));
    json_object_set_new(json_object_get(live, "spec"), "replicas", json_integer(3));
    assert_false(kube_pool_matches(live, p));

    /* The running image is not identity: the override does not roll idle Pods. */
    char r1[9], r2[9];
    assert_int_equal(kube_revision(spec, r1), 0);
    json_object_set_new(c0, "image", json_string("run:10"));
    assert_int_equal(kube_revision(spec, r2), 0);
    assert_string_equal(r1, r2);

    json_decref(live);
    json_decref(p);
    json_decref(mspec);
    json_decref(tpl);
    json_decref(env);
    mf_set_free(set);
}

static void events(void **state)
{
    (void)state;
    json_t *e = kube_event_body("SandboxPool", "default", "p", "u", "Warning", "FailedCreate",
                                "no image", 0);
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "reason")), "FailedCreate");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(e, "involvedObject"), "apiVersion")),
        KUBE_CR_API_VERSION);
    json_decref(e);
    json_t *sp = jparse("{\"runtimes\":[{\"name\":\"other\",\"port\":1},"
                        "{\"name\":\"envd\",\"port\":40000}]}");
    assert_int_equal(kube_envd_port(sp), 40000);
    json_decref(sp);
    sp = jparse("{\"runtimes\":[{\"name\":\"envd\",\"port\":70000}]}");
    assert_int_equal(kube_envd_port(sp), KUBE_ENVD_PORT); /* out of range: the default */
    json_decref(sp);
    assert_int_equal(kube_envd_port(NULL), KUBE_ENVD_PORT);
    assert_int_equal(kube_phase_parse("running"), KUBE_PH_RUNNING);
    assert_int_equal(kube_phase_parse("bogus"), KUBE_PH_NONE);
    assert_string_equal(kube_phase_name(KUBE_PH_STOPPING), "stopping");
}

static void env_status(void **state)
{
    (void)state;
    struct kube_member_obs m[2];
    memset(m, 0, sizeof(m));
    snprintf(m[0].name, sizeof(m[0].name), "e-1c2gi");
    snprintf(m[0].scaling_group, sizeof(m[0].scaling_group), "1c2gi");
    m[0].present = true;
    m[0].desired = m[0].current = 2;
    m[0].idle = 1;
    m[0].running = 1;
    snprintf(m[1].name, sizeof(m[1].name), "e-2c4gi");
    m[1].desired = 1;
    json_t *prev =
        jparse("{\"clusters\":[{\"clusterID\":\"beta\",\"isLocal\":false,"
               "\"observedMembers\":[{\"name\":\"e-1c2gi\"}]},"
               "{\"clusterID\":\"alpha\",\"isLocal\":true,"
               "\"lastSnapshotTime\":\"2026-01-01T00:00:00Z\",\"observedMembers\":[]}]}");
    json_t *st = kube_env_status(prev, "alpha", m, 2, 5000);
    json_t *cl = json_object_get(st, "clusters");
    assert_int_equal(json_array_size(cl), 2);
    /* beta's segment is beta's: kept as it was */
    assert_string_equal(json_string_value(json_object_get(json_array_get(cl, 0), "clusterID")),
                        "beta");
    json_t *mine = json_array_get(cl, 1);
    assert_true(json_is_true(json_object_get(mine, "isLocal")));
    json_t *obs = json_object_get(mine, "observedMembers");
    assert_string_equal(json_string_value(json_object_get(json_array_get(obs, 0), "state")),
                        "Active");
    assert_string_equal(json_string_value(json_object_get(json_array_get(obs, 1), "state")),
                        "Missing");
    assert_int_equal(json_integer_value(json_object_get(st, "memberCount")), 3);
    assert_int_equal(json_integer_value(json_object_get(st, "desiredReplicas")), 3);
    assert_int_equal(json_integer_value(json_object_get(st, "idleReplicas")), 1);
    json_t *ready = json_array_get(json_object_get(st, "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(ready, "status")), "False");
    assert_true(kube_status_differs(prev, st));
    /* observed again later, nothing moved: the snapshot time stays, no write */
    json_t *again = kube_env_status(st, "alpha", m, 2, 999999);
    assert_false(kube_status_differs(st, again));
    assert_true(json_equal(st, again));
    json_decref(again);
    json_decref(st);
    json_decref(prev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(revision_rules), cmocka_unit_test(max_unavailable),
        cmocka_unit_test(scale_up),       cmocka_unit_test(scale_down),
        cmocka_unit_test(roll),           cmocka_unit_test(dead_and_deleting),
        cmocka_unit_test(status_numbers), cmocka_unit_test(pod_body),
        cmocka_unit_test(member_pool),    cmocka_unit_test(events),
        cmocka_unit_test(env_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
