/* See tunnel_wsl.h. */
#include "agentbox/tunnel_wsl.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/log.h"
#include "agentbox/tunnel_wsframe.h"

#include <errno.h>
#include <libwebsockets.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <wslay/wslay.h>

/* One lws_write carries up to OUT_MAX encoded bytes; a WRITEABLE writes up
 * to WRITE_BUDGET before yielding to the loop (other sessions, timers).
 * Measured with tests/bench/tunnel.mjs: 256 KiB writes cost a quarter of
 * the syscalls of lws's per-frame writes and stay under the socket buffer. */
#define OUT_MAX (256 * 1024)
#define WRITE_BUDGET (1024 * 1024)
#define PING_PAYLOAD "abxping!"
#define STAGE_MAX (64 * 1024) /* tun_wsl_rx: a masked input is unmasked here, per piece */

/* The send context never reads: received frames go through our own parser
 * (tunnel_wsframe.h), which hands payload slices to the session without a
 * copy of wslay's own. */
static ssize_t no_recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
                          void *arg)
{
    (void)buf, (void)len, (void)flags, (void)arg;
    wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    return -1;
}

/* Takes encoded bytes from the send context into out. An agent's frames
 * leave masked (RFC 6455 §5.3): wslay's server-role context writes them
 * unmasked, and each header gets the mask bit and a fresh random key here,
 * its payload XORed eight bytes at a time (wslay's own client masking is a
 * byte loop, the agent's main cost on a bulk upload). */
static ssize_t send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *arg)
{
    struct tun_wsl *w = arg;
    (void)flags;
    size_t i = 0;
    while (i < len) {
        size_t room = OUT_MAX - w->outlen;
        if (w->server) {
            size_t n = AB_MIN(len - i, room);
            memcpy(w->out + w->outlen, data + i, n);
            w->outlen += n;
            i += n;
            if (!n)
                break;
            continue;
        }
        if (w->om_left == 0) {
            /* a header byte: taken only while a whole masked header still fits */
            if (room < 14)
                break;
            w->om_hdr[w->om_hlen++] = data[i++];
            if (w->om_hlen == 2) {
                unsigned l7 = w->om_hdr[1] & 0x7f;
                w->om_need = (uint8_t)(2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0));
            }
            if (w->om_hlen < 2 || w->om_hlen < w->om_need)
                continue;
            uint64_t plen = w->om_hdr[1] & 0x7f;
            if (plen >= 126) {
                plen = 0;
                for (size_t b = 2; b < w->om_need; b++)
                    plen = plen << 8 | w->om_hdr[b];
            }
            if (crypto_random(w->om_key, 4) != 0) {
                wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
                return -1;
            }
            w->om_hdr[1] |= 0x80;
            memcpy(w->out + w->outlen, w->om_hdr, w->om_need);
            memcpy(w->out + w->outlen + w->om_need, w->om_key, 4);
            w->outlen += w->om_need + 4u;
            w->om_left = plen;
            w->om_koff = 0;
            w->om_hlen = 0;
            w->om_need = 2;
            continue;
        }
        size_t n = AB_MIN(AB_MIN(len - i, room), (size_t)AB_MIN(w->om_left, (uint64_t)SIZE_MAX));
        if (!n)
            break;
        tun_ws_mask(w->out + w->outlen, data + i, n, w->om_key, w->om_koff);
        w->om_koff = (uint8_t)((w->om_koff + n) & 3);
        w->om_left -= n;
        w->outlen += n;
        i += n;
    }
    if (i == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    return (ssize_t)i;
}

static int genmask_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *arg)
{
    (void)ctx;
    (void)arg;
    return crypto_random(buf, len) == 0 ? 0 : -1;
}

static void fail(struct tun_wsl *w, int code, const char *why)
{
    if (!w->fail) {
        w->fail = code;
        w->err = why;
    }
}

/* A refusal of the WebSocket layer: the close code and reason go out first
 * (the glue's own close is then a no-op), the connection closes after. */
static void ws_refuse(struct tun_wsl *w, int rc, uint16_t code, const char *why)
{
    fail(w, rc, why);
    if (!w->close_queued) {
        size_t n = AB_MIN(strlen(why), 123);
        wslay_event_queue_close(w->ctx, code, (const uint8_t *)why, n);
        w->close_queued = true;
    }
}

/* A data frame starts: an unfragmented binary message streams into the
 * session (DATA payload straight to its stream); a fragmented one is
 * reassembled in rx first (the tunnel's encoders never fragment; other
 * peers may). */
