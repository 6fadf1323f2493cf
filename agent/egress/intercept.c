/* One intercepted connection over memory BIOs (intercept.h).
 *
 *   sandbox bytes -> [s: TLS server] -> request heads rewritten -> up -> [u: TLS client] -> host
 *   host bytes    -> [u]             -> down                           -> [s]             ->
 * sandbox
 *
 * In plain mode the two TLS stages are absent. Every stage stops when the
 * next one holds EGRESS_INTERCEPT_QUEUE_MAX, which is how backpressure reaches
 * the gateway (egress_intercept_room). */
#include "agent/egress/intercept.h"

#include "agent/egress/ca.h"
#include "agent/egress/http_head.h"
#include "agentbox/common.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QMAX EGRESS_INTERCEPT_QUEUE_MAX
#define IO_CHUNK 16384

/* A byte queue whose memory is wiped whenever bytes leave it for good, since
 * the upstream-bound plaintext holds filled-in secrets. */
struct bq {
    uint8_t *p;
    size_t off, len, cap, max;
};

static size_t bq_avail(const struct bq *q)
{
    return q->len - q->off;
}

static int bq_append(struct bq *q, const uint8_t *d, size_t n)
{
    if (n > q->max - bq_avail(q))
        return AB_ELIMIT;
    if (q->off && q->len + n > q->cap) { /* compact, wiping what moved away */
        size_t a = bq_avail(q);
        memmove(q->p, q->p + q->off, a);
        OPENSSL_cleanse(q->p + a, q->len - a);
        q->len = a;
        q->off = 0;
    }
    if (q->len + n > q->cap) {
        size_t cap = q->cap ? q->cap : 4096;
        while (cap < q->len + n)
            cap *= 2;
        uint8_t *np = malloc(cap); /* not realloc: the old block must be wiped */
        if (!np)
            return AB_ENOMEM;
        if (q->p) {
            memcpy(np, q->p, q->len);
            OPENSSL_cleanse(q->p, q->cap);
            free(q->p);
        }
        q->p = np;
        q->cap = cap;
    }
    memcpy(q->p + q->len, d, n);
    q->len += n;
    return 0;
}

static void bq_consume(struct bq *q, size_t n)
{
    OPENSSL_cleanse(q->p + q->off, n);
    q->off += n;
    if (q->off == q->len)
        q->off = q->len = 0;
}

static void bq_free(struct bq *q)
{
    if (q->p) {
        OPENSSL_cleanse(q->p, q->cap);
        free(q->p);
    }
    memset(q, 0, sizeof(*q));
}

enum rq_state { RQ_HEAD, RQ_LENGTH, RQ_CHUNKED, RQ_TUNNEL };

struct egress_intercept {
    const char *host;
    const struct egress_rule *rule;
    const struct egress_secrets *secrets;
    bool tls;
    SSL *s, *u; /* tls: toward the sandbox (server), toward the host (client) */
    BIO *s_in, *s_out, *u_in, *u_out;
    bool s_hs, u_hs;     /* handshakes done */
    bool s_eof, u_eof;   /* raw end of stream from that side */
    bool s_done, u_done; /* that side will send no more plaintext */
    bool u_shut, s_shut; /* our close_notify sent toward that side */
    struct bq up, down;  /* plaintext toward the host / toward the sandbox */
    enum rq_state rq;
    uint64_t body_left;
    struct egress_chunked chunked;
    uint8_t head[EGRESS_HEAD_MAX];
    size_t head_len;
    uint64_t requests;
    char err[EGRESS_INTERCEPT_ERR_MAX];
};

static int fail(struct egress_intercept *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(struct egress_intercept *x, const char *fmt, ...)
{
    if (!x->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err, sizeof(x->err), fmt, ap);
        va_end(ap);
    }
    ERR_clear_error();
    return AB_EIO;
}

