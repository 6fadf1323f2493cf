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
 * Step 1 is here; steps 2 and 3 are the runner of agent/runtime/startcmd.h,
 * told the sandbox's envd socket and network namespace. Loop thread only.
 * State changes that close an http client run from a timer, never inside
 * that client's own callback. */
#include "agent/runtime/local/lrt.h"

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agent/runtime/local/manifest.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RPC_TIMEOUT_MS 10000

struct lstart {
    struct lsb *s;
    struct http_client *init_hc;
    int init_status;
    struct rt_start_run *run; /* steps 2 and 3, once /init answered */
    struct loop_timer timer;  /* step 1 and its failure */
    bool timer_on, failed;
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

/* what, with the start command's state (nothing ran yet) */
static void describe_init(const struct lstart *st, const char *what, char *out, size_t outlen)
{
    struct rt_start_stream none = {0};

    rt_start_describe(&st->s->pool->start, &none, what, out, outlen);
}

static void init_fail(struct lstart *st, const char *what)
{
    if (st->failed)
        return;
    describe_init(st, what, st->fail, sizeof(st->fail));
    st->failed = true;
    later(st, 0);
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

/* ---- steps 2 and 3: the runner ------------------------------------------------------ */

/* From the runner's timer. */
static void run_done(void *arg, int err, const char *msg)
{
    struct lsb *s = arg;

    if (err)
        start_failed(s, msg); /* destroys s, and the runner with it */
    else
        lrt_sbx_idle(s);
}

static void run_begin(struct lstart *st)
{
    struct lsb *s = st->s;
    struct lpool *p = s->pool;
    char envd[RT_ADDR_MAX], netns[64];
    struct rt_start_run_deps d = {
        .loop = s->rt->loop,
        .spec = &p->start,
        .envd = envd,
        .token = s->x.token,
        .user = "user",
        .host = "127.0.0.1", /* the sandbox's loopback */
        .netns = netns,
        .deadline_ms = s->deadline_ms,
        .startup_ms = p->startup_ms ? p->startup_ms : DEFAULT_STARTUP_MS,
        .log_k1 = "pool",
        .log_v1 = p->name,
        .log_k2 = "dir",
        .log_v2 = s->x.dir,
        .done = run_done,
        .arg = s,
    };

    snprintf(envd, sizeof(envd), "unix:%s", s->x.socket);
    snprintf(netns, sizeof(netns), "/proc/%d/ns/net", (int)s->x.pid);
    if (!(st->run = rt_start_run_new(&d)))
        init_fail(st, "cannot start the request to the sandbox's envd (out of memory)");
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
        init_fail(st, msg);
        return;
    }
    run_begin(st);
}

static void init_error(struct http_client *c, int err, const char *m, void *arg)
{
    struct lstart *st = arg;
    char msg[256];

    (void)c;
    (void)err;
    st->init_hc = NULL;
    snprintf(msg, sizeof(msg), "sandbox envd did not answer POST /init: %.160s", m ? m : "error");
    init_fail(st, msg);
}

static const struct http_client_handler init_handler = {
    .on_head = init_head,
    .on_data = ignore_data,
    .on_end = init_end,
    .on_error = init_error,
};

static void post_init(struct lstart *st)
{
    struct lsb *s = st->s;
    json_t *b = json_pack("{s:s, s:s, s:s, s:{}}", "accessToken", s->x.token, "defaultUser", "user",
                          "defaultWorkdir", "/home/user", "envVars");
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    /* Basic "user:" names the user envd's defaults are for */
    struct http_header hs[] = {{"Content-Type", "application/json"},
                               {"X-Access-Token", s->x.token},
                               {"Authorization", "Basic dXNlcjo="}};
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX];

    json_decref(b);
    if (body) {
        snprintf(addr, sizeof(addr), "unix:%s", s->x.socket);
        o.addr = addr;
        o.method = "POST";
        o.target = "/init";
        o.headers = hs;
        o.nheaders = 3;
        o.content_length = (int64_t)strlen(body);
        o.timeout_ms = RPC_TIMEOUT_MS;
        st->init_hc = http_client_start(s->rt->loop, &o, &init_handler, st);
        if (st->init_hc) {
            http_client_write(st->init_hc, body, strlen(body));
            http_client_end(st->init_hc);
        }
        explicit_bzero(body, strlen(body));
    }
    free(body);
    if (!st->init_hc)
        init_fail(st, "cannot start the request to the sandbox's envd (out of memory)");
}

static void step_timer(struct loop_timer *t)
{
    struct lstart *st = t->arg;

    st->timer_on = false;
    if (st->failed)
        start_failed(st->s, st->fail); /* destroys s, and st with it */
    else if (!st->init_hc && !st->run)
        post_init(st);
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
    rt_start_run_free(st->run);
    free(st);
}

int lrt_start_describe(const struct lpool *p, const struct lrt *rt, char *out, size_t outlen)
{
    const struct lsb *s;
    char what[256], now[LRT_START_MSG_MAX];
    const char *last;

    for (s = rt->sbxs; s; s = s->next) {
        const struct lstart *st = s->start;
        enum rt_start_phase ph;
        if (s->pool != p || !st || st->failed)
            continue;
        if (!st->run) {
            describe_init(st, "a sandbox is still running its start command", out, outlen);
            return 1;
        }
        ph = rt_start_run_where(st->run, what, sizeof(what), &last);
        if (ph == RT_START_READY || ph == RT_START_FAILED)
            continue;
        if (what[0])
            snprintf(now, sizeof(now), "the %s has not passed yet (last try: %s)", what, last);
        else
            snprintf(now, sizeof(now), "a sandbox is still running its start command");
        rt_start_run_describe(st->run, now, out, outlen);
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
