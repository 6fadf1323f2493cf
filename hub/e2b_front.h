/* The hub as the one address (DESIGN §6–§8): the E2B API at /e2b and the data
 * plane at /data, served by relaying to the owning cluster over its tunnel.
 *
 *   /e2b/...   authenticated (auth_request, AUTH_SURFACE_E2B), then:
 *              - id-addressed calls → the id's cluster's `e2b` service;
 *              - `cluster::x` creates → that cluster, verbatim;
 *              - bare creates → placed here (fed_registry_decide with no
 *                local cluster: steps 2 and 4, else park on the env's first
 *                cluster by id) and sent as `cluster::pool` (`cluster::env`
 *                when parked), `//image` kept;
 *              - GET /sandboxes, /v2/sandboxes, /templates → every connected
 *                cluster (at most E2B_FRONT_FANOUT at once, answered by
 *                E2B_FRONT_DEADLINE_MS with what arrived), merged here.
 *              /e2b/secrets stays with vault_api.c (registered before these).
 *   /data/...  not authenticated here (envd checks its access token): the
 *              target's id (E2b-Sandbox-Id / X-Sandbox-Id header, host
 *              <port>-<id>.…, or path /sandboxes/<id>/<port>/…) picks the
 *              cluster; the request, /data stripped, is streamed to that
 *              cluster's `data` service, which extracts the target again.
 *   internal GET /internal/v1/federation/envs?namespace= → the fresh
 *              (cluster, env) pairs of a namespace other than the caller's
 *              cluster (the agent's GET /templates lists them as cluster::env).
 *
 * Loop thread only. */
#ifndef AGENTBOX_HUB_E2B_FRONT_H
#define AGENTBOX_HUB_E2B_FRONT_H

#include <stddef.h>

struct hub;

#define E2B_FRONT_FANOUT 16           /* clusters asked at once by a merged list */
#define E2B_FRONT_DEADLINE_MS 5000    /* a merged list answers with what it has by then */
#define E2B_FRONT_BODY_MAX (16 << 20) /* one cluster's answer */

/* Adds /e2b/..., /data/... and the internal route. After hub_identity_start
 * (its /e2b/secrets routes must match first), before hub_start. */
int hub_e2b_front_add_routes(struct hub *h, char *err, size_t errlen);

#endif
