/* The per-sandbox CA and its leaf cache (ca.h). Keys are EC P-256: every TLS
 * client in a sandbox image accepts it, and signing a leaf is cheap enough to
 * do on the loop on first use of a host. */
#include "agent/egress/ca.h"

#include "agent/egress/policy.h"
#include "agentbox/common.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CA_VALID_DAYS 365
/* A leaf outlives its cache entry by a day so a cached leaf is never expired. */
#define LEAF_VALID_SECS (2L * 24 * 3600)
#define BACKDATE_SECS 3600L /* tolerate a sandbox clock somewhat behind */

struct leaf {
    char host[EGRESS_HOST_MAX + 1];
    X509 *cert;
    int64_t made_ms;
};

struct egress_ca {
    int refs;
    int64_t (*now_ms)(void);
    EVP_PKEY *key;      /* the CA's key: signs leaves, never leaves this struct */
    EVP_PKEY *leaf_key; /* one key for every leaf of this CA */
    X509 *cert;
    char *pem;
    SSL_CTX *server_ctx;
    struct leaf leaves[EGRESS_CA_LEAVES_MAX];
    size_t n_leaves;
    uint64_t made;
};

static int g_host_idx = -1;
static pthread_once_t g_host_once = PTHREAD_ONCE_INIT;

static void host_idx_init(void)
{
    g_host_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static EVP_PKEY *p256_key(void)
{
    return EVP_EC_gen("P-256");
}

static int set_serial(X509 *x)
{
    unsigned char r[16];
    if (RAND_bytes(r, sizeof(r)) != 1)
        return AB_EIO;
    r[0] &= 0x7f; /* positive */
    r[0] |= 0x40; /* and of full length */
    BIGNUM *bn = BN_bin2bn(r, sizeof(r), NULL);
    int rc = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) ? 0 : AB_EIO;
    BN_free(bn);
    return rc;
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    if (!e)
        return AB_EIO;
    int ok = X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
    return ok ? 0 : AB_EIO;
}

static int make_ca_cert(struct egress_ca *ca, const char *sandbox_id)
{
    X509 *x = X509_new();
    if (!x)
        return AB_ENOMEM;
    char cn[EGRESS_CA_ID_MAX + 32];
    snprintf(cn, sizeof(cn), "agentbox egress CA %s", sandbox_id);
    X509_NAME *name = X509_get_subject_name(x);
    int rc = AB_EIO;
    if (X509_set_version(x, 2) != 1 || set_serial(x) != 0 ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -BACKDATE_SECS) ||
        !X509_time_adj_ex(X509_getm_notAfter(x), CA_VALID_DAYS, 0, NULL) ||
        X509_set_pubkey(x, ca->key) != 1 ||
        X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"agentbox", -1,
                                   -1, 0) != 1 ||
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
                                   0) != 1 ||
        X509_set_issuer_name(x, name) != 1)
        goto out;
    /* pathlen 0: the CA signs leaves only, never another CA. */
    if (add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") != 0 ||
        add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") != 0 ||
        add_ext(x, x, NID_subject_key_identifier, "hash") != 0)
        goto out;
    if (X509_sign(x, ca->key, EVP_sha256()) <= 0)
        goto out;
    ca->cert = x;
    x = NULL;
    rc = 0;
out:
    X509_free(x);
    return rc;
}

static int make_pem(struct egress_ca *ca)
{
    BIO *b = BIO_new(BIO_s_mem());
    if (!b)
        return AB_ENOMEM;
    int rc = AB_EIO;
    char *p;
    if (PEM_write_bio_X509(b, ca->cert) == 1) {
        long n = BIO_get_mem_data(b, &p);
        ca->pem = malloc((size_t)n + 1);
        if (ca->pem) {
            memcpy(ca->pem, p, (size_t)n);
            ca->pem[n] = '\0';
            rc = 0;
        } else {
            rc = AB_ENOMEM;
        }
    }
    BIO_free(b);
    return rc;
}

static int servername_cb(SSL *ssl, int *alert, void *arg);

