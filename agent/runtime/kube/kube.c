/* The kube runtime (kube.h): reflectors → the loop thread's cache, the
 * reconcile pass (Env members → SandboxPools, pools → idle Pods, status,
 * Events, finalizers, rolls), claims by in-place image swap, release back to
 * the idle image, and the rt_ops.
 *
 * Loop thread for everything but the reflector threads (reflect_main and
 * on_event, which only copy objects into the queue). */
#include "agent/runtime/kube/kube.h"

#include "agent/runtime/kube/adopt.h"
#include "agent/runtime/kube/client.h"
#include "agent/runtime/kube/objects.h"
#include "agent/runtime/kube/egress_pod.h"
#include "agent/runtime/kube/reconcile.h"
#include "agent/runtime/revision.h"
#include "agent/runtime/kube/start.h"
#include "agent/runtime/kube/registry.h"
#include "agent/runtime/kube/usage.h"
#include "agent/runtime/kube/scale.h"
#include "agent/runtime/local/manifest.h"
#include "agent/egress/policy.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/hex.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUEUE_MAX 20000 /* events between the reflectors and the loop */
#define KICK_MS 5       /* coalesces a burst of events into one pass */
#define EXPECT_MS 30000 /* a create or delete not observed by then is forgotten */
#define DEFAULT_STARTUP_MS 120000
#define DEFAULT_TIMEOUT_S 300
#define INIT_BODY_MAX (4 * 1024 * 1024)
#define POOLS_MAX 1024
#define STATUS_GAP_MS 1000
#define RETRY_MS 200 /* a Pod that answered 409 is left alone this long */
/* Claims are API writes: more than client-go's 5/10 defaults, still bounded. */
#define CLIENT_QPS 100
#define CLIENT_BURST 200
#define PODS_PER_POOL_MAX 2048
#define CREATES_PER_PASS 100

enum { K_TPL = 0, K_ENV, K_POOL, K_POD, K_NKINDS };

static const struct {
    const char *group, *version, *resource;
} KINDS[K_NKINDS] = {
    [K_TPL] = {KUBE_GROUP, KUBE_CR_VERSION, "sandboxtemplates"},
    [K_ENV] = {KUBE_GROUP, KUBE_CR_VERSION, "sandboxenvs"},
    [K_POOL] = {KUBE_GROUP, KUBE_CR_VERSION, "sandboxpools"},
    [K_POD] = {"", "v1", "pods"},
};

struct krt;

struct kev {
    struct kev *next;
    int kind;
    enum kube_event ev;
    json_t *obj; /* owned; NULL for KUBE_SYNCED */
};

struct kreflector {
    struct krt *rt;
    int kind;
    pthread_t th;
    bool started;
};

struct kwaiter {
    struct kwaiter *next;
    struct krt *rt;
    struct kpool *pool;
    uint64_t ticket;
    rt_claim_cb cb;
    void *arg;
    char id[RT_ID_MAX + 1];
    int64_t timeout_s;
    int64_t startup_ms;
    json_t *env_vars, *metadata;
    char user[64], workdir[256];
    char team[RT_NAME_MAX + 1], owner[RT_NAME_MAX + 1];
    char token[RT_TOKEN_MAX + 1]; /* "" → a random one */
    char image[KUBE_IMAGE_MAX];   /* "" → the pool's running image */
    json_t *network;              /* the egress policy (egress_pod.h); NULL: no lists */
    bool internet, allow_private;
    struct loop_timer timer;
    bool timer_on;
    bool cancelled;
    bool killed; /* released while being armed: the claim fails once arming ends */
    /* A Pod that answered 409 at this resourceVersion is not tried again
     * until the cache moves past it. */
    char skip_pod[KUBE_POD_NAME_MAX + 1];
    char skip_rv[32];
    int64_t skip_until_ms; /* and for a moment at most (a 409 need not move it) */
};

enum ks_state { KS_PATCHING = 1, KS_SWAPPING, KS_ARMING, KS_RUNNING };

struct ksb {
    struct ksb *next;
    struct krt *rt;
    struct kpool *pool;
    enum ks_state state;
    char ns[64];
    char pod[KUBE_POD_NAME_MAX + 1];
    char uid[64];
    char container[64];
    char id[RT_ID_MAX + 1];
    char image[KUBE_IMAGE_MAX]; /* the target */
    char ip[64];
    char token[RT_TOKEN_MAX + 1];
    struct kwaiter *w; /* while claiming */
    json_t *metadata;
    char team[RT_NAME_MAX + 1], owner[RT_NAME_MAX + 1];
    int64_t claimed_ms, end_ms;
    int64_t last_active_ms, idle_ms; /* idle_ms 0: no idle timeout */
    struct loop_timer timer;
    bool timer_on;
    struct http_client *hc;
    int http_status;
    bool doomed; /* freed when its request ends */
    /* Re-adoption (adopt.h): the Pod's resourceVersion our last write of it
     * produced (older watch events are not news), and end-at writes in flight
     * (the watch must not undo a newer end with an older one). */
    long long seen_rv;
    int end_writing;
    struct kstart *start; /* the start command and readiness checks (start.h); NULL: none */
    /* A Pod whose start command ran while idle (prestart): envd already has
     * this token, so the claim's /init presents it and runs nothing more. */
    char idle_token[RT_TOKEN_MAX + 1];
    /* egress sidecar (egress_pod.h): the policy pushed, and a push under way */
    json_t *network;
    bool internet, allow_private;
    struct kube_egress_push *push;
};

/* An idle Pod of a pool claimed without a swap whose start command and
 * checks run now, so that the warm Pod is already ready (leader only). */
struct kpre {
    struct kpre *next;
    struct krt *rt;
    struct kpool *pool;
    char ns[64];
    char pod[KUBE_POD_NAME_MAX + 1];
    char uid[64];
    char ip[64];
    char token[RT_TOKEN_MAX + 1];
    struct http_client *hc; /* its /init */
    int http_status;
    struct kstart *k;
    bool ready;              /* passed: the token is written on the Pod (sealed) and kept here */
    struct loop_timer timer; /* the pool's startup timeout, until ready */
    bool timer_on;
};

/* A released sandbox's egress policy being cleared (egress_pod.h): its
 * sidecar refuses everything again at once, before the kubelet has even
 * stopped the old container. */
struct kclear {
    struct kclear *next;
    struct krt *rt;
    struct kube_egress_push *push;
};

/* A release someone waits on: done once the kubelet runs the idle image
 * again (the sandbox's processes are gone with the old container) or the
 * Pod is gone. */
struct krel {
    struct krel *next;
    struct krt *rt;
    char ns[64];
    char pod[KUBE_POD_NAME_MAX + 1];
    char uid[64];
    char idle_image[KUBE_IMAGE_MAX];
    bool replaced; /* the Pod is deleted, not swapped back: done when it is gone */
    rt_release_cb cb;
    void *arg;
    struct loop_timer timer;
};

struct kpool {
    struct kpool *next;
    struct krt *rt;
    char ns[64];
    char name[RT_NAME_MAX + 1];
    char env[RT_NAME_MAX + 1];
    char group[RT_NAME_MAX + 1];
    char tpl[254];
    char uid[64];
    char revision[KUBE_REV_LEN + 1];
    char idle_image[KUBE_IMAGE_MAX];
    char run_image[KUBE_IMAGE_MAX];
    char container[64];
    int envd_port;
    bool gateway; /* its Pods carry the egress sidecar (egress_pod.h) */
    int replicas, max_replicas, priority;
    int64_t startup_ms, idle_ms;
    bool removed;
    bool seen;
    struct kube_pool_counts counts;
    struct kwaiter *w_head, *w_tail;
    int nwaiters;
    int creating;           /* POSTs not yet answered */
    bool status_inflight;   /* one status write at a time */
    int64_t status_next_ms; /* and at most one a STATUS_GAP_MS (claims move it often) */
    bool spec_inflight;     /* one member-pool write at a time */
    char last_event[160];   /* the last Event's reason+message: not repeated */
    /* The registry rewrite its Pods' images get (template annotation, then
     * --registry-rewrite); rewrite_err: the annotation is malformed, so the
     * pool neither creates nor deletes Pods and claims are refused. */
    struct kube_rewrite rw;
    char rewrite_err[400];
    int64_t last_event_ms;
    struct rt_start_spec start; /* its runtimes' start command and probes (startcmd.h) */
    int64_t prestart_after_ms;  /* an idle Pod's start failed: the next waits until then */
    int64_t last_create_ms;     /* the autoscaler's last-create tracking (scale.c) */
    uint64_t claims;            /* creates ever queued on it (rt_pool.claims) */
};

struct krt {
    struct rt base;
    struct loop *loop;
    struct kube_client *c;
    uint64_t reader; /* c as the usage and log reads know it (usage.h) */
    char cluster[64];
    char ns[64];
    int64_t resync_ms;
    int waiters_max;
    struct kube_rewrite rewrite; /* --registry-rewrite: the region's default */
    struct kube_seal seal;       /* the envd token's seal on claimed Pods (adopt.h) */
    char egress_image[KUBE_IMAGE_MAX], egress_resolver[128]; /* the sidecar's (egress_pod.h) */
    struct kscale *scale; /* scaling groups and the autoscaler's replicas (scale.c) */
    bool leading;
    bool closing;
    int inflight; /* kube_submit jobs and envd requests not yet called back */

    /* reflector → loop queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct kev *q_head, *q_tail;
    int q_len;
    atomic_bool posted;
    atomic_int posts; /* drain calls posted and not yet run: rt lives until they have */
    atomic_bool stop;
    struct kreflector refl[K_NKINDS];
    bool synced[K_NKINDS];

    /* cache (loop thread): "ns/name" (templates: "name") → object */
    json_t *objs[K_NKINDS];
    json_t *expect_add; /* "ns/name" of created Pods not yet seen → deadline ms */
    json_t *expect_del; /* "ns/name" of deleted Pods still seen → deadline ms */
    json_t *env_writes; /* "ns/name" of an Env → ms before which its status is not written */
    unsigned crd_gen, set_gen;
    struct mf_set *set;

    struct kobj *kobj; /* rt_objects / rt_object_write (objects.c) */

    struct kpool *pools;
    struct ksb *sbxs;
    struct krel *rels;
    struct kpre *pres;
    struct kclear *clears; /* DELETE /policy to released Pods' sidecars, under way */
    uint64_t next_ticket;
    struct loop_timer kick, tick, gap, retry;
    bool kick_on, gap_on, retry_on;
};

static void schedule(struct krt *rt);
static void gap_fn(struct loop_timer *t);
static void reconcile_env_status(struct krt *rt);
static void refresh_start_specs(struct krt *rt);
struct kpre;
static bool prestart_pool(const struct kpool *p);
static bool prestart_token(struct krt *rt, const struct kube_pod *pod, const json_t *obj,
                           char *out);
static void prestart_pod(struct krt *rt, struct kpool *p, const struct kube_pod *pod,
                         const json_t *obj);
static void prestart_forget(struct krt *rt, const struct kube_pod *pod);
static void prestart_free(struct kpre *x);
static void retry_fn(struct loop_timer *t);
static void serve_waiters(struct krt *rt, struct kpool *p);
static void ksb_release(struct ksb *s, const char *why);
static void claim_fail(struct kwaiter *w, int err, const char *msg);
struct kube_pod;
static void pod_delete(struct krt *rt, const struct kube_pod *pod);
static void pod_unfinalize(struct krt *rt, const struct kube_pod *pod, const json_t *obj);

/* ---- small helpers ------------------------------------------------------------------ */

static const char *jstr(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static const json_t *jget2(const json_t *o, const char *a, const char *b)
{
    return json_object_get(json_object_get(o, a), b);
}

static void key_of(const json_t *obj, int kind, char *out, size_t n)
{
    const json_t *md = json_object_get(obj, "metadata");
    if (kind == K_TPL)
        snprintf(out, n, "%s", jstr(md, "name"));
    else
        snprintf(out, n, "%s/%s", jstr(md, "namespace"), jstr(md, "name"));
}

/* An HTTP status as a log field (fields are strings). */
static const char *code_s(long code)
{
    static _Thread_local char b[24];
    snprintf(b, sizeof(b), "%ld", code);
    return b;
}

static void now_time(char out[32])
{
    kube_time_format(ab_wall_ms(), false, out);
}

/* ---- requests ----------------------------------------------------------------------- */

typedef void (*kreq_fn)(struct krt *rt, void *arg, int rc, struct kube_response *resp);

struct kreq {
    struct krt *rt;
    kreq_fn fn;
    void *arg;
};

static void krt_destroy(struct krt *rt);
static void maybe_destroy(struct krt *rt);

static void req_done(void *p, int rc, struct kube_response *resp)
{
    struct kreq *q = p;
    struct krt *rt = q->rt;

    rt->inflight--;
    q->fn(rt, q->arg, rt->closing ? AB_ECLOSED : rc, rt->closing ? NULL : resp);
    free(q);
    maybe_destroy(rt);
}

/* Sends method on ref (sub-resource and name included) with body (a JSON
 * value, borrowed; NULL: none). fn runs once on the loop thread, with rc
 * AB_ECLOSED and resp NULL when the runtime shut down; never when this
 * returns non-zero. */
static int send_req(struct krt *rt, const char *method, const struct kube_ref *ref,
                    const char *ctype, const json_t *body, kreq_fn fn, void *arg)
{
    char url[KUBE_URL_MAX], err[256];
    char *text = NULL;
    struct kreq *q;
    int rc;

    if (rt->closing)
        return AB_ECLOSED;
    if ((rc = kube_url(url, sizeof(url), kube_client_server(rt->c), ref, NULL, err, sizeof(err))) !=
        0) {
        LOG_WARN("kube request not sent", "method", method, "error", err);
        return rc;
    }
    if (body && !(text = json_dumps(body, JSON_COMPACT)))
        return AB_ENOMEM;
    if (!(q = calloc(1, sizeof(*q)))) {
        free(text);
        return AB_ENOMEM;
    }
    q->rt = rt;
    q->fn = fn;
    q->arg = arg;
    rc = kube_submit(rt->loop, rt->c, method, url, ctype ? ctype : "application/json", text,
                     text ? strlen(text) : 0, req_done, q);
    free(text);
    if (rc != 0) {
        free(q);
        return rc;
    }
    rt->inflight++;
    return 0;
}

static struct kube_ref ref_of(int kind, const char *ns, const char *name, const char *sub)
{
    struct kube_ref r = {.group = KINDS[kind].group,
                         .version = KINDS[kind].version,
                         .ns = kind == K_TPL ? NULL : ns,
                         .resource = KINDS[kind].resource,
                         .name = name,
                         .sub = sub};
    return r;
}

static void ignore_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    (void)rt;
    if (rc == 0 && resp && (resp->code < 200 || resp->code >= 300) && resp->code != 404 &&
        resp->code != 409)
        LOG_WARN("kube request refused", "what", (const char *)arg, "code", code_s(resp->code),
                 "message", resp->status.message);
    free(arg);
}

static void send_simple(struct krt *rt, const char *what, const char *method,
                        const struct kube_ref *ref, const char *ctype, const json_t *body)
{
    char *w = strdup(what);
    if (!w)
        return;
    if (send_req(rt, method, ref, ctype, body, ignore_done, w) != 0)
        free(w);
}

/* An Event for operators (not repeated while reason and message stay). */
static void pool_event(struct krt *rt, struct kpool *p, const char *type, const char *reason,
                       const char *msg)
{
    char key[160];
    int64_t now = ab_now_ms();

    snprintf(key, sizeof(key), "%s:%.120s", reason, msg);
    if (strcmp(key, p->last_event) == 0 && now - p->last_event_ms < 60000)
        return;
    ab_strlcpy(p->last_event, key, sizeof(p->last_event));
    p->last_event_ms = now;
    json_t *e =
        kube_event_body("SandboxPool", p->ns, p->name, p->uid, type, reason, msg, ab_wall_ms());
    struct kube_ref r = {.group = "", .version = "v1", .ns = p->ns, .resource = "events"};
    if (e)
        send_simple(rt, "event", "POST", &r, NULL, e);
    json_decref(e);
}

/* ---- reflectors (their own threads) -------------------------------------------------- */

static void drain(void *arg, int status);

