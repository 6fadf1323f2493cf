/* HTTP/1.1 server on lws raw-skt connections. Each connection runs one
 * exchange at a time: a pipelined request waits (unparsed, in inbuf) until
 * the previous response is complete. */
#include "agentbox/http.h"
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "http_out.h"
#include "http_parse.h"

#include <libwebsockets.h>
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SERVER_RX_BUF (64 * 1024)
#define INBUF_MAX (256 * 1024) /* unparsed bytes held while a request runs */
#define WRITE_CHUNK (64 * 1024)
#define LOW_WATER (64 * 1024)
#define HEAD_TIMEOUT_S 30

struct http_server {
    struct loop *loop;
    struct lws_vhost *vh;
    struct lws *listen_wsi; /* unix sockets: our own listening fd, watched by lws */
    struct http_router *router;
    size_t head_max, body_max;
    int idle_timeout_s;
    char name[32];
    char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct lws_protocols protocols[3];
    /* loop thread writes, any thread reads (http_server_io_counts) */
    _Atomic uint64_t sends, writeables;
};

struct conn {
    struct lws *wsi;
    struct http_server *srv;
    struct http_parse *parser;
    struct http_exchange *ex;
    bool ex_finished, msg_complete;
    bool resp_chunked, resp_no_body;
    bool close_after; /* close once the output is flushed */
    bool upgraded;    /* after a 101: raw bytes both ways (http_upgrade) */
    bool killed;
    bool handler_paused, buffer_paused;
    char *inbuf;
    size_t inlen;
    struct http_out out;
    char peer[64];
    /* plain sockets: output leaves by send(2) at the next loop turn (one
     * write for all a turn queued), not a POLLOUT round through lws */
    struct loop_defer flush;
    struct loop *loop;
};

static void conn_update_rx(struct conn *c)
{
    lws_rx_flow_control(c->wsi, (c->handler_paused || c->buffer_paused) ? 0 : 1);
}

/* Written by us with send(2): a plain socket, so lws never holds output of
 * its own for it and a partial write stays in c->out. TLS goes through
 * lws_write in WRITEABLE. */
static bool conn_direct(const struct conn *c)
{
    return c->loop && !lws_is_ssl(c->wsi);
}

static int conn_write(struct conn *c);

static void conn_flush_due(struct loop_defer *d)
{
    struct conn *c = (struct conn *)(void *)((char *)d - offsetof(struct conn, flush));
    if (c->killed)
        return;
    /* a close (or a write error) is lws's to make, from WRITEABLE */
    if (conn_write(c) != 0)
        lws_callback_on_writable(c->wsi);
}

static void conn_want_write(struct conn *c)
{
    if (c->killed)
        return;
    if (conn_direct(c))
        loop_defer(c->loop, &c->flush, conn_flush_due);
    else
        lws_callback_on_writable(c->wsi);
}

/* --- transport ops -------------------------------------------------------------- */

static int op_send_head(void *t, int status, const struct http_header *h, int n,
                        int64_t content_length)
{
    struct conn *c = t;
    for (int i = 0; i < n; i++)
        if (strcasecmp(h[i].name, "Connection") == 0 && strcasecmp(h[i].value, "close") == 0)
            c->close_after = true;
    if (!http_parse_keep_alive(c->parser) && c->msg_complete)
        c->close_after = true;
    if (c->upgraded) {
        c->resp_no_body = false;
        c->resp_chunked = false;
        conn_want_write(c);
        return http_out_head(&c->out, "HTTP/1.1 101 Switching Protocols", h, n, -2, 2);
    }
    c->resp_no_body = (status >= 100 && status < 200) || status == 204 || status == 304;
    const struct http_request *r = c->ex ? http_req(c->ex) : NULL;
    bool head_req = r && strcmp(r->method, "HEAD") == 0;
    c->resp_chunked = content_length < 0 && !c->resp_no_body;
    char line[64];
    snprintf(line, sizeof(line), "HTTP/1.1 %d %s", status, http_status_text(status));
    int rc =
        http_out_head(&c->out, line, h, n, c->resp_no_body ? -2 : content_length, c->close_after);
    if (head_req)
        c->resp_no_body = true;
    conn_want_write(c);
    return rc;
}

