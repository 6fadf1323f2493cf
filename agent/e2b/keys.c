/* /secrets and /api-keys on the agent: both live in the hub's PostgreSQL,
 * so the agent relays them over its tunnel to the hub's `hub` service, under
 * /internal/v1/public/<public path> (hub/public_bridge.c dispatches those into
 * the hub's own API router, which authenticates the caller's key and scopes
 * by its team and user).
 *
 *   /secrets, /secrets/{id}   streamed through as they are: the hub's
 *                             /e2b/secrets already speaks E2B (reference §5.5).
 *   /api-keys                 the hub's /api/v1/api-keys, reshaped to E2B
 *                             (reference §2.8): [{id, name, createdAt,
 *                             mask: {prefix, valueLength}}], errors {"code","message"}.
 *   PATCH /api-keys/{id}      501 (refusals.c).
 * An agent without a hub (standalone) has no vault: 501 naming --hub-url. */
#include "e2b.h"

#include "agent.h"
#include "tunnel_client.h"

#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BRIDGE "/internal/v1/public"
#define KEYS_BODY_MAX (1024 * 1024)

static struct e2b *g_e;

static bool standalone(struct http_exchange *ex, const char *operation)
{
    if (g_e->a->cfg->hub_url)
        return false;
    e2b_unsupported(g_e, ex, operation, "unimplemented",
                    "secrets and API keys are kept by the hub, and this agent runs without one, "
                    "so ${e2b.secrets.<name>} cannot resolve and network.rules cannot be used; "
                    "start the agent with --hub-url");
    return true;
}

static void h_secrets(struct http_exchange *ex, void *arg)
{
    const struct http_request *r = http_req(ex);
    char path[8192];
    (void)arg;
    if (standalone(ex, "Secrets"))
        return;
    snprintf(path, sizeof(path), BRIDGE "/e2b%s", r->target);
    tun_http_proxy(ex, agent_tunnel_session(g_e->a->tunnel), "hub", path, NULL, 0,
                   "the control plane is not reachable (the tunnel to the hub is down); retry "
                   "shortly");
}

/* --- /api-keys ------------------------------------------------------------------------ */

enum kop { K_LIST, K_CREATE, K_DELETE };

struct kcall {
    struct http_exchange *ex;
    enum kop op;
};

static json_t *e2b_key(json_t *k)
{
    const char *prefix = json_string_value(json_object_get(k, "prefix"));
    json_t *o = json_pack("{s:O,s:O,s:O,s:{s:s,s:i}}", "id", json_object_get(k, "id"), "name",
                          json_object_get(k, "name"), "createdAt", json_object_get(k, "createdAt"),
                          "mask", "prefix", prefix ? prefix : "", "valueLength", 16);
    if (o && json_object_get(k, "key"))
        json_object_set(o, "key", json_object_get(k, "key"));
    if (o && json_object_get(k, "lastUsedAt"))
        json_object_set(o, "lastUsed", json_object_get(k, "lastUsedAt"));
    return o;
}

static void kcall_done(const struct tun_call_result *res, void *arg)
{
    struct kcall *c = arg;
    json_t *j = res->body_len ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;

    if (res->status == 0) {
        http_respond_error(c->ex, 503, "the control plane is not reachable: %s; retry shortly",
                           res->error ? res->error : "tunnel error");
    } else if (res->status >= 400) {
        const char *m = json_string_value(json_object_get(j, "error"));
        if (!m)
            m = json_string_value(json_object_get(j, "message"));
        http_respond_error(c->ex, res->status, "%s", m ? m : "the hub refused the request");
    } else if (c->op == K_DELETE) {
        http_respond(c->ex, 204, NULL, NULL, 0, NULL, 0);
    } else if (c->op == K_CREATE) {
        json_t *o = j ? e2b_key(j) : NULL;
        if (o)
            http_respond_json(c->ex, 201, o);
        else
            http_respond_error(c->ex, 502, "the hub answered a key create without a key");
    } else {
        json_t *arr = json_array();
        size_t i;
        json_t *k;
        json_array_foreach(json_object_get(j, "items"), i, k)
            json_array_append_new(arr, e2b_key(k));
        http_respond_json(c->ex, 200, arr);
    }
    json_decref(j);
    free(c);
}

