/* Principal assertions: round trip, the wire format pinned by an independent
 * encoder (HKDF seed, context, base64url written here from the header's
 * description), and one row per refusal. Payloads the library would never
 * sign (missing members, wrong types) are signed here with the same key, so
 * each check is reached with a valid signature and cannot hide behind ESIG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"

#define SECRET "hub secret for the assertion tests"
#define NOW 1800000000 /* 2027-01-15 */
#define TOKBUF (ASRT_TOKEN_MAX + 1)

/* ---- an encoder independent of assertion.c ---- */

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

/* The Ed25519 key of secret, derived as the header documents. */
static EVP_PKEY *spec_key(const char *secret)
{
    uint8_t seed[32];
    EVP_PKEY *k;

    assert_int_equal(crypto_hkdf_sha256(secret, strlen(secret), ASRT_HKDF_SALT,
                                        strlen(ASRT_HKDF_SALT), ASRT_HKDF_INFO,
                                        strlen(ASRT_HKDF_INFO), seed, sizeof(seed)),
                     0);
    k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, sizeof(seed));
    assert_non_null(k);
    return k;
}

static void spec_kid(const char *secret, char kid[ASRT_KID_LEN + 1])
{
    EVP_PKEY *k = spec_key(secret);
    uint8_t pub[32], d[32];
    size_t n = sizeof(pub);

    assert_int_equal(EVP_PKEY_get_raw_public_key(k, pub, &n), 1);
    crypto_sha256(pub, sizeof(pub), d);
    crypto_hex_encode(d, 8, kid);
    EVP_PKEY_free(k);
}

/* base64url(json) "." base64url(Ed25519(context || base64url(json))). */
static void spec_token(const char *secret, const char *json, char *out, size_t outlen)
{
    char msg[4096];
    uint8_t sig[64];
    size_t siglen = sizeof(sig);
    EVP_PKEY *k = spec_key(secret);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t n;

    assert_true((strlen(json) + 2) / 3 * 4 + 90 < outlen);
    b64url((const uint8_t *)json, strlen(json), out);
    n = strlen(out);
    snprintf(msg, sizeof(msg), "%s%s", ASRT_SIGN_CONTEXT, out);
    assert_int_equal(EVP_DigestSignInit(ctx, NULL, NULL, NULL, k), 1);
    assert_int_equal(EVP_DigestSign(ctx, sig, &siglen, (uint8_t *)msg, strlen(msg)), 1);
    out[n] = '.';
    b64url(sig, sizeof(sig), out + n + 1);
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(k);
}

/* The documented payload with one member replaced or dropped: member "x"
 * with value NULL drops it, otherwise value is raw JSON text. */
static void payload(char *out, size_t outlen, const char *member, const char *value)
{
    char kid[ASRT_KID_LEN + 3];
    char iat[24], exp[24];
    const char *names[] = {"v",    "kid",  "key", "team", "user", "ns",
                           "role", "mode", "aud", "rid",  "iat",  "exp"};
    const char *vals[12];
    size_t o = 0;

    snprintf(kid, sizeof(kid), "\"");
    spec_kid(SECRET, kid + 1);
    strcat(kid, "\"");
    snprintf(iat, sizeof(iat), "%d", NOW);
    snprintf(exp, sizeof(exp), "%d", NOW + 60);
    vals[0] = "1";
    vals[1] = kid;
    vals[2] = "\"ak_0123456789abcdef\"";
    vals[3] = "\"acme\"";
    vals[4] = "\"alice\"";
    vals[5] = "\"t-acme-alice\"";
    vals[6] = "\"tenant\"";
    vals[7] = "\"unrestricted\"";
    vals[8] = "\"alpha\"";
    vals[9] = "\"req-1\"";
    vals[10] = iat;
    vals[11] = exp;
    o += (size_t)snprintf(out + o, outlen - o, "{");
    for (size_t i = 0; i < AB_ARRAY_LEN(names); i++) {
        const char *v = vals[i];
        if (member != NULL && strcmp(member, names[i]) == 0) {
            if (value == NULL)
                continue;
            v = value;
        }
        o += (size_t)snprintf(out + o, outlen - o, "%s\"%s\":%s", o > 1 ? "," : "", names[i], v);
    }
    snprintf(out + o, outlen - o, "}");
}

/* ---- fixtures ---- */

static void claims(struct asrt_claims *c)
{
    memset(c, 0, sizeof(*c));
    strcpy(c->key, "ak_0123456789abcdef");
    strcpy(c->team, "acme");
    strcpy(c->user, "alice");
    strcpy(c->ns, "t-acme-alice");
    strcpy(c->role, "tenant");
    strcpy(c->mode, "unrestricted");
    strcpy(c->aud, "alpha");
    strcpy(c->rid, "req-1");
    c->iat = NOW;
    c->exp = NOW + 60;
}

static struct asrt_signer *signer(const char *secret)
{
    struct asrt_signer *s = NULL;

    assert_int_equal(asrt_signer_from_secret(secret, strlen(secret), &s), 0);
    assert_non_null(s);
    return s;
}

/* A keyring for cluster self holding s's public key. */
static struct asrt_keyring *ring(const char *self, const struct asrt_signer *s)
{
    struct asrt_keyring *kr = asrt_keyring_new(self);
    char pub[ASRT_PUBKEY_TEXT_MAX + 1], err[256];

    assert_non_null(kr);
    if (s != NULL) {
        assert_int_equal(asrt_signer_public_text(s, pub, sizeof(pub)), 0);
        assert_int_equal(asrt_keyring_add(kr, pub, err, sizeof(err)), 0);
    }
    return kr;
}

