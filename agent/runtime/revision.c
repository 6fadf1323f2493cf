/* The revision hash and maxUnavailable rule both runtimes roll by (see
 * revision.h). Moved here from the kube runtime's reconcile.c so the local
 * runtime hashes with the very same rules. */
#include "agent/runtime/revision.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"

static uint32_t fnv32a(const char *s, size_t n)
{
    uint32_t h = 0x811c9dc5u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x01000193u;
    }
    return h;
}

int rt_revision(const json_t *pool_spec, char out[RT_REV_LEN + 1])
{
    static const char *const ZEROED[] = {
        "replicas",           "minReplicas",    "maxReplicas",  "defaultStartupTimeout",
        "defaultIdleTimeout", "maxUnavailable", "templateName", "autoscaling",
        "updateStrategy"};
    json_t *s = pool_spec ? json_deep_copy(pool_spec) : json_object();
    char *text;

    if (!s || !json_is_object(s)) {
        json_decref(s);
        return AB_EINVAL;
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(ZEROED); i++)
        json_object_del(s, ZEROED[i]);
    const char *pol = json_string_value(json_object_get(s, "podCreationImagePolicy"));
    json_t *tpl = json_object_get(s, "template");
    json_t *c0 = json_array_get(json_object_get(json_object_get(tpl, "spec"), "containers"), 0);
    /* Under IdleImage the first container runs the idle image whatever the
     * template says, so the template's (running) image is not identity. */
    if ((!pol || strcmp(pol, "PoolDefaultImage") != 0) && json_is_object(c0)) {
        const char *idle = json_string_value(json_object_get(s, "idleImage"));
        if (idle && idle[0])
            json_object_set_new(c0, "image", json_string(idle));
    }
    json_object_del(json_object_get(json_object_get(tpl, "metadata"), "labels"), RT_REV_LABEL);
    text = json_dumps(s, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(s);
    if (!text)
        return AB_ENOMEM;
    snprintf(out, RT_REV_LEN + 1, "%08" PRIx32, fnv32a(text, strlen(text)));
    free(text);
    return 0;
}

int rt_max_unavailable(const json_t *v, int replicas)
{
    long n;

    if (json_is_integer(v))
        n = (long)json_integer_value(v);
    else {
        const char *s = json_is_string(v) ? json_string_value(v) : "20%";
        char *end;
        n = strtol(s, &end, 10);
        if (end != s && *end == '%' && end[1] == '\0')
            n = (long)replicas * n / 100;
        else if (end == s || *end)
            n = (long)replicas * 20 / 100;
    }
    return n < 1 ? 1 : (n > 1000000 ? 1000000 : (int)n);
}

const json_t *rt_env_member(const json_t *env, const char *cluster, const char *pool)
{
    const json_t *c, *m;
    size_t i, k;

    json_array_foreach(json_object_get(json_object_get(env, "spec"), "clusters"), i, c)
    {
        const char *id = json_string_value(json_object_get(c, "clusterID"));
        if (!id || strcmp(id, cluster) != 0)
            continue;
        json_array_foreach(json_object_get(c, "members"), k, m)
        {
            const char *n = json_string_value(json_object_get(m, "name"));
            if (n && strcmp(n, pool) == 0)
                return m;
        }
    }
    return NULL;
}

void rt_update_strategy(const json_t *env, const char *cluster, const char *pool,
                        const json_t *pool_spec, bool *auto_update, const json_t **max_unavailable)
{
    const json_t *mine, *envs, *au;

    if (!env) {
        *auto_update = true;
        *max_unavailable = json_object_get(pool_spec, "maxUnavailable");
        return;
    }
    mine = json_object_get(json_object_get(rt_env_member(env, cluster, pool), "config"),
                           "updateStrategy");
    envs = json_object_get(json_object_get(json_object_get(env, "spec"), "overrides"),
                           "updateStrategy");
    au = json_object_get(mine, "autoUpdate");
    if (!au)
        au = json_object_get(envs, "autoUpdate");
    *auto_update = !json_is_false(au);
    *max_unavailable = json_object_get(mine, "maxUnavailable");
    if (!*max_unavailable)
        *max_unavailable = json_object_get(envs, "maxUnavailable");
}
