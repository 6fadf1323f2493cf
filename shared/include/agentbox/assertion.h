/* Principal assertions (DESIGN §11): the hub's signed statement "this request
 * is made by (team, user, namespace, role, mode), for cluster AUD, until EXP".
 * Every hop that leaves the agent a client talked to carries one instead of
 * the client's raw API key or its hash.
 *
 * Wire form, one HTTP header value (ASRT_HEADER), at most ASRT_TOKEN_MAX bytes:
 *
 *     base64url(payload) "." base64url(signature)
 *
 * base64url is RFC 4648 §5 without padding, canonical (the bits the last
 * character drops are zero), so a token has exactly one accepted spelling.
 * payload is a compact JSON object with exactly these members, no others and
 * none twice:
 *
 *     {"v":1,"kid":"<16 hex>","key":"<API key id>","team":"…","user":"…","ns":"…",
 *      "role":"tenant|admin","mode":"unrestricted|agent","aud":"<cluster id>","rid":"…",
 *      "iat":<s>,"exp":<s>}
 *
 * kid names the hub's signing key; key is the public id of the API key the
 * client presented (hub/keys.h key_id, never its hash), so an agent told that
 * key was revoked refuses assertions made for it before they expire.
 *
 * signature is Ed25519 (64 bytes) over ASRT_SIGN_CONTEXT followed by the
 * base64url payload text exactly as sent; the context keeps a signature made
 * for an assertion from being valid for anything else the key might sign.
 *
 * Keys. kid is the first 8 bytes of SHA-256(raw 32-byte public key), in lower
 * hex. A hub derives its key pair from the hub secret, so every hub replica
 * sharing a secret signs with the same key:
 *     seed = HKDF-SHA256(ikm = secret, salt = ASRT_HKDF_SALT, info = ASRT_HKDF_INFO, L = 32)
 * and the seed is the Ed25519 private key (RFC 8032). Public keys travel as
 * text "ed25519:<kid>:<base64url of the 32 bytes>" (in WELCOME).
 *
 * Threads: a signer and a keyring are immutable after set-up as far as
 * asrt_sign / asrt_verify are concerned, so both may run on any thread; adding
 * or removing keyring entries must not race with a verify (do it on the loop
 * thread that owns the keyring, between requests). */
#ifndef AGENTBOX_ASSERTION_H
#define AGENTBOX_ASSERTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/common.h"

#define ASRT_HEADER "X-AgentBox-Assertion"
#define ASRT_TOKEN_MAX 2048 /* encoded length, without the NUL; a buffer is ASRT_TOKEN_MAX + 1 */
#define ASRT_LIFETIME_MAX_S 300 /* exp - iat */
#define ASRT_SKEW_S 30          /* tolerated clock difference between hub and agent */
#define ASRT_KEYRING_MAX 8      /* current key plus the ones being rotated out */
/* API keys revoked within the last lifetime + 2 skews: a hashed set of
 * buckets (see asrt_keyring_revoke). The hub limits each user's key churn
 * (hub/keys.h KEYS_CHURN_PER_MIN), so filling it takes thousands of users. */
#define ASRT_REVOKED_BUCKETS 1024
#define ASRT_REVOKED_BUCKET_SLOTS 64
#define ASRT_REVOKED_MAX (ASRT_REVOKED_BUCKETS * ASRT_REVOKED_BUCKET_SLOTS) /* 65,536 */

#define ASRT_KID_LEN 16 /* hex characters */
#define ASRT_TEAM_MAX 253
#define ASRT_USER_MAX 253
#define ASRT_NS_MAX 63
#define ASRT_ROLE_MAX 6  /* "tenant" */
#define ASRT_MODE_MAX 12 /* "unrestricted" */
#define ASRT_RID_MAX 64
#define ASRT_KEY_ID_MAX 32
#define ASRT_PUBKEY_TEXT_MAX 80 /* "ed25519:" + 16 + ":" + 43 = 68 */

#define ASRT_SIGN_CONTEXT "agentbox-assertion-v1."
#define ASRT_HKDF_SALT "agentbox assertion signing key v1"
#define ASRT_HKDF_INFO "ed25519 seed"

/* Refusals of asrt_verify, one per reason; each comes with a message in err
 * that says what was wrong. All of them mean 401 to a client. They are apart
 * from enum ab_err's range; asrt_verify can also return AB_ENOMEM or AB_EIO
 * when OpenSSL itself fails. */
