/* Tunnel sessions: an agent and a hub session wired back to back (frames
 * pumped by hand), plus raw frames injected into one session for the
 * violations. Also the reconnect backoff. */
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

#define MAX_ID 64

enum ev_type {
    EV_HELLO = 1,
    EV_WELCOME,
    EV_REPORT,
    EV_EVENT,
    EV_SYNC,
    EV_OPEN,
    EV_RESPONSE,
    EV_DATA,
    EV_END,
    EV_RESET,
    EV_WINDOW,
    EV_DRAIN,
    EV_CLOSED,
};

struct ev {
    enum ev_type type;
    uint32_t id;
    char code[64];
    size_t n;
};

struct side {
    struct tun_session *s;
    struct ev ev[1024];
    int nev;
    bool consume;       /* consume DATA as it arrives */
    bool respond;       /* answer OPENs with 200 at once */
    bool reset_in_data; /* reset the stream from inside on_data */
    bool welcome;       /* hub: answer HELLO with WELCOME */
    size_t rx[MAX_ID];
    struct tun_stream *st[MAX_ID];
    char last_path[64];
    int wakes;
    int data_calls; /* on_data calls */
};

static uint8_t wire[TUN_FRAME_MAX];

/* 0: each message whole (tun_session_input); else streamed in pieces of
 * this many bytes (tun_session_input_begin/more), as the raw-socket
 * framing delivers them. Every test runs in both modes (main). */
static size_t g_piece;

static int deliver(struct tun_session *s, const uint8_t *m, size_t n)
{
    if (g_piece == 0)
        return tun_session_input(s, m, n);
    int rc = tun_session_input_begin(s, n);
    for (size_t o = 0; rc == 0 && (o < n || n == 0); o += g_piece) {
        rc = tun_session_input_more(s, m + o, AB_MIN(g_piece, n - o));
        if (n == 0)
            break;
    }
    return rc;
}

static void record(struct side *d, enum ev_type type, uint32_t id, const char *code, size_t n)
{
    struct ev *e;

    assert_true(d->nev < (int)AB_ARRAY_LEN(d->ev));
    e = &d->ev[d->nev++];
    e->type = type;
    e->id = id;
    e->n = n;
    ab_strlcpy(e->code, code ? code : "", sizeof(e->code));
}

static int count(const struct side *d, enum ev_type type, uint32_t id)
{
    int n = 0;

    for (int i = 0; i < d->nev; i++)
        if (d->ev[i].type == type && (id == 0 || d->ev[i].id == id))
            n++;
    return n;
}

static const struct ev *last(const struct side *d, enum ev_type type, uint32_t id)
{
    for (int i = d->nev - 1; i >= 0; i--)
        if (d->ev[i].type == type && (id == 0 || d->ev[i].id == id))
            return &d->ev[i];
    return NULL;
}

static void cb_hello(struct tun_session *s, json_t *msg, void *arg)
{
    struct side *d = arg;
    json_t *w = json_pack("{si}", "epoch", 7);

    record(d, EV_HELLO, 0, json_string_value(json_object_get(msg, "cluster")), 0);
    if (d->welcome)
        assert_int_equal(tun_session_send_json(s, TUN_WELCOME, w), 0);
    json_decref(w);
}

static void cb_welcome(struct tun_session *s, json_t *msg, void *arg)
{
    record(arg, EV_WELCOME, 0, NULL, (size_t)json_integer_value(json_object_get(msg, "epoch")));
}

static void cb_report(struct tun_session *s, json_t *msg, void *arg)
{
    record(arg, EV_REPORT, 0, NULL, json_object_size(msg));
}

static void cb_event(struct tun_session *s, json_t *msg, void *arg)
{
    record(arg, EV_EVENT, 0, NULL, 0);
}

static void cb_sync(struct tun_session *s, unsigned reaped, void *arg)
{
    record(arg, EV_SYNC, 0, NULL, reaped);
}

static void cb_open(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    struct side *d = arg;
    uint32_t id = tun_stream_id(st);
    struct tun_header h = {"Content-Type", "text/plain"};

    assert_true(id < MAX_ID);
    d->st[id] = st;
    ab_strlcpy(d->last_path, head->path, sizeof(d->last_path));
    record(d, EV_OPEN, id, head->service, head->window);
    if (d->respond)
        assert_int_equal(tun_stream_respond(st, 200, &h, 1), 0);
}

static void cb_response(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    record(arg, EV_RESPONSE, tun_stream_id(st), NULL, (size_t)head->status);
}

static void cb_data(struct tun_stream *st, const uint8_t *data, size_t len, void *arg)
{
    struct side *d = arg;
    uint32_t id = tun_stream_id(st);

    d->rx[id] += len;
    d->data_calls++;
    /* streamed input calls on_data per piece: one event per frame's worth,
     * so the event log keeps its size */
    if (g_piece != 0 && d->nev > 0 && d->ev[d->nev - 1].type == EV_DATA &&
        d->ev[d->nev - 1].id == id && d->ev[d->nev - 1].n + len <= TUN_DATA_MAX)
        d->ev[d->nev - 1].n += len;
    else
        record(d, EV_DATA, id, NULL, len);
    if (d->consume)
        assert_int_equal(tun_stream_consumed(st, len), 0);
    if (d->reset_in_data) {
        assert_int_equal(tun_stream_reset(st, TUN_RESET_CANCEL, "enough"), 0);
        /* still valid after the reset: freed only by gc after on_closed */
        assert_int_equal(tun_stream_state(st), TUN_STREAM_CLOSED);
        assert_int_equal(tun_stream_write(st, "x", 1), AB_ECLOSED);
    }
}

static void cb_end(struct tun_stream *st, void *arg)
{
    record(arg, EV_END, tun_stream_id(st), NULL, 0);
}

static void cb_reset(struct tun_stream *st, const char *code, const char *msg, void *arg)
{
    record(arg, EV_RESET, tun_stream_id(st), code, 0);
}

static void cb_window(struct tun_stream *st, void *arg)
{
    record(arg, EV_WINDOW, tun_stream_id(st), NULL, 0);
}

static void cb_drain(struct tun_stream *st, void *arg)
{
    record(arg, EV_DRAIN, tun_stream_id(st), NULL, tun_stream_pending(st));
}

static void cb_closed(struct tun_stream *st, void *arg)
{
    struct side *d = arg;

    d->st[tun_stream_id(st)] = NULL;
    record(d, EV_CLOSED, tun_stream_id(st), NULL, 0);
}

static void cb_want(struct tun_session *s, void *arg)
{
    ((struct side *)arg)->wakes++;
}

static const struct tun_callbacks callbacks = {
    .on_hello = cb_hello,
    .on_welcome = cb_welcome,
    .on_report = cb_report,
    .on_event = cb_event,
    .on_sync = cb_sync,
    .on_open = cb_open,
    .on_response = cb_response,
    .on_data = cb_data,
    .on_end = cb_end,
    .on_reset = cb_reset,
    .on_window_opened = cb_window,
    .on_drain = cb_drain,
    .on_closed = cb_closed,
    .want_write = cb_want,
};

