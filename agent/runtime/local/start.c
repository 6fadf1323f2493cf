/* Start commands and readiness checks: what a sandbox of a pool whose
 * runtimes have `config.startCommand` or a `readinessProbe` does between
 * "envd listens" and "idle".
 *
 * The command runs when the idle sandbox is made, not at claim: E2B
 * templates run their start command at build time and snapshot the running
 * result, so a warm sandbox is already ready and a create does not pay for
 * a kernel or server start. The price: the command sees the sandbox's own
 * environment, not the claim's env vars (those reach every process started
 * after the claim). Steps, each bounded by the pool's startup timeout
 * (s->deadline_ms):
 *
 *   1. POST /init with the sandbox's own token, user `user`, workdir
 *      /home/user (envd refuses processes before /init; the claim's /init
 *      later replaces token and env vars, authenticated with this token);
 *   2. process.Process/Start of `/bin/bash -c <startCommand>` as `user`,
 *      kept streaming for the sandbox's life: its stdout/stderr go to a
 *      bounded ring whose tail every error message quotes;
 *   3. every readinessProbe of a runtime other than envd (whose socket the
 *      runtime already waited for), in order: tcpSocket connects, httpGet
 *      answers 2xx, on the sandbox's loopback, every periodSeconds.
 *
 * A start command that exits non-zero before the checks pass fails at once;
 * the deadline fails with the check that did not pass and why. A failure
 * fails the pool's oldest waiting claim with that message (a create error
 * that names the check) and destroys the sandbox.
 *
 * Loop thread only. State changes that close an http client run from the
 * lstart timer, never inside that client's own callback. */
#include "agent/runtime/local/lrt.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agent/runtime/local/manifest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define START_RING 8192            /* bytes of the command's output kept */
#define START_TAIL_MAX 360         /* bytes of it an error message quotes */
#define START_TAIL_LINES 8         /* ... and at most this many lines */
#define START_ENVELOPE_MAX 1048576 /* envd's data events are far smaller */
#define PROBE_PERIOD_MS 100        /* periodSeconds unset: poll fast, creates wait on it */
#define PROBE_TIMEOUT_MS 1000      /* timeoutSeconds unset (Kubernetes' default) */
#define RPC_TIMEOUT_MS 10000

enum step { ST_INIT = 1, ST_START, ST_PROBE, ST_READY, ST_FAILED };

struct lstart {
    struct lsb *s;
    enum step step;
    struct http_client *init_hc, *cmd_hc, *probe_hc;
    int init_status, cmd_status, probe_status;
    uint8_t *ebuf; /* a partial Connect envelope of the Start stream */
    size_t elen, ecap;
    char ring[START_RING];
    size_t rpos, rlen; /* next write, bytes held */
    bool started, exited;
    int exit_code;
    char cmd_err[200]; /* envd's refusal of Start */
    int probe_i;
    char last[200]; /* why probe_i has not passed yet */
    struct loop_timer timer;
    bool timer_on;
    char fail[LRT_START_MSG_MAX];
};

static void step_timer(struct loop_timer *t);

static void later(struct lstart *st, int64_t ms)
{
    if (st->timer_on)
        loop_timer_cancel(&st->timer);
    st->timer_on = true;
    loop_timer_start(st->s->rt->loop, &st->timer, AB_MAX(ms, 0), step_timer, st);
}

static void ring_put(struct lstart *st, const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        st->ring[st->rpos] = (char)d[i];
        st->rpos = (st->rpos + 1) % START_RING;
    }
    st->rlen = AB_MIN(st->rlen + n, (size_t)START_RING);
}

/* The last lines of the command's output into out, control bytes and
 * non-ASCII as '?': the text goes into JSON error bodies, which need valid
 * UTF-8, and the ring's first bytes may be half a character. */
