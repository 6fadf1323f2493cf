/* Warm pools of the local runtime (runtime.h over manifest.h and sandbox.h).
 *
 * Each pool keeps `replicas` sandboxes started and idle, plus one more for
 * every waiting claim. A claim takes the oldest idle sandbox (FIFO), arms it
 * (envd POST /init with token, env vars, user, workdir; slirp4netns first
 * when it may reach the internet) and only then reports it; the pool starts a
 * replacement once claims pause (REFILL_QUIET_MS without a claim served from
 * idle, at most REFILL_DEFER_MAX_MS after the first; at once when a claim
 * waits or the pool has no idle left): a burst of claims is armed before
 * its replacements' clone + envd start compete with it for the CPU and the
 * process's memory map (clone copies it). A released or timed-out sandbox is
 * destroyed, never reused. Counters are computed by walking the sandboxes,
 * never kept apart, so they cannot drift.
 *
 * Loop thread only. Blocking steps (clone + setup, slirp attach, rm -rf) run
 * on the loop's workers; while a worker holds a sandbox its phase says so and
 * nothing else touches it. */
#include "agent/runtime/local/local.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agent/runtime/local/manifest.h"
#include "agent/runtime/local/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEFAULT_STARTUP_MS 120000
#define DEFAULT_TIMEOUT_S 300
#define READY_POLL_MS 10
#define GONE_POLL_MS 10
#define RETRY_MS 1000
#define REFILL_QUIET_MS 100     /* replacements start after this long without a claim */
#define REFILL_DEFER_MAX_MS 500 /* ... and never later than this after the first one */
#define POOLS_MAX 1024
#define INIT_BODY_MAX (1024 * 1024)

enum phase {
    PH_SPAWNING = 1,
    PH_STARTING,
    PH_IDLE,
    PH_ATTACHING,
    PH_ARMING,
    PH_RUNNING,
    PH_STOPPING,
    PH_REMOVING
};

struct lpool;
struct lsb;

struct waiter {
    struct waiter *next;
    struct lrt *rt;
    struct lpool *pool;
    uint64_t ticket;
    rt_claim_cb cb;
    void *arg;
    bool cancelled;
    char id[RT_ID_MAX + 1];
    int64_t timeout_s;
    json_t *env_vars;
    json_t *metadata;
    bool internet;
    char user[RT_NAME_MAX + 1];
    char workdir[256];
    char *token;
    char team[RT_NAME_MAX + 1];
    char owner[RT_NAME_MAX + 1];
    struct loop_timer timer; /* startup timeout */
    bool timer_on;
};

struct lpool {
    struct lpool *next;
    char ns[RT_NAME_MAX + 1];
    char name[RT_NAME_MAX + 1];
    char env[RT_NAME_MAX + 1];
    char group[RT_NAME_MAX + 1];
    char tpl[254];
    int replicas;
    int priority;
    int64_t startup_ms;
    int64_t idle_ms;
    bool disable_egress;
    bool removed;
    bool seen;
    int64_t retry_after_ms; /* spawn failures back off */
    struct waiter *w_head, *w_tail;
    int nwaiters;
};

struct lsb {
    struct lsb *next;
    struct lrt *rt;
    struct lpool *pool;
    enum phase phase;
    struct lsbx x;
    char sid[LSBX_ID_MAX + 1]; /* directory name */
    int64_t seq;               /* FIFO order of becoming idle */
    int64_t deadline_ms;       /* monotonic: startup deadline while starting */
    struct loop_timer timer;
    bool timer_on;
    bool doomed; /* destroy when the worker hands it back */
    struct http_client *hc;
    int http_status;
    struct waiter *armer;
    char err[RT_ERR_MAX];
    int rc;
    /* claimed */
    char id[RT_ID_MAX + 1];
    json_t *metadata;
    char team[RT_NAME_MAX + 1];
    char owner[RT_NAME_MAX + 1];
    int64_t claimed_ms, end_ms, last_active_ms; /* wall clock */
};

struct lrt {
    struct rt base;
    struct loop *loop;
    char cluster[RT_NAME_MAX + 1];
    char state_dir[LSBX_DIR_MAX];
    char sbx_dir[LSBX_DIR_MAX];
    char manifests[512];
    char envd[512];
    const char *argv[LSBX_ARGV_MAX + 1];
    char *slirp;
    int reload_ms, max_sandboxes, waiters_max;
    struct mf_set *set;
    uint64_t sig;
    struct lpool *pools;
    struct lsb *sbxs;
    uint64_t next_ticket;
    int64_t seq;
    struct loop_timer tick;
    struct loop_timer refill; /* deferred replacements after claims (op_claim) */
    bool refill_on;
    int64_t refill_first_ms; /* when the pending refill was first deferred */
    bool closing;
    bool adopting; /* no spawns before the state directory has been scanned */
};

static void reconcile(struct lrt *rt, struct lpool *p);
static void refill_fire(struct loop_timer *t);
static void refill_later(struct lrt *rt);
static void destroy(struct lsb *s);
static void serve_waiters(struct lrt *rt, struct lpool *p);

/* ---- bookkeeping ------------------------------------------------------------ */

static int count(struct lrt *rt, struct lpool *p, enum phase a, enum phase b)
{
    struct lsb *s;
    int n = 0;

    for (s = rt->sbxs; s; s = s->next)
        if ((!p || s->pool == p) && s->phase >= a && s->phase <= b)
            n++;
    return n;
}

static struct lpool *pool_find(struct lrt *rt, const char *ns, const char *name)
{
    struct lpool *p;

    for (p = rt->pools; p; p = p->next)
        if (!p->removed && !strcmp(p->ns, ns) && !strcmp(p->name, name))
            return p;
    return NULL;
}

static struct lsb *sbx_find(struct lrt *rt, const char *id)
{
    struct lsb *s;

    for (s = rt->sbxs; s; s = s->next)
        if (s->phase == PH_RUNNING && !strcmp(s->id, id))
            return s;
    return NULL;
}

