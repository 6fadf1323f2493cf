/* The hub's wiring: serve.c registers every route, hub/ modules never an
 * /api/... one (those belong to dashboard-api/), and the route tables hold
 * no pattern twice. hub_init needs no database: the pool connects on its
 * first job and the loop never runs here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/loop.h"
#include "dashboard-api/dashboard_api.h"
#include "hub/approvals.h"
#include "hub/auth.h"
#include "hub/e2b_front.h"
#include "hub/federation.h"
#include "hub/sessions.h"
#include "hub/hub.h"
#include "hub/sandbox_events.h"
#include "hub/templates.h"
#include "hub/vault_api.h"

static const char SECRET[] = "0123456789abcdef0123456789abcdef";

/* Every console route, as dashboard-api/ registers it. */
static const char *const API_ROUTES[] = {
    "GET /api/v1/auth/whoami",
    "GET /api/v1/api-keys",
    "POST /api/v1/api-keys",
    "DELETE /api/v1/api-keys/{id}",
    "GET /api/v1/admin/api-keys",
    "POST /api/v1/admin/api-keys",
    "DELETE /api/v1/admin/api-keys/{id}",
    "GET /api/v1/sandboxes",
    "GET /api/v1/statistics/sandboxes",
    "GET /api/clusters",
    "GET /api/clusters/{id}",
    "* /api/clusters/{id}/v1/{*rest}",
    "* /api/clusters/{id}/v1",
    "POST /api/admin/clusters",
    "POST /api/v1/admin/clusters",
    "GET /api/v1/federation",
    "GET /api/clusters/{id}/federation",
    "POST /api/clusters/{id}/v1/{*rest}",
    "PUT /api/clusters/{id}/v1/{*rest}",
    "PATCH /api/clusters/{id}/v1/{*rest}",
    "DELETE /api/clusters/{id}/v1/{*rest}",
    "POST /api/auth/login",
    "POST /api/auth/logout",
    "GET /api/auth/session",
    "GET /api/v1/approvals",
    "GET /api/v1/approvals/{approvalId}",
    "POST /api/v1/approvals/{approvalId}/decision",
    "DELETE /api/v1/approvals/grants/{grantId}",
    "GET /api/clusters/{id}/v1/approvals",
    "GET /api/clusters/{id}/v1/approvals/{approvalId}",
    "POST /api/clusters/{id}/v1/approvals/{approvalId}/decision",
    "DELETE /api/clusters/{id}/v1/approvals/grants/{grantId}",
    "GET /api/v1/sandbox-templates",
    "GET /api/v1/sandbox-templates/{name}",
    "GET /api/v1/admin/sandbox-templates",
    "POST /api/v1/admin/sandbox-templates",
    "PUT /api/v1/admin/sandbox-templates/{name}",
    "DELETE /api/v1/admin/sandbox-templates/{name}",
};

static bool is_api(const struct http_route *r)
{
    return strncmp(r->pattern, "/api/", 5) == 0 || strcmp(r->pattern, "/api") == 0;
}

static size_t count_api(const struct http_route *v, size_t n)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        k += is_api(&v[i]);
    return k;
}

static bool has_route(const struct http_route *v, size_t n, const char *want)
{
    char got[256];

    for (size_t i = 0; i < n; i++) {
        snprintf(got, sizeof(got), "%s %s", v[i].method, v[i].pattern);
        if (strcmp(got, want) == 0)
            return true;
    }
    return false;
}

static void assert_no_duplicates(const struct http_route *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(v[i].method, v[j].method) == 0 && strcmp(v[i].pattern, v[j].pattern) == 0)
                fail_msg("route %s %s registered twice", v[i].method, v[i].pattern);
}

/* The hub/ modules' own registrations add no /api/ route; dashboard-api's one
 * call adds exactly the console's. */
