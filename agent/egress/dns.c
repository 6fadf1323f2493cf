/* DNS query parsing, rcode replies and answer addresses (dns.h). Every read
 * is checked against len; compression pointers are only skipped, never
 * followed, so a pointer loop cannot hold the loop thread. */
#include "agent/egress/dns.h"

#include "agentbox/common.h"

#include <ctype.h>
#include <string.h>
#include <sys/socket.h>

#define HDR 12

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* An uncompressed name at msg[*off], into name (lower case, dotted). */
static int read_name(const uint8_t *msg, size_t len, size_t *off, char name[EGRESS_HOST_MAX + 1])
{
    size_t o = *off, n = 0;
    for (;;) {
        if (o >= len)
            return AB_EINVAL;
        uint8_t l = msg[o++];
        if (l == 0)
            break;
        if (l > 63 || o + l > len || n + l + (n ? 1 : 0) > EGRESS_HOST_MAX)
            return AB_EINVAL; /* also refuses compression (0xc0) in a question */
        if (n)
            name[n++] = '.';
        for (uint8_t i = 0; i < l; i++) {
            unsigned char c = msg[o + i];
            if (c == '.' || c == '\0')
                return AB_EINVAL;
            name[n++] = (char)tolower(c);
        }
        o += l;
    }
    name[n] = '\0';
    *off = o;
    return 0;
}

/* Skips a possibly compressed name. */
static int skip_name(const uint8_t *msg, size_t len, size_t *off)
{
    size_t o = *off;
    for (int labels = 0; labels < 128; labels++) {
        if (o >= len)
            return AB_EINVAL;
        uint8_t l = msg[o];
        if (l == 0) {
            *off = o + 1;
            return 0;
        }
        if ((l & 0xc0) == 0xc0) {
            if (o + 2 > len)
                return AB_EINVAL;
            *off = o + 2;
            return 0;
        }
        if (l > 63)
            return AB_EINVAL;
        o += 1 + (size_t)l;
    }
    return AB_EINVAL;
}

int egress_dns_parse_query(const uint8_t *msg, size_t len, struct egress_dns_question *q)
{
    size_t off = HDR;
    memset(q, 0, sizeof(*q));
    if (len < HDR || len > EGRESS_DNS_MSG_MAX)
        return AB_EINVAL;
    uint16_t flags = rd16(msg + 2);
    if ((flags & 0x8000) || ((flags >> 11) & 0xf) != 0)
        return AB_EINVAL; /* a response, or not a standard query */
    if (rd16(msg + 4) != 1 || rd16(msg + 6) != 0 || rd16(msg + 8) != 0 || rd16(msg + 10) > 1)
        return AB_EINVAL;
    if (read_name(msg, len, &off, q->name) || off + 4 > len)
        return AB_EINVAL;
    q->id = rd16(msg);
    q->qtype = rd16(msg + off);
    q->qclass = rd16(msg + off + 2);
    q->end = off + 4;
    return 0;
}

size_t egress_dns_reply_rcode(const uint8_t *msg, const struct egress_dns_question *q,
                              uint8_t rcode, uint8_t *out, size_t cap)
{
    if (q->end < HDR || q->end > cap || q->end > EGRESS_DNS_MSG_MAX)
        return 0;
    memcpy(out, msg, q->end);
    /* QR, the query's RD, RA; opcode QUERY; the rcode */
    wr16(out + 2, (uint16_t)(0x8000 | (rd16(msg + 2) & 0x0100) | 0x0080 | (rcode & 0xf)));
    wr16(out + 4, 1);
    wr16(out + 6, 0);
    wr16(out + 8, 0);
    wr16(out + 10, 0);
    return q->end;
}

int egress_dns_parse_answer(const uint8_t *msg, size_t len, const struct egress_dns_question *q,
                            struct egress_addr *addrs, size_t max, size_t *n, uint32_t *ttl)
{
    struct egress_dns_question a;
    size_t off = HDR;

    *n = 0;
    *ttl = 0;
    if (len < HDR || len > EGRESS_DNS_MSG_MAX || !(rd16(msg + 2) & 0x8000))
        return AB_EINVAL;
    if (rd16(msg + 4) != 1)
        return AB_EINVAL;
    if (read_name(msg, len, &off, a.name) || off + 4 > len)
        return AB_EINVAL;
    if (strcmp(a.name, q->name) != 0 || rd16(msg + off) != q->qtype ||
        rd16(msg + off + 2) != q->qclass)
        return AB_EINVAL; /* an answer to some other question */
    off += 4;
    uint16_t ancount = rd16(msg + 6);
    bool first = true;
    for (uint16_t i = 0; i < ancount; i++) {
        if (skip_name(msg, len, &off) || off + 10 > len)
            return AB_EINVAL;
        uint16_t type = rd16(msg + off), cls = rd16(msg + off + 2);
        uint32_t t = (uint32_t)rd16(msg + off + 4) << 16 | rd16(msg + off + 6);
        uint16_t rdlen = rd16(msg + off + 8);
        off += 10;
        if (off + rdlen > len)
            return AB_EINVAL;
        int fam = type == EGRESS_DNS_TYPE_A && rdlen == 4       ? AF_INET
                  : type == EGRESS_DNS_TYPE_AAAA && rdlen == 16 ? AF_INET6
                                                                : 0;
        if (cls == 1 && fam && *n < max) {
            memset(&addrs[*n], 0, sizeof(addrs[*n]));
            addrs[*n].family = fam;
            memcpy(addrs[*n].a, msg + off, rdlen);
            (*n)++;
            if (first || t < *ttl)
                *ttl = t;
            first = false;
        }
        off += rdlen;
    }
    return 0;
}
