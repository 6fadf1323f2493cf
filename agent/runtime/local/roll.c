/* Rolls on the local runtime (reference §6.6, last bullet): when a pool's
 * identity changes, its idle sandboxes are replaced, at most maxUnavailable
 * places short at a time; claimed ones are never touched (a released
 * sandbox is destroyed anyway, and its replacement starts at the new
 * revision).
 *
 * Identity is the revision hash both runtimes share (agent/runtime/
 * revision.h) over the pool's rendered spec: for an Env member, what the
 * kube runtime renders into a SandboxPool (the template's template,
 * idleImage and runtimes, the member's spec on top, its sizing, the Env's
 * image, image policy and network policy); for a SandboxPool, its spec with
 * its template's runtimes when it has none. Replicas, timeouts and the
 * rollout knobs are not identity, so scaling never rolls.
 *
 * updateStrategy {autoUpdate (default true), maxUnavailable ("20%" default)}
 * is resolved per field member → Env overrides → default; a SandboxPool has
 * spec.maxUnavailable. Loop thread only (pool.c's hooks call in). */
#include "agent/runtime/local/lrt.h"

#include "agent/runtime/revision.h"

#include "agentbox/common.h"
#include "agentbox/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *jget(const json_t *o, const char *k)
{
    return json_object_get(o, k);
}

/* The raw member `name` of `cluster`'s segment of an Env document. */
static void copy_key(json_t *dst, const json_t *src, const char *k)
{
    json_t *v = jget(src, k);
    if (v)
        json_object_set_new(dst, k, json_deep_copy(v));
}

/* The spec whose revision is the pool's identity. New reference or NULL. */
static json_t *rendered_spec(const struct mf_set *set, const struct mf_pool_view *v,
                             const char *cluster)
{
    const struct mf_object *t =
        v->template_name[0] ? mf_set_find(set, MF_TEMPLATE, NULL, v->template_name) : NULL;
    const json_t *tspec = t ? jget(t->raw, "spec") : NULL;
    const json_t *ospec = jget(v->obj->raw, "spec");
    json_t *s;

    if (!v->member) {
        if (!(s = json_is_object(ospec) ? json_deep_copy(ospec) : json_object()))
            return NULL;
        if (!jget(s, "runtimes") && tspec)
            copy_key(s, tspec, "runtimes");
        return s;
    }
    if (!(s = json_object()))
        return NULL;
    copy_key(s, tspec, "template");
    copy_key(s, tspec, "idleImage");
    copy_key(s, tspec, "runtimes");
    const json_t *m = rt_env_member(v->obj->raw, cluster, v->name);
    const json_t *mspec = jget(m, "spec");
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)mspec, k, x) json_object_set_new(s, k, json_deep_copy(x));
    json_object_set_new(s, "resources",
                        json_pack("{s:I,s:I,s:I,s:I}", "cpuMilli", (json_int_t)v->member->cpu_milli,
                                  "memoryBytes", (json_int_t)v->member->mem_bytes, "diskBytes",
                                  (json_int_t)v->member->disk_bytes, "pids",
                                  (json_int_t)v->member->pids_max));
    const json_t *ov = jget(ospec, "overrides");
    const char *img = json_string_value(jget(ov, "image"));
    if (img && img[0])
        json_object_set_new(s, "idleImage", json_string(img));
    copy_key(s, ov, "podCreationImagePolicy");
    if (jget(ov, "networkPolicy"))
        json_object_set_new(s, "envNetworkPolicy", json_deep_copy(jget(ov, "networkPolicy")));
    return s;
}

static void set_max_unavailable(struct lpool *p, const json_t *mu)
{
    const char *s = json_string_value(mu);
    size_t n = s ? strlen(s) : 0;

    p->mu_pct = true;
    p->mu_val = 20;
    if (json_is_integer(mu)) {
        p->mu_pct = false;
        p->mu_val = (int)AB_MIN(AB_MAX(json_integer_value(mu), 0), 1000000);
    } else if (n > 1 && n < 9 && s[n - 1] == '%' && strspn(s, "0123456789") == n - 1) {
        p->mu_val = (int)strtol(s, NULL, 10);
    }
}

void lrt_roll_configure(struct lpool *p, const struct mf_set *set, const struct mf_pool_view *v,
                        const char *cluster)
{
    json_t *spec = rendered_spec(set, v, cluster);
    const json_t *mu;
    char rev[RT_REV_LEN + 1] = "";

    if (!spec || rt_revision(spec, rev) != 0)
        LOG_WARN("cannot compute a pool's revision; it will not roll", "pool", p->name);
    json_decref(spec);
    if (p->rev[0] && rev[0] && strcmp(p->rev, rev) != 0)
        LOG_INFO("pool identity changed", "pool", p->name, "from", p->rev, "to", rev);
    ab_strlcpy(p->rev, rev, sizeof(p->rev));
    rt_update_strategy(v->member ? v->obj->raw : NULL, cluster, v->name, jget(v->obj->raw, "spec"),
                       &p->auto_update, &mu);
    set_max_unavailable(p, mu);
}

int lrt_roll_max_unavailable(const struct lpool *p)
{
    char pct[16];
    json_t *v;
    int n;

    if (p->mu_pct) {
        snprintf(pct, sizeof(pct), "%d%%", p->mu_val);
        v = json_string(pct);
    } else {
        v = json_integer(p->mu_val);
    }
    n = rt_max_unavailable(v, p->replicas);
    json_decref(v);
    return n;
}

int lrt_roll_updated(struct lrt *rt, const struct lpool *p)
{
    int n = 0;

    for (struct lsb *s = rt->sbxs; s; s = s->next)
        if (s->pool == p && s->phase >= PH_SPAWNING && s->phase <= PH_RUNNING &&
            !strcmp(s->rev, p->rev))
            n++;
    return n;
}

void lrt_roll(struct lrt *rt, struct lpool *p)
{
    int avail, unavailable, mu;

    if (p->removed || !p->auto_update || !p->rev[0])
        return;
    /* A place is available when its sandbox is idle or claimed; one being
     * replaced (stopping, starting) is not. Releases and failures count
     * too, so a roll never adds to an outage already under way. */
    avail = lrt_count(rt, p, PH_IDLE, PH_RUNNING);
    unavailable = AB_MAX(p->replicas - avail, 0);
    mu = lrt_roll_max_unavailable(p);
    while (unavailable < mu) {
        struct lsb *s, *oldest = NULL;
        for (s = rt->sbxs; s; s = s->next)
            if (s->pool == p && s->phase == PH_IDLE && strcmp(s->rev, p->rev) != 0 &&
                (!oldest || s->seq < oldest->seq))
                oldest = s;
        if (!oldest)
            return;
        LOG_INFO("replacing a stale idle sandbox", "pool", p->name, "sandbox", oldest->sid,
                 "revision", oldest->rev, "to", p->rev);
        lrt_destroy(oldest);
        unavailable++;
    }
}