static void data_start(struct tun_wsl *w, const struct tun_wsp_event *ev)
{
    if (ev->opcode == TUN_WS_TEXT) {
        w->rx_text = true;
        fail(w, AB_EINVAL, "text frames are not part of the protocol");
        return;
    }
    if (!w->s) {
        fail(w, AB_EINVAL, "a message before the session started");
        return;
    }
    if (ev->opcode == TUN_WS_BINARY && ev->fin) {
        w->rx_frag = false;
        int rc = tun_session_input_begin(w->s, (size_t)ev->len);
        if (rc == 0 && ev->len == 0)
            rc = tun_session_input_more(w->s, NULL, 0);
        if (rc < 0)
            fail(w, rc, tun_session_error(w->s));
        return;
    }
    if (ev->opcode == TUN_WS_BINARY) {
        w->rx_frag = true;
        w->rxlen = 0;
        if (!w->rx && !(w->rx = malloc(TUN_FRAME_MAX)))
            fail(w, AB_ENOMEM, "out of memory reassembling a fragmented message");
    }
    if (ev->last && ev->fin)
        w->rx_done = true;
}

static void payload(struct tun_wsl *w, const struct tun_wsp_event *ev)
{
    if (!w->rx_frag) {
        int rc = tun_session_input_more(w->s, ev->data, ev->n);
        if (rc < 0)
            fail(w, rc, tun_session_error(w->s));
        return;
    }
    /* the parser holds the message under TUN_FRAME_MAX across fragments */
    memcpy(w->rx + w->rxlen, ev->data, ev->n);
    w->rxlen += ev->n;
    if (ev->last && ev->fin)
        w->rx_done = true;
}

static void control(struct tun_wsl *w, const struct tun_wsp_event *ev)
{
    if (ev->opcode == TUN_WS_PING) {
        struct wslay_event_msg m = {.opcode = WSLAY_PONG, .msg = ev->data, .msg_length = ev->n};
        wslay_event_queue_msg(w->ctx, &m);
    } else if (ev->opcode == TUN_WS_PONG) {
        LOG_DEBUG("tunnel pong received");
        if (w->ping_sent_us) {
            w->last_rtt_us = ab_now_us() - w->ping_sent_us;
            w->ping_sent_us = 0;
        }
    } else if (ev->opcode == TUN_WS_CLOSE) {
        w->peer_code = ev->code;
        size_t n = ev->n > 2 ? ev->n - 2 : 0;
        n = AB_MIN(n, sizeof(w->peer_reason) - 1);
        if (n)
            memcpy(w->peer_reason, ev->data + 2, n);
        w->peer_reason[n] = '\0';
        /* echo the code, as RFC 6455 §5.5.1 asks (1005 is never sent back) */
        if (!w->close_queued) {
            wslay_event_queue_close(w->ctx, ev->code == 1005 ? 0 : ev->code,
                                    n ? (const uint8_t *)w->peer_reason : NULL, n);
            w->close_queued = true;
        }
    }
}

int tun_wsl_init(struct tun_wsl *w, struct lws *wsi, bool server)
{
    memset(w, 0, sizeof(*w));
    w->wsi = wsi;
    w->cx = wsi ? lws_get_context(wsi) : NULL;
    w->server = server;
    /* a small answer must not wait behind an unacknowledged one (Nagle): lws
     * sets this on sockets it accepts or dials, not on ones it adopts */
    int fd = wsi ? lws_get_socket_fd(wsi) : -1, one = 1;
    if (fd >= 0)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* not TCP: no-op */
    w->last_rx_ms = ab_now_ms();
    w->tx = malloc(TUN_FRAME_MAX);
    w->out = malloc(OUT_MAX);
    /* a server-role wslay context sends (unmasked; an agent masks in
     * send_cb); receiving is tun_wsp's, with the 1 MiB limit across
     * fragments */
    struct wslay_event_callbacks cb = {
        .recv_callback = no_recv_cb,
        .send_callback = send_cb,
        .genmask_callback = genmask_cb,
    };
    tun_wsp_init(&w->wsp, server, TUN_FRAME_MAX);
    w->om_need = 2;
    wslay_event_context_ptr ctx = NULL;
    int rc = !w->tx || !w->out ? -1 : wslay_event_context_server_init(&ctx, &cb, w);
    w->ctx = ctx;
    if (rc != 0) {
        tun_wsl_fini(w);
        return AB_ENOMEM;
    }
    return 0;
}

