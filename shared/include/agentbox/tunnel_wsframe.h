/* An incremental parser of RFC 6455 frames for the tunnel's receive path
 * (tunnel_wsl.c). No I/O, no allocation, no callbacks: the caller hands it
 * whatever bytes arrived and gets one event per call.
 *
 * Why our own: wslay copies every received byte into a buffer of its own
 * and unmasks a byte at a time; this parser hands out slices of the
 * caller's input, unmasked in place eight bytes at a time, so a DATA
 * payload can go straight to the session (tunnel.h, tun_session_input_more).
 *
 * What it refuses (the close code in ev.code, the reason in p->err): reserved
 * bits set (no extension is negotiated), a reserved opcode, a frame masked
 * when it must not be or unmasked when it must (RFC 6455 §5.1), a 64-bit
 * length with the high bit set, a fragmented control frame or one over 125
 * bytes, a continuation without a message or a new message inside one, a
 * close frame of 1 byte or with a code not allowed on the wire: 1002. A data
 * message (all its fragments) over max_msg: 1009, from the header, before
 * any of its payload is read. Once it refused, it stays refused. */
#ifndef AGENTBOX_TUNNEL_WSFRAME_H
#define AGENTBOX_TUNNEL_WSFRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TUN_WS_CONTROL_MAX 125
#define TUN_WS_HEADER_MAX 14

enum tun_ws_opcode {
    TUN_WS_CONTINUATION = 0x0,
    TUN_WS_TEXT = 0x1,
    TUN_WS_BINARY = 0x2,
    TUN_WS_CLOSE = 0x8,
    TUN_WS_PING = 0x9,
    TUN_WS_PONG = 0xa,
};

enum tun_wsp_kind {
    TUN_WSP_MORE = 0,   /* all the input was used: feed more */
    TUN_WSP_DATA_START, /* a data frame's header: opcode, fin, len (its payload); last when 0 */
    TUN_WSP_PAYLOAD,    /* data, n: a slice of that payload, unmasked; last on its final slice */
    TUN_WSP_CONTROL,    /* a whole control frame: opcode, data/n (≤ 125); close: code, reason */
    TUN_WSP_ERROR,      /* code (1002 or 1009); the parser's err says why */
};

struct tun_wsp_event {
    enum tun_wsp_kind kind;
    uint8_t opcode;
    bool fin;
    bool last;     /* the frame's payload is complete with this event */
    uint64_t len;  /* DATA_START: the frame's payload length */
    uint8_t *data; /* PAYLOAD: into the caller's input; CONTROL: into the parser */
    size_t n;
    uint16_t code; /* CONTROL close: its status (1005 when none); ERROR: the close code to send */
};

struct tun_wsp {
    bool masked;      /* frames must carry a mask (we are the server), else must not */
    uint64_t max_msg; /* a data message's limit across its fragments */
    uint8_t hdr[TUN_WS_HEADER_MAX], hlen, need;
    bool in_frame; /* a header was read, payload left to come */
    uint8_t opcode;
    bool fin;
    uint8_t key[4], koff;
    uint64_t left;
    bool in_msg;      /* a fragmented data message awaits continuations */
    uint64_t msg_len; /* its bytes so far */
    uint8_t ctl[TUN_WS_CONTROL_MAX];
    uint8_t ctl_len;
    uint16_t err_code; /* non-zero once refused */
    char err[96];
};

/* masked: the server's end (every frame must be masked). max_msg > 0. */
void tun_wsp_init(struct tun_wsp *p, bool masked, uint64_t max_msg);
/* Reads from in (len bytes; 0 is allowed) up to the next event and returns
 * its kind (also in ev->kind); *used is the bytes taken. A PAYLOAD slice
 * points into in, which is unmasked there: in is written only when masked. */
enum tun_wsp_kind tun_wsp_next(struct tun_wsp *p, uint8_t *in, size_t len, size_t *used,
                               struct tun_wsp_event *ev);
/* True when no frame is partly read (a frame boundary). */
bool tun_wsp_is_idle(const struct tun_wsp *p);

/* XORs n bytes of src into dst (may be the same) with key, starting at key
 * byte off & 3; eight bytes at a time. Masks and unmasks. */
void tun_ws_mask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t key[4], unsigned off);

#endif
