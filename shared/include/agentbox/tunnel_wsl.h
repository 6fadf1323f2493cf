/* Binding of a tunnel session to a raw lws connection with WebSocket
 * framing of our own on receipt (tunnel_wsframe.h) and by wslay on sending
 * (RFC 6455; neither does I/O). Shared by the hub's server
 * and the agent's client once their upgrade (tunnel_upgrade.h) is done.
 *
 * Why not lws's own WebSocket role: lws 4.1's parser copies payload a byte
 * at a time (about 6 ms of CPU per MB received); here lws only moves bytes
 * (256 KiB reads, TLS included) and we frame them.
 *
 * Reads: the lws RAW_RX bytes go to tun_wsl_rx(), whose parser validates
 * every frame and hands an unfragmented binary message (all our encoders
 * send) to the session as it arrives, payload slices straight from the
 * input, unmasked in place at the hub (tun_wsl_rx_inplace); a fragmented one
 * is reassembled (≤ TUN_FRAME_MAX) first. Pings are answered and a close is
 * echoed on the send side; a frame the parser refuses closes with 1002 or
 * 1009 and its reason. Writes: tun_wsl_writeable() encodes what the session
 * has (and a pending ping or close) into one bounded output buffer and
 * writes it with one socket write, until the socket chokes or a budget is
 * spent; the session's frames go into that buffer under a header of our
 * own, wslay's control frames between them. When it runs: once the session
 * started, tun_wsl_want_write() arms a flush that lws runs at the start of
 * the next loop turn, before it polls (everything queued during this turn
 * goes out in one write, with no POLLOUT round; issue 17: a turn per hop on
 * every forward). A plain socket is written with send(2) and only a write
 * the kernel does not take whole waits for RAW_WRITEABLE; TLS goes through
 * lws_write after one choked check. The upgrade stays in RAW_WRITEABLE.
 * Loop thread only. */
#ifndef AGENTBOX_TUNNEL_WSL_H
#define AGENTBOX_TUNNEL_WSL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/loop.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_wsframe.h"

struct lws;
struct lws_context;
struct wslay_event_context;

struct tun_wsl {
    struct lws *wsi;
    struct tun_session *s;           /* NULL until tun_wsl_start */
    struct wslay_event_context *ctx; /* sends: server role (an agent masks in send_cb) */
    bool server;
    struct tun_wsp wsp; /* receives (masked frames at the hub) */
    uint8_t *stage;     /* tun_wsl_rx at the hub: the copy unmasked in place; lazy */
    /* an agent's mask on output: the header being written, the payload left to mask */
    uint8_t om_hdr[14], om_hlen, om_need, om_key[4], om_koff;
    uint64_t om_left;
    /* a fragmented message being reassembled (an unfragmented one streams
     * into the session) */
    uint8_t *rx; /* TUN_FRAME_MAX, allocated at the first fragmented message */
    size_t rxlen;
    bool rx_frag; /* the current data message is fragmented */
    bool rx_done; /* ... and complete in rx */
    bool rx_text; /* a text frame came: the close reason says so */
    /* encoded bytes waiting for lws_write */
    uint8_t *out;
    size_t outlen;
    uint8_t *tx; /* TUN_FRAME_MAX: one frame from the session */
    /* how encoded bytes leave in WRITEABLE: NULL, lws_write on the raw
     * socket; else this (the agent's TLS), 0 or -1 */
    int (*write_fn)(void *arg, const uint8_t *data, size_t len);
    void *write_arg;
    /* writes: the flush queued for the next loop turn, bytes of out already
     * on the socket (a partial direct write), and counters tests read */
    struct loop_defer flush;
    struct lws_context *cx;
    bool writing, fatal;
    size_t outoff;
    uint64_t writes, writeables; /* socket writes; RAW_WRITEABLE callbacks served */
    bool ping_due;
    int64_t ping_sent_us; /* 0 when no ping is outstanding */
    int64_t last_rtt_us;
    int64_t last_rx_ms;    /* any bytes */
    bool closing;          /* killed: the socket is shut down */
    bool close_queued;     /* we queued a close frame: close the socket once it is out */
    int fail;              /* the first error seen receiving */
    const char *err;       /* why the connection must close (static text or the session's) */
    char peer_reason[124]; /* the reason of a close frame the peer sent */
    uint16_t peer_code;    /* its status code, 0 when none came */
};

/* server: the hub's end (expects masked frames). Returns 0 or AB_ENOMEM. */
int tun_wsl_init(struct tun_wsl *w, struct lws *wsi, bool server);
/* Attaches the session: from now on received messages go to it. */
void tun_wsl_start(struct tun_wsl *w, struct tun_session *s);
void tun_wsl_fini(struct tun_wsl *w);
/* Feeds received bytes. Returns 0, AB_ECLOSED when the peer sent a close
 * frame (peer_code, peer_reason; the reply goes out on the next
 * WRITEABLE), or another negative code when the connection must close
 * (w->err says why: message over 1 MiB, a text frame, a protocol error, the
 * session's error). */
int tun_wsl_rx(struct tun_wsl *w, const void *in, size_t len);
/* The same, unmasking the hub's input in place (in is written, then
 * handed to the session piece by piece): no copy before the session's. */
int tun_wsl_rx_inplace(struct tun_wsl *w, void *in, size_t len);
/* Queues raw bytes before any framing (the upgrade request or answer).
 * Returns 0 or AB_ELIMIT. */
int tun_wsl_send_raw(struct tun_wsl *w, const void *data, size_t len);
/* RAW_WRITEABLE: writes what is queued, the session's frames, a pending
 * ping. Returns 0, or -1 when the connection must close now (a close frame
 * went out, or the socket failed, here or in an earlier flush). */
int tun_wsl_writeable(struct tun_wsl *w);
/* The encoding half of tun_wsl_writeable, without the socket: moves a
 * pending ping and the session's frames through wslay into out (outlen
 * bytes, up to its bound). Returns 0 or -1. (Tests read out directly.) */
int tun_wsl_encode(struct tun_wsl *w);
/* Output is queued: flushed at the next loop turn (plain socket, session
 * started) or in RAW_WRITEABLE. */
void tun_wsl_want_write(struct tun_wsl *w);
void tun_wsl_ping(struct tun_wsl *w);
/* Sends a close frame with code and reason (≤ 123 bytes), then closes. */
void tun_wsl_close(struct tun_wsl *w, uint16_t code, const char *reason);
/* Closes now: shuts the socket down (no close handshake). */
void tun_wsl_kill(struct tun_wsl *w);

#endif
