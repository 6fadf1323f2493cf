/* Tunnel frame codec and JSON heads: every type round-trips, every malformed
 * frame is refused with its own error, heads keep their bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/tunnel.h"

static uint8_t big[TUN_FRAME_MAX + 16];
static uint8_t payload[TUN_REPORT_MAX + 16];

/* Builds a raw message byte by byte, bypassing the encoder's checks. */
static size_t raw(uint8_t *out, uint8_t version, uint8_t type, uint32_t id, size_t len)
{
    out[0] = version;
    out[1] = type;
    out[2] = 0;
    out[3] = 0;
    out[4] = (uint8_t)(id >> 24);
    out[5] = (uint8_t)(id >> 16);
    out[6] = (uint8_t)(id >> 8);
    out[7] = (uint8_t)id;
    memset(out + TUN_HDR_LEN, 'x', len);
    return TUN_HDR_LEN + len;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void roundtrip(uint8_t type, uint32_t id, const void *p, size_t len)
{
    struct tun_frame in = {.type = type, .flags = 0x5a, .stream_id = id, .payload = p, .len = len};
    struct tun_frame out;
    size_t n;

    assert_int_equal(tun_frame_encode(big, sizeof(big), &in, &n), 0);
    assert_int_equal(n, TUN_HDR_LEN + len);
    assert_int_equal(big[0], TUN_VERSION);
    assert_int_equal(big[3], 0);
    assert_int_equal(tun_frame_decode(big, n, &out), 0);
    assert_int_equal(out.type, type);
    assert_int_equal(out.flags, 0x5a);
    assert_int_equal(out.stream_id, id);
    assert_int_equal(out.len, len);
    if (len > 0)
        assert_memory_equal(out.payload, p, len);
}

static void test_every_type_roundtrips(void **state)
{
    const char *json = "{\"a\":1}";
    uint8_t win[4], sync[12];

    put32(win, 65536);
    put32(sync, 4);
    put32(sync + 4, 1);
    put32(sync + 8, 0xffffffffu);
    roundtrip(TUN_HELLO, 0, json, strlen(json));
    roundtrip(TUN_WELCOME, 0, json, strlen(json));
    roundtrip(TUN_OPEN, 1, json, strlen(json));
    roundtrip(TUN_RESPONSE, 2, json, strlen(json));
    roundtrip(TUN_DATA, 0xfffffffe, "body", 4);
    roundtrip(TUN_DATA, 3, NULL, 0);
    roundtrip(TUN_END, 5, NULL, 0);
    roundtrip(TUN_RESET, 7, json, strlen(json));
    roundtrip(TUN_WINDOW, 9, win, 4);
    roundtrip(TUN_REPORT, 0, json, strlen(json));
    roundtrip(TUN_EVENT, 0, json, strlen(json));
    roundtrip(TUN_SYNC, 0, sync, sizeof(sync));
    for (uint8_t t = 1; t <= TUN_TYPE_MAX; t++)
        assert_string_not_equal(tun_type_name(t), "unknown");
    assert_string_equal(tun_type_name(0), "unknown");
    assert_string_equal(tun_type_name(12), "unknown");
}

static void test_limits_exactly(void **state)
{
    memset(payload, 'p', sizeof(payload));
    roundtrip(TUN_DATA, 1, payload, TUN_DATA_MAX);
    roundtrip(TUN_OPEN, 1, payload, TUN_CONTROL_MAX);
    roundtrip(TUN_REPORT, 0, payload, TUN_REPORT_MAX);
    assert_int_equal(tun_frame_max_payload(TUN_DATA), 32 * 1024);
    assert_int_equal(tun_frame_max_payload(TUN_EVENT), 64 * 1024);
    assert_int_equal(tun_frame_max_payload(TUN_REPORT), 1024 * 1024);
    assert_int_equal(tun_frame_max_payload(99), 0);
}

static void test_window_and_sync_accessors(void **state)
{
    uint8_t m[64];
    struct tun_frame f;
    size_t n = raw(m, 1, TUN_WINDOW, 3, 4);

    put32(m + 8, 0x7fffffff);
    assert_int_equal(tun_frame_decode(m, n, &f), 0);
    assert_int_equal(tun_frame_window(&f), 0x7fffffffu);

    n = raw(m, 1, TUN_SYNC, 0, 12);
    put32(m + 8, 6);
    put32(m + 12, 1);
    put32(m + 16, 3);
    assert_int_equal(tun_frame_decode(m, n, &f), 0);
    assert_int_equal(tun_frame_sync_watermark(&f), 6);
    assert_int_equal(tun_frame_sync_count(&f), 2);
    assert_int_equal(tun_frame_sync_id(&f, 0), 1);
    assert_int_equal(tun_frame_sync_id(&f, 1), 3);
    assert_int_equal(tun_frame_sync_id(&f, 2), 0); /* out of range */
}

static void test_short_frames(void **state)
{
    uint8_t m[8] = {1, TUN_DATA, 0, 0, 0, 0, 0, 1};
    struct tun_frame f;

    for (size_t len = 0; len < TUN_HDR_LEN; len++)
        assert_int_equal(tun_frame_decode(m, len, &f), TUN_FRAME_ESHORT);
    assert_int_equal(tun_frame_decode(NULL, 0, &f), TUN_FRAME_ESHORT);
    assert_int_equal(tun_frame_decode(m, 8, &f), 0);
}

static void test_wrong_version(void **state)
{
    uint8_t m[16];
    struct tun_frame f;

    assert_int_equal(tun_frame_decode(m, raw(m, 0, TUN_DATA, 1, 1), &f), TUN_FRAME_EVERSION);
    assert_int_equal(tun_frame_decode(m, raw(m, 2, TUN_DATA, 1, 1), &f), TUN_FRAME_EVERSION);
    assert_int_equal(tun_frame_decode(m, raw(m, 255, TUN_DATA, 1, 1), &f), TUN_FRAME_EVERSION);
}

static void test_unknown_type(void **state)
{
    uint8_t m[16];
    struct tun_frame f;
    struct tun_frame bad = {.type = 12, .stream_id = 1};
    size_t n;

    assert_int_equal(tun_frame_decode(m, raw(m, 1, 0, 1, 0), &f), TUN_FRAME_ETYPE);
    assert_int_equal(tun_frame_decode(m, raw(m, 1, 12, 1, 0), &f), TUN_FRAME_ETYPE);
    assert_int_equal(tun_frame_decode(m, raw(m, 1, 255, 0, 0), &f), TUN_FRAME_ETYPE);
    assert_int_equal(tun_frame_encode(m, sizeof(m), &bad, &n), TUN_FRAME_ETYPE);
}

static void test_oversized(void **state)
{
    struct tun_frame f;
    struct tun_frame big_data = {
        .type = TUN_DATA, .stream_id = 1, .payload = payload, .len = TUN_DATA_MAX + 1};
    size_t n;

    assert_int_equal(tun_frame_decode(big, raw(big, 1, TUN_DATA, 1, TUN_DATA_MAX + 1), &f),
                     TUN_FRAME_ETOOBIG);
    assert_int_equal(tun_frame_decode(big, raw(big, 1, TUN_OPEN, 1, TUN_CONTROL_MAX + 1), &f),
                     TUN_FRAME_ETOOBIG);
    assert_int_equal(tun_frame_decode(big, raw(big, 1, TUN_HELLO, 0, TUN_CONTROL_MAX + 1), &f),
                     TUN_FRAME_ETOOBIG);
    assert_int_equal(tun_frame_decode(big, raw(big, 1, TUN_RESET, 1, TUN_CONTROL_MAX + 1), &f),
                     TUN_FRAME_ETOOBIG);
    assert_int_equal(tun_frame_decode(big, raw(big, 1, TUN_REPORT, 0, TUN_REPORT_MAX + 1), &f),
                     TUN_FRAME_ETOOBIG);
    assert_int_equal(tun_frame_decode(big, raw(big, 1, TUN_SYNC, 0, TUN_CONTROL_MAX + 4), &f),
                     TUN_FRAME_ETOOBIG);
    assert_int_equal(tun_frame_encode(big, sizeof(big), &big_data, &n), TUN_FRAME_ETOOBIG);
}

static void test_stream_id_rules(void **state)
{
    uint8_t m[32];
    struct tun_frame f;
    const uint8_t stream_types[] = {TUN_OPEN, TUN_RESPONSE, TUN_DATA, TUN_END, TUN_RESET};
    const uint8_t conn_types[] = {TUN_HELLO, TUN_WELCOME, TUN_REPORT, TUN_EVENT};
    size_t n;

    for (size_t i = 0; i < AB_ARRAY_LEN(stream_types); i++)
        assert_int_equal(tun_frame_decode(m, raw(m, 1, stream_types[i], 0, 0), &f),
                         TUN_FRAME_ESTREAM0);
    n = raw(m, 1, TUN_WINDOW, 0, 4);
    put32(m + 8, 1);
    assert_int_equal(tun_frame_decode(m, n, &f), TUN_FRAME_ESTREAM0);
    for (size_t i = 0; i < AB_ARRAY_LEN(conn_types); i++) {
        assert_false(tun_type_is_connection(stream_types[i % AB_ARRAY_LEN(stream_types)]));
        assert_true(tun_type_is_connection(conn_types[i]));
        assert_int_equal(tun_frame_decode(m, raw(m, 1, conn_types[i], 1, 2), &f),
                         TUN_FRAME_ECONNID);
    }
    n = raw(m, 1, TUN_SYNC, 0x80000000u, 4);
    assert_int_equal(tun_frame_decode(m, n, &f), TUN_FRAME_ECONNID);
}

static void test_window_payload(void **state)
{
    uint8_t m[32];
    struct tun_frame f;
    size_t n;

    assert_int_equal(tun_frame_decode(m, raw(m, 1, TUN_WINDOW, 1, 0), &f), TUN_FRAME_EWINDOW);
    assert_int_equal(tun_frame_decode(m, raw(m, 1, TUN_WINDOW, 1, 3), &f), TUN_FRAME_EWINDOW);
    assert_int_equal(tun_frame_decode(m, raw(m, 1, TUN_WINDOW, 1, 5), &f), TUN_FRAME_EWINDOW);
    n = raw(m, 1, TUN_WINDOW, 1, 4);
    put32(m + 8, 0);
    assert_int_equal(tun_frame_decode(m, n, &f), TUN_FRAME_EWINDOW);
    put32(m + 8, 0x80000000u);
    assert_int_equal(tun_frame_decode(m, n, &f), TUN_FRAME_EWINDOW);
    put32(m + 8, 1);
    assert_int_equal(tun_frame_decode(m, n, &f), 0);
}

static void test_sync_and_end_payload(void **state)
{
    uint8_t m[32];
    struct tun_frame f;

    assert_int_equal(tun_frame_decode(m, raw(m, 1, TUN_SYNC, 0, 0), &f), TUN_FRAME_ESYNC);
    assert_int_equal(tun_frame_decode(m, raw(m, 1, TUN_SYNC, 0, 6), &f), TUN_FRAME_ESYNC);
    assert_int_equal(tun_frame_decode(m, raw(m, 1, TUN_SYNC, 0, 7), &f), TUN_FRAME_ESYNC);
    assert_int_equal(tun_frame_decode(m, raw(m, 1, TUN_SYNC, 0, 8), &f), 0);
    assert_int_equal(tun_frame_decode(m, raw(m, 1, TUN_END, 1, 1), &f), TUN_FRAME_EEND);
}

static void test_errors_are_distinct_and_named(void **state)
{
    const int errs[] = {TUN_FRAME_ESHORT,  TUN_FRAME_EVERSION, TUN_FRAME_ETYPE,
                        TUN_FRAME_ETOOBIG, TUN_FRAME_ESTREAM0, TUN_FRAME_ECONNID,
                        TUN_FRAME_EWINDOW, TUN_FRAME_ESYNC,    TUN_FRAME_EEND,
                        TUN_FRAME_ECAP};

    for (size_t i = 0; i < AB_ARRAY_LEN(errs); i++) {
        assert_true(errs[i] < AB_EDENIED);
        for (size_t j = i + 1; j < AB_ARRAY_LEN(errs); j++) {
            assert_int_not_equal(errs[i], errs[j]);
            assert_string_not_equal(tun_frame_strerror(errs[i]), tun_frame_strerror(errs[j]));
        }
    }
    assert_string_equal(tun_frame_strerror(AB_ENOMEM), ab_strerror(AB_ENOMEM));
}

static void test_encode_capacity(void **state)
{
    uint8_t m[16];
    struct tun_frame f = {
        .type = TUN_DATA, .stream_id = 1, .payload = (const uint8_t *)"12345678", .len = 8};
    size_t n = 99;

    assert_int_equal(tun_frame_encode(m, 15, &f, &n), TUN_FRAME_ECAP);
    assert_int_equal(n, 0);
    assert_int_equal(tun_frame_encode(m, 4, &f, &n), TUN_FRAME_ECAP);
    assert_int_equal(tun_frame_encode(m, 16, &f, &n), 0);
    assert_int_equal(n, 16);
    f.payload = NULL;
    assert_int_equal(tun_frame_encode(m, 16, &f, &n), AB_EINVAL);
}

/* ---- heads ------------------------------------------------------------- */

static void test_open_head_roundtrip(void **state)
{
    struct tun_head h = {.service = "e2b",
                         .method = "POST",
                         .path = "/sandboxes?x=1",
                         .window = 1 << 20,
                         .nheaders = 3};
    struct tun_head out;
    char *text, err[200];
    size_t len;

    h.headers[0] = (struct tun_header){"Content-Type", "application/json"};
    h.headers[1] = (struct tun_header){"Set-Cookie", "a=1"};
    h.headers[2] = (struct tun_header){"Set-Cookie", "b=2"};
    assert_int_equal(tun_open_head_encode(&h, &text, &len, err, sizeof(err)), 0);
    assert_int_equal(strlen(text), len);
    assert_int_equal(tun_open_head_parse(text, len, &out, err, sizeof(err)), 0);
    assert_string_equal(out.service, "e2b");
    assert_string_equal(out.method, "POST");
    assert_string_equal(out.path, "/sandboxes?x=1");
    assert_int_equal(out.window, 1 << 20);
    assert_int_equal(out.nheaders, 3);
    assert_string_equal(out.headers[0].name, "Content-Type");
    assert_string_equal(out.headers[2].value, "b=2"); /* order and repeats survive */
    assert_non_null(out.json);
    tun_head_release(&out);
    assert_null(out.json);
    free(text);
}

static void test_response_head_roundtrip(void **state)
{
    struct tun_head h = {.status = 404, .window = 0, .nheaders = 1};
    struct tun_head out;
    char *text, err[200];
    size_t len;

    h.headers[0] = (struct tun_header){"X-A", "\t v\xc3\xa9"};
    assert_int_equal(tun_response_head_encode(&h, &text, &len, err, sizeof(err)), 0);
    assert_int_equal(tun_response_head_parse(text, len, &out, err, sizeof(err)), 0);
    assert_int_equal(out.status, 404);
    assert_int_equal(out.window, 0);
    assert_string_equal(out.headers[0].value, "\t v\xc3\xa9");
    tun_head_release(&out);
    free(text);

    /* window absent → the initial window; unknown fields are kept in json */
    const char *minimal = "{\"status\":200,\"extra\":true}";
    assert_int_equal(tun_response_head_parse(minimal, strlen(minimal), &out, err, sizeof(err)), 0);
    assert_int_equal(out.window, TUN_INITIAL_WINDOW);
    assert_int_equal(out.nheaders, 0);
    assert_true(json_is_true(json_object_get(out.json, "extra")));
    tun_head_release(&out);
}

static void expect_parse_open(const char *json, int rc, const char *needle)
{
    struct tun_head out;
    char err[256] = "";

    assert_int_equal(tun_open_head_parse(json, strlen(json), &out, err, sizeof(err)), rc);
    if (needle != NULL && strstr(err, needle) == NULL)
        fail_msg("error '%s' does not mention '%s'", err, needle);
    assert_null(out.json);
}

static void test_open_head_refusals(void **state)
{
    expect_parse_open("[1]", AB_EINVAL, "object");
    expect_parse_open("{\"service\":", AB_EINVAL, "not valid JSON");
    expect_parse_open("{\"method\":\"GET\",\"path\":\"/\"}", AB_EINVAL, "service");
    expect_parse_open("{\"service\":\"e2b\",\"path\":\"/\"}", AB_EINVAL, "method");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\"}", AB_EINVAL, "path");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"G T\",\"path\":\"/\"}", AB_EINVAL,
                      "method");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"x\"}", AB_EINVAL, "path");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/a b\"}", AB_EINVAL,
                      "path");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\\u0000\"}", AB_EINVAL,
                      "NUL");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\",\"window\":-1}",
                      AB_EINVAL, "window");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\",\"window\":"
                      "16777217}",
                      AB_EINVAL, "window");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\",\"headers\":{}}",
                      AB_EINVAL, "headers");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\",\"headers\":"
                      "[[\"a\"]]}",
                      AB_EINVAL, "headers[0]");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\",\"headers\":"
                      "[[\"a\",\"x\\r\\nInjected: 1\"]]}",
                      AB_EINVAL, "control characters");
    expect_parse_open("{\"service\":\"e2b\",\"method\":\"GET\",\"path\":\"/\",\"headers\":"
                      "[[\"bad name\",\"v\"]]}",
                      AB_EINVAL, "token");
    expect_parse_open("{\"service\":\"e2b\",\"service\":\"x\",\"method\":\"GET\",\"path\":\"/\"}",
                      AB_EINVAL, "JSON");
}

