/* The tunnel's RFC 6455 frame parser (tunnel_wsframe.h): every header form,
 * masked and not, fed whole, split at every byte boundary and a byte at a
 * time, gives the same payload and events; every refusal has its code and
 * reason and sticks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/tunnel_wsframe.h"

#define MAX_MSG (1024 * 1024 + 8)

static const uint8_t KEY[4] = {0x37, 0xfa, 0x21, 0x3d};

/* Appends one frame: b0 is FIN|RSV|opcode as given; len may differ from n
 * (a lying header); lenform 0: shortest, 16 or 64: that form. */
static size_t frame(uint8_t *out, uint8_t b0, const uint8_t *p, size_t n, bool mask, int lenform)
{
    size_t o = 0;
    uint8_t m = mask ? 0x80 : 0;
    out[o++] = b0;
    if (lenform == 0 && n < 126) {
        out[o++] = (uint8_t)(m | n);
    } else if (lenform == 16 || (lenform == 0 && n < 65536)) {
        out[o++] = m | 126;
        out[o++] = (uint8_t)(n >> 8);
        out[o++] = (uint8_t)n;
    } else {
        out[o++] = m | 127;
        for (int i = 7; i >= 0; i--)
            out[o++] = (uint8_t)((uint64_t)n >> (8 * i));
    }
    if (mask) {
        memcpy(out + o, KEY, 4);
        o += 4;
    }
    for (size_t i = 0; i < n; i++)
        out[o + i] = mask ? p[i] ^ KEY[i % 4] : p[i];
    return o + n;
}

/* What a parse saw. */
struct seen {
    uint8_t data[200000]; /* data payload, all messages concatenated */
    size_t ndata;
    int starts, lasts, msgs; /* DATA_START, last payloads, frames with FIN done */
    uint8_t ctl_op[16];
    uint16_t ctl_code[16];
    char ctl_text[16][126];
    int nctl;
    uint16_t err;
    char errtext[96];
};

/* Feeds wire (copied: it is unmasked in place) in pieces at the given cut
 * points (sorted, < len), then checks every byte was used. */
static void parse(struct seen *s, bool masked, const uint8_t *wire, size_t len, const size_t *cuts,
                  int ncuts)
{
    struct tun_wsp p;
    uint8_t *buf = malloc(len + 1);
    assert_non_null(buf);
    memcpy(buf, wire, len);
    memset(s, 0, sizeof(*s));
    tun_wsp_init(&p, masked, MAX_MSG);
    size_t from = 0;
    for (int c = 0; c <= ncuts; c++) {
        size_t to = c < ncuts ? cuts[c] : len;
        size_t off = from;
        for (int guard = 0; guard < 1000000; guard++) {
            struct tun_wsp_event ev;
            size_t used = 99;
            enum tun_wsp_kind k = tun_wsp_next(&p, buf + off, to - off, &used, &ev);
            assert_true(used <= to - off);
            assert_int_equal(k, ev.kind);
            off += used;
            if (k == TUN_WSP_MORE) {
                assert_int_equal(off, to);
                break;
            }
            if (k == TUN_WSP_ERROR) {
                s->err = ev.code;
                snprintf(s->errtext, sizeof(s->errtext), "%s", p.err);
                free(buf);
                return;
            }
            if (k == TUN_WSP_DATA_START) {
                s->starts++;
                if (ev.last) {
                    s->lasts++;
                    s->msgs += ev.fin;
                }
            } else if (k == TUN_WSP_PAYLOAD) {
                assert_true(ev.n > 0);
                assert_true(s->ndata + ev.n <= sizeof(s->data));
                assert_true(ev.data >= buf + off - ev.n && ev.data + ev.n <= buf + to);
                memcpy(s->data + s->ndata, ev.data, ev.n);
                s->ndata += ev.n;
                if (ev.last) {
                    s->lasts++;
                    s->msgs += ev.fin;
                }
            } else {
                assert_int_equal(k, TUN_WSP_CONTROL);
                assert_true(s->nctl < 16);
                s->ctl_op[s->nctl] = ev.opcode;
                s->ctl_code[s->nctl] = ev.code;
                size_t o = ev.opcode == TUN_WS_CLOSE && ev.n >= 2 ? 2 : 0;
                memcpy(s->ctl_text[s->nctl], ev.data + o, ev.n - o);
                s->ctl_text[s->nctl][ev.n - o] = '\0';
                s->nctl++;
            }
        }
        from = to;
    }
    assert_true(tun_wsp_is_idle(&p));
    free(buf);
}

static void parse_whole(struct seen *s, bool masked, const uint8_t *wire, size_t len)
{
    parse(s, masked, wire, len, NULL, 0);
}

