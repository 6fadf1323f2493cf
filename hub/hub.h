/* The hub process as `agentbox-hub serve` runs it: one struct that owns the
 * loop, the database pool, the HTTP router and the listeners.
 *
 * Modules are X_new(deps)/X_free(x); struct hub holds their pointers and
 * serve.c is the only file that creates, connects and frees them. Everything here runs on the loop
 * thread except the signal handler (main.c), which only calls loop_stop. */
#ifndef AGENTBOX_HUB_HUB_H
#define AGENTBOX_HUB_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/config.h"
#include "agentbox/http.h"
#include "agentbox/loop.h"

#define HUB_MAX_ROUTES 256

struct loop;
struct db_pool;
struct clusters;
struct tunnel_server;
struct auth_ctx;
struct federation;
struct e2b_front;
struct vault_api;
struct sessions;
struct approvals;
struct templates;

/* `serve` configuration (flags, AGENTBOX_* environment, YAML keys). */
struct hub_serve_config {
    char *listen;
    char *database_url;
    int64_t db_workers;
    int64_t db_queue;
    int64_t db_connect_timeout_ms;
    int64_t db_statement_timeout_ms;
    int64_t db_retry_ms;
    int64_t ready_timeout_ms;
    char *log_level;
    bool log_json;
    char *tunnel_listen;
    char *tunnel_framing;
    char *event_loop; /* --event-loop: libev or poll (loop.h) */
    char *tls_cert;
    char *tls_key;
    int64_t tunnel_timeout_ms;
    int64_t tunnel_sync_interval_ms;
    char *hub_secret; /* keys and vault encryption (auth.h); required */
    char *hub_secret_file;
    bool allow_superuser; /* let serve use a PostgreSQL superuser role */
    char *metrics_listen; /* /metrics on its own listener (default loopback) */
    /* console login and the approval gate (sessions.h, approvals.h) */
    int64_t session_ttl_ms;
    bool cookie_secure;
    int64_t login_max_failures;
    int64_t login_max_failures_addr;
    int64_t login_failure_window_ms;
    int64_t approval_ttl_ms;
    /* the E2B `domain` and the host form <port>-<id>.<data_domain> (e2b_front.h) */
    char *data_domain;
    char *data_listen; /* unset: the host form has no listener, /data still works */
};

extern const struct cfg_option hub_serve_options[];
extern const size_t hub_serve_noptions;

struct hub {
    const struct hub_serve_config *cfg; /* not owned */
    struct loop *loop;
    struct db_pool *db;
    struct http_route routes[HUB_MAX_ROUTES];
    size_t nroutes;
    struct http_router *router;
    struct http_server *api; /* :7700 */
    struct http_router *metrics_router;
    struct http_server *metrics; /* 127.0.0.1:7702: /metrics, /healthz only */
    /* the loop's own lag (health.c): a timer that measures how late it fires */
    struct loop_timer lag_timer;
    int64_t lag_due_us;
    struct metric_family *m_lag;
    struct http_router *data_router;
    struct http_server *data; /* cfg->data_listen: every request is the data plane's */
    /* The `hub` service behind the tunnel (/internal/v1/...): never on a socket. */
    struct http_route internal_routes[HUB_MAX_ROUTES];
    size_t ninternal;
    struct http_router *internal_router;
    /* The modules, in order of creation (hub_fini frees them in reverse). */
    struct clusters *clusters;    /* registered clusters (clusters.c) */
    struct auth_ctx *auth;        /* keys, grants, the key ring (auth.c) */
    struct federation *fed;       /* the capacity registry (federation.c) */
    struct e2b_front *front;      /* /e2b and /data (e2b_front.c) */
    struct vault_api *vault;      /* /e2b/secrets and the resolve route (vault_api.c) */
    struct sessions *sessions;    /* console logins (sessions.c) */
    struct approvals *approvals;  /* the approval gate (approvals.c) */
    struct templates *templates;  /* the template catalogue (templates.c) */
    struct tunnel_server *tunnel; /* :7701 (tunnel_server.c), created by hub_start */
};

/* Creates the loop, the database pool (which connects lazily: a hub starts
 * while PostgreSQL is down, and /readyz says so) and every module, and adds
 * every route (hub/ and dashboard-api/). The one place that wires the hub. */
int hub_init(struct hub *h, const struct hub_serve_config *cfg, char *err, size_t errlen);
/* Adds routes to the API router; only before hub_start. routes is copied
 * (the strings and args it points to must outlive the hub). */
int hub_add_routes(struct hub *h, const struct http_route *routes, size_t n, char *err,
                   size_t errlen);
/* Adds routes to the internal router (the `hub` service that agents reach
 * over the tunnel; the handler finds the calling cluster's id as a string in
 * http_req(ex)->transport_data). Only before hub_start. */
int hub_add_internal_routes(struct hub *h, const struct http_route *routes, size_t n, char *err,
                            size_t errlen);
/* Builds the router and starts the listeners. */
int hub_start(struct hub *h, char *err, size_t errlen);
/* Points SIGINT/SIGTERM at loop_stop(l) (l NULL: at nothing). A signal
 * handler needs a process-wide variable, so main.c, which owns the process,
 * keeps it. */
typedef void (*hub_signals_fn)(struct loop *l);
/* Runs the loop until loop_stop (SIGINT/SIGTERM through signals, if any). */
int hub_run(struct hub *h, hub_signals_fn signals);
/* Frees everything hub_init and hub_start created, in reverse order of
 * creation (after db_pool_free, which runs the pending jobs' done()). */
void hub_fini(struct hub *h);

/* The `hub` service's own routes: GET /internal/v1/ping (internal.c). */
int hub_internal_add_routes(struct hub *h, char *err, size_t errlen);

/* GET /healthz, /readyz (health.c). */
int hub_health_add_routes(struct hub *h, char *err, size_t errlen);
/* The metrics listener (health.c): GET /metrics and /healthz on
 * cfg->metrics_listen, apart from the API, because the page names sandboxes
 * and clusters and carries no authentication (loopback by default). */
int hub_metrics_start(struct hub *h, char *err, size_t errlen);
/* Stops the metrics listener and the loop-lag timer hub_metrics_start started. */
void hub_metrics_stop(struct hub *h);

/* `agentbox-hub serve ARGS` (argv[0] is the first argument after "serve"). */
int hub_serve_main(int argc, char **argv, hub_signals_fn signals);

#endif
