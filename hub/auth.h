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

/* Console sessions (hub/sessions.h): auth_request first offers ex to this
 * hook, which returns true when it took it (a session credential: it then
 * runs ok or answers, as auth_request would). NULL fn removes it. serve.c
 * sets it; the principal it passes has kind KEYS_KIND_SESSION. */
typedef bool (*auth_session_fn)(void *arg, struct http_exchange *ex, enum auth_surface s,
                                auth_ok_fn ok, void *ok_arg);
void auth_set_session_hook(struct auth_ctx *a, auth_session_fn fn, void *arg);

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
/* Verifies an assertion that came over cluster's tunnel: it must have been
 * made for that cluster (asrt_verify_for). On success *p is the asserted
 * principal (no hash, name or expiry: an assertion does not carry them) and
 * rid (ASRT_RID_MAX + 1 bytes, may be NULL) its request id. */
int auth_verify_from(const struct auth_ctx *a, const char *cluster, const char *token,
                     struct keys_principal *p, char *rid, char *err, size_t errlen);
/* The public key texts for WELCOME, current first: a JSON array of strings. */
json_t *auth_assertion_keys_json(const struct auth_ctx *a);

/* {keyId, name, team, user, namespace, role, mode, expiresAt}: no hash, no token. */
json_t *auth_principal_json(const struct keys_principal *p);

/* The revocation hook (keys.h) of this context; NULL removes it. serve.c
 * points it at the tunnel server, and clears it before the tunnel goes. */
void auth_set_revocation_hook(struct auth_ctx *a, keys_revocation_fn fn, void *arg);
/* Calls the hook, if any: the scan (auth.c) and the key API's revoke. */
void auth_notify_revoked(struct auth_ctx *a, const char *key_id, const char *hash,
                         const char *reason);

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
