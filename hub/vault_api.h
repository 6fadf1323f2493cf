/* The vault over HTTP and for the tunnel code (loop thread).
 *
 * Routes (E2B /secrets semantics, errors {"code", "message"}, auth as
 * AUTH_SURFACE_E2B, scope = the caller's (namespace, user)):
 *   GET    /e2b/secrets?limit=&nextToken=  200 [Secret], X-Next-Token when more
 *   POST   /e2b/secrets {name, value, metadata?}     201 Secret; 409 when the name exists
 *   GET    /e2b/secrets/{id}                          200 Secret (never the value); 404
 *   POST   /e2b/secrets/{id} {value, metadata?}       200 Secret, version + 1; 404
 *   DELETE /e2b/secrets/{id}                          204; 404
 *   POST   /internal/v1/vault/resolve {namespace, user, names}
 *          on the internal router (agents over the tunnel only; 404 publicly):
 *          200 {secrets: [{name, found, version?, value?}]}
 * {id} is a name or "sec_<name>". */
#ifndef AGENTBOX_HUB_VAULT_API_H
#define AGENTBOX_HUB_VAULT_API_H

#include <stddef.h>

#include "hub/vault.h"

struct hub;
struct auth_ctx;

struct vault_api;

/* The vault's routes (/e2b/secrets on the API, the resolve route on the
 * internal router) and the state they keep (the per-cluster resolve rate).
 * a must outlive the result; free it with vault_api_free after the routers
 * stop. Loop thread. */
int vault_api_new(struct hub *h, struct auth_ctx *a, struct vault_api **out, char *err,
                  size_t errlen);
void vault_api_free(struct vault_api *v);

/* Result of vault_resolve, on the loop thread. status 0: values[n] in the
 * order asked, borrowed for the duration of the call (wiped and freed
 * after it: copy what you keep, keep it in memory only). Otherwise
 * values is NULL and err says why (AB_EDENIED: a row does not decrypt with
 * this hub secret; AB_EIO/AB_EBUSY/AB_ECLOSED: database). */
typedef void (*vault_resolve_fn)(void *arg, int status, const struct vault_value *values, size_t n,
                                 const char *err);

/* Resolves names (1..VAULT_RESOLVE_MAX, names or sec_<name>) in the scope
 * (ns, user) of the principal an agent arms a sandbox for. Returns 0 and cb
 * runs exactly once later; or an error with err (cb never runs). */
int vault_resolve(struct auth_ctx *a, const char *ns, const char *user, const char *const *names,
                  size_t n, vault_resolve_fn cb, void *arg, char *err, size_t errlen);

#endif
