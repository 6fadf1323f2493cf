/* What the local runtime's files (pool.c, arm.c, adopt.c, local.c) share:
 * the runtime object, its pools, sandboxes and waiting claims. Private to
 * the local runtime; loop thread only. */
#ifndef AGENTBOX_RUNTIME_LOCAL_LRT_H
#define AGENTBOX_RUNTIME_LOCAL_LRT_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "agent/runtime/local/local.h"
#include "agent/runtime/local/manifest.h"
#include "agent/runtime/local/sandbox.h"
#include "agent/runtime/revision.h"
#include "agent/runtime/startcmd.h"
#include "agentbox/loop.h"

struct http_client;
struct mf_set;

#define DEFAULT_STARTUP_MS 120000
#define DEFAULT_TIMEOUT_S 300
#define READY_POLL_MS 10
#define GONE_POLL_MS 10
#define RETRY_MS 1000
#define REFILL_QUIET_MS 100     /* replacements start after this long without a claim */
#define REFILL_DEFER_MAX_MS 500 /* ... and never later than this after the first one */
/* Spawns and removals on the loop's workers at a time (pool.c): the rest of
 * the workers (the agent runs heavy_max + 2) stay free for a claim's
 * state write (and usage, logs, manifest writes). A spawn or removal mostly
 * waits (for its child's setup, envd's exec and listen, the kernel's
 * namespace teardown) and runs niced, so the bound is latency, not cores:
 * sustained creates with refills, Release, 2 cores: 2 at a time 87/s (CPU
 * ~20 % idle), 4: 127/s, 6: 155/s, with the burst rows unchanged; once
 * spawns got cheaper 6 left the cores 65-80 % busy: 6: 231/s, 12: 264/s,
 * 16: 274/s (95 % busy), 24: 263/s (local/README.md). When a place
 * frees: every queued removal, then spawns for pools with claims waiting,
 * then the other pools' refills (pool.c, heavy_next). */
#define LRT_HEAVY_MAX 16 /* the default of --spawn-concurrency */
#define POOLS_MAX 1024
#define INIT_BODY_MAX (1024 * 1024)
#define LRT_START_MSG_MAX 900 /* a start failure; fits an HTTP error body (1024) */
/* Host uid slices: sandbox k (slot k) maps its ids 0-65535 to
 * uid_base + k * LSBX_UID_COUNT, so two sandboxes never share a host uid. */
#define UID_SLOTS 4096

