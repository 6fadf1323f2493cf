/* Strict HTTP/1.1 request heads and chunked framing (http_head.h). Anything
 * two parsers could read differently (bare LF, folding, CL with TE, TE other
 * than chunked, duplicate lengths) is refused rather than guessed at, since a
 * request the gateway misframes is one whose successor it does not rewrite. */
#include "agent/egress/http_head.h"

#include "agentbox/common.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int is_vchar_or_obs(unsigned char c)
{
    return (c > 0x20 && c != 0x7f);
}

static int name_is(const uint8_t *b, const struct egress_head_field *f, const char *name)
{
    return f->name_len == strlen(name) &&
           strncasecmp((const char *)b + f->name, name, f->name_len) == 0;
}

static enum egress_head_res bad(struct egress_http_head *h, const char *why)
{
    h->why = why;
    return EGRESS_HEAD_BAD;
}

/* The end of the line that starts at i (the index of its CR), or -1 for MORE.
 * A bare CR or LF inside the line is reported through *bare. */
static long line_end(const uint8_t *b, size_t len, size_t i, int *bare)
{
    for (size_t j = i; j < len; j++) {
        if (b[j] == '\n') {
            *bare = 1;
            return (long)j;
        }
        if (b[j] == '\r') {
            if (j + 1 == len)
                return -1;
            if (b[j + 1] != '\n')
                *bare = 1;
            return (long)j;
        }
    }
    return -1;
}

static int parse_host(const uint8_t *v, size_t n, char out[EGRESS_HOST_MAX + 1])
{
    size_t hn = n;
    for (size_t i = 0; i < n; i++)
        if (v[i] == ':') {
            hn = i;
            if (i + 1 == n || i + 6 < n)
                return AB_EINVAL;
            for (size_t k = i + 1; k < n; k++)
                if (v[k] < '0' || v[k] > '9')
                    return AB_EINVAL;
            break;
        }
    return egress_host_normalise((const char *)v, hn, out);
}

enum egress_head_res egress_http_head_parse(const uint8_t *buf, size_t len,
                                            struct egress_http_head *h)
{
    memset(h, 0, sizeof(*h));
    size_t lim = len < EGRESS_HEAD_MAX ? len : EGRESS_HEAD_MAX;
    int bare = 0;
    /* Request line: METHOD SP target SP HTTP/1.x CRLF */
    long e = line_end(buf, lim, 0, &bare);
    if (e < 0)
        return len >= EGRESS_HEAD_MAX ? bad(h, "request head over 16 KiB") : EGRESS_HEAD_MORE;
    if (bare)
        return bad(h, "request line not ended by CRLF");
    size_t i = 0, end = (size_t)e;
    while (i < end && is_tchar(buf[i]))
        i++;
    if (i == 0 || i >= end || buf[i] != ' ')
        return bad(h, "malformed request method");
    if (i == 7 && memcmp(buf, "CONNECT", 7) == 0)
        return bad(h, "CONNECT is not relayed");
    size_t t = ++i;
    while (i < end && is_vchar_or_obs(buf[i]))
        i++;
    if (i == t || i >= end || buf[i] != ' ')
        return bad(h, "malformed request target");
    if (!(buf[t] == '/' || (i - t == 1 && buf[t] == '*')))
        return bad(h, "request target must be a path");
    i++;
    int http10;
    if (end - i == 8 && memcmp(buf + i, "HTTP/1.1", 8) == 0)
        http10 = 0;
    else if (end - i == 8 && memcmp(buf + i, "HTTP/1.0", 8) == 0)
        http10 = 1;
    else
        return bad(h, "HTTP version must be HTTP/1.1 or HTTP/1.0");
    h->line_len = end + 2;

