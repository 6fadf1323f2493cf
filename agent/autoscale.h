/* The autoscaler's decisions (reference §6.6), as pure functions: one
 * group's snapshot (agent/runtime/runtime.h, struct rt_scale_group), the
 * state kept between decisions and a time in, each member's new replicas
 * and the reason out. No clock, no runtime, no globals: the tests drive it
 * with a simulated clock; agent/autoscaler.c runs it every second.
 *
 * The rules, in order, for an enabled group (a disabled one is left alone):
 *   1. Bounds: a member outside its min/max, or the members' sum outside the
 *      group's, is brought inside at once (no cooldown).
 *   2. Scale-up, when claims wait that neither idle nor starting sandboxes
 *      cover (reactive), or when idle + starting stayed 0 for the idle
 *      threshold and a create was seen within the quiet window (proactive;
 *      a 0 window disables that gate, a 0 threshold the trigger) — and the
 *      cooldown passed since the last scale-up. Step by mode over the
 *      group's replicas N: Conservative +1, Default +max(1, ceil(N/2)),
 *      Aggressive to min(2N, max) (at least +1). Members saturated within
 *      the saturation cooldown are skipped.
 *   3. Scale-down, with no claim waiting and the stabilization passed since
 *      the last scale (up or down): the sandboxes idle for the idle timeout
 *      are candidates; step mirrors the mode (Conservative -1, Default
 *      -max(1, floor(N/2)), Aggressive every candidate). With a protection
 *      window they are first marked; when it ends, a member claimed from
 *      meanwhile keeps its sandboxes, the others shrink by what is still
 *      a candidate.
 * Distribution: up by (up_priority, cluster, name) ascending, each member
 * filled to its max before the next; down by down_priority descending, then
 * (cluster, name) ascending, each member to its floor before the next.
 * The group's min/max bound the sum over this cluster's members. */
#ifndef AGENTBOX_AGENT_AUTOSCALE_H
#define AGENTBOX_AGENT_AUTOSCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/runtime/runtime.h"

#define AS_REASON_MAX 256

/* What a group remembers between decisions; zero it for a new group. */
struct as_state {
    int64_t last_up_ms;         /* 0: never */
    int64_t last_down_ms;       /* 0: never */
    int64_t idle_zero_since_ms; /* 0: idle + starting is not 0 */
    int64_t mark_ms;            /* a scale-down marked then, waiting its protection; 0: none */
    int nmarks;
    struct {
        char name[RT_NAME_MAX + 1];
        int n; /* sandboxes of that member marked */
    } marks[RT_GROUP_MEMBERS_MAX];
};

enum as_direction { AS_NONE = 0, AS_UP, AS_DOWN };

/* What happened at one decision. */
enum as_kind {
    AS_KEEP = 0,  /* nothing to do (reason says why, for the groups API) */
    AS_SCALED,    /* replicas changed: an Event */
    AS_MARKED,    /* scale-down candidates marked, protected for the window: an Event */
    AS_CANCELLED, /* a marked scale-down was cancelled by claims: an Event */
};

struct as_decision {
    enum as_kind kind;
    enum as_direction direction;        /* AS_SCALED: up or down */
    int replicas[RT_GROUP_MEMBERS_MAX]; /* per member of the snapshot, in its order */
    int from, to;                       /* the group's replicas before and after */
    char reason[AS_REASON_MAX];
};

/* The step for a group of n replicas: up (to at most max, -1 none) or down. */
int as_step_up(enum rt_scale_mode mode, int n, int32_t max);
int as_step_down(enum rt_scale_mode mode, int n);

/* How many of m's idle sandboxes were idle at least timeout_ms at now. */
int as_idle_candidates(const struct rt_scale_member *m, int64_t timeout_ms, int64_t now_ms);

/* Whether m is saturated at now under the policy's saturation cooldown. */
bool as_member_saturated(const struct rt_scale_member *m, const struct rt_scale_policy *p,
                         int64_t now_ms);

/* One decision for g at now_ms; updates *st. out->replicas is always filled
 * (unchanged members keep their replicas). */
void as_decide(const struct rt_scale_group *g, struct as_state *st, int64_t now_ms,
               struct as_decision *out);

#endif