static int verify_at(const struct asrt_keyring *kr, const char *tok, int64_t now, char *err,
                     size_t errlen)
{
    struct asrt_claims out;
    int rc = asrt_verify(kr, tok, strlen(tok), now, &out, err, errlen);

    if (rc != 0) {
        /* a refusal fills nothing and always says why */
        assert_string_equal(out.user, "");
        assert_string_equal(out.kid, "");
        assert_true(strlen(err) > 10);
    }
    return rc;
}

/* ---- round trip and wire format ---- */

static void test_round_trip(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c, out;
    char tok[TOKBUF], err[256];

    claims(&c);
    strcpy(c.team, "");
    strcpy(c.role, "admin");
    strcpy(c.mode, "agent");
    strcpy(c.rid, "A.b_c:d-9");
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_non_null(strchr(tok, '.'));
    assert_null(strchr(strchr(tok, '.') + 1, '.'));
    assert_int_equal(asrt_verify(kr, tok, strlen(tok), NOW, &out, err, sizeof(err)), 0);
    assert_string_equal(out.kid, asrt_signer_kid(s));
    assert_string_equal(out.key, "ak_0123456789abcdef");
    assert_string_equal(out.team, "");
    assert_string_equal(out.user, "alice");
    assert_string_equal(out.ns, "t-acme-alice");
    assert_string_equal(out.role, "admin");
    assert_string_equal(out.mode, "agent");
    assert_string_equal(out.aud, "alpha");
    assert_string_equal(out.rid, "A.b_c:d-9");
    assert_int_equal(out.iat, NOW);
    assert_int_equal(out.exp, NOW + 60);
    /* the length passed is what counts, not a NUL */
    assert_int_equal(asrt_verify(kr, tok, strlen(tok) - 1, NOW, NULL, err, sizeof(err)),
                     ASRT_EENCODING);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

/* Ed25519 is deterministic: the library's token is byte for byte the one the
 * header describes. */
static void test_wire_format_matches_spec(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_claims c;
    char tok[TOKBUF], want[TOKBUF], json[1024], err[256];

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    payload(json, sizeof(json), NULL, NULL);
    spec_token(SECRET, json, want, sizeof(want));
    assert_string_equal(tok, want);
    asrt_signer_free(s);
}

static void test_kid_and_public_text(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    char pub[ASRT_PUBKEY_TEXT_MAX + 1], kid[ASRT_KID_LEN + 1], want[128];
    EVP_PKEY *k = spec_key(SECRET);
    uint8_t raw[32];
    size_t n = sizeof(raw);
    char b64[64];

    spec_kid(SECRET, kid);
    assert_string_equal(asrt_signer_kid(s), kid);
    assert_int_equal(EVP_PKEY_get_raw_public_key(k, raw, &n), 1);
    b64url(raw, sizeof(raw), b64);
    snprintf(want, sizeof(want), "ed25519:%s:%s", kid, b64);
    assert_int_equal(asrt_signer_public_text(s, pub, sizeof(pub)), 0);
    assert_string_equal(pub, want);
    assert_int_equal(strlen(pub), 68);
    assert_int_equal(asrt_signer_public_text(s, pub, 68), AB_ELIMIT);
    EVP_PKEY_free(k);
    asrt_signer_free(s);
}

static void test_hkdf_derivation_is_deterministic(void **state)
{
    struct asrt_signer *a = signer(SECRET), *b = signer(SECRET), *c = signer(SECRET "x");
    struct asrt_signer *g1 = NULL, *g2 = NULL;
    char pa[ASRT_PUBKEY_TEXT_MAX + 1], pb[ASRT_PUBKEY_TEXT_MAX + 1];
    char tok[TOKBUF], err[256];
    struct asrt_keyring *kr;
    struct asrt_claims cl;

    assert_int_equal(asrt_signer_public_text(a, pa, sizeof(pa)), 0);
    assert_int_equal(asrt_signer_public_text(b, pb, sizeof(pb)), 0);
    assert_string_equal(pa, pb);
    assert_string_not_equal(asrt_signer_kid(a), asrt_signer_kid(c));
    /* a token from one hub verifies with the key another hub published */
    kr = ring("alpha", b);
    claims(&cl);
    assert_int_equal(asrt_sign(a, &cl, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), 0);
    asrt_keyring_free(kr);

    assert_int_equal(asrt_signer_generate(&g1), 0);
    assert_int_equal(asrt_signer_generate(&g2), 0);
    assert_string_not_equal(asrt_signer_kid(g1), asrt_signer_kid(g2));
    asrt_signer_free(g2);
    g2 = g1; /* overwritten with NULL on refusal */
    assert_int_equal(asrt_signer_from_secret("", 0, &g2), AB_EINVAL);
    assert_null(g2);
    asrt_signer_free(g1);
    asrt_signer_free(a);
    asrt_signer_free(b);
    asrt_signer_free(c);
}

/* The largest claims (team and user of 253 characters that JSON escapes)
 * still fit the header bound. */
static void test_largest_claims_fit(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr;
    struct asrt_claims c, out;
    char tok[TOKBUF], err[256];

    claims(&c);
    memset(c.team, '"', ASRT_TEAM_MAX);
    memset(c.user, '\\', ASRT_USER_MAX);
    memset(c.ns, 'n', ASRT_NS_MAX);
    memset(c.rid, 'r', ASRT_RID_MAX);
    memset(c.key, 'k', ASRT_KEY_ID_MAX);
    strcpy(c.aud, "abcdefghijklmnopqrstuvwx");
    kr = ring(c.aud, s);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_true(strlen(tok) <= ASRT_TOKEN_MAX);
    assert_int_equal(asrt_verify(kr, tok, strlen(tok), NOW, &out, err, sizeof(err)), 0);
    assert_string_equal(out.team, c.team);
    assert_string_equal(out.user, c.user);
    /* and a buffer one byte short is refused, not overrun */
    assert_int_equal(asrt_sign(s, &c, tok, strlen(tok), err, sizeof(err)), AB_ELIMIT);
    assert_string_equal(tok, "");
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

/* ---- refusals ---- */

static void test_tampered_payload(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], forged[TOKBUF], json[1024], err[256];
    const char *sig;

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    /* a well-formed payload naming someone else, under alice's signature */
    payload(json, sizeof(json), "user", "\"mallory\"");
    b64url((const uint8_t *)json, strlen(json), forged);
    sig = strchr(tok, '.');
    strcat(forged, sig);
    assert_int_equal(verify_at(kr, forged, NOW, err, sizeof(err)), ASRT_ESIG);
    assert_non_null(strstr(err, "signature does not verify"));

    /* any one character changed anywhere is refused */
    for (size_t i = 0; i < strlen(tok); i++) {
        char t[TOKBUF];
        strcpy(t, tok);
        t[i] = t[i] == 'A' ? 'B' : 'A';
        assert_int_not_equal(verify_at(kr, t, NOW, err, sizeof(err)), 0);
    }
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_tampered_signature(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], err[256];
    char *sig;

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    sig = strchr(tok, '.') + 1;
    char was = sig[0];
    sig[0] = was == 'A' ? 'B' : 'A';
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_ESIG);
    sig[0] = was;
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), 0);
    /* another key's signature over the same payload */
    {
        struct asrt_signer *o = signer("another secret");
        char other[TOKBUF];
        assert_int_equal(asrt_sign(o, &c, other, sizeof(other), err, sizeof(err)), 0);
        strcpy(strchr(tok, '.'), strchr(other, '.'));
        assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_ESIG);
        asrt_signer_free(o);
    }
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_wrong_audience(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], err[256];

    claims(&c);
    strcpy(c.aud, "beta");
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EAUDIENCE);
    assert_string_equal(err, "assertion is for cluster 'beta', this is 'alpha'");
    /* the hub checks the audience against the tunnel that brought it */
    assert_int_equal(asrt_verify_for(kr, "beta", tok, strlen(tok), NOW, NULL, err, sizeof(err)), 0);
    assert_int_equal(asrt_verify_for(kr, "gamma", tok, strlen(tok), NOW, NULL, err, sizeof(err)),
                     ASRT_EAUDIENCE);
    assert_string_equal(err, "assertion is for cluster 'beta', this is 'gamma'");
    assert_int_equal(asrt_verify_for(kr, NULL, tok, strlen(tok), NOW, NULL, err, sizeof(err)),
                     ASRT_EAUDIENCE);
    assert_int_equal(asrt_verify_for(kr, "", tok, strlen(tok), NOW, NULL, err, sizeof(err)),
                     ASRT_EAUDIENCE);
    /* a prefix of the cluster id is another cluster */
    strcpy(c.aud, "alph");
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EAUDIENCE);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_expired(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], err[256], want[128];

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, c.exp, err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, c.exp + ASRT_SKEW_S, err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, c.exp + ASRT_SKEW_S + 1, err, sizeof(err)), ASRT_EEXPIRED);
    snprintf(want, sizeof(want), "assertion expired %d s ago", ASRT_SKEW_S + 1);
    assert_memory_equal(err, want, strlen(want));
    assert_int_equal(verify_at(kr, tok, c.exp + 86400, err, sizeof(err)), ASRT_EEXPIRED);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_issued_in_the_future(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], err[256];

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, c.iat - ASRT_SKEW_S, err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, c.iat - ASRT_SKEW_S - 1, err, sizeof(err)), ASRT_EFUTURE);
    assert_non_null(strstr(err, "31 s in the future"));
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_lifetime(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], json[1024], v[32], err[256];

    claims(&c);
    c.exp = c.iat + ASRT_LIFETIME_MAX_S;
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), 0);
    c.exp = c.iat + ASRT_LIFETIME_MAX_S + 1;
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), ASRT_ELIFETIME);
    assert_string_equal(tok, "");
    assert_non_null(strstr(err, "lifetime is 301 s, at most 300 s"));
    c.exp = c.iat;
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), ASRT_ELIFETIME);

    /* signed by the hub's key but too long-lived: still refused */
    snprintf(v, sizeof(v), "%d", NOW + ASRT_LIFETIME_MAX_S + 1);
    payload(json, sizeof(json), "exp", v);
    spec_token(SECRET, json, tok, sizeof(tok));
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_ELIFETIME);
    snprintf(v, sizeof(v), "%d", NOW - 1);
    payload(json, sizeof(json), "exp", v);
    spec_token(SECRET, json, tok, sizeof(tok));
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_ELIFETIME);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_unknown_kid(void **state)
{
    struct asrt_signer *s = signer(SECRET), *o = signer("another secret");
    struct asrt_keyring *kr = ring("alpha", o);
    struct asrt_claims c;
    char tok[TOKBUF], json[1024], err[256], want[128];

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EKID);
    snprintf(want, sizeof(want), "unknown signing key id %s", asrt_signer_kid(s));
    assert_memory_equal(err, want, strlen(want));
    /* an empty keyring knows nothing */
    asrt_keyring_free(kr);
    kr = ring("alpha", NULL);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EKID);
    asrt_keyring_free(kr);

    /* a kid that is not a kid at all */
    kr = ring("alpha", s);
    payload(json, sizeof(json), "kid", "\"0123456789ABCDEF\"");
    spec_token(SECRET, json, tok, sizeof(tok));
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EFIELD);
    assert_non_null(strstr(err, "'kid'"));
    /* the kid of a known key, the signature of another: the kid only picks the key */
    payload(json, sizeof(json), NULL, NULL);
    spec_token("another secret", json, tok, sizeof(tok));
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_ESIG);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
    asrt_signer_free(o);
}

