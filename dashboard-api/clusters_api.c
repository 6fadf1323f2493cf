/* Every /api/clusters handler except .../federation (federation_api.c):
 *
 * Every route needs a valid API key (Authorization: Bearer or AGENTBOX-API-KEY;
 * the native relay also X-API-Key).
 *   GET  /api/clusters             {"clusters":[{"id","name","region","online","lastSeen",
 *                                  "agentVersion","disabled","namespaces"}]} sorted by id
 *                                  (namespaces: null = every one); lastSeen
 *                                  RFC 3339 or null; agentVersion null before a session
 *   GET  /api/clusters/{id}        one cluster's object, 404 naming the id
 *                                  (both 503 until the registry's first refresh)
 *   ANY  /api/clusters/{id}/v1/... that cluster's native API, relayed over its tunnel
 *   POST /api/admin/clusters {id, name?, region?, namespaces?: [names] | null}
 *        → 201 {id, name, region, namespaces, token}:
 *        an admin key registers a cluster and gets its join token once (the hub
 *        keeps only the SHA-256). The same as `agentbox-hub cluster add`,
 *        through the API; audited.
 * Loop thread; storage on database workers. */
#include "dashboard-api/dashboard_api.h"

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/json.h"
#include "agentbox/sbxid.h"
#include "agentbox/tunnel_http.h"
#include "hub/approvals.h"
#include "hub/audit.h"
#include "hub/auth.h"
#include "hub/clusters.h"
#include "hub/db.h"
#include "hub/clusters_table.h"
#include "hub/hub.h"
#include "hub/tunnel_server.h"

#include <libpq-fe.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct add_req {
    struct hub *h;
    struct http_exchange *ex;
    char id[AB_CLUSTER_ID_BUF];
    char name[128], region[64];
    char namespaces[CLUSTERS_NS_BUF]; /* normalised "a,b"; "" = every namespace */
    char actor[96];
    char token[80], hash[65];
    int result; /* 0, AB_EEXIST, AB_EIO */
    char err[256];
};

static int add_job(PGconn *c, void *arg)
{
    struct add_req *q = arg;
    const char *vals[5] = {q->id, q->name, q->region, q->hash, q->namespaces};
    PGresult *r = PQexec(c, "BEGIN");
    PQclear(r);
    r = PQexecParams(c,
                     "INSERT INTO clusters (id, name, region, token_hash, namespaces) "
                     "VALUES ($1, $2, $3, $4, NULLIF(string_to_array($5, ','), '{}')) "
                     "ON CONFLICT (id) DO NOTHING RETURNING id",
                     5, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(q->err, sizeof(q->err), "%s", PQerrorMessage(c));
        q->result = AB_EIO;
    } else if (PQntuples(r) == 0) {
        q->result = AB_EEXIST;
    }
    PQclear(r);
    if (q->result == 0) {
        json_t *details = json_pack("{s:s,s:s,s:s}", "name", q->name, "region", q->region,
                                    "namespaces", q->namespaces[0] ? q->namespaces : "*");
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

/* A cluster's assigned namespaces ("a,b" as stored) as the API shows them:
 * null for every namespace (""), else an array of the names. */
static json_t *namespaces_json(const char *csv)
{
    json_t *ns = csv[0] ? json_array() : NULL;
    for (const char *p = csv; p[0] && ns;) {
        const char *end = strchr(p, ',');
        json_array_append_new(ns, end ? json_stringn(p, (size_t)(end - p)) : json_string(p));
        if (!end)
            break;
        p = end + 1;
    }
    return ns ? ns : json_null();
}

static void add_done(void *arg, int status)
{
    struct add_req *q = arg;
    if (status != 0 || q->result == AB_EIO) {
        auth_respond_db_error(q->h->auth, q->ex, AUTH_SURFACE_API, status ? status : AB_EIO,
                              q->err);
    } else if (q->result == AB_EEXIST) {
        auth_respond_api_error(q->ex, 409, "CONFLICT",
                               "cluster '%s' already exists: rotate its token with "
                               "'agentbox-hub cluster rotate-token %s'",
                               q->id, q->id);
    } else {
        clusters_refresh_now(q->h->clusters);
        json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "id", q->id, "name", q->name, "region",
                              q->region, "token", q->token);
        json_object_set_new(o, "namespaces", namespaces_json(q->namespaces));
        http_respond_json(q->ex, 201, o);
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
    if (!body || json_get_str(body, "id", true, AB_CLUSTER_ID_MAX + 8, &id, err, sizeof(err)) ||
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
    /* namespaces: an array of names, absent or null = every namespace */
    char list[CLUSTERS_NS_BUF] = "", ns[CLUSTERS_NS_BUF];
    json_t *nsv = json_object_get(body, "namespaces"), *it;
    size_t k;
    if (nsv && !json_is_null(nsv)) {
        bool ok = json_is_array(nsv) && json_array_size(nsv) > 0;
        size_t used = 0;
        json_array_foreach(nsv, k, it)
        {
            const char *s = json_string_value(it);
            int w = s ? snprintf(list + used, sizeof(list) - used, "%s%s", used ? "," : "", s) : -1;
            if (w < 0 || (size_t)w >= sizeof(list) - used || strchr(s, ',')) {
                ok = false;
                break;
            }
            used += (size_t)w;
        }
        if (!ok) {
            auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                                   "field 'namespaces' must be a non-empty array of namespace "
                                   "names (or null for every namespace)");
            json_decref(body);
            return;
        }
    }
    if (clusters_parse_ns_list(list, ns, sizeof(ns), err, sizeof(err)) != 0 ||
        (list[0] && !ns[0])) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "field 'namespaces': %s",
                               list[0] && !ns[0] ? "'*' is not a namespace name; send null" : err);
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
    ab_strlcpy(q->namespaces, ns, sizeof(q->namespaces));
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
        auth_respond_db_error(h->auth, ex, AUTH_SURFACE_API, rc, "");
    }
}

