/* The kube runtime's manifest objects: reads from the reflectors' caches,
 * writes as CRDs (and the ips-<env> Secret); see objects.h. */
#include "agent/runtime/kube/objects.h"

#include "agent/runtime/kube/reconcile.h"
#include "agent/runtime/local/manifest.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DOCKERCONFIG_MAX (256 * 1024)

enum kw_stage { KW_QUEUED = 0, KW_OBJECT, KW_REREAD, KW_SECRET, KW_SECRET_PUT, KW_SEEN };

struct kw {
    struct kw *next;
    struct kobj *o;
    enum rt_obj_kind kind;
    char ns[64];
    char name[MF_TEMPLATE_NAME_MAX + 1];
    json_t *obj; /* the body to write; NULL: delete */
    enum rt_secret_op secret;
    json_t *pull_secret;
    rt_write_cb cb;
    void *arg;
    enum kw_stage stage;
    bool answered;
    char uid[64];     /* of the object written (the Secret's owner) */
    char want_rv[32]; /* the reflector must show this, or the object gone */
    json_t *
        base; /* what the write was computed from: {labels, annotations, spec} of the live object */
    int retries; /* PUTs again after a 409 that only the status caused */
    struct loop_timer timer;
    bool timer_on;
    char err[RT_ERR_MAX];
};

struct kobj {
    struct kobj_deps d;
    struct kw *head, *tail;
    int n;
    int inflight; /* requests whose fn has not run yet */
    bool closing;
};

static const char *const RESOURCE[] = {[RT_OBJ_TEMPLATE] = "sandboxtemplates",
                                       [RT_OBJ_POOL] = "sandboxpools",
                                       [RT_OBJ_ENV] = "sandboxenvs"};
static const char *const KIND[] = {[RT_OBJ_TEMPLATE] = "SandboxTemplate",
                                   [RT_OBJ_POOL] = "SandboxPool",
                                   [RT_OBJ_ENV] = "SandboxEnv"};

