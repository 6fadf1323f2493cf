/* API-key authentication on the agent (DESIGN §9, §11): the presented key is
 * hashed here and validated by the hub over the tunnel (`hub` service,
 * POST /internal/v1/keys/validate with the hash — a raw key never crosses
 * the tunnel; validating a key is the hash's only use). The hub answers the
 * principal plus a principal assertion made for this cluster, which the
 * agent presents on every later hop for that caller (bridge calls,
 * forwards). Answers are cached 60 s (misses 5 s; an assertion lives 5 min);
 * a hub EVENT {"type":"key_revoked","hash":…,"keyId":…} drops an entry at
 * once and refuses assertions made for that key from then on. With the
 * tunnel down, cached keys stay valid for a bounded grace (5 min) and
 * unknown keys get 503 "control plane unreachable" — not 401.
 *
 * A request that arrives over the tunnel (peer "tunnel:hub": the hub front
 * door, another cluster's forward) authenticates with X-AgentBox-Assertion
 * instead: accepted only when made for this cluster, unexpired, signed with
 * a key of the last WELCOME and not for a revoked key; the principal is the
 * claims'. An assertion with a key header too is 400; an assertion from
 * anywhere but the tunnel is 401. Loop thread only. */
#ifndef AGENTBOX_AGENT_AUTH_H
#define AGENTBOX_AGENT_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "agentbox/assertion.h"

struct hub_link;
struct http_exchange;
struct agent_auth;

struct agent_principal {
    char key_id[64];
    char key_hash[65]; /* SHA-256 hex of the presented key */
    char name[128];
    char team[64];
    char user[64];
    char namespace[64];
    bool admin;      /* role admin */
    bool agent_mode; /* mode agent: no key minting, approvals apply */
    /* the hub's assertion of this principal for this cluster ("" when the
     * hub sent none): what hops to the hub or other clusters carry */
    char assertion[ASRT_TOKEN_MAX + 1];
};

/* How a refusal is shaped: E2B {"code","message"} or native {"error"}. The
 * router's error format decides; this only picks the words. */
typedef void (*agent_auth_fn)(struct http_exchange *ex, const struct agent_principal *p, void *arg);

/* hub is borrowed (the keys are validated through it) and must outlive au. */
int agent_auth_new(struct hub_link *hub, struct agent_auth **out);
void agent_auth_free(struct agent_auth *au);

/* Authenticates ex from X-API-Key, then AGENTBOX-API-KEY, then
 * "Authorization: Bearer agbx_…". On success calls done(ex, principal, arg),
 * possibly before returning (cache hit); the principal is valid during the
 * call only. On failure answers ex itself (401 naming what is wrong, or 503
 * when the hub cannot be asked) and does not call done. */
void agent_auth_request(struct agent_auth *au, struct http_exchange *ex, agent_auth_fn done,
                        void *arg);

/* The key a request presents: X-API-Key, then AGENTBOX-API-KEY, then
 * "Authorization: Bearer …"; NULL when none. Points into r. */
struct http_request;
const char *agent_auth_presented_key(const struct http_request *r);

/* A hub EVENT (tunnel_client's event hook forwards them here): key
 * revocations, and {"type":"welcome","assertionKeys":[…]} from each WELCOME
 * or {"type":"assertion_keys",…} when the hub rotates its signing key, which
 * replace the keys assertions are verified with. */
void agent_auth_on_event(struct agent_auth *au, json_t *event);

#endif
