/* The hub's key ring: the hub secret, the keys HKDF derives from it per
 * purpose and generation, and AES-256-GCM sealing (the vault's values and
 * the stored API key tokens). Pure functions, any thread. See keyring.h. */
#include "hub/keyring.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "agentbox/common.h"

/* --- hub secret and key ring ------------------------------------------------------- */

static const char HOWTO[] =
    "generate one with `openssl rand -hex 32` and set it through AGENTBOX_HUB_SECRET, "
    "--hub-secret-file FILE (AGENTBOX_HUB_SECRET_FILE) or hub_secret_file in the config file; "
    "keep it: it decrypts the vault and the stored API keys";

int vault_hub_secret_load(const char *what, const char *value, const char *file, char **out,
                          size_t *len, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = NULL;
    int rc = 0;

    *out = NULL;
    *len = 0;
    if (value != NULL && value[0] != '\0') {
        n = strlen(value);
        if (n > VAULT_HUB_SECRET_MAX) {
            snprintf(err, errlen, "%s is longer than %d bytes", what, VAULT_HUB_SECRET_MAX);
            return AB_EINVAL;
        }
        buf = malloc(n + 1);
        if (buf == NULL)
            return AB_ENOMEM;
        memcpy(buf, value, n + 1);
    } else if (file != NULL && file[0] != '\0') {
        f = fopen(file, "r");
        if (f == NULL) {
            snprintf(err, errlen, "cannot read %s_file %s: %s", what, file, strerror(errno));
            return AB_EINVAL;
        }
        buf = calloc(1, VAULT_HUB_SECRET_MAX + 2);
        if (buf == NULL) {
            rc = AB_ENOMEM;
            goto out;
        }
        n = fread(buf, 1, VAULT_HUB_SECRET_MAX + 1, f);
        if (n > VAULT_HUB_SECRET_MAX) {
            snprintf(err, errlen, "%s_file %s is longer than %d bytes", what, file,
                     VAULT_HUB_SECRET_MAX);
            rc = AB_EINVAL;
            goto out;
        }
        buf[n] = '\0';
        n = strcspn(buf, "\r\n");
        buf[n] = '\0';
    } else {
        snprintf(err, errlen, "%s is required: %s", what, HOWTO);
        return AB_EINVAL;
    }
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    if (n < VAULT_HUB_SECRET_MIN) {
        snprintf(err, errlen, "%s must be at least %d bytes, got %zu: %s", what,
                 VAULT_HUB_SECRET_MIN, n, HOWTO);
        rc = AB_EINVAL;
        goto out;
    }
    *out = buf;
    *len = n;
    buf = NULL;
out:
    if (f != NULL)
        fclose(f);
    if (buf != NULL) {
        OPENSSL_cleanse(buf, n);
        free(buf);
    }
    return rc;
}

static int root_key(const void *secret, size_t len, uint8_t prk[CRYPTO_SHA256_LEN], char fp[9])
{
    static const char salt[] = "agentbox hub secret v1";
    static const char info_root[] = "root";
    static const char info_fp[] = "fingerprint";
    uint8_t f[4];
    int rc;

    rc = crypto_hkdf_sha256(secret, len, salt, sizeof(salt) - 1, info_root, sizeof(info_root) - 1,
                            prk, CRYPTO_SHA256_LEN);
    if (rc == 0)
        rc = crypto_hkdf_sha256(prk, CRYPTO_SHA256_LEN, NULL, 0, info_fp, sizeof(info_fp) - 1, f,
                                sizeof(f));
    if (rc == 0)
        crypto_hex_encode(f, sizeof(f), fp);
    return rc;
}

int vault_keyring_init(struct vault_keyring *kr, const void *secret, size_t len, const void *prev,
                       size_t prevlen, char *err, size_t errlen)
{
    int rc;

    memset(kr, 0, sizeof(*kr));
    if (secret == NULL || len < VAULT_HUB_SECRET_MIN) {
        snprintf(err, errlen, "the hub secret must be at least %d bytes", VAULT_HUB_SECRET_MIN);
        return AB_EINVAL;
    }
    rc = root_key(secret, len, kr->prk, kr->fp);
    if (rc == 0 && prev != NULL) {
        if (prevlen < VAULT_HUB_SECRET_MIN) {
            snprintf(err, errlen, "the previous hub secret must be at least %d bytes",
                     VAULT_HUB_SECRET_MIN);
            rc = AB_EINVAL;
        } else {
            rc = root_key(prev, prevlen, kr->prev_prk, kr->prev_fp);
            kr->has_prev = rc == 0;
        }
    }
    if (rc != 0) {
        if (err[0] == '\0')
            snprintf(err, errlen, "cannot derive keys from the hub secret");
        vault_keyring_clear(kr);
    }
    return rc;
}

