/* Admin cluster registration through the hub API (clusters_api.c). */
#ifndef AGENTBOX_DASHBOARD_CLUSTERS_API_H
#define AGENTBOX_DASHBOARD_CLUSTERS_API_H

#include <stddef.h>

struct hub;

/* POST /api/admin/clusters (and /api/v1/admin/clusters). Before hub_start. */
int clusters_api_add_routes(struct hub *h, char *err, size_t errlen);

#endif
