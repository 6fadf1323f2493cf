/* HTTP/1.1 on lws raw sockets, parsed by libhttp-parser (DESIGN §4).
 *
 * "A request is a request": a handler sees one struct http_exchange whether
 * the request came over a socket (http_server) or a tunnel stream. A
 * transport creates the exchange with the request head, feeds it body bytes,
 * and carries out what the handler writes back through its ops.
 *
 * Contract for handlers: every exchange is finished exactly once, by
 * http_respond*() or http_end() (or http_abort()). A handler may finish
 * later, from the loop thread, after asynchronous work; if the peer went away
 * meanwhile the exchange stays valid, and finishing it then frees it (the
 * write is dropped). Everything here runs on the loop thread.
 *
 * This header does not include libwebsockets.h nor http_parser.h (their
 * enums collide). */
#ifndef AGENTBOX_HTTP_H
#define AGENTBOX_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

struct loop;

#define HTTP_HEAD_MAX (16 * 1024)   /* request line + headers → 431 */
#define HTTP_BODY_MAX (1024 * 1024) /* buffered (JSON) bodies → 413 */
#define HTTP_MAX_HEADERS 64
#define HTTP_MAX_PARAMS 8
#define HTTP_STREAM_HIGH_WATER (256 * 1024) /* pending output above this: stop producing */

struct http_header {
    const char *name;
    const char *value;
};

/* The request head, read-only for handlers. Strings live as long as the exchange. */
struct http_request {
    const char *method; /* "GET", "POST", … */
    const char *target; /* raw request-target, e.g. "/files?path=%2Fa" */
    const char *path;   /* target before '?', percent-decoded */
    const char *query;  /* raw text after '?', "" when none */
    struct http_header headers[HTTP_MAX_HEADERS];
    int nheaders;
    int64_t content_length; /* -1 when the body is chunked or unknown; 0 for none */
    const char *param_names[HTTP_MAX_PARAMS];  /* from the route pattern */
    const char *param_values[HTTP_MAX_PARAMS]; /* percent-decoded */
    int nparams;
    const char *body; /* buffered routes: the whole body (NUL-terminated) */
    size_t body_len;
    const char *peer;     /* "127.0.0.1:51234", "unix", "tunnel:<cluster>" */
    void *transport_data; /* what the transport attached (e.g. tunnel session) */
};

struct http_exchange;

/* What a transport implements. t is the transport's own object. Each
 * returns 0 or a negative ab_err. */
struct http_transport_ops {
    int (*send_head)(void *t, int status, const struct http_header *h, int n,
                     int64_t content_length /* -1: stream (chunked) */);
    int (*send_body)(void *t, const void *data, size_t len);
    int (*send_end)(void *t);
    size_t (*pending)(void *t);               /* response bytes queued, not yet sent */
    void (*pause_body)(void *t, bool paused); /* stop/start reading request body */
    void (*abort)(void *t);                   /* reset the exchange (close the connection) */
    void (*finished)(void *t); /* handler is done with the exchange; transport may free it */
    /* Optional (NULL: the transport cannot, e.g. a tunnel stream): the next
     * head is a 101 and the connection carries raw bytes both ways after it. */
    int (*upgrade)(void *t);
};

/* --- handler side --------------------------------------------------------- */

typedef void (*http_handler_fn)(struct http_exchange *ex, void *arg);

enum http_route_flags {
    HTTP_ROUTE_STREAM = 1, /* do not buffer the body: use http_set_body_handler */
};

struct http_route {
    const char *method;  /* "GET"…, or "*" for any */
    const char *pattern; /* "/sandboxes/{id}/timeout"; a trailing "/{*rest}" matches the rest */
    http_handler_fn fn;
    void *arg;
    int flags;
};

const struct http_request *http_req(struct http_exchange *ex);
/* Case-insensitive header lookup; NULL when absent. */
const char *http_header_get(const struct http_request *r, const char *name);
const char *http_param(struct http_exchange *ex, const char *name);
/* Form-decodes one query parameter into buf (pct.h's policy, '+' is a space).
 * 0; AB_ENOENT when absent; AB_ELIMIT when the value does not fit in len or is
 * not validly encoded ("%G1", "%2", "%00"), buf then "". Callers answer 400 on
 * AB_ELIMIT, so both refusals share that code until they test rc != AB_ENOENT. */
