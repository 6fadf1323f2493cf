/* See tunnel_ws.h. */
#include "agentbox/tunnel_ws.h"
#include "agentbox/common.h"
#include "agentbox/log.h"

#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define WRITE_BUDGET (256 * 1024) /* bytes per WRITEABLE before yielding */

int tun_ws_init(struct tun_ws *w, struct lws *wsi, struct tun_session *s)
{
    memset(w, 0, sizeof(*w));
    w->wsi = wsi;
    w->s = s;
    w->rx = malloc(TUN_FRAME_MAX);
    w->tx = malloc(LWS_PRE + TUN_FRAME_MAX);
    w->last_rx_ms = ab_now_ms();
    if (!w->rx || !w->tx) {
        tun_ws_fini(w);
        return AB_ENOMEM;
    }
    return 0;
}

void tun_ws_fini(struct tun_ws *w)
{
    free(w->rx);
    free(w->tx);
    w->rx = w->tx = NULL;
}

int tun_ws_receive(struct tun_ws *w, const void *in, size_t len, bool first, bool final)
{
    w->last_rx_ms = ab_now_ms();
    if (first) {
        w->rxlen = 0;
        w->rx_overflow = false;
    }
    if (w->rx_overflow || w->rxlen + len > TUN_FRAME_MAX) {
        w->rx_overflow = true;
        return final ? AB_ELIMIT : 0;
    }
    memcpy(w->rx + w->rxlen, in, len);
    w->rxlen += len;
    if (!final)
        return 0;
    int rc = tun_session_input(w->s, w->rx, w->rxlen);
    w->rxlen = 0;
    return rc;
}

void tun_ws_want_write(struct tun_ws *w)
{
    if (w->wsi && !w->closing)
        lws_callback_on_writable(w->wsi);
}

void tun_ws_ping(struct tun_ws *w)
{
    w->ping_due = true;
    tun_ws_want_write(w);
}

void tun_ws_pong(struct tun_ws *w)
{
    LOG_DEBUG("tunnel pong received");
    w->last_rx_ms = ab_now_ms();
    if (w->ping_sent_us) {
        w->last_rtt_us = ab_now_us() - w->ping_sent_us;
        w->ping_sent_us = 0;
    }
}

int tun_ws_writeable(struct tun_ws *w)
{
    if (w->closing)
        return -1;
    if (w->ping_due) {
        w->ping_due = false;
        /* a payload: some peers only report pongs that carry one */
        memcpy(w->tx + LWS_PRE, "abxping!", 8);
        if (lws_write(w->wsi, w->tx + LWS_PRE, 8, LWS_WRITE_PING) < 0)
            return -1;
        w->ping_sent_us = ab_now_us();
        LOG_DEBUG("tunnel ping sent");
        lws_callback_on_writable(w->wsi);
        return 0;
    }
    size_t budget = WRITE_BUDGET;
    while (budget) {
        size_t len = 0;
        int rc = tun_session_next_frame(w->s, w->tx + LWS_PRE, TUN_FRAME_MAX, &len);
        if (rc < 0)
            return -1;
        if (len == 0)
            return 0;
        if (lws_write(w->wsi, w->tx + LWS_PRE, len, LWS_WRITE_BINARY) < (int)len)
            return -1;
        budget = len >= budget ? 0 : budget - len;
        if (lws_send_pipe_choked(w->wsi))
            break;
    }
    if (tun_session_has_output(w->s))
        lws_callback_on_writable(w->wsi);
    return 0;
}

void tun_ws_kill(struct tun_ws *w, const char *reason)
{
    if (w->closing || !w->wsi)
        return;
    w->closing = true;
    int fd = lws_get_socket_fd(w->wsi);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    lws_set_timeout(w->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}