static int on_event(void *arg, enum kube_event ev, json_t *obj)
{
    struct kreflector *r = arg;
    struct krt *rt = r->rt;
    struct kev *e = calloc(1, sizeof(*e));

    if (!e)
        return 0; /* the next relist repairs the cache */
    e->kind = r->kind;
    e->ev = ev;
    e->obj = obj ? json_deep_copy(obj) : NULL;
    pthread_mutex_lock(&rt->mu);
    /* Back-pressure rather than loss: the reflector waits for the loop. */
    while (rt->q_len >= QUEUE_MAX && !atomic_load(&rt->stop)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rt->cv, &rt->mu, &ts);
    }
    if (rt->q_tail)
        rt->q_tail->next = e;
    else
        rt->q_head = e;
    rt->q_tail = e;
    rt->q_len++;
    pthread_mutex_unlock(&rt->mu);
    if (!atomic_exchange(&rt->posted, true)) {
        atomic_fetch_add(&rt->posts, 1);
        if (loop_post(rt->loop, drain, rt) != 0) {
            atomic_fetch_sub(&rt->posts, 1);
            atomic_store(&rt->posted, false); /* the tick drains */
        }
    }
    return 0;
}

static void *reflect_main(void *arg)
{
    struct kreflector *r = arg;
    struct krt *rt = r->rt;
    struct kube_reflect_options o = {
        .ref = ref_of(r->kind, rt->ns, NULL, NULL),
        .label_selector = r->kind == K_POD ? KUBE_POD_SELECTOR : NULL,
        .stop = &rt->stop,
    };
    while (!atomic_load(&rt->stop)) {
        int rc = kube_reflect(rt->c, &o, on_event, r);
        if (rc != 0 && !atomic_load(&rt->stop))
            LOG_WARN("kube reflector ended; restarting", "resource", KINDS[r->kind].resource,
                     "error", ab_strerror(rc));
    }
    return NULL;
}

/* ---- the cache (loop thread) ---------------------------------------------------------- */

static struct kpool *pool_find(struct krt *rt, const char *ns, const char *name)
{
    for (struct kpool *p = rt->pools; p; p = p->next)
        if (!p->removed && strcmp(p->ns, ns) == 0 && strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

static struct ksb *ksb_by_pod(struct krt *rt, const char *ns, const char *pod)
{
    for (struct ksb *s = rt->sbxs; s; s = s->next)
        if (strcmp(s->ns, ns) == 0 && strcmp(s->pod, pod) == 0)
            return s;
    return NULL;
}

static struct ksb *ksb_by_id(struct krt *rt, const char *id)
{
    for (struct ksb *s = rt->sbxs; s; s = s->next)
        if (s->state == KS_RUNNING && strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

static void pod_changed(struct krt *rt, const json_t *obj, bool gone);

static void apply(struct krt *rt, struct kev *e)
{
    char key[400];

    if (e->ev == KUBE_SYNCED) {
        rt->synced[e->kind] = true;
        return;
    }
    key_of(e->obj, e->kind, key, sizeof(key));
    if (e->kind != K_POD)
        rt->crd_gen++;
    if (e->ev == KUBE_DELETED) {
        json_object_del(rt->objs[e->kind], key);
        if (e->kind == K_POD) {
            json_object_del(rt->expect_del, key);
            json_object_del(rt->expect_add, key);
            pod_changed(rt, e->obj, true); /* after: a retried claim must not see it */
        }
        return;
    }
    json_object_set(rt->objs[e->kind], key, e->obj);
    if (e->kind == K_POD) {
        json_object_del(rt->expect_add, key);
        pod_changed(rt, e->obj, false);
    }
}

static void maybe_destroy(struct krt *rt)
{
    if (rt->closing && rt->inflight == 0 && atomic_load(&rt->posts) == 0)
        krt_destroy(rt);
}

static void drain_now(struct krt *rt)
{
    struct kev *head;

    atomic_store(&rt->posted, false);
    pthread_mutex_lock(&rt->mu);
    head = rt->q_head;
    rt->q_head = rt->q_tail = NULL;
    rt->q_len = 0;
    pthread_cond_broadcast(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
    if (!head)
        return;
    while (head) {
        struct kev *n = head->next;
        apply(rt, head);
        json_decref(head->obj);
        free(head);
        head = n;
    }
    kobj_observed(rt->kobj); /* writes waiting for the watch */
    schedule(rt);
}

static void drain(void *arg, int status)
{
    struct krt *rt = arg;

    (void)status;
    atomic_fetch_sub(&rt->posts, 1);
    if (rt->closing) {
        maybe_destroy(rt);
        return;
    }
    drain_now(rt);
}

/* ---- claims: image swap, then /init --------------------------------------------------- */

static void waiter_free(struct kwaiter *w)
{
    if (w->timer_on)
        loop_timer_cancel(&w->timer);
    json_decref(w->env_vars);
    json_decref(w->metadata);
    json_decref(w->network);
    explicit_bzero(w->token, sizeof(w->token));
    free(w);
}

static void waiter_unlink(struct kpool *p, struct kwaiter *w)
{
    struct kwaiter **pp = &p->w_head, *prev = NULL;
    for (; *pp; prev = *pp, pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            if (p->w_tail == w)
                p->w_tail = prev;
            w->next = NULL;
            p->nwaiters--;
            return;
        }
    }
}

/* A claim whose Pod went away before it was armed waits again, first; one
 * killed meanwhile (pending_release) ends instead. */
static void waiter_push_front(struct kpool *p, struct kwaiter *w)
{
    if (w->killed) {
        claim_fail(w, AB_ECLOSED, "the sandbox was killed before it started");
        return;
    }
    w->next = p->w_head;
    p->w_head = w;
    if (!p->w_tail)
        p->w_tail = w;
    p->nwaiters++;
}

static void claim_fail(struct kwaiter *w, int err, const char *msg)
{
    if (!w->cancelled && w->cb)
        w->cb(w->arg, err, msg, NULL);
    waiter_free(w);
}

static void ksb_unlink_free(struct ksb *s)
{
    struct ksb **pp;
    for (pp = &s->rt->sbxs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    if (s->timer_on)
        loop_timer_cancel(&s->timer);
    if (s->hc)
        http_client_close(s->hc);
    kstart_free(s->start);
    kube_egress_push_cancel(s->push);
    json_decref(s->network);
    json_decref(s->metadata);
    explicit_bzero(s->token, sizeof(s->token));
    explicit_bzero(s->idle_token, sizeof(s->idle_token));
    free(s);
}

static void fill(const struct ksb *s, struct rt_sandbox *o, bool ref_md)
{
    memset(o, 0, sizeof(*o));
    ab_strlcpy(o->id, s->id, sizeof(o->id));
    ab_strlcpy(o->ns, s->ns, sizeof(o->ns));
    ab_strlcpy(o->env, s->pool->env, sizeof(o->env));
    ab_strlcpy(o->pool, s->pool->name, sizeof(o->pool));
    ab_strlcpy(o->scaling_group, s->pool->group, sizeof(o->scaling_group));
    ab_strlcpy(o->template_name, s->pool->tpl, sizeof(o->template_name));
    ab_strlcpy(o->team, s->team, sizeof(o->team));
    ab_strlcpy(o->owner, s->owner, sizeof(o->owner));
    o->state = s->state == KS_RUNNING ? RT_RUNNING : RT_STARTING;
    /* without the sidecar the Pod's network policy is the cluster's */
    o->internet = s->pool->gateway ? s->internet : true;
    o->claimed_ms = s->claimed_ms;
    o->end_ms = s->end_ms;
    snprintf(o->envd_addr, sizeof(o->envd_addr), "%s:%d", s->ip, s->pool->envd_port);
    ab_strlcpy(o->port_addr, s->ip, sizeof(o->port_addr));
    ab_strlcpy(o->envd_token, s->token, sizeof(o->envd_token));
    o->metadata = s->metadata && ref_md ? json_incref(s->metadata) : s->metadata;
}

static void end_timer(struct loop_timer *t);

/* ---- re-adoption hooks (adopt.h) ---------------------------------------------------------- */

struct kend {
    char ns[64];
    char pod[KUBE_POD_NAME_MAX + 1];
    char id[RT_ID_MAX + 1];
};

static void end_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    struct kend *e = arg;
    struct ksb *s = rc == AB_ECLOSED ? NULL : ksb_by_pod(rt, e->ns, e->pod);

    if (s && strcmp(s->id, e->id) == 0) {
        s->end_writing--;
        if (rc == 0 && resp->code == 200) {
            json_t *pod = json_loadb(resp->body, resp->len, 0, NULL);
            long long rv =
                strtoll(jstr(json_object_get(pod, "metadata"), "resourceVersion"), NULL, 10);
            s->seen_rv = AB_MAX(s->seen_rv, rv);
            json_decref(pod);
        }
    }
    if (rc == 0 && resp->code != 200)
        LOG_WARN("a sandbox's end-at not written on its Pod", "pod", e->pod, "code",
                 code_s(resp->code), "message", resp->status.message);
    free(e);
}

/* Writes the sandbox's end on its Pod (end-at), with the running phase
 * label once armed: what another replica, or this agent after a restart,
 * rebuilds the sandbox's timeout from. */
static void end_write(struct ksb *s, bool armed_now)
{
    char ts[32];
    struct kend *e = calloc(1, sizeof(*e));

    if (!e)
        return;
    ab_strlcpy(e->ns, s->ns, sizeof(e->ns));
    ab_strlcpy(e->pod, s->pod, sizeof(e->pod));
    ab_strlcpy(e->id, s->id, sizeof(e->id));
    kube_time_format(s->end_ms, true, ts);
    json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", KUBE_A_END, ts);
    if (patch && armed_now)
        json_object_set_new(json_object_get(patch, "metadata"), "labels",
                            json_pack("{s:s}", KUBE_L_PHASE, "running"));
    struct kube_ref r = ref_of(K_POD, s->ns, s->pod, NULL);
    if (patch &&
        send_req(s->rt, "PATCH", &r, "application/merge-patch+json", patch, end_done, e) == 0) {
        s->end_writing++;
        e = NULL;
    }
    json_decref(patch);
    free(e);
}

static void schedule_end(struct ksb *s);

/* A running sandbox's Pod moved. Another replica released it (the claim's
 * label is gone or the Pod is going back to idle): forgotten here, nothing
 * written. Another replica set its timeout: the new end applies here too.
 * true when s was freed. */
static bool running_moved(struct ksb *s, const struct kube_pod *p, const json_t *obj)
{
    long long rv = strtoll(p->rv, NULL, 10);
    struct kube_claimed c;

    if (rv <= s->seen_rv)
        return false; /* older than what we wrote or adopted */
    s->seen_rv = rv;
    if (p->phase == KUBE_PH_STOPPING || p->phase == KUBE_PH_IDLE || strcmp(p->sandbox_id, s->id)) {
        LOG_INFO("sandbox released by another agent", "id", s->id, "pod", s->pod);
        ksb_unlink_free(s);
        return true;
    }
    if (s->end_writing > 0 || kube_claimed_read(obj, &c) != 0)
        return false;
    json_decref(c.metadata);
    if (c.end_ms > 0 && c.end_ms != s->end_ms) {
        s->end_ms = c.end_ms;
        schedule_end(s);
    }
    return false;
}

/* A claimed Pod no sandbox of ours holds: rebuilt from its annotations when
 * it is armed and its token opens; else the verdict says whether to leave it
 * (a claim under way, perhaps another replica's) or release it. */
static enum kube_adopt_verdict adopt_pod(struct krt *rt, struct kpool *p,
                                         const struct kube_pod *pod, const json_t *obj)
{
    struct kube_claimed c;
    char token[RT_TOKEN_MAX + 1] = "";
    bool unsealed = false;
    int64_t now = ab_wall_ms();
    enum kube_adopt_verdict v;
    struct ksb *s;

    if ((pod->phase != KUBE_PH_STARTING && pod->phase != KUBE_PH_RUNNING) || pod->deleting ||
        pod->dead || ksb_by_pod(rt, pod->ns, pod->name))
        return KUBE_ADOPT_NO; /* the phase first: most Pods are idle, and this runs every pass */
    kube_claimed_read(obj, &c);
    for (s = rt->sbxs; s && c.id[0]; s = s->next)
        if (strcmp(s->id, c.id) == 0) { /* another Pod claims to be it: leave both alone */
            json_decref(c.metadata);
            return KUBE_ADOPT_NO;
        }
    bool running_image = pod->running && pod->ip[0] && strcmp(pod->image, pod->status_image) == 0;
    if (c.id[0] && c.sealed[0] && pod->phase == KUBE_PH_RUNNING)
        unsealed = kube_unseal_token(&rt->seal, pod->ns, pod->name, pod->uid, c.id, c.principal,
                                     c.sealed, token, sizeof(token)) == 0;
    v = kube_adopt_decide(pod->phase, &c, running_image, unsealed, now,
                          p->startup_ms > 0 ? p->startup_ms : DEFAULT_STARTUP_MS);
    if (v != KUBE_ADOPT_YES || !(s = calloc(1, sizeof(*s)))) {
        explicit_bzero(token, sizeof(token));
        json_decref(c.metadata);
        return v == KUBE_ADOPT_YES ? KUBE_ADOPT_NO : v;
    }
    s->rt = rt;
    s->pool = p;
    s->state = KS_RUNNING;
    ab_strlcpy(s->ns, pod->ns, sizeof(s->ns));
    ab_strlcpy(s->pod, pod->name, sizeof(s->pod));
    ab_strlcpy(s->uid, pod->uid, sizeof(s->uid));
    ab_strlcpy(s->container, p->container, sizeof(s->container));
    ab_strlcpy(s->id, c.id, sizeof(s->id));
    ab_strlcpy(s->image, pod->image, sizeof(s->image));
    ab_strlcpy(s->ip, pod->ip, sizeof(s->ip));
    ab_strlcpy(s->token, token, sizeof(s->token));
    explicit_bzero(token, sizeof(token));
    ab_strlcpy(s->team, c.team, sizeof(s->team));
    ab_strlcpy(s->owner, c.owner, sizeof(s->owner));
    s->metadata = c.metadata;
    /* the policy's lists stay in the sidecar, which still enforces them */
    s->internet = c.has_egress ? c.internet : false;
    s->allow_private = c.has_egress && c.allow_private;
    s->claimed_ms = c.claimed_ms > 0 ? c.claimed_ms : now;
    s->end_ms = c.end_ms;
    s->last_active_ms = now; /* activity before the restart is not known: a full idle period */
    s->idle_ms = p->idle_ms;
    s->seen_rv = strtoll(pod->rv, NULL, 10);
    s->next = rt->sbxs;
    rt->sbxs = s;
    schedule_end(s);
    LOG_INFO("sandbox adopted from its Pod", "id", s->id, "pool", p->name, "pod", s->pod);
    return KUBE_ADOPT_YES;
}

/* The next end: the lifetime, or the pool's idle timeout after the last
 * data-plane activity, whichever comes first. */
static void schedule_end(struct ksb *s)
{
    int64_t at = s->end_ms;
    if (s->idle_ms > 0)
        at = AB_MIN(at, s->last_active_ms + s->idle_ms);
    if (s->timer_on)
        loop_timer_cancel(&s->timer);
    s->timer_on = true;
    loop_timer_start(s->rt->loop, &s->timer, AB_MAX(at - ab_wall_ms(), 0), end_timer, s);
}

static void end_timer(struct loop_timer *t)
{
    struct ksb *s = t->arg;
    int64_t now = ab_wall_ms();
    s->timer_on = false;
    if (!s->rt->leading &&
        (now >= s->end_ms || (s->idle_ms > 0 && now >= s->last_active_ms + s->idle_ms))) {
        /* Every replica holds the sandbox; the leader ends it. Look again
         * in a while, in case this one leads by then. */
        s->timer_on = true;
        loop_timer_start(s->rt->loop, &s->timer, 1000, end_timer, s);
        return;
    }
    if (now >= s->end_ms || (s->idle_ms > 0 && now >= s->last_active_ms + s->idle_ms)) {
        LOG_INFO("sandbox timed out", "id", s->id, "pool", s->pool->name);
        ksb_release(s, "timeout");
        return;
    }
    schedule_end(s);
}

static void armed(struct ksb *s)
{
    struct kwaiter *w = s->w;
    struct rt_sandbox snap;

    s->w = NULL;
    if (w->cancelled || w->killed) {
        const char *why = w->killed ? "released" : "cancelled";
        claim_fail(w, AB_ECLOSED, "the sandbox was killed before it was armed");
        ksb_release(s, why);
        return;
    }
    s->state = KS_RUNNING;
    s->metadata = w->metadata;
    w->metadata = NULL;
    s->claimed_ms = s->last_active_ms = ab_wall_ms();
    s->end_ms = s->claimed_ms + w->timeout_s * 1000;
    s->idle_ms = s->pool->idle_ms;
    schedule_end(s);
    LOG_INFO("sandbox claimed", "id", s->id, "pool", s->pool->name, "pod", s->pod, "image",
             s->image);
    /* The swap is done: the Pod says so (operators count phases by label),
     * with the end a re-adopting agent needs. */
    end_write(s, true);
    fill(s, &snap, false);
    w->cb(w->arg, 0, NULL, &snap);
    waiter_free(w);
}

/* The claim failed on this Pod: the caller hears why, the Pod goes back. */
static void ksb_fail(struct ksb *s, int err, const char *msg)
{
    struct kwaiter *w = s->w;
    s->w = NULL;
    LOG_WARN("claim failed", "pool", s->pool->name, "pod", s->pod, "error", msg);
    if (w)
        claim_fail(w, err, msg);
    ksb_release(s, "failed");
}

static void init_head(struct http_client *c, int status, const struct http_header *h, int n,
                      void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct ksb *)arg)->http_status = status;
}

static void init_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    (void)c;
    (void)d;
    (void)len;
    (void)arg;
}

/* The start command and readiness checks ended (start.h): armed, or the
 * claim fails naming the check (the Pod goes back). */
static void start_done(void *arg, int err, const char *msg)
{
    struct ksb *s = arg;

    if (s->state != KS_ARMING || !s->w)
        return; /* ready long ago: a late word changes nothing */
    if (err)
        ksb_fail(s, AB_EIO, msg);
    else
        armed(s);
}

/* After the claim's /init (envd refuses processes before it): the claim's
 * token and user run the command. */
static void start_begin(struct ksb *s)
{
    struct kstart_deps d = {
        .loop = s->rt->loop,
        .spec = &s->pool->start,
        .ip = s->ip,
        .envd_port = s->pool->envd_port,
        .token = s->token,
        .user = s->w->user,
        .done = start_done,
        .arg = s,
    };
    if (!(s->start = kstart_new(&d)))
        ksb_fail(s, AB_ENOMEM, "out of memory starting the start command");
}

static void init_finish(struct ksb *s, const char *err)
{
    char msg[RT_ERR_MAX];
    struct krt *rt = s->rt;

    s->hc = NULL;
    rt->inflight--;
    if (s->doomed || rt->closing) {
        if (s->w)
            claim_fail(s->w, AB_ECLOSED, "the kube runtime is shutting down");
        s->w = NULL;
        ksb_unlink_free(s);
    } else if (!err && s->http_status >= 200 && s->http_status < 300) {
        if (s->w && !s->idle_token[0] && rt_start_spec_needed(&s->pool->start))
            start_begin(s);
        else
            armed(s);
    } else {
        if (err)
            snprintf(msg, sizeof(msg), "envd of Pod %s did not answer POST /init: %s", s->pod, err);
        else
            snprintf(msg, sizeof(msg), "envd of Pod %s answered %d to POST /init", s->pod,
                     s->http_status);
        ksb_fail(s, AB_EIO, msg);
    }
    maybe_destroy(rt);
}

static void init_end(struct http_client *c, void *arg)
{
    (void)c;
    init_finish(arg, NULL);
}

static void init_error(struct http_client *c, int err, const char *m, void *arg)
{
    (void)c;
    (void)err;
    init_finish(arg, m ? m : "error");
}

static const struct http_client_handler init_handler = {
    .on_head = init_head,
    .on_data = init_data,
    .on_end = init_end,
    .on_error = init_error,
};

static void post_init(struct ksb *s)
{
    struct kwaiter *w = s->w;
    struct http_header h[] = {{"Content-Type", "application/json"},
                              {"X-Access-Token", s->idle_token}};
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX], ts[32];
    char *body;
    size_t len;

