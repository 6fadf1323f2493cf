/* tun_splice (shared/src/tunnel_http.c), the hub's relay, driven in memory:
 *
 *   opener ── session pair ── hub (in) ═ splice ═ hub (out) ── session pair ── target
 *
 * Four tun_sessions; frames are pumped by hand (as in test_tunnel_session.c).
 * The two hub sessions use tun_ep_callbacks_init and splice every stream the
 * opener opens onto the target. Covered: a request and its response pass
 * through with heads, headers and bodies intact; credit is passed through
 * (a receiver that does not consume stops the sender at the far end, and the
 * hub holds a bounded amount in between) in both directions; resets cross
 * in both directions with their code and message; a target that is down or
 * goes away mid-stream. tun_call is covered at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

#define BIG (8u * 1024 * 1024) /* far more than every window and buffer on the way */
#define CHUNK (16 * 1024)
#define UNAVAILABLE "cluster 'beta' is not reachable through the hub"

static uint8_t wire[TUN_FRAME_MAX];

/* ---- the two ends: recorders -------------------------------------------------------------- */

struct peer {
    struct tun_session *s;
    struct tun_stream *st; /* the one stream of a test; NULL once closed */
    bool consume;          /* consume DATA as it arrives */
    bool respond;          /* answer OPEN with 200 at once */
    int opens, responses, ends, resets, closes;
    int status;
    char service[16], path[128], hdr[64];
    char reset_code[TUN_RESET_CODE_MAX + 1], reset_msg[TUN_RESET_MESSAGE_MAX + 1];
    size_t rx, unconsumed;
    bool rx_bad; /* a byte off the pattern */
    char body[2048];
    size_t body_len;
};

static uint8_t pattern(size_t off)
{
    return (uint8_t)((off * 31 + 7) % 251);
}

static const char *header_of(const struct tun_head *h, const char *name)
{
    for (int i = 0; i < h->nheaders; i++)
        if (strcmp(h->headers[i].name, name) == 0)
            return h->headers[i].value;
    return NULL;
}

static void p_hello(struct tun_session *s, json_t *msg, void *arg)
{
    fail_msg("an end got HELLO");
}

static void p_welcome(struct tun_session *s, json_t *msg, void *arg)
{
}

static void p_open(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    struct peer *p = arg;
    const char *x = header_of(head, "X-Test");
    struct tun_header h = {"X-Back", "yes"};

    p->opens++;
    p->st = st;
    ab_strlcpy(p->service, head->service, sizeof(p->service));
    ab_strlcpy(p->path, head->path, sizeof(p->path));
    ab_strlcpy(p->hdr, x ? x : "", sizeof(p->hdr));
    if (p->respond)
        assert_int_equal(tun_stream_respond(st, 200, &h, 1), 0);
}

static void p_response(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    struct peer *p = arg;
    const char *x = header_of(head, "X-Back");

    p->responses++;
    p->status = head->status;
    ab_strlcpy(p->hdr, x ? x : "", sizeof(p->hdr));
}

static void p_data(struct tun_stream *st, const uint8_t *d, size_t n, void *arg)
{
    struct peer *p = arg;

    for (size_t i = 0; i < n; i++)
        if (d[i] != pattern(p->rx + i))
            p->rx_bad = true;
    if (p->body_len + n < sizeof(p->body)) {
        memcpy(p->body + p->body_len, d, n);
        p->body_len += n;
        p->body[p->body_len] = '\0';
    }
    p->rx += n;
    if (p->consume)
        assert_int_equal(tun_stream_consumed(st, n), 0);
    else
        p->unconsumed += n;
}

static void p_end(struct tun_stream *st, void *arg)
{
    ((struct peer *)arg)->ends++;
}

static void p_reset(struct tun_stream *st, const char *code, const char *msg, void *arg)
{
    struct peer *p = arg;

    p->resets++;
    ab_strlcpy(p->reset_code, code, sizeof(p->reset_code));
    ab_strlcpy(p->reset_msg, msg ? msg : "", sizeof(p->reset_msg));
}

static void p_closed(struct tun_stream *st, void *arg)
{
    struct peer *p = arg;

    p->closes++;
    if (p->st == st)
        p->st = NULL;
}

