/* /secrets and /api-keys on the agent: both live in the hub's PostgreSQL,
 * so the agent relays them over its tunnel to the hub's `hub` service, under
 * /internal/v1/public/<public path> (hub/public_bridge.c dispatches those into
 * the hub's own API router, which scopes by the caller's team and user).
 * The routes are authenticated here first (agent_auth_request: the hub
 * validates the key by its hash and answers the principal with an
 * assertion made for this cluster). The relayed request carries that
 * assertion in X-AgentBox-Assertion and only Content-Type besides: the raw
 * key and its hash stay here (DESIGN §9, §11).
 *
 *   /secrets, /secrets/{id}   streamed through as they are: the hub's
 *                             /e2b/secrets already speaks E2B (reference §5.5).
 *   /api-keys                 the hub's /api/v1/api-keys, reshaped to E2B
 *                             (reference §2.8): [{id, name, createdAt,
 *                             mask: {prefix, valueLength}}], errors {"code","message"}.
 *   PATCH /api-keys/{id}      501 (refusals.c).
 * An agent without a hub (standalone) has no vault: 501 naming --hub-url. */
#include "agent/e2b/e2b.h"

#include "agent/hub_link.h"

#include "agent/auth.h"

#include "agentbox/assertion.h"
#include "agentbox/buf.h"
#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/relay.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BRIDGE RELAY_PUBLIC_BRIDGE
#define KEYS_BODY_MAX (1024 * 1024)

static bool standalone(struct e2b *e, struct http_exchange *ex, const char *operation)
{
    if (hub_link_configured(e2b_hub(e)))
        return false;
    e2b_unsupported(e, ex, operation, "unimplemented",
                    "secrets and API keys are kept by the hub, and this agent runs without one, "
                    "so ${e2b.secrets.<name>} cannot resolve and network.rules cannot be used; "
                    "start the agent with --hub-url");
    return true;
}

/* --- /api-keys ------------------------------------------------------------------------ */

enum kop { K_RAW, K_LIST, K_CREATE, K_DELETE };

/* One relayed request: the response is collected whole (bounded), then
 * answered as it came (K_RAW) or reshaped. */
