/* Principal assertions: Ed25519 over OpenSSL 3 EVP, a JSON payload checked
 * member by member. The format and the checks are documented in assertion.h;
 * this file keeps to that contract and refuses everything else.
 *
 * Everything a token carries is untrusted until the signature verifies: before
 * that, only its shape is read (sizes bounded by ASRT_TOKEN_MAX, jansson with
 * duplicate members refused), and the kid only picks which key to try. */
#include "agentbox/assertion.h"
#include "agentbox/crypto.h"
#include "agentbox/sbxid.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#define ED25519_KEY_LEN 32
#define ED25519_SIG_LEN 64
#define KID_BYTES (ASRT_KID_LEN / 2)
#define PUBKEY_PREFIX "ed25519:"
/* Unix seconds before 2^40 (year 36812): keeps exp - iat and now - exp far
 * from overflow whatever the peer sends. */
#define TIME_MAX ((int64_t)1 << 40)
/* The JSON payload can never decode to more than this from a bounded token. */
#define PAYLOAD_MAX (ASRT_TOKEN_MAX / 4 * 3 + 3)
#define CONTEXT_LEN (sizeof(ASRT_SIGN_CONTEXT) - 1)

struct asrt_signer {
    EVP_PKEY *pkey;
    uint8_t pub[ED25519_KEY_LEN];
    char kid[ASRT_KID_LEN + 1];
};

struct asrt_key {
    EVP_PKEY *pkey;
    uint8_t pub[ED25519_KEY_LEN];
    char kid[ASRT_KID_LEN + 1];
};

struct asrt_revoked {
    char key[ASRT_KEY_ID_MAX + 1]; /* "" never used */
    int64_t at;                    /* now_s of the revocation */
};

/* The revoked API key ids: ASRT_REVOKED_BUCKETS buckets of
 * ASRT_REVOKED_BUCKET_SLOTS ids, the bucket picked by a hash keyed with a
 * per-keyring random seed (a tenant cannot aim its key ids at one bucket). A
 * slot whose entry is stale is free again. When a bucket has no free slot,
 * only that bucket fails closed: assertions for its keys issued up to
 * now + skew are refused (1/ASRT_REVOKED_BUCKETS of the keys for one
 * lifetime) — never accepting a revoked key, never refusing everyone. */
struct asrt_revoked_set {
    uint8_t seed[16];
    struct asrt_revoked slot[ASRT_REVOKED_MAX];
    int64_t refuse_until_iat[ASRT_REVOKED_BUCKETS]; /* per bucket, after it overflowed */
};

struct asrt_keyring {
    char self[AB_CLUSTER_ID_BUF];
    struct asrt_key keys[ASRT_KEYRING_MAX];
    size_t n;
    struct asrt_revoked_set *revoked; /* NULL until the first revocation (about 3 MiB) */
};

const char *asrt_strerror(int err)
{
    switch (err) {
    case ASRT_ETOOLONG:
        return "assertion too long";
    case ASRT_EENCODING:
        return "assertion badly encoded";
    case ASRT_EPAYLOAD:
        return "assertion payload malformed";
    case ASRT_EFIELD:
        return "assertion field invalid";
    case ASRT_EKID:
        return "unknown signing key id";
    case ASRT_ESIG:
        return "assertion signature invalid";
    case ASRT_EAUDIENCE:
        return "assertion for another cluster";
    case ASRT_EEXPIRED:
        return "assertion expired";
    case ASRT_EFUTURE:
        return "assertion issued in the future";
    case ASRT_ELIFETIME:
        return "assertion lifetime invalid";
    case ASRT_EREVOKED:
        return "assertion for a revoked API key";
    default:
        return ab_strerror(err);
    }
}

/* ---- base64url (RFC 4648 §5, no padding), over crypto.c's strict base64 ---- */

/* out has room for outlen bytes including the NUL; returns the text length or
 * AB_ELIMIT. */
static int b64url_encode(const uint8_t *data, size_t len, char *out, size_t outlen)
{
    char std[ASRT_TOKEN_MAX + 8];
    size_t n;

    if ((len + 2) / 3 * 4 + 1 > sizeof(std))
        return AB_ELIMIT;
    crypto_base64_encode(data, len, std);
    n = strlen(std);
    while (n > 0 && std[n - 1] == '=')
        n--;
    if (n + 1 > outlen)
        return AB_ELIMIT;
    for (size_t i = 0; i < n; i++)
        out[i] = std[i] == '+' ? '-' : std[i] == '/' ? '_' : std[i];
    out[n] = '\0';
    return (int)n;
}

/* Refuses '+', '/', '=' and a length that is 1 mod 4; crypto_base64_decode
 * refuses non-zero dropped bits, so the spelling is canonical. */
