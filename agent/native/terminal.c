/* The sandbox terminal (reference §4.1, §4.2):
 *
 *   POST /v1/sandboxes/{id}/exec-token → {token}: single use, valid 30 s, for
 *        a Running sandbox the caller may touch (API key; gated as
 *        sandbox.execToken).
 *   GET  /v1/sandboxes/{id}/terminal?token=…[&cols=&rows=] — a WebSocket
 *        authenticated by that token instead of the API key (a browser cannot
 *        set headers on a WebSocket): a PTY shell in the sandbox through its
 *        own envd (process.Process/Start with `pty`, as the SDK's pty.create
 *        does). Binary frames from the client are keystrokes
 *        (process.Process/SendInput); a text frame is a JSON control message,
 *        {"resize":{"cols":C,"rows":R}} (process.Process/Update) or
 *        {"input":"text"}. The PTY's output comes back as binary frames; when
 *        the shell exits the server closes with 1000 and reason "exited N".
 *        Closing the socket kills the shell (SendSignal SIGKILL): envd keeps
 *        a process whose client went away.
 *
 * Tokens are kept as SHA-256 digests (a memory dump shows none), bound to the
 * sandbox they were issued for, and consumed by the first upgrade that names
 * them, whatever happens next: reuse and expiry are 401. The WebSocket needs
 * the agent's own listener (http_upgrade); through the hub's tunnel relay it
 * is 501. Loop thread only. */
#include "agent/native/native.h"
#include "agent/native/sandboxes.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/buf.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"

#include <openssl/sha.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TOKEN_PREFIX "abxt_"
#define TERM_FRAME_MAX (64 * 1024) /* a client frame's payload */
#define TERM_WS_IN_MAX (TERM_FRAME_MAX + 16)
#define TERM_INPUT_MAX (64 * 1024)    /* keystrokes waiting for envd; beyond, reading pauses */
#define TERM_INPUT_CHUNK (16 * 1024)  /* per SendInput */
#define TERM_STREAM_MAX (1024 * 1024) /* envd envelope bytes buffered */
#define TERM_OUT_HIGH (1024 * 1024)   /* output queued to the client before envd is paused */
#define TERM_CTRL_MAX 4096            /* a text (control) message */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

/* ---- exec tokens --------------------------------------------------------------------------- */

static void token_digest(const char *token, char out[65])
{
    crypto_sha256_hex(token, out);
}

int native_exec_token_issue(struct native *n, const char *sandbox, char *out, size_t outlen)
{
    int64_t now = ab_now_ms();
    struct native_exec_token *slot = NULL;

    for (int i = 0; i < NATIVE_EXEC_TOKENS_MAX; i++) {
        struct native_exec_token *t = &n->exec_tokens[i];
        if (!t->digest[0] || t->expires_ms <= now) {
            slot = t;
            break;
        }
    }
    if (!slot)
        return AB_EBUSY;
    if (crypto_token(TOKEN_PREFIX, out, outlen) != 0)
        return AB_EIO;
    token_digest(out, slot->digest);
    ab_strlcpy(slot->sandbox, sandbox, sizeof(slot->sandbox));
    slot->expires_ms = now + NATIVE_EXEC_TOKEN_TTL_MS;
    return 0;
}

int native_exec_token_take(struct native *n, const char *sandbox, const char *token)
{
    char d[65];
    int64_t now = ab_now_ms();

    if (!token || strncmp(token, TOKEN_PREFIX, strlen(TOKEN_PREFIX)) != 0)
        return AB_EDENIED;
    token_digest(token, d);
    for (int i = 0; i < NATIVE_EXEC_TOKENS_MAX; i++) {
        struct native_exec_token *t = &n->exec_tokens[i];
        if (!t->digest[0] || !crypto_equal(t->digest, d, 64))
            continue;
        bool ok = t->expires_ms > now && strcmp(t->sandbox, sandbox) == 0;
        memset(t, 0, sizeof(*t)); /* single use: consumed by this attempt, good or not */
        return ok ? 0 : AB_ETIMEOUT;
    }
    return AB_EDENIED;
}

