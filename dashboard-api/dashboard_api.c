/* dashboard_api_add_routes: the one registration of the console's routes. */
#include "dashboard-api/dashboard_api.h"

#include "agentbox/common.h"
#include "hub/hub.h"

#include <stdio.h>

int dashboard_api_add_routes(struct hub *h, char *err, size_t errlen)
{
    int rc;

    if (h->auth == NULL) {
        snprintf(err, errlen, "dashboard api: the hub's identity context is not created yet");
        return AB_EINVAL;
    }
    rc = identity_api_add_routes(h, h->auth, err, errlen);
    if (rc == 0)
        rc = sandboxes_api_add_routes(h, h->auth, err, errlen);
    if (rc == 0)
        rc = clusters_api_add_routes(h, err, errlen);
    if (rc == 0)
        rc = federation_api_add_routes(h, err, errlen);
    if (rc == 0)
        rc = console_api_add_routes(h, err, errlen);
    if (rc == 0)
        rc = templates_api_add_routes(h, err, errlen);
    return rc;
}
