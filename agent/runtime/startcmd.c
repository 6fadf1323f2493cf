/* Start commands and readiness checks (startcmd.h): the pure parts, then
 * the runner both runtimes drive them with. */
#include "agent/runtime/startcmd.h"

#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void rt_start_spec_from(struct rt_start_spec *s, const struct mf_runtime *rts, int n)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < n && i < MF_RUNTIMES_MAX; i++) {
        if (rts[i].start_command[0] && !s->cmd[0]) {
            ab_strlcpy(s->cmd, rts[i].start_command, sizeof(s->cmd));
            ab_strlcpy(s->cmd_rt, rts[i].name, sizeof(s->cmd_rt));
        }
        /* envd's own probe is what the runtime already waits for */
        if (rts[i].probe.kind != MF_PROBE_NONE && strcmp(rts[i].name, "envd") != 0) {
            s->probes[s->nprobes].p = rts[i].probe;
            ab_strlcpy(s->probes[s->nprobes].rt, rts[i].name, sizeof(s->probes[0].rt));
            s->nprobes++;
        }
    }
}

bool rt_start_spec_needed(const struct rt_start_spec *s)
{
    return s->cmd[0] || s->nprobes > 0;
}

int rt_start_request(const char *cmd, uint8_t **out, size_t *len)
{
    json_t *req = json_pack("{s:{s:s, s:[s,s], s:{}, s:s}, s:b}", "process", "cmd", "/bin/bash",
                            "args", "-c", cmd, "envs", "cwd", "/home/user", "stdin", 0);
    char *js = req ? json_dumps(req, JSON_COMPACT) : NULL;
    size_t n = js ? strlen(js) : 0;
    uint8_t *env = js ? malloc(5 + n) : NULL;

    json_decref(req);
    *out = NULL;
    *len = 0;
    if (!env) {
        free(js);
        return AB_ENOMEM;
    }
    env[0] = 0;
    env[1] = (uint8_t)(n >> 24);
    env[2] = (uint8_t)(n >> 16);
    env[3] = (uint8_t)(n >> 8);
    env[4] = (uint8_t)n;
    memcpy(env + 5, js, n);
    free(js);
    *out = env;
    *len = 5 + n;
    return 0;
}

static void ring_put(struct rt_start_stream *st, const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        st->ring[st->rpos] = (char)d[i];
        st->rpos = (st->rpos + 1) % RT_START_RING;
    }
    st->rlen = AB_MIN(st->rlen + n, (size_t)RT_START_RING);
}

static int on_event(struct rt_start_stream *st, json_t *ev)
{
    json_t *e = json_object_get(ev, "event"), *x;
    const char *k;
    json_t *v;

    if ((x = json_object_get(e, "start")) != NULL) {
        if (st->started)
            return 0;
        st->started = true;
        return RT_START_EV_STARTED;
    }
    if ((x = json_object_get(e, "data")) != NULL) {
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
        return 0;
    }
    if ((x = json_object_get(e, "end")) != NULL && !st->exited) {
        st->exited = true;
        st->exit_code = (int)json_integer_value(json_object_get(x, "exitCode"));
        return RT_START_EV_EXITED;
    }
    return 0;
}

