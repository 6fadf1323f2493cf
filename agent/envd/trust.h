/* The egress gateway's per-sandbox CA certificate in the sandbox's trust
 * store (issue 12: the CA is installed through /init). envd writes the
 * certificate (never a key: a PEM holding one is refused) to
 * ENVD_TRUST_CA_FILE and into the system bundle ENVD_TRUST_BUNDLE between
 * marker lines, replacing an earlier agentbox CA there, so OpenSSL, curl and
 * Go trust it; Node and Python's requests keep their own stores, so /init also
 * points NODE_EXTRA_CA_CERTS and REQUESTS_CA_BUNDLE at these files for the
 * processes envd starts (envd_trust_env). */
#ifndef AGENTBOX_ENVD_TRUST_H
#define AGENTBOX_ENVD_TRUST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define ENVD_TRUST_CA_FILE "/etc/ssl/certs/agentbox-egress-ca.pem"
#define ENVD_TRUST_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
/* Where a sandbox whose /etc is read-only (the local runtime binds the host's)
 * gets them instead: the CA, and the system bundle with the CA appended,
 * which SSL_CERT_FILE and CURL_CA_BUNDLE then name. */
#define ENVD_TRUST_FALLBACK_CA "/tmp/.agentbox-egress/egress-ca.pem"
#define ENVD_TRUST_FALLBACK_BUNDLE "/tmp/.agentbox-egress/ca-bundle.pem"
#define ENVD_TRUST_PEM_MAX (64 * 1024)
#define ENVD_TRUST_BUNDLE_MAX (16 * 1024 * 1024)

/* Where the CA went. */
struct envd_trust_paths {
    const char *ca_file;
    const char *bundle;
    bool fallback; /* the system store was read-only */
};

/* Installs pem (len bytes: one or more PEM certificates, nothing else) under
 * root ("" for the sandbox's /; tests pass a directory): the system store,
 * or the fallback files when it cannot be written. Files are replaced
 * atomically (write, fsync, rename), mode 0644. 0 and *out, or AB_EINVAL /
 * AB_ELIMIT / AB_EIO with err naming the file or the problem. */
int envd_trust_install(const char *root, const char *pem, size_t len, struct envd_trust_paths *out,
                       char *err, size_t errlen);

/* Points NODE_EXTRA_CA_CERTS and REQUESTS_CA_BUNDLE (and with the fallback
 * SSL_CERT_FILE and CURL_CA_BUNDLE) of vars (an object of strings) at where
 * the CA went, unless the caller set them. */
void envd_trust_env(json_t *vars, const struct envd_trust_paths *where);

#endif
