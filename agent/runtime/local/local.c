/* The local runtime's rt_ops (runtime.h): claims (FIFO, bounded waiters),
 * release, timeouts, lookups and listings, lrt_new and shutdown. Pools and
 * sandboxes are kept by pool.c, armed by arm.c, adopted by adopt.c.
 *
 * Loop thread only. */
#include "agent/runtime/local/lrt.h"

#include "agent/egress/netns.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/trace.h"
#include "agent/runtime/local/manifest.h"
#include "agent/runtime/local/sandbox.h"
#include "agent/runtime/local/seccomp.h"
#include "agent/runtime/local/zygote.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

/* ---- the rt ops --------------------------------------------------------------------------- */

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
        idle = lrt_count(rt, p, PH_IDLE, PH_IDLE);
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

/* The sandbox directories on a tmpfs of their own. A spawn makes a dozen
 * inodes there (directories, links, the state record, envd's socket) and a
 * removal frees them: on ext4 its inode allocator (find_inode_bit →
 * recently_deleted) was ~7 % of all CPU under create churn. Nothing there
 * outlives the host's sandboxes (a reboot ends them all) and nothing a
 * sandbox writes lands there (its log is on its own writable space,
 * sandbox.h), so memory is the right place; the size caps what the agent's
 * own records could take. Mounted when the directory is empty; a
 * predecessor's tmpfs is kept; a directory holding an older agent's
 * sandboxes elsewhere stays as it is (they are adopted; a warning says why
 * spawns cost more). */
static bool sbx_dir_tmpfs(const char *dir)
{
    struct statfs sf;
    struct dirent *de;
    DIR *d;

    if (statfs(dir, &sf) == 0 && sf.f_type == TMPFS_MAGIC)
        return true;
    if (!(d = opendir(dir)))
        return false;
    while ((de = readdir(d)) && (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")))
        ;
    closedir(d);
    if (de) {
        LOG_WARN("sandbox directory is not a tmpfs and holds sandboxes of an earlier agent: "
                 "kept as it is (spawns make disk inodes); empty it while none runs to have "
                 "the tmpfs",
                 "dir", dir);
        return false;
    }
    if (mount("agentbox-sandboxes", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "mode=0700,size=10%") != 0) {
        LOG_WARN("cannot mount a tmpfs on the sandbox directory: spawns make disk inodes", "dir",
                 dir, "error", strerror(errno));
        return false;
    }
    LOG_INFO("sandbox directory is a tmpfs of its own", "dir", dir);
    return true;
}

static int op_claim(struct rt *base, const char *ns, const char *name, enum rt_target target,
                    const char *group, const struct rt_claim_options *o, rt_claim_cb cb, void *arg,
                    uint64_t *ticket, char *err, size_t errlen)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p = NULL;
    struct lrt_waiter *w;
    struct lsb *s;
    bool env_exists = false;
    int64_t startup;
    int rc;

    if (rt->closing) {
        snprintf(err, errlen, "the local runtime is shutting down");
        return AB_ECLOSED;
    }
    if ((rc = rt_claim_options_check(o, err, errlen)) != 0)
        return rc;
    for (s = rt->sbxs; s; s = s->next) {
        if (!strcmp(s->id, o->id)) {
            snprintf(err, errlen, "sandbox id '%s' is already in use", o->id);
            return AB_EEXIST;
        }
    }
    if (target != RT_TARGET_POOL)
        p = pick_member(rt, ns, name, group, &env_exists, err, errlen);
    if (!p && !env_exists && target != RT_TARGET_ENV)
        p = lrt_pool_find(rt, ns, name);
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
    w->timeout_is_idle = o->timeout_is_idle;
    w->env_vars = o->env_vars ? json_deep_copy(o->env_vars) : NULL;
    w->metadata = o->metadata ? json_deep_copy(o->metadata) : NULL;
    w->internet = o->allow_internet;
    w->allow_private = o->allow_private_networks;
    if (o->network && !json_is_null(o->network) && !(w->network = json_deep_copy(o->network))) {
        lrt_waiter_free(w);
        return AB_ENOMEM;
    }
    ab_strlcpy(w->user, o->user && o->user[0] ? o->user : "user", sizeof(w->user));
    ab_strlcpy(w->workdir, o->workdir && o->workdir[0] ? o->workdir : LSBX_HOME,
               sizeof(w->workdir));
    ab_strlcpy(w->team, o->team ? o->team : "", sizeof(w->team));
    ab_strlcpy(w->owner, o->owner ? o->owner : "", sizeof(w->owner));
    /* a longer id is malformed for ab_trace too: cut, it logs nothing */
    if (o->trace && strlen(o->trace) < sizeof(w->trace))
        ab_strlcpy(w->trace, o->trace, sizeof(w->trace));
    ab_trace(w->trace, "claim.queued");
    if (o->access_token && !(w->token = strdup(o->access_token))) {
        lrt_waiter_free(w);
        return AB_ENOMEM;
    }
    p->last_create_ms = ab_now_ms(); /* the autoscaler's last-create tracking */
    p->claims++;
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
    w->startup_ms = startup;
    loop_timer_start(rt->loop, &w->timer, startup, lrt_waiter_timeout, w);
    if (ticket)
        *ticket = w->ticket;
    lrt_serve_waiters(rt, p);
    if (p->nwaiters > 0 || lrt_count(rt, p, PH_IDLE, PH_IDLE) == 0)
        lrt_reconcile(rt, p);
    else
        lrt_refill_later(rt);
    return 0;
}

static void op_claim_cancel(struct rt *base, uint64_t ticket)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p;
    struct lrt_waiter *w;
    struct lsb *s;

    for (p = rt->pools; p; p = p->next) {
        for (w = p->w_head; w; w = w->next) {
            if (w->ticket == ticket) {
                lrt_waiter_unlink(p, w);
                lrt_waiter_free(w);
                lrt_reconcile(rt, p);
                return;
            }
        }
    }
    for (s = rt->sbxs; s; s = s->next)
        if (s->armer && s->armer->ticket == ticket)
            s->armer->cancelled = true; /* released once arming ends */
}

