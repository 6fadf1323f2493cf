/* Streaming HTTP/1.1 client on lws raw sockets: one connection per request
 * (no pooling yet). We connect the socket ourselves (non-blocking) and hand
 * it to lws, so unix sockets and TCP take the same path and connect errors
 * keep their errno. */
#include "agentbox/http.h"
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "http_out.h"
#include "http_parse.h"

#include <libwebsockets.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sched.h>
#include <unistd.h>

#define CLIENT_VHOST "ab-http-client"
#define CLIENT_RX_BUF (64 * 1024)
#define WRITE_CHUNK (64 * 1024)
#define LOW_WATER (64 * 1024)

struct http_client {
    struct loop *loop;
    struct lws *wsi;
    struct http_parse *parser;
    const struct http_client_handler *h;
    void *arg;
    struct http_out out;
    struct loop_timer timer;
    bool timer_on;
    bool chunked, req_ended, head_seen, connected;
    bool terminal; /* on_end/on_error delivered or closed by the user */
    bool user_closed;
    bool head_req;
    bool paused;
    int pending_err; /* failure to report from the timer */
    char errmsg[160];
};

static void client_destroy_later(struct http_client *c);

static void deliver_error(struct http_client *c, int err, const char *msg)
{
    if (c->terminal)
        return;
    c->terminal = true;
    if (c->timer_on) {
        loop_timer_cancel(&c->timer);
        c->timer_on = false;
    }
    if (!c->user_closed && c->h->on_error)
        c->h->on_error(c, err, msg, c->arg);
}

/* --- response parsing ----------------------------------------------------------- */

static int on_head(void *arg)
{
    struct http_client *c = arg;
    int status = 0;
    const struct http_request *r = http_parse_head(c->parser, &status);
    c->head_seen = true;
    if (c->timer_on) {
        loop_timer_cancel(&c->timer);
        c->timer_on = false;
    }
    if (status >= 100 && status < 200) /* 100 Continue: wait for the real head */
        return 0;
    if (!c->user_closed && c->h->on_head)
        c->h->on_head(c, status, r->headers, r->nheaders, c->arg);
    return c->head_req ? 1 : 0;
}

static void on_body(void *arg, const char *data, size_t len)
{
    struct http_client *c = arg;
    if (!c->terminal && !c->user_closed && c->h->on_data)
        c->h->on_data(c, data, len, c->arg);
}

static void on_complete(void *arg)
{
    struct http_client *c = arg;
    int status = 0;
    http_parse_head(c->parser, &status);
    if (status >= 100 && status < 200) {
        http_parse_next(c->parser);
        return;
    }
    if (c->terminal)
        return;
    c->terminal = true;
    if (!c->user_closed && c->h->on_end)
        c->h->on_end(c, c->arg);
    client_destroy_later(c);
}

static const struct http_parse_callbacks parse_cbs = {
    .on_head = on_head,
    .on_body = on_body,
    .on_complete = on_complete,
};

/* --- lws glue ------------------------------------------------------------------ */

static void client_free(struct http_client *c)
{
    if (c->timer_on)
        loop_timer_cancel(&c->timer);
    http_parse_free(c->parser);
    http_out_clear(&c->out);
    free(c);
}