static int b64url_decode(const char *s, size_t n, uint8_t *out, size_t outlen, size_t *written)
{
    char std[ASRT_TOKEN_MAX + 8];
    size_t i;

    if (n % 4 == 1 || n + 3 > sizeof(std))
        return AB_EINVAL;
    for (i = 0; i < n; i++) {
        char c = s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
            std[i] = c;
        else if (c == '-')
            std[i] = '+';
        else if (c == '_')
            std[i] = '/';
        else
            return AB_EINVAL;
    }
    while (i % 4 != 0)
        std[i++] = '=';
    return crypto_base64_decode(std, i, out, outlen, written);
}

/* ---- keys ---- */

static void kid_of(const uint8_t pub[ED25519_KEY_LEN], char kid[ASRT_KID_LEN + 1])
{
    uint8_t d[CRYPTO_SHA256_LEN];

    crypto_sha256(pub, ED25519_KEY_LEN, d);
    crypto_hex_encode(d, KID_BYTES, kid);
}

static bool kid_is_valid(const char *s)
{
    size_t n = strlen(s);

    if (n != ASRT_KID_LEN)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    }
    return true;
}

static int signer_of(EVP_PKEY *pkey, struct asrt_signer **out)
{
    struct asrt_signer *s;
    size_t publen = ED25519_KEY_LEN;

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        EVP_PKEY_free(pkey);
        return AB_ENOMEM;
    }
    s->pkey = pkey;
    if (EVP_PKEY_get_raw_public_key(pkey, s->pub, &publen) != 1 || publen != ED25519_KEY_LEN) {
        asrt_signer_free(s);
        return AB_EIO;
    }
    kid_of(s->pub, s->kid);
    *out = s;
    return 0;
}

int asrt_signer_generate(struct asrt_signer **out)
{
    EVP_PKEY *pkey;

    *out = NULL;
    pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (pkey == NULL)
        return AB_EIO;
    return signer_of(pkey, out);
}

int asrt_signer_from_secret(const void *secret, size_t len, struct asrt_signer **out)
{
    return asrt_signer_from_secret_gen(secret, len, 0, out);
}

int asrt_signer_from_secret_gen(const void *secret, size_t len, int generation,
                                struct asrt_signer **out)
{
    uint8_t seed[ED25519_KEY_LEN];
    char info[sizeof(ASRT_HKDF_INFO) + 16];
    EVP_PKEY *pkey;
    int rc, n;

    *out = NULL;
    if (secret == NULL || len == 0 || generation < 0 || generation > ASRT_GENERATION_MAX)
        return AB_EINVAL;
    /* generation 0 keeps the original info, so its key is the one hubs had
     * before generations existed */
    if (generation == 0)
        n = snprintf(info, sizeof(info), "%s", ASRT_HKDF_INFO);
    else
        n = snprintf(info, sizeof(info), "%s %d", ASRT_HKDF_INFO, generation);
    rc = crypto_hkdf_sha256(secret, len, ASRT_HKDF_SALT, sizeof(ASRT_HKDF_SALT) - 1, info,
                            (size_t)n, seed, sizeof(seed));
    if (rc != 0)
        return rc;
    pkey = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, sizeof(seed));
    OPENSSL_cleanse(seed, sizeof(seed));
    if (pkey == NULL)
        return AB_EIO;
    return signer_of(pkey, out);
}

void asrt_signer_free(struct asrt_signer *s)
{
    if (s == NULL)
        return;
    EVP_PKEY_free(s->pkey);
    free(s);
}

const char *asrt_signer_kid(const struct asrt_signer *s)
{
    return s->kid;
}

static int public_text(const uint8_t pub[ED25519_KEY_LEN], const char *kid, char *out,
                       size_t outlen)
{
    char b64[64];
    int n = b64url_encode(pub, ED25519_KEY_LEN, b64, sizeof(b64));

    if (n < 0)
        return n;
    if ((size_t)snprintf(out, outlen, "%s%s:%s", PUBKEY_PREFIX, kid, b64) >= outlen)
        return AB_ELIMIT;
    return 0;
}

int asrt_signer_public_text(const struct asrt_signer *s, char *out, size_t outlen)
{
    return public_text(s->pub, s->kid, out, outlen);
}

/* ---- claims ---- */

/* Printable ASCII without space or '/', like iam_check_name: "team/user"
 * pairs stay unambiguous. */
static int check_name(const char *what, const char *s, size_t max, bool allow_empty, char *err,
                      size_t errlen)
{
    size_t n = strnlen(s, max + 1);

    if (n == 0 && !allow_empty) {
        snprintf(err, errlen, "assertion field '%s' is empty", what);
        return ASRT_EFIELD;
    }
    if (n > max) {
        snprintf(err, errlen, "assertion field '%s' is longer than %zu characters", what, max);
        return ASRT_EFIELD;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x21 || ch > 0x7e || ch == '/') {
            snprintf(err, errlen,
                     "assertion field '%s' may only hold printable ASCII without spaces or '/' "
                     "(character %zu is not)",
                     what, i + 1);
            return ASRT_EFIELD;
        }
    }
    return 0;
}

/* A DNS label: [a-z0-9]([a-z0-9-]*[a-z0-9])?, 1..63. */
static bool is_dns_label(const char *s)
{
    size_t n = strnlen(s, ASRT_NS_MAX + 1);

    if (n == 0 || n > ASRT_NS_MAX || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    }
    return true;
}