static const char *jstr(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static const json_t *cache_of(const struct kobj *o, enum rt_obj_kind k)
{
    return k == RT_OBJ_TEMPLATE ? o->d.templates : k == RT_OBJ_ENV ? o->d.envs : o->d.pools;
}

static void key_of(enum rt_obj_kind k, const char *ns, const char *name, char *out, size_t n)
{
    if (k == RT_OBJ_TEMPLATE)
        snprintf(out, n, "%s", name);
    else
        snprintf(out, n, "%s/%s", ns, name);
}

static const json_t *live_of(const struct kobj *o, const struct kw *w)
{
    char key[400];
    key_of(w->kind, w->ns, w->name, key, sizeof(key));
    return json_object_get(cache_of(o, w->kind), key);
}

static struct kube_ref ref_of(enum rt_obj_kind k, const char *ns, const char *name)
{
    struct kube_ref r = {.group = KUBE_GROUP,
                         .version = KUBE_CR_VERSION,
                         .ns = k == RT_OBJ_TEMPLATE ? NULL : ns,
                         .resource = RESOURCE[k],
                         .name = name};
    return r;
}

/* The parts of an object a write is computed from (status and server
 * metadata move on their own: the reconciler writes an Env's status). */
static json_t *base_of(const json_t *live)
{
    const json_t *md = json_object_get(live, "metadata");
    return json_pack("{s:O?,s:O?,s:O?}", "labels", json_object_get(md, "labels"), "annotations",
                     json_object_get(md, "annotations"), "spec", json_object_get(live, "spec"));
}

/* ---- reading -------------------------------------------------------------------------------- */

/* What a caller sees of a cached object: no status, no server metadata, no
 * annotation of ours. */
static json_t *shown(const json_t *live, bool *from_api, bool *pull_secret)
{
    const json_t *md = json_object_get(live, "metadata");
    json_t *ann = json_deep_copy(json_object_get(md, "annotations"));
    json_t *meta = json_pack("{s:s}", "name", jstr(md, "name"));

    *from_api = json_object_get(ann, KOBJ_A_SOURCE) != NULL;
    *pull_secret = json_object_get(ann, KOBJ_A_PULL_SECRET) != NULL;
    json_object_del(ann, KOBJ_A_SOURCE);
    json_object_del(ann, KOBJ_A_PULL_SECRET);
    if (jstr(md, "namespace")[0])
        json_object_set_new(meta, "namespace", json_string(jstr(md, "namespace")));
    if (json_object_get(md, "labels"))
        json_object_set(meta, "labels", json_object_get(md, "labels"));
    if (json_object_size(ann) > 0)
        json_object_set(meta, "annotations", ann);
    json_decref(ann);
    return json_pack("{s:s,s:s,s:o,s:O?}", "apiVersion", jstr(live, "apiVersion"), "kind",
                     jstr(live, "kind"), "metadata", meta, "spec", json_object_get(live, "spec"));
}

void kobj_objects(struct kobj *o, enum rt_obj_kind kind, const char *ns, const char *name,
                  rt_object_fn fn, void *arg)
{
    const char *k;
    json_t *v;

    json_object_foreach((json_t *)cache_of(o, kind), k, v)
    {
        const json_t *md = json_object_get(v, "metadata");
        /* pools an Env renders are the runtime's, not objects of their own */
        if (kind == RT_OBJ_POOL && json_object_get(json_object_get(md, "labels"), KUBE_L_ENV))
            continue;
        if ((name && strcmp(jstr(md, "name"), name) != 0) ||
            (ns && kind != RT_OBJ_TEMPLATE && strcmp(jstr(md, "namespace"), ns) != 0))
            continue;
        bool from_api, pull_secret;
        json_t *s = shown(v, &from_api, &pull_secret);
        if (!s)
            continue;
        if (kind == RT_OBJ_ENV) {
            /* Env members with their rendered names, as the parser gives them */
            struct mf_set *set = NULL;
            char err[64];
            if (mf_validate_json(s, &set, err, sizeof(err)) == 0 && set->nobjs == 1 &&
                set->objs[0]->raw) {
                json_decref(s);
                s = json_incref(set->objs[0]->raw);
            }
            mf_set_free(set);
        }
        const struct rt_object ro = {kind,
                                     kind == RT_OBJ_TEMPLATE ? "" : jstr(md, "namespace"),
                                     jstr(md, "name"),
                                     s,
                                     from_api,
                                     pull_secret};
        fn(arg, &ro);
        json_decref(s);
    }
}

/* ---- the Secret ------------------------------------------------------------------------------ */

json_t *kobj_secret_body(const char *ns, const char *env, const char *env_uid,
                         const json_t *pull_secret, char *err, size_t errlen)
{
    const json_t *regs = json_object_get(pull_secret, "registries"), *r;
    json_t *auths = json_object();
    size_t i;

    if (!json_is_array(regs) || json_array_size(regs) == 0) {
        snprintf(err, errlen,
                 "field 'overrides.imagePullSecret.registries' must list at least "
                 "one {registry, username, password}");
        json_decref(auths);
        return NULL;
    }
    json_array_foreach(regs, i, r)
    {
        const char *reg = json_string_value(json_object_get(r, "registry"));
        const char *user = json_string_value(json_object_get(r, "username"));
        const char *pass = json_string_value(json_object_get(r, "password"));
        if (!reg || !reg[0] || !user || !pass) {
            snprintf(err, errlen,
                     "field 'overrides.imagePullSecret.registries[%zu]' needs registry, username "
                     "and password (strings)",
                     i);
            json_decref(auths);
            return NULL;
        }
        size_t n = strlen(user) + 1 + strlen(pass);
        char *up = malloc(n + 1), *b64 = malloc(4 * ((n + 2) / 3) + 1);
        if (up && b64) {
            snprintf(up, n + 1, "%s:%s", user, pass);
            crypto_base64_encode(up, n, b64);
            json_object_set_new(
                auths, reg,
                json_pack("{s:s,s:s,s:s}", "username", user, "password", pass, "auth", b64));
        }
        free(up);
        free(b64);
    }
    json_t *cfg = json_pack("{s:o}", "auths", auths);
    char *text = cfg ? json_dumps(cfg, JSON_COMPACT) : NULL;
    json_decref(cfg);
    if (!text || strlen(text) > DOCKERCONFIG_MAX) {
        snprintf(err, errlen, "field 'overrides.imagePullSecret' is too large (at most %d bytes)",
                 DOCKERCONFIG_MAX);
        free(text);
        return NULL;
    }
    size_t n = strlen(text);
    char *b64 = malloc(4 * ((n + 2) / 3) + 1);
    if (!b64) {
        free(text);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    crypto_base64_encode(text, n, b64);
    free(text);
    char name[128];
    snprintf(name, sizeof(name), KOBJ_SECRET_PREFIX "%s", env);
    json_t *s = json_pack(
        "{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s},s:[{s:s,s:s,s:s,s:s,s:b,s:b}]},s:s,s:{s:s}}", "apiVersion",
        "v1", "kind", "Secret", "metadata", "name", name, "namespace", ns, "labels", KUBE_L_MANAGED,
        KUBE_MANAGED_BY, KUBE_L_ENV, env, "ownerReferences", "apiVersion", KUBE_CR_API_VERSION,
        "kind", "SandboxEnv", "name", env, "uid", env_uid, "controller", 1, "blockOwnerDeletion", 1,
        "type", "kubernetes.io/dockerconfigjson", "data", ".dockerconfigjson", b64);
    free(b64);
    if (!s)
        snprintf(err, errlen, "out of memory");
    return s;
}

void kobj_member_pull_secret(const json_t *env, json_t *pool)
{
    const json_t *ann = json_object_get(json_object_get(env, "metadata"), "annotations");
    const char *sec = json_string_value(json_object_get(ann, KOBJ_A_PULL_SECRET));
    json_t *spec = json_object_get(pool, "spec");
    json_t *ts = json_object_get(json_object_get(spec, "template"), "spec");

    if (!sec || !sec[0] || !json_is_object(ts))
        return;
    json_t *list = json_object_get(ts, "imagePullSecrets");
    if (!json_is_array(list)) {
        list = json_array();
        json_object_set_new(ts, "imagePullSecrets", list);
    }
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) if (!strcmp(jstr(v, "name"), sec)) return;
    json_array_append_new(list, json_pack("{s:s}", "name", sec));
}

/* ---- writing -------------------------------------------------------------------------------- */

static void kw_free(struct kw *w)
{
    if (w->timer_on)
        loop_timer_cancel(&w->timer);
    json_decref(w->obj);
    json_decref(w->pull_secret);
    json_decref(w->base);
    free(w);
}

static void pump(struct kobj *o);

/* The head's end: answer, unlink, next. */
static void finish(struct kw *w, int err, const char *msg)
{
    struct kobj *o = w->o;

    if (!w->answered) {
        w->answered = true;
        if (err != 0)
            LOG_WARN("kube manifest write failed", "object", w->name, "error", msg);
        w->cb(w->arg, err, err ? msg : NULL);
    }
    if (o->head == w) {
        o->head = w->next;
        if (!o->head)
            o->tail = NULL;
    }
    o->n--;
    kw_free(w);
    pump(o);
}

static int err_of(long code)
{
    return code == 404                  ? AB_ENOENT
           : code == 409                ? AB_EEXIST
           : code == 422 || code == 400 ? AB_EINVAL
           : code == 403 || code == 401 ? AB_EDENIED
           : code == 429                ? AB_EBUSY
                                        : AB_EIO;
}

struct kreq {
    struct kw *w;
    struct kobj *o;
};

static void on_resp(void *arg, int rc, struct kube_response *resp);

static int send(struct kw *w, const char *method, const struct kube_ref *ref, const json_t *body)
{
    struct kreq *q = malloc(sizeof(*q));
    int rc;

    if (!q)
        return AB_ENOMEM;
    q->w = w;
    q->o = w->o;
    rc = w->o->d.send(w->o->d.owner, method, ref, NULL, body, on_resp, q);
    if (rc != 0) {
        free(q);
        return rc;
    }
    w->o->inflight++;
    return 0;
}

/* Whether the reflector shows what w wrote. */
static bool seen(const struct kobj *o, const struct kw *w)
{
    const json_t *live = live_of(o, w);
    const json_t *md = json_object_get(live, "metadata");

    if (!w->obj) /* a delete: gone, replaced by another, or going */
        return !live || strcmp(jstr(md, "uid"), w->uid) != 0 ||
               json_object_get(md, "deletionTimestamp");
    if (!live)
        return false;
    const char *rv = jstr(md, "resourceVersion");
    if (!strcmp(rv, w->want_rv))
        return true;
    /* resourceVersions are opaque but, on every server we know, integers
     * that grow: a newer one means ours went by */
    char *e1, *e2;
    unsigned long long a = strtoull(rv, &e1, 10), b = strtoull(w->want_rv, &e2, 10);
    return *rv && *w->want_rv && !*e1 && !*e2 && a > b;
}

static void seen_timeout(struct loop_timer *t)
{
    struct kw *w = t->arg;
    w->timer_on = false;
    LOG_WARN("a manifest write went through but the watch has not shown it yet; answering",
             "object", w->name, "resourceVersion", w->want_rv);
    finish(w, 0, NULL);
}

static void wait_seen(struct kw *w)
{
    w->stage = KW_SEEN;
    if (seen(w->o, w)) {
        finish(w, 0, NULL);
        return;
    }
    loop_timer_start(w->o->d.loop, &w->timer, KOBJ_SEEN_MS, seen_timeout, w);
    w->timer_on = true;
}

void kobj_observed(struct kobj *o)
{
    struct kw *w = o ? o->head : NULL;
    if (w && w->stage == KW_SEEN && seen(o, w))
        finish(w, 0, NULL);
}

/* After the object: the Env's Secret, then the wait. */
static void secret_step(struct kw *w)
{
    char err[RT_ERR_MAX], name[128];
    int rc = 0;

    snprintf(name, sizeof(name), KOBJ_SECRET_PREFIX "%s", w->name);
    struct kube_ref r = {.group = "", .version = "v1", .ns = w->ns, .resource = "secrets"};
    if (w->kind != RT_OBJ_ENV || (w->obj && w->secret == RT_SECRET_KEEP)) {
        wait_seen(w);
        return;
    }
    w->stage = KW_SECRET;
    if (w->obj && w->secret == RT_SECRET_SET) {
        json_t *body = kobj_secret_body(w->ns, w->name, w->uid, w->pull_secret, err, sizeof(err));
        if (!body) {
            finish(w, AB_EINVAL, err);
            return;
        }
        rc = send(w, "POST", &r, body);
        json_decref(body);
    } else {
        r.name = name;
        rc = send(w, "DELETE", &r, NULL);
    }
    if (rc != 0) {
        snprintf(err, sizeof(err), "the Secret %s could not be sent: %s", name, ab_strerror(rc));
        finish(w, rc, err);
    }
}

static void on_resp(void *arg, int rc, struct kube_response *resp)
{
    struct kreq *q = arg;
    struct kobj *o = q->o;
    struct kw *w = q->w;
    char msg[RT_ERR_MAX];

    free(q);
    o->inflight--;
    if (o->closing || rc == AB_ECLOSED || !resp) {
        if (!o->closing)
            finish(w, AB_ECLOSED, "the kube runtime is shutting down");
        return; /* kobj_close answered it and freed nothing the request holds */
    }
    if (rc != 0) {
        snprintf(msg, sizeof(msg), "the API server could not be reached writing %s '%s': %s",
                 KIND[w->kind], w->name, ab_strerror(rc));
        finish(w, rc, msg);
        return;
    }
    long code = resp->code;
    json_t *body = code >= 200 && code < 300 ? json_loadb(resp->body, resp->len, 0, NULL) : NULL;
    const json_t *md = json_object_get(body, "metadata");

    switch (w->stage) {
    case KW_OBJECT:
        if (code == 409) {
            /* someone else wrote it since the cache saw it: read it again
             * (the reflector catches up too) and say so */
            struct kube_ref r = ref_of(w->kind, w->ns, w->name);
            w->stage = KW_REREAD;
            if (send(w, "GET", &r, NULL) != 0)
                finish(w, AB_EEXIST, resp->status.message);
            break;
        }
        if (code == 404 && !w->obj) {
            w->uid[0] = '\0';
            secret_step(w); /* already gone: the Secret still goes */
            break;
        }
        if (code < 200 || code >= 300) {
            snprintf(msg, sizeof(msg), "the API server refused %s '%s' (%ld): %s", KIND[w->kind],
                     w->name, code, resp->status.message);
            finish(w, err_of(code), msg);
            break;
        }
        if (w->obj) {
            ab_strlcpy(w->uid, jstr(md, "uid"), sizeof(w->uid));
            ab_strlcpy(w->want_rv, jstr(md, "resourceVersion"), sizeof(w->want_rv));
        }
        secret_step(w);
        break;
    case KW_REREAD: {
        const char *rv = code == 200 ? jstr(md, "resourceVersion") : "";
        json_t *now = code == 200 ? base_of(body) : NULL;
        bool same = now && w->base && json_equal(now, w->base);
        json_decref(now);
        if (same && w->retries < 5 && rv[0]) {
            /* only the status moved since the cache saw it: the write still
             * applies to what is in force, at the new version */
            w->retries++;
            json_object_set_new(json_object_get(w->obj, "metadata"), "resourceVersion",
                                json_string(rv));
            struct kube_ref r = ref_of(w->kind, w->ns, w->name);
            w->stage = KW_OBJECT;
            if (send(w, "PUT", &r, w->obj) != 0)
                finish(w, AB_EIO, "the write could not be sent again after a conflict");
            break;
        }
        snprintf(msg, sizeof(msg),
                 "%s '%s' was changed by someone else meanwhile%s%s%s; read it again and retry",
                 KIND[w->kind], w->name, rv[0] ? " (now at resourceVersion " : "", rv,
                 rv[0] ? ")" : "");
        finish(w, AB_EEXIST, msg);
        break;
    }
    case KW_SECRET:
        if (code == 409 && w->obj) {
            /* it exists: replace it whole (a Secret takes an unconditional update) */
            char err[RT_ERR_MAX], name[128];
            snprintf(name, sizeof(name), KOBJ_SECRET_PREFIX "%s", w->name);
            struct kube_ref r = {
                .group = "", .version = "v1", .ns = w->ns, .resource = "secrets", .name = name};
            json_t *sb = kobj_secret_body(w->ns, w->name, w->uid, w->pull_secret, err, sizeof(err));
            w->stage = KW_SECRET_PUT;
            if (!sb || send(w, "PUT", &r, sb) != 0)
                finish(w, AB_EIO, sb ? "the Secret could not be sent" : err);
            json_decref(sb);
            break;
        }
        /* fall through */
    case KW_SECRET_PUT: {
        bool deleting = !w->obj || w->secret == RT_SECRET_DELETE;
        if ((code < 200 || code >= 300) && !(code == 404 && deleting)) {
            snprintf(msg, sizeof(msg),
                     "the API server refused the Secret " KOBJ_SECRET_PREFIX "%s (%ld): %s",
                     w->name, code, resp->status.message);
            finish(w, err_of(code), msg);
            break;
        }
        if (!w->obj && !w->uid[0]) {
            finish(w, 0, NULL); /* the object was gone already */
            break;
        }
        wait_seen(w);
        break;
    }
    default:
        break;
    }
    json_decref(body);
}

/* The head's first request. */
static void start(struct kw *w)
{
    struct kobj *o = w->o;
    const json_t *live = live_of(o, w);
    const json_t *lmd = json_object_get(live, "metadata");
    char msg[RT_ERR_MAX];
    int rc;

    w->stage = KW_OBJECT;
    if (!w->obj) {
        if (!live) {
            w->uid[0] = '\0';
            secret_step(w);
            return;
        }
        ab_strlcpy(w->uid, jstr(lmd, "uid"), sizeof(w->uid));
        struct kube_ref r = ref_of(w->kind, w->ns, w->name);
        json_t *opts = json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", "v1", "kind", "DeleteOptions",
                                 "preconditions", "uid", w->uid);
        rc = send(w, "DELETE", &r, opts);
        json_decref(opts);
    } else {
        json_t *md = json_object_get(w->obj, "metadata");
        json_t *ann = json_object_get(md, "annotations");
        if (!json_is_object(ann)) {
            ann = json_object();
            json_object_set_new(md, "annotations", ann);
        }
        json_object_set_new(ann, KOBJ_A_SOURCE, json_string("api"));
        bool had = json_object_get(json_object_get(lmd, "annotations"), KOBJ_A_PULL_SECRET);
        char sec[128];
        snprintf(sec, sizeof(sec), KOBJ_SECRET_PREFIX "%s", w->name);
        if (w->kind == RT_OBJ_ENV &&
            (w->secret == RT_SECRET_SET || (w->secret == RT_SECRET_KEEP && had)))
            json_object_set_new(ann, KOBJ_A_PULL_SECRET, json_string(sec));
        else
            json_object_del(ann, KOBJ_A_PULL_SECRET);
        if (live) {
            w->base = base_of(live);
            /* a whole-object replace at the version the cache holds; what
             * the server and other controllers keep on it stays */
            json_object_set_new(md, "resourceVersion", json_string(jstr(lmd, "resourceVersion")));
            static const char *const KEEP[] = {"finalizers", "ownerReferences"};
            for (size_t i = 0; i < AB_ARRAY_LEN(KEEP); i++)
                if (json_object_get(lmd, KEEP[i]))
                    json_object_set(md, KEEP[i], json_object_get(lmd, KEEP[i]));
        }
        struct kube_ref r = ref_of(w->kind, w->ns, live ? w->name : NULL);
        rc = send(w, live ? "PUT" : "POST", &r, w->obj);
    }
    if (rc != 0) {
        snprintf(msg, sizeof(msg), "%s '%s' could not be sent to the API server: %s", KIND[w->kind],
                 w->name, ab_strerror(rc));
        finish(w, rc, msg);
    }
}