static void test_oversize_and_empty(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char *big = malloc(ASRT_TOKEN_MAX + 2);
    char tok[TOKBUF], err[256];

    assert_non_null(big);
    memset(big, 'A', ASRT_TOKEN_MAX + 1);
    big[ASRT_TOKEN_MAX + 1] = '\0';
    assert_int_equal(verify_at(kr, big, NOW, err, sizeof(err)), ASRT_ETOOLONG);
    assert_non_null(strstr(err, "2048"));
    assert_int_equal(verify_at(kr, "", NOW, err, sizeof(err)), ASRT_ETOOLONG);
    assert_int_equal(asrt_verify(kr, NULL, 0, NOW, NULL, err, sizeof(err)), ASRT_ETOOLONG);
    /* a valid token padded past the bound is refused on size alone */
    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    memcpy(big, tok, strlen(tok));
    assert_int_equal(asrt_verify(kr, big, ASRT_TOKEN_MAX + 1, NOW, NULL, err, sizeof(err)),
                     ASRT_ETOOLONG);
    free(big);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_bad_base64(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], t[TOKBUF + 8], err[256];
    char *dot;
    size_t plen;

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    dot = strchr(tok, '.');
    plen = (size_t)(dot - tok);

    const char *rows[] = {"no-dot-at-all", ".", "a.b.c", "abcd.", ".abcd"};
    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++)
        assert_int_equal(verify_at(kr, rows[i], NOW, err, sizeof(err)), ASRT_EENCODING);
    /* a second '.' after a valid token */
    snprintf(t, sizeof(t), "%s.", tok);
    assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EENCODING);
    /* standard-alphabet and padding characters */
    strcpy(t, tok);
    t[0] = '+';
    assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EENCODING);
    strcpy(t, tok);
    t[plen + 1] = '/';
    assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EENCODING);
    snprintf(t, sizeof(t), "%s==", tok);
    assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EENCODING);
    /* whitespace around or inside */
    snprintf(t, sizeof(t), " %s", tok);
    assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EENCODING);
    /* the signature one character short (length 1 mod 4 after 85) and long */
    strcpy(t, tok);
    t[strlen(t) - 1] = '\0';
    assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EENCODING);
    snprintf(t, sizeof(t), "%sAAAA", tok);
    assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EENCODING);
    /* 86 characters carry 516 bits: the last 4 must be zero (one spelling only) */
    strcpy(t, tok);
    {
        char *last = &t[strlen(t) - 1];
        static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        int v = (int)(strchr(a, *last) - a);
        assert_int_equal(v & 15, 0);
        *last = a[v | 1];
    }
    assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EENCODING);
    /* a NUL byte inside the given length */
    strcpy(t, tok);
    t[3] = '\0';
    assert_int_equal(asrt_verify(kr, t, strlen(tok), NOW, NULL, err, sizeof(err)), ASRT_EENCODING);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_missing_member(void **state)
{
    struct asrt_keyring *kr;
    struct asrt_signer *s = signer(SECRET);
    const char *names[] = {"v",    "kid",  "key", "team", "user", "ns",
                           "role", "mode", "aud", "rid",  "iat",  "exp"};
    char tok[TOKBUF], json[1024], err[256], want[64];

    kr = ring("alpha", s);
    payload(json, sizeof(json), NULL, NULL);
    spec_token(SECRET, json, tok, sizeof(tok));
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), 0);
    for (size_t i = 0; i < AB_ARRAY_LEN(names); i++) {
        payload(json, sizeof(json), names[i], NULL);
        spec_token(SECRET, json, tok, sizeof(tok));
        assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EFIELD);
        snprintf(want, sizeof(want), "assertion field '%s' is missing", names[i]);
        assert_string_equal(err, want);
    }
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_wrong_types_and_shape(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    char tok[TOKBUF], json[1200], err[256];
    static const struct {
        const char *member, *value;
        int want;
    } rows[] = {
        {"v", "\"1\"", ASRT_EFIELD},
        {"v", "2", ASRT_EFIELD},
        {"user", "5", ASRT_EFIELD},
        {"user", "null", ASRT_EFIELD},
        {"team", "[\"acme\"]", ASRT_EFIELD},
        {"aud", "{}", ASRT_EFIELD},
        {"iat", "\"1800000000\"", ASRT_EFIELD},
        {"iat", "1800000000.5", ASRT_EFIELD},
        {"exp", "true", ASRT_EFIELD},
        {"iat", "-5", ASRT_EFIELD},
        {"iat", "99999999999999999999", ASRT_EPAYLOAD},
        {"role", "\"root\"", ASRT_EFIELD},
        {"mode", "\"human\"", ASRT_EFIELD},
        {"ns", "\"T-Acme\"", ASRT_EFIELD},
        {"ns", "\"-a\"", ASRT_EFIELD},
        {"user", "\"al ice\"", ASRT_EFIELD},
        {"team", "\"a/b\"", ASRT_EFIELD},
        {"user", "\"\"", ASRT_EFIELD},
        {"rid", "\"\"", ASRT_EFIELD},
        {"rid", "\"a b\"", ASRT_EFIELD},
        {"key", "\"ak 1\"", ASRT_EFIELD},
        {"key", "\"ak_0123456789abcdef0123456789abcdef\"", ASRT_EFIELD},
        {"key", "7", ASRT_EFIELD},
        {"aud", "\"Alpha\"", ASRT_EFIELD},
        {"user", "\"\\u00e9\"", ASRT_EFIELD},
        /* NUL inside a string: jansson refuses it before any member is read */
        {"user", "\"ali\\u0000ce\"", ASRT_EPAYLOAD},
    };

    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
        payload(json, sizeof(json), rows[i].member, rows[i].value);
        spec_token(SECRET, json, tok, sizeof(tok));
        int rc = verify_at(kr, tok, NOW, err, sizeof(err));
        if (rc != rows[i].want)
            fail_msg("row %zu (%s=%s): got %d (%s), want %d", i, rows[i].member, rows[i].value, rc,
                     err, rows[i].want);
    }
    /* too long for its field: the error names the limit */
    {
        char v[300];
        memset(v, 'a', sizeof(v));
        v[0] = '"';
        v[ASRT_NS_MAX + 2] = '"';
        v[ASRT_NS_MAX + 3] = '\0';
        payload(json, sizeof(json), "ns", v);
        spec_token(SECRET, json, tok, sizeof(tok));
        assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EFIELD);
        assert_non_null(strstr(err, "'ns' is longer than 63"));
    }
    /* not an object, an unknown member, a repeated member, trailing bytes */
    const char *shapes[] = {"[1,2]", "\"text\"", "{", "", "{\"v\":1} x"};
    for (size_t i = 0; i < AB_ARRAY_LEN(shapes); i++) {
        spec_token(SECRET, shapes[i], tok, sizeof(tok));
        assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)),
                         shapes[i][0] == '\0' ? ASRT_EENCODING : ASRT_EPAYLOAD);
    }
    payload(json, sizeof(json), "rid", "\"r\",\"admin\":true");
    spec_token(SECRET, json, tok, sizeof(tok));
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EPAYLOAD);
    assert_non_null(strstr(err, "unknown member 'admin'"));
    payload(json, sizeof(json), "rid", "\"r\",\"user\":\"bob\"");
    spec_token(SECRET, json, tok, sizeof(tok));
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EPAYLOAD);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

