/* The agents' way to the hub's public API: `hub` service requests under
 * /internal/v1/public/<path> are dispatched into the hub's own API router as
 * GET/POST/... <path>, headers and body as sent, the answer relayed back.
 * Only the routes an agent relays for its E2B surface pass: /e2b/secrets...
 * (the vault), /api/v1/api-keys... (self-service keys; never the admin
 * routes) and GET /e2b/sandboxes, /e2b/v2/sandboxes (the merged lists).
 *
 * Raw API keys never cross the tunnel (DESIGN §9, §11): the agent presents
 * the principal assertion the hub made for it when it validated its
 * caller's key (X-AgentBox-Assertion); the bridge verifies it was made for
 * the cluster whose tunnel it came over (asrt_verify_for), so one leaked to
 * or replayed by another cluster is refused. A key hash alone is no longer
 * a credential here (401), and a request that carries X-API-Key,
 * AGENTBOX-API-KEY or Authorization is refused (400, logged with the
 * cluster). The inner request is dispatched with a grant of the principal as
 * its transport_data, which the public handlers' auth_request honours
 * (auth.h).
 *
 * The inner exchange's transport writes into the outer one; it is released
 * on the next loop turn after its handler finished (never inside the
 * finished callback). Loop thread only. */
#include "hub/sandbox_events.h"

#include "hub/auth.h"
#include "hub/hub.h"

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PREFIX "/internal/v1/public"
#define HASH_HEADER "X-AgentBox-Key-Hash"

struct bridge {
    struct hub *h;
    struct http_exchange *outer;
    struct http_exchange *inner;
    struct auth_grant *grant;
    enum auth_surface surface;
    bool outer_done; /* outer finished: it may be freed already, never touch it again */
};

static int b_head(void *t, int status, const struct http_header *h, int n, int64_t len)
{
    struct bridge *b = t;
    if (b->outer_done)
        return 0;
    return http_begin(b->outer, status, h, n, len);
}

static int b_body(void *t, const void *d, size_t n)
{
    struct bridge *b = t;
    if (b->outer_done)
        return 0;
    return http_write(b->outer, d, n);
}

static int b_end(void *t)
{
    struct bridge *b = t;
    if (b->outer_done)
        return 0;
    b->outer_done = true;
    return http_end(b->outer);
}

static size_t b_pending(void *t)
{
    struct bridge *b = t;
    if (b->outer_done)
        return 0;
    return http_pending(b->outer);
}

static void b_pause(void *t, bool paused)
{
    (void)t;
    (void)paused;
}

static void b_abort(void *t)
{
    struct bridge *b = t;
    if (!b->outer_done) {
        b->outer_done = true;
        http_abort(b->outer);
    }
}

static void b_release(void *arg, int status)
{
    struct bridge *b = arg;
    (void)status;
    http_exchange_release(b->inner);
    auth_grant_free(b->grant);
    free(b);
}

static void b_finished(void *t)
{
    struct bridge *b = t;
    if (!b->outer_done) { /* the handler ended without a complete response */
        b->outer_done = true;
        http_abort(b->outer);
    }
    if (loop_post(b->h->loop, b_release, b) != 0) {
        /* completion queue full: leak rather than free under the caller */
    }
}

static const struct http_transport_ops bridge_ops = {
    .send_head = b_head,
    .send_body = b_body,
    .send_end = b_end,
    .pending = b_pending,
    .pause_body = b_pause,
    .abort = b_abort,
    .finished = b_finished,
};

static bool allowed(const char *method, const char *p)
{
    /* the catalogue's admin writes: the handler checks the role (templates_api.c) */
    static const char *const ok[] = {"/e2b/secrets", "/api/v1/api-keys",
                                     "/api/v1/admin/sandbox-templates"};
    /* an agent's sandbox lists show the caller's sandboxes on every cluster,
     * as the front door's do (the merged list, GET only, nothing under it) */
    static const char *const lists[] = {"/e2b/sandboxes", "/e2b/v2/sandboxes"};
    for (size_t i = 0; i < AB_ARRAY_LEN(ok); i++) {
        size_t n = strlen(ok[i]);
        if (strncmp(p, ok[i], n) == 0 && (p[n] == '\0' || p[n] == '/' || p[n] == '?'))
            return true;
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(lists); i++)
        if (strcmp(method, "GET") == 0 && strcmp(p, lists[i]) == 0)
            return true;
    return false;
}

