/* The hub as the one address (DESIGN §6–§8): the E2B API at /e2b and the data
 * plane at /data, served by relaying to the owning cluster over its tunnel.
 *
 *   /e2b/...   authenticated (auth_request, AUTH_SURFACE_E2B), then:
 *              - id-addressed calls → the id's cluster's `e2b` service;
 *              - `cluster::x` creates → that cluster, verbatim;
 *              - bare creates → placed here by federation_place, the code
 *                that answers the agents' step 2, with no local cluster:
 *                steps 2 and 4, else park on the env's first cluster by id;
 *                sent as `cluster::pool` (`cluster::env` when parked),
 *                `//image` kept; no cluster offers the env → 400, as the
 *                agent's E2B create answers an unknown env;
 *              - GET /sandboxes, /v2/sandboxes, /templates → every connected
 *                cluster (at most E2B_FRONT_FANOUT at once, answered by
 *                E2B_FRONT_DEADLINE_MS with what arrived), merged here.
 *              /e2b/secrets stays with vault_api.c (a literal path: it wins).
 *   /data/...  not authenticated here (envd checks its access token): the
 *              target's id (E2b-Sandbox-Id / X-Sandbox-Id header, host
 *              <port>-<id>.…, or path /sandboxes/<id>/<port>/…) picks the
 *              cluster; the request, /data stripped, is streamed to that
 *              cluster's `data` service, which extracts the target again.
 *   data_listen (e2b_front_data_router): every request is /data's without
 *              the prefix, its host <port>-<id>.<domain> naming the sandbox:
 *              the host form the SDK builds from `domain`.
 *   `domain`   with data_domain set, the answers of id-addressed calls and
 *              creates carry it in place of the cluster's own (the SDK's
 *              envd, getHost and signed URLs then go through the hub).
 *   internal GET /internal/v1/federation/envs?namespace= → the fresh
 *              (cluster, env) pairs of a namespace other than the caller's
 *              cluster (the agent's GET /templates lists them as cluster::env).
 *
 * Loop thread only. */
#ifndef AGENTBOX_HUB_E2B_FRONT_H
#define AGENTBOX_HUB_E2B_FRONT_H

#include <stddef.h>

struct hub;
struct loop;
struct auth_ctx;
struct federation;
struct tunnel_server;
struct e2b_front;

#define E2B_FRONT_FANOUT 16           /* clusters asked at once by a merged list */
#define E2B_FRONT_DEADLINE_MS 5000    /* a merged list answers with what it has by then */
#define E2B_FRONT_BODY_MAX (16 << 20) /* one cluster's answer */

/* What the front door may use; none owned. */
struct e2b_front_deps {
    struct loop *loop;       /* merged lists' deadline timers */
    struct auth_ctx *auth;   /* every /e2b request is authenticated */
    struct federation *fed;  /* placement of bare creates, the envs listing */
    const char *data_domain; /* NULL or "": the clusters' `domain` passes through */
};

/* NULL when out of memory. */
struct e2b_front *e2b_front_new(const struct e2b_front_deps *d);
/* The tunnel server starts after the routes are added (hub_start): until
 * this is called the front answers 503 "the hub is starting". */
void e2b_front_set_tunnel(struct e2b_front *fr, struct tunnel_server *ts);
/* After the listeners are stopped and the tunnel server is gone (merged
 * lists in flight hold fr). NULL is fine. */
void e2b_front_free(struct e2b_front *fr);
/* Adds /e2b/..., /data/... and the internal route to h. Before hub_start. */
int e2b_front_add_routes(struct e2b_front *fr, struct hub *h, char *err, size_t errlen);
struct http_router;
/* A router sending every request to the data plane by its host (for the
 * data_listen listener); the caller frees it after stopping the listener.
 * NULL when out of memory. */
struct http_router *e2b_front_data_router(struct e2b_front *fr);

#endif