static void waiter_free(struct waiter *w)
{
    if (!w)
        return;
    if (w->timer_on)
        loop_timer_cancel(&w->timer);
    json_decref(w->env_vars);
    json_decref(w->metadata);
    if (w->token) {
        explicit_bzero(w->token, strlen(w->token));
        free(w->token);
    }
    free(w);
}

static void waiter_unlink(struct lpool *p, struct waiter *w)
{
    struct waiter **pp;

    for (pp = &p->w_head; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            if (p->w_tail == w) {
                struct waiter *t = p->w_head;
                while (t && t->next)
                    t = t->next;
                p->w_tail = t;
            }
            p->nwaiters--;
            w->next = NULL;
            return;
        }
    }
}

static void sbx_unlink_free(struct lsb *s)
{
    struct lsb **pp;

    for (pp = &s->rt->sbxs; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    if (s->timer_on)
        loop_timer_cancel(&s->timer);
    json_decref(s->metadata);
    lsbx_release(&s->x);
    free(s);
}

static void pool_maybe_free(struct lrt *rt, struct lpool *p)
{
    struct lpool **pp;
    struct lsb *s;

    if (!p->removed || p->w_head)
        return;
    for (s = rt->sbxs; s; s = s->next)
        if (s->pool == p)
            return;
    for (pp = &rt->pools; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            free(p);
            return;
        }
    }
}

static void fill(const struct lsb *s, struct rt_sandbox *o, bool ref_metadata)
{
    memset(o, 0, sizeof(*o));
    ab_strlcpy(o->id, s->phase >= PH_ATTACHING && s->id[0] ? s->id : s->sid, sizeof(o->id));
    ab_strlcpy(o->ns, s->pool->ns, sizeof(o->ns));
    ab_strlcpy(o->env, s->pool->env, sizeof(o->env));
    ab_strlcpy(o->pool, s->pool->name, sizeof(o->pool));
    ab_strlcpy(o->scaling_group, s->pool->group, sizeof(o->scaling_group));
    ab_strlcpy(o->template_name, s->pool->tpl, sizeof(o->template_name));
    ab_strlcpy(o->team, s->team, sizeof(o->team));
    ab_strlcpy(o->owner, s->owner, sizeof(o->owner));
    o->state = s->phase == PH_RUNNING    ? RT_RUNNING
               : s->phase == PH_IDLE     ? RT_IDLE
               : s->phase >= PH_STOPPING ? RT_STOPPING
                                         : RT_STARTING;
    o->internet = s->x.internet;
    o->claimed_ms = s->claimed_ms;
    o->end_ms = s->end_ms;
    snprintf(o->envd_addr, sizeof(o->envd_addr), "unix:%s", s->x.socket);
    snprintf(o->port_addr, sizeof(o->port_addr), "netns:/proc/%d/ns/net|127.0.0.1", (int)s->x.pid);
    o->metadata = s->metadata && ref_metadata ? json_incref(s->metadata) : s->metadata;
}

static void persist(struct lsb *s)
{
    json_t *info = json_pack("{s:s, s:s, s:s}", "ns", s->pool->ns, "pool", s->pool->name, "phase",
                             s->phase == PH_RUNNING ? "running" : "idle");

    if (!info)
        return;
    if (s->phase == PH_RUNNING) {
        json_object_set_new(info, "id", json_string(s->id));
        json_object_set_new(info, "claimed_ms", json_integer(s->claimed_ms));
        json_object_set_new(info, "end_ms", json_integer(s->end_ms));
        json_object_set_new(info, "team", json_string(s->team));
        json_object_set_new(info, "owner", json_string(s->owner));
        if (s->metadata)
            json_object_set(info, "metadata", s->metadata);
    }
    json_decref(s->x.info);
    s->x.info = info;
    if (lsbx_state_write(&s->x) != 0)
        LOG_WARN("cannot write sandbox state", "dir", s->x.dir);
}

/* ---- destroying ---------------------------------------------------------------- */

static void remove_work(void *arg)
{
    struct lsb *s = arg;

    s->rc = lsbx_remove_dir(&s->x);
}

static void remove_done(void *arg, int status)
{
    struct lsb *s = arg;
    struct lrt *rt = s->rt;
    struct lpool *p = s->pool;

    (void)status;
    if (s->rc != 0)
        LOG_WARN("cannot remove sandbox directory", "dir", s->x.dir);
    sbx_unlink_free(s);
    if (rt->closing)
        return;
    pool_maybe_free(rt, p);
    reconcile(rt, p);
}

static void gone_poll(struct loop_timer *t)
{
    struct lsb *s = t->arg;

    s->timer_on = false;
    if (!lsbx_is_gone(&s->x)) {
        s->timer_on = true;
        loop_timer_start(s->rt->loop, &s->timer, GONE_POLL_MS, gone_poll, s);
        return;
    }
    s->phase = PH_REMOVING;
    if (loop_submit(s->rt->loop, remove_work, remove_done, s) != 0) {
        s->rc = lsbx_remove_dir(&s->x); /* queue full: do it here rather than leak */
        remove_done(s, 0);
    }
}

/* Kills the sandbox and frees it once gone. Safe in any phase. */
static void destroy(struct lsb *s)
{
    if (s->phase == PH_SPAWNING || s->phase == PH_ATTACHING) {
        s->doomed = true; /* a worker holds it; finish when it comes back */
        return;
    }
    if (s->phase >= PH_STOPPING)
        return;
    if (s->timer_on) {
        loop_timer_cancel(&s->timer);
        s->timer_on = false;
    }
    if (s->hc) {
        http_client_close(s->hc);
        s->hc = NULL;
    }
    s->phase = PH_STOPPING;
    lsbx_kill(&s->x);
    s->timer_on = true;
    loop_timer_start(s->rt->loop, &s->timer, 0, gone_poll, s);
}

/* ---- claims finishing ------------------------------------------------------------ */

static void claim_fail(struct waiter *w, int err, const char *msg)
{
    if (!w->cancelled && w->cb)
        w->cb(w->arg, err, msg, NULL);
    waiter_free(w);
}

static void end_timer(struct loop_timer *t);

