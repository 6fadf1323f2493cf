/* dp_target_parse on arbitrary request parts. The input is split on '\n' into
 * target, Host, E2b-Sandbox-Id, E2b-Sandbox-Port, X-Sandbox-Id, X-Sandbox-Port
 * and the data domain; a missing line is an absent header. Never crashes, and
 * what it returns holds: a port in range, a terminated id and path, a message
 * exactly when it refuses, and a cluster (or a message) for every id it cuts
 * out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/dataplane_target.h"
#include "agentbox/common.h"
#include "agentbox/sbxid.h"

#define NPARTS 7

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char in[16384];
    const char *part[NPARTS] = {0};
    static struct dp_target t;
    char err[512];
    size_t n = size < sizeof(in) - 1 ? size : sizeof(in) - 1;
    int np = 0, rc;

    memcpy(in, data, n);
    in[n] = '\0';
    for (char *p = in; np < NPARTS;) {
        part[np++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    const struct dp_target_req req = {
        .target = part[0],
        .host = part[1],
        .e2b_id = part[2],
        .e2b_port = part[3],
        .x_id = part[4],
        .x_port = part[5],
    };
    err[0] = '\0';
    rc = dp_target_parse(&req, part[6], &t, err, sizeof(err));
    if (rc == 0) {
        if (t.port < 1 || t.port > 65535 || !t.id[0] || err[0])
            abort();
        if (!memchr(t.id, '\0', sizeof(t.id)) || !memchr(t.path, '\0', sizeof(t.path)))
            abort();
        if (t.path[0] != '/' && (!part[0] || strcmp(t.path, part[0]) != 0))
            abort(); /* the path form always rewrites to "/..."; others pass it on */
        /* the way the request goes: a cluster, or a 400 that says why */
        char cluster[SBXID_CLUSTER_MAX + 1];
        err[0] = '\0';
        rc = dp_target_cluster(&t, cluster, err, sizeof(err));
        if (rc == 0 ? (err[0] || !sbxid_cluster_is_valid(cluster, NULL, 0))
                    : (rc != AB_EINVAL || !err[0]))
            abort();
    } else if (rc == AB_EINVAL) {
        if (!err[0] || !memchr(err, '\0', sizeof(err)))
            abort();
    } else if (rc != AB_ENOENT || err[0]) {
        abort();
    }
    return 0;
}