static void ring_tail(const struct lstart *st, char *out, size_t outlen)
{
    char tmp[START_TAIL_MAX + 1];
    size_t n = AB_MIN(st->rlen, (size_t)START_TAIL_MAX), start, i, k = 0;
    int lines = 0;

    start = (st->rpos + START_RING - n) % START_RING;
    for (i = 0; i < n; i++)
        tmp[i] = st->ring[(start + i) % START_RING];
    while (n > 0 && (tmp[n - 1] == '\n' || tmp[n - 1] == '\r'))
        n--;
    /* keep the last START_TAIL_LINES lines */
    for (i = n; i > 0; i--) {
        if (tmp[i - 1] == '\n' && ++lines >= START_TAIL_LINES) {
            k = i;
            break;
        }
    }
    for (i = k; i < n; i++) {
        unsigned char c = (unsigned char)tmp[i];
        tmp[i] = c == '\n' ? '\n' : (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    tmp[n] = '\0';
    snprintf(out, outlen, "%s", tmp + k);
}

static void probe_name(const struct lpool *p, int i, char *out, size_t outlen)
{
    const struct mf_probe *pr = &p->probes[i].p;

    if (pr->kind == MF_PROBE_HTTP)
        snprintf(out, outlen, "readiness check httpGet http://127.0.0.1:%d%.80s of runtime '%s'",
                 (int)pr->port, pr->path, p->probes[i].rt);
    else
        snprintf(out, outlen, "readiness check tcpSocket 127.0.0.1:%d of runtime '%s'",
                 (int)pr->port, p->probes[i].rt);
}

/* "<what>; start command of runtime 'x' <state>; its output ends: <tail>" */
static void describe(const struct lstart *st, const char *what, char *out, size_t outlen)
{
    const struct lpool *p = st->s->pool;
    char tail[START_TAIL_MAX + 1], state[96];
    int n;

    n = snprintf(out, outlen, "%s", what);
    if (!p->start_cmd[0] || n < 0 || (size_t)n >= outlen)
        return;
    if (st->exited)
        snprintf(state, sizeof(state), "exited with code %d", st->exit_code);
    else if (st->started)
        snprintf(state, sizeof(state), "is running");
    else
        snprintf(state, sizeof(state), "did not start");
    ring_tail(st, tail, sizeof(tail));
    snprintf(out + n, outlen - (size_t)n, "; the start command of runtime '%s' %s; %s%s",
             p->start_rt, state, tail[0] ? "its output ends:\n" : "it printed nothing", tail);
}

static void fail_now(struct lstart *st, const char *what)
{
    if (st->step == ST_FAILED || st->step == ST_READY)
        return;
    describe(st, what, st->fail, sizeof(st->fail));
    st->step = ST_FAILED;
    later(st, 0);
}

/* ---- step 1: POST /init ------------------------------------------------------ */

static void init_head(struct http_client *c, int status, const struct http_header *h, int n,
                      void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct lstart *)arg)->init_status = status;
}

static void ignore_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    (void)c;
    (void)d;
    (void)len;
    (void)arg;
}

/* Probes start after the first one's initialDelaySeconds. */
static void enter_probe(struct lstart *st)
{
    const struct lpool *p = st->s->pool;

    st->step = ST_PROBE;
    later(st, p->nprobes ? (int64_t)p->probes[0].p.initial_delay_s * 1000 : 0);
}

static void init_end(struct http_client *c, void *arg)
{
    struct lstart *st = arg;
    char msg[128];

    (void)c;
    st->init_hc = NULL;
    if (st->init_status < 200 || st->init_status >= 300) {
        snprintf(msg, sizeof(msg),
                 "sandbox envd answered %d to POST /init before the start command",
                 st->init_status);
        fail_now(st, msg);
        return;
    }
    if (st->s->pool->start_cmd[0]) {
        st->step = ST_START;
        later(st, 0);
    } else {
        enter_probe(st);
    }
}

static void init_error(struct http_client *c, int err, const char *m, void *arg)
{
    struct lstart *st = arg;
    char msg[256];

    (void)c;
    (void)err;
    st->init_hc = NULL;
    snprintf(msg, sizeof(msg), "sandbox envd did not answer POST /init: %.160s", m ? m : "error");
    fail_now(st, msg);
}

static const struct http_client_handler init_handler = {
    .on_head = init_head,
    .on_data = ignore_data,
    .on_end = init_end,
    .on_error = init_error,
};

