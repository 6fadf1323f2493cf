/* The hub's key ring (keyring.c): the hub secret kept as HKDF pseudo-random
 * keys (and during a rotation the previous one), keys derived per purpose
 * ("vault", "apikey-token") and generation with their ids
 * "v<generation>.<fingerprint>", and AES-256-GCM sealing with an AAD that
 * binds what a ciphertext belongs to. Used by the vault (vault.h) and by API
 * keys, which keep their token sealed (keys.h). Pure functions, any thread. */
#ifndef AGENTBOX_HUB_KEYRING_H
#define AGENTBOX_HUB_KEYRING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/crypto.h"

#define VAULT_HUB_SECRET_MIN 32   /* bytes */
#define VAULT_HUB_SECRET_MAX 4096 /* bytes */
#define VAULT_KEY_ID_MAX 32       /* "v12.1a2b3c4d" */

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

#endif
