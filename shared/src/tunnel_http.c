/* HTTP over tunnel streams: endpoint routing, serving into a router,
 * proxying an exchange, splicing two streams, and small calls. See
 * tunnel_http.h. No libwebsockets here. */
#include "agentbox/tunnel_http.h"
#include "agentbox/common.h"
#include "agentbox/buf.h"
#include "agentbox/log.h"
#include "agentbox/pct.h"
#include "agentbox/trace.h"
#include "http_out.h"
#include "http_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define WRITE_PIECE (64 * 1024)

/* --- endpoint routing ------------------------------------------------------------ */

static struct tun_endpoint *ep_of(struct tun_stream *st)
{
    return tun_stream_user(st);
}

static void r_response(struct tun_stream *st, const struct tun_head *h, void *arg)
{
    struct tun_endpoint *ep = ep_of(st);
    if (ep && ep->ops->on_response)
        ep->ops->on_response(ep, st, h);
}

static void r_data(struct tun_stream *st, const uint8_t *d, size_t n, void *arg)
{
    struct tun_endpoint *ep = ep_of(st);
    if (ep && ep->ops->on_data)
        ep->ops->on_data(ep, st, d, n);
    else
        tun_stream_consumed(st, n);
}

static void r_end(struct tun_stream *st, void *arg)
{
    struct tun_endpoint *ep = ep_of(st);
    if (ep && ep->ops->on_end)
        ep->ops->on_end(ep, st);
}

static void r_reset(struct tun_stream *st, const char *code, const char *msg, void *arg)
{
    struct tun_endpoint *ep = ep_of(st);
    if (ep && ep->ops->on_reset)
        ep->ops->on_reset(ep, st, code, msg);
}

static void r_drain(struct tun_stream *st, void *arg)
{
    struct tun_endpoint *ep = ep_of(st);
    if (ep && ep->ops->on_drain)
        ep->ops->on_drain(ep, st);
}

static void r_closed(struct tun_stream *st, void *arg)
{
    struct tun_endpoint *ep = ep_of(st);
    tun_stream_set_user(st, NULL);
    if (ep && ep->ops->on_closed)
        ep->ops->on_closed(ep, st);
}

void tun_ep_callbacks_init(struct tun_callbacks *cb)
{
    cb->on_response = r_response;
    cb->on_data = r_data;
    cb->on_end = r_end;
    cb->on_reset = r_reset;
    cb->on_window_opened = r_drain;
    cb->on_drain = r_drain;
    cb->on_closed = r_closed;
}

/* --- a stream writer that never refuses: what the stream does not take yet
 * waits in an overflow chain, flushed on drain. Producers still keep
 * sw_pending() under TUN_STREAM_HIGH_WATER, so the overflow stays small. */

struct stream_writer {
    struct tun_stream *st;
    struct http_out overflow;
    bool end_pending;
    bool ended;
};

static void sw_flush(struct stream_writer *w)
{
    const char *d;
    size_t n;
    while ((n = http_out_peek(&w->overflow, &d)) > 0) {
        if (n > WRITE_PIECE)
            n = WRITE_PIECE;
        if (tun_stream_write(w->st, d, n) != 0)
            return;
        http_out_consume(&w->overflow, n);
    }
    if (w->end_pending && !w->ended) {
        w->ended = true;
        tun_stream_end(w->st);
    }
}

static int sw_write(struct stream_writer *w, const void *data, size_t len)
{
    if (w->ended || w->end_pending)
        return AB_ECLOSED;
    const uint8_t *p = data;
    while (len && w->overflow.bytes == 0) {
        size_t k = len < WRITE_PIECE ? len : WRITE_PIECE;
        int rc = tun_stream_write(w->st, p, k);
        if (rc == AB_ECLOSED || rc == AB_EINVAL)
            return rc;
        if (rc != 0)
            break; /* AB_ELIMIT / AB_EBUSY: keep the rest */
        p += k;
        len -= k;
    }
    return len ? http_out_append(&w->overflow, p, len) : 0;
}