static void test_head_bounds(void **state)
{
    static char path[TUN_PATH_MAX + 2], value[TUN_HEADER_VALUE_MAX + 2];
    struct tun_head h = {.service = "data", .method = "GET", .path = path};
    char *text = NULL, err[256];
    size_t len;
    json_t *obj, *hdrs;
    char *dumped;

    path[0] = '/';
    memset(path + 1, 'a', TUN_PATH_MAX - 1);
    path[TUN_PATH_MAX] = '\0';
    assert_int_equal(tun_open_head_encode(&h, &text, &len, err, sizeof(err)), 0);
    free(text);
    path[TUN_PATH_MAX] = 'a'; /* one over */
    path[TUN_PATH_MAX + 1] = '\0';
    assert_int_equal(tun_open_head_encode(&h, &text, &len, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "8192"));
    assert_null(text);

    h.path = "/";
    memset(value, 'v', TUN_HEADER_VALUE_MAX);
    value[TUN_HEADER_VALUE_MAX] = '\0';
    h.nheaders = 1;
    h.headers[0] = (struct tun_header){"X-Big", value};
    assert_int_equal(tun_open_head_encode(&h, &text, &len, err, sizeof(err)), 0);
    free(text);
    value[TUN_HEADER_VALUE_MAX] = 'v';
    value[TUN_HEADER_VALUE_MAX + 1] = '\0';
    assert_int_equal(tun_open_head_encode(&h, &text, &len, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "X-Big"));

    h.nheaders = TUN_MAX_HEADERS + 1;
    assert_int_equal(tun_open_head_encode(&h, &text, &len, err, sizeof(err)), AB_ELIMIT);

    /* 65 headers on the wire are refused by the parser too */
    obj = json_pack("{ss ss ss}", "service", "e2b", "method", "GET", "path", "/");
    hdrs = json_array();
    for (int i = 0; i <= TUN_MAX_HEADERS; i++)
        json_array_append_new(hdrs, json_pack("[ss]", "a", "b"));
    json_object_set_new(obj, "headers", hdrs);
    dumped = json_dumps(obj, JSON_COMPACT);
    expect_parse_open(dumped, AB_ELIMIT, "64");
    free(dumped);
    json_decref(obj);

    /* eight 8 KiB headers make a head over the 64 KiB frame limit */
    value[TUN_HEADER_VALUE_MAX] = '\0';
    h.nheaders = 8;
    for (int i = 0; i < 8; i++)
        h.headers[i] = (struct tun_header){"X-Big", value};
    assert_int_equal(tun_open_head_encode(&h, &text, &len, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "65536"));
}