SSL_CTX *egress_intercept_client_ctx(const char *extra_ca, char *err, size_t errlen)
{
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    if (!c || SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1 ||
        SSL_CTX_set_default_verify_paths(c) != 1) {
        snprintf(err, errlen, "egress: cannot make the upstream TLS context");
        SSL_CTX_free(c);
        return NULL;
    }
    if (extra_ca && extra_ca[0] && SSL_CTX_load_verify_locations(c, extra_ca, NULL) != 1) {
        snprintf(err, errlen, "--egress-upstream-ca %.200s is not a readable PEM bundle", extra_ca);
        SSL_CTX_free(c);
        ERR_clear_error();
        return NULL;
    }
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
    return c;
}

static SSL *mem_ssl(SSL_CTX *ctx, BIO **in, BIO **out)
{
    SSL *s = SSL_new(ctx);
    *in = BIO_new(BIO_s_mem());
    *out = BIO_new(BIO_s_mem());
    if (!s || !*in || !*out) {
        SSL_free(s);
        BIO_free(*in);
        BIO_free(*out);
        *in = *out = NULL;
        return NULL;
    }
    BIO_set_mem_eof_return(*in, -1); /* empty is "try again", not EOF */
    SSL_set_bio(s, *in, *out);
    SSL_set_mode(s, SSL_MODE_ENABLE_PARTIAL_WRITE);
    return s;
}

