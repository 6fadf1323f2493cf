/* HTTP server and client over real sockets: the loop runs on its own thread,
 * the test drives it with blocking sockets and checks the exact bytes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/loop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct loop *g_loop;
static struct http_server *g_srv;
static struct http_router *g_router;
static pthread_t g_thread;
static int g_port;
static atomic_int g_stream_aborts;
static atomic_long g_stream_bytes;

/* --- handlers ------------------------------------------------------------------- */

static void h_echo(struct http_exchange *ex, void *arg)
{
    const struct http_request *r = http_req(ex);
    http_respond(ex, 200, "text/plain", r->body, r->body_len, NULL, 0);
}

static void h_item(struct http_exchange *ex, void *arg)
{
    char buf[256], q[64] = "";
    http_query_get(http_req(ex), "q", q, sizeof(q));
    int n = snprintf(buf, sizeof(buf), "id=%s q=%s", http_param(ex, "id"), q);
    http_respond(ex, 200, "text/plain", buf, (size_t)n, NULL, 0);
}

static void h_chunks(struct http_exchange *ex, void *arg)
{
    http_begin(ex, 200, NULL, 0, -1);
    http_write(ex, "one,", 4);
    http_write(ex, "two,", 4);
    http_write(ex, "three", 5);
    http_end(ex);
}

struct stream_state {
    long n;
};

static void s_data(struct http_exchange *ex, const void *d, size_t len, void *arg)
{
    struct stream_state *st = arg;
    st->n += (long)len;
}

static void s_end(struct http_exchange *ex, void *arg)
{
    struct stream_state *st = arg;
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "got %ld", st->n);
    atomic_store(&g_stream_bytes, st->n);
    free(st);
    http_respond(ex, 200, "text/plain", buf, (size_t)n, NULL, 0);
}

static void s_abort(struct http_exchange *ex, void *arg)
{
    atomic_fetch_add(&g_stream_aborts, 1);
    free(arg);
    http_abort(ex);
}

static const struct http_body_handler stream_bh = {s_data, s_end, s_abort, NULL};

static void h_stream(struct http_exchange *ex, void *arg)
{
    struct stream_state *st = calloc(1, sizeof(*st));
    http_set_body_handler(ex, &stream_bh, st);
}

static const struct http_route routes[] = {
    {"POST", "/echo", h_echo, NULL, 0},
    {"GET", "/items/{id}", h_item, NULL, 0},
    {"GET", "/chunks", h_chunks, NULL, 0},
    {"POST", "/stream", h_stream, NULL, HTTP_ROUTE_STREAM},
};

static void *loop_thread(void *arg)
{
    loop_run(g_loop);
    return NULL;
}

static int setup(void **state)
{
    g_loop = loop_new(NULL);
    assert_non_null(g_loop);
    g_router = http_router_new(routes, AB_ARRAY_LEN(routes));
    char err[256];
    struct http_server_options o = {.listen = "127.0.0.1:0", .router = g_router, .name = "t"};
    assert_int_equal(http_server_start(g_loop, &o, &g_srv, err, sizeof(err)), 0);
    g_port = http_server_port(g_srv);
    assert_true(g_port > 0);
    pthread_create(&g_thread, NULL, loop_thread, NULL);
    return 0;
}

static int teardown(void **state)
{
    loop_stop(g_loop);
    pthread_join(g_thread, NULL);
    loop_free(g_loop);
    http_router_free(g_router);
    return 0;
}

/* --- socket helpers ---------------------------------------------------------------- */

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_all(int fd, const char *s, size_t len)
{
    while (len) {
        ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        s += n;
        len -= (size_t)n;
    }
}

/* Reads until `count` occurrences of needle are present or the peer closes. */
static char *read_until(int fd, const char *needle, int count, size_t *outlen)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        buf[len] = '\0';
        int found = 0;
        for (const char *p = buf; (p = strstr(p, needle)); p++)
            found++;
        if (found >= count)
            break;
        if (len + 4096 >= cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (outlen)
        *outlen = len;
    return buf;
}

/* Reads one response with a Content-Length body: its status and its body
 * (NUL-terminated, at most cap - 1 bytes). Returns the body length. */
