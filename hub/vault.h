/* The vault: write-only secret values scoped to (namespace, user), served
 * as E2B /secrets by the hub (reference agent-sandbox-behaviour.md §5.5,
 * e2b-protocol.md §1.3-1.4), and the hub's key ring.
 *
 * Encryption at rest: AES-256-GCM under a key derived with HKDF-SHA256 from
 * the hub secret, a purpose ("vault", "apikey-token") and a key generation.
 * The AAD binds the scope, the name and the version, so a ciphertext moved to
 * another row, user or version does not decrypt. Each row records its key id
 * "v<generation>.<fingerprint>" (the fingerprint is 8 hex derived from the
 * hub secret, never the secret itself); `agentbox-hub vault rotate-key` adds
 * a generation and re-encrypts every row, optionally from a previous hub
 * secret.
 *
 * No function here returns a value except vault_resolve*, meant only for an
 * agent arming a sandbox (the tunnel's POST /internal/v1/vault/resolve).
 * Values never reach a log line or an error message.
 *
 * The key ring and sealing are keyring.h; rotate-key is vault_rotate.c.
 *
 * Threads: the pure functions run anywhere; *_conn block on PostgreSQL (a
 * database worker or a CLI); vault_resolve and the routes are loop thread. */
#ifndef AGENTBOX_HUB_VAULT_H
#define AGENTBOX_HUB_VAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "agentbox/crypto.h"
#include "hub/keyring.h"

#define VAULT_NAME_MAX 128 /* after normalisation */
#define VAULT_VALUE_MAX (64 * 1024)
#define VAULT_META_ENTRIES_MAX 32
#define VAULT_META_KEY_MAX 128
#define VAULT_META_VALUE_MAX 1024
#define VAULT_META_TOTAL_MAX 8192 /* sum of key and value bytes */
#define VAULT_LIST_DEFAULT 100
#define VAULT_LIST_MAX 1000
#define VAULT_RESOLVE_MAX 64 /* names per resolve call */

/* --- input rules (reference §5.5); each message names the limit --------------- */

/* Accepts "name" or "sec_name": trims spaces, strips one "sec_", lower-cases.
 * Then non-empty, at most VAULT_NAME_MAX, only [a-z0-9_-]. */
int vault_name_normalize(const char *in, char out[VAULT_NAME_MAX + 1], char *err, size_t errlen);
int vault_value_check(size_t len, char *err, size_t errlen);
/* md: NULL (absent) or an object of string values within the limits. */
int vault_metadata_check(const json_t *md, char *err, size_t errlen);

/* --- storage: one connection, blocking ----------------------------------------- */

struct vault_scope {
    const char *ns;
    const char *user;
};

/* Who acts, for the audit log ("key:<id>" or "cli"). */
struct vault_write {
    struct vault_scope scope;
    const char *name; /* normalised */
    const char *value;
    size_t len;
    const json_t *metadata; /* NULL: keep (update) or {} (create) */
    const char *actor;
};

/* Each *out is a new E2B Secret object: {secretID, name, currentVersion,
 * metadata, createdAt, updatedAt}. Errors: AB_EEXIST (create: the name
 * exists), AB_ENOENT (not found), AB_EIO (database, message in err). */
int vault_create_conn(PGconn *c, const struct vault_keyring *kr, const struct vault_write *w,
                      json_t **out, char *err, size_t errlen);
int vault_update_conn(PGconn *c, const struct vault_keyring *kr, const struct vault_write *w,
                      json_t **out, char *err, size_t errlen);
int vault_get_conn(PGconn *c, const struct vault_scope *s, const char *name, json_t **out,
                   char *err, size_t errlen);
/* Sorted by name; *more when rows exist past offset + limit. */
int vault_list_conn(PGconn *c, const struct vault_scope *s, int64_t offset, int64_t limit,
                    json_t **out, bool *more, char *err, size_t errlen);
int vault_delete_conn(PGconn *c, const struct vault_scope *s, const char *name, const char *actor,
                      char *err, size_t errlen);

/* A resolved value: owned by the caller, wipe and free with vault_values_free. */
struct vault_value {
    char name[VAULT_NAME_MAX + 1];
    bool found;
    int version;
    uint8_t *value; /* NUL-terminated for convenience; len excludes it */
    size_t len;
};
/* Decrypts names (normalised, at most VAULT_RESOLVE_MAX) of scope into out[n].
 * A missing name is found=false, not an error; a row that does not decrypt
 * is AB_EDENIED naming the secret (never its value). */
int vault_resolve_conn(PGconn *c, const struct vault_keyring *kr, const struct vault_scope *s,
                       const char *const *names, size_t n, struct vault_value *out, char *err,
                       size_t errlen);
void vault_values_free(struct vault_value *v, size_t n);

/* rotate-key: one transaction: adds generation max+1 and re-encrypts every
 * vault row and every stored API key token under it (rows under the previous
 * secret included). Metadata, versions and timestamps are kept. Counts go to
 * *secrets and *tokens. */
int vault_rotate_conn(PGconn *c, const struct vault_keyring *kr, const char *actor, int *generation,
                      size_t *secrets, size_t *tokens, char *err, size_t errlen);

/* The newest key generation (hub_key_generations). */
int vault_generation_conn(PGconn *c, int *generation, char *err, size_t errlen);

/* `agentbox-hub vault rotate-key` (vault_cli.c). Exit status. */
int vault_cli_main(int argc, char **argv);

#endif
