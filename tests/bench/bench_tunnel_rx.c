/* bench_tunnel_rx: CPU per MB of the tunnel's raw-socket framing
 * (tunnel_wsl.h) in one process, without sockets: an agent's session writes
 * DATA on one stream, its tun_wsl encodes (masked), the hub's tun_wsl reads
 * it in 64 KiB pieces (what lws hands RAW_RX) into the hub's session, whose
 * on_data consumes at once; then the same the other way (the hub sends
 * unmasked, the agent reads). CPU time (CLOCK_PROCESS_CPUTIME_ID) is counted
 * separately for the encode and the receive side, so a loaded machine
 * changes the figures little (it steals wall time, not CPU time).
 *
 * It uses only the API both the old framing (wslay receives) and the new
 * one (tunnel_wsframe.h) have, so the same file builds against either and
 * the two can be compared back to back. Usage:
 *   bench_tunnel_rx [MiB per round] [rounds] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agentbox/common.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_wsl.h"

#define PIECE (64 * 1024)

struct end {
    struct tun_wsl w;
    struct tun_session *s;
    struct tun_stream *st; /* the one stream */
    uint64_t rx;
};

static void on_hello(struct tun_session *s, json_t *msg, void *arg)
{
    json_t *w = json_pack("{s:i}", "epoch", 1);
    tun_session_send_json(s, TUN_WELCOME, w);
    json_decref(w);
}

static void on_open(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    struct end *e = arg;
    e->st = st;
    tun_stream_respond(st, 200, NULL, 0);
}

static void on_data(struct tun_stream *st, const uint8_t *data, size_t len, void *arg)
{
    struct end *e = arg;
    e->rx += len;
    tun_stream_consumed(st, len);
}

static const struct tun_callbacks cbs = {
    .on_hello = on_hello, .on_open = on_open, .on_data = on_data};

static void end_init(struct end *e, bool hub)
{
    char err[128];
    memset(e, 0, sizeof(*e));
    struct tun_config c = {.role = hub ? TUN_ROLE_HUB : TUN_ROLE_AGENT,
                           .window = TUN_BULK_WINDOW,
                           .cb = &cbs,
                           .arg = e};
    if (tun_session_new(&c, &e->s, err, sizeof(err)) != 0 || tun_wsl_init(&e->w, NULL, hub) != 0) {
        fprintf(stderr, "setup: %s\n", err);
        exit(1);
    }
    tun_wsl_start(&e->w, e->s);
}

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double enc_s, rx_s;

/* Encodes what from has and feeds it to to in PIECE-sized reads. */
static void pump(struct end *from, struct end *to)
{
    static uint8_t piece[PIECE];
    for (;;) {
        double t0 = cpu_s();
        if (tun_wsl_encode(&from->w) != 0) {
            fprintf(stderr, "encode failed\n");
            exit(1);
        }
        double t1 = cpu_s();
        enc_s += t1 - t0;
        if (from->w.outlen == 0)
            return;
        for (size_t o = 0; o < from->w.outlen; o += PIECE) {
            size_t n = AB_MIN((size_t)PIECE, from->w.outlen - o);
            /* the socket's copy into lws's buffer, outside the timing */
            memcpy(piece, from->w.out + o, n);
            double r0 = cpu_s();
#ifdef TUN_WS_CONTROL_MAX /* the new framing: lws's buffer is unmasked in place */
            int rc = tun_wsl_rx_inplace(&to->w, piece, n);
#else
            int rc = tun_wsl_rx(&to->w, piece, n);
#endif
            rx_s += cpu_s() - r0;
            if (rc != 0) {
                fprintf(stderr, "rx failed: %s\n", to->w.err ? to->w.err : "?");
                exit(1);
            }
        }
        from->w.outlen = 0;
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Moves mib MiB from -> to over st (from's stream); returns CPU ms per MB
 * of encoding and of receiving in enc and rx. */
static void transfer(struct end *from, struct end *to, struct tun_stream *st, size_t mib,
                     double *enc, double *rx)
{
    static uint8_t chunk[64 * 1024];
    uint64_t want = (uint64_t)mib << 20, sent = 0, start = to->rx;
    enc_s = rx_s = 0;
    while (to->rx - start < want) {
        while (sent < want && tun_stream_pending(st) < TUN_STREAM_HIGH_WATER) {
            size_t n = (size_t)AB_MIN((uint64_t)sizeof(chunk), want - sent);
            double t0 = cpu_s();
            if (tun_stream_write(st, chunk, n) != 0)
                break;
            enc_s += cpu_s() - t0;
            sent += n;
        }
        pump(from, to);
        pump(to, from); /* WINDOWs back */
    }
    double mb = (double)want / 1e6;
    *enc = enc_s * 1000 / mb;
    *rx = rx_s * 1000 / mb;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 256;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (mib == 0 || rounds <= 0 || rounds > 100) {
        fprintf(stderr, "usage: bench_tunnel_rx [MiB per round] [rounds ≤ 100]\n");
        return 2;
    }
    struct end *agent = calloc(1, sizeof(*agent)), *hub = calloc(1, sizeof(*hub));
    end_init(agent, false);
    end_init(hub, true);
    json_t *hello = json_pack("{s:s}", "cluster", "bench");
    tun_session_send_json(agent->s, TUN_HELLO, hello);
    json_decref(hello);
    pump(agent, hub);
    pump(hub, agent);
    struct tun_head h = {.service = "native", .method = "GET", .path = "/"};
    if (tun_stream_open(agent->s, &h, agent, &agent->st) != 0) {
        fprintf(stderr, "open failed\n");
        return 1;
    }
    pump(agent, hub);
    pump(hub, agent);
    if (!hub->st) {
        fprintf(stderr, "the hub did not see the stream\n");
        return 1;
    }
    double up_enc[100], up_rx[100], down_enc[100], down_rx[100];
    for (int r = 0; r < rounds; r++) {
        transfer(agent, hub, agent->st, mib, &up_enc[r], &up_rx[r]);
        transfer(hub, agent, hub->st, mib, &down_enc[r], &down_rx[r]);
    }
    qsort(up_enc, (size_t)rounds, sizeof(double), cmp);
    qsort(up_rx, (size_t)rounds, sizeof(double), cmp);
    qsort(down_enc, (size_t)rounds, sizeof(double), cmp);
    qsort(down_rx, (size_t)rounds, sizeof(double), cmp);
    printf("# bench_tunnel_rx: %zu MiB per round, %d rounds, CPU ms per MB (median)\n", mib,
           rounds);
    printf("agent -> hub (masked):   encode %.3f  receive %.3f\n", up_enc[rounds / 2],
           up_rx[rounds / 2]);
    printf("hub -> agent (unmasked): encode %.3f  receive %.3f\n", down_enc[rounds / 2],
           down_rx[rounds / 2]);
    tun_wsl_fini(&agent->w);
    tun_wsl_fini(&hub->w);
    tun_session_free(agent->s);
    tun_session_free(hub->s);
    free(agent);
    free(hub);
    return 0;
}