int http_query_get(const struct http_request *r, const char *name, char *buf, size_t len);
/* An integer query parameter: *out = def when absent; 0, or AB_EINVAL when
 * it is not a decimal integer in [min, max] (callers answer 400 naming the
 * parameter and its range). */
int http_query_long(const struct http_request *r, const char *name, long def, long min, long max,
                    long *out);

/* Simple responses: sized body, connection kept alive. Headers may be NULL. */
int http_respond(struct http_exchange *ex, int status, const char *content_type, const void *body,
                 size_t len, const struct http_header *h, int n);
/* Takes the reference to body. */
int http_respond_json(struct http_exchange *ex, int status, json_t *body);
/* The server's error shape: JSON built by the router's error formatter
 * (default {"code":status,"message":msg}). */
int http_respond_error(struct http_exchange *ex, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Streaming responses: head, then bodies, then end. content_length -1 streams
 * chunked (or as tunnel DATA). http_write copies; keep http_pending() under
 * HTTP_STREAM_HIGH_WATER and continue from the drain callback. */
int http_begin(struct http_exchange *ex, int status, const struct http_header *h, int n,
               int64_t content_length);
int http_write(struct http_exchange *ex, const void *data, size_t len);
int http_end(struct http_exchange *ex);
size_t http_pending(struct http_exchange *ex);
/* Finish by resetting the exchange (e.g. upstream failed mid-body). */
void http_abort(struct http_exchange *ex);
bool http_is_aborted(struct http_exchange *ex);
/* Answers 101 with h (e.g. a WebSocket handshake: Upgrade, Sec-WebSocket-Accept;
 * "Connection: Upgrade" is added) and hands the connection over as raw bytes:
 * the body handler's on_data gets what the peer sends, http_write sends raw
 * bytes, http_end closes the connection once they are flushed. Only on an
 * HTTP_ROUTE_STREAM route before anything was answered; AB_EINVAL when the
 * transport cannot (a tunnel stream) — then answer the request normally. */
int http_upgrade(struct http_exchange *ex, const struct http_header *h, int n);
bool http_has_begun(struct http_exchange *ex);

/* Streaming request bodies (HTTP_ROUTE_STREAM). on_abort means the peer went
 * away; the handler must still finish the exchange (http_abort is fine). */
struct http_body_handler {
    void (*on_data)(struct http_exchange *ex, const void *data, size_t len, void *arg);
    void (*on_end)(struct http_exchange *ex, void *arg);
    void (*on_abort)(struct http_exchange *ex, void *arg);
    void (*on_drain)(struct http_exchange *ex, void *arg); /* pending output fell low */
};
void http_set_body_handler(struct http_exchange *ex, const struct http_body_handler *h, void *arg);
void http_pause_body(struct http_exchange *ex, bool paused);

/* --- routers --------------------------------------------------------------- */

struct http_router;
typedef json_t *(*http_error_fn)(int status, const char *message);
/* routes is copied. A request goes to the most specific matching route,
 * whatever the order of routes: segment by segment a literal beats a
 * {param}, which beats a trailing {*rest}; on equal shapes a named method
 * beats "*"; identical shapes keep their order (the first wins). */
struct http_router *http_router_new(const struct http_route *routes, size_t n);
void http_router_free(struct http_router *r);
void http_router_set_error_format(struct http_router *r, http_error_fn fn);
/* Called for every response head (e.g. to add X-AgentBox-Server-Version). */
void http_router_set_extra_header(struct http_router *r, const char *name, const char *value);
/* Handler for requests no route matches (default: 404 error). */
void http_router_set_fallback(struct http_router *r, http_handler_fn fn, void *arg, int flags);
/* Matches pattern against path, filling params; exposed for tests. */
bool http_route_match(const char *pattern, const char *path, struct http_request *req);

/* --- transport side ---------------------------------------------------------- */

/* Transport contract:
 *   ex = http_exchange_new(...)   creates (head strings are copied); store ex
 *   http_exchange_start(ex)       routes it; a streaming route's handler runs now,
 *                                 a buffered one once the body is complete
 *   http_exchange_body / _body_end  feed the request body
 *   ops->finished(t)              the handler finished (response complete or aborted)
 *   http_exchange_release(ex)     the transport is done with ex: after this the
 *                                 exchange never calls ops again. Released before
 *                                 the handler finished means the peer went away:
 *                                 a streaming handler gets on_abort, writes become
 *                                 no-ops, and ex is freed when the handler finishes. */
struct http_exchange *http_exchange_new(struct http_router *r, const struct http_request *head,
                                        const struct http_transport_ops *ops, void *t);
void http_exchange_start(struct http_exchange *ex);
/* Returns AB_ELIMIT once a buffered body passes its limit (413 was answered
 * with Connection: close). */
int http_exchange_body(struct http_exchange *ex, const void *data, size_t len);
void http_exchange_body_end(struct http_exchange *ex);
void http_exchange_release(struct http_exchange *ex);
/* Output drained below the low-water mark. */
void http_exchange_drained(struct http_exchange *ex);
/* Sets the buffered-body limit for this exchange (default HTTP_BODY_MAX). */
void http_exchange_set_body_max(struct http_exchange *ex, size_t max);
/* Answers an error before any exchange exists (431, 400 on a bad head) and
 * finishes at once, with Connection: close. The transport releases it on
 * ops->finished as usual. */
struct http_exchange *http_exchange_new_error(struct http_router *r,
                                              const struct http_transport_ops *ops, void *t,
                                              int status, const char *message);
bool http_exchange_is_finished(struct http_exchange *ex);

/* --- server ----------------------------------------------------------------- */

/* Is host an IPv4 literal? lws 4.1 binds such a listener only when its vhost
 * disables IPv6; otherwise it binds the IPv6 wildcard (every interface). */
bool http_listen_host_is_ipv4(const char *host);

struct http_server;
struct http_server_options {
    const char *listen; /* "127.0.0.1:8090", ":8090", "unix:/path/sock" */
    struct http_router *router;
    size_t head_max;     /* 0 → HTTP_HEAD_MAX */
    size_t body_max;     /* 0 → HTTP_BODY_MAX */
    int idle_timeout_ms; /* keep-alive idle close; 0 → 60000 */
    const char *name;    /* for logs and metrics ("e2b", "data", …) */
};
int http_server_start(struct loop *l, const struct http_server_options *o, struct http_server **out,
                      char *err, size_t errlen);
/* The bound TCP port (useful with port 0). */
int http_server_port(struct http_server *s);
/* Plain-socket send(2) calls made and WRITEABLE callbacks served since start
 * (a small answer leaves in one send at the next loop turn, with no
 * writable round). For tests and diagnostics; any thread. */
void http_server_io_counts(struct http_server *s, uint64_t *sends, uint64_t *writeables);
void http_server_stop(struct http_server *s);

/* --- client ------------------------------------------------------------------ */

struct http_client;
struct http_client_handler {
    void (*on_head)(struct http_client *c, int status, const struct http_header *h, int n,
                    void *arg);
    void (*on_data)(struct http_client *c, const void *data, size_t len, void *arg);
    void (*on_end)(struct http_client *c, void *arg);
    /* Terminal: connect failed, reset, malformed response. After on_end or
     * on_error no callback comes again and the client is freed by the library. */
    void (*on_error)(struct http_client *c, int err, const char *msg, void *arg);
    void (*on_drain)(struct http_client *c, void *arg); /* request body output fell low */
};
struct http_client_options {
    const char *addr; /* "unix:/path" or "host:port" */
    const char *method;
    const char *target;
    const struct http_header *headers;
    int nheaders;
    int64_t content_length; /* 0 none, -1 chunked (then http_client_write/end) */
    int timeout_ms;         /* connect + response head; 0 → 30000 */
};
/* Starts a request. Returns NULL only on allocation failure. Every other
 * failure reaches on_error from a later loop turn, with a message: AB_EIO for
 * an address that is malformed, too long or does not connect; AB_ELIMIT for a
 * request line or head that does not fit HTTP_HEAD_MAX (never sent cut). */
struct http_client *http_client_start(struct loop *l, const struct http_client_options *o,
                                      const struct http_client_handler *h, void *arg);
int http_client_write(struct http_client *c, const void *data, size_t len);
int http_client_end(struct http_client *c);
size_t http_client_pending(struct http_client *c);
void http_client_pause(struct http_client *c, bool paused);
/* Cancels; no callback comes after this. */
void http_client_close(struct http_client *c);

/* Status reason phrase. */
const char *http_status_text(int status);

#endif
