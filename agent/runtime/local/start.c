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

#define RPC_TIMEOUT_MS 10000

enum step { ST_INIT = 1, ST_START, ST_PROBE, ST_READY, ST_FAILED };

struct lstart {
    struct lsb *s;
    enum step step;
    struct http_client *init_hc, *cmd_hc, *probe_hc;
    int init_status, probe_status;
    struct rt_start_stream cmd; /* the Start stream: events, output ring (startcmd.h) */
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

static void probe_name(const struct lpool *p, int i, char *out, size_t outlen)
{
    rt_start_probe_name(&p->start, i, "127.0.0.1", out, outlen);
}

static void describe(const struct lstart *st, const char *what, char *out, size_t outlen)
{
    rt_start_describe(&st->s->pool->start, &st->cmd, what, out, outlen);
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
    later(st, p->start.nprobes ? (int64_t)p->start.probes[0].p.initial_delay_s * 1000 : 0);
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
    if (st->s->pool->start.cmd[0]) {
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

static void cmd_head(struct http_client *c, int status, const struct http_header *h, int n,
                     void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct lstart *)arg)->cmd.status = status;
}

static void cmd_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    struct lstart *st = arg;
    int evs = rt_start_feed(&st->cmd, d, len);
    char msg[320];

    (void)c;
    if ((evs & RT_START_EV_STARTED) && st->step == ST_START)
        enter_probe(st);
    if (!(evs & RT_START_EV_EXITED))
        return;
    if (st->step == ST_READY) {
        char tail[RT_START_TAIL_MAX + 1];
        rt_start_tail(&st->cmd, tail, sizeof(tail));
        snprintf(msg, sizeof(msg), "%d", st->cmd.exit_code);
        LOG_WARN("a sandbox's start command ended", "pool", st->s->pool->name, "dir", st->s->x.dir,
                 "exit_code", msg, "output", tail);
    } else if (st->cmd.exit_code != 0) {
        /* exit 0 may be a command that started a daemon: keep checking */
        char what[256];
        if (st->probe_i < st->s->pool->start.nprobes) {
            probe_name(st->s->pool, st->probe_i, what, sizeof(what));
            snprintf(msg, sizeof(msg), "the start command exited before the %s passed", what);
        } else {
            snprintf(msg, sizeof(msg), "the start command exited before the sandbox was ready");
        }
        fail_now(st, msg);
    }
}

static void cmd_gone(struct lstart *st, const char *why)
{
    char msg[320];

    st->cmd_hc = NULL;
    if (st->step == ST_READY || st->step == ST_FAILED)
        return;
    if (!st->cmd.started) {
        snprintf(msg, sizeof(msg), "envd refused to run the start command (%d): %.200s",
                 st->cmd.status, st->cmd.err[0] ? st->cmd.err : why);
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
    uint8_t *env;
    size_t n;

    if (rt_start_request(st->s->pool->start.cmd, &env, &n) == 0) {
        st->cmd_hc =
            post(st, "/process.Process/Start", "application/connect+json", env, n, &cmd_handler);
        free(env);
    }
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
    const struct mf_probe *p = &st->s->pool->start.probes[st->probe_i].p;

    return p->period_s > 0 ? (int64_t)p->period_s * 1000 : RT_PROBE_PERIOD_MS;
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

    if (st->probe_i >= p->start.nprobes) {
        st->step = ST_READY;
        later(st, 0);
        return;
    }
    pr = &p->start.probes[st->probe_i].p;
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
        o.timeout_ms = pr->timeout_s > 0 ? pr->timeout_s * 1000 : RT_PROBE_TIMEOUT_MS;
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
        if (!st->cmd_hc && !st->cmd.started) {
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
    return rt_start_spec_needed(&p->start);
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
    rt_start_stream_clear(&st->cmd);
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
        if (st->step == ST_PROBE && st->probe_i < p->start.nprobes) {
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
    rt_start_spec_from(&p->start, rts, n);
}