static void side_init(struct side *d, enum tun_role role, const struct tun_config *tweak)
{
    struct tun_config c = {0};
    char err[200];

    memset(d, 0, sizeof(*d));
    if (tweak != NULL)
        c = *tweak;
    c.role = role;
    c.cb = &callbacks;
    c.arg = d;
    d->consume = true;
    d->welcome = true;
    assert_int_equal(tun_session_new(&c, &d->s, err, sizeof(err)), 0);
}

/* Moves one frame from a to b; returns 0 when a had nothing, 1 when moved,
 * or b's input error. */
static int move_one(struct side *a, struct side *b)
{
    size_t len;
    int rc = tun_session_next_frame(a->s, wire, sizeof(wire), &len);

    assert_int_equal(rc, 0);
    if (len == 0)
        return 0;
    rc = deliver(b->s, wire, len);
    return rc < 0 ? rc : 1;
}

/* Pumps both ways until quiet. Returns 0 or the first input error. */
static int pump(struct side *a, struct side *b)
{
    for (int i = 0; i < 100000; i++) {
        int x = move_one(a, b), y;
        if (x < 0)
            return x;
        y = move_one(b, a);
        if (y < 0)
            return y;
        if (x == 0 && y == 0)
            return 0;
    }
    fail_msg("pump did not settle");
    return -1;
}

/* Drops everything a has queued, as if the frames were lost. */
static int drop_output(struct side *a)
{
    size_t len;
    int n = 0;

    while (tun_session_next_frame(a->s, wire, sizeof(wire), &len) == 0 && len > 0)
        n++;
    return n;
}

/* Takes a's next frame without delivering it. */
static bool take(struct side *a, struct tun_frame *f)
{
    size_t len;

    assert_int_equal(tun_session_next_frame(a->s, wire, sizeof(wire), &len), 0);
    if (len == 0)
        return false;
    assert_int_equal(tun_frame_decode(wire, len, f), 0);
    return true;
}

static void handshake(struct side *agent, struct side *hub)
{
    json_t *hello = json_pack("{ss}", "cluster", "c1");

    assert_int_equal(tun_session_send_json(agent->s, TUN_HELLO, hello), 0);
    json_decref(hello);
    assert_int_equal(pump(agent, hub), 0);
    assert_true(tun_session_is_established(agent->s));
    assert_true(tun_session_is_established(hub->s));
    assert_string_equal(last(hub, EV_HELLO, 0)->code, "c1");
    assert_int_equal(last(agent, EV_WELCOME, 0)->n, 7);
}

static struct tun_stream *open_stream(struct side *d, const char *path)
{
    struct tun_head h = {.service = "e2b", .method = "GET", .path = path};
    struct tun_stream *st;

    assert_int_equal(tun_stream_open(d->s, &h, d, &st), 0);
    assert_true(tun_stream_id(st) < MAX_ID);
    d->st[tun_stream_id(st)] = st;
    return st;
}

static int inject(struct side *d, uint8_t type, uint32_t id, const void *p, size_t len)
{
    static uint8_t m[TUN_FRAME_MAX];
    struct tun_frame f = {.type = type, .stream_id = id, .payload = p, .len = len};
    size_t n;

    assert_int_equal(tun_frame_encode(m, sizeof(m), &f, &n), 0);
    return deliver(d->s, m, n);
}

static int inject_str(struct side *d, uint8_t type, uint32_t id, const char *s)
{
    return inject(d, type, id, s, strlen(s));
}

/* An agent that has completed its handshake against injected frames. */
static void lone_agent(struct side *agent, const struct tun_config *tweak)
{
    json_t *hello = json_object();

    side_init(agent, TUN_ROLE_AGENT, tweak);
    assert_int_equal(tun_session_send_json(agent->s, TUN_HELLO, hello), 0);
    json_decref(hello);
    assert_int_equal(drop_output(agent), 1);
    assert_int_equal(inject_str(agent, TUN_WELCOME, 0, "{\"epoch\":1}"), 0);
    assert_true(tun_session_is_established(agent->s));
}

static void free_sides(struct side *a, struct side *b)
{
    tun_session_free(a->s);
    if (b != NULL)
        tun_session_free(b->s);
}

/* ---- handshake and roles ------------------------------------------------ */

static void test_handshake_and_ids(void **state)
{
    struct side agent, hub;
    struct tun_stream *a1, *a3, *h2;
    struct tun_head h = {.service = "e2b", .method = "GET", .path = "/"};

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    /* nothing may be opened before the handshake */
    assert_int_equal(tun_stream_open(agent.s, &h, NULL, &a1), AB_EBUSY);
    assert_int_equal(tun_session_send_sync(agent.s), AB_EBUSY);
    handshake(&agent, &hub);
    assert_true(agent.wakes > 0 && hub.wakes > 0);

    a1 = open_stream(&agent, "/a");
    a3 = open_stream(&agent, "/b");
    h2 = open_stream(&hub, "/c");
    assert_int_equal(tun_stream_id(a1), 1);
    assert_int_equal(tun_stream_id(a3), 3);
    assert_int_equal(tun_stream_id(h2), 2);
    assert_true(tun_stream_is_local(a1));
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(count(&hub, EV_OPEN, 1), 1);
    assert_int_equal(count(&hub, EV_OPEN, 3), 1);
    assert_int_equal(count(&agent, EV_OPEN, 2), 1);
    assert_string_equal(last(&hub, EV_OPEN, 1)->code, "e2b");
    assert_int_equal(last(&hub, EV_OPEN, 1)->n, TUN_INITIAL_WINDOW);
    assert_false(tun_stream_is_local(hub.st[1]));
    free_sides(&agent, &hub);
}

static void test_handshake_order_enforced(void **state)
{
    struct side agent, hub;
    json_t *obj = json_object();

    /* hub: the first frame must be HELLO */
    side_init(&hub, TUN_ROLE_HUB, NULL);
    assert_int_equal(
        inject_str(&hub, TUN_OPEN, 1, "{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\"}"),
        AB_EINVAL);
    assert_non_null(strstr(tun_session_error(hub.s), "handshake"));
    /* failed stays failed */
    assert_int_equal(inject_str(&hub, TUN_HELLO, 0, "{}"), AB_EINVAL);
    tun_session_free(hub.s);

    /* hub: WELCOME only after HELLO; nothing between HELLO and WELCOME */
    side_init(&hub, TUN_ROLE_HUB, NULL);
    hub.welcome = false;
    assert_int_equal(tun_session_send_json(hub.s, TUN_WELCOME, obj), AB_EINVAL);
    assert_int_equal(inject_str(&hub, TUN_HELLO, 0, "{}"), 0);
    assert_int_equal(inject_str(&hub, TUN_HELLO, 0, "{}"), AB_EINVAL);
    tun_session_free(hub.s);

    /* a hub never receives WELCOME, nor EVENT; an agent never REPORT */
    side_init(&hub, TUN_ROLE_HUB, NULL);
    assert_int_equal(inject_str(&hub, TUN_WELCOME, 0, "{}"), AB_EINVAL);
    tun_session_free(hub.s);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    assert_int_equal(inject_str(&hub, TUN_HELLO, 0, "{}"), 0);
    assert_int_equal(inject_str(&hub, TUN_EVENT, 0, "{}"), AB_EINVAL);
    tun_session_free(hub.s);
    lone_agent(&agent, NULL);
    assert_int_equal(inject_str(&agent, TUN_REPORT, 0, "{}"), AB_EINVAL);
    assert_non_null(strstr(tun_session_error(agent.s), "REPORT"));
    tun_session_free(agent.s);
    /* a second WELCOME, and JSON that is not an object */
    lone_agent(&agent, NULL);
    assert_int_equal(inject_str(&agent, TUN_WELCOME, 0, "{}"), AB_EINVAL);
    tun_session_free(agent.s);
    lone_agent(&agent, NULL);
    assert_int_equal(inject_str(&agent, TUN_EVENT, 0, "[1]"), AB_EINVAL);
    tun_session_free(agent.s);

    /* sending the wrong type for the role is refused locally */
    side_init(&agent, TUN_ROLE_AGENT, NULL);
    assert_int_equal(tun_session_send_json(agent.s, TUN_WELCOME, obj), AB_EINVAL);
    assert_int_equal(tun_session_send_json(agent.s, TUN_REPORT, obj), AB_EINVAL); /* too early */
    assert_int_equal(tun_session_send_json(agent.s, TUN_DATA, obj), AB_EINVAL);
    tun_session_free(agent.s);
    json_decref(obj);
}

