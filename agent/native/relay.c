/* Native API: reach another cluster through the hub, and two diagnostics
 * that exercise the tunnel end to end.
 *
 *   ANY  /v1/relay/{cluster}/{service}/{*rest}  → relay stream to that cluster's
 *        service (e2b, data or native) with target /{rest}?{query}
 *   POST /v1/diag/echo        streams the request body back (with backpressure)
 *   GET  /v1/diag/bytes?n=N   streams N bytes (0 ≤ N ≤ 1 GiB) of a fixed pattern
 *
 * All three are admin-only: a relay reaches any cluster's services and the
 * diagnostics cost bandwidth, neither is a tenant's business. The diagnostics
 * exist only with enable_diag. A relay that itself arrived over the tunnel
 * (the hub's /api/clusters/{id}/v1/relay/..., or another relay) is refused,
 * so a request crosses the hub at most once per direction.
 */
#include "agent/native/native.h"

#include "agent/auth.h"
#include "agent/hub_link.h"
#include "agentbox/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether a request reached this agent through the hub's tunnel. */
static bool came_over_tunnel(const struct http_request *r)
{
    return r->peer && strncmp(r->peer, "tunnel:", 7) == 0;
}

static void relay_authed(struct http_exchange *ex, const struct agent_principal *who, void *arg)
{
    struct native *n = arg;
    if (!who->admin) {
        http_respond_error(ex, 403, "relay routes are for admin keys only: key '%s' is a tenant's",
                           who->key_id);
        return;
    }
    const char *cluster = http_param(ex, "cluster");
    const char *service = http_param(ex, "service");
    const struct http_request *r = http_req(ex);
    /* the raw target after /v1/relay/<cluster>/<service>, escapes as sent */
    const char *p = r->target + strlen("/v1/relay/");
    const char *slash = strchr(p, '/');
    slash = slash ? strchr(slash + 1, '/') : NULL;
    const char *rest = slash ? slash : "/";
    /* the caller's assertion, never its key: the hub re-signs it for the target */
    hub_link_proxy(n->d.hub, ex, cluster, service, rest, who->assertion);
}

static void h_relay(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    if (came_over_tunnel(http_req(ex))) {
        /* checked before the key: no hop through the hub to this route, whoever asks */
        http_respond_error(ex, 403,
                           "a relay never hops twice: this request already came through the "
                           "hub; call cluster '%s' directly",
                           n->d.cluster);
        return;
    }
    agent_auth_request(n->d.auth, ex, relay_authed, n);
}

/* The diagnostics' gate: admin keys only. */
static bool diag_allowed(struct http_exchange *ex, const struct agent_principal *p)
{
    if (p->admin)
        return true;
    http_respond_error(ex, 403, "diagnostic routes are for admin keys only: key '%s' is a tenant's",
                       p->key_id);
    return false;
}

struct echo {
    bool paused;
};

static void echo_data(struct http_exchange *ex, const void *d, size_t n, void *arg)
{
    struct echo *e = arg;
    if (!http_has_begun(ex))
        http_begin(ex, 200, (struct http_header[]){{"Content-Type", "application/octet-stream"}}, 1,
                   -1);
    http_write(ex, d, n);
    if (!e->paused && http_pending(ex) > HTTP_STREAM_HIGH_WATER) {
        e->paused = true;
        http_pause_body(ex, true);
    }
}

static void echo_drain(struct http_exchange *ex, void *arg)
{
    struct echo *e = arg;
    if (e->paused) {
        e->paused = false;
        http_pause_body(ex, false);
    }
}

static void echo_end(struct http_exchange *ex, void *arg)
{
    if (!http_has_begun(ex))
        http_begin(ex, 200, (struct http_header[]){{"Content-Type", "application/octet-stream"}}, 1,
                   -1);
    free(arg);
    http_end(ex);
}

static void echo_abort(struct http_exchange *ex, void *arg)
{
    free(arg);
    http_abort(ex);
}

static const struct http_body_handler echo_handler = {echo_data, echo_end, echo_abort, echo_drain};

static void echo_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    (void)arg;
    if (!diag_allowed(ex, p))
        return;
    struct echo *e = calloc(1, sizeof(*e));
    if (!e) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    http_set_body_handler(ex, &echo_handler, e);
}

static void h_echo(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, echo_authed, n);
}

#define BYTES_MAX (1LL << 30) /* 1 GiB: enough to measure a tunnel, not to flood it */
#define BYTES_PIECE (32 * 1024)

