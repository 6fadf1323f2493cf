/* Reconcile decisions of the kube runtime: pure functions over observed
 * objects (see reconcile.h). */
#include "agent/runtime/kube/reconcile.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agent/runtime/kube/client.h"
#include "agent/runtime/revision.h"

static const char *const PHASES[] = {"", "idle", "starting", "running", "stopping", "failed"};

const char *kube_phase_name(enum kube_phase p)
{
    return (unsigned)p < AB_ARRAY_LEN(PHASES) ? PHASES[p] : "";
}

enum kube_phase kube_phase_parse(const char *s)
{
    for (size_t i = 1; s && i < AB_ARRAY_LEN(PHASES); i++)
        if (strcmp(s, PHASES[i]) == 0)
            return (enum kube_phase)i;
    return KUBE_PH_NONE;
}

static void copy_str(char *dst, size_t n, const json_t *v)
{
    const char *s = json_string_value(v);
    snprintf(dst, n, "%s", s ? s : "");
}

static const json_t *path2(const json_t *o, const char *a, const char *b)
{
    return json_object_get(json_object_get(o, a), b);
}

int kube_pod_observe(const json_t *pod, struct kube_pod *out, char *err, size_t errlen)
{
    const json_t *md = json_object_get(pod, "metadata");
    const json_t *labels = json_object_get(md, "labels");
    const json_t *st = json_object_get(pod, "status"), *v;
    size_t i;

    memset(out, 0, sizeof(*out));
    if (!json_is_string(json_object_get(md, "name")) ||
        !json_is_string(json_object_get(md, "namespace"))) {
        snprintf(err, errlen, "Pod without metadata.name or metadata.namespace");
        return AB_EINVAL;
    }
    copy_str(out->ns, sizeof(out->ns), json_object_get(md, "namespace"));
    copy_str(out->name, sizeof(out->name), json_object_get(md, "name"));
    copy_str(out->uid, sizeof(out->uid), json_object_get(md, "uid"));
    copy_str(out->rv, sizeof(out->rv), json_object_get(md, "resourceVersion"));
    copy_str(out->pool, sizeof(out->pool), json_object_get(labels, KUBE_L_POOL));
    copy_str(out->revision, sizeof(out->revision), json_object_get(labels, KUBE_L_HASH));
    copy_str(out->sandbox_id, sizeof(out->sandbox_id), json_object_get(labels, KUBE_L_SANDBOX));
    out->phase = kube_phase_parse(json_string_value(json_object_get(labels, KUBE_L_PHASE)));
    out->deleting = json_object_get(md, "deletionTimestamp") != NULL &&
                    !json_is_null(json_object_get(md, "deletionTimestamp"));
    json_array_foreach(json_object_get(md, "finalizers"), i,
                       v) if (json_is_string(v) && strcmp(json_string_value(v), KUBE_FINALIZER) ==
                                                       0) out->finalizer = true;
    v = json_object_get(md, "creationTimestamp");
    if (json_is_string(v))
        (void)kube_time_parse(json_string_value(v), &out->created_ms);
    const json_t *c0 = json_array_get(path2(pod, "spec", "containers"), 0);
    copy_str(out->image, sizeof(out->image), json_object_get(c0, "image"));

    const char *ph = json_string_value(json_object_get(st, "phase"));
    out->dead = ph && (strcmp(ph, "Failed") == 0 || strcmp(ph, "Succeeded") == 0);
    copy_str(out->ip, sizeof(out->ip), json_object_get(st, "podIP"));
    json_array_foreach(json_object_get(st, "conditions"), i, v)
    {
        const char *t = json_string_value(json_object_get(v, "type"));
        const char *s = json_string_value(json_object_get(v, "status"));
        if (t && s && strcmp(t, "Ready") == 0)
            out->ready = strcmp(s, "True") == 0;
    }
    /* The main container's status, by name (statuses are not in spec order). */
    const char *c0name = json_string_value(json_object_get(c0, "name"));
    json_array_foreach(json_object_get(st, "containerStatuses"), i, v)
    {
        const char *n = json_string_value(json_object_get(v, "name"));
        if (!c0name || !n || strcmp(n, c0name) != 0)
            continue;
        copy_str(out->status_image, sizeof(out->status_image), json_object_get(v, "image"));
        out->running = path2(v, "state", "running") != NULL;
        const json_t *w = path2(v, "state", "waiting");
        copy_str(out->waiting_reason, sizeof(out->waiting_reason), json_object_get(w, "reason"));
        copy_str(out->waiting_message, sizeof(out->waiting_message), json_object_get(w, "message"));
        out->pull_failed = strcmp(out->waiting_reason, "ErrImagePull") == 0 ||
                           strcmp(out->waiting_reason, "ImagePullBackOff") == 0 ||
                           strcmp(out->waiting_reason, "InvalidImageName") == 0;
    }
    return 0;
}

