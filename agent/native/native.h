/* The native API (console / abx, DESIGN §1) on the agent's :8080: one
 * module, `struct native`, whose route table the agent installs. Files:
 *   relay.c      /v1/relay/{cluster}/{service}/..., /v1/diag/echo, /v1/diag/bytes
 *                (admin only; a relay never hops twice; diag only with enable_diag)
 *   whoami.c     GET /v1/auth/whoami
 *   sandboxes.c  /v1/sandboxes, /v1/envs (sandboxes.h)
 *   mgmt.c       /v1/envs/{name}/..., pools, scaling groups, events (put.h: §4.4)
 *   system.c     /ping, templates, clusters, feature gates, quotas, statistics,
 *                sandbox timeout/logs/is_ready
 *   exec.c       POST /v1/sandboxes/{id}/exec (through envd)
 *   terminal.c   POST /v1/sandboxes/{id}/exec-token, GET .../terminal (WebSocket PTY)
 *   logstream.c  GET /v1/sandboxes/{id}/logs/stream (NDJSON, follows)
 *   error.c      the error shape {"error","errorCode","detail"}
 * Owner: struct agent. Loop thread only. */
#ifndef AGENTBOX_AGENT_NATIVE_H
#define AGENTBOX_AGENT_NATIVE_H

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

#include <jansson.h>

#include "agentbox/http.h"

struct agent_auth;
struct autoscaler;
struct fed;
struct loop;
struct hub_link;
struct rt;

/* What the native API may call; borrowed, must outlive it. */
struct native_deps {
    struct loop *loop; /* log reads go to its workers */
    struct rt *rt;     /* NULL: creates answer 503, lists are empty */
    struct agent_auth *auth;
    struct hub_link *hub;
    struct fed *fed;
    struct autoscaler *autoscaler; /* the groups API's last decisions; NULL: none */
    const char *cluster;           /* this cluster's id */
    bool enable_diag;              /* serve /v1/diag/...; off: those routes do not exist (404) */
};

#define NATIVE_ROUTES_MAX 64
#define NATIVE_EVENTS_MAX 2048 /* env events kept (a ring, oldest dropped) */

/* One env event (GET /v1/envs/{name}/events): what a write through this
 * API did and who asked. */
struct native_event {
    int64_t ms; /* wall clock */
    char ns[64];
    char env[64];
    char reason[32];
    char message[256];
};

#define NATIVE_WRITES_MAX 256 /* management writes queued (mgmt.c) */

#define NATIVE_EXEC_TOKENS_MAX 256 /* outstanding exec tokens (terminal.c) */
#define NATIVE_EXEC_TOKEN_TTL_MS 30000
/* An exec token: its SHA-256 (hex), the sandbox it opens, its expiry
 * (monotonic). Empty digest: a free slot. */
struct native_exec_token {
    char digest[65];
    char sandbox[128];
    int64_t expires_ms;
};

struct native_pending;
struct native_term;
struct native_lstream;

struct native {
    struct native_deps d;
    struct http_route routes[NATIVE_ROUTES_MAX];
    size_t nroutes;
    struct native_event *events; /* NATIVE_EVENTS_MAX entries */
    size_t nevents;              /* written so far; the ring holds the last MAX */
    /* management writes, one at a time in arrival order (mgmt.c) */
    struct native_pending *wq_head, *wq_tail;
    int wq_len;
    bool wq_busy;
    struct native_exec_token exec_tokens[NATIVE_EXEC_TOKENS_MAX];
    /* open terminals and log streams: native_free ends them (they hold
     * exchanges and envd calls that outlive this module otherwise) */
    struct native_term *terms;
    struct native_lstream *streams;
};

/* NULL with err set on failure. */
struct native *native_new(const struct native_deps *deps, char *err, size_t errlen);
/* The native listener's routes; valid until native_free. */
const struct http_route *native_routes(const struct native *n, size_t *count);
/* After the listeners stopped and the runtime is freed. NULL is fine. */
void native_free(struct native *n);

/* The native listener's error format for the router ({"error","errorCode"}),
 * installed by the agent for every answer of that listener. */
json_t *native_error_json(int status, const char *message);

/* --- private to agent/native ------------------------------------------------------------ */

/* Appends routes to n's table (AB_ELIMIT past NATIVE_ROUTES_MAX). */
int native_add(struct native *n, const struct http_route *routes, size_t count, char *err,
               size_t errlen);