static void kcall(struct http_exchange *ex, enum kop op, const char *method, const char *path,
                  const char *body)
{
    const struct http_request *r = http_req(ex);
    const char *key = http_header_get(r, "X-API-Key");
    if (!key)
        key = http_header_get(r, "AGENTBOX-API-KEY");
    struct tun_header h[3];
    int n = 0;
    struct tun_session *s = agent_tunnel_session(g_e->a->tunnel);
    if (!key || !key[0]) {
        http_respond_error(ex, 401, "missing API key: send it in the X-API-Key header");
        return;
    }
    if (!s) {
        http_respond_error(ex, 503,
                           "the control plane is not reachable (the tunnel to the hub is down); "
                           "retry shortly");
        return;
    }
    h[n++] = (struct tun_header){"AGENTBOX-API-KEY", key};
    if (body)
        h[n++] = (struct tun_header){"Content-Type", "application/json"};
    struct kcall *c = calloc(1, sizeof(*c));
    if (!c) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    c->ex = ex;
    c->op = op;
    int rc = tun_call(s, "hub", method, path, h, n, body, body ? strlen(body) : 0, KEYS_BODY_MAX,
                      kcall_done, c);
    if (rc != 0) {
        free(c);
        http_respond_error(ex, 503, "cannot open a stream to the hub: %s", ab_strerror(rc));
    }
}

static void h_keys_list(struct http_exchange *ex, void *arg)
{
    (void)arg;
    if (!standalone(ex, "GetApiKeys"))
        kcall(ex, K_LIST, "GET", BRIDGE "/api/v1/api-keys", NULL);
}

static void h_keys_create(struct http_exchange *ex, void *arg)
{
    (void)arg;
    if (standalone(ex, "PostApiKeys"))
        return;
    const struct http_request *r = http_req(ex);
    bool blank = true;
    for (size_t i = 0; i < r->body_len && blank; i++)
        blank = r->body[i] == ' ' || r->body[i] == '\n' || r->body[i] == '\r' || r->body[i] == '\t';
    if (blank) {
        http_respond_error(ex, 400, "request body required: send {\"name\": \"...\"}");
        return;
    }
    json_t *b = e2b_body(ex, false);
    if (!b)
        return;
    char err[256];
    const char *name = NULL;
    if (json_get_str(b, "name", false, 256, &name, err, sizeof(err)) != 0) {
        json_decref(b);
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    json_t *out = json_pack("{s:s}", "name", name ? name : "");
    char *body = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    json_decref(b);
    kcall(ex, K_CREATE, "POST", BRIDGE "/api/v1/api-keys", body ? body : "{}");
    free(body);
}

static void h_keys_delete(struct http_exchange *ex, void *arg)
{
    char path[512];
    const char *id = http_param(ex, "id");
    (void)arg;
    if (standalone(ex, "DeleteApiKeysApiKeyID"))
        return;
    if (!id || strlen(id) > 128 ||
        strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789_-.") != strlen(id)) {
        http_respond_error(ex, 404, "API key not found");
        return;
    }
    snprintf(path, sizeof(path), BRIDGE "/api/v1/api-keys/%s", id);
    kcall(ex, K_DELETE, "DELETE", path, NULL);
}

int e2b_key_routes(struct e2b *e, char *err, size_t errlen)
{
    g_e = e;
    const struct http_route routes[] = {
        {"*", "/secrets", h_secrets, e, HTTP_ROUTE_STREAM},
        {"*", "/secrets/{id}", h_secrets, e, HTTP_ROUTE_STREAM},
        {"GET", "/api-keys", h_keys_list, e, 0},
        {"POST", "/api-keys", h_keys_create, e, 0},
        {"DELETE", "/api-keys/{id}", h_keys_delete, e, 0},
    };
    return agent_add_routes(e->a, AGENT_E2B, routes, AB_ARRAY_LEN(routes), err, errlen);
}
