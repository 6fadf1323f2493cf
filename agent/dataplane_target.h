/* Data-plane target extraction: how a request's untrusted headers, Host and
 * path become a sandbox id, a port and the request-target to send on.
 *
 * Pure: strings in, a struct out; no lws, no runtime, no allocation, so a
 * unit-test table and a fuzz target can drive it directly. The id is only
 * cut out here; the caller checks it (sbxid_cluster_of) before use.
 *
 * Forms, first match wins: the E2b-Sandbox-Id + E2b-Sandbox-Port headers (then
 * X-Sandbox-Id + X-Sandbox-Port), the host <port>-<id>.<domain>, the path
 * /sandboxes/<id>/<port>/... (prefix stripped). Any thread. */
#ifndef AGENTBOX_AGENT_DATAPLANE_TARGET_H
#define AGENTBOX_AGENT_DATAPLANE_TARGET_H

#include <stddef.h>

/* What a request addresses. */
struct dp_target {
    char id[96];     /* sandbox id as given (validated later) */
    int port;        /* 1..65535 */
    char path[8192]; /* request-target to send on: rewritten for the path form */
};

/* The parts of a request that may name a sandbox. Borrowed, NUL-terminated;
 * NULL for an absent header. */
struct dp_target_req {
    const char *target;            /* raw request-target ("/a?b"); NULL reads as "" */
    const char *host;              /* Host */
    const char *e2b_id, *e2b_port; /* E2b-Sandbox-Id, E2b-Sandbox-Port */
    const char *x_id, *x_port;     /* X-Sandbox-Id, X-Sandbox-Port */
};

/* Extracts the target of req into t. domain may be NULL or "" (the host form
 * then applies only when the left-most label parses as <port>-<id> and the id
 * carries a valid cluster). Returns 0; AB_ENOENT when req names no sandbox;
 * AB_EINVAL with err set to the 400 message naming the problem. */
int dp_target_parse(const struct dp_target_req *req, const char *domain, struct dp_target *t,
                    char *err, size_t errlen);

/* The cluster that t->id names, into cluster (SBXID_CLUSTER_MAX + 1 bytes):
 * the way the request goes (here, or relayed to that cluster). Returns 0, or
 * AB_EINVAL with err set to the 400 message for an id that is not
 * <cluster>-<suffix> (uppercase included: ids are lower case). */
int dp_target_cluster(const struct dp_target *t, char *cluster, char *err, size_t errlen);

/* A port 1..65535 written as 1 to 5 plain decimal digits (len bytes of s);
 * 0 for anything else. */
int dp_target_port(const char *s, size_t len);

#endif
