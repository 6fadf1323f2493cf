/* agentbox-agent serve: configuration, listeners, lifecycle. */
#include "agent/agent.h"
#include "agent/auth.h"
#include "agent/catalogue.h"
#include "agent/autoscaler.h"
#include "agent/dataplane.h"
#include "agent/e2b/e2b.h"
#include "agent/egress/wiring.h"
#include "agent/hub_link.h"
#include "agent/native/native.h"
#include "agent/route_client.h"
#include "agent/runtime/kube/kube.h"
#include "agent/runtime/kube/lease.h"
#include "agent/runtime/local/local.h"
#include "agent/runtime/runtime.h"
#include "agent/tunnel_client.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/hex.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agentbox/sbxid.h"
#include "agentbox/version.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <errno.h>
#include <limits.h>
#include <unistd.h>

#define AOPT(field) offsetof(struct agent_config, field)

const struct cfg_option agent_serve_options[] = {
    {"cluster_id", CFG_STRING, NULL, true, AOPT(cluster_id),
     "this cluster's id: a DNS label of at most 24 characters (a-z, 0-9, '-')", NULL},
    {"hub_url", CFG_STRING, NULL, false, AOPT(hub_url),
     "hub tunnel URL, e.g. wss://hub.example:7701 (ws:// only on loopback); unset: standalone",
     NULL},
    {"join_token", CFG_STRING, NULL, false, AOPT(join_token),
     "the cluster's join token (abxc_...), printed once by 'agentbox-hub cluster add'", NULL},
    {"hub_ca", CFG_STRING, NULL, false, AOPT(hub_ca),
     "CA bundle to verify the hub's TLS certificate (default: system CAs)", NULL},
    {"runtime", CFG_STRING, "local", false, AOPT(runtime),
     "sandbox runtime: local (Linux namespaces on this host) or kube", NULL},
    {"state_dir", CFG_STRING, "/var/lib/agentbox", false, AOPT(state_dir),
     "directory for sandbox state; a restarted agent re-adopts or reaps what it finds", NULL},
    {"manifests_dir", CFG_STRING, NULL, false, AOPT(manifests_dir),
     "local runtime: directory of SandboxTemplate/SandboxEnv/SandboxPool YAML", NULL},
    {"envd_path", CFG_STRING, NULL, false, AOPT(envd_path),
     "local runtime: the agentbox-envd binary (default: next to agentbox-agent)", NULL},
    {"leader_election", CFG_BOOL, "true", false, AOPT(leader_election),
     "kube runtime: reconcile (create, delete, write status) only while holding the Lease, so "
     "replicas can run side by side; --no-leader-election: a single replica leads at once",
     NULL},
    {"lease_name", CFG_STRING, "agentbox-agent", false, AOPT(lease_name),
     "kube runtime: name of the coordination.k8s.io Lease, in $POD_NAMESPACE (else --namespace); "
     "identity $POD_NAME (else the host name) + '_' + random hex",
     NULL},
    {"lease_duration", CFG_DURATION, "15s", false, AOPT(lease_duration_ms),
     "kube runtime: how long a follower waits on an unrenewed Lease before taking it", NULL},
    {"lease_renew_deadline", CFG_DURATION, "10s", false, AOPT(lease_renew_deadline_ms),
     "kube runtime: the leader stops leading when it could not renew for this long", NULL},
    {"lease_retry_period", CFG_DURATION, "2s", false, AOPT(lease_retry_period_ms),
     "kube runtime: how often the Lease is read and renewed (jittered x1.2)", NULL},
    {"kubeconfig", CFG_STRING, NULL, false, AOPT(kubeconfig),
     "kube runtime: kubeconfig file (default: in-cluster service account, then $KUBECONFIG, "
     "then ~/.kube/config)",
     NULL},
    {"registry_rewrite", CFG_STRING, NULL, false, AOPT(registry_rewrite),
     "kube runtime: the region's registry hosts, FROM=TO[,FROM=TO...] (TO may add a /path), "
     "applied to every Pod image after a SandboxTemplate's agentbox.navix.sh/registry-rewrite "
     "annotation (same format); the first FROM equal to the image's registry host wins",
     NULL},
    {"egress_image", CFG_STRING, NULL, false, AOPT(egress_image),
     "kube runtime: image of the egress sidecar and init container (agentbox-egress) in the "
     "Pods of Envs with overrides.gateway.enabled (default: the pool's idle image)",
     NULL},
    {"namespace", CFG_STRING, NULL, false, AOPT(kube_namespace),
     "kube runtime: namespace of the SandboxEnvs, SandboxPools and Pods (default: the "
     "kubeconfig's, else default)",
     NULL},
    {"uid_base", CFG_INT, "100000", false, AOPT(uid_base),
     "local runtime: sandbox uids and gids 0-65535 are host ids uid_base..uid_base+65535 "
     "(an unprivileged range nobody else uses; at least 65536)",
     NULL},
    {"spawn_concurrency", CFG_INT, "16", false, AOPT(spawn_concurrency),
     "local runtime: sandbox spawns and removals at a time, 1-64; each mostly waits (its "
     "namespaces' setup, envd's start, the kernel's teardown), so more than the cores pays "
     "(agent/runtime/local/README.md: 6 -> 231, 16 -> 274 creates/s on 2 cores)",
     NULL},
    {"envd_zygote", CFG_BOOL, "true", false, AOPT(envd_zygote),
     "local runtime: start one envd (a zygote) and fork every sandbox's envd from it instead "
     "of exec'ing envd per sandbox: glibc's start is paid once (~0.6 ms of CPU a sandbox on a "
     "VM, agent/runtime/local/README.md); an --envd that is not an agentbox-envd is exec'd",
     NULL},
    {"data_domain", CFG_STRING, NULL, false, AOPT(data_domain),
     "data plane: route hosts <port>-<sandbox id>.<data_domain> (unset: headers and paths, "
     "and hosts whose first label parses as <port>-<sandbox id>)",
     NULL},
    {"prometheus_url", CFG_STRING, NULL, false, AOPT(prometheus_url),
     "E2B sandbox metrics: Prometheus-compatible backend (bearer token from PROMETHEUS_TOKEN); "
     "unset: the metrics routes answer 501",
     NULL},
    {"log_service_url", CFG_STRING, NULL, false, AOPT(log_service_url),
     "E2B logs of ended sandboxes: the central log service; unset: those answer 501", NULL},
    {"e2b_listen", CFG_STRING, "127.0.0.1:8090", false, AOPT(e2b_listen),
     "E2B-compatible API listen address (HOST:PORT, :PORT or unix:PATH)", NULL},
    {"data_listen", CFG_STRING, "127.0.0.1:8091", false, AOPT(data_listen),
     "data plane listen address", NULL},
    {"native_listen", CFG_STRING, "127.0.0.1:8080", false, AOPT(native_listen),
     "native (console/abx) API listen address", NULL},
    {"metrics_listen", CFG_STRING, "127.0.0.1:8092", false, AOPT(metrics_listen),
     "/metrics (and /healthz) listener, apart from the APIs: the page is not authenticated; "
     "loopback by default, :PORT exposes it on every interface",
     NULL},
    {"log_level", CFG_STRING, "info", false, AOPT(log_level), "debug, info, warn or error", NULL},
    {"log_json", CFG_BOOL, "false", false, AOPT(log_json), "log JSON lines instead of key=value",
     NULL},
    {"tunnel_ping_interval", CFG_DURATION, "10s", false, AOPT(tunnel_ping_interval_ms),
     "WebSocket ping to the hub every this long", NULL},
    {"tunnel_framing", CFG_STRING, "wslay", false, AOPT(tunnel_framing),
     "WebSocket framing of the tunnel: wslay (raw socket, default) or lws; either hub accepts "
     "either",
     NULL},
    {"event_loop", CFG_STRING, LOOP_EVENT_LOOP_DEFAULT, false, AOPT(event_loop),
     LOOP_EVENT_LOOP_HELP, NULL},
    {"tunnel_timeout", CFG_DURATION, "30s", false, AOPT(tunnel_timeout_ms),
     "drop the tunnel after this long without hearing from the hub", NULL},
    {"reconnect_min", CFG_DURATION, "500ms", false, AOPT(reconnect_min_ms),
     "first reconnect backoff (doubles, full jitter)", NULL},
    {"reconnect_max", CFG_DURATION, "30s", false, AOPT(reconnect_max_ms), "reconnect backoff cap",
     NULL},
    {"reconnect_reset", CFG_DURATION, "60s", false, AOPT(reconnect_reset_ms),
     "a tunnel up this long starts the backoff again from reconnect_min", NULL},
    {"enable_diag", CFG_BOOL, "false", false, AOPT(enable_diag),
     "serve the admin-only tunnel diagnostics /v1/diag/echo and /v1/diag/bytes on the native API",
     NULL},
    {"egress_range", CFG_STRING, EGRESS_DEFAULT_RANGE, false, AOPT(egress_range),
     "local runtime: private IPv4 CIDR the sandboxes' veths into the agent's egress namespace "
     "take their /30s from (one namespace per agent: two agents may use the same range)",
     NULL},
    {"egress_resolver", CFG_STRING, NULL, false, AOPT(egress_resolver),
     "DNS server (IP or IP:port) the egress gateway (kube: the Pod sidecar) relays sandbox queries "
     "to "
     "(default: the first nameserver of /etc/resolv.conf)",
     NULL},
    {"egress_upstream_ca", CFG_STRING, NULL, false, AOPT(egress_upstream_ca),
     "local runtime: a PEM bundle the egress gateway trusts, besides the system store, for the "
     "hosts it intercepts to inject network.rules headers (tests: a test server's own CA)",
     NULL},
    {"egress_conns_per_sandbox", CFG_INT, "1024", false, AOPT(egress_conns_per_sandbox),
     "local runtime: open connections one sandbox may have through the egress gateway; the "
     "next is reset (counted as agentbox_egress_denied_total{reason=\"conn_limit\"})",
     NULL},
    {"insecure_tunnel", CFG_BOOL, "false", false, AOPT(insecure_tunnel),
     "allow a ws:// hub_url to a non-loopback host (the join token and keys cross in clear)", NULL},
};
const size_t agent_serve_noptions = AB_ARRAY_LEN(agent_serve_options);

