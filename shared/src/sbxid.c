/* Sandbox ids: <cluster>-<20 chars [a-z0-9]> (DESIGN §6). The suffix has a
 * fixed length, so the split takes the last 21 characters ("-" + suffix) and
 * the cluster may itself contain hyphens. */
#include "agentbox/sbxid.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char suffix_alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
#define ALPHABET_LEN 36
/* Largest multiple of 36 that fits a byte; bytes at or above it are redrawn
 * so every character is equally likely. */
#define ACCEPT_BELOW 252

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (err != NULL && errlen > 0)
        ab_strlcpy(err, msg, errlen);
}

bool sbxid_cluster_is_valid(const char *s, char *err, size_t errlen)
{
    size_t len;

    if (s == NULL || s[0] == '\0') {
        set_err(err, errlen, "cluster id is empty; use a DNS label such as 'cluster-b'");
        return false;
    }
    len = strnlen(s, SBXID_CLUSTER_MAX + 1);
    if (len > SBXID_CLUSTER_MAX) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "cluster id is longer than %d characters", SBXID_CLUSTER_MAX);
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (!is_lower_alnum(s[i]) && s[i] != '-') {
            set_err(err, errlen, "cluster id may contain only lowercase letters, digits and '-'");
            return false;
        }
    }
    if (s[0] == '-' || s[len - 1] == '-') {
        set_err(err, errlen, "cluster id must start and end with a lowercase letter or digit");
        return false;
    }
    return true;
}

/* AB_ELIMIT when out is too small for cluster + "-" + suffix + NUL;
 * AB_EIO when the random source fails. */
int sbxid_generate(const char *cluster, char *out, size_t outlen)
{
    uint8_t raw[SBXID_SUFFIX_LEN * 2];
    size_t clen;
    size_t n = 0;
    int rc;

    if (!sbxid_cluster_is_valid(cluster, NULL, 0))
        return AB_EINVAL;
    clen = strlen(cluster);
    if (outlen < clen + 1 + SBXID_SUFFIX_LEN + 1)
        return AB_ELIMIT;
    memcpy(out, cluster, clen);
    out[clen] = '-';
    while (n < SBXID_SUFFIX_LEN) {
        rc = crypto_random(raw, sizeof(raw));
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < sizeof(raw) && n < SBXID_SUFFIX_LEN; i++) {
            if (raw[i] < ACCEPT_BELOW)
                out[clen + 1 + n++] = suffix_alphabet[raw[i] % ALPHABET_LEN];
        }
    }
    out[clen + 1 + SBXID_SUFFIX_LEN] = '\0';
    return 0;
}

/* cluster and suffix may be NULL when the caller only validates. */
int sbxid_split(const char *id, char *cluster, char *suffix)
{
    char c[SBXID_CLUSTER_MAX + 1];
    size_t len;
    size_t clen;

    if (id == NULL)
        return AB_EINVAL;
    len = strnlen(id, SBXID_MAX + 1);
    if (len > SBXID_MAX || len < 1 + 1 + SBXID_SUFFIX_LEN)
        return AB_EINVAL;
    clen = len - SBXID_SUFFIX_LEN - 1;
    if (id[clen] != '-')
        return AB_EINVAL;
    for (size_t i = clen + 1; i < len; i++) {
        if (!is_lower_alnum(id[i]))
            return AB_EINVAL;
    }
    memcpy(c, id, clen);
    c[clen] = '\0';
    if (!sbxid_cluster_is_valid(c, NULL, 0))
        return AB_EINVAL;
    if (cluster != NULL)
        memcpy(cluster, c, clen + 1);
    if (suffix != NULL)
        memcpy(suffix, id + clen + 1, SBXID_SUFFIX_LEN + 1);
    return 0;
}

int sbxid_cluster_of(const char *id, char *cluster)
{
    return sbxid_split(id, cluster, NULL);
}
