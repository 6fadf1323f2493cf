/* GET /v1/auth/whoami on the native API: the caller's principal as the hub
 * vouches for it (reference §4.2) — {role, user, team, mode, namespace}. */
#include "agent/native/native.h"

#include "agent/auth.h"
#include "agentbox/common.h"
#include "agentbox/http.h"

static void whoami_ok(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    http_respond_json(ex, 200,
                      json_pack("{s:s,s:s,s:s,s:s,s:s}", "role", p->admin ? "admin" : "tenant",
                                "user", p->user, "team", p->team, "mode",
                                p->agent_mode ? "agent" : "unrestricted", "namespace",
                                p->namespace));
}

static void h_whoami(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, whoami_ok, n);
}

int native_whoami_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/v1/auth/whoami", h_whoami, n, 0},
    };
    return native_add(n, routes, AB_ARRAY_LEN(routes), err, errlen);
}