/* --- revision ---------------------------------------------------------------- */

const char *kube_idle_image(const json_t *spec)
{
    const char *idle = json_string_value(json_object_get(spec, "idleImage"));
    if (idle && idle[0])
        return idle;
    const json_t *c0 =
        json_array_get(path2(json_object_get(spec, "template"), "spec", "containers"), 0);
    const char *img = json_string_value(json_object_get(c0, "image"));
    return img && img[0] ? img : NULL;
}

_Static_assert(KUBE_REV_LEN == RT_REV_LEN, "one revision length for every runtime");

/* The rules live in agent/runtime/revision.c: the local runtime rolls by them too. */
int kube_revision(const json_t *pool_spec, char out[KUBE_REV_LEN + 1])
{
    return rt_revision(pool_spec, out);
}

int kube_max_unavailable(const json_t *v, int replicas)
{
    return rt_max_unavailable(v, replicas);
}

int kube_envd_port(const json_t *spec)
{
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(spec, "runtimes"), i, r)
    {
        const char *n = json_string_value(json_object_get(r, "name"));
        json_int_t port = json_integer_value(json_object_get(r, "port"));
        if (n && strcmp(n, "envd") == 0 && port > 0 && port < 65536)
            return (int)port;
    }
    return KUBE_ENVD_PORT;
}

/* --- pool plan --------------------------------------------------------------------- */

/* The order idle Pods go in when there are too many: not Ready first, then
 * stale, then the newest (the oldest are the most likely warm and Ready). */
static int idle_rank(const struct kube_pod *p, const char *rev)
{
    return (p->ready ? 0 : 2) + (strcmp(p->revision, rev) != 0 ? 1 : 0);
}

static void plan_delete(struct kube_plan *out, int i, enum kube_delete_why why)
{
    if (out->ndelete < KUBE_PLAN_MAX) {
        out->del[out->ndelete] = i;
        out->why[out->ndelete++] = why;
    }
}

static bool planned(const struct kube_plan *out, int i)
{
    for (int k = 0; k < out->ndelete; k++)
        if (out->del[k] == i)
            return true;
    return false;
}