static void token_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    struct rt_sandbox s;
    char tok[128];
    int rc;

    if (!native_own_sandbox(ex, n, p, &s))
        return;
    explicit_bzero(s.envd_token, sizeof(s.envd_token));
    if (s.state != RT_RUNNING || !s.envd_addr[0]) {
        native_error(ex, 409, "NOT_RUNNING", NULL, "sandbox '%s' is not Running", s.id);
        return;
    }
    if ((rc = native_exec_token_issue(n, s.id, tok, sizeof(tok))) != 0) {
        native_error(ex, rc == AB_EBUSY ? 429 : 503, NULL, NULL,
                     rc == AB_EBUSY ? "more than %d exec tokens are outstanding; use one or wait "
                                      "30 s"
                                    : "cannot make an exec token now (%d)",
                     rc == AB_EBUSY ? NATIVE_EXEC_TOKENS_MAX : rc);
        return;
    }
    http_respond_json(ex, 200, json_pack("{s:s}", "token", tok));
    explicit_bzero(tok, sizeof(tok));
}

NATIVE_GATED(token_gated, "sandbox.execToken", token_authed)

static void h_token(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, token_gated, n);
}

/* ---- the terminal ------------------------------------------------------------------------- */

struct native_term {
    struct native_term *prev, *next; /* n->terms */
    struct native *n;
    struct http_exchange *ex;  /* NULL once finished */
    struct http_client *start; /* the Start stream; NULL once it ended */
    struct http_client *call;  /* the SendInput / Update in flight */
    char id[RT_ID_MAX + 1];
    char addr[sizeof(((struct rt_sandbox *)0)->envd_addr)];
    char token[sizeof(((struct rt_sandbox *)0)->envd_token)];
    int64_t pid; /* 0 until the start event */
    int start_status;
    bool resize;
    int cols, rows;
    bool kill_sent;
    int busy;        /* inside one of its callbacks: freed when the outermost returns */
    bool paused_in;  /* reading from the client paused (input backlog) */
    uint8_t frag_op; /* opcode of a fragmented message in progress; 0 none */
    struct buf env;  /* envd envelopes not parsed yet */
    struct buf ws;   /* client bytes not parsed yet */
    struct buf in;   /* keystrokes not sent to envd yet */
    struct buf ctrl; /* a text message being assembled */
};

static void term_unlink_free(struct native_term *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else if (t->n->terms == t)
        t->n->terms = t->next;
    if (t->next)
        t->next->prev = t->prev;
    explicit_bzero(t->token, sizeof(t->token));
    buf_free(&t->env);
    buf_free(&t->ws);
    buf_free(&t->in);
    buf_free(&t->ctrl);
    free(t);
}

static void term_maybe_free(struct native_term *t)
{
    if (!t->busy && !t->ex && !t->start && !t->call)
        term_unlink_free(t);
}

/* A WebSocket frame from the server (never masked). */
static void ws_send(struct native_term *t, uint8_t op, const void *data, size_t len)
{
    uint8_t h[10];
    size_t hl;

    if (!t->ex)
        return;
    h[0] = (uint8_t)(0x80 | op);
    if (len < 126) {
        h[1] = (uint8_t)len;
        hl = 2;
    } else if (len <= 0xffff) {
        h[1] = 126;
        h[2] = (uint8_t)(len >> 8);
        h[3] = (uint8_t)len;
        hl = 4;
    } else {
        h[1] = 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
        hl = 10;
    }
    http_write(t->ex, h, hl);
    if (len)
        http_write(t->ex, data, len);
}

static void detached_end(struct http_client *c, void *arg)
{
    (void)c;
    (void)arg;
}
static void detached_error(struct http_client *c, int err, const char *msg, void *arg)
{
    (void)c;
    (void)err;
    (void)arg;
    LOG_WARN("terminal: envd did not take the kill of a closed terminal's shell", "error", msg);
}
static const struct http_client_handler detached_handler = {.on_end = detached_end,
                                                            .on_error = detached_error};

static const struct http_client_handler call_handler;