static int op_send_body(void *t, const void *data, size_t len)
{
    struct conn *c = t;
    if (c->resp_no_body)
        return 0;
    int rc = 0;
    if (c->resp_chunked)
        rc = http_out_printf(&c->out, "%zx\r\n", len);
    if (rc == 0)
        rc = http_out_append(&c->out, data, len);
    if (rc == 0 && c->resp_chunked)
        rc = http_out_append(&c->out, "\r\n", 2);
    conn_want_write(c);
    return rc;
}

static int op_send_end(void *t)
{
    struct conn *c = t;
    int rc = 0;
    if (c->resp_chunked && !c->resp_no_body)
        rc = http_out_append(&c->out, "0\r\n\r\n", 5);
    conn_want_write(c);
    return rc;
}

static size_t op_pending(void *t)
{
    struct conn *c = t;
    return c->out.bytes;
}

static void op_pause_body(void *t, bool paused)
{
    struct conn *c = t;
    c->handler_paused = paused;
    if (!c->killed)
        conn_update_rx(c);
}

static void kill_conn(struct conn *c)
{
    if (c->killed)
        return;
    c->killed = true;
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static void op_abort(void *t)
{
    kill_conn(t);
}

static void op_finished(void *t)
{
    struct conn *c = t;
    c->ex_finished = true;
    conn_want_write(c); /* advance from the WRITEABLE callback, not from inside the handler */
}

static int op_upgrade(void *t)
{
    struct conn *c = t;

    c->upgraded = true;
    c->close_after = true; /* no HTTP after the raw bytes */
    lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
    return 0;
}

static const struct http_transport_ops conn_ops = {
    .send_head = op_send_head,
    .send_body = op_send_body,
    .send_end = op_send_end,
    .pending = op_pending,
    .pause_body = op_pause_body,
    .abort = op_abort,
    .finished = op_finished,
    .upgrade = op_upgrade,
};

/* --- parser callbacks -------------------------------------------------------------- */

static int on_head(void *arg)
{
    struct conn *c = arg;
    struct http_request head = *http_parse_head(c->parser, NULL);
    head.peer = c->peer;
    lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
    const char *expect = http_header_get(&head, "Expect");
    if (expect && strcasecmp(expect, "100-continue") == 0) {
        /* Now, not with the response: the client holds the body back until
         * it sees this (curl for 1 s) and the response may need the body. */
        http_out_append(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        conn_want_write(c);
    }
    c->ex = http_exchange_new(c->srv->router, &head, &conn_ops, c);
    if (!c->ex) {
        kill_conn(c);
        return 0;
    }
    c->ex_finished = false;
    c->msg_complete = false;
    http_exchange_set_body_max(c->ex, c->srv->body_max);
    http_exchange_start(c->ex);
    return 0;
}

static void on_body(void *arg, const char *data, size_t len)
{
    struct conn *c = arg;
    if (c->ex && http_exchange_body(c->ex, data, len) == AB_ELIMIT)
        c->close_after = true;
}

static void on_complete(void *arg)
{
    struct conn *c = arg;
    c->msg_complete = true;
    if (c->ex)
        http_exchange_body_end(c->ex);
    conn_want_write(c);
}

static const struct http_parse_callbacks parse_cbs = {
    .on_head = on_head,
    .on_body = on_body,
    .on_complete = on_complete,
};

/* Parses buffered input until the parser pauses at a message end. */
static void pump(struct conn *c)
{
    while (c->inlen && !c->killed && !c->close_after && !http_parse_is_paused(c->parser)) {
        int status = 0;
        const char *why = NULL;
        ssize_t n = http_parse_feed(c->parser, c->inbuf, c->inlen, &status, &why);
        if (n < 0) {
            c->inlen = 0;
            c->close_after = true;
            if (c->ex) {
                /* a body went bad mid-request: nothing sane to answer */
                kill_conn(c);
            } else {
                c->ex = http_exchange_new_error(c->srv->router, &conn_ops, c, status, why);
                c->msg_complete = true;
            }
            return;
        }
        memmove(c->inbuf, c->inbuf + n, c->inlen - (size_t)n);
        c->inlen -= (size_t)n;
        if (n == 0)
            break;
    }
    bool over = c->inlen >= INBUF_MAX;
    if (over != c->buffer_paused) {
        c->buffer_paused = over;
        conn_update_rx(c);
    }
}

/* Moves to the next pipelined request once the current one is done both ways. */
static void advance(struct conn *c)
{
    while (c->ex && c->ex_finished && c->msg_complete) {
        struct http_exchange *ex = c->ex;
        c->ex = NULL;
        http_exchange_release(ex);
        if (c->close_after)
            return;
        c->handler_paused = false;
        conn_update_rx(c);
        http_parse_next(c->parser);
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, c->srv->idle_timeout_s);
        pump(c);
    }
}

/* One chunk to the socket: bytes taken (all of len through lws, which keeps
 * what the socket refused), 0 when a plain socket is full, -1 on an error. */
static ssize_t conn_send(struct conn *c, const char *data, size_t len)
{
    if (!conn_direct(c))
        return lws_write(c->wsi, (unsigned char *)data, len, LWS_WRITE_RAW) < 0 ? -1 : (ssize_t)len;
    atomic_fetch_add_explicit(&c->srv->sends, 1, memory_order_relaxed);
    ssize_t k = send(lws_get_socket_fd(c->wsi), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    return k;
}

static int conn_write(struct conn *c)
{
    const char *data;
    size_t budget = WRITE_CHUNK;
    size_t len;
    bool full = false;
    while (budget && (len = http_out_peek(&c->out, &data)) > 0) {
        if (len > budget)
            len = budget;
        ssize_t w = conn_send(c, data, len);
        if (w < 0)
            return -1;
        http_out_consume(&c->out, (size_t)w);
        budget -= (size_t)w;
        if ((size_t)w < len || (!conn_direct(c) && lws_send_pipe_choked(c->wsi))) {
            full = true;
            break;
        }
    }
    if (c->ex && !c->ex_finished && c->out.bytes < LOW_WATER)
        http_exchange_drained(c->ex);
    advance(c);
    if (c->out.bytes) {
        if (full || !budget)
            lws_callback_on_writable(c->wsi); /* when the socket has room */
        else
            conn_want_write(c);
        return 0;
    }
    if (c->close_after && (!c->ex || c->ex_finished))
        return -1;
    return 0;
}

static void conn_free(struct conn *c)
{
    loop_defer_cancel(&c->flush);
    if (c->ex) {
        struct http_exchange *ex = c->ex;
        c->ex = NULL;
        http_exchange_release(ex);
    }
    http_parse_free(c->parser);
    http_out_clear(&c->out);
    free(c->inbuf);
    free(c);
}

static int server_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                           size_t len)
{
    struct conn *c = lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT: {
        struct http_server *srv = lws_vhost_user(lws_get_vhost(wsi));
        if (!srv)
            return -1;
        c = calloc(1, sizeof(*c));
        if (!c)
            return -1;
        c->wsi = wsi;
        c->srv = srv;
        c->loop = loop_of_lws(lws_get_context(wsi));
        c->inbuf = malloc(INBUF_MAX + SERVER_RX_BUF);
        c->parser = http_parse_new(HTTP_PARSE_REQUEST, srv->head_max, &parse_cbs, c);
        if (!c->inbuf || !c->parser) {
            http_parse_free(c->parser);
            free(c->inbuf);
            free(c);
            return -1;
        }
        if (srv->unix_path[0])
            ab_strlcpy(c->peer, "unix", sizeof(c->peer));
        else if (!lws_get_peer_simple(wsi, c->peer, sizeof(c->peer)))
            ab_strlcpy(c->peer, "?", sizeof(c->peer));
        lws_set_opaque_user_data(wsi, c);
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, HEAD_TIMEOUT_S);
        return 0;
    }
    case LWS_CALLBACK_RAW_RX:
        if (!c || c->killed)
            return 0;
        if (c->upgraded) {
            if (c->ex)
                http_exchange_body(c->ex, in, len);
            return 0;
        }
        if (c->inlen + len > INBUF_MAX + SERVER_RX_BUF) {
            LOG_WARN("http input overflow; closing", "server", c->srv->name, "peer", c->peer);
            return -1;
        }
        memcpy(c->inbuf + c->inlen, in, len);
        c->inlen += len;
        pump(c);
        return 0;
    case LWS_CALLBACK_RAW_WRITEABLE:
        if (!c || c->killed)
            return 0;
        atomic_fetch_add_explicit(&c->srv->writeables, 1, memory_order_relaxed);
        return conn_write(c);
    case LWS_CALLBACK_RAW_CLOSE:
        if (c) {
            lws_set_opaque_user_data(wsi, NULL);
            conn_free(c);
        }
        return 0;
    default:
        return 0;
    }
}

