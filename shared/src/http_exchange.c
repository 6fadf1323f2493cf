/* Routers and exchanges: the transport-independent half of HTTP (see the
 * transport contract in http.h). No libwebsockets, no http_parser here. */
#include "agentbox/http.h"
#include "agentbox/buf.h"
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/pct.h"
#include "agentbox/trace.h"

#include <stdarg.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ROUTER_EXTRA_MAX 4

struct http_router {
    struct http_route *routes;
    size_t nroutes;
    http_error_fn error_fn;
    struct http_header extra[ROUTER_EXTRA_MAX];
    int nextra;
    struct http_route fallback;
    bool has_fallback;
};

struct http_exchange {
    struct http_router *router;
    const struct http_route *route;
    struct http_route route_copy;
    struct http_request req;
    char *arena;

    const struct http_transport_ops *ops;
    void *t;

    struct buf body; /* buffered request body; its limit is the 413 limit */
    bool streaming, body_done, body_too_large;
    /* A streaming handler that sets its body handler late (after an async
     * key check) must not lose what came before: bytes are held in body, the
     * transport paused, and both replayed by http_set_body_handler. */
    bool held, end_delivered;
    const struct http_body_handler *bh;
    void *bh_arg;

    bool started, dispatched;
    bool began;    /* response head sent */
    bool finished; /* handler finished */
    bool aborted;
    bool released;    /* transport let go */
    bool in_callback; /* freeing is deferred until the callback returns */
};

/* --- router ------------------------------------------------------------------- */

/* How specific one pattern segment is: lower ranks win. */
enum seg_rank { SEG_END = 0, SEG_LITERAL, SEG_PARAM, SEG_REST };

/* The rank of the segment starting at *p (just after a '/', or at the end),
 * and advances *p to the next '/' or the end. */
static enum seg_rank next_seg(const char **p)
{
    if (**p == '\0')
        return SEG_END;
    if (**p == '/')
        (*p)++;
    const char *s = *p;
    const char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    *p = s + len;
    if (len >= 3 && s[0] == '{' && s[1] == '*' && s[len - 1] == '}')
        return SEG_REST;
    if (len >= 2 && s[0] == '{' && s[len - 1] == '}')
        return SEG_PARAM;
    return SEG_LITERAL;
}

/* Orders routes so that the first match is the most specific one, whatever
 * the order they were registered in: segment by segment, a literal beats a
 * {param}, which beats a trailing {*rest}; on equal shapes a named method
 * beats "*". Two patterns that match one path share their segments up to the
 * first one where they differ in kind, so that segment decides. Registration
 * order only separates identical shapes (the first stays first). */
static int route_cmp(const struct http_route *a, const struct http_route *b)
{
    const char *pa = a->pattern, *pb = b->pattern;
    for (;;) {
        enum seg_rank ra = next_seg(&pa), rb = next_seg(&pb);
        if (ra != rb)
            return ra < rb ? -1 : 1;
        if (ra == SEG_END || ra == SEG_REST)
            break;
    }
    bool wa = strcmp(a->method, "*") == 0, wb = strcmp(b->method, "*") == 0;
    if (wa != wb)
        return wa ? 1 : -1;
    return 0;
}

struct http_router *http_router_new(const struct http_route *routes, size_t n)
{
    struct http_router *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->routes = calloc(n ? n : 1, sizeof(*routes));
    if (!r->routes) {
        free(r);
        return NULL;
    }
    /* Insertion sort keeps equal routes in registration order; routers are
     * built once at startup and hold a few hundred routes at most. */
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        while (j > 0 && route_cmp(&routes[i], &r->routes[j - 1]) < 0) {
            r->routes[j] = r->routes[j - 1];
            j--;
        }
        r->routes[j] = routes[i];
    }
    r->nroutes = n;
    return r;
}

void http_router_free(struct http_router *r)
{
    if (!r)
        return;
    free(r->routes);
    free(r);
}

void http_router_set_error_format(struct http_router *r, http_error_fn fn)
{
    r->error_fn = fn;
}

void http_router_set_extra_header(struct http_router *r, const char *name, const char *value)
{
    if (r->nextra < ROUTER_EXTRA_MAX) {
        r->extra[r->nextra].name = name;
        r->extra[r->nextra].value = value;
        r->nextra++;
    }
}

void http_router_set_fallback(struct http_router *r, http_handler_fn fn, void *arg, int flags)
{
    r->fallback.method = "*";
    r->fallback.pattern = "/{*rest}";
    r->fallback.fn = fn;
    r->fallback.arg = arg;
    r->fallback.flags = flags;
    r->has_fallback = true;
}