void vault_keyring_clear(struct vault_keyring *kr)
{
    OPENSSL_cleanse(kr, sizeof(*kr));
}

static int derive(const uint8_t prk[CRYPTO_SHA256_LEN], const char *purpose, int generation,
                  uint8_t key[CRYPTO_AES_KEY_LEN])
{
    char info[96];
    int n = snprintf(info, sizeof(info), "agentbox/%s/v%d", purpose, generation);

    if (n < 0 || (size_t)n >= sizeof(info) || generation < 1)
        return AB_EINVAL;
    return crypto_hkdf_sha256(prk, CRYPTO_SHA256_LEN, NULL, 0, info, (size_t)n, key,
                              CRYPTO_AES_KEY_LEN);
}

int vault_keyring_derive(const struct vault_keyring *kr, const char *purpose, int generation,
                         uint8_t key[CRYPTO_AES_KEY_LEN], char key_id[VAULT_KEY_ID_MAX])
{
    snprintf(key_id, VAULT_KEY_ID_MAX, "v%d.%s", generation, kr->fp);
    return derive(kr->prk, purpose, generation, key);
}

int vault_keyring_lookup(const struct vault_keyring *kr, const char *purpose, const char *key_id,
                         uint8_t key[CRYPTO_AES_KEY_LEN])
{
    char *end = NULL;
    long gen;

    if (key_id == NULL || key_id[0] != 'v')
        return AB_EINVAL;
    gen = strtol(key_id + 1, &end, 10);
    if (end == NULL || *end != '.' || gen < 1 || gen > 1000000)
        return AB_EINVAL;
    if (strcmp(end + 1, kr->fp) == 0)
        return derive(kr->prk, purpose, (int)gen, key);
    if (kr->has_prev && strcmp(end + 1, kr->prev_fp) == 0)
        return derive(kr->prev_prk, purpose, (int)gen, key);
    return AB_ENOENT;
}

/* --- sealing --------------------------------------------------------------------------- */

static size_t put_field(uint8_t *out, size_t at, size_t cap, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;

    if (at + 4 + n <= cap) {
        out[at] = (uint8_t)(n >> 24);
        out[at + 1] = (uint8_t)(n >> 16);
        out[at + 2] = (uint8_t)(n >> 8);
        out[at + 3] = (uint8_t)n;
        memcpy(out + at + 4, s != NULL ? s : "", n);
    }
    return at + 4 + n;
}

size_t vault_aad(const char *ns, const char *user, const char *name, int version, uint8_t *out,
                 size_t cap)
{
    char v[16];
    size_t at = 0;

    snprintf(v, sizeof(v), "%d", version);
    at = put_field(out, at, cap, "agentbox-vault-v1");
    at = put_field(out, at, cap, ns);
    at = put_field(out, at, cap, user);
    at = put_field(out, at, cap, name);
    at = put_field(out, at, cap, v);
    return at;
}

size_t vault_token_aad(const char *key_id, const char *hash, uint8_t *out, size_t cap)
{
    size_t at = 0;

    at = put_field(out, at, cap, "agentbox-apikey-token-v1");
    at = put_field(out, at, cap, key_id);
    at = put_field(out, at, cap, hash);
    return at;
}

int vault_seal(const uint8_t key[CRYPTO_AES_KEY_LEN], const uint8_t *aad, size_t aadlen,
               const void *pt, size_t len, uint8_t nonce[CRYPTO_GCM_NONCE_LEN], uint8_t *ct)
{
    int rc = crypto_random(nonce, CRYPTO_GCM_NONCE_LEN);

    if (rc != 0)
        return rc;
    return crypto_aes_gcm_encrypt(key, nonce, aad, aadlen, pt, len, ct, ct + len);
}

