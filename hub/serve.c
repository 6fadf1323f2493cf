/* `agentbox-hub serve`: configuration, startup and shutdown of the hub. */
#include "hub/hub.h"

#include <openssl/crypto.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/version.h"
#include "dashboard-api/dashboard_api.h" /* the one include of dashboard-api/ in hub/ */
#include "hub/approvals.h"
#include "hub/auth.h"
#include "hub/clusters.h"
#include "hub/db.h"
#include "hub/e2b_front.h"
#include "hub/federation.h"
#include "hub/sandbox_events.h"
#include "hub/sessions.h"
#include "hub/signing_keys.h"
#include "hub/templates.h"
#include "hub/tunnel_server.h"
#include "hub/vault.h"
#include "hub/vault_api.h"

#define OPT(field) offsetof(struct hub_serve_config, field)

const struct cfg_option hub_serve_options[] = {
    {"listen", CFG_STRING, "127.0.0.1:7700", false, OPT(listen),
     "HTTP API address: host:port, :port (every interface) or unix:/path", NULL},
    {"database_url", CFG_STRING, NULL, false, OPT(database_url),
     "PostgreSQL URL (postgres://user:pass@host/db); unset: libpq's PG* variables", "DATABASE_URL"},
    {"db_workers", CFG_INT, "4", false, OPT(db_workers),
     "database worker threads (one connection each), 1..64", NULL},
    {"db_queue", CFG_INT, "256", false, OPT(db_queue),
     "database jobs waiting at most; past it requests get 503", NULL},
    {"db_connect_timeout", CFG_DURATION, "2s", false, OPT(db_connect_timeout_ms),
     "give up connecting to PostgreSQL after this (whole seconds, at least 2)", NULL},
    {"db_statement_timeout", CFG_DURATION, "5s", false, OPT(db_statement_timeout_ms),
     "PostgreSQL statement_timeout of every hub connection", NULL},
    {"db_retry", CFG_DURATION, "1s", false, OPT(db_retry_ms),
     "after a failed connect, fail database requests at once for this long", NULL},
    {"ready_timeout", CFG_DURATION, "2s", false, OPT(ready_timeout_ms),
     "/readyz answers 503 when PostgreSQL has not answered within this", NULL},
    {"log_level", CFG_STRING, "info", false, OPT(log_level), "debug, info, warn or error", NULL},
    {"log_json", CFG_BOOL, "false", false, OPT(log_json), "log JSON lines instead of text", NULL},
    {"tunnel_listen", CFG_STRING, "127.0.0.1:7701", false, OPT(tunnel_listen),
     "tunnel (WebSocket /v1/tunnel) address: host:port or :port (every interface; use TLS)", NULL},
    {"tls_cert", CFG_STRING, NULL, false, OPT(tls_cert),
     "PEM certificate for the tunnel listener (with tls_key: agents dial wss://)", NULL},
    {"tls_key", CFG_STRING, NULL, false, OPT(tls_key), "PEM private key for tls_cert", NULL},
    {"tunnel_framing", CFG_STRING, "wslay", false, OPT(tunnel_framing),
     "WebSocket framing of the tunnel listener: wslay (raw socket, default) or lws; "
     "agents of either connect",
     NULL},
    {"event_loop", CFG_STRING, LOOP_EVENT_LOOP_HUB_DEFAULT, false, OPT(event_loop),
     LOOP_EVENT_LOOP_HELP, NULL},
    {"tunnel_timeout", CFG_DURATION, "30s", false, OPT(tunnel_timeout_ms),
     "drop a tunnel session silent this long (agents ping every 10 s)", NULL},
    {"tunnel_sync_interval", CFG_DURATION, "60s", false, OPT(tunnel_sync_interval_ms),
     "how often each session's live streams are reconciled (SYNC)", NULL},
    {"hub_secret", CFG_STRING, NULL, false, OPT(hub_secret),
     ">= 32 bytes that encrypt the vault and stored API keys (openssl rand -hex 32); "
     "prefer the environment or hub_secret_file",
     NULL},
    {"hub_secret_file", CFG_STRING, NULL, false, OPT(hub_secret_file),
     "file whose first line is the hub secret (instead of hub_secret)", NULL},
    {"metrics_listen", CFG_STRING, "127.0.0.1:7702", false, OPT(metrics_listen),
     "/metrics (and /healthz) listener, apart from the API: the page is not authenticated; "
     "loopback by default, :PORT exposes it on every interface",
     NULL},
    {"data_domain", CFG_STRING, NULL, false, OPT(data_domain),
     "the domain sandboxes created through /e2b answer (E2B `domain`, may carry :port): the SDK "
     "then builds https://<port>-<sandbox id>.<data_domain>; point *.<data_domain> at "
     "data_listen (unset: each cluster's own domain passes through)",
     NULL},
    {"data_listen", CFG_STRING, NULL, false, OPT(data_listen),
     "data plane by host: every request on this address is relayed to the cluster named by "
     "its host <port>-<sandbox id>.<domain>, path kept (unset: only /data/... on listen)",
     NULL},
    {"session_ttl", CFG_DURATION, "12h", false, OPT(session_ttl_ms),
     "console sessions (POST /api/auth/login) end this long after login", NULL},
    {"cookie_secure", CFG_BOOL, "false", false, OPT(cookie_secure),
     "mark the session cookies Secure (the console is served over TLS, e.g. by a proxy; "
     "X-Forwarded-Proto: https does it per request)",
     NULL},
    {"login_max_failures", CFG_INT, "5", false, OPT(login_max_failures),
     "failed logins per username within login_failure_window before 429", NULL},
    {"login_max_failures_addr", CFG_INT, "20", false, OPT(login_max_failures_addr),
     "failed logins per source address within login_failure_window before 429", NULL},
    {"login_failure_window", CFG_DURATION, "15m", false, OPT(login_failure_window_ms),
     "how long failed logins count", NULL},
    {"approval_ttl", CFG_DURATION, "15m", false, OPT(approval_ttl_ms),
     "a pending approval request (428 APPROVAL_REQUIRED) expires after this", NULL},
    {"allow_superuser", CFG_BOOL, "false", false, OPT(allow_superuser),
     "run although the PostgreSQL role is a superuser (refused by default: serve needs only "
     "a login role with DML rights)",
     NULL},
};
const size_t hub_serve_noptions = AB_ARRAY_LEN(hub_serve_options);