    s->state = KS_ARMING;
    now_time(ts);
    json_t *b = json_pack("{s:o,s:s,s:s,s:s,s:s,s:s}", "envVars",
                          w->env_vars ? json_deep_copy(w->env_vars) : json_object(), "accessToken",
                          s->token, "defaultUser", w->user, "defaultWorkdir", w->workdir,
                          "timestamp", ts, "lifecycleID", s->id);
    body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!body || (len = strlen(body)) > INIT_BODY_MAX) {
        free(body);
        ksb_fail(s, AB_EIO, "the /init body could not be built (too large or out of memory)");
        return;
    }
    snprintf(addr, sizeof(addr), "%s:%d", s->ip, s->pool->envd_port);
    o.addr = addr;
    o.method = "POST";
    o.target = "/init";
    o.headers = h;
    o.nheaders = s->idle_token[0] ? 2 : 1;
    o.content_length = (int64_t)len;
    o.timeout_ms = 10000;
    s->http_status = 0;
    s->hc = http_client_start(s->rt->loop, &o, &init_handler, s);
    if (!s->hc) {
        explicit_bzero(body, len);
        free(body);
        ksb_fail(s, AB_EIO, "cannot start the request to the Pod's envd");
        return;
    }
    s->rt->inflight++;
    http_client_write(s->hc, body, len);
    http_client_end(s->hc);
    explicit_bzero(body, len);
    free(body);
}

/* The egress sidecar holds the claim's policy: now envd. */
static void pushed(void *arg, const char *err)
{
    struct ksb *s = arg;
    char msg[RT_ERR_MAX];
    s->push = NULL;
    if (err) {
        snprintf(msg, sizeof(msg), "Pod %s: %s", s->pod, err);
        ksb_fail(s, AB_EIO, msg);
        return;
    }
    post_init(s);
}

/* With the egress sidecar, its policy first (egress_pod.h): in force before
 * envd runs a byte of the claim's code. */
static void arm(struct ksb *s)
{
    char token[KUBE_EGRESS_TOKEN_MAX + 1], key[400];

    if (!s->pool->gateway) {
        post_init(s);
        return;
    }
    s->state = KS_ARMING;
    snprintf(key, sizeof(key), "%s/%s", s->ns, s->pod);
    if (kube_egress_token_of(json_object_get(s->rt->objs[K_POD], key), token, sizeof(token)) != 0) {
        ksb_fail(s, AB_EIO, "the Pod's egress sidecar has no token (made by another agent?)");
        return;
    }
    s->network = s->w->network ? json_incref(s->w->network) : NULL;
    s->internet = s->w->internet;
    s->allow_private = s->w->allow_private;
    json_t *b = kube_egress_policy_body(s->network, s->internet, s->allow_private);
    s->push = b ? kube_egress_push(s->rt->loop, s->ip, token, b, pushed, s) : NULL;
    json_decref(b);
    explicit_bzero(token, sizeof(token));
    if (!s->push)
        ksb_fail(s, AB_EIO, "cannot start the request to the Pod's egress sidecar");
}

/* A claimed Pod moved: is the swap done, failed, or the Pod gone? */
static void ksb_observe(struct ksb *s, const struct kube_pod *p, bool gone)
{
    char msg[RT_ERR_MAX];
    struct krt *rt = s->rt;

    if (gone || p->deleting || p->dead || (s->uid[0] && strcmp(s->uid, p->uid) != 0)) {
        if (s->state == KS_RUNNING) {
            LOG_WARN("a claimed Pod went away; its sandbox is gone", "id", s->id, "pod", s->pod);
            ksb_unlink_free(s);
            return;
        }
        if (s->state == KS_ARMING) {
            kube_egress_push_cancel(s->push);
            s->push = NULL;
            if (s->hc) {
                http_client_close(s->hc);
                s->hc = NULL;
                rt->inflight--;
            }
        }
        if (s->state == KS_PATCHING) {
            s->doomed = true; /* the patch answer frees it */
            return;
        }
        /* Not armed yet: the claim tries another Pod. */
        struct kwaiter *w = s->w;
        struct kpool *pool = s->pool;
        s->w = NULL;
        LOG_WARN("a Pod went away during a claim; trying another", "pod", s->pod);
        ksb_unlink_free(s);
        if (w) {
            waiter_push_front(pool, w);
            serve_waiters(rt, pool);
            schedule(rt);
        }
        return;
    }
    if (s->state != KS_SWAPPING)
        return;
    ab_strlcpy(s->ip, p->ip, sizeof(s->ip));
    if (strcmp(p->status_image, s->image) == 0 && p->pull_failed) {
        snprintf(msg, sizeof(msg), "image '%.200s' could not be pulled on Pod %s: %s: %.200s",
                 s->image, s->pod, p->waiting_reason, p->waiting_message);
        ksb_fail(s, AB_EIO, msg);
        return;
    }
    if (strcmp(p->status_image, s->image) == 0 && p->running && p->ready && p->ip[0])
        arm(s);
}

static void rel_end(struct krel *r, int err, const char *msg, bool timer_fired)
{
    struct krel **pp;
    for (pp = &r->rt->rels; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    if (!timer_fired)
        loop_timer_cancel(&r->timer);
    r->cb(r->arg, err, msg);
    free(r);
}

static void rel_timeout(struct loop_timer *t)
{
    struct krel *r = t->arg;
    char msg[RT_ERR_MAX];
    snprintf(msg, sizeof(msg), "Pod %s did not go back to its idle image in time", r->pod);
    rel_end(r, AB_ETIMEOUT, msg, true);
}

static void pod_changed(struct krt *rt, const json_t *obj, bool gone)
{
    struct kube_pod p;
    char err[128];
    struct ksb *s;

    if (kube_pod_observe(obj, &p, err, sizeof(err)) != 0)
        return;
    if (gone || p.deleting || p.dead)
        prestart_forget(rt, &p);
    if ((s = ksb_by_pod(rt, p.ns, p.name)) &&
        !(s->state == KS_RUNNING && !gone && !p.deleting && !p.dead && running_moved(s, &p, obj)))
        ksb_observe(s, &p, gone);
    for (struct krel *r = rt->rels, *next; r; r = next) {
        next = r->next;
        if (strcmp(r->ns, p.ns) != 0 || strcmp(r->pod, p.name) != 0)
            continue;
        if (gone || p.dead || (r->uid[0] && strcmp(r->uid, p.uid) != 0) ||
            (!p.deleting && strcmp(p.status_image, r->idle_image) == 0 && p.running &&
             strcmp(p.image, r->idle_image) == 0 && !r->replaced))
            rel_end(r, 0, NULL, false);
    }
}

static void patch_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    struct ksb *s = arg;
    struct kpool *pool = s->pool;
    char msg[RT_ERR_MAX];

    if (rc == AB_ECLOSED) {
        if (s->w)
            claim_fail(s->w, AB_ECLOSED, "the kube runtime is shutting down");
        s->w = NULL;
        ksb_unlink_free(s);
        return;
    }
    if (rc != 0 || resp->code < 200 || resp->code >= 300 || s->doomed) {
        struct kwaiter *w = s->w;
        s->w = NULL;
        if (rc == 0 && resp->code == 409 && w) { /* someone moved this Pod first */
            ab_strlcpy(w->skip_pod, s->pod, sizeof(w->skip_pod));
            w->skip_until_ms = ab_now_ms() + RETRY_MS;
            if (!rt->retry_on) { /* look again then, even if no event comes */
                rt->retry_on = true;
                loop_timer_start(rt->loop, &rt->retry, RETRY_MS, retry_fn, rt);
            }
        }
        if (rc == 0 && (resp->code == 409 || resp->code == 404 || s->doomed) && w) {
            ksb_unlink_free(s);
            waiter_push_front(pool, w);
            serve_waiters(rt, pool);
            return;
        }
        if (rc == 0)
            snprintf(msg, sizeof(msg), "claiming Pod %s: the API server answered %ld: %.160s",
                     s->pod, resp->code, resp->status.message);
        else
            snprintf(msg, sizeof(msg), "claiming Pod %s: the API server did not answer: %s", s->pod,
                     ab_strerror(rc));
        ksb_unlink_free(s);
        if (w)
            claim_fail(w, AB_EIO, msg);
        return;
    }
    /* Ours now. The kubelet restarts the container on the target image;
     * ksb_observe sees it through the Pod watch. */
    json_t *pod = json_loadb(resp->body, resp->len, 0, NULL);
    struct kube_pod p;
    char err[128];
    s->state = KS_SWAPPING;
    if (pod && kube_pod_observe(pod, &p, err, sizeof(err)) == 0) {
        ab_strlcpy(s->uid, p.uid, sizeof(s->uid));
        s->seen_rv = strtoll(p.rv, NULL, 10);
        /* The same image on a running Pod: no restart comes (fast path). */
        ksb_observe(s, &p, false);
    }
    json_decref(pod);
}

/* Claims Pod p (idle, Ready) for w: the CAS patch with the Pod's version. */
static int claim_pod(struct krt *rt, struct kpool *pool, const struct kube_pod *p,
                     struct kwaiter *w, const char *idle_token)
{
    struct ksb *s = calloc(1, sizeof(*s));
    char ts[32], principal[160];
    uint8_t raw[24];