static void schedule_end(struct lsb *s)
{
    int64_t now = ab_wall_ms(), at = s->end_ms;

    if (s->pool->idle_ms > 0)
        at = AB_MIN(at, s->last_active_ms + s->pool->idle_ms);
    if (s->timer_on)
        loop_timer_cancel(&s->timer);
    s->timer_on = true;
    loop_timer_start(s->rt->loop, &s->timer, AB_MAX(at - now, 0), end_timer, s);
}

static void end_timer(struct loop_timer *t)
{
    struct lsb *s = t->arg;
    int64_t now = ab_wall_ms();

    s->timer_on = false;
    if (now >= s->end_ms || (s->pool->idle_ms > 0 && now >= s->last_active_ms + s->pool->idle_ms)) {
        LOG_INFO("sandbox timed out", "id", s->id, "pool", s->pool->name);
        destroy(s);
        return;
    }
    schedule_end(s);
}

static void armed(struct lsb *s)
{
    struct waiter *w = s->armer;
    struct rt_sandbox snap;

    s->armer = NULL;
    if (w->cancelled) {
        waiter_free(w);
        destroy(s);
        return;
    }
    s->phase = PH_RUNNING;
    ab_strlcpy(s->id, w->id, sizeof(s->id));
    s->metadata = w->metadata;
    w->metadata = NULL;
    ab_strlcpy(s->team, w->team, sizeof(s->team));
    ab_strlcpy(s->owner, w->owner, sizeof(s->owner));
    s->claimed_ms = s->last_active_ms = ab_wall_ms();
    s->end_ms = s->claimed_ms + w->timeout_s * 1000;
    persist(s);
    schedule_end(s);
    fill(s, &snap, false);
    w->cb(w->arg, 0, NULL, &snap);
    waiter_free(w);
}

static void arm_failed(struct lsb *s, const char *msg)
{
    struct waiter *w = s->armer;

    s->armer = NULL;
    LOG_WARN("arming a sandbox failed", "pool", s->pool->name, "error", msg);
    claim_fail(w, AB_EIO, msg);
    destroy(s);
}

static void init_head(struct http_client *c, int status, const struct http_header *h, int n,
                      void *arg)
{
    struct lsb *s = arg;

    (void)c;
    (void)h;
    (void)n;
    s->http_status = status;
}

static void init_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    (void)c;
    (void)d;
    (void)len;
    (void)arg;
}

static void init_end(struct http_client *c, void *arg)
{
    struct lsb *s = arg;
    char msg[RT_ERR_MAX];

    (void)c;
    s->hc = NULL;
    if (s->http_status >= 200 && s->http_status < 300) {
        armed(s);
        return;
    }
    snprintf(msg, sizeof(msg), "sandbox envd answered %d to POST /init", s->http_status);
    arm_failed(s, msg);
}

static void init_error(struct http_client *c, int err, const char *m, void *arg)
{
    struct lsb *s = arg;
    char msg[RT_ERR_MAX];

    (void)c;
    (void)err;
    s->hc = NULL;
    snprintf(msg, sizeof(msg), "sandbox envd did not answer POST /init: %s", m ? m : "error");
    arm_failed(s, msg);
}

static const struct http_client_handler init_handler = {
    .on_head = init_head,
    .on_data = init_data,
    .on_end = init_end,
    .on_error = init_error,
};

static char *init_body(const struct waiter *w, const struct lsb *s)
{
    json_t *b = json_object();
    char ts[40];
    time_t now = (time_t)(ab_wall_ms() / 1000);
    struct tm tm;
    char *out;

    if (!b)
        return NULL;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(b, "envVars", w->env_vars ? json_deep_copy(w->env_vars) : json_object());
    if (w->token)
        json_object_set_new(b, "accessToken", json_string(w->token));
    json_object_set_new(b, "defaultUser", json_string(w->user));
    json_object_set_new(b, "defaultWorkdir", json_string(w->workdir));
    json_object_set_new(b, "timestamp", json_string(ts));
    json_object_set_new(b, "lifecycleID", json_string(w->id));
    (void)s;
    out = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return out;
}

static void post_init(struct lsb *s)
{
    struct http_header h[] = {{"Content-Type", "application/json"}};
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX];
    char *body = init_body(s->armer, s);
    size_t len;

    if (!body || (len = strlen(body)) > INIT_BODY_MAX) {
        free(body);
        arm_failed(s, "the /init body could not be built (too large or out of memory)");
        return;
    }
    snprintf(addr, sizeof(addr), "unix:%s", s->x.socket);
    o.addr = addr;
    o.method = "POST";
    o.target = "/init";
    o.headers = h;
    o.nheaders = 1;
    o.content_length = (int64_t)len;
    o.timeout_ms = 10000;
    s->phase = PH_ARMING;
    s->http_status = 0;
    s->hc = http_client_start(s->rt->loop, &o, &init_handler, s);
    if (!s->hc) {
        explicit_bzero(body, len);
        free(body);
        arm_failed(s, "cannot start the request to the sandbox's envd");
        return;
    }
    http_client_write(s->hc, body, len);
    http_client_end(s->hc);
    explicit_bzero(body, len);
    free(body);
}

static void attach_work(void *arg)
{
    struct lsb *s = arg;

    s->rc = lsbx_attach_internet(&s->x, s->rt->slirp, s->err, sizeof(s->err));
}

static void attach_done(void *arg, int status)
{
    struct lsb *s = arg;

    if (status != 0) {
        s->rc = status;
        ab_strlcpy(s->err, "the runtime is shutting down", sizeof(s->err));
    }
    s->phase = PH_ARMING;
    if (s->doomed || s->rt->closing) {
        if (s->armer)
            claim_fail(s->armer, AB_ECLOSED, "the sandbox was stopped while it was being armed");
        s->armer = NULL;
        destroy(s);
        return;
    }
    if (s->rc != 0) {
        arm_failed(s, s->err);
        return;
    }
    post_init(s);
}

