/* Pool keeping for the local runtime: bookkeeping over the sandbox list,
 * starting sandboxes until each pool has `replicas` of them in any state,
 * destroying, deferred replacements after releases, and the manifest reload
 * on the tick timer.
 *
 * `replicas` is a pool's maximum concurrency (DESIGN §7): idle, starting and
 * claimed sandboxes all count, and a claim that finds none idle waits (until
 * its startup timeout) for a release and its replacement; `replicas: 0`
 * never starts one. A released or timed-out sandbox is destroyed, never
 * reused; its place is filled again once its directory is gone. Counters
 * are computed by walking the sandboxes, never kept apart, so they cannot
 * drift.
 *
 * Loop thread only. Blocking steps (clone + setup, rm -rf) run on the loop's
 * workers; while a worker holds a sandbox its phase says so and nothing else
 * touches it. */
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

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- bookkeeping ------------------------------------------------------------ */

int lrt_count(struct lrt *rt, struct lpool *p, enum lrt_phase a, enum lrt_phase b)
{
    struct lsb *s;
    int n = 0;

    for (s = rt->sbxs; s; s = s->next)
        if ((!p || s->pool == p) && s->phase >= a && s->phase <= b)
            n++;
    return n;
}

struct lpool *lrt_pool_find(struct lrt *rt, const char *ns, const char *name)
{
    struct lpool *p;

    for (p = rt->pools; p; p = p->next)
        if (!p->removed && !strcmp(p->ns, ns) && !strcmp(p->name, name))
            return p;
    return NULL;
}

struct lsb *lrt_sbx_find(struct lrt *rt, const char *id)
{
    struct lsb *s;

    for (s = rt->sbxs; s; s = s->next)
        if (s->phase == PH_RUNNING && !s->doomed && !strcmp(s->id, id))
            return s;
    return NULL;
}

void lrt_waiter_free(struct lrt_waiter *w)
{
    if (!w)
        return;
    if (w->timer_on)
        loop_timer_cancel(&w->timer);
    json_decref(w->env_vars);
    json_decref(w->metadata);
    json_decref(w->network);
    if (w->token) {
        explicit_bzero(w->token, strlen(w->token));
        free(w->token);
    }
    free(w);
}

void lrt_waiter_unlink(struct lpool *p, struct lrt_waiter *w)
{
    struct lrt_waiter **pp;

    for (pp = &p->w_head; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            if (p->w_tail == w) {
                struct lrt_waiter *t = p->w_head;
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

static uint32_t slot_base(const struct lrt *rt, int slot)
{
    return rt->uid_base + (uint32_t)slot * LSBX_UID_COUNT;
}

int lrt_uid_take(struct lsb *s)
{
    struct lrt *rt = s->rt;

    for (int k = 0; k < rt->uid_slots; k++) {
        if (!(rt->uid_used[k / 8] & (1u << (k % 8)))) {
            rt->uid_used[k / 8] |= (unsigned char)(1u << (k % 8));
            s->uid_slot = k + 1;
            return 0;
        }
    }
    return AB_ELIMIT;
}

int lrt_uid_adopt(struct lsb *s, uint32_t uid_base)
{
    struct lrt *rt = s->rt;
    uint32_t off;
    int k;

    if (uid_base < rt->uid_base || (off = uid_base - rt->uid_base) % LSBX_UID_COUNT != 0 ||
        (k = (int)(off / LSBX_UID_COUNT)) >= rt->uid_slots ||
        (rt->uid_used[k / 8] & (1u << (k % 8))))
        return AB_EINVAL;
    rt->uid_used[k / 8] |= (unsigned char)(1u << (k % 8));
    s->uid_slot = k + 1;
    return 0;
}

static void uid_give_back(struct lsb *s)
{
    int k = s->uid_slot - 1;

    if (k >= 0)
        s->rt->uid_used[k / 8] &= (unsigned char)~(1u << (k % 8));
    s->uid_slot = 0;
}

void lrt_sbx_unlink_free(struct lsb *s)
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
    lrt_start_stop(s);
    lrt_release_done(s, AB_ECLOSED, "the local runtime is shutting down");
    /* at shutdown a live sandbox keeps its veth (the next agent re-adopts it);
     * only the table entry, which dies with this agent, goes */
    lrt_egress_clear(s);
    uid_give_back(s); /* its processes are gone (or it never started) */
    json_decref(s->metadata);
    json_decref(s->network);
    if (s->w_next) {
        explicit_bzero(s->w_next, strlen(s->w_next));
        free(s->w_next);
    }
    lsbx_release(&s->x);
    free(s);
}

void lrt_release_done(struct lsb *s, int err, const char *msg)
{
    rt_release_cb cb = s->rel_cb;

    if (!cb)
        return;
    s->rel_cb = NULL;
    cb(s->rel_arg, err, msg);
}

/* True when p was freed (the caller must not touch it again). */
static bool pool_maybe_free(struct lrt *rt, struct lpool *p)
{
    struct lpool **pp;
    struct lsb *s;

    if (!p->removed || p->w_head)
        return false;
    for (s = rt->sbxs; s; s = s->next)
        if (s->pool == p)
            return false;
    for (pp = &rt->pools; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            free(p);
            return true;
        }
    }
    return false;
}

void lrt_fill(const struct lsb *s, struct rt_sandbox *o, bool ref_metadata)
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
    if (s->phase >= PH_ATTACHING)
        ab_strlcpy(o->envd_token, s->x.token, sizeof(o->envd_token));
    o->cpu_milli = s->pool->cpu_milli;
    o->mem_bytes = s->pool->mem_bytes;
    o->disk_bytes = s->pool->disk_bytes > 0 ? s->pool->disk_bytes : (int64_t)LSBX_DISK_DEFAULT;
    o->metadata = s->metadata && ref_metadata ? json_incref(s->metadata) : s->metadata;
}