/* The signer refuses what the verifier would: bad claims never get signed. */
static void test_sign_refuses_bad_claims(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_claims c;
    char tok[TOKBUF], err[256];

    claims(&c);
    strcpy(c.user, "bob smith");
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), ASRT_EFIELD);
    assert_non_null(strstr(err, "'user'"));
    claims(&c);
    strcpy(c.ns, "NS");
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), ASRT_EFIELD);
    assert_non_null(strstr(err, "'ns'"));
    claims(&c);
    strcpy(c.aud, "-x");
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), ASRT_EFIELD);
    assert_non_null(strstr(err, "'aud'"));
    claims(&c);
    c.iat = 0;
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), ASRT_EFIELD);
    claims(&c);
    memset(c.user, 'u', sizeof(c.user)); /* no NUL within the field */
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), ASRT_EFIELD);
    assert_string_equal(tok, "");
    asrt_signer_free(s);
}

/* ---- keyring ---- */

/* A key revoked on the hub: its assertions, still unexpired, are refused
 * once the agent hears of it; other keys' are not. */
static void test_revoked_key_replay(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], other[TOKBUF], admin[TOKBUF], err[256];

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    strcpy(c.key, "ak_fedcba9876543210");
    assert_int_equal(asrt_sign(s, &c, other, sizeof(other), err, sizeof(err)), 0);
    strcpy(c.key, "");
    strcpy(c.role, "admin");
    assert_int_equal(asrt_sign(s, &c, admin, sizeof(admin), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), 0);

    assert_int_equal(asrt_keyring_revoke(kr, "ak_0123456789abcdef", NOW + 1), 0);
    assert_int_equal(verify_at(kr, tok, NOW + 1, err, sizeof(err)), ASRT_EREVOKED);
    assert_string_equal(err, "assertion is for API key ak_0123456789abcdef, which was revoked");
    assert_int_equal(verify_at(kr, other, NOW + 1, err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, admin, NOW + 1, err, sizeof(err)), 0);
    /* a key rotation does not forget revocations */
    {
        char pub[ASRT_PUBKEY_TEXT_MAX + 1];
        const char *texts[] = {pub};
        assert_int_equal(asrt_signer_public_text(s, pub, sizeof(pub)), 0);
        assert_int_equal(asrt_keyring_replace(kr, texts, 1, err, sizeof(err)), 0);
        assert_int_equal(verify_at(kr, tok, NOW + 2, err, sizeof(err)), ASRT_EREVOKED);
    }
    /* bad ids are refused; the admin key (no id) cannot be revoked this way */
    assert_int_equal(asrt_keyring_revoke(kr, "", NOW), AB_EINVAL);
    assert_int_equal(asrt_keyring_revoke(kr, NULL, NOW), AB_EINVAL);
    assert_int_equal(asrt_keyring_revoke(kr, "ak 1", NOW), AB_EINVAL);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