/* Takes the oldest idle sandbox of p for w. */
static void arm(struct lsb *s, struct waiter *w)
{
    s->armer = w;
    if (w->timer_on) {
        loop_timer_cancel(&w->timer);
        w->timer_on = false;
    }
    if (w->internet && !s->pool->disable_egress) {
        s->phase = PH_ATTACHING;
        if (loop_submit(s->rt->loop, attach_work, attach_done, s) != 0) {
            s->phase = PH_ARMING;
            arm_failed(s, "too many sandbox operations are queued; try again");
        }
        return;
    }
    post_init(s);
}

static void serve_waiters(struct lrt *rt, struct lpool *p)
{
    while (p->w_head) {
        struct lsb *s, *best = NULL;
        struct waiter *w;

        for (s = rt->sbxs; s; s = s->next)
            if (s->pool == p && s->phase == PH_IDLE && (!best || s->seq < best->seq))
                best = s;
        if (!best)
            return;
        w = p->w_head;
        waiter_unlink(p, w);
        arm(best, w);
    }
}

static void waiter_timeout(struct loop_timer *t)
{
    struct waiter *w = t->arg;
    char msg[RT_ERR_MAX];

    w->timer_on = false;
    waiter_unlink(w->pool, w);
    snprintf(msg, sizeof(msg),
             "no sandbox of pool '%s' became ready within %lld ms; the pool "
             "may be at its sandbox limit or failing to start sandboxes",
             w->pool->name,
             (long long)(w->pool->startup_ms ? w->pool->startup_ms : DEFAULT_STARTUP_MS));
    claim_fail(w, AB_ETIMEOUT, msg);
    reconcile(w->rt, w->pool);
}

/* ---- starting ------------------------------------------------------------------------ */

static void ready_poll(struct loop_timer *t)
{
    struct lsb *s = t->arg;

    s->timer_on = false;
    if (!lsbx_is_alive(&s->x)) {
        LOG_WARN("sandbox exited while starting", "pool", s->pool->name, "dir", s->x.dir);
        s->pool->retry_after_ms = ab_now_ms() + RETRY_MS;
        destroy(s);
        return;
    }
    if (!lsbx_socket_answers(&s->x)) {
        if (ab_now_ms() > s->deadline_ms) {
            LOG_WARN("sandbox envd did not listen in time", "pool", s->pool->name, "dir", s->x.dir);
            destroy(s);
            return;
        }
        s->timer_on = true;
        loop_timer_start(s->rt->loop, &s->timer, READY_POLL_MS, ready_poll, s);
        return;
    }
    s->phase = PH_IDLE;
    s->seq = ++s->rt->seq;
    persist(s);
    serve_waiters(s->rt, s->pool);
    reconcile(s->rt, s->pool);
}

static void spawn_work(void *arg)
{
    struct lsb *s = arg;
    struct lsbx_options o = {0};
    char dir[LSBX_DIR_MAX];

    snprintf(dir, sizeof(dir), "%s/%s", s->rt->sbx_dir, s->sid);
    o.id = s->sid;
    o.dir = dir;
    o.argv = s->rt->argv;
    o.slirp = s->rt->slirp;
    s->rc = lsbx_spawn(&o, &s->x, s->err, sizeof(s->err));
}

static void retry_timer(struct loop_timer *t)
{
    struct lsb *s = t->arg; /* a placeholder carrying the pool to retry */
    struct lrt *rt = s->rt;
    struct lpool *p = s->pool;

    sbx_unlink_free(s);
    if (!rt->closing)
        reconcile(rt, p);
}

static void spawn_done(void *arg, int status)
{
    struct lsb *s = arg;
    struct lrt *rt = s->rt;

    if (status != 0 || s->rc != 0) {
        if (status == 0)
            LOG_WARN("cannot start a sandbox", "pool", s->pool->name, "error", s->err);
        s->pool->retry_after_ms = ab_now_ms() + RETRY_MS;
        s->phase = PH_REMOVING; /* counts as stopping until the retry fires */
        if (rt->closing || status != 0) {
            sbx_unlink_free(s);
            return;
        }
        s->timer_on = true;
        loop_timer_start(rt->loop, &s->timer, RETRY_MS, retry_timer, s);
        return;
    }
    s->phase = PH_STARTING;
    if (s->doomed || rt->closing) {
        destroy(s);
        return;
    }
    s->deadline_ms = ab_now_ms() + (s->pool->startup_ms ? s->pool->startup_ms : DEFAULT_STARTUP_MS);
    s->timer_on = true;
    loop_timer_start(rt->loop, &s->timer, 0, ready_poll, s);
}

static int spawn_one(struct lrt *rt, struct lpool *p)
{
    struct lsb *s = calloc(1, sizeof(*s));
    uint8_t r[6];
    int i;

    if (!s)
        return AB_ENOMEM;
    if (crypto_random(r, sizeof(r)) != 0) {
        free(s);
        return AB_EIO;
    }
    s->rt = rt;
    s->pool = p;
    s->phase = PH_SPAWNING;
    i = snprintf(s->sid, sizeof(s->sid), "s");
    for (size_t k = 0; k < sizeof(r); k++)
        i += snprintf(s->sid + i, sizeof(s->sid) - (size_t)i, "%02x", r[k]);
    s->next = rt->sbxs;
    rt->sbxs = s;
    if (loop_submit(rt->loop, spawn_work, spawn_done, s) != 0) {
        sbx_unlink_free(s);
        return AB_EBUSY;
    }
    return 0;
}

/* Starts or stops sandboxes so that idle + starting = replicas + waiting
 * claims (bounded by max_sandboxes); a removed pool drains. */
static void reconcile(struct lrt *rt, struct lpool *p)
{
    int idle, starting, want, total;

    if (rt->closing || rt->adopting)
        return;
    idle = count(rt, p, PH_IDLE, PH_IDLE);
    starting = count(rt, p, PH_SPAWNING, PH_STARTING);
    want = p->removed ? 0 : p->replicas + AB_MAX(p->nwaiters - idle, 0);
    total = count(rt, NULL, PH_SPAWNING, PH_REMOVING);
    if (ab_now_ms() >= p->retry_after_ms) {
        while (idle + starting < want && total < rt->max_sandboxes) {
            if (spawn_one(rt, p) != 0)
                break;
            starting++;
            total++;
        }
    }
    /* Too many idle (replicas lowered, pool removed): stop the newest ones. */
    while (idle > want && idle > 0) {
        struct lsb *s, *newest = NULL;
        for (s = rt->sbxs; s; s = s->next)
            if (s->pool == p && s->phase == PH_IDLE && (!newest || s->seq > newest->seq))
                newest = s;
        if (!newest)
            break;
        destroy(newest);
        idle--;
    }
    if (p->removed) {
        while (p->w_head) {
            struct waiter *w = p->w_head;
            waiter_unlink(p, w);
            claim_fail(w, AB_ENOENT, "the pool was removed from the manifests");
        }
        pool_maybe_free(rt, p);
    }
}