static void client_destroy_later(struct http_client *c)
{
    if (c->wsi)
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static int client_write(struct http_client *c)
{
    const char *data;
    size_t len, budget = WRITE_CHUNK;
    while (budget && (len = http_out_peek(&c->out, &data)) > 0) {
        if (len > budget)
            len = budget;
        if (lws_write(c->wsi, (unsigned char *)data, len, LWS_WRITE_RAW) < 0)
            return -1;
        http_out_consume(&c->out, len);
        budget -= len;
        if (lws_send_pipe_choked(c->wsi))
            break;
    }
    if (c->out.bytes)
        lws_callback_on_writable(c->wsi);
    else if (!c->req_ended && !c->terminal && !c->user_closed && c->h->on_drain)
        c->h->on_drain(c, c->arg);
    return 0;
}

static int client_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                           size_t len)
{
    struct http_client *c = lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT:
        if (c) {
            c->wsi = wsi;
            lws_callback_on_writable(wsi); /* completes the non-blocking connect */
        }
        return 0;
    case LWS_CALLBACK_RAW_WRITEABLE:
        if (!c || c->terminal)
            return 0;
        if (!c->connected) {
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            getsockopt(lws_get_socket_fd(wsi), SOL_SOCKET, SO_ERROR, &soerr, &sl);
            if (soerr) {
                snprintf(c->errmsg, sizeof(c->errmsg), "connect failed: %s", strerror(soerr));
                deliver_error(c, AB_EIO, c->errmsg);
                return -1;
            }
            c->connected = true;
        }
        return client_write(c);
    case LWS_CALLBACK_RAW_RX: {
        if (!c || c->terminal)
            return 0;
        c->connected = true;
        int status;
        const char *why;
        ssize_t n = http_parse_feed(c->parser, in, len, &status, &why);
        if (n < 0) {
            snprintf(c->errmsg, sizeof(c->errmsg), "malformed response: %s", why);
            deliver_error(c, AB_EINVAL, c->errmsg);
            return -1;
        }
        return 0;
    }
    case LWS_CALLBACK_RAW_CLOSE:
        if (!c)
            return 0;
        lws_set_opaque_user_data(wsi, NULL);
        if (!c->terminal) {
            if (c->head_seen && http_parse_eof(c->parser) == 0 && c->terminal) {
                /* close-delimited body completed in on_complete */
            } else if (!c->terminal) {
                deliver_error(c, AB_ECLOSED,
                              c->head_seen ? "connection closed mid-response"
                                           : "connection closed before a response");
            }
        }
        client_free(c);
        return 0;
    default:
        return 0;
    }
}