static bool is_key_id(const char *s)
{
    size_t n = strnlen(s, ASRT_KEY_ID_MAX + 1);

    if (n > ASRT_KEY_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool is_rid(const char *s)
{
    size_t n = strnlen(s, ASRT_RID_MAX + 1);

    if (n == 0 || n > ASRT_RID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-'))
            return false;
    }
    return true;
}

int asrt_claims_check(const struct asrt_claims *c, char *err, size_t errlen)
{
    char why[128];
    int rc;

    rc = check_name("team", c->team, ASRT_TEAM_MAX, true, err, errlen);
    if (rc == 0)
        rc = check_name("user", c->user, ASRT_USER_MAX, false, err, errlen);
    if (rc != 0)
        return rc;
    if (!is_key_id(c->key)) {
        snprintf(err, errlen,
                 "assertion field 'key' must be at most %d characters of [A-Za-z0-9_-]",
                 ASRT_KEY_ID_MAX);
        return ASRT_EFIELD;
    }
    if (!is_dns_label(c->ns)) {
        snprintf(err, errlen,
                 "assertion field 'ns' must be a DNS label ([a-z0-9-], at most %d characters)",
                 ASRT_NS_MAX);
        return ASRT_EFIELD;
    }
    if (strcmp(c->role, "tenant") != 0 && strcmp(c->role, "admin") != 0) {
        snprintf(err, errlen, "assertion field 'role' must be 'tenant' or 'admin'");
        return ASRT_EFIELD;
    }
    if (strcmp(c->mode, "unrestricted") != 0 && strcmp(c->mode, "agent") != 0) {
        snprintf(err, errlen, "assertion field 'mode' must be 'unrestricted' or 'agent'");
        return ASRT_EFIELD;
    }
    if (strnlen(c->aud, sizeof(c->aud)) == sizeof(c->aud) ||
        !sbxid_cluster_is_valid(c->aud, why, sizeof(why))) {
        snprintf(err, errlen, "assertion field 'aud' is not a cluster id");
        return ASRT_EFIELD;
    }
    if (!is_rid(c->rid)) {
        snprintf(err, errlen, "assertion field 'rid' must be 1 to %d characters of [A-Za-z0-9._:-]",
                 ASRT_RID_MAX);
        return ASRT_EFIELD;
    }
    if (c->iat <= 0 || c->iat >= TIME_MAX || c->exp <= 0 || c->exp >= TIME_MAX) {
        snprintf(err, errlen, "assertion fields 'iat' and 'exp' must be positive Unix seconds");
        return ASRT_EFIELD;
    }
    if (c->exp <= c->iat) {
        snprintf(err, errlen,
                 "assertion expires (exp %" PRId64 ") before it is issued (iat %" PRId64 ")",
                 c->exp, c->iat);
        return ASRT_ELIFETIME;
    }
    if (c->exp - c->iat > ASRT_LIFETIME_MAX_S) {
        snprintf(err, errlen, "assertion lifetime is %" PRId64 " s, at most %d s are allowed",
                 c->exp - c->iat, ASRT_LIFETIME_MAX_S);
        return ASRT_ELIFETIME;
    }
    return 0;
}

/* ---- signing ---- */

/* Ed25519 over ASRT_SIGN_CONTEXT || payload64. */
static int sign_raw(EVP_PKEY *pkey, const char *payload64, size_t n, uint8_t sig[ED25519_SIG_LEN])
{
    char msg[CONTEXT_LEN + ASRT_TOKEN_MAX];
    size_t siglen = ED25519_SIG_LEN;
    EVP_MD_CTX *ctx;
    int rc = AB_EIO;

    if (n > ASRT_TOKEN_MAX)
        return AB_ELIMIT;
    memcpy(msg, ASRT_SIGN_CONTEXT, CONTEXT_LEN);
    memcpy(msg + CONTEXT_LEN, payload64, n);
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return AB_ENOMEM;
    if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
        EVP_DigestSign(ctx, sig, &siglen, (const unsigned char *)msg, CONTEXT_LEN + n) == 1 &&
        siglen == ED25519_SIG_LEN)
        rc = 0;
    EVP_MD_CTX_free(ctx);
    return rc;
}

int asrt_sign(const struct asrt_signer *s, const struct asrt_claims *c, char *out, size_t outlen,
              char *err, size_t errlen)
{
    uint8_t sig[ED25519_SIG_LEN];
    char tok[ASRT_TOKEN_MAX + 1];
    char *json = NULL;
    json_t *o;
    int n, m, rc;

    if (outlen > 0)
        out[0] = '\0';
    rc = asrt_claims_check(c, err, errlen);
    if (rc != 0)
        return rc;
    /* jansson keeps insertion order, so the payload reads as documented. */
    o = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I}", "v", 1, "kid", s->kid, "key",
                  c->key, "team", c->team, "user", c->user, "ns", c->ns, "role", c->role, "mode",
                  c->mode, "aud", c->aud, "rid", c->rid, "iat", (json_int_t)c->iat, "exp",
                  (json_int_t)c->exp);
    if (o != NULL)
        json = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (json == NULL) {
        snprintf(err, errlen, "out of memory encoding the assertion");
        return AB_ENOMEM;
    }
    n = b64url_encode((const uint8_t *)json, strlen(json), tok, sizeof(tok));
    free(json);
    /* the signature takes '.' and 86 characters */
    if (n < 0 || (size_t)n + 1 + 86 > ASRT_TOKEN_MAX) {
        snprintf(err, errlen, "assertion would be longer than %d bytes", ASRT_TOKEN_MAX);
        return AB_ELIMIT;
    }
    rc = sign_raw(s->pkey, tok, (size_t)n, sig);
    if (rc != 0) {
        snprintf(err, errlen, "signing the assertion failed");
        return rc;
    }
    tok[n] = '.';
    m = b64url_encode(sig, sizeof(sig), tok + n + 1, sizeof(tok) - (size_t)n - 1);
    if (m < 0)
        return AB_ELIMIT; /* cannot happen: the room was checked above */
    if ((size_t)n + 1 + (size_t)m + 1 > outlen) {
        snprintf(err, errlen, "assertion needs %d bytes, the buffer has %zu", n + 1 + m + 1,
                 outlen);
        return AB_ELIMIT;
    }
    memcpy(out, tok, (size_t)n + 1 + (size_t)m + 1);
    return 0;
}