    if (!s)
        return AB_ENOMEM;
    s->rt = rt;
    s->pool = pool;
    s->w = w;
    s->state = KS_PATCHING;
    ab_strlcpy(s->ns, p->ns, sizeof(s->ns));
    ab_strlcpy(s->pod, p->name, sizeof(s->pod));
    ab_strlcpy(s->id, w->id, sizeof(s->id));
    ab_strlcpy(s->team, w->team, sizeof(s->team));
    ab_strlcpy(s->owner, w->owner, sizeof(s->owner));
    ab_strlcpy(s->ip, p->ip, sizeof(s->ip));
    ab_strlcpy(s->image, w->image[0] ? w->image : pool->run_image, sizeof(s->image));
    /* a swap (an image override) restarts envd: the idle token is gone with it */
    if (idle_token && strcmp(s->image, pool->idle_image) == 0)
        ab_strlcpy(s->idle_token, idle_token, sizeof(s->idle_token));
    if (w->token[0])
        ab_strlcpy(s->token, w->token, sizeof(s->token));
    else {
        crypto_random(raw, sizeof(raw));
        hex_encode(raw, sizeof(raw), s->token);
        explicit_bzero(raw, sizeof(raw));
    }
    now_time(ts);
    snprintf(principal, sizeof(principal), "%s/%s", w->team, w->owner);
    /* The token, sealed, in the same CAS patch: no moment where the Pod is
     * ours and what re-adopts it is not written. */
    char sealed[KUBE_SEALED_MAX + 1] = "";
    if (rt->seal.on && kube_seal_token(&rt->seal, p->ns, p->name, p->uid, s->id, principal,
                                       s->token, sealed, sizeof(sealed)) != 0)
        sealed[0] = '\0';
    char *md = w->metadata ? json_dumps(w->metadata, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_t *patch =
        json_pack("{s:{s:s,s:{s:s,s:s},s:{s:s,s:s,s:s,s:s}},s:{s:[{s:s,s:s}]}}", "metadata",
                  "resourceVersion", p->rv, "labels", KUBE_L_PHASE, "starting", KUBE_L_SANDBOX,
                  s->id, "annotations", KUBE_L_SANDBOX, s->id, KUBE_A_CLAIMED_AT, ts,
                  KUBE_A_PRINCIPAL, principal, KUBE_A_METADATA, md ? md : "{}", "spec",
                  "containers", "name", pool->container, "image", s->image);
    free(md);
    json_t *ann = json_object_get(json_object_get(patch, "metadata"), "annotations");
    if (patch && sealed[0])
        json_object_set_new(ann, KUBE_A_SEALED, json_string(sealed));
    if (patch && pool->gateway) { /* what a re-adopting agent reports and keeps (adopt.h) */
        char flags[32];
        kube_egress_flags_format(w->internet, w->allow_private, flags);
        json_object_set_new(ann, KUBE_A_EGRESS, json_string(flags));
    }
    s->next = rt->sbxs;
    rt->sbxs = s;
    struct kube_ref r = ref_of(K_POD, p->ns, p->name, NULL);
    int rc = patch ? send_req(rt, "PATCH", &r, "application/strategic-merge-patch+json", patch,
                              patch_done, s)
                   : AB_ENOMEM;
    json_decref(patch);
    if (rc != 0) {
        s->w = NULL;
        ksb_unlink_free(s);
    }
    return rc;
}

static void serve_waiters(struct krt *rt, struct kpool *p)
{
    const char *k;
    json_t *obj;

    if (!p->w_head || rt->closing)
        return;
    json_object_foreach(rt->objs[K_POD], k, obj)
    {
        struct kube_pod pod;
        char err[128];
        if (!p->w_head)
            return;
        if (kube_pod_observe(obj, &pod, err, sizeof(err)) != 0 || strcmp(pod.ns, p->ns) != 0 ||
            strcmp(pod.pool, p->name) != 0 || pod.phase != KUBE_PH_IDLE || !pod.ready ||
            pod.deleting || pod.dead || !pod.ip[0] || json_object_get(rt->expect_del, k) ||
            ksb_by_pod(rt, pod.ns, pod.name))
            continue;
        struct kwaiter *w = p->w_head;
        if (strcmp(w->skip_pod, pod.name) == 0 && strcmp(w->skip_rv, pod.rv) == 0 &&
            ab_now_ms() < w->skip_until_ms)
            continue;
        char idle_token[RT_TOKEN_MAX + 1] = "";
        if (prestart_pool(p) && !w->image[0] && !prestart_token(rt, &pod, obj, idle_token))
            continue; /* its start command has not passed yet */
        ab_strlcpy(w->skip_rv, pod.rv, sizeof(w->skip_rv));
        waiter_unlink(p, w);
        int crc = claim_pod(rt, p, &pod, w, idle_token);
        explicit_bzero(idle_token, sizeof(idle_token));
        if (crc != 0) {
            claim_fail(w, AB_EIO, "cannot send the claim to the API server; try again");
            continue;
        }
    }
}

static void waiter_timeout(struct loop_timer *t)
{
    struct kwaiter *w = t->arg;
    struct krt *rt = w->rt;
    char msg[900];

    w->timer_on = false;
    for (struct ksb *s = rt->sbxs; s; s = s->next) {
        if (s->w != w)
            continue;
        if (s->start) { /* swapped and armed: its start command or a check is late */
            char why[800];
            kstart_describe(s->start, why, sizeof(why));
            snprintf(msg, sizeof(msg), "Pod %s was not ready within %lld ms: %s", s->pod,
                     (long long)w->startup_ms, why);
            s->w = NULL;
            claim_fail(w, AB_ETIMEOUT, msg);
            ksb_release(s, "startup timeout");
            return;
        }
        /* Swapping when time ran out: say what the kubelet was doing. */
        json_t *pod = NULL;
        char key[400];
        snprintf(key, sizeof(key), "%s/%s", s->ns, s->pod);
        pod = json_object_get(rt->objs[K_POD], key);
        struct kube_pod p;
        char err[64];
        memset(&p, 0, sizeof(p));
        if (pod)
            kube_pod_observe(pod, &p, err, sizeof(err));
        snprintf(msg, sizeof(msg), "Pod %s did not start image '%.160s' within %lld ms%s%s%s%.120s",
                 s->pod, s->image, (long long)w->startup_ms,
                 p.waiting_reason[0] ? " (kubelet: " : "", p.waiting_reason,
                 p.waiting_message[0] ? ": " : "", p.waiting_message);
        if (p.waiting_reason[0] && strlen(msg) + 1 < sizeof(msg))
            strcat(msg, ")");
        s->w = NULL;
        claim_fail(w, AB_ETIMEOUT, msg);
        if (s->state == KS_PATCHING)
            s->doomed = true;
        else
            ksb_release(s, "startup timeout");
        return;
    }
    waiter_unlink(w->pool, w);
    snprintf(msg, sizeof(msg),
             "no sandbox of pool '%s' became ready within %lld ms; the pool may be at its "
             "maxReplicas or its Pods failing to start (kubectl describe sandboxpool %s)",
             w->pool->name, (long long)w->startup_ms, w->pool->name);
    claim_fail(w, AB_ETIMEOUT, msg);
    schedule(rt);
}

/* Back to the idle image, the claim's labels and annotations stripped; the
 * reconciler marks it idle once the kubelet runs the idle image again. */
static void cleared(void *arg, const char *err)
{
    struct kclear *c = arg, **pp;
    for (pp = &c->rt->clears; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (err)
        LOG_WARN("the egress sidecar kept a released sandbox's policy", "error", err);
    free(c);
}

static void clear_policy(struct ksb *s)
{
    char token[KUBE_EGRESS_TOKEN_MAX + 1], key[400];
    struct kclear *c;

    snprintf(key, sizeof(key), "%s/%s", s->ns, s->pod);
    if (!s->pool->gateway || !s->ip[0] ||
        kube_egress_token_of(json_object_get(s->rt->objs[K_POD], key), token, sizeof(token)) != 0 ||
        !(c = calloc(1, sizeof(*c))))
        return;
    c->rt = s->rt;
    if (!(c->push = kube_egress_push(s->rt->loop, s->ip, token, NULL, cleared, c))) {
        free(c);
    } else {
        c->next = s->rt->clears;
        s->rt->clears = c;
    }
    explicit_bzero(token, sizeof(token));
}

static void ksb_release(struct ksb *s, const char *why)
{
    struct krt *rt = s->rt;
    struct kpool *p = s->pool;

    LOG_INFO("sandbox released", "id", s->id, "pod", s->pod, "why", why);
    if (strcmp(s->image, p->idle_image) == 0) {
        /* Claimed without a swap (the idle image is the running one): no
         * restart would clear the sandbox's processes or envd's token, so
         * the Pod is replaced rather than reused. */
        struct kube_pod gone;
        memset(&gone, 0, sizeof(gone));
        ab_strlcpy(gone.ns, s->ns, sizeof(gone.ns));
        ab_strlcpy(gone.name, s->pod, sizeof(gone.name));
        pod_delete(rt, &gone);
    } else {
        json_t *patch =
            json_pack("{s:{s:{s:s,s:n},s:{s:n,s:n,s:n,s:n}},s:{s:[{s:s,s:s}]}}", "metadata",
                      "labels", KUBE_L_PHASE, "stopping", KUBE_L_SANDBOX, "annotations",
                      KUBE_L_SANDBOX, KUBE_A_CLAIMED_AT, KUBE_A_PRINCIPAL, KUBE_A_METADATA, "spec",
                      "containers", "name", p->container, "image", p->idle_image);
        kube_adopt_strip(patch);
        struct kube_ref r = ref_of(K_POD, s->ns, s->pod, NULL);
        if (patch)
            send_simple(rt, "release", "PATCH", &r, "application/strategic-merge-patch+json",
                        patch);
        json_decref(patch);
    }
    if (s->state == KS_PATCHING) {
        s->doomed = true;
        return;
    }
    kube_egress_push_cancel(s->push);
    s->push = NULL;
    if (s->state == KS_ARMING || s->state == KS_RUNNING)
        clear_policy(s);
    if (s->state == KS_ARMING && s->hc) {
        http_client_close(s->hc);
        s->hc = NULL;
        rt->inflight--;
    }
    if (s->w) {
        claim_fail(s->w, AB_EIO, "the sandbox was released while it was being armed");
        s->w = NULL;
    }
    ksb_unlink_free(s);
    schedule(rt);
}

/* ---- reconcile (loop thread) ------------------------------------------------------------- */

static void rebuild_set(struct krt *rt)
{
    struct mf_set *s = mf_set_new();
    const char *k;
    json_t *v;

    if (!s)
        return;
    for (int kind = K_TPL; kind <= K_POOL; kind++) {
        json_object_foreach(rt->objs[kind], k, v)
        {
            /* Pools an Env renders are ours, not manifests (their names
             * would collide with the Env's members). */
            if (kind == K_POOL && json_object_get(jget2(v, "metadata", "labels"), KUBE_L_ENV))
                continue;
            json_t *c = json_deep_copy(v);
            json_object_del(c, "status");
            char *text = json_dumps(c, JSON_COMPACT);
            json_decref(c);
            if (text)
                mf_parse_buffer(s, k, text, strlen(text));
            free(text);
        }
    }
    mf_set_check(s);
    for (int i = 0; i < s->nerrs; i++)
        LOG_WARN("kube object refused", "error", s->errs[i].text);
    mf_set_free(rt->set);
    rt->set = s;
    rt->set_gen = rt->crd_gen;
}

static void member_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    char *key = arg;
    char ns[64], name[RT_NAME_MAX + 1];
    const char *slash = strchr(key, '/');
    if (slash && rc != AB_ECLOSED) {
        snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
        ab_strlcpy(name, slash + 1, sizeof(name));
        for (struct kpool *p = rt->pools; p; p = p->next)
            if (strcmp(p->ns, ns) == 0 && strcmp(p->name, name) == 0)
                p->spec_inflight = false;
        if (rc == 0 && (resp->code < 200 || resp->code >= 300))
            LOG_WARN("writing an Env's member pool refused", "pool", key, "code",
                     code_s(resp->code), "message", resp->status.message);
    }
    free(key);
    rt->crd_gen++; /* look again */
    schedule(rt);
}

/* Member pools (ours: owned by a SandboxEnv, labelled with it) whose Env is
 * gone, or whose Env was read and no longer lists them here, are deleted.
 * An Env refused by the manifest rules (say, its template is missing)
 * keeps its pools: a typo must not take warm and claimed Pods away. */
static void gc_member_pools(struct krt *rt, const json_t *wanted)
{
    const char *k;
    json_t *v;

    json_object_foreach(rt->objs[K_POOL], k, v)
    {
        const json_t *md = json_object_get(v, "metadata");
        const char *env = jstr(json_object_get(md, "labels"), KUBE_L_ENV);
        const json_t *own = json_array_get(json_object_get(md, "ownerReferences"), 0);
        char ekey[400], dkey[420];
        if (!env[0] || strcmp(jstr(own, "kind"), "SandboxEnv") != 0 || json_object_get(wanted, k) ||
            json_object_get(md, "deletionTimestamp"))
            continue;
        snprintf(ekey, sizeof(ekey), "%s/%s", jstr(md, "namespace"), env);
        bool env_gone = json_object_get(rt->objs[K_ENV], ekey) == NULL;
        if (!env_gone && !mf_set_find(rt->set, MF_ENV, jstr(md, "namespace"), env))
            continue;
        snprintf(dkey, sizeof(dkey), "pool:%s", k);
        if (json_object_get(rt->expect_del, dkey))
            continue;
        LOG_INFO("deleting a member pool its Env no longer has", "pool", k, "env", env);
        struct kube_ref r = ref_of(K_POOL, jstr(md, "namespace"), jstr(md, "name"), NULL);
        send_simple(rt, "delete pool", "DELETE", &r, NULL, NULL);
        json_object_set_new(rt->expect_del, dkey, json_integer(ab_now_ms() + EXPECT_MS));
    }
}

/* Pods of a pool that no longer exists: deleted (claimed ones once released);
 * their finalizer dropped while they go. */
static void gc_orphan_pods(struct krt *rt)
{
    const char *k;
    json_t *v;

    json_object_foreach(rt->objs[K_POD], k, v)
    {
        struct kube_pod p;
        char err[64], pkey[200];
        if (kube_pod_observe(v, &p, err, sizeof(err)) != 0 || !p.pool[0])
            continue;
        snprintf(pkey, sizeof(pkey), "%s/%s", p.ns, p.pool);
        if (json_object_get(rt->objs[K_POOL], pkey) || ksb_by_pod(rt, p.ns, p.name))
            continue;
        if (p.deleting) {
            if (p.finalizer)
                pod_unfinalize(rt, &p, v);
            continue;
        }
        if (!json_object_get(rt->expect_del, k))
            pod_delete(rt, &p);
    }
}

/* Env members of this cluster → SandboxPool objects (created or patched). */
static void reconcile_envs(struct krt *rt)
{
    struct mf_pool_view views[POOLS_MAX];
    int n = 0;

    if (!rt->set || mf_set_pools(rt->set, rt->cluster, views, POOLS_MAX, &n) != 0)
        return;
    json_t *wanted = json_object();
    for (int i = 0; i < n && i < POOLS_MAX; i++) {
        const struct mf_pool_view *v = &views[i];
        char key[400];
        if (!v->member)
            continue;
        snprintf(key, sizeof(key), "%s/%s", v->ns, v->name);
        json_object_set_new(wanted, key, json_true());
        snprintf(key, sizeof(key), "%s/%s", v->ns, v->obj->name);
        const json_t *env = json_object_get(rt->objs[K_ENV], key);
        const json_t *tpl = json_object_get(rt->objs[K_TPL], v->template_name);
        if (!env || !tpl)
            continue;
        /* The member's own spec, from the object as stored. */
        const json_t *mspec = NULL, *cl, *m;
        size_t a, b;
        json_array_foreach(jget2(env, "spec", "clusters"), a, cl)
        {
            if (strcmp(jstr(cl, "clusterID"), rt->cluster) != 0)
                continue;
            json_array_foreach(json_object_get(cl, "members"), b,
                               m) if (strcmp(jstr(m, "name"), v->name) == 0) mspec =
                json_object_get(m, "spec");
        }
        json_t *want = kube_member_pool(env, tpl, v->name, v->scaling_group, v->member->cpu_milli,
                                        v->member->mem_bytes, mspec);
        if (!want)
            continue;
        kobj_member_pull_secret(env, want); /* the Env's ips-<env> Secret, if it has one */
        kscale_apply(rt->scale, v->ns, v->name, want); /* the autoscaler's replicas win */
        snprintf(key, sizeof(key), "%s/%s", v->ns, v->name);
        const json_t *live = json_object_get(rt->objs[K_POOL], key);
        struct kpool *p = pool_find(rt, v->ns, v->name);
        if ((live && kube_pool_matches(live, want)) || (p && p->spec_inflight)) {
            json_decref(want);
            continue;
        }
        char *arg = strdup(key);
        struct kube_ref r = ref_of(K_POOL, v->ns, live ? v->name : NULL, NULL);
        int rc = AB_ENOMEM;
        if (arg) {
            if (live) {
                /* Merge patch: the Env's rendering wins for what it sets. */
                json_t *md = json_object_get(want, "metadata");
                json_object_del(md, "name");
                json_object_del(md, "namespace");
                json_object_del(want, "apiVersion");
                json_object_del(want, "kind");
                rc = send_req(rt, "PATCH", &r, "application/merge-patch+json", want, member_done,
                              arg);
            } else
                rc = send_req(rt, "POST", &r, NULL, want, member_done, arg);
            if (rc != 0)
                free(arg);
        }
        if (rc == 0 && p)
            p->spec_inflight = true;
        if (rc == 0)
            LOG_INFO(live ? "updating an Env's member pool" : "creating an Env's member pool",
                     "pool", key);
        json_decref(want);
    }
    gc_member_pools(rt, wanted);
    json_decref(wanted);
}

/* One image field of the effective spec through the registry rewrite. */
static int rewrite_field(const struct kube_rewrite *rw, json_t *obj, const char *key, char *err,
                         size_t errlen)
{
    char out[KUBE_IMAGE_MAX];
    bool changed;
    const json_t *v = json_object_get(obj, key);

    if (!json_is_string(v))
        return 0;
    if (kube_rewrite_image(rw, json_string_value(v), out, sizeof(out), &changed) != 0) {
        snprintf(err, errlen, "%s: image '%.160s' is longer than %d characters once rewritten",
                 KUBE_REWRITE_ANNOTATION, json_string_value(v), KUBE_IMAGE_MAX - 1);
        return AB_EINVAL;
    }
    if (changed)
        json_object_set_new(obj, key, json_string(out));
    return 0;
}

/* The pool's registry rewrite: its template's annotation first, then the
 * region's default; every image of eff (idleImage, containers and
 * initContainers) rewritten by it, so the Pod body, the revision and the
 * images compared with what the kubelet runs all carry the region's host. */
static int rewrite_spec(struct krt *rt, const json_t *tpl, json_t *eff, struct kube_rewrite *rw,
                        char *err, size_t errlen)
{
    const char *ann = jstr(jget2(tpl, "metadata", "annotations"), KUBE_REWRITE_ANNOTATION);
    char what[320];
    int rc;

    memset(rw, 0, sizeof(*rw));
    snprintf(what, sizeof(what), "annotation %s on SandboxTemplate '%.200s'",
             KUBE_REWRITE_ANNOTATION, jstr(json_object_get(tpl, "metadata"), "name"));
    if ((rc = kube_rewrite_parse(rw, ann, what, err, errlen)) != 0)
        return rc;
    for (int i = 0; i < rt->rewrite.n; i++) {
        if (rw->n >= KUBE_REWRITE_RULES_MAX) {
            snprintf(err, errlen, "%s: at most %d rules together with --registry-rewrite", what,
                     KUBE_REWRITE_RULES_MAX);
            return AB_EINVAL;
        }
        rw->r[rw->n++] = rt->rewrite.r[i];
    }
    if ((rc = rewrite_field(rw, eff, "idleImage", err, errlen)) != 0)
        return rc;
    json_t *pspec = json_object_get(json_object_get(eff, "template"), "spec");
    static const char *const LISTS[] = {"containers", "initContainers"};
    for (size_t l = 0; l < AB_ARRAY_LEN(LISTS); l++) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(pspec, LISTS[l]), i, c)
        {
            if ((rc = rewrite_field(rw, c, "image", err, errlen)) != 0)
                return rc;
        }
    }
    return 0;
}