static const struct lws_protocols client_protocols[] = {
    {"ab-http-client", client_callback, 0, CLIENT_RX_BUF, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static struct lws_vhost *client_vhost(struct loop *l)
{
    struct lws_vhost *vh = lws_get_vhost_by_name(loop_lws(l), CLIENT_VHOST);
    if (vh)
        return vh;
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = client_protocols;
    info.vhost_name = CLIENT_VHOST;
    return lws_create_vhost(loop_lws(l), &info);
}

/* Creates a socket inside the network namespace at ns_path (a sandbox's
 * loopback, say): setns on this thread, socket(), setns back. The socket
 * stays in the namespace it was made in. -1 with err on failure. */
static int socket_in_netns(const char *ns_path, size_t len, int family, char *err, size_t errlen)
{
    char path[128];
    if (len == 0 || len >= sizeof(path)) {
        snprintf(err, errlen, "network namespace path must be 1..%zu bytes: '%.*s'",
                 sizeof(path) - 1, (int)len, ns_path);
        return -1;
    }
    memcpy(path, ns_path, len);
    path[len] = '\0';
    int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int target = open(path, O_RDONLY | O_CLOEXEC);
    int fd = -1;
    if (self < 0 || target < 0) {
        snprintf(err, errlen, "cannot open network namespace %s: %s", path, strerror(errno));
    } else if (setns(target, CLONE_NEWNET) != 0) {
        snprintf(err, errlen, "cannot enter network namespace %s: %s", path, strerror(errno));
    } else {
        fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (setns(self, CLONE_NEWNET) != 0) {
            /* cannot happen short of a kernel bug; never stay in a sandbox's network */
            LOG_ERROR("cannot return to the agent's network namespace", "error", strerror(errno));
            abort();
        }
    }
    if (self >= 0)
        close(self);
    if (target >= 0)
        close(target);
    return fd;
}

/* Returns a connecting non-blocking socket, or -1 with errno-ish text in err.
 * addr: "unix:/path", "host:port", or "netns:<ns path>|host:port". */
static int open_socket(const char *addr, char *err, size_t errlen)
{
    int fd = -1;
    const char *ns_path = NULL;
    size_t ns_len = 0;
    if (strncmp(addr, "netns:", 6) == 0) {
        const char *bar = strchr(addr, '|');
        if (!bar) {
            snprintf(err, errlen, "address '%s' must be netns:<path>|host:port", addr);
            return -1;
        }
        ns_path = addr + 6;
        ns_len = (size_t)(bar - ns_path);
        addr = bar + 1;
    }
    if (strncmp(addr, "unix:", 5) == 0) {
        struct sockaddr_un sun;
        memset(&sun, 0, sizeof(sun));
        sun.sun_family = AF_UNIX;
        if (strlen(addr + 5) >= sizeof(sun.sun_path)) {
            /* the limit first: a long path would push it out of err */
            snprintf(err, errlen, "unix socket path is longer than %zu bytes: '%s'",
                     sizeof(sun.sun_path) - 1, addr + 5);
            return -1;
        }
        ab_strlcpy(sun.sun_path, addr + 5, sizeof(sun.sun_path));
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 &&
                       errno != EINPROGRESS && errno != EAGAIN)) {
            snprintf(err, errlen, "connect %s: %s", addr, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        return fd;
    }
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr) {
        snprintf(err, errlen, "address '%s' must be host:port or unix:/path", addr);
        return -1;
    }
    char host[256];
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof(host)) {
        snprintf(err, errlen, "host of an address is longer than %zu bytes: '%s'", sizeof(host) - 1,
                 addr);
        return -1;
    }
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0) {
        /* a name: resolved synchronously (names here are local: localhost, service DNS) */
        hints.ai_flags = AI_NUMERICSERV;
        rc = getaddrinfo(host, colon + 1, &hints, &res);
    }
    if (rc != 0 || !res) {
        snprintf(err, errlen, "cannot resolve %s: %s", addr, gai_strerror(rc));
        return -1;
    }
    fd = ns_path ? socket_in_netns(ns_path, ns_len, res->ai_family, err, errlen)
                 : socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 && ns_path) {
        freeaddrinfo(res);
        return -1;
    }
    if (fd < 0 || (connect(fd, res->ai_addr, res->ai_addrlen) < 0 && errno != EINPROGRESS)) {
        snprintf(err, errlen, "connect %s: %s", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static void timer_fired(struct loop_timer *t)
{
    struct http_client *c = t->arg;
    c->timer_on = false;
    if (c->pending_err) {
        /* failed before any socket existed: report, then free */
        deliver_error(c, c->pending_err, c->errmsg);
        client_free(c);
        return;
    }
    deliver_error(c, AB_ETIMEOUT, "timed out waiting for the response head");
    client_destroy_later(c);
}

/* Reports err (with c->errmsg) through on_error from the next loop turn, as
 * the contract says: nothing is called back before http_client_start returns. */
static struct http_client *fail_later(struct http_client *c, struct loop *l, int err)
{
    c->pending_err = err;
    c->timer_on = true;
    loop_timer_start(l, &c->timer, 0, timer_fired, c);
    return c;
}

struct http_client *http_client_start(struct loop *l, const struct http_client_options *o,
                                      const struct http_client_handler *h, void *arg)
{
    struct http_client *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->loop = l;
    c->h = h;
    c->arg = arg;
    c->parser = http_parse_new(HTTP_PARSE_RESPONSE, HTTP_HEAD_MAX * 2, &parse_cbs, c);
    if (!c->parser) {
        free(c);
        return NULL;
    }
    c->head_req = strcmp(o->method, "HEAD") == 0;
    c->chunked = o->content_length < 0;
    c->req_ended = o->content_length == 0;

    char line[HTTP_HEAD_MAX];
    int ll = snprintf(line, sizeof(line), "%s %s HTTP/1.1", o->method, o->target);
    if (ll < 0 || (size_t)ll >= sizeof(line)) {
        /* A cut request line would ask for another URL: refuse it. */
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "request line (method, target, version) is longer than %zu bytes",
                 sizeof(line) - 1);
        return fail_later(c, l, AB_ELIMIT);
    }
    struct http_header hdrs[HTTP_MAX_HEADERS + 1];
    int n = 0;
    bool has_host = false;
    for (int i = 0; i < o->nheaders && n < HTTP_MAX_HEADERS; i++) {
        if (strcasecmp(o->headers[i].name, "Host") == 0)
            has_host = true;
        hdrs[n++] = o->headers[i];
    }
    if (!has_host)
        hdrs[n++] = (struct http_header){"Host", "localhost"};
    /* No "Connection: close": a server that closes right after its last byte
     * while this side is paused (a slow downstream reader) makes lws report the
     * hang-up before the unread rest of the response is read, and the answer
     * would be cut. Responses are framed (length or chunked); the client closes
     * the connection itself once the response is complete. */
    int rc = http_out_head(&c->out, line, hdrs, n,
                           o->content_length == 0 && !c->chunked ? 0 : o->content_length, 0);
    if (o->content_length == 0 &&
        (strcmp(o->method, "GET") == 0 || c->head_req || strcmp(o->method, "DELETE") == 0)) {
        /* no Content-Length: 0 needed, but harmless; keep the head as built */
    }
    if (rc) {
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "request head (line and headers) is larger than %d bytes", HTTP_HEAD_MAX);
        return fail_later(c, l, rc);
    }

    int timeout = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    int fd = open_socket(o->addr, c->errmsg, sizeof(c->errmsg));
    struct lws_vhost *vh = fd >= 0 ? client_vhost(l) : NULL;
    if (fd >= 0 && !vh) {
        close(fd);
        fd = -1;
        ab_strlcpy(c->errmsg, "cannot create the client vhost", sizeof(c->errmsg));
    }
    if (fd < 0)
        return fail_later(c, l, AB_EIO);
    lws_adopt_desc_t ad;
    memset(&ad, 0, sizeof(ad));
    ad.vh = vh;
    ad.type = LWS_ADOPT_SOCKET;
    ad.fd.sockfd = fd;
    ad.vh_prot_name = "ab-http-client";
    ad.opaque = c;
    if (!lws_adopt_descriptor_vhost_via_info(&ad)) {
        ab_strlcpy(c->errmsg, "cannot adopt the client socket", sizeof(c->errmsg));
        return fail_later(c, l, AB_EIO);
    }
    c->timer_on = true;
    loop_timer_start(l, &c->timer, timeout, timer_fired, c);
    return c;
}