bool agent_url_is_loopback(const char *hostport)
{
    char host[256];
    size_t n = 0;

    if (hostport[0] == '[') { /* [::1]:7701 */
        const char *end = strchr(hostport, ']');
        if (!end || (size_t)(end - hostport - 1) >= sizeof(host))
            return false;
        n = (size_t)(end - hostport - 1);
        memcpy(host, hostport + 1, n);
    } else {
        while (hostport[n] && hostport[n] != ':' && hostport[n] != '/' && n + 1 < sizeof(host)) {
            host[n] = hostport[n];
            n++;
        }
        if (hostport[n] && hostport[n] != ':' && hostport[n] != '/')
            return false; /* longer than any host name */
    }
    host[n] = '\0';
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "::1") == 0)
        return true;
    /* 127.0.0.0/8, written as four decimal octets */
    unsigned a, b, c, d;
    char tail;
    return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 &&
           c < 256 && d < 256;
}

int agent_config_check(const struct agent_config *cfg, char *err, size_t errlen)
{
    char why[160];
    if (!sbxid_cluster_is_valid(cfg->cluster_id, why, sizeof(why))) {
        snprintf(err, errlen,
                 "cluster_id '%s' is invalid: %s; set --cluster-id or AGENTBOX_CLUSTER_ID to a "
                 "DNS label of at most 24 characters",
                 cfg->cluster_id, why);
        return AB_EINVAL;
    }
    if (strcmp(cfg->runtime, "local") != 0 && strcmp(cfg->runtime, "kube") != 0) {
        snprintf(err, errlen, "runtime '%s' is unknown: set --runtime to local or kube",
                 cfg->runtime);
        return AB_EINVAL;
    }
    if (cfg->hub_url) {
        if (strncmp(cfg->hub_url, "ws://", 5) != 0 && strncmp(cfg->hub_url, "wss://", 6) != 0) {
            snprintf(err, errlen, "hub_url '%s' must start with wss:// (or ws:// on loopback)",
                     cfg->hub_url);
            return AB_EINVAL;
        }
        if (strncmp(cfg->hub_url, "ws://", 5) == 0 && !cfg->insecure_tunnel &&
            !agent_url_is_loopback(cfg->hub_url + 5)) {
            snprintf(err, errlen,
                     "hub_url '%s' is ws:// to a host that is not loopback: the join token would "
                     "cross the network in clear; use wss:// or pass --insecure-tunnel",
                     cfg->hub_url);
            return AB_EINVAL;
        }
        if (!cfg->join_token) {
            snprintf(err, errlen,
                     "join_token is required with hub_url: set --join-token or "
                     "AGENTBOX_JOIN_TOKEN to the token 'agentbox-hub cluster add %s' printed",
                     cfg->cluster_id);
            return AB_EINVAL;
        }
    }
    if (cfg->join_token &&
        (strncmp(cfg->join_token, "abxc_", 5) != 0 || strlen(cfg->join_token) != 5 + 64)) {
        snprintf(err, errlen, "join_token must be 'abxc_' followed by 64 hex digits");
        return AB_EINVAL;
    }
    enum log_level lvl;
    if (log_parse_level(cfg->log_level, &lvl) != 0) {
        snprintf(err, errlen, "log_level '%s' must be debug, info, warn or error", cfg->log_level);
        return AB_EINVAL;
    }
    return 0;
}

