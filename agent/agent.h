/* The agent process as `agentbox-agent serve` runs it: struct agent owns
 * the loop, the three listeners (E2B API, data plane, native API, each with
 * /healthz and /metrics) and every module. Each module is X_new(deps) /
 * X_free(x) with a deps struct naming what it may call; struct agent holds
 * the pointers, agent_init creates them and agent_fini frees them, in one
 * place. Modules hand their route tables to the agent, which installs them;
 * no module sees struct agent. Everything runs on the loop thread. */
#ifndef AGENTBOX_AGENT_AGENT_H
#define AGENTBOX_AGENT_AGENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/config.h"
#include "agentbox/http.h"

#define AGENT_MAX_ROUTES 128

struct loop;
struct agent_tunnel;
struct agent_auth;
struct dataplane;
struct e2b;
struct fed;
struct hub_link;
struct native;
struct catalogue;
struct rt;
struct agent_pool_seen;
struct egress_wiring;
struct kube_lease;
struct autoscaler;

struct agent_config {
    char *cluster_id;
    char *hub_url;
    char *join_token;
    char *hub_ca;
    char *tunnel_framing;
    char *event_loop; /* --event-loop: libev or poll (loop.h) */
    char *runtime;
    char *state_dir;
    char *manifests_dir;
    char *envd_path;
    char *kubeconfig;       /* kube runtime: NULL → in-cluster, $KUBECONFIG, ~/.kube/config */
    char *kube_namespace;   /* kube runtime: NULL → the config's, else "default" */
    bool leader_election;   /* kube runtime: reconcile only while holding the Lease */
    char *registry_rewrite; /* kube runtime: the region's FROM=TO registry hosts */
    char *egress_image;     /* kube runtime: the egress sidecar's image; NULL: the idle image */
    char *lease_name;       /* kube runtime: the coordination.k8s.io Lease */
    int64_t lease_duration_ms;
    int64_t lease_renew_deadline_ms;
    int64_t lease_retry_period_ms;
    int64_t uid_base;          /* local runtime: host uid of sandbox uid 0 */
    int64_t spawn_concurrency; /* local runtime: spawns and removals at a time */
    bool envd_zygote;          /* local runtime: fork envd from a zygote, not exec it */
    char *data_domain;
    char *prometheus_url;  /* e2b metrics backend (NULL: 501) */
    char *log_service_url; /* e2b logs of ended sandboxes (NULL: 501) */
    char *e2b_listen;
    char *data_listen;
    char *native_listen;
    char *metrics_listen;
    char *log_level;
    bool log_json;
    int64_t tunnel_ping_interval_ms;
    int64_t tunnel_timeout_ms;
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
    int64_t reconnect_reset_ms;
    bool enable_diag;         /* /v1/diag/... on the native API (admin only either way) */
    bool insecure_tunnel;     /* ws:// to a non-loopback hub */
    char *egress_range;       /* local runtime: IPv4 CIDR of the sandbox veths */
    char *egress_resolver;    /* DNS server the gateway relays to (NULL: resolv.conf) */
    char *egress_upstream_ca; /* extra PEM bundle for intercepted upstreams (NULL: system only) */
    int64_t egress_conns_per_sandbox; /* open connections per sandbox through the gateway */
};

/* Whether the host of "host[:port][/...]" is loopback (127.0.0.0/8, ::1,
 * localhost). Decides whether a ws:// hub_url is refused. */
bool agent_url_is_loopback(const char *hostport);

extern const struct cfg_option agent_serve_options[];
extern const size_t agent_serve_noptions;

/* AGENT_METRICS serves only /metrics and /healthz (metrics_listen, loopback
 * by default): the page is unauthenticated and names sandboxes. */
enum agent_listener { AGENT_E2B = 0, AGENT_DATA, AGENT_NATIVE, AGENT_METRICS, AGENT_NLISTENERS };

struct agent_listener_state {
    const char *name; /* "e2b", "data", "native", "metrics" */
    struct http_route routes[AGENT_MAX_ROUTES];
    size_t nroutes;
    struct http_router *router;
    struct http_server *server;
};

/* Created in this order by agent_init (the tunnel by agent_start); agent_fini
 * frees them in reverse, with the one exception it documents. */
struct agent {
    const struct agent_config *cfg; /* not owned */
    struct loop *loop;
    struct hub_link *hub;              /* every call to the hub and relay through it */
    struct agent_auth *auth;           /* API keys, validated through the hub */
    struct egress_wiring *egress;      /* local runtime: namespace, gateway, slot table */
    struct rt *rt;                     /* the sandbox runtime */
    struct agent_pool_seen *pool_seen; /* pool gauge series exported so far (agent.c) */
    struct dataplane *dp;
    struct autoscaler *as; /* scaling groups: the runtime's member replicas */
    struct fed *fed;       /* bare-name placement and the capacity reporter */
    struct native *native;
    struct catalogue *catalogue; /* the hub's templates applied here (catalogue.c) */
    struct e2b *e2b;
    struct agent_listener_state l[AGENT_NLISTENERS];
    struct agent_tunnel *tunnel; /* NULL when standalone */
    /* kube runtime with leader election: the elector, its identity, and what
     * it last said (written on the lease thread, applied on the loop). */
    struct kube_lease *lease;
    char lease_identity[160];
    _Atomic bool lease_leading;
};

/* Validates cfg (each failure names the key and what to set). */
int agent_config_check(const struct agent_config *cfg, char *err, size_t errlen);
int agent_init(struct agent *a, const struct agent_config *cfg, char *err, size_t errlen);
/* routes is copied; strings and args must outlive the agent. Before agent_start only. */
int agent_add_routes(struct agent *a, enum agent_listener which, const struct http_route *routes,
                     size_t n, char *err, size_t errlen);
/* The router of a listener, for tunnel streams to dispatch into (after agent_start). */
struct http_router *agent_router(struct agent *a, enum agent_listener which);
int agent_start(struct agent *a, char *err, size_t errlen);
/* The /healthz and /metrics answers, for a listener whose catch-all route
 * answers them itself (the data plane). */
void agent_respond_healthz(struct http_exchange *ex, struct agent *a);
void agent_respond_metrics(struct http_exchange *ex, struct agent *a);
/* Runs the loop until loop_stop (main.c's signal handler calls it). */
int agent_run(struct agent *a);
void agent_fini(struct agent *a);

extern const char agent_serve_description[];

#endif
