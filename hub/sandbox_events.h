/* Sandbox lifecycle data for the console (DESIGN §9, `sandboxes` table).
 *
 *   hub service (tunnel only):
 *     POST /internal/v1/sandbox-events {"events": [{type: claimed|armed|released|failed,
 *          id, namespace, env, pool, team, user, metadata?, reason?, assertion?, at (ms)}]}
 *          → 204; the calling cluster owns the ids (events for another cluster's ids are
 *          skipped); only a claim makes a row, and only with the assertion the hub made
 *          for the calling cluster of the event's team/user/namespace (else dropped,
 *          reason "assertion"); later events update the row and need none
 *     * /internal/v1/public/{*rest}  agents' bridge into the public API (public_bridge.c)
 *   console (dashboard-api/sandboxes.c), authenticated like /api/v1:
 *     GET /api/v1/sandboxes, GET /api/v1/statistics/sandboxes
 * Loop thread; storage on database workers. */
#ifndef AGENTBOX_HUB_SANDBOX_EVENTS_H
#define AGENTBOX_HUB_SANDBOX_EVENTS_H

#include <stddef.h>

struct hub;

#define SANDBOX_EVENTS_BATCH_MAX 256

/* Adds the two internal routes (events, bridge; the bridge authenticates
 * with h->auth); before hub_start. The console's listings are
 * dashboard-api/sandboxes.c. */
int hub_sandboxes_add_routes(struct hub *h, char *err, size_t errlen);

int public_bridge_add_routes(struct hub *h, char *err, size_t errlen);

#endif