static const struct tun_callbacks peer_cb = {
    .on_hello = p_hello,
    .on_welcome = p_welcome,
    .on_open = p_open,
    .on_response = p_response,
    .on_data = p_data,
    .on_end = p_end,
    .on_reset = p_reset,
    .on_closed = p_closed,
};

/* ---- the hub: two sessions, every stream from the opener spliced onto the target ---------- */

struct hub {
    struct tun_session *in, *out; /* in faces the opener, out the target */
    struct tun_session *target;   /* what tun_splice gets (out, NULL, or another) */
    int splices, splice_rc;
};

static void h_hello(struct tun_session *s, json_t *msg, void *arg)
{
    json_t *w = json_pack("{si}", "epoch", 1);

    assert_int_equal(tun_session_send_json(s, TUN_WELCOME, w), 0);
    json_decref(w);
}

/* The relay's on_open: the head goes on rewritten (service), as the hub's does. */
static void h_open(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    struct hub *h = arg;
    struct tun_head out = *head;

    out.service = "data";
    out.json = NULL;
    h->splices++;
    h->splice_rc = tun_splice(st, h->target, &out, UNAVAILABLE);
}

static struct tun_callbacks hub_cb, ep_opener_cb;

/* ---- the world --------------------------------------------------------------------------------
 */

struct world {
    struct peer opener, target;
    struct hub hub;
};

static void session(struct tun_session **s, enum tun_role role, const struct tun_callbacks *cb,
                    void *arg)
{
    struct tun_config c = {.role = role, .cb = cb, .arg = arg};
    char err[200];

    assert_int_equal(tun_session_new(&c, s, err, sizeof(err)), 0);
}

/* Moves every queued frame from a to b; returns how many. */
static int move(struct tun_session *a, struct tun_session *b)
{
    int n = 0;
    size_t len;

    for (;;) {
        assert_int_equal(tun_session_next_frame(a, wire, sizeof(wire), &len), 0);
        if (len == 0)
            return n;
        assert_int_equal(tun_session_input(b, wire, len), 0);
        n++;
    }
}

/* One round over both links, both ways, then gc. Returns frames moved. */
static int step(struct world *w)
{
    int n = 0;

    if (w->opener.s && w->hub.in) {
        n += move(w->opener.s, w->hub.in);
        n += move(w->hub.in, w->opener.s);
    }
    if (w->hub.out && w->target.s) {
        n += move(w->hub.out, w->target.s);
        n += move(w->target.s, w->hub.out);
    }
    struct tun_session *all[] = {w->opener.s, w->hub.in, w->hub.out, w->target.s};
    for (size_t i = 0; i < AB_ARRAY_LEN(all); i++)
        if (all[i])
            tun_session_gc(all[i]);
    return n;
}

static void settle(struct world *w)
{
    for (int i = 0; i < 100000; i++)
        if (step(w) == 0)
            return;
    fail_msg("the world did not settle");
}

static void handshake(struct tun_session *agent, struct world *w)
{
    json_t *hello = json_pack("{ss}", "cluster", "c1");

    assert_int_equal(tun_session_send_json(agent, TUN_HELLO, hello), 0);
    json_decref(hello);
    settle(w);
    assert_true(tun_session_is_established(agent));
}

/* ep_opener: the opener routes its streams to endpoints (tun_call needs it)
 * instead of recording them. */
static void world_init_as(struct world *w, bool ep_opener)
{
    memset(w, 0, sizeof(*w));
    hub_cb = (struct tun_callbacks){.on_hello = h_hello, .on_open = h_open};
    tun_ep_callbacks_init(&hub_cb);
    ep_opener_cb = (struct tun_callbacks){.on_welcome = p_welcome};
    tun_ep_callbacks_init(&ep_opener_cb);
    w->opener.consume = w->target.consume = true;
    w->target.respond = true;
    session(&w->opener.s, TUN_ROLE_AGENT, ep_opener ? &ep_opener_cb : &peer_cb, &w->opener);
    session(&w->target.s, TUN_ROLE_AGENT, &peer_cb, &w->target);
    session(&w->hub.in, TUN_ROLE_HUB, &hub_cb, &w->hub);
    session(&w->hub.out, TUN_ROLE_HUB, &hub_cb, &w->hub);
    w->hub.target = w->hub.out;
    handshake(w->opener.s, w);
    handshake(w->target.s, w);
}