static void assert_same(const struct seen *a, const struct seen *b)
{
    assert_int_equal(a->err, b->err);
    assert_int_equal(a->ndata, b->ndata);
    assert_memory_equal(a->data, b->data, a->ndata);
    assert_int_equal(a->msgs, b->msgs);
    assert_int_equal(a->nctl, b->nctl);
    for (int i = 0; i < a->nctl; i++) {
        assert_int_equal(a->ctl_op[i], b->ctl_op[i]);
        assert_int_equal(a->ctl_code[i], b->ctl_code[i]);
        assert_string_equal(a->ctl_text[i], b->ctl_text[i]);
    }
}

static uint8_t pat[140000];
static uint8_t wire[300000];

static void fill(void)
{
    for (size_t i = 0; i < sizeof(pat); i++)
        pat[i] = (uint8_t)(i * 7 + (i >> 8));
}

/* A session of every form: 7-bit, 16-bit and 64-bit lengths, an empty
 * frame, fragments with a ping between them, a pong, a close. */
static size_t every_form(uint8_t *out, bool mask)
{
    size_t o = 0;
    o += frame(out + o, 0x82, pat, 0, mask, 0);         /* empty */
    o += frame(out + o, 0x82, pat, 125, mask, 0);       /* 7-bit, the largest */
    o += frame(out + o, 0x82, pat + 1, 126, mask, 0);   /* 16-bit, the smallest */
    o += frame(out + o, 0x82, pat + 2, 65535, mask, 0); /* 16-bit, the largest */
    o += frame(out + o, 0x82, pat + 3, 65536, mask, 0); /* 64-bit */
    o += frame(out + o, 0x82, pat + 4, 5, mask, 64);    /* a longer form than needed */
    o += frame(out + o, 0x02, pat + 5, 3, mask, 0);     /* fragment 1 */
    o += frame(out + o, 0x89, (const uint8_t *)"hi", 2, mask, 0);
    o += frame(out + o, 0x00, pat + 6, 1000, mask, 0); /* fragment 2 */
    o += frame(out + o, 0x80, pat + 7, 0, mask, 0);    /* the empty last fragment */
    o += frame(out + o, 0x8a, (const uint8_t *)"pong", 4, mask, 0);
    o += frame(out + o, 0x88,
               (const uint8_t *)"\x03\xe8"
                                "bye",
               5, mask, 0);
    return o;
}

static size_t every_form_data(uint8_t *out)
{
    size_t o = 0;
    size_t parts[][2] = {{0, 125}, {1, 126}, {2, 65535}, {3, 65536}, {4, 5}, {5, 3}, {6, 1000}};
    for (size_t i = 0; i < AB_ARRAY_LEN(parts); i++) {
        memcpy(out + o, pat + parts[i][0], parts[i][1]);
        o += parts[i][1];
    }
    return o;
}

static void check_every_form(const struct seen *s)
{
    static uint8_t want[200000];
    size_t n = every_form_data(want);
    assert_int_equal(s->err, 0);
    assert_int_equal(s->ndata, n);
    assert_memory_equal(s->data, want, n);
    assert_int_equal(s->msgs, 7);
    assert_int_equal(s->nctl, 3);
    assert_int_equal(s->ctl_op[0], TUN_WS_PING);
    assert_string_equal(s->ctl_text[0], "hi");
    assert_int_equal(s->ctl_op[1], TUN_WS_PONG);
    assert_string_equal(s->ctl_text[1], "pong");
    assert_int_equal(s->ctl_op[2], TUN_WS_CLOSE);
    assert_int_equal(s->ctl_code[2], 1000);
    assert_string_equal(s->ctl_text[2], "bye");
}

static void test_every_header_form(void **state)
{
    static struct seen s;
    fill();
    for (int mask = 0; mask < 2; mask++) {
        size_t n = every_form(wire, mask);
        parse_whole(&s, mask, wire, n);
        check_every_form(&s);
    }
}

