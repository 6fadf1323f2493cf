/* The intercept engine (agent/egress/intercept.c, http_head.c, secrets.c):
 * a sandbox TLS client, the intercept and a fake upstream TLS server (its own
 * CA, handed to the intercept as the extra bundle), all over memory BIOs in
 * this process. The upstream receives the rule's header with the secret
 * filled in and never the decoy; every request of a keep-alive connection is
 * rewritten; bodies pass intact; an untrusted or misnamed upstream, a Host
 * other than the rule's, and smuggling shapes end the connection before any
 * request byte reaches the upstream. Plain HTTP gets the same rewrite.
 *
 * With arguments it is the gateway (with interception and the proxy) that
 * tests/integration/egress_intercept.test.mjs runs as root, like
 * test_agent_egress_gateway's driver:
 *   serve NAME RANGE TCP DNS NETWORK_JSON RESOLVER:PORT UPSTREAM_CA SECRETS_JSON CA_OUT
 * Every sandbox of RANGE gets the one policy (internet on), the one CA (its
 * certificate written to CA_OUT) and the secrets of SECRETS_JSON ({name:
 * value}); UPSTREAM_CA is the extra bundle for upstreams ("-": none). Prints
 * "ready", then a JSON line per refusal; SIGTERM stops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/egress/ca.h"
#include "agent/egress/http_head.h"
#include "agent/egress/intercept.h"
#include "agent/egress/secrets.h"
#include "agentbox/buf.h"
#include "agentbox/common.h"

#define HOST "api.example.com"
#define SECRET "sk-live-0123456789abcdef"

struct world {
    struct egress_ca *sbx_ca; /* the sandbox's CA (the gateway's) */
    struct egress_ca *up_ca;  /* the upstream's own CA */
    char up_ca_path[64];
    SSL_CTX *client_ctx; /* the intercept's upstream context */
    SSL_CTX *cli_ctx;    /* the sandbox's TLS client */
    SSL_CTX *srv_ctx;    /* the upstream server, when not up_ca's */
    struct egress_secrets *secrets;
    struct egress_rule rule;
    SSL *cli, *srv;
    struct egress_intercept *x;
    struct buf got; /* plaintext the upstream received */
};