static const char SERVE_USAGE[] = "agentbox-hub serve [flags]";
static const char SERVE_DESCRIPTION[] =
    "Runs the hub: the HTTP API on --listen (/healthz, /readyz; every other route\n"
    "needs an API key), Prometheus /metrics on --metrics-listen.\n"
    "PostgreSQL is reached through --database-url, DATABASE_URL or libpq's PG*\n"
    "variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE); the hub starts\n"
    "while it is down and /readyz answers 503 until it is back.\n"
    "A YAML file given by --config FILE or AGENTBOX_CONFIG may set the keys below.";

static int check_config(const struct hub_serve_config *c, char *err, size_t errlen)
{
    enum log_level lvl;

    if (c->db_workers < 1 || c->db_workers > 64) {
        snprintf(err, errlen, "db_workers must be between 1 and 64, got %lld",
                 (long long)c->db_workers);
        return AB_EINVAL;
    }
    if (c->db_queue < 1 || c->db_queue > 100000) {
        snprintf(err, errlen, "db_queue must be between 1 and 100000, got %lld",
                 (long long)c->db_queue);
        return AB_EINVAL;
    }
    if (c->db_connect_timeout_ms <= 0 || c->db_statement_timeout_ms <= 0 || c->db_retry_ms <= 0 ||
        c->ready_timeout_ms <= 0) {
        snprintf(err, errlen,
                 "db_connect_timeout, db_statement_timeout, db_retry and ready_timeout must "
                 "be positive durations (e.g. 500ms, 2s)");
        return AB_EINVAL;
    }
    if (log_parse_level(c->log_level, &lvl) != 0) {
        snprintf(err, errlen, "log_level must be debug, info, warn or error, got '%s'",
                 c->log_level);
        return AB_EINVAL;
    }
    if (c->listen == NULL || c->listen[0] == '\0') {
        snprintf(err, errlen, "listen must not be empty (e.g. :7700)");
        return AB_EINVAL;
    }
    /* the SDK pastes it into https://<port>-<id>.<domain>: a host[:port], nothing else */
    for (const char *d = c->data_domain; d && *d; d++) {
        if (!(*d >= 'a' && *d <= 'z') && !(*d >= 'A' && *d <= 'Z') && !(*d >= '0' && *d <= '9') &&
            *d != '.' && *d != '-' && *d != ':') {
            snprintf(err, errlen,
                     "data_domain must be a host name with an optional :port (e.g. "
                     "sandboxes.example.com), got '%.100s'",
                     c->data_domain);
            return AB_EINVAL;
        }
    }
    return 0;
}

