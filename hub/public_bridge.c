/* The agents' way to the hub's public API: `hub` service requests under
 * /internal/v1/public/<path> are dispatched into the hub's own API router as
 * GET/POST/... <path>, headers and body as sent, the answer relayed back.
 * Only the routes an agent relays for its E2B surface pass: /e2b/secrets...
 * (the vault) and /api/v1/api-keys... (self-service keys; never the admin
 * routes). The public handlers authenticate the caller's key themselves.
 *
 * The inner exchange's transport writes into the outer one; it is released
 * on the next loop turn after its handler finished (never inside the
 * finished callback). Loop thread only. */
#include "sandbox_events.h"

#include "hub.h"

#include "agentbox/common.h"
#include "agentbox/loop.h"

#include <stdlib.h>
#include <string.h>

#define PREFIX "/internal/v1/public"

struct bridge {
    struct hub *h;
    struct http_exchange *outer;
    struct http_exchange *inner;
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

static bool allowed(const char *p)
{
    static const char *const ok[] = {"/e2b/secrets", "/api/v1/api-keys"};
    for (size_t i = 0; i < AB_ARRAY_LEN(ok); i++) {
        size_t n = strlen(ok[i]);
        if (strncmp(p, ok[i], n) == 0 && (p[n] == '\0' || p[n] == '/' || p[n] == '?'))
            return true;
    }
    return false;
}

static void h_public(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    const struct http_request *r = http_req(ex);
    size_t pl = strlen(PREFIX);
    struct http_request head;
    struct bridge *b;

    if (strncmp(r->path, PREFIX, pl) != 0 || !allowed(r->path + pl) ||
        strncmp(r->target, PREFIX, pl) != 0) {
        http_respond_error(ex, 404, "the hub does not bridge %s for agents", r->path);
        return;
    }
    if (!h->router) {
        http_respond_error(ex, 503, "the hub is starting; retry shortly");
        return;
    }
    memset(&head, 0, sizeof(head));
    head.method = r->method;
    head.target = r->target + pl;
    head.path = r->path + pl;
    head.query = r->query;
    head.nheaders = r->nheaders;
    memcpy(head.headers, r->headers, sizeof(head.headers[0]) * (size_t)r->nheaders);
    head.content_length = (int64_t)r->body_len;
    head.peer = r->peer;
    b = calloc(1, sizeof(*b));
    if (!b) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    b->h = h;
    b->outer = ex;
    b->inner = http_exchange_new(h->router, &head, &bridge_ops, b);
    if (!b->inner) {
        free(b);
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    http_exchange_start(b->inner);
    http_exchange_body(b->inner, r->body, r->body_len);
    http_exchange_body_end(b->inner);
}

int public_bridge_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"*", PREFIX "/{*rest}", h_public, h, 0},
    };
    return hub_add_internal_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
