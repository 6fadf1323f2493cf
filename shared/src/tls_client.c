/* See tls_client.h. */
#include "agentbox/tls_client.h"
#include "agentbox/common.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tls_client_ctx {
    SSL_CTX *ctx;
};

struct tls_client {
    SSL *ssl;
    BIO *rbio; /* network → SSL */
    BIO *wbio; /* SSL → network */
    bool established;
};

int tls_client_ctx_new(const char *ca_file, struct tls_client_ctx **out, char *err, size_t errlen)
{
    struct tls_client_ctx *c = calloc(1, sizeof(*c));
    if (!c || !(c->ctx = SSL_CTX_new(TLS_client_method()))) {
        free(c);
        snprintf(err, errlen, "out of memory for the TLS client");
        return AB_ENOMEM;
    }
    SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
    int ok = ca_file ? SSL_CTX_load_verify_locations(c->ctx, ca_file, NULL)
                     : SSL_CTX_set_default_verify_paths(c->ctx);
    if (ok != 1) {
        snprintf(err, errlen, "cannot load the CA bundle '%s' for the hub's certificate",
                 ca_file ? ca_file : "(system)");
        tls_client_ctx_free(c);
        return AB_EIO;
    }
    *out = c;
    return 0;
}

void tls_client_ctx_free(struct tls_client_ctx *c)
{
    if (!c)
        return;
    SSL_CTX_free(c->ctx);
    free(c);
}

struct tls_client *tls_client_new(struct tls_client_ctx *c, const char *host)
{
    struct tls_client *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->ssl = SSL_new(c->ctx);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (!t->ssl || !t->rbio || !t->wbio) {
        SSL_free(t->ssl);
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        free(t);
        return NULL;
    }
    SSL_set_bio(t->ssl, t->rbio, t->wbio); /* the SSL owns both now */
    SSL_set_connect_state(t->ssl);
    /* what lws checked: the name (or address) the agent dialled */
    struct in6_addr a6;
    struct in_addr a4;
    X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
    if (inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1) {
        X509_VERIFY_PARAM_set1_ip_asc(vp, host);
    } else {
        SSL_set_tlsext_host_name(t->ssl, host);
        X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        X509_VERIFY_PARAM_set1_host(vp, host, 0);
    }
    return t;
}

void tls_client_free(struct tls_client *t)
{
    if (!t)
        return;
    SSL_free(t->ssl);
    free(t);
}

int tls_client_input(struct tls_client *t, const void *in, size_t len)
{
    if (len && BIO_write(t->rbio, in, (int)len) != (int)len)
        return AB_ENOMEM;
    return 0;
}

static void describe(struct tls_client *t, int rc, char *why, size_t whylen)
{
    long v = SSL_get_verify_result(t->ssl);
    unsigned long e = ERR_peek_last_error();
    if (v != X509_V_OK)
        snprintf(why, whylen, "TLS: the hub's certificate does not verify: %s",
                 X509_verify_cert_error_string(v));
    else if (e)
        snprintf(why, whylen, "TLS handshake failed: %s", ERR_reason_error_string(e));
    else
        snprintf(why, whylen, "TLS handshake failed (SSL error %d)", SSL_get_error(t->ssl, rc));
    ERR_clear_error();
}

int tls_client_handshake(struct tls_client *t, char *why, size_t whylen)
{
    if (t->established)
        return 1;
    int rc = SSL_do_handshake(t->ssl);
    if (rc == 1) {
        t->established = true;
        return 1;
    }
    int e = SSL_get_error(t->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    describe(t, rc, why, whylen);
    return AB_EIO;
}

ssize_t tls_client_read(struct tls_client *t, void *buf, size_t len)
{
    int n = SSL_read(t->ssl, buf, (int)AB_MIN(len, (size_t)INT32_MAX));
    if (n > 0)
        return n;
    int e = SSL_get_error(t->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    ERR_clear_error();
    return e == SSL_ERROR_ZERO_RETURN ? AB_ECLOSED : AB_EIO;
}

int tls_client_write(struct tls_client *t, const void *data, size_t len)
{
    /* a memory BIO takes everything: SSL_write completes or fails */
    if (len && SSL_write(t->ssl, data, (int)len) != (int)len) {
        ERR_clear_error();
        return AB_EIO;
    }
    return 0;
}

size_t tls_client_output(struct tls_client *t, void *buf, size_t len)
{
    int n = BIO_read(t->wbio, buf, (int)AB_MIN(len, (size_t)INT32_MAX));
    return n > 0 ? (size_t)n : 0;
}

size_t tls_client_output_pending(struct tls_client *t)
{
    return (size_t)BIO_ctrl_pending(t->wbio);
}