static void world_init(struct world *w)
{
    world_init_as(w, false);
}

static uint32_t streams(struct tun_session *s)
{
    struct tun_stats st;

    tun_session_stats(s, &st);
    return st.streams;
}

/* Nothing left open anywhere: the splice let go of both streams. */
static void assert_all_closed(struct world *w)
{
    settle(w);
    assert_int_equal(streams(w->opener.s), 0);
    assert_int_equal(streams(w->hub.in), 0);
    if (w->hub.out)
        assert_int_equal(streams(w->hub.out), 0);
    if (w->target.s)
        assert_int_equal(streams(w->target.s), 0);
}

static void world_free(struct world *w)
{
    struct tun_session *all[] = {w->opener.s, w->hub.in, w->hub.out, w->target.s};
    for (size_t i = 0; i < AB_ARRAY_LEN(all); i++)
        if (all[i])
            tun_session_free(all[i]);
}

static struct tun_stream *open_from_opener(struct world *w, const char *path)
{
    struct tun_head h = {.service = "relay", .method = "POST", .path = path, .nheaders = 1};
    struct tun_stream *st;

    h.headers[0] = (struct tun_header){"X-Test", "42"};
    assert_int_equal(tun_stream_open(w->opener.s, &h, &w->opener, &st), 0);
    w->opener.st = st;
    return st;
}

/* Writes the pattern from *sent towards total while st is under the high
 * water; returns bytes written now. */
static size_t feed(struct tun_stream *st, size_t *sent, size_t total)
{
    static uint8_t buf[CHUNK];
    size_t now = 0;

    while (*sent < total && tun_stream_pending(st) < TUN_STREAM_HIGH_WATER) {
        size_t k = AB_MIN((size_t)CHUNK, total - *sent);
        for (size_t i = 0; i < k; i++)
            buf[i] = pattern(*sent + i);
        if (tun_stream_write(st, buf, k) != 0)
            break;
        *sent += k;
        now += k;
    }
    return now;
}

/* ---- tests ------------------------------------------------------------------------------------
 */

static void test_request_and_response_pass_through(void **state)
{
    struct world w;
    struct tun_stream *st;

    world_init(&w);
    st = open_from_opener(&w, "/sandboxes/beta-x/49983/files?path=%2Fa");
    assert_int_equal(tun_stream_write(st, "hello", 5), 0);
    assert_int_equal(tun_stream_end(st), 0);
    settle(&w);

    assert_int_equal(w.hub.splices, 1);
    assert_int_equal(w.hub.splice_rc, 0);
    assert_int_equal(w.target.opens, 1);
    assert_string_equal(w.target.service, "data"); /* the head as the caller rewrote it */
    assert_string_equal(w.target.path, "/sandboxes/beta-x/49983/files?path=%2Fa");
    assert_string_equal(w.target.hdr, "42");
    assert_string_equal(w.target.body, "hello");
    assert_int_equal(w.target.ends, 1);
    /* the target's answer, head first */
    assert_int_equal(w.opener.responses, 1);
    assert_int_equal(w.opener.status, 200);
    assert_string_equal(w.opener.hdr, "yes");
    assert_int_equal(tun_stream_write(w.target.st, "world", 5), 0);
    assert_int_equal(tun_stream_end(w.target.st), 0);
    settle(&w);
    assert_string_equal(w.opener.body, "world");
    assert_int_equal(w.opener.ends, 1);
    assert_int_equal(w.opener.resets + w.target.resets, 0);
    assert_int_equal(w.opener.closes, 1);
    assert_int_equal(w.target.closes, 1);
    assert_all_closed(&w);
    world_free(&w);
}

/* A slow receiver at one end holds the sender at the other: the splice gives
 * credit back on one side only once the other side has room. recv is the
 * end that does not consume, send the end that writes. */
