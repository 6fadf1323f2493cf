/* bench_tunnel_agents: many simulated agents against one hub (DESIGN §12,
 * "hub with 5,000 simulated agents reporting every 5 s").
 *
 * Every simulated agent is what the real one is on the wire: a WebSocket to
 * /v1/tunnel with its own cluster id and join token, HELLO → WELCOME, a
 * WebSocket ping every 10 s and a REPORT of ten capacity records every 5 s.
 * All of them share one event loop (agentbox loop + lws client), the tunnel
 * session of tunnel.h and the WebSocket glue of tunnel_ws.h, so the bench
 * exercises the same code as the agent.
 *
 * It measures nothing about the hub itself: the driver (tunnel_agents.mjs)
 * reads the hub's /proc while this process holds the connections. What this
 * process reports is its own view: handshake latency (connect → WELCOME),
 * ping round trips, refused connects, dropped sessions.
 *
 * Control, one command per stdin line:
 *   target N   connect agents 0..N-1 (ramping at --rate per second), then
 *              print {"event":"ready",...}
 *   stats      print {"event":"stats",...} and restart the RTT sample
 *   hold       send no more reports (pings go on): the hub's count can catch up
 *   quit       close everything and exit
 * Output: one JSON object per line on stdout; progress and errors on stderr.
 *
 * Loop thread for everything lws; a reader thread only turns stdin lines
 * into loop_post() calls. */
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_ws.h"

#include <jansson.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define BENCH_AGENTS_MAX 20000
#define BENCH_PROTOCOL "agentbox.tunnel.v1"
#define BENCH_TICK_MS 100
#define BENCH_REPORT_TICKS 50 /* 5 s */
#define BENCH_PING_TICKS 100  /* 10 s */
#define BENCH_RAMP_TICK_MS 10
#define BENCH_RETRY_MS 1000
#define BENCH_CONNECTING_MAX 256 /* handshakes in flight at once */
#define BENCH_RTT_MAX 65536
#define BENCH_RECORDS 10
#define BENCH_LINE_MAX 256

enum sim_state {
    SIM_IDLE = 0,
    SIM_CONNECTING,  /* TCP + upgrade in flight */
    SIM_HELLO,       /* WebSocket up, HELLO sent, WELCOME not yet received */
    SIM_ESTABLISHED, /* WELCOME received */
    SIM_RETRY,       /* failed or dropped; reconnects at retry_at_ms */
};

struct bench;

struct sim_agent {
    struct bench *b;
    int idx;
    char id[32];
    char auth[160]; /* "Bearer abxc_…" */
    enum sim_state state;
    struct lws *wsi;
    struct tun_ws ws;
    bool ws_inited;
    struct tun_session *s;
    int64_t connect_started_us;
    int64_t retry_at_ms;
    uint32_t report_seq;
};

struct bench {
    struct loop *loop;
    struct lws_vhost *vh;
    struct lws_protocols protocols[2];
    struct tun_callbacks cb;
    char host[128];
    int port;
    double rate;

    struct sim_agent *agents; /* nagents, loaded from --agents */
    int nagents;
    int target;     /* agents 0..target-1 should be up */
    int next;       /* next agent to start in the ramp */
    int connecting; /* SIM_CONNECTING + SIM_HELLO */
    int established;
    int retrying;
    bool ramping, stopping;
    int64_t ramp_start_ms;
    int ramp_from;

    uint64_t tick;
    int64_t tick_due_us; /* when main_tick should run next */
    struct loop_timer tick_timer, ramp_timer;

    uint64_t refused, drops, reports, pings, pongs, frames_in_err;
    bool holding;    /* "hold": no more reports */
    int64_t *rtt_us; /* ping round trips since the last stats */
    size_t nrtt;
    int64_t *hs_us; /* connect → WELCOME of the current ramp */
    size_t nhs;
    int64_t *late_us; /* how late main_tick ran, since the last stats: our own loop lag */
    size_t nlate;
    char first_error[256];
};

static void sim_connect(struct sim_agent *a);

/* --- helpers ------------------------------------------------------------------ */

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* Sorts v in place; the q-quantile (nearest rank), or 0 for an empty set. */
static int64_t quantile(int64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cmp_i64);
    size_t k = (size_t)(q * (double)n);
    return v[k >= n ? n - 1 : k];
}