static void h_add(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;

    auth_request(h->auth, ex, AUTH_SURFACE_API, add_authed, arg);
}

/* --- GET /api/clusters[/{id}]: the registry in memory -------------------------------- */

static json_t *info_json(const struct cluster_info *ci)
{
    char seen[32];
    json_t *o = json_object();

    if (o == NULL)
        return NULL;
    clusters_format_time(ci->last_seen_ms, seen, sizeof(seen));
    json_object_set_new(o, "id", json_string(ci->id));
    json_object_set_new(o, "name", json_string(ci->name));
    json_object_set_new(o, "region", json_string(ci->region));
    json_object_set_new(o, "online", json_boolean(ci->online));
    json_object_set_new(o, "disabled", json_boolean(ci->disabled));
    json_object_set_new(o, "lastSeen",
                        ci->last_seen_ms > 0 && seen[0] != '\0' ? json_string(seen) : json_null());
    json_object_set_new(o, "agentVersion",
                        ci->agent_version[0] != '\0' ? json_string(ci->agent_version)
                                                     : json_null());
    json_object_set_new(o, "namespaces", namespaces_json(ci->namespaces));
    return o;
}

static bool answer_not_loaded(struct clusters *c, struct http_exchange *ex)
{
    if (clusters_is_loaded(c))
        return false;
    const char *why = clusters_last_error(c);
    http_respond_error(ex, 503, "cluster registry not loaded yet: %s",
                       why[0] != '\0' ? why : "first refresh in progress");
    return true;
}

static void api_list_authed(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    (void)p; /* any valid key: the registry is no tenant's secret, but no stranger's business */
    struct hub *h = arg;
    struct clusters *c = h->clusters;
    json_t *body, *arr;

    if (answer_not_loaded(c, ex))
        return;
    body = json_object();
    arr = json_array();
    if (body == NULL || arr == NULL)
        goto oom;
    for (size_t i = 0; i < clusters_count(c); i++) {
        struct cluster_info ci;

        if (clusters_at(c, i, &ci) != 0)
            break;
        if (json_array_append_new(arr, info_json(&ci)) != 0)
            goto oom;
    }
    json_object_set_new(body, "clusters", arr);
    http_respond_json(ex, 200, body);
    return;
oom:
    json_decref(arr);
    json_decref(body);
    http_respond_error(ex, 503, "out of memory listing clusters");
}

static void api_list(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    auth_request(h->auth, ex, AUTH_SURFACE_API, api_list_authed, h);
}

static void api_get_authed(struct http_exchange *ex, const struct keys_principal *who, void *arg)
{
    (void)who;
    struct hub *h = arg;
    struct clusters *c = h->clusters;
    const char *id = http_param(ex, "id");
    struct cluster_info ci;
    json_t *o;

    if (answer_not_loaded(c, ex))
        return;
    if (id == NULL || clusters_get(c, id, &ci) != 0) {
        char shown[65];
        size_t n = 0;

        /* Echo the id, but only as printable ASCII (it came off the wire). */
        for (const char *p = id != NULL ? id : ""; *p != '\0' && n + 1 < sizeof(shown); p++)
            shown[n++] = (*p >= 0x20 && *p < 0x7f && *p != '\'') ? *p : '?';
        shown[n] = '\0';
        http_respond_error(ex, 404, "no cluster '%s': list the clusters with GET /api/clusters",
                           shown);
        return;
    }
    o = info_json(&ci);
    if (o == NULL) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    http_respond_json(ex, 200, o);
}