/* ---- manifests ------------------------------------------------------------------------ */

static void apply_manifests(struct lrt *rt, struct mf_set *set)
{
    struct mf_pool_view views[256];
    struct lpool *p, *next;
    int n = 0, i;

    mf_set_pools(set, rt->cluster, views, (int)AB_ARRAY_LEN(views), &n);
    if (n > (int)AB_ARRAY_LEN(views)) {
        LOG_WARN("more pools than the local runtime keeps; the rest are ignored", "limit", "256");
        n = (int)AB_ARRAY_LEN(views);
    }
    for (p = rt->pools; p; p = p->next)
        p->seen = false;
    for (i = 0; i < n; i++) {
        const struct mf_pool_view *v = &views[i];
        p = pool_find(rt, v->ns, v->name);
        if (!p) {
            if (!(p = calloc(1, sizeof(*p))))
                continue;
            ab_strlcpy(p->ns, v->ns, sizeof(p->ns));
            ab_strlcpy(p->name, v->name, sizeof(p->name));
            p->next = rt->pools;
            rt->pools = p;
        }
        p->seen = true;
        ab_strlcpy(p->env, v->env, sizeof(p->env));
        ab_strlcpy(p->group, v->scaling_group, sizeof(p->group));
        ab_strlcpy(p->tpl, v->template_name, sizeof(p->tpl));
        p->replicas = v->replicas;
        p->priority = v->member ? v->member->priority : 0;
        p->startup_ms = v->startup_timeout_ms;
        p->idle_ms = v->idle_timeout_ms;
        p->disable_egress = v->disable_egress;
    }
    for (p = rt->pools; p; p = p->next)
        if (!p->seen)
            p->removed = true;
    mf_set_free(rt->set);
    rt->set = set;
    for (p = rt->pools; p; p = next) {
        next = p->next;
        reconcile(rt, p);
    }
}

static int load_manifests(struct lrt *rt, bool force)
{
    struct mf_set *set = NULL;
    char err[512];
    uint64_t sig = 0;
    int i;

    if (mf_dir_signature(rt->manifests, &sig) != 0) {
        if (force)
            LOG_WARN("cannot read the manifest directory", "dir", rt->manifests);
        sig = 0;
    }
    if (!force && sig == rt->sig)
        return 0;
    rt->sig = sig;
    if (mf_load_dir(rt->manifests, &set, err, sizeof(err)) != 0) {
        LOG_WARN("manifests not loaded", "error", err);
        if (!(set = mf_set_new()))
            return AB_ENOMEM;
    }
    for (i = 0; i < set->nerrs; i++)
        LOG_WARN("manifest refused", "error", set->errs[i].text);
    apply_manifests(rt, set);
    return 0;
}

void lrt_reload(struct rt *base)
{
    load_manifests((struct lrt *)base, false);
}

const struct mf_set *lrt_manifests(struct rt *base)
{
    return ((struct lrt *)base)->set;
}

static void tick(struct loop_timer *t)
{
    struct lrt *rt = t->arg;
    struct lpool *p, *next;
    struct lsb *s, *sn;

    load_manifests(rt, false);
    /* A sandbox whose init died (OOM, killed by hand) is replaced. */
    for (s = rt->sbxs; s; s = sn) {
        sn = s->next;
        if ((s->phase == PH_IDLE || s->phase == PH_RUNNING) && !lsbx_is_alive(&s->x)) {
            LOG_WARN("sandbox died", "dir", s->x.dir);
            destroy(s);
        }
    }
    for (p = rt->pools; p; p = next) {
        next = p->next;
        reconcile(rt, p);
    }
    loop_timer_start(rt->loop, &rt->tick, rt->reload_ms, tick, rt);
}

/* ---- re-adoption ------------------------------------------------------------------------- */

static void adopt_or_reap(struct lrt *rt, const char *dir, const char *name)
{
    struct lsbx x;
    struct lpool *p = NULL;
    struct lsb *s;
    const char *phase, *ns, *pool;

    if (lsbx_state_read(dir, &x) != 0) {
        struct stat st;
        char path[LSBX_DIR_MAX + 16];
        snprintf(path, sizeof(path), "%s/state.json", dir);
        /* A crash between mkdir and state.json: nothing ran yet. */
        if (stat(path, &st) != 0) {
            struct lsbx empty = {0};
            ab_strlcpy(empty.dir, dir, sizeof(empty.dir));
            lsbx_remove_dir(&empty);
        }
        return;
    }
    ns = json_string_value(json_object_get(x.info, "ns"));
    pool = json_string_value(json_object_get(x.info, "pool"));
    phase = json_string_value(json_object_get(x.info, "phase"));
    if (ns && pool)
        p = pool_find(rt, ns, pool);
    if (!p || !phase || !lsbx_is_alive(&x) || !lsbx_socket_answers(&x) || strcmp(x.id, name) != 0) {
        LOG_INFO("reaping a sandbox left by an earlier agent", "dir", dir);
        if (lsbx_destroy(&x, 2000) != 0)
            LOG_WARN("a sandbox of an earlier agent survived SIGKILL", "dir", dir);
        lsbx_release(&x);
        return;
    }
    if (!(s = calloc(1, sizeof(*s)))) {
        lsbx_release(&x);
        return;
    }
    s->rt = rt;
    s->pool = p;
    s->x = x;
    ab_strlcpy(s->sid, x.id, sizeof(s->sid));
    s->next = rt->sbxs;
    rt->sbxs = s;
    if (!strcmp(phase, "running")) {
        const char *id = json_string_value(json_object_get(x.info, "id"));
        json_t *md = json_object_get(x.info, "metadata");
        s->phase = PH_RUNNING;
        ab_strlcpy(s->id, id ? id : x.id, sizeof(s->id));
        ab_strlcpy(s->team, json_string_value(json_object_get(x.info, "team")) ?: "",
                   sizeof(s->team));
        ab_strlcpy(s->owner, json_string_value(json_object_get(x.info, "owner")) ?: "",
                   sizeof(s->owner));
        s->claimed_ms = json_integer_value(json_object_get(x.info, "claimed_ms"));
        s->end_ms = json_integer_value(json_object_get(x.info, "end_ms"));
        s->last_active_ms = ab_wall_ms();
        s->metadata = json_is_object(md) ? json_incref(md) : NULL;
        schedule_end(s);
    } else {
        s->phase = PH_IDLE;
        s->seq = ++rt->seq;
    }
    LOG_INFO("re-adopted a sandbox", "dir", dir, "phase", phase);
}

