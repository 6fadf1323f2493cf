/* The REPORT parser and the registry behind it on arbitrary bytes. The
 * first byte picks the reporting cluster and a follow-up action, the rest is
 * the frame's JSON. A refusal must come with a message and leave the
 * registry as it was; an accepted report must be findable; the registry
 * persists across inputs so churn paths (replace, drop, expire) run too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/tunnel.h"
#include "hub/federation.h"

static struct fed_registry *g;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const clusters[] = {"alpha", "beta", "gamma", "delta"};
    if (size < 1 || size > TUN_REPORT_MAX)
        return 0;
    if (!g && !(g = fed_registry_new(false)))
        abort();
    uint8_t knob = data[0];
    const char *cluster = clusters[knob & 3];
    int64_t now = 100000 + (int64_t)(knob >> 4) * 5000;

    json_error_t je;
    json_t *msg = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, &je);
    if (!msg)
        return 0;
    char err[256] = "";
    size_t before = fed_registry_count(g);
    int rc = fed_registry_report(g, cluster, msg, now, err, sizeof(err));
    if (rc != 0 && (err[0] == '\0' || fed_registry_count(g) != before))
        abort();
    if (rc == 0) {
        json_t *recs = json_object_get(msg, "records");
        json_t *first = json_array_get(recs, 0);
        if (first) {
            const char *ns = json_string_value(json_object_get(first, "namespace"));
            const char *env = json_string_value(json_object_get(first, "env"));
            const struct route_entry *v;
            if (!ns || !env || fed_registry_env(g, ns, env, &v) == 0)
                abort();
            struct route_query q = {.ns = ns,
                                    .env = env,
                                    .local = cluster,
                                    .local_idle = -1,
                                    .local_can_grow = -1,
                                    .now_ms = now};
            struct route_decision d;
            fed_registry_decide(g, &q, &d);
            if (d.step < 1 || d.step > 5)
                abort();
        }
    }
    json_decref(msg);
    if ((knob & 0x0c) == 0x0c)
        fed_registry_drop_cluster(g, cluster);
    else if ((knob & 0x0c) == 0x08)
        fed_registry_expire(g, now + 20000);
    return 0;
}
