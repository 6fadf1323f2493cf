/* See hub_link.h. */
#include "agent/hub_link.h"

#include "agent/tunnel_client.h"

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/loop.h"
#include "agentbox/relay.h"
#include "agentbox/sbxid.h"
#include "agentbox/tunnel.h"
#include "agentbox/trace.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct deadline_call;

struct hub_link {
    struct hub_link_deps d;
    struct agent_tunnel *tunnel; /* not owned; NULL when standalone or stopped */
    struct deadline_call *calls; /* hub_link_call_within's in flight */
};

/* A call with a deadline. Lives until the tunnel's answer is back (the
 * session's end delivers it), even when the deadline answered first. */
struct deadline_call {
    struct hub_link *hl;
    void (*done)(const struct tun_call_result *res, void *arg);
    void *arg;
    int64_t timeout_ms;
    struct loop_timer timer;
    bool answered; /* done ran */
    struct deadline_call *prev, *next;
};

static void deadline_unlink_free(struct deadline_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        c->hl->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

struct hub_link *hub_link_new(const struct hub_link_deps *deps)
{
    struct hub_link *hl = calloc(1, sizeof(*hl));
    if (hl)
        hl->d = *deps;
    return hl;
}

void hub_link_free(struct hub_link *hl)
{
    if (!hl)
        return;
    /* none expected: the tunnel's end delivered every answer */
    while (hl->calls) {
        loop_timer_cancel(&hl->calls->timer);
        deadline_unlink_free(hl->calls);
    }
    free(hl);
}

void hub_link_set_tunnel(struct hub_link *hl, struct agent_tunnel *t)
{
    hl->tunnel = t;
}

struct tun_session *hub_link_session(const struct hub_link *hl)
{
    struct tun_session *s = hl && hl->tunnel ? agent_tunnel_session(hl->tunnel) : NULL;
    return s && tun_session_is_established(s) ? s : NULL;
}

bool hub_link_configured(const struct hub_link *hl)
{
    return hl && hl->d.hub_configured;
}

const char *hub_link_cluster(const struct hub_link *hl)
{
    return hl && hl->d.cluster ? hl->d.cluster : "";
}

int64_t hub_link_epoch(const struct hub_link *hl)
{
    return hl && hl->tunnel ? agent_tunnel_epoch(hl->tunnel) : 0;
}

void hub_link_unreachable(const struct hub_link *hl, const char *cluster, char *msg, size_t len)
{
    const char *why = hub_link_configured(hl)
                          ? "the tunnel to the hub is down; retry once the agent is reconnected"
                          : "this agent has no hub configured";
    if (cluster)
        snprintf(msg, len, "cluster '%s' is not reachable: %s", cluster, why);
    else
        snprintf(msg, len, "the hub is not reachable: %s", why);
}

int hub_link_call(struct hub_link *hl, const char *method, const char *path,
                  const struct tun_header *h, int n, const void *body, size_t len, size_t max_body,
                  void (*done)(const struct tun_call_result *res, void *arg), void *arg)
{
    struct tun_session *s = hub_link_session(hl);
    if (!s)
        return AB_ECLOSED;
    return tun_call(s, RELAY_SVC_HUB, method, path, h, n, body, len, max_body, done, arg);
}

static void deadline_fired(struct loop_timer *t)
{
    struct deadline_call *c = t->arg;
    char why[96];
    snprintf(why, sizeof(why), "the hub did not answer within %lld ms", (long long)c->timeout_ms);
    const struct tun_call_result res = {.status = 0, .error = why};
    c->answered = true;
    c->done(&res, c->arg);
}

static void deadline_answer(const struct tun_call_result *res, void *arg)
{
    struct deadline_call *c = arg;
    if (!c->answered) {
        loop_timer_cancel(&c->timer);
        c->answered = true;
        c->done(res, c->arg);
    }
    deadline_unlink_free(c);
}

int hub_link_call_within(struct hub_link *hl, int64_t timeout_ms, const char *method,
                         const char *path, const struct tun_header *h, int n, const void *body,
                         size_t len, size_t max_body,
                         void (*done)(const struct tun_call_result *res, void *arg), void *arg)
{
    struct tun_session *s = hub_link_session(hl);
    struct deadline_call *c;
    if (!s)
        return AB_ECLOSED;
    if (!(c = calloc(1, sizeof(*c))))
        return AB_ENOMEM;
    c->hl = hl;
    c->done = done;
    c->arg = arg;
    c->timeout_ms = timeout_ms;
    int rc =
        tun_call(s, RELAY_SVC_HUB, method, path, h, n, body, len, max_body, deadline_answer, c);
    if (rc != 0) {
        free(c);
        return rc;
    }
    c->next = hl->calls;
    if (hl->calls)
        hl->calls->prev = c;
    hl->calls = c;
    loop_timer_start(hl->d.loop, &c->timer, timeout_ms, deadline_fired, c);
    return 0;
}

int hub_link_open(struct hub_link *hl, const struct tun_head *head, struct tun_endpoint *ep,
                  struct tun_stream **out)
{
    struct tun_session *s = hub_link_session(hl);
    if (!s)
        return AB_ECLOSED;
    return tun_stream_open(s, head, ep, out);
}

int hub_link_relay_headers(const struct hub_link *hl, const char *cluster, const char *service,
                           struct tun_header *h, int n)
{
    h[n++] = (struct tun_header){RELAY_HDR_TARGET_CLUSTER, cluster};
    h[n++] = (struct tun_header){RELAY_HDR_TARGET_SERVICE, service};
    /* the hub replaces it from the session; sent so a log on either side names the origin */
    h[n++] = (struct tun_header){RELAY_HDR_SOURCE_CLUSTER, hl->d.cluster};
    return n;
}

/* --- buffered forward ------------------------------------------------------------------ */

struct fwd {
    struct http_exchange *ex;
    char cluster[SBXID_CLUSTER_MAX + 1];
    char what[48];
    char trace[72]; /* the request's X-AgentBox-Trace, when tracing (agentbox/trace.h) */
};

static void fwd_done(const struct tun_call_result *res, void *arg)
{
    struct fwd *f = arg;
    if (f->trace[0])
        ab_trace(f->trace, "forward.answered");
    if (res->status == 0)
        http_respond_error(f->ex, 503,
                           "cluster '%s' could not be reached through the hub for %s: %s; retry "
                           "shortly",
                           f->cluster, f->what, res->error ? res->error : "tunnel error");
    else
        http_respond(f->ex, res->status, res->body_len ? "application/json" : NULL,
                     res->body ? res->body : "", res->body_len, NULL, 0);
    free(f);
}

void hub_link_forward(struct hub_link *hl, struct http_exchange *ex, const char *cluster,
                      const char *service, const char *target, const char *body, size_t len,
                      const char *what, const char *assertion)
{
    const struct http_request *r = http_req(ex);
    struct tun_session *s = hub_link_session(hl);
    struct tun_header h[3 + HUB_LINK_RELAY_HEADERS];
    char msg[256];
    int n = 0;
    struct fwd *f;
    const char *trace = ab_trace_enabled() ? http_header_get(r, AB_TRACE_HEADER) : NULL;

    if (!s) {
        hub_link_unreachable(hl, cluster, msg, sizeof(msg));
        http_respond_error(ex, 503, "%s", msg);
        return;
    }
    if (!body) {
        body = r->body;
        len = r->body_len;
    }
    if (!assertion || !assertion[0]) {
        /* the hub validated the caller's key without an assertion: an old hub */
        http_respond_error(ex, 401,
                           "cannot forward to cluster '%s': the hub gave no assertion for this "
                           "caller; upgrade the hub",
                           cluster);
        return;
    }
    h[n++] = (struct tun_header){ASRT_HEADER, assertion};
    const char *ct = http_header_get(r, "Content-Type");
    if (ct || len)
        h[n++] = (struct tun_header){"Content-Type", ct ? ct : "application/json"};
    if (trace)
        h[n++] = (struct tun_header){AB_TRACE_HEADER, trace};
    n = hub_link_relay_headers(hl, cluster, service, h, n);
    if (!(f = calloc(1, sizeof(*f)))) {
        http_respond_error(ex, 503, "out of memory while forwarding to cluster '%s'", cluster);
        return;
    }
    f->ex = ex;
    ab_strlcpy(f->cluster, cluster, sizeof(f->cluster));
    ab_strlcpy(f->what, what ? what : "this request", sizeof(f->what));
    if (trace)
        ab_strlcpy(f->trace, trace, sizeof(f->trace));
    int rc = tun_call(s, RELAY_SVC_RELAY, r->method, target, h, n, body, len, HUB_LINK_FORWARD_MAX,
                      fwd_done, f);
    if (rc == 0 && trace)
        ab_trace(trace, "forward.sent");
    if (rc != 0) {
        free(f);
        http_respond_error(ex, 503, "cannot open a stream to the hub for cluster '%s': %s", cluster,
                           ab_strerror(rc));
    }
}

/* --- streamed proxy -------------------------------------------------------------------- */

void hub_link_proxy(struct hub_link *hl, struct http_exchange *ex, const char *cluster,
                    const char *service, const char *target, const char *assertion)
{
    struct tun_header extra[1 + HUB_LINK_RELAY_HEADERS];
    char msg[256];
    int n = 0;
    if (assertion && assertion[0])
        extra[n++] = (struct tun_header){ASRT_HEADER, assertion};
    n = hub_link_relay_headers(hl, cluster, service, extra, n);
    struct tun_session *s = hub_link_session(hl);

    if (s)
        snprintf(msg, sizeof(msg), "cluster '%s' is not reachable through the hub", cluster);
    else
        hub_link_unreachable(hl, cluster, msg, sizeof(msg));
    /* tun_http_proxy answers 503 with msg itself when the stream cannot open */
    tun_http_proxy(ex, s, RELAY_SVC_RELAY, target, extra, n, msg);
}
