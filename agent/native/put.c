/* The whole-object rules of reference §4.4 (see put.h). The messages are
 * the API's: each names the field and, for an immutable one, the value in
 * force, so a caller can fix the request without reading the object first. */
#include "agent/native/put.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_VERSION "agents.navix.sh/v1alpha1"

/* A value as compact JSON for a message (cut at 160 bytes). */
static void show(const json_t *v, char *out, size_t len)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS) : NULL;
    snprintf(out, len, "%.160s", s ? s : "null");
    free(s);
}

/* The first key of obj not in allowed (NULL-terminated), or NULL. */
static const char *unknown_key(const json_t *obj, const char *const *allowed)
{
    const char *k;
    json_t *v;

    json_object_foreach((json_t *)obj, k, v)
    {
        size_t i;
        for (i = 0; allowed[i]; i++)
            if (!strcmp(k, allowed[i]))
                break;
        if (!allowed[i])
            return k;
        (void)v;
    }
    return NULL;
}

static json_t *obj_or_empty(const json_t *v)
{
    return json_is_object(v) ? json_deep_copy(v) : json_object();
}

json_t *native_env_editable(const json_t *env, bool pull_secret)
{
    const json_t *spec = json_object_get(env, "spec");
    const json_t *meta = json_object_get(env, "metadata");
    const json_t *mode = json_object_get(spec, "mode");
    json_t *ov = obj_or_empty(json_object_get(spec, "overrides"));
    json_t *ref = obj_or_empty(json_object_get(spec, "templateRef"));

    /* write-only: a seed file may carry it inline, the API never shows it */
    if (json_object_get(ov, "imagePullSecret"))
        pull_secret = true;
    json_object_del(ov, "imagePullSecret");
    json_object_del(ov, "imagePullSecretConfigured");
    if (pull_secret)
        json_object_set_new(ov, "imagePullSecretConfigured", json_true());
    return json_pack("{s:o,s:s,s:o,s:o,s:o}", "templateRef", ref, "mode",
                     json_is_string(mode) ? json_string_value(mode) : "WarmPool", "overrides", ov,
                     "labels", obj_or_empty(json_object_get(meta, "labels")), "annotations",
                     obj_or_empty(json_object_get(meta, "annotations")));
}

/* {registries:[{registry, username, password}]} (reference §4.4). */
static int check_pull_secret(const json_t *v, char *err, size_t errlen)
{
    const json_t *regs = json_object_get(v, "registries");
    static const char *const keys[] = {"registries", NULL};
    static const char *const rkeys[] = {"registry", "username", "password", NULL};
    const char *bad;
    size_t i;
    json_t *r;

    if (!json_is_object(v) || !json_is_array(regs) || json_array_size(regs) == 0) {
        snprintf(err, errlen,
                 "overrides.imagePullSecret must be {\"registries\": [{\"registry\", "
                 "\"username\", \"password\"}]} with at least one registry");
        return AB_EINVAL;
    }
    if ((bad = unknown_key(v, keys))) {
        snprintf(err, errlen, "overrides.imagePullSecret: unknown field '%.60s'", bad);
        return AB_EINVAL;
    }
    json_array_foreach(regs, i, r)
    {
        if (!json_is_object(r) || (bad = unknown_key(r, rkeys))) {
            snprintf(err, errlen, "overrides.imagePullSecret.registries[%zu]: %s%.60s%s", i,
                     json_is_object(r) ? "unknown field '" : "must be an object",
                     json_is_object(r) ? bad : "", json_is_object(r) ? "'" : "");
            return AB_EINVAL;
        }
        for (int k = 0; rkeys[k]; k++) {
            const char *s = json_string_value(json_object_get(r, rkeys[k]));
            if (!s || !s[0]) {
                snprintf(err, errlen,
                         "overrides.imagePullSecret.registries[%zu].%s is required (a string)", i,
                         rkeys[k]);
                return AB_EINVAL;
            }
        }
    }
    return 0;
}

/* The stored overrides of a write and what it does to the secret:
 * imagePullSecret present → replaced; else imagePullSecretConfigured true →
 * kept; else removed. Neither flag is stored. */