enum asrt_err {
    ASRT_ETOOLONG = -100,  /* longer than ASRT_TOKEN_MAX, or empty */
    ASRT_EENCODING = -101, /* not two canonical base64url parts around one '.' */
    ASRT_EPAYLOAD = -102,  /* payload is not a JSON object, or has an unknown or repeated member */
    ASRT_EFIELD = -103, /* a member is missing, of the wrong type, too long or of a bad charset */
    ASRT_EKID = -104,   /* the key id is not in the keyring */
    ASRT_ESIG = -105,   /* the signature does not verify */
    ASRT_EAUDIENCE = -106, /* made for another cluster */
    ASRT_EEXPIRED = -107,  /* exp + skew has passed */
    ASRT_EFUTURE = -108,   /* iat is later than now + skew */
    ASRT_ELIFETIME = -109, /* exp <= iat, or exp - iat > ASRT_LIFETIME_MAX_S */
    ASRT_EREVOKED = -110,  /* made for an API key this agent was told is revoked */
};

/* Short name of an asrt_err or ab_err ("assertion expired", ...). */
const char *asrt_strerror(int err);

/* The principal as asserted. Strings are NUL-terminated; team may be empty
 * (the platform admin has none), every other string is required. Times are
 * Unix seconds. */
struct asrt_claims {
    /* the signing key's id: set by asrt_sign from the signer, by asrt_verify from the token */
    char kid[ASRT_KID_LEN + 1];
    /* the API key's id; "" for the configured admin key, which has none */
    char key[ASRT_KEY_ID_MAX + 1];
    char team[ASRT_TEAM_MAX + 1];
    char user[ASRT_USER_MAX + 1];
    char ns[ASRT_NS_MAX + 1];
    char role[ASRT_ROLE_MAX + 1];
    char mode[ASRT_MODE_MAX + 1];
    char aud[AB_CLUSTER_ID_BUF];
    char rid[ASRT_RID_MAX + 1];
    int64_t iat;
    int64_t exp;
};

/* Checks every field of c against its limit and charset: team and user
 * printable ASCII without space or '/' (as hub/iam.c), key [A-Za-z0-9_-]{0,32},
 * ns a DNS label, role
 * tenant|admin, mode unrestricted|agent, aud a cluster id, rid
 * [A-Za-z0-9._:-]{1,64}, 0 < iat < exp ≤ iat + ASRT_LIFETIME_MAX_S. The kid is
 * not checked here. Returns 0, ASRT_EFIELD or ASRT_ELIFETIME with err naming
 * the field. */
int asrt_claims_check(const struct asrt_claims *c, char *err, size_t errlen);

/* ---- signing (the hub) ---- */

struct asrt_signer;

/* A fresh random key pair. *out is owned by the caller (asrt_signer_free). */
int asrt_signer_generate(struct asrt_signer **out);
/* The key pair of the hub secret (derivation above): the same secret gives
 * the same key on every hub. An empty secret is AB_EINVAL. */
int asrt_signer_from_secret(const void *secret, size_t len, struct asrt_signer **out);
/* The key pair of generation g of the hub secret (hub/signing_keys.h:
 * `agentbox-hub signing-key rotate` moves the hubs to the next one):
 *     info = ASRT_HKDF_INFO for g = 0 (asrt_signer_from_secret), else
 *            ASRT_HKDF_INFO " <g in decimal>"
 * so no private key is ever stored; only the generation numbers are. g
 * outside 0..ASRT_GENERATION_MAX is AB_EINVAL. */
#define ASRT_GENERATION_MAX 1000000
int asrt_signer_from_secret_gen(const void *secret, size_t len, int generation,
                                struct asrt_signer **out);
void asrt_signer_free(struct asrt_signer *s);
/* Borrowed; lives as long as s. */
const char *asrt_signer_kid(const struct asrt_signer *s);
/* "ed25519:<kid>:<b64url>" into out (ASRT_PUBKEY_TEXT_MAX + 1 bytes is enough);
 * AB_ELIMIT when outlen is smaller than the text. */
int asrt_signer_public_text(const struct asrt_signer *s, char *out, size_t outlen);

/* Signs c (its kid is ignored: the signer's is written) into out, at most
 * ASRT_TOKEN_MAX + 1 bytes are needed. Refuses claims asrt_claims_check
 * refuses (its code and message), AB_ELIMIT when out is too small. */
int asrt_sign(const struct asrt_signer *s, const struct asrt_claims *c, char *out, size_t outlen,
              char *err, size_t errlen);

/* ---- verifying (an agent) ---- */

struct asrt_keyring;

/* A keyring that accepts assertions for audience self (a cluster id, copied).
 * NULL when self is not a valid cluster id or on allocation failure. */