static json_t *agent_error_json(int status, const char *message)
{
    return json_pack("{s:i,s:s}", "code", status, "message", message);
}

static void h_healthz(struct http_exchange *ex, void *arg)
{
    struct agent *a = arg;
    json_t *body = json_pack("{s:s,s:s,s:s}", "status", "ok", "cluster", a->cfg->cluster_id,
                             "version", AGENTBOX_VERSION);
    http_respond_json(ex, 200, body);
}

static void ping_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    (void)p; /* any valid key: a reachability check, but not for strangers */
    struct agent *a = arg;
    json_t *body = json_pack("{s:b,s:s,s:s}", "pong", 1, "cluster", a->cfg->cluster_id, "version",
                             AGENTBOX_VERSION);
    http_respond_json(ex, 200, body);
}

static void h_ping(struct http_exchange *ex, void *arg)
{
    struct agent *a = arg;
    agent_auth_request(a->auth, ex, ping_authed, a);
}

/* Pool gauges, refreshed when /metrics is rendered; series of pools that
 * went away are removed. */
#define POOL_SEEN_MAX 1024

struct agent_pool_seen {
    int n, next_n;
    char key[POOL_SEEN_MAX][2][64];
    char next[POOL_SEEN_MAX][2][64];
};

static const char *const POOL_GAUGES[] = {"idle", "running", "starting", "stopping", "pending"};

static struct metric_family *pool_family(int i)
{
    static const char *const labels[] = {"namespace", "pool", NULL};
    char name[64], help[128];
    snprintf(name, sizeof(name), "agentbox_pool_%s", POOL_GAUGES[i]);
    if (strcmp(POOL_GAUGES[i], "pending") == 0)
        snprintf(help, sizeof(help), "Claims waiting for a sandbox of the pool");
    else
        snprintf(help, sizeof(help), "Sandboxes of the pool that are %s", POOL_GAUGES[i]);
    return metrics_register(metrics_default(), name, help, METRIC_GAUGE, labels, NULL, 0);
}