static int split_overrides(const json_t *in, const json_t *old_overrides, json_t **out,
                           struct native_secret *sec, char *err, size_t errlen)
{
    json_t *ov, *ips, *flag;
    int rc;

    *out = NULL;
    sec->op = RT_SECRET_DELETE;
    sec->value = NULL;
    if (in && !json_is_object(in)) {
        snprintf(err, errlen, "overrides must be an object ({} clears every override)");
        return AB_EINVAL;
    }
    ov = obj_or_empty(in);
    ips = json_object_get(ov, "imagePullSecret");
    flag = json_object_get(ov, "imagePullSecretConfigured");
    if (flag && !json_is_boolean(flag)) {
        json_decref(ov);
        snprintf(err, errlen, "overrides.imagePullSecretConfigured must be true or false");
        return AB_EINVAL;
    }
    if (ips) {
        if ((rc = check_pull_secret(ips, err, errlen)) != 0) {
            json_decref(ov);
            return rc;
        }
        sec->op = RT_SECRET_SET;
        sec->value = json_incref(ips);
    } else if (json_is_true(flag)) {
        sec->op = RT_SECRET_KEEP;
        /* a seed's inline secret is kept where it is */
        json_t *old = json_object_get(old_overrides, "imagePullSecret");
        if (old)
            json_object_set(ov, "imagePullSecret", old);
    }
    if (sec->op == RT_SECRET_SET)
        json_object_del(ov, "imagePullSecret"); /* kept by the runtime, not in the manifest */
    json_object_del(ov, "imagePullSecretConfigured");
    *out = ov;
    return 0;
}

static const char *const EDITABLE_KEYS[] = {"templateRef", "mode",        "overrides",
                                            "labels",      "annotations", NULL};

int native_env_create(const char *ns, const json_t *body, json_t **out, struct native_secret *sec,
                      char *err, size_t errlen)
{
    static const char *const keys[] = {"name",   "templateRef", "mode", "overrides",
                                       "labels", "annotations", NULL};
    const char *bad, *name;
    json_t *ref, *ov = NULL, *spec, *meta;
    int rc;

    *out = NULL;
    sec->op = RT_SECRET_DELETE;
    sec->value = NULL;
    if (!json_is_object(body)) {
        snprintf(err, errlen,
                 "request body must be a JSON object such as {\"name\": \"demo\", "
                 "\"templateRef\": {\"name\": \"base\"}}");
        return AB_EINVAL;
    }
    if ((bad = unknown_key(body, keys))) {
        snprintf(err, errlen,
                 "unknown field '%.60s': an env is created from name, templateRef, mode, "
                 "overrides, labels and annotations",
                 bad);
        return AB_EINVAL;
    }
    if (!(name = json_string_value(json_object_get(body, "name"))) || !name[0]) {
        snprintf(err, errlen, "name is required");
        return AB_EINVAL;
    }
    ref = json_object_get(body, "templateRef");
    if (json_is_string(ref))
        ref = json_pack("{s:s}", "name", json_string_value(ref)); /* the short form */
    else if (json_is_object(ref) && json_is_string(json_object_get(ref, "name")))
        ref = json_deep_copy(ref);
    else {
        snprintf(err, errlen, "templateRef is required: {\"name\": \"<template>\"}");
        return AB_EINVAL;
    }
    if ((rc = split_overrides(json_object_get(body, "overrides"), NULL, &ov, sec, err, errlen)) !=
        0) {
        json_decref(ref);
        return rc;
    }
    if (sec->op == RT_SECRET_KEEP)
        sec->op = RT_SECRET_DELETE; /* nothing to keep on a new env */
    spec = json_pack("{s:o}", "templateRef", ref);
    if (json_object_get(body, "mode"))
        json_object_set(spec, "mode", json_object_get(body, "mode"));
    if (json_object_size(ov) > 0)
        json_object_set(spec, "overrides", ov);
    json_decref(ov);
    meta = json_pack("{s:s,s:s}", "name", name, "namespace", ns);
    if (json_object_get(body, "labels"))
        json_object_set(meta, "labels", json_object_get(body, "labels"));
    if (json_object_get(body, "annotations"))
        json_object_set(meta, "annotations", json_object_get(body, "annotations"));
    *out = json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", API_VERSION, "kind", "SandboxEnv",
                     "metadata", meta, "spec", spec);
    return *out ? 0 : AB_ENOMEM;
}

