/* SOCKS5 client handshake (socks5.h; RFC 1928 and RFC 1929). */
#include "agent/egress/socks5.h"

#include "agentbox/common.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define VER 0x05
#define AUTH_VER 0x01
#define M_NONE 0x00
#define M_USERPASS 0x02
#define M_NO_ACCEPTABLE 0xff
#define CMD_CONNECT 0x01
#define ATYP_V4 0x01
#define ATYP_NAME 0x03
#define ATYP_V6 0x04

enum st { ST_METHOD, ST_AUTH, ST_REPLY, ST_DONE, ST_FAIL };

struct egress_socks5 {
    enum st st;
    bool userpass;
    uint8_t out[3 + 2 * 256 + 4]; /* the largest message we send (a login) */
    size_t out_len, out_off;
    uint8_t connect[4 + 1 + 255 + 2];
    size_t connect_len;
    uint8_t login[3 + 2 * 255];
    size_t login_len;
    uint8_t in[4 + 1 + 255 + 2]; /* the largest reply */
    size_t in_len;
    enum egress_socks5_fail fail;
    char err[EGRESS_SOCKS5_ERR_MAX];
};

const char *egress_socks5_fail_label(enum egress_socks5_fail f)
{
    switch (f) {
    case EGRESS_SOCKS5_OK:
        return "ok";
    case EGRESS_SOCKS5_NOT_SOCKS5:
        return "proxy_not_socks";
    case EGRESS_SOCKS5_AUTH:
        return "proxy_auth";
    case EGRESS_SOCKS5_REFUSED:
        return "proxy_refused";
    }
    return "proxy_refused";
}

static void queue(struct egress_socks5 *s, const uint8_t *p, size_t n)
{
    memcpy(s->out, p, n);
    s->out_len = n;
    s->out_off = 0;
}

struct egress_socks5 *egress_socks5_new(const struct egress_socks5_deps *d)
{
    const char *user = d && d->username ? d->username : "";
    const char *pass = d && d->password ? d->password : "";
    size_t ul = strlen(user), pl = strlen(pass);
    if (!d || ul > 255 || pl > 255 || (!d->addr && (!d->host || !d->host[0])))
        return NULL;
    size_t hl = d->addr ? 0 : strlen(d->host);
    if (hl > 255)
        return NULL;
    struct egress_socks5 *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->userpass = ul > 0 || pl > 0;
    uint8_t *c = s->connect;
    size_t n = 0;
    c[n++] = VER, c[n++] = CMD_CONNECT, c[n++] = 0;
    if (d->addr && d->addr->family == AF_INET) {
        c[n++] = ATYP_V4;
        memcpy(c + n, d->addr->a, 4), n += 4;
    } else if (d->addr && d->addr->family == AF_INET6) {
        c[n++] = ATYP_V6;
        memcpy(c + n, d->addr->a, 16), n += 16;
    } else if (d->addr) {
        free(s);
        return NULL;
    } else {
        c[n++] = ATYP_NAME;
        c[n++] = (uint8_t)hl;
        memcpy(c + n, d->host, hl), n += hl;
    }
    c[n++] = (uint8_t)(d->port >> 8), c[n++] = (uint8_t)d->port;
    s->connect_len = n;
    if (s->userpass) {
        uint8_t *l = s->login;
        n = 0;
        l[n++] = AUTH_VER;
        l[n++] = (uint8_t)ul, memcpy(l + n, user, ul), n += ul;
        l[n++] = (uint8_t)pl, memcpy(l + n, pass, pl), n += pl;
        s->login_len = n;
        /* Offer only username/password: a proxy that needs none may pick it too. */
        const uint8_t greet[] = {VER, 2, M_NONE, M_USERPASS};
        queue(s, greet, sizeof(greet));
    } else {
        const uint8_t greet[] = {VER, 1, M_NONE};
        queue(s, greet, sizeof(greet));
    }
    s->st = ST_METHOD;
    return s;
}

void egress_socks5_free(struct egress_socks5 *s)
{
    if (!s)
        return;
    OPENSSL_cleanse(s, sizeof(*s));
    free(s);
}

size_t egress_socks5_pending(const struct egress_socks5 *s)
{
    return s->out_len - s->out_off;
}

size_t egress_socks5_take(struct egress_socks5 *s, uint8_t *out, size_t cap)
{
    size_t n = egress_socks5_pending(s);
    if (n > cap)
        n = cap;
    memcpy(out, s->out + s->out_off, n);
    s->out_off += n;
    if (s->out_off == s->out_len) {
        OPENSSL_cleanse(s->out, sizeof(s->out)); /* the login held the password */
        s->out_off = s->out_len = 0;
    }
    return n;
}

static enum egress_socks5_res fail(struct egress_socks5 *s, enum egress_socks5_fail f,
                                   const char *why)
{
    s->st = ST_FAIL;
    s->fail = f;
    snprintf(s->err, sizeof(s->err), "egress proxy: %s", why);
    OPENSSL_cleanse(s->login, sizeof(s->login));
    return EGRESS_SOCKS5_FAIL;
}