static void credit_case(struct world *w, struct peer *send, struct peer *recv,
                        struct tun_session *hub_from)
{
    struct tun_stats in;
    size_t sent = 0;
    uint64_t accepted;

    recv->consume = false;
    for (int i = 0; i < 200; i++) {
        feed(send->st, &sent, BIG);
        settle(w);
    }
    tun_session_stats(hub_from, &in);
    accepted = in.bytes_in;
    /* the receiver got at most its window and holds it all */
    assert_true(recv->rx > 0 && recv->rx <= TUN_INITIAL_WINDOW);
    assert_int_equal(recv->unconsumed, recv->rx);
    /* the hub took a bounded amount: the receiver's window, what it keeps
     * queued towards it (high water), and its own window towards the sender */
    assert_true(accepted <= 3 * (uint64_t)TUN_INITIAL_WINDOW + TUN_STREAM_HIGH_WATER);
    assert_true(sent < BIG);
    /* and the sender is stalled: no credit, data waiting, nothing moves */
    assert_true(tun_stream_credit(send->st) <= 0);
    assert_true(tun_stream_pending(send->st) > 0);
    feed(send->st, &sent, BIG);
    settle(w);
    tun_session_stats(hub_from, &in);
    assert_int_equal(in.bytes_in, accepted);

    /* the receiver catches up: everything arrives, in order */
    recv->consume = true;
    assert_int_equal(tun_stream_consumed(recv->st, recv->unconsumed), 0);
    recv->unconsumed = 0;
    for (int i = 0; i < 100000 && recv->rx < BIG; i++) {
        feed(send->st, &sent, BIG);
        step(w);
    }
    settle(w);
    assert_int_equal(sent, BIG);
    assert_int_equal(recv->rx, BIG);
    assert_false(recv->rx_bad);
    assert_int_equal(tun_stream_end(send->st), 0);
    settle(w);
    assert_int_equal(recv->ends, 1);
}

static void test_credit_passed_through_request(void **state)
{
    struct world w;

    world_init(&w);
    open_from_opener(&w, "/upload");
    settle(&w);
    assert_int_equal(w.opener.status, 200);
    credit_case(&w, &w.opener, &w.target, w.hub.in);
    assert_int_equal(tun_stream_end(w.target.st), 0);
    assert_all_closed(&w);
    assert_int_equal(w.opener.resets + w.target.resets, 0);
    world_free(&w);
}

static void test_credit_passed_through_response(void **state)
{
    struct world w;

    world_init(&w);
    open_from_opener(&w, "/download");
    assert_int_equal(tun_stream_end(w.opener.st), 0);
    settle(&w);
    assert_non_null(w.target.st);
    credit_case(&w, &w.target, &w.opener, w.hub.out);
    assert_all_closed(&w);
    assert_int_equal(w.opener.resets + w.target.resets, 0);
    world_free(&w);
}

static void test_reset_from_the_opener_reaches_the_target(void **state)
{
    struct world w;
    size_t sent = 0;

    world_init(&w);
    open_from_opener(&w, "/upload");
    settle(&w);
    feed(w.opener.st, &sent, 100000);
    settle(&w);
    assert_int_equal(w.target.rx, 100000);
    assert_int_equal(tun_stream_reset(w.opener.st, TUN_RESET_CANCEL, "the client went away"), 0);
    settle(&w);
    assert_int_equal(w.target.resets, 1);
    assert_string_equal(w.target.reset_code, TUN_RESET_CANCEL);
    assert_string_equal(w.target.reset_msg, "the client went away");
    assert_int_equal(w.target.closes, 1);
    assert_int_equal(w.opener.resets, 0); /* its own reset is not reported back */
    assert_all_closed(&w);
    world_free(&w);
}