static void test_response_head_refusals(void **state)
{
    struct tun_head out;
    struct tun_head h = {.status = 99};
    char err[200], *text;
    size_t len;
    const char *bad[] = {"{}",
                         "{\"status\":\"200\"}",
                         "{\"status\":600}",
                         "{\"status\":99}",
                         "{\"status\":200,\"window\":1.5}",
                         "nope"};

    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
        assert_int_equal(tun_response_head_parse(bad[i], strlen(bad[i]), &out, err, sizeof(err)),
                         AB_EINVAL);
    assert_int_equal(tun_response_head_encode(&h, &text, &len, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "status"));
}

static void test_reset_payload(void **state)
{
    static char longmsg[TUN_RESET_MESSAGE_MAX * 2];
    char code[TUN_RESET_CODE_MAX + 1], msg[TUN_RESET_MESSAGE_MAX + 1], err[200];
    char *text;
    size_t len;

    assert_int_equal(tun_reset_encode(TUN_RESET_BUSY, "too much", &text, &len), 0);
    assert_int_equal(
        tun_reset_parse(text, len, code, sizeof(code), msg, sizeof(msg), err, sizeof(err)), 0);
    assert_string_equal(code, "busy");
    assert_string_equal(msg, "too much");
    free(text);

    memset(longmsg, 'm', sizeof(longmsg) - 1);
    assert_int_equal(tun_reset_encode("cancel", longmsg, &text, &len), 0);
    assert_int_equal(
        tun_reset_parse(text, len, code, sizeof(code), msg, sizeof(msg), err, sizeof(err)), 0);
    assert_int_equal(strlen(msg), TUN_RESET_MESSAGE_MAX);
    free(text);

    assert_int_equal(tun_reset_encode("", "x", &text, &len), AB_EINVAL);
    assert_int_equal(tun_reset_encode("has space", "x", &text, &len), AB_EINVAL);
    assert_int_equal(tun_reset_encode("ok", "\xff\xfe", &text, &len), 0); /* not UTF-8: replaced */
    free(text);
    assert_int_equal(tun_reset_parse("{\"message\":\"m\"}", 15, code, sizeof(code), msg,
                                     sizeof(msg), err, sizeof(err)),
                     AB_EINVAL);
    assert_non_null(strstr(err, "code"));
    assert_int_equal(
        tun_reset_parse("{\"code\":1}", 10, code, sizeof(code), msg, sizeof(msg), err, sizeof(err)),
        AB_EINVAL);
}