/* A claim not answered yet (a no-wait create answers before): waiting for a
 * sandbox of its pool (*w), or its sandbox being armed (*armed). */
static bool pending_find(struct lrt *rt, const char *id, struct lrt_waiter **w, struct lsb **armed)
{
    *w = NULL;
    *armed = NULL;
    for (struct lpool *p = rt->pools; p; p = p->next)
        for (struct lrt_waiter *x = p->w_head; x; x = x->next)
            if (!strcmp(x->id, id)) {
                *w = x;
                return true;
            }
    for (struct lsb *s = rt->sbxs; s; s = s->next)
        if (s->armer && !s->armer->cancelled && !s->armer->killed && !strcmp(s->armer->id, id)) {
            *armed = s;
            return true;
        }
    return false;
}

/* Releasing a pending claim: a waiting one ends now (its callback hears it
 * was killed), an arming one once arming ends (lrt_claim_written); nothing
 * of it runs afterwards. Returns the arming sandbox, or NULL. */
static struct lsb *pending_release(struct lrt *rt, struct lrt_waiter *w, struct lsb *armed)
{
    if (w) {
        struct lpool *p = w->pool;
        LOG_INFO("claim released before it started", "id", w->id, "pool", p->name);
        lrt_waiter_unlink(p, w);
        lrt_claim_fail(w, AB_ECLOSED, "the sandbox was killed before it started");
        lrt_reconcile(rt, p);
        return NULL;
    }
    LOG_INFO("claim released while being armed", "id", armed->armer->id, "pool", armed->pool->name);
    armed->armer->killed = true;
    return armed;
}

/* Releases id, running or still pending; cb (may be NULL) hears when its
 * processes are gone. */
