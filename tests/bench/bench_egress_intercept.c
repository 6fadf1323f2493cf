/* bench_egress_intercept: what interception with header injection costs
 * (issue 12 "Benchmark": intercepted HTTPS request rate), against the
 * spliced path measured in the same interleaved rounds.
 *
 * Everything runs in this process over memory BIOs, so the figures are the
 * CPU cost of the gateway's work, not of sockets:
 *   spliced      a TLS client talking straight to the TLS server: what a
 *                spliced connection costs end to end (the gateway only copies
 *                bytes, which is not measured)
 *   intercepted  the same client through egress_intercept: TLS terminated
 *                with the per-sandbox leaf, every request head parsed and
 *                rewritten with a secret filled in, TLS again to the server
 * for two shapes: keep-alive requests on one connection (requests/s), and a
 * new connection per request (full handshakes; connections/s). Prints the
 * median of each round's rate and the ratio intercepted / spliced.
 * Usage: bench_egress_intercept [requests per round] [rounds] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "agent/egress/ca.h"
#include "agent/egress/intercept.h"
#include "agent/egress/secrets.h"
#include "agentbox/common.h"

#define HOST "api.example.com"
static const char REQ[] = "POST /v1/chat/completions HTTP/1.1\r\nHost: api.example.com\r\n"
                          "Authorization: Bearer decoy\r\nContent-Type: application/json\r\n"
                          "Content-Length: 27\r\n\r\n{\"model\":\"m\",\"messages\":[]}";
static const char RESP[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

static struct egress_ca *g_sbx_ca, *g_up_ca;
static SSL_CTX *g_client_ctx, *g_cli_ctx;
static struct egress_secrets *g_secrets;
static struct egress_rule g_rule;

struct conn {
    SSL *cli, *srv;
    struct egress_intercept *x; /* NULL: spliced */
};

