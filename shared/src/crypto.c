/* Hashes, MACs, key derivation, AEAD and encodings over OpenSSL 3 EVP.
 *
 * The void functions (digest, HMAC) can only fail when OpenSSL cannot
 * allocate. They abort then rather than hand back a predictable output:
 * a zeroed MAC would make a forged token compare equal. */
#include "agentbox/crypto.h"
#include "agentbox/common.h"
#include "agentbox/hex.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

/* RAND_bytes takes an int length; larger requests go in chunks. */
#define RAND_CHUNK (1 << 20)
/* RFC 5869: L ≤ 255 * HashLen. */
#define HKDF_MAX_OUT (255 * CRYPTO_SHA256_LEN)

int crypto_random(void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len > 0) {
        size_t n = AB_MIN(len, (size_t)RAND_CHUNK);
        if (RAND_bytes(p, (int)n) != 1)
            return AB_EIO;
        p += n;
        len -= n;
    }
    return 0;
}

void crypto_sha256(const void *data, size_t len, uint8_t out[CRYPTO_SHA256_LEN])
{
    unsigned int outlen = 0;

    if (EVP_Digest(data, len, out, &outlen, EVP_sha256(), NULL) != 1 || outlen != CRYPTO_SHA256_LEN)
        abort();
}

void crypto_sha256_hex(const char *s, char out[65])
{
    uint8_t d[CRYPTO_SHA256_LEN];

    crypto_sha256(s, strlen(s), d);
    crypto_hex_encode(d, sizeof(d), out);
}

void crypto_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        uint8_t out[CRYPTO_SHA256_LEN])
{
    static const uint8_t empty = 0;
    char digest[] = "SHA256";
    OSSL_PARAM params[2];
    EVP_MAC *mac = NULL;
    EVP_MAC_CTX *ctx = NULL;
    size_t outlen = 0;
    int ok = 0;

    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0);
    params[1] = OSSL_PARAM_construct_end();
    mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (mac == NULL)
        goto out;
    ctx = EVP_MAC_CTX_new(mac);
    if (ctx == NULL)
        goto out;
    /* A zero-length key is legal HMAC; OpenSSL wants a non-NULL pointer. */
    if (EVP_MAC_init(ctx, keylen > 0 ? key : &empty, keylen, params) != 1)
        goto out;
    if (len > 0 && EVP_MAC_update(ctx, data, len) != 1)
        goto out;
    if (EVP_MAC_final(ctx, out, &outlen, CRYPTO_SHA256_LEN) != 1 || outlen != CRYPTO_SHA256_LEN)
        goto out;
    ok = 1;
out:
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    if (!ok)
        abort();
}

int crypto_hkdf_sha256(const void *ikm, size_t ikmlen, const void *salt, size_t saltlen,
                       const void *info, size_t infolen, uint8_t *out, size_t outlen)
{
    static uint8_t empty = 0;
    char digest[] = "SHA256";
    OSSL_PARAM params[5];
    size_t n = 0;
    EVP_KDF *kdf = NULL;
    EVP_KDF_CTX *ctx = NULL;
    int rc = AB_EIO;

    if (outlen == 0 || outlen > HKDF_MAX_OUT)
        return AB_ELIMIT;
    params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
    params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
                                                    ikmlen > 0 ? (void *)ikm : &empty, ikmlen);
    /* An absent salt means HashLen zero bytes (RFC 5869 §2.2), which is what
     * HMAC does with an empty key, so only pass a salt that has bytes. */
    if (saltlen > 0)
        params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, saltlen);
    if (infolen > 0)
        params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, infolen);
    params[n] = OSSL_PARAM_construct_end();

    kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    if (kdf == NULL)
        goto out;
    ctx = EVP_KDF_CTX_new(kdf);
    if (ctx == NULL)
        goto out;
    if (EVP_KDF_derive(ctx, out, outlen, params) != 1)
        goto out;
    rc = 0;
out:
    EVP_KDF_CTX_free(ctx);
    EVP_KDF_free(kdf);
    return rc;
}

int crypto_aes_gcm_encrypt(const uint8_t key[CRYPTO_AES_KEY_LEN],
                           const uint8_t nonce[CRYPTO_GCM_NONCE_LEN], const void *aad,
                           size_t aadlen, const void *pt, size_t len, uint8_t *ct,
                           uint8_t tag[CRYPTO_GCM_TAG_LEN])
{
    EVP_CIPHER_CTX *ctx = NULL;
    int n = 0;
    int rc = AB_EIO;

    if (len > INT_MAX || aadlen > INT_MAX)
        return AB_ELIMIT;
    ctx = EVP_CIPHER_CTX_new();
    if (ctx == NULL)
        return AB_ENOMEM;
    if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, CRYPTO_GCM_NONCE_LEN, NULL) != 1 ||
        EVP_EncryptInit_ex(ctx, NULL, NULL, key, nonce) != 1)
        goto out;
    if (aadlen > 0 && EVP_EncryptUpdate(ctx, NULL, &n, aad, (int)aadlen) != 1)
        goto out;
    if (len > 0 && EVP_EncryptUpdate(ctx, ct, &n, pt, (int)len) != 1)
        goto out;
    /* GCM is a stream mode: Final writes nothing, but it must run to compute the tag. */
    if (EVP_EncryptFinal_ex(ctx, ct + (len > 0 ? (size_t)n : 0), &n) != 1)
        goto out;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, CRYPTO_GCM_TAG_LEN, tag) != 1)
        goto out;
    rc = 0;
