/* TLS SNI and HTTP Host from a connection's first bytes (sniff.h). Every read
 * is checked against what has arrived, so a short prefix is MORE and a lie in
 * a length field is NONE, never a read past buf. */
#include "agent/egress/sniff.h"

#include "agentbox/common.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* --- TLS ------------------------------------------------------------------------------ */

#define TLS_RECORD_HANDSHAKE 0x16
#define TLS_HANDSHAKE_CLIENT_HELLO 0x01
#define TLS_EXT_SERVER_NAME 0x0000
#define TLS_RECORD_MAX 18432 /* 2^14 + 2048, the most a record may claim (RFC 8446 §5.2) */

/* A cursor over the reassembled handshake message. */
struct rd {
    const uint8_t *p;
    size_t n;
};

static bool take(struct rd *r, size_t k, const uint8_t **out)
{
    if (r->n < k)
        return false;
    if (out)
        *out = r->p;
    r->p += k;
    r->n -= k;
    return true;
}

static bool u8(struct rd *r, size_t *v)
{
    const uint8_t *b;
    if (!take(r, 1, &b))
        return false;
    *v = b[0];
    return true;
}

static bool u16(struct rd *r, size_t *v)
{
    const uint8_t *b;
    if (!take(r, 2, &b))
        return false;
    *v = (size_t)b[0] << 8 | b[1];
    return true;
}

/* The server_name extension's body: a list of (type, name); the first
 * host_name (type 0) wins. */
static enum egress_sniff sni_from_ext(struct rd ext, char name[EGRESS_HOST_MAX + 1])
{
    size_t list, type, nlen;
    const uint8_t *s;
    struct egress_addr a;
    char tmp[EGRESS_HOST_MAX + 2];

    if (!u16(&ext, &list) || list != ext.n)
        return EGRESS_SNIFF_NONE;
    while (ext.n) {
        if (!u8(&ext, &type) || !u16(&ext, &nlen) || !take(&ext, nlen, &s))
            return EGRESS_SNIFF_NONE;
        if (type != 0)
            continue;
        if (nlen == 0 || nlen > EGRESS_HOST_MAX + 1 || memchr(s, '\0', nlen))
            return EGRESS_SNIFF_NONE;
        memcpy(tmp, s, nlen);
        tmp[nlen] = '\0';
        if (egress_addr_parse(tmp, &a) == 0) /* RFC 6066: literal addresses are not names */
            return EGRESS_SNIFF_NONE;
        if (egress_host_normalise(tmp, nlen, name) != 0)
            return EGRESS_SNIFF_NONE;
        return EGRESS_SNIFF_FOUND;
    }
    return EGRESS_SNIFF_NONE;
}

static enum egress_sniff client_hello(struct rd r, char name[EGRESS_HOST_MAX + 1])
{
    size_t k, ext_len, type, len;
    struct rd exts, one;
    bool seen = false;
    enum egress_sniff res = EGRESS_SNIFF_NONE;

    if (!take(&r, 2 + 32, NULL)) /* legacy_version, random */
        return EGRESS_SNIFF_NONE;
    if (!u8(&r, &k) || k > 32 || !take(&r, k, NULL)) /* legacy_session_id */
        return EGRESS_SNIFF_NONE;
    if (!u16(&r, &k) || k < 2 || (k & 1) || !take(&r, k, NULL)) /* cipher_suites */
        return EGRESS_SNIFF_NONE;
    if (!u8(&r, &k) || k < 1 || !take(&r, k, NULL)) /* legacy_compression_methods */
        return EGRESS_SNIFF_NONE;
    if (r.n == 0)
        return EGRESS_SNIFF_NONE; /* no extensions, so no SNI */
    if (!u16(&r, &ext_len) || ext_len != r.n)
        return EGRESS_SNIFF_NONE;
    exts = r;
    while (exts.n) {
        if (!u16(&exts, &type) || !u16(&exts, &len) || !take(&exts, len, &one.p))
            return EGRESS_SNIFF_NONE;
        one.n = len;
        if (type != TLS_EXT_SERVER_NAME)
            continue;
        if (seen) { /* RFC 8446 §4.2: one of each; two is an attempt to confuse */
            name[0] = '\0';
            return EGRESS_SNIFF_NONE;
        }
        seen = true;
        res = sni_from_ext(one, name);
    }
    return res;
}

static enum egress_sniff tls(const uint8_t *buf, size_t len, char name[EGRESS_HOST_MAX + 1])
{
    /* the handshake message, reassembled from as many records as it spans */
    uint8_t hs[EGRESS_SNIFF_MAX];
    size_t hn = 0, off = 0;

    name[0] = '\0';
    if (len > EGRESS_SNIFF_MAX)
        len = EGRESS_SNIFF_MAX;
    for (;;) {
        if (len - off < 5) {
            /* what has arrived of the next record header must still fit */
            if (len > off && buf[off] != TLS_RECORD_HANDSHAKE)
                return EGRESS_SNIFF_NONE;
            if (len > off + 1 && buf[off + 1] != 3)
                return EGRESS_SNIFF_NONE;
            return len >= EGRESS_SNIFF_MAX ? EGRESS_SNIFF_NONE : EGRESS_SNIFF_MORE;
        }
        const uint8_t *h = buf + off;
        size_t rlen = (size_t)h[3] << 8 | h[4];
        if (h[0] != TLS_RECORD_HANDSHAKE || h[1] != 3 || rlen == 0 || rlen > TLS_RECORD_MAX)
            return EGRESS_SNIFF_NONE;
        size_t have = AB_MIN(rlen, len - off - 5);
        if (hn + have > sizeof(hs))
            return EGRESS_SNIFF_NONE;
        memcpy(hs + hn, h + 5, have);
        hn += have;
        if (hn >= 4) {
            if (hs[0] != TLS_HANDSHAKE_CLIENT_HELLO)
                return EGRESS_SNIFF_NONE;
            size_t mlen = (size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3];
            if (mlen + 4 > sizeof(hs))
                return EGRESS_SNIFF_NONE;
            if (hn >= mlen + 4)
                return client_hello((struct rd){hs + 4, mlen}, name);
        }
        if (have < rlen) /* this record is still arriving */
            return len >= EGRESS_SNIFF_MAX ? EGRESS_SNIFF_NONE : EGRESS_SNIFF_MORE;
        off += 5 + rlen;
    }
}

