/* The hub's federation (federation.c): the registry (fed_registry.h) wired
 * into the hub: REPORT frames and session ends from the tunnel, the stale
 * sweep and federation_capacity snapshots every FED_SWEEP_MS, and the one
 * placement of bare-name creates (federation_place, route_api.c).
 * Loop thread. */
#ifndef AGENTBOX_HUB_FEDERATION_H
#define AGENTBOX_HUB_FEDERATION_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "hub/fed_registry.h"

struct hub;
struct loop;
struct db_pool;

struct federation;

/* What the hub's federation may use. */
struct clusters;

struct federation_deps {
    struct loop *loop;  /* not owned: the sweep timer */
    struct db_pool *db; /* not owned: federation_capacity snapshots; NULL: none */
    /* not owned: each cluster's assigned namespaces; a REPORT record for any
     * other is dropped and counted (agentbox_federation_records_dropped_total).
     * NULL: every record is kept (unit tests). */
    struct clusters *clusters;
};

/* Creates the registry and starts the sweep (stale records out, snapshot
 * every FED_SWEEP_MS). NULL with err when out of memory. */
struct federation *federation_new(const struct federation_deps *d, char *err, size_t errlen);
/* Stops the timer and frees the registry. Call after db_pool_free (a
 * snapshot job's done() uses it) and after the tunnel server is gone (its
 * hooks below point here). NULL is fine. */
void federation_free(struct federation *f);
/* Tunnel hooks (tunnel_server_set_report_hook / _session_end_hook), arg = f:
 * a REPORT frame replaces the cluster's records; a session end drops them. */
void federation_on_report(void *arg, const char *cluster, json_t *msg);
void federation_on_session_end(void *arg, const char *cluster);
struct fed_registry *federation_registry(struct federation *f);
/* The hub's clock for records (monotonic ms). */
int64_t federation_now_ms(void);

/* route_api.c: adds the routes above. */
int route_api_add_routes(struct hub *h, struct federation *f, char *err, size_t errlen);
/* The one placement of a bare-name create (DESIGN §6), route_api.c: the
 * agents' step 2 (POST /internal/v1/route, q->local = the origin) and the
 * hub's front door (q->local NULL) both call it. fed_registry_decide, then
 * agentbox_route_decisions_total{step} and a debug line. f NULL: no cluster
 * (d->cluster ""). */
void federation_place(struct federation *f, const struct route_query *q, struct route_decision *d);

#endif