/* ---- keyring ---- */

struct asrt_keyring *asrt_keyring_new(const char *self)
{
    struct asrt_keyring *kr;

    if (self == NULL || strnlen(self, AB_CLUSTER_ID_BUF) >= AB_CLUSTER_ID_BUF ||
        !sbxid_cluster_is_valid(self, NULL, 0))
        return NULL;
    kr = calloc(1, sizeof(*kr));
    if (kr != NULL)
        ab_strlcpy(kr->self, self, sizeof(kr->self));
    return kr;
}

static void key_clear(struct asrt_key *k)
{
    EVP_PKEY_free(k->pkey);
    memset(k, 0, sizeof(*k));
}

void asrt_keyring_free(struct asrt_keyring *kr)
{
    if (kr == NULL)
        return;
    for (size_t i = 0; i < kr->n; i++)
        key_clear(&kr->keys[i]);
    free(kr->revoked);
    free(kr);
}

/* "ed25519:<kid>:<b64url>" → k (owns a new EVP_PKEY). */
static int key_parse(const char *text, struct asrt_key *k, char *err, size_t errlen)
{
    const size_t pl = sizeof(PUBKEY_PREFIX) - 1;
    char kid[ASRT_KID_LEN + 1];
    size_t n, written = 0;

    memset(k, 0, sizeof(*k));
    n = text != NULL ? strnlen(text, ASRT_PUBKEY_TEXT_MAX + 1) : 0;
    if (n == 0 || n > ASRT_PUBKEY_TEXT_MAX || strncmp(text, PUBKEY_PREFIX, pl) != 0 ||
        n < pl + ASRT_KID_LEN + 1 || text[pl + ASRT_KID_LEN] != ':') {
        snprintf(err, errlen, "public key must read 'ed25519:<%d hex kid>:<base64url key>'",
                 ASRT_KID_LEN);
        return AB_EINVAL;
    }
    memcpy(kid, text + pl, ASRT_KID_LEN);
    kid[ASRT_KID_LEN] = '\0';
    if (!kid_is_valid(kid)) {
        snprintf(err, errlen, "public key id must be %d lowercase hex digits", ASRT_KID_LEN);
        return AB_EINVAL;
    }
    if (b64url_decode(text + pl + ASRT_KID_LEN + 1, n - pl - ASRT_KID_LEN - 1, k->pub,
                      sizeof(k->pub), &written) != 0 ||
        written != ED25519_KEY_LEN) {
        snprintf(err, errlen, "public key %s is not %d bytes of canonical base64url", kid,
                 ED25519_KEY_LEN);
        return AB_EINVAL;
    }
    kid_of(k->pub, k->kid);
    if (strcmp(k->kid, kid) != 0) {
        snprintf(err, errlen, "public key id %s does not match its key (which has id %s)", kid,
                 k->kid);
        return AB_EINVAL;
    }
    k->pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, k->pub, sizeof(k->pub));
    if (k->pkey == NULL) {
        snprintf(err, errlen, "public key %s is not an Ed25519 key", kid);
        return AB_EINVAL;
    }
    return 0;
}

static const struct asrt_key *key_find(const struct asrt_keyring *kr, const char *kid)
{
    for (size_t i = 0; i < kr->n; i++) {
        if (strcmp(kr->keys[i].kid, kid) == 0)
            return &kr->keys[i];
    }
    return NULL;
}