static struct http_client *post(struct lstart *st, const char *target, const char *ctype,
                                const void *body, size_t len, const struct http_client_handler *h)
{
    struct lsb *s = st->s;
    /* Basic "user:" names the user the command runs as */
    struct http_header hs[] = {{"Content-Type", ctype},
                               {"X-Access-Token", s->x.token},
                               {"Authorization", "Basic dXNlcjo="}};
    struct http_client_options o = {0};
    struct http_client *c;
    char addr[RT_ADDR_MAX];

    snprintf(addr, sizeof(addr), "unix:%s", s->x.socket);
    o.addr = addr;
    o.method = "POST";
    o.target = target;
    o.headers = hs;
    o.nheaders = 3;
    o.content_length = (int64_t)len;
    o.timeout_ms = RPC_TIMEOUT_MS;
    c = http_client_start(s->rt->loop, &o, h, st);
    if (c) {
        http_client_write(c, body, len);
        http_client_end(c);
    }
    return c;
}

static void post_init(struct lstart *st)
{
    json_t *b = json_pack("{s:s, s:s, s:s, s:{}}", "accessToken", st->s->x.token, "defaultUser",
                          "user", "defaultWorkdir", "/home/user", "envVars");
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;

    json_decref(b);
    if (body)
        st->init_hc = post(st, "/init", "application/json", body, strlen(body), &init_handler);
    if (body)
        explicit_bzero(body, strlen(body));
    free(body);
    if (!st->init_hc)
        fail_now(st, "cannot start the request to the sandbox's envd (out of memory)");
}

/* ---- step 2: the start command ---------------------------------------------------- */

static void on_event(struct lstart *st, json_t *ev)
{
    json_t *e = json_object_get(ev, "event"), *x;
    const char *k;
    json_t *v;

    if ((x = json_object_get(e, "start")) != NULL) {
        st->started = true;
        if (st->step == ST_START)
            enter_probe(st);
    } else if ((x = json_object_get(e, "data")) != NULL) {
        json_object_foreach(x, k, v)
        {
            const char *b64 = json_string_value(v);
            size_t blen = b64 ? strlen(b64) : 0, w = 0;
            uint8_t *raw;

            if (!blen || !(raw = malloc(blen / 4 * 3 + 3)))
                continue;
            if (crypto_base64_decode(b64, blen, raw, blen / 4 * 3 + 3, &w) == 0)
                ring_put(st, raw, w);
            free(raw);
        }
    } else if ((x = json_object_get(e, "end")) != NULL) {
        char msg[320];

        st->exited = true;
        st->exit_code = (int)json_integer_value(json_object_get(x, "exitCode"));
        if (st->step == ST_READY) {
            char tail[START_TAIL_MAX + 1];
            ring_tail(st, tail, sizeof(tail));
            snprintf(msg, sizeof(msg), "%d", st->exit_code);
            LOG_WARN("a sandbox's start command ended", "pool", st->s->pool->name, "dir",
                     st->s->x.dir, "exit_code", msg, "output", tail);
        } else if (st->exit_code != 0) {
            /* exit 0 may be a command that started a daemon: keep checking */
            char what[256];
            if (st->probe_i < st->s->pool->nprobes) {
                probe_name(st->s->pool, st->probe_i, what, sizeof(what));
                snprintf(msg, sizeof(msg), "the start command exited before the %s passed", what);
            } else {
                snprintf(msg, sizeof(msg), "the start command exited before the sandbox was ready");
            }
            fail_now(st, msg);
        }
    }
}

static void cmd_head(struct http_client *c, int status, const struct http_header *h, int n,
                     void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct lstart *)arg)->cmd_status = status;
}

