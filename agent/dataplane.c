/* The data plane: target extraction, the local proxy to envd's unix socket,
 * and the relay to other clusters. See dataplane.h. */
#include "agent/dataplane.h"

#include "agent/hub_link.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agentbox/relay.h"
#include "agentbox/sbxid.h"
#include "agentbox/tunnel_http.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#define DP_UPSTREAM_TIMEOUT_MS (3600 * 1000) /* response head; Connect streams may idle */
#define DP_TOUCH_EVERY_MS 1000               /* activity refresh during long transfers */

static const char MSG_NOT_FOUND[] = "sandbox not found";
static const char MSG_UNHEALTHY[] = "sandbox is not in a healthy state";

struct dataplane {
    struct dataplane_deps d;
    struct metric_family *m_requests, *m_bytes, *m_latency;
    struct http_route routes[1];
};

static void count_request(struct dataplane *dp, const char *outcome, int64_t t0_us)
{
    const char *v[] = {outcome};
    metrics_add(dp->m_requests, v, 1);
    metrics_observe(dp->m_latency, v, (double)(ab_now_us() - t0_us) / 1e6);
}

static void count_bytes(struct dataplane *dp, const char *direction, uint64_t n)
{
    const char *v[] = {direction};
    if (n)
        metrics_add(dp->m_bytes, v, (double)n);
}

/* {"error": msg} with the given status. */
static void respond_error(struct http_exchange *ex, int status, const char *msg)
{
    http_respond_json(ex, status, json_pack("{s:s}", "error", msg));
}

/* ---- target extraction (the parsing itself: dataplane_target.c) -------------------------- */

int dp_extract_target(const struct http_request *r, const char *domain, struct dp_target *t,
                      char *err, size_t errlen)
{
    const struct dp_target_req req = {
        .target = r->target,
        .host = http_header_get(r, "Host"),
        .e2b_id = http_header_get(r, "E2b-Sandbox-Id"),
        .e2b_port = http_header_get(r, "E2b-Sandbox-Port"),
        .x_id = http_header_get(r, "X-Sandbox-Id"),
        .x_port = http_header_get(r, "X-Sandbox-Port"),
    };
    return dp_target_parse(&req, domain, t, err, errlen);
}

/* ---- the local proxy ------------------------------------------------------------------------- */

struct proxy {
    struct dataplane *dp;
    struct http_exchange *ex;
    struct http_client *c; /* NULL once it delivered on_end/on_error or we closed it */
    char id[SBXID_MAX + 1];
    int port; /* the sandbox port asked for (envd's or a server's) */
    int64_t t0_us;
    int64_t touched_ms;
    uint64_t up, down;
    bool body_paused; /* we paused the request body (upstream is slow) */
    bool resp_paused; /* we paused the upstream (client is slow) */
    bool req_done;
    /* Whether this exchange keeps the sandbox from idling out (DESIGN §11):
     * only traffic envd authenticated counts — a request to envd's port,
     * not its unauthenticated /health, that envd did not answer 401/403.
     * Anonymous traffic, and traffic to the sandbox's other ports (which
     * nothing authenticates), never counts. */
    bool may_count;
    bool counts;
    /* an open stream is activity even when nothing flows (DESIGN §7): a
     * `sleep 600` command's stream keeps its sandbox */
    struct loop_timer keep;
    bool keep_on;
};

static bool is_hop_by_hop(const char *name)
{
    static const char *const hop[] = {
        "Connection", "Keep-Alive", "Transfer-Encoding", "TE",
        "Trailer",    "Upgrade",    "Proxy-Connection",  "Content-Length"};
    for (size_t i = 0; i < AB_ARRAY_LEN(hop); i++)
        if (strcasecmp(name, hop[i]) == 0)
            return true;
    return false;
}

bool dp_counts_as_activity(int port, const char *path)
{
    size_t n = strcspn(path, "?");
    if (port != DP_ENVD_PORT)
        return false;
    return !(n == strlen("/health") && strncmp(path, "/health", n) == 0);
}

bool dp_token_matches(const char *presented, const char *token)
{
    size_t n = token ? strlen(token) : 0;
    return n > 0 && presented && strlen(presented) == n && CRYPTO_memcmp(presented, token, n) == 0;
}

static void touch(struct proxy *p, bool force)
{
    int64_t now = ab_now_ms();
    if (!p->counts)
        return;
    if ((force || now - p->touched_ms >= DP_TOUCH_EVERY_MS) && p->dp->d.rt) {
        p->touched_ms = now;
        rt_touch(p->dp->d.rt, p->id);
    }
}