/* A unary Connect call to envd (JSON codec). Owned by nobody when arg is NULL. */
static struct http_client *envd_call(struct native_term *t, const char *method, json_t *body,
                                     bool mine)
{
    char *text = json_dumps(body, JSON_COMPACT), target[64];
    struct http_client *c = NULL;

    json_decref(body);
    if (!text)
        return NULL;
    snprintf(target, sizeof(target), "/process.Process/%s", method);
    const struct http_header h[] = {{"Content-Type", "application/json"},
                                    {"Connect-Protocol-Version", "1"},
                                    {"X-Access-Token", t->token}};
    const struct http_client_options o = {.addr = t->addr,
                                          .method = "POST",
                                          .target = target,
                                          .headers = h,
                                          .nheaders = (int)AB_ARRAY_LEN(h),
                                          .content_length = (int64_t)strlen(text),
                                          .timeout_ms = 10000};
    c = http_client_start(t->n->d.loop, &o, mine ? &call_handler : &detached_handler,
                          mine ? t : NULL);
    if (c)
        http_client_write(c, text, strlen(text));
    free(text);
    return c;
}

/* Ends the WebSocket (close frame code + reason) and kills the shell. */
static void term_close(struct native_term *t, uint16_t code, const char *reason)
{
    if (t->pid && !t->kill_sent) {
        t->kill_sent = true;
        envd_call(t, "SendSignal",
                  json_pack("{s:{s:I},s:s}", "process", "pid", (json_int_t)t->pid, "signal",
                            "SIGNAL_SIGKILL"),
                  false);
    }
    if (t->start) {
        http_client_close(t->start);
        t->start = NULL;
    }
    if (t->call) {
        http_client_close(t->call);
        t->call = NULL;
    }
    if (t->ex) {
        uint8_t p[2 + 123];
        size_t rl = reason ? AB_MIN(strlen(reason), sizeof(p) - 2) : 0;
        p[0] = (uint8_t)(code >> 8);
        p[1] = (uint8_t)code;
        if (rl)
            memcpy(p + 2, reason, rl);
        ws_send(t, 0x8, p, 2 + rl);
        struct http_exchange *ex = t->ex;
        t->ex = NULL;
        http_end(ex);
    }
    term_maybe_free(t);
}

/* Sends what waits for envd: a resize first, then up to a chunk of input. */
static void term_flush(struct native_term *t)
{
    if (t->call || !t->pid || !t->ex)
        return;
    if (t->resize) {
        t->resize = false;
        t->call =
            envd_call(t, "Update",
                      json_pack("{s:{s:I},s:{s:{s:i,s:i}}}", "process", "pid", (json_int_t)t->pid,
                                "pty", "size", "cols", t->cols, "rows", t->rows),
                      true);
        return;
    }
    if (t->in.len == 0)
        return;
    size_t n = AB_MIN(t->in.len, (size_t)TERM_INPUT_CHUNK);
    char *b64 = malloc(4 * ((n + 2) / 3) + 1);
    if (!b64) {
        term_close(t, 1011, "out of memory");
        return;
    }
    crypto_base64_encode(t->in.data, n, b64);
    buf_consume(&t->in, n);
    t->call = envd_call(
        t, "SendInput",
        json_pack("{s:{s:I},s:{s:s}}", "process", "pid", (json_int_t)t->pid, "input", "pty", b64),
        true);
    free(b64);
    if (t->paused_in && t->in.len < TERM_INPUT_MAX / 2 && t->ex) {
        t->paused_in = false;
        http_pause_body(t->ex, false);
    }
}

static void call_head(struct http_client *c, int status, const struct http_header *h, int n,
                      void *arg)
{
    struct native_term *t = arg;
    (void)c;
    (void)h;
    (void)n;
    if (status != 200)
        LOG_WARN("terminal: envd refused input or a resize", "sandbox", t->id);
}
static void call_data(struct http_client *c, const void *d, size_t n, void *arg)
{
    (void)c;
    (void)d;
    (void)n;
    (void)arg;
}
static void call_end(struct http_client *c, void *arg)
{
    struct native_term *t = arg;
    (void)c;
    t->call = NULL;
    t->busy++;
    term_flush(t);
    t->busy--;
    term_maybe_free(t);
}
static void call_error(struct http_client *c, int err, const char *msg, void *arg)
{
    struct native_term *t = arg;
    (void)c;
    (void)err;
    t->call = NULL;
    term_close(t, 1011, msg ? msg : "envd unreachable"); /* frees t */
}
static const struct http_client_handler call_handler = {
    .on_head = call_head, .on_data = call_data, .on_end = call_end, .on_error = call_error};

