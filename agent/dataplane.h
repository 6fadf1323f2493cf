/* The data plane (DESIGN §8) on the agent's :8091: every request names a
 * sandbox and a port, and is proxied to it with bodies streamed both ways.
 *
 * Target, in order: the E2b-Sandbox-Id + E2b-Sandbox-Port headers (what the
 * SDK sends with E2B_SANDBOX_URL), the host <port>-<id>.<data_domain>, the
 * path /sandboxes/<id>/<port>/... (prefix stripped). The id's cluster picks
 * the way: this cluster → the sandbox's envd over its unix socket; another
 * cluster → a `relay` stream through the hub to that cluster's `data`
 * service. Errors are JSON {"error": ...}: 400 for a bad target, 502 for a
 * sandbox that is unknown, not healthy or unreachable.
 *
 * Owner: struct agent (dataplane_new in agent_init, dataplane_free after the
 * listeners stopped). Loop thread only. */
#ifndef AGENTBOX_AGENT_DATAPLANE_H
#define AGENTBOX_AGENT_DATAPLANE_H

#include "agent/dataplane_target.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_exchange;
struct http_request;
struct http_route;
struct hub_link;
struct loop;
struct rt;
struct dataplane;

#define DP_ENVD_PORT 49983

/* Extracts the target of r: dp_target_parse on its target and headers. domain
 * may be NULL (host form then only when the left-most label parses as
 * <port>-<id>). Returns 0; AB_ENOENT when r names no
 * sandbox; AB_EINVAL with err set (the 400 message) for a malformed one. */
int dp_extract_target(const struct http_request *r, const char *domain, struct dp_target *t,
                      char *err, size_t errlen);

/* What the data plane may call; borrowed, must outlive it. */
struct dataplane_deps {
    struct loop *loop;
    struct rt *rt; /* NULL: every local sandbox is "not found" */
    struct hub_link *hub;
    const char *cluster;     /* this cluster's id */
    const char *data_domain; /* NULL when unset */
    /* /healthz and /metrics when no sandbox is named (the agent's own answers) */
    void (*respond_healthz)(struct http_exchange *ex, void *arg);
    void (*respond_metrics)(struct http_exchange *ex, void *arg);
    void *respond_arg;
};

/* NULL with err set on failure. */
struct dataplane *dataplane_new(const struct dataplane_deps *deps, char *err, size_t errlen);
/* The data listener's catch-all, to add before /healthz and /metrics (it
 * answers those itself when no sandbox is named). Valid until dataplane_free. */
const struct http_route *dataplane_routes(const struct dataplane *dp, size_t *n);
/* After the listeners stopped (no exchange can reach it). NULL is fine. */
void dataplane_free(struct dataplane *dp);

/* Whether a request to port/path of a sandbox may count as its activity
 * (rt_touch) once envd accepted it: envd's port, and not its /health (which
 * envd answers without a token). Pure. */
bool dp_counts_as_activity(int port, const char *path);

/* Does a request's X-Access-Token (presented, may be NULL) equal the
 * sandbox's envd access token? Constant time; an empty token never matches.
 * Traffic to the sandbox's other ports counts as activity only then. */
bool dp_token_matches(const char *presented, const char *token);

#endif