/* Unix sockets are listened on by us (lws 4.1's own unix listener does not
 * come up here): lws watches the listening fd and we adopt each accepted
 * connection into the vhost as a raw socket, the same as TCP ones. */
static int listen_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                           size_t len)
{
    struct http_server *srv = lws_vhost_user(lws_get_vhost(wsi));
    if (reason != LWS_CALLBACK_RAW_RX_FILE || !srv)
        return 0;
    int lfd = lws_get_socket_fd(wsi);
    for (int i = 0; i < 64; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;
        lws_sock_file_fd_type u;
        u.sockfd = fd;
        if (!lws_adopt_descriptor_vhost(srv->vh, LWS_ADOPT_SOCKET, u, "ab-http", NULL))
            LOG_WARN("cannot adopt a unix-socket connection", "server", srv->name);
    }
    return 0;
}

static int listen_unix(struct http_server *s, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    ab_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 512) != 0) {
        snprintf(err, errlen, "cannot listen on unix:%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return AB_EIO;
    }
    lws_sock_file_fd_type u;
    u.filefd = fd;
    s->listen_wsi =
        lws_adopt_descriptor_vhost(s->vh, LWS_ADOPT_RAW_FILE_DESC, u, "ab-http-listen", NULL);
    if (!s->listen_wsi) {
        snprintf(err, errlen, "cannot watch the unix socket %s", path);
        return AB_EIO;
    }
    return 0;
}