static void keep_tick(struct loop_timer *t)
{
    struct proxy *p = t->arg;

    touch(p, true);
    loop_timer_start(p->dp->d.loop, &p->keep, DP_TOUCH_EVERY_MS, keep_tick, p);
}

/* The exchange has been finished: record and free. */
static void proxy_done(struct proxy *p, const char *outcome)
{
    if (p->keep_on)
        loop_timer_cancel(&p->keep);
    touch(p, true);
    count_bytes(p->dp, "to_sandbox", p->up);
    count_bytes(p->dp, "from_sandbox", p->down);
    count_request(p->dp, outcome, p->t0_us);
    free(p);
}

static void up_head(struct http_client *c, int status, const struct http_header *h, int n,
                    void *arg)
{
    struct proxy *p = arg;
    struct http_header out[HTTP_MAX_HEADERS];
    int64_t len = -1;
    int k = 0;

    (void)c;
    for (int i = 0; i < n; i++) {
        if (strcasecmp(h[i].name, "Content-Length") == 0) {
            char *end;
            long long v = strtoll(h[i].value, &end, 10);
            if (*end == '\0' && v >= 0)
                len = v;
        }
        if (!is_hop_by_hop(h[i].name) && k < HTTP_MAX_HEADERS - 4)
            out[k++] = h[i];
    }
    if (status == 204 || status == 304 || status < 200)
        len = 0;
    /* envd checked the token (or signature) by the time it answers */
    p->counts = p->may_count && status != 401 && status != 403;
    touch(p, true);
    if (p->counts && !p->keep_on) {
        p->keep_on = true;
        loop_timer_start(p->dp->d.loop, &p->keep, DP_TOUCH_EVERY_MS, keep_tick, p);
    }
    http_begin(p->ex, status, out, k, len);
}

static void up_data(struct http_client *c, const void *d, size_t n, void *arg)
{
    struct proxy *p = arg;

    p->down += n;
    http_write(p->ex, d, n);
    if (!p->resp_paused && http_pending(p->ex) > HTTP_STREAM_HIGH_WATER) {
        p->resp_paused = true;
        http_client_pause(c, true);
    }
    touch(p, false);
}

static void up_end(struct http_client *c, void *arg)
{
    struct proxy *p = arg;

    (void)c;
    p->c = NULL;
    http_end(p->ex);
    proxy_done(p, "ok");
}

static void up_error(struct http_client *c, int err, const char *msg, void *arg)
{
    struct proxy *p = arg;

    (void)c;
    p->c = NULL;
    if (!http_has_begun(p->ex) && p->port != DP_ENVD_PORT) {
        char m[200];
        snprintf(m, sizeof(m),
                 "port %d of sandbox %s is not open: start a server listening on "
                 "it inside the sandbox (0.0.0.0 or 127.0.0.1)",
                 p->port, p->id);
        respond_error(p->ex, 502, m);
        proxy_done(p, "port_closed");
        return;
    }
    if (!http_has_begun(p->ex)) {
        LOG_WARN("the sandbox's envd did not answer", "id", p->id, "error", msg ? msg : "", "code",
                 ab_strerror(err));
        respond_error(p->ex, 502, MSG_UNHEALTHY);
        proxy_done(p, "unhealthy");
        return;
    }
    /* the answer is cut: the client sees a reset, so say which and why */
    char got[24];
    snprintf(got, sizeof(got), "%llu", (unsigned long long)p->down);
    LOG_WARN("the sandbox's answer was cut (upstream reset)", "id", p->id, "port",
             p->port == DP_ENVD_PORT ? "envd" : "other", "error", msg ? msg : "", "code",
             ab_strerror(err), "bytes_sent", got);
    http_abort(p->ex);
    proxy_done(p, "upstream_reset");
}

static void up_drain(struct http_client *c, void *arg)
{
    struct proxy *p = arg;

    (void)c;
    if (p->body_paused) {
        p->body_paused = false;
        http_pause_body(p->ex, false);
    }
}

static const struct http_client_handler up_handler = {
    .on_head = up_head,
    .on_data = up_data,
    .on_end = up_end,
    .on_error = up_error,
    .on_drain = up_drain,
};

