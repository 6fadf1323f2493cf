/* The per-sandbox certificate authority of the egress gateway (issue 12
 * "Secrets on the way out"): a P-256 CA made when the sandbox is, whose
 * certificate goes into the sandbox's trust store, and the leaf certificates
 * the gateway presents to the sandbox for each intercepted host.
 *
 * The CA key exists only in this process's memory: nothing here writes a
 * file, and the PEM this module hands out is the certificate alone. A leaf is
 * made on first use of a host and cached per CA (EGRESS_CA_LEAVES_MAX hosts,
 * the oldest dropped first) for EGRESS_CA_LEAF_TTL_MS; the leaf is valid for
 * longer than that, so a cached leaf is never served expired.
 *
 * One CA belongs to one sandbox and one thread (the loop's; the reference
 * count is not atomic). */
#ifndef AGENTBOX_AGENT_EGRESS_CA_H
#define AGENTBOX_AGENT_EGRESS_CA_H

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stddef.h>
#include <stdint.h>

#define EGRESS_CA_LEAF_TTL_MS (24LL * 3600 * 1000)
#define EGRESS_CA_LEAVES_MAX 64 /* as many as a policy has rule hosts */
#define EGRESS_CA_ID_MAX 128    /* sandbox ids in the CA's subject */

struct egress_ca_deps {
    const char *sandbox_id; /* named in the CA's subject; at most EGRESS_CA_ID_MAX */
    /* The clock of the leaf cache (ms, monotonic); NULL = ab_now_ms. Tests move it. */
    int64_t (*now_ms)(void);
};

struct egress_ca;

/* A new CA with a fresh key and one reference; NULL when the sandbox id is
 * empty or too long, or OpenSSL fails. */
struct egress_ca *egress_ca_new(const struct egress_ca_deps *deps);
/* Another reference (an intercepted connection holds one, so the sandbox's
 * record may let go of the CA while a handshake still needs its leaf). */
struct egress_ca *egress_ca_ref(struct egress_ca *ca);
/* Drops a reference; the last one wipes the keys and frees. NULL is a no-op. */
void egress_ca_free(struct egress_ca *ca);

/* The CA certificate in PEM, NUL-terminated, for the sandbox's trust store.
 * Owned by ca. Never the key. */
const char *egress_ca_cert_pem(const struct egress_ca *ca);
/* The CA certificate itself (owned by ca), for tests and verification. */
X509 *egress_ca_cert(const struct egress_ca *ca);

/* The leaf for host (a lower-case DNS name, as the policy normalised it):
 * subject CN and the one SAN dNSName = host, serverAuth, signed by the CA.
 * Cached; a leaf older than the TTL is replaced. *cert and *key are owned by
 * ca and valid until the next call or egress_ca_free. 0, AB_EINVAL for a bad
 * host, AB_EIO when OpenSSL fails. */
int egress_ca_leaf(struct egress_ca *ca, const char *host, X509 **cert, EVP_PKEY **key);

/* The TLS server context for the sandbox-facing side: TLS 1.2+, and a
 * servername callback that presents the leaf for the ClientHello's SNI. A
 * ClientHello without SNI gets the leaf of the host set with
 * egress_ca_ssl_set_host, or a handshake failure. Owned by ca. */
SSL_CTX *egress_ca_server_ctx(struct egress_ca *ca);
/* The host an SSL made from egress_ca_server_ctx falls back to without SNI;
 * host must outlive ssl. 0 or AB_EIO. */
int egress_ca_ssl_set_host(SSL *ssl, const char *host);

/* How many leaves were made (not served from the cache), for tests and metrics. */
uint64_t egress_ca_leaves_made(const struct egress_ca *ca);

#endif
