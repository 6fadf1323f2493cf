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

#define VAULT_HUB_SECRET_MIN 32   /* bytes */
#define VAULT_HUB_SECRET_MAX 4096 /* bytes */
#define VAULT_KEY_ID_MAX 32       /* "v12.1a2b3c4d" */
#define VAULT_NAME_MAX 128        /* after normalisation */
#define VAULT_VALUE_MAX (64 * 1024)
#define VAULT_META_ENTRIES_MAX 32
#define VAULT_META_KEY_MAX 128
#define VAULT_META_VALUE_MAX 1024
#define VAULT_META_TOTAL_MAX 8192 /* sum of key and value bytes */
#define VAULT_LIST_DEFAULT 100
#define VAULT_LIST_MAX 1000
#define VAULT_RESOLVE_MAX 64 /* names per resolve call */

/* Purposes: separate keys for separate uses of the one hub secret. */
#define VAULT_PURPOSE_SECRETS "vault"
#define VAULT_PURPOSE_TOKENS "apikey-token"

/* The hub secret (and during a rotation the previous one), kept as HKDF
 * pseudo-random keys. Plain data; wipe with vault_keyring_clear. */
struct vault_keyring {
    uint8_t prk[CRYPTO_SHA256_LEN];
    char fp[9]; /* fingerprint of the current secret */
    bool has_prev;
    uint8_t prev_prk[CRYPTO_SHA256_LEN];
    char prev_fp[9];
};

/* Reads the hub secret: value when non-empty, else the first line of file
 * (at most VAULT_HUB_SECRET_MAX bytes; trailing whitespace dropped). *out is
 * malloc'd (caller frees, after wiping). Missing or shorter than
 * VAULT_HUB_SECRET_MIN → AB_EINVAL with a message saying how to make one;
 * what names the setting ("hub_secret") in that message. */
int vault_hub_secret_load(const char *what, const char *value, const char *file, char **out,
                          size_t *len, char *err, size_t errlen);

/* prev may be NULL (no rotation from an older secret). */
int vault_keyring_init(struct vault_keyring *kr, const void *secret, size_t len, const void *prev,
                       size_t prevlen, char *err, size_t errlen);
void vault_keyring_clear(struct vault_keyring *kr);

/* The current secret's key for purpose and generation, with its id. */
int vault_keyring_derive(const struct vault_keyring *kr, const char *purpose, int generation,
                         uint8_t key[CRYPTO_AES_KEY_LEN], char key_id[VAULT_KEY_ID_MAX]);
/* The key a stored key id names (current or previous secret). AB_ENOENT when
 * the id's fingerprint matches neither (the row was written under another
 * hub secret: rotate with --previous-hub-secret-file). */
int vault_keyring_lookup(const struct vault_keyring *kr, const char *purpose, const char *key_id,
                         uint8_t key[CRYPTO_AES_KEY_LEN]);

/* AAD of a vault value: length-prefixed fields, so no two scopes collide. */
size_t vault_aad(const char *ns, const char *user, const char *name, int version, uint8_t *out,
                 size_t cap);

/* AAD of a stored API key token: binds the key's id and hash. */
size_t vault_token_aad(const char *key_id, const char *hash, uint8_t *out, size_t cap);

/* Encrypts len bytes into ct (len + CRYPTO_GCM_TAG_LEN bytes: ciphertext then
 * tag) under a fresh random nonce. */
int vault_seal(const uint8_t key[CRYPTO_AES_KEY_LEN], const uint8_t *aad, size_t aadlen,
               const void *pt, size_t len, uint8_t nonce[CRYPTO_GCM_NONCE_LEN], uint8_t *ct);
/* ctlen includes the tag; pt has ctlen - 16 bytes. AB_EDENIED when the data,
 * nonce, key or AAD were changed; AB_EINVAL when ctlen < 16. */
int vault_open(const uint8_t key[CRYPTO_AES_KEY_LEN], const uint8_t *aad, size_t aadlen,
               const uint8_t nonce[CRYPTO_GCM_NONCE_LEN], const uint8_t *ct, size_t ctlen,
               uint8_t *pt);

/* Seal and open with hex text in and out (as stored in PostgreSQL, with
 * encode(.., 'hex')). seal uses the current secret's key of generation and
 * writes its id; open finds the key by the stored id. *ct_hex, *nonce_hex
 * and *pt are malloc'd; *pt is NUL-terminated (len excludes it): wipe it
 * with OPENSSL_cleanse before free. open: AB_ENOENT unknown key, AB_EDENIED
 * tampered, AB_EINVAL malformed. */
int vault_seal_hex(const struct vault_keyring *kr, const char *purpose, int generation,
                   const uint8_t *aad, size_t aadlen, const void *pt, size_t len, char **ct_hex,
                   char **nonce_hex, char key_id[VAULT_KEY_ID_MAX]);
int vault_open_hex(const struct vault_keyring *kr, const char *purpose, const char *key_id,
                   const char *ct_hex, const char *nonce_hex, const uint8_t *aad, size_t aadlen,
                   uint8_t **pt, size_t *ptlen);

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