enum lrt_phase {
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
struct lstart;

struct lrt_waiter {
    struct lrt_waiter *next;
    struct lrt *rt;
    struct lpool *pool;
    uint64_t ticket;
    rt_claim_cb cb;
    void *arg;
    bool cancelled;
    bool killed; /* released while being armed: the claim fails once arming ends */
    char id[RT_ID_MAX + 1];
    int64_t timeout_s;
    bool timeout_is_idle;
    json_t *env_vars;
    json_t *metadata;
    bool internet;
    json_t *network; /* the create's network object (owned), or NULL */
    bool allow_private;
    char user[RT_NAME_MAX + 1];
    char workdir[256];
    char *token;
    char team[RT_NAME_MAX + 1];
    char owner[RT_NAME_MAX + 1];
    char trace[65];          /* the claim's trace id (agentbox/trace.h), "" when none */
    struct loop_timer timer; /* startup timeout */
    int64_t startup_ms;
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
    int64_t cpu_milli, mem_bytes; /* an Env member's sizing; 0 for a standalone pool */
    int64_t disk_bytes, pids_max; /* ephemeral-storage, pids; 0 → lsbx defaults */
    int64_t startup_ms;
    int64_t idle_ms;
    bool disable_egress;
    bool removed;
    bool seen;
    int64_t retry_after_ms; /* spawn failures back off */
    /* from its runtimes (start.c): the one start command, the readiness
     * probes other than envd's, and why its last sandbox failed them */
    struct rt_start_spec start;
    char last_start_err[LRT_START_MSG_MAX];
    /* rolls (roll.c): the identity its sandboxes should have and the
     * updateStrategy (maxUnavailable a count, or mu_val percent) */
    char rev[RT_REV_LEN + 1];
    bool auto_update;
    bool mu_pct;
    int mu_val;
    struct lrt_waiter *w_head, *w_tail;
    int nwaiters;
    /* scaling group (scale.c): the member's bounds and priorities, its
     * group's policy, and the autoscaler's replicas when it set one */
    bool in_group;
    bool snapped; /* already in this lrt_scale_groups pass */
    bool has_scaled;
    int scaled;
    int32_t min_r, max_r, up_prio, down_prio;
    struct rt_scale_policy policy;
    int64_t last_create_ms; /* ab_now_ms of the last claim; 0: none */
    uint64_t claims;        /* creates ever queued on it (rt_pool.claims) */
    int64_t saturated_ms;   /* the last time max_sandboxes kept it from its replicas */
};

struct lsb {
    struct lsb *next;
    struct lrt *rt;
    struct lpool *pool;
    enum lrt_phase phase;
    struct lsbx x;
    char sid[LSBX_ID_MAX + 1]; /* directory name */
    char rev[RT_REV_LEN + 1];  /* its pool's revision when it was spawned (roll.c) */
    int64_t seq;               /* FIFO order of becoming idle */
    int64_t idle_since_ms;     /* ab_now_ms when it became idle (0: adopted, unknown) */
    int64_t deadline_ms;       /* monotonic: startup deadline while starting */
    struct loop_timer timer;
    bool timer_on;
    bool doomed; /* destroy when the worker hands it back */
    struct http_client *hc;
    int http_status;
    struct lrt_waiter *armer;
    struct lstart *start; /* start command + readiness (start.c); NULL when none */
    char err[RT_ERR_MAX];
    int rc;
    /* claimed */
    char id[RT_ID_MAX + 1];
    json_t *metadata;
    json_t *network;    /* its egress policy as asked (owned; persisted), or NULL */
    bool allow_private; /* allow-private-networks */
    char team[RT_NAME_MAX + 1];
    char owner[RT_NAME_MAX + 1];
    int64_t claimed_ms, end_ms, last_active_ms; /* wall clock */
    /* end_ms is the earlier of life_end_ms (0: none; a native claim's
     * timeout) and last_active_ms + idle_ms (0: none; an E2B claim's
     * timeout, else the pool's idle timeout): lrt_update_end */
    int64_t life_end_ms, idle_ms;
    int uid_slot; /* its host uid slice + 1; 0: none held */
    /* the state record (lrt_persist): written on a worker, one write of a sandbox
     * at a time; a newer text waits in w_next (owned) and replaces an older
     * waiting one. w_gen counts the texts made, w_done_gen the newest
     * written; a claim is reported once report_gen is written (arm.c). */
    bool w_busy;
    char *w_next;
    uint64_t w_gen, w_next_gen, w_done_gen, report_gen;
    bool init_ok;   /* envd armed for the claim (arm.c); reported once report_gen is written */
    bool rm_queued; /* gone, waiting for a heavy-job place to be removed */
    bool rm_busy;   /* its removal is on a worker (remove_done frees it) */
    /* rt_release_wait: told once every process is gone (gone_poll), or at
     * rel_deadline_ms (monotonic) with AB_ETIMEOUT */
    rt_release_cb rel_cb;
    void *rel_arg;
    int64_t rel_deadline_ms;
};

struct lrt {
    struct rt base;
    struct loop *loop;
    char cluster[RT_NAME_MAX + 1];
    char state_dir[LSBX_DIR_MAX];
    char sbx_dir[LSBX_DIR_MAX];
    bool sbx_tmpfs; /* sbx_dir is a tmpfs (lrt_new): no directory skeletons to recycle */
    char manifests[512];
    char envd[512];
    const char *argv[LSBX_ARGV_MAX + 1];
    struct lzy *zygote;                       /* NULL: envd is exec'd per sandbox (zygote.h) */
    const struct egress_netns_config *egress; /* borrowed; NULL: no egress namespace */
    struct egress_table *egress_table;        /* borrowed */
    uint32_t uid_base; /* host id of slot 0's uid 0 (LSBX_UID_BASE_DEFAULT when not set) */
    int uid_slots;     /* slices that fit below 2^32 (at most UID_SLOTS) */
    unsigned char uid_used[UID_SLOTS / 8];
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
    int heavy;     /* spawns and removals on workers (at most heavy_max) */
    int heavy_max; /* lrt_options.heavy_max, else LRT_HEAVY_MAX */
    /* op_free ran: the last leftover frees rt (lrt_free_if_done) */
    bool free_pending;
    int64_t refill_first_ms;                /* when the pending refill was first deferred */
    struct lwrite *write_head, *write_tail; /* manifest writes, one on a worker at a time */
    int writes;
    bool closing;
    bool adopting; /* no spawns before the state directory has been scanned */
    int nevents;   /* lines in the env events file (events.c) */
};

#define LRT_WRITES_MAX 64 /* manifest writes waiting (objects.c) */

/* objects.c: the manifest seam (runtime.h "Manifest objects") */
struct lwrite;
void lrt_objects(struct rt *base, enum rt_obj_kind kind, const char *ns, const char *name,
                 rt_object_fn fn, void *arg);
int lrt_object_write(struct rt *base, const struct rt_write *w, rt_write_cb cb, void *arg,
                     char *err, size_t errlen);
/* local.c: after op_free, frees rt once no sandbox and no write is left
 * (a worker's done callback brings the last one back). rt may be gone after. */
void lrt_free_if_done(struct lrt *rt);
/* op_free: every waiting write is told AB_ECLOSED now. */
void lrt_writes_close(struct lrt *rt);

/* pool.c: bookkeeping, starting, destroying, replacements, manifests */
int lrt_count(struct lrt *rt, struct lpool *p, enum lrt_phase a, enum lrt_phase b);
struct lpool *lrt_pool_find(struct lrt *rt, const char *ns, const char *name);
struct lsb *lrt_sbx_find(struct lrt *rt, const char *id);
void lrt_waiter_free(struct lrt_waiter *w);
void lrt_waiter_unlink(struct lpool *p, struct lrt_waiter *w);
void lrt_sbx_unlink_free(struct lsb *s);
void lrt_fill(const struct lsb *s, struct rt_sandbox *o, bool ref_metadata);
/* Writes s's state record on a worker (the text is made now, numbered
 * s->w_gen); s->w_done_gen reaches that number once it is on disk (at once
 * when the write had to be done here). */
void lrt_persist(struct lsb *s);
void lrt_destroy(struct lsb *s);
/* Runs and clears s's release callback, if any. */
void lrt_release_done(struct lsb *s, int err, const char *msg);
void lrt_reconcile(struct lrt *rt, struct lpool *p);
/* Takes a free host uid slice for s (s->uid_slot); AB_ELIMIT when none is left. */
int lrt_uid_take(struct lsb *s);
/* Marks the slice of an adopted sandbox (x.uid_base) as s's. AB_EINVAL when
 * it is not a slice of this runtime or another sandbox holds it. */
int lrt_uid_adopt(struct lsb *s, uint32_t uid_base);
int lrt_load_manifests(struct lrt *rt, bool force);
/* Swaps in a set loaded (on a worker) from the directory whose signature
 * was sig before the load; takes set. */
void lrt_apply_loaded(struct lrt *rt, struct mf_set *set, uint64_t sig);
/* The reload_ms timer: manifest reload and health check. */
void lrt_tick(struct loop_timer *t);
void lrt_refill_later(struct lrt *rt);
/* A started sandbox whose envd listens (and whose start command and
 * readiness checks passed) becomes idle and serves waiting claims. */
void lrt_sbx_idle(struct lsb *s);

/* scale.c: the scaling-group seam (runtime.h "Scaling groups") */
/* The replicas p keeps: the autoscaler's when it set one, else the manifest's. */
int lrt_pool_replicas(const struct lpool *p);
/* p's group membership, bounds, priorities and policy from its manifest view. */
void lrt_scale_from_view(struct lrt *rt, struct lpool *p, const struct mf_pool_view *v);
/* info->autoscaling and info->headroom for pool p. */
void lrt_scale_fill_pool(struct lrt *rt, const struct lpool *p, struct rt_pool *info);
void lrt_scale_groups(struct rt *base, rt_group_fn fn, void *arg);
int lrt_scale_set(struct rt *base, const char *ns, const char *pool, int replicas,
                  const char *reason, char *err, size_t errlen);

/* start.c: start commands and readiness checks before a sandbox is idle */
bool lrt_start_needed(const struct lpool *p);
/* Runs them for s (phase PH_STARTING); ends in lrt_sbx_idle or in s's
 * destruction with the pool's oldest waiter failed. AB_ENOMEM. */
int lrt_start_begin(struct lsb *s);
/* Cancels what runs for s, closes the start command's stream (the command
 * dies with the sandbox) and frees it. Safe when nothing runs. */
void lrt_start_stop(struct lsb *s);
/* Why p's sandboxes are not ready yet (a check not passed, the command's
 * output), or why the last one failed: 1 with out filled, 0 when nothing is known. */
int lrt_start_describe(const struct lpool *p, const struct lrt *rt, char *out, size_t outlen);
/* The start command and probes of p from its manifest runtimes. */
void lrt_pool_set_runtimes(struct lpool *p, const struct mf_runtime *rts, int n);

/* arm.c: the sandbox's egress policy into the gateway's table (parsed from
 * s->network, s->internet, s->allow_private). 0, or AB_EINVAL with err. */
int lrt_egress_apply(struct lsb *s, char *err, size_t errlen);
/* Takes s's slot out of the table: its traffic is refused from now on. */
void lrt_egress_clear(struct lsb *s);

/* arm.c: arming, the end of a claim, waiting claims */
void lrt_claim_fail(struct lrt_waiter *w, int err, const char *msg);
/* pool.c calls it when the state write a claim waits for (report_gen) is
 * done: the claim is reported (arm.c). rc: the write's result. */
void lrt_claim_written(struct lsb *s, int rc);
void lrt_schedule_end(struct lsb *s);
/* Recomputes s->end_ms from its lifetime, idle timeout and last activity. */
void lrt_update_end(struct lsb *s);
void lrt_serve_waiters(struct lrt *rt, struct lpool *p);
void lrt_waiter_timeout(struct loop_timer *t);

/* roll.c: replacing stale idle sandboxes after an identity change */
/* Sets p's revision and updateStrategy from its view in set (on every load). */
void lrt_roll_configure(struct lpool *p, const struct mf_set *set, const struct mf_pool_view *v,
                        const char *cluster);
/* Destroys stale idle sandboxes of p while fewer than maxUnavailable of its
 * places are unavailable (lrt_reconcile then starts their replacements). */
void lrt_roll(struct lrt *rt, struct lpool *p);
/* Sandboxes of p (not stopping) at its revision. */
int lrt_roll_updated(struct lrt *rt, const struct lpool *p);
int lrt_roll_max_unavailable(const struct lpool *p);

/* events.c: env events kept in a bounded file beside the API overlay */
void lrt_event_record(struct rt *base, const struct rt_event *e);
int lrt_events_load(struct rt *base, rt_event_fn fn, void *arg);

/* adopt.c: re-adopt or reap what a previous agent left */
void lrt_adopt_all(struct lrt *rt);

/* usage.c, logs.c: the "Usage and logs" half of runtime.h. The probes run on
 * the loop thread, the reads on any thread and touch only the probe. */
int lrt_usage_probe(struct rt *base, const char *id, struct rt_probe *out);
/* The runtime-private part of a usage probe (out->data) for a sandbox whose
 * directory is dir and whose init is pid (started at start_time, against pid
 * reuse); cgroup "" or NULL reads /proc instead. AB_ELIMIT when a path does
 * not fit. */
int lrt_usage_probe_of(const char *dir, pid_t pid, uint64_t start_time, const char *cgroup,
                       int64_t cpu_milli, int64_t mem_bytes, struct rt_probe *out);
/* Adds a sandbox's cgroup v1 memory and cpuacct groups to a probe made by
 * lrt_usage_probe_of (with cgroup ""): the read then uses them. AB_ELIMIT. */
int lrt_usage_probe_v1(struct rt_probe *out, const char *memory, const char *cpuacct);
void lrt_usage_read(const struct rt_probe *p, size_t n, struct rt_usage *out);
int lrt_log_probe(struct rt *base, const char *id, struct rt_probe *out);
int lrt_log_read(const struct rt_probe *p, const struct rt_log_query *q, struct rt_log *out);
/* Usage from a cgroup v2 directory (cpu.stat, memory.current, memory.stat,
 * cpu.max, memory.max) into the cpu and memory fields of *u; limits only
 * when the cgroup sets one. 0, or AB_EIO when cpu.stat or memory.current
 * cannot be read. */
int lrt_usage_cgroup(const char *dir, struct rt_usage *u);
/* The same from cgroup v1 groups: cpuacct.usage (ns) in cpuacct;
 * memory.usage_in_bytes, memory.stat (total_rss, total_cache,
 * total_inactive_file, or the same without total_) and memory.limit_in_bytes
 * in memory. 0, or AB_EIO when cpuacct.usage or memory.usage_in_bytes cannot
 * be read. */
int lrt_usage_cgroup_v1(const char *memory, const char *cpuacct, struct rt_usage *u);

#endif