static void note_error(struct bench *b, const char *what, const char *detail)
{
    if (b->first_error[0])
        return;
    snprintf(b->first_error, sizeof(b->first_error), "%s: %s", what, detail ? detail : "?");
    fprintf(stderr, "bench_tunnel_agents: first error: %s\n", b->first_error);
}

/* --- one agent ----------------------------------------------------------------- */

static void sim_teardown(struct sim_agent *a)
{
    if (a->s) {
        tun_session_free(a->s);
        a->s = NULL;
    }
    if (a->ws_inited) {
        tun_ws_fini(&a->ws);
        a->ws_inited = false;
    }
    a->wsi = NULL;
}

/* The connection is gone (refused, failed or closed): account and retry. */
static void sim_lost(struct sim_agent *a)
{
    struct bench *b = a->b;
    if (a->state == SIM_CONNECTING || a->state == SIM_HELLO)
        b->connecting--;
    else if (a->state == SIM_ESTABLISHED) {
        b->established--;
        b->drops++;
    }
    sim_teardown(a);
    if (b->stopping || a->idx >= b->target) {
        a->state = SIM_IDLE;
        return;
    }
    a->state = SIM_RETRY;
    a->retry_at_ms = ab_now_ms() + BENCH_RETRY_MS;
    b->retrying++;
}

/* A REPORT as the agent's reporter sends it (DESIGN §6): the full set of
 * (namespace, env, pool) records with capacity figures and sample age. */
static json_t *build_report(struct sim_agent *a)
{
    static const char *const envs[] = {"python-3-11", "node-20", "go-1-22", "base", "jupyter"};
    static const char *const nss[] = {"team-a", "team-b"};
    json_t *recs = json_array();
    for (int i = 0; i < BENCH_RECORDS && recs; i++) {
        char pool[64];
        const char *env = envs[i % 5];
        snprintf(pool, sizeof(pool), "%s-pool-%d", env, i / 5);
        int idle = (int)((a->report_seq + (uint32_t)i) % 4);
        json_array_append_new(recs, json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:b,s:i,s:I,s:i}",
                                              "namespace", nss[i % 2], "env", env, "pool", pool,
                                              "scalingGroup", i % 3 == 0 ? "gpu-a100" : "", "idle",
                                              idle, "running", 8 + i, "pending", i % 2, "desired",
                                              8 + i + idle, "autoscaling", i % 2 == 0, "headroom",
                                              i % 4 == 0 ? -1 : 16 - i, "saturatedForMs",
                                              (json_int_t)(idle == 0 ? 1500 : 0), "ageMs", 40 + i));
    }
    json_t *r = json_pack("{s:s,s:I,s:b,s:o}", "cluster", a->id, "seq", (json_int_t)a->report_seq,
                          "full", 1, "records", recs);
    a->report_seq++;
    return r;
}

static void sim_report(struct sim_agent *a)
{
    json_t *r = build_report(a);
    if (!r)
        return;
    if (tun_session_send_json(a->s, TUN_REPORT, r) == 0) {
        a->b->reports++;
        tun_ws_want_write(&a->ws);
    }
    json_decref(r);
}

static void print_ready(struct bench *b)
{
    int64_t ramp_ms = ab_now_ms() - b->ramp_start_ms;
    int64_t p50 = quantile(b->hs_us, b->nhs, 0.50), p99 = quantile(b->hs_us, b->nhs, 0.99);
    printf("{\"event\":\"ready\",\"target\":%d,\"established\":%d,\"ramp_ms\":%lld,"
           "\"handshake_p50_ms\":%.2f,\"handshake_p99_ms\":%.2f,\"refused\":%llu,"
           "\"drops\":%llu}\n",
           b->target, b->established, (long long)ramp_ms, (double)p50 / 1000.0,
           (double)p99 / 1000.0, (unsigned long long)b->refused, (unsigned long long)b->drops);
    fflush(stdout);
    b->ramping = false;
}

