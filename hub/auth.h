/* Request authentication on the hub, and the identity context that the
 * key, vault and internal routes share.
 *
 * A request carries an API key; the hub hashes it and looks the hash up in
 * PostgreSQL on a database worker (no cache: a revocation through any hub or
 * the CLI takes effect on the next request). Headers by surface:
 *   AUTH_SURFACE_API  /api/v1/...  Authorization: Bearer agbx_…, then AGENTBOX-API-KEY;
 *                     errors {"error": …, "errorCode": …}
 *   AUTH_SURFACE_E2B  /e2b/...    X-API-Key, then AGENTBOX-API-KEY, then
 *                     Authorization: Bearer; errors {"code": …, "message": …}
 * 401 says which of missing / malformed / unknown / revoked / expired and
 * what to do; a database outage is 503. Keys are never logged or echoed.
 *
 * Use of a key is recorded in memory and written to api_keys.last_used_at in
 * one batch every scan interval; the same tick finds keys revoked (also by
 * the CLI) or expired since the last one and passes them to the revocation
 * hook (keys.h).
 *
 * Everything here runs on the loop thread. */
#ifndef AGENTBOX_HUB_AUTH_H
#define AGENTBOX_HUB_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/http.h"
#include "hub/keys.h"

struct loop;
struct db_pool;
struct hub;
struct vault_keyring;

#define AUTH_SCAN_INTERVAL_MS 10000 /* last_used batch and revocation scan */
#define AUTH_USED_MAX 4096          /* distinct keys remembered between batches */

struct auth_ctx;

struct auth_options {
    struct loop *loop;      /* not owned */
    struct db_pool *db;     /* not owned; must outlive the context's jobs */
    const char *hub_secret; /* ≥ VAULT_HUB_SECRET_MIN bytes; copied into a key ring */
    size_t hub_secret_len;
    int64_t scan_interval_ms; /* 0 → AUTH_SCAN_INTERVAL_MS */
};

/* Starts the scan timer; the context into *out. 0, or AB_ENOMEM or the key
 * ring's code (vault_keyring_init) with err set and *out NULL. */
int auth_new(const struct auth_options *o, struct auth_ctx **out, char *err, size_t errlen);
/* Cancels the timer, wipes the key ring. Call after db_pool_free (pending
 * jobs' done() may still use the context) and before loop_free. */
void auth_free(struct auth_ctx *a);

const struct vault_keyring *auth_keyring(const struct auth_ctx *a);
struct db_pool *auth_db(const struct auth_ctx *a);

enum auth_surface { AUTH_SURFACE_API, AUTH_SURFACE_E2B };

/* Runs on the loop thread with the caller's principal (valid during the
 * call only); the handler then finishes ex as usual. */
typedef void (*auth_ok_fn)(struct http_exchange *ex, const struct keys_principal *p, void *arg);

/* Authenticates ex. On success ok(ex, principal, arg) runs later (at once,
 * before this returns, for a granted request: see below); on failure ex is
 * answered (401 or 503) and ok never runs. arg must stay valid until one of
 * the two happened. */
void auth_request(struct auth_ctx *a, struct http_exchange *ex, enum auth_surface s, auth_ok_fn ok,
                  void *arg);

/* Pre-authenticated requests (hub/public_bridge.c). An agent relays its
 * callers' public requests over its tunnel with the principal assertion the
 * hub made for that cluster (X-AgentBox-Assertion) instead of the key or its
 * hash (DESIGN §9, §11). The bridge verifies it (auth_verify_from), makes a
 * grant holding the principal and dispatches the inner request with
 * http_request.transport_data = the grant. auth_request recognises a live
 * grant of its own context by address (it never dereferences a
 * transport_data that is not one of its grants), ignores credential headers
 * and runs ok at once with the grant's principal (marking the key used).
 * The grant is the bridge's until auth_grant_free (after the inner exchange
 * is released); auth_free detaches grants still alive (they then match
 * nothing). NULL when out of memory. */
struct auth_grant;
/* True when ex came through the public bridge (an agent acting for its
 * caller over the tunnel), false when the caller reached the hub directly.
 * Token material is answered only to the latter (issue 13: no raw token
 * over a tunnel, ever). */
bool auth_request_is_bridged(const struct auth_ctx *a, struct http_exchange *ex);
struct auth_grant *auth_grant_new(struct auth_ctx *a, const struct keys_principal *p);
void auth_grant_free(struct auth_grant *g);

/* For the tunnel: validates a key by its SHA-256 hex. cb runs on the loop
 * thread exactly once when this returns 0: status 0 with ks KEYS_VALID and p
 * set, or 0 with another ks (p NULL), or a negative ab_err (AB_EIO database
 * down, AB_EBUSY queue full, AB_ECLOSED shutting down) with p NULL. Returns
 * AB_EINVAL for a malformed hash (cb not called) or the db_submit error. */
typedef void (*auth_validate_fn)(void *arg, int status, enum keys_status ks,
                                 const struct keys_principal *p);
int auth_validate_hash(struct auth_ctx *a, const char *hash, auth_validate_fn cb, void *arg);

/* --- principal assertions (DESIGN §11, agentbox/assertion.h) ---------------------- */

/* Signs an assertion of p for cluster aud (lifetime ASRT_LIFETIME_MAX_S)
 * into out (ASRT_TOKEN_MAX + 1 bytes). rid: the request id to carry, NULL or
 * "" for a fresh random one. Returns 0, or the asrt_sign error with err. */