int rt_start_feed(struct rt_start_stream *st, const void *d, size_t len)
{
    size_t off = 0;
    int evs = 0;

    if (st->status != 200) { /* a unary-style error body: keep its text */
        size_t have = strlen(st->err), n = AB_MIN(len, sizeof(st->err) - 1 - have);
        memcpy(st->err + have, d, n);
        st->err[have + n] = '\0';
        return 0;
    }
    if (st->elen + len > st->ecap) {
        size_t cap = AB_MAX(st->ecap * 2, st->elen + len);
        uint8_t *nb;
        if (cap > RT_START_ENVELOPE_MAX + 5 || !(nb = realloc(st->ebuf, cap))) {
            st->elen = 0; /* drop what cannot be framed; the process lives on */
            return 0;
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

        if (plen > RT_START_ENVELOPE_MAX) {
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
                snprintf(st->err, sizeof(st->err), "%s", m);
        } else if (ev) {
            evs |= on_event(st, ev);
        }
        json_decref(ev);
        off += 5 + (size_t)plen;
    }
    memmove(st->ebuf, st->ebuf + off, st->elen - off);
    st->elen -= off;
    return evs;
}

void rt_start_stream_clear(struct rt_start_stream *st)
{
    free(st->ebuf);
    st->ebuf = NULL;
    st->elen = st->ecap = 0;
}

void rt_start_tail(const struct rt_start_stream *st, char *out, size_t outlen)
{
    char tmp[RT_START_TAIL_MAX + 1];
    size_t n = AB_MIN(st->rlen, (size_t)RT_START_TAIL_MAX), start, i, k = 0;
    int lines = 0;

    start = (st->rpos + RT_START_RING - n) % RT_START_RING;
    for (i = 0; i < n; i++)
        tmp[i] = st->ring[(start + i) % RT_START_RING];
    while (n > 0 && (tmp[n - 1] == '\n' || tmp[n - 1] == '\r'))
        n--;
    /* keep the last RT_START_TAIL_LINES lines */
    for (i = n; i > 0; i--) {
        if (tmp[i - 1] == '\n' && ++lines >= RT_START_TAIL_LINES) {
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

void rt_start_probe_name(const struct rt_start_spec *s, int i, const char *host, char *out,
                         size_t outlen)
{
    const struct mf_probe *pr = &s->probes[i].p;

    if (pr->kind == MF_PROBE_HTTP)
        snprintf(out, outlen, "readiness check httpGet http://%s:%d%.80s of runtime '%s'", host,
                 (int)pr->port, pr->path, s->probes[i].rt);
    else
        snprintf(out, outlen, "readiness check tcpSocket %s:%d of runtime '%s'", host,
                 (int)pr->port, s->probes[i].rt);
}

void rt_start_describe(const struct rt_start_spec *s, const struct rt_start_stream *st,
                       const char *what, char *out, size_t outlen)
{
    char tail[RT_START_TAIL_MAX + 1], state[96];
    int n;

    n = snprintf(out, outlen, "%s", what);
    if (!s->cmd[0] || n < 0 || (size_t)n >= outlen)
        return;
    if (st->exited)
        snprintf(state, sizeof(state), "exited with code %d", st->exit_code);
    else if (st->started)
        snprintf(state, sizeof(state), "is running");
    else
        snprintf(state, sizeof(state), "did not start");
    rt_start_tail(st, tail, sizeof(tail));
    snprintf(out + n, outlen - (size_t)n, "; the start command of runtime '%s' %s; %s%s", s->cmd_rt,
             state, tail[0] ? "its output ends:\n" : "it printed nothing", tail);
}

/* ---- the runner ------------------------------------------------------------------------ */

#define RUN_RPC_TIMEOUT_MS 10000 /* to the Start answer's head; the stream then lives on */
#define RUN_MSG_MAX 900          /* a failure; fits an HTTP error body (1024) */
#define RUN_FIELD_MAX 256        /* a log field naming the sandbox */

struct rt_start_run {
    struct loop *loop;
    struct rt_start_spec spec;
    char envd[RT_ADDR_MAX];
    char token[RT_TOKEN_MAX + 1];
    char basic[160]; /* "Basic base64(user:)": envd's user for the command */
    char host[64];
    char netns[128]; /* "" the agent's */
    int64_t deadline_ms, startup_ms;
    char log_k[2][32], log_v[2][RUN_FIELD_MAX];
    rt_start_done_fn done;
    void *arg;
    enum rt_start_phase phase;
    struct http_client *cmd_hc, *probe_hc;
    struct rt_start_stream cmd;
    int probe_i, probe_status;
    int tcp_fd;           /* a tcpSocket connect in progress, or -1 */
    int64_t tcp_since_ms; /* ... since */
    char last[200];       /* why probe_i has not passed yet */
    struct loop_timer timer;
    bool timer_on;
    bool told; /* done has run */
    char fail[RUN_MSG_MAX];
};

static void run_timer(struct loop_timer *t);

static void later(struct rt_start_run *r, int64_t ms)
{
    if (r->timer_on)
        loop_timer_cancel(&r->timer);
    r->timer_on = true;
    loop_timer_start(r->loop, &r->timer, AB_MAX(ms, 0), run_timer, r);
}

static void fail_now(struct rt_start_run *r, const char *what)
{
    if (r->phase == RT_START_FAILED || r->phase == RT_START_READY)
        return;
    rt_start_describe(&r->spec, &r->cmd, what, r->fail, sizeof(r->fail));
    r->phase = RT_START_FAILED;
    later(r, 0);
}

static void probe_name(const struct rt_start_run *r, int i, char *out, size_t outlen)
{
    rt_start_probe_name(&r->spec, i, r->host, out, outlen);
}

/* Checks start after the first one's initialDelaySeconds. */
static void enter_probe(struct rt_start_run *r)
{
    r->phase = RT_START_CHECKING;
    later(r, r->spec.nprobes ? (int64_t)r->spec.probes[0].p.initial_delay_s * 1000 : 0);
}

/* ---- the start command ---- */

static void cmd_head(struct http_client *c, int status, const struct http_header *h, int n,
                     void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct rt_start_run *)arg)->cmd.status = status;
}

static void cmd_ended_after_ready(const struct rt_start_run *r)
{
    char tail[RT_START_TAIL_MAX + 1], code[16];

    rt_start_tail(&r->cmd, tail, sizeof(tail));
    snprintf(code, sizeof(code), "%d", r->cmd.exit_code);
    if (r->log_k[1][0])
        LOG_WARN("a sandbox's start command ended", r->log_k[0], r->log_v[0], r->log_k[1],
                 r->log_v[1], "exit_code", code, "output", tail);
    else if (r->log_k[0][0])
        LOG_WARN("a sandbox's start command ended", r->log_k[0], r->log_v[0], "exit_code", code,
                 "output", tail);
    else
        LOG_WARN("a sandbox's start command ended", "exit_code", code, "output", tail);
}

static void cmd_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    struct rt_start_run *r = arg;
    int evs = rt_start_feed(&r->cmd, d, len);
    char msg[320], what[256];

    (void)c;
    if ((evs & RT_START_EV_STARTED) && r->phase == RT_START_STARTING)
        enter_probe(r);
    if (!(evs & RT_START_EV_EXITED))
        return;
    if (r->phase == RT_START_READY) {
        cmd_ended_after_ready(r);
    } else if (r->cmd.exit_code != 0) {
        /* exit 0 may be a command that started a daemon: keep checking */
        if (r->probe_i < r->spec.nprobes) {
            probe_name(r, r->probe_i, what, sizeof(what));
            snprintf(msg, sizeof(msg), "the start command exited before the %s passed", what);
        } else {
            snprintf(msg, sizeof(msg), "the start command exited before the sandbox was ready");
        }
        fail_now(r, msg);
    }
}

static void cmd_gone(struct rt_start_run *r, const char *why)
{
    char msg[320];

    r->cmd_hc = NULL;
    if (r->phase == RT_START_READY || r->phase == RT_START_FAILED || r->cmd.started)
        return; /* started and the stream ended: the end event (or its absence) decides */
    snprintf(msg, sizeof(msg), "envd refused to run the start command (%d): %.200s", r->cmd.status,
             r->cmd.err[0] ? r->cmd.err : why);
    fail_now(r, msg);
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

static void start_command(struct rt_start_run *r)
{
    struct http_header hs[] = {{"Content-Type", "application/connect+json"},
                               {"X-Access-Token", r->token},
                               {"Authorization", r->basic}};
    struct http_client_options o = {0};
    uint8_t *env;
    size_t n;

    if (rt_start_request(r->spec.cmd, &env, &n) != 0) {
        fail_now(r, "cannot build the start command's request (out of memory)");
        return;
    }
    o.addr = r->envd;
    o.method = "POST";
    o.target = "/process.Process/Start";
    o.headers = hs;
    o.nheaders = 3;
    o.content_length = (int64_t)n;
    o.timeout_ms = RUN_RPC_TIMEOUT_MS;
    r->cmd_hc = http_client_start(r->loop, &o, &cmd_handler, r);
    if (r->cmd_hc) {
        http_client_write(r->cmd_hc, env, n);
        http_client_end(r->cmd_hc);
    }
    free(env);
    if (!r->cmd_hc)
        fail_now(r, "cannot start the request to envd (out of memory)");
}

/* ---- readiness ---- */

static int64_t period_ms(const struct rt_start_run *r)
{
    const struct mf_probe *p = &r->spec.probes[r->probe_i].p;
    return p->period_s > 0 ? (int64_t)p->period_s * 1000 : RT_PROBE_PERIOD_MS;
}

static void probe_result(struct rt_start_run *r, bool ok)
{
    if (r->phase != RT_START_CHECKING)
        return;
    if (ok) {
        r->probe_i++;
        r->last[0] = '\0';
        later(r, 0);
        return;
    }
    later(r, period_ms(r));
}

static void tcp_close(struct rt_start_run *r)
{
    if (r->tcp_fd >= 0)
        close(r->tcp_fd);
    r->tcp_fd = -1;
}

/* A socket of the checks' network namespace (a socket stays in the one it
 * was made in, so only its creation enters the sandbox's). -1 with why. */
static int tcp_socket(const struct rt_start_run *r, char *why, size_t whylen)
{
    int self, target, fd = -1;

    if (!r->netns[0]) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            snprintf(why, whylen, "socket: %s", strerror(errno));
        return fd;
    }
    self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    target = open(r->netns, O_RDONLY | O_CLOEXEC);
    if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0) {
        snprintf(why, whylen, "cannot enter the sandbox's network namespace: %s", strerror(errno));
        goto out;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        snprintf(why, whylen, "socket: %s", strerror(errno));
    if (setns(self, CLONE_NEWNET) != 0) {
        /* never stay in a sandbox's network */
        LOG_ERROR("cannot return to the agent's network namespace", "error", strerror(errno));
        abort();
    }
out:
    if (self >= 0)
        close(self);
    if (target >= 0)
        close(target);
    return fd;
}

/* tcpSocket without blocking the loop: a non-blocking connect, looked at
 * again a period later (loopback answers at once; a remote Pod within the
 * check's timeout). */
static void tcp_probe(struct rt_start_run *r, const struct mf_probe *pr)
{
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    struct pollfd pfd;
    int64_t timeout = pr->timeout_s > 0 ? pr->timeout_s * 1000 : RT_PROBE_TIMEOUT_MS;

    if (r->tcp_fd < 0) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)pr->port)};
        if (inet_pton(AF_INET, r->host, &sa.sin_addr) != 1) {
            snprintf(r->last, sizeof(r->last), "the address '%.60s' is not IPv4", r->host);
            probe_result(r, false);
            return;
        }
        r->tcp_fd = tcp_socket(r, r->last, sizeof(r->last));
        if (r->tcp_fd < 0) {
            probe_result(r, false);
            return;
        }
        r->tcp_since_ms = ab_now_ms();
        if (connect(r->tcp_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            tcp_close(r);
            probe_result(r, true);
            return;
        }
        if (errno != EINPROGRESS) {
            snprintf(r->last, sizeof(r->last), "connect: %s", strerror(errno));
            tcp_close(r);
            probe_result(r, false);
            return;
        }
    }
    pfd.fd = r->tcp_fd;
    pfd.events = POLLOUT;
    if (poll(&pfd, 1, 0) == 1) {
        bool ok = getsockopt(r->tcp_fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0;
        if (!ok)
            snprintf(r->last, sizeof(r->last), "connect: %s", strerror(soerr ? soerr : EIO));
        tcp_close(r);
        probe_result(r, ok);
        return;
    }
    if (ab_now_ms() - r->tcp_since_ms >= timeout) {
        snprintf(r->last, sizeof(r->last), "connect: no answer within %lld ms", (long long)timeout);
        tcp_close(r);
    }
    probe_result(r, false);
}