void kube_pool_plan(const struct kube_pool_input *in, const struct kube_pod *pods, int n,
                    struct kube_plan *out)
{
    struct kube_pool_counts *c = &out->counts;
    int i, live = 0, idle_ok = 0, unavailable = 0;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < n; i++) {
        const struct kube_pod *p = &pods[i];
        if (p->deleting) {
            if (p->finalizer && out->nunfinalize < KUBE_PLAN_MAX)
                out->unfinalize[out->nunfinalize++] = i;
            continue;
        }
        c->total++;
        if (strcmp(p->revision, in->revision) == 0)
            c->updated++;
        switch (p->phase) {
        case KUBE_PH_IDLE:
            c->idle++;
            if (!p->ready)
                c->unavailable_idle++;
            break;
        case KUBE_PH_STARTING:
            c->starting++;
            break;
        case KUBE_PH_RUNNING:
            c->running++;
            break;
        case KUBE_PH_STOPPING:
            c->stopping++;
            break;
        case KUBE_PH_FAILED:
            c->failed++;
            break;
        default:
            break;
        }
        /* A Pod that will not run again, or an idle one whose idle image
         * cannot be pulled, is replaced (a claim fails its own way). */
        if (p->dead || p->phase == KUBE_PH_FAILED || (p->phase == KUBE_PH_IDLE && p->pull_failed)) {
            plan_delete(out, i, KUBE_DEL_DEAD);
            continue;
        }
        live++;
        if (p->phase == KUBE_PH_IDLE) {
            if (p->ready)
                idle_ok++;
            else
                unavailable++;
        }
    }
    live += in->creating;
    unavailable += in->creating;

    int desired = in->deleting ? 0 : in->replicas;
    if (!in->deleting && !in->autoscaled && in->pending > idle_ok + in->creating)
        desired += in->pending - idle_ok - in->creating;
    if (in->max_replicas > 0 && desired > in->max_replicas)
        desired = AB_MAX(in->max_replicas, in->deleting ? 0 : in->replicas);
    if (desired < 0)
        desired = 0;

    if (live < desired) {
        out->create = desired - live;
        return; /* rolls wait until the pool is whole */
    }
    /* Too many: idle Pods go, worst first. Not while claims wait: the idle
     * Pod made for a waiting claim is Ready a moment before the claim takes
     * it, and then counts as serving it, so the pool looked one over;
     * deleted, made again, deleted, the claim never got one. Nor while a
     * create is unanswered: its Pod may be in `pods` already (the watch is
     * another connection and may be first) and in `creating` too. */
    bool hold = in->unanswered > 0 || (in->pending > 0 && !in->deleting);
    while (live > desired && !hold) {
        int best = -1, best_rank = -1;
        for (i = 0; i < n; i++) {
            const struct kube_pod *p = &pods[i];
            if (p->deleting || p->phase != KUBE_PH_IDLE || planned(out, i) || p->dead ||
                p->pull_failed)
                continue;
            int r = idle_rank(p, in->revision);
            if (r > best_rank || (r == best_rank && (p->created_ms > pods[best].created_ms ||
                                                     (p->created_ms == pods[best].created_ms &&
                                                      strcmp(p->name, pods[best].name) > 0)))) {
                best = i;
                best_rank = r;
            }
        }
        if (best < 0 || out->ndelete >= KUBE_PLAN_MAX)
            break; /* only claimed Pods left: they go back to idle first */
        if (!pods[best].ready)
            unavailable--;
        plan_delete(out, best, KUBE_DEL_SCALE);
        live--;
    }
    if (!in->auto_update || in->deleting)
        return;
    /* Roll: a stale idle Pod deleted is one unavailable until its
     * replacement is Ready; stale ones not Ready go first (free). */
    for (int pass = 0; pass < 2; pass++) {
        for (i = 0; i < n; i++) {
            const struct kube_pod *p = &pods[i];
            if (p->deleting || p->phase != KUBE_PH_IDLE || planned(out, i) ||
                strcmp(p->revision, in->revision) == 0 || p->ready != (pass == 1))
                continue;
            if (p->ready && unavailable >= in->max_unavailable)
                return;
            if (p->ready)
                unavailable++;
            plan_delete(out, i, KUBE_DEL_ROLL);
        }
    }
}

/* --- status ------------------------------------------------------------------------- */

static json_t *cond(const char *type, bool ok, const char *reason, const char *msg,
                    const json_t *prev, const char *now)
{
    const char *status = ok ? "True" : "False";
    const char *t = now;
    size_t i;
    const json_t *p;

    json_array_foreach(json_object_get(prev, "conditions"), i, p)
    {
        const char *pt = json_string_value(json_object_get(p, "type"));
        const char *ps = json_string_value(json_object_get(p, "status"));
        const char *pl = json_string_value(json_object_get(p, "lastTransitionTime"));
        if (pt && ps && pl && strcmp(pt, type) == 0 && strcmp(ps, status) == 0)
            t = pl;
    }
    return json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", type, "status", status, "reason", reason,
                     "message", msg, "lastTransitionTime", t);
}

