/* The agent's E2B-compatible API on :8090 (DESIGN §7; reference
 * agent-sandbox-behaviour.md §2, e2b-protocol.md §1): the surface the real
 * `e2b` SDK talks to. One file per concept:
 *   e2b.c        route table, authentication wrapper, shapes, tokens, forwarding
 *   create.c     POST /sandboxes, POST /v2/sandboxes
 *   sandboxes.c  list, get, kill, timeout, refreshes, connect, network
 *   refusals.c   the 400 list of create and the 501 catalogue
 *   templates.c  GET /templates, GET /templates/{id}
 *   logs.c       GET /sandboxes/{id}/logs, /v2/sandboxes/{id}/logs
 *   metrics.c    GET /sandboxes/{id}/metrics, /sandboxes/metrics, and the
 *                per-sandbox cAdvisor-named series on /metrics
 *   keys.c       /secrets and /api-keys relayed to the hub
 *   events.c     lifecycle events queued to the hub
 * Errors are {"code": <int>, "message": …}: the SDK reads `code`.
 * Everything runs on the loop thread. */
#ifndef AGENTBOX_AGENT_E2B_H
#define AGENTBOX_AGENT_E2B_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "agentbox/http.h"

struct e2b;
struct agent_auth;
struct agent_principal;
struct fed;
struct hub_link;
struct loop;
struct rt;
struct rt_sandbox;
struct metric_family;
struct e2b_events;
struct egress_table;
struct e2b_metrics;

/* What the E2B layer may call, and its settings. Everything is borrowed and
 * must outlive the module. */
struct e2b_deps {
    struct loop *loop;
    struct rt *rt;           /* the sandbox runtime (NULL: creates answer 503) */
    struct agent_auth *auth; /* API keys */
    struct hub_link *hub;    /* calls to the hub, relays to other clusters */
    struct fed *fed;         /* the placement of bare names (route_client.h) */
    const char *cluster;     /* this cluster's id */
    const char *state_dir;   /* where the envd token key is kept */
    const char *data_domain; /* NULL or "" when unset */
    const char *prometheus_url;
    const char *log_service_url;
    /* the egress gateway's slot table (local runtime; NULL otherwise): where a
     * claim's resolved secrets go (agent/egress/table.h) */
    struct egress_table *egress_table;
};

/* Builds the E2B layer and its route table (see e2b_routes) into *out.
 * 0, or the failing step's code with err set and *out NULL: AB_ENOMEM,
 * AB_ELIMIT (route table full), AB_EINVAL (PROMETHEUS_TOKEN too long). The
 * owner (struct agent) frees it with e2b_free. */
int e2b_new(const struct e2b_deps *deps, struct e2b **out, char *err, size_t errlen);
/* After the listeners and the tunnel stopped (callbacks in flight were
 * delivered), before the loop is freed. NULL is fine. */
void e2b_free(struct e2b *e);
/* The routes for the agent's e2b listener, in match order; valid until e2b_free. */
const struct http_route *e2b_routes(const struct e2b *e, size_t *n);

/* --- private to agent/e2b ------------------------------------------------------------ */

#define E2B_ENVD_VERSION "0.6.13" /* what agentbox-envd reports (agent/envd/envd.h) */
#define E2B_TOKEN_HEX 64
#define E2B_ROUTES_MAX 96
#define E2B_UNSUP_MAX 48 /* refusals.c's 501 catalogue */

struct e2b;
typedef void (*e2b_fn)(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p);

/* A route's argument: the handler that runs once the caller is authenticated. */
struct e2b_op {
    struct e2b *e;
    e2b_fn fn;
};

struct e2b {
    struct e2b_deps d;
    const char *cluster;   /* d.cluster */
    uint8_t token_key[32]; /* envd access tokens are HMAC(key, sandbox id): see e2b_token */
    int64_t started_ms;    /* template creation times (the runtime keeps none) */
    struct metric_family *m_unsupported;
    struct metric_family *m_creates;
    struct metric_family *m_create_seconds;
    struct e2b_events *events;
    struct e2b_metrics *metrics; /* metrics.c's state, freed by e2b_metrics_free */
    struct http_route routes[E2B_ROUTES_MAX];
    size_t nroutes;
    struct e2b_op ops[E2B_ROUTES_MAX]; /* args of the authenticated routes */
    size_t nops;
    struct e2b_unsup_op {
        struct e2b *e;
        const void *entry; /* refusals.c's catalogue entry */
    } unsup_ops[E2B_UNSUP_MAX];
};

/* Dependencies and settings (NULL when unset). */
struct rt *e2b_rt(struct e2b *e);
struct loop *e2b_loop(struct e2b *e);
struct hub_link *e2b_hub(struct e2b *e);
/* The runtime's kind ("local", "kube"), for messages only: never branch on it. */
const char *e2b_runtime_kind(struct e2b *e);
const char *e2b_domain(struct e2b *e);
const char *e2b_prometheus_url(struct e2b *e);
const char *e2b_log_service_url(struct e2b *e);

/* The envd access token of a sandbox (out: E2B_TOKEN_HEX + 1 bytes). The
 * one place tokens are made: every shape and every claim asks here. */
void e2b_token(struct e2b *e, const char *id, char *out);

/* True when p may see s (same namespace, team and user). */
bool e2b_owns(const struct agent_principal *p, const struct rt_sandbox *s);

/* Looks up the sandbox named by the {id} path parameter for p. Returns true
 * with *s filled (metadata reference the caller drops), or false after
 * answering: 404 for unknown or another principal's, or forwarding the
 * whole request to the owning cluster. */