static const char *rep_text(uint8_t rep)
{
    static const char *const t[] = {
        "succeeded",
        "general SOCKS server failure",
        "connection not allowed by ruleset",
        "network unreachable",
        "host unreachable",
        "connection refused",
        "TTL expired",
        "command not supported",
        "address type not supported",
    };
    return rep < sizeof(t) / sizeof(*t) ? t[rep] : "unknown reply code";
}

enum egress_socks5_res egress_socks5_parse_reply(const uint8_t *b, size_t len, size_t *used,
                                                 enum egress_socks5_fail *f, const char **why)
{
    *used = 0;
    if (len >= 1 && b[0] != VER) {
        *f = EGRESS_SOCKS5_NOT_SOCKS5, *why = "the CONNECT reply is not SOCKS5";
        return EGRESS_SOCKS5_FAIL;
    }
    if (len >= 2 && b[1] != 0) {
        *f = EGRESS_SOCKS5_REFUSED, *why = rep_text(b[1]);
        return EGRESS_SOCKS5_FAIL;
    }
    if (len >= 3 && b[2] != 0) {
        *f = EGRESS_SOCKS5_NOT_SOCKS5, *why = "the CONNECT reply has a non-zero reserved byte";
        return EGRESS_SOCKS5_FAIL;
    }
    if (len < 5)
        return EGRESS_SOCKS5_MORE;
    size_t need;
    switch (b[3]) {
    case ATYP_V4:
        need = 4 + 4 + 2;
        break;
    case ATYP_V6:
        need = 4 + 16 + 2;
        break;
    case ATYP_NAME:
        if (b[4] == 0) {
            *f = EGRESS_SOCKS5_NOT_SOCKS5, *why = "the CONNECT reply has an empty bound name";
            return EGRESS_SOCKS5_FAIL;
        }
        need = 4 + 1 + (size_t)b[4] + 2;
        break;
    default:
        *f = EGRESS_SOCKS5_NOT_SOCKS5, *why = "the CONNECT reply has an unknown address type";
        return EGRESS_SOCKS5_FAIL;
    }
    if (len < need)
        return EGRESS_SOCKS5_MORE;
    *used = need;
    *f = EGRESS_SOCKS5_OK;
    return EGRESS_SOCKS5_DONE;
}

enum egress_socks5_res egress_socks5_feed(struct egress_socks5 *s, const uint8_t *p, size_t n,
                                          size_t *used)
{
    *used = 0;
    while (s->st != ST_DONE && s->st != ST_FAIL) {
        /* Until our message is written the proxy has no reason to answer. */
        if (n == 0)
            return EGRESS_SOCKS5_MORE;
        if (egress_socks5_pending(s))
            return fail(s, EGRESS_SOCKS5_NOT_SOCKS5, "the proxy answered before it was asked");
        size_t want;
        if (s->st == ST_METHOD || s->st == ST_AUTH)
            want = 2;
        else
            want = sizeof(s->in);
        /* Take one byte at a time up to what the current message may need, so
         * nothing past the handshake is consumed. */
        while (n > 0 && s->in_len < want) {
            s->in[s->in_len++] = *p++;
            n--, (*used)++;
            if (s->st == ST_REPLY) {
                size_t rl;
                enum egress_socks5_fail f;
                const char *why;
                enum egress_socks5_res r =
                    egress_socks5_parse_reply(s->in, s->in_len, &rl, &f, &why);
                if (r == EGRESS_SOCKS5_FAIL)
                    return fail(s, f, why);
                if (r == EGRESS_SOCKS5_DONE) {
                    s->st = ST_DONE;
                    OPENSSL_cleanse(s->login, sizeof(s->login));
                    return EGRESS_SOCKS5_DONE;
                }
            }
        }
        if (s->in_len < want)
            return EGRESS_SOCKS5_MORE;
        if (s->st == ST_METHOD) {
            if (s->in[0] != VER)
                return fail(s, EGRESS_SOCKS5_NOT_SOCKS5, "the proxy does not speak SOCKS5");
            if (s->in[1] == M_NONE) {
                queue(s, s->connect, s->connect_len);
                s->st = ST_REPLY;
            } else if (s->in[1] == M_USERPASS && s->userpass) {
                queue(s, s->login, s->login_len);
                s->st = ST_AUTH;
            } else {
                return fail(s, EGRESS_SOCKS5_AUTH, "the proxy accepts none of our methods");
            }
        } else if (s->st == ST_AUTH) {
            if (s->in[0] != AUTH_VER)
                return fail(s, EGRESS_SOCKS5_NOT_SOCKS5, "the login reply is not RFC 1929");
            if (s->in[1] != 0)
                return fail(s, EGRESS_SOCKS5_AUTH, "the proxy refused the username/password");
            OPENSSL_cleanse(s->login, sizeof(s->login));
            queue(s, s->connect, s->connect_len);
            s->st = ST_REPLY;
        }
        s->in_len = 0;
    }
    return s->st == ST_DONE ? EGRESS_SOCKS5_DONE : EGRESS_SOCKS5_FAIL;
}

const char *egress_socks5_error(const struct egress_socks5 *s)
{
    return s->err[0] ? s->err : NULL;
}

enum egress_socks5_fail egress_socks5_failure(const struct egress_socks5 *s)
{
    return s->fail;
}
