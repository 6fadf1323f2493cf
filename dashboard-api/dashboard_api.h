/* The console's REST API (every /api/... route of the hub), in one place.
 *
 * dashboard-api/ depends on hub/ and never the reverse: hub/serve.c calls
 * dashboard_api_add_routes once, between hub_init and hub_start, after the
 * hub created the modules the handlers reach through struct hub (auth,
 * clusters, federation; the tunnel server is read per request because it
 * starts in hub_start). Loop thread; storage on database workers. */
#ifndef AGENTBOX_DASHBOARD_API_H
#define AGENTBOX_DASHBOARD_API_H

#include <stddef.h>

struct hub;
struct auth_ctx;

/* All of the routes below. h->auth must be set. */
int dashboard_api_add_routes(struct hub *h, char *err, size_t errlen);

/* GET/POST /api/clusters..., /api/admin/clusters (clusters_api.c). */
int clusters_api_add_routes(struct hub *h, char *err, size_t errlen);
/* /api/auth/... (console login) and /api/v1/approvals (console_api.c). */
int console_api_add_routes(struct hub *h, char *err, size_t errlen);
/* GET /api/v1/federation, /api/clusters/{id}/federation (federation_api.c). */
int federation_api_add_routes(struct hub *h, char *err, size_t errlen);
/* GET /api/v1/sandboxes, /api/v1/statistics/sandboxes (sandboxes.c). */
int sandboxes_api_add_routes(struct hub *h, struct auth_ctx *a, char *err, size_t errlen);
/* /api/v1/auth/whoami, /api/v1/api-keys, /api/v1/admin/api-keys (identity_api.h). */
int identity_api_add_routes(struct hub *h, struct auth_ctx *a, char *err, size_t errlen);

/* /api/v1/sandbox-templates, /api/v1/admin/sandbox-templates (templates_api.c). */
int templates_api_add_routes(struct hub *h, char *err, size_t errlen);

#endif