static void test_report_and_event(void **state)
{
    struct side agent, hub;
    json_t *report = json_pack("{s[]si}", "records", "age", 3);
    json_t *event = json_pack("{ss}", "kind", "key_revoked");
    json_t *huge = json_object();
    char *blob = malloc(TUN_REPORT_MAX + 1);

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    handshake(&agent, &hub);
    assert_int_equal(tun_session_send_json(agent.s, TUN_REPORT, report), 0);
    assert_int_equal(tun_session_send_json(hub.s, TUN_EVENT, event), 0);
    assert_int_equal(tun_session_send_json(hub.s, TUN_REPORT, report), AB_EINVAL);
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(last(&hub, EV_REPORT, 0)->n, 2);
    assert_int_equal(count(&agent, EV_EVENT, 0), 1);

    memset(blob, 'r', TUN_REPORT_MAX);
    blob[TUN_REPORT_MAX] = '\0';
    json_object_set_new(huge, "r", json_string(blob));
    assert_int_equal(tun_session_send_json(agent.s, TUN_REPORT, huge), AB_ELIMIT);
    assert_non_null(strstr(tun_session_error(agent.s), "REPORT"));
    free(blob);
    json_decref(huge);
    json_decref(report);
    json_decref(event);
    free_sides(&agent, &hub);
}

/* ---- request / response ---------------------------------------------------- */

static void test_request_response_lifecycle(void **state)
{
    struct side agent, hub;
    struct tun_stream *st, *hs;
    struct tun_stats stats;

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    hub.respond = true;
    handshake(&agent, &hub);

    st = open_stream(&agent, "/sandboxes");
    assert_int_equal(tun_stream_write(st, "{\"x\":1}", 7), 0);
    assert_int_equal(tun_stream_end(st), 0);
    assert_int_equal(tun_stream_state(st), TUN_STREAM_HALF_CLOSED_LOCAL);
    assert_int_equal(tun_stream_write(st, "late", 4), AB_ECLOSED);
    assert_int_equal(tun_stream_end(st), AB_ECLOSED);
    assert_int_equal(pump(&agent, &hub), 0);

    assert_string_equal(hub.last_path, "/sandboxes");
    assert_int_equal(hub.rx[1], 7);
    assert_int_equal(count(&hub, EV_END, 1), 1);
    assert_int_equal(last(&agent, EV_RESPONSE, 1)->n, 200);
    hs = hub.st[1];
    assert_non_null(hs);
    assert_int_equal(tun_stream_state(hs), TUN_STREAM_HALF_CLOSED_REMOTE);
    /* a second respond, or one on our own stream, is refused */
    assert_int_equal(tun_stream_respond(hs, 200, NULL, 0), AB_EINVAL);
    assert_int_equal(tun_stream_respond(st, 200, NULL, 0), AB_EINVAL);

    assert_int_equal(tun_stream_write(hs, "hello", 5), 0);
    assert_int_equal(tun_stream_end(hs), 0);
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(agent.rx[1], 5);
    assert_int_equal(count(&agent, EV_END, 1), 1);
    /* both sides closed; on_closed comes from gc, once */
    tun_session_gc(agent.s);
    tun_session_gc(hub.s);
    assert_int_equal(count(&agent, EV_CLOSED, 1), 1);
    assert_int_equal(count(&hub, EV_CLOSED, 1), 1);
    assert_int_equal(count(&agent, EV_RESET, 0), 0);
    tun_session_stats(hub.s, &stats);
    assert_int_equal(stats.streams, 0);
    assert_int_equal(stats.bytes_in, 7);
    assert_int_equal(stats.bytes_out, 5);
    assert_int_equal(stats.buffered, 0);
    free_sides(&agent, &hub);
}

static void test_open_refused_without_handler(void **state)
{
    struct side agent, hub;
    struct tun_callbacks cb = callbacks;
    struct tun_config c = {.role = TUN_ROLE_HUB, .cb = &cb, .arg = &hub};
    char err[100];

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    memset(&hub, 0, sizeof(hub));
    hub.welcome = true;
    cb.on_open = NULL;
    assert_int_equal(tun_session_new(&c, &hub.s, err, sizeof(err)), 0);
    handshake(&agent, &hub);
    open_stream(&agent, "/");
    assert_int_equal(pump(&agent, &hub), 0);
    assert_string_equal(last(&agent, EV_RESET, 1)->code, TUN_RESET_NOT_FOUND);
    free_sides(&agent, &hub);
}

static void test_bad_open_head_resets_stream_only(void **state)
{
    struct side agent;
    struct tun_frame f;

    lone_agent(&agent, NULL);
    assert_int_equal(inject_str(&agent, TUN_OPEN, 2, "{\"service\":\"e2b\"}"), 0);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_RESET);
    assert_int_equal(f.stream_id, 2);
    assert_non_null(memmem(f.payload, f.len, TUN_RESET_PROTOCOL, strlen(TUN_RESET_PROTOCOL)));
    assert_int_equal(count(&agent, EV_OPEN, 0), 0);
    /* the id is used up: an OPEN on it again breaks the session */
    assert_int_equal(inject_str(&agent, TUN_OPEN, 2, "{}"), AB_EINVAL);
    tun_session_free(agent.s);
}

/* ---- protocol violations ---------------------------------------------------- */

static void test_wrong_parity_and_order(void **state)
{
    struct side agent, hub;
    const char *open = "{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\"}";

    lone_agent(&agent, NULL);
    assert_int_equal(inject_str(&agent, TUN_OPEN, 1, open), AB_EINVAL);
    assert_non_null(strstr(tun_session_error(agent.s), "parity"));
    tun_session_free(agent.s);

    lone_agent(&agent, NULL);
    assert_int_equal(inject_str(&agent, TUN_OPEN, 4, open), 0);
    assert_int_equal(inject_str(&agent, TUN_OPEN, 2, open), AB_EINVAL);
    assert_non_null(strstr(tun_session_error(agent.s), "increase"));
    tun_session_free(agent.s);

    side_init(&hub, TUN_ROLE_HUB, NULL);
    assert_int_equal(inject_str(&hub, TUN_HELLO, 0, "{}"), 0);
    assert_int_equal(inject_str(&hub, TUN_OPEN, 2, open), AB_EINVAL);
    tun_session_free(hub.s);

    /* frames for streams never opened, either parity */
    lone_agent(&agent, NULL);
    assert_int_equal(inject(&agent, TUN_DATA, 9, "x", 1), AB_EINVAL);
    assert_non_null(strstr(tun_session_error(agent.s), "never opened"));
    tun_session_free(agent.s);
    lone_agent(&agent, NULL);
    assert_int_equal(inject(&agent, TUN_END, 6, NULL, 0), AB_EINVAL);
    tun_session_free(agent.s);
}