static void pool_gauge(void *arg, const struct rt_pool *p)
{
    struct agent_pool_seen *ps = arg;
    const char *v[] = {p->ns, p->name};
    const int val[] = {p->status.idle, p->status.running, p->status.starting, p->status.stopping,
                       p->status.pending};
    for (size_t i = 0; i < AB_ARRAY_LEN(POOL_GAUGES); i++)
        metrics_set(pool_family((int)i), v, val[i]);
    if (ps->next_n < POOL_SEEN_MAX) {
        ab_strlcpy(ps->next[ps->next_n][0], p->ns, 64);
        ab_strlcpy(ps->next[ps->next_n][1], p->name, 64);
        ps->next_n++;
    }
}

static void pool_gauges_refresh(struct agent *a)
{
    struct agent_pool_seen *ps = a->pool_seen;
    if (!a->rt || !ps)
        return;
    ps->next_n = 0;
    rt_list_pools(a->rt, NULL, pool_gauge, ps);
    for (int i = 0; i < ps->n; i++) {
        bool still = false;
        for (int j = 0; j < ps->next_n && !still; j++)
            still =
                !strcmp(ps->key[i][0], ps->next[j][0]) && !strcmp(ps->key[i][1], ps->next[j][1]);
        if (!still) {
            const char *v[] = {ps->key[i][0], ps->key[i][1]};
            for (size_t k = 0; k < AB_ARRAY_LEN(POOL_GAUGES); k++)
                metrics_remove(pool_family((int)k), v);
        }
    }
    memcpy(ps->key, ps->next, sizeof(ps->key[0]) * (size_t)ps->next_n);
    ps->n = ps->next_n;
}

void agent_respond_healthz(struct http_exchange *ex, struct agent *a)
{
    h_healthz(ex, a);
}

static void dp_healthz(struct http_exchange *ex, void *arg)
{
    h_healthz(ex, arg);
}

static void dp_metrics(struct http_exchange *ex, void *arg)
{
    struct agent *a = arg;
    /* the data plane's own /metrics (a request naming no sandbox) moved away */
    http_respond_error(ex, 404, "/metrics is served on metrics_listen (%s) only",
                       a->cfg->metrics_listen);
}

void agent_respond_metrics(struct http_exchange *ex, struct agent *a)
{
    size_t len = 0;
    pool_gauges_refresh(a);
    egress_wiring_refresh_metrics(a->egress);
    char *txt = metrics_render(metrics_default(), &len);
    http_respond(ex, 200, "text/plain; version=0.0.4; charset=utf-8", txt ? txt : "", txt ? len : 0,
                 NULL, 0);
    free(txt);
}

static void h_metrics(struct http_exchange *ex, void *arg)
{
    agent_respond_metrics(ex, arg);
}

int agent_add_routes(struct agent *a, enum agent_listener which, const struct http_route *routes,
                     size_t n, char *err, size_t errlen)
{
    struct agent_listener_state *ls = &a->l[which];
    if (ls->router || ls->nroutes + n > AGENT_MAX_ROUTES) {
        snprintf(err, errlen, "%s listener: too many routes or already started", ls->name);
        return AB_ELIMIT;
    }
    memcpy(&ls->routes[ls->nroutes], routes, n * sizeof(*routes));
    ls->nroutes += n;
    return 0;
}

struct http_router *agent_router(struct agent *a, enum agent_listener which)
{
    return a->l[which].router;
}

/* runtime=kube: Pods through the API server of the kubeconfig (or the
 * in-cluster service account). With leader election the reconciler starts
 * following and agent_start's Lease elector decides; without it (one
 * replica) it leads at once. */
static int agent_kube_new(struct agent *a, char *err, size_t errlen)
{
    const struct agent_config *cfg = a->cfg;
    struct krt_options o = {
        .loop = a->loop,
        .cluster_id = cfg->cluster_id,
        .kubeconfig = cfg->kubeconfig,
        .ns = cfg->kube_namespace,
        .registry_rewrite = cfg->registry_rewrite,
        .lead_now = !cfg->leader_election,
        .seal_secret = cfg->join_token,
        .egress_image = cfg->egress_image,
        .egress_resolver = cfg->egress_resolver,
    };
    if (!(a->pool_seen = calloc(1, sizeof(*a->pool_seen)))) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    return krt_new(&o, &a->rt, err, errlen);
}

/* runtime=local: the local runtime over <state_dir>, with the manifests
 * directory (absent: <state_dir>/manifests, empty unless the operator adds
 * files) and agentbox-envd (default: next to this binary). */