/* A control payload over TUN_CONTROL_MAX keeps its own code (AB_ELIMIT, not
 * the parse error's AB_EINVAL) in every head parser; a RESET code that does not
 * fit the caller's buffer is refused, never cut into another code. */
static void test_control_limit_keeps_its_code(void **state)
{
    size_t n = TUN_CONTROL_MAX + 1;
    char *huge = malloc(n);
    char code[8], msg[32], err[200] = "";
    struct tun_head out;

    assert_non_null(huge);
    memset(huge, ' ', n);
    huge[0] = '{';
    huge[n - 1] = '}';
    assert_int_equal(tun_open_head_parse(huge, n, &out, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "65536-byte limit"));
    err[0] = '\0';
    assert_int_equal(tun_response_head_parse(huge, n, &out, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "65536-byte limit"));
    err[0] = '\0';
    assert_int_equal(
        tun_reset_parse(huge, n, code, sizeof(code), msg, sizeof(msg), err, sizeof(err)),
        AB_ELIMIT);
    assert_non_null(strstr(err, "65536-byte limit"));
    free(huge);

    const char *longcode = "{\"code\":\"protocol_error\",\"message\":\"m\"}";
    assert_int_equal(tun_reset_parse(longcode, strlen(longcode), code, sizeof(code), msg,
                                     sizeof(msg), err, sizeof(err)),
                     AB_ELIMIT);
    assert_non_null(strstr(err, "longer than 7 characters"));
    assert_string_equal(code, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type_roundtrips),
        cmocka_unit_test(test_limits_exactly),
        cmocka_unit_test(test_window_and_sync_accessors),
        cmocka_unit_test(test_short_frames),
        cmocka_unit_test(test_wrong_version),
        cmocka_unit_test(test_unknown_type),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_stream_id_rules),
        cmocka_unit_test(test_window_payload),
        cmocka_unit_test(test_sync_and_end_payload),
        cmocka_unit_test(test_errors_are_distinct_and_named),
        cmocka_unit_test(test_encode_capacity),
        cmocka_unit_test(test_open_head_roundtrip),
        cmocka_unit_test(test_response_head_roundtrip),
        cmocka_unit_test(test_open_head_refusals),
        cmocka_unit_test(test_head_bounds),
        cmocka_unit_test(test_response_head_refusals),
        cmocka_unit_test(test_reset_payload),
        cmocka_unit_test(test_control_limit_keeps_its_code),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