int asrt_keyring_add(struct asrt_keyring *kr, const char *text, char *err, size_t errlen)
{
    struct asrt_key k;
    int rc = key_parse(text, &k, err, errlen);

    if (rc != 0)
        return rc;
    /* The kid is a hash of the key, so an equal kid is the same key. */
    if (key_find(kr, k.kid) != NULL) {
        key_clear(&k);
        return 0;
    }
    if (kr->n >= ASRT_KEYRING_MAX) {
        snprintf(err, errlen, "assertion keyring holds at most %d keys", ASRT_KEYRING_MAX);
        key_clear(&k);
        return AB_ELIMIT;
    }
    kr->keys[kr->n++] = k;
    return 0;
}

int asrt_keyring_remove(struct asrt_keyring *kr, const char *kid)
{
    if (kid == NULL)
        return AB_ENOENT;
    for (size_t i = 0; i < kr->n; i++) {
        if (strcmp(kr->keys[i].kid, kid) == 0) {
            key_clear(&kr->keys[i]);
            kr->keys[i] = kr->keys[kr->n - 1];
            memset(&kr->keys[kr->n - 1], 0, sizeof(kr->keys[0]));
            kr->n--;
            return 0;
        }
    }
    return AB_ENOENT;
}

/* Only the keys change: the revocations stay, they are about API keys. */
int asrt_keyring_replace(struct asrt_keyring *kr, const char *const *texts, size_t n, char *err,
                         size_t errlen)
{
    struct asrt_keyring *next;
    int rc = 0;

    next = asrt_keyring_new(kr->self);
    if (next == NULL)
        return AB_ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = asrt_keyring_add(next, texts[i], err, errlen);
    if (rc == 0) {
        for (size_t i = 0; i < kr->n; i++)
            key_clear(&kr->keys[i]);
        memcpy(kr->keys, next->keys, sizeof(kr->keys));
        kr->n = next->n;
        next->n = 0; /* the keys moved to kr */
    }
    asrt_keyring_free(next);
    return rc;
}

size_t asrt_keyring_count(const struct asrt_keyring *kr)
{
    return kr->n;
}

/* An entry may go once every assertion made before its revocation has
 * expired on this agent's clock: hub iat <= at + skew, exp <= iat + lifetime,
 * accepted until exp + skew. */
static bool revoked_is_stale(const struct asrt_revoked *r, int64_t now_s)
{
    return now_s - r->at > ASRT_LIFETIME_MAX_S + 2 * ASRT_SKEW_S;
}

static size_t bucket_of(const struct asrt_revoked_set *rs, const char *key_id)
{
    uint8_t buf[sizeof(rs->seed) + ASRT_KEY_ID_MAX], d[CRYPTO_SHA256_LEN];
    size_t n = strnlen(key_id, ASRT_KEY_ID_MAX);

    memcpy(buf, rs->seed, sizeof(rs->seed));
    memcpy(buf + sizeof(rs->seed), key_id, n);
    crypto_sha256(buf, sizeof(rs->seed) + n, d);
    return (((size_t)d[0] << 16) | ((size_t)d[1] << 8) | d[2]) % ASRT_REVOKED_BUCKETS;
}

int asrt_keyring_revoke(struct asrt_keyring *kr, const char *key_id, int64_t now_s)
{
    struct asrt_revoked *b, *free_slot = NULL;
    size_t bk;

    if (key_id == NULL || key_id[0] == '\0' || !is_key_id(key_id))
        return AB_EINVAL;
    if (kr->revoked == NULL) {
        kr->revoked = calloc(1, sizeof(*kr->revoked));
        if (kr->revoked == NULL)
            return AB_ENOMEM;
        if (crypto_random(kr->revoked->seed, sizeof(kr->revoked->seed)) != 0) {
            free(kr->revoked);
            kr->revoked = NULL;
            return AB_EIO;
        }
    }
    bk = bucket_of(kr->revoked, key_id);
    b = &kr->revoked->slot[bk * ASRT_REVOKED_BUCKET_SLOTS];
    for (size_t i = 0; i < ASRT_REVOKED_BUCKET_SLOTS; i++) {
        if (b[i].key[0] != '\0' && strcmp(b[i].key, key_id) == 0) {
            b[i].at = AB_MAX(b[i].at, now_s); /* told again: keep it as long as the latest */
            return 0;
        }
        if (free_slot == NULL && (b[i].key[0] == '\0' || revoked_is_stale(&b[i], now_s)))
            free_slot = &b[i];
    }
    if (free_slot == NULL) {
        /* Fail closed for this bucket only: every assertion that could name
         * the key we cannot record was issued by now + skew. */
        int64_t *w = &kr->revoked->refuse_until_iat[bk];
        *w = AB_MAX(*w, now_s + ASRT_SKEW_S);
        return 1;
    }
    ab_strlcpy(free_slot->key, key_id, sizeof(free_slot->key));
    free_slot->at = now_s;
    return 0;
}