/* A name only with FOUND: a hello can name a host and then turn out malformed. */
enum egress_sniff egress_sniff_tls(const uint8_t *buf, size_t len, char name[EGRESS_HOST_MAX + 1])
{
    enum egress_sniff r = tls(buf, len, name);
    if (r != EGRESS_SNIFF_FOUND)
        name[0] = '\0';
    return r;
}

/* --- HTTP/1.x ------------------------------------------------------------------------- */

static bool is_tchar(unsigned char c)
{
    return isalnum(c) || strchr("!#$%&'*+-.^_`|~", c);
}

/* The Host value (trimmed) without its port: "a.example:8080" → a.example;
 * "[::1]:80" and bare IPs are no name (the address decides). */
static enum egress_sniff host_value(const char *v, size_t n, char name[EGRESS_HOST_MAX + 1])
{
    while (n && (v[0] == ' ' || v[0] == '\t'))
        v++, n--;
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n == 0 || v[0] == '[')
        return EGRESS_SNIFF_NONE;
    const char *colon = memchr(v, ':', n);
    if (colon) {
        size_t pn = n - (size_t)(colon - v) - 1;
        if (pn == 0 || pn > 5)
            return EGRESS_SNIFF_NONE;
        for (size_t i = 0; i < pn; i++)
            if (!isdigit((unsigned char)colon[1 + i]))
                return EGRESS_SNIFF_NONE;
        n = (size_t)(colon - v);
    }
    if (egress_host_normalise(v, n, name) != 0)
        return EGRESS_SNIFF_NONE;
    return EGRESS_SNIFF_FOUND;
}

enum egress_sniff egress_sniff_http(const uint8_t *ubuf, size_t len, char name[EGRESS_HOST_MAX + 1])
{
    const char *buf = (const char *)ubuf;
    size_t i = 0, m = 0;
    const char *host = NULL;
    size_t host_n = 0;
    enum egress_sniff res;

    name[0] = '\0';
    if (len > EGRESS_SNIFF_MAX)
        len = EGRESS_SNIFF_MAX;
    /* the method: upper-case token, then one space */
    while (i < len && m < 24 && isupper((unsigned char)buf[i]))
        i++, m++;
    if (i == len)
        return m == len && m < 24 ? EGRESS_SNIFF_MORE : EGRESS_SNIFF_NONE;
    if (m == 0 || buf[i] != ' ')
        return EGRESS_SNIFF_NONE;
    /* the rest of the request line: no control bytes, ends " HTTP/1.x" */
    const char *eol = memchr(buf + i, '\n', len - i);
    if (!eol)
        return len >= EGRESS_SNIFF_MAX ? EGRESS_SNIFF_NONE : EGRESS_SNIFF_MORE;
    size_t ll = (size_t)(eol - buf);
    if (ll && buf[ll - 1] == '\r')
        ll--;
    if (ll < i + 11 || memcmp(buf + ll - 9, " HTTP/1.", 8) != 0 ||
        !isdigit((unsigned char)buf[ll - 1]))
        return EGRESS_SNIFF_NONE;
    for (size_t k = i; k < ll; k++)
        if ((unsigned char)buf[k] < 0x20 || buf[k] == 0x7f)
            return EGRESS_SNIFF_NONE;
    /* headers */
    for (i = (size_t)(eol - buf) + 1;;) {
        eol = memchr(buf + i, '\n', len - i);
        if (!eol)
            return len >= EGRESS_SNIFF_MAX ? EGRESS_SNIFF_NONE : EGRESS_SNIFF_MORE;
        size_t end = (size_t)(eol - buf), n = end - i;
        if (n && buf[end - 1] == '\r')
            n--;
        if (n == 0)
            break; /* the blank line: the head is complete */
        const char *line = buf + i;
        if (line[0] == ' ' || line[0] == '\t')
            return EGRESS_SNIFF_NONE; /* obs-fold: read differently by different servers */
        const char *colon = memchr(line, ':', n);
        if (!colon || colon == line)
            return EGRESS_SNIFF_NONE;
        for (const char *c = line; c < colon; c++)
            if (!is_tchar((unsigned char)*c))
                return EGRESS_SNIFF_NONE;
        if (colon - line == 4 && strncasecmp(line, "host", 4) == 0) {
            if (host)
                return EGRESS_SNIFF_NONE; /* two Hosts: which one the server uses is unknown */
            host = colon + 1;
            host_n = n - 5;
        }
        i = end + 1;
    }
    if (!host)
        return EGRESS_SNIFF_NONE;
    res = host_value(host, host_n, name);
    if (res != EGRESS_SNIFF_FOUND)
        name[0] = '\0';
    return res;
}
