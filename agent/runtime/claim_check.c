/* The checks every runtime makes of a claim's options before it looks for a
 * sandbox (runtime.h, rt_claim_options_check): one rule per field, so a
 * request refused on one runtime is refused with the same words on another;
 * and which sandboxes a list shows (rt_filter_admits). */
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <string.h>

#define RT_TIMEOUT_MAX_S (366LL * 24 * 3600)

static bool id_ok(const char *id)
{
    size_t n = strlen(id);

    return n > 0 && n <= RT_ID_MAX &&
           strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") == n;
}

static int check_strings(const json_t *obj, const char *what, char *err, size_t errlen)
{
    const char *k;
    json_t *v;

    if (!obj)
        return 0;
    if (!json_is_object(obj)) {
        snprintf(err, errlen, "%s must be an object of strings", what);
        return AB_EINVAL;
    }
    if (json_object_size(obj) > RT_ENV_VARS_MAX) {
        snprintf(err, errlen, "%s has more than %d entries", what, RT_ENV_VARS_MAX);
        return AB_EINVAL;
    }
    json_object_foreach((json_t *)obj, k, v)
    {
        if (!json_is_string(v) || json_string_length(v) > RT_VALUE_MAX) {
            snprintf(err, errlen, "%s['%.60s'] must be a string of at most %d bytes", what, k,
                     RT_VALUE_MAX);
            return AB_EINVAL;
        }
    }
    return 0;
}

int rt_claim_options_check(const struct rt_claim_options *o, char *err, size_t errlen)
{
    int rc;

    if (!o || !o->id || !id_ok(o->id)) {
        snprintf(err, errlen, "sandbox id must be 1-%d characters of [A-Za-z0-9._-]", RT_ID_MAX);
        return AB_EINVAL;
    }
    if (o->timeout_s < 0 || o->timeout_s > RT_TIMEOUT_MAX_S) {
        snprintf(err, errlen, "timeout must be a positive number of seconds (at most a year)");
        return AB_EINVAL;
    }
    if ((rc = check_strings(o->env_vars, "envVars", err, errlen)) != 0 ||
        (rc = check_strings(o->metadata, "metadata", err, errlen)) != 0)
        return rc;
    /* The token reaches envd inside a JSON string and a header value: no
     * backslash, so no escape can change what envd compares. */
    if (o->access_token &&
        (strlen(o->access_token) > RT_TOKEN_MAX || strchr(o->access_token, '\\'))) {
        snprintf(err, errlen, "access token must be at most %d characters without '\\'",
                 RT_TOKEN_MAX);
        return AB_EINVAL;
    }
    return 0;
}

bool rt_filter_admits(const struct rt_filter *f, bool running, const char *ns, const char *team,
                      const char *env, const char *pool)
{
    if (!running && !(f && f->include_idle))
        return false;
    if (!f)
        return true;
    if (f->ns && strcmp(f->ns, ns) != 0)
        return false;
    if (f->team && strcmp(f->team, team) != 0)
        return false;
    return !f->env_or_pool || strcmp(f->env_or_pool, env) == 0 || strcmp(f->env_or_pool, pool) == 0;
}

void rt_fill_pending(struct rt_sandbox *o, const char *id, const char *ns, const char *env,
                     const char *pool, const char *group, const char *team, const char *owner,
                     json_t *metadata)
{
    memset(o, 0, sizeof(*o));
    ab_strlcpy(o->id, id, sizeof(o->id));
    ab_strlcpy(o->ns, ns, sizeof(o->ns));
    ab_strlcpy(o->env, env, sizeof(o->env));
    ab_strlcpy(o->pool, pool, sizeof(o->pool));
    ab_strlcpy(o->scaling_group, group, sizeof(o->scaling_group));
    ab_strlcpy(o->team, team, sizeof(o->team));
    ab_strlcpy(o->owner, owner, sizeof(o->owner));
    o->state = RT_STARTING;
    o->metadata = metadata ? json_incref(metadata) : NULL;
}
