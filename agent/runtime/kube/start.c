/* Start command and readiness checks on a claimed Pod (start.h). Loop thread
 * only. State changes that close an http client run from the timer, never
 * inside that client's own callback. */
#include "agent/runtime/kube/start.h"

#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RPC_TIMEOUT_MS 10000
#define MSG_MAX 900 /* a start failure; fits an HTTP error body (1024), as local's */

enum step { ST_START = 1, ST_PROBE, ST_READY, ST_FAILED };

struct kstart {
    struct loop *loop;
    struct rt_start_spec spec;
    char ip[64];
    int envd_port;
    char token[RT_TOKEN_MAX + 1];
    char basic[160]; /* "Basic base64(user:)": envd's user for the command */
    kstart_done_fn done;
    void *arg;
    enum step step;
    struct http_client *cmd_hc, *probe_hc;
    struct rt_start_stream cmd;
    int probe_i, probe_status;
    int tcp_fd;           /* a tcpSocket connect in progress, or -1 */
    int64_t tcp_since_ms; /* ... since */
    char last[200];       /* why probe_i has not passed yet */
    struct loop_timer timer;
    bool timer_on;
    bool told; /* done has run */
    char fail[MSG_MAX];
};

static void step_timer(struct loop_timer *t);

static void later(struct kstart *k, int64_t ms)
{
    if (k->timer_on)
        loop_timer_cancel(&k->timer);
    k->timer_on = true;
    loop_timer_start(k->loop, &k->timer, AB_MAX(ms, 0), step_timer, k);
}

static void fail_now(struct kstart *k, const char *what)
{
    if (k->step == ST_FAILED || k->step == ST_READY)
        return;
    rt_start_describe(&k->spec, &k->cmd, what, k->fail, sizeof(k->fail));
    k->step = ST_FAILED;
    later(k, 0);
}

static void probe_name(const struct kstart *k, int i, char *out, size_t outlen)
{
    rt_start_probe_name(&k->spec, i, k->ip, out, outlen);
}

static void enter_probe(struct kstart *k)
{
    k->step = ST_PROBE;
    later(k, k->spec.nprobes ? (int64_t)k->spec.probes[0].p.initial_delay_s * 1000 : 0);
}

/* ---- the start command ---------------------------------------------------------------- */

static void cmd_head(struct http_client *c, int status, const struct http_header *h, int n,
                     void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct kstart *)arg)->cmd.status = status;
}

static void cmd_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    struct kstart *k = arg;
    int evs = rt_start_feed(&k->cmd, d, len);
    char msg[320];

    (void)c;
    if ((evs & RT_START_EV_STARTED) && k->step == ST_START)
        enter_probe(k);
    if (!(evs & RT_START_EV_EXITED))
        return;
    if (k->step == ST_READY) {
        char tail[RT_START_TAIL_MAX + 1];
        rt_start_tail(&k->cmd, tail, sizeof(tail));
        snprintf(msg, sizeof(msg), "%d", k->cmd.exit_code);
        LOG_WARN("a sandbox's start command ended", "pod_ip", k->ip, "exit_code", msg, "output",
                 tail);
    } else if (k->cmd.exit_code != 0) {
        /* exit 0 may be a command that started a daemon: keep checking */
        char what[256];
        if (k->probe_i < k->spec.nprobes) {
            probe_name(k, k->probe_i, what, sizeof(what));
            snprintf(msg, sizeof(msg), "the start command exited before the %s passed", what);
        } else {
            snprintf(msg, sizeof(msg), "the start command exited before the sandbox was ready");
        }
        fail_now(k, msg);
    }
}