static int release(struct lrt *rt, const char *id, int64_t timeout_ms, rt_release_cb cb, void *arg)
{
    struct lsb *s = lrt_sbx_find(rt, id), *armed;
    struct lrt_waiter *w;
    bool running = s != NULL;

    if (!running) {
        if (!pending_find(rt, id, &w, &armed))
            return AB_ENOENT;
        if (!(s = pending_release(rt, w, armed))) {
            if (cb)
                cb(arg, 0, NULL); /* no process was ever started for it */
            return 0;
        }
        /* the arming sandbox is destroyed once arming ends */
    }
    if (cb) { /* gone_poll tells cb */
        s->rel_cb = cb;
        s->rel_arg = arg;
        s->rel_deadline_ms = ab_now_ms() + (timeout_ms > 0 ? timeout_ms : RT_RELEASE_WAIT_MS);
    }
    if (running) {
        LOG_INFO("sandbox released", "id", id, "pool", s->pool->name);
        lrt_destroy(s); /* a running sandbox goes to PH_STOPPING now */
    }
    return 0;
}

static int op_release(struct rt *base, const char *id)
{
    return release((struct lrt *)base, id, 0, NULL, NULL);
}

static int op_release_wait(struct rt *base, const char *id, int64_t timeout_ms, rt_release_cb cb,
                           void *arg)
{
    return release((struct lrt *)base, id, timeout_ms, cb, arg);
}

static int op_set_timeout(struct rt *base, const char *id, int64_t timeout_s)
{
    struct lsb *s = lrt_sbx_find((struct lrt *)base, id);

    if (!s)
        return AB_ENOENT;
    if (timeout_s < 0 || timeout_s > 366LL * 24 * 3600)
        return AB_EINVAL;
    if (s->life_end_ms > 0) {
        s->life_end_ms = ab_wall_ms() + timeout_s * 1000;
    } else {
        /* the new idle timeout, counted from now (the call is activity) */
        s->idle_ms = timeout_s * 1000;
        s->last_active_ms = ab_wall_ms();
    }
    lrt_update_end(s);
    lrt_persist(s);
    lrt_schedule_end(s);
    return 0;
}

static void op_touch(struct rt *base, const char *id)
{
    struct lsb *s = lrt_sbx_find((struct lrt *)base, id);

    /* the end timer notices the move when it fires */
    if (s && s->phase == PH_RUNNING) {
        s->last_active_ms = ab_wall_ms();
        lrt_update_end(s);
    }
}

/* PUT /sandboxes/{id}/network: the new policy is parsed before anything
 * changes, so a refused update leaves the old one in force. */
static int op_set_network(struct rt *base, const char *id, const json_t *network, bool internet,
                          char *err, size_t errlen)
{
    struct lsb *s = lrt_sbx_find((struct lrt *)base, id);
    json_t *old, *copy = NULL;
    bool old_inet;
    int rc;

    if (!s)
        return AB_ENOENT;
    if (network && !json_is_null(network) && !(copy = json_deep_copy(network)))
        return AB_ENOMEM;
    old = s->network;
    old_inet = s->x.internet;
    s->network = copy;
    s->x.internet = internet && !s->pool->disable_egress;
    if ((rc = lrt_egress_apply(s, err, errlen)) != 0) {
        json_decref(copy);
        s->network = old;
        s->x.internet = old_inet;
        return rc;
    }
    json_decref(old);
    LOG_INFO("sandbox egress policy updated", "id", id, "internet", s->x.internet ? "on" : "off");
    lrt_persist(s);
    return 0;
}

static int op_get(struct rt *base, const char *id, struct rt_sandbox *out)
{
    struct lrt *rt = (struct lrt *)base;
    struct lsb *s = lrt_sbx_find(rt, id), *armed;
    struct lrt_waiter *w;

    if (s) {
        lrt_fill(s, out, true);
        return 0;
    }
    if (!pending_find(rt, id, &w, &armed))
        return AB_ENOENT;
    if (armed) {
        lrt_fill(armed, out, true); /* RT_STARTING, its owner's */
        return 0;
    }
    struct lpool *p = w->pool;
    rt_fill_pending(out, id, p->ns, p->env, p->name, p->group, w->team, w->owner, w->metadata);
    return 0;
}

