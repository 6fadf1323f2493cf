/* Re-adopting claimed Pods: the token seal and the reading of a claimed
 * Pod's annotations (adopt.h). Pure; any thread. */
#include "agent/runtime/kube/adopt.h"

#include "agent/runtime/kube/client.h"
#include "agent/runtime/kube/reconcile.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEAL_PREFIX "v1."
#define SEAL_SALT "agentbox kube envd-token seal"
#define SEAL_RAW_MAX (CRYPTO_GCM_NONCE_LEN + RT_TOKEN_MAX + CRYPTO_GCM_TAG_LEN)
#define AAD_MAX 512

int kube_seal_init(struct kube_seal *k, const char *secret, const char *cluster)
{
    char info[128];

    memset(k, 0, sizeof(*k));
    if (!secret || !secret[0])
        return 0;
    snprintf(info, sizeof(info), "v1|%s", cluster ? cluster : "");
    if (crypto_hkdf_sha256(secret, strlen(secret), SEAL_SALT, strlen(SEAL_SALT), info, strlen(info),
                           k->key, sizeof(k->key)) != 0)
        return AB_EIO;
    k->on = true;
    return 0;
}

void kube_seal_clear(struct kube_seal *k)
{
    explicit_bzero(k, sizeof(*k));
}

/* The associated data: which Pod (uid included: a Pod recreated under the
 * same name is another Pod) and which sandbox the token belongs to. */
static int aad_of(const char *ns, const char *pod, const char *uid, const char *id,
                  const char *principal, char *out, size_t n)
{
    int len = snprintf(out, n, "%s\n%s\n%s\n%s\n%s", ns, pod, uid, id, principal ? principal : "");
    return len > 0 && (size_t)len < n ? len : AB_ELIMIT;
}

int kube_seal_token(const struct kube_seal *k, const char *ns, const char *pod, const char *uid,
                    const char *id, const char *principal, const char *token, char *out,
                    size_t outlen)
{
    uint8_t raw[SEAL_RAW_MAX];
    char aad[AAD_MAX];
    size_t len = token ? strlen(token) : 0;
    int alen;

    if (!k->on || len == 0 || len > RT_TOKEN_MAX)
        return AB_EINVAL;
    if ((alen = aad_of(ns, pod, uid, id, principal, aad, sizeof(aad))) < 0)
        return AB_EINVAL;
    size_t rawlen = CRYPTO_GCM_NONCE_LEN + len + CRYPTO_GCM_TAG_LEN;
    if (outlen < strlen(SEAL_PREFIX) + 4 * ((rawlen + 2) / 3) + 1)
        return AB_ELIMIT;
    if (crypto_random(raw, CRYPTO_GCM_NONCE_LEN) != 0 ||
        crypto_aes_gcm_encrypt(k->key, raw, aad, (size_t)alen, token, len,
                               raw + CRYPTO_GCM_NONCE_LEN, raw + CRYPTO_GCM_NONCE_LEN + len) != 0) {
        explicit_bzero(raw, sizeof(raw));
        return AB_EIO;
    }
    memcpy(out, SEAL_PREFIX, strlen(SEAL_PREFIX));
    crypto_base64_encode(raw, rawlen, out + strlen(SEAL_PREFIX));
    explicit_bzero(raw, sizeof(raw));
    return 0;
}

int kube_unseal_token(const struct kube_seal *k, const char *ns, const char *pod, const char *uid,
                      const char *id, const char *principal, const char *sealed, char *token,
                      size_t tokenlen)
{
    uint8_t raw[SEAL_RAW_MAX + 3];
    char aad[AAD_MAX];
    size_t rawlen = 0, plen = strlen(SEAL_PREFIX);
    int alen, rc;

    token[0] = '\0';
    if (!k->on)
        return AB_EDENIED;
    if (!sealed || strncmp(sealed, SEAL_PREFIX, plen) != 0)
        return AB_EINVAL;
    if ((alen = aad_of(ns, pod, uid, id, principal, aad, sizeof(aad))) < 0)
        return AB_EINVAL;
    if (crypto_base64_decode(sealed + plen, strlen(sealed + plen), raw, sizeof(raw), &rawlen) !=
            0 ||
        rawlen <= CRYPTO_GCM_NONCE_LEN + CRYPTO_GCM_TAG_LEN)
        return AB_EINVAL;
    size_t len = rawlen - CRYPTO_GCM_NONCE_LEN - CRYPTO_GCM_TAG_LEN;
    if (len > RT_TOKEN_MAX || len + 1 > tokenlen)
        return AB_EINVAL;
    rc = crypto_aes_gcm_decrypt(k->key, raw, aad, (size_t)alen, raw + CRYPTO_GCM_NONCE_LEN, len,
                                raw + CRYPTO_GCM_NONCE_LEN + len, (uint8_t *)token);
    explicit_bzero(raw, sizeof(raw));
    if (rc != 0) {
        explicit_bzero(token, len);
        token[0] = '\0';
        return AB_EDENIED;
    }
    token[len] = '\0';
    if (strlen(token) != len) { /* a NUL inside: not a token of ours */
        explicit_bzero(token, len);
        token[0] = '\0';
        return AB_EINVAL;
    }
    return 0;
}