/* ---- the state record, off the loop --------------------------------------------- */

/* One write of one sandbox's state on a worker. */
struct state_job {
    struct lsb *s;
    char *text; /* owned; holds the envd token */
    uint64_t gen;
    int rc;
};

static void text_free(char *text)
{
    if (text) {
        explicit_bzero(text, strlen(text));
        free(text);
    }
}

static void state_work(void *arg)
{
    struct state_job *j = arg;

    j->rc = lsbx_state_write_text(j->s->x.dir, j->text);
}

static void state_submit(struct lsb *s, char *text, uint64_t gen);

static void state_done(void *arg, int status)
{
    struct state_job *j = arg;
    struct lsb *s = j->s;
    int rc = status != 0 ? status : j->rc;

    s->w_busy = false;
    if (rc != 0)
        LOG_WARN("cannot write sandbox state", "dir", s->x.dir);
    else
        s->w_done_gen = j->gen;
    if (rc == 0 && s->armer && s->report_gen && s->w_done_gen >= s->report_gen)
        ab_trace(s->armer->trace, "claim.recorded"); /* the claim's record is on disk */
    text_free(j->text);
    free(j);
    if (s->rt->closing || status != 0) { /* op_free left it to us */
        struct lrt *rt = s->rt;
        if (s->armer) {
            lrt_claim_fail(s->armer, AB_ECLOSED, "the local runtime is shutting down");
            s->armer = NULL;
        }
        lrt_sbx_unlink_free(s);
        lrt_free_if_done(rt);
        return;
    }
    if (s->w_next) { /* a newer state came meanwhile */
        char *text = s->w_next;
        s->w_next = NULL;
        state_submit(s, text, s->w_next_gen);
    }
    if (s->doomed && !s->w_busy) {
        s->doomed = false;
        if (s->armer) { /* never reported: the claim fails instead */
            lrt_claim_fail(s->armer, AB_EIO,
                           "the sandbox was destroyed while its claim was recorded");
            s->armer = NULL;
        }
        lrt_destroy(s);
        return;
    }
    /* a failed write does not hold a claim back (as before: a warning) */
    if (s->armer && s->init_ok && (rc != 0 || s->w_done_gen >= s->report_gen)) {
        s->report_gen = 0;
        lrt_claim_written(s, rc);
    }
}

