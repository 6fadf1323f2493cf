/* POST /api/admin/clusters {id, name?, region?} → 201 {id, name, region, token}:
 * an admin key registers a cluster and gets its join token once (the hub
 * keeps only the SHA-256). The same as `agentbox-hub cluster add`, through
 * the API; audited. */
#include "dashboard-api/clusters_api.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/json.h"
#include "agentbox/sbxid.h"
#include "hub/audit.h"
#include "hub/auth.h"
#include "hub/clusters.h"
#include "hub/db.h"
#include "hub/hub.h"

#include <libpq-fe.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct add_req {
    struct hub *h;
    struct http_exchange *ex;
    char id[SBXID_CLUSTER_MAX + 1];
    char name[128], region[64];
    char actor[96];
    char token[80], hash[65];
    int result; /* 0, AB_EEXIST, AB_EIO */
    char err[256];
};

static int add_job(PGconn *c, void *arg)
{
    struct add_req *q = arg;
    const char *vals[4] = {q->id, q->name, q->region, q->hash};
    PGresult *r = PQexec(c, "BEGIN");
    PQclear(r);
    r = PQexecParams(c,
                     "INSERT INTO clusters (id, name, region, token_hash) VALUES ($1, $2, $3, $4) "
                     "ON CONFLICT (id) DO NOTHING RETURNING id",
                     4, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(q->err, sizeof(q->err), "%s", PQerrorMessage(c));
        q->result = AB_EIO;
    } else if (PQntuples(r) == 0) {
        q->result = AB_EEXIST;
    }
    PQclear(r);
    if (q->result == 0) {
        json_t *details = json_pack("{s:s,s:s}", "name", q->name, "region", q->region);
        struct audit_entry e = {.actor = q->actor,
                                .action = "cluster.add",
                                .target = q->id,
                                .cluster = q->id,
                                .details = details};
        if (audit_write_conn(c, &e, q->err, sizeof(q->err)) != 0)
            q->result = AB_EIO;
        json_decref(details);
    }
    PQclear(PQexec(c, q->result == 0 ? "COMMIT" : "ROLLBACK"));
    return 0;
}

static void add_done(void *arg, int status)
{
    struct add_req *q = arg;
    if (status != 0 || q->result == AB_EIO) {
        auth_respond_db_error(hub_identity_ctx(), q->ex, AUTH_SURFACE_API, status ? status : AB_EIO,
                              q->err);
    } else if (q->result == AB_EEXIST) {
        auth_respond_api_error(q->ex, 409, "CONFLICT",
                               "cluster '%s' already exists: rotate its token with "
                               "'agentbox-hub cluster rotate-token %s'",
                               q->id, q->id);
    } else {
        clusters_refresh_now(q->h->clusters);
        http_respond_json(q->ex, 201,
                          json_pack("{s:s,s:s,s:s,s:s}", "id", q->id, "name", q->name, "region",
                                    q->region, "token", q->token));
    }
    OPENSSL_cleanse(q->token, sizeof(q->token));
    free(q);
}

static void add_authed(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    const struct http_request *r = http_req(ex);
    char err[256];
    if (p->role != KEYS_ROLE_ADMIN) {
        auth_respond_api_error(ex, 403, "FORBIDDEN", "admin api key required to register clusters");
        return;
    }
    json_t *body = json_parse_object(r->body, r->body_len, 0, err, sizeof(err));
    const char *id = NULL, *name = NULL, *region = NULL;
    if (!body || json_get_str(body, "id", true, SBXID_CLUSTER_MAX + 8, &id, err, sizeof(err)) ||
        json_get_str(body, "name", false, 127, &name, err, sizeof(err)) ||
        json_get_str(body, "region", false, 63, &region, err, sizeof(err))) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "%s", err);
        json_decref(body);
        return;
    }
    char why[128];
    if (!sbxid_cluster_is_valid(id, why, sizeof(why))) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "field 'id': %s", why);
        json_decref(body);
        return;
    }
    struct add_req *q = calloc(1, sizeof(*q));
    if (!q) {
        json_decref(body);
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "out of memory");
        return;
    }
    q->h = h;
    q->ex = ex;
    ab_strlcpy(q->id, id, sizeof(q->id));
    ab_strlcpy(q->name, name ? name : id, sizeof(q->name));
    ab_strlcpy(q->region, region ? region : "", sizeof(q->region));
    snprintf(q->actor, sizeof(q->actor), "key:%s", p->key_id);
    json_decref(body);
    if (crypto_token("abxc_", q->token, sizeof(q->token)) != 0) {
        free(q);
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "cannot draw a random token");
        return;
    }
    crypto_sha256_hex(q->token, q->hash);
    int rc = db_submit(h->db, add_job, add_done, q);
    if (rc != 0) {
        OPENSSL_cleanse(q->token, sizeof(q->token));
        free(q);
        auth_respond_db_error(hub_identity_ctx(), ex, AUTH_SURFACE_API, rc, "");
    }
}

static void h_add(struct http_exchange *ex, void *arg)
{
    auth_request(hub_identity_ctx(), ex, AUTH_SURFACE_API, add_authed, arg);
}

int clusters_api_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"POST", "/api/admin/clusters", h_add, h, 0},
        {"POST", "/api/v1/admin/clusters", h_add, h, 0},
    };
    return hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
