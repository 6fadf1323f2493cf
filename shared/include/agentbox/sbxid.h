/* Sandbox ids carry their cluster: <cluster>-<20 chars [a-z0-9]> (DESIGN §6).
 * Cluster ids are DNS labels ([a-z0-9]([a-z0-9-]*[a-z0-9])?) of at most 24
 * characters, so "49983-<id>.<domain>" stays a valid host label (≤ 63). */
#ifndef AGENTBOX_SBXID_H
#define AGENTBOX_SBXID_H

#include <stdbool.h>
#include <stddef.h>

#define SBXID_CLUSTER_MAX 24
#define SBXID_SUFFIX_LEN 20
#define SBXID_MAX (SBXID_CLUSTER_MAX + 1 + SBXID_SUFFIX_LEN) /* 45, without NUL */

/* True when s is a valid cluster id; otherwise writes why into err (may be NULL). */
bool sbxid_cluster_is_valid(const char *s, char *err, size_t errlen);

/* Writes a new id for cluster into out (at least SBXID_MAX + 1 bytes), using
 * a CSPRNG. Returns 0, or AB_EINVAL for an invalid cluster id. */
int sbxid_generate(const char *cluster, char *out, size_t outlen);

/* Splits id into cluster (SBXID_CLUSTER_MAX + 1 bytes) and suffix
 * (SBXID_SUFFIX_LEN + 1 bytes). Returns 0, or AB_EINVAL when id is not of
 * the form above (wrong length, bad characters, invalid cluster). */
int sbxid_split(const char *id, char *cluster, char *suffix);

/* The cluster part only; AB_EINVAL as for sbxid_split. */
int sbxid_cluster_of(const char *id, char *cluster);

#endif