static void term_input(struct native_term *t, const void *d, size_t n)
{
    if (buf_append(&t->in, d, n) != 0) {
        term_close(t, 1008, "input faster than the shell reads it");
        return;
    }
    if (t->in.len >= TERM_INPUT_MAX / 2 && !t->paused_in && t->ex) {
        t->paused_in = true;
        http_pause_body(t->ex, true);
    }
    term_flush(t);
}

/* A text message: {"resize":{"cols","rows"}} or {"input":"…"}. */
static void term_control(struct native_term *t, const char *s, size_t n)
{
    json_t *j = json_loadb(s, n, 0, NULL), *rs = json_object_get(j, "resize");
    const char *in = json_string_value(json_object_get(j, "input"));

    if (json_is_object(rs)) {
        json_int_t c = json_integer_value(json_object_get(rs, "cols"));
        json_int_t r = json_integer_value(json_object_get(rs, "rows"));
        if (c < 1 || c > 1000 || r < 1 || r > 1000) {
            json_decref(j);
            term_close(t, 1007, "resize needs cols and rows from 1 to 1000");
            return;
        }
        t->cols = (int)c;
        t->rows = (int)r;
        t->resize = true;
        term_flush(t);
    } else if (in) {
        term_input(t, in, strlen(in));
    } else {
        json_decref(j);
        term_close(t, 1007, "a text frame must be {\"resize\":{...}} or {\"input\":\"...\"}");
        return;
    }
    json_decref(j);
}

/* Parses complete client frames (RFC 6455 §5: masked, ≤ TERM_FRAME_MAX). */
static void ws_parse(struct native_term *t)
{
    while (t->ex && t->ws.len >= 2) {
        const uint8_t *p = (const uint8_t *)t->ws.data;
        uint8_t fin = p[0] & 0x80, op = p[0] & 0x0f;
        uint64_t len = p[1] & 0x7f;
        size_t hl = 2;

        if (!(p[1] & 0x80)) {
            term_close(t, 1002, "client frames must be masked");
            return;
        }
        if (len == 126) {
            if (t->ws.len < 4)
                return;
            len = (uint64_t)p[2] << 8 | p[3];
            hl = 4;
        } else if (len == 127) {
            if (t->ws.len < 10)
                return;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | p[2 + i];
            hl = 10;
        }
        if (len > TERM_FRAME_MAX) {
            term_close(t, 1009, "frame larger than 64 KiB");
            return;
        }
        if (t->ws.len < hl + 4 + len)
            return;
        uint8_t *d = (uint8_t *)t->ws.data + hl + 4;
        const uint8_t *mask = p + hl;
        for (uint64_t i = 0; i < len; i++)
            d[i] ^= mask[i % 4];
        if (op == 0x0)
            op = t->frag_op;
        else if (!fin)
            t->frag_op = op;
        if (fin && (p[0] & 0x0f) == 0x0)
            t->frag_op = 0;
        switch (op) {
        case 0x2:
            term_input(t, d, (size_t)len);
            break;
        case 0x1:
            if (buf_append(&t->ctrl, d, (size_t)len) != 0) {
                term_close(t, 1009, "text message larger than 4 KiB");
                return;
            }
            if (fin) {
                term_control(t, t->ctrl.data ? t->ctrl.data : "", t->ctrl.len);
                buf_reset(&t->ctrl);
            }
            break;
        case 0x8:
            term_close(t, 1000, "closed by the client");
            return;
        case 0x9:
            ws_send(t, 0xA, d, (size_t)len);
            break;
        case 0xA:
            break;
        default:
            term_close(t, 1002, "unknown opcode");
            return;
        }
        if (!t->ex)
            return;
        buf_consume(&t->ws, hl + 4 + (size_t)len);
    }
}

