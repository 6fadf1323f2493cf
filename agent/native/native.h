/* The native API (console / abx, DESIGN §1) on the agent's :8080: one
 * module, `struct native`, whose route table the agent installs. Files:
 *   relay.c      /v1/relay/{cluster}/{service}/..., /v1/diag/echo, /v1/diag/bytes
 *                (admin only; a relay never hops twice; diag only with enable_diag)
 *   whoami.c     GET /v1/auth/whoami
 *   sandboxes.c  /v1/sandboxes, /v1/envs (sandboxes.h)
 * Owner: struct agent. Loop thread only. */
#ifndef AGENTBOX_AGENT_NATIVE_H
#define AGENTBOX_AGENT_NATIVE_H

#include <stdbool.h>
#include <stddef.h>

#include "agentbox/http.h"

struct agent_auth;
struct fed;
struct hub_link;
struct rt;

/* What the native API may call; borrowed, must outlive it. */
struct native_deps {
    struct rt *rt; /* NULL: creates answer 503, lists are empty */
    struct agent_auth *auth;
    struct hub_link *hub;
    struct fed *fed;
    const char *cluster; /* this cluster's id */
    bool enable_diag;    /* serve /v1/diag/...; off: those routes do not exist (404) */
};

#define NATIVE_ROUTES_MAX 16

struct native {
    struct native_deps d;
    struct http_route routes[NATIVE_ROUTES_MAX];
    size_t nroutes;
};

/* NULL with err set on failure. */
struct native *native_new(const struct native_deps *deps, char *err, size_t errlen);
/* The native listener's routes; valid until native_free. */
const struct http_route *native_routes(const struct native *n, size_t *count);
/* After the listeners stopped and the runtime is freed. NULL is fine. */
void native_free(struct native *n);

/* --- private to agent/native ------------------------------------------------------------ */

/* Appends routes to n's table (AB_ELIMIT past NATIVE_ROUTES_MAX). */
int native_add(struct native *n, const struct http_route *routes, size_t count, char *err,
               size_t errlen);
int native_relay_add_routes(struct native *n, char *err, size_t errlen);
int native_whoami_add_routes(struct native *n, char *err, size_t errlen);
int native_sandboxes_add_routes(struct native *n, char *err, size_t errlen);

#endif