/* The pool's effective spec: the template's embedded fields under the
 * pool's own (a standalone pool may name only its template), its images
 * through the registry rewrite (rw; err set and the images left as they are
 * when the rule is malformed). New ref. */
static json_t *effective_spec(struct krt *rt, const json_t *pool, struct kube_rewrite *rw,
                              char *err, size_t errlen)
{
    const json_t *spec = json_object_get(pool, "spec");
    json_t *eff = json_object();
    const json_t *tpl = json_object_get(rt->objs[K_TPL], jstr(spec, "templateName"));
    const json_t *tspec = json_object_get(tpl, "spec");
    static const char *const EMBED[] = {"template", "idleImage", "runtimes"};
    const char *k;
    json_t *v;

    for (size_t i = 0; i < AB_ARRAY_LEN(EMBED); i++)
        if ((v = json_object_get(tspec, EMBED[i])))
            json_object_set_new(eff, EMBED[i], json_deep_copy(v));
    json_object_foreach((json_t *)spec, k, v) json_object_set_new(eff, k, json_deep_copy(v));
    err[0] = '\0';
    if (rewrite_spec(rt, tpl, eff, rw, err, errlen) != 0 && !err[0])
        snprintf(err, errlen, "%s: cannot apply", KUBE_REWRITE_ANNOTATION);
    /* The Env's gateway: the sidecar in every Pod (and in the revision, so
     * turning it on or off rolls the idle Pods). */
    char ekey[200];
    const json_t *md = json_object_get(pool, "metadata");
    snprintf(ekey, sizeof(ekey), "%s/%s", jstr(md, "namespace"),
             jstr(json_object_get(md, "labels"), KUBE_L_ENV));
    const struct kube_egress_config ec = {rt->egress_image, rt->egress_resolver};
    if (!err[0] && kube_egress_env_enabled(json_object_get(rt->objs[K_ENV], ekey)))
        kube_egress_inject(eff, &ec, err, errlen);
    return eff;
}

static void pool_refresh(struct krt *rt, struct kpool *p, const json_t *obj, const json_t *eff)
{
    const json_t *md = json_object_get(obj, "metadata");
    const json_t *labels = json_object_get(md, "labels");
    const json_t *spec = json_object_get(obj, "spec");
    const json_t *c0 =
        json_array_get(jget2(json_object_get(eff, "template"), "spec", "containers"), 0);
    const char *idle = kube_idle_image(eff);
    int64_t ms;

    (void)rt;
    ab_strlcpy(p->uid, jstr(md, "uid"), sizeof(p->uid));
    ab_strlcpy(p->env, jstr(labels, KUBE_L_ENV), sizeof(p->env));
    ab_strlcpy(p->group, jstr(labels, KUBE_L_GROUP), sizeof(p->group));
    ab_strlcpy(p->tpl, jstr(spec, "templateName"), sizeof(p->tpl));
    p->replicas = (int)json_integer_value(json_object_get(spec, "replicas"));
    p->max_replicas = (int)json_integer_value(json_object_get(spec, "maxReplicas"));
    p->startup_ms = mf_duration_ms(jstr(spec, "defaultStartupTimeout"), &ms) == 0 ? ms : 0;
    p->idle_ms = mf_duration_ms(jstr(spec, "defaultIdleTimeout"), &ms) == 0 ? ms : 0;
    ab_strlcpy(p->idle_image, idle ? idle : "", sizeof(p->idle_image));
    ab_strlcpy(p->container,
               json_is_string(json_object_get(c0, "name")) ? jstr(c0, "name") : "sandbox",
               sizeof(p->container));
    /* The image a claim runs when it names none: the template's container's. */
    ab_strlcpy(p->run_image,
               json_is_string(json_object_get(c0, "image")) ? jstr(c0, "image") : p->idle_image,
               sizeof(p->run_image));
    p->envd_port = kube_envd_port(eff);
    p->gateway = kube_egress_spec_has(jget2(eff, "template", "spec"));
    if (kube_revision(eff, p->revision) != 0)
        p->revision[0] = '\0';
}

static void create_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    struct kpool *p = arg;

    if (rc == AB_ECLOSED)
        return;
    p->creating--;
    if (rc == 0 && resp->code == 201) {
        json_t *pod = json_loadb(resp->body, resp->len, 0, NULL);
        char key[400];
        if (pod) {
            key_of(pod, K_POD, key, sizeof(key));
            if (!json_object_get(rt->objs[K_POD], key))
                json_object_set_new(rt->expect_add, key, json_integer(ab_now_ms() + EXPECT_MS));
        }
        json_decref(pod);
    } else {
        char msg[400];
        if (rc == 0)
            snprintf(msg, sizeof(msg), "creating an idle Pod: the API server answered %ld: %.300s",
                     resp->code, resp->status.message);
        else
            snprintf(msg, sizeof(msg), "creating an idle Pod: %s", ab_strerror(rc));
        LOG_WARN("idle Pod not created", "pool", p->name, "error", msg);
        if (!p->removed)
            pool_event(rt, p, "Warning", "FailedCreate", msg);
    }
    schedule(rt);
}

static void status_done(struct krt *rt, void *arg, int rc, struct kube_response *resp);

static void status_get_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    struct kpool *p = arg;
    if (rc == AB_ECLOSED)
        return;
    p->status_inflight = false;
    if (rc == 0 && resp->code == 200) {
        /* The re-read: the next pass writes against this version. */
        json_t *obj = json_loadb(resp->body, resp->len, 0, NULL);
        char key[400];
        if (obj) {
            key_of(obj, K_POOL, key, sizeof(key));
            const json_t *cur = json_object_get(rt->objs[K_POOL], key);
            long have = strtol(jstr(json_object_get(cur, "metadata"), "resourceVersion"), NULL, 10);
            long got = strtol(jstr(json_object_get(obj, "metadata"), "resourceVersion"), NULL, 10);
            if (got >= have)
                json_object_set(rt->objs[K_POOL], key, obj);
        }
        json_decref(obj);
    }
    schedule(rt);
}

static void status_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    struct kpool *p = arg;
    if (rc == AB_ECLOSED)
        return;
    if (rc == 0 && resp->code == 409 && !p->removed) {
        struct kube_ref r = ref_of(K_POOL, p->ns, p->name, NULL);
        if (send_req(rt, "GET", &r, NULL, NULL, status_get_done, p) == 0)
            return;
    } else if (rc == 0 && resp->code == 200) {
        json_t *obj = json_loadb(resp->body, resp->len, 0, NULL);
        char key[400];
        if (obj) {
            key_of(obj, K_POOL, key, sizeof(key));
            json_object_set(rt->objs[K_POOL], key, obj);
        }
        json_decref(obj);
    } else if (rc == 0)
        LOG_WARN("pool status not written", "pool", p->name, "code", code_s(resp->code), "message",
                 resp->status.message);
    p->status_inflight = false;
}

static void pod_delete(struct krt *rt, const struct kube_pod *pod)
{
    char key[400];
    snprintf(key, sizeof(key), "%s/%s", pod->ns, pod->name);
    struct kube_ref r = ref_of(K_POD, pod->ns, pod->name, NULL);
    send_simple(rt, "delete pod", "DELETE", &r, NULL, NULL);
    json_object_set_new(rt->expect_del, key, json_integer(ab_now_ms() + EXPECT_MS));
}

static void pod_unfinalize(struct krt *rt, const struct kube_pod *pod, const json_t *obj)
{
    json_t *fin = json_array(), *v;
    size_t i;
    json_array_foreach(jget2(obj, "metadata", "finalizers"), i,
                       v) if (strcmp(json_string_value(v) ? json_string_value(v) : "",
                                     KUBE_FINALIZER) != 0) json_array_append(fin, v);
    json_t *patch =
        json_pack("{s:{s:s,s:o}}", "metadata", "resourceVersion", pod->rv, "finalizers", fin);
    struct kube_ref r = ref_of(K_POD, pod->ns, pod->name, NULL);
    if (patch)
        send_simple(rt, "finalizer", "PATCH", &r, "application/merge-patch+json", patch);
    json_decref(patch);
}

/* A stopping Pod back on its idle image and Ready: idle again. A claimed
 * Pod no sandbox of ours holds and adopt_pod could not rebuild (verdict
 * RELEASE): released; one being claimed (WAIT) is left to its claimer. */
static void pod_phase_fix(struct krt *rt, struct kpool *p, const struct kube_pod *pod,
                          enum kube_adopt_verdict verdict)
{
    struct kube_ref r = ref_of(K_POD, pod->ns, pod->name, NULL);
    if (ksb_by_pod(rt, pod->ns, pod->name) || pod->deleting || verdict == KUBE_ADOPT_WAIT)
        return;
    if (pod->phase == KUBE_PH_STOPPING && strcmp(pod->image, p->idle_image) == 0 &&
        strcmp(pod->status_image, p->idle_image) == 0 && pod->running && pod->ready) {
        json_t *patch = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "resourceVersion", pod->rv,
                                  "labels", KUBE_L_PHASE, "idle");
        if (patch)
            send_simple(rt, "idle", "PATCH", &r, "application/merge-patch+json", patch);
        json_decref(patch);
    } else if ((pod->phase == KUBE_PH_STARTING || pod->phase == KUBE_PH_RUNNING) &&
               strcmp(pod->image, p->idle_image) == 0) {
        /* no swap to undo: only a new Pod has a fresh envd */
        LOG_INFO("replacing a Pod no sandbox holds", "pod", pod->name, "sandbox", pod->sandbox_id);
        pod_delete(rt, pod);
    } else if (pod->phase == KUBE_PH_STARTING || pod->phase == KUBE_PH_RUNNING) {
        LOG_INFO("releasing a Pod no sandbox holds", "pod", pod->name, "sandbox", pod->sandbox_id);
        json_t *patch = json_pack("{s:{s:s,s:{s:s,s:n},s:{s:n,s:n,s:n,s:n}},s:{s:[{s:s,s:s}]}}",
                                  "metadata", "resourceVersion", pod->rv, "labels", KUBE_L_PHASE,
                                  "stopping", KUBE_L_SANDBOX, "annotations", KUBE_L_SANDBOX,
                                  KUBE_A_CLAIMED_AT, KUBE_A_PRINCIPAL, KUBE_A_METADATA, "spec",
                                  "containers", "name", p->container, "image", p->idle_image);
        kube_adopt_strip(patch);
        if (patch)
            send_simple(rt, "release", "PATCH", &r, "application/strategic-merge-patch+json",
                        patch);
        json_decref(patch);
    }
}

static void reconcile_pool(struct krt *rt, struct kpool *p, const json_t *obj)
{
    static struct kube_pod pods[PODS_PER_POOL_MAX];
    static const json_t *objs[PODS_PER_POOL_MAX];
    struct kube_plan plan;
    const char *k;
    json_t *v;
    int n = 0, expected = 0;
    bool deleting = jget2(obj, "metadata", "deletionTimestamp") != NULL;

    json_object_foreach(rt->objs[K_POD], k, v)
    {
        char err[64];
        if (n >= PODS_PER_POOL_MAX)
            break;
        if (kube_pod_observe(v, &pods[n], err, sizeof(err)) != 0 ||
            strcmp(pods[n].ns, p->ns) != 0 || strcmp(pods[n].pool, p->name) != 0)
            continue;
        if (json_object_get(rt->expect_del, k))
            pods[n].deleting = true;
        if (ksb_by_pod(rt, pods[n].ns, pods[n].name) && pods[n].phase == KUBE_PH_IDLE)
            pods[n].phase = KUBE_PH_STARTING; /* being claimed */
        objs[n] = v;
        n++;
    }
    json_object_foreach(rt->expect_add, k, v)
    {
        char pre[128];
        snprintf(pre, sizeof(pre), "%s/%s-", p->ns, p->name);
        if (strncmp(k, pre, strlen(pre)) == 0)
            expected++;
    }
    /* updateStrategy: the member's, else its Env's overrides (a member
     * pool), else the pool's own maxUnavailable */
    const json_t *env = NULL, *mu = NULL;
    bool auto_update = true;
    if (p->env[0]) {
        char ekey[2 * RT_NAME_MAX + 2];
        snprintf(ekey, sizeof(ekey), "%s/%s", p->ns, p->env);
        env = json_object_get(rt->objs[K_ENV], ekey);
    }
    rt_update_strategy(env, rt->cluster, p->name, json_object_get(obj, "spec"), &auto_update, &mu);
    bool autoscaled = false;
    int headroom;
    kscale_pool_info(rt->scale, p->ns, p->name, &autoscaled, &headroom);
    struct kube_pool_input in = {
        .replicas = p->replicas,
        .max_replicas = p->max_replicas,
        .pending = p->nwaiters,
        .creating = p->creating + expected,
        .unanswered = p->creating,
        .max_unavailable = kube_max_unavailable(mu, p->replicas),
        .auto_update = auto_update,
        .deleting = deleting,
        .autoscaled = autoscaled,
    };
    ab_strlcpy(in.revision, p->revision, sizeof(in.revision));
    kube_pool_plan(&in, pods, n, &plan);
    p->counts = plan.counts;
    /* Every replica rebuilds the claimed Pods it does not hold (reads only),
     * so any of them serves connect(id) and a new leader has them all. */
    static enum kube_adopt_verdict verdicts[PODS_PER_POOL_MAX];
    for (int i = 0; i < n; i++)
        verdicts[i] = adopt_pod(rt, p, &pods[i], objs[i]);
    if (!rt->leading)
        return;
    if (p->rewrite_err[0]) {
        /* Neither create Pods on the wrong registry nor roll the idle ones
         * away: the pool stays as it is until the annotation is fixed. */
        pool_event(rt, p, "Warning", "BadRegistryRewrite", p->rewrite_err);
        return;
    }

    struct kube_rewrite rw;
    char rwerr[sizeof(p->rewrite_err)];
    json_t *eff = effective_spec(rt, obj, &rw, rwerr, sizeof(rwerr));
    /* Bounded per pass (the next pass creates the rest); never past what
     * the cache holds of the pool, or a pool we cannot count would grow
     * without end. */
    if (n >= PODS_PER_POOL_MAX) {
        if (plan.create > 0)
            LOG_WARN("pool has more Pods than the reconciler counts; not creating more", "pool",
                     p->name);
        plan.create = 0;
    }
    plan.create = AB_MIN(plan.create, CREATES_PER_PASS);
    /* the numbers the plan was made from, for the debug lines below */
    char cnt[128] = "";
    if ((plan.create > 0 || plan.ndelete > 0) && log_get_level() == LOG_LEVEL_DEBUG)
        snprintf(cnt, sizeof(cnt), "replicas %d, max %d, waiting %d, creating %d, Pods %d, live %d",
                 p->replicas, p->max_replicas, p->nwaiters, p->creating + expected, n,
                 plan.counts.total);
    if (plan.create > 0)
        LOG_DEBUG("creating a pool's Pods", "pool", p->name, "counts", cnt);
    for (int i = 0; i < plan.create && !deleting; i++) {
        json_t *body = kube_pod_body(p->name, p->uid, p->env, eff, p->revision, NULL);
        if (body)
            kube_egress_pod_token(body); /* each Pod its own (egress_pod.h) */
        if (!body) {
            pool_event(rt, p, "Warning", "NoImage",
                       "the pool has no idleImage and its template no container image");
            break;
        }
        struct kube_ref r = ref_of(K_POD, p->ns, NULL, NULL);
        if (send_req(rt, "POST", &r, NULL, body, create_done, p) == 0)
            p->creating++;
        json_decref(body);
    }
    json_decref(eff);
    int rolled = 0, replaced = 0;
    for (int i = 0; i < plan.ndelete; i++) {
        static const char *const why[] = {"", "scale-down", "roll", "stopped or unpullable"};
        LOG_DEBUG("deleting a pool's Pod", "pool", p->name, "pod", pods[plan.del[i]].name, "why",
                  why[plan.why[i]], "counts", cnt);
        pod_delete(rt, &pods[plan.del[i]]);
        rolled += plan.why[i] == KUBE_DEL_ROLL;
        replaced += plan.why[i] == KUBE_DEL_DEAD;
    }
    if (rolled) {
        char msg[160];
        snprintf(msg, sizeof(msg), "replacing %d idle Pods with revision %s", rolled, p->revision);
        pool_event(rt, p, "Normal", "RollingUpdate", msg);
    }
    if (replaced) {
        char msg[200];
        snprintf(msg, sizeof(msg), "replacing %d Pods that stopped or cannot pull their image",
                 replaced);
        pool_event(rt, p, "Warning", "PodReplaced", msg);
    }
    for (int i = 0; i < plan.nunfinalize; i++)
        pod_unfinalize(rt, &pods[plan.unfinalize[i]], objs[plan.unfinalize[i]]);
    for (int i = 0; i < n; i++)
        if (!pods[i].deleting)
            pod_phase_fix(rt, p, &pods[i], verdicts[i]);
    if (prestart_pool(p))
        for (int i = 0; i < n; i++)
            prestart_pod(rt, p, &pods[i], objs[i]);

    /* Status through the subresource, only when it moved. */
    const json_t *prev = json_object_get(obj, "status");
    json_t *st = kube_pool_status(&plan.counts, p->replicas, p->nwaiters, p->name, p->revision,
                                  deleting, prev, ab_wall_ms());
    int64_t now = ab_now_ms();
    if (st && !p->status_inflight && kube_status_differs(prev, st) && now < p->status_next_ms) {
        if (!rt->gap_on) { /* write it when the gap has passed */
            rt->gap_on = true;
            loop_timer_start(rt->loop, &rt->gap, p->status_next_ms - now, gap_fn, rt);
        }
    } else if (st && !p->status_inflight && kube_status_differs(prev, st)) {
        p->status_next_ms = now + STATUS_GAP_MS;
        json_t *body = json_deep_copy(obj);
        json_object_set(body, "status", st);
        struct kube_ref r = ref_of(K_POOL, p->ns, p->name, "status");
        if (send_req(rt, "PUT", &r, NULL, body, status_done, p) == 0)
            p->status_inflight = true;
        json_decref(body);
    }
    json_decref(st);
}