bool e2b_lookup(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                struct rt_sandbox *s);

/* GET /sandboxes and /v2/sandboxes asked of this agent directly: relays them
 * to the hub's merged list (every cluster's sandboxes of the caller, as the
 * hub's own list) and returns true; false when the list must be answered
 * locally (the request is the hub's fan-out over the tunnel, or there is no
 * hub session or assertion). keys.c. */
bool e2b_hub_list(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p);

/* Shapes (new references). templateID is the pool, alias the env the
 * sandbox was claimed from (the pool's name for a pool claimed directly),
 * as E2B answers the template's id and the name it was asked by. */
json_t *e2b_sandbox_json(struct e2b *e, const struct rt_sandbox *s);
/* SandboxDetail; `one`: GET /sandboxes/{id}, answered to the owner only
 * (e2b_lookup), with domain and envdAccessToken (the 1.x SDK's connect
 * takes the token from there); a list's entries carry neither. */
json_t *e2b_detail_json(struct e2b *e, const struct rt_sandbox *s, bool one);

/* cpuCount and memoryMB from a pool named <env>-<ceil cpu>c<floor GiB>gi (0 otherwise). */
void e2b_pool_size(const char *pool, int64_t *cpu, int64_t *mem_mb);

/* RFC 3339 UTC, second precision (out: at least 32 bytes). */
void e2b_time(int64_t wall_ms, char *out, size_t len);

/* Forwards the exchange (method, target, buffered body, Content-Type and
 * p's principal assertion — never the caller's key) to cluster's e2b
 * service through the hub, and answers with what comes back. */
void e2b_forward(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                 const char *cluster, const char *target);

/* Parses the buffered body as a JSON object ({} when empty); NULL after a 400. */
json_t *e2b_body(struct http_exchange *ex, bool empty_ok);

/* Route tables of each file (refusals.c also counts). */
int e2b_sandbox_routes(struct e2b *e, char *err, size_t errlen);
int e2b_create_routes(struct e2b *e, char *err, size_t errlen);
int e2b_template_routes(struct e2b *e, char *err, size_t errlen);
int e2b_unsupported_routes(struct e2b *e, char *err, size_t errlen);
int e2b_log_routes(struct e2b *e, char *err, size_t errlen);
int e2b_metric_routes(struct e2b *e, char *err, size_t errlen);
int e2b_key_routes(struct e2b *e, char *err, size_t errlen);

/* keys.c: calls the hub's public API (path "/e2b/secrets?limit=1000", say)
 * as principal p, through the hub's bridge, with p's assertion (made for
 * this cluster) in X-AgentBox-Assertion: neither the raw key nor its hash
 * crosses the tunnel for this (DESIGN §9, §11; the hub refuses a relayed
 * X-API-Key, AGENTBOX-API-KEY or Authorization, and a bare hash). done/arg
 * as tun_call's (agentbox/tunnel_http.h). Returns 0 (done runs once,
 * later), AB_EDENIED when p has no assertion, AB_ECLOSED without a tunnel,
 * or tun_call's error (done does not run). */
struct tun_call_result;
int e2b_hub_public_call(struct e2b *e, const struct agent_principal *p, const char *method,
                        const char *path, const void *body, size_t len, size_t max_body,
                        void (*done)(const struct tun_call_result *res, void *arg), void *arg);
/* Adds an authenticated route (method, pattern, fn) to the e2b route table. */
int e2b_route(struct e2b *e, const char *method, const char *pattern, e2b_fn fn, int flags,
              char *err, size_t errlen);
/* Adds a route as given (its handler authenticates, or the route is open). */
int e2b_route_raw(struct e2b *e, const struct http_route *r, char *err, size_t errlen);

/* refusals.c: checks a create body against the 400 list. Returns 0, or
 * AB_EINVAL with the message (naming the alternative) in err, or AB_EDENIED
 * for the fail-closed refusal of egress filtering (also a 400, but the
 * caller checks the rules' secret names first). */
int e2b_refuse_create(struct e2b *e, json_t *body, char *err, size_t errlen);
/* The same for a network object (create's, or PUT /sandboxes/{id}/network). */
int e2b_refuse_network(struct e2b *e, json_t *network, bool internet, bool live, char *err,
                       size_t errlen);
#define E2B_SECRET_NAME_MAX 128
/* The distinct secret names network.rules references (normalised like the
 * vault: lower case, no sec_ prefix); returns how many (at most max). */
size_t e2b_rule_secrets(json_t *network, char (*names)[E2B_SECRET_NAME_MAX + 1], size_t max);
/* Answers 501 with the catalogue text and counts the operation. */
void e2b_unsupported(struct e2b *e, struct http_exchange *ex, const char *operation,
                     const char *category, const char *message);

/* events.c: lifecycle events for the console, queued to the hub (never blocks).
 * assertion: the principal's hub assertion for this cluster, NULL or "" for
 * none; the hub makes a row from a "claimed" event only when it carries one. */
int e2b_events_new(struct e2b *e, struct e2b_events **out);
void e2b_events_free(struct e2b_events *q);
void e2b_event(struct e2b *e, const char *type, const struct rt_sandbox *s, const char *reason);
void e2b_event_ids(struct e2b *e, const char *type, const char *id, const char *ns, const char *env,
                   const char *pool, const char *team, const char *user, const json_t *metadata,
                   const char *reason, const char *assertion);

#endif