json_t *kube_pool_status(const struct kube_pool_counts *c, int replicas, int pending,
                         const char *pool, const char *revision, bool deleting, const json_t *prev,
                         int64_t now_ms)
{
    char now[32], sel[256], msg[160];
    const char *phase;
    static const char *const PH[] = {"idle", "running", "starting", "stopping", "failed"};

    kube_time_format(now_ms, false, now);
    if (deleting)
        phase = "Terminating";
    else if (replicas == 0 && c->total == 0)
        phase = "Pending";
    else if (c->total < replicas)
        phase = "ScalingUp";
    else if (c->total > replicas)
        phase = "ScalingDown";
    else if (c->unavailable_idle > 0 || c->failed > 0)
        phase = "Degraded";
    else
        phase = "Ready";
    snprintf(sel, sizeof(sel), "%s=%s", KUBE_L_POOL, pool);
    json_t *ps = json_object();
    json_object_set_new(ps, "all", json_string(sel));
    for (size_t i = 0; i < AB_ARRAY_LEN(PH); i++) {
        char s[320];
        snprintf(s, sizeof(s), "%s,%s=%s", sel, KUBE_L_PHASE, PH[i]);
        json_object_set_new(ps, PH[i], json_string(s));
    }
    json_t *st =
        json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:i,s:s,s:{s:{s:s}},s:o}", "phase",
                  phase, "replicas", c->total, "idleReplicas", c->idle, "unavailableIdleReplicas",
                  c->unavailable_idle, "runningReplicas", c->running, "startingReplicas",
                  c->starting, "stoppingReplicas", c->stopping, "failedReplicas", c->failed,
                  "pendingRequests", pending, "updateRevision", revision, "currentRevision",
                  c->updated == c->total ? revision : "", "updatedReplicas", c->updated, "selector",
                  sel, "labelSelector", "matchLabels", KUBE_L_POOL, pool, "phaseSelectors", ps);
    if (!st)
        return NULL;
    json_t *conds = json_array();
    snprintf(msg, sizeof(msg), "%d idle Pods ready", c->idle - c->unavailable_idle);
    json_array_append_new(
        conds, cond("Available", c->idle - c->unavailable_idle > 0,
                    c->idle - c->unavailable_idle > 0 ? "IdlePodsAvailable" : "NoIdlePodsAvailable",
                    msg, prev, now));
    snprintf(msg, sizeof(msg), "%d of %d Pods", c->total, replicas);
    json_array_append_new(conds, cond("Scaling", c->total != replicas,
                                      c->total < replicas   ? "ScalingUp"
                                      : c->total > replicas ? "ScalingDown"
                                                            : "ReplicasReady",
                                      msg, prev, now));
    snprintf(msg, sizeof(msg), "%d idle Pods not ready, %d failed", c->unavailable_idle, c->failed);
    const char *dr = c->unavailable_idle && c->failed ? "UnhealthyAndFailedPods"
                     : c->unavailable_idle            ? "UnhealthyIdlePods"
                     : c->failed                      ? "FailedPodsPresent"
                                                      : "AllPodsHealthy";
    json_array_append_new(conds,
                          cond("Degraded", c->unavailable_idle || c->failed, dr, msg, prev, now));
    json_object_set_new(st, "conditions", conds);
    return st;
}

/* A copy without the times that move on their own. */
static void strip_times(json_t *v)
{
    const char *k;
    json_t *x;
    size_t i;
    if (json_is_object(v)) {
        json_object_del(v, "lastTransitionTime");
        json_object_del(v, "lastSnapshotTime");
        json_object_foreach(v, k, x) strip_times(x);
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x) strip_times(x);
    }
}

static json_t *status_key(const json_t *s)
{
    json_t *c = s ? json_deep_copy(s) : json_object();
    strip_times(c);
    return c;
}

bool kube_status_differs(const json_t *a, const json_t *b)
{
    json_t *x = status_key(a), *y = status_key(b);
    bool eq = json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return !eq;
}

/* --- bodies --------------------------------------------------------------------------- */

