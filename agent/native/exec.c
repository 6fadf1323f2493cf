/* POST /v1/sandboxes/{id}/exec (reference §4.2, deprecated in the seed but
 * still served): {command, timeoutSeconds (1..300, default 30)} →
 * {exitCode, stdout, stderr}. The command runs as `/bin/sh -c <command>`
 * through the sandbox's own envd (process.Process/Start, Connect streaming
 * with the JSON codec, the sandbox's access token), so it is exactly what
 * the SDK's commands.run would do; the agent only collects the stream.
 * Output is bounded (EXEC_OUT_MAX per stream; beyond it is cut and said so).
 * (exec-token and the terminal are terminal.c.) Loop thread only. */
#include "agent/native/native.h"
#include "agent/native/sandboxes.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/buf.h"
#include "agentbox/common.h"
#include "agentbox/http.h"

#include <openssl/evp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXEC_TIMEOUT_DEFAULT_S 30
#define EXEC_TIMEOUT_MAX_S 300
#define EXEC_COMMAND_MAX 65536
#define EXEC_OUT_MAX (1 << 20)    /* bytes kept per stream */
#define EXEC_STREAM_MAX (8 << 20) /* envelope bytes buffered at once */

struct exec {
    struct http_exchange *ex;
    struct http_client *hc;
    struct buf in;  /* envelopes not parsed yet */
    struct buf out; /* stdout */
    struct buf err; /* stderr */
    bool cut;       /* some output did not fit */
    bool ended;     /* an end event came */
    int64_t exit_code;
    int status;        /* envd's HTTP status */
    char failure[256]; /* a Connect error the stream ended with */
    bool answered;
};

static void exec_free(struct exec *x)
{
    buf_free(&x->in);
    buf_free(&x->out);
    buf_free(&x->err);
    free(x);
}

/* Appends base64 text, decoded, to b (bounded: the rest is cut). */
static void append_b64(struct exec *x, struct buf *b, const char *s)
{
    size_t n = strlen(s), pad = 0;
    unsigned char *d;
    int got;

    if (n == 0 || n % 4 != 0 || n > EXEC_STREAM_MAX || !(d = malloc(n / 4 * 3 + 1)))
        return;
    got = EVP_DecodeBlock(d, (const unsigned char *)s, (int)n);
    if (got >= 0) {
        pad = (s[n - 1] == '=') + (s[n - 2] == '='); /* DecodeBlock counts padding as data */
        size_t len = (size_t)got - pad;
        size_t room = b->len < EXEC_OUT_MAX ? EXEC_OUT_MAX - b->len : 0;
        if (len > room) {
            x->cut = true;
            len = room;
        }
        buf_append(b, d, len);
    }
    free(d);
}

static void exec_event(struct exec *x, json_t *msg)
{
    json_t *ev = json_object_get(msg, "event"), *data, *end;
    const char *s;

    if ((data = json_object_get(ev, "data"))) {
        if ((s = json_string_value(json_object_get(data, "stdout"))))
            append_b64(x, &x->out, s);
        if ((s = json_string_value(json_object_get(data, "stderr"))))
            append_b64(x, &x->err, s);
    } else if ((end = json_object_get(ev, "end"))) {
        x->ended = true;
        x->exit_code = json_integer_value(json_object_get(end, "exitCode"));
    }
}

/* Parses every complete Connect envelope in x->in: flags(1) length(4, BE) message. */
static void exec_parse(struct exec *x)
{
    while (x->in.len >= 5) {
        const unsigned char *p = (const unsigned char *)x->in.data;
        uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
        json_t *msg;

        if (x->in.len - 5 < len)
            return;
        msg = json_loadb((const char *)p + 5, len, 0, NULL);
        if (p[0] & 0x02) { /* end of stream: {} or {"error":{code,message}} */
            const char *m =
                json_string_value(json_object_get(json_object_get(msg, "error"), "message"));
            if (m)
                snprintf(x->failure, sizeof(x->failure), "%s", m);
        } else if (msg) {
            exec_event(x, msg);
        }
        json_decref(msg);
        buf_consume(&x->in, 5 + (size_t)len);
    }
}

static void exec_answer(struct exec *x, int status, const char *fmt, const char *arg)
{
    if (x->answered)
        return;
    x->answered = true;
    if (status != 200) {
        native_error(x->ex, status, NULL, NULL, fmt, arg);
        return;
    }
    json_t *body = json_pack("{s:I,s:s%,s:s%}", "exitCode", (json_int_t)x->exit_code, "stdout",
                             x->out.data ? x->out.data : "", x->out.len, "stderr",
                             x->err.data ? x->err.data : "", x->err.len);
    if (!body) /* output that is not UTF-8: say so rather than send it mangled */
        body = json_pack("{s:I,s:s,s:s}", "exitCode", (json_int_t)x->exit_code, "stdout",
                         "(output is not UTF-8 text)", "stderr", "");
    if (x->cut)
        json_object_set_new(body, "truncated", json_true());
    http_respond_json(x->ex, 200, body);
}

static void on_head(struct http_client *c, int status, const struct http_header *h, int n,
                    void *arg)
{
    struct exec *x = arg;
    (void)c;
    (void)h;
    (void)n;
    x->status = status;
}

static void on_data(struct http_client *c, const void *d, size_t n, void *arg)
{
    struct exec *x = arg;
    (void)c;
    if (buf_append(&x->in, d, n) != 0) {
        x->cut = true; /* a message beyond EXEC_STREAM_MAX: drop what is buffered */
        buf_reset(&x->in);
        return;
    }
    exec_parse(x);
}