static SSL *mem_ssl(SSL_CTX *ctx)
{
    SSL *s = SSL_new(ctx);
    SSL_set_bio(s, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
    return s;
}

static void world_init(struct world *w, bool trust_upstream)
{
    memset(w, 0, sizeof(*w));
    struct egress_ca_deps d = {.sandbox_id = "isbx-intercept"};
    w->sbx_ca = egress_ca_new(&d);
    d.sandbox_id = "upstream-test-ca";
    w->up_ca = egress_ca_new(&d);
    assert_non_null(w->sbx_ca);
    assert_non_null(w->up_ca);
    snprintf(w->up_ca_path, sizeof(w->up_ca_path), "/tmp/egress-up-ca-%d.pem", (int)getpid());
    FILE *f = fopen(w->up_ca_path, "w");
    assert_non_null(f);
    fputs(egress_ca_cert_pem(w->up_ca), f);
    fclose(f);
    char err[256];
    w->client_ctx =
        egress_intercept_client_ctx(trust_upstream ? w->up_ca_path : NULL, err, sizeof(err));
    assert_non_null(w->client_ctx);
    w->cli_ctx = SSL_CTX_new(TLS_client_method());
    X509_STORE_add_cert(SSL_CTX_get_cert_store(w->cli_ctx), egress_ca_cert(w->sbx_ca));
    SSL_CTX_set_verify(w->cli_ctx, SSL_VERIFY_PEER, NULL);
    w->secrets = egress_secrets_new();
    assert_int_equal(
        egress_secrets_set(w->secrets, "OPENAI", SECRET, strlen(SECRET), err, sizeof(err)), 0);
    snprintf(w->rule.host, sizeof(w->rule.host), HOST);
    w->rule.n_headers = 1;
    snprintf(w->rule.headers[0].name, sizeof(w->rule.headers[0].name), "Authorization");
    snprintf(w->rule.headers[0].value, sizeof(w->rule.headers[0].value),
             "Bearer ${e2b.secrets.OPENAI}");
    buf_init(&w->got, 8 << 20, "upstream got");
}

static void world_start(struct world *w, bool tls, SSL_CTX *upstream_ctx)
{
    struct egress_intercept_deps d = {.host = HOST,
                                      .rule = &w->rule,
                                      .secrets = w->secrets,
                                      .tls = tls,
                                      .server_ctx = egress_ca_server_ctx(w->sbx_ca),
                                      .client_ctx = w->client_ctx};
    w->x = egress_intercept_new(&d);
    assert_non_null(w->x);
    if (!tls)
        return;
    w->cli = mem_ssl(w->cli_ctx);
    SSL_set_connect_state(w->cli);
    SSL_set_tlsext_host_name(w->cli, HOST);
    SSL_set1_host(w->cli, HOST);
    w->srv = mem_ssl(upstream_ctx ? upstream_ctx : egress_ca_server_ctx(w->up_ca));
    SSL_set_accept_state(w->srv);
}

static void world_free(struct world *w)
{
    egress_intercept_free(w->x);
    SSL_free(w->cli);
    SSL_free(w->srv);
    SSL_CTX_free(w->client_ctx);
    SSL_CTX_free(w->cli_ctx);
    SSL_CTX_free(w->srv_ctx);
    egress_secrets_free(w->secrets);
    egress_ca_free(w->sbx_ca);
    egress_ca_free(w->up_ca);
    unlink(w->up_ca_path);
    buf_free(&w->got);
    ERR_clear_error();
}

/* Moves bytes among the three until nothing moves; returns 0, or -1 once the
 * intercept has failed. The upstream server's plaintext lands in w->got. */
static int pump(struct world *w)
{
    uint8_t b[16384];
    for (int round = 0; round < 10000; round++) {
        bool moved = false;
        int n;
        if (egress_intercept_error(w->x))
            return -1;
        if (w->cli) {
            SSL_do_handshake(w->cli);
            while (egress_intercept_room(w->x, EGRESS_SIDE_SANDBOX) > 0 &&
                   (n = BIO_read(SSL_get_wbio(w->cli), b,
                                 (int)(sizeof(b) < egress_intercept_room(w->x, EGRESS_SIDE_SANDBOX)
                                           ? sizeof(b)
                                           : egress_intercept_room(w->x, EGRESS_SIDE_SANDBOX)))) >
                       0) {
                if (egress_intercept_feed(w->x, EGRESS_SIDE_SANDBOX, b, (size_t)n) != 0)
                    return -1;
                moved = true;
            }
            size_t t;
            while ((t = egress_intercept_take(w->x, EGRESS_SIDE_SANDBOX, b, sizeof(b))) > 0) {
                BIO_write(SSL_get_rbio(w->cli), b, (int)t);
                moved = true;
            }
        }
        if (w->srv) {
            size_t t;
            while ((t = egress_intercept_take(w->x, EGRESS_SIDE_UPSTREAM, b, sizeof(b))) > 0) {
                BIO_write(SSL_get_rbio(w->srv), b, (int)t);
                moved = true;
            }
            SSL_do_handshake(w->srv);
            while ((n = SSL_read(w->srv, b, sizeof(b))) > 0) {
                assert_int_equal(buf_append(&w->got, b, (size_t)n), 0);
                moved = true;
            }
            while (egress_intercept_room(w->x, EGRESS_SIDE_UPSTREAM) > 0 &&
                   (n = BIO_read(SSL_get_wbio(w->srv), b, sizeof(b))) > 0) {
                if (egress_intercept_feed(w->x, EGRESS_SIDE_UPSTREAM, b, (size_t)n) != 0)
                    return -1;
                moved = true;
            }
        }
        if (!moved)
            return egress_intercept_error(w->x) ? -1 : 0;
    }
    fail_msg("pump did not settle");
    return -1;
}

static void cli_send(struct world *w, const char *s, size_t n)
{
    size_t off = 0;
    while (off < n) {
        int r = SSL_write(w->cli, s + off, (int)(n - off));
        if (r > 0)
            off += (size_t)r;
        else
            assert_int_equal(pump(w), 0);
    }
}

static void handshake_ok(struct world *w)
{
    assert_int_equal(pump(w), 0);
    assert_int_equal(SSL_is_init_finished(w->cli), 1);
    assert_int_equal(SSL_get_verify_result(w->cli), X509_V_OK);
    /* What the sandbox was shown is the sandbox CA's leaf for HOST. */
    X509 *peer = SSL_get1_peer_certificate(w->cli);
    assert_non_null(peer);
    assert_int_equal(X509_check_issued(egress_ca_cert(w->sbx_ca), peer), X509_V_OK);
    X509_free(peer);
}

static void test_inject_tls(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, true);
    world_start(&w, true, NULL);
    handshake_ok(&w);
    const char *req = "GET /v1/models HTTP/1.1\r\nHost: api.example.com\r\n"
                      "authorization: Bearer decoy-value\r\nAccept: */*\r\n\r\n";
    cli_send(&w, req, strlen(req));
    assert_int_equal(pump(&w), 0);
    const char *got = buf_str(&w.got);
    assert_non_null(strstr(got, "GET /v1/models HTTP/1.1\r\n"));
    assert_non_null(strstr(got, "Authorization: Bearer " SECRET "\r\n"));
    assert_null(strstr(got, "decoy-value"));
    assert_non_null(strstr(got, "Accept: */*\r\n"));
    assert_true(strlen(got) >= 4 && strcmp(got + strlen(got) - 4, "\r\n\r\n") == 0);
    /* The response travels back unread. */
    const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    assert_int_equal(SSL_write(w.srv, resp, (int)strlen(resp)), (int)strlen(resp));
    assert_int_equal(pump(&w), 0);
    char b[256];
    int n = SSL_read(w.cli, b, sizeof(b) - 1);
    assert_int_equal(n, (int)strlen(resp));
    b[n] = '\0';
    assert_string_equal(b, resp);
    assert_int_equal(egress_intercept_requests(w.x), 1);
    world_free(&w);
}