/* Copies one param's name and value into the scratch and records it.
 * false when HTTP_MAX_PARAMS or the scratch would be exceeded. */
static bool add_param(struct http_request *req, int *np, char *scratch, size_t scratch_len,
                      size_t *used, const char *name, size_t nlen, const char *val, size_t vlen)
{
    if (*np >= HTTP_MAX_PARAMS || *used + nlen + vlen + 2 > scratch_len)
        return false;
    char *n = scratch + *used;
    memcpy(n, name, nlen);
    n[nlen] = '\0';
    *used += nlen + 1;
    char *v = scratch + *used;
    memcpy(v, val, vlen);
    v[vlen] = '\0';
    *used += vlen + 1;
    req->param_names[*np] = n;
    req->param_values[*np] = v;
    (*np)++;
    return true;
}

/* Segment-wise match. "{name}" takes one non-empty segment; a final "{*name}"
 * takes the rest (possibly empty). Params point into path copies kept by the
 * caller: here they are written as offsets into req->path via a scratch. */
static bool match(const char *pat, const char *path, struct http_request *req, char *scratch,
                  size_t scratch_len)
{
    size_t used = 0;
    int np = 0;
    const char *p = pat, *s = path;
    while (*p) {
        if (*p != '/' || *s != '/')
            return false;
        p++;
        s++;
        const char *pe = strchr(p, '/');
        size_t plen = pe ? (size_t)(pe - p) : strlen(p);
        const char *se = strchr(s, '/');
        size_t slen = se ? (size_t)(se - s) : strlen(s);
        if (plen >= 3 && p[0] == '{' && p[1] == '*' && p[plen - 1] == '}') {
            if (!add_param(req, &np, scratch, scratch_len, &used, p + 2, plen - 3, s, strlen(s)))
                return false;
            req->nparams = np;
            return true;
        }
        if (plen >= 2 && p[0] == '{' && p[plen - 1] == '}') {
            if (slen == 0 ||
                !add_param(req, &np, scratch, scratch_len, &used, p + 1, plen - 2, s, slen))
                return false;
        } else if (plen != slen || memcmp(p, s, plen) != 0) {
            return false;
        }
        p += plen;
        s += slen;
    }
    if (*s != '\0')
        return false;
    req->nparams = np;
    return true;
}

bool http_route_match(const char *pattern, const char *path, struct http_request *req)
{
    static __thread char scratch[HTTP_HEAD_MAX];
    req->nparams = 0;
    return match(pattern, path, req, scratch, sizeof(scratch));
}

/* --- request accessors ------------------------------------------------------------ */

const struct http_request *http_req(struct http_exchange *ex)
{
    return &ex->req;
}