    int n_host = 0, n_cl = 0, n_te = 0, upgrade = 0;
    uint64_t cl = 0;
    size_t p = h->line_len;
    for (;;) {
        bare = 0;
        e = line_end(buf, lim, p, &bare);
        if (e < 0)
            return len >= EGRESS_HEAD_MAX ? bad(h, "request head over 16 KiB") : EGRESS_HEAD_MORE;
        if (bare)
            return bad(h, "header line not ended by CRLF");
        end = (size_t)e;
        if (end == p) { /* the blank line */
            h->head_len = end + 2;
            break;
        }
        if (buf[p] == ' ' || buf[p] == '\t')
            return bad(h, "folded header line");
        if (h->n_fields == EGRESS_HEAD_FIELDS_MAX)
            return bad(h, "more than 128 header lines");
        i = p;
        while (i < end && is_tchar(buf[i]))
            i++;
        if (i == p || i >= end || buf[i] != ':')
            return bad(h, "malformed header name");
        struct egress_head_field *f = &h->fields[h->n_fields++];
        f->name = (uint16_t)p;
        f->name_len = (uint16_t)(i - p);
        i++;
        while (i < end && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        size_t ve = end;
        while (ve > i && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t'))
            ve--;
        for (size_t k = i; k < ve; k++)
            if (buf[k] != '\t' && !is_vchar_or_obs(buf[k]) && buf[k] != ' ')
                return bad(h, "control character in a header value");
        f->value = (uint16_t)i;
        f->value_len = (uint16_t)(ve - i);
        const uint8_t *v = buf + i;
        size_t vn = ve - i;
        if (name_is(buf, f, "host")) {
            if (++n_host > 1)
                return bad(h, "two Host headers");
            if (parse_host(v, vn, h->host) != 0)
                return bad(h, "Host is not a DNS name");
        } else if (name_is(buf, f, "content-length")) {
            uint64_t x = 0;
            if (vn == 0 || vn > 15)
                return bad(h, "malformed Content-Length");
            for (size_t k = 0; k < vn; k++) {
                if (v[k] < '0' || v[k] > '9')
                    return bad(h, "malformed Content-Length");
                x = x * 10 + (uint64_t)(v[k] - '0');
            }
            if (n_cl++ && x != cl)
                return bad(h, "two different Content-Length headers");
            cl = x;
        } else if (name_is(buf, f, "transfer-encoding")) {
            if (n_te++ || vn != 7 || strncasecmp((const char *)v, "chunked", 7) != 0)
                return bad(h, "Transfer-Encoding other than chunked");
        } else if (name_is(buf, f, "upgrade")) {
            upgrade = 1;
        }
        p = end + 2;
    }
    if (n_host == 0)
        return bad(h, "no Host header");
    if (n_te && n_cl)
        return bad(h, "both Content-Length and Transfer-Encoding");
    if (n_te && http10)
        return bad(h, "Transfer-Encoding in an HTTP/1.0 request");
    if (upgrade)
        h->body = EGRESS_BODY_TUNNEL;
    else if (n_te)
        h->body = EGRESS_BODY_CHUNKED;
    else if (n_cl && cl > 0)
        h->body = EGRESS_BODY_LENGTH;
    else
        h->body = EGRESS_BODY_NONE;
    h->content_length = cl;
    return EGRESS_HEAD_OK;
}

static const char *const FRAMING[] = {"host", "content-length", "transfer-encoding", "connection",
                                      "upgrade"};

static int put(uint8_t *out, size_t cap, size_t *o, const void *p, size_t n)
{
    if (n > cap - *o)
        return AB_ELIMIT;
    memcpy(out + *o, p, n);
    *o += n;
    return 0;
}

int egress_http_head_rewrite(const uint8_t *buf, const struct egress_http_head *h,
                             const struct egress_rule *rule, const struct egress_secrets *s,
                             uint8_t *out, size_t cap, size_t *outlen, char *err, size_t errlen)
{
    size_t o = 0;
    int rc;
    for (size_t r = 0; r < rule->n_headers; r++)
        for (size_t k = 0; k < sizeof(FRAMING) / sizeof(*FRAMING); k++)
            if (strcasecmp(rule->headers[r].name, FRAMING[k]) == 0) {
                snprintf(err, errlen, "a rule may not set the %s header", rule->headers[r].name);
                return AB_EINVAL;
            }
    if ((rc = put(out, cap, &o, buf, h->line_len)) != 0)
        goto limit;
    for (size_t i = 0; i < h->n_fields; i++) {
        const struct egress_head_field *f = &h->fields[i];
        int replaced = 0;
        for (size_t r = 0; r < rule->n_headers && !replaced; r++)
            replaced = name_is(buf, f, rule->headers[r].name);
        if (replaced)
            continue;
        /* the original line, from its name to its CRLF */
        size_t line_end = f->value + f->value_len;
        while (buf[line_end] != '\r')
            line_end++;
        if ((rc = put(out, cap, &o, buf + f->name, line_end + 2 - f->name)) != 0)
            goto limit;
    }
    for (size_t r = 0; r < rule->n_headers; r++) {
        const struct egress_header *hd = &rule->headers[r];
        size_t nl = strlen(hd->name), vl;
        if ((rc = put(out, cap, &o, hd->name, nl)) != 0 || (rc = put(out, cap, &o, ": ", 2)) != 0)
            goto limit;
        if (cap - o < 3) {
            rc = AB_ELIMIT;
            goto limit;
        }
        /* filled straight into out, so the value is in one place only */
        rc = egress_secrets_fill(s, hd->value, (char *)out + o, cap - o - 2, &vl, err, errlen);
        if (rc != 0)
            goto fail;
        o += vl;
        if ((rc = put(out, cap, &o, "\r\n", 2)) != 0)
            goto limit;
    }
    if ((rc = put(out, cap, &o, "\r\n", 2)) != 0)
        goto limit;
    *outlen = o;
    return 0;
limit:
    snprintf(err, errlen, "the rewritten request head is longer than %zu bytes", cap);
fail:
    OPENSSL_cleanse(out, cap);
    return rc;
}

enum {
    C_SIZE,
    C_EXT,
    C_SIZE_LF,
    C_DATA,
    C_DATA_CR,
    C_DATA_LF,
    C_TR_START,
    C_TR_LINE,
    C_TR_LF,
    C_END_LF,
    C_DONE
};
#define CHUNK_LINE_MAX 4096
#define CHUNK_SIZE_MAX (1ULL << 60)

void egress_chunked_init(struct egress_chunked *c)
{
    memset(c, 0, sizeof(*c));
    c->state = C_SIZE;
}

static int hexval(uint8_t ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

long egress_chunked_scan(struct egress_chunked *c, const uint8_t *buf, size_t len, int *done,
                         const char **why)
{
    size_t i = 0;
    *done = 0;
    while (i < len && c->state != C_DONE) {
        uint8_t ch = buf[i];
        switch (c->state) {
        case C_DATA: {
            size_t take = len - i;
            if ((uint64_t)take > c->left)
                take = (size_t)c->left;
            c->left -= take;
            i += take;
            if (c->left == 0)
                c->state = C_DATA_CR;
            continue;
        }
        case C_SIZE: {
            int v = hexval(ch);
            if (v >= 0) {
                if (c->left >= CHUNK_SIZE_MAX / 16)
                    goto bad_size;
                c->left = c->left * 16 + (uint64_t)v;
                c->saw_digit = 1;
            } else if (!c->saw_digit) {
                goto bad_size;
            } else if (ch == ';' || ch == ' ' || ch == '\t') {
                c->state = C_EXT;
            } else if (ch == '\r') {
                c->state = C_SIZE_LF;
            } else {
                goto bad_size;
            }
            if (++c->line > CHUNK_LINE_MAX)
                goto bad_size;
            break;
        }
        case C_EXT:
            if (ch == '\r')
                c->state = C_SIZE_LF;
            else if (ch == '\n' || (ch < 0x20 && ch != '\t') || ch == 0x7f)
                goto bad_size;
            if (++c->line > CHUNK_LINE_MAX)
                goto bad_size;
            break;
        case C_SIZE_LF:
            if (ch != '\n')
                goto bad_size;
            c->line = 0;
            c->saw_digit = 0;
            c->state = c->left ? C_DATA : C_TR_START;
            break;
        case C_DATA_CR:
            if (ch != '\r')
                goto bad_data;
            c->state = C_DATA_LF;
            break;
        case C_DATA_LF:
            if (ch != '\n')
                goto bad_data;
            c->state = C_SIZE;
            break;
        case C_TR_START:
            if (ch == '\r') {
                c->state = C_END_LF;
                break;
            }
            c->line = 0;
            c->state = C_TR_LINE;
            /* fall through */
        case C_TR_LINE:
            if (ch == '\r')
                c->state = C_TR_LF;
            else if (ch == '\n' || (ch < 0x20 && ch != '\t') || ch == 0x7f)
                goto bad_trailer;
            if (++c->line > CHUNK_LINE_MAX)
                goto bad_trailer;
            break;
        case C_TR_LF:
            if (ch != '\n')
                goto bad_trailer;
            c->state = C_TR_START;
            break;
        case C_END_LF:
            if (ch != '\n')
                goto bad_trailer;
            c->state = C_DONE;
            break;
        }
        i++;
    }
    *done = c->state == C_DONE;
    return (long)i;
bad_size:
    *why = "malformed chunk size line";
    return AB_EINVAL;
bad_data:
    *why = "chunk data not followed by CRLF";
    return AB_EINVAL;
bad_trailer:
    *why = "malformed chunked trailer";
    return AB_EINVAL;
}
