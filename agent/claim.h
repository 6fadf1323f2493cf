/* One create orchestration for every API surface that makes sandboxes (the
 * E2B create, the native create, and creates forwarded from another
 * cluster, which arrive pinned as `cluster::pool`):
 *
 *   1. parse the reference (agentbox/ref.h) and decide where it goes
 *      (claim_where): here, another cluster (forward, claim_forward), or a
 *      bare name the placement decides (claim_place → route_client.h);
 *   2. refuse what this runtime cannot do (claim_image_ok: capabilities,
 *      never the runtime's kind);
 *   3. claim and arm (claim_start: the id, the runtime claim; the runtime
 *      calls back once envd took the token);
 *   4. the surface records (events) and answers in its own shape, with the
 *      status of claim_status(surface, err).
 *
 * The error→status tables are derived from the runtime's codes (runtime.h's
 * header comment), one per surface. Loop thread only. */
#ifndef AGENTBOX_AGENT_CLAIM_H
#define AGENTBOX_AGENT_CLAIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "agent/route_client.h"
#include "agent/runtime/runtime.h"

struct fed;
struct hub_link;
struct http_exchange;
struct ref;

enum claim_surface {
    CLAIM_E2B = 1, /* the E2B API: the SDK's answers (reference §2.3) */
    CLAIM_NATIVE,  /* the native API (reference §4.2) */
};

/* The HTTP status for a runtime error code on a surface. */
int claim_status(enum claim_surface surface, int err);

enum claim_where {
    CLAIM_HERE = 1, /* `<this cluster>::name`: claim here */
    CLAIM_REMOTE,   /* `<other cluster>::name`: forward as is */
    CLAIM_PLACE,    /* a bare name: ask the placement (claim_place) */
};

/* Where ref goes from cluster self. Returns the enum claim_where, or AB_EINVAL
 * with err set when the prefix is not a cluster id. Pure. */
int claim_where(const char *self, const struct ref *ref, char *err, size_t errlen);

/* Whether a create may name an image on rt (the runtime's capability). Pure. */
bool claim_image_ok(const struct rt *rt);

/* What the orchestration may call; borrowed. */
struct claim_deps {
    struct rt *rt; /* NULL: claim_start answers AB_ECLOSED */
    struct fed *fed;
    struct hub_link *hub;
    const char *cluster; /* this cluster's id */
};

/* A new sandbox id of this cluster (out: at least SBXID_MAX + 1 bytes). */
int claim_new_id(const struct claim_deps *d, char *out, size_t outlen);

struct claim_request {
    const char *ns;    /* namespace */
    const char *name;  /* env (or pool, with target RT_TARGET_ENV_OR_POOL) */
    const char *group; /* scaling group, NULL or "" for any */
    enum rt_target target;
    struct rt_claim_options o; /* id and access_token set by the caller */
};

/* Claims req on this cluster's runtime. Returns 0 (done runs once, later,
 * when the sandbox is armed or failed), or an error with err set (done
 * never runs): AB_ECLOSED without a runtime, or the runtime's refusal as it
 * came (a surface that words a too-long name itself checks it first). */
int claim_start(const struct claim_deps *d, const struct claim_request *req, rt_claim_cb done,
                void *arg, char *err, size_t errlen);

/* Step 1 for a bare name: fed_route's contract (0: done runs once, later). */
int claim_place(const struct claim_deps *d, const char *ns, const char *env, const char *group,
                fed_route_fn done, void *arg);

/* Sends a create (body, len: the JSON to send) to cluster's E2B service
 * through the hub and answers ex with what comes back. The receiver sees a
 * pinned name, so it never asks the placement again: one hop at most.
 * assertion: the caller's principal assertion (agent_principal.assertion),
 * which the hop carries instead of the caller's key. */
void claim_forward(const struct claim_deps *d, struct http_exchange *ex, const char *cluster,
                   const char *body, size_t len, const char *assertion);

#endif
