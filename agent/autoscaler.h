/* The agent's autoscaler loop (reference §6.6): every second it takes the
 * runtime's scaling-group snapshots (rt_scale_groups), asks the pure
 * decisions of agent/autoscale.h, hands each changed member's replicas to
 * the runtime (rt_scale_set) and records an Event per decision through its
 * event hook (the native env events; the kube runtime adds a Kubernetes
 * Event itself), counting agentbox_autoscaler_decisions_total{env,group,
 * direction}. A group's state lives here while the runtime reports the
 * group and is dropped the first tick it does not (garbage collection of
 * groups no member declares any more). Loop thread only. */
#ifndef AGENTBOX_AGENT_AUTOSCALER_H
#define AGENTBOX_AGENT_AUTOSCALER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct loop;
struct rt;
struct autoscaler;

typedef void (*autoscaler_event_fn)(void *arg, const char *ns, const char *env, const char *reason,
                                    const char *message);
typedef bool (*autoscaler_active_fn)(void *arg);

/* What the autoscaler may call; borrowed, must outlive it. */
struct autoscaler_deps {
    struct loop *loop;
    struct rt *rt;             /* without RT_CAP_AUTOSCALE the ticks find no groups */
    autoscaler_event_fn event; /* NULL: no events */
    void *event_arg;
    autoscaler_active_fn active; /* NULL: always; else decide only while it says true */
    void *active_arg;
    int64_t interval_ms; /* 0: 1000 */
};

#define AUTOSCALER_GROUPS_MAX 4096

/* What the groups API shows of a group's last decision. */
struct autoscaler_info {
    int64_t last_up_wall_ms;   /* 0: never */
    int64_t last_down_wall_ms; /* 0: never */
    int64_t decided_wall_ms;   /* when reason was written */
    bool marked;               /* a scale-down waits for its protection window */
    char reason[256];
};

/* Starts the timer. NULL on out of memory. */
struct autoscaler *autoscaler_new(const struct autoscaler_deps *deps);
/* Cancels the timer and frees. NULL is fine. */
void autoscaler_free(struct autoscaler *as);
/* One tick now (tests, and the timer). */
void autoscaler_tick(struct autoscaler *as);
/* 0 and *out for a group it keeps state for; AB_ENOENT otherwise. */
int autoscaler_info(const struct autoscaler *as, const char *ns, const char *env, const char *group,
                    struct autoscaler_info *out);

#endif