static void body_data(struct http_exchange *ex, const void *d, size_t n, void *arg)
{
    struct proxy *p = arg;

    if (!p->c)
        return;
    p->up += n;
    http_client_write(p->c, d, n);
    if (!p->body_paused && http_client_pending(p->c) > HTTP_STREAM_HIGH_WATER) {
        p->body_paused = true;
        http_pause_body(ex, true);
    }
    touch(p, false);
}

static void body_end(struct http_exchange *ex, void *arg)
{
    struct proxy *p = arg;

    (void)ex;
    p->req_done = true;
    if (p->c)
        http_client_end(p->c);
}

static void body_abort(struct http_exchange *ex, void *arg)
{
    struct proxy *p = arg;

    if (p->c) {
        http_client_close(p->c);
        p->c = NULL;
    }
    http_abort(ex);
    proxy_done(p, "client_gone");
}

static void body_drain(struct http_exchange *ex, void *arg)
{
    struct proxy *p = arg;

    (void)ex;
    if (p->resp_paused && p->c) {
        p->resp_paused = false;
        http_client_pause(p->c, false);
    }
}

static const struct http_body_handler body_handler = {body_data, body_end, body_abort, body_drain};

static void proxy_local(struct http_exchange *ex, struct dataplane *dp, const struct dp_target *t,
                        const char *envd_addr, const char *token, int64_t t0_us)
{
    const struct http_request *r = http_req(ex);
    struct http_header h[HTTP_MAX_HEADERS];
    struct http_client_options o = {0};
    struct proxy *p = calloc(1, sizeof(*p));
    int n = 0;

    if (!p) {
        respond_error(ex, 503, "out of memory; try again");
        count_request(dp, "error", t0_us);
        return;
    }
    p->dp = dp;
    p->ex = ex;
    p->t0_us = t0_us;
    ab_strlcpy(p->id, t->id, sizeof(p->id));
    p->port = t->port;
    p->may_count = dp_counts_as_activity(t->port, t->path);
    /* another port's server (the code interpreter's :49999) authenticates
     * nothing we can see, but a request carrying the sandbox's envd access
     * token is its owner's: that counts, as envd's traffic does */
    if (!p->may_count && t->port != DP_ENVD_PORT)
        p->may_count = dp_token_matches(http_header_get(r, "X-Access-Token"), token);
    for (int i = 0; i < r->nheaders && n < HTTP_MAX_HEADERS - 1; i++)
        if (!is_hop_by_hop(r->headers[i].name))
            h[n++] = r->headers[i];
    o.addr = envd_addr;
    o.method = r->method;
    o.target = t->path;
    o.headers = h;
    o.nheaders = n;
    o.content_length = r->content_length;
    o.timeout_ms = DP_UPSTREAM_TIMEOUT_MS;
    p->c = http_client_start(dp->d.loop, &o, &up_handler, p);
    if (!p->c) {
        respond_error(ex, 502, MSG_UNHEALTHY);
        proxy_done(p, "unhealthy");
        return;
    }
    http_set_body_handler(ex, &body_handler, p);
}

/* ---- routing ------------------------------------------------------------------------------- */

static void relay_remote(struct http_exchange *ex, struct dataplane *dp, const char *cluster,
                         const struct dp_target *t, int64_t t0_us)
{
    const struct http_request *r = http_req(ex);
    char msg[256];

    (void)t;
    if (r->peer && strncmp(r->peer, "tunnel:", 7) == 0) {
        /* a relayed request is never relayed again: no loops through the hub */
        snprintf(msg, sizeof(msg), "sandbox belongs to cluster '%s', not to this cluster ('%s')",
                 cluster, dp->d.cluster);
        respond_error(ex, 502, msg);
        count_request(dp, "wrong_cluster", t0_us);
        return;
    }
    if (!hub_link_session(dp->d.hub)) {
        /* the data plane's contract is 502 for anything it cannot reach (dataplane.h) */
        hub_link_unreachable(dp->d.hub, cluster, msg, sizeof(msg));
        respond_error(ex, 502, msg);
        count_request(dp, "no_tunnel", t0_us);
        return;
    }
    /* the original target: the remote data plane extracts the sandbox again */
    hub_link_proxy(dp->d.hub, ex, cluster, RELAY_SVC_DATA, r->target, NULL);
    count_request(dp, "relayed", t0_us);
}