static void cmd_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    struct lstart *st = arg;
    size_t off = 0;

    (void)c;
    if (st->cmd_status != 200) { /* a unary-style error body: keep its text */
        size_t have = strlen(st->cmd_err), n = AB_MIN(len, sizeof(st->cmd_err) - 1 - have);
        memcpy(st->cmd_err + have, d, n);
        st->cmd_err[have + n] = '\0';
        return;
    }
    if (st->elen + len > st->ecap) {
        size_t cap = AB_MAX(st->ecap * 2, st->elen + len);
        uint8_t *nb;
        if (cap > START_ENVELOPE_MAX + 5 || !(nb = realloc(st->ebuf, cap))) {
            st->elen = 0; /* drop what cannot be framed; the process lives on */
            return;
        }
        st->ebuf = nb;
        st->ecap = cap;
    }
    memcpy(st->ebuf + st->elen, d, len);
    st->elen += len;
    while (st->elen - off >= 5) {
        const uint8_t *h = st->ebuf + off;
        uint32_t plen = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
        json_t *ev;

        if (plen > START_ENVELOPE_MAX) {
            off = st->elen;
            break;
        }
        if (st->elen - off < 5 + (size_t)plen)
            break;
        ev = json_loadb((const char *)h + 5, plen, 0, NULL);
        if (ev && (h[0] & 0x02)) { /* end of stream: {} or {"error":{...}} */
            const char *m =
                json_string_value(json_object_get(json_object_get(ev, "error"), "message"));
            if (m)
                snprintf(st->cmd_err, sizeof(st->cmd_err), "%s", m);
        } else if (ev) {
            on_event(st, ev);
        }
        json_decref(ev);
        off += 5 + (size_t)plen;
    }
    memmove(st->ebuf, st->ebuf + off, st->elen - off);
    st->elen -= off;
}

static void cmd_gone(struct lstart *st, const char *why)
{
    char msg[320];

    st->cmd_hc = NULL;
    if (st->step == ST_READY || st->step == ST_FAILED)
        return;
    if (!st->started) {
        snprintf(msg, sizeof(msg), "envd refused to run the start command (%d): %.200s",
                 st->cmd_status, st->cmd_err[0] ? st->cmd_err : why);
        fail_now(st, msg);
    }
    /* started and the stream ended: the end event (or its absence) decides */
}

static void cmd_end(struct http_client *c, void *arg)
{
    (void)c;
    cmd_gone(arg, "the stream ended");
}

static void cmd_error(struct http_client *c, int err, const char *m, void *arg)
{
    (void)c;
    (void)err;
    cmd_gone(arg, m ? m : "error");
}

static const struct http_client_handler cmd_handler = {
    .on_head = cmd_head,
    .on_data = cmd_data,
    .on_end = cmd_end,
    .on_error = cmd_error,
};

static void start_command(struct lstart *st)
{
    json_t *req =
        json_pack("{s:{s:s, s:[s,s], s:{}, s:s}, s:b}", "process", "cmd", "/bin/bash", "args", "-c",
                  st->s->pool->start_cmd, "envs", "cwd", "/home/user", "stdin", 0);
    char *js = req ? json_dumps(req, JSON_COMPACT) : NULL;
    size_t n = js ? strlen(js) : 0;
    uint8_t *env = js ? malloc(5 + n) : NULL;

    json_decref(req);
    if (env) {
        env[0] = 0;
        env[1] = (uint8_t)(n >> 24);
        env[2] = (uint8_t)(n >> 16);
        env[3] = (uint8_t)(n >> 8);
        env[4] = (uint8_t)n;
        memcpy(env + 5, js, n);
        st->cmd_hc = post(st, "/process.Process/Start", "application/connect+json", env, 5 + n,
                          &cmd_handler);
    }
    free(js);
    free(env);
    if (!st->cmd_hc)
        fail_now(st, "cannot start the request to the sandbox's envd (out of memory)");
}

/* ---- step 3: readiness ------------------------------------------------------------------ */

/* A TCP connect to 127.0.0.1:port inside the sandbox's network namespace.
 * Loopback answers at once (accepted or refused), so this does not block:
 * a connect still in progress after that counts as "not yet". */
static int tcp_check(struct lsb *s, int port, char *why, size_t whylen)
{
    char path[64];
    int self, target, fd = -1, rc = -1, soerr = 0;
    socklen_t sl = sizeof(soerr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct pollfd pfd;

    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)s->x.pid);
    self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    target = open(path, O_RDONLY | O_CLOEXEC);
    if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0) {
        snprintf(why, whylen, "cannot enter the sandbox's network namespace: %s", strerror(errno));
        goto out;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (setns(self, CLONE_NEWNET) != 0) {
        /* never stay in a sandbox's network */
        LOG_ERROR("cannot return to the agent's network namespace", "error", strerror(errno));
        abort();
    }
    if (fd < 0) {
        snprintf(why, whylen, "socket: %s", strerror(errno));
        goto out;
    }
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        rc = 0;
        goto out;
    }
    if (errno != EINPROGRESS) {
        snprintf(why, whylen, "connect: %s", strerror(errno));
        goto out;
    }
    pfd.fd = fd;
    pfd.events = POLLOUT;
    if (poll(&pfd, 1, 0) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
        soerr == 0)
        rc = 0;
    else
        snprintf(why, whylen, "connect: %s", soerr ? strerror(soerr) : "still in progress");
