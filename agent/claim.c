/* See claim.h. */
#include "agent/claim.h"

#include "agent/hub_link.h"

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/ref.h"
#include "agentbox/relay.h"
#include "agentbox/sbxid.h"

#include <stdio.h>
#include <string.h>

int claim_status(enum claim_surface surface, int err)
{
    if (surface == CLAIM_NATIVE) {
        switch (err) {
        case AB_ENOENT:
            return 404;
        case AB_EINVAL:
            return 400;
        case AB_EEXIST:
            return 409;
        case AB_EBUSY:
            return 429;
        case AB_ETIMEOUT:
            return 504;
        case AB_EIO:
            return 502;
        default:
            return 503;
        }
    }
    /* E2B: what the SDK has always been answered (an unknown template is a
     * 400 there, and a full queue a 503 it retries) */
    switch (err) {
    case AB_ENOENT:
    case AB_EINVAL:
        return 400;
    case AB_EEXIST:
        return 409;
    case AB_EBUSY:
    case AB_ECLOSED:
    case AB_ENOMEM:
        return 503;
    case AB_ETIMEOUT:
        return 504;
    default:
        return 502;
    }
}

int claim_where(const char *self, const struct ref *ref, char *err, size_t errlen)
{
    if (!ref->cluster[0])
        return CLAIM_PLACE;
    if (strcmp(ref->cluster, self) == 0)
        return CLAIM_HERE;
    if (!sbxid_cluster_is_valid(ref->cluster, NULL, 0)) {
        snprintf(err, errlen, "templateID prefix '%.64s' is not a cluster id", ref->cluster);
        return AB_EINVAL;
    }
    return CLAIM_REMOTE;
}

bool claim_image_ok(const struct rt *rt)
{
    return rt_has(rt, RT_CAP_IMAGE_OVERRIDE);
}

int claim_new_id(const struct claim_deps *d, char *out, size_t outlen)
{
    return sbxid_generate(d->cluster, out, outlen);
}

int claim_start(const struct claim_deps *d, const struct claim_request *req, rt_claim_cb done,
                void *arg, char *err, size_t errlen)
{
    if (!d->rt) {
        snprintf(err, errlen, "no sandbox runtime is running on cluster '%s'", d->cluster);
        return AB_ECLOSED;
    }
    return rt_claim(d->rt, req->ns, req->name, req->target,
                    req->group && req->group[0] ? req->group : NULL, &req->o, done, arg, NULL, err,
                    errlen);
}

int claim_place(const struct claim_deps *d, const char *ns, const char *env, const char *group,
                fed_route_fn done, void *arg)
{
    return fed_route(d->fed, ns, env, group, done, arg);
}

void claim_forward(const struct claim_deps *d, struct http_exchange *ex, const char *cluster,
                   const char *body, size_t len, const char *assertion)
{
    hub_link_forward(d->hub, ex, cluster, RELAY_SVC_E2B, http_req(ex)->target, body, len,
                     "this create", assertion);
}