static const char *str_at(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

int kube_claimed_read(const json_t *pod, struct kube_claimed *out)
{
    const json_t *md = json_object_get(pod, "metadata");
    const json_t *labels = json_object_get(md, "labels");
    const json_t *ann = json_object_get(md, "annotations");
    const char *id = str_at(labels, KUBE_L_SANDBOX);
    const char *principal = str_at(ann, KUBE_A_PRINCIPAL);
    const char *slash;

    memset(out, 0, sizeof(*out));
    /* Label and annotation written by the same patch: both or it is not a
     * claim we made. */
    if (!id[0] || strcmp(id, str_at(ann, KUBE_L_SANDBOX)) != 0 || strlen(id) > RT_ID_MAX)
        return 0;
    ab_strlcpy(out->id, id, sizeof(out->id));
    if (strlen(principal) < sizeof(out->principal))
        ab_strlcpy(out->principal, principal, sizeof(out->principal));
    if ((slash = strchr(principal, '/'))) {
        snprintf(out->team, sizeof(out->team), "%.*s", (int)(slash - principal), principal);
        ab_strlcpy(out->owner, slash + 1, sizeof(out->owner));
    }
    (void)kube_time_parse(str_at(ann, KUBE_A_CLAIMED_AT), &out->claimed_ms);
    (void)kube_time_parse(str_at(ann, KUBE_A_END), &out->end_ms);
    const char *sealed = str_at(ann, KUBE_A_SEALED);
    if (strlen(sealed) <= KUBE_SEALED_MAX)
        ab_strlcpy(out->sealed, sealed, sizeof(out->sealed));
    const char *eg = str_at(ann, KUBE_A_EGRESS);
    int inet = -1, priv = -1, used = 0;
    if (sscanf(eg, "internet=%1d,private=%1d%n", &inet, &priv, &used) == 2 &&
        (size_t)used == strlen(eg) && (inet == 0 || inet == 1) && (priv == 0 || priv == 1)) {
        out->has_egress = true;
        out->internet = inet == 1;
        out->allow_private = priv == 1;
    }
    const char *md_text = str_at(ann, KUBE_A_METADATA);
    if (md_text[0]) {
        json_t *m = json_loads(md_text, 0, NULL);
        if (json_is_object(m) && json_object_size(m) > 0)
            out->metadata = m;
        else
            json_decref(m);
    }
    return 0;
}

enum kube_adopt_verdict kube_adopt_decide(int phase, const struct kube_claimed *c,
                                          bool running_image, bool unsealed, int64_t now_ms,
                                          int64_t startup_ms)
{
    if (phase != KUBE_PH_STARTING && phase != KUBE_PH_RUNNING)
        return KUBE_ADOPT_NO;
    /* Armed: the holder wrote end-at with the phase; starting Pods carry
     * neither until /init answered. */
    if (phase == KUBE_PH_RUNNING && c->id[0] && c->end_ms > 0)
        return running_image && unsealed ? KUBE_ADOPT_YES : KUBE_ADOPT_RELEASE;
    /* A claim under way (this agent's before a restart, or another
     * replica's now): its holder has the startup timeout to arm it. */
    if (phase == KUBE_PH_STARTING && c->claimed_ms > 0 && now_ms < c->claimed_ms + startup_ms)
        return KUBE_ADOPT_WAIT;
    return KUBE_ADOPT_RELEASE;
}

void kube_adopt_strip(json_t *patch)
{
    json_t *ann = json_object_get(json_object_get(patch, "metadata"), "annotations");
    if (!json_is_object(ann))
        return;
    json_object_set_new(ann, KUBE_A_SEALED, json_null());
    json_object_set_new(ann, KUBE_A_END, json_null());
    json_object_set_new(ann, KUBE_A_EGRESS, json_null());
}

void kube_egress_flags_format(bool internet, bool allow_private, char out[32])
{
    snprintf(out, 32, "internet=%d,private=%d", internet ? 1 : 0, allow_private ? 1 : 0);
}