static void pump(struct kobj *o)
{
    if (!o->closing && o->head && o->head->stage == KW_QUEUED)
        start(o->head);
}

/* The body written: the caller's object with only what a manifest has. */
static json_t *body_of(enum rt_obj_kind k, const char *ns, const json_t *in)
{
    const json_t *md = json_object_get(in, "metadata");
    json_t *meta = json_pack("{s:s}", "name", jstr(md, "name"));

    if (k != RT_OBJ_TEMPLATE)
        json_object_set_new(meta, "namespace", json_string(ns));
    if (json_object_get(md, "labels"))
        json_object_set_new(meta, "labels", json_deep_copy(json_object_get(md, "labels")));
    if (json_object_get(md, "annotations"))
        json_object_set_new(meta, "annotations",
                            json_deep_copy(json_object_get(md, "annotations")));
    return json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", KUBE_CR_API_VERSION, "kind", KIND[k],
                     "metadata", meta, "spec",
                     json_object_get(in, "spec") ? json_deep_copy(json_object_get(in, "spec"))
                                                 : json_object());
}

int kobj_write(struct kobj *o, const struct rt_write *in, rt_write_cb cb, void *arg, char *err,
               size_t errlen)
{
    enum mf_kind mk = in->kind == RT_OBJ_TEMPLATE ? MF_TEMPLATE
                      : in->kind == RT_OBJ_POOL   ? MF_POOL
                                                  : MF_ENV;
    const char *ns = in->kind == RT_OBJ_TEMPLATE ? "" : in->ns ? in->ns : "";
    struct mf_set *v = NULL;
    struct kw *w;
    int rc;

    if (o->closing) {
        snprintf(err, errlen, "the kube runtime is shutting down");
        return AB_ECLOSED;
    }
    if (in->kind < RT_OBJ_TEMPLATE || in->kind > RT_OBJ_ENV || !in->name) {
        snprintf(err, errlen, "unknown manifest kind");
        return AB_EINVAL;
    }
    if (in->kind != RT_OBJ_TEMPLATE && strcmp(ns, o->d.ns) != 0) {
        snprintf(err, errlen,
                 "namespace '%s' is not the one this cluster's agent manages ('%s'): its kube "
                 "runtime watches and writes one namespace",
                 ns, o->d.ns);
        return AB_EINVAL;
    }
    if (in->obj) {
        /* the same rules as the local runtime's files and the reconciler's set */
        if ((rc = mf_validate_json(in->obj, &v, err, errlen)) != 0)
            return rc;
        const struct mf_object *m = v->objs[0];
        if (m->kind != mk || strcmp(m->name, in->name) != 0 ||
            (mk != MF_TEMPLATE && strcmp(m->ns, ns) != 0)) {
            snprintf(err, errlen, "the object is %s '%s/%s', not the one addressed ('%s/%s')",
                     mf_kind_name(m->kind), m->ns, m->name, ns, in->name);
            mf_set_free(v);
            return AB_EINVAL;
        }
        const char *tpl = mk == MF_ENV    ? m->u.env.template_ref
                          : mk == MF_POOL ? m->u.pool.template_name
                                          : "";
        if (tpl[0] && !json_object_get(o->d.templates, tpl)) {
            snprintf(err, errlen,
                     "field '%s' names SandboxTemplate '%s', which this cluster does not have",
                     mk == MF_ENV ? "spec.templateRef.name" : "spec.templateName", tpl);
            mf_set_free(v);
            return AB_EINVAL;
        }
    }
    if (in->kind == RT_OBJ_ENV && in->obj && in->secret == RT_SECRET_SET) {
        json_t *probe = kobj_secret_body(ns, in->name, "x", in->pull_secret, err, errlen);
        if (!probe) {
            mf_set_free(v);
            return AB_EINVAL;
        }
        json_decref(probe);
    }
    if (o->n >= KOBJ_WRITES_MAX) {
        mf_set_free(v);
        snprintf(err, errlen, "%d manifest writes are already waiting; try again", o->n);
        return AB_EBUSY;
    }
    if (!(w = calloc(1, sizeof(*w)))) {
        mf_set_free(v);
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    w->o = o;
    w->kind = in->kind;
    ab_strlcpy(w->ns, ns, sizeof(w->ns));
    ab_strlcpy(w->name, in->name, sizeof(w->name));
    /* the parser's copy: an Env's members carry their rendered names in the CRD */
    w->obj =
        in->obj ? body_of(in->kind, ns, v && v->objs[0]->raw ? v->objs[0]->raw : in->obj) : NULL;
    mf_set_free(v);
    w->secret = in->secret;
    w->pull_secret = in->pull_secret ? json_deep_copy(in->pull_secret) : NULL;
    w->cb = cb;
    w->arg = arg;
    if ((in->obj && !w->obj) || (in->pull_secret && !w->pull_secret)) {
        kw_free(w);
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    if (o->tail)
        o->tail->next = w;
    else
        o->head = w;
    o->tail = w;
    o->n++;
    pump(o);
    return 0;
}

struct kobj *kobj_new(const struct kobj_deps *d)
{
    struct kobj *o = calloc(1, sizeof(*o));
    if (o)
        o->d = *d;
    return o;
}

void kobj_close(struct kobj *o)
{
    if (!o || o->closing)
        return;
    o->closing = true;
    while (o->head) {
        struct kw *w = o->head;
        o->head = w->next;
        if (!w->answered)
            w->cb(w->arg, AB_ECLOSED, "the kube runtime is shutting down");
        kw_free(w);
    }
    o->tail = NULL;
    o->n = 0;
}

void kobj_free(struct kobj *o)
{
    if (!o)
        return;
    kobj_close(o);
    free(o);
}
