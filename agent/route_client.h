/* The origin's side of the bare-name placement (DESIGN §6) for the create
 * paths (E2B and native):
 *
 *   1. the runtime has idle for (namespace, env, group) → local, decided
 *      here with no hub round trip;
 *   2–5. otherwise the hub decides (`hub` service, POST /internal/v1/route):
 *      forward pinned as cluster::pool, stay local (the autoscaler reacts),
 *      or queue locally.
 *   No tunnel, the hub does not answer within FED_ROUTE_TIMEOUT_MS, or its
 *   answer is unusable → local (step 5: the claim parks in the local queue).
 *
 * Only for prefix-less names: `cluster::env` and `cluster::pool` never ask
 * (a forwarded create arrives pinned, so it can never hop twice).
 *
 * Usage from a create handler (the E2B create path):
 *
 *   static void routed(const struct fed_decision *d, void *arg) {
 *       if (d->action == FED_FORWARD)   // relay the create with templateID
 *           ...                          // rewritten to d->cluster "::" d->pool
 *       else                             // FED_LOCAL or FED_QUEUE: rt_claim here
 *           ...
 *   }
 *   if (fed_route(a, ns, env, group, routed, ctx) != 0) claim locally;
 *
 * Loop thread only. */
#ifndef AGENTBOX_AGENT_ROUTE_CLIENT_H
#define AGENTBOX_AGENT_ROUTE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

struct agent;

#define FED_ROUTE_TIMEOUT_MS 2000

enum fed_action {
    FED_LOCAL = 1, /* serve here (steps 1 and 3, and every fallback with idle) */
    FED_FORWARD,   /* forward to cluster::pool (steps 2 and 4) */
    FED_QUEUE,     /* nobody can serve: claim here and wait in the queue (step 5) */
};

struct fed_decision {
    int step; /* 1..5 */
    enum fed_action action;
    char cluster[25]; /* FED_FORWARD: the target; else this cluster */
    char pool[64];    /* FED_FORWARD: the member pool to pin */
    int idle;         /* FED_FORWARD: the target's idle as the hub saw it */
    bool from_hub;    /* false: decided here (step 1 or a fallback) */
    char reason[192];
};

/* d is valid during the call only. */
typedef void (*fed_route_fn)(const struct fed_decision *d, void *arg);

/* Decides where a create of bare env `env` in namespace ns (scaling group
 * group: NULL or "" for any member) runs. Returns 0 and calls done exactly
 * once, later on the loop thread (never before fed_route returns), within
 * FED_ROUTE_TIMEOUT_MS; arg must stay valid until then. Returns AB_EINVAL
 * (a name missing or over 63 bytes) or AB_ENOMEM without calling done. */
int fed_route(struct agent *a, const char *ns, const char *env, const char *group,
              fed_route_fn done, void *arg);

/* Starts the reporter and adds GET /v1/federation/route?env=&scalingGroup=&namespace=
 * to the native API (a diagnostic: runs fed_route for the caller's namespace;
 * an admin key may name another). In agent_start before the routers are built. */
int fed_agent_start(struct agent *a, char *err, size_t errlen);
/* Stops the reporter; routes in flight are dropped without their callback.
 * First thing in agent_fini. Safe when never started. */
void fed_agent_stop(void);

#endif
