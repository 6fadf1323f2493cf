/* HTTP over tunnel streams (no libwebsockets here).
 *
 * Each stream's user pointer is a struct tun_endpoint: the session-level
 * callbacks of tunnel.h are routed to it by tun_ep_callbacks_init(). Three
 * endpoints are built on it:
 *   - tun_http_serve: a peer-opened stream dispatched into an http_router, so
 *     handlers see an ordinary struct http_exchange ("a request is a request");
 *   - tun_http_proxy: an http_exchange forwarded as a new stream (request
 *     body and response streamed both ways with backpressure);
 *   - tun_splice: two streams joined frame by frame (the hub's relay), credit
 *     passed through: bytes are consumed on one side only once the other side
 *     has room for them.
 * All on the loop thread that owns the sessions. */
#ifndef AGENTBOX_TUNNEL_HTTP_H
#define AGENTBOX_TUNNEL_HTTP_H

#include "agentbox/http.h"
#include "agentbox/tunnel.h"

struct tun_endpoint;
struct tun_endpoint_ops {
    void (*on_response)(struct tun_endpoint *ep, struct tun_stream *st, const struct tun_head *h);
    void (*on_data)(struct tun_endpoint *ep, struct tun_stream *st, const uint8_t *d, size_t n);
    void (*on_end)(struct tun_endpoint *ep, struct tun_stream *st);
    void (*on_reset)(struct tun_endpoint *ep, struct tun_stream *st, const char *code,
                     const char *message);
    void (*on_drain)(struct tun_endpoint *ep, struct tun_stream *st);
    /* Last call; the endpoint may free itself. */
    void (*on_closed)(struct tun_endpoint *ep, struct tun_stream *st);
};
struct tun_endpoint {
    const struct tun_endpoint_ops *ops;
};

/* Fills the per-stream callbacks of cb (on_response, on_data, on_end,
 * on_reset, on_window_opened, on_drain, on_closed) with the endpoint router;
 * the caller sets the connection-level ones (on_hello, on_open, …). */
void tun_ep_callbacks_init(struct tun_callbacks *cb);

/* Serves a peer-opened stream through router r. peer names the other side in
 * logs ("tunnel:alpha"); transport_data lands in http_request.transport_data.
 * Returns 0, or AB_ENOMEM after resetting the stream. */
int tun_http_serve(struct tun_stream *st, const struct tun_head *head, struct http_router *r,
                   const char *peer, void *transport_data);

/* Forwards ex (a HTTP_ROUTE_STREAM route's exchange) over s to service, with
 * path as the request target and the request's headers, plus extra headers
 * (may be NULL). Hop-by-hop headers (Connection, Transfer-Encoding, Keep-Alive,
 * Upgrade, TE, Trailer) are dropped. When the stream cannot be opened the
 * exchange is answered 503 with unavailable_msg. Returns 0 or the error. */
int tun_http_proxy(struct http_exchange *ex, struct tun_session *s, const char *service,
                   const char *path, const struct tun_header *extra, int nextra,
                   const char *unavailable_msg);

/* Joins a peer-opened stream `in` with a new stream opened on target with
 * head (already rewritten by the caller). If opening fails, `in` is answered
 * with a 503 JSON {"code":503,"message":unavailable_msg}. */
int tun_splice(struct tun_stream *in, struct tun_session *target, const struct tun_head *head,
               const char *unavailable_msg);

/* Answers a peer-opened stream with a small JSON body and ends it. */
int tun_stream_respond_json(struct tun_stream *st, int status, const char *json);

/* A request made over a stream, for code that calls the peer's API (the
 * agent asking the hub to validate a key, say). Body is sent whole. */
struct tun_call;
struct tun_call_result {
    int status;       /* HTTP status, or 0 when the call failed (see error) */
    const char *body; /* response body, NUL-terminated (bounded by max_body) */
    size_t body_len;
    const char *error; /* why the call failed, or NULL */
};
typedef void (*tun_call_fn)(const struct tun_call_result *res, void *arg);
/* Returns 0 (done is called exactly once, later or never if the session is
 * freed first — then with status 0 and error "tunnel closed"), or an error
 * (done is not called). */
int tun_call(struct tun_session *s, const char *service, const char *method, const char *path,
             const struct tun_header *h, int n, const void *body, size_t len, size_t max_body,
             tun_call_fn done, void *arg);

#endif
