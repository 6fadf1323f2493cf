/* The per-sandbox CA (agent/egress/ca.c): the leaf verifies against the CA
 * with the host's name and fails for another name, the SAN is the host, the
 * cache hands out the same leaf until the 24 h TTL passes, the cache is
 * bounded, the PEM holds no key, and a TLS client with only the CA in its
 * store completes a handshake by SNI, while an SNI other than the bound host
 * is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

#include "agent/egress/ca.h"
#include "agentbox/common.h"

static int64_t g_now = 1000;
static int64_t fake_now(void)
{
    return g_now;
}

static struct egress_ca *new_ca(void)
{
    struct egress_ca_deps d = {.sandbox_id = "isbx-test-1", .now_ms = fake_now};
    struct egress_ca *ca = egress_ca_new(&d);
    assert_non_null(ca);
    return ca;
}

/* X509_verify_cert of leaf against only the CA, with a host check. */
static int verify(X509 *ca_cert, X509 *leaf, const char *host)
{
    X509_STORE *st = X509_STORE_new();
    X509_STORE_add_cert(st, ca_cert);
    X509_STORE_CTX *c = X509_STORE_CTX_new();
    X509_STORE_CTX_init(c, st, leaf, NULL);
    X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(c);
    X509_VERIFY_PARAM_set_purpose(p, X509_PURPOSE_SSL_SERVER);
    X509_VERIFY_PARAM_set1_host(p, host, 0);
    int ok = X509_verify_cert(c);
    X509_STORE_CTX_free(c);
    X509_STORE_free(st);
    return ok;
}

static void test_leaf_verifies(void **state)
{
    (void)state;
    struct egress_ca *ca = new_ca();
    X509 *leaf;
    EVP_PKEY *key;
    assert_int_equal(egress_ca_leaf(ca, "api.example.com", &leaf, &key), 0);
    assert_int_equal(verify(egress_ca_cert(ca), leaf, "api.example.com"), 1);
    assert_int_not_equal(verify(egress_ca_cert(ca), leaf, "other.example.com"), 1);
    assert_int_equal(X509_check_private_key(leaf, key), 1);

    /* Another CA (another sandbox) does not vouch for this leaf. */
    struct egress_ca_deps d2 = {.sandbox_id = "isbx-test-2"};
    struct egress_ca *other = egress_ca_new(&d2);
    assert_non_null(other);
    assert_int_not_equal(verify(egress_ca_cert(other), leaf, "api.example.com"), 1);
    egress_ca_free(other);
    egress_ca_free(ca);
}

static void test_san_is_host(void **state)
{
    (void)state;
    struct egress_ca *ca = new_ca();
    X509 *leaf;
    EVP_PKEY *key;
    assert_int_equal(egress_ca_leaf(ca, "api.example.com", &leaf, &key), 0);
    GENERAL_NAMES *sans = X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL);
    assert_non_null(sans);
    assert_int_equal(sk_GENERAL_NAME_num(sans), 1);
    GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, 0);
    assert_int_equal(g->type, GEN_DNS);
    assert_string_equal((const char *)ASN1_STRING_get0_data(g->d.dNSName), "api.example.com");
    GENERAL_NAMES_free(sans);
    /* The CA is a CA limited to leaves; the leaf is not one. */
    assert_int_equal(X509_check_ca(egress_ca_cert(ca)), 1);
    assert_int_equal(X509_check_ca(leaf), 0);
    egress_ca_free(ca);
}

static void test_cache_and_ttl(void **state)
{
    (void)state;
    g_now = 1000;
    struct egress_ca *ca = new_ca();
    X509 *a, *b, *c;
    EVP_PKEY *key;
    assert_int_equal(egress_ca_leaf(ca, "api.example.com", &a, &key), 0);
    assert_int_equal(egress_ca_leaves_made(ca), 1);
    g_now += EGRESS_CA_LEAF_TTL_MS - 1;
    assert_int_equal(egress_ca_leaf(ca, "api.example.com", &b, &key), 0);
    assert_ptr_equal(a, b); /* a hit */
    assert_int_equal(egress_ca_leaves_made(ca), 1);
    ASN1_INTEGER *serial = ASN1_INTEGER_dup(X509_get_serialNumber(b));
    g_now += 1; /* the TTL has passed; a and b are no longer valid */
    assert_int_equal(egress_ca_leaf(ca, "api.example.com", &c, &key), 0);
    assert_int_equal(egress_ca_leaves_made(ca), 2);
    assert_int_not_equal(ASN1_INTEGER_cmp(X509_get_serialNumber(c), serial), 0);
    ASN1_INTEGER_free(serial);
    assert_int_equal(verify(egress_ca_cert(ca), c, "api.example.com"), 1);
    /* The leaf is valid well past the cache TTL. */
    assert_true(X509_cmp_time(X509_get0_notAfter(c), NULL) > 0);
    time_t later = time(NULL) + EGRESS_CA_LEAF_TTL_MS / 1000 + 60;
    assert_true(X509_cmp_time(X509_get0_notAfter(c), &later) > 0);
    egress_ca_free(ca);
}