static void test_keepalive_bodies(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, true);
    world_start(&w, true, NULL);
    handshake_ok(&w);
    /* A body that looks like a request must pass as body, not be rewritten. */
    const char *body = "GET /x HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
    char req[2048];
    int n = snprintf(req, sizeof(req),
                     "POST /a HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: %zu\r\n\r\n%s"
                     "POST /b HTTP/1.1\r\nHost: api.example.com:443\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"
                     "GET /c HTTP/1.1\r\nHost: API.example.com\r\n\r\n",
                     strlen(body), body);
    cli_send(&w, req, (size_t)n);
    assert_int_equal(pump(&w), 0);
    assert_int_equal(egress_intercept_requests(w.x), 3);
    const char *got = buf_str(&w.got);
    size_t count = 0;
    for (const char *p = strstr(got, "Authorization: Bearer " SECRET); p;
         p = strstr(p + 1, "Authorization: Bearer " SECRET))
        count++;
    assert_int_equal(count, 3);
    /* the CL body intact, immediately after the first head */
    const char *a = strstr(got, "\r\n\r\n");
    assert_non_null(a);
    assert_memory_equal(a + 4, body, strlen(body));
    assert_non_null(strstr(got, "5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET /c HTTP/1.1\r\n"));
    world_free(&w);
}

static void test_large_body_backpressure(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, true);
    world_start(&w, true, NULL);
    handshake_ok(&w);
    size_t len = 1 << 20;
    char *big = malloc(len + 256);
    int h = snprintf(
        big, 256, "PUT /up HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: %zu\r\n\r\n", len);
    for (size_t i = 0; i < len; i++)
        big[h + i] = (char)('a' + i % 26);
    cli_send(&w, big, (size_t)h + len);
    assert_int_equal(pump(&w), 0);
    const char *got = buf_str(&w.got);
    const char *body = strstr(got, "\r\n\r\n");
    assert_non_null(body);
    assert_int_equal(buf_len(&w.got) - (size_t)(body + 4 - got), len);
    assert_memory_equal(body + 4, big + h, len);
    free(big);
    world_free(&w);
}

/* Feeds req through a fresh intercept: the connection must die before any
 * byte of the request reaches the upstream. */
static void refused_tls(const char *req, const char *why)
{
    struct world w;
    world_init(&w, true);
    world_start(&w, true, NULL);
    handshake_ok(&w);
    SSL_write(w.cli, req, (int)strlen(req));
    assert_int_equal(pump(&w), -1);
    assert_non_null(egress_intercept_error(w.x));
    if (!strstr(egress_intercept_error(w.x), why))
        fail_msg("error \"%s\" does not say \"%s\"", egress_intercept_error(w.x), why);
    assert_int_equal(buf_len(&w.got), 0);
    assert_null(strstr(egress_intercept_error(w.x), SECRET));
    world_free(&w);
}