static void reconcile(struct krt *rt)
{
    const char *k;
    json_t *v;
    int64_t now = ab_now_ms();

    for (int i = 0; i < K_NKINDS; i++)
        if (!rt->synced[i])
            return; /* never act on half a picture */
    /* Forget expectations the watch never confirmed. */
    for (int pass = 0; pass < 2; pass++) {
        json_t *m = pass ? rt->expect_del : rt->expect_add;
        void *tmp;
        json_object_foreach_safe(m, tmp, k, v) if (json_integer_value(v) < now)
            json_object_del(m, k);
    }
    if (rt->set_gen != rt->crd_gen || !rt->set)
        rebuild_set(rt);
    if (rt->leading)
        reconcile_envs(rt);

    for (struct kpool *p = rt->pools; p; p = p->next)
        p->seen = false;
    json_object_foreach(rt->objs[K_POOL], k, v)
    {
        const json_t *md = json_object_get(v, "metadata");
        struct kpool *p = pool_find(rt, jstr(md, "namespace"), jstr(md, "name"));
        if (!p) {
            if (!(p = calloc(1, sizeof(*p))))
                continue;
            p->rt = rt;
            ab_strlcpy(p->ns, jstr(md, "namespace"), sizeof(p->ns));
            ab_strlcpy(p->name, jstr(md, "name"), sizeof(p->name));
            p->next = rt->pools;
            rt->pools = p;
        }
        p->seen = true;
        char rwerr[sizeof(p->rewrite_err)];
        json_t *eff = effective_spec(rt, v, &p->rw, rwerr, sizeof(rwerr));
        if (rwerr[0] && strcmp(rwerr, p->rewrite_err) != 0)
            LOG_ERROR("pool frozen: its registry rewrite is malformed", "pool", p->name, "error",
                      rwerr);
        ab_strlcpy(p->rewrite_err, rwerr, sizeof(p->rewrite_err));
        pool_refresh(rt, p, v, eff);
        json_decref(eff);
        reconcile_pool(rt, p, v);
        serve_waiters(rt, p);
    }
    refresh_start_specs(rt);
    if (rt->leading) {
        gc_orphan_pods(rt);
        reconcile_env_status(rt);
    }
    for (struct kpool *p = rt->pools; p; p = p->next) {
        if (p->seen || p->removed)
            continue;
        p->removed = true; /* kept: sandboxes and requests may point at it */
        while (p->w_head) {
            struct kwaiter *w = p->w_head;
            waiter_unlink(p, w);
            claim_fail(w, AB_ENOENT, "the pool was deleted while the claim waited");
        }
    }
}

/* ---- idle Pods' start command (pools claimed without a swap) ------------------------------ */

#define PRESTART_BACKOFF_MS 2000 /* after a failure, before the next idle Pod tries */

/* The pool's Pods run their start command while idle: the claim does not
 * swap the image (idle image = running image), so what runs now is what
 * the sandbox gets, and a warm Pod is already ready. */
static bool prestart_pool(const struct kpool *p)
{
    return rt_start_spec_needed(&p->start) && p->idle_image[0] &&
           strcmp(p->run_image, p->idle_image) == 0;
}

static struct kpre *prestart_find(struct krt *rt, const char *ns, const char *pod)
{
    for (struct kpre *x = rt->pres; x; x = x->next)
        if (strcmp(x->ns, ns) == 0 && strcmp(x->pod, pod) == 0)
            return x;
    return NULL;
}

static void prestart_free(struct kpre *x)
{
    struct kpre **pp;
    for (pp = &x->rt->pres; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    if (x->hc) {
        http_client_close(x->hc);
        x->rt->inflight--;
    }
    if (x->timer_on)
        loop_timer_cancel(&x->timer);
    kstart_free(x->k);
    explicit_bzero(x->token, sizeof(x->token));
    free(x);
}

static void prestart_forget(struct krt *rt, const struct kube_pod *pod)
{
    struct kpre *x = prestart_find(rt, pod->ns, pod->name);
    if (x)
        prestart_free(x);
}

/* Whether an idle Pod of a prestart pool is ready for a claim, and the envd
 * token its /init needs (out: RT_TOKEN_MAX + 1 bytes). */
static bool prestart_token(struct krt *rt, const struct kube_pod *pod, const json_t *obj, char *out)
{
    struct kpre *x = prestart_find(rt, pod->ns, pod->name);
    if (x && strcmp(x->uid, pod->uid) == 0) {
        if (x->ready)
            ab_strlcpy(out, x->token, RT_TOKEN_MAX + 1);
        return x->ready;
    }
    const char *sealed = jstr(jget2(obj, "metadata", "annotations"), KUBE_A_IDLE_TOKEN);
    return sealed[0] && kube_unseal_token(&rt->seal, pod->ns, pod->name, pod->uid, "idle", "",
                                          sealed, out, RT_TOKEN_MAX + 1) == 0;
}

/* The Pod cannot become ready: an Event says why, the pool's oldest waiting
 * claim gets the error (as on local), the Pod is replaced after a pause. */
static void prestart_failed(struct kpre *x, const char *why)
{
    struct krt *rt = x->rt;
    struct kpool *p = x->pool;
    struct kube_pod gone;
    char msg[900];

    snprintf(msg, sizeof(msg), "idle Pod %s: %s", x->pod, why);
    LOG_WARN("an idle Pod did not become ready", "pool", p->name, "error", msg);
    pool_event(rt, p, "Warning", "StartFailed", msg);
    p->prestart_after_ms = ab_now_ms() + PRESTART_BACKOFF_MS;
    memset(&gone, 0, sizeof(gone));
    ab_strlcpy(gone.ns, x->ns, sizeof(gone.ns));
    ab_strlcpy(gone.name, x->pod, sizeof(gone.name));
    prestart_free(x); /* why may live in x->k: msg holds the copy */
    pod_delete(rt, &gone);
    if (p->w_head) {
        struct kwaiter *w = p->w_head;
        waiter_unlink(p, w);
        claim_fail(w, AB_EIO, msg);
    }
    schedule(rt);
}

static void prestart_started(void *arg, int err, const char *msg)
{
    struct kpre *x = arg;
    struct krt *rt = x->rt;
    char sealed[KUBE_SEALED_MAX + 1] = "-";

    if (err) {
        prestart_failed(x, msg);
        return;
    }
    x->ready = true;
    if (x->timer_on)
        loop_timer_cancel(&x->timer);
    x->timer_on = false;
    /* envd keeps the process when its stream closes (e2b-protocol.md §2.5) */
    kstart_free(x->k);
    x->k = NULL;
    if (rt->seal.on && kube_seal_token(&rt->seal, x->ns, x->pod, x->uid, "idle", "", x->token,
                                       sealed, sizeof(sealed)) != 0)
        ab_strlcpy(sealed, "-", sizeof(sealed));
    json_t *patch =
        json_pack("{s:{s:{s:s}}}", "metadata", "annotations", KUBE_A_IDLE_TOKEN, sealed);
    struct kube_ref r = ref_of(K_POD, x->ns, x->pod, NULL);
    if (patch)
        send_simple(rt, "idle start", "PATCH", &r, "application/merge-patch+json", patch);
    json_decref(patch);
    LOG_INFO("idle Pod ready (start command and checks passed)", "pool", x->pool->name, "pod",
             x->pod);
    serve_waiters(rt, x->pool);
}

static void prestart_init_head(struct http_client *c, int status, const struct http_header *h,
                               int n, void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct kpre *)arg)->http_status = status;
}

static void prestart_init_finish(struct kpre *x, const char *err)
{
    struct krt *rt = x->rt;
    char msg[320];

    x->hc = NULL;
    rt->inflight--;
    if (!err && x->http_status >= 200 && x->http_status < 300) {
        struct kstart_deps d = {
            .loop = rt->loop,
            .spec = &x->pool->start,
            .ip = x->ip,
            .envd_port = x->pool->envd_port,
            .token = x->token,
            .user = "user",
            .done = prestart_started,
            .arg = x,
        };
        if ((x->k = kstart_new(&d)))
            return;
        err = "out of memory";
    }
    if (err)
        snprintf(msg, sizeof(msg),
                 "envd did not answer POST /init before the start command: %.200s", err);
    else
        snprintf(msg, sizeof(msg), "envd answered %d to POST /init before the start command",
                 x->http_status);
    prestart_failed(x, msg);
}

static void prestart_init_end(struct http_client *c, void *arg)
{
    (void)c;
    prestart_init_finish(arg, NULL);
}

static void prestart_init_error(struct http_client *c, int err, const char *m, void *arg)
{
    (void)c;
    (void)err;
    prestart_init_finish(arg, m ? m : "error");
}

static const struct http_client_handler prestart_init_handler = {
    .on_head = prestart_init_head,
    .on_data = init_data,
    .on_end = prestart_init_end,
    .on_error = prestart_init_error,
};

static void prestart_timeout(struct loop_timer *t)
{
    struct kpre *x = t->arg;
    char why[800], msg[900];

    x->timer_on = false;
    if (x->k)
        kstart_describe(x->k, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "envd did not answer POST /init");
    snprintf(msg, sizeof(msg), "not ready within %lld ms: %s",
             (long long)(x->pool->startup_ms > 0 ? x->pool->startup_ms : DEFAULT_STARTUP_MS), why);
    prestart_failed(x, msg);
}

/* Leader: an idle Ready Pod of a prestart pool without the token annotation
 * gets its own envd token (POST /init), then the start command and checks. */
static void prestart_pod(struct krt *rt, struct kpool *p, const struct kube_pod *pod,
                         const json_t *obj)
{
    struct http_header h[] = {{"Content-Type", "application/json"}};
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX], tok[RT_TOKEN_MAX + 1];
    uint8_t raw[24];
    struct kpre *x;

    if (pod->phase != KUBE_PH_IDLE || !pod->ready || !pod->running || pod->deleting || pod->dead ||
        !pod->ip[0] || strcmp(pod->status_image, p->idle_image) != 0 ||
        ksb_by_pod(rt, pod->ns, pod->name) || prestart_find(rt, pod->ns, pod->name))
        return;
    if (jstr(jget2(obj, "metadata", "annotations"), KUBE_A_IDLE_TOKEN)[0]) {
        if (!prestart_token(rt, pod, obj, tok)) {
            /* started by an agent whose token this one cannot open: replaced */
            LOG_INFO("replacing an idle Pod whose start token this agent cannot open", "pod",
                     pod->name);
            pod_delete(rt, pod);
        }
        explicit_bzero(tok, sizeof(tok));
        return;
    }
    if (ab_now_ms() < p->prestart_after_ms || !(x = calloc(1, sizeof(*x))))
        return;
    x->rt = rt;
    x->pool = p;
    ab_strlcpy(x->ns, pod->ns, sizeof(x->ns));
    ab_strlcpy(x->pod, pod->name, sizeof(x->pod));
    ab_strlcpy(x->uid, pod->uid, sizeof(x->uid));
    ab_strlcpy(x->ip, pod->ip, sizeof(x->ip));
    crypto_random(raw, sizeof(raw));
    hex_encode(raw, sizeof(raw), x->token);
    explicit_bzero(raw, sizeof(raw));
    x->next = rt->pres;
    rt->pres = x;
    x->timer_on = true;
    loop_timer_start(rt->loop, &x->timer, p->startup_ms > 0 ? p->startup_ms : DEFAULT_STARTUP_MS,
                     prestart_timeout, x);
    json_t *b = json_pack("{s:s,s:s,s:s,s:{}}", "accessToken", x->token, "defaultUser", "user",
                          "defaultWorkdir", "/home/user", "envVars");
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!body) {
        prestart_free(x);
        return;
    }
    snprintf(addr, sizeof(addr), "%s:%d", x->ip, p->envd_port);
    o.addr = addr;
    o.method = "POST";
    o.target = "/init";
    o.headers = h;
    o.nheaders = 1;
    o.content_length = (int64_t)strlen(body);
    o.timeout_ms = 10000;
    x->hc = http_client_start(rt->loop, &o, &prestart_init_handler, x);
    if (x->hc) {
        rt->inflight++;
        http_client_write(x->hc, body, strlen(body));
        http_client_end(x->hc);
    }
    explicit_bzero(body, strlen(body));
    free(body);
    if (!x->hc)
        prestart_free(x);
}

/* Each pool's start command and probes, from its runtimes as the manifest
 * rules read them (the pool's or Env member's, else its template's). */
static void refresh_start_specs(struct krt *rt)
{
    static struct mf_pool_view views[POOLS_MAX];
    int n = 0;

    for (struct kpool *p = rt->pools; p; p = p->next)
        memset(&p->start, 0, sizeof(p->start));
    if (!rt->set || mf_set_pools(rt->set, rt->cluster, views, POOLS_MAX, &n) != 0)
        return;
    for (int i = 0; i < n && i < POOLS_MAX; i++) {
        struct kpool *p = pool_find(rt, views[i].ns, views[i].name);
        if (p)
            rt_start_spec_from(&p->start, views[i].runtimes, views[i].nruntimes);
    }
}

static void env_status_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    char *key = arg;
    if (rc != AB_ECLOSED) {
        if (rc == 0 && resp->code != 200 && resp->code != 409)
            LOG_WARN("Env status not written", "env", key, "code", code_s(resp->code), "message",
                     resp->status.message);
        if (rc == 0 && resp->code == 409) /* the watch brings the newer one; write again */
            json_object_set_new(rt->env_writes, key, json_integer(0));
        schedule(rt);
    }
    free(key);
}

/* Each Env's segment for this cluster (§4.5): its members as observed,
 * written through /status when it moved, at most once a second. */