static void sw_end(struct stream_writer *w)
{
    if (w->ended || w->end_pending)
        return;
    w->end_pending = true;
    sw_flush(w);
}

static size_t sw_pending(struct stream_writer *w)
{
    return (tun_stream_is_open(w->st) ? tun_stream_pending(w->st) : 0) + w->overflow.bytes;
}

static bool is_hop_by_hop(const char *name)
{
    static const char *const hop[] = {
        "Connection", "Transfer-Encoding", "Keep-Alive",      "Upgrade",
        "TE",         "Trailer",           "Proxy-Connection"};
    for (size_t i = 0; i < AB_ARRAY_LEN(hop); i++)
        if (strcasecmp(name, hop[i]) == 0)
            return true;
    return false;
}

static int64_t content_length_of(const struct tun_header *h, int n)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(h[i].name, "Content-Length") == 0) {
            char *end;
            long long v = strtoll(h[i].value, &end, 10);
            if (*end == '\0' && v >= 0)
                return v;
        }
    return -1;
}

int tun_stream_respond_json(struct tun_stream *st, int status, const char *json)
{
    char len[32];
    snprintf(len, sizeof(len), "%zu", strlen(json));
    struct tun_header h[] = {{"Content-Type", "application/json"}, {"Content-Length", len}};
    int rc = tun_stream_respond(st, status, h, 2);
    if (rc == 0)
        rc = tun_stream_write(st, json, strlen(json));
    if (rc == 0)
        rc = tun_stream_end(st);
    return rc;
}

/* --- serve: a peer-opened stream into a router ------------------------------------ */

struct serve_ep {
    struct tun_endpoint ep;
    struct stream_writer w;
    struct http_exchange *ex;
    bool handler_finished, req_ended, released;
    bool paused;
    size_t unconsumed;
    char peer[64];
};

static void serve_release(struct serve_ep *s)
{
    if (!s->released && s->ex) {
        s->released = true;
        http_exchange_release(s->ex);
    }
}

static int sv_send_head(void *t, int status, const struct http_header *h, int n,
                        int64_t content_length)
{
    struct serve_ep *s = t;
    struct tun_header hdrs[TUN_MAX_HEADERS];
    int k = 0;
    char cl[32];
    for (int i = 0; i < n && k < TUN_MAX_HEADERS - 1; i++) {
        if (is_hop_by_hop(h[i].name) || strcasecmp(h[i].name, "Content-Length") == 0)
            continue;
        hdrs[k].name = h[i].name;
        hdrs[k].value = h[i].value;
        k++;
    }
    if (content_length >= 0) {
        snprintf(cl, sizeof(cl), "%lld", (long long)content_length);
        hdrs[k].name = "Content-Length";
        hdrs[k].value = cl;
        k++;
    }
    return tun_stream_respond(s->w.st, status, hdrs, k);
}

static int sv_send_body(void *t, const void *data, size_t len)
{
    return sw_write(&((struct serve_ep *)t)->w, data, len);
}

static int sv_send_end(void *t)
{
    sw_end(&((struct serve_ep *)t)->w);
    return 0;
}

static size_t sv_pending(void *t)
{
    return sw_pending(&((struct serve_ep *)t)->w);
}

static void sv_pause_body(void *t, bool paused)
{
    struct serve_ep *s = t;
    s->paused = paused;
    if (!paused && s->unconsumed) {
        size_t n = s->unconsumed;
        s->unconsumed = 0;
        tun_stream_consumed(s->w.st, n);
    }
}

static void sv_abort(void *t)
{
    struct serve_ep *s = t;
    tun_stream_reset(s->w.st, TUN_RESET_CANCEL, "the handler aborted the request");
}

static void sv_finished(void *t)
{
    struct serve_ep *s = t;
    s->handler_finished = true;
    if (s->req_ended)
        serve_release(s);
}

