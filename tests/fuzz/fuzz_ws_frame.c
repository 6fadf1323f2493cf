/* Fuzzes the tunnel's RFC 6455 receive parser (tunnel_wsframe.h).
 *
 * Input: byte 0 picks the role (bit 0: masked, the hub's end) and a small
 * or the real message limit (bit 1); bytes 1-2 a cut point. The rest is
 * wire bytes, parsed whole and again in two pieces at the cut: both must
 * see the same payload bytes, the same control frames and the same
 * refusal. Every event takes input (no spin), a frame's payload slices add
 * up to its header's length, a control frame holds at most 125 bytes, a
 * refusal is 1002 or 1009 with a reason, and it sticks. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/tunnel_wsframe.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

struct seen {
    uint64_t sum;     /* of the payload bytes, position-weighted */
    uint64_t ndata;   /* payload bytes */
    uint64_t ctl_sum; /* of the control frames' opcodes, codes and bytes */
    unsigned nctl, msgs;
    uint16_t err;
};

static void parse(struct seen *s, bool masked, uint64_t max, uint8_t *buf, size_t len, size_t cut)
{
    struct tun_wsp p;
    uint64_t frame_left = 0;
    bool in_data = false;

    memset(s, 0, sizeof(*s));
    tun_wsp_init(&p, masked, max);
    size_t from = 0;
    for (int piece = 0; piece < 2; piece++) {
        size_t to = piece == 0 ? cut : len;
        size_t off = from;
        for (;;) {
            struct tun_wsp_event ev;
            size_t used = 0;
            enum tun_wsp_kind k = tun_wsp_next(&p, buf + off, to - off, &used, &ev);
            CHECK(used <= to - off);
            off += used;
            if (k == TUN_WSP_MORE) {
                CHECK(off == to);
                break;
            }
            if (k == TUN_WSP_ERROR) {
                CHECK(ev.code == 1002 || ev.code == 1009);
                CHECK(p.err[0] != '\0');
                s->err = ev.code;
                /* it sticks */
                CHECK(tun_wsp_next(&p, buf, len, &used, &ev) == TUN_WSP_ERROR && used == 0);
                return;
            }
            CHECK(used > 0);
            if (k == TUN_WSP_DATA_START) {
                CHECK(!in_data);
                CHECK(ev.len <= max);
                frame_left = ev.len;
                in_data = !ev.last;
                if (ev.last)
                    s->msgs += ev.fin;
            } else if (k == TUN_WSP_PAYLOAD) {
                CHECK(in_data && ev.n > 0 && ev.n <= frame_left);
                frame_left -= ev.n;
                CHECK(ev.last == (frame_left == 0));
                for (size_t i = 0; i < ev.n; i++)
                    s->sum += (uint64_t)ev.data[i] * (s->ndata + i + 1);
                s->ndata += ev.n;
                if (ev.last) {
                    in_data = false;
                    s->msgs += ev.fin;
                }
            } else {
                CHECK(k == TUN_WSP_CONTROL && !in_data);
                CHECK(ev.n <= TUN_WS_CONTROL_MAX);
                s->ctl_sum = s->ctl_sum * 31 + ev.opcode * 7u + ev.code;
                for (size_t i = 0; i < ev.n; i++)
                    s->ctl_sum = s->ctl_sum * 131 + ev.data[i];
                s->nctl++;
            }
        }
        from = to;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    bool masked = data[0] & 1;
    uint64_t max = (data[0] & 2) ? 300 : 1024 * 1024 + 8;
    size_t len = size - 3;
    size_t cut = len ? (((size_t)data[1] << 8) | data[2]) % (len + 1) : 0;
    /* the parser unmasks in place: each parse gets its own copy */
    uint8_t *a = malloc(len + 1), *b = malloc(len + 1);
    CHECK(a && b);
    memcpy(a, data + 3, len);
    memcpy(b, data + 3, len);
    struct seen whole, split;
    parse(&whole, masked, max, a, len, len);
    parse(&split, masked, max, b, len, cut);
    CHECK(whole.err == split.err && whole.ndata == split.ndata && whole.sum == split.sum &&
          whole.nctl == split.nctl && whole.ctl_sum == split.ctl_sum && whole.msgs == split.msgs);
    free(a);
    free(b);
    return 0;
}