/* Takes text. Falls back to writing here when the worker queue is full. */
static void state_submit(struct lsb *s, char *text, uint64_t gen)
{
    struct state_job *j = calloc(1, sizeof(*j));

    if (j) {
        j->s = s;
        j->text = text;
        j->gen = gen;
        s->w_busy = true;
        if (loop_submit(s->rt->loop, state_work, state_done, j) == 0)
            return;
        s->w_busy = false;
        free(j);
    }
    if (lsbx_state_write_text(s->x.dir, text) != 0)
        LOG_WARN("cannot write sandbox state", "dir", s->x.dir);
    else
        s->w_done_gen = gen;
    text_free(text);
}

void lrt_persist(struct lsb *s)
{
    json_t *info = json_pack("{s:s, s:s, s:s}", "ns", s->pool->ns, "pool", s->pool->name, "phase",
                             s->phase == PH_RUNNING ? "running" : "idle");
    char *text;

    if (!info)
        return;
    json_object_set_new(info, "rev", json_string(s->rev));
    if (s->phase == PH_RUNNING) {
        json_object_set_new(info, "id", json_string(s->id));
        json_object_set_new(info, "claimed_ms", json_integer(s->claimed_ms));
        json_object_set_new(info, "end_ms", json_integer(s->end_ms));
        json_object_set_new(info, "life_end_ms", json_integer(s->life_end_ms));
        json_object_set_new(info, "idle_ms", json_integer(s->idle_ms));
        json_object_set_new(info, "team", json_string(s->team));
        json_object_set_new(info, "owner", json_string(s->owner));
        if (s->metadata)
            json_object_set(info, "metadata", s->metadata);
        if (s->network)
            json_object_set(info, "network", s->network);
        json_object_set_new(info, "allow_private", json_boolean(s->allow_private));
    }
    json_decref(s->x.info);
    s->x.info = info;
    if (!(text = lsbx_state_text(&s->x))) {
        LOG_WARN("cannot write sandbox state", "dir", s->x.dir);
        return;
    }
    /* one write of this sandbox at a time (the same temporary file), in
     * order; a waiting text is replaced by the newer one */
    if (s->w_busy) {
        text_free(s->w_next);
        s->w_next = text;
        s->w_next_gen = ++s->w_gen;
        return;
    }
    state_submit(s, text, ++s->w_gen);
}

/* ---- destroying ---------------------------------------------------------------- */

static void heavy_next(struct lrt *rt);
static void remove_start(struct lsb *s);

/* Heavy jobs yield the CPU to claims (the loop thread, envd answering
 * /init): the worker, and what it starts meanwhile (the init's setup before
 * exec), run at HEAVY_NICE; envd itself is put back at 0
 * (lsbx_spawn). Root may raise the worker's priority back afterwards. */
#define HEAVY_NICE 10

static int heavy_nice_begin(void)
{
    int old;

    errno = 0;
    old = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (errno != 0)
        old = 0;
    setpriority(PRIO_PROCESS, (id_t)gettid(), HEAVY_NICE);
    return old;
}

static void heavy_nice_end(int old)
{
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), old) != 0)
        LOG_WARN("cannot give a worker its priority back after a spawn", "error", strerror(errno));
}

static void remove_work(void *arg)
{
    struct lsb *s = arg;
    int nice = heavy_nice_begin();

    /* the veth went with the sandbox's namespace; a leftover (its namespace
     * held open by something) must not greet the slot's next sandbox */
    if (s->rt->egress && s->uid_slot > 0) {
        char why[256];
        if (egress_netns_detach(s->rt->egress, (uint32_t)(s->uid_slot - 1), why, sizeof(why)) != 0)
            LOG_WARN("cannot remove a sandbox's egress veth", "dir", s->x.dir, "error", why);
    }
    if (s->uid_slot > 0 && !s->rt->sbx_tmpfs) {
        char spare[LSBX_DIR_MAX];
        snprintf(spare, sizeof(spare), "%s/sandbox-files/spare-%d", s->rt->state_dir,
                 s->uid_slot - 1);
        s->rc = lsbx_recycle_dir(&s->x, spare);
    } else {
        s->rc = lsbx_remove_dir(&s->x);
    }
    heavy_nice_end(nice);
}

