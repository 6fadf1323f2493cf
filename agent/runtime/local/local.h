/* The local runtime: runtime.h implemented with manifests from a directory
 * (manifest.h) and namespaced sandboxes (sandbox.h). Loop thread only, except
 * that sandbox start, internet attach and directory removal run on the
 * loop's workers. */
#ifndef AGENTBOX_RUNTIME_LOCAL_LOCAL_H
#define AGENTBOX_RUNTIME_LOCAL_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "agent/runtime/runtime.h"

struct loop;
struct mf_set;
struct egress_netns_config;
struct egress_table;

struct lrt_options {
    struct loop *loop;
    const char *cluster_id; /* selects the Env member segment (spec.clusters[].clusterID) */
    const char *state_dir;  /* sandboxes live in <state_dir>/sandboxes/<sid> */
    const char *manifests_dir;
    const char *envd_path; /* absolute; run as `envd --listen unix:/run/agentbox/envd.sock` */
    const char *const *envd_args; /* extra arguments, NULL-terminated, or NULL */
    /* The agent's egress namespace and its slot table (both borrowed, outlive
     * the runtime): each sandbox gets the veth of slot <its uid slice> at spawn
     * and its claim's policy in the table. NULL: sandboxes have loopback only
     * (and creates asking for egress lists are refused: no RT_CAP_EGRESS). */
    const struct egress_netns_config *egress;
    struct egress_table *egress_table;
    uint32_t uid_base; /* sandbox k's uids 0-65535 → host uid_base + k * 65536..; each sandbox its
                          own slice (reclaimed when it is gone); 0 → 100000 (--uid-base) */
    int reload_ms;     /* manifest change check and health check; 0 → 2000 */
    int max_sandboxes; /* all pools together; 0 → 256 */
    int waiters_max;   /* waiting claims per pool; 0 → 1024 */
    int heavy_max;     /* spawns and removals at a time (give the loop 2 workers more);
                          0 → LRT_HEAVY_MAX (--spawn-concurrency) */
    bool envd_zygote;  /* fork sandboxes from an envd zygote (zygote.h; --envd-zygote); one
                          that cannot start is logged and envd is exec'd per sandbox */
};

/* Loads the manifests (bad objects are logged, not fatal), re-adopts live
 * sandboxes found under the state directory and reaps the rest, then starts
 * warming the pools. AB_EIO (err says why) when the directories are unusable. */
int lrt_new(const struct lrt_options *o, struct rt **out, char *err, size_t errlen);

/* Reloads the manifest directory now if it changed (the timer does it too). */
void lrt_reload(struct rt *rt);

/* The manifest set in use (errors included); borrowed until the next reload. */
const struct mf_set *lrt_manifests(struct rt *rt);

#endif
