/* Native API, the template catalogue's admin writes (reference §4.2
 * /admin/sandbox-templates, body {crdJson}):
 *
 *   GET/POST /v1/admin/sandbox-templates, PUT/DELETE /v1/admin/sandbox-templates/{name}
 *
 * The catalogue lives on the hub (hub/templates.h), so, as the seed's
 * Worker sends its TemplateService mutations to the Hub, these are relayed
 * over the tunnel to the hub's /api/v1/admin/sandbox-templates through its
 * public bridge (RELAY_PUBLIC_BRIDGE) with the caller's assertion only —
 * never the key — and answered as the hub answers (its error shape is this
 * API's). The hub checks the role again; the write comes back to every
 * cluster, this one included, as the catalogue's EVENT. Loop thread. */
#include "agent/native/native.h"

#include "agent/auth.h"
#include "agent/hub_link.h"

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/relay.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANSWER_MAX (20 * 1024 * 1024) /* the admin list: 256 templates of 64 KiB */
#define PATH "/api/v1/admin/sandbox-templates"

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            return false;
    return true;
}

static void answered(const struct tun_call_result *res, void *arg)
{
    struct http_exchange *ex = arg;

    if (res->status == 0) {
        native_error(ex, 503, NULL, NULL, "the hub did not answer: %s; retry shortly",
                     res->error ? res->error : "tunnel closed");
        return;
    }
    http_respond(ex, res->status, res->body_len ? "application/json" : NULL, res->body,
                 res->body_len, NULL, 0);
}

static void admin_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    const struct http_request *r = http_req(ex);
    const char *name = http_param(ex, "name");
    char path[sizeof(RELAY_PUBLIC_BRIDGE PATH) + 260], msg[256];

    if (!p->admin) {
        native_error(ex, 403, NULL, NULL, "admin api key required");
        return;
    }
    if (!hub_link_configured(n->d.hub)) {
        native_error(ex, 501, NULL, NULL,
                     "the template catalogue is kept by the hub, and this agent runs without "
                     "one; start it with --hub-url");
        return;
    }
    if (name && !name_ok(name)) {
        native_error(ex, 400, NULL, NULL,
                     "template name '%.100s' must be a DNS subdomain (lower-case letters, digits, "
                     "'-' and '.')",
                     name);
        return;
    }
    if (!p->assertion[0]) {
        native_error(ex, 503, NULL, NULL,
                     "the hub gave no assertion for this key yet; retry shortly");
        return;
    }
    snprintf(path, sizeof(path), RELAY_PUBLIC_BRIDGE PATH "%s%s", name ? "/" : "",
             name ? name : "");
    struct tun_header h[] = {{ASRT_HEADER, p->assertion}, {"Content-Type", "application/json"}};
    int rc = hub_link_call(n->d.hub, r->method, path, h, r->body_len ? 2 : 1, r->body, r->body_len,
                           ANSWER_MAX, answered, ex);
    if (rc != 0) {
        hub_link_unreachable(n->d.hub, NULL, msg, sizeof(msg));
        native_error(ex, 503, NULL, NULL, "%s", msg);
    }
}

static void h_admin(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, admin_authed, n);
}

int native_templates_admin_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/v1/admin/sandbox-templates", h_admin, n, 0},
        {"POST", "/v1/admin/sandbox-templates", h_admin, n, 0},
        {"PUT", "/v1/admin/sandbox-templates/{name}", h_admin, n, 0},
        {"DELETE", "/v1/admin/sandbox-templates/{name}", h_admin, n, 0},
    };
    return native_add(n, routes, AB_ARRAY_LEN(routes), err, errlen);
}
