/* tunnel_wsl's write scheduling on real sockets (issue 17: a loop turn per
 * hop on every forward): a hub end and an agent end, both lws raw sockets on
 * one loop over loopback TCP, run the handshake; a stream the hub opens is
 * answered RESPONSE + DATA + END from the agent's on_open. The answer must
 * leave in one socket write, written at the next loop turn without a
 * RAW_WRITEABLE round, and both tunnel sockets must have TCP_NODELAY. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agentbox/common.h"
#include "agentbox/loop.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"
#include "agentbox/tunnel_wsl.h"

#include <arpa/inet.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROTO "ab-test-wsl"
#define BODY "{\"sandboxID\":\"beta-1\"}"

struct end {
    struct tun_wsl w;
    struct tun_session *s;
    struct tun_callbacks cb;
    struct lws *wsi;
    bool hub;
};

static struct end hub_end, agent_end;
static int got_response, got_end;
static char got_body[128];
static size_t got_len;

static struct end *end_of(struct lws *wsi)
{
    return lws_get_opaque_user_data(wsi);
}

static void want_write(struct tun_session *s, void *arg)
{
    struct end *e = arg;
    if (e->wsi)
        tun_wsl_want_write(&e->w);
}

static void on_hello(struct tun_session *s, json_t *msg, void *arg)
{
    json_t *w = json_pack("{s:i}", "epoch", 1);
    assert_int_equal(tun_session_send_json(s, TUN_WELCOME, w), 0);
    json_decref(w);
}

/* The agent answers whole, in one callback, as a buffered handler does. */
static void on_open(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    char len[16];
    snprintf(len, sizeof(len), "%zu", strlen(BODY));
    struct tun_header h[] = {{"Content-Type", "application/json"}, {"Content-Length", len}};
    assert_int_equal(tun_stream_respond(st, 201, h, 2), 0);
    assert_int_equal(tun_stream_write(st, BODY, strlen(BODY)), 0);
    assert_int_equal(tun_stream_end(st), 0);
}

static void on_response(struct tun_stream *st, const struct tun_head *h, void *arg)
{
    got_response = h->status;
}

static void on_data(struct tun_stream *st, const uint8_t *d, size_t n, void *arg)
{
    if (got_len + n < sizeof(got_body)) {
        memcpy(got_body + got_len, d, n);
        got_len += n;
    }
    tun_stream_consumed(st, n);
}

static void on_end(struct tun_stream *st, void *arg)
{
    got_end++;
}

static int raw_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                  size_t len)
{
    struct end *e = end_of(wsi);
    if (!e)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_RAW_RX:
        return tun_wsl_rx(&e->w, in, len) < 0 ? -1 : 0;
    case LWS_CALLBACK_RAW_WRITEABLE:
        return tun_wsl_writeable(&e->w);
    case LWS_CALLBACK_RAW_CLOSE:
        e->wsi = NULL;
        return 0;
    default:
        return 0;
    }
}

static const struct lws_protocols protocols[] = {
    {PROTO, raw_cb, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void end_start(struct end *e, struct lws_vhost *vh, int fd, bool hub)
{
    char err[128];
    memset(e, 0, sizeof(*e));
    e->hub = hub;
    tun_ep_callbacks_init(&e->cb);
    e->cb.want_write = want_write;
    if (hub) {
        e->cb.on_hello = on_hello;
        e->cb.on_response = on_response;
        e->cb.on_data = on_data;
        e->cb.on_end = on_end;
    } else {
        e->cb.on_open = on_open;
    }
    struct tun_config c = {.role = hub ? TUN_ROLE_HUB : TUN_ROLE_AGENT, .cb = &e->cb, .arg = e};
    assert_int_equal(tun_session_new(&c, &e->s, err, sizeof(err)), 0);
    lws_sock_file_fd_type d = {.sockfd = fd};
    e->wsi = lws_adopt_descriptor_vhost(vh, LWS_ADOPT_SOCKET, d, PROTO, NULL);
    assert_non_null(e->wsi);
    lws_set_opaque_user_data(e->wsi, e);
    assert_int_equal(tun_wsl_init(&e->w, e->wsi, hub), 0);
    tun_wsl_start(&e->w, e->s);
}

static void end_stop(struct end *e)
{
    if (e->wsi)
        lws_set_opaque_user_data(e->wsi, NULL);
    tun_session_free(e->s);
    tun_wsl_fini(&e->w);
}

/* A connected loopback TCP pair, neither end with TCP_NODELAY. */
static void tcp_pair(int *a, int *b)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(l >= 0);
    assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
    *a = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(*a, (struct sockaddr *)&sa, sizeof(sa)), 0);
    *b = accept(l, NULL, NULL);
    assert_true(*b >= 0);
    close(l);
}

static int nodelay(struct lws *wsi)
{
    int v = 0;
    socklen_t n = sizeof(v);
    assert_int_equal(getsockopt(lws_get_socket_fd(wsi), IPPROTO_TCP, TCP_NODELAY, &v, &n), 0);
    return v;
}

/* Serves the loop until pred holds; fails after 2,000 turns (each turn waits
 * at most 10 ms for the socket). */
static void serve_until(struct lws_context *cx, bool (*pred)(void))
{
    for (int i = 0; i < 2000 && !pred(); i++)
        lws_service(cx, 10);
    assert_true(pred());
}

static bool established(void)
{
    return tun_session_is_established(hub_end.s) && tun_session_is_established(agent_end.s);
}

static bool answered(void)
{
    return got_end > 0;
}

static void test_answer_in_one_write_without_writeable(void **state)
{
    /* poll: this test turns the loop by hand with lws_service, which on a
     * libev (foreign) loop would run the event library's loop instead */
    struct loop *l = loop_new(&(struct loop_options){.kind = LOOP_POLL});
    assert_non_null(l);
    struct lws_context *cx = loop_lws(l);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.vhost_name = "wsl-test";
    struct lws_vhost *vh = lws_create_vhost(cx, &info);
    assert_non_null(vh);

    int a, b;
    tcp_pair(&a, &b);
    end_start(&hub_end, vh, a, true);
    end_start(&agent_end, vh, b, false);
    /* Nagle would hold a small answer behind an unacknowledged one */
    assert_int_equal(nodelay(hub_end.wsi), 1);
    assert_int_equal(nodelay(agent_end.wsi), 1);

    json_t *hello = json_pack("{s:s,s:s,s:i}", "cluster", "beta", "version", "test", "protocol", 1);
    assert_int_equal(tun_session_send_json(agent_end.s, TUN_HELLO, hello), 0);
    json_decref(hello);
    serve_until(cx, established);

    uint64_t writes0 = agent_end.w.writes, writeables0 = agent_end.w.writeables;
    struct tun_head head;
    memset(&head, 0, sizeof(head));
    head.service = "e2b";
    head.method = "POST";
    head.path = "/sandboxes";
    struct tun_stream *st;
    assert_int_equal(tun_stream_open(hub_end.s, &head, NULL, &st), 0);
    assert_int_equal(tun_stream_end(st), 0);
    serve_until(cx, answered);

    assert_int_equal(got_response, 201);
    assert_int_equal(got_len, strlen(BODY));
    assert_memory_equal(got_body, BODY, got_len);
    /* RESPONSE, DATA and END: one write, made at the next turn, no POLLOUT round */
    assert_int_equal(agent_end.w.writes - writes0, 1);
    assert_int_equal(agent_end.w.writeables - writeables0, 0);

    end_stop(&hub_end);
    end_stop(&agent_end);
    loop_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answer_in_one_write_without_writeable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