struct egress_intercept *egress_intercept_new(const struct egress_intercept_deps *d)
{
    if (!d || !d->host || !d->rule || (d->tls && (!d->server_ctx || !d->client_ctx)))
        return NULL;
    struct egress_intercept *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->host = d->host;
    x->rule = d->rule;
    x->secrets = d->secrets;
    x->tls = d->tls;
    x->up.max = QMAX + EGRESS_HEAD_OUT_MAX; /* a rewritten head may overshoot once */
    x->down.max = QMAX;
    x->rq = RQ_HEAD;
    if (!d->tls)
        return x;
    x->s = mem_ssl(d->server_ctx, &x->s_in, &x->s_out);
    x->u = mem_ssl(d->client_ctx, &x->u_in, &x->u_out);
    if (!x->s || !x->u || egress_ca_ssl_set_host(x->s, x->host) != 0 ||
        SSL_set_tlsext_host_name(x->u, x->host) != 1 || SSL_set1_host(x->u, x->host) != 1) {
        egress_intercept_free(x);
        return NULL;
    }
    SSL_set_hostflags(x->u, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    SSL_set_accept_state(x->s);
    SSL_set_connect_state(x->u);
    /* The ClientHello is ready before the gateway has even dialled. */
    int r = SSL_do_handshake(x->u);
    if (r != 1 && SSL_get_error(x->u, r) != SSL_ERROR_WANT_READ) {
        egress_intercept_free(x);
        return NULL;
    }
    return x;
}

void egress_intercept_free(struct egress_intercept *x)
{
    if (!x)
        return;
    SSL_free(x->s); /* frees its BIOs */
    SSL_free(x->u);
    bq_free(&x->up);
    bq_free(&x->down);
    OPENSSL_cleanse(x, sizeof(*x));
    free(x);
}

const char *egress_intercept_error(const struct egress_intercept *x)
{
    return x->err[0] ? x->err : NULL;
}

uint64_t egress_intercept_requests(const struct egress_intercept *x)
{
    return x->requests;
}

/* --- requests, sandbox -> host ---------------------------------------------------------- */

static int put_up(struct egress_intercept *x, const uint8_t *p, size_t n)
{
    int rc = bq_append(&x->up, p, n);
    return rc == 0 ? 0 : fail(x, "egress: out of memory for the request to %s", x->host);
}

static int head_done(struct egress_intercept *x, const struct egress_http_head *h)
{
    char err[160] = "";
    if (strcmp(h->host, x->host) != 0)
        return fail(x, "request Host %.100s on a connection intercepted for %.100s", h->host,
                    x->host);
    /* Sized for this head and these values, not for the worst case: a
     * request's buffer then stays small (and off mmap). */
    size_t cap = h->head_len + 2, n;
    for (size_t i = 0; i < x->rule->n_headers; i++) {
        size_t fl = egress_secrets_fill_len(x->secrets, x->rule->headers[i].value);
        cap += strlen(x->rule->headers[i].name) + 4 +
               (fl == (size_t)-1 || fl > EGRESS_FILLED_MAX ? EGRESS_FILLED_MAX : fl) + 1;
    }
    if (cap > EGRESS_HEAD_OUT_MAX)
        cap = EGRESS_HEAD_OUT_MAX;
    uint8_t *out = malloc(cap);
    if (!out)
        return fail(x, "egress: out of memory for a request head");
    int rc =
        egress_http_head_rewrite(x->head, h, x->rule, x->secrets, out, cap, &n, err, sizeof(err));
    if (rc == 0)
        rc = put_up(x, out, n);
    else
        rc = fail(x, "request to %.100s not rewritten: %s", x->host, err);
    OPENSSL_cleanse(out, rc == 0 ? n : cap);
    free(out);
    if (rc != 0)
        return rc;
    x->requests++;
    switch (h->body) {
    case EGRESS_BODY_NONE:
        x->rq = RQ_HEAD;
        break;
    case EGRESS_BODY_LENGTH:
        x->rq = RQ_LENGTH;
        x->body_left = h->content_length;
        break;
    case EGRESS_BODY_CHUNKED:
        x->rq = RQ_CHUNKED;
        egress_chunked_init(&x->chunked);
        break;
    case EGRESS_BODY_TUNNEL:
        x->rq = RQ_TUNNEL;
        break;
    }
    return 0;
}

/* Plaintext from the sandbox, in request order. */
static int rq_feed(struct egress_intercept *x, const uint8_t *p, size_t n)
{
    while (n > 0) {
        switch (x->rq) {
        case RQ_HEAD: {
            size_t old = x->head_len, add = sizeof(x->head) - old;
            if (add > n)
                add = n;
            memcpy(x->head + old, p, add);
            x->head_len += add;
            struct egress_http_head h;
            enum egress_head_res r = egress_http_head_parse(x->head, x->head_len, &h);
            if (r == EGRESS_HEAD_BAD)
                return fail(x, "request to %.100s refused: %s", x->host, h.why);
            if (r == EGRESS_HEAD_MORE) {
                p += add, n -= add;
                break;
            }
            size_t used = h.head_len - old;
            int rc = head_done(x, &h);
            OPENSSL_cleanse(x->head, x->head_len);
            x->head_len = 0;
            if (rc != 0)
                return rc;
            p += used, n -= used;
            break;
        }
        case RQ_LENGTH: {
            size_t take = n;
            if ((uint64_t)take > x->body_left)
                take = (size_t)x->body_left;
            if (put_up(x, p, take) != 0)
                return AB_EIO;
            x->body_left -= take;
            p += take, n -= take;
            if (x->body_left == 0)
                x->rq = RQ_HEAD;
            break;
        }
        case RQ_CHUNKED: {
            int done;
            const char *why = "";
            long used = egress_chunked_scan(&x->chunked, p, n, &done, &why);
            if (used < 0)
                return fail(x, "request body to %.100s refused: %s", x->host, why);
            if (put_up(x, p, (size_t)used) != 0)
                return AB_EIO;
            p += used, n -= (size_t)used;
            if (done)
                x->rq = RQ_HEAD;
            break;
        }
        case RQ_TUNNEL:
            return put_up(x, p, n);
        }
    }
    return 0;
}

/* --- the pump --------------------------------------------------------------------------- */

static const char *ssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "protocol error";
}

static int hs_fail(struct egress_intercept *x, bool upstream)
{
    if (upstream) {
        long v = SSL_get_verify_result(x->u);
        if (v != X509_V_OK)
            return fail(x, "upstream certificate of %.100s did not verify: %s", x->host,
                        X509_verify_cert_error_string(v));
        return fail(x, "TLS with upstream %.100s failed: %s", x->host, ssl_reason());
    }
    return fail(x, "TLS with the sandbox for %.100s failed: %s", x->host, ssl_reason());
}