static const struct http_transport_ops serve_ops = {
    .send_head = sv_send_head,
    .send_body = sv_send_body,
    .send_end = sv_send_end,
    .pending = sv_pending,
    .pause_body = sv_pause_body,
    .abort = sv_abort,
    .finished = sv_finished,
};

static void sv_on_data(struct tun_endpoint *ep, struct tun_stream *st, const uint8_t *d, size_t n)
{
    struct serve_ep *s = (struct serve_ep *)ep;
    if (!s->released && !s->handler_finished)
        http_exchange_body(s->ex, d, n);
    if (s->paused && !s->handler_finished)
        s->unconsumed += n;
    else
        tun_stream_consumed(st, n);
}

static void sv_on_end(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct serve_ep *s = (struct serve_ep *)ep;
    s->req_ended = true;
    if (s->released)
        return;
    if (s->handler_finished)
        serve_release(s);
    else
        http_exchange_body_end(s->ex); /* may finish (and release) synchronously */
}

static void sv_on_reset(struct tun_endpoint *ep, struct tun_stream *st, const char *code,
                        const char *msg)
{
    serve_release((struct serve_ep *)ep);
}

static void sv_on_drain(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct serve_ep *s = (struct serve_ep *)ep;
    sw_flush(&s->w);
    if (!s->released && !s->handler_finished && sw_pending(&s->w) < TUN_STREAM_HIGH_WATER)
        http_exchange_drained(s->ex);
}

static void sv_on_closed(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct serve_ep *s = (struct serve_ep *)ep;
    serve_release(s);
    http_out_clear(&s->w.overflow);
    free(s);
}

static const struct tun_endpoint_ops serve_ep_ops = {
    .on_data = sv_on_data,
    .on_end = sv_on_end,
    .on_reset = sv_on_reset,
    .on_drain = sv_on_drain,
    .on_closed = sv_on_closed,
};

int tun_http_serve(struct tun_stream *st, const struct tun_head *head, struct http_router *r,
                   const char *peer, void *transport_data)
{
    struct serve_ep *s = calloc(1, sizeof(*s));
    char *path = malloc(TUN_PATH_MAX + 1);
    if (!s || !path) {
        free(s);
        free(path);
        tun_stream_reset(st, TUN_RESET_BUSY, "out of memory");
        return AB_ENOMEM;
    }
    s->ep.ops = &serve_ep_ops;
    s->w.st = st;
    ab_strlcpy(s->peer, peer ? peer : "tunnel", sizeof(s->peer));

    struct http_request req;
    memset(&req, 0, sizeof(req));
    req.method = head->method;
    req.target = head->path;
    const char *q = strchr(head->path, '?');
    size_t plen = q ? (size_t)(q - head->path) : strlen(head->path);
    req.query = q ? q + 1 : "";
    int drc = pct_decode(head->path, plen, path, TUN_PATH_MAX + 1, 0, NULL);
    if (drc != 0) {
        free(path);
        free(s);
        /* The head parser bounds the path, so only a bad escape is expected here. */
        char msg[128];
        if (drc == AB_ELIMIT)
            snprintf(msg, sizeof(msg),
                     "{\"code\":400,\"message\":\"request path is longer than %d bytes\"}",
                     TUN_PATH_MAX);
        else
            ab_strlcpy(msg,
                       "{\"code\":400,\"message\":\"request path has a malformed "
                       "percent-escape or a NUL byte\"}",
                       sizeof(msg));
        tun_stream_respond_json(st, 400, msg);
        return drc;
    }
    req.path = path;
    for (int i = 0; i < head->nheaders && i < HTTP_MAX_HEADERS; i++) {
        req.headers[i].name = head->headers[i].name;
        req.headers[i].value = head->headers[i].value;
        req.nheaders = i + 1;
    }
    req.content_length = content_length_of(head->headers, head->nheaders);
    req.peer = s->peer;
    req.transport_data = transport_data;
    s->ex = http_exchange_new(r, &req, &serve_ops, s);
    free(path);
    if (!s->ex) {
        free(s);
        tun_stream_reset(st, TUN_RESET_BUSY, "out of memory");
        return AB_ENOMEM;
    }
    tun_stream_set_user(st, &s->ep);
    http_exchange_start(s->ex);
    return 0;
}

