/* The secret values one sandbox's rules may use, as the hub's vault resolved
 * them for this claim (issue 12 "Secrets on the way out"). Held in memory only,
 * on the sandbox's egress record, and wiped with OPENSSL_cleanse when replaced
 * or freed; never logged, never written, never handed to the sandbox (which
 * sees only the decoy in its envs).
 *
 * Not thread-safe; one owner (the loop). */
#ifndef AGENTBOX_AGENT_EGRESS_SECRETS_H
#define AGENTBOX_AGENT_EGRESS_SECRETS_H

#include "agent/egress/policy.h"

#include <stddef.h>

#define EGRESS_SECRETS_MAX 64         /* names one sandbox holds */
#define EGRESS_SECRET_VALUE_MAX 8192  /* one value, in bytes */
#define EGRESS_FILLED_MAX (16 * 1024) /* one header value with its secrets filled in */

struct egress_secrets;

struct egress_secrets *egress_secrets_new(void);
/* Wipes every value, then frees. NULL is a no-op. */
void egress_secrets_free(struct egress_secrets *s);

/* Names are case-insensitive, as in the vault (which keeps them lower case).
 * Sets name (a secret name of [A-Za-z0-9_-], at most EGRESS_SECRET_NAME_MAX)
 * to the len bytes of value, replacing (and wiping) an earlier value. A value
 * holding CR, LF, NUL or another control byte but TAB is refused: it would
 * split the header it is filled into. 0, AB_EINVAL (err names the secret, never
 * the value), AB_ELIMIT past EGRESS_SECRETS_MAX or EGRESS_SECRET_VALUE_MAX,
 * AB_ENOMEM. */
int egress_secrets_set(struct egress_secrets *s, const char *name, const char *value, size_t len,
                       char *err, size_t errlen);
size_t egress_secrets_count(const struct egress_secrets *s);
/* A copy (a connection keeps its own, so replacing a sandbox's secrets never
 * pulls them from under a request in flight); NULL s gives an empty set.
 * NULL when out of memory. */
struct egress_secrets *egress_secrets_dup(const struct egress_secrets *s);

/* Fills a header template (policy.h: text and ${e2b.secrets.NAME}) into out
 * (cap bytes, NUL-terminated; *outlen without the NUL). AB_ENOENT when a name
 * is not held (err names it), AB_ELIMIT past cap, AB_EINVAL when the result
 * would hold a control byte. On failure out is wiped. */
int egress_secrets_fill(const struct egress_secrets *s, const char *tmpl, char *out, size_t cap,
                        size_t *outlen, char *err, size_t errlen);

/* The length tmpl has once filled, or (size_t)-1 when a name is not held;
 * for sizing the buffer of egress_secrets_fill. */
size_t egress_secrets_fill_len(const struct egress_secrets *s, const char *tmpl);

#endif
