/* The autoscaler's decisions. See autoscale.h for the rules. Times are
 * positive milliseconds; 0 in a field of the state means "never". */
#include "agent/autoscale.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"

static const char *mode_name(enum rt_scale_mode m)
{
    return m == RT_SCALE_CONSERVATIVE ? "Conservative"
           : m == RT_SCALE_AGGRESSIVE ? "Aggressive"
                                      : "Default";
}

int as_step_up(enum rt_scale_mode mode, int n, int32_t max)
{
    int step;

    if (n < 0)
        n = 0;
    switch (mode) {
    case RT_SCALE_CONSERVATIVE:
        step = 1;
        break;
    case RT_SCALE_AGGRESSIVE:
        /* to min(2N, max): doubling, so +N, and +1 from nothing */
        step = n > 0 ? n : 1;
        break;
    default:
        step = (n + 1) / 2; /* ceil(N/2) */
        if (step < 1)
            step = 1;
        break;
    }
    if (max >= 0 && n + step > max)
        step = max > n ? max - n : 0;
    return step;
}

int as_step_down(enum rt_scale_mode mode, int n)
{
    if (n <= 0)
        return 0;
    switch (mode) {
    case RT_SCALE_CONSERVATIVE:
        return 1;
    case RT_SCALE_AGGRESSIVE:
        return n; /* every candidate at once (the floors still hold) */
    default:
        return n / 2 > 1 ? n / 2 : 1;
    }
}

int as_idle_candidates(const struct rt_scale_member *m, int64_t timeout_ms, int64_t now_ms)
{
    int n = 0;

    for (int i = 0; i < m->nidle && i < RT_IDLE_SAMPLES_MAX; i++)
        if (now_ms - m->idle_since_ms[i] >= timeout_ms)
            n++;
    return n;
}

bool as_member_saturated(const struct rt_scale_member *m, const struct rt_scale_policy *p,
                         int64_t now_ms)
{
    return m->saturated_ms > 0 && now_ms - m->saturated_ms < p->saturation_ms;
}

/* Member order for scale-up (lower up_priority first) and scale-down
 * (higher down_priority first); ties by name (one cluster per snapshot). */
