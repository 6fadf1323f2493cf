/* Sets of manifest objects: lookup, the cross-object rules (duplicates,
 * pool-name collisions, Env templates that exist) and the pools the runtime
 * should keep for a cluster. */
#include "agent/runtime/local/mf_parse.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sets ------------------------------------------------------------------------------ */

struct mf_set *mf_set_new(void)
{
    return calloc(1, sizeof(struct mf_set));
}

void mf_set_free(struct mf_set *s)
{
    int i;

    if (!s)
        return;
    for (i = 0; i < s->nobjs; i++)
        mf_object_free(s->objs[i]);
    free(s->objs);
    free(s->errs);
    free(s);
}

const struct mf_object *mf_set_find(const struct mf_set *s, enum mf_kind kind, const char *ns,
                                    const char *name)
{
    int i;

    for (i = 0; i < s->nobjs; i++) {
        const struct mf_object *o = s->objs[i];
        if (o->kind == kind && !strcmp(o->name, name) &&
            (kind == MF_TEMPLATE || !ns || !strcmp(o->ns, ns)))
            return o;
    }
    return NULL;
}

/* ---- cross-object rules ------------------------------------------------------------------ */

static void drop(struct mf_set *s, int i, const char *msg)
{
    mf_set_push_error(s, s->objs[i]->file, s->objs[i]->line, msg);
    mf_object_free(s->objs[i]);
    memmove(&s->objs[i], &s->objs[i + 1], (size_t)(s->nobjs - i - 1) * sizeof(s->objs[0]));
    s->nobjs--;
}

static const struct mf_object *member_owner(const struct mf_set *s, const char *ns,
                                            const char *pool)
{
    int i, c, m;

    for (i = 0; i < s->nobjs; i++) {
        const struct mf_object *o = s->objs[i];
        if (o->kind != MF_ENV || strcmp(o->ns, ns) != 0)
            continue;
        for (c = 0; c < o->u.env.nclusters; c++)
            for (m = 0; m < o->u.env.clusters[c].nmembers; m++)
                if (!strcmp(o->u.env.clusters[c].members[m].name, pool))
                    return o;
    }
    return NULL;
}

void mf_set_check(struct mf_set *s)
{
    char msg[MF_ERR_MAX * 3]; /* truncated to MF_ERR_MAX when stored */
    int i, j;

    for (i = 0; i < s->nobjs; i++) {
        struct mf_object *o = s->objs[i];
        for (j = 0; j < i; j++) {
            struct mf_object *p = s->objs[j];
            if (p->kind == o->kind && !strcmp(p->name, o->name) && !strcmp(p->ns, o->ns))
                break;
        }
        if (j < i) {
            snprintf(msg, sizeof(msg), "duplicate %s '%s%s%s' (first defined at %.200s:%d)",
                     mf_kind_name(o->kind), o->ns, o->ns[0] ? "/" : "", o->name, s->objs[j]->file,
                     s->objs[j]->line);
            drop(s, i--, msg);
        }
    }
    for (i = 0; i < s->nobjs; i++) {
        struct mf_object *o = s->objs[i];
        const char *tpl = o->kind == MF_ENV    ? o->u.env.template_ref
                          : o->kind == MF_POOL ? o->u.pool.template_name
                                               : "";
        const struct mf_object *owner;

        if (tpl[0] && !mf_set_find(s, MF_TEMPLATE, NULL, tpl)) {
            snprintf(msg, sizeof(msg),
                     "field '%s' names SandboxTemplate '%s', which no manifest "
                     "defines",
                     o->kind == MF_ENV ? "spec.templateRef.name" : "spec.templateName", tpl);
            drop(s, i--, msg);
            continue;
        }
        if (o->kind == MF_POOL && (owner = member_owner(s, o->ns, o->name)) != NULL) {
            snprintf(msg, sizeof(msg),
                     "SandboxPool '%s/%s' has the name of a member pool of "
                     "SandboxEnv '%s' (%.200s:%d); rename one of them",
                     o->ns, o->name, owner->name, owner->file, owner->line);
            drop(s, i--, msg);
        }
    }
}

/* The pool's own runtimes when it lists any, else its template's. */
static void view_runtimes(const struct mf_set *s, struct mf_pool_view *v,
                          const struct mf_pool_spec *spec)
{
    const struct mf_object *t;

    if (spec && spec->nruntimes > 0) {
        v->runtimes = spec->runtimes;
        v->nruntimes = spec->nruntimes;
    } else if (v->template_name[0] &&
               (t = mf_set_find(s, MF_TEMPLATE, NULL, v->template_name)) != NULL) {
        v->runtimes = t->u.tpl.runtimes;
        v->nruntimes = t->u.tpl.nruntimes;
    }
}

int mf_set_pools(const struct mf_set *s, const char *cluster_id, struct mf_pool_view *out, int max,
                 int *n)
{
    int i, c, m, k = 0;

    for (i = 0; i < s->nobjs; i++) {
        const struct mf_object *o = s->objs[i];

        if (o->kind == MF_POOL) {
            if (k < max) {
                struct mf_pool_view *v = &out[k];
                memset(v, 0, sizeof(*v));
                v->obj = o;
                v->ns = o->ns;
                v->name = o->name;
                v->env = "";
                v->scaling_group = "";
                v->template_name = o->u.pool.template_name;
                v->replicas = o->u.pool.replicas;
                v->startup_timeout_ms = o->u.pool.startup_timeout_ms;
                v->idle_timeout_ms = o->u.pool.idle_timeout_ms;
                v->disable_egress = o->u.pool.disable_egress;
                view_runtimes(s, v, &o->u.pool);
            }
            k++;
            continue;
        }
        if (o->kind != MF_ENV)
            continue;
        for (c = 0; c < o->u.env.nclusters; c++) {
            const struct mf_cluster *cl = &o->u.env.clusters[c];
            if (strcmp(cl->id, cluster_id) != 0)
                continue;
            for (m = 0; m < cl->nmembers; m++, k++) {
                const struct mf_member *mb = &cl->members[m];
                struct mf_pool_view *v;
                if (k >= max)
                    continue;
                v = &out[k];
                memset(v, 0, sizeof(*v));
                v->obj = o;
                v->member = mb;
                v->ns = o->ns;
                v->name = mb->name;
                v->env = o->name;
                v->scaling_group = mb->scaling_group;
                v->template_name = o->u.env.template_ref;
                v->replicas = mb->has_spec ? mb->spec.replicas : AB_MAX(mb->min_replicas, 0);
                v->startup_timeout_ms = o->u.env.startup_timeout_ms ? o->u.env.startup_timeout_ms
                                                                    : mb->spec.startup_timeout_ms;
                v->idle_timeout_ms =
                    o->u.env.idle_timeout_ms ? o->u.env.idle_timeout_ms : mb->spec.idle_timeout_ms;
                v->disable_egress = o->u.env.disable_egress || mb->spec.disable_egress;
                view_runtimes(s, v, mb->has_spec ? &mb->spec : NULL);
            }
        }
    }
    *n = k;
    return 0;
}