void tun_wsl_start(struct tun_wsl *w, struct tun_session *s)
{
    w->s = s;
}

static void flush_cancel(struct tun_wsl *w)
{
    loop_defer_cancel(&w->flush);
}

void tun_wsl_fini(struct tun_wsl *w)
{
    flush_cancel(w);
    if (w->ctx)
        wslay_event_context_free(w->ctx);
    w->ctx = NULL;
    free(w->stage);
    w->stage = NULL;
    free(w->rx);
    free(w->tx);
    free(w->out);
    w->rx = w->tx = w->out = NULL;
    w->s = NULL;
}

/* Written by us with send(2), not lws_write: a plain socket once the
 * session runs. lws then never holds output of its own for the socket, so a
 * partial write is ours to finish (outoff) and no poll asks whether the
 * socket is choked. TLS (lws's, or the agent's write_fn) goes through
 * lws_write, which keeps what the socket refused. */
static bool is_direct(const struct tun_wsl *w)
{
    return w->wsi && w->cx && w->s && !w->write_fn && !lws_is_ssl(w->wsi);
}

static void flush_due(struct loop_defer *d);

void tun_wsl_want_write(struct tun_wsl *w)
{
    /* inside a write, the writer looks for more output before it returns */
    if (!w->wsi || w->closing || w->writing)
        return;
    if (!w->s || !w->cx || w->outoff < w->outlen) {
        lws_callback_on_writable(w->wsi); /* the upgrade, or the rest of a partial write */
        return;
    }
    /* at the next turn, with whatever else this turn queues for the socket */
    struct loop *l = loop_of_lws(w->cx);
    if (l)
        loop_defer(l, &w->flush, flush_due);
    else
        lws_callback_on_writable(w->wsi);
}

int tun_wsl_rx_inplace(struct tun_wsl *w, void *in, size_t len)
{
    if (!w->ctx || w->closing)
        return AB_ECLOSED;
    if (w->fail)
        return w->fail;
    if (w->peer_code)
        return AB_ECLOSED; /* nothing is read after the peer's close */
    w->last_rx_ms = ab_now_ms();
    uint8_t *p = in;
    size_t off = 0;
    while (!w->fail && !w->peer_code) {
        struct tun_wsp_event ev;
        size_t used = 0;
        enum tun_wsp_kind k = tun_wsp_next(&w->wsp, p + off, len - off, &used, &ev);
        off += used;
        if (k == TUN_WSP_MORE)
            break;
        if (k == TUN_WSP_ERROR) {
            char code[8];
            snprintf(code, sizeof(code), "%u", (unsigned)ev.code);
            ws_refuse(w, ev.code == 1009 ? AB_ELIMIT : AB_EINVAL, ev.code, w->wsp.err);
            LOG_WARN("tunnel WebSocket frame refused", "close_code", code, "error", w->wsp.err);
        } else if (k == TUN_WSP_DATA_START) {
            data_start(w, &ev);
        } else if (k == TUN_WSP_PAYLOAD) {
            payload(w, &ev);
        } else {
            control(w, &ev);
        }
        if (w->rx_done && !w->fail) {
            w->rx_done = w->rx_frag = false;
            int rc = tun_session_input(w->s, w->rx, w->rxlen);
            w->rxlen = 0;
            if (rc < 0)
                fail(w, rc, tun_session_error(w->s));
        }
    }
    if (wslay_event_get_queued_msg_count(w->ctx))
        tun_wsl_want_write(w); /* a pong or a close reply */
    if (w->fail)
        return w->fail;
    if (w->peer_code)
        return AB_ECLOSED;
    return 0;
}

int tun_wsl_rx(struct tun_wsl *w, const void *in, size_t len)
{
    /* an unmasked parse only reads its input */
    if (!w->server)
        return tun_wsl_rx_inplace(w, (void *)(uintptr_t)in, len);
    if (!w->stage && !(w->stage = malloc(STAGE_MAX)))
        return AB_ENOMEM;
    const uint8_t *p = in;
    int rc = 0;
    while (len > 0 && rc == 0) {
        size_t n = AB_MIN(len, (size_t)STAGE_MAX);
        memcpy(w->stage, p, n);
        rc = tun_wsl_rx_inplace(w, w->stage, n);
        p += n;
        len -= n;
    }
    return rc;
}