/* Least privilege (DESIGN §11): serve stops at start when PostgreSQL is up
 * and its role is a superuser. PostgreSQL down is no refusal (the hub starts
 * without it); the pool checks every later connection the same way. */
static int refuse_superuser_now(const struct hub_serve_config *cfg, char *err, size_t errlen)
{
    struct db_connect_options o = {.database_url = cfg->database_url,
                                   .connect_timeout_ms = cfg->db_connect_timeout_ms,
                                   .application_name = "agentbox-hub"};
    PGconn *c = NULL;
    char why[256];
    int rc = 0;

    if (cfg->allow_superuser || db_connect(&o, &c, why, sizeof(why)) != 0)
        return 0;
    if (db_is_superuser(c)) {
        snprintf(err, errlen,
                 "PostgreSQL role '%s' is a superuser: serve refuses to run as one; connect as a "
                 "login role that is not a superuser and owns nothing (scripts/quickstart.sh "
                 "creates one), or pass --allow-superuser (AGENTBOX_ALLOW_SUPERUSER)",
                 PQuser(c));
        rc = AB_EDENIED;
    }
    PQfinish(c);
    return rc;
}

/* The identity context: the hub secret (hub_secret, else the first line of
 * hub_secret_file) becomes its key ring and is wiped here. */
static int create_auth(struct hub *h, char *err, size_t errlen)
{
    struct auth_options o = {0};
    char *secret = NULL;
    size_t len = 0;
    int rc;

    rc = vault_hub_secret_load("hub_secret", h->cfg->hub_secret, h->cfg->hub_secret_file, &secret,
                               &len, err, errlen);
    if (rc != 0)
        return rc;
    o.loop = h->loop;
    o.db = h->db;
    o.hub_secret = secret;
    o.hub_secret_len = len;
    rc = auth_new(&o, &h->auth, err, errlen);
    OPENSSL_cleanse(secret, len);
    free(secret);
    if (rc == 0) {
        /* the signing key generation before any agent connects; PostgreSQL
         * down: generation 0 until the first scan tick reads it */
        struct db_connect_options co = {.database_url = h->cfg->database_url,
                                        .connect_timeout_ms = h->cfg->db_connect_timeout_ms,
                                        .application_name = "agentbox-hub"};
        struct signing_set set;
        char why[256];
        PGconn *c = NULL;
        if (db_connect(&co, &c, why, sizeof(why)) == 0) {
            if (signing_keys_load_conn(c, &set, why, sizeof(why)) != 0 ||
                auth_set_signing(h->auth, &set, why, sizeof(why)) != 0)
                LOG_WARN("signing key generation not read at start", "error", why);
            PQfinish(c);
        }
    }
    return rc;
}

/* templates_change_fn → the tunnel: every connected cluster pulls the catalogue. */
static void templates_broadcast(void *arg, json_t *event)
{
    tunnel_server_broadcast(arg, event);
}

/* Every route of the hub, on the API router and on the internal (tunnel-only)
 * one. The router picks the most specific pattern, so the order is free. */