/* A tenant that revokes keys as fast as it can: the set holds 65,536 ids,
 * and when a bucket of it is nevertheless full only that bucket fails
 * closed. The old 256-entry list dropped everything and refused every
 * assertion issued so far, for everyone. */
static void test_revocation_overflow(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_claims c;
    char tok[TOKBUF], err[256], id[40], over[40] = "";
    int i, rc = 0, fresh_ok = 0;

    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(asrt_keyring_revoke(kr, "ak_0123456789abcdef", NOW), 0);
    /* far more than the old list: every one is remembered */
    for (i = 1; i <= 4096; i++) {
        snprintf(id, sizeof(id), "ak_%016d", i);
        assert_int_equal(asrt_keyring_revoke(kr, id, NOW), 0);
    }
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EREVOKED);
    assert_string_equal(err, "assertion is for API key ak_0123456789abcdef, which was revoked");
    for (i = 1; i <= 4096; i += 97) {
        char t[TOKBUF];
        snprintf(c.key, sizeof(c.key), "ak_%016d", i);
        assert_int_equal(asrt_sign(s, &c, t, sizeof(t), err, sizeof(err)), 0);
        assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), ASRT_EREVOKED);
    }
    /* others' assertions are untouched (the old list refused them all at 256) */
    for (i = 0; i < 100; i++) {
        char t[TOKBUF];
        snprintf(c.key, sizeof(c.key), "ak_fresh%d", i);
        assert_int_equal(asrt_sign(s, &c, t, sizeof(t), err, sizeof(err)), 0);
        assert_int_equal(verify_at(kr, t, NOW, err, sizeof(err)), 0);
    }
    /* fill until a bucket overflows: by the pigeonhole, at the latest after
     * ASRT_REVOKED_MAX ids */
    for (i = 4097; i <= ASRT_REVOKED_MAX + 1; i++) {
        snprintf(id, sizeof(id), "ak_%016d", i);
        rc = asrt_keyring_revoke(kr, id, NOW);
        assert_true(rc == 0 || rc == 1);
        if (rc == 1) {
            strcpy(over, id);
            break;
        }
    }
    assert_int_equal(rc, 1);
    /* the id that did not fit is refused (its bucket fails closed) ... */
    snprintf(c.key, sizeof(c.key), "%s", over);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EREVOKED);
    assert_non_null(strstr(err, "could not record every revoked API key"));
    /* ... as is every recorded one, still ... */
    snprintf(c.key, sizeof(c.key), "ak_0123456789abcdef");
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, NOW, err, sizeof(err)), ASRT_EREVOKED);
    /* ... but fresh keys hash elsewhere and verify: one bucket of 1024 is closed */
    for (i = 0; i < 100; i++) {
        char t[TOKBUF];
        snprintf(c.key, sizeof(c.key), "ak_fresh%d", i);
        assert_int_equal(asrt_sign(s, &c, t, sizeof(t), err, sizeof(err)), 0);
        fresh_ok += verify_at(kr, t, NOW, err, sizeof(err)) == 0;
    }
    assert_true(fresh_ok >= 90);
    /* an assertion for the overflowed id issued after the watermark verifies:
     * the hub would not issue one for a revoked key, the watermark only
     * covers what could have been issued before */
    snprintf(c.key, sizeof(c.key), "%s", over);
    c.iat = NOW + ASRT_SKEW_S + 1;
    c.exp = c.iat + 60;
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, c.iat, err, sizeof(err)), 0);

    /* entries age out after lifetime + 2 skews: the full bucket takes the id */
    assert_int_equal(asrt_keyring_revoke(kr, over, NOW + ASRT_LIFETIME_MAX_S + 2 * ASRT_SKEW_S + 1),
                     0);
    claims(&c);
    snprintf(c.key, sizeof(c.key), "%s", over);
    c.iat = NOW + ASRT_LIFETIME_MAX_S + 2 * ASRT_SKEW_S + 1;
    c.exp = c.iat + 60;
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, tok, c.iat, err, sizeof(err)), ASRT_EREVOKED);
    {
        char want[128];
        snprintf(want, sizeof(want), "assertion is for API key %s, which was revoked", over);
        assert_string_equal(err, want);
    }
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

