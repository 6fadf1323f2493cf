/* Re-adopting claimed Pods (an agent restart, a leader change, a second
 * replica): what a claimed Pod must carry so that any agent of the cluster
 * can rebuild the sandbox from the Pod alone, as pure functions with unit
 * tests (tests/unit/test_agent_kube_adopt.c).
 *
 * The envd access token is the one secret: it is written to the Pod sealed
 * (AES-256-GCM) under a key derived with HKDF from the cluster's join token
 * and cluster id, with the Pod's namespace, name, uid, the sandbox id and its
 * principal as associated data, so the annotation neither reveals the token to whoever
 * may read Pods nor opens another Pod or another sandbox when copied. Every
 * replica of the agent has the same join token (the chart's Secret), so the
 * leader's successor unseals what its predecessor sealed; a rotated join
 * token makes old seals unreadable and those sandboxes are released.
 *
 * No I/O, no clock of their own; any thread. */
#ifndef AGENT_RUNTIME_KUBE_ADOPT_H
#define AGENT_RUNTIME_KUBE_ADOPT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/runtime/runtime.h"

/* The sealed envd token: "v1." + base64(nonce ‖ ciphertext ‖ tag). */
#define KUBE_A_SEALED "agentbox.scitix.ai/envd-token-sealed"
#define KUBE_SEALED_MAX 800 /* fits RT_TOKEN_MAX bytes sealed */
/* On a claimed Pod of a pool with the egress sidecar: the claim's policy
 * flags ("internet=1,private=0"; the lists stay in the sidecar only, since
 * an egressProxy may carry credentials). */
#define KUBE_A_EGRESS "agentbox.scitix.ai/egress-flags"

struct kube_seal {
    bool on; /* false: no join token, nothing is sealed or adopted */
    unsigned char key[32];
};

/* Derives the key from secret (the join token; NULL or "" → k->on false)
 * and the cluster id. 0 or AB_EIO. */
int kube_seal_init(struct kube_seal *k, const char *secret, const char *cluster);
void kube_seal_clear(struct kube_seal *k);

/* Seals token for sandbox id of principal ("team/owner") on Pod ns/name
 * (uid) into out (NUL-terminated): the principal is bound too, so an edited
 * principal annotation does not hand the sandbox to another team.
 * AB_EINVAL without a key or when token is empty or too long. */
int kube_seal_token(const struct kube_seal *k, const char *ns, const char *pod, const char *uid,
                    const char *id, const char *principal, const char *token, char *out,
                    size_t outlen);
/* The reverse: AB_EDENIED when the seal does not open with this key and
 * these names (another cluster's key, a copied annotation, a tampered one),
 * AB_EINVAL when it is malformed. */
int kube_unseal_token(const struct kube_seal *k, const char *ns, const char *pod, const char *uid,
                      const char *id, const char *principal, const char *sealed, char *token,
                      size_t tokenlen);

/* What a claimed Pod's labels and annotations say about its sandbox. */
struct kube_claimed {
    char id[RT_ID_MAX + 1]; /* label and annotation agree, else "" */
    char team[RT_NAME_MAX + 1], owner[RT_NAME_MAX + 1];
    char principal[2 * RT_NAME_MAX + 2]; /* the annotation as written: "team/owner" */
    int64_t claimed_ms;                  /* claimed-at; 0 when absent */
    int64_t end_ms;                      /* end-at; 0 when absent (not armed yet) */
    char sealed[KUBE_SEALED_MAX + 1];
    json_t *metadata; /* new reference or NULL; the caller decrefs */
    bool has_egress;  /* KUBE_A_EGRESS present and well formed */
    bool internet, allow_private;
};

/* KUBE_A_EGRESS's value. */
void kube_egress_flags_format(bool internet, bool allow_private, char out[32]);

/* Reads *out from a Pod object; 0 (out->id "" when it is not claimed). */
int kube_claimed_read(const json_t *pod, struct kube_claimed *out);

enum kube_adopt_verdict {
    KUBE_ADOPT_NO = 0, /* not claimed, or not ours to judge (being deleted, dead) */
    KUBE_ADOPT_YES,    /* armed and running its image: rebuild the sandbox */
    KUBE_ADOPT_WAIT,   /* a claim in progress, perhaps another replica's: leave it */
    KUBE_ADOPT_RELEASE /* claimed, but nobody can serve it: back to idle */
};

/* What an agent that does not hold the Pod should do with it. phase is the
 * Pod's phase label (enum kube_phase), running_image whether the kubelet
 * runs spec's image with an IP, unsealed whether the token opened, now_ms
 * the wall clock, startup_ms the pool's startup timeout (a claim older than
 * that which is still starting was abandoned). */
enum kube_adopt_verdict kube_adopt_decide(int phase, const struct kube_claimed *c,
                                          bool running_image, bool unsealed, int64_t now_ms,
                                          int64_t startup_ms);

/* Adds to a release patch's metadata.annotations the keys a claim added
 * beyond the base ones (the sealed token, end-at, the egress flags), as nulls. */
void kube_adopt_strip(json_t *patch);

#endif
