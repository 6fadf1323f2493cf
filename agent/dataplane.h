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
 * Loop thread only. */
#ifndef AGENTBOX_AGENT_DATAPLANE_H
#define AGENTBOX_AGENT_DATAPLANE_H

#include "agent/dataplane_target.h"

#include <stddef.h>
#include <stdint.h>

struct agent;
struct http_request;

#define DP_ENVD_PORT 49983

/* Extracts the target of r: dp_target_parse on its target and headers. domain
 * may be NULL (host form then only when the left-most label parses as
 * <port>-<id>). Returns 0; AB_ENOENT when r names no
 * sandbox; AB_EINVAL with err set (the 400 message) for a malformed one. */
int dp_extract_target(const struct http_request *r, const char *domain, struct dp_target *t,
                      char *err, size_t errlen);

/* Installs the data-plane handler as the data listener's catch-all, before
 * /healthz and /metrics (which it answers itself when no sandbox is named). */
int dataplane_add_routes(struct agent *a, char *err, size_t errlen);

#endif
