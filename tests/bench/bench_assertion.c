/* bench_assertion: cost of one principal assertion (assertion.h) per request,
 * against the baseline of what key validation already does on every request:
 * SHA-256 of the presented API key (crypto_sha256_hex).
 *
 * Figures, per operation, median of interleaved rounds (each round runs the
 * baseline, then sign, then verify, so a neighbour stealing the CPU hits all
 * three alike):
 *   sha256(key)  the baseline
 *   sign         asrt_sign: claims check, JSON, base64url, Ed25519 sign (hub)
 *   verify       asrt_verify: decode, parse, Ed25519 verify, checks (agent)
 *   raw verify   EVP Ed25519 verify of the same bytes alone, so verify - raw
 *                is what the codec and the checks cost
 *   cached       asrt_verify_cached on a token seen before (a hit: SHA-256 of
 *                the token, then key, audience, clock and revocation checks),
 *                with 10,000 revoked key ids in the keyring's set
 * plus the one-off costs of deriving the key from the secret and importing a
 * public key. Usage: bench_assertion [ops per round] [rounds] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"

#define SECRET "bench hub secret"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static void print_env(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    char load[64] = "?";

    if (f != NULL) {
        if (fgets(load, sizeof(load), f) == NULL)
            snprintf(load, sizeof(load), "?");
        fclose(f);
        load[strcspn(load, "\n")] = '\0';
    }
    printf("cpus %ld, load average %s\n", sysconf(_SC_NPROCESSORS_ONLN), load);
}

int main(int argc, char **argv)
{
    int per = argc > 1 ? atoi(argv[1]) : 2000;
    int rounds = argc > 2 ? atoi(argv[2]) : 7;
    struct asrt_signer *s = NULL;
    struct asrt_keyring *kr = NULL;
    struct asrt_claims c, out;
    char tok[ASRT_TOKEN_MAX + 1], pub[ASRT_PUBKEY_TEXT_MAX + 1], err[256], hex[65];
    char key[] = "agbx_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    double *base, *sign, *verify, *raw, *cached;
    struct asrt_cache *cache = asrt_cache_new(0);
    uint8_t rawsig[64];
    size_t rawsiglen = sizeof(rawsig);
    EVP_PKEY *rk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    unsigned sink = 0;
    int64_t now, t0;

    if (per < 1 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "usage: bench_assertion [ops per round] [rounds <= 1000]\n");
        return 2;
    }
    base = calloc((size_t)rounds, sizeof(double));
    sign = calloc((size_t)rounds, sizeof(double));
    verify = calloc((size_t)rounds, sizeof(double));
    raw = calloc((size_t)rounds, sizeof(double));
    cached = calloc((size_t)rounds, sizeof(double));
    if (base == NULL || sign == NULL || verify == NULL || raw == NULL || cached == NULL ||
        rk == NULL || cache == NULL)
        return 1;
    print_env();

    t0 = ab_now_us();
    for (int i = 0; i < 100; i++) {
        asrt_signer_free(s);
        if (asrt_signer_from_secret(SECRET, strlen(SECRET), &s) != 0)
            return 1;
    }
    double derive = (double)(ab_now_us() - t0) / 100;
    if (asrt_signer_public_text(s, pub, sizeof(pub)) != 0)
        return 1;
    t0 = ab_now_us();
    for (int i = 0; i < 100; i++) {
        asrt_keyring_free(kr);
        kr = asrt_keyring_new("alpha");
        if (kr == NULL || asrt_keyring_add(kr, pub, err, sizeof(err)) != 0)
            return 1;
    }
    double import = (double)(ab_now_us() - t0) / 100;

    now = ab_wall_ms() / 1000;
    memset(&c, 0, sizeof(c));
    snprintf(c.team, sizeof(c.team), "acme");
    snprintf(c.user, sizeof(c.user), "alice@example.com");
    snprintf(c.ns, sizeof(c.ns), "t-acme-alice-example-com");
    snprintf(c.role, sizeof(c.role), "tenant");
    snprintf(c.mode, sizeof(c.mode), "unrestricted");
    snprintf(c.aud, sizeof(c.aud), "alpha");
    snprintf(c.rid, sizeof(c.rid), "0f3c9a7e-5b1d-4e2a-9c8b-7a6d5e4f3a2b");
    c.iat = now;
    c.exp = now + ASRT_LIFETIME_MAX_S;

    if (asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)) != 0) {
        fprintf(stderr, "sign: %s\n", err);
        return 1;
    }
    {
        EVP_MD_CTX *m = EVP_MD_CTX_new();
        if (m == NULL || EVP_DigestSignInit(m, NULL, NULL, NULL, rk) != 1 ||
            EVP_DigestSign(m, rawsig, &rawsiglen, (uint8_t *)tok, strlen(tok)) != 1)
            return 1;
        EVP_MD_CTX_free(m);
    }
    for (int i = 0; i < 10000; i++) {
        char id[40];
        snprintf(id, sizeof(id), "ak_%016d", i);
        if (asrt_keyring_revoke(kr, id, now) < 0)
            return 1;
    }
    for (int r = 0; r < rounds; r++) {
        t0 = ab_now_us();
        for (int i = 0; i < per; i++) {
            key[5] = (char)('a' + i % 26);
            crypto_sha256_hex(key, hex);
            sink += (unsigned char)hex[0];
        }
        base[r] = (double)(ab_now_us() - t0) / per;

        t0 = ab_now_us();
        for (int i = 0; i < per; i++) {
            if (asrt_sign(s, &c, tok, sizeof(tok), err, sizeof(err)) != 0) {
                fprintf(stderr, "sign: %s\n", err);
                return 1;
            }
            sink += (unsigned char)tok[0];
        }
        sign[r] = (double)(ab_now_us() - t0) / per;

        t0 = ab_now_us();
        for (int i = 0; i < per; i++) {
            if (asrt_verify(kr, tok, strlen(tok), now, &out, err, sizeof(err)) != 0) {
                fprintf(stderr, "verify: %s\n", err);
                return 1;
            }
            sink += (unsigned char)out.user[0];
        }
        verify[r] = (double)(ab_now_us() - t0) / per;

        t0 = ab_now_us();
        for (int i = 0; i < per; i++) {
            EVP_MD_CTX *m = EVP_MD_CTX_new();
            if (m == NULL || EVP_DigestVerifyInit(m, NULL, NULL, NULL, rk) != 1 ||
                EVP_DigestVerify(m, rawsig, rawsiglen, (uint8_t *)tok, strlen(tok)) != 1)
                return 1;
            EVP_MD_CTX_free(m);
        }
        raw[r] = (double)(ab_now_us() - t0) / per;

        t0 = ab_now_us();
        for (int i = 0; i < per; i++) {
            if (asrt_verify_cached(kr, cache, NULL, tok, strlen(tok), now, &out, err,
                                   sizeof(err)) != 0) {
                fprintf(stderr, "cached verify: %s\n", err);
                return 1;
            }
            sink += (unsigned char)out.user[0];
        }
        cached[r] = (double)(ab_now_us() - t0) / per;
    }

    double b = median(base, rounds), sg = median(sign, rounds), v = median(verify, rounds);
    double rv = median(raw, rounds);
    printf("token %zu bytes; %d rounds x %d ops, medians (sink %u)\n", strlen(tok), rounds, per,
           sink & 1);
    printf("sha256(key)   %8.2f us   baseline: what key validation hashes per request\n", b);
    printf("sign          %8.2f us   hub, per forwarded request (%.0fx the baseline)\n", sg,
           b > 0 ? sg / b : 0.0);
    printf("verify        %8.2f us   agent, per received request (%.0fx the baseline)\n", v,
           b > 0 ? v / b : 0.0);
    printf("raw verify    %8.2f us   Ed25519 alone on the same bytes (codec and checks: %.2f us)\n",
           rv, v - rv);
    double cv = median(cached, rounds);
    printf("cached verify %8.2f us   a token verified before (%.0fx faster than verify)\n", cv,
           cv > 0 ? v / cv : 0.0);
    /* A forwarded create: the hub verifies the sender's assertion, signs one
     * for the target, the target verifies it. With the hub's cache per
     * (principal, target) and the verified caches warm, no Ed25519 at all. */
    printf("forward, cold %8.2f us   verify + sign + verify per forwarded create (DESIGN §12 "
           "budget 1500 us: %.1f%%)\n",
           2 * v + sg, (2 * v + sg) / 15.0);
    printf("forward, warm %8.2f us   two cached verifies, the signed assertion reused (%.1f%%)\n",
           2 * cv, 2 * cv / 15.0);
    printf("derive key    %8.2f us   once per hub start (HKDF + Ed25519 key from the secret)\n",
           derive);
    printf("import key    %8.2f us   once per WELCOME key (parse, kid check)\n", import);
    asrt_keyring_free(kr);
    asrt_signer_free(s);
    free(base);
    free(sign);
    free(verify);
    free(raw);
    free(cached);
    asrt_cache_free(cache);
    EVP_PKEY_free(rk);
    return 0;
}