int native_env_put(const json_t *env, bool pull_secret, const json_t *body, json_t **out,
                   struct native_secret *sec, char *err, size_t errlen)
{
    static const char *const immutable[] = {"templateRef", "mode", "labels", "annotations"};
    json_t *cur, *ov = NULL, *spec, *next;
    const char *bad;
    char shown[200];
    int rc;

    *out = NULL;
    sec->op = RT_SECRET_DELETE;
    sec->value = NULL;
    if (!json_is_object(body)) {
        snprintf(err, errlen,
                 "request body must be the env's editable object (GET it: "
                 "{templateRef, mode, overrides, labels, annotations})");
        return AB_EINVAL;
    }
    if ((bad = unknown_key(body, EDITABLE_KEYS))) {
        snprintf(err, errlen,
                 "unknown field '%.60s': PUT takes templateRef, mode, overrides, labels and "
                 "annotations (the editable object)",
                 bad);
        return AB_EINVAL;
    }
    cur = native_env_editable(env, pull_secret);
    for (size_t i = 0; i < AB_ARRAY_LEN(immutable); i++) {
        const json_t *want = json_object_get(cur, immutable[i]);
        const json_t *got = json_object_get(body, immutable[i]);
        if (!got || !json_equal((json_t *)want, (json_t *)got)) {
            show(want, shown, sizeof(shown));
            snprintf(err, errlen, "field '%s' is immutable: send back the value in force, %s%s",
                     immutable[i], shown, got ? "" : " (it was omitted)");
            json_decref(cur);
            return AB_EINVAL;
        }
    }
    json_decref(cur);
    spec = json_object_get(env, "spec");
    if ((rc = split_overrides(json_object_get(body, "overrides"),
                              json_object_get(spec, "overrides"), &ov, sec, err, errlen)) != 0)
        return rc;
    if (sec->op == RT_SECRET_KEEP && !pull_secret &&
        !json_object_get(json_object_get(json_object_get(env, "spec"), "overrides"),
                         "imagePullSecret"))
        sec->op = RT_SECRET_DELETE; /* the flag echoed for a secret that is not there */
    next = json_deep_copy(env);
    spec = json_object_get(next, "spec");
    /* replaced wholesale: whatever the body's overrides omit is gone */
    if (json_object_size(ov) > 0)
        json_object_set(spec, "overrides", ov);
    else
        json_object_del(spec, "overrides");
    json_decref(ov);
    json_object_del(next, "status");
    *out = next;
    return 0;
}

/* ---- members ----------------------------------------------------------------------------- */

/* cluster's segment of env (borrowed); created when create is set. */
static json_t *segment(json_t *env, const char *cluster, bool create)
{
    json_t *spec = json_object_get(env, "spec"), *clusters, *c, *seg;
    size_t i;

    clusters = json_object_get(spec, "clusters");
    json_array_foreach(clusters, i, c)
    {
        const char *id = json_string_value(json_object_get(c, "clusterID"));
        if (id && !strcmp(id, cluster))
            return c;
    }
    if (!create)
        return NULL;
    if (!json_is_array(clusters)) {
        clusters = json_array();
        json_object_set_new(spec, "clusters", clusters);
    }
    seg = json_pack("{s:s,s:[]}", "clusterID", cluster, "members");
    json_array_append_new(clusters, seg);
    return seg;
}

json_t *native_env_member(const json_t *env, const char *cluster, const char *pool)
{
    json_t *seg = segment((json_t *)env, cluster, false), *m;
    size_t i;

    json_array_foreach(json_object_get(seg, "members"), i, m)
    {
        const char *n = json_string_value(json_object_get(m, "name"));
        if (n && !strcmp(n, pool))
            return m;
    }
    return NULL;
}