int native_relay_add_routes(struct native *n, char *err, size_t errlen);
int native_whoami_add_routes(struct native *n, char *err, size_t errlen);
int native_sandboxes_add_routes(struct native *n, char *err, size_t errlen);
int native_mgmt_add_routes(struct native *n, char *err, size_t errlen);
int native_system_add_routes(struct native *n, char *err, size_t errlen);
int native_exec_add_routes(struct native *n, char *err, size_t errlen);
int native_terminal_add_routes(struct native *n, char *err, size_t errlen);
int native_logstream_add_routes(struct native *n, char *err, size_t errlen);
/* terminal.c: a single-use token for sandbox (out gets it); AB_EBUSY when
 * NATIVE_EXEC_TOKENS_MAX are outstanding. */
int native_exec_token_issue(struct native *n, const char *sandbox, char *out, size_t outlen);
/* Consumes token: 0 when it was issued for sandbox and is live; AB_ETIMEOUT
 * expired or another sandbox's (consumed all the same); AB_EDENIED unknown
 * or used. */
int native_exec_token_take(struct native *n, const char *sandbox, const char *token);
struct rt_sandbox;
struct agent_principal;
/* exec.c: the sandbox {id} for p into *s (envd token included: wipe it), or
 * false having answered 404 (someone else's sandbox does not exist for p). */
bool native_own_sandbox(struct http_exchange *ex, struct native *n, const struct agent_principal *p,
                        struct rt_sandbox *s);
/* Ends every open terminal / log stream at once (native_free calls them). */
void native_terminal_close_all(struct native *n);
void native_logstream_close_all(struct native *n);
/* /v1/admin/sandbox-templates, relayed to the hub (templates_admin.c). */
int native_templates_admin_add_routes(struct native *n, char *err, size_t errlen);
/* Answers the writes still queued (native_free calls it). */
void native_mgmt_free(struct native *n);

/* error.c: answers {"error": fmt…, "errorCode": code (NULL: by status),
 * "detail": detail (taken; NULL: none)}. */
void native_error(struct http_exchange *ex, int status, const char *code, json_t *detail,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
const char *native_error_code(int status);

struct agent_principal;
/* What runs once a request passed the gate: p is valid during the call only. */
typedef void (*native_then_fn)(struct http_exchange *ex, const struct agent_principal *p,
                               void *arg);
/* The one place the approval gate of reference §4.5 is checked, for every
 * gated native write (op is its op id, e.g. "env.update"). Runs then(ex, p,
 * arg) at once for a caller the gate does not apply to (not an agent-mode
 * key, an admin, or a request the hub relayed from /api/clusters/{id}/v1,
 * which it gated already); for an agent-mode key it suspends ex, asks the
 * hub (POST /internal/v1/approvals/gate through the hub link, with the
 * caller's assertion and the SHA-256 of the body the handler acts on) and
 * runs then only on {"allowed": true}. Otherwise ex is answered and then
 * never runs: the hub's 428 APPROVAL_REQUIRED / 403 FORBIDDEN_FOR_AGENT body
 * as is, or 503 naming the hub when it cannot be asked (fail closed). */
void native_gate(struct native *n, struct http_exchange *ex, const struct agent_principal *p,
                 const char *op, native_then_fn then, void *arg);
/* Defines name, an agent_auth_fn (arg: the struct native) that passes the
 * gate for op, then runs fn. */
#define NATIVE_GATED(name, op, fn)                                                                 \
    static void name(struct http_exchange *ex, const struct agent_principal *p, void *arg)         \
    {                                                                                              \
        native_gate(arg, ex, p, op, fn, arg);                                                      \
    }
/* The namespace a management request acts in — the one boundary between
 * tenants' envs: a tenant's own whatever it asks; an admin's asked one or
 * "default". native_caller_ns takes asked from ?namespace= (buf holds it). */
const char *native_env_ns(const struct agent_principal *p, const char *asked);
const char *native_caller_ns(struct http_exchange *ex, const struct agent_principal *p, char *buf,
                             size_t len);
/* Wall-clock ms as RFC 3339 UTC with milliseconds ("2026-01-02T03:04:05.678Z"),
 * the native API's time format (mgmt.c). */
void native_iso_time(int64_t ms, char *out, size_t len);
/* Whether p may see a SandboxTemplate with this spec (system.c). */
bool native_template_visible(const struct agent_principal *p, const json_t *spec);
/* Records an env event (mgmt.c). */
void native_event_add(struct native *n, const char *ns, const char *env, const char *reason,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