static void adopt_all(struct lrt *rt)
{
    DIR *d = opendir(rt->sbx_dir);
    struct dirent *de;
    char dir[LSBX_DIR_MAX];

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (snprintf(dir, sizeof(dir), "%s/%s", rt->sbx_dir, de->d_name) >= (int)sizeof(dir))
            continue;
        adopt_or_reap(rt, dir, de->d_name);
    }
    closedir(d);
}

/* ---- the rt ops --------------------------------------------------------------------------- */

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

/* The env's member on this cluster for group (or the best one). */
static struct lpool *pick_member(struct lrt *rt, const char *ns, const char *env, const char *group,
                                 bool *env_exists, char *err, size_t errlen)
{
    struct lpool *p, *best = NULL;
    int best_idle = -1;

    *env_exists = mf_set_find(rt->set, MF_ENV, ns, env) != NULL;
    if (!*env_exists)
        return NULL;
    for (p = rt->pools; p; p = p->next) {
        int idle;
        if (p->removed || strcmp(p->ns, ns) || strcmp(p->env, env))
            continue;
        if (group && group[0] && strcmp(p->group, group) != 0)
            continue;
        idle = count(rt, p, PH_IDLE, PH_IDLE);
        if (!best || idle > best_idle || (idle == best_idle && p->priority < best->priority) ||
            (idle == best_idle && p->priority == best->priority &&
             strcmp(p->name, best->name) < 0)) {
            best = p;
            best_idle = idle;
        }
    }
    if (!best) {
        if (group && group[0])
            snprintf(err, errlen, "env '%s' has no member in scaling group '%s' on cluster '%s'",
                     env, group, rt->cluster);
        else
            snprintf(err, errlen, "env '%s' has no member pools on cluster '%s'", env, rt->cluster);
    }
    return best;
}

static int op_claim(struct rt *base, const char *ns, const char *name, enum rt_target target,
                    const char *group, const struct rt_claim_options *o, rt_claim_cb cb, void *arg,
                    uint64_t *ticket, char *err, size_t errlen)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p = NULL;
    struct waiter *w;
    struct lsb *s;
    bool env_exists = false;
    int64_t startup;
    int rc;

    if (rt->closing) {
        snprintf(err, errlen, "the local runtime is shutting down");
        return AB_ECLOSED;
    }
    if (!o || !o->id || !id_ok(o->id)) {
        snprintf(err, errlen, "sandbox id must be 1-%d characters of [A-Za-z0-9._-]", RT_ID_MAX);
        return AB_EINVAL;
    }
    if (o->timeout_s < 0 || o->timeout_s > 366LL * 24 * 3600) {
        snprintf(err, errlen, "timeout must be a positive number of seconds (at most a year)");
        return AB_EINVAL;
    }
    if ((rc = check_strings(o->env_vars, "envVars", err, errlen)) != 0 ||
        (rc = check_strings(o->metadata, "metadata", err, errlen)) != 0)
        return rc;
    if (o->access_token && (strlen(o->access_token) > 512 || strchr(o->access_token, '\\'))) {
        snprintf(err, errlen, "access token must be at most 512 characters without '\\'");
        return AB_EINVAL;
    }
    for (s = rt->sbxs; s; s = s->next) {
        if (!strcmp(s->id, o->id)) {
            snprintf(err, errlen, "sandbox id '%s' is already in use", o->id);
            return AB_EEXIST;
        }
    }
    if (target != RT_TARGET_POOL)
        p = pick_member(rt, ns, name, group, &env_exists, err, errlen);
    if (!p && !env_exists && target != RT_TARGET_ENV)
        p = pool_find(rt, ns, name);
    if (!p) {
        if (!env_exists)
            snprintf(err, errlen, "%s '%s' not found in namespace '%s'",
                     target == RT_TARGET_ENV    ? "env"
                     : target == RT_TARGET_POOL ? "pool"
                                                : "env or pool",
                     name, ns);
        return AB_ENOENT;
    }
    if (p->nwaiters >= rt->waiters_max) {
        snprintf(err, errlen,
                 "pool '%s' already has %d claims waiting for a sandbox; try again "
                 "later",
                 p->name, rt->waiters_max);
        return AB_EBUSY;
    }
    if (!(w = calloc(1, sizeof(*w))))
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
    w->internet = o->allow_internet;
    ab_strlcpy(w->user, o->user && o->user[0] ? o->user : "user", sizeof(w->user));
    ab_strlcpy(w->workdir, o->workdir && o->workdir[0] ? o->workdir : LSBX_HOME,
               sizeof(w->workdir));
    ab_strlcpy(w->team, o->team ? o->team : "", sizeof(w->team));
    ab_strlcpy(w->owner, o->owner ? o->owner : "", sizeof(w->owner));
    if (o->access_token && !(w->token = strdup(o->access_token))) {
        waiter_free(w);
        return AB_ENOMEM;
    }
    if (p->w_tail)
        p->w_tail->next = w;
    else
        p->w_head = w;
    p->w_tail = w;
    p->nwaiters++;
    startup = o->startup_timeout_ms ? o->startup_timeout_ms
              : p->startup_ms       ? p->startup_ms
                                    : DEFAULT_STARTUP_MS;
    w->timer_on = true;
    loop_timer_start(rt->loop, &w->timer, startup, waiter_timeout, w);
    if (ticket)
        *ticket = w->ticket;
    serve_waiters(rt, p);
    if (p->nwaiters > 0 || count(rt, p, PH_IDLE, PH_IDLE) == 0)
        reconcile(rt, p);
    else
        refill_later(rt);
    return 0;
}