static SSL *mem_ssl(SSL_CTX *ctx)
{
    SSL *s = SSL_new(ctx);
    SSL_set_bio(s, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
    return s;
}

static void xfer_bio(BIO *from, BIO *to)
{
    uint8_t b[16384];
    int n;
    while ((n = BIO_read(from, b, sizeof(b))) > 0)
        BIO_write(to, b, n);
}

/* Moves every pending byte until nothing moves. */
static int pump(struct conn *c)
{
    uint8_t b[16384];
    for (int round = 0; round < 1000; round++) {
        size_t before =
            BIO_ctrl_pending(SSL_get_wbio(c->cli)) + BIO_ctrl_pending(SSL_get_wbio(c->srv));
        size_t moved = 0;
        if (!c->x) {
            moved = before;
            xfer_bio(SSL_get_wbio(c->cli), SSL_get_rbio(c->srv));
            xfer_bio(SSL_get_wbio(c->srv), SSL_get_rbio(c->cli));
        } else {
            int n;
            size_t t;
            while ((n = BIO_read(SSL_get_wbio(c->cli), b, sizeof(b))) > 0) {
                if (egress_intercept_feed(c->x, EGRESS_SIDE_SANDBOX, b, (size_t)n) != 0)
                    return -1;
                moved += (size_t)n;
            }
            while ((n = BIO_read(SSL_get_wbio(c->srv), b, sizeof(b))) > 0) {
                if (egress_intercept_feed(c->x, EGRESS_SIDE_UPSTREAM, b, (size_t)n) != 0)
                    return -1;
                moved += (size_t)n;
            }
            while ((t = egress_intercept_take(c->x, EGRESS_SIDE_UPSTREAM, b, sizeof(b))) > 0)
                BIO_write(SSL_get_rbio(c->srv), b, (int)t), moved += t;
            while ((t = egress_intercept_take(c->x, EGRESS_SIDE_SANDBOX, b, sizeof(b))) > 0)
                BIO_write(SSL_get_rbio(c->cli), b, (int)t), moved += t;
        }
        SSL_do_handshake(c->cli);
        SSL_do_handshake(c->srv);
        if (!moved && !BIO_ctrl_pending(SSL_get_wbio(c->cli)) &&
            !BIO_ctrl_pending(SSL_get_wbio(c->srv)))
            return 0;
    }
    return -1;
}

static int conn_open(struct conn *c, bool intercepted)
{
    memset(c, 0, sizeof(*c));
    c->cli = mem_ssl(g_cli_ctx);
    SSL_set_connect_state(c->cli);
    SSL_set_tlsext_host_name(c->cli, HOST);
    SSL_set1_host(c->cli, HOST);
    c->srv = mem_ssl(egress_ca_server_ctx(g_up_ca));
    SSL_set_accept_state(c->srv);
    if (intercepted) {
        struct egress_intercept_deps d = {.host = HOST,
                                          .rule = &g_rule,
                                          .secrets = g_secrets,
                                          .tls = true,
                                          .server_ctx = egress_ca_server_ctx(g_sbx_ca),
                                          .client_ctx = g_client_ctx};
        c->x = egress_intercept_new(&d);
        if (!c->x)
            return -1;
    }
    return pump(c);
}

static void conn_close(struct conn *c)
{
    egress_intercept_free(c->x);
    SSL_free(c->cli);
    SSL_free(c->srv);
}

static int one_request(struct conn *c)
{
    char b[4096];
    if (SSL_write(c->cli, REQ, sizeof(REQ) - 1) != (int)sizeof(REQ) - 1 || pump(c) != 0)
        return -1;
    int n = SSL_read(c->srv, b, sizeof(b));
    if (n <= 0)
        return -1;
    if (SSL_write(c->srv, RESP, sizeof(RESP) - 1) != (int)sizeof(RESP) - 1 || pump(c) != 0)
        return -1;
    n = SSL_read(c->cli, b, sizeof(b));
    return n == (int)sizeof(RESP) - 1 ? 0 : -1;
}

static double keepalive_rate(bool intercepted, int per)
{
    struct conn c;
    if (conn_open(&c, intercepted) != 0)
        return -1;
    int64_t t0 = ab_now_us();
    for (int i = 0; i < per; i++)
        if (one_request(&c) != 0) {
            conn_close(&c);
            return -1;
        }
    double s = (double)(ab_now_us() - t0) / 1e6;
    conn_close(&c);
    return per / s;
}

static double newconn_rate(bool intercepted, int per)
{
    int64_t t0 = ab_now_us();
    for (int i = 0; i < per; i++) {
        struct conn c;
        if (conn_open(&c, intercepted) != 0 || one_request(&c) != 0) {
            conn_close(&c);
            return -1;
        }
        conn_close(&c);
    }
    return per / ((double)(ab_now_us() - t0) / 1e6);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static void print_env(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (f != NULL) {
        if (fgets(load, sizeof(load), f) == NULL)
            snprintf(load, sizeof(load), "?");
        fclose(f);
        load[strcspn(load, "\n")] = '\0';
    }
    printf("cpus %ld, load average %s\n", sysconf(_SC_NPROCESSORS_ONLN), load);
}

int main(int argc, char **argv)
{
    int per = argc > 1 ? atoi(argv[1]) : 2000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    char err[256], path[64];
    if (per < 1 || rounds < 1 || rounds > 100) {
        fprintf(stderr, "usage: bench_egress_intercept [requests per round] [rounds <= 100]\n");
        return 2;
    }
    struct egress_ca_deps d = {.sandbox_id = "isbx-bench"};
    g_sbx_ca = egress_ca_new(&d);
    d.sandbox_id = "bench-upstream";
    g_up_ca = egress_ca_new(&d);
    snprintf(path, sizeof(path), "/tmp/bench-egress-ca-%d.pem", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!g_sbx_ca || !g_up_ca || !f)
        return 1;
    fputs(egress_ca_cert_pem(g_up_ca), f);
    fclose(f);
    g_client_ctx = egress_intercept_client_ctx(path, err, sizeof(err));
    unlink(path);
    g_cli_ctx = SSL_CTX_new(TLS_client_method());
    if (!g_client_ctx || !g_cli_ctx)
        return 1;
    X509_STORE_add_cert(SSL_CTX_get_cert_store(g_cli_ctx), egress_ca_cert(g_sbx_ca));
    X509_STORE_add_cert(SSL_CTX_get_cert_store(g_cli_ctx), egress_ca_cert(g_up_ca));
    SSL_CTX_set_verify(g_cli_ctx, SSL_VERIFY_PEER, NULL);
    g_secrets = egress_secrets_new();
    const char *val = "sk-bench-0123456789abcdef0123456789abcdef";
    if (egress_secrets_set(g_secrets, "OPENAI", val, strlen(val), err, sizeof(err)) != 0)
        return 1;
    snprintf(g_rule.host, sizeof(g_rule.host), HOST);
    g_rule.n_headers = 1;
    snprintf(g_rule.headers[0].name, sizeof(g_rule.headers[0].name), "Authorization");
    snprintf(g_rule.headers[0].value, sizeof(g_rule.headers[0].value),
             "Bearer ${e2b.secrets.OPENAI}");

    print_env();
    int conns = per / 10 > 0 ? per / 10 : 1;
    double *ks = calloc((size_t)rounds, sizeof(double)),
           *ki = calloc((size_t)rounds, sizeof(double));
    double *cs = calloc((size_t)rounds, sizeof(double)),
           *ci = calloc((size_t)rounds, sizeof(double));
    if (!ks || !ki || !cs || !ci)
        return 1;
    for (int r = 0; r < rounds; r++) {
        ks[r] = keepalive_rate(false, per);
        ki[r] = keepalive_rate(true, per);
        cs[r] = newconn_rate(false, conns);
        ci[r] = newconn_rate(true, conns);
        if (ks[r] < 0 || ki[r] < 0 || cs[r] < 0 || ci[r] < 0) {
            fprintf(stderr, "bench_egress_intercept: a request failed\n");
            return 1;
        }
    }
    double mks = median(ks, rounds), mki = median(ki, rounds);
    double mcs = median(cs, rounds), mci = median(ci, rounds);
    printf("%d rounds, %d keep-alive requests and %d new connections per round per path\n", rounds,
           per, conns);
    printf("%-34s %12s %12s %8s\n", "", "spliced", "intercepted", "ratio");
    printf("%-34s %12.0f %12.0f %8.2f\n", "keep-alive requests/s (1 conn)", mks, mki, mki / mks);
    printf("%-34s %12.0f %12.0f %8.2f\n", "new connection + 1 request /s", mcs, mci, mci / mcs);
    printf("%-34s %12.1f %12.1f\n", "µs per keep-alive request", 1e6 / mks, 1e6 / mki);
    printf("%-34s %12.1f %12.1f\n", "µs per new connection", 1e6 / mcs, 1e6 / mci);
    free(ks), free(ki), free(cs), free(ci);
    egress_secrets_free(g_secrets);
    SSL_CTX_free(g_client_ctx);
    SSL_CTX_free(g_cli_ctx);
    egress_ca_free(g_sbx_ca);
    egress_ca_free(g_up_ca);
    return 0;
}
