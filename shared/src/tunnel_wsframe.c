/* See tunnel_wsframe.h. */
#include "agentbox/tunnel_wsframe.h"

#include <stdio.h>
#include <string.h>

void tun_ws_mask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t key[4], unsigned off)
{
    uint8_t k8[8];
    for (int i = 0; i < 8; i++)
        k8[i] = key[(off + (unsigned)i) & 3];
    uint64_t k;
    memcpy(&k, k8, 8);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, src + i, 8);
        v ^= k;
        memcpy(dst + i, &v, 8);
    }
    for (; i < n; i++)
        dst[i] = src[i] ^ k8[i & 7];
}

void tun_wsp_init(struct tun_wsp *p, bool masked, uint64_t max_msg)
{
    memset(p, 0, sizeof(*p));
    p->masked = masked;
    p->max_msg = max_msg;
    p->need = 2;
}

bool tun_wsp_is_idle(const struct tun_wsp *p)
{
    return !p->in_frame && p->hlen == 0;
}

static enum tun_wsp_kind refuse(struct tun_wsp *p, struct tun_wsp_event *ev, uint16_t code,
                                const char *fmt, unsigned long long a, unsigned long long b)
{
    if (!p->err_code) {
        p->err_code = code;
        snprintf(p->err, sizeof(p->err), fmt, a, b);
    }
    ev->kind = TUN_WSP_ERROR;
    ev->code = p->err_code;
    return TUN_WSP_ERROR;
}

/* RFC 6455 §7.4.1: the codes a peer may put in a close frame (1012-1014
 * are registered since; 1004-1006 and 1015 never go on the wire). */
static bool close_code_ok(unsigned c)
{
    return (c >= 1000 && c <= 1014 && c != 1004 && c != 1005 && c != 1006) ||
           (c >= 3000 && c <= 4999);
}

/* Checks the first two header bytes as soon as they are there, so a bad
 * frame is refused before its length or payload is read. 0 or an error. */
static enum tun_wsp_kind check_start(struct tun_wsp *p, struct tun_wsp_event *ev)
{
    uint8_t b0 = p->hdr[0], b1 = p->hdr[1], op = b0 & 0x0f;
    bool fin = (b0 & 0x80) != 0, ctl = (op & 0x8) != 0;
    if (b0 & 0x70)
        return refuse(p, ev, 1002, "reserved bits 0x%02llx set: no extension was negotiated",
                      (unsigned long long)(b0 & 0x70), 0);
    if (op != TUN_WS_CONTINUATION && op != TUN_WS_TEXT && op != TUN_WS_BINARY &&
        op != TUN_WS_CLOSE && op != TUN_WS_PING && op != TUN_WS_PONG)
        return refuse(p, ev, 1002, "opcode 0x%llx is reserved", (unsigned long long)op, 0);
    if (((b1 & 0x80) != 0) != p->masked)
        return refuse(p, ev, 1002,
                      p->masked ? "an agent's frames must be masked (RFC 6455 5.1)"
                                : "the hub's frames must not be masked (RFC 6455 5.1)",
                      0, 0);
    if (ctl && !fin)
        return refuse(p, ev, 1002, "fragmented control frame (opcode 0x%llx)",
                      (unsigned long long)op, 0);
    if (ctl && (b1 & 0x7f) > TUN_WS_CONTROL_MAX)
        return refuse(p, ev, 1002, "control frame of %llu bytes: at most %llu",
                      (unsigned long long)(b1 & 0x7f), TUN_WS_CONTROL_MAX);
    if (op == TUN_WS_CONTINUATION && !p->in_msg)
        return refuse(p, ev, 1002, "continuation frame outside a message", 0, 0);
    if ((op == TUN_WS_TEXT || op == TUN_WS_BINARY) && p->in_msg)
        return refuse(p, ev, 1002, "a new message before the fragmented one ended", 0, 0);
    return TUN_WSP_MORE;
}