static void test_refusals(void **state)
{
    (void)state;
    refused_tls("GET / HTTP/1.1\r\nHost: evil.example.com\r\n\r\n", "Host evil.example.com");
    refused_tls("GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: evil.example.com\r\n\r\n",
                "two Host");
    refused_tls("GET / HTTP/1.1\r\n\r\n", "no Host");
    refused_tls("POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 3\r\n"
                "Transfer-Encoding: chunked\r\n\r\n",
                "both Content-Length");
    refused_tls(
        "POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "Transfer-Encoding");
    refused_tls("POST / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 3\r\n"
                "Content-Length: 4\r\n\r\n",
                "two different");
    refused_tls("GET / HTTP/1.1\nHost: api.example.com\n\n", "CRLF");
    refused_tls("GET / HTTP/1.1\r\nHost: api.example.com\r\nX: a\r\n b\r\n\r\n", "folded");
    refused_tls("GET / HTTP/1.1\r\nHost : api.example.com\r\n\r\n", "header name");
    refused_tls("CONNECT evil.example.com:443 HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
                "CONNECT");
    refused_tls("GET http://evil.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", "target");
    refused_tls("GET / HTTP/2.0\r\nHost: api.example.com\r\n\r\n", "version");
    /* A second request on the connection is held to the same rules. */
    refused_tls("GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
                "GET / HTTP/1.1\r\nHost: evil.example.com\r\n\r\n",
                "Host evil.example.com");
    /* Bad chunk framing. */
    refused_tls("POST / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
                "zz\r\n",
                "chunk size");
}

static void test_second_request_refused_after_first_passed(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, true);
    world_start(&w, true, NULL);
    handshake_ok(&w);
    const char *req = "GET /1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
                      "GET /2 HTTP/1.1\r\nHost: evil.example.com\r\n\r\n";
    SSL_write(w.cli, req, (int)strlen(req));
    /* The first may or may not have reached the upstream; the second never does. */
    pump(&w);
    assert_non_null(egress_intercept_error(w.x));
    assert_null(strstr(buf_str(&w.got), "/2"));
    world_free(&w);
}

static void test_upstream_untrusted(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, false); /* the intercept does not know the upstream's CA */
    world_start(&w, true, NULL);
    const char *req = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
    pump(&w);
    if (!egress_intercept_error(w.x)) {
        SSL_write(w.cli, req, (int)strlen(req));
        pump(&w);
    }
    assert_non_null(egress_intercept_error(w.x));
    assert_non_null(strstr(egress_intercept_error(w.x), "did not verify"));
    assert_int_equal(buf_len(&w.got), 0);
    world_free(&w);
}

static void test_upstream_wrong_name(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, true);
    /* An upstream trusted by the bundle, but with a certificate for another name. */
    X509 *cert;
    EVP_PKEY *key;
    assert_int_equal(egress_ca_leaf(w.up_ca, "other.example.com", &cert, &key), 0);
    w.srv_ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(w.srv_ctx, cert);
    SSL_CTX_use_PrivateKey(w.srv_ctx, key);
    world_start(&w, true, w.srv_ctx);
    const char *req = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
    pump(&w);
    if (!egress_intercept_error(w.x)) {
        SSL_write(w.cli, req, (int)strlen(req));
        pump(&w);
    }
    assert_non_null(egress_intercept_error(w.x));
    assert_non_null(strstr(egress_intercept_error(w.x), "did not verify"));
    assert_int_equal(buf_len(&w.got), 0);
    world_free(&w);
}

static void test_sandbox_sni_other_host(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, true);
    world_start(&w, true, NULL);
    SSL_set_tlsext_host_name(w.cli, "evil.example.com");
    assert_int_equal(pump(&w), -1);
    assert_int_equal(buf_len(&w.got), 0);
    world_free(&w);
}

static void test_close_notify_passes(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, true);
    world_start(&w, true, NULL);
    handshake_ok(&w);
    SSL_shutdown(w.cli);
    assert_int_equal(pump(&w), 0);
    assert_true(egress_intercept_is_finished(w.x, EGRESS_SIDE_UPSTREAM));
    char b[16];
    assert_true(SSL_read(w.srv, b, sizeof(b)) <= 0);
    assert_int_equal(SSL_get_error(w.srv, -1) == SSL_ERROR_ZERO_RETURN ||
                         (SSL_get_shutdown(w.srv) & SSL_RECEIVED_SHUTDOWN),
                     1);
    SSL_shutdown(w.srv);
    assert_int_equal(pump(&w), 0);
    assert_true(egress_intercept_is_finished(w.x, EGRESS_SIDE_SANDBOX));
    world_free(&w);
}