int auth_sign_for(const struct auth_ctx *a, const struct keys_principal *p, const char *aud,
                  const char *rid, char *out, size_t outlen, char *err, size_t errlen);
/* Request ids say what an assertion may back. A claim row (sandbox_events.c)
 * is recorded only under an assertion made for that create: one whose rid
 * starts with AUTH_RID_VALIDATION (made when the cluster validated a key its
 * client had just presented to it: it speaks for that client's creates), or
 * one under which the hub forwarded a create to the cluster (a create credit,
 * used up by one claim). An assertion a cluster received with any other
 * request (a read through the front door, a relay) backs no claim. No other
 * assertion ever carries the validation prefix (auth_sign_for re-prefixes a
 * given rid that has it). */
#define AUTH_RID_VALIDATION "kv."

/* The assertion of p for aud, from a cache per (principal, audience) reused
 * until half its lifetime (a new one is signed with rid, or a fresh one when
 * rid is NULL or ""); create: the request is a create forwarded to aud, which
 * earns one create credit under the assertion's rid. out: ASRT_TOKEN_MAX + 1
 * bytes. The cache drops a key's entries when it is revoked. */
int auth_assertion_for(struct auth_ctx *a, const struct keys_principal *p, const char *aud,
                       const char *rid, bool create, char *out, size_t outlen, char *err,
                       size_t errlen);
/* Whether a claim event from cluster under an assertion with rid (already
 * verified as made for cluster, of the claim's principal) may make a row:
 * a validation rid, or a create credit for (cluster, rid), which this uses
 * up. Credits live in this hub's memory for the assertion's lifetime. */
bool auth_claim_allowed(struct auth_ctx *a, const char *cluster, const char *rid);
/* Verifies an assertion that came over cluster's tunnel: it must have been
 * made for that cluster (asrt_verify_for). On success *p is the asserted
 * principal (no hash, name or expiry: an assertion does not carry them) and
 * rid (ASRT_RID_MAX + 1 bytes, may be NULL) its request id. */
int auth_verify_from(const struct auth_ctx *a, const char *cluster, const char *token,
                     struct keys_principal *p, char *rid, char *err, size_t errlen);
/* The public key texts for WELCOME, current first (then the previous
 * generation's, while it is published): a JSON array of strings. */
json_t *auth_assertion_keys_json(const struct auth_ctx *a);
/* Called on the loop thread when the published keys change (a rotation,
 * hub/signing_keys.h) with the new auth_assertion_keys_json (borrowed).
 * serve.c points it at the tunnel server, which tells every agent. */
typedef void (*auth_keys_fn)(void *arg, json_t *keys);
/* Signs with generation set->current and publishes it and set->previous
 * (hub/signing_keys.h) from now on; the scan tick does this on every change,
 * serve.c once at start. A no-op when unchanged; the hook runs on a change. */
struct signing_set;
int auth_set_signing(struct auth_ctx *a, const struct signing_set *set, char *err, size_t errlen);
void auth_set_keys_hook(struct auth_ctx *a, auth_keys_fn fn, void *arg);

/* {keyId, name, team, user, namespace, role, mode, expiresAt}: no hash, no token. */
json_t *auth_principal_json(const struct keys_principal *p);

/* The revocation hook (keys.h) of this context; NULL removes it. serve.c
 * points it at the tunnel server, and clears it before the tunnel goes. */
void auth_set_revocation_hook(struct auth_ctx *a, keys_revocation_fn fn, void *arg);
/* Calls the hook, if any: the scan (auth.c) and the key API's revoke. */
void auth_notify_revoked(struct auth_ctx *a, const char *key_id, const char *hash,
                         const char *reason);

/* Key churn (issue 13): a tenant creating and revoking its own keys at
 * full speed would flood every agent's set of revoked key ids
 * (agentbox/assertion.h). Each (team, user) gets AUTH_KEY_CHURN_PER_MIN
 * self-service creates plus revokes per minute (a fixed window); admins and
 * the CLI are not limited. */
#define AUTH_KEY_CHURN_PER_MIN 30
#define AUTH_KEY_CHURN_USERS 4096 /* distinct users tracked per window */
/* Counts one create or revoke by p: 0, or AB_ELIMIT with err naming the
 * limit (answer 429). Admin principals always 0. */
int auth_key_churn(struct auth_ctx *a, const struct keys_principal *p, char *err, size_t errlen);

/* Records that a key was used (batched into last_used_at). */
void auth_mark_used(struct auth_ctx *a, const char *key_id);

/* Error bodies: API surface {"error": msg, "errorCode": code}. */
void auth_respond_api_error(struct http_exchange *ex, int status, const char *code, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));
/* The answer to a failed db_submit or job status (503 naming the cause; 500
 * never), in the surface's error shape. err: the job's message or "". */
void auth_respond_db_error(struct auth_ctx *a, struct http_exchange *ex, enum auth_surface s,
                           int status, const char *err);

/* --- wiring into `serve` --------------------------------------------------------- */

/* Adds POST /internal/v1/keys/validate (the tunnel-only router) answered by
 * a. serve.c creates the context (auth_new, the secret from
 * vault_hub_secret_load) and registers the public identity routes
 * (dashboard-api/) and /e2b/secrets (vault_api.h). Before hub_start. */
int auth_add_internal_routes(struct hub *h, struct auth_ctx *a, char *err, size_t errlen);

#endif