static void test_malformed_frames_fail_session(void **state)
{
    struct side agent;
    uint8_t m[16] = {1, TUN_DATA, 0, 0, 0, 0, 0, 0};

    lone_agent(&agent, NULL);
    assert_int_equal(deliver(agent.s, m, 4), TUN_FRAME_ESHORT);
    assert_non_null(strstr(tun_session_error(agent.s), "header"));
    assert_int_equal(deliver(agent.s, m, 8), TUN_FRAME_ESHORT); /* stays failed */
    assert_false(tun_session_has_output(agent.s));
    tun_session_free(agent.s);

    lone_agent(&agent, NULL);
    m[0] = 2;
    assert_int_equal(deliver(agent.s, m, 8), TUN_FRAME_EVERSION);
    tun_session_free(agent.s);

    lone_agent(&agent, NULL);
    m[0] = 1;
    m[1] = 42;
    assert_int_equal(deliver(agent.s, m, 8), TUN_FRAME_ETYPE);
    tun_session_free(agent.s);

    lone_agent(&agent, NULL);
    m[1] = TUN_DATA; /* stream 0 */
    assert_int_equal(deliver(agent.s, m, 8), TUN_FRAME_ESTREAM0);
    tun_session_free(agent.s);
}

/* ---- flow control ------------------------------------------------------------ */

static void test_flow_control_credit_and_window(void **state)
{
    struct side agent, hub;
    /* an odd window, so a sender that sends whole chunks past it is caught */
    struct tun_config ac = {.window = 100000};
    struct tun_stream *st, *hs;
    static uint8_t body[300000];

    side_init(&agent, TUN_ROLE_AGENT, &ac);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    hub.respond = true;
    agent.consume = false;
    handshake(&agent, &hub);
    st = open_stream(&agent, "/big");
    assert_int_equal(tun_stream_end(st), 0);
    assert_int_equal(pump(&agent, &hub), 0);
    hs = hub.st[1];
    assert_int_equal(last(&hub, EV_OPEN, 1)->n, 100000);
    assert_int_equal(tun_stream_credit(hs), 100000);

    memset(body, 'b', sizeof(body));
    assert_int_equal(tun_stream_write(hs, body, 200000), 0);
    assert_int_equal(tun_stream_write(hs, body, 100000), 0);
    assert_int_equal(tun_stream_end(hs), 0);
    assert_int_equal(pump(&agent, &hub), 0);
    /* exactly one window crossed, then the sender stops */
    assert_int_equal(agent.rx[1], 100000);
    assert_int_equal(tun_stream_credit(hs), 0);
    assert_int_equal(tun_stream_pending(hs), 200000);
    assert_false(tun_session_has_output(hub.s));
    assert_int_equal(count(&agent, EV_END, 1), 0); /* END waits behind the data */
    for (int i = 0; i < agent.nev; i++)
        if (agent.ev[i].type == EV_DATA)
            assert_true(agent.ev[i].n <= TUN_DATA_MAX);

    /* under half a window consumed: no WINDOW yet */
    assert_int_equal(tun_stream_consumed(st, 40000), 0);
    assert_false(tun_session_has_output(agent.s));
    assert_int_equal(tun_stream_consumed(st, 10000), 0);
    assert_true(tun_session_has_output(agent.s));
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(agent.rx[1], 150000);
    assert_true(count(&hub, EV_WINDOW, 1) >= 1);

    /* more than was received is refused */
    assert_int_equal(tun_stream_consumed(st, 100001), AB_EINVAL);
    for (size_t got = 50000; agent.rx[1] < 300000;) {
        size_t before = agent.rx[1];
        assert_int_equal(tun_stream_consumed(st, got), 0);
        assert_int_equal(pump(&agent, &hub), 0);
        assert_true(agent.rx[1] > before); /* every grant lets more through */
        got = agent.rx[1] - before;
    }
    assert_int_equal(agent.rx[1], 300000);
    assert_int_equal(count(&agent, EV_END, 1), 1);
    assert_true(count(&hub, EV_DRAIN, 1) >= 1);
    assert_int_equal(count(&agent, EV_RESET, 0), 0);
    assert_int_equal(count(&hub, EV_RESET, 0), 0);
    free_sides(&agent, &hub);
}

static void test_request_body_limited_to_initial_window(void **state)
{
    struct side agent, hub;
    struct tun_stream *st;
    static uint8_t body[300 * 1024];
    struct tun_stats stats;

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    hub.consume = false;
    handshake(&agent, &hub);
    st = open_stream(&agent, "/upload");
    assert_int_equal(tun_stream_write(st, body, sizeof(body)), 0);
    assert_int_equal(pump(&agent, &hub), 0);
    /* no RESPONSE yet: the opener may send the initial window and no more */
    assert_int_equal(hub.rx[1], TUN_INITIAL_WINDOW);
    assert_int_equal(tun_stream_pending(st), sizeof(body) - TUN_INITIAL_WINDOW);
    tun_session_stats(agent.s, &stats);
    assert_true(stats.credit_stalls >= 1);
    /* the responder consumes before responding: WINDOW still flows */
    assert_int_equal(tun_stream_consumed(hub.st[1], TUN_INITIAL_WINDOW), 0);
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(hub.rx[1], sizeof(body));
    free_sides(&agent, &hub);
}

static void test_data_beyond_credit_resets_stream(void **state)
{
    struct side agent;
    struct tun_stream *st;
    static uint8_t chunk[TUN_DATA_MAX];
    struct tun_frame f;
    struct tun_stats stats;

    lone_agent(&agent, NULL);
    agent.consume = false;
    st = open_stream(&agent, "/");
    assert_int_equal(drop_output(&agent), 1);
    assert_int_equal(inject_str(&agent, TUN_RESPONSE, 1, "{\"status\":200}"), 0);
    for (int i = 0; i < TUN_INITIAL_WINDOW / TUN_DATA_MAX; i++)
        assert_int_equal(inject(&agent, TUN_DATA, 1, chunk, sizeof(chunk)), 0);
    assert_int_equal(agent.rx[1], TUN_INITIAL_WINDOW);
    /* one byte past the credit */
    assert_int_equal(inject(&agent, TUN_DATA, 1, chunk, 1), 0);
    assert_string_equal(last(&agent, EV_RESET, 1)->code, TUN_RESET_FLOW_CONTROL);
    assert_int_equal(tun_stream_state(st), TUN_STREAM_CLOSED);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_RESET);
    assert_int_equal(f.stream_id, 1);
    assert_non_null(memmem(f.payload, f.len, "flow_control", 12));
    /* frames still in flight for the reset stream are ignored */
    assert_int_equal(inject(&agent, TUN_DATA, 1, chunk, sizeof(chunk)), 0);
    tun_session_stats(agent.s, &stats);
    assert_int_equal(stats.ignored_frames, 1);
    assert_int_equal(stats.resets_out, 1);
    tun_session_gc(agent.s);
    assert_int_equal(count(&agent, EV_CLOSED, 1), 1);
    tun_session_free(agent.s);
}