static void cmd_gone(struct kstart *k, const char *why)
{
    char msg[320];

    k->cmd_hc = NULL;
    if (k->step == ST_READY || k->step == ST_FAILED || k->cmd.started)
        return; /* started and the stream ended: the end event (or its absence) decides */
    snprintf(msg, sizeof(msg), "envd refused to run the start command (%d): %.200s", k->cmd.status,
             k->cmd.err[0] ? k->cmd.err : why);
    fail_now(k, msg);
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

static void start_command(struct kstart *k)
{
    struct http_header hs[] = {{"Content-Type", "application/connect+json"},
                               {"X-Access-Token", k->token},
                               {"Authorization", k->basic}};
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX];
    uint8_t *env;
    size_t n;

    if (rt_start_request(k->spec.cmd, &env, &n) != 0) {
        fail_now(k, "cannot build the start command's request (out of memory)");
        return;
    }
    snprintf(addr, sizeof(addr), "%s:%d", k->ip, k->envd_port);
    o.addr = addr;
    o.method = "POST";
    o.target = "/process.Process/Start";
    o.headers = hs;
    o.nheaders = 3;
    o.content_length = (int64_t)n;
    o.timeout_ms = RPC_TIMEOUT_MS; /* to the answer head; the stream then lives with the command */
    k->cmd_hc = http_client_start(k->loop, &o, &cmd_handler, k);
    if (k->cmd_hc) {
        http_client_write(k->cmd_hc, env, n);
        http_client_end(k->cmd_hc);
    }
    free(env);
    if (!k->cmd_hc)
        fail_now(k, "cannot start the request to the Pod's envd");
}

/* ---- readiness ------------------------------------------------------------------------ */

static int64_t period_ms(const struct kstart *k)
{
    const struct mf_probe *p = &k->spec.probes[k->probe_i].p;
    return p->period_s > 0 ? (int64_t)p->period_s * 1000 : RT_PROBE_PERIOD_MS;
}

static void probe_result(struct kstart *k, bool ok)
{
    if (k->step != ST_PROBE)
        return;
    if (ok) {
        k->probe_i++;
        k->last[0] = '\0';
        later(k, 0);
        return;
    }
    later(k, period_ms(k));
}

static void tcp_close(struct kstart *k)
{
    if (k->tcp_fd >= 0)
        close(k->tcp_fd);
    k->tcp_fd = -1;
}

/* tcpSocket at the Pod's IP without blocking the loop: a non-blocking
 * connect, looked at again a period later (loopback answers at once; a
 * remote Pod within the probe's timeout). */
static void tcp_probe(struct kstart *k, const struct mf_probe *pr)
{
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    struct pollfd pfd;
    int64_t timeout = pr->timeout_s > 0 ? pr->timeout_s * 1000 : RT_PROBE_TIMEOUT_MS;

    if (k->tcp_fd < 0) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)pr->port)};
        if (inet_pton(AF_INET, k->ip, &sa.sin_addr) != 1) {
            snprintf(k->last, sizeof(k->last), "the Pod IP '%.60s' is not IPv4", k->ip);
            probe_result(k, false);
            return;
        }
        k->tcp_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (k->tcp_fd < 0) {
            snprintf(k->last, sizeof(k->last), "socket: %s", strerror(errno));
            probe_result(k, false);
            return;
        }
        k->tcp_since_ms = ab_now_ms();
        if (connect(k->tcp_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            tcp_close(k);
            probe_result(k, true);
            return;
        }
        if (errno != EINPROGRESS) {
            snprintf(k->last, sizeof(k->last), "connect: %s", strerror(errno));
            tcp_close(k);
            probe_result(k, false);
            return;
        }
    }
    pfd.fd = k->tcp_fd;
    pfd.events = POLLOUT;
    if (poll(&pfd, 1, 0) == 1) {
        bool ok = getsockopt(k->tcp_fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0;
        if (!ok)
            snprintf(k->last, sizeof(k->last), "connect: %s", strerror(soerr ? soerr : EIO));
        tcp_close(k);
        probe_result(k, ok);
        return;
    }
    if (ab_now_ms() - k->tcp_since_ms >= timeout) {
        snprintf(k->last, sizeof(k->last), "connect: no answer within %lld ms", (long long)timeout);
        tcp_close(k);
    }
    probe_result(k, false);
}

static void probe_head(struct http_client *c, int status, const struct http_header *h, int n,
                       void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct kstart *)arg)->probe_status = status;
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
    struct kstart *k = arg;
    bool ok = k->probe_status >= 200 && k->probe_status < 300;

    (void)c;
    k->probe_hc = NULL;
    if (!ok)
        snprintf(k->last, sizeof(k->last), "it answered %d", k->probe_status);
    probe_result(k, ok);
}

static void probe_error(struct http_client *c, int err, const char *m, void *arg)
{
    struct kstart *k = arg;

    (void)c;
    (void)err;
    k->probe_hc = NULL;
    snprintf(k->last, sizeof(k->last), "%.190s", m ? m : "error");
    probe_result(k, false);
}