static void op_list(struct rt *base, const struct rt_filter *f, rt_sandbox_fn fn, void *arg)
{
    struct lrt *rt = (struct lrt *)base;
    struct lsb *s;

    for (s = rt->sbxs; s; s = s->next) {
        struct rt_sandbox snap;
        if (!rt_filter_admits(f, s->phase == PH_RUNNING, s->pool->ns, s->team, s->pool->env,
                              s->pool->name))
            continue;
        lrt_fill(s, &snap, false);
        fn(arg, &snap);
    }
}

static void status_of(struct lrt *rt, struct lpool *p, struct rt_pool_status *o)
{
    o->replicas = p->removed ? 0 : lrt_pool_replicas(p);
    o->idle = lrt_count(rt, p, PH_IDLE, PH_IDLE);
    o->running = lrt_count(rt, p, PH_ATTACHING, PH_RUNNING);
    o->starting = lrt_count(rt, p, PH_SPAWNING, PH_STARTING);
    o->stopping = lrt_count(rt, p, PH_STOPPING, PH_REMOVING);
    o->pending = p->nwaiters;
    ab_strlcpy(o->update_revision, p->rev, sizeof(o->update_revision));
    o->updated = lrt_roll_updated(rt, p);
}

static int op_pool_status(struct rt *base, const char *ns, const char *pool,
                          struct rt_pool_status *o)
{
    struct lrt *rt = (struct lrt *)base;
    struct lpool *p = lrt_pool_find(rt, ns, pool);

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
        lrt_scale_fill_pool(rt, p, &info);
        info.claims = p->claims;
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
            e.idle += lrt_count(rt, p, PH_IDLE, PH_IDLE);
            e.running += lrt_count(rt, p, PH_ATTACHING, PH_RUNNING);
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
    lrt_writes_close(rt);
    loop_timer_cancel(&rt->tick);
    if (rt->refill_on)
        loop_timer_cancel(&rt->refill);
    rt->refill_on = false;
    for (p = rt->pools; p; p = p->next) {
        while (p->w_head) {
            struct lrt_waiter *w = p->w_head;
            lrt_waiter_unlink(p, w);
            lrt_claim_fail(w, AB_ECLOSED, "the local runtime is shutting down");
        }
    }
    for (s = rt->sbxs; s; s = sn) {
        sn = s->next;
        if (s->armer) {
            lrt_claim_fail(s->armer, AB_ECLOSED, "the local runtime is shutting down");
            s->armer = NULL;
        }
        if (s->hc) {
            http_client_close(s->hc);
            s->hc = NULL;
        }
        /* a removal still waiting for a worker is left to the next agent */
        /* (a failed spawn's placeholder, PH_REMOVING on a retry timer, is
         * no worker's: it goes here) */
        if (s->phase == PH_SPAWNING || s->phase == PH_ATTACHING || s->rm_busy || s->w_busy) {
            s->doomed = true;
            continue; /* freed by the worker's done callback */
        }
        lrt_sbx_unlink_free(s);
    }
    /* Leftovers owned by workers keep pointers to rt and pools: the last one
     * to come back (its done callback, before loop_free returns) frees them. */
    rt->free_pending = true;
    lrt_free_if_done(rt);
}

void lrt_free_if_done(struct lrt *rt)
{
    struct lpool *p;

    if (!rt->free_pending || rt->sbxs || rt->writes)
        return;
    while (rt->pools) {
        p = rt->pools;
        rt->pools = p->next;
        free(p);
    }
    mf_set_free(rt->set);
    lzy_free(rt->zygote);
    free(rt);
}

static const struct rt_ops lrt_ops = {
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
    .usage_probe = lrt_usage_probe,
    .usage_read = lrt_usage_read,
    .log_probe = lrt_log_probe,
    .log_read = lrt_log_read,
    .set_network = op_set_network,
    .objects = lrt_objects,
    .object_write = lrt_object_write,
    .scale_groups = lrt_scale_groups,
    .scale_set = lrt_scale_set,
    .event_record = lrt_event_record,
    .events_load = lrt_events_load,
};