static void probe_head(struct http_client *c, int status, const struct http_header *h, int n,
                       void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct rt_start_run *)arg)->probe_status = status;
}

static void ignore_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    (void)c;
    (void)d;
    (void)len;
    (void)arg;
}

static void probe_end(struct http_client *c, void *arg)
{
    struct rt_start_run *r = arg;
    bool ok = r->probe_status >= 200 && r->probe_status < 300;

    (void)c;
    r->probe_hc = NULL;
    if (!ok)
        snprintf(r->last, sizeof(r->last), "it answered %d", r->probe_status);
    probe_result(r, ok);
}

static void probe_error(struct http_client *c, int err, const char *m, void *arg)
{
    struct rt_start_run *r = arg;

    (void)c;
    (void)err;
    r->probe_hc = NULL;
    snprintf(r->last, sizeof(r->last), "%.190s", m ? m : "error");
    probe_result(r, false);
}

static const struct http_client_handler probe_handler = {
    .on_head = probe_head,
    .on_data = ignore_data,
    .on_end = probe_end,
    .on_error = probe_error,
};

static void probe_next(struct rt_start_run *r)
{
    const struct mf_probe *pr;
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX + 160], what[256], msg[RUN_MSG_MAX];

    if (r->probe_i >= r->spec.nprobes) {
        r->phase = RT_START_READY;
        later(r, 0);
        return;
    }
    pr = &r->spec.probes[r->probe_i].p;
    if (r->deadline_ms && ab_now_ms() > r->deadline_ms) {
        probe_name(r, r->probe_i, what, sizeof(what));
        snprintf(msg, sizeof(msg), "the %s did not pass within %lld ms (last try: %s)", what,
                 (long long)r->startup_ms, r->last[0] ? r->last : "not tried yet");
        fail_now(r, msg);
        return;
    }
    if (pr->kind == MF_PROBE_TCP) {
        tcp_probe(r, pr);
        return;
    }
    if (r->netns[0])
        snprintf(addr, sizeof(addr), "netns:%s|%s:%d", r->netns, r->host, (int)pr->port);
    else
        snprintf(addr, sizeof(addr), "%s:%d", r->host, (int)pr->port);
    o.addr = addr;
    o.method = "GET";
    o.target = pr->path;
    o.timeout_ms = pr->timeout_s > 0 ? pr->timeout_s * 1000 : RT_PROBE_TIMEOUT_MS;
    r->probe_status = 0;
    r->probe_hc = http_client_start(r->loop, &o, &probe_handler, r);
    if (!r->probe_hc) {
        snprintf(r->last, sizeof(r->last), "cannot start the request (out of memory)");
        probe_result(r, false);
        return;
    }
    http_client_end(r->probe_hc);
}