/* --- proxy: an exchange forwarded as a new stream ---------------------------------- */

struct proxy_ep {
    struct tun_endpoint ep;
    struct stream_writer w;
    struct http_exchange *ex;
    bool ex_done; /* we finished the exchange */
    bool ex_paused;
    size_t unconsumed; /* response bytes waiting for the client to drain */
};

static void px_finish_error(struct proxy_ep *p, int status, const char *msg)
{
    if (p->ex_done)
        return;
    p->ex_done = true;
    if (http_has_begun(p->ex))
        http_abort(p->ex);
    else
        http_respond_error(p->ex, status, "%s", msg);
}

static void px_req_data(struct http_exchange *ex, const void *d, size_t n, void *arg)
{
    struct proxy_ep *p = arg;
    if (!tun_stream_is_open(p->w.st))
        return;
    sw_write(&p->w, d, n);
    if (!p->ex_paused && sw_pending(&p->w) > TUN_STREAM_HIGH_WATER) {
        p->ex_paused = true;
        http_pause_body(ex, true);
    }
}

static void px_req_end(struct http_exchange *ex, void *arg)
{
    struct proxy_ep *p = arg;
    if (tun_stream_is_open(p->w.st))
        sw_end(&p->w);
}

static void px_req_abort(struct http_exchange *ex, void *arg)
{
    struct proxy_ep *p = arg;
    if (tun_stream_is_open(p->w.st))
        tun_stream_reset(p->w.st, TUN_RESET_CANCEL, "the client went away");
    if (!p->ex_done) {
        p->ex_done = true;
        http_abort(ex);
    }
}

static void px_resp_drained(struct http_exchange *ex, void *arg)
{
    struct proxy_ep *p = arg;
    if (p->unconsumed && tun_stream_is_open(p->w.st)) {
        size_t n = p->unconsumed;
        p->unconsumed = 0;
        tun_stream_consumed(p->w.st, n);
    }
}

static const struct http_body_handler proxy_body = {
    .on_data = px_req_data,
    .on_end = px_req_end,
    .on_abort = px_req_abort,
    .on_drain = px_resp_drained,
};

static void px_on_response(struct tun_endpoint *ep, struct tun_stream *st, const struct tun_head *h)
{
    struct proxy_ep *p = (struct proxy_ep *)ep;
    if (p->ex_done)
        return;
    struct http_header hdrs[HTTP_MAX_HEADERS];
    int k = 0;
    for (int i = 0; i < h->nheaders && k < HTTP_MAX_HEADERS; i++) {
        if (is_hop_by_hop(h->headers[i].name) ||
            strcasecmp(h->headers[i].name, "Content-Length") == 0)
            continue;
        hdrs[k].name = h->headers[i].name;
        hdrs[k].value = h->headers[i].value;
        k++;
    }
    http_begin(p->ex, h->status, hdrs, k, content_length_of(h->headers, h->nheaders));
}

static void px_on_data(struct tun_endpoint *ep, struct tun_stream *st, const uint8_t *d, size_t n)
{
    struct proxy_ep *p = (struct proxy_ep *)ep;
    if (p->ex_done) {
        tun_stream_consumed(st, n);
        return;
    }
    http_write(p->ex, d, n);
    if (http_pending(p->ex) > HTTP_STREAM_HIGH_WATER)
        p->unconsumed += n;
    else
        tun_stream_consumed(st, n);
}

static void px_on_end(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct proxy_ep *p = (struct proxy_ep *)ep;
    if (p->ex_done)
        return;
    if (!http_has_begun(p->ex)) {
        px_finish_error(p, 502, "the upstream ended without a response");
        return;
    }
    p->ex_done = true;
    http_end(p->ex);
}

