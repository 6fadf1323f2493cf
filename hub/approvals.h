/* The approval gate (reference agent-sandbox-behaviour.md §4.5, DESIGN §11).
 *
 * An agent-mode API key (not admin, not a console session) that asks for a
 * gated native write through the hub (/api/clusters/{id}/v1/...) is let
 * through only when a person allowed it:
 *   (a/b) a key grant: the operation approved for this key (until revoked);
 *   (c)   a session grant: approved for the request's X-AgentBox-Session-Id
 *         (2 h);
 *   (d)   a once-approval of an identical request (same fingerprint and
 *         owner), approved, unexpired and not yet used: consumed on use.
 * Otherwise the gate answers 428 APPROVAL_REQUIRED with the id of a pending
 * request (reused for an identical one, else new: "apr_" + 16 hex, 15 min)
 * and its pollUrl; a forbidden operation (api key creation) is 403
 * FORBIDDEN_FOR_AGENT and makes no request. Only a console session
 * (KEYS_KIND_SESSION) of the owner (or an admin session) decides.
 *
 * Fingerprint = SHA-256 over method, cluster, the concrete path and the
 * body's SHA-256 (a body over 1 MiB hashes as empty; an agent asking for
 * its own native API sends only the body's hash). The reference hashes the route
 * template; the concrete path and the cluster are stricter: approving the
 * deletion of one sandbox must not delete another.
 *
 * Requests, grants and decisions live in PostgreSQL (migration 0006), not
 * per cluster, so they survive a hub restart and hold for every hub.
 * Loop thread; storage in database jobs. */
#ifndef AGENTBOX_HUB_APPROVALS_H
#define AGENTBOX_HUB_APPROVALS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/http.h"
#include "agentbox/relay.h"
#include "hub/keys.h"

struct loop;
struct db_pool;
struct auth_ctx;
struct approvals;

#define APPROVALS_SESSION_HEADER RELAY_HDR_SESSION_ID
#define APPROVALS_ID_LEN 20 /* "apr_" + 16 hex */
#define APPROVALS_BODY_HASH_MAX (1024 * 1024)

struct approvals_deps {
    struct loop *loop;
    struct db_pool *db;
    struct auth_ctx *auth;    /* error bodies */
    int64_t ttl_ms;           /* pending request lifetime; 0 → 15 min */
    int64_t session_grant_ms; /* 0 → 2 h */
};

int approvals_new(const struct approvals_deps *d, struct approvals **out, char *err, size_t errlen);
void approvals_free(struct approvals *a);

/* One row of the gated table. */
struct approvals_op {
    const char *method;
    const char *route; /* "/v1/sandboxes/:sandboxId" */
    const char *op;    /* "sandbox.delete" */
    const char *summary;
    bool once_only;
    bool forbidden;
};

/* The row for method + path ("/v1/...", no query), or NULL (ungated).
 * params gets the route parameters joined by "/" ("" when none). */
const struct approvals_op *approvals_match(const char *method, const char *path, char *params,
                                           size_t cap);
/* Whether p passes the gate at all: agent-mode API keys that are not admin. */
bool approvals_gated(const struct keys_principal *p);
/* SHA-256 hex of a request body ("" when over APPROVALS_BODY_HASH_MAX). */
void approvals_body_sha(const char *body, size_t len, char out[65]);
/* SHA-256 hex over method, cluster, path (without query) and body_sha. */
void approvals_fingerprint(const char *method, const char *cluster, const char *path,
                           const char *body_sha, char out[65]);

/* The gate for ex. pass(ex, allowed, arg) runs exactly once (at once for an
 * ungated request or principal, else after the lookup): allowed, the request
 * may go on; not allowed, ex was answered (403, 428, 400 or 503) and pass
 * only releases arg. path: "/v1/..." (a query is ignored). cluster: "" for
 * the hub's own routes. */
typedef void (*approvals_pass_fn)(struct http_exchange *ex, bool allowed, void *arg);
void approvals_gate(struct approvals *a, struct http_exchange *ex, const struct keys_principal *p,
                    const char *cluster, const char *path, approvals_pass_fn pass, void *arg);

/* POST /internal/v1/approvals/gate on the internal router (agents, over
 * their tunnel): the same gate for an agent's own native API, the caller
 * named by the hub's assertion for that cluster. */
struct hub;
int approvals_add_internal_routes(struct hub *h, struct approvals *a, char *err, size_t errlen);

/* The /v1/approvals API, each answering ex for principal p:
 *   list   GET    → {pending: [approval], grants: [grant]} (the owner's; admin: all)
 *   get    GET    {id} → the approval (poll), 404 for another owner's
 *   decide POST   {id}/decision {decision: approve|deny, scope?: once|session|key}
 *   revoke DELETE grants/{gid} → 204 (console sessions only, else 404) */
void approvals_list(struct approvals *a, struct http_exchange *ex, const struct keys_principal *p);
void approvals_get(struct approvals *a, struct http_exchange *ex, const struct keys_principal *p,
                   const char *id);
void approvals_decide(struct approvals *a, struct http_exchange *ex, const struct keys_principal *p,
                      const char *id);
void approvals_revoke_grant(struct approvals *a, struct http_exchange *ex,
                            const struct keys_principal *p, const char *gid);

#endif