static void api_get(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    auth_request(h->auth, ex, AUTH_SURFACE_API, api_get_authed, h);
}

/* --- ANY /api/clusters/{id}/v1/...: the cluster's native API over its tunnel --------- */

/* After the gate: relays the request to the cluster. */
static void cluster_native_pass(struct http_exchange *ex, bool allowed, void *arg)
{
    struct hub *h = arg;
    if (!allowed)
        return; /* the gate answered */
    const char *id = http_param(ex, "id");
    const char *target = http_req(ex)->target;
    /* the raw target after /api/clusters/<id>, so escapes reach the agent as sent */
    const char *rest = strstr(target + strlen("/api/clusters/"), "/v1");
    char msg[160];
    snprintf(msg, sizeof(msg), "cluster '%.64s' is not connected to the hub", id);
    tun_http_proxy(ex, h->tunnel ? tunnel_server_session(h->tunnel, id) : NULL, "native", rest,
                   NULL, 0, msg);
}

/* Authenticated here first (no anonymous traffic reaches a tunnel), then
 * again by the agent, which decides what the principal may see there. An
 * agent-mode key's gated writes pass the approval gate first (approvals.h):
 * the hub's one store of approvals, whichever cluster the write is for. */
static void cluster_native_authed(struct http_exchange *ex, const struct keys_principal *p,
                                  void *arg)
{
    struct hub *h = arg;
    const char *id = http_param(ex, "id");
    const char *target = http_req(ex)->target;
    const char *rest = strstr(target + strlen("/api/clusters/"), "/v1");
    if (!rest) {
        http_respond_error(ex, 400, "path must be /api/clusters/{id}/v1/...");
        return;
    }
    /* the gate matches the decoded path, as the agent routes it: an escaped
     * '/' cannot make a gated route look like another */
    const char *path = http_req(ex)->path;
    size_t skip = strlen("/api/clusters/") + (id != NULL ? strlen(id) : 0);
    if (strlen(path) < skip || strncmp(path + skip, "/v1", 3) != 0) {
        http_respond_error(ex, 400, "path must be /api/clusters/{id}/v1/...");
        return;
    }
    if (p->kind == KEYS_KIND_SESSION) {
        /* a human's console session is never gated, and its token means
         * nothing to an agent: the agent gets the hub's assertion of the
         * session's principal made for that cluster, and no credential */
        char tok[ASRT_TOKEN_MAX + 1], why[256], msg[160];
        if (auth_sign_for(h->auth, p, id, NULL, tok, sizeof(tok), why, sizeof(why)) != 0) {
            auth_respond_api_error(ex, 500, "INTERNAL", "cannot sign an assertion for '%.64s': %s",
                                   id, why);
            return;
        }
        const struct tun_header extra[] = {
            {"X-AgentBox-Assertion", tok}, {"Authorization", ""}, {"Cookie", ""}, {"X-API-Key", ""},
            {"AGENTBOX-API-KEY", ""},      {"X-CSRF-Token", ""},
        };
        snprintf(msg, sizeof(msg), "cluster '%.64s' is not connected to the hub", id);
        tun_http_proxy(ex, h->tunnel ? tunnel_server_session(h->tunnel, id) : NULL, "native", rest,
                       extra, (int)AB_ARRAY_LEN(extra), msg);
        OPENSSL_cleanse(tok, sizeof(tok));
        return;
    }
    approvals_gate(h->approvals, ex, p, id != NULL ? id : "", path + skip, cluster_native_pass, h);
}

static void h_cluster_native(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    /* the E2B surface reads X-API-Key too, as the agent's native API does */
    auth_request(h->auth, ex, AUTH_SURFACE_E2B, cluster_native_authed, h);
}

int clusters_api_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/api/clusters", api_list, h, 0},
        {"GET", "/api/clusters/{id}", api_get, h, 0},
        {"*", "/api/clusters/{id}/v1/{*rest}", h_cluster_native, h, HTTP_ROUTE_STREAM},
        {"*", "/api/clusters/{id}/v1", h_cluster_native, h, HTTP_ROUTE_STREAM},
        /* writes are buffered: the approval gate fingerprints their body
         * (JSON bodies are at most 1 MiB, DESIGN §11a) */
        {"POST", "/api/clusters/{id}/v1/{*rest}", h_cluster_native, h, 0},
        {"PUT", "/api/clusters/{id}/v1/{*rest}", h_cluster_native, h, 0},
        {"PATCH", "/api/clusters/{id}/v1/{*rest}", h_cluster_native, h, 0},
        {"DELETE", "/api/clusters/{id}/v1/{*rest}", h_cluster_native, h, 0},
        {"POST", "/api/admin/clusters", h_add, h, 0},
        {"POST", "/api/v1/admin/clusters", h_add, h, 0},
    };
    return hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