static void px_on_reset(struct tun_endpoint *ep, struct tun_stream *st, const char *code,
                        const char *msg)
{
    struct proxy_ep *p = (struct proxy_ep *)ep;
    char buf[TUN_RESET_MESSAGE_MAX + 96];
    if (strcmp(code, TUN_RESET_TUNNEL_CLOSED) == 0)
        snprintf(buf, sizeof(buf), "the tunnel closed during the request");
    else
        snprintf(buf, sizeof(buf), "upstream reset the request (%s): %s", code, msg);
    px_finish_error(p, 502, buf);
}

static void px_on_drain(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct proxy_ep *p = (struct proxy_ep *)ep;
    sw_flush(&p->w);
    if (p->ex_paused && !p->ex_done && sw_pending(&p->w) < TUN_STREAM_HIGH_WATER / 2) {
        p->ex_paused = false;
        http_pause_body(p->ex, false);
    }
}

static void px_on_closed(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct proxy_ep *p = (struct proxy_ep *)ep;
    px_finish_error(p, 502, "the upstream stream closed without a response");
    http_out_clear(&p->w.overflow);
    free(p);
}

static const struct tun_endpoint_ops proxy_ep_ops = {
    .on_response = px_on_response,
    .on_data = px_on_data,
    .on_end = px_on_end,
    .on_reset = px_on_reset,
    .on_drain = px_on_drain,
    .on_closed = px_on_closed,
};

int tun_http_proxy(struct http_exchange *ex, struct tun_session *s, const char *service,
                   const char *path, const struct tun_header *extra, int nextra,
                   const char *unavailable_msg)
{
    const struct http_request *r = http_req(ex);
    if (!s || !tun_session_is_established(s)) {
        http_respond_error(ex, 503, "%s", unavailable_msg);
        return AB_ECLOSED;
    }
    struct proxy_ep *p = calloc(1, sizeof(*p));
    if (!p) {
        http_respond_error(ex, 503, "out of memory");
        return AB_ENOMEM;
    }
    p->ep.ops = &proxy_ep_ops;
    p->ex = ex;
    struct tun_head head;
    memset(&head, 0, sizeof(head));
    head.service = service;
    head.method = r->method;
    head.path = path;
    /* extra first, and a request header of the same name dropped: the caller's
     * headers (relay targets) can neither be overridden by the client nor
     * crowded out of the table */
    for (int i = 0; i < nextra && head.nheaders < TUN_MAX_HEADERS; i++)
        head.headers[head.nheaders++] = extra[i];
    for (int i = 0; i < r->nheaders && head.nheaders < TUN_MAX_HEADERS; i++) {
        bool dup = false;
        for (int k = 0; k < nextra && !dup; k++)
            dup = strcasecmp(r->headers[i].name, extra[k].name) == 0;
        if (dup || is_hop_by_hop(r->headers[i].name))
            continue;
        head.headers[head.nheaders].name = r->headers[i].name;
        head.headers[head.nheaders].value = r->headers[i].value;
        head.nheaders++;
    }
    int rc = tun_stream_open(s, &head, &p->ep, &p->w.st);
    if (rc != 0) {
        free(p);
        http_respond_error(ex, 503, "%s (%s)", unavailable_msg,
                           rc == AB_EBUSY ? "tunnel busy" : tun_session_error(s));
        return rc;
    }
    http_set_body_handler(ex, &proxy_body, p);
    /* a buffered route already has its whole body (body is "" when empty,
     * NULL only on streaming routes): send it and end our direction now */
    if (r->body) {
        if (r->body_len)
            sw_write(&p->w, r->body, r->body_len);
        sw_end(&p->w);
    }
    return 0;
}

/* --- splice: two streams joined ------------------------------------------------------ */

struct splice_ep {
    struct tun_endpoint ep;
    struct stream_writer w; /* writes to this side's stream */
    struct splice_ep *other;
    size_t unconsumed; /* bytes read here, waiting for room on the other side */
    char trace[72];    /* the target side's: the request's X-AgentBox-Trace, when tracing */
};