static int agent_runtime_new(struct agent *a, char *err, size_t errlen)
{
    const struct agent_config *cfg = a->cfg;
    char self[PATH_MAX], envd[PATH_MAX], mdir[PATH_MAX];
    const char *envd_path = cfg->envd_path, *manifests = cfg->manifests_dir;

    if (strcmp(cfg->runtime, "kube") == 0)
        return agent_kube_new(a, err, errlen);
    if (!envd_path) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        char *slash;
        if (n <= 0 || n >= (ssize_t)sizeof(self) - 1) {
            snprintf(err, errlen,
                     "cannot find this binary's directory to locate agentbox-envd; "
                     "set --envd-path");
            return AB_EINVAL;
        }
        self[n] = '\0';
        slash = strrchr(self, '/');
        *slash = '\0';
        if ((size_t)snprintf(envd, sizeof(envd), "%s/agentbox-envd", self) >= sizeof(envd)) {
            snprintf(err, errlen,
                     "the path of agentbox-envd next to this binary is longer than %zu bytes; "
                     "set --envd-path",
                     sizeof(envd) - 1);
            return AB_EINVAL;
        }
        envd_path = envd;
    }
    if (access(envd_path, X_OK) != 0) {
        snprintf(err, errlen,
                 "envd_path %s is not an executable (%s): build agentbox-envd or set "
                 "--envd-path",
                 envd_path, strerror(errno));
        return AB_EINVAL;
    }
    if (!manifests) {
        if ((size_t)snprintf(mdir, sizeof(mdir), "%s/manifests", cfg->state_dir) >= sizeof(mdir)) {
            snprintf(err, errlen,
                     "state_dir is too long: <state_dir>/manifests must fit in %zu bytes; set "
                     "--manifests-dir or a shorter --state-dir",
                     sizeof(mdir) - 1);
            return AB_EINVAL;
        }
        if (mkdir(cfg->state_dir, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create state_dir %s: %s", cfg->state_dir,
                     strerror(errno));
            return AB_EIO;
        }
        if (mkdir(mdir, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create %s: %s", mdir, strerror(errno));
            return AB_EIO;
        }
        LOG_WARN("no manifests_dir: the local runtime starts with no envs; set --manifests-dir",
                 "watching", mdir);
        manifests = mdir;
    }
    if (cfg->egress_conns_per_sandbox < 1 || cfg->egress_conns_per_sandbox > 65536) {
        snprintf(err, errlen, "egress_conns_per_sandbox must be between 1 and 65536, got %lld",
                 (long long)cfg->egress_conns_per_sandbox);
        return AB_EINVAL;
    }
    (void)!mkdir(cfg->state_dir, 0700); /* the namespace's name hashes its real path */
    /* every sandbox's only way out: the egress namespace and gateway, made
     * (or adopted from a predecessor) before the runtime spawns anything */
    const struct egress_wiring_deps wd = {
        .loop = a->loop,
        .cluster = cfg->cluster_id,
        .state_dir = cfg->state_dir,
        .range = cfg->egress_range,
        .resolver = cfg->egress_resolver,
        .upstream_ca = cfg->egress_upstream_ca,
        .max_conns_per_sandbox = (int)cfg->egress_conns_per_sandbox,
    };
    int erc = egress_wiring_new(&wd, &a->egress, err, errlen);
    if (erc != 0)
        return erc;
    struct lrt_options o = {
        .loop = a->loop,
        .cluster_id = cfg->cluster_id,
        .state_dir = cfg->state_dir,
        .manifests_dir = manifests,
        .envd_path = envd_path,
        .egress = egress_wiring_config(a->egress),
        .egress_table = egress_wiring_table(a->egress),
    };
    if (cfg->uid_base < 65536 || cfg->uid_base > 4294901759LL) {
        snprintf(err, errlen,
                 "uid_base must be between 65536 and 4294901759 (sandbox ids 0-65535 map to "
                 "uid_base..uid_base+65535 on the host), got %lld",
                 (long long)cfg->uid_base);
        return AB_EINVAL;
    }
    o.uid_base = (uint32_t)cfg->uid_base;
    o.heavy_max = (int)cfg->spawn_concurrency; /* checked with the loop's workers */
    o.envd_zygote = cfg->envd_zygote;
    if (!(a->pool_seen = calloc(1, sizeof(*a->pool_seen)))) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    char why[512] = "";
    int rc = lrt_new(&o, &a->rt, why, sizeof(why));
    if (rc) {
        snprintf(err, errlen, "local runtime: %s", why[0] ? why : ab_strerror(rc));
        egress_wiring_discard(a->egress); /* nothing will use a namespace made for it */
        return rc;
    }
    LOG_INFO("local runtime started", "state_dir", cfg->state_dir, "manifests", manifests, "envd",
             envd_path);
    return 0;
}

static bool agent_elects(const struct agent *a);

/* The autoscaler's Events go to the native API's env events (the kube
 * runtime also writes a Kubernetes Event for each, in rt_scale_set). */
static void agent_autoscale_event(void *arg, const char *ns, const char *env, const char *reason,
                                  const char *message)
{
    struct agent *a = arg;
    if (a->native)
        native_event_add(a->native, ns, env, reason, "%s", message);
}

/* With leader election only the leader scales (it alone writes the CRDs). */
static bool agent_autoscale_active(void *arg)
{
    struct agent *a = arg;
    return !agent_elects(a) || atomic_load(&a->lease_leading);
}