const char *native_member_group(const json_t *member, const char *env, char *buf, size_t len)
{
    const char *g =
        json_string_value(json_object_get(json_object_get(member, "config"), "scalingGroup"));
    const char *n = json_string_value(json_object_get(member, "name"));
    size_t el = strlen(env);

    if (g)
        return g;
    /* the resource key: the name is <env>-<key> */
    if (n && !strncmp(n, env, el) && n[el] == '-')
        snprintf(buf, len, "%s", n + el + 1);
    else
        snprintf(buf, len, "%s", "");
    return buf;
}

json_t *native_env_group(const json_t *env, const char *group)
{
    json_t *groups =
        json_object_get(json_object_get(json_object_get(env, "spec"), "autoscaling"), "groups");
    json_t *g;
    size_t i;

    json_array_foreach(groups, i, g)
    {
        const char *n = json_string_value(json_object_get(g, "name"));
        if (n && !strcmp(n, group))
            return g;
    }
    return NULL;
}

/* Whether any member of any cluster declares group g. */
static bool group_used(const json_t *env, const char *group)
{
    const char *name = json_string_value(json_object_get(json_object_get(env, "metadata"), "name"));
    json_t *clusters = json_object_get(json_object_get(env, "spec"), "clusters"), *c, *m;
    char buf[128];
    size_t i, j;

    json_array_foreach(clusters, i, c)
    {
        json_array_foreach(json_object_get(c, "members"), j, m)
        {
            if (!strcmp(native_member_group(m, name ? name : "", buf, sizeof(buf)), group))
                return true;
        }
    }
    return false;
}

/* Drops the policy entries no member declares (groups are garbage-collected
 * when the last member leaves, reference §4.3). */
static void gc_groups(json_t *env)
{
    json_t *as = json_object_get(json_object_get(env, "spec"), "autoscaling");
    json_t *groups = json_object_get(as, "groups");

    for (size_t i = 0; i < json_array_size(groups);) {
        const char *n = json_string_value(json_object_get(json_array_get(groups, i), "name"));
        if (n && !group_used(env, n))
            json_array_remove(groups, i);
        else
            i++;
    }
}

int native_pool_add(const json_t *env, const char *cluster, const json_t *body, json_t **out,
                    char *err, size_t errlen)
{
    static const char *const keys[] = {"name", "config", "replicas", NULL};
    const json_t *cfg = json_object_get(body, "config"), *rep = json_object_get(body, "replicas");
    json_t *next, *seg, *m;
    const char *bad;

    *out = NULL;
    if (!json_is_object(body)) {
        snprintf(err, errlen,
                 "request body must be a member such as {\"config\": {\"inlineResources\": "
                 "{\"requests\": {\"cpu\": \"1\", \"memory\": \"2Gi\"}}}, \"replicas\": 1}");
        return AB_EINVAL;
    }
    if ((bad = unknown_key(body, keys))) {
        snprintf(err, errlen, "unknown field '%.60s': a member is {name?, config, replicas?}", bad);
        return AB_EINVAL;
    }
    if (!json_is_object(cfg)) {
        snprintf(err, errlen,
                 "config is required: one of instanceType or inlineResources must be "
                 "supplied");
        return AB_EINVAL;
    }
    if (rep && (!json_is_integer(rep) || json_integer_value(rep) < 0)) {
        snprintf(err, errlen, "replicas must be a non-negative integer");
        return AB_EINVAL;
    }
    next = json_deep_copy(env);
    json_object_del(next, "status");
    seg = segment(next, cluster, true);
    if (!json_is_array(json_object_get(seg, "members")))
        json_object_set_new(seg, "members", json_array());
    m = json_pack("{s:O}", "config", cfg);
    if (json_object_get(body, "name"))
        json_object_set(m, "name", json_object_get(body, "name"));
    if (rep)
        json_object_set_new(m, "spec", json_pack("{s:O}", "replicas", rep));
    json_array_append_new(json_object_get(seg, "members"), m);
    *out = next;
    return 0;
}