/* SSL_read until it would block or the next stage is full. Sets *closed on
 * close_notify; *drained when the read stopped for want of input. */
static int read_stage(struct egress_intercept *x, SSL *ssl, bool up_bound, bool *closed,
                      bool *drained, bool *progress)
{
    uint8_t tmp[IO_CHUNK];
    *drained = false;
    for (;;) {
        struct bq *next = up_bound ? &x->up : &x->down;
        if (*closed || bq_avail(next) >= QMAX)
            return 0;
        int r = SSL_read(ssl, tmp, sizeof(tmp));
        if (r > 0) {
            int rc = up_bound ? rq_feed(x, tmp, (size_t)r) : bq_append(&x->down, tmp, (size_t)r);
            OPENSSL_cleanse(tmp, (size_t)r);
            if (rc != 0)
                return up_bound ? rc : fail(x, "egress: out of memory for a response");
            *progress = true;
            continue;
        }
        int e = SSL_get_error(ssl, r);
        if (e == SSL_ERROR_ZERO_RETURN) {
            *closed = true;
            *progress = true;
            return 0;
        }
        if (e == SSL_ERROR_WANT_READ) {
            *drained = true;
            return 0;
        }
        return up_bound
                   ? fail(x, "TLS from the sandbox for %.100s failed: %s", x->host, ssl_reason())
                   : fail(x, "TLS from upstream %.100s failed: %s", x->host, ssl_reason());
    }
}

static int write_stage(struct egress_intercept *x, SSL *ssl, struct bq *q, BIO *out, bool *progress)
{
    while (bq_avail(q) && (size_t)BIO_ctrl_pending(out) < QMAX) {
        size_t n = bq_avail(q) < IO_CHUNK ? bq_avail(q) : IO_CHUNK;
        int r = SSL_write(ssl, q->p + q->off, (int)n);
        if (r <= 0)
            return fail(x, "TLS write for %.100s failed: %s", x->host, ssl_reason());
        bq_consume(q, (size_t)r);
        *progress = true;
    }
    return 0;
}

static int pump_tls(struct egress_intercept *x)
{
    bool progress = true;
    for (int round = 0; progress && round < 64; round++) {
        progress = false;
        if (!x->s_hs) {
            int r = SSL_do_handshake(x->s);
            if (r == 1)
                x->s_hs = progress = true;
            else if (SSL_get_error(x->s, r) != SSL_ERROR_WANT_READ)
                return hs_fail(x, false);
        }
        if (!x->u_hs) {
            int r = SSL_do_handshake(x->u);
            if (r == 1)
                x->u_hs = progress = true;
            else if (SSL_get_error(x->u, r) != SSL_ERROR_WANT_READ)
                return hs_fail(x, true);
        }
        bool drained = false, closed;
        if (x->s_hs) {
            closed = x->s_done;
            if (read_stage(x, x->s, true, &closed, &drained, &progress) != 0)
                return AB_EIO;
            if (closed || (drained && x->s_eof))
                x->s_done = true;
        } else if (x->s_eof) {
            x->s_done = true;
        }
        if (x->u_hs) {
            if (write_stage(x, x->u, &x->up, x->u_out, &progress) != 0)
                return AB_EIO;
            closed = x->u_done;
            if (read_stage(x, x->u, false, &closed, &drained, &progress) != 0)
                return AB_EIO;
            if (closed || (drained && x->u_eof))
                x->u_done = true;
        } else if (x->u_eof) {
            x->u_done = true;
        }
        if (x->s_hs && write_stage(x, x->s, &x->down, x->s_out, &progress) != 0)
            return AB_EIO;
        /* Pass a finished direction on as close_notify, after its last bytes. */
        if (x->s_done && !bq_avail(&x->up) && x->u_hs && !x->u_shut) {
            SSL_shutdown(x->u);
            x->u_shut = progress = true;
        }
        if (x->u_done && !bq_avail(&x->down) && x->s_hs && !x->s_shut) {
            SSL_shutdown(x->s);
            x->s_shut = progress = true;
        }
    }
    ERR_clear_error();
    return 0;
}