static void test_stream_level_violations(void **state)
{
    struct side agent;
    uint8_t inc[4] = {0x7f, 0xff, 0xff, 0xff};

    lone_agent(&agent, NULL);
    open_stream(&agent, "/");
    open_stream(&agent, "/");
    open_stream(&agent, "/");
    open_stream(&agent, "/");
    drop_output(&agent);
    /* DATA and END before RESPONSE */
    assert_int_equal(inject(&agent, TUN_DATA, 1, "x", 1), 0);
    assert_string_equal(last(&agent, EV_RESET, 1)->code, TUN_RESET_PROTOCOL);
    assert_int_equal(inject(&agent, TUN_END, 3, NULL, 0), 0);
    assert_string_equal(last(&agent, EV_RESET, 3)->code, TUN_RESET_PROTOCOL);
    /* a bad RESPONSE head, then DATA after END */
    assert_int_equal(inject_str(&agent, TUN_RESPONSE, 5, "{\"status\":1}"), 0);
    assert_string_equal(last(&agent, EV_RESET, 5)->code, TUN_RESET_PROTOCOL);
    assert_int_equal(inject_str(&agent, TUN_RESPONSE, 7, "{\"status\":204}"), 0);
    assert_int_equal(inject(&agent, TUN_END, 7, NULL, 0), 0);
    assert_int_equal(inject(&agent, TUN_DATA, 7, "x", 1), 0);
    assert_string_equal(last(&agent, EV_RESET, 7)->code, TUN_RESET_PROTOCOL);
    /* the session itself is fine */
    assert_int_equal(inject_str(&agent, TUN_EVENT, 0, "{}"), 0);
    tun_session_free(agent.s);

    /* WINDOW overflowing the credit */
    lone_agent(&agent, NULL);
    open_stream(&agent, "/");
    drop_output(&agent);
    assert_int_equal(inject(&agent, TUN_WINDOW, 1, inc, 4), 0);
    assert_string_equal(last(&agent, EV_RESET, 1)->code, TUN_RESET_FLOW_CONTROL);
    tun_session_free(agent.s);
}

static void test_reset_from_peer(void **state)
{
    struct side agent, hub;
    struct tun_stream *st;
    static uint8_t body[100 * 1024];
    struct tun_stats stats;

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    handshake(&agent, &hub);
    st = open_stream(&agent, "/");
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(tun_stream_write(st, body, sizeof(body)), 0);
    assert_int_equal(tun_stream_reset(hub.st[1], "not_found", "no such service"), 0);
    assert_int_equal(tun_stream_reset(hub.st[1], "x", "y"), AB_ECLOSED);
    /* deliver only the hub's RESET: the agent's queued body is dropped */
    assert_int_equal(move_one(&hub, &agent), 1);
    assert_string_equal(last(&agent, EV_RESET, 1)->code, "not_found");
    assert_int_equal(tun_stream_state(st), TUN_STREAM_CLOSED);
    tun_session_stats(agent.s, &stats);
    assert_int_equal(stats.buffered, 0);
    assert_int_equal(stats.resets_in, 1);
    assert_int_equal(pump(&agent, &hub), 0);
    /* no on_reset for a reset the glue asked for */
    assert_int_equal(count(&hub, EV_RESET, 0), 0);
    assert_int_equal(count(&hub, EV_CLOSED, 1), 1);
    assert_int_equal(count(&agent, EV_CLOSED, 1), 1);
    free_sides(&agent, &hub);
}

static void test_reset_inside_callback_is_deferred(void **state)
{
    struct side agent, hub;
    struct tun_stream *st;

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    hub.respond = true;
    agent.reset_in_data = true;
    handshake(&agent, &hub);
    st = open_stream(&agent, "/");
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(tun_stream_write(hub.st[1], "abc", 3), 0);
    assert_int_equal(move_one(&hub, &agent), 1);
    /* streamed a byte at a time, on_data saw one byte before the reset */
    assert_int_equal(agent.rx[1], g_piece == 1 ? 1 : 3);
    /* closed, but on_closed waits for gc, outside the callback */
    assert_int_equal(tun_stream_state(st), TUN_STREAM_CLOSED);
    assert_int_equal(count(&agent, EV_CLOSED, 1), 0);
    tun_session_gc(agent.s);
    assert_int_equal(count(&agent, EV_CLOSED, 1), 1);
    assert_int_equal(pump(&agent, &hub), 0);
    assert_string_equal(last(&hub, EV_RESET, 1)->code, TUN_RESET_CANCEL);
    free_sides(&agent, &hub);
}

/* ---- scheduling ------------------------------------------------------------- */

static void test_round_robin_and_control_first(void **state)
{
    struct side agent, hub;
    struct tun_stream *c, *a, *b;
    static uint8_t body[300 * 1024];
    struct tun_frame f;
    uint32_t order[16];
    int n = 0;
    json_t *report = json_object();

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    hub.consume = false;
    handshake(&agent, &hub);

    /* C exhausts its credit and stalls with data queued */
    c = open_stream(&agent, "/stalled");
    assert_int_equal(tun_stream_write(c, body, sizeof(body)), 0);
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(tun_stream_credit(c), 0);
    assert_true(tun_stream_pending(c) > 0);

    a = open_stream(&agent, "/a");
    b = open_stream(&agent, "/b");
    assert_int_equal(tun_stream_write(a, body, 96 * 1024), 0);
    assert_int_equal(tun_stream_write(b, body, 96 * 1024), 0);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_OPEN);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_OPEN);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_DATA);
    order[n++] = f.stream_id;
    /* a control frame queued now jumps ahead of the queued DATA */
    assert_int_equal(tun_session_send_json(agent.s, TUN_REPORT, report), 0);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_REPORT);
    while (take(&agent, &f)) {
        assert_int_equal(f.type, TUN_DATA);
        assert_int_equal(f.len, TUN_DATA_MAX);
        assert_true(n < (int)AB_ARRAY_LEN(order));
        order[n++] = f.stream_id;
    }
    /* A and B alternate; the stalled C never blocks them nor shows up */
    assert_int_equal(n, 6);
    for (int i = 0; i < n; i++)
        assert_int_equal(order[i], i % 2 == 0 ? tun_stream_id(a) : tun_stream_id(b));
    assert_int_equal(tun_stream_pending(a), 0);
    assert_int_equal(tun_stream_pending(b), 0);
    assert_true(tun_stream_pending(c) > 0);
    json_decref(report);
    free_sides(&agent, &hub);
}

static void test_end_follows_data(void **state)
{
    struct side agent;
    struct tun_stream *st;
    static uint8_t body[40 * 1024];
    struct tun_frame f;

    lone_agent(&agent, NULL);
    st = open_stream(&agent, "/");
    assert_int_equal(tun_stream_write(st, body, sizeof(body)), 0);
    assert_int_equal(tun_stream_end(st), 0);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_OPEN);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_DATA);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_DATA);
    assert_int_equal(f.len, sizeof(body) - TUN_DATA_MAX);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_END);
    assert_false(take(&agent, &f));
    tun_session_free(agent.s);
}

