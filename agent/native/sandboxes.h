/* Native sandbox API (reference §4.2, the small subset operators and tests
 * need) on the agent's :8080, authenticated with agent_auth_request:
 *   POST   /v1/sandboxes         {poolName, timeout?, allowInternetAccess?, envVars?,
 *                                 metadata?, namespace? (admins)} → 201 {sandbox} once armed
 *   GET    /v1/sandboxes         ?poolName=&limit=&offset= → {items,total,limit,offset}
 *   GET    /v1/sandboxes/{id}    → {sandbox}
 *   DELETE /v1/sandboxes/{id}    → 202 {sandboxId,namespace,poolName,podName,status}
 *   GET    /v1/envs              → {items,total}: envs with their pools' status
 * Errors are {"error": ...}, statuses from claim_status(CLAIM_NATIVE, …).
 * The routes are added by native_sandboxes_add_routes (native.h). Loop
 * thread only. */
#ifndef AGENTBOX_AGENT_NATIVE_SANDBOXES_H
#define AGENTBOX_AGENT_NATIVE_SANDBOXES_H

#include "agent/native/native.h"

#include <stdbool.h>

struct agent_principal;

/* The native API's one ownership check (DESIGN §11): an admin touches every
 * sandbox; a tenant only those claimed by its own (team, user) in its own
 * namespace. Anything else is answered 404, as if it did not exist. */
bool native_may_touch(const struct agent_principal *p, const char *ns, const char *team,
                      const char *owner);

#endif