static int up_cmp(const struct rt_scale_member *x, const struct rt_scale_member *y)
{
    if (x->up_priority != y->up_priority)
        return x->up_priority < y->up_priority ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int down_cmp(const struct rt_scale_member *x, const struct rt_scale_member *y)
{
    if (x->down_priority != y->down_priority)
        return x->down_priority > y->down_priority ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* idx gets the member indexes of g in cmp's order (insertion sort: at most
 * RT_GROUP_MEMBERS_MAX, and stable). */
static void order(const struct rt_scale_group *g, int *idx,
                  int (*cmp)(const struct rt_scale_member *, const struct rt_scale_member *))
{
    for (int i = 0; i < g->nmembers; i++) {
        int j = i;
        while (j > 0 && cmp(&g->members[idx[j - 1]], &g->members[i]) > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
}

/* A member's floor: its minReplicas, never above its maxReplicas (a member
 * declaring min > max would otherwise flap between the two every tick). */
static int floor_of(const struct rt_scale_member *m)
{
    int f = m->min_replicas > 0 ? m->min_replicas : 0;
    return m->max_replicas >= 0 && f > m->max_replicas ? m->max_replicas : f;
}

/* Room member m has to grow from r (INT32_MAX: unbounded). */
static int room_of(const struct rt_scale_member *m, int r)
{
    if (m->max_replicas < 0)
        return INT32_MAX;
    return m->max_replicas > r ? m->max_replicas - r : 0;
}

/* Adds up to want replicas over the members in up order, skipping saturated
 * ones when skip_saturated; returns how many were added. */
static int grow(const struct rt_scale_group *g, int *rep, int want, bool skip_saturated,
                int64_t now_ms)
{
    int idx[RT_GROUP_MEMBERS_MAX], added = 0;

    order(g, idx, up_cmp);
    for (int k = 0; k < g->nmembers && added < want; k++) {
        int i = idx[k];
        const struct rt_scale_member *m = &g->members[i];
        if (skip_saturated && as_member_saturated(m, &g->policy, now_ms))
            continue;
        int room = room_of(m, rep[i]), take = want - added;
        if (take > room)
            take = room;
        rep[i] += take;
        added += take;
    }
    return added;
}

/* Removes up to want replicas in down order, each member to at most
 * cap[i] fewer (NULL: to its floor); returns how many were removed. */
static int shrink(const struct rt_scale_group *g, int *rep, int want, const int *cap)
{
    int idx[RT_GROUP_MEMBERS_MAX], removed = 0;

    order(g, idx, down_cmp);
    for (int k = 0; k < g->nmembers && removed < want; k++) {
        int i = idx[k];
        int can = rep[i] - floor_of(&g->members[i]), take = want - removed;
        if (cap && can > cap[i])
            can = cap[i];
        if (can <= 0)
            continue;
        if (take > can)
            take = can;
        rep[i] -= take;
        removed += take;
    }
    return removed;
}

static int sum(const int *rep, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += rep[i];
    return s;
}

static long long secs(int64_t ms)
{
    return (long long)((ms + 999) / 1000);
}

static void keep(struct as_decision *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void keep(struct as_decision *out, const char *fmt, ...)
{
    va_list ap;

    out->kind = AS_KEEP;
    out->direction = AS_NONE;
    va_start(ap, fmt);
    vsnprintf(out->reason, sizeof(out->reason), fmt, ap);
    va_end(ap);
}

/* 1: members and the group brought inside their bounds. */
static bool bounds(const struct rt_scale_group *g, int *rep, int64_t now_ms, char *why,
                   size_t whylen)
{
    const struct rt_scale_policy *p = &g->policy;
    int n = g->nmembers, total;
    bool changed = false;

    for (int i = 0; i < n; i++) {
        const struct rt_scale_member *m = &g->members[i];
        if (rep[i] < floor_of(m)) {
            snprintf(why, whylen, "member %s below its minReplicas %d", m->name, m->min_replicas);
            rep[i] = floor_of(m);
            changed = true;
        } else if (m->max_replicas >= 0 && rep[i] > m->max_replicas) {
            snprintf(why, whylen, "member %s above its maxReplicas %d", m->name, m->max_replicas);
            rep[i] = m->max_replicas;
            changed = true;
        }
    }
    total = sum(rep, n);
    if (total < p->min_replicas) {
        /* saturated members too: the floor is the operator's word */
        if (grow(g, rep, p->min_replicas - total, false, now_ms) > 0) {
            snprintf(why, whylen, "group below its minReplicas %d", p->min_replicas);
            changed = true;
        }
    } else if (p->max_replicas >= 0 && total > p->max_replicas) {
        if (shrink(g, rep, total - p->max_replicas, NULL) > 0) {
            snprintf(why, whylen, "group above its maxReplicas %d", p->max_replicas);
            changed = true;
        }
    }
    return changed;
}

static int find_member(const struct rt_scale_group *g, const char *name)
{
    for (int i = 0; i < g->nmembers; i++)
        if (!strcmp(g->members[i].name, name))
            return i;
    return -1;
}

static void scaled(struct as_decision *out, const int *rep, int n, enum as_direction dir)
{
    out->kind = AS_SCALED;
    out->direction = dir;
    out->to = sum(rep, n);
    for (int i = 0; i < n; i++)
        out->replicas[i] = rep[i];
}

/* 3, second half: the protection window of a marked scale-down ended. */
static void commit_marks(const struct rt_scale_group *g, struct as_state *st, int *rep,
                         int64_t now_ms, struct as_decision *out)
{
    const struct rt_scale_policy *p = &g->policy;
    int n = g->nmembers, removed = 0, kept = 0, cap[RT_GROUP_MEMBERS_MAX] = {0};
    int group_room = sum(rep, n) - (p->min_replicas > 0 ? p->min_replicas : 0);

    for (int k = 0; k < st->nmarks; k++) {
        int i = find_member(g, st->marks[k].name);
        if (i < 0)
            continue; /* the member went away */
        const struct rt_scale_member *m = &g->members[i];
        if (m->last_create_ms > st->mark_ms) {
            kept += st->marks[k].n; /* claimed from while protected: keeps them */
            continue;
        }
        int c = as_idle_candidates(m, p->down_idle_timeout_ms, now_ms);
        cap[i] = c < st->marks[k].n ? c : st->marks[k].n;
        kept += st->marks[k].n - cap[i];
    }
    if (group_room > 0)
        removed = shrink(g, rep, group_room, cap);
    st->mark_ms = 0;
    st->nmarks = 0;
    if (removed > 0) {
        st->last_down_ms = now_ms;
        scaled(out, rep, n, AS_DOWN);
        snprintf(out->reason, sizeof(out->reason),
                 "scale-down: %d sandbox(es) idle for %llds and unclaimed through the %llds "
                 "protection window removed (%s, %d -> %d)%s",
                 removed, secs(p->down_idle_timeout_ms), secs(p->protection_ms), mode_name(p->mode),
                 out->from, out->to, kept > 0 ? "; the rest were claimed meanwhile" : "");
        return;
    }
    out->kind = AS_CANCELLED;
    out->direction = AS_NONE;
    snprintf(out->reason, sizeof(out->reason),
             "scale-down cancelled: the %d marked sandbox(es) were claimed during the %llds "
             "protection window",
             kept, secs(p->protection_ms));
}

void as_decide(const struct rt_scale_group *g, struct as_state *st, int64_t now_ms,
               struct as_decision *out)
{
    const struct rt_scale_policy *p = &g->policy;
    int n = g->nmembers < RT_GROUP_MEMBERS_MAX ? g->nmembers : RT_GROUP_MEMBERS_MAX;
    int rep[RT_GROUP_MEMBERS_MAX], idle = 0, starting = 0, pending = 0;
    int64_t last_create = 0;
    char why[160] = "";

    memset(out, 0, sizeof(*out));
    for (int i = 0; i < n; i++) {
        const struct rt_scale_member *m = &g->members[i];
        rep[i] = out->replicas[i] = m->replicas;
        idle += m->status.idle;
        starting += m->status.starting;
        /* desired but not there yet (a raise the runtime has not acted
         * on): on its way, like a starting one, or a slow runtime gets a
         * second step for the same claim; not on a saturated member, whose
         * runtime has no room to make it */
        int live = m->status.idle + m->status.running + m->status.starting;
        if (m->replicas > live && !as_member_saturated(m, p, now_ms))
            starting += m->replicas - live;
        pending += m->status.pending;
        if (m->last_create_ms > last_create)
            last_create = m->last_create_ms;
    }
    out->from = out->to = sum(rep, n);
    if (!p->enabled) {
        memset(st, 0, sizeof(*st));
        keep(out, "autoscaling is off for this group");
        return;
    }
    if (idle + starting == 0) {
        if (!st->idle_zero_since_ms)
            st->idle_zero_since_ms = now_ms;
    } else {
        st->idle_zero_since_ms = 0;
    }

    /* 1. bounds, at once */
    if (bounds(g, rep, now_ms, why, sizeof(why))) {
        int to = sum(rep, n);
        st->mark_ms = 0;
        st->nmarks = 0;
        scaled(out, rep, n, to >= out->from ? AS_UP : AS_DOWN);
        if (to > out->from)
            st->last_up_ms = now_ms;
        else if (to < out->from)
            st->last_down_ms = now_ms;
        snprintf(out->reason, sizeof(out->reason), "bounds: %s (%d -> %d)", why, out->from,
                 out->to);
        return;
    }

    /* 2. scale-up */
    int uncovered = pending - idle - starting;
    bool reactive = uncovered > 0;
    bool proactive = p->idle_threshold_ms > 0 && st->idle_zero_since_ms &&
                     now_ms - st->idle_zero_since_ms >= p->idle_threshold_ms &&
                     (p->quiet_window_ms == 0 ||
                      (last_create > 0 && now_ms - last_create <= p->quiet_window_ms));
    if (reactive || proactive) {
        st->mark_ms = 0; /* demand again: a marked scale-down is off */
        st->nmarks = 0;
        if (st->last_up_ms && now_ms - st->last_up_ms < p->cooldown_ms) {
            keep(out, "scale-up waits for the cooldown: %llds of %llds left",
                 secs(p->cooldown_ms - (now_ms - st->last_up_ms)), secs(p->cooldown_ms));
            return;
        }
        int step = as_step_up(p->mode, out->from, p->max_replicas);
        int added = step > 0 ? grow(g, rep, step, true, now_ms) : 0;
        if (added == 0) {
            keep(out,
                 "cannot scale up: the group is at its maxReplicas or every member is at its "
                 "maxReplicas or saturated (%d claim(s) waiting)",
                 pending);
            return;
        }
        st->last_up_ms = now_ms;
        scaled(out, rep, n, AS_UP);
        if (reactive)
            snprintf(out->reason, sizeof(out->reason),
                     "scale-up: %d claim(s) waiting with %d idle and %d starting; %s step +%d "
                     "(%d -> %d)",
                     pending, idle, starting, mode_name(p->mode), added, out->from, out->to);
        else
            snprintf(out->reason, sizeof(out->reason),
                     "scale-up: no idle sandbox for %llds, a create %llds ago; %s step +%d "
                     "(%d -> %d)",
                     secs(now_ms - st->idle_zero_since_ms), secs(now_ms - last_create),
                     mode_name(p->mode), added, out->from, out->to);
        return;
    }

    /* 3. scale-down */
    if (pending > 0) {
        keep(out, "%d claim(s) waiting, covered by idle or starting sandboxes", pending);
        return;
    }
    if (st->mark_ms) {
        if (now_ms - st->mark_ms < p->protection_ms) {
            keep(out, "scale-down marked: protected for %llds more",
                 secs(p->protection_ms - (now_ms - st->mark_ms)));
            return;
        }
        commit_marks(g, st, rep, now_ms, out);
        return;
    }
    int64_t last = st->last_up_ms > st->last_down_ms ? st->last_up_ms : st->last_down_ms;
    if (last && now_ms - last < p->stabilization_ms) {
        keep(out, "stabilizing: %llds of %llds since the last scale",
             (long long)((now_ms - last) / 1000), secs(p->stabilization_ms));
        return;
    }
    int cap[RT_GROUP_MEMBERS_MAX], cands = 0;
    for (int i = 0; i < n; i++) {
        cap[i] = as_idle_candidates(&g->members[i], p->down_idle_timeout_ms, now_ms);
        cands += cap[i];
    }
    int floor = p->min_replicas > 0 ? p->min_replicas : 0;
    int want = as_step_down(p->mode, out->from);
    if (want > out->from - floor)
        want = out->from - floor;
    if (want > cands)
        want = cands;
    int removed = want > 0 ? shrink(g, rep, want, cap) : 0;
    if (removed == 0) {
        keep(out, "steady: no sandbox idle for %llds beyond the floors",
             secs(p->down_idle_timeout_ms));
        return;
    }
    if (p->protection_ms > 0) {
        st->mark_ms = now_ms;
        st->nmarks = 0;
        for (int i = 0; i < n; i++) {
            if (rep[i] == g->members[i].replicas)
                continue;
            ab_strlcpy(st->marks[st->nmarks].name, g->members[i].name, sizeof(st->marks[0].name));
            st->marks[st->nmarks++].n = g->members[i].replicas - rep[i];
        }
        out->kind = AS_MARKED;
        out->direction = AS_NONE;
        snprintf(out->reason, sizeof(out->reason),
                 "scale-down: %d sandbox(es) idle for %llds marked; removed in %llds unless "
                 "claimed (%s)",
                 removed, secs(p->down_idle_timeout_ms), secs(p->protection_ms),
                 mode_name(p->mode));
        return;
    }
    st->last_down_ms = now_ms;
    scaled(out, rep, n, AS_DOWN);
    snprintf(out->reason, sizeof(out->reason),
             "scale-down: %d sandbox(es) idle for %llds removed (%s, %d -> %d)", removed,
             secs(p->down_idle_timeout_ms), mode_name(p->mode), out->from, out->to);
}