static void on_welcome(struct tun_session *s, json_t *msg, void *arg)
{
    struct sim_agent *a = arg;
    struct bench *b = a->b;
    if (a->state != SIM_HELLO)
        return;
    a->state = SIM_ESTABLISHED;
    b->connecting--;
    b->established++;
    if (b->nhs < BENCH_AGENTS_MAX)
        b->hs_us[b->nhs++] = ab_now_us() - a->connect_started_us;
    if (b->ramping && b->established >= b->target)
        print_ready(b);
}

static void want_write(struct tun_session *s, void *arg)
{
    struct sim_agent *a = arg;
    if (a->wsi && a->ws_inited)
        tun_ws_want_write(&a->ws);
}

static int sim_established(struct sim_agent *a, struct lws *wsi)
{
    struct bench *b = a->b;
    struct tun_config cfg;
    char err[128] = "";
    memset(&cfg, 0, sizeof(cfg));
    cfg.role = TUN_ROLE_AGENT;
    cfg.cb = &b->cb;
    cfg.arg = a;
    a->wsi = wsi;
    if (tun_session_new(&cfg, &a->s, err, sizeof(err)) != 0) {
        note_error(b, "tun_session_new", err);
        return -1;
    }
    if (tun_ws_init(&a->ws, wsi, a->s) != 0) {
        note_error(b, "tun_ws_init", "out of memory");
        return -1;
    }
    a->ws_inited = true;
    a->state = SIM_HELLO;
    json_t *hello = json_pack("{s:s,s:s,s:i,s:[s,s,s]}", "cluster", a->id, "version", "bench-0.1.0",
                              "protocol", 1, "services", "e2b", "data", "native");
    int rc = tun_session_send_json(a->s, TUN_HELLO, hello);
    json_decref(hello);
    if (rc != 0) {
        note_error(b, "HELLO", ab_strerror(rc));
        return -1;
    }
    tun_ws_want_write(&a->ws);
    return 0;
}

static int client_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
    struct sim_agent *a = lws_get_opaque_user_data(wsi);
    if (!a)
        return 0;
    struct bench *b = a->b;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
        unsigned char **p = (unsigned char **)in, *end = (*p) + len;
        if (lws_add_http_header_by_name(
                wsi, (const unsigned char *)"authorization:", (const unsigned char *)a->auth,
                (int)strlen(a->auth), p, end) ||
            lws_add_http_header_by_name(wsi, (const unsigned char *)"x-agentbox-cluster:",
                                        (const unsigned char *)a->id, (int)strlen(a->id), p, end))
            return -1;
        return 0;
    }
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        char why[200];
        unsigned status = lws_http_client_http_response(wsi);
        snprintf(why, sizeof(why), "%s (HTTP %u)", in ? (const char *)in : "connection failed",
                 status);
        note_error(b, a->id, why);
        b->refused++;
        lws_set_opaque_user_data(wsi, NULL);
        sim_lost(a);
        return 0;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        return sim_established(a, wsi);
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (!a->s || a->ws.closing)
            return 0;
        if (tun_ws_receive(&a->ws, in, len, lws_is_first_fragment(wsi),
                           lws_is_final_fragment(wsi)) < 0) {
            b->frames_in_err++;
            note_error(b, "tunnel input", tun_session_error(a->s));
            return -1;
        }
        return 0;
    case LWS_CALLBACK_CLIENT_RECEIVE_PONG: {
        if (!a->ws_inited)
            return 0;
        bool outstanding = a->ws.ping_sent_us != 0;
        tun_ws_pong(&a->ws);
        b->pongs++;
        if (outstanding && b->nrtt < BENCH_RTT_MAX)
            b->rtt_us[b->nrtt++] = a->ws.last_rtt_us;
        return 0;
    }
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        if (!a->s || !a->ws_inited)
            return -1;
        return tun_ws_writeable(&a->ws);
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len > 2) {
            char r[128];
            snprintf(r, sizeof(r), "hub closed the tunnel: %.*s", (int)AB_MIN(len - 2, 100),
                     (const char *)in + 2);
            note_error(b, a->id, r);
        }
        return 0;
    case LWS_CALLBACK_CLIENT_CLOSED:
        lws_set_opaque_user_data(wsi, NULL);
        sim_lost(a);
        return 0;
    default:
        return 0;
    }
}