static void body_data(struct http_exchange *ex, const void *d, size_t n, void *arg)
{
    struct native_term *t = arg;
    (void)ex;
    if (!t->ex)
        return;
    t->busy++;
    if (buf_append(&t->ws, d, n) != 0)
        term_close(t, 1009, "frame larger than 64 KiB");
    else
        ws_parse(t);
    t->busy--;
    term_maybe_free(t);
}
static void body_end(struct http_exchange *ex, void *arg)
{
    (void)ex; /* the GET's (empty) body ended; the WebSocket goes on */
    (void)arg;
}
static void body_abort(struct http_exchange *ex, void *arg)
{
    struct native_term *t = arg;
    (void)ex;
    term_close(t, 1001, NULL); /* the client went away: the exchange finishes, the shell dies */
}
static void body_drain(struct http_exchange *ex, void *arg)
{
    struct native_term *t = arg;
    (void)ex;
    if (t->start)
        http_client_pause(t->start, false);
}
static const struct http_body_handler body_handler = {
    .on_data = body_data, .on_end = body_end, .on_abort = body_abort, .on_drain = body_drain};

/* One event of the Start stream. */
static void start_event(struct native_term *t, json_t *msg)
{
    json_t *ev = json_object_get(msg, "event"), *x;
    const char *s;

    if ((x = json_object_get(ev, "start"))) {
        t->pid = json_integer_value(json_object_get(x, "pid"));
        term_flush(t);
    } else if ((x = json_object_get(ev, "data")) &&
               (s = json_string_value(json_object_get(x, "pty")))) {
        size_t n = strlen(s), got = 0;
        uint8_t *d = malloc(n / 4 * 3 + 3);
        if (d && crypto_base64_decode(s, n, d, n / 4 * 3 + 3, &got) == 0 && got)
            ws_send(t, 0x2, d, got);
        free(d);
        if (t->ex && t->start && http_pending(t->ex) > TERM_OUT_HIGH)
            http_client_pause(t->start, true);
    } else if ((x = json_object_get(ev, "end"))) {
        char why[64];
        snprintf(why, sizeof(why), "exited %lld",
                 (long long)json_integer_value(json_object_get(x, "exitCode")));
        t->kill_sent = true; /* nothing left to kill */
        term_close(t, 1000, why);
    }
}

static void start_head(struct http_client *c, int status, const struct http_header *h, int n,
                       void *arg)
{
    struct native_term *t = arg;
    (void)c;
    (void)h;
    (void)n;
    t->start_status = status;
}

static void start_parse(struct native_term *t);

static void start_data(struct http_client *c, const void *d, size_t n, void *arg)
{
    struct native_term *t = arg;
    (void)c;
    if (t->start_status != 200)
        return; /* an error body, not envelopes: start_end closes */
    t->busy++;
    if (buf_append(&t->env, d, n) != 0)
        term_close(t, 1011, "envd sent a message larger than 1 MiB");
    else
        start_parse(t);
    t->busy--;
    term_maybe_free(t);
}

/* Every complete Connect envelope: flags(1) length(4, BE) message. */
static void start_parse(struct native_term *t)
{
    while (t->start && t->env.len >= 5) {
        const unsigned char *p = (const unsigned char *)t->env.data;
        uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
        if (t->env.len - 5 < len)
            return;
        json_t *msg = json_loadb((const char *)p + 5, len, 0, NULL);
        bool end = p[0] & 0x02;
        buf_consume(&t->env, 5 + (size_t)len);
        if (end) {
            const char *m =
                json_string_value(json_object_get(json_object_get(msg, "error"), "message"));
            char why[124];
            snprintf(why, sizeof(why), "%s", m ? m : "the shell's stream ended");
            json_decref(msg);
            term_close(t, m ? 1011 : 1000, why);
            return;
        }
        if (msg)
            start_event(t, msg);
        json_decref(msg);
    }
}