int http_client_write(struct http_client *c, const void *data, size_t len)
{
    if (c->terminal || c->req_ended)
        return AB_ECLOSED;
    if (len == 0)
        return 0;
    int rc = 0;
    if (c->chunked)
        rc = http_out_printf(&c->out, "%zx\r\n", len);
    if (rc == 0)
        rc = http_out_append(&c->out, data, len);
    if (rc == 0 && c->chunked)
        rc = http_out_append(&c->out, "\r\n", 2);
    if (c->wsi)
        lws_callback_on_writable(c->wsi);
    return rc;
}

int http_client_end(struct http_client *c)
{
    if (c->terminal || c->req_ended)
        return c->req_ended ? 0 : AB_ECLOSED;
    c->req_ended = true;
    int rc = c->chunked ? http_out_append(&c->out, "0\r\n\r\n", 5) : 0;
    if (c->wsi)
        lws_callback_on_writable(c->wsi);
    return rc;
}

size_t http_client_pending(struct http_client *c)
{
    return c->out.bytes;
}

void http_client_pause(struct http_client *c, bool paused)
{
    c->paused = paused;
    if (c->wsi && !c->terminal)
        lws_rx_flow_control(c->wsi, paused ? 0 : 1);
}

void http_client_close(struct http_client *c)
{
    c->user_closed = true;
    if (c->timer_on) {
        loop_timer_cancel(&c->timer);
        c->timer_on = false;
    }
    if (c->pending_err) {
        client_free(c);
        return;
    }
    c->terminal = true;
    if (c->wsi)
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}
