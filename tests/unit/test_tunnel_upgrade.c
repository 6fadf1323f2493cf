/* The tunnel's own WebSocket upgrade (tunnel_upgrade.h) and the wslay
 * binding's receive side (tunnel_wsl.h, no socket: wsi is NULL): the RFC
 * 6455 accept, every refusal with its status, a head fed a byte at a time,
 * fragmented and masked messages reassembled for the session, and what must
 * close the connection (a text frame, an unmasked client frame, a message
 * over 1 MiB, a close frame). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"
#include "agentbox/tunnel_upgrade.h"
#include "agentbox/tunnel_wsl.h"

/* --- upgrade ------------------------------------------------------------------- */

static void test_accept_of_rfc_sample(void **state)
{
    char out[TUN_UPGRADE_ACCEPT_LEN + 1];
    /* RFC 6455 §1.3 */
    tun_upgrade_accept_of("dGhlIHNhbXBsZSBub25jZQ==", out);
    assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

/* Feeds text to a fresh request reader in pieces of step bytes; returns the
 * reader (complete) and the bytes of text that were the head. */
static struct tun_upgrade_reader *read_head(const char *text, size_t len, size_t step, bool resp,
                                            size_t *head_len)
{
    struct tun_upgrade_reader *rd = tun_upgrade_reader_new(resp);
    assert_non_null(rd);
    size_t off = 0;
    for (;;) {
        assert_true(off < len);
        size_t n = AB_MIN(step, len - off), used = 0;
        int status = 0;
        const char *why = NULL;
        int rc = tun_upgrade_reader_feed(rd, text + off, n, &used, &status, &why);
        assert_true(rc >= 0);
        off += used;
        if (rc == 1)
            break;
        assert_int_equal(used, n);
    }
    *head_len = off;
    return rd;
}

static void test_request_round_trip(void **state)
{
    char key[TUN_UPGRADE_KEY_LEN + 1], req[1024], acc[TUN_UPGRADE_ACCEPT_LEN + 1],
        want[TUN_UPGRADE_ACCEPT_LEN + 1];
    assert_int_equal(tun_upgrade_key(key), 0);
    assert_int_equal(strlen(key), TUN_UPGRADE_KEY_LEN);
    int n = tun_upgrade_request(req, sizeof(req), "hub.example", 7701, key, "Bearer abxc_t", "c1");
    assert_true(n > 0);
    /* WebSocket bytes right behind the head stay for the framing */
    char buf[1100];
    memcpy(buf, req, (size_t)n);
    memcpy(buf + n, "\x82\x80", 2);
    for (size_t step = 1; step <= 2048; step = step * 7 + 1) {
        size_t head = 0;
        struct tun_upgrade_reader *rd = read_head(buf, (size_t)n + 2, step, false, &head);
        assert_int_equal(head, (size_t)n);
        const struct http_request *r = tun_upgrade_reader_head(rd, NULL);
        int status = 0;
        const char *why = NULL;
        assert_int_equal(tun_upgrade_check_request(r, acc, &status, &why), 0);
        tun_upgrade_accept_of(key, want);
        assert_string_equal(acc, want);
        assert_string_equal(http_header_get(r, "Host"), "hub.example:7701");
        assert_string_equal(http_header_get(r, "Authorization"), "Bearer abxc_t");
        assert_string_equal(http_header_get(r, "X-AgentBox-Cluster"), "c1");
        tun_upgrade_reader_free(rd);
    }
    /* the default port is left out of Host, as lws did */
    n = tun_upgrade_request(req, sizeof(req), "hub.example", 443, key, "Bearer x", "c1");
    assert_non_null(strstr(req, "Host: hub.example\r\n"));
    /* never written cut */
    assert_int_equal(tun_upgrade_request(req, 64, "hub.example", 7701, key, "Bearer x", "c1"),
                     AB_ELIMIT);
}

struct refusal {
    const char *text;
    int status;
    const char *why;
};

static void test_request_refusals(void **state)
{
#define H "Host: h\r\n"
#define UP "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
#define KEY "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
#define VER "Sec-WebSocket-Version: 13\r\n"
#define PROTO "Sec-WebSocket-Protocol: other, agentbox.tunnel.v1\r\n"
    static const struct refusal cases[] = {
        {"GET /v1/tunnel HTTP/1.1\r\n" H KEY VER PROTO "\r\n", 426, "this port speaks"},
        {"GET /v1/tunnel HTTP/1.1\r\n" H "Upgrade: h2c\r\nConnection: upgrade\r\n" KEY VER PROTO
         "\r\n",
         426, "this port speaks"},
        {"GET /v1/other HTTP/1.1\r\n" H UP KEY VER PROTO "\r\n", 404, "lives at /v1/tunnel"},
        {"POST /v1/tunnel HTTP/1.1\r\n" H UP KEY VER PROTO "Content-Length: 0\r\n\r\n", 400,
         "is a GET"},
        {"GET /v1/tunnel HTTP/1.1\r\n" H UP KEY "Sec-WebSocket-Version: 8\r\n" PROTO "\r\n", 400,
         "Version must be 13"},
        {"GET /v1/tunnel HTTP/1.1\r\n" H UP VER PROTO "\r\n", 400, "Sec-WebSocket-Key"},
        {"GET /v1/tunnel HTTP/1.1\r\n" H UP "Sec-WebSocket-Key: c2hvcnQ=\r\n" VER PROTO "\r\n", 400,
         "Sec-WebSocket-Key"},
        {"GET /v1/tunnel HTTP/1.1\r\n" H UP KEY VER "\r\n", 400, "agentbox.tunnel.v1"},
        {"GET /v1/tunnel HTTP/1.1\r\n" H UP KEY VER "Sec-WebSocket-Protocol: agentbox.tunnel.v2\r\n"
         "\r\n",
         400, "agentbox.tunnel.v1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t head = 0;
        struct tun_upgrade_reader *rd =
            read_head(cases[i].text, strlen(cases[i].text), 4096, false, &head);
        const struct http_request *r = tun_upgrade_reader_head(rd, NULL);
        char acc[TUN_UPGRADE_ACCEPT_LEN + 1];
        int status = 0;
        const char *why = NULL;
        assert_int_equal(tun_upgrade_check_request(r, acc, &status, &why), AB_EINVAL);
        assert_int_equal(status, cases[i].status);
        assert_non_null(strstr(why, cases[i].why));
        tun_upgrade_reader_free(rd);
    }
    /* the sample request of the RFC passes (Connection lists more than one token) */
    const char *ok = "GET /v1/tunnel HTTP/1.1\r\n" H UP KEY VER PROTO "\r\n";
    size_t head = 0;
    struct tun_upgrade_reader *rd = read_head(ok, strlen(ok), 4096, false, &head);
    char acc[TUN_UPGRADE_ACCEPT_LEN + 1];
    int status = 0;
    const char *why = NULL;
    assert_int_equal(
        tun_upgrade_check_request(tun_upgrade_reader_head(rd, NULL), acc, &status, &why), 0);
    assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    tun_upgrade_reader_free(rd);
}

static void test_malformed_and_oversized_heads(void **state)
{
    struct tun_upgrade_reader *rd = tun_upgrade_reader_new(false);
    size_t used = 0;
    int status = 0;
    const char *why = NULL;
    const char *bad = "GET /v1/tunnel HTTP/1.1\r\nno colon here\r\n\r\n";
    assert_int_equal(tun_upgrade_reader_feed(rd, bad, strlen(bad), &used, &status, &why),
                     AB_EINVAL);
    assert_true(status >= 400);
    tun_upgrade_reader_free(rd);

    /* a head that never ends is refused at the bound, not buffered */
    rd = tun_upgrade_reader_new(false);
    const char *start = "GET /v1/tunnel HTTP/1.1\r\n";
    assert_int_equal(tun_upgrade_reader_feed(rd, start, strlen(start), &used, &status, &why), 0);
    char line[1024];
    snprintf(line, sizeof(line), "X-Pad: %01000d\r\n", 0);
    int rc = 0;
    for (int i = 0; i < 64 && rc == 0; i++)
        rc = tun_upgrade_reader_feed(rd, line, strlen(line), &used, &status, &why);
    assert_int_equal(rc, AB_EINVAL);
    assert_int_equal(status, 431);
    tun_upgrade_reader_free(rd);
}

static void test_response_checks(void **state)
{
    const char *key = "dGhlIHNhbXBsZSBub25jZQ==";
    char acc[TUN_UPGRADE_ACCEPT_LEN + 1], resp[512], why[160];
    tun_upgrade_accept_of(key, acc);
    int n = tun_upgrade_response(resp, sizeof(resp), acc);
    assert_true(n > 0);
    size_t head = 0;
    int status = 0;
    struct tun_upgrade_reader *rd = read_head(resp, (size_t)n, 3, true, &head);
    assert_int_equal(head, (size_t)n);
    const struct http_request *h = tun_upgrade_reader_head(rd, &status);
    assert_int_equal(status, 101);
    assert_int_equal(tun_upgrade_check_response(status, h, key, why, sizeof(why)), 0);
    /* an answer made for another key is refused */
    assert_int_equal(
        tun_upgrade_check_response(status, h, "AAAAAAAAAAAAAAAAAAAAAA==", why, sizeof(why)),
        AB_EINVAL);
    assert_non_null(strstr(why, "Sec-WebSocket-Accept"));
    tun_upgrade_reader_free(rd);

    /* a refusal: its status, for the caller's message */
    char body[512];
    n = tun_upgrade_refusal(body, sizeof(body), 401, "wrong \"token\"");
    assert_true(n > 0);
    assert_non_null(strstr(body, "{\"code\":401,\"message\":\"wrong \\\"token\\\"\"}"));
    rd = read_head(body, (size_t)n, 5, true, &head);
    h = tun_upgrade_reader_head(rd, &status);
    assert_int_equal(status, 401);
    assert_int_equal(tun_upgrade_check_response(status, h, key, why, sizeof(why)), AB_EDENIED);
    tun_upgrade_reader_free(rd);

    /* 101 without the subprotocol */
    const char *noproto = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                          "Connection: Upgrade\r\nSec-WebSocket-Accept: "
                          "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    rd = read_head(noproto, strlen(noproto), 100, true, &head);
    h = tun_upgrade_reader_head(rd, &status);
    assert_int_equal(tun_upgrade_check_response(status, h, key, why, sizeof(why)), AB_EINVAL);
    assert_non_null(strstr(why, "subprotocol"));
    tun_upgrade_reader_free(rd);
}

/* --- wslay binding, receive side --------------------------------------------------- */

static int hellos;
static char hello_cluster[64];

static void cb_hello(struct tun_session *s, json_t *msg, void *arg)
{
    hellos++;
    const char *c = json_string_value(json_object_get(msg, "cluster"));
    snprintf(hello_cluster, sizeof(hello_cluster), "%s", c ? c : "");
}

struct hub_end {
    struct tun_wsl w;
    struct tun_session *s;
    struct tun_callbacks cb;
};

static void hub_end_init(struct hub_end *h)
{
    char err[128];
    memset(h, 0, sizeof(*h));
    tun_ep_callbacks_init(&h->cb);
    h->cb.on_hello = cb_hello;
    struct tun_config c = {.role = TUN_ROLE_HUB, .cb = &h->cb, .arg = h};
    assert_int_equal(tun_session_new(&c, &h->s, err, sizeof(err)), 0);
    assert_int_equal(tun_wsl_init(&h->w, NULL, true), 0);
    tun_wsl_start(&h->w, h->s);
    hellos = 0;
}

static void hub_end_fini(struct hub_end *h)
{
    tun_wsl_fini(&h->w);
    tun_session_free(h->s);
}

/* One WebSocket frame as a client sends it (masked unless mask is false). */
static size_t ws_frame(uint8_t *out, int fin, int opcode, const uint8_t *p, size_t n, bool mask)
{
    size_t o = 0;
    out[o++] = (uint8_t)((fin ? 0x80 : 0) | opcode);
    uint8_t m = mask ? 0x80 : 0;
    if (n < 126) {
        out[o++] = (uint8_t)(m | n);
    } else if (n < 65536) {
        out[o++] = m | 126;
        out[o++] = (uint8_t)(n >> 8);
        out[o++] = (uint8_t)n;
    } else {
        out[o++] = m | 127;
        for (int i = 7; i >= 0; i--)
            out[o++] = (uint8_t)((uint64_t)n >> (8 * i));
    }
    const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
    if (mask) {
        memcpy(out + o, key, 4);
        o += 4;
    }
    for (size_t i = 0; i < n; i++)
        out[o + i] = mask ? p[i] ^ key[i % 4] : p[i];
    return o + n;
}

static size_t hello_frame(uint8_t *out)
{
    const char *json = "{\"cluster\":\"c1\",\"version\":\"t\",\"protocol\":1}";
    struct tun_frame f = {.type = TUN_HELLO, .payload = (const uint8_t *)json, .len = strlen(json)};
    size_t len = 0;
    assert_int_equal(tun_frame_encode(out, 256, &f, &len), 0);
    return len;
}

static void test_fragmented_masked_message(void **state)
{
    struct hub_end h;
    hub_end_init(&h);
    uint8_t msg[256], wire[1024];
    size_t mlen = hello_frame(msg);
    /* three fragments with a ping in the middle, fed a byte at a time */
    size_t o = ws_frame(wire, 0, 0x2, msg, 5, true);
    o += ws_frame(wire + o, 1, 0x9, (const uint8_t *)"hi", 2, true);
    o += ws_frame(wire + o, 0, 0x0, msg + 5, 10, true);
    o += ws_frame(wire + o, 1, 0x0, msg + 15, mlen - 15, true);
    for (size_t i = 0; i < o; i++)
        assert_int_equal(tun_wsl_rx(&h.w, wire + i, 1), 0);
    assert_int_equal(hellos, 1);
    assert_string_equal(hello_cluster, "c1");
    /* wslay answered the ping itself: a pong waits for WRITEABLE */
    assert_true(h.w.fail == 0);
    hub_end_fini(&h);
}

static void test_refused_frames(void **state)
{
    uint8_t msg[256], wire[1024];
    size_t mlen = hello_frame(msg);
    struct hub_end h;

    /* a text frame is not part of the protocol */
    hub_end_init(&h);
    size_t o = ws_frame(wire, 1, 0x1, (const uint8_t *)"{}", 2, true);
    assert_int_equal(tun_wsl_rx(&h.w, wire, o), AB_EINVAL);
    assert_non_null(strstr(h.w.err, "text frames"));
    assert_int_equal(hellos, 0);
    hub_end_fini(&h);

    /* a client must mask: an unmasked frame to the hub is a protocol error */
    hub_end_init(&h);
    o = ws_frame(wire, 1, 0x2, msg, mlen, false);
    assert_true(tun_wsl_rx(&h.w, wire, o) < 0);
    assert_int_equal(hellos, 0);
    hub_end_fini(&h);

    /* a frame that is no tunnel frame: the session's error closes */
    hub_end_init(&h);
    o = ws_frame(wire, 1, 0x2, (const uint8_t *)"\x09\x01\x00\x00", 4, true);
    assert_true(tun_wsl_rx(&h.w, wire, o) < 0);
    assert_non_null(h.w.err);
    hub_end_fini(&h);

    /* the peer's close frame: its code and reason */
    hub_end_init(&h);
    o = ws_frame(wire, 1, 0x8, (const uint8_t *)"\x03\xf0superseded", 12, true);
    assert_int_equal(tun_wsl_rx(&h.w, wire, o), AB_ECLOSED);
    assert_int_equal(h.w.peer_code, 1008);
    assert_string_equal(h.w.peer_reason, "superseded");
    hub_end_fini(&h);
}

static void test_message_over_limit(void **state)
{
    struct hub_end h;
    size_t n = TUN_FRAME_MAX / 2 + 16;
    uint8_t *p = calloc(1, n), *wire = malloc(n + 16);
    assert_non_null(p);
    assert_non_null(wire);

    /* one frame over the limit: refused from its header (1009) */
    hub_end_init(&h);
    uint8_t hdr[32] = {0x82, 0x80 | 127}; /* mask key 0, then some payload */
    uint64_t big = TUN_FRAME_MAX + 1;
    for (int i = 0; i < 8; i++)
        hdr[2 + i] = (uint8_t)(big >> (8 * (7 - i)));
    assert_int_equal(tun_wsl_rx(&h.w, hdr, sizeof(hdr)), AB_ELIMIT);
    assert_non_null(strstr(h.w.err, "over the 1048584-byte limit"));
    assert_true(h.w.close_queued); /* 1009 goes out first */
    hub_end_fini(&h);

    /* two fragments each under it, together over: refused at the end */
    hub_end_init(&h);
    size_t o = ws_frame(wire, 0, 0x2, p, n, true);
    assert_int_equal(tun_wsl_rx(&h.w, wire, o), 0);
    o = ws_frame(wire, 1, 0x0, p, n, true);
    assert_int_equal(tun_wsl_rx(&h.w, wire, o), AB_ELIMIT);
    assert_int_equal(hellos, 0);
    hub_end_fini(&h);
    free(p);
    free(wire);
}

/* --- both ends, through the shims ----------------------------------------------------- */

static int welcomes, reports;
static size_t report_len;

static void cb_welcome(struct tun_session *s, json_t *msg, void *arg)
{
    welcomes++;
}

static void cb_report(struct tun_session *s, json_t *msg, void *arg)
{
    reports++;
    report_len = strlen(json_string_value(json_object_get(msg, "pad")));
}

struct end {
    struct tun_wsl w;
    struct tun_session *s;
    struct tun_callbacks cb;
};

static void end_init(struct end *e, bool hub)
{
    char err[128];
    memset(e, 0, sizeof(*e));
    tun_ep_callbacks_init(&e->cb);
    e->cb.on_hello = cb_hello;
    e->cb.on_welcome = cb_welcome;
    e->cb.on_report = cb_report;
    struct tun_config c = {.role = hub ? TUN_ROLE_HUB : TUN_ROLE_AGENT, .cb = &e->cb, .arg = e};
    assert_int_equal(tun_session_new(&c, &e->s, err, sizeof(err)), 0);
    assert_int_equal(tun_wsl_init(&e->w, NULL, hub), 0);
    tun_wsl_start(&e->w, e->s);
}

static void end_fini(struct end *e)
{
    tun_wsl_fini(&e->w);
    tun_session_free(e->s);
}

/* Encodes what from has and feeds it to to in pieces of step bytes; returns
 * to's last tun_wsl_rx code. mask says whether every frame must be masked. */
static int pump(struct end *from, struct end *to, size_t step, bool mask)
{
    int rc = 0;
    for (int rounds = 0; rounds < 64; rounds++) {
        assert_int_equal(tun_wsl_encode(&from->w), 0);
        if (from->w.outlen == 0)
            break;
        if (rounds == 0) /* later outs may start inside a payload */
            assert_int_equal((from->w.out[1] & 0x80) != 0, mask);
        for (size_t o = 0; o < from->w.outlen && rc == 0; o += step)
            rc = tun_wsl_rx(&to->w, from->w.out + o, AB_MIN(step, from->w.outlen - o));
        from->w.outlen = 0;
    }
    return rc;
}

static void test_round_trip_through_both_ends(void **state)
{
    struct end agent, hub;
    end_init(&agent, false);
    end_init(&hub, true);
    hellos = welcomes = reports = 0;

    json_t *hello = json_pack("{s:s,s:s,s:i}", "cluster", "c9", "version", "t", "protocol", 1);
    assert_int_equal(tun_session_send_json(agent.s, TUN_HELLO, hello), 0);
    json_decref(hello);
    assert_int_equal(pump(&agent, &hub, 3, true), 0);
    assert_int_equal(hellos, 1);
    assert_string_equal(hello_cluster, "c9");

    json_t *welcome = json_pack("{s:s,s:i,s:i}", "cluster", "c9", "epoch", 1, "protocol", 1);
    assert_int_equal(tun_session_send_json(hub.s, TUN_WELCOME, welcome), 0);
    json_decref(welcome);
    assert_int_equal(pump(&hub, &agent, 5, false), 0);
    assert_int_equal(welcomes, 1);

    /* a report near 1 MiB: masked in pieces over several encodes, the key
     * rotating across them, and fed to the hub's shim at odd sizes */
    size_t n = TUN_REPORT_MAX - 64;
    char *pad = malloc(n + 1);
    assert_non_null(pad);
    for (size_t i = 0; i < n; i++)
        pad[i] = (char)('a' + i % 23);
    pad[n] = '\0';
    json_t *report = json_pack("{s:s}", "pad", pad);
    free(pad);
    assert_int_equal(tun_session_send_json(agent.s, TUN_REPORT, report), 0);
    json_decref(report);
    assert_int_equal(pump(&agent, &hub, 4093, true), 0);
    assert_int_equal(reports, 1);
    assert_int_equal(report_len, n);

    /* sizes for every header length of the direct encoder: 7-bit (HELLO
     * above), 16-bit and 64-bit lengths that fit the output buffer */
    size_t sizes[] = {1000, 70000, 200000};
    for (size_t k = 0; k < 3; k++) {
        char *q = malloc(sizes[k] + 1);
        assert_non_null(q);
        memset(q, 'q', sizes[k]);
        q[sizes[k]] = '\0';
        json_t *r = json_pack("{s:s}", "pad", q);
        free(q);
        assert_int_equal(tun_session_send_json(agent.s, TUN_REPORT, r), 0);
        json_decref(r);
        assert_int_equal(pump(&agent, &hub, 65537, true), 0);
        assert_int_equal(reports, (int)k + 2);
        assert_int_equal(report_len, sizes[k]);
    }

    /* ping from the agent: the hub's answer carries the payload back */
    tun_wsl_ping(&agent.w);
    assert_int_equal(pump(&agent, &hub, 1, true), 0);
    assert_int_equal(pump(&hub, &agent, 1, false), 0);
    assert_int_equal(agent.w.ping_sent_us, 0);
    assert_true(agent.w.last_rtt_us > 0);

    /* the hub closes with a reason; the agent reads it and answers */
    tun_wsl_close(&hub.w, 1008, "superseded");
    assert_int_equal(pump(&hub, &agent, 2, false), AB_ECLOSED);
    assert_int_equal(agent.w.peer_code, 1008);
    assert_string_equal(agent.w.peer_reason, "superseded");
    assert_int_equal(pump(&agent, &hub, 2, true), AB_ECLOSED);
    assert_int_equal(hub.w.peer_code, 1008);

    end_fini(&agent);
    end_fini(&hub);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accept_of_rfc_sample),
        cmocka_unit_test(test_request_round_trip),
        cmocka_unit_test(test_request_refusals),
        cmocka_unit_test(test_malformed_and_oversized_heads),
        cmocka_unit_test(test_response_checks),
        cmocka_unit_test(test_fragmented_masked_message),
        cmocka_unit_test(test_refused_frames),
        cmocka_unit_test(test_message_over_limit),
        cmocka_unit_test(test_round_trip_through_both_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