static void on_end(struct http_client *c, void *arg)
{
    struct exec *x = arg;
    (void)c;
    exec_parse(x);
    if (x->status != 200)
        exec_answer(x, 502, "the sandbox's envd refused the command (HTTP %s)",
                    x->status == 401 ? "401: token" : "error");
    else if (!x->ended)
        exec_answer(x, 504, "the command did not finish: %s",
                    x->failure[0] ? x->failure : "the stream ended early");
    else
        exec_answer(x, 200, NULL, NULL);
    exec_free(x);
}

static void on_error(struct http_client *c, int err, const char *msg, void *arg)
{
    struct exec *x = arg;
    (void)c;
    (void)err;
    exec_answer(x, 502, "cannot reach the sandbox's envd: %s", msg ? msg : "error");
    exec_free(x);
}

static const struct http_client_handler exec_handler = {
    .on_head = on_head, .on_data = on_data, .on_end = on_end, .on_error = on_error};

bool native_own_sandbox(struct http_exchange *ex, struct native *n, const struct agent_principal *p,
                        struct rt_sandbox *s)
{
    memset(s, 0, sizeof(*s));
    if (n->d.rt && rt_get(n->d.rt, http_param(ex, "id"), s) == 0) {
        json_decref(s->metadata);
        s->metadata = NULL;
        if (native_may_touch(p, s->ns, s->team, s->owner))
            return true;
        explicit_bzero(s->envd_token, sizeof(s->envd_token));
    }
    native_error(ex, 404, NULL, NULL, "sandbox '%.80s' not found on cluster '%s'",
                 http_param(ex, "id"), n->d.cluster);
    return false;
}

static void exec_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    const struct http_request *r = http_req(ex);
    json_t *body = json_loadb(r->body, r->body_len, 0, NULL), *t, *req = NULL;
    const char *cmd = json_string_value(json_object_get(body, "command"));
    int64_t timeout = EXEC_TIMEOUT_DEFAULT_S;
    struct rt_sandbox s = {0};
    struct exec *x = NULL;
    char *msg = NULL, tmo[32];
    size_t mlen;

    if (!native_own_sandbox(ex, n, p, &s))
        goto out;
    if (!cmd || !cmd[0] || strlen(cmd) > EXEC_COMMAND_MAX) {
        native_error(ex, 400, NULL, NULL,
                     "command is required (a shell command of at most %d bytes)", EXEC_COMMAND_MAX);
        goto out;
    }
    if ((t = json_object_get(body, "timeoutSeconds"))) {
        if (!json_is_integer(t) || json_integer_value(t) < 1 ||
            json_integer_value(t) > EXEC_TIMEOUT_MAX_S) {
            native_error(ex, 400, NULL, NULL, "timeoutSeconds must be an integer from 1 to %d",
                         EXEC_TIMEOUT_MAX_S);
            goto out;
        }
        timeout = json_integer_value(t);
    }
    if (s.state != RT_RUNNING || !s.envd_addr[0]) {
        native_error(ex, 409, "NOT_RUNNING", NULL, "sandbox '%s' is not Running", s.id);
        goto out;
    }
    req = json_pack("{s:{s:s,s:[s,s]}}", "process", "cmd", "/bin/sh", "args", "-c", cmd);
    if (!req || !(msg = json_dumps(req, JSON_COMPACT)) || !(x = calloc(1, sizeof(*x)))) {
        native_error(ex, 503, NULL, NULL, "out of memory");
        goto out;
    }
    x->ex = ex;
    buf_init(&x->in, EXEC_STREAM_MAX, "envd stream");
    buf_init(&x->out, EXEC_OUT_MAX, "stdout");
    buf_init(&x->err, EXEC_OUT_MAX, "stderr");
    mlen = strlen(msg);
    unsigned char head[5] = {0, (unsigned char)(mlen >> 24), (unsigned char)(mlen >> 16),
                             (unsigned char)(mlen >> 8), (unsigned char)mlen};
    snprintf(tmo, sizeof(tmo), "%lld", (long long)timeout * 1000);
    const struct http_header h[] = {{"Content-Type", "application/connect+json"},
                                    {"Connect-Protocol-Version", "1"},
                                    {"Connect-Timeout-Ms", tmo},
                                    {"X-Access-Token", s.envd_token}};
    const struct http_client_options o = {.addr = s.envd_addr,
                                          .method = "POST",
                                          .target = "/process.Process/Start",
                                          .headers = h,
                                          .nheaders = (int)AB_ARRAY_LEN(h),
                                          .content_length = (int64_t)(5 + mlen),
                                          .timeout_ms = (int)(timeout * 1000 + 5000)};
    if (!(x->hc = http_client_start(n->d.loop, &o, &exec_handler, x))) {
        native_error(ex, 503, NULL, NULL, "out of memory");
        exec_free(x);
        goto out;
    }
    http_client_write(x->hc, head, sizeof(head));
    http_client_write(x->hc, msg, mlen);
    http_client_end(x->hc);
out:
    explicit_bzero(s.envd_token, sizeof(s.envd_token));
    free(msg);
    json_decref(req);
    json_decref(body);
}

NATIVE_GATED(exec_gated, "sandbox.exec", exec_authed)

static void h_exec(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, exec_gated, n);
}

int native_exec_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"POST", "/v1/sandboxes/{id}/exec", h_exec, n, 0},
    };
    return native_add(n, routes, AB_ARRAY_LEN(routes), err, errlen);
}