/* Modules are created in dependency order; struct agent lists them in it. */
int agent_init(struct agent *a, const struct agent_config *cfg, char *err, size_t errlen)
{
    size_t n;
    int rc;

    memset(a, 0, sizeof(*a));
    a->cfg = cfg;
    a->l[AGENT_E2B].name = "e2b";
    a->l[AGENT_DATA].name = "data";
    a->l[AGENT_NATIVE].name = "native";
    a->l[AGENT_METRICS].name = "metrics";
    /* spawn_concurrency spawns and removals, and two workers for the rest (local/lrt.h) */
    if (cfg->spawn_concurrency < 1 || cfg->spawn_concurrency > 64) {
        snprintf(err, errlen, "spawn_concurrency must be between 1 and 64, got %lld",
                 (long long)cfg->spawn_concurrency);
        return AB_EINVAL;
    }
    struct loop_options lo = {.workers = (int)cfg->spawn_concurrency + 2};
    if ((rc = loop_kind_parse(cfg->event_loop, &lo.kind, err, errlen)) != 0 ||
        (rc = loop_create(&lo, &a->loop, err, errlen)) != 0)
        return rc;
    const struct hub_link_deps hd = {
        .loop = a->loop, .cluster = cfg->cluster_id, .hub_configured = cfg->hub_url};
    if (!(a->hub = hub_link_new(&hd))) {
        snprintf(err, errlen, "out of memory creating the hub link");
        return AB_ENOMEM;
    }
    if ((rc = agent_auth_new(a->hub, &a->auth)) != 0) {
        snprintf(err, errlen, "cannot create the API key cache: %s", ab_strerror(rc));
        return rc;
    }
    if ((rc = agent_runtime_new(a, err, errlen)) != 0)
        return rc;

    const struct dataplane_deps dd = {
        .loop = a->loop,
        .rt = a->rt,
        .hub = a->hub,
        .cluster = cfg->cluster_id,
        .data_domain = cfg->data_domain,
        .respond_healthz = dp_healthz,
        .respond_metrics = dp_metrics,
        .respond_arg = a,
    };
    if (!(a->dp = dataplane_new(&dd, err, errlen)))
        return AB_ENOMEM; /* its only failure (err says so) */
    /* the data plane's catch-all comes first: a sandbox's own /metrics is proxied */
    const struct http_route *r = dataplane_routes(a->dp, &n);
    if ((rc = agent_add_routes(a, AGENT_DATA, r, n, err, errlen)) != 0)
        return rc;
    const struct http_route common[] = {
        {"GET", "/healthz", h_healthz, a, 0},
    };
    for (int i = 0; i < AGENT_NLISTENERS; i++)
        if ((rc = agent_add_routes(a, (enum agent_listener)i, common, AB_ARRAY_LEN(common), err,
                                   errlen)) != 0)
            return rc;
    const struct http_route metrics[] = {
        {"GET", "/metrics", h_metrics, a, 0},
    };
    if ((rc = agent_add_routes(a, AGENT_METRICS, metrics, AB_ARRAY_LEN(metrics), err, errlen)) != 0)
        return rc;
    const struct http_route ping[] = {
        {"GET", "/v1/ping", h_ping, a, 0},
    };
    if ((rc = agent_add_routes(a, AGENT_NATIVE, ping, AB_ARRAY_LEN(ping), err, errlen)) != 0)
        return rc;

    const struct autoscaler_deps ad = {
        .loop = a->loop,
        .rt = a->rt,
        .event = agent_autoscale_event,
        .event_arg = a,
        .active = agent_autoscale_active,
        .active_arg = a,
    };
    if (!(a->as = autoscaler_new(&ad))) {
        snprintf(err, errlen, "out of memory creating the autoscaler");
        return AB_ENOMEM;
    }

    const struct fed_deps fd = {
        .loop = a->loop, .rt = a->rt, .hub = a->hub, .auth = a->auth, .cluster = cfg->cluster_id};
    if ((rc = fed_new(&fd, &a->fed, err, errlen)) != 0)
        return rc;

    const struct native_deps nd = {.loop = a->loop,
                                   .rt = a->rt,
                                   .auth = a->auth,
                                   .hub = a->hub,
                                   .fed = a->fed,
                                   .autoscaler = a->as,
                                   .cluster = cfg->cluster_id,
                                   .enable_diag = cfg->enable_diag};
    /* native_new has no code to give: it fails when its route table is full
     * (or, which err then says, out of memory). */
    if (!(a->native = native_new(&nd, err, errlen)))
        return AB_ELIMIT;
    const struct catalogue_deps cd = {.loop = a->loop, .rt = a->rt, .hub = a->hub};
    if (!(a->catalogue = catalogue_new(&cd))) {
        snprintf(err, errlen, "out of memory creating the template catalogue");
        return AB_ENOMEM;
    }
    r = native_routes(a->native, &n);
    if ((rc = agent_add_routes(a, AGENT_NATIVE, r, n, err, errlen)) != 0)
        return rc;
    r = fed_routes(a->fed, &n);
    if ((rc = agent_add_routes(a, AGENT_NATIVE, r, n, err, errlen)) != 0)
        return rc;

    const struct e2b_deps ed = {
        .loop = a->loop,
        .rt = a->rt,
        .auth = a->auth,
        .hub = a->hub,
        .fed = a->fed,
        .cluster = cfg->cluster_id,
        .state_dir = cfg->state_dir,
        .data_domain = cfg->data_domain,
        .prometheus_url = cfg->prometheus_url,
        .log_service_url = cfg->log_service_url,
        .egress_table = a->egress ? egress_wiring_table(a->egress) : NULL,
    };
    if ((rc = e2b_new(&ed, &a->e2b, err, errlen)) != 0)
        return rc;
    r = e2b_routes(a->e2b, &n);
    return agent_add_routes(a, AGENT_E2B, r, n, err, errlen);
}