static int add_routes(struct hub *h, char *err, size_t errlen)
{
    int rc = hub_health_add_routes(h, err, errlen);

    if (rc == 0)
        rc = hub_internal_add_routes(h, err, errlen);
    if (rc == 0)
        rc = auth_add_internal_routes(h, h->auth, err, errlen);
    if (rc == 0)
        rc = vault_api_new(h, h->auth, &h->vault, err, errlen);
    if (rc == 0)
        rc = route_api_add_routes(h, h->fed, err, errlen);
    if (rc == 0)
        rc = e2b_front_add_routes(h->front, h, err, errlen);
    if (rc == 0)
        rc = hub_sandboxes_add_routes(h, err, errlen);
    if (rc == 0)
        rc = approvals_add_internal_routes(h, h->approvals, err, errlen);
    if (rc == 0)
        rc = templates_add_internal_routes(h, h->templates, err, errlen);
    if (rc == 0)
        rc = dashboard_api_add_routes(h, err, errlen);
    return rc;
}

int hub_init(struct hub *h, const struct hub_serve_config *cfg, char *err, size_t errlen)
{
    struct loop_options lo = {0};
    struct db_pool_options dbo = {0};
    int rc;

    memset(h, 0, sizeof(*h));
    h->cfg = cfg;
    rc = loop_kind_parse(cfg->event_loop, &lo.kind, err, errlen);
    if (rc != 0)
        return rc;
    rc = loop_create(&lo, &h->loop, err, errlen);
    if (rc != 0)
        return rc;
    dbo.database_url = cfg->database_url;
    dbo.workers = (int)cfg->db_workers;
    dbo.queue_max = (size_t)cfg->db_queue;
    dbo.connect_timeout_ms = cfg->db_connect_timeout_ms;
    dbo.statement_timeout_ms = cfg->db_statement_timeout_ms;
    dbo.retry_ms = cfg->db_retry_ms;
    dbo.application_name = "agentbox-hub";
    dbo.refuse_superuser = !cfg->allow_superuser;
    h->db = db_pool_new(h->loop, &dbo, err, errlen);
    if (h->db == NULL) /* no code to give: out of memory or a worker that did not start */
        return AB_EIO;
    struct clusters_deps cd = {.loop = h->loop, .db = h->db};
    rc = clusters_new(&cd, &h->clusters, err, errlen);
    if (rc != 0)
        return rc;
    rc = create_auth(h, err, errlen);
    if (rc != 0)
        return rc;
    rc = refuse_superuser_now(cfg, err, errlen); /* after the configuration's own checks */
    if (rc != 0)
        return rc;
    struct federation_deps fd = {.loop = h->loop, .db = h->db, .clusters = h->clusters};
    h->fed = federation_new(&fd, err, errlen);
    if (h->fed == NULL)
        return AB_ENOMEM;
    struct sessions_deps sd = {.loop = h->loop,
                               .db = h->db,
                               .auth = h->auth,
                               .ttl_ms = cfg->session_ttl_ms,
                               .cookie_secure = cfg->cookie_secure,
                               .max_failures_user = (int)cfg->login_max_failures,
                               .max_failures_addr = (int)cfg->login_max_failures_addr,
                               .failure_window_ms = cfg->login_failure_window_ms};
    rc = sessions_new(&sd, &h->sessions, err, errlen);
    if (rc != 0)
        return rc;
    /* every auth_request now takes a console session as well as a key */
    auth_set_session_hook(h->auth, sessions_authenticate, h->sessions);
    struct approvals_deps ad = {
        .loop = h->loop, .db = h->db, .auth = h->auth, .ttl_ms = cfg->approval_ttl_ms};
    rc = approvals_new(&ad, &h->approvals, err, errlen);
    if (rc != 0)
        return rc;
    struct templates_deps tpd = {.loop = h->loop, .db = h->db};
    rc = templates_new(&tpd, &h->templates, err, errlen);
    if (rc != 0)
        return rc;
    struct e2b_front_deps ed = {
        .loop = h->loop, .auth = h->auth, .fed = h->fed, .data_domain = cfg->data_domain};
    h->front = e2b_front_new(&ed);
    if (h->front == NULL) {
        snprintf(err, errlen, "out of memory creating the front door");
        return AB_ENOMEM;
    }
    return add_routes(h, err, errlen);
}

int hub_add_internal_routes(struct hub *h, const struct http_route *routes, size_t n, char *err,
                            size_t errlen)
{
    if (h->internal_router != NULL || n > HUB_MAX_ROUTES - h->ninternal) {
        snprintf(err, errlen, "internal routes: too many, or added after the hub started");
        return AB_ELIMIT;
    }
    memcpy(&h->internal_routes[h->ninternal], routes, n * sizeof(*routes));
    h->ninternal += n;
    return 0;
}