static int parse_listen(const char *listen, char *host, size_t hostlen, int *port, bool *unix_sock,
                        char *err, size_t errlen)
{
    *unix_sock = false;
    if (strncmp(listen, "unix:", 5) == 0) {
        size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
        if (strlen(listen + 5) == 0 || strlen(listen + 5) > max || strlen(listen + 5) >= hostlen) {
            snprintf(err, errlen, "listen address '%s': unix socket path must be 1..%zu bytes",
                     listen, AB_MIN(max, hostlen - 1));
            return AB_EINVAL;
        }
        ab_strlcpy(host, listen + 5, hostlen);
        *unix_sock = true;
        *port = 0;
        return 0;
    }
    const char *colon = strrchr(listen, ':');
    if (!colon) {
        snprintf(err, errlen, "listen address '%s' must be HOST:PORT, :PORT or unix:PATH", listen);
        return AB_EINVAL;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || p < 0 || p > 65535) {
        snprintf(err, errlen, "listen address '%s': port must be 0..65535", listen);
        return AB_EINVAL;
    }
    size_t hl = (size_t)(colon - listen);
    if (hl >= hostlen) {
        snprintf(err, errlen, "listen address '%s': host too long", listen);
        return AB_EINVAL;
    }
    memcpy(host, listen, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

bool http_listen_host_is_ipv4(const char *host)
{
    struct in_addr a;
    return host && inet_pton(AF_INET, host, &a) == 1;
}

int http_server_start(struct loop *l, const struct http_server_options *o, struct http_server **out,
                      char *err, size_t errlen)
{
    char host[128];
    int port;
    bool unix_sock;
    int rc = parse_listen(o->listen, host, sizeof(host), &port, &unix_sock, err, errlen);
    if (rc != 0)
        return rc;
    struct http_server *s = calloc(1, sizeof(*s));
    if (!s) {
        /* callers log err as it is: never leave it empty */
        snprintf(err, errlen, "out of memory starting the server on %s", o->listen);
        return AB_ENOMEM;
    }
    s->loop = l;
    s->router = o->router;
    s->head_max = o->head_max ? o->head_max : HTTP_HEAD_MAX;
    s->body_max = o->body_max ? o->body_max : HTTP_BODY_MAX;
    s->idle_timeout_s = o->idle_timeout_ms > 0 ? (o->idle_timeout_ms + 999) / 1000 : 60;
    ab_strlcpy(s->name, o->name ? o->name : "http", sizeof(s->name));
    s->protocols[0].name = "ab-http";
    s->protocols[0].callback = server_callback;
    s->protocols[0].rx_buffer_size = SERVER_RX_BUF;
    s->protocols[1].name = "ab-http-listen";
    s->protocols[1].callback = listen_callback;

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.vhost_name = s->name;
    info.protocols = s->protocols;
    info.user = s;
    if (unix_sock) {
        ab_strlcpy(s->unix_path, host, sizeof(s->unix_path));
        info.port = CONTEXT_PORT_NO_LISTEN;
    } else {
        info.options = LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
        info.listen_accept_role = "raw-skt";
        info.listen_accept_protocol = "ab-http";
        info.iface = host[0] ? host : NULL;
        info.port = port;
        /* lws 4.1 binds an IPv6 wildcard socket for an IPv4 iface (it listened
         * on every interface for "127.0.0.1:port"); an IPv4 vhost binds it */
        if (http_listen_host_is_ipv4(host))
            info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    }
    s->vh = lws_create_vhost(loop_lws(l), &info);
    if (!s->vh) {
        snprintf(err, errlen, "cannot listen on %s (in use, or no permission?)", o->listen);
        free(s);
        return AB_EIO;
    }
    if (unix_sock && (rc = listen_unix(s, s->unix_path, err, errlen)) != 0) {
        lws_vhost_destroy(s->vh);
        free(s);
        return rc;
    }
    if (!unix_sock && port != 0 && lws_get_vhost_listen_port(s->vh) <= 0) {
        snprintf(err, errlen, "cannot listen on %s (in use?)", o->listen);
        lws_vhost_destroy(s->vh);
        free(s);
        return AB_EIO;
    }
    *out = s;
    return 0;
}

void http_server_io_counts(struct http_server *s, uint64_t *sends, uint64_t *writeables)
{
    *sends = atomic_load_explicit(&s->sends, memory_order_relaxed);
    *writeables = atomic_load_explicit(&s->writeables, memory_order_relaxed);
}

int http_server_port(struct http_server *s)
{
    return lws_get_vhost_listen_port(s->vh);
}

void http_server_stop(struct http_server *s)
{
    if (!s)
        return;
    lws_vhost_destroy(s->vh);
    if (s->unix_path[0])
        unlink(s->unix_path);
    free(s);
}
