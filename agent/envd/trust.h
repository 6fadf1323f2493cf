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
#include <stddef.h>

#define ENVD_TRUST_CA_FILE "/etc/ssl/certs/agentbox-egress-ca.pem"
#define ENVD_TRUST_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define ENVD_TRUST_PEM_MAX (64 * 1024)
#define ENVD_TRUST_BUNDLE_MAX (16 * 1024 * 1024)

/* Installs pem (len bytes: one or more PEM certificates, nothing else) under
 * root ("" for the sandbox's /; tests pass a directory). Files are replaced
 * atomically (write, fsync, rename), mode 0644. 0, or AB_EINVAL / AB_ELIMIT /
 * AB_EIO with err naming the file or the problem. */
int envd_trust_install(const char *root, const char *pem, size_t len, char *err, size_t errlen);

/* Adds NODE_EXTRA_CA_CERTS and REQUESTS_CA_BUNDLE to vars (an object of
 * strings) unless the caller set them. */
void envd_trust_env(json_t *vars);

#endif