static void test_hub_modules_register_no_api_routes(void **state)
{
    struct loop_options lo = {0};
    struct auth_options ao = {0};
    struct hub h;
    char err[512] = "";

    (void)state;
    memset(&h, 0, sizeof(h));
    h.loop = loop_new(&lo);
    assert_non_null(h.loop);
    ao.loop = h.loop;
    ao.hub_secret = SECRET;
    ao.hub_secret_len = sizeof(SECRET) - 1;
    assert_int_equal(auth_new(&ao, &h.auth, err, sizeof(err)), 0);
    assert_non_null(h.auth);
    struct federation_deps fd = {.loop = h.loop};
    h.fed = federation_new(&fd, err, sizeof(err));
    assert_non_null(h.fed);
    struct e2b_front_deps ed = {.loop = h.loop, .auth = h.auth, .fed = h.fed};
    h.front = e2b_front_new(&ed);
    assert_non_null(h.front);
    struct sessions_deps sd = {.loop = h.loop, .auth = h.auth};
    assert_int_equal(sessions_new(&sd, &h.sessions, err, sizeof(err)), 0);
    struct approvals_deps apd = {.loop = h.loop, .auth = h.auth};
    assert_int_equal(approvals_new(&apd, &h.approvals, err, sizeof(err)), 0);
    struct templates_deps tpd = {.loop = h.loop}; /* no database: nothing is read */
    assert_int_equal(templates_new(&tpd, &h.templates, err, sizeof(err)), 0);

    assert_int_equal(hub_health_add_routes(&h, err, sizeof(err)), 0);
    assert_int_equal(hub_internal_add_routes(&h, err, sizeof(err)), 0);
    assert_int_equal(auth_add_internal_routes(&h, h.auth, err, sizeof(err)), 0);
    assert_int_equal(vault_api_new(&h, h.auth, &h.vault, err, sizeof(err)), 0);
    assert_int_equal(route_api_add_routes(&h, h.fed, err, sizeof(err)), 0);
    assert_int_equal(e2b_front_add_routes(h.front, &h, err, sizeof(err)), 0);
    assert_int_equal(hub_sandboxes_add_routes(&h, err, sizeof(err)), 0);
    assert_int_equal(templates_add_internal_routes(&h, h.templates, err, sizeof(err)), 0);
    for (size_t i = 0; i < h.nroutes; i++)
        if (is_api(&h.routes[i]))
            fail_msg("a hub/ module registered %s %s: /api/ handlers belong to dashboard-api/",
                     h.routes[i].method, h.routes[i].pattern);
    assert_int_equal(count_api(h.internal_routes, h.ninternal), 0);

    size_t before = h.nroutes;
    assert_int_equal(dashboard_api_add_routes(&h, err, sizeof(err)), 0);
    for (size_t i = before; i < h.nroutes; i++)
        if (!is_api(&h.routes[i]))
            fail_msg("dashboard-api registered %s %s, outside /api/", h.routes[i].method,
                     h.routes[i].pattern);
    assert_int_equal(h.nroutes - before, AB_ARRAY_LEN(API_ROUTES));
    for (size_t i = 0; i < AB_ARRAY_LEN(API_ROUTES); i++)
        if (!has_route(h.routes, h.nroutes, API_ROUTES[i]))
            fail_msg("dashboard-api does not register %s", API_ROUTES[i]);
    assert_no_duplicates(h.routes, h.nroutes);
    assert_no_duplicates(h.internal_routes, h.ninternal);

    vault_api_free(h.vault);
    templates_free(h.templates);
    approvals_free(h.approvals);
    sessions_free(h.sessions);
    e2b_front_free(h.front);
    federation_free(h.fed);
    auth_free(h.auth);
    loop_free(h.loop);
}

/* hub_init wires the same: every console route once, the front door and the
 * internal routes agents call; hub_fini frees it all (ASan checks). */
static void test_hub_init_wires_every_route(void **state)
{
    struct hub_serve_config cfg;
    struct hub h;
    char err[512] = "";

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    cfg.listen = (char *)"127.0.0.1:0";
    cfg.database_url = (char *)"postgresql://127.0.0.1:1/nowhere";
    cfg.db_workers = 1;
    cfg.db_queue = 4;
    cfg.db_connect_timeout_ms = 1000;
    cfg.db_statement_timeout_ms = 1000;
    cfg.db_retry_ms = 1000;
    cfg.ready_timeout_ms = 1000;
    cfg.log_level = (char *)"error";
    cfg.hub_secret = (char *)SECRET;
    assert_int_equal(hub_init(&h, &cfg, err, sizeof(err)), 0);
    assert_non_null(h.auth);
    assert_non_null(h.fed);
    assert_non_null(h.front);
    assert_non_null(h.clusters);
    assert_non_null(h.sessions);
    assert_non_null(h.approvals);
    assert_null(h.tunnel); /* hub_start creates it */
    assert_int_equal(count_api(h.routes, h.nroutes), AB_ARRAY_LEN(API_ROUTES));
    for (size_t i = 0; i < AB_ARRAY_LEN(API_ROUTES); i++)
        if (!has_route(h.routes, h.nroutes, API_ROUTES[i]))
            fail_msg("hub_init does not wire %s", API_ROUTES[i]);
    assert_true(has_route(h.routes, h.nroutes, "POST /e2b/sandboxes"));
    assert_true(has_route(h.routes, h.nroutes, "GET /readyz"));
    assert_true(has_route(h.internal_routes, h.ninternal, "POST /internal/v1/route"));
    assert_true(has_route(h.internal_routes, h.ninternal, "POST /internal/v1/keys/validate"));
    assert_true(has_route(h.internal_routes, h.ninternal, "POST /internal/v1/sandbox-events"));
    assert_true(has_route(h.internal_routes, h.ninternal, "POST /internal/v1/approvals/gate"));
    assert_true(has_route(h.internal_routes, h.ninternal, "GET /internal/v1/sandbox-templates"));
    assert_non_null(h.templates);
    assert_no_duplicates(h.routes, h.nroutes);
    assert_no_duplicates(h.internal_routes, h.ninternal);
    hub_fini(&h);
    assert_null(h.loop);
    assert_null(h.auth);
    assert_null(h.fed);
    assert_null(h.front);
    assert_null(h.clusters);
}

/* A hub without a secret refuses to start and says how to make one. */
static void test_hub_init_without_secret_names_the_setting(void **state)
{
    struct hub_serve_config cfg;
    struct hub h;
    char err[512] = "";

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    cfg.listen = (char *)"127.0.0.1:0";
    cfg.db_workers = 1;
    cfg.db_queue = 4;
    cfg.db_connect_timeout_ms = 1000;
    cfg.db_statement_timeout_ms = 1000;
    cfg.db_retry_ms = 1000;
    cfg.ready_timeout_ms = 1000;
    assert_int_not_equal(hub_init(&h, &cfg, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "hub_secret"));
    assert_null(h.auth);
    hub_fini(&h);
    assert_null(h.loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hub_modules_register_no_api_routes),
        cmocka_unit_test(test_hub_init_wires_every_route),
        cmocka_unit_test(test_hub_init_without_secret_names_the_setting),
    };
    return cmocka_run_group_tests_name("hub_wiring", tests, NULL, NULL);
}