static void refill_fire(struct loop_timer *t)
{
    struct lrt *rt = t->arg;

    rt->refill_on = false;
    for (struct lpool *p = rt->pools; p; p = p->next)
        reconcile(rt, p);
}

/* Replacements for claims served from idle start once claims pause. */
static void refill_later(struct lrt *rt)
{
    int64_t now = ab_now_ms(), delay = REFILL_QUIET_MS;

    if (rt->refill_on) {
        if (now - rt->refill_first_ms + REFILL_QUIET_MS > REFILL_DEFER_MAX_MS)
            return; /* the pending one fires by the bound */
        loop_timer_cancel(&rt->refill);
    } else {
        rt->refill_first_ms = now;
    }
    if (now + delay > rt->refill_first_ms + REFILL_DEFER_MAX_MS)
        delay = AB_MAX(rt->refill_first_ms + REFILL_DEFER_MAX_MS - now, 0);
    rt->refill_on = true;
    loop_timer_start(rt->loop, &rt->refill, delay, refill_fire, rt);
}

static void op_claim_cancel(struct rt *base, uint64_t ticket)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p;
    struct waiter *w;
    struct lsb *s;

    for (p = rt->pools; p; p = p->next) {
        for (w = p->w_head; w; w = w->next) {
            if (w->ticket == ticket) {
                waiter_unlink(p, w);
                waiter_free(w);
                reconcile(rt, p);
                return;
            }
        }
    }
    for (s = rt->sbxs; s; s = s->next)
        if (s->armer && s->armer->ticket == ticket)
            s->armer->cancelled = true; /* released once arming ends */
}

static int op_release(struct rt *base, const char *id)
{
    struct lsb *s = sbx_find((struct lrt *)base, id);

    if (!s)
        return AB_ENOENT;
    LOG_INFO("sandbox released", "id", id, "pool", s->pool->name);
    destroy(s);
    return 0;
}

static int op_set_timeout(struct rt *base, const char *id, int64_t timeout_s)
{
    struct lsb *s = sbx_find((struct lrt *)base, id);

    if (!s)
        return AB_ENOENT;
    if (timeout_s < 0 || timeout_s > 366LL * 24 * 3600)
        return AB_EINVAL;
    s->end_ms = ab_wall_ms() + timeout_s * 1000;
    persist(s);
    schedule_end(s);
    return 0;
}

static void op_touch(struct rt *base, const char *id)
{
    struct lsb *s = sbx_find((struct lrt *)base, id);

    if (s)
        s->last_active_ms = ab_wall_ms();
}

static int op_get(struct rt *base, const char *id, struct rt_sandbox *out)
{
    struct lsb *s = sbx_find((struct lrt *)base, id);

    if (!s)
        return AB_ENOENT;
    fill(s, out, true);
    return 0;
}

static void op_list(struct rt *base, const struct rt_filter *f, rt_sandbox_fn fn, void *arg)
{
    struct lrt *rt = (struct lrt *)base;
    struct lsb *s;

    for (s = rt->sbxs; s; s = s->next) {
        struct rt_sandbox snap;
        if (s->phase != PH_RUNNING && !(f && f->include_idle))
            continue;
        if (f && f->ns && strcmp(f->ns, s->pool->ns) != 0)
            continue;
        if (f && f->team && strcmp(f->team, s->team) != 0)
            continue;
        if (f && f->env_or_pool && strcmp(f->env_or_pool, s->pool->env) != 0 &&
            strcmp(f->env_or_pool, s->pool->name) != 0)
            continue;
        fill(s, &snap, false);
        fn(arg, &snap);
    }
}

static void status_of(struct lrt *rt, struct lpool *p, struct rt_pool_status *o)
{
    o->replicas = p->removed ? 0 : p->replicas;
    o->idle = count(rt, p, PH_IDLE, PH_IDLE);
    o->running = count(rt, p, PH_ATTACHING, PH_RUNNING);
    o->starting = count(rt, p, PH_SPAWNING, PH_STARTING);
    o->stopping = count(rt, p, PH_STOPPING, PH_REMOVING);
    o->pending = p->nwaiters;
}

static int op_pool_status(struct rt *base, const char *ns, const char *pool,
                          struct rt_pool_status *o)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p = pool_find(rt, ns, pool);

    if (!p)
        return AB_ENOENT;
    status_of(rt, p, o);
    return 0;
}

static void op_list_pools(struct rt *base, const char *ns, rt_pool_fn fn, void *arg)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p;

    for (p = rt->pools; p; p = p->next) {
        struct rt_pool info;
        if (p->removed || (ns && strcmp(ns, p->ns) != 0))
            continue;
        memset(&info, 0, sizeof(info));
        ab_strlcpy(info.ns, p->ns, sizeof(info.ns));
        ab_strlcpy(info.name, p->name, sizeof(info.name));
        ab_strlcpy(info.env, p->env, sizeof(info.env));
        ab_strlcpy(info.scaling_group, p->group, sizeof(info.scaling_group));
        ab_strlcpy(info.template_name, p->tpl, sizeof(info.template_name));
        status_of(rt, p, &info.status);
        fn(arg, &info);
    }
}