const char *http_header_get(const struct http_request *r, const char *name)
{
    for (int i = 0; i < r->nheaders; i++)
        if (strcasecmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

const char *http_param(struct http_exchange *ex, const char *name)
{
    for (int i = 0; i < ex->req.nparams; i++)
        if (strcmp(ex->req.param_names[i], name) == 0)
            return ex->req.param_values[i];
    return NULL;
}

int http_query_get(const struct http_request *r, const char *name, char *buf, size_t len)
{
    const char *q = r->query ? r->query : "";
    size_t nlen = strlen(name);
    while (*q) {
        const char *amp = strchr(q, '&');
        size_t plen = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', plen);
        size_t klen = eq ? (size_t)(eq - q) : plen;
        char key[256];
        if (klen < sizeof(key) &&
            pct_decode(q, klen, key, sizeof(key), PCT_PLUS_IS_SPACE, NULL) == 0 &&
            strlen(key) == nlen && memcmp(key, name, nlen) == 0) {
            const char *v = eq ? eq + 1 : q + plen;
            size_t vlen = eq ? plen - klen - 1 : 0;
            return pct_decode(v, vlen, buf, len, PCT_PLUS_IS_SPACE, NULL) == 0 ? 0 : AB_ELIMIT;
        }
        q += plen;
        if (*q == '&')
            q++;
    }
    return AB_ENOENT;
}

int http_query_long(const struct http_request *r, const char *name, long def, long min, long max,
                    long *out)
{
    char buf[32], *end;
    long v;
    int rc = http_query_get(r, name, buf, sizeof(buf));

    *out = def;
    if (rc == AB_ENOENT)
        return 0;
    if (rc != 0 || !(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
        return AB_EINVAL; /* strtol would take "" and " 4" */
    errno = 0;
    v = strtol(buf, &end, 10);
    if (*end || errno == ERANGE || v < min || v > max)
        return AB_EINVAL;
    *out = v;
    return 0;
}

/* --- exchange lifecycle ---------------------------------------------------------- */

static size_t head_size(const struct http_request *h)
{
    size_t n = 0;
    n += strlen(h->method ? h->method : "") + 1;
    n += strlen(h->target ? h->target : "") + 1;
    n += strlen(h->path ? h->path : "") + 1;
    n += strlen(h->query ? h->query : "") + 1;
    n += strlen(h->peer ? h->peer : "") + 1;
    for (int i = 0; i < h->nheaders; i++)
        n += strlen(h->headers[i].name) + strlen(h->headers[i].value) + 2;
    return n;
}

static const char *arena_dup(char **cur, const char *s)
{
    size_t n = strlen(s ? s : "") + 1;
    memcpy(*cur, s ? s : "", n);
    const char *out = *cur;
    *cur += n;
    return out;
}

struct http_exchange *http_exchange_new(struct http_router *r, const struct http_request *head,
                                        const struct http_transport_ops *ops, void *t)
{
    struct http_exchange *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return NULL;
    size_t plen = strlen(head->path ? head->path : "");
    size_t need = head_size(head) + 2 * plen + 2 * HTTP_MAX_PARAMS * 32 + 64;
    ex->arena = malloc(need);
    if (!ex->arena) {
        free(ex);
        return NULL;
    }
    char *cur = ex->arena;
    ex->req.method = arena_dup(&cur, head->method);
    ex->req.target = arena_dup(&cur, head->target);
    ex->req.path = arena_dup(&cur, head->path);
    ex->req.query = arena_dup(&cur, head->query);
    ex->req.peer = arena_dup(&cur, head->peer);
    for (int i = 0; i < head->nheaders && i < HTTP_MAX_HEADERS; i++) {
        ex->req.headers[i].name = arena_dup(&cur, head->headers[i].name);
        ex->req.headers[i].value = arena_dup(&cur, head->headers[i].value);
        ex->req.nheaders = i + 1;
    }
    ex->req.content_length = head->content_length;
    ex->req.transport_data = head->transport_data;
    ex->router = r;
    ex->ops = ops;
    ex->t = t;
    buf_init(&ex->body, HTTP_BODY_MAX, "request body");

    /* route now so that params are ready; remaining arena is the scratch */
    size_t scratch = need - (size_t)(cur - ex->arena);
    for (size_t i = 0; r && i < r->nroutes; i++) {
        const struct http_route *rt = &r->routes[i];
        if (strcmp(rt->method, "*") != 0 && strcmp(rt->method, ex->req.method) != 0)
            continue;
        if (match(rt->pattern, ex->req.path, &ex->req, cur, scratch)) {
            ex->route = rt;
            break;
        }
    }
    if (!ex->route && r && r->has_fallback) {
        ex->req.nparams = 0;
        ex->route = &r->fallback;
    }
    ex->streaming = ex->route && (ex->route->flags & HTTP_ROUTE_STREAM);
    return ex;
}

static void maybe_free(struct http_exchange *ex)
{
    if (ex->finished && ex->released && !ex->in_callback) {
        buf_free(&ex->body);
        free(ex->arena);
        free(ex);
    }
}

/* The handler is done: tell the transport (once). */
static void finish(struct http_exchange *ex)
{
    if (ex->finished)
        return;
    ex->finished = true;
    if (!ex->released)
        ex->ops->finished(ex->t);
    else
        maybe_free(ex);
}

static bool path_exists_other_method(struct http_exchange *ex)
{
    struct http_request tmp;
    char scratch[1024];
    for (size_t i = 0; ex->router && i < ex->router->nroutes; i++) {
        memset(&tmp, 0, sizeof(tmp));
        if (match(ex->router->routes[i].pattern, ex->req.path, &tmp, scratch, sizeof(scratch)))
            return true;
    }
    return false;
}

static void dispatch(struct http_exchange *ex)
{
    if (ex->dispatched)
        return;
    ex->dispatched = true;
    if (!ex->route) {
        if (path_exists_other_method(ex))
            http_respond_error(ex, 405, "method %s is not allowed on %s", ex->req.method,
                               ex->req.path);
        else
            http_respond_error(ex, 404, "no route for %s %s", ex->req.method, ex->req.path);
        return;
    }
    if (!ex->streaming) {
        ex->req.body = buf_str(&ex->body);
        ex->req.body_len = buf_len(&ex->body);
    }
    if (ab_trace_enabled())
        ab_trace(http_header_get(&ex->req, AB_TRACE_HEADER), "http.dispatch");
    ex->route->fn(ex, ex->route->arg);
}

void http_exchange_start(struct http_exchange *ex)
{
    ex->started = true;
    if (ex->streaming || !ex->route)
        dispatch(ex);
}

void http_exchange_set_body_max(struct http_exchange *ex, size_t max)
{
    /* Called before the first body byte (right after http_exchange_new), so
     * nothing buffered is lost by starting the buffer again. */
    buf_free(&ex->body);
    buf_init(&ex->body, max, "request body");
}

int http_exchange_body(struct http_exchange *ex, const void *data, size_t len)
{
    if (ex->finished || ex->body_too_large || len == 0)
        return ex->body_too_large ? AB_ELIMIT : 0;
    if (ex->streaming) {
        if (ex->bh) {
            if (ex->bh->on_data)
                ex->bh->on_data(ex, data, len, ex->bh_arg);
            return 0;
        }
        if (!ex->held && !ex->released) {
            ex->held = true;
            ex->ops->pause_body(ex->t, true);
        }
        /* what the transport had already read past the pause; its limit is the 413 limit */
        if (buf_append(&ex->body, data, len) != 0) {
            ex->body_too_large = true;
            http_respond_error(ex, 413, "%s", buf_err(&ex->body));
            return AB_ELIMIT;
        }
        return 0;
    }
    if (!ex->route)
        return 0; /* answered already; discard */
    int rc = buf_append(&ex->body, data, len);
    if (rc == AB_ELIMIT) {
        ex->body_too_large = true;
        struct http_header close_hdr = {"Connection", "close"};
        /* buf_err names the limit: "request body is larger than N bytes" */
        const char *msg = buf_err(&ex->body);
        json_t *body = ex->router && ex->router->error_fn
                           ? ex->router->error_fn(413, msg)
                           : json_pack("{s:i,s:s}", "code", 413, "message", msg);
        char *txt = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        ex->dispatched = true;
        http_respond(ex, 413, "application/json", txt, txt ? strlen(txt) : 0, &close_hdr, 1);
        free(txt);
        return AB_ELIMIT;
    }
    if (rc != 0) {
        http_respond_error(ex, 503, "out of memory reading the request body");
        return rc;
    }
    return 0;
}

void http_exchange_body_end(struct http_exchange *ex)
{
    ex->body_done = true;
    if (ex->finished)
        return;
    if (ex->streaming) {
        if (ex->bh) {
            ex->end_delivered = true;
            if (ex->bh->on_end)
                ex->bh->on_end(ex, ex->bh_arg);
        }
        return;
    }
    if (ex->started && !ex->body_too_large)
        dispatch(ex);
}

void http_exchange_release(struct http_exchange *ex)
{
    if (ex->released)
        return;
    ex->released = true;
    if (!ex->finished) {
        ex->aborted = true;
        if (ex->streaming && ex->bh && ex->bh->on_abort) {
            ex->in_callback = true;
            ex->bh->on_abort(ex, ex->bh_arg);
            ex->in_callback = false;
        }
    }
    maybe_free(ex);
}

void http_exchange_drained(struct http_exchange *ex)
{
    if (!ex->finished && !ex->released && ex->bh && ex->bh->on_drain)
        ex->bh->on_drain(ex, ex->bh_arg);
}

bool http_exchange_is_finished(struct http_exchange *ex)
{
    return ex->finished;
}

struct http_exchange *http_exchange_new_error(struct http_router *r,
                                              const struct http_transport_ops *ops, void *t,
                                              int status, const char *message)
{
    struct http_request head;
    memset(&head, 0, sizeof(head));
    head.method = "GET";
    head.target = "/";
    head.path = "/";
    head.query = "";
    struct http_exchange *ex = http_exchange_new(NULL, &head, ops, t);
    if (!ex)
        return NULL;
    ex->router = r;
    ex->dispatched = ex->started = true;
    json_t *body = r && r->error_fn ? r->error_fn(status, message)
                                    : json_pack("{s:i,s:s}", "code", status, "message", message);
    char *txt = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct http_header close_hdr = {"Connection", "close"};
    http_respond(ex, status, "application/json", txt, txt ? strlen(txt) : 0, &close_hdr, 1);
    free(txt);
    return ex;
}

/* --- handler output --------------------------------------------------------------- */

static bool can_write(struct http_exchange *ex)
{
    return !ex->released && !ex->aborted && !ex->finished;
}

int http_begin(struct http_exchange *ex, int status, const struct http_header *h, int n,
               int64_t content_length)
{
    if (ex->began)
        return AB_EINVAL;
    ex->began = true;
    if (!can_write(ex))
        return AB_ECLOSED;
    if (ab_trace_enabled())
        ab_trace(http_header_get(&ex->req, AB_TRACE_HEADER), "http.respond");
    struct http_header all[HTTP_MAX_HEADERS];
    int k = 0;
    for (int i = 0; ex->router && i < ex->router->nextra && k < HTTP_MAX_HEADERS; i++)
        all[k++] = ex->router->extra[i];
    for (int i = 0; i < n && k < HTTP_MAX_HEADERS; i++)
        all[k++] = h[i];
    return ex->ops->send_head(ex->t, status, all, k, content_length);
}

int http_upgrade(struct http_exchange *ex, const struct http_header *h, int n)
{
    int rc;

    if (!ex->ops->upgrade || ex->began || !ex->streaming || !can_write(ex))
        return AB_EINVAL;
    if ((rc = ex->ops->upgrade(ex->t)) != 0)
        return rc;
    return http_begin(ex, 101, h, n, -2);
}

int http_write(struct http_exchange *ex, const void *data, size_t len)
{
    if (!can_write(ex))
        return AB_ECLOSED;
    if (len == 0)
        return 0;
    return ex->ops->send_body(ex->t, data, len);
}

int http_end(struct http_exchange *ex)
{
    int rc = AB_ECLOSED;
    if (can_write(ex) && ab_trace_enabled())
        ab_trace(http_header_get(&ex->req, AB_TRACE_HEADER), "http.end");
    if (can_write(ex))
        rc = ex->ops->send_end(ex->t);
    finish(ex);
    return rc;
}

size_t http_pending(struct http_exchange *ex)
{
    return can_write(ex) ? ex->ops->pending(ex->t) : 0;
}

void http_abort(struct http_exchange *ex)
{
    if (ex->finished)
        return;
    if (!ex->released && !ex->aborted)
        ex->ops->abort(ex->t);
    ex->aborted = true;
    finish(ex);
}

bool http_is_aborted(struct http_exchange *ex)
{
    return ex->aborted || ex->released;
}

bool http_has_begun(struct http_exchange *ex)
{
    return ex->began;
}

void http_set_body_handler(struct http_exchange *ex, const struct http_body_handler *h, void *arg)
{
    ex->bh = h;
    ex->bh_arg = arg;
    if (!ex->streaming || !h)
        return;
    /* resume (the transport delivers on a later turn), then replay what arrived
     * before the handler existed, so a pause the handler asks for sticks */
    if (ex->held) {
        ex->held = false;
        if (!ex->released && !ex->finished)
            ex->ops->pause_body(ex->t, false);
    }
    if (ex->body.len && !ex->finished && h->on_data)
        h->on_data(ex, ex->body.data, ex->body.len, arg);
    buf_reset(&ex->body);
    if (ex->body_done && !ex->end_delivered && !ex->finished) {
        ex->end_delivered = true;
        if (h->on_end)
            h->on_end(ex, arg);
    }
}

void http_pause_body(struct http_exchange *ex, bool paused)
{
    if (!ex->released && !ex->finished)
        ex->ops->pause_body(ex->t, paused);
}

int http_respond(struct http_exchange *ex, int status, const char *content_type, const void *body,
                 size_t len, const struct http_header *h, int n)
{
    if (ex->finished)
        return AB_EINVAL;
    struct http_header hdrs[HTTP_MAX_HEADERS];
    int k = 0;
    if (content_type)
        hdrs[k++] = (struct http_header){"Content-Type", content_type};
    for (int i = 0; i < n && k < HTTP_MAX_HEADERS; i++)
        hdrs[k++] = h[i];
    int rc = http_begin(ex, status, hdrs, k, (int64_t)len);
    if (rc == 0 && len)
        rc = http_write(ex, body, len);
    int rc2 = http_end(ex);
    return rc ? rc : rc2;
}

int http_respond_json(struct http_exchange *ex, int status, json_t *body)
{
    char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!txt)
        return http_respond(ex, status, "application/json", "null", 4, NULL, 0);
    int rc = http_respond(ex, status, "application/json", txt, strlen(txt), NULL, 0);
    free(txt);
    return rc;
}

int http_respond_error(struct http_exchange *ex, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *body = ex->router && ex->router->error_fn
                       ? ex->router->error_fn(status, msg)
                       : json_pack("{s:i,s:s}", "code", status, "message", msg);
    return http_respond_json(ex, status, body);
}

const char *http_status_text(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 101:
        return "Switching Protocols";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 415:
        return "Unsupported Media Type";
    case 416:
        return "Range Not Satisfiable";
    case 422:
        return "Unprocessable Content";
    case 426:
        return "Upgrade Required";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}
