/* The local runtime's half of the manifest seam (runtime.h "Manifest
 * objects"): reads from the set in use, writes into the API's overlay
 * directory (mf_write.c) on a loop worker, one write at a time in arrival
 * order (so two writes of one object land as they were asked), then a
 * forced reload, so the answer comes once the pools were reconciled to it. */
#include "agent/runtime/local/lrt.h"
#include "agent/runtime/local/mf_parse.h"

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum mf_kind mf_of(enum rt_obj_kind k)
{
    return k == RT_OBJ_TEMPLATE ? MF_TEMPLATE : k == RT_OBJ_POOL ? MF_POOL : MF_ENV;
}

void lrt_objects(struct rt *base, enum rt_obj_kind kind, const char *ns, const char *name,
                 rt_object_fn fn, void *arg)
{
    struct lrt *rt = (struct lrt *)base;
    const struct mf_set *s = rt->set;
    enum mf_kind k = mf_of(kind);

    for (int i = 0; s && i < s->nobjs; i++) {
        const struct mf_object *o = s->objs[i];
        if (o->kind != k || (name && strcmp(o->name, name) != 0) ||
            (ns && k != MF_TEMPLATE && strcmp(o->ns, ns) != 0))
            continue;
        const struct rt_object ro = {kind, o->ns, o->name, o->raw, o->from_api, o->pull_secret};
        fn(arg, &ro);
    }
}

struct lwrite {
    struct lrt *rt;
    struct lwrite *next;
    enum mf_kind kind;
    char ns[MF_NAME_MAX + 1];
    char name[MF_TEMPLATE_NAME_MAX + 1];
    json_t *obj; /* NULL: delete */
    enum rt_secret_op secret;
    json_t *pull_secret;
    rt_write_cb cb;
    void *arg;
    bool running; /* on a worker */
    int rc;
    struct mf_object *parsed; /* the validated object (NULL: a delete), for the in-memory update */
    uint64_t sig_seen;        /* rt->sig when the write went to the worker */
    uint64_t sig_before, sig_after;
    int64_t mtime_ns;      /* of the file written */
    struct mf_set *loaded; /* a full reload on the worker, when something else changed too */
    char err[RT_ERR_MAX];
};

static void lwrite_free(struct lwrite *w)
{
    mf_set_free(w->loaded);
    mf_object_free(w->parsed);
    json_decref(w->obj);
    json_decref(w->pull_secret); /* jansson zeroes nothing; the file copy is what is kept */
    free(w);
}

static void write_work(void *arg)
{
    struct lwrite *w = arg;
    char overlay[MF_PATH_MAX];

    if (mf_overlay_dir(w->rt->manifests, overlay, sizeof(overlay)) != 0) {
        snprintf(w->err, sizeof(w->err), "manifest directory path too long");
        w->rc = AB_ELIMIT;
        return;
    }
    /* the secret first: an Env that names its pull secret never lands without it */
    if (w->kind == MF_ENV && w->secret != RT_SECRET_KEEP &&
        (w->rc = mf_write_secret(overlay, w->ns, w->name,
                                 w->obj && w->secret == RT_SECRET_SET ? w->pull_secret : NULL,
                                 w->err, sizeof(w->err))) != 0)
        return;
    if (mf_dir_signature(w->rt->manifests, &w->sig_before) != 0)
        w->sig_before = ~w->sig_seen;
    w->rc = mf_write_object(overlay, w->kind, w->ns, w->name, w->obj, &w->mtime_ns, w->err,
                            sizeof(w->err));
    if (w->rc != 0 || mf_dir_signature(w->rt->manifests, &w->sig_after) != 0)
        return;
    /* Nothing else changed since the set in use was loaded: the loop updates
     * that set in memory (this object replaced or removed), which is what a
     * reload would give. Otherwise a full reload, here: parsing every
     * manifest never runs on the loop. */
    if (w->sig_before != w->sig_seen) {
        char lerr[256];
        if (mf_load_dir(w->rt->manifests, &w->loaded, lerr, sizeof(lerr)) != 0)
            w->loaded = NULL; /* the loop's forced reload says why */
    }
}

/* The set in use with w applied (ownership of every object moves to the new
 * set), or NULL when only a full reload can tell (a seed file newer than the
 * write wins there). */
static struct mf_set *set_with(struct lrt *rt, struct lwrite *w)
{
    struct mf_set *old = rt->set, *s;
    bool kept_secret = false;
    int i;

    for (i = 0; old && i < old->nobjs; i++) {
        const struct mf_object *o = old->objs[i];
        if (o->kind == w->kind && !strcmp(o->name, w->name) &&
            (w->kind == MF_TEMPLATE || !strcmp(o->ns, w->ns))) {
            if (!o->from_api && o->mtime_ns > w->mtime_ns)
                return NULL;
            kept_secret = o->pull_secret;
        }
    }
    if (!(s = mf_set_new()))
        return NULL;
    for (i = 0; old && i < old->nobjs; i++) {
        struct mf_object *o = old->objs[i];
        if (o->kind == w->kind && !strcmp(o->name, w->name) &&
            (w->kind == MF_TEMPLATE || !strcmp(o->ns, w->ns)))
            mf_object_free(o);
        else if (mf_set_push_object(s, o) != 0)
            mf_object_free(o);
    }
    if (old)
        old->nobjs = 0; /* its objects are s's now */
    if (w->parsed) {
        w->parsed->from_api = true;
        w->parsed->mtime_ns = w->mtime_ns;
        w->parsed->pull_secret = w->secret == RT_SECRET_SET    ? true
                                 : w->secret == RT_SECRET_KEEP ? kept_secret
                                                               : false;
        if (mf_set_push_object(s, w->parsed) == 0)
            w->parsed = NULL;
    }
    mf_set_check(s);
    return s;
}