static void sp_on_response(struct tun_endpoint *ep, struct tun_stream *st, const struct tun_head *h)
{
    struct splice_ep *e = (struct splice_ep *)ep;
    if (e->trace[0])
        ab_trace(e->trace, "relay.response"); /* the answer's head is back at the relay */
    if (e->other)
        tun_stream_respond(e->other->w.st, h->status, h->headers, h->nheaders);
}

static void sp_on_data(struct tun_endpoint *ep, struct tun_stream *st, const uint8_t *d, size_t n)
{
    struct splice_ep *e = (struct splice_ep *)ep;
    if (!e->other) {
        tun_stream_consumed(st, n);
        return;
    }
    sw_write(&e->other->w, d, n);
    if (sw_pending(&e->other->w) > TUN_STREAM_HIGH_WATER)
        e->unconsumed += n;
    else
        tun_stream_consumed(st, n);
}

static void sp_on_end(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct splice_ep *e = (struct splice_ep *)ep;
    if (e->trace[0])
        ab_trace(e->trace, "relay.end");
    if (e->other)
        sw_end(&e->other->w);
}

static void sp_on_reset(struct tun_endpoint *ep, struct tun_stream *st, const char *code,
                        const char *msg)
{
    struct splice_ep *e = (struct splice_ep *)ep;
    if (e->other && tun_stream_is_open(e->other->w.st))
        tun_stream_reset(e->other->w.st, code, msg);
}

static void sp_on_drain(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct splice_ep *e = (struct splice_ep *)ep;
    sw_flush(&e->w);
    /* room here: let the other side's sender go on */
    if (e->other && e->other->unconsumed && sw_pending(&e->w) <= TUN_STREAM_HIGH_WATER) {
        size_t n = e->other->unconsumed;
        e->other->unconsumed = 0;
        tun_stream_consumed(e->other->w.st, n);
    }
}

static void sp_on_closed(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct splice_ep *e = (struct splice_ep *)ep;
    /* A normal close mirrored both ENDs already and a reset went across in
     * on_reset (tunnel_closed included), so only the link is left to cut. */
    if (e->other)
        e->other->other = NULL;
    http_out_clear(&e->w.overflow);
    free(e);
}

static const struct tun_endpoint_ops splice_ep_ops = {
    .on_response = sp_on_response,
    .on_data = sp_on_data,
    .on_end = sp_on_end,
    .on_reset = sp_on_reset,
    .on_drain = sp_on_drain,
    .on_closed = sp_on_closed,
};

/* Answers in with 503 and unavailable_msg, the whole message, never a cut
 * one: a cut JSON text is not JSON. */
static void splice_unavailable(struct tun_stream *in, const char *unavailable_msg)
{
    json_t *j =
        json_pack("{s:i,s:s}", "code", 503, "message", unavailable_msg ? unavailable_msg : "");
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    tun_stream_respond_json(in, 503, txt ? txt : "{\"code\":503}");
    free(txt);
}

int tun_splice(struct tun_stream *in, struct tun_session *target, const struct tun_head *head,
               const char *unavailable_msg)
{
    if (!target || !tun_session_is_established(target)) {
        splice_unavailable(in, unavailable_msg);
        return AB_ECLOSED;
    }
    struct splice_ep *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    if (!a || !b) {
        free(a);
        free(b);
        tun_stream_reset(in, TUN_RESET_BUSY, "out of memory");
        return AB_ENOMEM;
    }
    a->ep.ops = b->ep.ops = &splice_ep_ops;
    a->other = b;
    b->other = a;
    a->w.st = in;
    for (int i = 0; ab_trace_enabled() && i < head->nheaders; i++)
        if (strcasecmp(head->headers[i].name, AB_TRACE_HEADER) == 0)
            ab_strlcpy(b->trace, head->headers[i].value, sizeof(b->trace));
    int rc = tun_stream_open(target, head, &b->ep, &b->w.st);
    if (rc != 0) {
        free(a);
        free(b);
        splice_unavailable(in, unavailable_msg);
        return rc;
    }
    tun_stream_set_user(in, &a->ep);
    return 0;
}

