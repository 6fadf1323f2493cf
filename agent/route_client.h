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
 *   if (fed_route(fed, ns, env, group, routed, ctx) != 0) claim locally;
 *
 * The create paths reach it through agent/claim.h (claim_place). Owner:
 * struct agent (fed_new in agent_init, fed_free first in agent_fini). It
 * also owns the capacity reporter (reporter.h). Loop thread only. */
#ifndef AGENTBOX_AGENT_ROUTE_CLIENT_H
#define AGENTBOX_AGENT_ROUTE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include "agentbox/common.h"

struct agent_auth;
struct hub_link;
struct http_route;
struct loop;
struct rt;
struct fed;

#define FED_ROUTE_TIMEOUT_MS 2000

enum fed_action {
    FED_LOCAL = 1, /* serve here (steps 1 and 3, and every fallback with idle) */
    FED_FORWARD,   /* forward to cluster::pool (steps 2 and 4) */
    FED_QUEUE,     /* nobody can serve: claim here and wait in the queue (step 5) */
};

struct fed_decision {
    int step; /* 1..5 */
    enum fed_action action;
    char cluster[AB_CLUSTER_ID_BUF]; /* FED_FORWARD: the target; else this cluster */
    char pool[64];                   /* FED_FORWARD: the member pool to pin */
    int idle;                        /* FED_FORWARD: the target's idle as the hub saw it */
    bool from_hub;                   /* false: decided here (step 1 or a fallback) */
    char reason[192];
};

/* d is valid during the call only. */
typedef void (*fed_route_fn)(const struct fed_decision *d, void *arg);

/* Decides where a create of bare env `env` in namespace ns (scaling group
 * group: NULL or "" for any member) runs. Returns 0 and calls done exactly
 * once, later on the loop thread (never before fed_route returns), within
 * FED_ROUTE_TIMEOUT_MS; arg must stay valid until then. Returns AB_EINVAL
 * (a name missing or over 63 bytes) or AB_ENOMEM without calling done. */
int fed_route(struct fed *f, const char *ns, const char *env, const char *group, fed_route_fn done,
              void *arg);

/* What the placement may call; borrowed, must outlive it. */
struct fed_deps {
    struct loop *loop;
    struct rt *rt; /* NULL: no local idle */
    struct hub_link *hub;
    struct agent_auth *auth; /* the diagnostic route's callers */
    const char *cluster;     /* this cluster's id */
};

/* Starts the reporter; the placement into *out. 0, or AB_ENOMEM (the only
 * failure today) with err set and *out NULL. */
int fed_new(const struct fed_deps *deps, struct fed **out, char *err, size_t errlen);
/* GET /v1/federation/route?env=&scalingGroup=&namespace= for the native API
 * (a diagnostic: runs fed_route for the caller's namespace; an admin key
 * may name another). Valid until fed_free. */
const struct http_route *fed_routes(const struct fed *f, size_t *n);
/* Stops the reporter; routes in flight are dropped without their callback.
 * Before the tunnel stops (its end delivers hub answers still due). NULL is fine. */
void fed_free(struct fed *f);

#endif