static void test_split_at_every_byte(void **state)
{
    static struct seen whole, split;
    fill();
    /* small frames of every header size, masked with key offsets that do
     * not line up with the 8-byte unmasking */
    for (int mask = 0; mask < 2; mask++) {
        size_t o = 0;
        o += frame(wire + o, 0x82, pat, 13, mask, 0);
        o += frame(wire + o, 0x82, pat + 1, 130, mask, 0);
        o += frame(wire + o, 0x82, pat + 2, 9, mask, 64);
        o += frame(wire + o, 0x09 | 0x80, (const uint8_t *)"ping!", 5, mask, 0);
        o += frame(wire + o, 0x02, pat + 3, 17, mask, 0);
        o += frame(wire + o, 0x80, pat + 4, 23, mask, 0);
        o += frame(wire + o, 0x88, NULL, 0, mask, 0);
        parse_whole(&whole, mask, wire, o);
        assert_int_equal(whole.err, 0);
        assert_int_equal(whole.msgs, 4);
        assert_int_equal(whole.ctl_code[1], 1005); /* a close without a code */
        /* one cut at every position, then two cuts at every pair */
        for (size_t c = 1; c < o; c++) {
            parse(&split, mask, wire, o, &c, 1);
            assert_same(&whole, &split);
        }
        for (size_t c1 = 1; c1 < o; c1 += 3)
            for (size_t c2 = c1 + 1; c2 < o; c2 += 5) {
                size_t cuts[2] = {c1, c2};
                parse(&split, mask, wire, o, cuts, 2);
                assert_same(&whole, &split);
            }
    }
}

static void test_byte_at_a_time(void **state)
{
    static struct seen s;
    fill();
    static size_t cuts[300000];
    for (int mask = 0; mask < 2; mask++) {
        size_t n = every_form(wire, mask);
        for (size_t i = 0; i + 1 < n; i++)
            cuts[i] = i + 1;
        parse(&s, mask, wire, n, cuts, (int)(n - 1));
        check_every_form(&s);
        /* odd piece sizes across the 8-byte unmask loop and the key */
        int k = 0;
        for (size_t c = 3; c < n; c += 4093)
            cuts[k++] = c;
        parse(&s, mask, wire, n, cuts, k);
        check_every_form(&s);
    }
}

static void test_masks_are_undone(void **state)
{
    /* every key offset and length around the 8-byte loop */
    uint8_t src[64], dst[64], back[64];
    const uint8_t key[4] = {1, 2, 0x80, 0xff};
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i * 31);
    for (unsigned off = 0; off < 4; off++)
        for (size_t n = 0; n <= sizeof(src); n++) {
            tun_ws_mask(dst, src, n, key, off);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(dst[i], src[i] ^ key[(off + i) & 3]);
            memcpy(back, dst, n);
            tun_ws_mask(back, back, n, key, off); /* in place */
            assert_memory_equal(back, src, n);
        }
    /* the masked bytes on the wire are unmasked; an unmasked input is not written */
    static struct seen s;
    fill();
    size_t n = frame(wire, 0x82, pat, 1001, false, 0);
    uint8_t copy[1100];
    memcpy(copy, wire, n);
    struct tun_wsp p;
    tun_wsp_init(&p, false, MAX_MSG);
    struct tun_wsp_event ev;
    size_t used;
    assert_int_equal(tun_wsp_next(&p, copy, n, &used, &ev), TUN_WSP_DATA_START);
    assert_int_equal(ev.len, 1001);
    assert_int_equal(tun_wsp_next(&p, copy + used, n - used, &used, &ev), TUN_WSP_PAYLOAD);
    assert_true(ev.last);
    assert_memory_equal(copy, wire, n);
    n = frame(wire, 0x82, pat, 1001, true, 0);
    parse_whole(&s, true, wire, n);
    assert_int_equal(s.ndata, 1001);
    assert_memory_equal(s.data, pat, 1001);
}

/* One refused input: its close code, a reason containing why, and the
 * parser stays refused. */
static void refused(bool masked, const uint8_t *w, size_t n, uint16_t code, const char *why)
{
    static struct seen s;
    parse_whole(&s, masked, w, n);
    assert_int_equal(s.err, code);
    if (!strstr(s.errtext, why))
        fail_msg("reason \"%s\" does not say \"%s\"", s.errtext, why);
    /* split a byte at a time: the same refusal */
    static size_t cuts[64];
    int k = 0;
    for (size_t i = 1; i < n && k < 64; i++)
        cuts[k++] = i;
    parse(&s, masked, w, n, cuts, k);
    assert_int_equal(s.err, code);
}