/* ---- steps ---- */

static void tell(struct rt_start_run *r, int err, const char *msg)
{
    if (r->told)
        return;
    r->told = true;
    r->done(r->arg, err, msg); /* may free r */
}

static void run_timer(struct loop_timer *t)
{
    struct rt_start_run *r = t->arg;

    r->timer_on = false;
    switch (r->phase) {
    case RT_START_STARTING:
        if (!r->cmd_hc && !r->cmd.started) {
            start_command(r);
            /* envd answers Start with its "start" event at once; bound the wait */
            if (r->phase == RT_START_STARTING && r->deadline_ms)
                later(r, r->deadline_ms - ab_now_ms());
            return;
        }
        if (r->deadline_ms)
            fail_now(r, "envd did not start the start command before the startup timeout");
        return;
    case RT_START_CHECKING:
        if (!r->probe_hc)
            probe_next(r);
        return;
    case RT_START_READY:
        tell(r, 0, NULL);
        return;
    case RT_START_FAILED:
        tell(r, AB_EIO, r->fail);
        return;
    }
}

struct rt_start_run *rt_start_run_new(const struct rt_start_run_deps *d)
{
    struct rt_start_run *r = calloc(1, sizeof(*r));
    char up[RT_NAME_MAX + 2], b64[120];