static void test_bounded_and_refusals(void **state)
{
    (void)state;
    g_now = 1000;
    struct egress_ca *ca = new_ca();
    X509 *leaf, *first;
    EVP_PKEY *key;
    char host[64];
    assert_int_equal(egress_ca_leaf(ca, "h0.example.com", &first, &key), 0);
    for (int i = 1; i <= EGRESS_CA_LEAVES_MAX; i++) {
        g_now++;
        snprintf(host, sizeof(host), "h%d.example.com", i);
        assert_int_equal(egress_ca_leaf(ca, host, &leaf, &key), 0);
    }
    assert_int_equal(egress_ca_leaves_made(ca), EGRESS_CA_LEAVES_MAX + 1);
    /* h0 was the oldest and was dropped: asking again makes a new one. */
    assert_int_equal(egress_ca_leaf(ca, "h0.example.com", &leaf, &key), 0);
    assert_int_equal(egress_ca_leaves_made(ca), EGRESS_CA_LEAVES_MAX + 2);
    /* The newest is still cached. */
    snprintf(host, sizeof(host), "h%d.example.com", EGRESS_CA_LEAVES_MAX);
    assert_int_equal(egress_ca_leaf(ca, host, &leaf, &key), 0);
    assert_int_equal(egress_ca_leaves_made(ca), EGRESS_CA_LEAVES_MAX + 2);

    assert_int_equal(egress_ca_leaf(ca, "API.example.com", &leaf, &key), AB_EINVAL);
    assert_int_equal(egress_ca_leaf(ca, "a b", &leaf, &key), AB_EINVAL);
    assert_int_equal(egress_ca_leaf(ca, "", &leaf, &key), AB_EINVAL);
    assert_int_equal(egress_ca_leaf(ca, "x.com\r\nEvil: 1", &leaf, &key), AB_EINVAL);

    /* A second reference keeps the CA (and its leaves) alive past the first free. */
    assert_ptr_equal(egress_ca_ref(ca), ca);
    egress_ca_free(ca);
    assert_int_equal(egress_ca_leaf(ca, "h0.example.com", &leaf, &key), 0);
    const char *pem = egress_ca_cert_pem(ca);
    assert_non_null(strstr(pem, "BEGIN CERTIFICATE"));
    assert_null(strstr(pem, "PRIVATE"));
    egress_ca_free(ca);

    struct egress_ca_deps d = {.sandbox_id = ""};
    assert_null(egress_ca_new(&d));
    char longid[EGRESS_CA_ID_MAX + 2];
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    d.sandbox_id = longid;
    assert_null(egress_ca_new(&d));
}

/* Moves bytes between two SSL objects over memory BIOs until both finish the
 * handshake or one fails. Returns 1 on success. */
static int handshake(SSL *cli, SSL *srv)
{
    int cdone = 0, sdone = 0;
    for (int i = 0; i < 100 && !(cdone && sdone); i++) {
        if (!cdone) {
            int r = SSL_do_handshake(cli);
            if (r == 1)
                cdone = 1;
            else if (SSL_get_error(cli, r) != SSL_ERROR_WANT_READ)
                return 0;
        }
        if (!sdone) {
            int r = SSL_do_handshake(srv);
            if (r == 1)
                sdone = 1;
            else if (SSL_get_error(srv, r) != SSL_ERROR_WANT_READ)
                return 0;
        }
        char buf[16384];
        int n;
        while ((n = BIO_read(SSL_get_wbio(cli), buf, sizeof(buf))) > 0)
            BIO_write(SSL_get_rbio(srv), buf, n);
        while ((n = BIO_read(SSL_get_wbio(srv), buf, sizeof(buf))) > 0)
            BIO_write(SSL_get_rbio(cli), buf, n);
    }
    return cdone && sdone;
}

static int try_sni(struct egress_ca *ca, const char *sni, const char *bound, const char *verify)
{
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    X509_STORE_add_cert(SSL_CTX_get_cert_store(cctx), egress_ca_cert(ca));
    SSL_CTX_set_verify(cctx, SSL_VERIFY_PEER, NULL);
    SSL *cli = SSL_new(cctx), *srv = SSL_new(egress_ca_server_ctx(ca));
    SSL_set_bio(cli, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
    SSL_set_bio(srv, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
    SSL_set_connect_state(cli);
    SSL_set_accept_state(srv);
    if (sni)
        SSL_set_tlsext_host_name(cli, sni);
    SSL_set1_host(cli, verify);
    if (bound)
        assert_int_equal(egress_ca_ssl_set_host(srv, bound), 0);
    int ok = handshake(cli, srv);
    if (ok)
        assert_int_equal(SSL_get_verify_result(cli), X509_V_OK);
    SSL_free(cli);
    SSL_free(srv);
    SSL_CTX_free(cctx);
    ERR_clear_error();
    return ok;
}

static void test_server_ctx_by_sni(void **state)
{
    (void)state;
    struct egress_ca *ca = new_ca();
    assert_int_equal(try_sni(ca, "api.example.com", NULL, "api.example.com"), 1);
    assert_int_equal(try_sni(ca, "API.Example.com", NULL, "api.example.com"), 1);
    assert_int_equal(try_sni(ca, "api.example.com", "api.example.com", "api.example.com"), 1);
    /* No SNI: the bound host's leaf. */
    assert_int_equal(try_sni(ca, NULL, "api.example.com", "api.example.com"), 1);
    /* No SNI and nothing bound: refused. */
    assert_int_equal(try_sni(ca, NULL, NULL, "api.example.com"), 0);
    /* An SNI other than the host the connection is for: refused. */
    assert_int_equal(try_sni(ca, "evil.example.com", "api.example.com", "evil.example.com"), 0);
    /* The client checks the name: a leaf for api is no good for other. */
    assert_int_equal(try_sni(ca, "api.example.com", NULL, "other.example.com"), 0);
    egress_ca_free(ca);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leaf_verifies),     cmocka_unit_test(test_san_is_host),
        cmocka_unit_test(test_cache_and_ttl),     cmocka_unit_test(test_bounded_and_refusals),
        cmocka_unit_test(test_server_ctx_by_sni),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
