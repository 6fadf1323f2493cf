/* asrt_verify and asrt_keyring_add on arbitrary bytes: never crash, and
 * whatever is accepted is sane.
 *
 * The first byte picks what the rest is:
 *   0  a token as a client or a rogue cluster would send it;
 *   1  a JSON payload, signed here with the trusted key, so the checks after
 *      the signature (fields, audience, times) see arbitrary content too;
 *   2  a public-key text for the keyring.
 * Invariants: a refusal is one of the documented codes with a message; an
 * accepted assertion passes asrt_claims_check, names this cluster, is within
 * its time window, does not name the revoked key "ak_revoked", and signs again into a token that
 * verifies to the same claims. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"

#define SECRET "fuzz hub secret"
#define NOW 1800000000

static struct asrt_signer *g_signer;
static struct asrt_keyring *g_ring;
static EVP_PKEY *g_pkey;

static void setup(void)
{
    char pub[ASRT_PUBKEY_TEXT_MAX + 1], err[256];
    uint8_t seed[32];

    if (g_ring != NULL)
        return;
    if (asrt_signer_from_secret(SECRET, strlen(SECRET), &g_signer) != 0 ||
        asrt_signer_public_text(g_signer, pub, sizeof(pub)) != 0)
        abort();
    g_ring = asrt_keyring_new("alpha");
    if (g_ring == NULL || asrt_keyring_add(g_ring, pub, err, sizeof(err)) != 0 ||
        asrt_keyring_revoke(g_ring, "ak_revoked", NOW) != 0)
        abort();
    if (crypto_hkdf_sha256(SECRET, strlen(SECRET), ASRT_HKDF_SALT, strlen(ASRT_HKDF_SALT),
                           ASRT_HKDF_INFO, strlen(ASRT_HKDF_INFO), seed, sizeof(seed)) != 0)
        abort();
    g_pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, sizeof(seed));
    if (g_pkey == NULL)
        abort();
}

static void b64url(const uint8_t *p, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;

    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        if (i + 1 < n)
            out[o++] = a[v >> 6 & 63];
        if (i + 2 < n)
            out[o++] = a[v & 63];
    }
    out[o] = '\0';
}

/* base64url(json) "." base64url(Ed25519(context || base64url(json))) */
static size_t sign_payload(const uint8_t *json, size_t n, char *out)
{
    char msg[sizeof(ASRT_SIGN_CONTEXT) + 2 * ASRT_TOKEN_MAX];
    uint8_t sig[64];
    size_t siglen = sizeof(sig), m, cl = strlen(ASRT_SIGN_CONTEXT);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();

    b64url(json, n, out);
    m = strlen(out);
    memcpy(msg, ASRT_SIGN_CONTEXT, cl);
    memcpy(msg + cl, out, m);
    if (ctx == NULL || EVP_DigestSignInit(ctx, NULL, NULL, NULL, g_pkey) != 1 ||
        EVP_DigestSign(ctx, sig, &siglen, (uint8_t *)msg, cl + m) != 1)
        abort();
    EVP_MD_CTX_free(ctx);
    out[m] = '.';
    b64url(sig, sizeof(sig), out + m + 1);
    return strlen(out);
}

static struct asrt_cache *g_cache;

static void check_verify(const char *tok, size_t len, int64_t now)
{
    struct asrt_claims c, again;
    char err[256], tok2[ASRT_TOKEN_MAX + 1], err2[256];
    int rc = asrt_verify(g_ring, tok, len, now, &c, err, sizeof(err));

    /* the cache answers exactly what a full verification does, twice (the
     * second time from the cache when the first succeeded) */
    if (g_cache == NULL && (g_cache = asrt_cache_new(64)) == NULL)
        abort();
    for (int i = 0; i < 2; i++) {
        struct asrt_claims cc;
        if (asrt_verify_cached(g_ring, g_cache, NULL, tok, len, now, &cc, err2, sizeof(err2)) !=
                rc ||
            (rc == 0 &&
             (strcmp(cc.user, c.user) != 0 || strcmp(cc.rid, c.rid) != 0 || cc.exp != c.exp)))
            abort();
    }

    if (rc != 0) {
        if (rc > ASRT_ETOOLONG || rc < ASRT_EREVOKED || err[0] == '\0' || c.user[0] != '\0')
            abort();
        return;
    }
    if (asrt_claims_check(&c, err2, sizeof(err2)) != 0 || strcmp(c.aud, "alpha") != 0 ||
        now - c.exp > ASRT_SKEW_S || c.iat - now > ASRT_SKEW_S ||
        strcmp(c.kid, asrt_signer_kid(g_signer)) != 0 || strcmp(c.key, "ak_revoked") == 0)
        abort();
    if (asrt_sign(g_signer, &c, tok2, sizeof(tok2), err2, sizeof(err2)) != 0 ||
        asrt_verify(g_ring, tok2, strlen(tok2), now, &again, err2, sizeof(err2)) != 0 ||
        strcmp(c.key, again.key) != 0 || strcmp(c.team, again.team) != 0 ||
        strcmp(c.user, again.user) != 0 || strcmp(c.ns, again.ns) != 0 ||
        strcmp(c.role, again.role) != 0 || strcmp(c.mode, again.mode) != 0 ||
        strcmp(c.rid, again.rid) != 0 || c.iat != again.iat || c.exp != again.exp)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char tok[2 * ASRT_TOKEN_MAX + 256];
    char text[ASRT_PUBKEY_TEXT_MAX + 16], err[256];

    setup();
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0: {
        /* heap copy of exactly size-1 bytes, so ASan sees any over-read */
        char *t = malloc(size - 1 > 0 ? size - 1 : 1);
        if (t == NULL)
            return 0;
        memcpy(t, data + 1, size - 1);
        check_verify(t, size - 1, NOW);
        free(t);
        break;
    }
    case 1: {
        size_t n = size - 1;
        if (n > ASRT_TOKEN_MAX)
            n = ASRT_TOKEN_MAX;
        size_t len = sign_payload(data + 1, n, tok);
        check_verify(tok, len, NOW);
        break;
    }
    default: {
        struct asrt_keyring *kr = asrt_keyring_new("alpha");
        size_t n = size - 1 < sizeof(text) - 1 ? size - 1 : sizeof(text) - 1;
        int rc;
        if (kr == NULL)
            abort();
        memcpy(text, data + 1, n);
        text[n] = '\0';
        rc = asrt_keyring_add(kr, text, err, sizeof(err));
        if ((rc == 0) != (asrt_keyring_count(kr) == 1) || (rc != 0 && err[0] == '\0'))
            abort();
        asrt_keyring_free(kr);
        break;
    }
    }
    return 0;
}