static size_t read_response(int fd, int *status, char *body, size_t cap)
{
    char head[8192];
    size_t len = 0, blen;
    char *end = NULL, *cl;
    long want;

    *status = 0;
    while (!end) {
        assert_true(len < sizeof(head) - 1);
        ssize_t n = recv(fd, head + len, 1, 0); /* byte by byte: stop at the head's end */
        assert_true(n == 1);
        len++;
        head[len] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    assert_int_equal(sscanf(head, "HTTP/1.1 %d", status), 1);
    cl = strcasestr(head, "\r\nContent-Length:");
    assert_non_null(cl);
    want = strtol(cl + 17, NULL, 10);
    assert_true(want >= 0 && (size_t)want < cap);
    for (blen = 0; blen < (size_t)want;) {
        ssize_t n = recv(fd, body + blen, (size_t)want - blen, 0);
        assert_true(n > 0);
        blen += (size_t)n;
    }
    body[blen] = '\0';
    return blen;
}

/* --- tests ------------------------------------------------------------------------- */

/* A small answer leaves by send(2) at the next loop turn: no POLLOUT round
 * (a WRITEABLE callback) and no choked-poll per answer. The old path took a
 * writable round for every answer. */
static void test_small_answers_leave_without_a_writable_round(void **state)
{
    uint64_t s0, w0, s1, w1;
    http_server_io_counts(g_srv, &s0, &w0);
    int fd = dial();
    for (int i = 0; i < 20; i++) {
        char req[128], body[256];
        int status;
        int n = snprintf(req, sizeof(req), "GET /items/%d HTTP/1.1\r\nHost: x\r\n\r\n", i);
        send_all(fd, req, (size_t)n);
        read_response(fd, &status, body, sizeof(body));
        assert_int_equal(status, 200);
    }
    close(fd);
    http_server_io_counts(g_srv, &s1, &w1);
    assert_true(s1 - s0 >= 20);
    assert_int_equal(w1 - w0, 0);
}

static void test_route_params_and_query(void **state)
{
    int fd = dial();
    const char *req = "GET /items/ab%20c?q=x%2By+z HTTP/1.1\r\nHost: t\r\n\r\n";
    char body[256];
    int status;
    send_all(fd, req, strlen(req));
    read_response(fd, &status, body, sizeof(body));
    assert_int_equal(status, 200);
    /* the path parameter and the query value, each percent-decoded */
    assert_string_equal(body, "id=ab c q=x+y z");
    close(fd);
}

static void test_chunked_request_body(void **state)
{
    int fd = dial();
    const char *req = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n";
    send_all(fd, req, strlen(req));
    char *resp = read_until(fd, "hello world", 1, NULL);
    assert_non_null(strstr(resp, "Content-Length: 11\r\n"));
    assert_non_null(strstr(resp, "\r\n\r\nhello world"));
    free(resp);
    /* the connection is kept alive: a second request works */
    const char *req2 = "GET /items/7 HTTP/1.1\r\nHost: t\r\n\r\n";
    send_all(fd, req2, strlen(req2));
    resp = read_until(fd, "id=7 q=", 1, NULL);
    assert_non_null(strstr(resp, "id=7 q="));
    free(resp);
    close(fd);
}

static void test_pipelined_requests_answer_in_order(void **state)
{
    int fd = dial();
    const char *req = "GET /items/1 HTTP/1.1\r\nHost: t\r\n\r\n"
                      "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
                      "GET /items/3 HTTP/1.1\r\nHost: t\r\n\r\n"
                      "GET /chunks HTTP/1.1\r\nHost: t\r\n\r\n";
    send_all(fd, req, strlen(req));
    /* the chunked answer comes last and ends with its terminator: read up to
     * it (not to a timeout) */
    char *all = read_until(fd, "three\r\n0\r\n\r\n", 1, NULL);
    char *a = strstr(all, "\r\n\r\nid=1 q=");
    char *b = strstr(all, "Content-Length: 3\r\n\r\nabc"); /* the echoed body, exactly */
    char *c = strstr(all, "\r\n\r\nid=3 q=");
    char *d = strstr(all, "Transfer-Encoding: chunked");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(d);
    assert_true(a < b && b < c && c < d);
    assert_non_null(strstr(all, "4\r\none,\r\n4\r\ntwo,\r\n5\r\nthree\r\n0\r\n\r\n"));
    /* four answers, no more */
    int answers = 0;
    for (const char *p = all; (p = strstr(p, "HTTP/1.1 200 OK")); p++)
        answers++;
    assert_int_equal(answers, 4);
    free(all);
    close(fd);
}

static void test_oversized_head_gets_431(void **state)
{
    int fd = dial();
    size_t big = 17 * 1024;
    char *req = malloc(big + 128);
    int n = sprintf(req, "GET /items/1 HTTP/1.1\r\nX-Big: ");
    memset(req + n, 'a', big);
    n += (int)big;
    n += sprintf(req + n, "\r\n\r\n");
    send(fd, req, (size_t)n, MSG_NOSIGNAL); /* the server may close before reading it all */
    char *resp = read_until(fd, "}", 1, NULL);
    if (!strstr(resp, "HTTP/1.1 431"))
        fprintf(stderr, "response: %s\n", resp);
    assert_non_null(strstr(resp, "HTTP/1.1 431"));
    assert_non_null(strstr(resp, "\"code\":431"));
    assert_non_null(strstr(resp, "16 KiB"));
    free(resp);
    free(req);
    close(fd);
}

static void test_oversized_body_gets_413(void **state)
{
    int fd = dial();
    char head[256];
    int n =
        snprintf(head, sizeof(head), "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n",
                 HTTP_BODY_MAX + 10);
    send_all(fd, head, (size_t)n);
    char *chunk = calloc(1, 65536);
    memset(chunk, 'x', 65536);
    for (int sent = 0; sent < HTTP_BODY_MAX + 10;) {
        ssize_t k = send(fd, chunk, AB_MIN(65536, HTTP_BODY_MAX + 10 - sent), MSG_NOSIGNAL);
        if (k <= 0)
            break;
        sent += (int)k;
    }
    char *resp = read_until(fd, "}", 1, NULL);
    assert_non_null(strstr(resp, "HTTP/1.1 413"));
    assert_non_null(strstr(resp, "Connection: close"));
    assert_non_null(strstr(resp, "larger than 1048576 bytes"));
    free(resp);
    free(chunk);
    close(fd);
}

static void test_malformed_request_gets_400(void **state)
{
    int fd = dial();
    const char *req = "GET /x HTTP/1.1\r\nHost t\r\n\r\n";
    send_all(fd, req, strlen(req));
    char *resp = read_until(fd, "}", 1, NULL);
    assert_non_null(strstr(resp, "HTTP/1.1 400"));
    free(resp);
    close(fd);
}

static void test_unknown_route_404_and_wrong_method_405(void **state)
{
    int fd = dial();
    const char *req =
        "GET /nope HTTP/1.1\r\nHost: t\r\n\r\nDELETE /echo HTTP/1.1\r\nHost: t\r\n\r\n";
    send_all(fd, req, strlen(req));
    char body[512];
    int status;
    read_response(fd, &status, body, sizeof(body));
    assert_int_equal(status, 404);
    assert_non_null(strstr(body, "\"code\":404"));
    read_response(fd, &status, body, sizeof(body));
    assert_int_equal(status, 405);
    assert_non_null(strstr(body, "\"code\":405"));
    close(fd);
}

static void wait_for_abort(int before)
{
    for (int i = 0; i < 500 && atomic_load(&g_stream_aborts) == before; i++)
        usleep(10000);
}

static void test_streaming_body_and_disconnect_mid_body(void **state)
{
    int fd = dial();
    const char *req = "POST /stream HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    send_all(fd, req, strlen(req));
    char chunk[8192 + 16];
    int n = sprintf(chunk, "2000\r\n");
    memset(chunk + n, 'z', 8192);
    n += 8192;
    n += sprintf(chunk + n, "\r\n");
    for (int i = 0; i < 100; i++)
        send_all(fd, chunk, (size_t)n);
    send_all(fd, "0\r\n\r\n", 5);
    char body[64];
    int status;
    read_response(fd, &status, body, sizeof(body));
    assert_int_equal(status, 200);
    assert_string_equal(body, "got 819200"); /* what the handler counted, as it answered */
    assert_int_equal(atomic_load(&g_stream_bytes), 819200);
    close(fd);

    /* a client that goes away mid-body: the handler is told, nothing leaks */
    int before = atomic_load(&g_stream_aborts);
    fd = dial();
    send_all(fd, req, strlen(req));
    send_all(fd, chunk, (size_t)n);
    close(fd);
    wait_for_abort(before);
    assert_int_equal(atomic_load(&g_stream_aborts), before + 1);
}

/* --- client --------------------------------------------------------------------------- */

struct client_result {
    atomic_int done;
    int status;
    int err;
    char body[4096];
    size_t len;
};

static void c_head(struct http_client *c, int status, const struct http_header *h, int n, void *a)
{
    ((struct client_result *)a)->status = status;
}

static void c_data(struct http_client *c, const void *d, size_t len, void *a)
{
    struct client_result *r = a;
    size_t k = AB_MIN(len, sizeof(r->body) - 1 - r->len);
    memcpy(r->body + r->len, d, k);
    r->len += k;
}

static void c_end(struct http_client *c, void *a)
{
    atomic_store(&((struct client_result *)a)->done, 1);
}

static void c_error(struct http_client *c, int err, const char *msg, void *a)
{
    struct client_result *r = a;
    r->err = err;
    atomic_store(&r->done, 1);
}

static const struct http_client_handler client_h = {c_head, c_data, c_end, c_error, NULL};

struct client_job {
    struct http_client_options o;
    struct client_result *r;
    const char *body;
};

static void start_client(void *arg, int status)
{
    struct client_job *j = arg;
    struct http_client *c = http_client_start(g_loop, &j->o, &client_h, j->r);
    if (j->body) {
        http_client_write(c, j->body, 3);
        http_client_write(c, j->body + 3, strlen(j->body) - 3);
        http_client_end(c);
    }
}

static void run_client(struct client_job *j)
{
    assert_int_equal(loop_post(g_loop, start_client, j), 0);
    for (int i = 0; i < 1000 && !atomic_load(&j->r->done); i++)
        usleep(5000);
    assert_true(atomic_load(&j->r->done));
}

static void test_client_get_and_chunked_post(void **state)
{
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", g_port);
    struct client_result r1 = {0};
    struct client_job j1 = {{.addr = addr, .method = "GET", .target = "/items/42?q=a"}, &r1, NULL};
    run_client(&j1);
    assert_int_equal(r1.status, 200);
    r1.body[r1.len] = '\0';
    assert_string_equal(r1.body, "id=42 q=a");

    struct client_result r2 = {0};
    struct client_job j2 = {
        {.addr = addr, .method = "POST", .target = "/echo", .content_length = -1},
        &r2,
        "streamed body"};
    run_client(&j2);
    assert_int_equal(r2.status, 200);
    r2.body[r2.len] = '\0';
    assert_string_equal(r2.body, "streamed body");

    struct client_result r3 = {0};
    struct client_job j3 = {{.addr = addr, .method = "GET", .target = "/chunks"}, &r3, NULL};
    run_client(&j3);
    r3.body[r3.len] = '\0';
    assert_string_equal(r3.body, "one,two,three");
}

static void test_client_connect_refused_reports_error(void **state)
{
    struct client_result r = {0};
    struct client_job j = {
        {.addr = "unix:/nonexistent/agentbox.sock", .method = "GET", .target = "/"}, &r, NULL};
    run_client(&j);
    assert_int_equal(r.err, AB_EIO);
    assert_int_equal(r.status, 0);
}

/* A server on a unix socket, reached by the client with "unix:<path>". */
struct unix_job {
    struct http_server *srv;
    char path[64];
    int rc;
    atomic_int started;
};

static void start_unix_server(void *arg, int status)
{
    struct unix_job *j = arg;
    char err[256];
    struct http_server_options o = {.listen = NULL, .router = g_router, .name = "u"};
    char listen[80];
    snprintf(listen, sizeof(listen), "unix:%s", j->path);
    o.listen = listen;
    j->rc = http_server_start(g_loop, &o, &j->srv, err, sizeof(err));
    atomic_store(&j->started, 1);
}

static void stop_unix_server(void *arg, int status)
{
    struct unix_job *j = arg;
    http_server_stop(j->srv);
    atomic_store(&j->started, 2);
}

static void test_unix_socket_server_and_client(void **state)
{
    struct unix_job j = {0};
    snprintf(j.path, sizeof(j.path), "/tmp/abx-http-test-%d.sock", (int)getpid());
    assert_int_equal(loop_post(g_loop, start_unix_server, &j), 0);
    for (int i = 0; i < 1000 && !atomic_load(&j.started); i++)
        usleep(2000);
    assert_int_equal(j.rc, 0);
    char addr[80];
    snprintf(addr, sizeof(addr), "unix:%s", j.path);
    for (int k = 0; k < 3; k++) {
        struct client_result r = {0};
        struct client_job cj = {
            {.addr = addr, .method = "GET", .target = "/items/u?q=1"}, &r, NULL};
        run_client(&cj);
        assert_int_equal(r.status, 200);
        r.body[r.len] = '\0';
        assert_string_equal(r.body, "id=u q=1");
    }
    assert_int_equal(loop_post(g_loop, stop_unix_server, &j), 0);
    for (int i = 0; i < 1000 && atomic_load(&j.started) != 2; i++)
        usleep(2000);
    assert_int_equal(access(j.path, F_OK), -1); /* the socket file is removed */
}

/* --- route specificity (no sockets: a recording transport) -------------------------- */

struct rec {
    int status;
    bool finished;
};

static int rec_head(void *t, int status, const struct http_header *h, int n, int64_t len)
{
    (void)h, (void)n, (void)len;
    ((struct rec *)t)->status = status;
    return 0;
}
static int rec_body(void *t, const void *d, size_t len)
{
    (void)t, (void)d, (void)len;
    return 0;
}
static int rec_end(void *t)
{
    (void)t;
    return 0;
}
static size_t rec_pending(void *t)
{
    (void)t;
    return 0;
}
static void rec_pause(void *t, bool p)
{
    (void)t, (void)p;
}
static void rec_abort(void *t)
{
    (void)t;
}
static void rec_finished(void *t)
{
    ((struct rec *)t)->finished = true;
}
static const struct http_transport_ops rec_ops = {rec_head,  rec_body,  rec_end,      rec_pending,
                                                  rec_pause, rec_abort, rec_finished, NULL};

static const char *g_winner;
static char g_winner_param[64];

/* Records which route answered (its arg names it) and the first param it saw. */
static void h_named(struct http_exchange *ex, void *arg)
{
    const struct http_request *r = http_req(ex);
    g_winner = arg;
    snprintf(g_winner_param, sizeof(g_winner_param), "%s",
             r->nparams > 0 ? r->param_values[0] : "");
    http_respond(ex, 200, "text/plain", "", 0, NULL, 0);
}

/* Routes a request through a router built from routes (in the given order
 * or reversed) and returns the name of the route that answered, or "404"/"405". */
static const char *route_winner(const struct http_route *table, size_t n, bool reversed,
                                const char *method, const char *path)
{
    struct http_route copy[8];
    struct rec t = {0};
    struct http_request head = {0};

    assert_true(n <= AB_ARRAY_LEN(copy));
    for (size_t i = 0; i < n; i++)
        copy[i] = table[reversed ? n - 1 - i : i];
    struct http_router *r = http_router_new(copy, n);
    assert_non_null(r);
    head.method = method;
    head.target = path;
    head.path = path;
    head.query = "";
    head.peer = "test";
    g_winner = NULL;
    g_winner_param[0] = '\0';
    struct http_exchange *ex = http_exchange_new(r, &head, &rec_ops, &t);
    assert_non_null(ex);
    http_exchange_start(ex);
    http_exchange_body_end(ex);
    assert_true(t.finished);
    http_exchange_release(ex);
    http_router_free(r);
    if (g_winner != NULL)
        return g_winner;
    return t.status == 405 ? "405" : "404";
}

static void test_router_picks_most_specific_route_in_any_order(void **state)
{
    (void)state;
    static const struct http_route shapes[] = {
        {"*", "/e2b/{*rest}", h_named, "rest", 0},
        {"*", "/e2b/sandboxes/{id}", h_named, "id", 0},
        {"*", "/e2b/sandboxes/{id}/{*rest}", h_named, "id-rest", 0},
        {"GET", "/e2b/sandboxes/metrics", h_named, "metrics", 0},
        {"POST", "/e2b/sandboxes", h_named, "create", 0},
        {"GET", "/e2b/sandboxes/{id}/logs", h_named, "logs", 0},
        {"*", "/e2b/sandboxes/{id}/logs", h_named, "any-logs", 0},
        {"GET", "/e2b/{kind}/metrics", h_named, "kind-metrics", 0},
    };
    static const struct {
        const char *method, *path, *winner, *param;
    } cases[] = {
        {"GET", "/e2b/sandboxes/metrics", "metrics", ""},    /* literal beats {id} */
        {"POST", "/e2b/sandboxes/metrics", "id", "metrics"}, /* the literal is GET only */
        {"GET", "/e2b/sandboxes/abc", "id", "abc"},          /* {id} beats {*rest} */
        {"DELETE", "/e2b/sandboxes/abc", "id", "abc"},
        {"GET", "/e2b/sandboxes/abc/files", "id-rest", "abc"},
        {"GET", "/e2b/sandboxes/abc/logs", "logs", "abc"}, /* named method beats "*" */
        {"PUT", "/e2b/sandboxes/abc/logs", "any-logs", "abc"},
        {"POST", "/e2b/sandboxes", "create", ""}, /* literal beats {*rest} */
        {"GET", "/e2b/sandboxes", "rest", "sandboxes"},
        {"GET", "/e2b/templates/metrics", "kind-metrics", "templates"}, /* {kind} beats {*rest} */
        {"GET", "/e2b/templates", "rest", "templates"},
        {"GET", "/other", "404", ""},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
        for (int rev = 0; rev < 2; rev++) {
            const char *w =
                route_winner(shapes, AB_ARRAY_LEN(shapes), rev, cases[i].method, cases[i].path);
            if (strcmp(w, cases[i].winner) != 0)
                fail_msg("%s %s (%s order): got %s, want %s", cases[i].method, cases[i].path,
                         rev ? "reversed" : "registration", w, cases[i].winner);
            assert_string_equal(g_winner_param, cases[i].param);
        }
    }
}

static void test_router_keeps_registration_order_for_identical_shapes(void **state)
{
    (void)state;
    static const struct http_route shapes[] = {
        {"GET", "/a/{x}", h_named, "first", 0},
        {"GET", "/a/{y}", h_named, "second", 0},
    };
    assert_string_equal(route_winner(shapes, 2, false, "GET", "/a/1"), "first");
    assert_string_equal(route_winner(shapes, 2, true, "GET", "/a/1"), "second");
    assert_string_equal(route_winner(shapes, 2, false, "POST", "/a/1"), "405");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_answers_leave_without_a_writable_round),
        cmocka_unit_test(test_route_params_and_query),
        cmocka_unit_test(test_chunked_request_body),
        cmocka_unit_test(test_pipelined_requests_answer_in_order),
        cmocka_unit_test(test_oversized_head_gets_431),
        cmocka_unit_test(test_oversized_body_gets_413),
        cmocka_unit_test(test_malformed_request_gets_400),
        cmocka_unit_test(test_unknown_route_404_and_wrong_method_405),
        cmocka_unit_test(test_streaming_body_and_disconnect_mid_body),
        cmocka_unit_test(test_client_get_and_chunked_post),
        cmocka_unit_test(test_client_connect_refused_reports_error),
        cmocka_unit_test(test_unix_socket_server_and_client),
        cmocka_unit_test(test_router_picks_most_specific_route_in_any_order),
        cmocka_unit_test(test_router_keeps_registration_order_for_identical_shapes),
    };
    return cmocka_run_group_tests_name("http", tests, setup, teardown);
}
