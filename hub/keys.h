/* API keys (DESIGN §9, reference agent-sandbox-behaviour.md §5.1-5.2).
 *
 * A key is "agbx_" + 64 lowercase hex from the CSPRNG. The hub stores its
 * SHA-256 (the lookup key, unique), a display prefix ("agbx_1a2b"), and the
 * raw token only encrypted (AES-256-GCM, purpose VAULT_PURPOSE_TOKENS of the
 * key ring, AAD binding id and hash) so its owner can retrieve it later.
 * A key carries team, user, role (tenant|admin) and mode (unrestricted|agent);
 * its effective namespace is the team's override or t-<team>-<user> (iam.h),
 * resolved at every lookup.
 *
 * For the tunnel code: agents validate keys by hash only (raw keys never
 * cross the tunnel): auth_validate_hash() in auth.h, or the route
 * POST /internal/v1/keys/validate. Revocations and expiries reach the hook
 * set with auth_set_revocation_hook, so the tunnel can push an EVENT.
 *
 * Threads: pure functions anywhere; *_conn block on PostgreSQL; the hook
 * runs on the loop thread. */
#ifndef AGENTBOX_HUB_KEYS_H
#define AGENTBOX_HUB_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "hub/iam.h"

struct vault_keyring;

#define KEYS_TOKEN_PREFIX "agbx_"
#define KEYS_TOKEN_LEN 69 /* "agbx_" + 64 hex */
#define KEYS_HASH_LEN 64  /* lowercase hex SHA-256 */
#define KEYS_ID_MAX 24    /* "ak_" + 16 hex */
#define KEYS_PREFIX_LEN 9 /* "agbx_" + 4 hex */
#define KEYS_NAME_MAX 128
#define KEYS_TIME_MAX 24 /* "2026-11-30T00:13:56Z" */

enum keys_role { KEYS_ROLE_TENANT = 0, KEYS_ROLE_ADMIN };
enum keys_mode { KEYS_MODE_UNRESTRICTED = 0, KEYS_MODE_AGENT };
/* What authenticated: an API key, or a human's console session
 * (hub/sessions.h; key_id is then the session id "ses_…"). */
enum keys_kind { KEYS_KIND_KEY = 0, KEYS_KIND_SESSION };

/* Who a valid key acts as. Plain data, safe to copy across threads. */
struct keys_principal {
    char key_id[KEYS_ID_MAX + 1];
    char hash[KEYS_HASH_LEN + 1];
    char name[KEYS_NAME_MAX + 1];
    char team[IAM_TEAM_MAX + 1];
    char user[IAM_USER_MAX + 1];
    char namespace[IAM_NAMESPACE_MAX + 1]; /* effective: override or t-<team>-<user> */
    enum keys_role role;
    enum keys_mode mode;
    char expires_at[KEYS_TIME_MAX]; /* "" when the key never expires */
    enum keys_kind kind;            /* KEYS_KIND_KEY unless a session made it */
};

/* Why a lookup found no valid key. */
enum keys_status {
    KEYS_VALID = 0,
    KEYS_UNKNOWN, /* no key with that hash */
    KEYS_REVOKED, /* when: revoked_at */
    KEYS_EXPIRED, /* when: expires_at */
};

const char *keys_role_name(enum keys_role r);
const char *keys_mode_name(enum keys_mode m);
const char *keys_status_name(enum keys_status s); /* "valid", "unknown", "revoked", "expired" */

/* A new token from the CSPRNG into out (KEYS_TOKEN_LEN + 1 bytes). */
int keys_token_new(char out[KEYS_TOKEN_LEN + 1]);
/* True for "agbx_" followed by exactly 64 lowercase hex digits. */
bool keys_token_is_wellformed(const char *token);
/* Lowercase hex SHA-256 of the token. */
void keys_token_hash(const char *token, char out[KEYS_HASH_LEN + 1]);
/* "agbx_" + the first 4 hex of the token: safe to show and log. */
void keys_token_prefix(const char *token, char out[KEYS_PREFIX_LEN + 1]);
/* True for 64 lowercase hex digits. */
bool keys_hash_is_wellformed(const char *hash);

/* --- storage (one connection, blocking) ------------------------------------------ */

struct keys_create_request {
    const char *team;
    const char *user;
    const char *name; /* NULL → "" */
    enum keys_role role;
    enum keys_mode mode;
    int64_t expires_in_ms; /* 0: never */
    const char *actor;     /* audit: "cli", "key:<id>" */
};

/* Creates a key: validates team/user/name (AB_EINVAL naming the field),
 * generates the token, stores hash, prefix and encrypted token (kr NULL:
 * no retrievable copy) and an audit row in one transaction. token gets the
 * raw token (show it once); *out (may be NULL) the key as keys_json shows it
 * to its owner, without the token. */
int keys_create_conn(PGconn *c, const struct vault_keyring *kr,
                     const struct keys_create_request *rq, char token[KEYS_TOKEN_LEN + 1],
                     json_t **out, char *err, size_t errlen);

/* Looks a hash up. KEYS_VALID fills p; the other statuses set when (revoked
 * or expiry time, "" for unknown). Returns 0, or AB_EIO with err. */
int keys_lookup_conn(PGconn *c, const char *hash, enum keys_status *status,
                     struct keys_principal *p, char when[KEYS_TIME_MAX], char *err, size_t errlen);

/* Lists keys as a JSON array, newest first: {id, name, prefix, team, user,
 * namespace, role, mode, createdAt, expiresAt, revokedAt, lastUsedAt, and
 * rawToken when kr is non-NULL}. team/user NULL → every key (admin);
 * include_revoked adds revoked keys. */
int keys_list_conn(PGconn *c, const struct vault_keyring *kr, const char *team, const char *user,
                   bool include_revoked, json_t **out, char *err, size_t errlen);

/* Revokes key id. team/user non-NULL restricts to that owner (a tenant's own
 * keys): another owner's key is AB_ENOENT, like a missing one. An already
 * revoked key is AB_ENOENT too. *hash (may be NULL) gets the key's hash. */
int keys_revoke_conn(PGconn *c, const char *id, const char *team, const char *user,
                     const char *actor, char hash[KEYS_HASH_LEN + 1], char *err, size_t errlen);

/* Marks ids (n ≤ 10000) as used now: one UPDATE for the whole batch. */
int keys_touch_conn(PGconn *c, const char *const *ids, size_t n, char *err, size_t errlen);

/* --- revocation hook ---------------------------------------------------------------- */

/* Called on the loop thread once a key stops being valid: reason is
 * "revoked" or "expired". Revocations through the hub API call it at once;
 * revocations by the CLI (another process) and expiries are found by a scan
 * every AUTH_SCAN_INTERVAL_MS (auth.h), so they arrive within that time. A
 * key may be reported more than once: dropping a cache entry is idempotent. */
typedef void (*keys_revocation_fn)(void *arg, const char *key_id, const char *hash,
                                   const char *reason);
/* The hook belongs to the identity context: auth_set_revocation_hook (auth.h). */

/* --- CLI (key_cli.c) ---------------------------------------------------------------- */

/* `agentbox-hub key create|list|revoke` (argv after "key"). Exit status. */
int keys_cli_main(int argc, char **argv);
/* A blocking connection for CLIs; NULL with err naming the settings. */
PGconn *keys_cli_connect(const char *url, int64_t timeout_ms, char *err, size_t errlen);
/* The hub secret (value, else file) and optionally a previous one (file) into kr. */
int keys_cli_keyring(const char *value, const char *file, const char *prev_file,
                     struct vault_keyring *kr, char *err, size_t errlen);

#endif