struct asrt_keyring *asrt_keyring_new(const char *self);
void asrt_keyring_free(struct asrt_keyring *kr);
/* Adds a public key given as text. Adding a key already present is 0; a text
 * whose kid does not match its key, or a bad text, is AB_EINVAL; a full
 * keyring AB_ELIMIT. err names the problem. */
int asrt_keyring_add(struct asrt_keyring *kr, const char *text, char *err, size_t errlen);
/* Removes kid; AB_ENOENT when it is not there. */
int asrt_keyring_remove(struct asrt_keyring *kr, const char *kid);
/* Replaces the whole set with texts[0..n) (a WELCOME's list): all or nothing,
 * on error the keyring keeps its previous keys. */
int asrt_keyring_replace(struct asrt_keyring *kr, const char *const *texts, size_t n, char *err,
                         size_t errlen);
size_t asrt_keyring_count(const struct asrt_keyring *kr);
/* Records that API key key_id was revoked (the hub's "key revoked" EVENT);
 * from then on assertions naming it are ASRT_EREVOKED. An entry is kept for
 * ASRT_LIFETIME_MAX_S + 2 * ASRT_SKEW_S after now_s, by when every assertion
 * made before the revocation has expired; then its slot is free again. Ids
 * are hashed (keyed by a random per-keyring seed) into one of
 * ASRT_REVOKED_BUCKETS buckets of ASRT_REVOKED_BUCKET_SLOTS. When that bucket
 * has no free slot the id is not recorded and the bucket fails closed: every
 * assertion for a key of that bucket issued up to now_s + ASRT_SKEW_S is
 * refused (one bucket's keys for a few minutes, never everyone's, never a
 * revoked key accepted), and the return is 1. 0 when recorded (or already
 * there), AB_EINVAL for an empty or malformed id, AB_ENOMEM. */
int asrt_keyring_revoke(struct asrt_keyring *kr, const char *key_id, int64_t now_s);
bool asrt_keyring_has(const struct asrt_keyring *kr, const char *kid);

/* Verifies token (len bytes, need not be NUL-terminated) at time now_s (Unix
 * seconds). Order: size, encoding, payload shape (members, types, lengths),
 * kid known, signature, then on signed content only: charsets and lifetime
 * (asrt_claims_check), audience, expiry, issued-at, revocation. Only a token
 * that passes every check fills *out (may be NULL); on refusal *out is zeroed
 * and err says why, e.g. "assertion expired 42 s ago",
 * "assertion is for cluster 'beta', this is 'alpha'",
 * "unknown signing key id 0123456789abcdef". */
int asrt_verify(const struct asrt_keyring *kr, const char *token, size_t len, int64_t now_s,
                struct asrt_claims *out, char *err, size_t errlen);
/* The same with the audience given instead of the keyring's own: the hub
 * checks that an assertion coming back over cluster X's tunnel was made for X
 * (aud = the tunnel's authenticated cluster id). An aud that is not a cluster
 * id is ASRT_EAUDIENCE. */
int asrt_verify_for(const struct asrt_keyring *kr, const char *aud, const char *token, size_t len,
                    int64_t now_s, struct asrt_claims *out, char *err, size_t errlen);

/* ---- a cache of verified assertions ----
 *
 * A forwarded request is verified on every hop, and a caller's assertion is
 * the same bytes for minutes: a cache keyed by SHA-256 of the token bytes
 * keeps what a full verification established (shape, known key, signature,
 * field checks) so a repeat costs one hash instead of an Ed25519 verify. A hit
 * still requires the signing key to be in the keyring now (a retired key's
 * tokens stop verifying at once) and repeats the audience, expiry, issued-at
 * and revocation checks at now_s; only successes are cached. Direct-mapped:
 * a colliding token evicts the previous one. Not thread-safe: one cache per
 * thread (the loop's). */
#define ASRT_CACHE_SLOTS 1024

struct asrt_cache;

/* slots: rounded up to a power of two, 0 → ASRT_CACHE_SLOTS, at most 2^20
 * (NULL above, or on allocation failure). */
struct asrt_cache *asrt_cache_new(size_t slots);
void asrt_cache_free(struct asrt_cache *c);
/* asrt_verify_for (aud NULL: the keyring's own, as asrt_verify) through the
 * cache; the same results and messages. cache NULL: no caching. */
int asrt_verify_cached(const struct asrt_keyring *kr, struct asrt_cache *cache, const char *aud,
                       const char *token, size_t len, int64_t now_s, struct asrt_claims *out,
                       char *err, size_t errlen);
void asrt_cache_stats(const struct asrt_cache *c, uint64_t *hits, uint64_t *misses);

#endif
