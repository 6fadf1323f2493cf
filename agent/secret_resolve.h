/* The values of a claim's secrets, from the hub's vault (issue 12 "Secrets on
 * the way out", DESIGN §11): POST /internal/v1/vault/resolve {sandboxId,
 * names} on the `hub` service through hub_link, with the principal's
 * assertion made for this cluster. The hub answers only for a live claim of
 * that sandbox on this cluster by that principal, and only for the names the
 * claim recorded (metadata agentbox.scitix.ai/secret-names, which the create
 * writes from the rules: secret_resolve_names_json).
 *
 * The values land in a struct egress_secrets (memory only, wiped on free);
 * the answer's body and the parsed copy are wiped before they are freed. No
 * value is ever logged or put into an error message. Loop thread only. */
#ifndef AGENTBOX_AGENT_SECRET_RESOLVE_H
#define AGENTBOX_AGENT_SECRET_RESOLVE_H

#include <jansson.h>
#include <stddef.h>

#include "agent/egress/policy.h"
#include "agent/egress/secrets.h"

struct hub_link;

#define SECRET_RESOLVE_PATH "/internal/v1/vault/resolve"
#define SECRET_RESOLVE_NAMES_MAX 32 /* names one resolve asks for (the hub's VAULT_RESOLVE_MAX) */
#define SECRET_RESOLVE_BODY_MAX (1 << 20) /* the answer: 32 values of at most 8 KiB, as JSON */
#define SECRET_RESOLVE_TIMEOUT_MS 10000
#define SECRET_RESOLVE_ERR_MAX 512

/* The claim record for the hub: a JSON array of the distinct secret names p's
 * rules reference (new reference; NULL when there are none or more than
 * SECRET_RESOLVE_NAMES_MAX, *n says how many). */
json_t *secret_resolve_names_json(const struct egress_policy *p, size_t *n);

/* Called once: rc 0 and s filled, or an error with a message naming the
 * secret or the hub's refusal (never a value). s is the caller's, as given. */
typedef void (*secret_resolve_cb)(int rc, struct egress_secrets *s, const char *err, void *arg);

/* Asks the hub for names[0..n) of sandbox_id as the principal whose
 * assertion is given; fills s (borrowed; must outlive the callback). Returns
 * 0 (cb runs once, later) or an error with err set (cb never runs):
 * AB_EINVAL for no names or too many, AB_EDENIED without an assertion,
 * AB_ECLOSED while the hub is unreachable. */
int secret_resolve(struct hub_link *hl, const char *sandbox_id, const char *assertion,
                   const char (*names)[EGRESS_SECRET_NAME_MAX + 1], size_t n,
                   struct egress_secrets *s, secret_resolve_cb cb, void *arg, char *err,
                   size_t errlen);

/* The hub's answer {secrets: [{name, found, version, value}]} into s: every
 * name asked for must be there and found (AB_ENOENT naming it otherwise),
 * values must be strings egress_secrets_set accepts. Pure apart from s; wipes
 * the parsed copy. body is not modified. */
int secret_resolve_parse(const char *body, size_t len,
                         const char (*names)[EGRESS_SECRET_NAME_MAX + 1], size_t n,
                         struct egress_secrets *s, char *err, size_t errlen);

#endif