int native_pool_put(const json_t *env, const char *cluster, const char *pool, const json_t *body,
                    json_t **out, char *err, size_t errlen)
{
    static const char *const keys[] = {"replicas",       "minReplicas", "maxReplicas",
                                       "updateStrategy", "name",        "scalingGroup",
                                       "instanceType",   "multiplier",  "inlineResources",
                                       "labels",         "annotations", NULL};
    static const char *const immutable[] = {"scalingGroup",    "instanceType", "multiplier",
                                            "inlineResources", "labels",       "annotations"};
    static const char *const counts[] = {"replicas", "minReplicas", "maxReplicas"};
    const char *envname =
        json_string_value(json_object_get(json_object_get(env, "metadata"), "name"));
    json_t *next, *m, *cfg, *spec, *g;
    const char *bad, *group;
    char buf[128], shown[200];

    *out = NULL;
    if (!json_is_object(body)) {
        snprintf(err, errlen, "request body must be an object such as {\"replicas\": 2}");
        return AB_EINVAL;
    }
    if ((bad = unknown_key(body, keys))) {
        snprintf(err, errlen,
                 "unknown field '%.60s': a pool's PUT takes replicas, minReplicas, maxReplicas "
                 "and updateStrategy",
                 bad);
        return AB_EINVAL;
    }
    if (!(m = native_env_member(env, cluster, pool))) {
        snprintf(err, errlen, "pool '%s' is not a member of env '%s' on cluster '%s'", pool,
                 envname ? envname : "", cluster);
        return AB_ENOENT;
    }
    cfg = json_object_get(m, "config");
    if (json_object_get(body, "name") &&
        !json_equal(json_object_get(body, "name"), json_object_get(m, "name"))) {
        snprintf(err, errlen, "field 'name' is immutable: the value in force is \"%s\"", pool);
        return AB_EINVAL;
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(immutable); i++) {
        json_t *got = json_object_get(body, immutable[i]);
        json_t *want = json_object_get(cfg, immutable[i]);
        if (got && !json_equal(got, want)) {
            show(want, shown, sizeof(shown));
            snprintf(err, errlen, "field '%s' is immutable: the value in force is %s", immutable[i],
                     shown);
            return AB_EINVAL;
        }
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(counts); i++) {
        json_t *v = json_object_get(body, counts[i]);
        if (v && (!json_is_integer(v) || json_integer_value(v) < 0)) {
            snprintf(err, errlen, "%s must be a non-negative integer", counts[i]);
            return AB_EINVAL;
        }
    }
    group = native_member_group(m, envname ? envname : "", buf, sizeof(buf));
    g = native_env_group(env, group);
    if (json_object_get(body, "replicas") && g && json_is_true(json_object_get(g, "enabled"))) {
        snprintf(err, errlen,
                 "replicas of pool '%s' belongs to the autoscaler: scaling group '%s' has "
                 "autoscaling enabled; set minReplicas and maxReplicas instead",
                 pool, group);
        return AB_EINVAL;
    }
    next = json_deep_copy(env);
    json_object_del(next, "status");
    m = native_env_member(next, cluster, pool);
    if (!json_is_object(json_object_get(m, "config")))
        json_object_set_new(m, "config", json_object());
    cfg = json_object_get(m, "config");
    /* desired state for the four fields: omitted ones are removed */
    static const char *const cfg_fields[] = {"minReplicas", "maxReplicas", "updateStrategy"};
    for (size_t i = 0; i < AB_ARRAY_LEN(cfg_fields); i++) {
        json_t *v = json_object_get(body, cfg_fields[i]);
        if (v)
            json_object_set(cfg, cfg_fields[i], v);
        else
            json_object_del(cfg, cfg_fields[i]);
    }
    spec = json_object_get(m, "spec");
    if (json_object_get(body, "replicas")) {
        if (!json_is_object(spec)) {
            spec = json_object();
            json_object_set_new(m, "spec", spec);
        }
        json_object_set(spec, "replicas", json_object_get(body, "replicas"));
    } else if (json_is_object(spec)) {
        json_object_del(spec, "replicas");
        if (json_object_size(spec) == 0)
            json_object_del(m, "spec"); /* sized by minReplicas then */
        else {
            json_decref(next);
            snprintf(err, errlen,
                     "replicas is required for pool '%s': its member spec sets other fields", pool);
            return AB_EINVAL;
        }
    }
    *out = next;
    return 0;
}

