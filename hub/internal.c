/* The hub's internal API: the `hub` service that agents reach over their
 * tunnel. transport_data of each request is the calling cluster's id. */
#include "hub/hub.h"

#include "agentbox/common.h"
#include "agentbox/version.h"

static void h_ping(struct http_exchange *ex, void *arg)
{
    const char *cluster = http_req(ex)->transport_data;
    json_t *body = json_pack("{s:b,s:s,s:s}", "pong", 1, "cluster", cluster ? cluster : "",
                             "hubVersion", AGENTBOX_VERSION);
    http_respond_json(ex, 200, body);
}

int hub_internal_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/internal/v1/ping", h_ping, h, 0},
    };
    return hub_add_internal_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