static void sim_connect(struct sim_agent *a)
{
    struct bench *b = a->b;
    struct lws_client_connect_info i;
    memset(&i, 0, sizeof(i));
    i.context = loop_lws(b->loop);
    i.vhost = b->vh;
    i.address = b->host;
    i.port = b->port;
    i.path = "/v1/tunnel";
    i.host = b->host;
    i.origin = b->host;
    i.protocol = BENCH_PROTOCOL;
    i.local_protocol_name = BENCH_PROTOCOL;
    i.opaque_user_data = a;
    a->state = SIM_CONNECTING;
    a->connect_started_us = ab_now_us();
    b->connecting++;
    struct lws *w = lws_client_connect_via_info(&i);
    if (a->state != SIM_CONNECTING)
        return; /* CONNECTION_ERROR already ran inside the call */
    a->wsi = w;
    if (!w) {
        /* failed synchronously; CONNECTION_ERROR may or may not have run */
        note_error(b, a->id, "lws_client_connect_via_info failed");
        b->refused++;
        sim_lost(a);
    }
}

/* --- timers ---------------------------------------------------------------------- */

static void ramp_tick(struct loop_timer *t)
{
    struct bench *b = t->arg;
    if (b->stopping)
        return;
    int64_t elapsed = ab_now_ms() - b->ramp_start_ms;
    int allowed = b->ramp_from + (int)(b->rate * (double)elapsed / 1000.0) + 1;
    while (b->next < b->target && b->next < allowed && b->connecting < BENCH_CONNECTING_MAX) {
        struct sim_agent *a = &b->agents[b->next++];
        if (a->state == SIM_IDLE)
            sim_connect(a);
    }
    if (b->next < b->target)
        loop_timer_start(b->loop, &b->ramp_timer, BENCH_RAMP_TICK_MS, ramp_tick, b);
}

static void main_tick(struct loop_timer *t)
{
    struct bench *b = t->arg;
    if (b->stopping)
        return;
    uint64_t k = b->tick++;
    if (b->tick_due_us && b->nlate < BENCH_RTT_MAX)
        b->late_us[b->nlate++] = AB_MAX(0, ab_now_us() - b->tick_due_us);
    for (int i = (int)(k % BENCH_REPORT_TICKS); !b->holding && i < b->nagents;
         i += BENCH_REPORT_TICKS)
        if (b->agents[i].state == SIM_ESTABLISHED)
            sim_report(&b->agents[i]);
    for (int i = (int)(k % BENCH_PING_TICKS); i < b->nagents; i += BENCH_PING_TICKS)
        if (b->agents[i].state == SIM_ESTABLISHED) {
            tun_ws_ping(&b->agents[i].ws);
            b->pings++;
        }
    if (b->retrying > 0) {
        int64_t now = ab_now_ms();
        for (int i = 0; i < b->nagents && b->connecting < BENCH_CONNECTING_MAX; i++) {
            struct sim_agent *a = &b->agents[i];
            if (a->state == SIM_RETRY && now >= a->retry_at_ms) {
                b->retrying--;
                sim_connect(a);
            }
        }
    }
    if (k % 10 == 0)
        fprintf(stderr,
                "agents: target=%d established=%d connecting=%d retrying=%d "
                "refused=%llu drops=%llu reports=%llu\n",
                b->target, b->established, b->connecting, b->retrying,
                (unsigned long long)b->refused, (unsigned long long)b->drops,
                (unsigned long long)b->reports);
    b->tick_due_us = ab_now_us() + BENCH_TICK_MS * 1000;
    loop_timer_start(b->loop, &b->tick_timer, BENCH_TICK_MS, main_tick, b);
}

/* --- commands ---------------------------------------------------------------------- */