int hub_add_routes(struct hub *h, const struct http_route *routes, size_t n, char *err,
                   size_t errlen)
{
    if (h->router != NULL) {
        snprintf(err, errlen, "routes must be added before the hub starts");
        return AB_EINVAL;
    }
    if (n > HUB_MAX_ROUTES - h->nroutes) {
        snprintf(err, errlen, "more than %d hub routes: raise HUB_MAX_ROUTES", HUB_MAX_ROUTES);
        return AB_ELIMIT;
    }
    memcpy(&h->routes[h->nroutes], routes, n * sizeof(*routes));
    h->nroutes += n;
    return 0;
}

int hub_start(struct hub *h, char *err, size_t errlen)
{
    struct http_server_options so = {0};
    int rc;

    h->router = http_router_new(h->routes, h->nroutes);
    if (h->router == NULL) {
        snprintf(err, errlen, "cannot create the HTTP router");
        return AB_ENOMEM;
    }
    http_router_set_extra_header(h->router, "X-AgentBox-Server-Version", AGENTBOX_VERSION);
    so.listen = h->cfg->listen;
    so.router = h->router;
    so.name = "api";
    rc = http_server_start(h->loop, &so, &h->api, err, errlen);
    if (rc != 0)
        return rc;
    if (h->cfg->data_listen && h->cfg->data_listen[0]) {
        h->data_router = e2b_front_data_router(h->front);
        if (h->data_router == NULL) {
            snprintf(err, errlen, "cannot create the data_listen router");
            return AB_ENOMEM;
        }
        struct http_server_options dso = {
            .listen = h->cfg->data_listen, .router = h->data_router, .name = "data"};
        rc = http_server_start(h->loop, &dso, &h->data, err, errlen);
        if (rc != 0) {
            char why[256];
            ab_strlcpy(why, err, sizeof(why));
            snprintf(err, errlen, "data_listen: %s", why);
            return rc;
        }
    }
    rc = hub_metrics_start(h, err, errlen);
    if (rc != 0) {
        char why[256];
        ab_strlcpy(why, err, sizeof(why));
        snprintf(err, errlen, "metrics_listen: %s", why);
        return rc;
    }
    h->internal_router = http_router_new(h->internal_routes, h->ninternal);
    if (h->internal_router == NULL) {
        snprintf(err, errlen, "cannot create the internal router");
        return AB_ENOMEM;
    }
    http_router_set_extra_header(h->internal_router, "X-AgentBox-Server-Version", AGENTBOX_VERSION);
    struct tunnel_server_options to = {
        .listen = h->cfg->tunnel_listen,
        .tls_cert = h->cfg->tls_cert,
        .tls_key = h->cfg->tls_key,
        .timeout_ms = h->cfg->tunnel_timeout_ms,
        .sync_interval_ms = h->cfg->tunnel_sync_interval_ms,
        .framing = h->cfg->tunnel_framing,
    };
    struct tunnel_server_deps td = {
        .loop = h->loop, .clusters = h->clusters, .internal = h->internal_router, .auth = h->auth};
    rc = tunnel_server_start(&td, &to, &h->tunnel, err, errlen);
    if (rc != 0)
        return rc;
    tunnel_server_set_report_hook(h->tunnel, federation_on_report, h->fed);
    tunnel_server_set_session_end_hook(h->tunnel, federation_on_session_end, h->fed);
    e2b_front_set_tunnel(h->front, h->tunnel);
    auth_set_revocation_hook(h->auth, tunnel_server_on_key_revoked, h->tunnel);
    auth_set_keys_hook(h->auth, tunnel_server_on_assertion_keys, h->tunnel);
    templates_set_change_hook(h->templates, templates_broadcast, h->tunnel);
    LOG_INFO("hub listening", "listen", h->cfg->listen, "version", AGENTBOX_VERSION);
    return 0;
}