/* 0, or ASRT_EREVOKED with err. */
static int revoked_check(const struct asrt_keyring *kr, const struct asrt_claims *c, char *err,
                         size_t errlen)
{
    const struct asrt_revoked *b;
    size_t bk;

    if (kr->revoked == NULL || c->key[0] == '\0')
        return 0;
    bk = bucket_of(kr->revoked, c->key);
    if (c->iat <= kr->revoked->refuse_until_iat[bk]) {
        snprintf(err, errlen,
                 "assertion issued while the agent could not record every revoked API key "
                 "(more than %d revoked in %d s); ask again",
                 ASRT_REVOKED_BUCKET_SLOTS, ASRT_LIFETIME_MAX_S + 2 * ASRT_SKEW_S);
        return ASRT_EREVOKED;
    }
    b = &kr->revoked->slot[bk * ASRT_REVOKED_BUCKET_SLOTS];
    for (size_t i = 0; i < ASRT_REVOKED_BUCKET_SLOTS; i++) {
        /* a stale entry may still match: its key's assertions have all expired */
        if (b[i].key[0] != '\0' && strcmp(b[i].key, c->key) == 0) {
            snprintf(err, errlen, "assertion is for API key %s, which was revoked", c->key);
            return ASRT_EREVOKED;
        }
    }
    return 0;
}

bool asrt_keyring_has(const struct asrt_keyring *kr, const char *kid)
{
    return kid != NULL && key_find(kr, kid) != NULL;
}

/* ---- verifying ---- */

static const char *const members[] = {"v",    "kid",  "key", "team", "user", "ns",
                                      "role", "mode", "aud", "rid",  "iat",  "exp"};

/* Copies string member name into buf (cap bytes with the NUL). A missing
 * member, a non-string, an embedded NUL or a value that does not fit is
 * ASRT_EFIELD. */
static int get_str(json_t *o, const char *name, char *buf, size_t cap, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, name);
    size_t n;

    if (v == NULL) {
        snprintf(err, errlen, "assertion field '%s' is missing", name);
        return ASRT_EFIELD;
    }
    if (!json_is_string(v)) {
        snprintf(err, errlen, "assertion field '%s' must be a string", name);
        return ASRT_EFIELD;
    }
    n = json_string_length(v);
    if (n != strlen(json_string_value(v))) {
        snprintf(err, errlen, "assertion field '%s' holds a NUL character", name);
        return ASRT_EFIELD;
    }
    if (n >= cap) {
        snprintf(err, errlen, "assertion field '%s' is longer than %zu characters", name, cap - 1);
        return ASRT_EFIELD;
    }
    memcpy(buf, json_string_value(v), n + 1);
    return 0;
}

static int get_int(json_t *o, const char *name, int64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, name);

    if (v == NULL) {
        snprintf(err, errlen, "assertion field '%s' is missing", name);
        return ASRT_EFIELD;
    }
    if (!json_is_integer(v)) {
        snprintf(err, errlen, "assertion field '%s' must be an integer", name);
        return ASRT_EFIELD;
    }
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* Payload bytes → claims: shape, types and lengths only. */
static int parse_payload(const uint8_t *p, size_t n, struct asrt_claims *c, char *err,
                         size_t errlen)
{
    json_error_t je;
    json_t *o, *v;
    const char *key;
    int64_t ver = 0;
    int rc = 0;

    o = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, &je);
    if (o == NULL || !json_is_object(o)) {
        snprintf(err, errlen, "assertion payload is not a JSON object%s%s", o == NULL ? ": " : "",
                 o == NULL ? je.text : "");
        json_decref(o);
        return ASRT_EPAYLOAD;
    }
    json_object_foreach(o, key, v)
    {
        size_t i;
        for (i = 0; i < AB_ARRAY_LEN(members); i++) {
            if (strcmp(key, members[i]) == 0)
                break;
        }
        if (i == AB_ARRAY_LEN(members)) {
            /* the name is untrusted: quote it only when it is short printable ASCII */
            bool printable = strlen(key) <= 32;
            for (const char *q = key; printable && *q != '\0'; q++)
                printable = *q >= 0x20 && *q <= 0x7e;
            snprintf(err, errlen, "assertion payload has an unknown member%s%s%s",
                     printable ? " '" : "", printable ? key : "", printable ? "'" : "");
            rc = ASRT_EPAYLOAD;
            goto out;
        }
    }
    rc = get_int(o, "v", &ver, err, errlen);
    if (rc == 0 && ver != 1) {
        snprintf(err, errlen, "assertion field 'v' must be 1 (the only version)");
        rc = ASRT_EFIELD;
    }
    if (rc == 0)
        rc = get_str(o, "kid", c->kid, sizeof(c->kid), err, errlen);
    if (rc == 0)
        rc = get_str(o, "key", c->key, sizeof(c->key), err, errlen);
    if (rc == 0)
        rc = get_str(o, "team", c->team, sizeof(c->team), err, errlen);
    if (rc == 0)
        rc = get_str(o, "user", c->user, sizeof(c->user), err, errlen);
    if (rc == 0)
        rc = get_str(o, "ns", c->ns, sizeof(c->ns), err, errlen);
    if (rc == 0)
        rc = get_str(o, "role", c->role, sizeof(c->role), err, errlen);
    if (rc == 0)
        rc = get_str(o, "mode", c->mode, sizeof(c->mode), err, errlen);
    if (rc == 0)
        rc = get_str(o, "aud", c->aud, sizeof(c->aud), err, errlen);
    if (rc == 0)
        rc = get_str(o, "rid", c->rid, sizeof(c->rid), err, errlen);
    if (rc == 0)
        rc = get_int(o, "iat", &c->iat, err, errlen);
    if (rc == 0)
        rc = get_int(o, "exp", &c->exp, err, errlen);