static void test_rotation(void **state)
{
    struct asrt_signer *old = signer("secret of 2026"), *cur = signer("secret of 2027");
    struct asrt_keyring *kr = ring("alpha", old);
    char pub_old[ASRT_PUBKEY_TEXT_MAX + 1], pub_cur[ASRT_PUBKEY_TEXT_MAX + 1];
    char t_old[TOKBUF], t_cur[TOKBUF], err[256];
    struct asrt_claims c;

    assert_int_equal(asrt_signer_public_text(old, pub_old, sizeof(pub_old)), 0);
    assert_int_equal(asrt_signer_public_text(cur, pub_cur, sizeof(pub_cur)), 0);
    claims(&c);
    assert_int_equal(asrt_sign(old, &c, t_old, sizeof(t_old), err, sizeof(err)), 0);
    assert_int_equal(asrt_sign(cur, &c, t_cur, sizeof(t_cur), err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, t_cur, NOW, err, sizeof(err)), ASRT_EKID);

    /* during the rotation both verify */
    assert_int_equal(asrt_keyring_add(kr, pub_cur, err, sizeof(err)), 0);
    assert_int_equal(asrt_keyring_add(kr, pub_cur, err, sizeof(err)), 0); /* idempotent */
    assert_int_equal(asrt_keyring_count(kr), 2);
    assert_int_equal(verify_at(kr, t_old, NOW, err, sizeof(err)), 0);
    assert_int_equal(verify_at(kr, t_cur, NOW, err, sizeof(err)), 0);

    /* the old key retired: its tokens are refused, the new ones are not */
    assert_int_equal(asrt_keyring_remove(kr, asrt_signer_kid(old)), 0);
    assert_int_equal(asrt_keyring_remove(kr, asrt_signer_kid(old)), AB_ENOENT);
    assert_false(asrt_keyring_has(kr, asrt_signer_kid(old)));
    assert_true(asrt_keyring_has(kr, asrt_signer_kid(cur)));
    assert_int_equal(verify_at(kr, t_old, NOW, err, sizeof(err)), ASRT_EKID);
    assert_int_equal(verify_at(kr, t_cur, NOW, err, sizeof(err)), 0);

    /* a WELCOME's list replaces the set, all or nothing */
    {
        const char *both[] = {pub_old, pub_cur};
        const char *bad[] = {pub_old, "ed25519:nonsense"};
        assert_int_equal(asrt_keyring_replace(kr, both, 2, err, sizeof(err)), 0);
        assert_int_equal(asrt_keyring_count(kr), 2);
        assert_int_equal(verify_at(kr, t_old, NOW, err, sizeof(err)), 0);
        assert_int_equal(asrt_keyring_replace(kr, &both[1], 1, err, sizeof(err)), 0);
        assert_int_equal(verify_at(kr, t_old, NOW, err, sizeof(err)), ASRT_EKID);
        assert_int_equal(asrt_keyring_replace(kr, bad, 2, err, sizeof(err)), AB_EINVAL);
        assert_int_equal(asrt_keyring_count(kr), 1);
        assert_true(asrt_keyring_has(kr, asrt_signer_kid(cur)));
        assert_int_equal(verify_at(kr, t_cur, NOW, err, sizeof(err)), 0);
        assert_int_equal(asrt_keyring_replace(kr, NULL, 0, err, sizeof(err)), 0);
        assert_int_equal(verify_at(kr, t_cur, NOW, err, sizeof(err)), ASRT_EKID);
    }
    asrt_keyring_free(kr);
    asrt_signer_free(old);
    asrt_signer_free(cur);
}