/* EVENT frames from the hub: key revocations, assertion keys, the template catalogue. */
static void agent_on_hub_event(json_t *event, void *arg)
{
    struct agent *a = arg;
    agent_auth_on_event(a->auth, event);
    catalogue_on_event(a->catalogue, event);
}

/* Whether replicas elect a leader (kube runtime) for the reconciler's
 * writes and the one tunnel to the hub (the hub keeps one
 * session per cluster, the newest, so two replicas tunneling would
 * supersede each other in turn). */
static bool agent_elects(const struct agent *a)
{
    return strcmp(a->cfg->runtime, "kube") == 0 && a->cfg->leader_election;
}

/* The tunnel to the hub; with leader election only while leading. */
static int agent_tunnel_up(struct agent *a, char *err, size_t errlen)
{
    struct agent_tunnel_options to = {
        .hub_url = a->cfg->hub_url,
        .token = a->cfg->join_token,
        .cluster = a->cfg->cluster_id,
        .hub_ca = a->cfg->hub_ca,
        .framing = a->cfg->tunnel_framing,
        .ping_interval_ms = a->cfg->tunnel_ping_interval_ms,
        .timeout_ms = a->cfg->tunnel_timeout_ms,
        .backoff_min_ms = a->cfg->reconnect_min_ms,
        .backoff_max_ms = a->cfg->reconnect_max_ms,
        .backoff_reset_ms = a->cfg->reconnect_reset_ms,
        .e2b_router = a->l[AGENT_E2B].router,
        .data_router = a->l[AGENT_DATA].router,
        .native_router = a->l[AGENT_NATIVE].router,
    };
    int rc = agent_tunnel_start(a->loop, &to, &a->tunnel, err, errlen);
    if (rc != 0)
        return rc;
    agent_tunnel_set_event_hook(a->tunnel, agent_on_hub_event, a);
    hub_link_set_tunnel(a->hub, a->tunnel);
    return 0;
}

/* Stops the tunnel: hub calls still due are answered (with an error) by its
 * end, as at agent_fini; the next agent_tunnel_up starts a fresh one. */
static void agent_tunnel_down(struct agent *a)
{
    if (!a->tunnel)
        return;
    hub_link_set_tunnel(a->hub, NULL);
    agent_tunnel_stop(a->tunnel);
    a->tunnel = NULL;
}

/* The elector's word, on the loop thread: the latest state wins (a stop
 * posted after a start finds lease_leading false), so a lost post is made up
 * by the next one. Status != 0: the loop is shutting down. */
static void agent_lease_apply(void *arg, int status)
{
    struct agent *a = arg;
    if (status != 0 || !a->rt)
        return;
    bool leading = atomic_load(&a->lease_leading);
    krt_set_leader(a->rt, leading);
    if (!a->cfg->hub_url)
        return;
    if (!leading) {
        if (a->tunnel)
            LOG_INFO("following: tunnel to the hub stopped (the leader holds it)");
        agent_tunnel_down(a);
        return;
    }
    char err[256];
    if (!a->tunnel && agent_tunnel_up(a, err, sizeof(err)) != 0)
        LOG_ERROR("leading, but the tunnel to the hub cannot start", "error", err);
}

static void agent_lease_post(struct agent *a, bool leading)
{
    atomic_store(&a->lease_leading, leading);
    LOG_INFO(leading ? "lease acquired" : "lease lost", "identity", a->lease_identity);
    if (loop_post(a->loop, agent_lease_apply, a) != 0)
        LOG_WARN("cannot post the leadership change to the loop: the next one applies it",
                 "leading", leading ? "yes" : "no");
}

/* Lease thread: must not block, so only a post to the loop. */
static void agent_lease_started(void *arg)
{
    agent_lease_post(arg, true);
}

static void agent_lease_stopped(void *arg)
{
    agent_lease_post(arg, false);
}

/* runtime=kube with leader election: the Lease in $POD_NAMESPACE (the Role
 * the chart grants is there), else the runtime's namespace, over the
 * runtime's own client. The identity is unique per process even when two
 * replicas share a POD_NAME (a restarted container). */