int native_pool_delete(const json_t *env, const char *cluster, const char *pool, json_t **out,
                       char *err, size_t errlen)
{
    json_t *next, *members;
    size_t i;

    *out = NULL;
    if (!native_env_member(env, cluster, pool)) {
        snprintf(err, errlen, "pool '%s' is not a member of this env on cluster '%s'", pool,
                 cluster);
        return AB_ENOENT;
    }
    next = json_deep_copy(env);
    json_object_del(next, "status");
    members = json_object_get(segment(next, cluster, false), "members");
    for (i = 0; i < json_array_size(members); i++) {
        const char *n = json_string_value(json_object_get(json_array_get(members, i), "name"));
        if (n && !strcmp(n, pool)) {
            json_array_remove(members, i);
            break;
        }
    }
    gc_groups(next);
    *out = next;
    return 0;
}

/* ---- groups ------------------------------------------------------------------------------ */

int native_group_put(const json_t *env, const char *group, const json_t *body, json_t **out,
                     char *err, size_t errlen)
{
    static const char *const keys[] = {
        "name", "enabled", "minReplicas", "maxReplicas", "scaleUpPolicy", "scaleDownPolicy", NULL};
    json_t *next, *spec, *as, *groups, *entry;
    const char *bad, *name;
    size_t i;

    *out = NULL;
    if (!json_is_object(body)) {
        snprintf(err, errlen,
                 "request body must be the group's desired state such as {\"enabled\": true, "
                 "\"minReplicas\": 0, \"maxReplicas\": 4}");
        return AB_EINVAL;
    }
    if ((bad = unknown_key(body, keys))) {
        snprintf(err, errlen,
                 "unknown field '%.60s': a group is {enabled, minReplicas, maxReplicas, "
                 "scaleUpPolicy, scaleDownPolicy}",
                 bad);
        return AB_EINVAL;
    }
    name = json_string_value(json_object_get(body, "name"));
    if (json_object_get(body, "name") && (!name || strcmp(name, group) != 0)) {
        snprintf(err, errlen, "field 'name' is immutable: the value in force is \"%s\"", group);
        return AB_EINVAL;
    }
    if (!group_used(env, group)) {
        snprintf(err, errlen,
                 "scaling group '%s' is declared by no member of this env: groups appear when a "
                 "member declares them",
                 group);
        return AB_ENOENT;
    }
    next = json_deep_copy(env);
    json_object_del(next, "status");
    spec = json_object_get(next, "spec");
    if (!json_is_object(as = json_object_get(spec, "autoscaling"))) {
        as = json_object();
        json_object_set_new(spec, "autoscaling", as);
    }
    if (!json_is_array(groups = json_object_get(as, "groups"))) {
        groups = json_array();
        json_object_set_new(as, "groups", groups);
    }
    /* desired state: the entry is the body, nothing of the old one survives */
    entry = json_deep_copy(body);
    json_object_set_new(entry, "name", json_string(group));
    for (i = 0; i < json_array_size(groups); i++) {
        const char *n = json_string_value(json_object_get(json_array_get(groups, i), "name"));
        if (n && !strcmp(n, group))
            break;
    }
    if (i < json_array_size(groups))
        json_array_set_new(groups, i, entry);
    else
        json_array_append_new(groups, entry);
    *out = next;
    return 0;
}

int native_group_delete(const json_t *env, const char *group, json_t **out, char *err,
                        size_t errlen)
{
    json_t *next, *groups;

    *out = NULL;
    if (!native_env_group(env, group)) {
        snprintf(err, errlen, "scaling group '%s' has no policy in this env", group);
        return AB_ENOENT;
    }
    next = json_deep_copy(env);
    json_object_del(next, "status");
    groups =
        json_object_get(json_object_get(json_object_get(next, "spec"), "autoscaling"), "groups");
    for (size_t i = 0; i < json_array_size(groups); i++) {
        const char *n = json_string_value(json_object_get(json_array_get(groups, i), "name"));
        if (n && !strcmp(n, group)) {
            json_array_remove(groups, i);
            break;
        }
    }
    *out = next;
    return 0;
}