struct bytes {
    int64_t left;
    char piece[BYTES_PIECE];
};

static void bytes_pump(struct http_exchange *ex, struct bytes *b)
{
    while (b->left > 0 && http_pending(ex) < HTTP_STREAM_HIGH_WATER) {
        size_t k = b->left < BYTES_PIECE ? (size_t)b->left : BYTES_PIECE;
        if (http_write(ex, b->piece, k) != 0)
            return; /* the peer went away: on_abort follows */
        b->left -= (int64_t)k;
    }
    if (b->left == 0) {
        http_end(ex); /* finished: no callback comes after this */
        free(b);
    }
}

static void bytes_drain(struct http_exchange *ex, void *arg)
{
    bytes_pump(ex, arg);
}

static void bytes_end(struct http_exchange *ex, void *arg)
{
    /* request body done: the response is driven by drains */
}

static void bytes_abort(struct http_exchange *ex, void *arg)
{
    http_abort(ex);
    free(arg);
}

static const struct http_body_handler bytes_handler = {NULL, bytes_end, bytes_abort, bytes_drain};

static void bytes_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    (void)arg;
    char nbuf[32];
    if (!diag_allowed(ex, p))
        return;
    char *end;
    if (http_query_get(http_req(ex), "n", nbuf, sizeof(nbuf)) != 0) {
        http_respond_error(ex, 400, "query parameter n (bytes to send) is required");
        return;
    }
    long long n = strtoll(nbuf, &end, 10);
    if (*end || n < 0 || n > BYTES_MAX) {
        http_respond_error(ex, 400, "n must be an integer from 0 to %lld (1 GiB)", BYTES_MAX);
        return;
    }
    struct bytes *b = calloc(1, sizeof(*b));
    if (!b) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    for (size_t i = 0; i < BYTES_PIECE; i++)
        b->piece[i] = (char)('a' + i % 26);
    b->left = n;
    http_set_body_handler(ex, &bytes_handler, b);
    http_begin(ex, 200, (struct http_header[]){{"Content-Type", "application/octet-stream"}}, 1, n);
    bytes_pump(ex, b); /* b is freed when the last byte is queued, or on abort */
}

static void h_bytes(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, bytes_authed, n);
}

int native_relay_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"*", "/v1/relay/{cluster}/{service}/{*rest}", h_relay, n, HTTP_ROUTE_STREAM},
        {"POST", "/v1/diag/echo", h_echo, n, HTTP_ROUTE_STREAM},
        {"GET", "/v1/diag/bytes", h_bytes, n, HTTP_ROUTE_STREAM},
    };
    /* without enable_diag the diagnostics are not routes at all */
    return native_add(n, routes, n->d.enable_diag ? AB_ARRAY_LEN(routes) : 1, err, errlen);
}

int native_add(struct native *n, const struct http_route *routes, size_t count, char *err,
               size_t errlen)
{
    if (n->nroutes + count > NATIVE_ROUTES_MAX) {
        snprintf(err, errlen, "native: more than %d routes", NATIVE_ROUTES_MAX);
        return AB_ELIMIT;
    }
    memcpy(&n->routes[n->nroutes], routes, count * sizeof(*routes));
    n->nroutes += count;
    return 0;
}

struct native *native_new(const struct native_deps *deps, char *err, size_t errlen)
{
    struct native *n = calloc(1, sizeof(*n));
    if (!n) {
        snprintf(err, errlen, "native: out of memory");
        return NULL;
    }
    n->d = *deps;
    if (native_relay_add_routes(n, err, errlen) || native_whoami_add_routes(n, err, errlen) ||
        native_sandboxes_add_routes(n, err, errlen) || native_mgmt_add_routes(n, err, errlen) ||
        native_system_add_routes(n, err, errlen) || native_exec_add_routes(n, err, errlen) ||
        native_terminal_add_routes(n, err, errlen) || native_logstream_add_routes(n, err, errlen) ||
        native_templates_admin_add_routes(n, err, errlen)) {
        free(n->events);
        free(n);
        return NULL;
    }
    return n;
}

const struct http_route *native_routes(const struct native *n, size_t *count)
{
    *count = n->nroutes;
    return n->routes;
}

void native_free(struct native *n)
{
    if (n) {
        native_terminal_close_all(n);
        native_logstream_close_all(n);
        native_mgmt_free(n);
        free(n->events);
    }
    free(n);
}