json_t *kube_pod_body(const char *pool, const char *pool_uid, const char *env,
                      const json_t *pool_spec, const char *revision, const json_t *res)
{
    const char *img = kube_idle_image(pool_spec);
    const json_t *tpl = json_object_get(pool_spec, "template");
    char gen[96];

    if (!img)
        return NULL;
    const json_t *tmd = json_object_get(tpl, "metadata"), *tsp = json_object_get(tpl, "spec");
    json_t *md = json_is_object(tmd) ? json_deep_copy(tmd) : json_object();
    json_t *spec = json_is_object(tsp) ? json_deep_copy(tsp) : json_object();
    json_t *pod = json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", "v1", "kind", "Pod", "metadata", md,
                            "spec", spec);
    if (!pod)
        return NULL;
    json_object_del(md, "name");
    json_object_del(md, "namespace");
    snprintf(gen, sizeof(gen), "%.60s-", pool);
    json_object_set_new(md, "generateName", json_string(gen));
    json_t *labels = json_child_object(md, "labels");
    json_object_set_new(labels, KUBE_L_POOL, json_string(pool));
    json_object_set_new(labels, KUBE_L_PHASE, json_string("idle"));
    json_object_set_new(labels, KUBE_L_MANAGED, json_string(KUBE_MANAGED_BY));
    json_object_set_new(labels, KUBE_L_HASH, json_string(revision));
    if (env && env[0])
        json_object_set_new(labels, KUBE_L_ENV, json_string(env));
    json_object_set_new(md, "finalizers", json_pack("[s]", KUBE_FINALIZER));
    if (pool_uid && pool_uid[0])
        json_object_set_new(md, "ownerReferences",
                            json_pack("[{s:s,s:s,s:s,s:s,s:b,s:b}]", "apiVersion",
                                      KUBE_CR_API_VERSION, "kind", "SandboxPool", "name", pool,
                                      "uid", pool_uid, "controller", 1, "blockOwnerDeletion", 1));
    json_t *containers = json_object_get(spec, "containers");
    if (!json_is_array(containers) || json_array_size(containers) == 0) {
        /* A template without a PodTemplateSpec (the quickstart's): one
         * container running the idle image with envd's port. */
        containers = json_pack("[{s:s,s:[{s:s,s:i}]}]", "name", "sandbox", "ports", "name", "envd",
                               "containerPort", kube_envd_port(pool_spec));
        json_object_set_new(spec, "containers", containers);
    }
    json_t *c0 = json_array_get(containers, 0);
    json_object_set_new(c0, "image", json_string(img));
    if (!json_is_string(json_object_get(c0, "name")))
        json_object_set_new(c0, "name", json_string("sandbox"));
    if (res && json_is_object(res))
        json_object_set_new(c0, "resources", json_deep_copy(res));
    /* In-place image swaps need the kubelet to restart the container, not
     * the Pod: Always keeps the Pod alive across the swap. */
    if (!json_is_string(json_object_get(spec, "restartPolicy")))
        json_object_set_new(spec, "restartPolicy", json_string("Always"));
    return pod;
}

static void quantity(char *out, size_t n, int64_t v, bool milli)
{
    if (milli && v % 1000 == 0)
        snprintf(out, n, "%" PRId64, v / 1000);
    else if (milli)
        snprintf(out, n, "%" PRId64 "m", v);
    else if (v % (1LL << 30) == 0)
        snprintf(out, n, "%" PRId64 "Gi", v >> 30);
    else if (v % (1LL << 20) == 0)
        snprintf(out, n, "%" PRId64 "Mi", v >> 20);
    else
        snprintf(out, n, "%" PRId64, v);
}