int vault_open(const uint8_t key[CRYPTO_AES_KEY_LEN], const uint8_t *aad, size_t aadlen,
               const uint8_t nonce[CRYPTO_GCM_NONCE_LEN], const uint8_t *ct, size_t ctlen,
               uint8_t *pt)
{
    if (ctlen < CRYPTO_GCM_TAG_LEN)
        return AB_EINVAL;
    return crypto_aes_gcm_decrypt(key, nonce, aad, aadlen, ct, ctlen - CRYPTO_GCM_TAG_LEN,
                                  ct + ctlen - CRYPTO_GCM_TAG_LEN, pt);
}

static char *hex_of(const uint8_t *data, size_t len)
{
    char *h = malloc(2 * len + 1);

    if (h != NULL)
        crypto_hex_encode(data, len, h);
    return h;
}

/* Decodes a hex column into a new buffer of *len bytes. */
static uint8_t *unhex(const char *hex, size_t *len)
{
    size_t n = strlen(hex) / 2;
    uint8_t *b = malloc(n ? n : 1);

    if (b == NULL)
        return NULL;
    if (crypto_hex_decode(hex, b, n, len) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

int vault_open_hex(const struct vault_keyring *kr, const char *purpose, const char *key_id,
                   const char *ct_hex, const char *nonce_hex, const uint8_t *aad, size_t aadlen,
                   uint8_t **pt, size_t *ptlen)
{
    uint8_t key[CRYPTO_AES_KEY_LEN];
    uint8_t *ct = NULL, *nonce = NULL, *out = NULL;
    size_t ctlen = 0, nlen = 0;
    int rc;

    *pt = NULL;
    *ptlen = 0;
    rc = vault_keyring_lookup(kr, purpose, key_id, key);
    if (rc != 0)
        return rc;
    ct = unhex(ct_hex, &ctlen);
    nonce = unhex(nonce_hex, &nlen);
    if (ct == NULL || nonce == NULL || nlen != CRYPTO_GCM_NONCE_LEN || ctlen < CRYPTO_GCM_TAG_LEN) {
        rc = AB_EINVAL;
        goto out;
    }
    out = malloc(ctlen - CRYPTO_GCM_TAG_LEN + 1);
    if (out == NULL) {
        rc = AB_ENOMEM;
        goto out;
    }
    rc = vault_open(key, aad, aadlen, nonce, ct, ctlen, out);
    if (rc != 0)
        goto out;
    out[ctlen - CRYPTO_GCM_TAG_LEN] = '\0';
    *pt = out;
    *ptlen = ctlen - CRYPTO_GCM_TAG_LEN;
    out = NULL;
out:
    OPENSSL_cleanse(key, sizeof(key));
    free(ct);
    free(nonce);
    if (out != NULL) {
        OPENSSL_cleanse(out, ctlen - CRYPTO_GCM_TAG_LEN);
        free(out);
    }
    return rc;
}

int vault_seal_hex(const struct vault_keyring *kr, const char *purpose, int generation,
                   const uint8_t *aad, size_t aadlen, const void *pt, size_t len, char **ct_hex,
                   char **nonce_hex, char key_id[VAULT_KEY_ID_MAX])
{
    uint8_t key[CRYPTO_AES_KEY_LEN], nonce[CRYPTO_GCM_NONCE_LEN];
    uint8_t *ct = malloc(len + CRYPTO_GCM_TAG_LEN);
    int rc;

    *ct_hex = *nonce_hex = NULL;
    if (ct == NULL)
        return AB_ENOMEM;
    rc = vault_keyring_derive(kr, purpose, generation, key, key_id);
    if (rc == 0)
        rc = vault_seal(key, aad, aadlen, pt, len, nonce, ct);
    OPENSSL_cleanse(key, sizeof(key));
    if (rc == 0) {
        *ct_hex = hex_of(ct, len + CRYPTO_GCM_TAG_LEN);
        *nonce_hex = hex_of(nonce, sizeof(nonce));
        if (*ct_hex == NULL || *nonce_hex == NULL) {
            free(*ct_hex);
            free(*nonce_hex);
            *ct_hex = *nonce_hex = NULL;
            rc = AB_ENOMEM;
        }
    }
    free(ct);
    return rc;
}