/* --- calls ------------------------------------------------------------------------------ */

struct tun_call {
    struct tun_endpoint ep;
    struct tun_stream *st;
    tun_call_fn done;
    void *arg;
    int status;
    struct buf body; /* limit: the caller's max_body */
    bool finished;
};

static void call_finish(struct tun_call *c, const char *error)
{
    if (c->finished)
        return;
    c->finished = true;
    struct tun_call_result res = {
        .status = error ? 0 : c->status,
        .body = buf_str(&c->body),
        .body_len = buf_len(&c->body),
        .error = error,
    };
    c->done(&res, c->arg);
}

static void call_on_response(struct tun_endpoint *ep, struct tun_stream *st,
                             const struct tun_head *h)
{
    ((struct tun_call *)ep)->status = h->status;
}

static void call_on_data(struct tun_endpoint *ep, struct tun_stream *st, const uint8_t *d, size_t n)
{
    struct tun_call *c = (struct tun_call *)ep;
    tun_stream_consumed(st, n);
    if (c->finished)
        return;
    int rc = buf_append(&c->body, d, n);
    if (rc == AB_ELIMIT) {
        /* callers and tests match this text; buf_err(&c->body) would name the size */
        tun_stream_reset(st, TUN_RESET_CANCEL, "response too large");
        call_finish(c, "response larger than the caller's limit");
    } else if (rc != 0) {
        tun_stream_reset(st, TUN_RESET_BUSY, "out of memory");
        call_finish(c, buf_err(&c->body));
    }
}

static void call_on_end(struct tun_endpoint *ep, struct tun_stream *st)
{
    call_finish((struct tun_call *)ep, NULL);
}

static void call_on_reset(struct tun_endpoint *ep, struct tun_stream *st, const char *code,
                          const char *msg)
{
    call_finish((struct tun_call *)ep, strcmp(code, TUN_RESET_TUNNEL_CLOSED) == 0
                                           ? "tunnel closed"
                                           : "the peer reset the call");
}

static void call_on_closed(struct tun_endpoint *ep, struct tun_stream *st)
{
    struct tun_call *c = (struct tun_call *)ep;
    call_finish(c, "tunnel closed");
    buf_free(&c->body);
    free(c);
}

static const struct tun_endpoint_ops call_ep_ops = {
    .on_response = call_on_response,
    .on_data = call_on_data,
    .on_end = call_on_end,
    .on_reset = call_on_reset,
    .on_closed = call_on_closed,
};

int tun_call(struct tun_session *s, const char *service, const char *method, const char *path,
             const struct tun_header *h, int n, const void *body, size_t len, size_t max_body,
             tun_call_fn done, void *arg)
{
    if (!s || !tun_session_is_established(s))
        return AB_ECLOSED;
    if (len > TUN_STREAM_HIGH_WATER)
        return AB_ELIMIT;
    struct tun_call *c = calloc(1, sizeof(*c));
    if (!c)
        return AB_ENOMEM;
    /* Grows as the answer arrives: a 1 MiB limit no longer costs 1 MiB per call. */
    buf_init(&c->body, max_body ? max_body : 64 * 1024, "response body");
    c->ep.ops = &call_ep_ops;
    c->done = done;
    c->arg = arg;
    struct tun_head head;
    memset(&head, 0, sizeof(head));
    head.service = service;
    head.method = method;
    head.path = path;
    for (int i = 0; i < n && i < TUN_MAX_HEADERS; i++)
        head.headers[head.nheaders++] = h[i];
    int rc = tun_stream_open(s, &head, &c->ep, &c->st);
    if (rc != 0) {
        buf_free(&c->body);
        free(c);
        return rc;
    }
    if (len)
        tun_stream_write(c->st, body, len);
    tun_stream_end(c->st);
    return 0;
}
