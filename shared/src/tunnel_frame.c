/* Tunnel frame codec (protocol v1): one fixed 8-byte header, a payload whose
 * limit and shape depend on the type. Decode and encode share one checker so
 * that we never send what we would refuse. */
#include "agentbox/tunnel.h"
#include "agentbox/common.h"

#include <string.h>

static uint32_t get_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

bool tun_type_is_connection(uint8_t type)
{
    return type == TUN_HELLO || type == TUN_WELCOME || type == TUN_REPORT || type == TUN_EVENT ||
           type == TUN_SYNC;
}

size_t tun_frame_max_payload(uint8_t type)
{
    switch (type) {
    case TUN_DATA:
        return TUN_DATA_MAX;
    case TUN_REPORT:
        return TUN_REPORT_MAX;
    case TUN_WINDOW:
        return 4;
    case TUN_END:
        return 0;
    case TUN_HELLO:
    case TUN_WELCOME:
    case TUN_OPEN:
    case TUN_RESPONSE:
    case TUN_RESET:
    case TUN_EVENT:
    case TUN_SYNC:
        return TUN_CONTROL_MAX;
    default:
        return 0;
    }
}

const char *tun_type_name(uint8_t type)
{
    static const char *const names[] = {
        [TUN_HELLO] = "HELLO",       [TUN_WELCOME] = "WELCOME", [TUN_OPEN] = "OPEN",
        [TUN_RESPONSE] = "RESPONSE", [TUN_DATA] = "DATA",       [TUN_END] = "END",
        [TUN_RESET] = "RESET",       [TUN_WINDOW] = "WINDOW",   [TUN_REPORT] = "REPORT",
        [TUN_EVENT] = "EVENT",       [TUN_SYNC] = "SYNC",
    };

    if (type == 0 || type > TUN_TYPE_MAX)
        return "unknown";
    return names[type];
}

const char *tun_frame_strerror(int err)
{
    switch (err) {
    case TUN_FRAME_ESHORT:
        return "frame shorter than the 8-byte header";
    case TUN_FRAME_EVERSION:
        return "frame version is not 1";
    case TUN_FRAME_ETYPE:
        return "unknown frame type";
    case TUN_FRAME_ETOOBIG:
        return "frame payload over its limit (DATA 32 KiB, control 64 KiB, REPORT 1 MiB)";
    case TUN_FRAME_ESTREAM0:
        return "stream frame on stream 0";
    case TUN_FRAME_ECONNID:
        return "connection frame on a non-zero stream id";
    case TUN_FRAME_EWINDOW:
        return "WINDOW payload must be a u32 increment of 1..2^31-1";
    case TUN_FRAME_ESYNC:
        return "SYNC payload must be a non-empty multiple of 4 bytes";
    case TUN_FRAME_EEND:
        return "END must have an empty payload";
    case TUN_FRAME_ECAP:
        return "frame does not fit the output buffer";
    default:
        return ab_strerror(err);
    }
}

/* The rules every frame obeys, apart from the header bytes themselves. */
static int check(uint8_t type, uint32_t stream_id, const uint8_t *payload, size_t len)
{
    if (type == 0 || type > TUN_TYPE_MAX)
        return TUN_FRAME_ETYPE;
    if (tun_type_is_connection(type)) {
        if (stream_id != 0)
            return TUN_FRAME_ECONNID;
    } else if (stream_id == 0) {
        return TUN_FRAME_ESTREAM0;
    }
    switch (type) {
    case TUN_WINDOW: {
        uint32_t inc;
        if (len != 4)
            return TUN_FRAME_EWINDOW;
        inc = get_be32(payload);
        if (inc == 0 || inc > TUN_WINDOW_INCREMENT_MAX)
            return TUN_FRAME_EWINDOW;
        return 0;
    }
    case TUN_END:
        return len == 0 ? 0 : TUN_FRAME_EEND;
    case TUN_SYNC:
        if (len > TUN_CONTROL_MAX)
            return TUN_FRAME_ETOOBIG;
        if (len == 0 || len % 4 != 0)
            return TUN_FRAME_ESYNC;
        return 0;
    default:
        if (len > tun_frame_max_payload(type))
            return TUN_FRAME_ETOOBIG;
        return 0;
    }
}

