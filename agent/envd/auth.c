/* Access token, /files signatures and the Basic-auth user. */
#include "agent/envd/auth.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"

int envd_sig_make(const char *path, const char *op, const char *username, const char *token,
                  int64_t expiration, char *out, size_t outlen)
{
    uint8_t sum[CRYPTO_SHA256_LEN];
    char b64[4 * ((CRYPTO_SHA256_LEN + 2) / 3) + 1];
    char *msg;
    size_t n;
    int len;

    if (expiration >= 0)
        len = asprintf(&msg, "%s:%s:%s:%s:%" PRId64, path, op, username, token, expiration);
    else
        len = asprintf(&msg, "%s:%s:%s:%s", path, op, username, token);
    if (len < 0)
        return AB_ENOMEM;
    crypto_sha256(msg, (size_t)len, sum);
    free(msg);
    crypto_base64_encode(sum, sizeof(sum), b64);
    n = strlen(b64);
    while (n > 0 && b64[n - 1] == '=')
        b64[--n] = '\0';
    if (3 + n + 1 > outlen)
        return AB_ELIMIT;
    snprintf(out, outlen, "v1_%s", b64);
    return 0;
}

bool envd_token_matches(const char *token, const char *given)
{
    size_t n = strlen(token);

    if (given == NULL || strlen(given) != n)
        return false;
    return crypto_equal(token, given, n);
}

int envd_sig_check(const char *token, const char *header_token, const char *signature,
                   const char *expiration, const char *path, const char *op, const char *username,
                   int64_t now, char *err, size_t errlen)
{
    char want[ENVD_SIG_MAX];
    int64_t exp = -1;
    int rc;

    if (token == NULL)
        return 0;
    if (header_token != NULL && header_token[0] != '\0') {
        if (envd_token_matches(token, header_token))
            return 0;
        snprintf(err, errlen, "access token present in header but does not match");
        return AB_EDENIED;
    }
    if (signature == NULL || signature[0] == '\0') {
        snprintf(err, errlen,
                 "missing signature query parameter: send X-Access-Token or a "
                 "signed URL");
        return AB_EDENIED;
    }
    if (expiration != NULL && expiration[0] != '\0') {
        char *end;
        errno = 0;
        long long v = strtoll(expiration, &end, 10);
        if (errno != 0 || *end != '\0' || v < 0) {
            snprintf(err, errlen, "signature_expiration must be a unix time in seconds");
            return AB_EINVAL;
        }
        exp = v;
    }
    rc = envd_sig_make(path, op, username != NULL ? username : "", token, exp, want, sizeof(want));
    if (rc != 0) {
        snprintf(err, errlen, "cannot compute the signature: %s", ab_strerror(rc));
        return rc;
    }
    if (strlen(signature) != strlen(want) || !crypto_equal(signature, want, strlen(want))) {
        snprintf(err, errlen, "invalid signature");
        return AB_EDENIED;
    }
    if (exp >= 0 && exp < now) {
        snprintf(err, errlen, "signature is already expired");
        return AB_EDENIED;
    }
    return 0;
}

bool envd_username_is_valid(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n > ENVD_USERNAME_MAX)
        return false;
    if (!isalpha((unsigned char)name[0]) && name[0] != '_')
        return false;
    for (size_t i = 1; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (isalnum(c) || c == '_' || c == '.' || c == '-')
            continue;
        if (c == '$' && i == n - 1)
            continue;
        return false;
    }
    return true;
}

int envd_basic_user(const char *header, char *user, size_t len)
{
    uint8_t dec[256];
    size_t dlen = 0;
    const char *b64;
    size_t blen;
    char *colon;

    if (header == NULL)
        return AB_ENOENT;
    if (strncasecmp(header, "Basic ", 6) != 0)
        return AB_EINVAL;
    b64 = header + 6;
    while (*b64 == ' ')
        b64++;
    blen = strlen(b64);
    while (blen > 0 && b64[blen - 1] == ' ')
        blen--;
    if (crypto_base64_decode(b64, blen, dec, sizeof(dec) - 1, &dlen) != 0)
        return AB_EINVAL;
    dec[dlen] = '\0';
    if (memchr(dec, '\0', dlen) != NULL)
        return AB_EINVAL;
    colon = strchr((char *)dec, ':');
    if (colon == NULL)
        return AB_EINVAL;
    *colon = '\0';
    if (!envd_username_is_valid((char *)dec) || strlen((char *)dec) >= len)
        return AB_EINVAL;
    ab_strlcpy(user, (char *)dec, len);
    return 0;
}