static void h_data(struct http_exchange *ex, void *arg)
{
    struct dataplane *dp = arg;
    const struct http_request *r = http_req(ex);
    int64_t t0 = ab_now_us();
    struct dp_target t;
    char err[512], cluster[SBXID_CLUSTER_MAX + 1];
    struct rt_sandbox sb;
    int rc;

    rc = dp_extract_target(r, dp->d.data_domain, &t, err, sizeof(err));
    if (rc == AB_ENOENT) {
        if (strcmp(r->method, "GET") == 0 && strcmp(r->path, "/healthz") == 0) {
            dp->d.respond_healthz(ex, dp->d.respond_arg);
            return;
        }
        if (strcmp(r->method, "GET") == 0 && strcmp(r->path, "/metrics") == 0) {
            dp->d.respond_metrics(ex, dp->d.respond_arg);
            return;
        }
        respond_error(ex, 400,
                      "missing sandbox id: set the E2b-Sandbox-Id and E2b-Sandbox-Port "
                      "headers, use the host <port>-<sandbox id>.<domain> or the path "
                      "/sandboxes/<sandbox id>/<port>/...");
        count_request(dp, "bad_request", t0);
        return;
    }
    if (rc != 0) {
        respond_error(ex, 400, err);
        count_request(dp, "bad_request", t0);
        return;
    }
    if (dp_target_cluster(&t, cluster, err, sizeof(err)) != 0) {
        respond_error(ex, 400, err);
        count_request(dp, "bad_request", t0);
        return;
    }
    if (strcmp(cluster, dp->d.cluster) != 0) {
        relay_remote(ex, dp, cluster, &t, t0);
        return;
    }
    if (!dp->d.rt || rt_get(dp->d.rt, t.id, &sb) != 0) {
        respond_error(ex, 502, MSG_NOT_FOUND);
        count_request(dp, "not_found", t0);
        return;
    }
    json_decref(sb.metadata);
    if (sb.state != RT_RUNNING || !sb.envd_addr[0]) {
        respond_error(ex, 502, MSG_UNHEALTHY);
        count_request(dp, "unhealthy", t0);
        return;
    }
    if (t.port != DP_ENVD_PORT) {
        /* any other port: a server the sandbox runs on its own loopback */
        char addr[RT_ADDR_MAX + 8];
        if (!sb.port_addr[0]) {
            snprintf(err, sizeof(err),
                     "port %d of sandbox %s is not reachable: this runtime "
                     "proxies only envd (port %d)",
                     t.port, t.id, DP_ENVD_PORT);
            respond_error(ex, 502, err);
            count_request(dp, "unsupported_port", t0);
            return;
        }
        snprintf(addr, sizeof(addr), "%s:%d", sb.port_addr, t.port);
        proxy_local(ex, dp, &t, addr, sb.envd_token, t0);
        return;
    }
    proxy_local(ex, dp, &t, sb.envd_addr, sb.envd_token, t0);
}

struct dataplane *dataplane_new(const struct dataplane_deps *deps, char *err, size_t errlen)
{
    static const char *const outcome[] = {"outcome", NULL};
    static const char *const direction[] = {"direction", NULL};
    struct metrics_registry *reg = metrics_default();
    struct dataplane *dp = calloc(1, sizeof(*dp));

    if (!dp) {
        snprintf(err, errlen, "data plane: out of memory");
        return NULL;
    }
    dp->d = *deps;
    dp->m_requests = metrics_register(reg, "agentbox_dataplane_requests_total",
                                      "Data-plane requests by outcome (ok, relayed, bad_request, "
                                      "not_found, unhealthy, ...)",
                                      METRIC_COUNTER, outcome, NULL, 0);
    dp->m_bytes = metrics_register(reg, "agentbox_dataplane_bytes_total",
                                   "Body bytes proxied to and from local sandboxes", METRIC_COUNTER,
                                   direction, NULL, 0);
    dp->m_latency = metrics_register(reg, "agentbox_dataplane_request_duration_seconds",
                                     "Data-plane request duration, from the request head to the "
                                     "end of the response",
                                     METRIC_HISTOGRAM, outcome, NULL, 0);
    if (!dp->m_requests || !dp->m_bytes || !dp->m_latency) {
        snprintf(err, errlen, "data plane: cannot register metrics (out of memory)");
        free(dp);
        return NULL;
    }
    dp->routes[0] = (struct http_route){"*", "/{*rest}", h_data, dp, HTTP_ROUTE_STREAM};
    return dp;
}

const struct http_route *dataplane_routes(const struct dataplane *dp, size_t *n)
{
    *n = AB_ARRAY_LEN(dp->routes);
    return dp->routes;
}

void dataplane_free(struct dataplane *dp)
{
    free(dp);
}