static void test_small_output_buffer(void **state)
{
    struct side agent;
    struct tun_stream *st;
    uint8_t small[TUN_HDR_LEN + 10];
    size_t len;
    struct tun_frame f;

    lone_agent(&agent, NULL);
    st = open_stream(&agent, "/");
    assert_int_equal(tun_stream_write(st, "0123456789abcdef", 16), 0);
    /* the OPEN does not fit: it stays queued */
    assert_int_equal(tun_session_next_frame(agent.s, small, sizeof(small), &len), TUN_FRAME_ECAP);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_OPEN);
    /* DATA is cut to what fits */
    assert_int_equal(tun_session_next_frame(agent.s, small, sizeof(small), &len), 0);
    assert_int_equal(len, sizeof(small));
    assert_int_equal(tun_stream_pending(st), 6);
    tun_session_free(agent.s);
}

/* ---- bounds ---------------------------------------------------------------- */

static void test_busy_refuses_new_opens(void **state)
{
    struct side agent, hub;
    struct tun_config hc = {.busy_bytes = 64 * 1024, .buf_max = 128 * 1024};
    struct tun_stream *hs;
    static uint8_t body[100 * 1024];
    struct tun_stats stats;
    int drains;

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, &hc);
    hub.respond = true;
    handshake(&agent, &hub);
    open_stream(&agent, "/one");
    assert_int_equal(pump(&agent, &hub), 0);
    hs = hub.st[1];
    assert_int_equal(tun_stream_write(hs, body, sizeof(body)), 0);

    /* the hub has 100 KiB queued, over its 64 KiB threshold */
    open_stream(&agent, "/two");
    while (move_one(&agent, &hub) == 1)
        ;
    assert_int_equal(count(&hub, EV_OPEN, 3), 0);
    tun_session_stats(hub.s, &stats);
    assert_int_equal(stats.refused_busy, 1);
    assert_int_equal(pump(&agent, &hub), 0);
    assert_string_equal(last(&agent, EV_RESET, 3)->code, TUN_RESET_BUSY);
    assert_int_equal(agent.rx[1], sizeof(body));

    /* writes past buf_max are refused; on_drain says when to go on */
    drains = count(&hub, EV_DRAIN, 1);
    assert_int_equal(tun_stream_write(hs, body, sizeof(body)), 0);
    assert_int_equal(tun_stream_write(hs, body, 40 * 1024), AB_EBUSY);
    assert_int_equal(count(&hub, EV_DRAIN, 1), drains);
    assert_int_equal(pump(&agent, &hub), 0);
    assert_true(count(&hub, EV_DRAIN, 1) > drains);
    assert_int_equal(tun_stream_write(hs, body, 40 * 1024), 0);

    /* once drained, OPENs are accepted again */
    assert_int_equal(pump(&agent, &hub), 0);
    open_stream(&agent, "/three");
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(count(&hub, EV_OPEN, 5), 1);
    free_sides(&agent, &hub);
}

static void test_blocked_writer_gets_drain(void **state)
{
    struct side agent;
    struct tun_config c = {.busy_bytes = 32 * 1024, .buf_max = 64 * 1024};
    struct tun_stream *big, *small;
    static uint8_t body[60 * 1024];
    struct tun_frame f;

    lone_agent(&agent, &c);
    big = open_stream(&agent, "/big");
    small = open_stream(&agent, "/small");
    assert_int_equal(tun_stream_write(big, body, sizeof(body)), 0);
    /* small has nothing queued of its own, but the session is full */
    assert_int_equal(tun_stream_write(small, body, 10 * 1024), AB_EBUSY);
    assert_int_equal(tun_stream_pending(small), 0);
    while (take(&agent, &f))
        ;
    assert_int_equal(count(&agent, EV_DRAIN, tun_stream_id(small)), 1);
    assert_int_equal(tun_stream_write(small, body, 10 * 1024), 0);
    tun_session_free(agent.s);
}

static void test_stream_buffer_and_table_limits(void **state)
{
    struct side agent, hub;
    struct tun_config ac = {.max_streams = 3, .stream_buf_max = 64 * 1024};
    struct tun_config hc = {.max_streams = 2};
    struct tun_stream *st, *extra;
    static uint8_t body[64 * 1024 + 1];
    struct tun_head h = {.service = "e2b", .method = "GET", .path = "/"};

    side_init(&agent, TUN_ROLE_AGENT, &ac);
    side_init(&hub, TUN_ROLE_HUB, &hc);
    handshake(&agent, &hub);
    st = open_stream(&agent, "/");
    assert_int_equal(tun_stream_write(st, body, sizeof(body)), AB_ELIMIT);
    assert_non_null(strstr(tun_session_error(agent.s), "stream buffer"));
    assert_int_equal(tun_stream_write(st, body, sizeof(body) - 1), 0);
    open_stream(&agent, "/");
    open_stream(&agent, "/");
    assert_int_equal(tun_stream_open(agent.s, &h, NULL, &extra), AB_ELIMIT);
    /* the hub holds two: the third OPEN gets busy */
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(count(&hub, EV_OPEN, 0), 2);
    assert_string_equal(last(&agent, EV_RESET, 5)->code, TUN_RESET_BUSY);
    free_sides(&agent, &hub);
}

static void test_config_validation(void **state)
{
    struct tun_session *s;
    char err[200];
    struct tun_config c = {.role = TUN_ROLE_AGENT, .window = 100};

    assert_int_equal(tun_session_new(&c, &s, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "window"));
    c = (struct tun_config){.role = 0};
    assert_int_equal(tun_session_new(&c, &s, err, sizeof(err)), AB_EINVAL);
    c = (struct tun_config){.role = TUN_ROLE_HUB, .max_streams = TUN_MAX_STREAMS_LIMIT + 1};
    assert_int_equal(tun_session_new(&c, &s, err, sizeof(err)), AB_EINVAL);
    c = (struct tun_config){.role = TUN_ROLE_HUB, .busy_bytes = 10, .buf_max = 5};
    assert_int_equal(tun_session_new(&c, &s, err, sizeof(err)), AB_EINVAL);
    c = (struct tun_config){.role = TUN_ROLE_HUB, .ctl_max = 1024};
    assert_int_equal(tun_session_new(&c, &s, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "ctl_max"));
    c = (struct tun_config){.role = TUN_ROLE_HUB};
    assert_int_equal(tun_session_new(&c, &s, err, sizeof(err)), 0);
    assert_int_equal(tun_session_role(s), TUN_ROLE_HUB);
    tun_session_free(s);
}

/* ---- SYNC ------------------------------------------------------------------- */