out:
    if (fd >= 0)
        close(fd);
    if (self >= 0)
        close(self);
    if (target >= 0)
        close(target);
    return rc;
}

static int64_t period_ms(const struct lstart *st)
{
    const struct mf_probe *p = &st->s->pool->probes[st->probe_i].p;

    return p->period_s > 0 ? (int64_t)p->period_s * 1000 : PROBE_PERIOD_MS;
}

static void probe_result(struct lstart *st, bool ok)
{
    if (st->step != ST_PROBE)
        return;
    if (ok) {
        st->probe_i++;
        st->last[0] = '\0';
        later(st, 0);
        return;
    }
    later(st, period_ms(st));
}

static void probe_head(struct http_client *c, int status, const struct http_header *h, int n,
                       void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct lstart *)arg)->probe_status = status;
}

static void probe_end(struct http_client *c, void *arg)
{
    struct lstart *st = arg;
    bool ok = st->probe_status >= 200 && st->probe_status < 300;

    (void)c;
    st->probe_hc = NULL;
    if (!ok)
        snprintf(st->last, sizeof(st->last), "it answered %d", st->probe_status);
    probe_result(st, ok);
}

static void probe_error(struct http_client *c, int err, const char *m, void *arg)
{
    struct lstart *st = arg;

    (void)c;
    (void)err;
    st->probe_hc = NULL;
    snprintf(st->last, sizeof(st->last), "%.190s", m ? m : "error");
    probe_result(st, false);
}

static const struct http_client_handler probe_handler = {
    .on_head = probe_head,
    .on_data = ignore_data,
    .on_end = probe_end,
    .on_error = probe_error,
};

static void probe_next(struct lstart *st)
{
    struct lsb *s = st->s;
    struct lpool *p = s->pool;
    const struct mf_probe *pr;
    char what[256], msg[LRT_START_MSG_MAX];

    if (st->probe_i >= p->nprobes) {
        st->step = ST_READY;
        later(st, 0);
        return;
    }
    pr = &p->probes[st->probe_i].p;
    if (ab_now_ms() > s->deadline_ms) {
        probe_name(p, st->probe_i, what, sizeof(what));
        snprintf(msg, sizeof(msg), "the %s did not pass within %lld ms (last try: %s)", what,
                 (long long)(p->startup_ms ? p->startup_ms : DEFAULT_STARTUP_MS),
                 st->last[0] ? st->last : "not tried yet");
        fail_now(st, msg);
        return;
    }
    if (pr->kind == MF_PROBE_TCP) {
        probe_result(st, tcp_check(s, pr->port, st->last, sizeof(st->last)) == 0);
        return;
    } else {
        struct http_client_options o = {0};
        char addr[RT_ADDR_MAX];

        snprintf(addr, sizeof(addr), "netns:/proc/%d/ns/net|127.0.0.1:%d", (int)s->x.pid,
                 (int)pr->port);
        o.addr = addr;
        o.method = "GET";
        o.target = pr->path;
        o.timeout_ms = pr->timeout_s > 0 ? pr->timeout_s * 1000 : PROBE_TIMEOUT_MS;
        st->probe_status = 0;
        st->probe_hc = http_client_start(s->rt->loop, &o, &probe_handler, st);
        if (!st->probe_hc) {
            snprintf(st->last, sizeof(st->last), "out of memory");
            probe_result(st, false);
            return;
        }
        http_client_end(st->probe_hc);
    }
}

/* The sandbox cannot become idle: the pool remembers why (a claim that
 * times out later quotes it), its oldest waiting claim gets the error now,
 * and the pool backs off before starting another. */
