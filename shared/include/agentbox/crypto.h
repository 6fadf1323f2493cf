/* Thin wrappers over OpenSSL. All return 0 or a negative ab_err. */
#ifndef AGENTBOX_CRYPTO_H
#define AGENTBOX_CRYPTO_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define CRYPTO_SHA256_LEN 32
#define CRYPTO_AES_KEY_LEN 32
#define CRYPTO_GCM_NONCE_LEN 12
#define CRYPTO_GCM_TAG_LEN 16

int crypto_random(void *buf, size_t len);
void crypto_sha256(const void *data, size_t len, uint8_t out[CRYPTO_SHA256_LEN]);
/* Lowercase hex SHA-256 of a string; out is at least 65 bytes. */
void crypto_sha256_hex(const char *s, char out[65]);
void crypto_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        uint8_t out[CRYPTO_SHA256_LEN]);
int crypto_hkdf_sha256(const void *ikm, size_t ikmlen, const void *salt, size_t saltlen,
                       const void *info, size_t infolen, uint8_t *out, size_t outlen);

/* AES-256-GCM. ct has room for len bytes; tag is 16 bytes. decrypt returns
 * AB_EDENIED when the tag does not verify (tampered data, key or AAD). */
int crypto_aes_gcm_encrypt(const uint8_t key[CRYPTO_AES_KEY_LEN],
                           const uint8_t nonce[CRYPTO_GCM_NONCE_LEN], const void *aad,
                           size_t aadlen, const void *pt, size_t len, uint8_t *ct,
                           uint8_t tag[CRYPTO_GCM_TAG_LEN]);
int crypto_aes_gcm_decrypt(const uint8_t key[CRYPTO_AES_KEY_LEN],
                           const uint8_t nonce[CRYPTO_GCM_NONCE_LEN], const void *aad,
                           size_t aadlen, const uint8_t *ct, size_t len,
                           const uint8_t tag[CRYPTO_GCM_TAG_LEN], uint8_t *pt);

/* Hex of NUL-terminated text (hex.h does the work): out has 2*len+1 bytes. Decode
 * returns AB_EINVAL on odd length or a non-hex digit, AB_ELIMIT when out is too small. */
void crypto_hex_encode(const void *data, size_t len, char *out);
int crypto_hex_decode(const char *hex, uint8_t *out, size_t outlen, size_t *written);
/* Standard base64 with padding. Encode: out has 4*ceil(len/3)+1 bytes.
 * Decode: AB_EINVAL on bad input; AB_ELIMIT when outlen is too small. */
void crypto_base64_encode(const void *data, size_t len, char *out);
int crypto_base64_decode(const char *b64, size_t b64len, uint8_t *out, size_t outlen,
                         size_t *written);

/* Constant-time equality of two buffers of the same length. */
bool crypto_equal(const void *a, const void *b, size_t len);

/* "<prefix><64 lowercase hex>" from 32 random bytes, e.g. agbx_…, abxc_… */
int crypto_token(const char *prefix, char *out, size_t outlen);

#endif