static void write_next(struct lrt *rt);

static void write_done(void *arg, int status)
{
    struct lwrite *w = arg;
    struct lrt *rt = w->rt;

    rt->write_head = w->next;
    if (!rt->write_head)
        rt->write_tail = NULL;
    rt->writes--;
    if (!w->cb) {
        /* answered by lrt_writes_close already */
    } else if (status != 0 || rt->closing) {
        w->cb(w->arg, AB_ECLOSED, "the local runtime is shutting down");
    } else if (w->rc != 0) {
        LOG_WARN("manifest write failed", "error", w->err);
        w->cb(w->arg, w->rc, w->err);
    } else {
        /* in effect before the answer */
        struct mf_set *s = NULL;
        if (w->loaded) {
            lrt_apply_loaded(rt, w->loaded, w->sig_after);
            w->loaded = NULL;
        } else if (rt->sig == w->sig_seen && (s = set_with(rt, w)) != NULL) {
            lrt_apply_loaded(rt, s, w->sig_after);
        } else {
            lrt_load_manifests(rt, true); /* rare: a reload or an edit raced the write */
        }
        w->cb(w->arg, 0, NULL);
    }
    lwrite_free(w);
    if (rt->closing)
        lrt_free_if_done(rt); /* op_free left rt to the last write on a worker */
    else
        write_next(rt);
}

void lrt_writes_close(struct lrt *rt)
{
    struct lwrite *w = rt->write_head, *next, *running = NULL;

    /* every caller hears now, before the layers above are freed; the one on
     * a worker (only the head can be) is freed by its done callback, which
     * then calls nobody */
    rt->write_head = rt->write_tail = NULL;
    for (; w; w = next) {
        next = w->next;
        w->cb(w->arg, AB_ECLOSED, "the local runtime is shutting down");
        w->cb = NULL;
        if (w->running) {
            w->next = NULL;
            running = w;
        } else {
            rt->writes--;
            lwrite_free(w);
        }
    }
    rt->write_head = rt->write_tail = running;
}

static void write_next(struct lrt *rt)
{
    struct lwrite *w = rt->write_head;

    if (!w || w->running)
        return; /* idle, or the head is already on a worker */
    w->running = true;
    w->sig_seen = rt->sig;
    if (loop_submit(rt->loop, write_work, write_done, w) != 0) {
        /* queue full: do it here rather than refuse a write already accepted */
        write_work(w);
        write_done(w, 0);
    }
}

int lrt_object_write(struct rt *base, const struct rt_write *in, rt_write_cb cb, void *arg,
                     char *err, size_t errlen)
{
    struct lrt *rt = (struct lrt *)base;
    enum mf_kind k = mf_of(in->kind);
    struct mf_set *v = NULL;
    struct lwrite *w;
    int rc;

    if (rt->closing) {
        snprintf(err, errlen, "the local runtime is shutting down");
        return AB_ECLOSED;
    }
    if (in->obj) {
        /* the same parser as the seed's files: what is accepted here loads */
        if ((rc = mf_validate_json(in->obj, &v, err, errlen)) != 0)
            return rc;
        const struct mf_object *o = v->objs[0];
        if (o->kind != k || strcmp(o->name, in->name) != 0 ||
            (k != MF_TEMPLATE && strcmp(o->ns, in->ns) != 0)) {
            snprintf(err, errlen, "the object is %s '%s/%s', not the one addressed ('%s/%s')",
                     mf_kind_name(o->kind), o->ns, o->name, in->ns, in->name);
            mf_set_free(v);
            return AB_EINVAL;
        }
        const char *tpl = k == MF_ENV    ? o->u.env.template_ref
                          : k == MF_POOL ? o->u.pool.template_name
                                         : "";
        if (tpl[0] && (!rt->set || !mf_set_find(rt->set, MF_TEMPLATE, NULL, tpl))) {
            snprintf(err, errlen,
                     "field '%s' names SandboxTemplate '%s', which cluster '%s' does not have",
                     k == MF_ENV ? "spec.templateRef.name" : "spec.templateName", tpl, rt->cluster);
            mf_set_free(v);
            return AB_EINVAL;
        }
    }
    if (rt->writes >= LRT_WRITES_MAX) {
        mf_set_free(v);
        snprintf(err, errlen, "%d manifest writes are already waiting; try again", rt->writes);
        return AB_EBUSY;
    }
    if (!(w = calloc(1, sizeof(*w)))) {
        mf_set_free(v);
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    if (v) { /* the parsed object itself goes into the set after the write */
        snprintf(v->objs[0]->file, sizeof(v->objs[0]->file), "%s/" MF_OVERLAY_NAME,
                 rt->manifests); /* where errors about it should point */
        w->parsed = v->objs[0];
        v->nobjs = 0;
        mf_set_free(v);
    }
    w->rt = rt;
    w->kind = k;
    ab_strlcpy(w->ns, in->ns ? in->ns : "", sizeof(w->ns));
    ab_strlcpy(w->name, in->name, sizeof(w->name));
    /* deep copies: the worker must not share jansson objects with the loop */
    w->obj = in->obj ? json_deep_copy(in->obj) : NULL;
    w->secret = in->secret;
    w->pull_secret = in->pull_secret ? json_deep_copy(in->pull_secret) : NULL;
    if ((in->obj && !w->obj) || (in->pull_secret && !w->pull_secret)) {
        lwrite_free(w);
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    w->cb = cb;
    w->arg = arg;
    if (rt->write_tail)
        rt->write_tail->next = w;
    else
        rt->write_head = w;
    rt->write_tail = w;
    rt->writes++;
    write_next(rt);
    return 0;
}