/* Plain HTTP: byte by byte, so the head parser sees every split. */
static void test_plain_http(void **state)
{
    (void)state;
    struct world w;
    world_init(&w, true);
    world_start(&w, false, NULL);
    const char *req = "POST /p HTTP/1.1\r\nHost: api.example.com:80\r\nAuthorization: decoy\r\n"
                      "Content-Length: 4\r\n\r\nbody"
                      "GET /q HTTP/1.0\r\nHost: api.example.com\r\n\r\n";
    for (size_t i = 0; req[i]; i++)
        assert_int_equal(
            egress_intercept_feed(w.x, EGRESS_SIDE_SANDBOX, (const uint8_t *)req + i, 1), 0);
    uint8_t b[4096];
    size_t n = egress_intercept_take(w.x, EGRESS_SIDE_UPSTREAM, b, sizeof(b) - 1);
    b[n] = '\0';
    const char *want =
        "POST /p HTTP/1.1\r\nHost: api.example.com:80\r\nContent-Length: 4\r\n"
        "Authorization: Bearer " SECRET "\r\n\r\nbody"
        "GET /q HTTP/1.0\r\nHost: api.example.com\r\nAuthorization: Bearer " SECRET "\r\n\r\n";
    assert_string_equal((char *)b, want);
    assert_int_equal(
        egress_intercept_feed(w.x, EGRESS_SIDE_UPSTREAM, (const uint8_t *)"HTTP/1.1 200", 12), 0);
    n = egress_intercept_take(w.x, EGRESS_SIDE_SANDBOX, b, sizeof(b));
    assert_int_equal(n, 12);
    assert_false(egress_intercept_is_finished(w.x, EGRESS_SIDE_UPSTREAM));
    egress_intercept_eof(w.x, EGRESS_SIDE_SANDBOX);
    assert_true(egress_intercept_is_finished(w.x, EGRESS_SIDE_UPSTREAM));
    /* A partial head at EOF is dropped, never sent unrewritten. */
    world_free(&w);

    world_init(&w, true);
    world_start(&w, false, NULL);
    const char *part = "GET / HTTP/1.1\r\nHost: api.example.com\r\n";
    assert_int_equal(
        egress_intercept_feed(w.x, EGRESS_SIDE_SANDBOX, (const uint8_t *)part, strlen(part)), 0);
    egress_intercept_eof(w.x, EGRESS_SIDE_SANDBOX);
    assert_int_equal(egress_intercept_pending(w.x, EGRESS_SIDE_UPSTREAM), 0);
    /* Room is bounded: a sandbox cannot make the intercept buffer without limit. */
    world_free(&w);
}