static void refuse(struct bridge *b, int status, const char *msg)
{
    if (b->surface == AUTH_SURFACE_API)
        auth_respond_api_error(b->outer, status, "UNAUTHENTICATED", "%s", msg);
    else
        http_respond_error(b->outer, status, "%s", msg);
}

/* The hash was validated: dispatch the inner request with the principal. */
static void dispatch(struct bridge *b, const struct keys_principal *p)
{
    struct http_exchange *ex = b->outer;
    const struct http_request *r = http_req(ex);
    size_t pl = strlen(PREFIX);
    struct http_request head;

    b->grant = auth_grant_new(b->h->auth, p);
    if (!b->grant) {
        http_respond_error(ex, 503, "out of memory");
        free(b);
        return;
    }
    memset(&head, 0, sizeof(head));
    head.method = r->method;
    head.target = r->target + pl;
    head.path = r->path + pl;
    head.query = r->query;
    for (int i = 0; i < r->nheaders; i++)
        if (strcasecmp(r->headers[i].name, HASH_HEADER) != 0 &&
            strcasecmp(r->headers[i].name, ASRT_HEADER) != 0)
            head.headers[head.nheaders++] = r->headers[i];
    head.content_length = (int64_t)r->body_len;
    head.peer = r->peer;
    head.transport_data = b->grant;
    b->inner = http_exchange_new(b->h->router, &head, &bridge_ops, b);
    if (!b->inner) {
        auth_grant_free(b->grant);
        free(b);
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    http_exchange_start(b->inner);
    http_exchange_body(b->inner, r->body, r->body_len);
    http_exchange_body_end(b->inner);
}

static void h_public(struct http_exchange *ex, void *arg)
{
    static const char *const raw[] = {"X-API-Key", "AGENTBOX-API-KEY", "Authorization"};
    struct hub *h = arg;
    const struct http_request *r = http_req(ex);
    const char *cluster = r->transport_data ? (const char *)r->transport_data : "";
    size_t pl = strlen(PREFIX);
    struct auth_ctx *a = h->auth;
    const char *tok;
    struct keys_principal p;
    char why[200], rid[ASRT_RID_MAX + 1];
    struct bridge *b;
    int rc;

    if (strncmp(r->path, PREFIX, pl) != 0 || !allowed(r->method, r->path + pl) ||
        strncmp(r->target, PREFIX, pl) != 0) {
        http_respond_error(ex, 404, "the hub does not bridge %s for agents", r->path);
        return;
    }
    for (size_t i = 0; i < AB_ARRAY_LEN(raw); i++) {
        if (http_header_get(r, raw[i])) {
            LOG_WARN("an agent relayed a raw API key over the tunnel; refused", "cluster", cluster,
                     "header", raw[i], "path", r->path + pl);
            http_respond_error(ex, 400,
                               "the public bridge takes the principal's assertion in " ASRT_HEADER
                               "; a raw key (%s) never crosses the tunnel: "
                               "upgrade the agent",
                               raw[i]);
            return;
        }
    }
    if (!h->router || !a) {
        http_respond_error(ex, 503, "the hub is starting; retry shortly");
        return;
    }
    b = calloc(1, sizeof(*b));
    if (!b) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    b->h = h;
    b->outer = ex;
    b->surface = strncmp(r->path + pl, "/e2b/", 5) == 0 ? AUTH_SURFACE_E2B : AUTH_SURFACE_API;
    tok = http_header_get(r, ASRT_HEADER);
    if (!tok || !tok[0]) {
        if (http_header_get(r, HASH_HEADER))
            LOG_WARN("an agent presented a bare key hash to the public bridge; refused", "cluster",
                     cluster, "path", r->path + pl);
        refuse(b, 401,
               "missing assertion: the agent presents the assertion the hub made for it at key "
               "validation in " ASRT_HEADER "; a key hash alone is not a credential");
        free(b);
        return;
    }
    rc = auth_verify_from(a, cluster, tok, &p, rid, why, sizeof(why));
    if (rc != 0) {
        char msg[300];
        LOG_WARN("public bridge refused an assertion", "cluster", cluster, "error", why);
        snprintf(msg, sizeof(msg), "invalid assertion: %s", why);
        refuse(b, 401, msg);
        free(b);
        return;
    }
    dispatch(b, &p);
}

int public_bridge_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"*", PREFIX "/{*rest}", h_public, h, 0},
    };
    return hub_add_internal_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