static void test_sync_reaps_leaked_streams(void **state)
{
    struct side agent, hub;
    struct tun_stream *a3, *h4;
    struct tun_frame f;
    struct tun_stats stats;

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    handshake(&agent, &hub);
    open_stream(&agent, "/kept");
    a3 = open_stream(&agent, "/leaked-by-agent");
    open_stream(&hub, "/leaked-by-hub");
    assert_int_equal(pump(&agent, &hub), 0);
    assert_non_null(hub.st[1]);
    assert_non_null(hub.st[3]);
    assert_non_null(agent.st[2]);

    /* the agent forgets 3 and 2, and the RESETs are lost */
    assert_int_equal(tun_stream_reset(a3, "cancel", NULL), 0);
    assert_int_equal(tun_stream_reset(agent.st[2], "cancel", NULL), 0);
    assert_int_equal(drop_output(&agent), 2);
    /* the hub opens 4; its OPEN has not reached the agent yet */
    h4 = open_stream(&hub, "/in-flight");

    assert_int_equal(tun_session_send_sync(agent.s), 0);
    assert_true(take(&agent, &f));
    assert_int_equal(f.type, TUN_SYNC);
    assert_int_equal(tun_frame_sync_watermark(&f), 2);
    assert_int_equal(tun_frame_sync_count(&f), 1);
    assert_int_equal(tun_frame_sync_id(&f, 0), 1);
    assert_int_equal(deliver(hub.s, wire, TUN_HDR_LEN + f.len), 0);

    assert_int_equal(last(&hub, EV_SYNC, 0)->n, 2);
    assert_string_equal(last(&hub, EV_RESET, 3)->code, TUN_RESET_UNKNOWN_STREAM);
    assert_string_equal(last(&hub, EV_RESET, 2)->code, TUN_RESET_UNKNOWN_STREAM);
    assert_int_equal(count(&hub, EV_RESET, 1), 0);
    assert_true(tun_stream_is_open(h4)); /* above the watermark: left alone */
    tun_session_stats(hub.s, &stats);
    assert_int_equal(stats.streams, 2);
    assert_int_equal(stats.reaped, 2);

    /* the RESETs for streams the agent no longer has are harmless */
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(count(&agent, EV_OPEN, 4), 1);
    assert_int_equal(count(&agent, EV_RESET, 0), 0);

    /* the hub's SYNC lists what the agent has: nothing to reap */
    assert_int_equal(tun_session_send_sync(hub.s), 0);
    assert_int_equal(pump(&agent, &hub), 0);
    assert_int_equal(last(&agent, EV_SYNC, 0)->n, 0);
    assert_true(tun_stream_is_open(agent.st[1]));
    assert_non_null(agent.st[4]);
    free_sides(&agent, &hub);
}

static void test_sync_malformed(void **state)
{
    struct side agent;
    uint8_t p[8] = {0, 0, 0, 1, 0, 0, 0, 0};

    /* watermark names an agent stream that was never opened */
    lone_agent(&agent, NULL);
    assert_int_equal(inject(&agent, TUN_SYNC, 0, p, 4), AB_EINVAL);
    assert_non_null(strstr(tun_session_error(agent.s), "watermark"));
    tun_session_free(agent.s);
    /* watermark of the wrong parity */
    lone_agent(&agent, NULL);
    p[3] = 2;
    assert_int_equal(inject(&agent, TUN_SYNC, 0, p, 4), AB_EINVAL);
    tun_session_free(agent.s);
    /* stream 0 listed */
    lone_agent(&agent, NULL);
    p[3] = 0;
    assert_int_equal(inject(&agent, TUN_SYNC, 0, p, 8), AB_EINVAL);
    tun_session_free(agent.s);
}

static void test_free_tells_every_stream(void **state)
{
    struct side agent, hub;

    side_init(&agent, TUN_ROLE_AGENT, NULL);
    side_init(&hub, TUN_ROLE_HUB, NULL);
    handshake(&agent, &hub);
    open_stream(&agent, "/");
    open_stream(&agent, "/");
    assert_int_equal(pump(&agent, &hub), 0);
    tun_session_free(hub.s);
    assert_int_equal(count(&hub, EV_RESET, 0), 2);
    assert_string_equal(last(&hub, EV_RESET, 1)->code, TUN_RESET_TUNNEL_CLOSED);
    assert_int_equal(count(&hub, EV_CLOSED, 0), 2);
    tun_session_free(agent.s);
    assert_int_equal(count(&agent, EV_CLOSED, 0), 2);
}

/* ---- streamed input ------------------------------------------------------------ */

static void test_streamed_data_goes_to_on_data_per_piece(void **state)
{
    struct side agent;
    static uint8_t m[TUN_HDR_LEN + TUN_DATA_MAX], chunk[TUN_DATA_MAX];
    struct tun_frame f = {.type = TUN_DATA, .stream_id = 1, .payload = chunk, .len = 1000};
    size_t n;
    struct tun_stats stats;

    for (size_t i = 0; i < sizeof(chunk); i++)
        chunk[i] = (uint8_t)i;
    lone_agent(&agent, NULL);
    agent.consume = false;
    open_stream(&agent, "/");
    drop_output(&agent);
    assert_int_equal(inject_str(&agent, TUN_RESPONSE, 1, "{\"status\":200}"), 0);
    assert_int_equal(tun_frame_encode(m, sizeof(m), &f, &n), 0);
    /* header split 3 + 5, then the payload in three pieces: three on_data
     * calls, no reassembly */
    int before = agent.data_calls;
    assert_int_equal(tun_session_input_begin(agent.s, n), 0);
    assert_int_equal(tun_session_input_more(agent.s, m, 3), 0);
    assert_int_equal(tun_session_input_more(agent.s, m + 3, 5), 0);
    assert_int_equal(agent.data_calls, before);
    assert_int_equal(tun_session_input_more(agent.s, m + 8, 100), 0);
    assert_int_equal(tun_session_input_more(agent.s, m + 108, 400), 0);
    assert_int_equal(tun_session_input_more(agent.s, m + 508, n - 508), 0);
    assert_int_equal(agent.data_calls, before + 3);
    assert_int_equal(agent.rx[1], 1000);
    /* the pieces count as received: all of them can be consumed */
    assert_int_equal(tun_stream_consumed(agent.st[1], 1000), 0);
    assert_int_equal(tun_stream_consumed(agent.st[1], 1), AB_EINVAL);
    /* a message that has not ended refuses a new one; more past its end too */
    assert_int_equal(tun_session_input_begin(agent.s, n), 0);
    assert_int_equal(tun_session_input_begin(agent.s, n), AB_EINVAL);
    assert_int_equal(tun_session_input_more(agent.s, m, n + 1), AB_EINVAL);
    assert_int_equal(tun_session_input_more(agent.s, m, n), 0);
    assert_int_equal(agent.rx[1], 2000);
    tun_session_stats(agent.s, &stats);
    assert_int_equal(stats.bytes_in, 2000);
    tun_session_free(agent.s);
}

