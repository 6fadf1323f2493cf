/* Access rules of envd (e2b-protocol.md §2.3): the X-Access-Token check,
 * /files URL signatures and the Basic-auth username. Pure: any thread. */
#ifndef ENVD_AUTH_H
#define ENVD_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ENVD_SIG_MAX 64      /* "v1_" + 43 base64 chars + NUL fits */
#define ENVD_USERNAME_MAX 32 /* useradd's limit */

/* "v1_" + unpadded standard base64 of SHA-256 of
 * "<path>:<op>:<username>:<token>" (":<expiration>" appended when
 * expiration >= 0). username is "" when none was given. */
int envd_sig_make(const char *path, const char *op, const char *username, const char *token,
                  int64_t expiration, char *out, size_t outlen);

/* May this GET/POST /files go ahead? token NULL: envd has none, all open.
 * A header token must match; without one, signature must equal the
 * expected one and an expiration, when given, must not be in the past
 * (now in unix seconds). Returns 0, AB_EDENIED (answer 401) or AB_EINVAL
 * for an expiration that is not an integer (answer 400); reason in err. */
int envd_sig_check(const char *token, const char *header_token, const char *signature,
                   const char *expiration, const char *path, const char *op, const char *username,
                   int64_t now, char *err, size_t errlen);

/* Constant-time comparison of the configured token with a given one. */
bool envd_token_matches(const char *token, const char *given);

/* The user of "Authorization: Basic base64(user:password)". Returns 0,
 * AB_ENOENT when header is NULL, AB_EINVAL when it is not Basic, not
 * base64, has no ':' or the name is not a valid user name. */
int envd_basic_user(const char *header, char *user, size_t len);

/* Portable POSIX-ish user names: [A-Za-z_][A-Za-z0-9_.-]*$?, 1..32 bytes. */
bool envd_username_is_valid(const char *name);

#endif