    if (!r)
        return NULL;
    r->loop = d->loop;
    r->spec = *d->spec;
    ab_strlcpy(r->envd, d->envd, sizeof(r->envd));
    ab_strlcpy(r->token, d->token, sizeof(r->token));
    /* Basic "<user>:" names the user the command runs as */
    snprintf(up, sizeof(up), "%.63s:", d->user && d->user[0] ? d->user : "user");
    crypto_base64_encode(up, strlen(up), b64);
    snprintf(r->basic, sizeof(r->basic), "Basic %s", b64);
    ab_strlcpy(r->host, d->host, sizeof(r->host));
    if (d->netns)
        ab_strlcpy(r->netns, d->netns, sizeof(r->netns));
    r->deadline_ms = d->deadline_ms;
    r->startup_ms = d->startup_ms;
    if (d->log_k1) {
        ab_strlcpy(r->log_k[0], d->log_k1, sizeof(r->log_k[0]));
        ab_strlcpy(r->log_v[0], d->log_v1 ? d->log_v1 : "", sizeof(r->log_v[0]));
    }
    if (d->log_k1 && d->log_k2) {
        ab_strlcpy(r->log_k[1], d->log_k2, sizeof(r->log_k[1]));
        ab_strlcpy(r->log_v[1], d->log_v2 ? d->log_v2 : "", sizeof(r->log_v[1]));
    }
    r->done = d->done;
    r->arg = d->arg;
    r->tcp_fd = -1;
    if (r->spec.cmd[0]) {
        r->phase = RT_START_STARTING;
        later(r, 0);
    } else {
        enter_probe(r);
    }
    return r;
}

void rt_start_run_free(struct rt_start_run *r)
{
    if (!r)
        return;
    if (r->timer_on)
        loop_timer_cancel(&r->timer);
    if (r->cmd_hc)
        http_client_close(r->cmd_hc);
    if (r->probe_hc)
        http_client_close(r->probe_hc);
    tcp_close(r);
    rt_start_stream_clear(&r->cmd);
    explicit_bzero(r->token, sizeof(r->token));
    free(r);
}

enum rt_start_phase rt_start_run_where(const struct rt_start_run *r, char *check, size_t checklen,
                                       const char **last)
{
    if (checklen)
        check[0] = '\0';
    *last = "not tried yet";
    if (r->phase == RT_START_CHECKING && r->probe_i < r->spec.nprobes) {
        probe_name(r, r->probe_i, check, checklen);
        if (r->last[0])
            *last = r->last;
    }
    return r->phase;
}

void rt_start_run_describe(const struct rt_start_run *r, const char *now, char *out, size_t outlen)
{
    if (r->phase == RT_START_FAILED)
        snprintf(out, outlen, "%s", r->fail);
    else
        rt_start_describe(&r->spec, &r->cmd, now, out, outlen);
}