static void reconcile_env_status(struct krt *rt)
{
    struct mf_pool_view views[POOLS_MAX];
    struct kube_member_obs obs[MF_MEMBERS_MAX];
    int n = 0;
    const char *k;
    json_t *v;
    int64_t now = ab_now_ms();

    if (!rt->set || mf_set_pools(rt->set, rt->cluster, views, POOLS_MAX, &n) != 0)
        return;
    json_object_foreach(rt->objs[K_ENV], k, v)
    {
        const json_t *md = json_object_get(v, "metadata");
        const char *ns = jstr(md, "namespace"), *name = jstr(md, "name");
        int m = 0;
        json_t *next = json_object_get(rt->env_writes, k);
        if (!mf_set_find(rt->set, MF_ENV, ns, name) || (next && json_integer_value(next) > now))
            continue;
        for (int i = 0; i < n && i < POOLS_MAX && m < MF_MEMBERS_MAX; i++) {
            const struct mf_pool_view *w = &views[i];
            if (!w->member || strcmp(w->ns, ns) != 0 || strcmp(w->obj->name, name) != 0)
                continue;
            struct kube_member_obs *o = &obs[m++];
            struct kpool *p = pool_find(rt, ns, w->name);
            memset(o, 0, sizeof(*o));
            ab_strlcpy(o->name, w->name, sizeof(o->name));
            ab_strlcpy(o->scaling_group, w->scaling_group, sizeof(o->scaling_group));
            o->desired = w->replicas;
            if (p) {
                o->present = true;
                o->current = p->replicas;
                o->idle = p->counts.idle;
                o->running = p->counts.running;
                o->pending = p->nwaiters;
                o->updated = p->counts.updated;
                ab_strlcpy(o->revision, p->revision, sizeof(o->revision));
            }
        }
        const json_t *prev = json_object_get(v, "status");
        json_t *st = kube_env_status(prev, rt->cluster, obs, m, ab_wall_ms());
        if (st && kube_status_differs(prev, st)) {
            json_t *body = json_deep_copy(v);
            json_object_set(body, "status", st);
            char *arg = strdup(k);
            struct kube_ref r = ref_of(K_ENV, ns, name, "status");
            if (arg && send_req(rt, "PUT", &r, NULL, body, env_status_done, arg) == 0) {
                json_object_set_new(rt->env_writes, k, json_integer(now + STATUS_GAP_MS));
                if (!rt->gap_on) { /* a change meanwhile is written when the gap ends */
                    rt->gap_on = true;
                    loop_timer_start(rt->loop, &rt->gap, STATUS_GAP_MS, gap_fn, rt);
                }
            } else
                free(arg);
            json_decref(body);
        }
        json_decref(st);
    }
}

static void kick_fn(struct loop_timer *t)
{
    struct krt *rt = t->arg;
    rt->kick_on = false;
    reconcile(rt);
}

static void gap_fn(struct loop_timer *t)
{
    struct krt *rt = t->arg;
    rt->gap_on = false;
    schedule(rt);
}

static void retry_fn(struct loop_timer *t)
{
    struct krt *rt = t->arg;
    rt->retry_on = false;
    schedule(rt);
}

static void schedule(struct krt *rt)
{
    if (rt->kick_on || rt->closing)
        return;
    rt->kick_on = true;
    loop_timer_start(rt->loop, &rt->kick, KICK_MS, kick_fn, rt);
}

static void tick_fn(struct loop_timer *t)
{
    struct krt *rt = t->arg;
    drain_now(rt);
    reconcile(rt);
    loop_timer_start(rt->loop, &rt->tick, rt->resync_ms, tick_fn, rt);
}

/* ---- rt_ops ------------------------------------------------------------------------------ */

/* An image reference a Pod spec may carry: printable, no spaces, bounded. */
static bool image_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= KUBE_IMAGE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] == 0x7f || s[i] == '"' || s[i] == '\\')
            return false;
    return true;
}

static struct kpool *pick_member(struct krt *rt, const char *ns, const char *env, const char *group,
                                 bool *env_exists, char *err, size_t errlen)
{
    struct kpool *best = NULL;
    char key[400];
    snprintf(key, sizeof(key), "%s/%s", ns, env);
    *env_exists = json_object_get(rt->objs[K_ENV], key) != NULL;
    if (!*env_exists)
        return NULL;
    for (struct kpool *p = rt->pools; p; p = p->next) {
        if (p->removed || strcmp(p->ns, ns) || strcmp(p->env, env))
            continue;
        if (group && group[0] && strcmp(p->group, group) != 0)
            continue;
        if (!best || p->counts.idle > best->counts.idle ||
            (p->counts.idle == best->counts.idle && strcmp(p->name, best->name) < 0))
            best = p;
    }
    if (!best) {
        if (group && group[0])
            snprintf(err, errlen, "env '%s' has no member in scaling group '%s' on cluster '%s'",
                     env, group, rt->cluster);
        else
            snprintf(err, errlen, "env '%s' has no member pools on cluster '%s' yet", env,
                     rt->cluster);
    }
    return best;
}

static int op_claim(struct rt *base, const char *ns, const char *name, enum rt_target target,
                    const char *group, const struct rt_claim_options *o, rt_claim_cb cb, void *arg,
                    uint64_t *ticket, char *err, size_t errlen)
{
    struct krt *rt = (struct krt *)base;
    struct kpool *p = NULL;
    bool env_exists = false;
    int rc;

    if (rt->closing) {
        snprintf(err, errlen, "the kube runtime is shutting down");
        return AB_ECLOSED;
    }
    if ((rc = rt_claim_options_check(o, err, errlen)) != 0)
        return rc;
    if (o->image && o->image[0] && !image_ok(o->image)) {
        snprintf(err, errlen,
                 "image must be 1-%d printable characters without spaces, quotes or "
                 "backslashes",
                 KUBE_IMAGE_MAX - 1);
        return AB_EINVAL;
    }
    for (struct ksb *s = rt->sbxs; s; s = s->next)
        if (strcmp(s->id, o->id) == 0) {
            snprintf(err, errlen, "sandbox id '%s' is already in use", o->id);
            return AB_EEXIST;
        }
    if (target != RT_TARGET_POOL)
        p = pick_member(rt, ns, name, group, &env_exists, err, errlen);
    if (!p && !env_exists && target != RT_TARGET_ENV) {
        p = pool_find(rt, ns, name);
    }
    if (!p) {
        if (!env_exists)
            snprintf(err, errlen, "%s '%s' not found in namespace '%s'",
                     target == RT_TARGET_ENV    ? "env"
                     : target == RT_TARGET_POOL ? "pool"
                                                : "env or pool",
                     name, ns);
        return AB_ENOENT;
    }
    if (p->rewrite_err[0]) {
        snprintf(err, errlen, "pool '%s': %s", p->name, p->rewrite_err);
        return AB_EINVAL;
    }
    char image[KUBE_IMAGE_MAX] = "";
    if (o->image && o->image[0] &&
        kube_rewrite_image(&p->rw, o->image, image, sizeof(image), NULL) != 0) {
        snprintf(err, errlen, "image '%.160s' is longer than %d characters once rewritten by %s",
                 o->image, KUBE_IMAGE_MAX - 1, KUBE_REWRITE_ANNOTATION);
        return AB_EINVAL;
    }
    if (image[0] && strcmp(image, p->idle_image) == 0) {
        snprintf(err, errlen,
                 "image '%s' is the pool's idle image; a sandbox must run another image", o->image);
        return AB_EINVAL;
    }
    if ((rc = kube_egress_claim_check(p->gateway, o->network, o->allow_internet, err, errlen)) != 0)
        return rc;
    if (p->nwaiters >= rt->waiters_max) {
        snprintf(err, errlen, "pool '%s' already has %d claims waiting for a sandbox; try again",
                 p->name, rt->waiters_max);
        return AB_EBUSY;
    }
    struct kwaiter *w = calloc(1, sizeof(*w));
    if (!w)
        return AB_ENOMEM;
    w->rt = rt;
    w->pool = p;
    w->ticket = ++rt->next_ticket;
    w->cb = cb;
    w->arg = arg;
    ab_strlcpy(w->id, o->id, sizeof(w->id));
    w->timeout_s = o->timeout_s ? o->timeout_s
                   : p->idle_ms ? (p->idle_ms + 999) / 1000
                                : DEFAULT_TIMEOUT_S;
    w->env_vars = o->env_vars ? json_deep_copy(o->env_vars) : NULL;
    w->metadata = o->metadata ? json_deep_copy(o->metadata) : NULL;
    ab_strlcpy(w->user, o->user && o->user[0] ? o->user : "user", sizeof(w->user));
    ab_strlcpy(w->workdir, o->workdir && o->workdir[0] ? o->workdir : "/home/user",
               sizeof(w->workdir));
    ab_strlcpy(w->team, o->team ? o->team : "", sizeof(w->team));
    ab_strlcpy(w->owner, o->owner ? o->owner : "", sizeof(w->owner));
    if (o->access_token)
        ab_strlcpy(w->token, o->access_token, sizeof(w->token));
    ab_strlcpy(w->image, image, sizeof(w->image));
    w->network = o->network && !json_is_null(o->network) ? json_deep_copy(o->network) : NULL;
    w->internet = o->allow_internet;
    w->allow_private = o->allow_private_networks;
    w->startup_ms = o->startup_timeout_ms ? o->startup_timeout_ms
                    : p->startup_ms       ? p->startup_ms
                                          : DEFAULT_STARTUP_MS;
    p->last_create_ms = ab_now_ms();
    p->claims++;
    if (p->w_tail)
        p->w_tail->next = w;
    else
        p->w_head = w;
    p->w_tail = w;
    p->nwaiters++;
    w->timer_on = true;
    loop_timer_start(rt->loop, &w->timer, w->startup_ms, waiter_timeout, w);
    if (ticket)
        *ticket = w->ticket;
    serve_waiters(rt, p);
    schedule(rt);
    return 0;
}

static void op_claim_cancel(struct rt *base, uint64_t ticket)
{
    struct krt *rt = (struct krt *)base;
    for (struct kpool *p = rt->pools; p; p = p->next)
        for (struct kwaiter *w = p->w_head; w; w = w->next)
            if (w->ticket == ticket) {
                waiter_unlink(p, w);
                waiter_free(w);
                schedule(rt);
                return;
            }
    for (struct ksb *s = rt->sbxs; s; s = s->next)
        if (s->w && s->w->ticket == ticket)
            s->w->cancelled = true; /* released once arming ends */
}

/* A claim not answered yet (a no-wait create answers before): waiting for a
 * Pod of its pool (*w), or its Pod being armed (*armed). */
static bool pending_find(struct krt *rt, const char *id, struct kwaiter **w, struct ksb **armed)
{
    *w = NULL;
    *armed = NULL;
    for (struct kpool *p = rt->pools; p; p = p->next)
        for (struct kwaiter *x = p->w_head; x; x = x->next)
            if (!strcmp(x->id, id)) {
                *w = x;
                return true;
            }
    for (struct ksb *s = rt->sbxs; s; s = s->next)
        if (s->w && !s->w->cancelled && !s->w->killed && !strcmp(s->w->id, id)) {
            *armed = s;
            return true;
        }
    return false;
}

/* Releasing a pending claim (runtime.h, rt_release): a waiting one ends now,
 * an arming one once arming ends (armed). */
static int pending_release(struct krt *rt, const char *id)
{
    struct kwaiter *w;
    struct ksb *armed;

    if (!pending_find(rt, id, &w, &armed))
        return AB_ENOENT;
    if (w) {
        struct kpool *p = w->pool;
        LOG_INFO("claim released before it started", "id", id, "pool", p->name);
        waiter_unlink(p, w);
        claim_fail(w, AB_ECLOSED, "the sandbox was killed before it started");
        schedule(rt);
    } else {
        LOG_INFO("claim released while being armed", "id", id, "pool", armed->pool->name);
        armed->w->killed = true;
    }
    return 0;
}

static int op_release(struct rt *base, const char *id)
{
    struct ksb *s = ksb_by_id((struct krt *)base, id);
    if (!s)
        return pending_release((struct krt *)base, id);
    ksb_release(s, "released");
    return 0;
}

static int op_release_wait(struct rt *base, const char *id, int64_t timeout_ms, rt_release_cb cb,
                           void *arg)
{
    struct krt *rt = (struct krt *)base;
    struct ksb *s = ksb_by_id(rt, id);
    struct krel *r;

    if (!s) {
        /* no Pod was swapped for it yet, or its swap ends in a release (armed) */
        int rc = pending_release(rt, id);
        if (rc == 0)
            cb(arg, 0, NULL);
        return rc;
    }
    if (!(r = calloc(1, sizeof(*r)))) {
        ksb_release(s, "released");
        cb(arg, 0, NULL);
        return 0;
    }
    r->rt = rt;
    ab_strlcpy(r->ns, s->ns, sizeof(r->ns));
    ab_strlcpy(r->pod, s->pod, sizeof(r->pod));
    ab_strlcpy(r->uid, s->uid, sizeof(r->uid));
    ab_strlcpy(r->idle_image, s->pool->idle_image, sizeof(r->idle_image));
    r->replaced = strcmp(s->image, s->pool->idle_image) == 0;
    r->cb = cb;
    r->arg = arg;
    r->next = rt->rels;
    rt->rels = r;
    loop_timer_start(rt->loop, &r->timer, timeout_ms > 0 ? timeout_ms : RT_RELEASE_WAIT_MS,
                     rel_timeout, r);
    ksb_release(s, "released");
    return 0;
}

static int op_set_timeout(struct rt *base, const char *id, int64_t timeout_s)
{
    struct ksb *s = ksb_by_id((struct krt *)base, id);
    if (!s)
        return AB_ENOENT;
    if (timeout_s < 0 || timeout_s > 366LL * 24 * 3600)
        return AB_EINVAL;
    s->end_ms = ab_wall_ms() + timeout_s * 1000;
    schedule_end(s);
    end_write(s, false);
    return 0;
}

static void op_touch(struct rt *base, const char *id)
{
    struct ksb *s = ksb_by_id((struct krt *)base, id);
    if (s)
        s->last_active_ms = ab_wall_ms(); /* end_timer looks at it when it fires */
}

static int op_get(struct rt *base, const char *id, struct rt_sandbox *out)
{
    struct krt *rt = (struct krt *)base;
    struct ksb *s = ksb_by_id(rt, id), *armed;
    struct kwaiter *w;

    if (s) {
        fill(s, out, true);
        return 0;
    }
    if (!pending_find(rt, id, &w, &armed))
        return AB_ENOENT;
    if (armed)
        w = armed->w;
    rt_fill_pending(out, id, w->pool->ns, w->pool->env, w->pool->name, w->pool->group, w->team,
                    w->owner, w->metadata);
    return 0;
}

static void op_list(struct rt *base, const struct rt_filter *f, rt_sandbox_fn fn, void *arg)
{
    struct krt *rt = (struct krt *)base;
    for (struct ksb *s = rt->sbxs; s; s = s->next) {
        struct rt_sandbox snap;
        if (!rt_filter_admits(f, s->state == KS_RUNNING, s->ns, s->team, s->pool->env,
                              s->pool->name))
            continue;
        fill(s, &snap, false);
        fn(arg, &snap);
    }
}

static void status_of(const struct kpool *p, struct rt_pool_status *o)
{
    o->replicas = p->removed ? 0 : p->replicas;
    o->idle = p->counts.idle;
    o->running = p->counts.running;
    o->starting = p->counts.starting;
    o->stopping = p->counts.stopping;
    o->pending = p->nwaiters;
    ab_strlcpy(o->update_revision, p->revision, sizeof(o->update_revision));
    o->updated = p->counts.updated;
}

static int op_pool_status(struct rt *base, const char *ns, const char *pool,
                          struct rt_pool_status *o)
{
    struct kpool *p = pool_find((struct krt *)base, ns, pool);
    if (!p)
        return AB_ENOENT;
    status_of(p, o);
    return 0;
}

static void op_list_pools(struct rt *base, const char *ns, rt_pool_fn fn, void *arg)
{
    struct krt *rt = (struct krt *)base;
    for (struct kpool *p = rt->pools; p; p = p->next) {
        struct rt_pool info;
        if (p->removed || (ns && strcmp(ns, p->ns) != 0))
            continue;
        memset(&info, 0, sizeof(info));
        ab_strlcpy(info.ns, p->ns, sizeof(info.ns));
        ab_strlcpy(info.name, p->name, sizeof(info.name));
        ab_strlcpy(info.env, p->env, sizeof(info.env));
        ab_strlcpy(info.scaling_group, p->group, sizeof(info.scaling_group));
        ab_strlcpy(info.template_name, p->tpl, sizeof(info.template_name));
        status_of(p, &info.status);
        kscale_pool_info(rt->scale, p->ns, p->name, &info.autoscaling, &info.headroom);
        info.claims = p->claims;
        fn(arg, &info);
    }
}

/* The scaling-group seam (scale.c has the logic). */
static void op_scale_groups(struct rt *base, rt_group_fn fn, void *arg)
{
    struct krt *rt = (struct krt *)base;
    struct kscale_pool *v;
    int n = 0, i = 0;

    for (struct kpool *p = rt->pools; p; p = p->next)
        n++;
    if (!(v = calloc((size_t)(n > 0 ? n : 1), sizeof(*v))))
        return;
    for (struct kpool *p = rt->pools; p; p = p->next) {
        if (p->removed)
            continue;
        v[i] = (struct kscale_pool){.ns = p->ns,
                                    .name = p->name,
                                    .env = p->env,
                                    .group = p->group,
                                    .replicas = p->replicas,
                                    .last_create_ms = p->last_create_ms};
        status_of(p, &v[i].status);
        /* Pods on their way (created, or idle and not Ready yet) will serve
         * what waits: starting, for the autoscaler, not idle. A Pod in phase
         * starting is a claimed one swapping its image: it serves its own
         * claim, not a waiting one (counted so, a claim that found nothing
         * idle looked covered by the sandbox it queued behind). */
        v[i].status.idle -= p->counts.unavailable_idle;
        v[i].status.running += p->counts.starting;
        v[i].status.starting = p->counts.unavailable_idle + p->creating;
        i++;
    }
    kscale_groups(rt->scale, rt->set, rt->cluster, rt->objs[K_POD], v, i, fn, arg);
    free(v);
}

