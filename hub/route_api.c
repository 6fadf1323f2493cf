/* Placement over HTTP, for agents:
 *
 *   POST /internal/v1/route          (the `hub` service; the caller is the origin)
 *        {namespace, env, scalingGroup?, localIdle?, localCanGrow?}
 *        → {step, action: forward|local|queue, cluster, pool, idle, reason}
 *
 * The console's listings of the registry are dashboard-api/federation_api.c.
 * Loop thread. */
#include "hub/federation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/metrics.h"
#include "hub/hub.h"

static void count(const struct route_query *q, const struct route_decision *d)
{
    static const char *const labels[] = {"step", NULL};
    struct metric_family *m =
        metrics_register(metrics_default(), "agentbox_route_decisions_total",
                         "Bare-name placement decisions, by step of DESIGN section 6 (1..5).",
                         METRIC_COUNTER, labels, NULL, 0);
    char step[4], idle[16];
    snprintf(step, sizeof(step), "%d", d->step);
    snprintf(idle, sizeof(idle), "%d", d->idle);
    const char *lv[] = {step};
    metrics_add(m, lv, 1);
    LOG_DEBUG("route decision", "origin", q->local ? q->local : "", "namespace", q->ns, "env",
              q->env, "group", q->group ? q->group : "", "step", step, "action",
              route_action_name(d->action), "cluster", d->cluster, "pool", d->pool, "idle", idle,
              "reason", d->reason);
}

void federation_place(struct federation *f, const struct route_query *q, struct route_decision *d)
{
    memset(d, 0, sizeof(*d));
    if (f != NULL)
        fed_registry_decide(federation_registry(f), q, d);
    count(q, d);
}

static json_t *decision_json(const struct route_decision *d)
{
    return json_pack("{s:i,s:s,s:s,s:s,s:i,s:s}", "step", d->step, "action",
                     route_action_name(d->action), "cluster", d->cluster, "pool", d->pool, "idle",
                     d->idle, "reason", d->reason);
}

/* --- internal: the origin asks ------------------------------------------------------- */

static void h_route(struct http_exchange *ex, void *arg)
{
    struct federation *f = arg;
    const struct http_request *r = http_req(ex);
    const char *origin = r->transport_data;
    const char *ns = NULL, *env = NULL, *group = NULL;
    int64_t local_idle = -1;
    bool can_grow = false;
    char err[256];

    json_t *body = json_parse_object(r->body, r->body_len, 64 * 1024, err, sizeof(err));
    if (!body) {
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    if (json_get_str(body, "namespace", true, ROUTE_NAME_MAX, &ns, err, sizeof(err)) ||
        json_get_str(body, "env", true, ROUTE_NAME_MAX, &env, err, sizeof(err)) ||
        json_get_str(body, "scalingGroup", false, ROUTE_NAME_MAX, &group, err, sizeof(err)) ||
        json_get_int(body, "localIdle", false, 0, INT32_MAX, &local_idle, err, sizeof(err)) ||
        json_get_bool(body, "localCanGrow", false, &can_grow, err, sizeof(err))) {
        http_respond_error(ex, 400, "%s", err);
        json_decref(body);
        return;
    }
    struct route_query q = {
        .ns = ns,
        .env = env,
        .group = group,
        .local = origin,
        .local_idle = (int)local_idle,
        .local_can_grow = json_object_get(body, "localCanGrow") &&
                                  !json_is_null(json_object_get(body, "localCanGrow"))
                              ? can_grow
                              : -1,
        .now_ms = federation_now_ms(),
    };
    struct route_decision d;
    federation_place(f, &q, &d);
    json_decref(body);
    http_respond_json(ex, 200, decision_json(&d));
}

int route_api_add_routes(struct hub *h, struct federation *f, char *err, size_t errlen)
{
    const struct http_route internal[] = {
        {"POST", "/internal/v1/route", h_route, f, 0},
    };
    return hub_add_internal_routes(h, internal, AB_ARRAY_LEN(internal), err, errlen);
}
