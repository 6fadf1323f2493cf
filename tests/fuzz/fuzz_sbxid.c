/* sbxid_split on arbitrary bytes: never crashes, and a valid split joins
 * back to the input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/sbxid.h"

static int lower_alnum(const char *s)
{
    for (; *s != '\0'; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[256];
    char cluster[SBXID_CLUSTER_MAX + 1];
    char cluster2[SBXID_CLUSTER_MAX + 1];
    char suffix[SBXID_SUFFIX_LEN + 1];
    char joined[SBXID_MAX + 2];
    char id[SBXID_MAX + 1];
    char err[128];
    size_t n = size < sizeof(in) - 1 ? size : sizeof(in) - 1;
    int rc;

    memcpy(in, data, n);
    in[n] = '\0';

    rc = sbxid_split(in, cluster, suffix);
    if (rc != 0 && rc != AB_EINVAL)
        abort();
    if (sbxid_cluster_of(in, cluster2) != rc)
        abort();
    if (rc == 0) {
        if (!sbxid_cluster_is_valid(cluster, NULL, 0) || strcmp(cluster, cluster2) != 0)
            abort();
        if (strlen(suffix) != SBXID_SUFFIX_LEN || !lower_alnum(suffix))
            abort();
        snprintf(joined, sizeof(joined), "%s-%s", cluster, suffix);
        if (strcmp(joined, in) != 0)
            abort();
    }

    /* Any valid cluster id makes ids that split back to it. */
    if (sbxid_cluster_is_valid(in, err, sizeof(err))) {
        if (sbxid_generate(in, id, sizeof(id)) != 0 || sbxid_split(id, cluster, suffix) != 0 ||
            strcmp(cluster, in) != 0)
            abort();
    } else if (err[0] == '\0' || sbxid_generate(in, id, sizeof(id)) != AB_EINVAL) {
        abort();
    }
    return 0;
}
