/* Capacity reports to the hub. See reporter.h.
 *
 * autoscaling and headroom are the runtime's (struct rt_pool): a member of
 * a group with the autoscaler on reports how far it may still grow (-1
 * unbounded, 0 at its ceiling or saturated), so the hub's routing steps 3
 * and 4 (scale here, forward to a cluster that can scale) see it; any other
 * member reports false / 0 and attracts creates only with idle sandboxes.
 * desired is what the pool wants to exist: its replicas, every state
 * counted. claims is how many creates the pool ever queued: the hub pays
 * back the idle it promised away (its reservations) by how far claims
 * moved since the last report, so a report sampled between a forward and
 * its claim does not free the promised place twice. */
#include "agent/reporter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/hub_link.h"
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/tunnel.h"
#include "agent/runtime/runtime.h"

struct fed_reporter {
    struct fed_reporter_deps d;
    struct loop_timer poll, debounce;
    bool debounce_armed;
    int64_t last_full_ms;
    int64_t epoch; /* session the last report went to */
    uint64_t sent_sig;
    uint64_t seq;
    bool warned_limit;
};

struct build {
    json_t *recs;
    uint64_t sig;
    size_t n;
    bool truncated;
};

static uint64_t mix(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (h ^ 0xffu) * 1099511628211ull;
}

static void add_pool(void *arg, const struct rt_pool *p)
{
    struct build *b = arg;
    char idle[96];
    if (p->env[0] == '\0')
        return; /* a standalone pool is not an env member: federation pairs envs */
    if (b->n >= FED_REPORT_RECORDS_LIMIT) {
        b->truncated = true;
        return;
    }
    /* the digest moves with headroom too: a member reaching its ceiling must
     * stop attracting forwarded creates before the next full report; and
     * with running: a claim the pool refilled within one poll leaves idle as
     * it was, yet the hub holds a reservation for it until a report comes
     * (a held one made a burst right after find one idle too few and queue
     * a create on a cluster with none); and with claims, which the hub pays
     * its reservations back by: a claim, a refill and a kill within one poll
     * leave idle and running as they were */
    snprintf(idle, sizeof(idle), "%d/%d/%d/%d/%llu", p->status.idle, p->status.running,
             p->autoscaling ? 1 : 0, p->headroom, (unsigned long long)p->claims);
    b->sig = mix(mix(mix(mix(mix(b->sig, p->ns), p->env), p->name), p->scaling_group), idle);
    int desired = p->status.replicas;
    if (!b->recs) { /* a probe: the digest only */
        b->n++;
        return;
    }
    json_array_append_new(b->recs,
                          json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:b,s:i,s:I,s:I,s:i}",
                                    "namespace", p->ns, "env", p->env, "pool", p->name,
                                    "scalingGroup", p->scaling_group, "idle", p->status.idle,
                                    "running", p->status.running, "pending", p->status.pending,
                                    "desired", desired, "autoscaling", p->autoscaling, "headroom",
                                    p->headroom, "saturatedForMs", (json_int_t)p->saturated_for_ms,
                                    "claims", (json_int_t)(p->claims & INT64_MAX), "ageMs", 0));
    b->n++;
}

json_t *fed_reporter_build(struct rt *rt, uint64_t seq, uint64_t *sig)
{
    struct build b = {json_array(), 14695981039346656037ull, 0, false};
    if (!b.recs)
        return NULL;
    if (rt)
        rt_list_pools(rt, NULL, add_pool, &b);
    if (sig)
        *sig = b.sig;
    if (b.truncated)
        LOG_WARN("more env members than one capacity report carries; the rest are not "
                 "reported",
                 "limit", "10000");
    return json_pack("{s:b,s:I,s:o}", "full", 1, "seq", (json_int_t)seq, "records", b.recs);
}

/* The digest alone, for the 200 ms poll (no JSON built). */
static uint64_t signature(struct rt *rt)
{
    struct build b = {NULL, 14695981039346656037ull, 0, false};
    rt_list_pools(rt, NULL, add_pool, &b);
    return b.sig;
}

static void send_report(struct fed_reporter *r, const char *why)
{
    struct tun_session *s = hub_link_session(r->d.hub);
    if (!s || !r->d.rt)
        return;
    uint64_t sig;
    json_t *msg = fed_reporter_build(r->d.rt, r->seq, &sig);
    if (!msg)
        return;
    int rc = tun_session_send_json(s, TUN_REPORT, msg);
    json_decref(msg);
    if (rc != 0) {
        /* AB_EBUSY: the control queue is full; the next tick tries again */
        LOG_DEBUG("capacity report not sent", "reason", why, "error", ab_strerror(rc));
        return;
    }
    r->seq++;
    r->sent_sig = sig;
    r->epoch = hub_link_epoch(r->d.hub);
    r->last_full_ms = ab_now_ms();
    LOG_DEBUG("capacity report sent", "reason", why);
}

static void debounce_tick(struct loop_timer *t)
{
    struct fed_reporter *r = t->arg;
    r->debounce_armed = false;
    send_report(r, "idle changed");
}

static void poll_tick(struct loop_timer *t)
{
    struct fed_reporter *r = t->arg;
    if (hub_link_session(r->d.hub) && r->d.rt) {
        int64_t now = ab_now_ms();
        if (hub_link_epoch(r->d.hub) != r->epoch) {
            send_report(r, "session up");
        } else if (now - r->last_full_ms >= FED_REPORT_INTERVAL_MS) {
            send_report(r, "interval");
        } else if (!r->debounce_armed) {
            if (signature(r->d.rt) != r->sent_sig) {
                r->debounce_armed = true;
                loop_timer_start(r->d.loop, &r->debounce, FED_REPORT_DEBOUNCE_MS, debounce_tick, r);
            }
        }
    }
    loop_timer_start(r->d.loop, &r->poll, FED_REPORT_POLL_MS, poll_tick, r);
}

int fed_reporter_start(const struct fed_reporter_deps *deps, struct fed_reporter **out, char *err,
                       size_t errlen)
{
    struct fed_reporter *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errlen, "out of memory starting the capacity reporter");
        return AB_ENOMEM;
    }
    r->d = *deps;
    loop_timer_start(r->d.loop, &r->poll, FED_REPORT_POLL_MS, poll_tick, r);
    *out = r;
    return 0;
}

void fed_reporter_stop(struct fed_reporter *r)
{
    if (!r)
        return;
    loop_timer_cancel(&r->poll);
    loop_timer_cancel(&r->debounce);
    free(r);
}