static void test_reset_from_the_target_reaches_the_opener(void **state)
{
    struct world w;

    world_init(&w);
    w.target.respond = false; /* refused before any answer */
    open_from_opener(&w, "/sandboxes/beta-x/3000/");
    settle(&w);
    assert_int_equal(w.target.opens, 1);
    assert_int_equal(tun_stream_reset(w.target.st, TUN_RESET_NOT_FOUND, "no such port"), 0);
    settle(&w);
    assert_int_equal(w.opener.responses, 0);
    assert_int_equal(w.opener.resets, 1);
    assert_string_equal(w.opener.reset_code, TUN_RESET_NOT_FOUND);
    assert_string_equal(w.opener.reset_msg, "no such port");
    assert_int_equal(w.opener.closes, 1);
    assert_all_closed(&w);
    world_free(&w);
}

static void test_reset_mid_response_reaches_the_opener(void **state)
{
    struct world w;
    size_t sent = 0;

    world_init(&w);
    open_from_opener(&w, "/download");
    assert_int_equal(tun_stream_end(w.opener.st), 0);
    settle(&w);
    feed(w.target.st, &sent, 5000);
    settle(&w);
    assert_int_equal(w.opener.rx, 5000);
    assert_int_equal(tun_stream_reset(w.target.st, "internal", "envd crashed"), 0);
    settle(&w);
    assert_int_equal(w.opener.ends, 0);
    assert_int_equal(w.opener.resets, 1);
    assert_string_equal(w.opener.reset_code, "internal"); /* unknown codes pass verbatim */
    assert_string_equal(w.opener.reset_msg, "envd crashed");
    assert_all_closed(&w);
    world_free(&w);
}

/* The target's tunnel goes away mid-stream: the opener is reset, not left
 * waiting, and the hub's half of the splice is freed. */
static void test_target_tunnel_closes(void **state)
{
    struct world w;

    world_init(&w);
    open_from_opener(&w, "/upload");
    settle(&w);
    assert_int_equal(w.opener.status, 200);
    tun_session_free(w.hub.out);
    w.hub.out = NULL;
    settle(&w);
    assert_int_equal(w.opener.resets, 1);
    assert_string_equal(w.opener.reset_code, TUN_RESET_TUNNEL_CLOSED);
    assert_int_equal(w.opener.closes, 1);
    assert_int_equal(streams(w.hub.in), 0);
    world_free(&w);
}

/* The opener's tunnel goes away: the target is reset. */
static void test_opener_tunnel_closes(void **state)
{
    struct world w;

    world_init(&w);
    open_from_opener(&w, "/upload");
    settle(&w);
    assert_int_equal(w.target.opens, 1);
    tun_session_free(w.hub.in);
    w.hub.in = NULL;
    settle(&w);
    assert_int_equal(w.target.resets, 1);
    assert_string_equal(w.target.reset_code, TUN_RESET_TUNNEL_CLOSED);
    assert_int_equal(w.target.closes, 1);
    assert_int_equal(streams(w.hub.out), 0);
    world_free(&w);
}

static void assert_unavailable(struct world *w)
{
    settle(w);
    assert_int_equal(w->hub.splices, 1);
    assert_int_equal(w->hub.splice_rc, AB_ECLOSED);
    assert_int_equal(w->opener.status, 503);
    assert_non_null(strstr(w->opener.body, "\"code\":503"));
    assert_non_null(strstr(w->opener.body, "\"message\":\"" UNAVAILABLE "\""));
    assert_int_equal(w->opener.ends, 1);
    assert_int_equal(w->target.opens, 0);
}

static void test_target_down_answers_503(void **state)
{
    struct world w;
    struct tun_session *fresh;

    world_init(&w);
    w.hub.target = NULL; /* no session for the cluster */
    open_from_opener(&w, "/x");
    assert_int_equal(tun_stream_end(w.opener.st), 0);
    assert_unavailable(&w);
    assert_all_closed(&w);
    world_free(&w);

    world_init(&w);
    session(&fresh, TUN_ROLE_HUB, &hub_cb, &w.hub); /* connected, handshake not done */
    w.hub.target = fresh;
    open_from_opener(&w, "/x");
    assert_int_equal(tun_stream_end(w.opener.st), 0);
    assert_unavailable(&w);
    assert_int_equal(streams(fresh), 0);
    tun_session_free(fresh);
    world_free(&w);
}

/* ---- tun_call ----------------------------------------------------------------------------- */

struct call_result {
    int calls, status;
    char body[256], error[128];
};