static void print_stats(struct bench *b)
{
    int64_t p50 = quantile(b->rtt_us, b->nrtt, 0.50), p99 = quantile(b->rtt_us, b->nrtt, 0.99);
    int64_t rmax = b->nrtt ? b->rtt_us[b->nrtt - 1] : 0; /* sorted by quantile() */
    int64_t l99 = quantile(b->late_us, b->nlate, 0.99);
    int64_t lmax = b->nlate ? b->late_us[b->nlate - 1] : 0;
    printf("{\"event\":\"stats\",\"target\":%d,\"established\":%d,\"connecting\":%d,"
           "\"retrying\":%d,\"refused\":%llu,\"drops\":%llu,\"reports\":%llu,\"pings\":%llu,"
           "\"pongs\":%llu,\"ping_rtt_n\":%zu,\"ping_rtt_p50_ms\":%.3f,\"ping_rtt_p99_ms\":%.3f,"
           "\"ping_rtt_max_ms\":%.3f,\"lag_p99_ms\":%.3f,\"lag_max_ms\":%.3f,"
           "\"first_error\":\"%s\"}\n",
           b->target, b->established, b->connecting, b->retrying, (unsigned long long)b->refused,
           (unsigned long long)b->drops, (unsigned long long)b->reports,
           (unsigned long long)b->pings, (unsigned long long)b->pongs, b->nrtt,
           (double)p50 / 1000.0, (double)p99 / 1000.0, (double)rmax / 1000.0, (double)l99 / 1000.0,
           (double)lmax / 1000.0, b->first_error);
    fflush(stdout);
    b->nrtt = 0;
    b->nlate = 0;
}

static void set_target(struct bench *b, int n)
{
    if (n > b->nagents) {
        fprintf(stderr, "target %d is more than the %d agents in the file; using %d\n", n,
                b->nagents, b->nagents);
        n = b->nagents;
    }
    if (n <= b->target) {
        fprintf(stderr, "target %d: only growing is supported (now %d)\n", n, b->target);
        return;
    }
    b->target = n;
    b->ramping = true;
    b->ramp_start_ms = ab_now_ms();
    b->ramp_from = b->next;
    b->nhs = 0;
    loop_timer_start(b->loop, &b->ramp_timer, 0, ramp_tick, b);
}

static void stop_all(struct bench *b)
{
    b->stopping = true;
    loop_timer_cancel(&b->tick_timer);
    loop_timer_cancel(&b->ramp_timer);
    for (int i = 0; i < b->nagents; i++) {
        struct sim_agent *a = &b->agents[i];
        if (a->wsi) /* the context closes it later: it must not find us */
            lws_set_opaque_user_data(a->wsi, NULL);
        sim_teardown(a);
        a->state = SIM_IDLE;
    }
    loop_stop(b->loop);
}

struct command {
    struct bench *b;
    char line[BENCH_LINE_MAX];
};

static void run_command(void *arg, int status)
{
    struct command *c = arg;
    struct bench *b = c->b;
    int n;
    if (status == 0 && !b->stopping) {
        if (sscanf(c->line, "target %d", &n) == 1)
            set_target(b, n);
        else if (strncmp(c->line, "stats", 5) == 0)
            print_stats(b);
        else if (strncmp(c->line, "hold", 4) == 0)
            b->holding = true;
        else if (strncmp(c->line, "quit", 4) == 0)
            stop_all(b);
        else
            fprintf(stderr, "unknown command '%s' (target N, stats, hold, quit)\n", c->line);
    }
    free(c);
}

static void *stdin_main(void *arg)
{
    struct bench *b = arg;
    char line[BENCH_LINE_MAX];
    while (fgets(line, sizeof(line), stdin)) {
        struct command *c = calloc(1, sizeof(*c));
        if (!c)
            break;
        c->b = b;
        ab_strlcpy(c->line, line, sizeof(c->line));
        c->line[strcspn(c->line, "\r\n")] = '\0';
        if (loop_post(b->loop, run_command, c) != 0)
            free(c);
    }
    /* stdin closed: the driver went away */
    struct command *q = calloc(1, sizeof(*q));
    if (q) {
        q->b = b;
        ab_strlcpy(q->line, "quit", sizeof(q->line));
        if (loop_post(b->loop, run_command, q) != 0)
            free(q);
    }
    return NULL;
}

/* --- setup ------------------------------------------------------------------------- */

static int load_agents(struct bench *b, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open --agents file '%s'\n", path);
        return AB_EIO;
    }
    char line[512], id[64], token[200];
    int rc = 0;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%63s %199s", id, token) != 2)
            continue;
        if (b->nagents >= BENCH_AGENTS_MAX) {
            fprintf(stderr, "--agents file has more than %d agents\n", BENCH_AGENTS_MAX);
            rc = AB_ELIMIT;
            break;
        }
        struct sim_agent *a = &b->agents[b->nagents];
        a->b = b;
        a->idx = b->nagents++;
        ab_strlcpy(a->id, id, sizeof(a->id));
        snprintf(a->auth, sizeof(a->auth), "Bearer %s", token);
    }
    fclose(f);
    if (rc == 0 && b->nagents == 0) {
        fprintf(stderr, "--agents file '%s' lists no 'ID TOKEN' lines\n", path);
        rc = AB_EINVAL;
    }
    return rc;
}