static int agent_lease_start(struct agent *a, char *err, size_t errlen)
{
    const struct agent_config *cfg = a->cfg;
    const char *pod = getenv("POD_NAME"), *ns = getenv("POD_NAMESPACE");
    char host[128] = "agent", suffix[17];
    uint8_t rnd[8];

    if (!pod || !pod[0]) {
        if (gethostname(host, sizeof(host)) != 0 || !host[0])
            ab_strlcpy(host, "agent", sizeof(host));
        host[sizeof(host) - 1] = '\0';
        pod = host;
    }
    if (crypto_random(rnd, sizeof(rnd)) != 0) {
        snprintf(err, errlen, "lease identity: no randomness available");
        return AB_EIO;
    }
    hex_encode(rnd, sizeof(rnd), suffix);
    snprintf(a->lease_identity, sizeof(a->lease_identity), "%.120s_%s", pod, suffix);
    const struct kube_lease_deps d = {
        .client = krt_client(a->rt),
        .ns = ns && ns[0] ? ns : krt_namespace(a->rt),
        .name = cfg->lease_name,
        .identity = a->lease_identity,
        .lease_duration_ms = cfg->lease_duration_ms,
        .renew_deadline_ms = cfg->lease_renew_deadline_ms,
        .retry_period_ms = cfg->lease_retry_period_ms,
        .on_started_leading = agent_lease_started,
        .on_stopped_leading = agent_lease_stopped,
        .arg = a,
    };
    char why[256];
    if (!(a->lease = kube_lease_new(&d, why, sizeof(why)))) {
        snprintf(err, errlen,
                 "leader election: %s (see --lease-name, --lease-duration, "
                 "--lease-renew-deadline, --lease-retry-period, POD_NAMESPACE)",
                 why);
        return AB_EINVAL;
    }
    LOG_INFO("leader election started", "lease", cfg->lease_name, "namespace", d.ns, "identity",
             a->lease_identity);
    return 0;
}

int agent_start(struct agent *a, char *err, size_t errlen)
{
    const char *listen[AGENT_NLISTENERS] = {a->cfg->e2b_listen, a->cfg->data_listen,
                                            a->cfg->native_listen, a->cfg->metrics_listen};
    for (int i = 0; i < AGENT_NLISTENERS; i++) {
        struct agent_listener_state *ls = &a->l[i];
        ls->router = http_router_new(ls->routes, ls->nroutes);
        if (!ls->router) {
            snprintf(err, errlen, "out of memory");
            return AB_ENOMEM;
        }
        /* the native API has its own error shape (reference §4.1) */
        http_router_set_error_format(ls->router,
                                     i == AGENT_NATIVE ? native_error_json : agent_error_json);
        http_router_set_extra_header(ls->router, "X-AgentBox-Server-Version", AGENTBOX_VERSION);
        struct http_server_options o = {
            .listen = listen[i], .router = ls->router, .name = ls->name};
        char why[256];
        int rc = http_server_start(a->loop, &o, &ls->server, why, sizeof(why));
        if (rc != 0) {
            snprintf(err, errlen, "%s_listen: %s", ls->name, why);
            return rc;
        }
        LOG_INFO("listening", "listener", ls->name, "address", listen[i]);
    }
    int rc;
    if (a->cfg->hub_url && !agent_elects(a) && (rc = agent_tunnel_up(a, err, errlen)) != 0)
        return rc;
    if (agent_elects(a))
        return agent_lease_start(a, err, errlen);
    return 0;
}

int agent_run(struct agent *a)
{
    return loop_run(a->loop);
}

/* Reverse order of creation, with one exception: the placement goes first,
 * before the tunnel, because the tunnel's end delivers the hub answers still
 * due and a placement answered then would claim on a runtime being torn
 * down; fed_free lets those calls go without their callback. The runtime is
 * freed before the modules that hold claims on it (e2b, native), so a claim
 * it ends still finds its owner. */
void agent_fini(struct agent *a)
{
    fed_free(a->fed);
    a->fed = NULL;
    if (a->hub)
        hub_link_set_tunnel(a->hub, NULL);
    agent_tunnel_stop(a->tunnel);
    a->tunnel = NULL;
    for (int i = 0; i < AGENT_NLISTENERS; i++) {
        if (a->l[i].server)
            http_server_stop(a->l[i].server);
    }
    /* before the runtime (its client): releases a held Lease, so on SIGTERM
     * a follower leads at once instead of waiting the lease duration out */
    kube_lease_free(a->lease);
    a->lease = NULL;
    autoscaler_free(a->as); /* its timer scales the runtime */
    a->as = NULL;
    rt_free(a->rt); /* sandboxes keep running: the next agent re-adopts them */
    a->rt = NULL;
    egress_wiring_stop(a->egress); /* the gateway's sockets, while the loop is alive */
    e2b_free(a->e2b);
    native_free(a->native);
    catalogue_free(a->catalogue); /* after the tunnel and the runtime answered its calls */
    dataplane_free(a->dp);
    free(a->pool_seen);
    loop_free(a->loop);
    egress_wiring_free(a->egress); /* after the workers' last callbacks cleared their slots */
    for (int i = 0; i < AGENT_NLISTENERS; i++)
        http_router_free(a->l[i].router);
    agent_auth_free(a->auth);
    hub_link_free(a->hub);
    memset(a, 0, sizeof(*a));
}

const char agent_serve_description[] =
    "Runs one cluster's agent: the E2B-compatible API, the data plane and the\n"
    "native API, each with /healthz (every other route needs an API key or, on the\n"
    "data plane, envd's token), and Prometheus /metrics on --metrics-listen only.\n"
    "Every listener binds loopback unless told otherwise. With --hub-url it keeps one\n"
    "tunnel to the hub. Missing or invalid settings stop it at start with a\n"
    "message naming what to set.";