static const struct http_client_handler probe_handler = {
    .on_head = probe_head,
    .on_data = ignore_data,
    .on_end = probe_end,
    .on_error = probe_error,
};

static void probe_next(struct kstart *k)
{
    const struct mf_probe *pr;

    if (k->probe_i >= k->spec.nprobes) {
        k->step = ST_READY;
        later(k, 0);
        return;
    }
    pr = &k->spec.probes[k->probe_i].p;
    if (pr->kind == MF_PROBE_TCP) {
        tcp_probe(k, pr);
        return;
    }
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX];
    snprintf(addr, sizeof(addr), "%s:%d", k->ip, (int)pr->port);
    o.addr = addr;
    o.method = "GET";
    o.target = pr->path;
    o.timeout_ms = pr->timeout_s > 0 ? pr->timeout_s * 1000 : RT_PROBE_TIMEOUT_MS;
    k->probe_status = 0;
    k->probe_hc = http_client_start(k->loop, &o, &probe_handler, k);
    if (!k->probe_hc) {
        snprintf(k->last, sizeof(k->last), "cannot start the request");
        probe_result(k, false);
        return;
    }
    http_client_end(k->probe_hc);
}

/* ---- steps ------------------------------------------------------------------------------ */

static void tell(struct kstart *k, int err, const char *msg)
{
    if (k->told)
        return;
    k->told = true;
    k->done(k->arg, err, msg); /* may free k */
}

static void step_timer(struct loop_timer *t)
{
    struct kstart *k = t->arg;

    k->timer_on = false;
    switch (k->step) {
    case ST_START:
        if (!k->cmd_hc && !k->cmd.started)
            start_command(k);
        return;
    case ST_PROBE:
        if (!k->probe_hc)
            probe_next(k);
        return;
    case ST_READY:
        tell(k, 0, NULL);
        return;
    case ST_FAILED:
        tell(k, AB_EIO, k->fail);
        return;
    }
}

struct kstart *kstart_new(const struct kstart_deps *d)
{
    struct kstart *k = calloc(1, sizeof(*k));
    char up[RT_NAME_MAX + 2], b64[120];

    if (!k)
        return NULL;
    k->loop = d->loop;
    k->spec = *d->spec;
    ab_strlcpy(k->ip, d->ip, sizeof(k->ip));
    k->envd_port = d->envd_port;
    ab_strlcpy(k->token, d->token, sizeof(k->token));
    /* Basic "<user>:" names the user the command runs as */
    snprintf(up, sizeof(up), "%.63s:", d->user && d->user[0] ? d->user : "user");
    crypto_base64_encode(up, strlen(up), b64);
    snprintf(k->basic, sizeof(k->basic), "Basic %s", b64);
    k->done = d->done;
    k->arg = d->arg;
    k->tcp_fd = -1;
    if (k->spec.cmd[0]) {
        k->step = ST_START;
        later(k, 0);
    } else {
        enter_probe(k);
    }
    return k;
}

void kstart_free(struct kstart *k)
{
    if (!k)
        return;
    if (k->timer_on)
        loop_timer_cancel(&k->timer);
    if (k->cmd_hc)
        http_client_close(k->cmd_hc);
    if (k->probe_hc)
        http_client_close(k->probe_hc);
    tcp_close(k);
    rt_start_stream_clear(&k->cmd);
    explicit_bzero(k->token, sizeof(k->token));
    free(k);
}

void kstart_describe(const struct kstart *k, char *out, size_t outlen)
{
    char what[256], now[600];

    if (k->step == ST_FAILED) {
        snprintf(out, outlen, "%s", k->fail);
        return;
    }
    if (k->step == ST_PROBE && k->probe_i < k->spec.nprobes) {
        probe_name(k, k->probe_i, what, sizeof(what));
        snprintf(now, sizeof(now), "the %s has not passed (last try: %s)", what,
                 k->last[0] ? k->last : "not tried yet");
    } else if (k->step == ST_START) {
        snprintf(now, sizeof(now), "envd has not started the start command");
    } else {
        snprintf(now, sizeof(now), "the sandbox is ready");
    }
    rt_start_describe(&k->spec, &k->cmd, now, out, outlen);
}