static void call_done(const struct tun_call_result *r, void *arg)
{
    struct call_result *c = arg;

    c->calls++;
    c->status = r->status;
    ab_strlcpy(c->body, r->body, sizeof(c->body));
    ab_strlcpy(c->error, r->error ? r->error : "", sizeof(c->error));
}

static void test_call_through_the_splice(void **state)
{
    struct world w;
    struct call_result r = {0};
    struct tun_header h = {"X-Test", "7"};

    world_init_as(&w, true);
    assert_int_equal(
        tun_call(w.opener.s, "hub", "POST", "/v1/check", &h, 1, "{}", 2, 64, call_done, &r), 0);
    settle(&w);
    assert_string_equal(w.target.path, "/v1/check");
    assert_string_equal(w.target.hdr, "7");
    assert_string_equal(w.target.body, "{}");
    assert_int_equal(r.calls, 0); /* not before the answer ends */
    assert_int_equal(tun_stream_write(w.target.st, "{\"ok\":true}", 11), 0);
    assert_int_equal(tun_stream_end(w.target.st), 0);
    settle(&w);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"ok\":true}");
    assert_string_equal(r.error, "");
    world_free(&w);
}

static void test_call_limits_and_resets(void **state)
{
    struct world w;
    struct call_result r = {0};
    static char big[100];

    /* a body over max_body: the call fails with the limit, the stream is reset */
    world_init_as(&w, true);
    assert_int_equal(
        tun_call(w.opener.s, "hub", "GET", "/big", NULL, 0, NULL, 0, 10, call_done, &r), 0);
    settle(&w);
    memset(big, 'a', sizeof(big));
    assert_int_equal(tun_stream_write(w.target.st, big, sizeof(big)), 0);
    settle(&w);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.error, "response larger than the caller's limit");
    assert_int_equal(w.target.resets, 1);
    assert_string_equal(w.target.reset_code, TUN_RESET_CANCEL);
    assert_all_closed(&w);
    world_free(&w);

    /* the peer resets the call */
    memset(&r, 0, sizeof(r));
    world_init_as(&w, true);
    assert_int_equal(tun_call(w.opener.s, "hub", "GET", "/x", NULL, 0, NULL, 0, 0, call_done, &r),
                     0);
    settle(&w);
    assert_int_equal(tun_stream_reset(w.target.st, TUN_RESET_BUSY, "try later"), 0);
    settle(&w);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.error, "the peer reset the call");
    world_free(&w);

    /* the session goes away: done once, with "tunnel closed" */
    memset(&r, 0, sizeof(r));
    world_init_as(&w, true);
    assert_int_equal(tun_call(w.opener.s, "hub", "GET", "/x", NULL, 0, NULL, 0, 0, call_done, &r),
                     0);
    settle(&w);
    tun_session_free(w.opener.s);
    w.opener.s = NULL;
    assert_int_equal(r.calls, 1);
    assert_string_equal(r.error, "tunnel closed");
    world_free(&w);

    /* refused up front: no session, a body over the high water */
    assert_int_equal(tun_call(NULL, "hub", "GET", "/", NULL, 0, NULL, 0, 0, call_done, &r),
                     AB_ECLOSED);
    world_init_as(&w, true);
    assert_int_equal(tun_call(w.opener.s, "hub", "POST", "/", NULL, 0, NULL,
                              TUN_STREAM_HIGH_WATER + 1, 0, call_done, &r),
                     AB_ELIMIT);
    world_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_and_response_pass_through),
        cmocka_unit_test(test_credit_passed_through_request),
        cmocka_unit_test(test_credit_passed_through_response),
        cmocka_unit_test(test_reset_from_the_opener_reaches_the_target),
        cmocka_unit_test(test_reset_from_the_target_reaches_the_opener),
        cmocka_unit_test(test_reset_mid_response_reaches_the_opener),
        cmocka_unit_test(test_target_tunnel_closes),
        cmocka_unit_test(test_opener_tunnel_closes),
        cmocka_unit_test(test_target_down_answers_503),
        cmocka_unit_test(test_call_through_the_splice),
        cmocka_unit_test(test_call_limits_and_resets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