static int pump(struct egress_intercept *x)
{
    if (x->err[0])
        return AB_EIO;
    if (!x->tls) {
        x->s_done = x->s_eof;
        x->u_done = x->u_eof;
        return 0;
    }
    return pump_tls(x);
}

/* --- the gateway's side ----------------------------------------------------------------- */

size_t egress_intercept_room(const struct egress_intercept *x, enum egress_side from)
{
    size_t used;
    if (x->err[0])
        return 0;
    if (x->tls)
        used = (size_t)BIO_ctrl_pending(from == EGRESS_SIDE_SANDBOX ? x->s_in : x->u_in);
    else
        used = bq_avail(from == EGRESS_SIDE_SANDBOX ? &x->up : &x->down);
    return used >= QMAX ? 0 : QMAX - used;
}

int egress_intercept_feed(struct egress_intercept *x, enum egress_side from, const uint8_t *p,
                          size_t n)
{
    if (x->err[0])
        return AB_EIO;
    if (n > egress_intercept_room(x, from))
        return AB_ELIMIT;
    if ((from == EGRESS_SIDE_SANDBOX ? x->s_eof : x->u_eof) && n)
        return fail(x, "egress: bytes after end of stream");
    if (x->tls) {
        BIO *in = from == EGRESS_SIDE_SANDBOX ? x->s_in : x->u_in;
        if (n && BIO_write(in, p, (int)n) != (int)n)
            return fail(x, "egress: out of memory for TLS input");
    } else if (from == EGRESS_SIDE_SANDBOX) {
        if (rq_feed(x, p, n) != 0)
            return AB_EIO;
    } else if (bq_append(&x->down, p, n) != 0) {
        return fail(x, "egress: out of memory for a response");
    }
    return pump(x);
}

int egress_intercept_eof(struct egress_intercept *x, enum egress_side from)
{
    if (from == EGRESS_SIDE_SANDBOX)
        x->s_eof = true;
    else
        x->u_eof = true;
    return pump(x);
}

size_t egress_intercept_pending(const struct egress_intercept *x, enum egress_side to)
{
    if (x->tls)
        return (size_t)BIO_ctrl_pending(to == EGRESS_SIDE_SANDBOX ? x->s_out : x->u_out);
    return bq_avail(to == EGRESS_SIDE_SANDBOX ? &x->down : &x->up);
}

size_t egress_intercept_take(struct egress_intercept *x, enum egress_side to, uint8_t *out,
                             size_t cap)
{
    size_t n = egress_intercept_pending(x, to);
    if (n > cap)
        n = cap;
    if (n == 0)
        return 0;
    if (x->tls) {
        int r = BIO_read(to == EGRESS_SIDE_SANDBOX ? x->s_out : x->u_out, out, (int)n);
        n = r > 0 ? (size_t)r : 0;
        pump(x); /* room in the output lets the stage before it go on */
    } else {
        struct bq *q = to == EGRESS_SIDE_SANDBOX ? &x->down : &x->up;
        memcpy(out, q->p + q->off, n);
        bq_consume(q, n);
    }
    return n;
}

bool egress_intercept_is_finished(const struct egress_intercept *x, enum egress_side to)
{
    if (egress_intercept_pending(x, to))
        return false;
    if (to == EGRESS_SIDE_UPSTREAM)
        return x->s_done && !bq_avail(&x->up) && (!x->tls || x->u_shut || !x->u_hs);
    return x->u_done && !bq_avail(&x->down) && (!x->tls || x->s_shut || !x->s_hs);
}