/* The header is complete: the frame starts. */
static enum tun_wsp_kind header_done(struct tun_wsp *p, struct tun_wsp_event *ev)
{
    uint8_t l7 = p->hdr[1] & 0x7f;
    size_t klen = 2;
    uint64_t len = l7;
    if (l7 >= 126) {
        size_t nb = l7 == 126 ? 2 : 8;
        len = 0;
        for (size_t b = 0; b < nb; b++)
            len = len << 8 | p->hdr[2 + b];
        klen += nb;
        if (len >> 63)
            return refuse(p, ev, 1002, "64-bit frame length with the high bit set", 0, 0);
    }
    if (p->masked)
        memcpy(p->key, p->hdr + klen, 4);
    p->opcode = p->hdr[0] & 0x0f;
    p->fin = (p->hdr[0] & 0x80) != 0;
    p->koff = 0;
    p->left = len;
    p->hlen = 0;
    p->need = 2;
    p->in_frame = true;
    if (p->opcode & 0x8) {
        p->ctl_len = 0;
    } else {
        if (p->opcode != TUN_WS_CONTINUATION)
            p->msg_len = 0;
        if (len > p->max_msg - p->msg_len)
            /* no overflow: msg_len <= max_msg and len < 2^63 */
            return refuse(p, ev, 1009, "message of %llu bytes is over the %llu-byte limit",
                          (unsigned long long)(p->msg_len + len), (unsigned long long)p->max_msg);
        p->msg_len += len;
        p->in_msg = !p->fin;
        ev->kind = TUN_WSP_DATA_START;
        ev->opcode = p->opcode;
        ev->fin = p->fin;
        ev->len = len;
        ev->last = len == 0;
        if (len == 0)
            p->in_frame = false;
        return TUN_WSP_DATA_START;
    }
    return TUN_WSP_MORE;
}

/* A whole control frame is in ctl. */
static enum tun_wsp_kind control_done(struct tun_wsp *p, struct tun_wsp_event *ev)
{
    p->in_frame = false;
    ev->kind = TUN_WSP_CONTROL;
    ev->opcode = p->opcode;
    ev->fin = true;
    ev->last = true;
    ev->data = p->ctl;
    ev->n = p->ctl_len;
    ev->code = 0;
    if (p->opcode == TUN_WS_CLOSE) {
        if (p->ctl_len == 1)
            return refuse(p, ev, 1002, "close frame with a 1-byte payload", 0, 0);
        ev->code = 1005;
        if (p->ctl_len >= 2) {
            unsigned c = (unsigned)p->ctl[0] << 8 | p->ctl[1];
            if (!close_code_ok(c))
                return refuse(p, ev, 1002, "close code %llu is not allowed on the wire",
                              (unsigned long long)c, 0);
            ev->code = (uint16_t)c;
        }
    }
    return TUN_WSP_CONTROL;
}

enum tun_wsp_kind tun_wsp_next(struct tun_wsp *p, uint8_t *in, size_t len, size_t *used,
                               struct tun_wsp_event *ev)
{
    size_t i = 0;
    memset(ev, 0, sizeof(*ev));
    *used = 0;
    if (p->err_code) {
        ev->kind = TUN_WSP_ERROR;
        ev->code = p->err_code;
        return TUN_WSP_ERROR;
    }
    while (i < len) {
        if (!p->in_frame) {
            p->hdr[p->hlen++] = in[i++];
            if (p->hlen == 2) {
                enum tun_wsp_kind k = check_start(p, ev);
                if (k != TUN_WSP_MORE) {
                    *used = i;
                    return k;
                }
                uint8_t l7 = p->hdr[1] & 0x7f;
                p->need = (uint8_t)(2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + (p->masked ? 4 : 0));
            }
            if (p->hlen < 2 || p->hlen < p->need)
                continue;
            enum tun_wsp_kind k = header_done(p, ev);
            if (k != TUN_WSP_MORE || (p->in_frame && p->left == 0)) {
                /* a data frame starts, an error, or an empty control frame */
                *used = i;
                return k != TUN_WSP_MORE ? k : control_done(p, ev);
            }
            continue;
        }
        size_t n = len - i;
        if (n > p->left)
            n = (size_t)p->left;
        if (p->masked)
            tun_ws_mask(in + i, in + i, n, p->key, p->koff);
        p->koff = (uint8_t)((p->koff + n) & 3);
        p->left -= n;
        if (p->opcode & 0x8) {
            memcpy(p->ctl + p->ctl_len, in + i, n);
            p->ctl_len = (uint8_t)(p->ctl_len + n);
            i += n;
            if (p->left == 0) {
                *used = i;
                return control_done(p, ev);
            }
            continue;
        }
        ev->kind = TUN_WSP_PAYLOAD;
        ev->opcode = p->opcode;
        ev->fin = p->fin;
        ev->data = in + i;
        ev->n = n;
        ev->last = p->left == 0;
        if (ev->last)
            p->in_frame = false;
        *used = i + n;
        return TUN_WSP_PAYLOAD;
    }
    *used = i;
    return TUN_WSP_MORE;
}