int tun_wsl_send_raw(struct tun_wsl *w, const void *data, size_t len)
{
    if (len > OUT_MAX - w->outlen)
        return AB_ELIMIT;
    memcpy(w->out + w->outlen, data, len);
    w->outlen += len;
    tun_wsl_want_write(w);
    return 0;
}

void tun_wsl_ping(struct tun_wsl *w)
{
    w->ping_due = true;
    tun_wsl_want_write(w);
}

void tun_wsl_close(struct tun_wsl *w, uint16_t code, const char *reason)
{
    if (!w->ctx || w->close_queued || w->closing)
        return;
    size_t n = reason ? AB_MIN(strlen(reason), 123) : 0;
    wslay_event_queue_close(w->ctx, code, (const uint8_t *)reason, n);
    w->close_queued = true;
    tun_wsl_want_write(w);
}

void tun_wsl_kill(struct tun_wsl *w)
{
    if (w->closing || !w->wsi)
        return;
    w->closing = true;
    flush_cancel(w);
    int fd = lws_get_socket_fd(w->wsi);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    lws_set_timeout(w->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

/* Moves one frame of the session into wslay's queue (one that did not fit
 * the room left in out for encode_direct). */
static int refill_one(struct tun_wsl *w)
{
    size_t len = 0;
    if (tun_session_next_frame(w->s, w->tx, TUN_FRAME_MAX, &len) < 0)
        return -1;
    if (len == 0)
        return 0;
    struct wslay_event_msg m = {.opcode = WSLAY_BINARY_FRAME, .msg = w->tx, .msg_length = len};
    return wslay_event_queue_msg(w->ctx, &m) == 0 ? 0 : -1;
}

/* Writes the session's frames straight into out under a header of our own
 * (RFC 6455 §5.2: FIN, binary, the shortest length; an agent's masked with
 * a fresh key), so a frame is copied once, not three times (into tx, into
 * wslay's message, into out). Only between wslay's frames (its queue
 * empty), so a pong or close it queued goes out whole and first. The
 * payload lands after room for a 16-bit-length header, what every DATA
 * frame has; other sizes move it once. Returns 0, 1 when the next frame
 * needs more room than out has left (refill_one takes it), or -1. */
static int encode_direct(struct tun_wsl *w)
{
    size_t hguess = w->server ? 4 : 8;
    while (w->s && !w->close_queued && wslay_event_get_write_enabled(w->ctx) &&
           !wslay_event_want_write(w->ctx)) {
        size_t room = OUT_MAX - w->outlen;
        if (room < 14 + TUN_HDR_LEN + 4096)
            return 0; /* write what is there first */
        uint8_t *start = w->out + w->outlen, *p = start + hguess;
        size_t len = 0;
        int rc = tun_session_next_frame(w->s, p, room - 14, &len);
        if (rc == TUN_FRAME_ECAP)
            return 1;
        if (rc < 0)
            return -1;
        if (len == 0)
            return 0;
        uint8_t hdr[14];
        size_t h = 0;
        uint8_t mbit = w->server ? 0 : 0x80;
        hdr[h++] = 0x80 | WSLAY_BINARY_FRAME;
        if (len < 126) {
            hdr[h++] = (uint8_t)(mbit | len);
        } else if (len < 65536) {
            hdr[h++] = mbit | 126;
            hdr[h++] = (uint8_t)(len >> 8);
            hdr[h++] = (uint8_t)len;
        } else {
            hdr[h++] = mbit | 127;
            for (int b = 7; b >= 0; b--)
                hdr[h++] = (uint8_t)((uint64_t)len >> (8 * b));
        }
        if (!w->server) {
            uint8_t key[4];
            if (crypto_random(key, 4) != 0)
                return -1;
            memcpy(hdr + h, key, 4);
            h += 4;
            tun_ws_mask(p, p, len, key, 0);
        }
        if (h != hguess)
            memmove(start + h, p, len);
        memcpy(start, hdr, h);
        w->outlen += h + len;
    }
    return 0;
}

int tun_wsl_encode(struct tun_wsl *w)
{
    if (w->closing || !w->ctx)
        return -1;
    if (w->ping_due && !w->close_queued && wslay_event_get_write_enabled(w->ctx)) {
        w->ping_due = false;
        /* a payload: some peers only report pongs that carry one */
        struct wslay_event_msg m = {.opcode = WSLAY_PING,
                                    .msg = (const uint8_t *)PING_PAYLOAD,
                                    .msg_length = sizeof(PING_PAYLOAD) - 1};
        if (wslay_event_queue_msg(w->ctx, &m) == 0) {
            w->ping_sent_us = ab_now_us();
            LOG_DEBUG("tunnel ping sent");
        }
    }
    /* wslay's own frames first (pings, pongs, a close, a frame too big for
     * the room), then ours */
    if (wslay_event_send(w->ctx) != 0 && w->outlen == 0)
        return -1;
    int rc = encode_direct(w);
    if (rc < 0)
        return -1;
    if (rc == 1 && (refill_one(w) != 0 || (wslay_event_send(w->ctx) != 0 && w->outlen == 0)))
        return -1;
    return 0;
}

/* Sends out[outoff, outlen). Returns 0 when all of it is out, 1 when the
 * socket took only part (the rest stays, for RAW_WRITEABLE), -1 when the
 * socket failed. */
static int out_send(struct tun_wsl *w)
{
    size_t n = w->outlen - w->outoff;
    if (n == 0)
        return 0;
    w->writes++;
    if (w->write_fn) {
        if (w->write_fn(w->write_arg, w->out + w->outoff, n) != 0)
            return -1;
    } else if (!is_direct(w)) {
        if (lws_write(w->wsi, w->out + w->outoff, n, LWS_WRITE_RAW) < (int)n)
            return -1;
    } else {
        int fd = lws_get_socket_fd(w->wsi);
        ssize_t k = fd < 0 ? -1 : send(fd, w->out + w->outoff, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            k = 0;
        if (k < 0)
            return -1;
        w->outoff += (size_t)k;
        if ((size_t)k < n)
            return 1;
    }
    w->outlen = w->outoff = 0;
    return 0;
}

static bool has_more(const struct tun_wsl *w)
{
    return w->outoff < w->outlen || w->ping_due || wslay_event_want_write(w->ctx) ||
           (w->s && tun_session_has_output(w->s));
}

/* Encodes and sends until nothing is left, the socket takes no more, or
 * WRITE_BUDGET is spent (the loop has other sessions and timers). Returns 0
 * (all out), 1 (output left) or -1 (the connection must close). */
static int pump(struct tun_wsl *w)
{
    size_t budget = WRITE_BUDGET;
    int rc = 0;
    w->writing = true;
    while (rc == 0) {
        if (w->outoff == w->outlen) {
            if (tun_wsl_encode(w) != 0) {
                rc = -1;
                break;
            }
            if (w->outlen == 0)
                break;
        }
        size_t n = w->outlen - w->outoff;
        rc = out_send(w);
        if (rc != 0)
            break;
        budget = n >= budget ? 0 : budget - n;
        if (!has_more(w))
            break;
        /* lws_write may have kept what the socket refused: ask before more */
        if (!budget || (!is_direct(w) && lws_send_pipe_choked(w->wsi)))
            rc = 1;
    }
    w->writing = false;
    if (rc < 0)
        w->fatal = true;
    return rc;
}

/* The flush armed by tun_wsl_want_write: what this turn queued, in one
 * write. What it cannot finish (a full socket, the budget, a close to make,
 * a failure to report) goes to RAW_WRITEABLE, where lws can close. */
static void flush_due(struct loop_defer *d)
{
    struct tun_wsl *w = (struct tun_wsl *)(void *)((uint8_t *)d - offsetof(struct tun_wsl, flush));
    if (w->closing || !w->ctx || !w->wsi)
        return;
    /* lws_write would queue behind what lws still holds: one poll, not a turn */
    if (!is_direct(w) && lws_send_pipe_choked(w->wsi)) {
        lws_callback_on_writable(w->wsi);
        return;
    }
    if (pump(w) != 0 || wslay_event_get_close_sent(w->ctx))
        lws_callback_on_writable(w->wsi);
}

int tun_wsl_writeable(struct tun_wsl *w)
{
    w->writeables++;
    if (w->fatal || !w->ctx)
        return -1;
    int rc = pump(w);
    if (rc < 0)
        return -1;
    bool closed_out = wslay_event_get_close_sent(w->ctx) && !wslay_event_want_write(w->ctx) &&
                      w->outoff == w->outlen;
    if (closed_out) {
        /* our close (or the reply to the peer's) is out: close once lws has
         * flushed what it holds, so the peer reads the reason */
        if (!lws_send_pipe_choked(w->wsi))
            return -1;
        lws_callback_on_writable(w->wsi);
        return 0;
    }
    if (rc == 1)
        lws_callback_on_writable(w->wsi);
    return 0;
}