static void test_secret_missing_or_bad(void **state)
{
    (void)state;
    struct world w;
    char err[256];
    world_init(&w, true);
    snprintf(w.rule.headers[0].value, sizeof(w.rule.headers[0].value), "${e2b.secrets.NOPE}");
    world_start(&w, false, NULL);
    const char *req = "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
    assert_int_not_equal(
        egress_intercept_feed(w.x, EGRESS_SIDE_SANDBOX, (const uint8_t *)req, strlen(req)), 0);
    assert_non_null(strstr(egress_intercept_error(w.x), "NOPE"));
    assert_int_equal(egress_intercept_pending(w.x, EGRESS_SIDE_UPSTREAM), 0);
    world_free(&w);

    /* A rule may not set framing headers. */
    world_init(&w, true);
    snprintf(w.rule.headers[0].name, sizeof(w.rule.headers[0].name), "Content-Length");
    world_start(&w, false, NULL);
    assert_int_not_equal(
        egress_intercept_feed(w.x, EGRESS_SIDE_SANDBOX, (const uint8_t *)req, strlen(req)), 0);
    assert_int_equal(egress_intercept_pending(w.x, EGRESS_SIDE_UPSTREAM), 0);
    world_free(&w);

    /* Values that would split a header are refused when stored. */
    struct egress_secrets *s = egress_secrets_new();
    assert_int_equal(egress_secrets_set(s, "A", "x\r\nEvil: 1", 10, err, sizeof(err)), AB_EINVAL);
    assert_null(strstr(err, "Evil"));
    assert_int_equal(egress_secrets_set(s, "A", "x\0y", 3, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(egress_secrets_set(s, "bad name", "v", 1, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(egress_secrets_set(s, "A", "v1", 2, err, sizeof(err)), 0);
    assert_int_equal(egress_secrets_set(s, "A", "v22", 3, err, sizeof(err)), 0);
    assert_int_equal(egress_secrets_count(s), 1);
    char out[64];
    size_t n;
    assert_int_equal(egress_secrets_fill(s, "k=${e2b.secrets.A};${e2b.secrets.a}", out, sizeof(out),
                                         &n, err, sizeof(err)),
                     0);
    assert_string_equal(out, "k=v22;v22");
    assert_int_equal(egress_secrets_fill(s, "${e2b.secrets.A}", out, 3, &n, err, sizeof(err)),
                     AB_ELIMIT);
    char *big = malloc(EGRESS_SECRET_VALUE_MAX + 1);
    memset(big, 'v', EGRESS_SECRET_VALUE_MAX + 1);
    assert_int_equal(egress_secrets_set(s, "B", big, EGRESS_SECRET_VALUE_MAX + 1, err, sizeof(err)),
                     AB_ELIMIT);
    free(big);
    egress_secrets_free(s);
}

static void test_head_parse_table(void **state)
{
    (void)state;
    struct egress_http_head h;
    const char *ok = "GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(egress_http_head_parse((const uint8_t *)ok, strlen(ok), &h), EGRESS_HEAD_OK);
    assert_int_equal(h.body, EGRESS_BODY_NONE);
    assert_string_equal(h.host, "a.example");
    for (size_t i = 0; i < strlen(ok); i++)
        assert_int_equal(egress_http_head_parse((const uint8_t *)ok, i, &h), EGRESS_HEAD_MORE);
    const char *up = "GET /ws HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\n\r\n";
    assert_int_equal(egress_http_head_parse((const uint8_t *)up, strlen(up), &h), EGRESS_HEAD_OK);
    assert_int_equal(h.body, EGRESS_BODY_TUNNEL);
    /* Over the limit without a blank line: refused, not MORE. */
    size_t n = EGRESS_HEAD_MAX + 10;
    char *big = malloc(n);
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    memset(big + 19, 'a', n - 19);
    assert_int_equal(egress_http_head_parse((const uint8_t *)big, n, &h), EGRESS_HEAD_BAD);
    free(big);
}

/* --- the driver ----------------------------------------------------------------------- */

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <signal.h>

#include "agent/egress/gateway.h"
#include "agentbox/loop.h"

static struct loop *g_loop;
static struct egress_policy *g_policy;
static struct egress_cidr g_range;
static struct egress_ca *g_ca;
static struct egress_secrets *g_secrets;

static void on_term(int sig)
{
    (void)sig;
    if (g_loop)
        loop_stop(g_loop);
}

static int sandbox_of(void *arg, const struct egress_addr *peer, struct egress_sandbox_ref *ref)
{
    (void)arg;
    if (!egress_cidr_contains(&g_range, peer))
        return AB_ENOENT;
    ref->policy = g_policy;
    ref->key = peer->a[3] / 4;
    ref->ca = g_ca;
    ref->secrets = g_secrets;
    return 0;
}

static void denied(void *arg, uint64_t key, enum egress_reason why, const struct egress_dest *d)
{
    char ip[INET6_ADDRSTRLEN] = "-";
    (void)arg;
    if (d)
        inet_ntop(d->addr.family, d->addr.a, ip, sizeof(ip));
    printf("{\"denied\":\"%s\",\"dst\":\"%s:%u\",\"slot\":%llu}\n", egress_reason_label(why), ip,
           d ? d->port : 0, (unsigned long long)key);
    fflush(stdout);
}

static size_t host_addrs(struct egress_addr *out, size_t max)
{
    struct ifaddrs *ifa, *i;
    size_t n = 0;
    if (getifaddrs(&ifa) != 0)
        return 0;
    for (i = ifa; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        if (i->ifa_addr->sa_family == AF_INET) {
            out[n].family = AF_INET;
            memcpy(out[n].a, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
            n++;
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            out[n].family = AF_INET6;
            memcpy(out[n].a, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
            n++;
        }
    }
    freeifaddrs(ifa);
    return n;
}

static int serve(char **argv)
{
    char err[512] = "";
    struct egress_addr self[256];
    struct egress_netns_config c = {
        .name = argv[2], .tcp_port = (uint16_t)atoi(argv[4]), .dns_port = (uint16_t)atoi(argv[5])};
    struct egress_opts o = {.internet = true};
    json_t *net = json_loads(argv[6], JSON_DECODE_ANY, NULL);
    json_t *secrets = json_loads(argv[9], 0, NULL);
    if (egress_cidr_parse(argv[3], &c.range) || !net || !json_is_object(secrets) ||
        egress_policy_parse(net, &o, &g_policy, err, sizeof(err))) {
        fprintf(stderr, "bad arguments: %s\n", err);
        return 2;
    }
    json_decref(net);
    g_secrets = egress_secrets_new();
    const char *k;
    json_t *v;
    json_object_foreach(secrets, k, v)
    {
        if (egress_secrets_set(g_secrets, k, json_string_value(v), json_string_length(v), err,
                               sizeof(err)) != 0) {
            fprintf(stderr, "bad secret: %s\n", err);
            return 2;
        }
    }
    json_decref(secrets);
    struct egress_ca_deps cd = {.sandbox_id = "isbx-itest"};
    g_ca = egress_ca_new(&cd);
    FILE *f = fopen(argv[10], "w");
    if (!g_ca || !f) {
        fprintf(stderr, "cannot make the CA\n");
        return 1;
    }
    fputs(egress_ca_cert_pem(g_ca), f);
    fclose(f);
    SSL_CTX *up =
        egress_intercept_client_ctx(strcmp(argv[8], "-") ? argv[8] : NULL, err, sizeof(err));
    if (!up) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    g_range = c.range;
    g_loop = loop_new(NULL);
    if (!g_loop)
        return 1;
    int fd = egress_gateway_listen(&c, c.tcp_port, err, sizeof(err));
    int dns = fd >= 0 ? egress_gateway_listen_dns(&c, c.dns_port, err, sizeof(err)) : -1;
    if (fd < 0 || dns < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct egress_gateway_deps d = {
        .loop = g_loop,
        .dns_fd = dns,
        .sandbox_of = sandbox_of,
        .denied = denied,
        .self = self,
        .n_self = host_addrs(self, AB_ARRAY_LEN(self)),
        .upstream_ctx = up,
    };
    char host[64];
    const char *colon = strrchr(argv[7], ':');
    size_t hn = colon ? (size_t)(colon - argv[7]) : 0;
    if (!colon || hn >= sizeof(host)) {
        fprintf(stderr, "resolver must be ip:port\n");
        return 2;
    }
    memcpy(host, argv[7], hn);
    host[hn] = '\0';
    if (egress_addr_parse(host, &d.resolver) != 0) {
        fprintf(stderr, "resolver must be ip:port\n");
        return 2;
    }
    d.resolver_port = (uint16_t)atoi(colon + 1);
    struct egress_gateway *g = egress_gateway_new(&d, fd, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    signal(SIGPIPE, SIG_IGN);
    printf("ready\n");
    fflush(stdout);
    loop_run(g_loop);
    egress_gateway_free(g);
    loop_free(g_loop);
    SSL_CTX_free(up);
    egress_ca_free(g_ca);
    egress_secrets_free(g_secrets);
    egress_policy_free(g_policy);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        if (strcmp(argv[1], "serve") != 0 || argc != 11) {
            fprintf(stderr,
                    "usage: %s serve NAME RANGE TCP DNS NETWORK_JSON RESOLVER:PORT UPSTREAM_CA "
                    "SECRETS_JSON CA_OUT\n",
                    argv[0]);
            return 2;
        }
        return serve(argv);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inject_tls),
        cmocka_unit_test(test_keepalive_bodies),
        cmocka_unit_test(test_large_body_backpressure),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_second_request_refused_after_first_passed),
        cmocka_unit_test(test_upstream_untrusted),
        cmocka_unit_test(test_upstream_wrong_name),
        cmocka_unit_test(test_sandbox_sni_other_host),
        cmocka_unit_test(test_close_notify_passes),
        cmocka_unit_test(test_plain_http),
        cmocka_unit_test(test_secret_missing_or_bad),
        cmocka_unit_test(test_head_parse_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
