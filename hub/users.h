/* Human users of the hub's console (issue 16): username, team, role and a
 * password hashed with scrypt (OpenSSL 3 EVP_KDF "SCRYPT").
 *
 * A hash is "$scrypt$ln=<log2 N>,r=<r>,p=<p>$<salt base64>$<key base64>":
 * the parameters travel with it, so verification uses the ones it was made
 * with and they can be raised for new hashes at any time.
 *
 * Threads: pure functions anywhere (hashing takes ~32 MiB and tens of ms:
 * never on the loop thread, only in database jobs and CLIs); *_conn block on
 * PostgreSQL. */
#ifndef AGENTBOX_HUB_USERS_H
#define AGENTBOX_HUB_USERS_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

#include "hub/iam.h"

#define USERS_NAME_MAX 63
#define USERS_HASH_MAX 160
#define USERS_PASSWORD_MIN 8
#define USERS_PASSWORD_MAX 256
#define USERS_SCRYPT_LN 15 /* N = 32768, r = 8: 32 MiB per hash */
#define USERS_SCRYPT_R 8
#define USERS_SCRYPT_P 1

/* Hashes password with a fresh 16-byte salt into out (USERS_HASH_MAX + 1). */
int users_password_hash(const char *password, char out[USERS_HASH_MAX + 1], char *err,
                        size_t errlen);
/* True when password matches hash (constant-time compare of the derived key);
 * false for a malformed hash too. */
bool users_password_verify(const char *password, const char *hash);
/* AB_EINVAL naming the field unless username is 1..63 of [a-z0-9._-] starting
 * with a letter or digit. */
int users_check_name(const char *username, char *err, size_t errlen);

/* `agentbox-hub user add|passwd|list|disable` (argv after "user"). Exit status. */
int users_cli_main(int argc, char **argv);

#endif