static void start_failed(struct lsb *s, const char *why)
{
    struct lpool *p = s->pool;
    struct lrt_waiter *w = p->w_head;
    char msg[LRT_START_MSG_MAX];

    ab_strlcpy(msg, why, sizeof(msg)); /* why lives in s->start, which lrt_destroy frees */
    LOG_WARN("a sandbox did not become ready", "pool", p->name, "dir", s->x.dir, "error", msg);
    ab_strlcpy(p->last_start_err, msg, sizeof(p->last_start_err));
    p->retry_after_ms = ab_now_ms() + RETRY_MS;
    lrt_destroy(s);
    if (w) {
        lrt_waiter_unlink(p, w);
        lrt_claim_fail(w, AB_EIO, msg);
    }
}

/* ---- steps ------------------------------------------------------------------------------ */

static void step_timer(struct loop_timer *t)
{
    struct lstart *st = t->arg;
    struct lsb *s = st->s;

    st->timer_on = false;
    switch (st->step) {
    case ST_INIT:
        post_init(st);
        return;
    case ST_START:
        if (!st->cmd_hc && !st->started) {
            start_command(st);
            /* envd answers Start with its "start" event at once; bound the wait */
            if (st->step == ST_START)
                later(st, s->deadline_ms - ab_now_ms());
            return;
        }
        fail_now(st, "envd did not start the start command before the startup timeout");
        return;
    case ST_PROBE:
        if (!st->probe_hc)
            probe_next(st);
        return;
    case ST_READY:
        lrt_sbx_idle(s);
        return;
    case ST_FAILED:
        start_failed(s, st->fail); /* destroys s, and st with it */
        return;
    }
}

bool lrt_start_needed(const struct lpool *p)
{
    return p->start_cmd[0] || p->nprobes > 0;
}

int lrt_start_begin(struct lsb *s)
{
    struct lstart *st = calloc(1, sizeof(*st));

    if (!st)
        return AB_ENOMEM;
    st->s = s;
    s->start = st;
    st->step = ST_INIT;
    later(st, 0);
    return 0;
}

void lrt_start_stop(struct lsb *s)
{
    struct lstart *st = s->start;

    if (!st)
        return;
    s->start = NULL;
    if (st->timer_on)
        loop_timer_cancel(&st->timer);
    if (st->init_hc)
        http_client_close(st->init_hc);
    if (st->cmd_hc)
        http_client_close(st->cmd_hc);
    if (st->probe_hc)
        http_client_close(st->probe_hc);
    free(st->ebuf);
    free(st);
}

int lrt_start_describe(const struct lpool *p, const struct lrt *rt, char *out, size_t outlen)
{
    const struct lsb *s;
    char what[256], now[LRT_START_MSG_MAX];

    for (s = rt->sbxs; s; s = s->next) {
        const struct lstart *st = s->start;
        if (s->pool != p || !st || st->step == ST_READY || st->step == ST_FAILED)
            continue;
        if (st->step == ST_PROBE && st->probe_i < p->nprobes) {
            probe_name(p, st->probe_i, what, sizeof(what));
            snprintf(now, sizeof(now), "the %s has not passed yet (last try: %s)", what,
                     st->last[0] ? st->last : "not tried yet");
        } else {
            snprintf(now, sizeof(now), "a sandbox is still running its start command");
        }
        describe(st, now, out, outlen);
        return 1;
    }
    if (p->last_start_err[0]) {
        snprintf(out, outlen, "%s", p->last_start_err);
        return 1;
    }
    return 0;
}

void lrt_pool_set_runtimes(struct lpool *p, const struct mf_runtime *rts, int n)
{
    p->start_cmd[0] = p->start_rt[0] = '\0';
    p->nprobes = 0;
    for (int i = 0; i < n && i < MF_RUNTIMES_MAX; i++) {
        if (rts[i].start_command[0] && !p->start_cmd[0]) {
            ab_strlcpy(p->start_cmd, rts[i].start_command, sizeof(p->start_cmd));
            ab_strlcpy(p->start_rt, rts[i].name, sizeof(p->start_rt));
        }
        /* envd's own probe is the socket the runtime already waits for */
        if (rts[i].probe.kind != MF_PROBE_NONE && strcmp(rts[i].name, "envd") != 0) {
            p->probes[p->nprobes].p = rts[i].probe;
            ab_strlcpy(p->probes[p->nprobes].rt, rts[i].name, sizeof(p->probes[0].rt));
            p->nprobes++;
        }
    }
}