static void remove_finish(struct lsb *s)
{
    struct lrt *rt = s->rt;
    struct lpool *p = s->pool;

    if (s->rc != 0)
        LOG_WARN("cannot remove sandbox directory", "dir", s->x.dir);
    lrt_sbx_unlink_free(s);
    if (rt->closing)
        return;
    if (!pool_maybe_free(rt, p)) /* a removed pool's last sandbox: p is gone */
        lrt_reconcile(rt, p);
}

static void remove_done(void *arg, int status)
{
    struct lsb *s = arg;
    struct lrt *rt = s->rt;

    (void)status;
    if (rt->heavy > 0)
        rt->heavy--;
    remove_finish(s);
    if (rt->closing)
        lrt_free_if_done(rt);
    else
        heavy_next(rt);
}

static void gone_poll(struct loop_timer *t)
{
    struct lsb *s = t->arg;

    s->timer_on = false;
    if (!lsbx_is_gone(&s->x)) {
        /* a fork racing the first SIGKILLs (pids read, then a child born)
         * lands in the cgroup too: signal what is there again */
        int left = lcg_kill_members(&s->x.cg);
        if (s->rel_cb && ab_now_ms() >= s->rel_deadline_ms) {
            char msg[RT_ERR_MAX];
            snprintf(msg, sizeof(msg),
                     "sandbox %s: %d process(es) still in its cgroup after the kill deadline",
                     s->id[0] ? s->id : s->sid, left);
            LOG_WARN("sandbox processes survive the kill", "error", msg);
            lrt_release_done(s, AB_ETIMEOUT, msg);
        }
        s->timer_on = true;
        loop_timer_start(s->rt->loop, &s->timer, GONE_POLL_MS, gone_poll, s);
        return;
    }
    lrt_release_done(s, 0, NULL);
    s->phase = PH_REMOVING;
    s->rm_queued = true; /* removed when a heavy-job place is free (lrt_heavy_next) */
    heavy_next(s->rt);
}

/* Starts the removal of s (rm_queued) on a worker. */
static void remove_start(struct lsb *s)
{
    s->rm_queued = false;
    if (loop_submit(s->rt->loop, remove_work, remove_done, s) != 0) {
        s->rc = lsbx_remove_dir(&s->x); /* queue full: do it here rather than leak */
        remove_finish(s);
        return;
    }
    s->rm_busy = true;
    s->rt->heavy++; /* given back by remove_done */
}