static void op_list_envs(struct rt *base, const char *ns, rt_env_fn fn, void *arg)
{
    struct lrt *rt = (struct lrt *)base;
    int i;

    for (i = 0; rt->set && i < rt->set->nobjs; i++) {
        const struct mf_object *o = rt->set->objs[i];
        struct rt_env e;
        struct lpool *p;
        if (o->kind != MF_ENV || (ns && strcmp(ns, o->ns) != 0))
            continue;
        memset(&e, 0, sizeof(e));
        ab_strlcpy(e.ns, o->ns, sizeof(e.ns));
        ab_strlcpy(e.name, o->name, sizeof(e.name));
        ab_strlcpy(e.template_name, o->u.env.template_ref, sizeof(e.template_name));
        for (p = rt->pools; p; p = p->next) {
            if (p->removed || strcmp(p->ns, o->ns) || strcmp(p->env, o->name))
                continue;
            e.npools++;
            e.idle += count(rt, p, PH_IDLE, PH_IDLE);
            e.running += count(rt, p, PH_ATTACHING, PH_RUNNING);
        }
        fn(arg, &e);
    }
}

/* Shutdown: sandboxes keep running for the next agent; in-flight claims fail.
 * Sandboxes still in a worker's hands are left to the worker's done callback,
 * which the loop runs with AB_ECLOSED before loop_free returns. */
static void op_free(struct rt *base)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p;
    struct lsb *s, *sn;

    rt->closing = true;
    loop_timer_cancel(&rt->tick);
    if (rt->refill_on)
        loop_timer_cancel(&rt->refill);
    rt->refill_on = false;
    for (p = rt->pools; p; p = p->next) {
        while (p->w_head) {
            struct waiter *w = p->w_head;
            waiter_unlink(p, w);
            claim_fail(w, AB_ECLOSED, "the local runtime is shutting down");
        }
    }
    for (s = rt->sbxs; s; s = sn) {
        sn = s->next;
        if (s->armer) {
            claim_fail(s->armer, AB_ECLOSED, "the local runtime is shutting down");
            s->armer = NULL;
        }
        if (s->hc) {
            http_client_close(s->hc);
            s->hc = NULL;
        }
        if (s->phase == PH_SPAWNING || s->phase == PH_ATTACHING || s->phase == PH_REMOVING) {
            s->doomed = true;
            continue; /* freed by the worker's done callback */
        }
        sbx_unlink_free(s);
    }
    /* Leftovers owned by workers keep pointers to rt and pools: leak those few
     * bytes deliberately rather than free under a running worker. */
    if (rt->sbxs)
        return;
    while (rt->pools) {
        p = rt->pools;
        rt->pools = p->next;
        free(p);
    }
    mf_set_free(rt->set);
    free(rt->slirp);
    free(rt);
}

static const struct rt_ops lrt_ops = {
    .claim = op_claim,
    .claim_cancel = op_claim_cancel,
    .release = op_release,
    .set_timeout = op_set_timeout,
    .touch = op_touch,
    .get = op_get,
    .list = op_list,
    .list_pools = op_list_pools,
    .list_envs = op_list_envs,
    .pool_status = op_pool_status,
    .free = op_free,
};

int lrt_new(const struct lrt_options *o, struct rt **out, char *err, size_t errlen)
{
    struct lrt *rt;
    int i, n = 0;

    *out = NULL;
    if (!o->loop || !o->cluster_id || !o->state_dir || !o->manifests_dir || !o->envd_path ||
        o->envd_path[0] != '/') {
        snprintf(err, errlen,
                 "the local runtime needs a loop, cluster_id, state_dir, "
                 "manifests_dir and an absolute envd_path");
        return AB_EINVAL;
    }
    if (!(rt = calloc(1, sizeof(*rt))))
        return AB_ENOMEM;
    rt->base.ops = &lrt_ops;
    rt->base.kind = "local";
    rt->base.caps = 0; /* no image override; network changes only at create */
    rt->loop = o->loop;
    rt->reload_ms = o->reload_ms > 0 ? o->reload_ms : 2000;
    rt->max_sandboxes = o->max_sandboxes > 0 ? o->max_sandboxes : 256;
    rt->waiters_max = o->waiters_max > 0 ? o->waiters_max : 1024;
    ab_strlcpy(rt->cluster, o->cluster_id, sizeof(rt->cluster));
    ab_strlcpy(rt->manifests, o->manifests_dir, sizeof(rt->manifests));
    ab_strlcpy(rt->envd, o->envd_path, sizeof(rt->envd));
    if (o->slirp && !(rt->slirp = strdup(o->slirp)))
        goto nomem;
    if (ab_strlcpy(rt->state_dir, o->state_dir, sizeof(rt->state_dir)) >= sizeof(rt->state_dir) ||
        snprintf(rt->sbx_dir, sizeof(rt->sbx_dir), "%s/sandboxes", o->state_dir) >=
            (int)sizeof(rt->sbx_dir) - 20) {
        snprintf(err, errlen,
                 "state_dir %s is too long for sandbox socket paths; use a path "
                 "of at most 60 characters",
                 o->state_dir);
        goto fail;
    }
    if ((mkdir(rt->state_dir, 0700) != 0 && errno != EEXIST) ||
        (mkdir(rt->sbx_dir, 0700) != 0 && errno != EEXIST)) {
        snprintf(err, errlen, "cannot create %s: %s", rt->sbx_dir, strerror(errno));
        goto fail;
    }
    rt->argv[n++] = rt->envd;
    rt->argv[n++] = "--listen";
    rt->argv[n++] = "unix:" LSBX_INNER_SOCKET;
    for (i = 0; o->envd_args && o->envd_args[i]; i++) {
        if (n == LSBX_ARGV_MAX) {
            snprintf(err, errlen, "envd has more than %d arguments", LSBX_ARGV_MAX - 3);
            goto fail;
        }
        rt->argv[n++] = o->envd_args[i];
    }
    rt->argv[n] = NULL;
    rt->adopting = true;
    load_manifests(rt, true);
    adopt_all(rt);
    rt->adopting = false;
    {
        struct lpool *p, *next;
        for (p = rt->pools; p; p = next) {
            next = p->next;
            reconcile(rt, p);
        }
    }
    loop_timer_start(rt->loop, &rt->tick, rt->reload_ms, tick, rt);
    *out = &rt->base;
    return 0;
nomem:
    snprintf(err, errlen, "out of memory");
fail:
    free(rt->slirp);
    free(rt);
    return AB_EIO;
}