json_t *kube_member_pool(const json_t *env, const json_t *tpl, const char *member,
                         const char *scaling_group, int64_t cpu_milli, int64_t mem_bytes,
                         const json_t *member_spec)
{
    const json_t *emd = json_object_get(env, "metadata");
    const char *ename = json_string_value(json_object_get(emd, "name"));
    const char *ens = json_string_value(json_object_get(emd, "namespace"));
    const char *euid = json_string_value(json_object_get(emd, "uid"));
    const char *tname = json_string_value(path2(tpl, "metadata", "name"));
    const json_t *tspec = json_object_get(tpl, "spec");
    const json_t *ov = path2(env, "spec", "overrides");
    char cpu[32], mem[32];
    const char *k;
    json_t *v;

    if (!ename || !ens || !tname || !json_is_object(tspec))
        return NULL;
    json_t *spec = json_object();
    static const char *const EMBED[] = {"template", "idleImage", "runtimes"};
    for (size_t i = 0; i < AB_ARRAY_LEN(EMBED); i++)
        if ((v = json_object_get(tspec, EMBED[i])))
            json_object_set_new(spec, EMBED[i], json_deep_copy(v));
    json_object_foreach((json_t *)member_spec, k, v)
        json_object_set_new(spec, k, json_deep_copy(v));
    json_object_set_new(spec, "templateName", json_string(tname));
    if (!json_is_integer(json_object_get(spec, "replicas")))
        json_object_set_new(spec, "replicas", json_integer(0));
    static const char *const OV[] = {"podCreationImagePolicy", "defaultStartupTimeout",
                                     "defaultIdleTimeout"};
    for (size_t i = 0; i < AB_ARRAY_LEN(OV); i++)
        if ((v = json_object_get(ov, OV[i])))
            json_object_set_new(spec, OV[i], json_deep_copy(v));
    json_t *t = json_child_object(spec, "template");
    json_t *ts = json_child_object(t, "spec");
    json_t *cs = json_object_get(ts, "containers");
    if (!json_is_array(cs) || json_array_size(cs) == 0) {
        cs = json_pack("[{s:s,s:[{s:s,s:i}]}]", "name", "sandbox", "ports", "name", "envd",
                       "containerPort", kube_envd_port(tspec));
        json_object_set_new(ts, "containers", cs);
    }
    json_t *c0 = json_array_get(cs, 0);
    const char *oimg = json_string_value(json_object_get(ov, "image"));
    if (oimg && oimg[0])
        json_object_set_new(c0, "image", json_string(oimg));
    else if (!json_is_string(json_object_get(c0, "image")) &&
             json_is_string(json_object_get(tspec, "idleImage")))
        json_object_set_new(c0, "image", json_deep_copy(json_object_get(tspec, "idleImage")));
    if (!json_is_string(json_object_get(c0, "name")))
        json_object_set_new(c0, "name", json_string("sandbox"));
    /* Every Pod of a pool has the member's size: requests = limits. */
    json_t *rl = json_object();
    if (cpu_milli > 0) {
        quantity(cpu, sizeof(cpu), cpu_milli, true);
        json_object_set_new(rl, "cpu", json_string(cpu));
    }
    if (mem_bytes > 0) {
        quantity(mem, sizeof(mem), mem_bytes, false);
        json_object_set_new(rl, "memory", json_string(mem));
    }
    json_object_set_new(c0, "resources", json_pack("{s:O,s:O}", "requests", rl, "limits", rl));
    json_decref(rl);

    json_t *labels = json_pack("{s:s}", KUBE_L_ENV, ename);
    if (scaling_group && scaling_group[0])
        json_object_set_new(labels, KUBE_L_GROUP, json_string(scaling_group));
    json_t *md = json_pack("{s:s,s:s,s:o,s:{s:s}}", "name", member, "namespace", ens, "labels",
                           labels, "annotations", KUBE_A_TEMPLATE_NAME, tname);
    if (euid)
        json_object_set_new(md, "ownerReferences",
                            json_pack("[{s:s,s:s,s:s,s:s,s:b,s:b}]", "apiVersion",
                                      KUBE_CR_API_VERSION, "kind", "SandboxEnv", "name", ename,
                                      "uid", euid, "controller", 1, "blockOwnerDeletion", 1));
    return json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", KUBE_CR_API_VERSION, "kind", "SandboxPool",
                     "metadata", md, "spec", spec);
}

/* want's keys are all in have with equal values (have may hold more: the
 * server's defaults, others' labels). */
static bool covers(const json_t *have, const json_t *want)
{
    const char *k;
    json_t *v;
    if (!json_is_object(want))
        return json_equal(have, want);
    if (!json_is_object(have))
        return false;
    json_object_foreach((json_t *)want, k,
                        v) if (!covers(json_object_get(have, k), v)) return false;
    return true;
}