out:
    json_decref(o);
    return rc;
}

static int verify_sig(EVP_PKEY *pkey, const char *payload64, size_t n,
                      const uint8_t sig[ED25519_SIG_LEN])
{
    char msg[CONTEXT_LEN + ASRT_TOKEN_MAX];
    EVP_MD_CTX *ctx;
    int ok;

    if (n > ASRT_TOKEN_MAX)
        return ASRT_ESIG;
    memcpy(msg, ASRT_SIGN_CONTEXT, CONTEXT_LEN);
    memcpy(msg + CONTEXT_LEN, payload64, n);
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return AB_ENOMEM;
    ok = EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
         EVP_DigestVerify(ctx, sig, ED25519_SIG_LEN, (const unsigned char *)msg, CONTEXT_LEN + n) ==
             1;
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : ASRT_ESIG;
}

static int check_signed(const struct asrt_keyring *kr, const char *aud, const struct asrt_claims *c,
                        int64_t now_s, char *err, size_t errlen);

static int verify(const struct asrt_keyring *kr, const char *aud, const char *token, size_t len,
                  int64_t now_s, struct asrt_claims *c, char *err, size_t errlen)
{
    uint8_t payload[PAYLOAD_MAX];
    uint8_t sig[ED25519_SIG_LEN + 3];
    const struct asrt_key *k;
    const char *dot;
    size_t plen = 0, slen = 0, n64;
    int rc;

    if (len == 0 || len > ASRT_TOKEN_MAX) {
        snprintf(err, errlen, "assertion must be 1 to %d bytes, got %zu", ASRT_TOKEN_MAX, len);
        return ASRT_ETOOLONG;
    }
    dot = memchr(token, '.', len);
    if (dot == NULL || memchr(dot + 1, '.', len - (size_t)(dot - token) - 1) != NULL) {
        snprintf(err, errlen, "assertion must be two base64url parts joined by one '.'");
        return ASRT_EENCODING;
    }
    n64 = (size_t)(dot - token);
    if (n64 == 0 || b64url_decode(token, n64, payload, sizeof(payload), &plen) != 0) {
        snprintf(err, errlen, "assertion payload is not canonical base64url");
        return ASRT_EENCODING;
    }
    if (b64url_decode(dot + 1, len - n64 - 1, sig, sizeof(sig), &slen) != 0 ||
        slen != ED25519_SIG_LEN) {
        snprintf(err, errlen, "assertion signature is not %d bytes of canonical base64url",
                 ED25519_SIG_LEN);
        return ASRT_EENCODING;
    }
    rc = parse_payload(payload, plen, c, err, errlen);
    if (rc != 0)
        return rc;
    if (!kid_is_valid(c->kid)) {
        snprintf(err, errlen, "assertion field 'kid' must be %d lowercase hex digits",
                 ASRT_KID_LEN);
        return ASRT_EFIELD;
    }
    k = key_find(kr, c->kid);
    if (k == NULL) {
        snprintf(err, errlen, "unknown signing key id %s (this agent knows %zu key%s)", c->kid,
                 kr->n, kr->n == 1 ? "" : "s");
        return ASRT_EKID;
    }
    rc = verify_sig(k->pkey, token, n64, sig);
    if (rc != 0) {
        snprintf(err, errlen, "assertion signature does not verify with key %s", c->kid);
        return rc;
    }
    /* Signed from here on: the hub said it, now check it says something sane. */
    rc = asrt_claims_check(c, err, errlen);
    if (rc != 0)
        return rc;
    return check_signed(kr, aud, c, now_s, err, errlen);
}

/* What a signed, well-formed assertion must still pass at now_s: the checks
 * that depend on the audience asked for, the clock or the revocations (a
 * cached verification repeats exactly these). */
static int check_signed(const struct asrt_keyring *kr, const char *aud, const struct asrt_claims *c,
                        int64_t now_s, char *err, size_t errlen)
{
    if (strcmp(c->aud, aud) != 0) {
        snprintf(err, errlen, "assertion is for cluster '%s', this is '%s'", c->aud, aud);
        return ASRT_EAUDIENCE;
    }
    if (now_s - c->exp > ASRT_SKEW_S) {
        snprintf(err, errlen, "assertion expired %" PRId64 " s ago (clock skew allowed: %d s)",
                 now_s - c->exp, ASRT_SKEW_S);
        return ASRT_EEXPIRED;
    }
    if (c->iat - now_s > ASRT_SKEW_S) {
        snprintf(err, errlen,
                 "assertion issued %" PRId64 " s in the future (clock skew allowed: %d s)",
                 c->iat - now_s, ASRT_SKEW_S);
        return ASRT_EFUTURE;
    }
    return revoked_check(kr, c, err, errlen);
}