struct egress_ca *egress_ca_new(const struct egress_ca_deps *deps)
{
    if (!deps || !deps->sandbox_id || !deps->sandbox_id[0] ||
        strlen(deps->sandbox_id) > EGRESS_CA_ID_MAX)
        return NULL;
    pthread_once(&g_host_once, host_idx_init);
    if (g_host_idx < 0)
        return NULL;
    struct egress_ca *ca = calloc(1, sizeof(*ca));
    if (!ca)
        return NULL;
    ca->refs = 1;
    ca->now_ms = deps->now_ms ? deps->now_ms : ab_now_ms;
    ca->key = p256_key();
    ca->leaf_key = p256_key();
    if (!ca->key || !ca->leaf_key || make_ca_cert(ca, deps->sandbox_id) != 0 || make_pem(ca) != 0)
        goto fail;
    ca->server_ctx = SSL_CTX_new(TLS_server_method());
    if (!ca->server_ctx || SSL_CTX_set_min_proto_version(ca->server_ctx, TLS1_2_VERSION) != 1)
        goto fail;
    /* No session tickets (nor TLS 1.3 ones): nothing to resume, every
     * handshake picks its leaf by SNI. */
    SSL_CTX_set_options(ca->server_ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ca->server_ctx, 0);
    SSL_CTX_set_session_cache_mode(ca->server_ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_tlsext_servername_callback(ca->server_ctx, servername_cb);
    SSL_CTX_set_tlsext_servername_arg(ca->server_ctx, ca);
    return ca;
fail:
    egress_ca_free(ca);
    return NULL;
}

struct egress_ca *egress_ca_ref(struct egress_ca *ca)
{
    if (ca)
        ca->refs++;
    return ca;
}

void egress_ca_free(struct egress_ca *ca)
{
    if (!ca || --ca->refs > 0)
        return;
    for (size_t i = 0; i < ca->n_leaves; i++)
        X509_free(ca->leaves[i].cert);
    SSL_CTX_free(ca->server_ctx);
    X509_free(ca->cert);
    /* EVP_PKEY_free clears the key material (OpenSSL's BN_clear_free). */
    EVP_PKEY_free(ca->key);
    EVP_PKEY_free(ca->leaf_key);
    free(ca->pem);
    OPENSSL_cleanse(ca, sizeof(*ca));
    free(ca);
}

const char *egress_ca_cert_pem(const struct egress_ca *ca)
{
    return ca->pem;
}

X509 *egress_ca_cert(const struct egress_ca *ca)
{
    return ca->cert;
}

uint64_t egress_ca_leaves_made(const struct egress_ca *ca)
{
    return ca->made;
}

static X509 *make_leaf(struct egress_ca *ca, const char *host)
{
    X509 *x = X509_new();
    if (!x)
        return NULL;
    char san[EGRESS_HOST_MAX + 8];
    snprintf(san, sizeof(san), "DNS:%s", host);
    X509_NAME *name = X509_get_subject_name(x);
    if (X509_set_version(x, 2) != 1 || set_serial(x) != 0 ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -BACKDATE_SECS) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), LEAF_VALID_SECS) ||
        X509_set_pubkey(x, ca->leaf_key) != 1 ||
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)host, -1, -1,
                                   0) != 1 ||
        X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) != 1 ||
        add_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE") != 0 ||
        add_ext(x, ca->cert, NID_key_usage, "critical,digitalSignature") != 0 ||
        add_ext(x, ca->cert, NID_ext_key_usage, "serverAuth") != 0 ||
        add_ext(x, ca->cert, NID_subject_alt_name, san) != 0 ||
        add_ext(x, ca->cert, NID_authority_key_identifier, "keyid:always") != 0 ||
        X509_sign(x, ca->key, EVP_sha256()) <= 0) {
        X509_free(x);
        return NULL;
    }
    return x;
}

int egress_ca_leaf(struct egress_ca *ca, const char *host, X509 **cert, EVP_PKEY **key)
{
    char norm[EGRESS_HOST_MAX + 1];
    if (!host || egress_host_normalise(host, strlen(host), norm) != 0 || strcmp(norm, host) != 0)
        return AB_EINVAL;
    int64_t now = ca->now_ms();
    struct leaf *slot = NULL;
    for (size_t i = 0; i < ca->n_leaves; i++) {
        if (strcmp(ca->leaves[i].host, host) == 0) {
            slot = &ca->leaves[i];
            break;
        }
    }
    if (slot && now - slot->made_ms < EGRESS_CA_LEAF_TTL_MS) {
        *cert = slot->cert;
        *key = ca->leaf_key;
        return 0;
    }
    if (!slot && ca->n_leaves < EGRESS_CA_LEAVES_MAX) {
        slot = &ca->leaves[ca->n_leaves++];
        slot->cert = NULL;
    } else if (!slot) {
        slot = &ca->leaves[0]; /* full: replace the oldest */
        for (size_t i = 1; i < ca->n_leaves; i++)
            if (ca->leaves[i].made_ms < slot->made_ms)
                slot = &ca->leaves[i];
    }
    X509 *x = make_leaf(ca, host);
    if (!x) {
        if (!slot->cert) /* a fresh slot: give it back */
            ca->n_leaves--;
        return AB_EIO;
    }
    X509_free(slot->cert);
    slot->cert = x;
    snprintf(slot->host, sizeof(slot->host), "%s", host);
    slot->made_ms = now;
    ca->made++;
    *cert = x;
    *key = ca->leaf_key;
    return 0;
}

SSL_CTX *egress_ca_server_ctx(struct egress_ca *ca)
{
    return ca->server_ctx;
}

int egress_ca_ssl_set_host(SSL *ssl, const char *host)
{
    return g_host_idx >= 0 && SSL_set_ex_data(ssl, g_host_idx, (void *)host) == 1 ? 0 : AB_EIO;
}

/* Picks the leaf by SNI. When the SSL was bound to a host (the intercept
 * knows which host it is relaying to), an SNI naming another host is refused:
 * the leaf must be for the host the connection was judged and dialled for. */
static int servername_cb(SSL *ssl, int *alert, void *arg)
{
    struct egress_ca *ca = arg;
    const char *bound = g_host_idx >= 0 ? SSL_get_ex_data(ssl, g_host_idx) : NULL;
    const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    char norm[EGRESS_HOST_MAX + 1];
    const char *host = bound;
    if (sni) {
        if (egress_host_normalise(sni, strlen(sni), norm) != 0)
            goto refuse;
        if (bound && strcmp(norm, bound) != 0)
            goto refuse;
        host = norm;
    }
    if (!host)
        goto refuse;
    X509 *cert;
    EVP_PKEY *key;
    if (egress_ca_leaf(ca, host, &cert, &key) != 0 || SSL_use_certificate(ssl, cert) != 1 ||
        SSL_use_PrivateKey(ssl, key) != 1) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    return SSL_TLSEXT_ERR_OK;
refuse:
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}