static void test_refusals(void **state)
{
    uint8_t w[512];
    size_t n;
    fill();

    /* reserved bits (RSV1..3) without an extension */
    for (uint8_t rsv = 0x10; rsv <= 0x40; rsv <<= 1) {
        n = frame(w, 0x82 | rsv, pat, 4, true, 0);
        refused(true, w, n, 1002, "reserved bits");
    }
    /* reserved opcodes */
    const uint8_t ops[] = {3, 4, 5, 6, 7, 0xb, 0xc, 0xd, 0xe, 0xf};
    for (size_t i = 0; i < sizeof(ops); i++) {
        n = frame(w, 0x80 | ops[i], pat, 1, true, 0);
        refused(true, w, n, 1002, "reserved");
    }
    /* masks: the server needs them, the client refuses them */
    n = frame(w, 0x82, pat, 4, false, 0);
    refused(true, w, n, 1002, "must be masked");
    n = frame(w, 0x82, pat, 4, true, 0);
    refused(false, w, n, 1002, "must not be masked");
    /* a 64-bit length with the high bit set */
    uint8_t big[14] = {0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4};
    refused(true, big, sizeof(big), 1002, "high bit");
    /* control frames: fragmented, over 125 bytes (by 7-bit 126 and 127) */
    n = frame(w, 0x09, pat, 1, true, 0);
    refused(true, w, n, 1002, "fragmented control");
    n = frame(w, 0x89, pat, 126, true, 0);
    refused(true, w, n, 1002, "at most 125");
    n = frame(w, 0x88, pat, 200, true, 64);
    refused(true, w, n, 1002, "at most 125");
    /* continuation outside a message; a new message inside one */
    n = frame(w, 0x80, pat, 3, true, 0);
    refused(true, w, n, 1002, "outside a message");
    n = frame(w, 0x02, pat, 3, true, 0);
    n += frame(w + n, 0x82, pat, 3, true, 0);
    refused(true, w, n, 1002, "before the fragmented one ended");
    /* close frames: a 1-byte payload, codes not allowed on the wire */
    n = frame(w, 0x88, (const uint8_t *)"\x03", 1, true, 0);
    refused(true, w, n, 1002, "1-byte");
    const unsigned bad[] = {0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535};
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        uint8_t c[2] = {(uint8_t)(bad[i] >> 8), (uint8_t)bad[i]};
        n = frame(w, 0x88, c, 2, true, 0);
        refused(true, w, n, 1002, "close code");
    }
    const unsigned good[] = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 4999};
    for (size_t i = 0; i < AB_ARRAY_LEN(good); i++) {
        static struct seen s;
        uint8_t c[2] = {(uint8_t)(good[i] >> 8), (uint8_t)good[i]};
        n = frame(w, 0x88, c, 2, true, 0);
        parse_whole(&s, true, w, n);
        assert_int_equal(s.err, 0);
        assert_int_equal(s.ctl_code[0], good[i]);
    }
}

static void test_message_limit(void **state)
{
    uint8_t w[64];
    /* one frame over the limit: refused from its header, no payload read */
    uint64_t len = MAX_MSG + 1;
    uint8_t h[14] = {0x82, 0x80 | 127};
    for (int i = 0; i < 8; i++)
        h[2 + i] = (uint8_t)(len >> (8 * (7 - i)));
    refused(true, h, sizeof(h), 1009, "over the 1048584-byte limit");
    /* exactly the limit: a header is fine */
    struct tun_wsp p;
    struct tun_wsp_event ev;
    size_t used;
    len = MAX_MSG;
    for (int i = 0; i < 8; i++)
        h[2 + i] = (uint8_t)(len >> (8 * (7 - i)));
    tun_wsp_init(&p, true, MAX_MSG);
    assert_int_equal(tun_wsp_next(&p, h, sizeof(h), &used, &ev), TUN_WSP_DATA_START);
    assert_int_equal(ev.len, MAX_MSG);
    /* fragments, each under the limit, together over it: refused at the
     * header of the one that crosses it */
    tun_wsp_init(&p, false, 100);
    fill();
    size_t n = frame(w, 0x02, pat, 60, false, 0);
    size_t o = 0;
    for (enum tun_wsp_kind k; (k = tun_wsp_next(&p, w + o, n - o, &used, &ev)) != TUN_WSP_MORE;
         o += used)
        assert_true(k == TUN_WSP_DATA_START || k == TUN_WSP_PAYLOAD);
    n = frame(w, 0x80, pat, 41, false, 0);
    assert_int_equal(tun_wsp_next(&p, w, n, &used, &ev), TUN_WSP_ERROR);
    assert_int_equal(ev.code, 1009);
    assert_int_equal(used, 2); /* the header's first two bytes only */
    assert_non_null(strstr(p.err, "101 bytes"));
    /* and it stays refused */
    assert_int_equal(tun_wsp_next(&p, w, n, &used, &ev), TUN_WSP_ERROR);
    assert_int_equal(used, 0);
    assert_int_equal(ev.code, 1009);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_header_form), cmocka_unit_test(test_split_at_every_byte),
        cmocka_unit_test(test_byte_at_a_time),    cmocka_unit_test(test_masks_are_undone),
        cmocka_unit_test(test_refusals),          cmocka_unit_test(test_message_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