/* Kills the sandbox and frees it once gone. Safe in any phase. */
void lrt_destroy(struct lsb *s)
{
    if (s->phase == PH_SPAWNING || s->phase == PH_ATTACHING || s->w_busy) {
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
    lrt_start_stop(s);
    s->phase = PH_STOPPING;
    lrt_egress_clear(s); /* nothing new leaves from the moment it is killed */
    lsbx_kill(&s->x);
    s->timer_on = true;
    loop_timer_start(s->rt->loop, &s->timer, 0, gone_poll, s);
}

/* ---- starting ------------------------------------------------------------------------ */

static void ready_poll(struct loop_timer *t)
{
    struct lsb *s = t->arg;

    s->timer_on = false;
    if (!lsbx_is_alive(&s->x)) {
        LOG_WARN("sandbox exited while starting", "pool", s->pool->name, "dir", s->x.dir);
        s->pool->retry_after_ms = ab_now_ms() + RETRY_MS;
        lrt_destroy(s);
        return;
    }
    if (!lsbx_socket_answers(&s->x)) {
        if (ab_now_ms() > s->deadline_ms) {
            LOG_WARN("sandbox envd did not listen in time", "pool", s->pool->name, "dir", s->x.dir);
            lrt_destroy(s);
            return;
        }
        s->timer_on = true;
        loop_timer_start(s->rt->loop, &s->timer, READY_POLL_MS, ready_poll, s);
        return;
    }
    if (lsbx_lock_socket(&s->x) != 0) {
        LOG_WARN("sandbox envd socket is not a socket, or its directory cannot be locked", "pool",
                 s->pool->name, "dir", s->x.dir);
        lrt_destroy(s);
        return;
    }
    if (lrt_start_needed(s->pool)) {
        if (lrt_start_begin(s) != 0) {
            LOG_WARN("out of memory starting a sandbox's start command", "pool", s->pool->name);
            lrt_destroy(s);
        }
        return;
    }
    lrt_sbx_idle(s);
}

void lrt_sbx_idle(struct lsb *s)
{
    s->phase = PH_IDLE;
    s->seq = ++s->rt->seq;
    s->idle_since_ms = ab_now_ms();
    lrt_persist(s);
    lrt_serve_waiters(s->rt, s->pool);
    lrt_reconcile(s->rt, s->pool);
}

/* A skeleton a removal left (lsbx_recycle_dir) for a spawn to rename into
 * place: this slot's own, else any (a replacement often starts while its
 * predecessor's removal runs, on another slot). Two spawns may pick the same
 * one: the rename of the second fails and it makes its directory. NULL: none. */
static const char *find_spare(const char *shared, int slot, char *buf, size_t len)
{
    struct stat st;
    struct dirent *de;
    DIR *d;

    snprintf(buf, len, "%s/spare-%d", shared, slot);
    if (lstat(buf, &st) == 0)
        return buf;
    if (!(d = opendir(shared)))
        return NULL;
    while ((de = readdir(d)) && strncmp(de->d_name, "spare-", 6) != 0)
        ;
    if (de)
        snprintf(buf, len, "%s/%s", shared, de->d_name);
    closedir(d);
    return de ? buf : NULL;
}

static void spawn_work(void *arg)
{
    struct lsb *s = arg;
    struct lsbx_options o = {0};
    char dir[LSBX_DIR_MAX], shared[LSBX_DIR_MAX], spare[LSBX_DIR_MAX];
    int nice;

    snprintf(dir, sizeof(dir), "%s/%s", s->rt->sbx_dir, s->sid);
    snprintf(shared, sizeof(shared), "%s/sandbox-files", s->rt->state_dir);
    o.id = s->sid;
    o.dir = dir;
    o.shared_dir = shared;
    o.spare = s->rt->sbx_tmpfs ? NULL : find_spare(shared, s->uid_slot - 1, spare, sizeof(spare));
    o.argv = s->rt->argv;
    o.zygote = s->rt->zygote;
    o.egress = s->rt->egress;
    o.egress_slot = (uint32_t)(s->uid_slot - 1);
    o.uid_base = slot_base(s->rt, s->uid_slot - 1);
    o.disk_bytes = (uint64_t)s->pool->disk_bytes;
    o.mem_bytes = s->pool->mem_bytes;
    o.cpu_milli = s->pool->cpu_milli;
    o.pids_max = s->pool->pids_max;
    nice = heavy_nice_begin();
    s->rc = lsbx_spawn(&o, &s->x, s->err, sizeof(s->err));
    heavy_nice_end(nice);
}

static void retry_timer(struct loop_timer *t)
{
    struct lsb *s = t->arg; /* a placeholder carrying the pool to retry */
    struct lrt *rt = s->rt;
    struct lpool *p = s->pool;

    lrt_sbx_unlink_free(s);
    if (!rt->closing)
        lrt_reconcile(rt, p);
}

static void spawn_finish(struct lsb *s, int status)
{
    struct lrt *rt = s->rt;

    if (status != 0 || s->rc != 0) {
        if (status == 0)
            LOG_WARN("cannot start a sandbox", "pool", s->pool->name, "error", s->err);
        s->pool->retry_after_ms = ab_now_ms() + RETRY_MS;
        s->phase = PH_REMOVING; /* counts as stopping until the retry fires */
        if (rt->closing || status != 0) {
            lrt_sbx_unlink_free(s);
            return;
        }
        s->timer_on = true;
        loop_timer_start(rt->loop, &s->timer, RETRY_MS, retry_timer, s);
        return;
    }
    s->phase = PH_STARTING;
    if (rt->closing) {
        /* the loop is shutting down (this done ran after op_free): like every
         * other live sandbox it keeps running for the next agent, and a kill
         * here would wait on a timer that never fires, holding rt */
        lrt_sbx_unlink_free(s);
        return;
    }
    if (s->doomed) {
        lrt_destroy(s);
        return;
    }
    s->deadline_ms = ab_now_ms() + (s->pool->startup_ms ? s->pool->startup_ms : DEFAULT_STARTUP_MS);
    s->timer_on = true;
    loop_timer_start(rt->loop, &s->timer, 0, ready_poll, s);
}

static void spawn_done(void *arg, int status)
{
    struct lsb *s = arg;
    struct lrt *rt = s->rt;

    if (rt->heavy > 0)
        rt->heavy--;
    spawn_finish(s, status); /* may free s */
    if (rt->closing)
        lrt_free_if_done(rt);
    else
        heavy_next(rt);
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
    ab_strlcpy(s->rev, p->rev, sizeof(s->rev));
    if (lrt_uid_take(s) != 0) {
        LOG_WARN("no host uid slice left for a sandbox", "pool", p->name);
        free(s);
        return AB_ELIMIT;
    }
    s->phase = PH_SPAWNING;
    i = snprintf(s->sid, sizeof(s->sid), "s");
    for (size_t k = 0; k < sizeof(r); k++)
        i += snprintf(s->sid + i, sizeof(s->sid) - (size_t)i, "%02x", r[k]);
    s->next = rt->sbxs;
    rt->sbxs = s;
    if (loop_submit(rt->loop, spawn_work, spawn_done, s) != 0) {
        lrt_sbx_unlink_free(s);
        return AB_EBUSY;
    }
    rt->heavy++;
    return 0;
}

/* A heavy-job place came free (or work for one appeared): removals first,
 * then spawns for pools with claims waiting, then the other pools' refills.
 * A removal takes a worker ~1 ms against a spawn's ~30, and a dead sandbox
 * not yet removed holds its memory, its uid slice, a place under
 * max_sandboxes and a mount that every later spawn copies into its new
 * mount namespace: with removals behind the spawns of waiting claims,
 * sustained creates kept max_sandboxes (256) sandboxes, 216 of them dead,
 * and each spawn paid ~0.3 ms for their mounts (README.md).
 * (lrt_refill_later holds the first refills of a burst of claims back; once
 * started they go on at this pace.) */
static void heavy_next(struct lrt *rt)
{
    struct lpool *p, *next;
    struct lsb *s, *sn;

    if (rt->closing || rt->adopting)
        return;
    for (s = rt->sbxs; s && rt->heavy < rt->heavy_max; s = sn) {
        sn = s->next;
        if (s->rm_queued)
            remove_start(s); /* may free s */
    }
    for (p = rt->pools; p && rt->heavy < rt->heavy_max; p = next) {
        next = p->next;
        if (p->w_head)
            lrt_reconcile(rt, p);
    }
    for (p = rt->pools; p && rt->heavy < rt->heavy_max; p = next) {
        next = p->next;
        lrt_reconcile(rt, p);
    }
}

/* Starts or stops sandboxes so that idle + starting = replicas + waiting
 * claims (bounded by max_sandboxes); a removed pool drains. */
void lrt_reconcile(struct lrt *rt, struct lpool *p)
{
    int idle, live, want, total;

    if (rt->closing || rt->adopting)
        return;
    lrt_roll(rt, p); /* stale idle ones go first: their replacements start below */
    /* replicas is the pool's maximum concurrency (DESIGN §7): every
     * sandbox it has counts, starting, idle or claimed, so a claim that
     * finds nothing idle waits for a release instead of a sandbox beyond
     * replicas; a free place is kept filled with an idle one */
    idle = lrt_count(rt, p, PH_IDLE, PH_IDLE);
    live = lrt_count(rt, p, PH_SPAWNING, PH_RUNNING);
    want = p->removed ? 0 : lrt_pool_replicas(p);
    total = lrt_count(rt, NULL, PH_SPAWNING, PH_REMOVING);
    if (ab_now_ms() >= p->retry_after_ms) {
        /* at most heavy_max at a time: heavy_next starts the rest */
        while (live < want && total < rt->max_sandboxes && rt->heavy < rt->heavy_max) {
            if (spawn_one(rt, p) != 0)
                break;
            live++;
            total++;
        }
        if (live < want && total >= rt->max_sandboxes)
            p->saturated_ms = ab_now_ms(); /* the autoscaler grows another member */
    }
    /* Too many (replicas lowered, pool removed): stop the newest idle ones. */
    while (live > want && idle > 0) {
        struct lsb *s, *newest = NULL;
        for (s = rt->sbxs; s; s = s->next)
            if (s->pool == p && s->phase == PH_IDLE && !s->doomed &&
                (!newest || s->seq > newest->seq))
                newest = s;
        if (!newest)
            break;
        lrt_destroy(newest);
        idle--;
        live--;
    }
    if (p->removed) {
        while (p->w_head) {
            struct lrt_waiter *w = p->w_head;
            lrt_waiter_unlink(p, w);
            lrt_claim_fail(w, AB_ENOENT, "the pool was removed from the manifests");
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
        p = lrt_pool_find(rt, v->ns, v->name);
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
        p->cpu_milli = v->member ? v->member->cpu_milli : 0;
        p->mem_bytes = v->member ? v->member->mem_bytes : 0;
        p->disk_bytes = v->member ? v->member->disk_bytes : 0;
        p->pids_max = v->member ? v->member->pids_max : 0;
        p->startup_ms = v->startup_timeout_ms;
        p->idle_ms = v->idle_timeout_ms;
        p->disable_egress = v->disable_egress;
        lrt_pool_set_runtimes(p, v->runtimes, v->nruntimes);
        lrt_scale_from_view(rt, p, v);
        lrt_roll_configure(p, set, v, rt->cluster);
    }
    for (p = rt->pools; p; p = p->next)
        if (!p->seen)
            p->removed = true;
    mf_set_free(rt->set);
    rt->set = set;
    for (p = rt->pools; p; p = next) {
        next = p->next;
        lrt_reconcile(rt, p);
    }
}

int lrt_load_manifests(struct lrt *rt, bool force)
{
    struct mf_set *set = NULL;
    char err[512];
    uint64_t sig = 0;

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
    lrt_apply_loaded(rt, set, sig);
    return 0;
}

void lrt_apply_loaded(struct lrt *rt, struct mf_set *set, uint64_t sig)
{
    rt->sig = sig; /* what set was loaded from: a later change reloads again */
    for (int i = 0; i < set->nerrs; i++)
        LOG_WARN("manifest refused", "error", set->errs[i].text);
    apply_manifests(rt, set);
}

void lrt_reload(struct rt *base)
{
    lrt_load_manifests((struct lrt *)base, false);
}

const struct mf_set *lrt_manifests(struct rt *base)
{
    return ((struct lrt *)base)->set;
}

void lrt_tick(struct loop_timer *t)
{
    struct lrt *rt = t->arg;
    struct lpool *p, *next;
    struct lsb *s, *sn;

    lrt_load_manifests(rt, false);
    /* A sandbox whose init died (OOM, killed by hand) is replaced. */
    for (s = rt->sbxs; s; s = sn) {
        sn = s->next;
        if ((s->phase == PH_IDLE || s->phase == PH_RUNNING) && !lsbx_is_alive(&s->x)) {
            LOG_WARN("sandbox died", "dir", s->x.dir);
            lrt_destroy(s);
        }
    }
    for (p = rt->pools; p; p = next) {
        next = p->next;
        lrt_reconcile(rt, p);
    }
    loop_timer_start(rt->loop, &rt->tick, rt->reload_ms, lrt_tick, rt);
}

static void refill_fire(struct loop_timer *t)
{
    struct lrt *rt = t->arg;

    rt->refill_on = false;
    for (struct lpool *p = rt->pools; p; p = p->next)
        lrt_reconcile(rt, p);
}

/* Replacements for claims served from idle start once claims pause. */
void lrt_refill_later(struct lrt *rt)
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