struct kcall {
    struct tun_endpoint ep; /* first: the tunnel's user pointer */
    struct tun_stream *st;
    struct http_exchange *ex;
    enum kop op;
    int status;
    char next_token[256]; /* X-Next-Token of a /secrets or sandbox listing */
    char total[32];       /* X-Total-Running of a merged sandbox list */
    bool token_too_long;  /* a cut token would page wrongly: answer 502 instead */
    struct buf body;      /* at most KEYS_BODY_MAX */
    bool finished;
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

static void kcall_answer(struct kcall *c, const char *error)
{
    size_t len = buf_len(&c->body);
    json_t *j = len ? json_loadb(buf_str(&c->body), len, 0, NULL) : NULL;

    if (error) {
        http_respond_error(c->ex, 503, "the control plane is not reachable: %s; retry shortly",
                           error);
    } else if (c->token_too_long) {
        http_respond_error(c->ex, 502, "the hub answered an X-Next-Token longer than %zu bytes",
                           sizeof(c->next_token) - 1);
    } else if (c->op == K_RAW) {
        struct http_header h[2];
        int nh = 0;
        if (c->next_token[0])
            h[nh++] = (struct http_header){"X-Next-Token", c->next_token};
        if (c->total[0])
            h[nh++] = (struct http_header){"X-Total-Running", c->total};
        http_respond(c->ex, c->status, len ? "application/json" : NULL, buf_str(&c->body), len, h,
                     nh);
    } else if (c->status >= 400) {
        const char *m = json_string_value(json_object_get(j, "error"));
        if (!m)
            m = json_string_value(json_object_get(j, "message"));
        http_respond_error(c->ex, c->status, "%s", m ? m : "the hub refused the request");
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
}

static void kcall_finish(struct kcall *c, const char *error)
{
    if (c->finished)
        return;
    c->finished = true;
    kcall_answer(c, error);
}

static void kc_on_response(struct tun_endpoint *ep, struct tun_stream *st, const struct tun_head *h)
{
    struct kcall *c = (struct kcall *)ep;
    (void)st;
    c->status = h->status;
    for (int i = 0; i < h->nheaders; i++) {
        if (strcasecmp(h->headers[i].name, "X-Next-Token") == 0 &&
            ab_strlcpy(c->next_token, h->headers[i].value, sizeof(c->next_token)) >=
                sizeof(c->next_token))
            c->token_too_long = true;
        if (strcasecmp(h->headers[i].name, "X-Total-Running") == 0)
            ab_strlcpy(c->total, h->headers[i].value, sizeof(c->total)); /* a count: never cut */
    }
}

static void kc_on_data(struct tun_endpoint *ep, struct tun_stream *st, const uint8_t *d, size_t n)
{
    struct kcall *c = (struct kcall *)ep;
    tun_stream_consumed(st, n);
    if (c->finished)
        return;
    if (buf_append(&c->body, d, n) != 0) {
        tun_stream_reset(st, TUN_RESET_CANCEL, "response too large");
        kcall_finish(c, buf_err(&c->body));
    }
}

static void kc_on_end(struct tun_endpoint *ep, struct tun_stream *st)
{
    (void)st;
    kcall_finish((struct kcall *)ep, NULL);
}

static void kc_on_reset(struct tun_endpoint *ep, struct tun_stream *st, const char *code,
                        const char *msg)
{
    (void)st;
    (void)msg;
    kcall_finish((struct kcall *)ep, strcmp(code, TUN_RESET_TUNNEL_CLOSED) == 0
                                         ? "the tunnel closed during the request"
                                         : "the hub reset the request");
}

static void kc_on_closed(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct kcall *c = (struct kcall *)ep;
    (void)st;
    kcall_finish(c, "the tunnel closed during the request");
    buf_free(&c->body);
    free(c);
}

static const struct tun_endpoint_ops kcall_ops = {
    .on_response = kc_on_response,
    .on_data = kc_on_data,
    .on_end = kc_on_end,
    .on_reset = kc_on_reset,
    .on_closed = kc_on_closed,
};

/* Relays method path body to the hub's bridge as principal p (its
 * assertion; never the key or its hash) and answers ex per op. */
static void kcall(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                  enum kop op, const char *method, const char *path, const char *body,
                  size_t body_len)
{
    struct tun_head head;
    struct hub_link *hub = e2b_hub(e);
    struct kcall *c;
    int rc;

    if (!p->assertion[0]) {
        http_respond_error(ex, 503,
                           "the hub gave no assertion for this caller, so the agent cannot act "
                           "for it at the hub; upgrade the hub");
        return;
    }
    if (body_len > TUN_STREAM_HIGH_WATER) {
        http_respond_error(ex, 413, "request body over %d bytes", TUN_STREAM_HIGH_WATER);
        return;
    }
    if (!hub_link_session(hub)) {
        http_respond_error(ex, 503,
                           "the control plane is not reachable (the tunnel to the hub is down); "
                           "retry shortly");
        return;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    buf_init(&c->body, KEYS_BODY_MAX, "the hub's answer");
    c->ep.ops = &kcall_ops;
    c->ex = ex;
    c->op = op;
    memset(&head, 0, sizeof(head));
    head.service = RELAY_SVC_HUB;
    head.method = method;
    head.path = path;
    head.headers[head.nheaders++] = (struct tun_header){ASRT_HEADER, p->assertion};
    if (body_len)
        head.headers[head.nheaders++] = (struct tun_header){"Content-Type", "application/json"};
    rc = hub_link_open(hub, &head, &c->ep, &c->st);
    if (rc != 0) {
        free(c);
        http_respond_error(ex, 503, "cannot open a stream to the hub: %s", ab_strerror(rc));
        return;
    }
    if (body_len)
        tun_stream_write(c->st, body, body_len);
    tun_stream_end(c->st);
}

int e2b_hub_public_call(struct e2b *e, const struct agent_principal *p, const char *method,
                        const char *path, const void *body, size_t len, size_t max_body,
                        void (*done)(const struct tun_call_result *res, void *arg), void *arg)
{
    char full[8192];
    struct tun_header h[2];
    int n = 0;

    if (!p->assertion[0])
        return AB_EDENIED;
    if (!hub_link_session(e2b_hub(e)))
        return AB_ECLOSED;
    if ((size_t)snprintf(full, sizeof(full), BRIDGE "%s", path) >= sizeof(full))
        return AB_ELIMIT;
    h[n++] = (struct tun_header){ASRT_HEADER, p->assertion};
    if (len)
        h[n++] = (struct tun_header){"Content-Type", "application/json"};
    return hub_link_call(e2b_hub(e), method, full, h, n, body, len, max_body, done, arg);
}

static void h_secrets(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    const struct http_request *r = http_req(ex);
    char path[8192];
    if (standalone(e, ex, "Secrets"))
        return;
    if ((size_t)snprintf(path, sizeof(path), BRIDGE "/e2b%s", r->target) >= sizeof(path)) {
        http_respond_error(ex, 414, "request target longer than %zu bytes", sizeof(path) - 32);
        return;
    }
    kcall(e, ex, p, K_RAW, r->method, path, r->body, r->body_len);
}

static void h_keys_list(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    if (!standalone(e, ex, "GetApiKeys"))
        kcall(e, ex, p, K_LIST, "GET", BRIDGE "/api/v1/api-keys", NULL, 0);
}

static void h_keys_create(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    if (standalone(e, ex, "PostApiKeys"))
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
    kcall(e, ex, p, K_CREATE, "POST", BRIDGE "/api/v1/api-keys", body ? body : "{}",
          body ? strlen(body) : 2);
    free(body);
}

static void h_keys_delete(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    char path[512];
    const char *id = http_param(ex, "id");
    if (standalone(e, ex, "DeleteApiKeysApiKeyID"))
        return;
    if (!id || strlen(id) > 128 ||
        strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789_-.") != strlen(id)) {
        http_respond_error(ex, 404, "API key not found");
        return;
    }
    /* id is at most 128 bytes (checked above): the path always fits. */
    snprintf(path, sizeof(path), BRIDGE "/api/v1/api-keys/%s", id);
    kcall(e, ex, p, K_DELETE, "DELETE", path, NULL, 0);
}

int e2b_key_routes(struct e2b *e, char *err, size_t errlen)
{
    static const struct {
        const char *method, *pattern;
        e2b_fn fn;
    } routes[] = {
        {"*", "/secrets", h_secrets},
        {"*", "/secrets/{id}", h_secrets},
        {"GET", "/api-keys", h_keys_list},
        {"POST", "/api-keys", h_keys_create},
        {"DELETE", "/api-keys/{id}", h_keys_delete},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(routes); i++) {
        int rc = e2b_route(e, routes[i].method, routes[i].pattern, routes[i].fn, 0, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

bool e2b_hub_list(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    const struct http_request *r = http_req(ex);
    char path[8192];

    /* the hub's own fan-out asks each cluster for its part: answer that
     * locally, so a list never loops; without a hub the list is local */
    if ((r->peer && strncmp(r->peer, "tunnel:", 7) == 0) || !p->assertion[0] ||
        !hub_link_session(e2b_hub(e)))
        return false;
    if ((size_t)snprintf(path, sizeof(path), BRIDGE "/e2b%s", r->target) >= sizeof(path))
        return false;
    kcall(e, ex, p, K_RAW, "GET", path, NULL, 0);
    return true;
}