int asrt_verify_for(const struct asrt_keyring *kr, const char *aud, const char *token, size_t len,
                    int64_t now_s, struct asrt_claims *out, char *err, size_t errlen)
{
    struct asrt_claims c;
    int rc;

    memset(&c, 0, sizeof(c));
    if (errlen > 0)
        err[0] = '\0';
    if (kr == NULL || token == NULL) {
        snprintf(err, errlen, "no assertion");
        rc = ASRT_ETOOLONG;
    } else if (aud == NULL || strnlen(aud, AB_CLUSTER_ID_BUF) >= AB_CLUSTER_ID_BUF ||
               !sbxid_cluster_is_valid(aud, NULL, 0)) {
        /* an unauthenticated peer has no audience to match */
        snprintf(err, errlen, "assertion presented by a peer that is not a cluster");
        rc = ASRT_EAUDIENCE;
    } else {
        rc = verify(kr, aud, token, len, now_s, &c, err, errlen);
    }
    if (out != NULL) {
        if (rc == 0)
            *out = c;
        else
            memset(out, 0, sizeof(*out));
    }
    OPENSSL_cleanse(&c, sizeof(c));
    return rc;
}

int asrt_verify(const struct asrt_keyring *kr, const char *token, size_t len, int64_t now_s,
                struct asrt_claims *out, char *err, size_t errlen)
{
    return asrt_verify_for(kr, kr != NULL ? kr->self : NULL, token, len, now_s, out, err, errlen);
}

/* ---- verified-assertion cache ---- */

struct asrt_cache_entry {
    uint8_t digest[CRYPTO_SHA256_LEN]; /* of the token bytes */
    bool used;
    struct asrt_claims c; /* verified for c.aud */
};

struct asrt_cache {
    size_t mask;
    uint64_t hits, misses;
    struct asrt_cache_entry e[];
};

struct asrt_cache *asrt_cache_new(size_t slots)
{
    struct asrt_cache *c;
    size_t n = 1;

    if (slots == 0)
        slots = ASRT_CACHE_SLOTS;
    if (slots > ((size_t)1 << 20))
        return NULL;
    while (n < slots)
        n <<= 1;
    c = calloc(1, sizeof(*c) + n * sizeof(c->e[0]));
    if (c != NULL)
        c->mask = n - 1;
    return c;
}

void asrt_cache_free(struct asrt_cache *c)
{
    if (c == NULL)
        return;
    OPENSSL_cleanse(c->e, (c->mask + 1) * sizeof(c->e[0]));
    free(c);
}

void asrt_cache_stats(const struct asrt_cache *c, uint64_t *hits, uint64_t *misses)
{
    *hits = c != NULL ? c->hits : 0;
    *misses = c != NULL ? c->misses : 0;
}

int asrt_verify_cached(const struct asrt_keyring *kr, struct asrt_cache *cache, const char *aud,
                       const char *token, size_t len, int64_t now_s, struct asrt_claims *out,
                       char *err, size_t errlen)
{
    uint8_t d[CRYPTO_SHA256_LEN];
    struct asrt_cache_entry *e;
    int rc;

    if (aud == NULL && kr != NULL)
        aud = kr->self;
    if (cache == NULL || kr == NULL || token == NULL || aud == NULL || len == 0 ||
        len > ASRT_TOKEN_MAX)
        return asrt_verify_for(kr, aud, token, len, now_s, out, err, errlen);
    if (errlen > 0)
        err[0] = '\0';
    crypto_sha256(token, len, d);
    e = &cache->e[(((size_t)d[0] << 24) | ((size_t)d[1] << 16) | ((size_t)d[2] << 8) | d[3]) &
                  cache->mask];
    /* A hit skips decoding and the signature (the costly part), never the
     * checks that can change: the key still in the ring, audience, clock,
     * revocations. */
    if (e->used && CRYPTO_memcmp(e->digest, d, sizeof(d)) == 0 && strcmp(e->c.aud, aud) == 0 &&
        key_find(kr, e->c.kid) != NULL) {
        cache->hits++;
        rc = check_signed(kr, aud, &e->c, now_s, err, errlen);
        if (out != NULL) {
            if (rc == 0)
                *out = e->c;
            else
                memset(out, 0, sizeof(*out));
        }
        return rc;
    }
    cache->misses++;
    {
        struct asrt_claims c;
        rc = asrt_verify_for(kr, aud, token, len, now_s, &c, err, errlen);
        if (rc == 0) {
            memcpy(e->digest, d, sizeof(d));
            e->c = c;
            e->used = true;
        }
        if (out != NULL)
            *out = c;
        OPENSSL_cleanse(&c, sizeof(c));
    }
    return rc;
}