static int parse_hub(struct bench *b, const char *url)
{
    if (strncmp(url, "ws://", 5) != 0) {
        fprintf(stderr, "--hub must be ws://HOST:PORT, got '%s'\n", url);
        return AB_EINVAL;
    }
    const char *hp = url + 5, *colon = strrchr(hp, ':');
    if (!colon || (size_t)(colon - hp) >= sizeof(b->host)) {
        fprintf(stderr, "--hub must be ws://HOST:PORT, got '%s'\n", url);
        return AB_EINVAL;
    }
    memcpy(b->host, hp, (size_t)(colon - hp));
    b->host[colon - hp] = '\0';
    b->port = atoi(colon + 1);
    if (b->port <= 0 || b->port > 65535) {
        fprintf(stderr, "--hub has a bad port: '%s'\n", url);
        return AB_EINVAL;
    }
    return 0;
}

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < BENCH_AGENTS_MAX + 64)
        fprintf(stderr, "note: open files limit is %llu; raise it (ulimit -n) for more agents\n",
                (unsigned long long)rl.rlim_cur);
}

int main(int argc, char **argv)
{
    const char *hub = NULL, *agents = NULL;
    double rate = 200;
    int rc = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--hub") == 0)
            hub = argv[i + 1];
        else if (strcmp(argv[i], "--agents") == 0)
            agents = argv[i + 1];
        else if (strcmp(argv[i], "--rate") == 0)
            rate = atof(argv[i + 1]);
    }
    if (!hub || !agents || rate <= 0) {
        fprintf(stderr,
                "usage: %s --hub ws://HOST:PORT --agents FILE [--rate CONNECTS_PER_S]\n"
                "FILE: one 'CLUSTER_ID TOKEN' per line. Commands on stdin: target N, "
                "stats, quit.\n",
                argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    log_set_level(LOG_LEVEL_WARN);

    struct bench *b = calloc(1, sizeof(*b));
    if (!b)
        return 1;
    b->rate = rate;
    b->agents = calloc(BENCH_AGENTS_MAX, sizeof(*b->agents));
    b->rtt_us = calloc(BENCH_RTT_MAX, sizeof(*b->rtt_us));
    b->hs_us = calloc(BENCH_AGENTS_MAX, sizeof(*b->hs_us));
    b->late_us = calloc(BENCH_RTT_MAX, sizeof(*b->late_us));
    if (!b->agents || !b->rtt_us || !b->hs_us || !b->late_us || parse_hub(b, hub) != 0 ||
        load_agents(b, agents) != 0)
        goto out;

    struct loop_options lo = {.workers = 1};
    b->loop = loop_new(&lo);
    if (!b->loop)
        goto out;
    b->cb.on_welcome = on_welcome;
    b->cb.want_write = want_write;
    b->protocols[0].name = BENCH_PROTOCOL;
    b->protocols[0].callback = client_cb;
    b->protocols[0].rx_buffer_size = 64 * 1024;
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.vhost_name = "bench-agents";
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = b->protocols;
    b->vh = lws_create_vhost(loop_lws(b->loop), &info);
    if (!b->vh) {
        fprintf(stderr, "cannot create the client vhost\n");
        goto out;
    }
    pthread_t reader;
    if (pthread_create(&reader, NULL, stdin_main, b) != 0)
        goto out;
    pthread_detach(reader);
    fprintf(stderr, "bench_tunnel_agents: %d agents loaded, hub %s:%d, ramp %.0f/s\n", b->nagents,
            b->host, b->port, b->rate);
    loop_timer_start(b->loop, &b->tick_timer, BENCH_TICK_MS, main_tick, b);
    loop_run(b->loop);
    rc = 0;
out:
    if (b->loop)
        loop_free(b->loop);
    free(b->agents);
    free(b->rtt_us);
    free(b->hs_us);
    free(b->late_us);
    free(b);
    return rc;
}