out:
    EVP_CIPHER_CTX_free(ctx);
    return rc;
}

int crypto_aes_gcm_decrypt(const uint8_t key[CRYPTO_AES_KEY_LEN],
                           const uint8_t nonce[CRYPTO_GCM_NONCE_LEN], const void *aad,
                           size_t aadlen, const uint8_t *ct, size_t len,
                           const uint8_t tag[CRYPTO_GCM_TAG_LEN], uint8_t *pt)
{
    EVP_CIPHER_CTX *ctx = NULL;
    uint8_t tagcopy[CRYPTO_GCM_TAG_LEN];
    uint8_t sink[16];
    int n = 0;
    int rc = AB_EIO;

    if (len > INT_MAX || aadlen > INT_MAX)
        return AB_ELIMIT;
    ctx = EVP_CIPHER_CTX_new();
    if (ctx == NULL)
        return AB_ENOMEM;
    memcpy(tagcopy, tag, sizeof(tagcopy)); /* the ctrl takes a non-const pointer */
    if (EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, CRYPTO_GCM_NONCE_LEN, NULL) != 1 ||
        EVP_DecryptInit_ex(ctx, NULL, NULL, key, nonce) != 1)
        goto out;
    if (aadlen > 0 && EVP_DecryptUpdate(ctx, NULL, &n, aad, (int)aadlen) != 1)
        goto out;
    if (len > 0 && EVP_DecryptUpdate(ctx, pt, &n, ct, (int)len) != 1)
        goto out;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, CRYPTO_GCM_TAG_LEN, tagcopy) != 1)
        goto out;
    if (EVP_DecryptFinal_ex(ctx, sink, &n) != 1) {
        rc = AB_EDENIED;
        goto out;
    }
    rc = 0;
out:
    /* Never hand out plaintext that did not authenticate. */
    if (rc != 0 && len > 0)
        OPENSSL_cleanse(pt, len);
    EVP_CIPHER_CTX_free(ctx);
    return rc;
}

void crypto_hex_encode(const void *data, size_t len, char *out)
{
    hex_encode(data, len, out);
}

/* Accepts either case. AB_ELIMIT when out cannot hold the decoded bytes. */
int crypto_hex_decode(const char *hex, uint8_t *out, size_t outlen, size_t *written)
{
    return hex_decode(hex, strlen(hex), out, outlen, written);
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void crypto_base64_encode(const void *data, size_t len, char *out)
{
    const uint8_t *p = data;
    size_t o = 0;
    size_t i = 0;

    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict: the length is a multiple of 4, '=' only as the last one or two
 * characters, no whitespace, and the bits a padded group drops are zero, so
 * every byte string has exactly one accepted encoding. */
int crypto_base64_decode(const char *b64, size_t b64len, uint8_t *out, size_t outlen,
                         size_t *written)
{
    size_t pad = 0;
    size_t need;
    size_t o = 0;

    if (written != NULL)
        *written = 0;
    if (b64len % 4 != 0)
        return AB_EINVAL;
    if (b64len > 0 && b64[b64len - 1] == '=')
        pad = (b64len > 1 && b64[b64len - 2] == '=') ? 2 : 1;
    for (size_t i = 0; i < b64len - pad; i++) {
        if (b64_value(b64[i]) < 0)
            return AB_EINVAL;
    }
    if (pad == 2 && (b64_value(b64[b64len - 3]) & 0x0f) != 0)
        return AB_EINVAL;
    if (pad == 1 && (b64_value(b64[b64len - 2]) & 0x03) != 0)
        return AB_EINVAL;
    need = b64len / 4 * 3 - pad;
    if (need > outlen)
        return AB_ELIMIT;
    for (size_t i = 0; i < b64len; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4; k++) {
            int d = b64[i + k] == '=' ? 0 : b64_value(b64[i + k]);
            v = v << 6 | (uint32_t)d;
        }
        out[o++] = (uint8_t)(v >> 16);
        if (o < need)
            out[o++] = (uint8_t)(v >> 8);
        if (o < need)
            out[o++] = (uint8_t)v;
    }
    if (written != NULL)
        *written = o;
    return 0;
}

bool crypto_equal(const void *a, const void *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}

/* AB_ELIMIT when out cannot hold the prefix, 64 hex digits and the NUL. */
int crypto_token(const char *prefix, char *out, size_t outlen)
{
    uint8_t raw[32];
    size_t plen = prefix != NULL ? strlen(prefix) : 0;
    int rc;

    if (outlen < plen + 2 * sizeof(raw) + 1)
        return AB_ELIMIT;
    rc = crypto_random(raw, sizeof(raw));
    if (rc != 0)
        return rc;
    memcpy(out, prefix != NULL ? prefix : "", plen);
    crypto_hex_encode(raw, sizeof(raw), out + plen);
    OPENSSL_cleanse(raw, sizeof(raw));
    return 0;
}