int hub_run(struct hub *h, hub_signals_fn signals)
{
    signal(SIGPIPE, SIG_IGN);
    if (signals != NULL)
        signals(h->loop);
    int rc = loop_run(h->loop);
    if (signals != NULL)
        signals(NULL);
    return rc;
}

void hub_fini(struct hub *h)
{
    /* The loop no longer runs, so nothing new arrives. The pool goes first:
     * db_pool_free runs every pending job's done(), which may still answer
     * exchanges and reach any module below. Then the modules in reverse
     * order of creation, the routers and the loop. */
    db_pool_free(h->db);
    h->db = NULL;
    if (h->auth != NULL) {
        auth_set_revocation_hook(h->auth, NULL, NULL); /* it points at the tunnel */
        auth_set_keys_hook(h->auth, NULL, NULL);
    }
    if (h->templates != NULL)
        templates_set_change_hook(h->templates, NULL, NULL); /* it points at the tunnel */
    tunnel_server_stop(h->tunnel);                           /* created last, by hub_start */
    h->tunnel = NULL;
    http_server_stop(h->api);
    h->api = NULL;
    hub_metrics_stop(h);
    http_server_stop(h->data);
    h->data = NULL;
    if (h->data_router != NULL)
        http_router_free(h->data_router);
    h->data_router = NULL;
    if (h->metrics_router != NULL)
        http_router_free(h->metrics_router);
    h->metrics_router = NULL;
    vault_api_free(h->vault);
    h->vault = NULL;
    e2b_front_free(h->front);
    h->front = NULL;
    templates_free(h->templates);
    h->templates = NULL;
    approvals_free(h->approvals);
    h->approvals = NULL;
    if (h->auth != NULL)
        auth_set_session_hook(h->auth, NULL, NULL);
    sessions_free(h->sessions);
    h->sessions = NULL;
    federation_free(h->fed);
    h->fed = NULL;
    auth_free(h->auth);
    h->auth = NULL;
    clusters_free(h->clusters);
    h->clusters = NULL;
    if (h->router != NULL)
        http_router_free(h->router);
    h->router = NULL;
    if (h->internal_router != NULL)
        http_router_free(h->internal_router);
    h->internal_router = NULL;
    loop_free(h->loop);
    h->loop = NULL;
}

int hub_serve_main(int argc, char **argv, hub_signals_fn signals)
{
    struct hub_serve_config cfg;
    struct cfg_result res;
    struct hub h;
    enum log_level lvl = LOG_LEVEL_INFO;
    char err[1024] = "";
    int rc;

    memset(&cfg, 0, sizeof(cfg));
    memset(&h, 0, sizeof(h));
    rc = cfg_load(hub_serve_options, hub_serve_noptions, &cfg, argc, argv, &res, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "agentbox-hub serve: %s\n", err);
        cfg_free(hub_serve_options, hub_serve_noptions, &cfg);
        return 2;
    }
    if (res.help) {
        cfg_print_help(stdout, SERVE_USAGE, SERVE_DESCRIPTION, hub_serve_options,
                       hub_serve_noptions);
        cfg_free(hub_serve_options, hub_serve_noptions, &cfg);
        return 0;
    }
    if (res.npositional > 0) {
        fprintf(stderr, "agentbox-hub serve: unexpected argument '%s' (see --help)\n",
                res.positional[0]);
        rc = 2;
        goto out;
    }
    if (check_config(&cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "agentbox-hub serve: %s\n", err);
        rc = 2;
        goto out;
    }
    log_parse_level(cfg.log_level, &lvl);
    log_set_level(lvl);
    log_set_json(cfg.log_json);
    log_set_component("hub");

    rc = hub_init(&h, &cfg, err, sizeof(err));
    if (rc == 0)
        rc = hub_start(&h, err, sizeof(err));
    if (rc != 0) {
        if (err[0] == '\0') /* never an empty reason in the log */
            snprintf(err, sizeof(err), "%s", ab_strerror(rc));
        LOG_ERROR("hub failed to start", "error", err);
        rc = 1;
        goto out;
    }
    hub_run(&h, signals);
    LOG_INFO("hub stopping");
out:
    if (h.loop != NULL)
        hub_fini(&h);
    cfg_free(hub_serve_options, hub_serve_noptions, &cfg);
    return rc;
}
