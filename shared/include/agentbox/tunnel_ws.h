/* Binding of a tunnel session to a libwebsockets WebSocket, shared by the
 * hub's server and the agent's client: reassembles fragmented binary
 * messages into frames, writes queued frames in WRITEABLE, sends pings.
 * Loop thread only. (This header declares struct lws opaquely, so it can be
 * included anywhere.) */
#ifndef AGENTBOX_TUNNEL_WS_H
#define AGENTBOX_TUNNEL_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/tunnel.h"

struct lws;

struct tun_ws {
    struct lws *wsi;
    struct tun_session *s;
    uint8_t *rx; /* TUN_FRAME_MAX: one message being reassembled */
    size_t rxlen;
    bool rx_overflow;
    uint8_t *tx; /* LWS_PRE + TUN_FRAME_MAX */
    bool ping_due;
    int64_t ping_sent_us; /* 0 when no ping is outstanding */
    int64_t last_rtt_us;
    int64_t last_rx_ms; /* any frame or pong */
    bool closing;
};

int tun_ws_init(struct tun_ws *w, struct lws *wsi, struct tun_session *s);
void tun_ws_fini(struct tun_ws *w);
/* Feeds one received piece. Returns 0, or a negative code when the
 * connection must close (message too big, protocol error); the reason is
 * tun_session_error() or "message over 1 MiB". */
int tun_ws_receive(struct tun_ws *w, const void *in, size_t len, bool first, bool final);
/* Writes what the session has (and a pending ping). Returns 0, or -1 when
 * the connection must close. */
int tun_ws_writeable(struct tun_ws *w);
void tun_ws_want_write(struct tun_ws *w);
void tun_ws_ping(struct tun_ws *w);
void tun_ws_pong(struct tun_ws *w);
/* Closes now: shuts the socket down (no close handshake is waited for). */
void tun_ws_kill(struct tun_ws *w, const char *reason);

#endif