static void test_keyring_limits_and_bad_keys(void **state)
{
    struct asrt_keyring *kr = ring("alpha", NULL);
    char pub[ASRT_PUBKEY_TEXT_MAX + 1], t[160], err[256];
    struct asrt_signer *s = signer(SECRET);

    for (int i = 0; i < ASRT_KEYRING_MAX; i++) {
        struct asrt_signer *g = NULL;
        assert_int_equal(asrt_signer_generate(&g), 0);
        assert_int_equal(asrt_signer_public_text(g, pub, sizeof(pub)), 0);
        assert_int_equal(asrt_keyring_add(kr, pub, err, sizeof(err)), 0);
        asrt_signer_free(g);
    }
    assert_int_equal(asrt_signer_public_text(s, pub, sizeof(pub)), 0);
    assert_int_equal(asrt_keyring_add(kr, pub, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "at most 8 keys"));
    asrt_keyring_free(kr);

    kr = ring("alpha", NULL);
    /* the kid must be the key's own */
    snprintf(t, sizeof(t), "%s", pub);
    t[8] = t[8] == '0' ? '1' : '0';
    assert_int_equal(asrt_keyring_add(kr, t, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "does not match"));
    const char *rows[] = {
        "",
        "ed25519:",
        "rsa:0123456789abcdef:AAAA",
        "ed25519:0123456789abcdef:",
        "ed25519:0123456789abcdef:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", /* 31 bytes */
        "ed25519:0123456789ABCDEF:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "ed25519:0123456789abcdef-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
        err[0] = '\0';
        assert_int_equal(asrt_keyring_add(kr, rows[i], err, sizeof(err)), AB_EINVAL);
        assert_true(strlen(err) > 10);
    }
    /* the text with trailing bytes */
    snprintf(t, sizeof(t), "%sA", pub);
    assert_int_equal(asrt_keyring_add(kr, t, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(asrt_keyring_add(kr, NULL, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(asrt_keyring_count(kr), 0);
    asrt_keyring_free(kr);

    assert_null(asrt_keyring_new(""));
    assert_null(asrt_keyring_new("Alpha"));
    assert_null(asrt_keyring_new("a-very-long-cluster-id-of-more-than-24"));
    assert_null(asrt_keyring_new(NULL));
    asrt_signer_free(s);
}

/* The verified-assertion cache: a repeat skips the signature but never the
 * checks that change with time, revocations or the keyring. */
static void test_cache(void **state)
{
    struct asrt_signer *s = signer(SECRET);
    struct asrt_keyring *kr = ring("alpha", s);
    struct asrt_cache *cache = asrt_cache_new(4);
    struct asrt_claims c, out;
    char tok[TOKBUF], bad[TOKBUF], err[256];
    uint64_t hits, misses;

    assert_non_null(cache);
    assert_null(asrt_cache_new((size_t)1 << 21));
    claims(&c);
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(
            asrt_verify_cached(kr, cache, NULL, tok, strlen(tok), NOW, &out, err, sizeof(err)), 0);
        assert_string_equal(out.user, "alice");
        assert_string_equal(out.rid, "req-1");
    }
    asrt_cache_stats(cache, &hits, &misses);
    assert_int_equal(misses, 1);
    assert_int_equal(hits, 2);
    /* another audience is a miss and refused (the hub checks per tunnel) */
    assert_int_equal(
        asrt_verify_cached(kr, cache, "beta", tok, strlen(tok), NOW, &out, err, sizeof(err)),
        ASRT_EAUDIENCE);
    assert_string_equal(out.user, "");
    /* a tampered copy is not the cached token */
    strcpy(bad, tok);
    bad[strlen(bad) - 2] = bad[strlen(bad) - 2] == 'A' ? 'B' : 'A';
    assert_int_not_equal(
        asrt_verify_cached(kr, cache, NULL, bad, strlen(bad), NOW, &out, err, sizeof(err)), 0);
    /* the clock still counts on a hit */
    assert_int_equal(asrt_verify_cached(kr, cache, NULL, tok, strlen(tok),
                                        NOW + 60 + ASRT_SKEW_S + 1, &out, err, sizeof(err)),
                     ASRT_EEXPIRED);
    assert_string_equal(out.user, "");
    assert_int_equal(asrt_verify_cached(kr, cache, NULL, tok, strlen(tok), NOW - ASRT_SKEW_S - 1,
                                        &out, err, sizeof(err)),
                     ASRT_EFUTURE);
    /* a revocation after caching refuses the cached token */
    assert_int_equal(asrt_keyring_revoke(kr, "ak_0123456789abcdef", NOW), 0);
    assert_int_equal(
        asrt_verify_cached(kr, cache, NULL, tok, strlen(tok), NOW, &out, err, sizeof(err)),
        ASRT_EREVOKED);
    /* a retired signing key: the cached token is refused at once */
    strcpy(c.key, "ak_other");
    assert_int_equal(asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_int_equal(
        asrt_verify_cached(kr, cache, NULL, tok, strlen(tok), NOW, &out, err, sizeof(err)), 0);
    assert_int_equal(asrt_keyring_remove(kr, asrt_signer_kid(s)), 0);
    assert_int_equal(
        asrt_verify_cached(kr, cache, NULL, tok, strlen(tok), NOW, &out, err, sizeof(err)),
        ASRT_EKID);
    /* no cache: plain verification */
    assert_int_equal(
        asrt_verify_cached(kr, NULL, NULL, tok, strlen(tok), NOW, &out, err, sizeof(err)),
        ASRT_EKID);
    asrt_cache_free(cache);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
}

/* Generations of the hub secret's key: 0 is the original derivation, each
 * other one a different key; out of range is refused. */
static void test_generations(void **state)
{
    struct asrt_signer *g0 = NULL, *base = signer(SECRET), *g1 = NULL, *g1b = NULL, *bad = NULL;

    assert_int_equal(asrt_signer_from_secret_gen(SECRET, strlen(SECRET), 0, &g0), 0);
    assert_int_equal(asrt_signer_from_secret_gen(SECRET, strlen(SECRET), 1, &g1), 0);
    assert_int_equal(asrt_signer_from_secret_gen(SECRET, strlen(SECRET), 1, &g1b), 0);
    assert_string_equal(asrt_signer_kid(g0), asrt_signer_kid(base));
    assert_string_not_equal(asrt_signer_kid(g1), asrt_signer_kid(g0));
    assert_string_equal(asrt_signer_kid(g1), asrt_signer_kid(g1b));
    assert_int_equal(asrt_signer_from_secret_gen(SECRET, strlen(SECRET), -1, &bad), AB_EINVAL);
    assert_null(bad);
    assert_int_equal(
        asrt_signer_from_secret_gen(SECRET, strlen(SECRET), ASRT_GENERATION_MAX + 1, &bad),
        AB_EINVAL);
    asrt_signer_free(g0);
    asrt_signer_free(g1);
    asrt_signer_free(g1b);
    asrt_signer_free(base);
}

static void test_strerror(void **state)
{
    const int codes[] = {ASRT_ETOOLONG, ASRT_EENCODING, ASRT_EPAYLOAD,  ASRT_EFIELD,
                         ASRT_EKID,     ASRT_ESIG,      ASRT_EAUDIENCE, ASRT_EEXPIRED,
                         ASRT_EFUTURE,  ASRT_ELIFETIME, ASRT_EREVOKED};

    for (size_t i = 0; i < AB_ARRAY_LEN(codes); i++) {
        assert_true(strlen(asrt_strerror(codes[i])) > 10);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(asrt_strerror(codes[i]), asrt_strerror(codes[j]));
    }
    assert_string_equal(asrt_strerror(AB_ENOMEM), ab_strerror(AB_ENOMEM));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_generations),
        cmocka_unit_test(test_wire_format_matches_spec),
        cmocka_unit_test(test_kid_and_public_text),
        cmocka_unit_test(test_hkdf_derivation_is_deterministic),
        cmocka_unit_test(test_largest_claims_fit),
        cmocka_unit_test(test_tampered_payload),
        cmocka_unit_test(test_tampered_signature),
        cmocka_unit_test(test_wrong_audience),
        cmocka_unit_test(test_expired),
        cmocka_unit_test(test_issued_in_the_future),
        cmocka_unit_test(test_lifetime),
        cmocka_unit_test(test_unknown_kid),
        cmocka_unit_test(test_oversize_and_empty),
        cmocka_unit_test(test_bad_base64),
        cmocka_unit_test(test_missing_member),
        cmocka_unit_test(test_wrong_types_and_shape),
        cmocka_unit_test(test_sign_refuses_bad_claims),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_revoked_key_replay),
        cmocka_unit_test(test_revocation_overflow),
        cmocka_unit_test(test_keyring_limits_and_bad_keys),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