/* A veth slot is a host uid slice: held while its sandbox is known. */
static bool slot_held(void *arg, uint32_t slot)
{
    const struct lrt *rt = arg;
    return slot < (uint32_t)rt->uid_slots && (rt->uid_used[slot / 8] & (1u << (slot % 8)));
}

/* The envd zygote (zygote.h): one exec of envd for every sandbox to come.
 * Without it (an --envd that is not ours, or one that cannot start) each
 * spawn execs envd, as before: slower, not weaker. */
static void start_zygote(struct lrt *rt)
{
    const struct sock_fprog *filter;
    char why[512], pid[16];

    if (lsec_program(&filter, why, sizeof(why)) != 0 ||
        lzy_start(rt->envd, filter, &rt->zygote, why, sizeof(why)) != 0) {
        LOG_WARN("envd zygote not started: envd is exec'd for every sandbox", "envd", rt->envd,
                 "error", why);
        return;
    }
    snprintf(pid, sizeof(pid), "%d", (int)lzy_pid(rt->zygote));
    LOG_INFO("envd zygote started", "envd", rt->envd, "pid", pid);
}

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
    /* no image override; with an egress namespace, policies are enforced and updatable */
    rt->base.caps = RT_CAP_USAGE | RT_CAP_LOGS | RT_CAP_MANIFEST_WRITE | RT_CAP_AUTOSCALE;
    if (o->egress && o->egress_table)
        rt->base.caps |= RT_CAP_EGRESS | RT_CAP_NETWORK_UPDATE;
    rt->egress = o->egress_table ? o->egress : NULL;
    rt->egress_table = o->egress ? o->egress_table : NULL;
    rt->loop = o->loop;
    rt->reload_ms = o->reload_ms > 0 ? o->reload_ms : 2000;
    rt->max_sandboxes = o->max_sandboxes > 0 ? o->max_sandboxes : 256;
    rt->waiters_max = o->waiters_max > 0 ? o->waiters_max : 1024;
    rt->heavy_max = o->heavy_max > 0 ? o->heavy_max : LRT_HEAVY_MAX;
    ab_strlcpy(rt->cluster, o->cluster_id, sizeof(rt->cluster));
    ab_strlcpy(rt->manifests, o->manifests_dir, sizeof(rt->manifests));
    ab_strlcpy(rt->envd, o->envd_path, sizeof(rt->envd));
    rt->uid_base = o->uid_base ? o->uid_base : LSBX_UID_BASE_DEFAULT;
    /* slices of 65536 ids from uid_base up to 2^32 (lsbx_spawn refuses a bad base) */
    rt->uid_slots = (int)AB_MIN(((uint64_t)UINT32_MAX + 1 - rt->uid_base) / LSBX_UID_COUNT,
                                (uint64_t)UID_SLOTS);
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
    rt->sbx_tmpfs = sbx_dir_tmpfs(rt->sbx_dir);
    /* no silent fallback to weaker isolation (DESIGN §10a) */
    if (lsbx_check_host(rt->uid_base, err, errlen) != 0)
        goto fail;
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
    if (o->envd_zygote)
        start_zygote(rt);
    rt->adopting = true;
    lrt_load_manifests(rt, true);
    lrt_adopt_all(rt);
    if (rt->egress) { /* veths of sandboxes the predecessor left and nobody adopted */
        char why[256];
        int gone = egress_netns_prune(rt->egress, slot_held, rt, why, sizeof(why));
        if (gone < 0)
            LOG_WARN("cannot list the egress namespace's leftover veths", "error", why);
        else if (gone > 0) {
            char cnt[16];
            snprintf(cnt, sizeof(cnt), "%d", gone);
            LOG_INFO("removed leftover egress veths", "count", cnt);
        }
    }
    rt->adopting = false;
    {
        struct lpool *p, *next;
        for (p = rt->pools; p; p = next) {
            next = p->next;
            lrt_reconcile(rt, p);
        }
    }
    loop_timer_start(rt->loop, &rt->tick, rt->reload_ms, lrt_tick, rt);
    *out = &rt->base;
    return 0;
fail:
    lzy_free(rt->zygote);
    free(rt);
    return AB_EIO;
}