static void start_end(struct http_client *c, void *arg)
{
    struct native_term *t = arg;
    (void)c;
    t->start = NULL;
    term_close(t, t->start_status == 200 ? 1000 : 1011,
               t->start_status == 200 ? "the shell's stream ended"
                                      : "the sandbox's envd refused the shell");
}

static void start_error(struct http_client *c, int err, const char *msg, void *arg)
{
    struct native_term *t = arg;
    (void)c;
    (void)err;
    t->start = NULL;
    term_close(t, 1011, msg ? msg : "cannot reach the sandbox's envd");
}

static const struct http_client_handler start_handler = {
    .on_head = start_head, .on_data = start_data, .on_end = start_end, .on_error = start_error};

static bool header_has(const struct http_request *r, const char *name, const char *token)
{
    const char *v = http_header_get(r, name);
    size_t tl = strlen(token);

    for (const char *p = v; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t l = strcspn(p, ",");
        while (l && p[l - 1] == ' ')
            l--;
        if (l == tl && strncasecmp(p, token, tl) == 0)
            return true;
        p += strcspn(p, ",");
    }
    return false;
}

static int query_int(const struct http_request *r, const char *k, int def)
{
    char b[16], *end;
    long v;

    if (http_query_get(r, k, b, sizeof(b)) != 0 || !b[0])
        return def;
    v = strtol(b, &end, 10);
    return *end || v < 1 || v > 1000 ? -1 : (int)v;
}