static void test_streamed_data_checked_from_its_header(void **state)
{
    struct side agent;
    static uint8_t m[TUN_HDR_LEN + TUN_DATA_MAX], chunk[TUN_DATA_MAX];
    struct tun_frame f = {.type = TUN_DATA, .stream_id = 1, .payload = chunk, .len = 0};
    size_t n;

    lone_agent(&agent, NULL);
    agent.consume = false;
    open_stream(&agent, "/");
    drop_output(&agent);
    assert_int_equal(inject_str(&agent, TUN_RESPONSE, 1, "{\"status\":200}"), 0);
    f.len = sizeof(chunk);
    assert_int_equal(tun_frame_encode(m, sizeof(m), &f, &n), 0);
    for (int i = 0; i < TUN_INITIAL_WINDOW / TUN_DATA_MAX; i++)
        assert_int_equal(tun_session_input(agent.s, m, n), 0);
    /* past the credit: reset as soon as the header is in, no byte delivered */
    assert_int_equal(tun_session_input_begin(agent.s, n), 0);
    assert_int_equal(tun_session_input_more(agent.s, m, TUN_HDR_LEN), 0);
    assert_string_equal(last(&agent, EV_RESET, 1)->code, TUN_RESET_FLOW_CONTROL);
    assert_int_equal(tun_session_input_more(agent.s, m + TUN_HDR_LEN, n - TUN_HDR_LEN), 0);
    assert_int_equal(agent.rx[1], TUN_INITIAL_WINDOW);
    tun_session_free(agent.s);

    /* a DATA header over 32 KiB fails the session before its payload */
    lone_agent(&agent, NULL);
    uint8_t h[TUN_HDR_LEN] = {TUN_VERSION, TUN_DATA, 0, 0, 0, 0, 0, 1};
    assert_int_equal(tun_session_input_begin(agent.s, TUN_HDR_LEN + TUN_DATA_MAX + 1), 0);
    assert_int_equal(tun_session_input_more(agent.s, h, TUN_HDR_LEN), TUN_FRAME_ETOOBIG);
    tun_session_free(agent.s);

    /* the stream reset inside on_data: the rest of the frame is dropped */
    lone_agent(&agent, NULL);
    open_stream(&agent, "/");
    drop_output(&agent);
    assert_int_equal(inject_str(&agent, TUN_RESPONSE, 1, "{\"status\":200}"), 0);
    agent.reset_in_data = true;
    f.len = 100;
    assert_int_equal(tun_frame_encode(m, sizeof(m), &f, &n), 0);
    assert_int_equal(tun_session_input_begin(agent.s, n), 0);
    assert_int_equal(tun_session_input_more(agent.s, m, 50), 0);
    assert_int_equal(agent.rx[1], 42);
    int calls = agent.data_calls;
    assert_int_equal(tun_session_input_more(agent.s, m + 50, n - 50), 0);
    assert_int_equal(agent.rx[1], 42);
    assert_int_equal(agent.data_calls, calls);
    /* the session goes on */
    assert_int_equal(inject_str(&agent, TUN_EVENT, 0, "{}"), 0);
    tun_session_free(agent.s);
}

/* ---- backoff ---------------------------------------------------------------- */

static uint32_t xorshift(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static void test_backoff_bounds(void **state)
{
    struct tun_backoff b;
    uint32_t x = 12345, maxseen = 0;

    tun_backoff_init(&b, 0, 0, 0);
    assert_int_equal(b.base_ms, 500);
    assert_int_equal(b.cap_ms, 30000);
    assert_int_equal(b.reset_after_ms, 60000);
    /* the ceilings double from 0.5 s to the 30 s cap */
    const uint32_t ceil[] = {500, 1000, 2000, 4000, 8000, 16000, 30000, 30000};
    for (size_t i = 0; i < AB_ARRAY_LEN(ceil); i++) {
        assert_int_equal(tun_backoff_ceiling(&b), ceil[i]);
        assert_int_equal(tun_backoff_next(&b, 0, UINT32_MAX), ceil[i]);
    }
    assert_int_equal(tun_backoff_next(&b, 0, 0), 0);
    /* many draws, never above the ceiling nor the cap; attempts saturate */
    tun_backoff_init(&b, 0, 0, 0);
    for (int i = 0; i < 100000; i++) {
        uint32_t c = tun_backoff_ceiling(&b);
        uint32_t d = tun_backoff_next(&b, i % 7 == 0 ? 59999 : 0, xorshift(&x));
        assert_true(d <= c);
        assert_true(d <= 30000);
        if (d > maxseen)
            maxseen = d;
    }
    assert_true(maxseen > 25000); /* the jitter really spans the range */
}

static void test_backoff_resets_after_connected_period(void **state)
{
    struct tun_backoff b;

    tun_backoff_init(&b, 0, 0, 0);
    for (int i = 0; i < 10; i++)
        tun_backoff_next(&b, 0, 0);
    assert_int_equal(tun_backoff_ceiling(&b), 30000);
    /* a session shorter than 60 s does not reset */
    assert_int_equal(tun_backoff_next(&b, 59999, UINT32_MAX), 30000);
    /* one that lasted 60 s does: the next draw is within 0.5 s */
    assert_int_equal(tun_backoff_next(&b, 60000, UINT32_MAX), 500);
    assert_int_equal(tun_backoff_ceiling(&b), 1000);

    /* configurable */
    tun_backoff_init(&b, 100, 250, 1000);
    assert_int_equal(tun_backoff_next(&b, 0, UINT32_MAX), 100);
    assert_int_equal(tun_backoff_next(&b, 0, UINT32_MAX), 200);
    assert_int_equal(tun_backoff_next(&b, 0, UINT32_MAX), 250);
    assert_int_equal(tun_backoff_next(&b, 1000, UINT32_MAX), 100);
    /* base above cap is clamped */
    tun_backoff_init(&b, 5000, 1000, 0);
    assert_int_equal(tun_backoff_next(&b, 0, UINT32_MAX), 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_and_ids),
        cmocka_unit_test(test_handshake_order_enforced),
        cmocka_unit_test(test_report_and_event),
        cmocka_unit_test(test_request_response_lifecycle),
        cmocka_unit_test(test_open_refused_without_handler),
        cmocka_unit_test(test_bad_open_head_resets_stream_only),
        cmocka_unit_test(test_wrong_parity_and_order),
        cmocka_unit_test(test_malformed_frames_fail_session),
        cmocka_unit_test(test_flow_control_credit_and_window),
        cmocka_unit_test(test_request_body_limited_to_initial_window),
        cmocka_unit_test(test_data_beyond_credit_resets_stream),
        cmocka_unit_test(test_stream_level_violations),
        cmocka_unit_test(test_reset_from_peer),
        cmocka_unit_test(test_reset_inside_callback_is_deferred),
        cmocka_unit_test(test_round_robin_and_control_first),
        cmocka_unit_test(test_end_follows_data),
        cmocka_unit_test(test_small_output_buffer),
        cmocka_unit_test(test_busy_refuses_new_opens),
        cmocka_unit_test(test_blocked_writer_gets_drain),
        cmocka_unit_test(test_stream_buffer_and_table_limits),
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_sync_reaps_leaked_streams),
        cmocka_unit_test(test_sync_malformed),
        cmocka_unit_test(test_free_tells_every_stream),
        cmocka_unit_test(test_streamed_data_goes_to_on_data_per_piece),
        cmocka_unit_test(test_streamed_data_checked_from_its_header),
        cmocka_unit_test(test_backoff_bounds),
        cmocka_unit_test(test_backoff_resets_after_connected_period),
    };

    /* whole messages, then streamed at a byte, an odd size, a large one */
    static const size_t pieces[] = {0, 1, 7, 4093};
    int failed = 0;

    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        char name[64];
        g_piece = pieces[i];
        snprintf(name, sizeof(name), "input in pieces of %zu (0: whole)", g_piece);
        failed +=
            _cmocka_run_group_tests(name, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
    }
    return failed;
}
