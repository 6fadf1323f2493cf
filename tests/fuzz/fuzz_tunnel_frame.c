/* Fuzzes the tunnel frame decoder, the JSON head parsers and a whole
 * session fed arbitrary frames.
 *
 * Input: the whole buffer goes to the decoder and the parsers. For the
 * session, byte 0 picks the role, whether the handshake is done for it and
 * small limits; the rest is a list of [u16 BE length][message] records, each
 * one tun_session_input() call (with mode bit 128, one message streamed
 * through tun_session_input_begin/more in pieces of a size the record's
 * length picks, as the raw-socket framing feeds it). Between records the session's output is
 * drained and every frame it produces must decode; the glue's behaviour is
 * played by callbacks that respond, write, end, reset and consume. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/tunnel.h"

static uint8_t out[TUN_FRAME_MAX];
static uint8_t scratch[TUN_FRAME_MAX];

static void check_output(struct tun_session *s, int max)
{
    struct tun_frame f;
    size_t len;

    for (int i = 0; i < max; i++) {
        if (tun_session_next_frame(s, out, sizeof(out), &len) != 0 || len == 0)
            return;
        /* we never send what we would refuse */
        if (tun_frame_decode(out, len, &f) != 0)
            __builtin_trap();
    }
}

static void cb_hello(struct tun_session *s, json_t *msg, void *arg)
{
    json_t *w = json_object();

    tun_session_send_json(s, TUN_WELCOME, w);
    json_decref(w);
}

static void cb_open(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    uint32_t id = tun_stream_id(st);
    struct tun_header h = {"Content-Type", "text/plain"};

    switch ((id >> 1) % 4) {
    case 0:
        tun_stream_respond(st, 200, &h, 1);
        tun_stream_write(st, "hello", 5);
        tun_stream_end(st);
        break;
    case 1:
        tun_stream_reset(st, TUN_RESET_NOT_FOUND, head->service);
        break;
    case 2:
        tun_stream_respond(st, 404, NULL, 0);
        break;
    default: /* keep it open, unanswered */
        break;
    }
}

static void cb_response(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    tun_stream_write(st, head->headers[0].name ? "x" : "yy", 1);
}

static void cb_data(struct tun_stream *st, const uint8_t *data, size_t len, void *arg)
{
    tun_stream_consumed(st, len);
    if (len > 0 && data[0] == 'R')
        tun_stream_reset(st, TUN_RESET_CANCEL, "fuzz");
    else if (len > 0 && data[0] == 'W')
        tun_stream_write(st, data, len);
}

static void cb_end(struct tun_stream *st, void *arg)
{
    tun_stream_end(st);
}

static void cb_drain(struct tun_stream *st, void *arg)
{
    tun_stream_write(st, "more", 4);
}

/* One message, whole or streamed in pieces. */
static int input(struct tun_session *s, const uint8_t *m, size_t len, bool streamed)
{
    if (!streamed)
        return tun_session_input(s, m, len);
    size_t piece = 1 + len % 97;
    int rc = tun_session_input_begin(s, len);
    if (rc == 0 && len == 0)
        rc = tun_session_input_more(s, m, 0);
    for (size_t o = 0; rc == 0 && o < len; o += piece)
        rc = tun_session_input_more(s, m + o, AB_MIN(piece, len - o));
    return rc;
}

static const struct tun_callbacks callbacks = {
    .on_hello = cb_hello,
    .on_open = cb_open,
    .on_response = cb_response,
    .on_data = cb_data,
    .on_end = cb_end,
    .on_drain = cb_drain,
};

static void fuzz_parsers(const uint8_t *data, size_t size)
{
    struct tun_frame f, g;
    struct tun_head h;
    char err[128], code[TUN_RESET_CODE_MAX + 1], msg[256];
    size_t len;

    if (tun_frame_decode(data, size, &f) == 0) {
        /* what decodes re-encodes to the same bytes, bar the reserved byte */
        if (tun_frame_encode(scratch, sizeof(scratch), &f, &len) != 0 || len != size ||
            memcmp(scratch + 4, data + 4, size - 4) != 0 || tun_frame_decode(scratch, len, &g) ||
            g.type != f.type || g.flags != f.flags)
            __builtin_trap();
    }
    if (tun_open_head_parse(data, size, &h, err, sizeof(err)) == 0) {
        char *text;
        /* what we accept we can send on (bar growing past the frame limit,
         * since encoding adds the defaulted fields) */
        int rc = tun_open_head_encode(&h, &text, &len, err, sizeof(err));
        if (rc != 0 && rc != AB_ELIMIT)
            __builtin_trap();
        free(text);
        tun_head_release(&h);
    }
    if (tun_response_head_parse(data, size, &h, err, sizeof(err)) == 0)
        tun_head_release(&h);
    tun_reset_parse(data, size, code, sizeof(code), msg, sizeof(msg), err, sizeof(err));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tun_config c = {.cb = &callbacks};
    struct tun_session *s;
    struct tun_stream *st;
    struct tun_head oh = {.service = "e2b", .method = "GET", .path = "/"};
    char err[128];
    uint8_t mode;
    size_t pos = 1;

    fuzz_parsers(data, size);
    if (size < 1)
        return 0;
    mode = data[0];
    c.role = (mode & 1) ? TUN_ROLE_HUB : TUN_ROLE_AGENT;
    if (mode & 4) { /* small limits, to reach the refusals */
        c.max_streams = 4;
        c.window = TUN_WINDOW_MIN;
        c.stream_buf_max = 8 * 1024;
        c.busy_bytes = 256;
        c.buf_max = 16 * 1024;
    }
    if (tun_session_new(&c, &s, err, sizeof(err)) != 0)
        __builtin_trap();
    if (mode & 2) { /* handshake done, so stream frames get through */
        static const uint8_t hello[] = {1, TUN_HELLO, 0, 0, 0, 0, 0, 0, '{', '}'};
        static const uint8_t welcome[] = {1, TUN_WELCOME, 0, 0, 0, 0, 0, 0, '{', '}'};
        json_t *obj = json_object();
        if (c.role == TUN_ROLE_AGENT) {
            tun_session_send_json(s, TUN_HELLO, obj);
            check_output(s, 4);
            tun_session_input(s, welcome, sizeof(welcome));
        } else {
            tun_session_input(s, hello, sizeof(hello));
        }
        json_decref(obj);
        check_output(s, 4);
    }
    while (pos + 2 <= size) {
        size_t len = ((size_t)data[pos] << 8) | data[pos + 1];
        pos += 2;
        if (len > size - pos)
            len = size - pos;
        if (input(s, data + pos, len, (mode & 128) != 0) != 0)
            break;
        pos += len;
        if (mode & 8)
            tun_session_send_sync(s);
        if ((mode & 16) && tun_stream_open(s, &oh, NULL, &st) == 0) {
            tun_stream_write(st, "body", 4);
            if (mode & 32)
                tun_stream_end(st);
        }
        check_output(s, (mode & 64) ? 2 : 64);
    }
    check_output(s, 1000);
    tun_session_free(s);
    return 0;
}