static void h_terminal(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    const struct http_request *r = http_req(ex);
    const char *key = http_header_get(r, "Sec-WebSocket-Key");
    const char *ver = http_header_get(r, "Sec-WebSocket-Version");
    const char *id = http_param(ex, "id");
    char token[160], acc_in[128], accept[64];
    unsigned char sha[SHA_DIGEST_LENGTH];
    struct rt_sandbox s = {0};
    struct native_term *t;
    int cols = query_int(r, "cols", 80), rows = query_int(r, "rows", 24), rc;

    if (!header_has(r, "Upgrade", "websocket") || !header_has(r, "Connection", "upgrade") || !key ||
        strlen(key) != 24 || !ver || strcmp(ver, "13") != 0) {
        native_error(ex, 400, NULL, NULL,
                     "GET /v1/sandboxes/{id}/terminal is a WebSocket (version 13): send Upgrade: "
                     "websocket, Connection: Upgrade and Sec-WebSocket-Key");
        return;
    }
    if (http_header_get(r, "Content-Length") || http_header_get(r, "Transfer-Encoding")) {
        native_error(ex, 400, NULL, NULL, "a WebSocket handshake has no body");
        return;
    }
    if (cols < 0 || rows < 0) {
        native_error(ex, 400, NULL, NULL, "cols and rows must be integers from 1 to 1000");
        return;
    }
    if (http_query_get(r, "token", token, sizeof(token)) != 0 || !token[0]) {
        native_error(ex, 401, NULL, NULL,
                     "missing exec token: POST /v1/sandboxes/%.80s/exec-token and pass it as "
                     "?token=",
                     id);
        return;
    }
    rc = native_exec_token_take(n, id, token);
    explicit_bzero(token, sizeof(token));
    if (rc != 0) {
        native_error(ex, 401, NULL, NULL,
                     rc == AB_ETIMEOUT
                         ? "exec token expired or issued for another sandbox: tokens live 30 s"
                         : "exec token is not valid (unknown or already used: each opens one "
                           "terminal)");
        return;
    }
    if (!n->d.rt || rt_get(n->d.rt, id, &s) != 0) {
        native_error(ex, 404, NULL, NULL, "sandbox '%.80s' not found on cluster '%s'", id,
                     n->d.cluster);
        return;
    }
    json_decref(s.metadata);
    if (s.state != RT_RUNNING || !s.envd_addr[0]) {
        explicit_bzero(s.envd_token, sizeof(s.envd_token));
        native_error(ex, 409, "NOT_RUNNING", NULL, "sandbox '%s' is not Running", s.id);
        return;
    }
    snprintf(acc_in, sizeof(acc_in), "%s%s", key, WS_GUID);
    SHA1((const unsigned char *)acc_in, strlen(acc_in), sha);
    crypto_base64_encode(sha, sizeof(sha), accept);
    if (!(t = calloc(1, sizeof(*t)))) {
        explicit_bzero(s.envd_token, sizeof(s.envd_token));
        native_error(ex, 503, NULL, NULL, "out of memory");
        return;
    }
    t->n = n;
    ab_strlcpy(t->id, s.id, sizeof(t->id));
    ab_strlcpy(t->addr, s.envd_addr, sizeof(t->addr));
    memcpy(t->token, s.envd_token, sizeof(t->token));
    explicit_bzero(s.envd_token, sizeof(s.envd_token));
    buf_init(&t->env, TERM_STREAM_MAX, "envd stream");
    buf_init(&t->ws, TERM_WS_IN_MAX, "websocket input");
    buf_init(&t->in, TERM_INPUT_MAX, "terminal input");
    buf_init(&t->ctrl, TERM_CTRL_MAX, "terminal control message");
    const struct http_header h[] = {{"Upgrade", "websocket"}, {"Sec-WebSocket-Accept", accept}};
    if (http_upgrade(ex, h, (int)AB_ARRAY_LEN(h)) != 0) {
        native_error(ex, 501, NULL, NULL,
                     "the terminal WebSocket is served on the agent's own native listener, not "
                     "through a relay: connect to cluster '%s' directly",
                     n->d.cluster);
        term_maybe_free(t);
        return;
    }
    t->ex = ex;
    http_set_body_handler(ex, &body_handler, t);
    t->next = n->terms;
    if (n->terms)
        n->terms->prev = t;
    n->terms = t;

    json_t *req =
        json_pack("{s:{s:s,s:[s,s],s:{s:s,s:s,s:s}},s:{s:{s:i,s:i}}}", "process", "cmd",
                  "/bin/bash", "args", "-i", "-l", "envs", "TERM", "xterm-256color", "LANG",
                  "C.UTF-8", "LC_ALL", "C.UTF-8", "pty", "size", "cols", cols, "rows", rows);
    char *msg = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!msg) {
        term_close(t, 1011, "out of memory");
        return;
    }
    size_t mlen = strlen(msg);
    unsigned char head[5] = {0, (unsigned char)(mlen >> 24), (unsigned char)(mlen >> 16),
                             (unsigned char)(mlen >> 8), (unsigned char)mlen};
    const struct http_header eh[] = {{"Content-Type", "application/connect+json"},
                                     {"Connect-Protocol-Version", "1"},
                                     {"X-Access-Token", t->token}};
    const struct http_client_options o = {.addr = t->addr,
                                          .method = "POST",
                                          .target = "/process.Process/Start",
                                          .headers = eh,
                                          .nheaders = (int)AB_ARRAY_LEN(eh),
                                          .content_length = (int64_t)(5 + mlen),
                                          .timeout_ms = 10000};
    if (!(t->start = http_client_start(n->d.loop, &o, &start_handler, t))) {
        free(msg);
        term_close(t, 1011, "out of memory");
        return;
    }
    http_client_write(t->start, head, sizeof(head));
    http_client_write(t->start, msg, mlen);
    http_client_end(t->start);
    free(msg);
}

void native_terminal_close_all(struct native *n)
{
    while (n->terms) {
        struct native_term *t = n->terms;
        if (t->start)
            http_client_close(t->start);
        if (t->call)
            http_client_close(t->call);
        t->start = t->call = NULL;
        /* no kill: no new request can start while the agent stops (its
         * listeners are gone). The shell stays in the sandbox, which outlives
         * the agent by design, and ends with it. */
        if (t->ex) {
            http_set_body_handler(t->ex, NULL, NULL); /* its close must not reach t */
            http_abort(t->ex);
            t->ex = NULL;
        }
        term_unlink_free(t);
    }
}

int native_terminal_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"POST", "/v1/sandboxes/{id}/exec-token", h_token, n, 0},
        {"GET", "/v1/sandboxes/{id}/terminal", h_terminal, n, HTTP_ROUTE_STREAM},
    };
    return native_add(n, routes, AB_ARRAY_LEN(routes), err, errlen);
}