/* Recorded, then the Env reconciler patches the member pool's spec.replicas
 * on its next pass (now); a Kubernetes Event on the pool says why. */
static int op_scale_set(struct rt *base, const char *ns, const char *pool, int replicas,
                        const char *reason, char *err, size_t errlen)
{
    struct krt *rt = (struct krt *)base;
    struct kpool *p = pool_find(rt, ns, pool);

    if (!p || !p->env[0]) {
        snprintf(err, errlen, "pool '%s/%s' is not an Env member pool on cluster '%s'", ns, pool,
                 rt->cluster);
        return AB_ENOENT;
    }
    if (kscale_set(rt->scale, ns, pool, replicas) != 0) {
        snprintf(err, errlen, "replicas must be a non-negative count, got %d", replicas);
        return AB_EINVAL;
    }
    pool_event(rt, p, "Normal", replicas >= p->replicas ? "ScaledUp" : "ScaledDown",
               reason ? reason : "autoscaler");
    schedule(rt);
    return 0;
}

static void op_list_envs(struct rt *base, const char *ns, rt_env_fn fn, void *arg)
{
    struct krt *rt = (struct krt *)base;
    const char *k;
    json_t *v;
    json_object_foreach(rt->objs[K_ENV], k, v)
    {
        const json_t *md = json_object_get(v, "metadata");
        struct rt_env e;
        if (ns && strcmp(ns, jstr(md, "namespace")) != 0)
            continue;
        memset(&e, 0, sizeof(e));
        ab_strlcpy(e.ns, jstr(md, "namespace"), sizeof(e.ns));
        ab_strlcpy(e.name, jstr(md, "name"), sizeof(e.name));
        ab_strlcpy(e.template_name, jstr(jget2(v, "spec", "templateRef"), "name"),
                   sizeof(e.template_name));
        for (struct kpool *p = rt->pools; p; p = p->next) {
            if (p->removed || strcmp(p->ns, e.ns) || strcmp(p->env, e.name))
                continue;
            e.npools++;
            e.idle += p->counts.idle;
            e.running += p->counts.running;
        }
        fn(arg, &e);
    }
}

static void krt_destroy(struct krt *rt)
{
    while (rt->pools) {
        struct kpool *p = rt->pools;
        rt->pools = p->next;
        free(p);
    }
    for (int i = 0; i < K_NKINDS; i++)
        json_decref(rt->objs[i]);
    json_decref(rt->expect_add);
    json_decref(rt->expect_del);
    json_decref(rt->env_writes);
    kobj_free(rt->kobj);
    mf_set_free(rt->set);
    kube_seal_clear(&rt->seal);
    kscale_free(rt->scale);
    kube_usage_unregister(rt->reader, rt->c); /* or by the last read in flight */
    pthread_mutex_destroy(&rt->mu);
    pthread_cond_destroy(&rt->cv);
    free(rt);
}

/* Shutdown: Pods stay as they are (the next agent re-adopts the claimed ones);
 * in-flight claims fail; requests still on workers free rt when they end. */
static void op_free(struct rt *base)
{
    struct krt *rt = (struct krt *)base;

    rt->closing = true;
    kobj_close(rt->kobj); /* its writers hear now */
    atomic_store(&rt->stop, true);
    pthread_mutex_lock(&rt->mu);
    pthread_cond_broadcast(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
    for (int i = 0; i < K_NKINDS; i++)
        if (rt->refl[i].started)
            pthread_join(rt->refl[i].th, NULL);
    while (rt->q_head) {
        struct kev *e = rt->q_head;
        rt->q_head = e->next;
        json_decref(e->obj);
        free(e);
    }
    loop_timer_cancel(&rt->tick);
    if (rt->kick_on)
        loop_timer_cancel(&rt->kick);
    if (rt->gap_on)
        loop_timer_cancel(&rt->gap);
    if (rt->retry_on)
        loop_timer_cancel(&rt->retry);
    for (struct kpool *p = rt->pools; p; p = p->next)
        while (p->w_head) {
            struct kwaiter *w = p->w_head;
            waiter_unlink(p, w);
            claim_fail(w, AB_ECLOSED, "the kube runtime is shutting down");
        }
    while (rt->clears) {
        struct kclear *c = rt->clears;
        rt->clears = c->next;
        kube_egress_push_cancel(c->push);
        free(c);
    }
    while (rt->rels)
        rel_end(rt->rels, AB_ECLOSED, "the kube runtime is shutting down", false);
    while (rt->pres)
        prestart_free(rt->pres);
    while (rt->sbxs) {
        struct ksb *s = rt->sbxs;
        if (s->w)
            claim_fail(s->w, AB_ECLOSED, "the kube runtime is shutting down");
        s->w = NULL;
        if (s->hc) {
            http_client_close(s->hc);
            s->hc = NULL;
            rt->inflight--;
        }
        if (s->state == KS_PATCHING) {
            /* its patch_done frees it (with AB_ECLOSED) */
            rt->sbxs = s->next;
            s->next = NULL;
            s->rt = rt;
            continue;
        }
        ksb_unlink_free(s);
    }
    maybe_destroy(rt);
}

/* ---- the manifest seam (objects.c) ---------------------------------------------------- */

struct kobj_req {
    kobj_resp_fn fn;
    void *arg;
};

static void kobj_req_done(struct krt *rt, void *arg, int rc, struct kube_response *resp)
{
    struct kobj_req *q = arg;
    (void)rt;
    q->fn(q->arg, rc, resp);
    free(q);
}

static int kobj_send(void *owner, const char *method, const struct kube_ref *ref, const char *ctype,
                     const json_t *body, kobj_resp_fn fn, void *arg)
{
    struct kobj_req *q = malloc(sizeof(*q));
    int rc;

    if (!q)
        return AB_ENOMEM;
    q->fn = fn;
    q->arg = arg;
    if ((rc = send_req(owner, method, ref, ctype, body, kobj_req_done, q)) != 0)
        free(q);
    return rc;
}

static void op_objects(struct rt *base, enum rt_obj_kind kind, const char *ns, const char *name,
                       rt_object_fn fn, void *arg)
{
    kobj_objects(((struct krt *)base)->kobj, kind, ns, name, fn, arg);
}

static int op_object_write(struct rt *base, const struct rt_write *w, rt_write_cb cb, void *arg,
                           char *err, size_t errlen)
{
    return kobj_write(((struct krt *)base)->kobj, w, cb, arg, err, errlen);
}

static void network_pushed(void *arg, const char *err)
{
    struct ksb *s = arg;
    s->push = NULL;
    if (err)
        LOG_WARN("the egress sidecar did not take the new policy", "id", s->id, "pod", s->pod,
                 "error", err);
}

/* PUT /sandboxes/{id}/network: checked here with the parser the sidecar uses
 * (the 400 names the field), then pushed; the sidecar swaps it in. */
static int op_set_network(struct rt *base, const char *id, const json_t *network, bool internet,
                          char *err, size_t errlen)
{
    struct krt *rt = (struct krt *)base;
    struct ksb *s = ksb_by_id(rt, id);
    struct egress_policy *pol = NULL;
    char token[KUBE_EGRESS_TOKEN_MAX + 1], key[400];
    int rc;

    if (!s)
        return AB_ENOENT;
    if ((rc = kube_egress_claim_check(s->pool->gateway, network, internet, err, errlen)) != 0)
        return rc;
    if (!s->pool->gateway)
        return 0; /* nothing asked that the cluster's network does not already give */
    const struct egress_opts eo = {.internet = internet, .allow_private = s->allow_private};
    if ((rc = egress_policy_parse(network, &eo, &pol, err, errlen)) != 0)
        return rc;
    egress_policy_free(pol);
    snprintf(key, sizeof(key), "%s/%s", s->ns, s->pod);
    if (kube_egress_token_of(json_object_get(rt->objs[K_POD], key), token, sizeof(token)) != 0) {
        snprintf(err, errlen, "the Pod's egress sidecar has no token");
        return AB_EIO;
    }
    json_decref(s->network);
    s->network = network && !json_is_null(network) ? json_deep_copy(network) : NULL;
    s->internet = internet;
    char flags[32];
    kube_egress_flags_format(s->internet, s->allow_private, flags);
    json_t *fp = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", KUBE_A_EGRESS, flags);
    struct kube_ref fr = ref_of(K_POD, s->ns, s->pod, NULL);
    if (fp) /* for a re-adopting agent (adopt.h) */
        send_simple(rt, "egress flags", "PATCH", &fr, "application/merge-patch+json", fp);
    json_decref(fp);
    kube_egress_push_cancel(s->push); /* the newest policy wins */
    json_t *b = kube_egress_policy_body(s->network, internet, s->allow_private);
    s->push = b ? kube_egress_push(rt->loop, s->ip, token, b, network_pushed, s) : NULL;
    json_decref(b);
    explicit_bzero(token, sizeof(token));
    if (!s->push) {
        snprintf(err, errlen, "cannot start the request to the Pod's egress sidecar");
        return AB_EIO;
    }
    return 0;
}

static const struct rt_ops krt_ops;

/* Usage and logs (usage.h): the probe names the Pod and its sandbox container. */
static int op_usage_probe(struct rt *base, const char *id, struct rt_probe *out)
{
    struct krt *rt = (struct krt *)base;
    struct ksb *s = ksb_by_id(rt, id);
    if (!s)
        return AB_ENOENT;
    kube_usage_probe_fill(out, &krt_ops, rt->reader, s->id, s->ns, s->pod, s->pool->container,
                          s->claimed_ms, 0, 0);
    return 0;
}

static const struct rt_ops krt_ops = {
    .claim = op_claim,
    .claim_cancel = op_claim_cancel,
    .release = op_release,
    .release_wait = op_release_wait,
    .set_timeout = op_set_timeout,
    .touch = op_touch,
    .get = op_get,
    .list = op_list,
    .list_pools = op_list_pools,
    .list_envs = op_list_envs,
    .pool_status = op_pool_status,
    .free = op_free,
    .objects = op_objects,
    .object_write = op_object_write,
    .set_network = op_set_network,
    .usage_probe = op_usage_probe,
    .usage_read = kube_usage_read,
    .log_probe = op_usage_probe,
    .log_read = kube_log_read,
    .scale_groups = op_scale_groups,
    .scale_set = op_scale_set,
};

void krt_set_leader(struct rt *base, bool leading)
{
    struct krt *rt = (struct krt *)base;
    if (rt->leading == leading)
        return;
    rt->leading = leading;
    LOG_INFO(leading ? "kube reconciler leading" : "kube reconciler following");
    schedule(rt);
}

struct kube_client *krt_client(struct rt *base)
{
    return ((struct krt *)base)->c;
}

const char *krt_namespace(struct rt *base)
{
    return ((struct krt *)base)->ns;
}

uint64_t krt_requests(struct rt *base)
{
    return kube_client_requests(((struct krt *)base)->c);
}

int krt_new(const struct krt_options *o, struct rt **out, char *err, size_t errlen)
{
    struct kube_config cfg;
    struct krt *rt;
    char why[512] = "";
    int rc;

    *out = NULL;
    if (!o->loop || !o->cluster_id) {
        snprintf(err, errlen, "the kube runtime needs a loop and a cluster_id");
        return AB_EINVAL;
    }
    /* Before the config: a bad flag is named even without a cluster. */
    struct kube_rewrite rw = {0};
    if ((rc = kube_rewrite_parse(&rw, o->registry_rewrite, "--registry-rewrite", err, errlen)) != 0)
        return rc;
    memset(&cfg, 0, sizeof(cfg));
    if ((rc = kube_config_load(o->kubeconfig, &cfg, why, sizeof(why))) != 0) {
        snprintf(err, errlen, "kube runtime: %s", why[0] ? why : ab_strerror(rc));
        kube_config_clear(&cfg);
        return rc;
    }
    if (!(rt = calloc(1, sizeof(*rt)))) {
        kube_config_clear(&cfg);
        return AB_ENOMEM;
    }
    rt->base.ops = &krt_ops;
    rt->base.kind = "kube";
    /* egress: only pools whose Env enables the gateway have the sidecar;
     * a claim elsewhere that asks for a policy is refused (egress_pod.h) */
    rt->base.caps = RT_CAP_IMAGE_OVERRIDE | RT_CAP_AUTOSCALE | RT_CAP_EGRESS |
                    RT_CAP_NETWORK_UPDATE | RT_CAP_USAGE | RT_CAP_LOGS;
    ab_strlcpy(rt->egress_image, o->egress_image ? o->egress_image : "", sizeof(rt->egress_image));
    ab_strlcpy(rt->egress_resolver, o->egress_resolver ? o->egress_resolver : "",
               sizeof(rt->egress_resolver));
    rt->loop = o->loop;
    rt->resync_ms = o->resync_ms > 0 ? o->resync_ms : 10000;
    rt->waiters_max = o->waiters_max > 0 ? o->waiters_max : 1024;
    rt->leading = o->lead_now;
    rt->rewrite = rw;
    if (kube_seal_init(&rt->seal, o->seal_secret, o->cluster_id) != 0) {
        snprintf(err, errlen, "kube runtime: cannot derive the envd token seal key");
        kube_config_clear(&cfg);
        free(rt);
        return AB_EIO;
    }
    ab_strlcpy(rt->cluster, o->cluster_id, sizeof(rt->cluster));
    const char *ns = o->ns && o->ns[0] ? o->ns : cfg.ns[0] ? cfg.ns : "default";
    if (!mf_name_is_label(ns, 63, false)) {
        snprintf(err, errlen, "namespace '%.80s' must be an RFC 1123 label", ns);
        kube_config_clear(&cfg);
        free(rt);
        return AB_EINVAL;
    }
    ab_strlcpy(rt->ns, ns, sizeof(rt->ns));
    struct kube_client_options co = {.qps = CLIENT_QPS, .burst = CLIENT_BURST};
    rt->c = kube_client_new(&cfg, &co, why, sizeof(why));
    kube_config_clear(&cfg);
    if (!rt->c) {
        snprintf(err, errlen, "kube runtime: %s", why);
        free(rt);
        return AB_EIO;
    }
    rt->reader = kube_usage_register(rt->c);
    if (!(rt->scale = kscale_new())) {
        snprintf(err, errlen, "kube runtime: out of memory");
        kube_usage_unregister(rt->reader, rt->c);
        free(rt);
        return AB_ENOMEM;
    }
    pthread_mutex_init(&rt->mu, NULL);
    pthread_cond_init(&rt->cv, NULL);
    for (int i = 0; i < K_NKINDS; i++)
        rt->objs[i] = json_object();
    rt->expect_add = json_object();
    rt->expect_del = json_object();
    rt->env_writes = json_object();
    const struct kobj_deps kd = {.loop = rt->loop,
                                 .send = kobj_send,
                                 .owner = rt,
                                 .ns = rt->ns,
                                 .templates = rt->objs[K_TPL],
                                 .envs = rt->objs[K_ENV],
                                 .pools = rt->objs[K_POOL]};
    if ((rt->kobj = kobj_new(&kd)) != NULL)
        rt->base.caps |= RT_CAP_MANIFEST_WRITE;
    for (int i = 0; i < K_NKINDS; i++) {
        rt->refl[i].rt = rt;
        rt->refl[i].kind = i;
        if (pthread_create(&rt->refl[i].th, NULL, reflect_main, &rt->refl[i]) != 0) {
            snprintf(err, errlen, "kube runtime: cannot start a reflector thread: %s",
                     strerror(errno));
            op_free(&rt->base);
            return AB_EIO;
        }
        rt->refl[i].started = true;
    }
    loop_timer_start(rt->loop, &rt->tick, 200, tick_fn, rt);
    LOG_INFO("kube runtime started", "server", kube_client_server(rt->c), "namespace", rt->ns,
             "leading", rt->leading ? "yes" : "no (waiting for the lease)");
    *out = &rt->base;
    return 0;
}