int tun_frame_check_head(const void *hdr, size_t payload_len, struct tun_frame *out)
{
    const uint8_t *p = hdr;
    uint8_t type = p[1];
    uint32_t id = get_be32(p + 4);

    memset(out, 0, sizeof(*out));
    if (p[0] != TUN_VERSION)
        return TUN_FRAME_EVERSION;
    if (type == 0 || type > TUN_TYPE_MAX)
        return TUN_FRAME_ETYPE;
    if (tun_type_is_connection(type) ? id != 0 : id == 0)
        return tun_type_is_connection(type) ? TUN_FRAME_ECONNID : TUN_FRAME_ESTREAM0;
    /* the limits check() applies by length alone (WINDOW, END, SYNC shapes
     * need the payload: tun_frame_decode) */
    if (type == TUN_WINDOW ? payload_len != 4
        : type == TUN_END  ? payload_len != 0
                           : payload_len > tun_frame_max_payload(type))
        return type == TUN_WINDOW ? TUN_FRAME_EWINDOW
               : type == TUN_END  ? TUN_FRAME_EEND
                                  : TUN_FRAME_ETOOBIG;
    out->type = type;
    out->flags = p[2];
    out->stream_id = id;
    out->len = payload_len;
    return 0;
}

int tun_frame_decode(const void *buf, size_t len, struct tun_frame *out)
{
    const uint8_t *p = buf;
    int rc;

    memset(out, 0, sizeof(*out));
    if (p == NULL || len < TUN_HDR_LEN)
        return TUN_FRAME_ESHORT;
    if (p[0] != TUN_VERSION)
        return TUN_FRAME_EVERSION;
    rc = check(p[1], get_be32(p + 4), p + TUN_HDR_LEN, len - TUN_HDR_LEN);
    if (rc < 0)
        return rc;
    out->type = p[1];
    out->flags = p[2];
    out->stream_id = get_be32(p + 4);
    out->payload = p + TUN_HDR_LEN;
    out->len = len - TUN_HDR_LEN;
    return 0;
}

int tun_frame_encode(void *buf, size_t cap, const struct tun_frame *f, size_t *out_len)
{
    uint8_t *p = buf;
    int rc;

    *out_len = 0;
    if (f->len > 0 && f->payload == NULL)
        return AB_EINVAL;
    rc = check(f->type, f->stream_id, f->payload, f->len);
    if (rc < 0)
        return rc;
    if (cap < TUN_HDR_LEN || cap - TUN_HDR_LEN < f->len)
        return TUN_FRAME_ECAP;
    p[0] = TUN_VERSION;
    p[1] = f->type;
    p[2] = f->flags;
    p[3] = 0;
    put_be32(p + 4, f->stream_id);
    if (f->len > 0)
        memmove(p + TUN_HDR_LEN, f->payload, f->len);
    *out_len = TUN_HDR_LEN + f->len;
    return 0;
}

uint32_t tun_frame_window(const struct tun_frame *f)
{
    return f->len == 4 ? get_be32(f->payload) : 0;
}

uint32_t tun_frame_sync_watermark(const struct tun_frame *f)
{
    return f->len >= 4 ? get_be32(f->payload) : 0;
}

size_t tun_frame_sync_count(const struct tun_frame *f)
{
    return f->len >= 4 ? f->len / 4 - 1 : 0;
}

uint32_t tun_frame_sync_id(const struct tun_frame *f, size_t i)
{
    if (i >= tun_frame_sync_count(f))
        return 0;
    return get_be32(f->payload + 4 + 4 * i);
}
