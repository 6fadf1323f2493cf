/* Native API: reach another cluster through the hub, and two diagnostics
 * that exercise the tunnel end to end.
 *
 *   ANY  /v1/relay/{cluster}/{service}/{*rest}  → relay stream to that cluster's
 *        service (e2b, data or native) with target /{rest}?{query}
 *   POST /v1/diag/echo        streams the request body back (with backpressure)
 *   GET  /v1/diag/bytes?n=N   streams N bytes (0 ≤ N ≤ 16 GiB) of a fixed pattern
 */
#include "agent/native/native.h"

#include "agent/agent.h"
#include "agentbox/common.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"
#include "agent/tunnel_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void h_relay(struct http_exchange *ex, void *arg)
{
    struct agent *a = arg;
    const char *cluster = http_param(ex, "cluster");
    const char *service = http_param(ex, "service");
    const struct http_request *r = http_req(ex);
    /* the raw target after /v1/relay/<cluster>/<service>, escapes as sent */
    const char *p = r->target + strlen("/v1/relay/");
    const char *slash = strchr(p, '/');
    slash = slash ? strchr(slash + 1, '/') : NULL;
    const char *rest = slash ? slash : "/";
    struct tun_header extra[] = {
        {"X-AgentBox-Target-Cluster", cluster},
        {"X-AgentBox-Target-Service", service},
    };
    tun_http_proxy(ex, agent_tunnel_session(a->tunnel), "relay", rest, extra, 2,
                   a->tunnel ? "the tunnel to the hub is down"
                             : "this agent has no hub configured");
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

static void h_echo(struct http_exchange *ex, void *arg)
{
    struct echo *e = calloc(1, sizeof(*e));
    if (!e) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    http_set_body_handler(ex, &echo_handler, e);
}

#define BYTES_MAX (16LL << 30)
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

static void h_bytes(struct http_exchange *ex, void *arg)
{
    char nbuf[32];
    char *end;
    if (http_query_get(http_req(ex), "n", nbuf, sizeof(nbuf)) != 0) {
        http_respond_error(ex, 400, "query parameter n (bytes to send) is required");
        return;
    }
    long long n = strtoll(nbuf, &end, 10);
    if (*end || n < 0 || n > BYTES_MAX) {
        http_respond_error(ex, 400, "n must be an integer from 0 to %lld", BYTES_MAX);
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

int native_relay_add_routes(struct agent *a, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"*", "/v1/relay/{cluster}/{service}/{*rest}", h_relay, a, HTTP_ROUTE_STREAM},
        {"POST", "/v1/diag/echo", h_echo, a, HTTP_ROUTE_STREAM},
        {"GET", "/v1/diag/bytes", h_bytes, a, HTTP_ROUTE_STREAM},
    };
    if (agent_add_routes(a, AGENT_NATIVE, routes, AB_ARRAY_LEN(routes), err, errlen))
        return AB_ELIMIT;
    return native_whoami_add_routes(a, err, errlen);
}