bool kube_pool_matches(const json_t *live, const json_t *want)
{
    const json_t *lm = json_object_get(live, "metadata"), *wm = json_object_get(want, "metadata");
    return covers(json_object_get(live, "spec"), json_object_get(want, "spec")) &&
           covers(json_object_get(lm, "labels"), json_object_get(wm, "labels")) &&
           covers(json_object_get(lm, "annotations"), json_object_get(wm, "annotations")) &&
           json_equal(json_object_get(lm, "ownerReferences"),
                      json_object_get(wm, "ownerReferences"));
}

json_t *kube_env_status(const json_t *prev, const char *cluster, const struct kube_member_obs *m,
                        int n, int64_t now_ms)
{
    char now[32];
    const json_t *c;
    size_t i;
    int members = 0, desired = 0, running = 0, idle = 0, active = 0;
    const char *snap = NULL;

    kube_time_format(now_ms, false, now);
    json_t *clusters = json_array();
    json_t *obs = json_array();
    for (int k = 0; k < n; k++) {
        json_array_append_new(
            obs, json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:i}", "name", m[k].name, "state",
                           m[k].present ? "Active" : "Missing", "idleCount", m[k].idle,
                           "runningCount", m[k].running, "desiredReplicas", m[k].desired,
                           "currentReplicas", m[k].current, "pendingRequests", m[k].pending,
                           "scalingGroup", m[k].scaling_group, "updateRevision", m[k].revision,
                           "updatedReplicas", m[k].updated));
        desired += m[k].desired;
        running += m[k].running;
        idle += m[k].idle;
        active += m[k].present;
    }
    json_array_foreach(json_object_get(prev, "clusters"), i, c)
    {
        const char *id = json_string_value(json_object_get(c, "clusterID"));
        if (id && strcmp(id, cluster) == 0) {
            snap = json_string_value(json_object_get(c, "lastSnapshotTime"));
            continue;
        }
        json_array_append_new(clusters, json_deep_copy(c));
        members += (int)json_array_size(json_object_get(c, "observedMembers"));
    }
    json_t *mine = json_pack("{s:s,s:b,s:s,s:o}", "clusterID", cluster, "isLocal", 1,
                             "lastSnapshotTime", now, "observedMembers", obs);
    json_array_append_new(clusters, mine);
    members += n;
    bool ok = active == n;
    char msg[96];
    snprintf(msg, sizeof(msg), "%d of %d members on cluster %.40s are active", active, n, cluster);
    json_t *st =
        json_pack("{s:o,s:i,s:i,s:i,s:i}", "clusters", clusters, "memberCount", members,
                  "desiredReplicas", desired, "runningReplicas", running, "idleReplicas", idle);
    json_object_set_new(
        st, "conditions",
        json_pack("[o]",
                  cond("Ready", ok, ok ? "AllMembersActive" : "MembersMissing", msg, prev, now)));
    /* The snapshot time moves only with the rest (no write per pass). */
    if (snap && !kube_status_differs(prev, st)) {
        json_t *last = json_array_get(clusters, json_array_size(clusters) - 1);
        json_object_set_new(last, "lastSnapshotTime", json_string(snap));
    }
    return st;
}

json_t *kube_event_body(const char *kind, const char *ns, const char *name, const char *uid,
                        const char *type, const char *reason, const char *message, int64_t now_ms)
{
    char t[32], gen[128];
    kube_time_format(now_ms, false, t);
    snprintf(gen, sizeof(gen), "%.100s.", name);
    return json_pack(
        "{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s},s:s,s:s,s:s,s:i,s:s,s:s,"
        "s:{s:s},s:s}",
        "apiVersion", "v1", "kind", "Event", "metadata", "generateName", gen, "namespace", ns,
        "involvedObject", "kind", kind, "namespace", ns, "name", name, "uid", uid ? uid : "",
        "apiVersion", strcmp(kind, "Pod") == 0 ? "v1" : KUBE_CR_API_VERSION, "reason", reason,
        "message", message, "type", type, "count", 1, "firstTimestamp", t, "lastTimestamp", t,
        "source", "component", "agentbox-agent", "reportingComponent", "agentbox-agent");
}
