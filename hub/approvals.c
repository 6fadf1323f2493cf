/* The approval gate and the /v1/approvals API (approvals.h). Loop thread,
 * except the *_run functions (database workers), which only touch their job. */
#include "hub/approvals.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/json.h"
#include "hub/audit.h"
#include "hub/auth.h"
#include "hub/db.h"
#include "hub/hub.h"

#define TS(col)                                                                                    \
    "coalesce(to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '')"

#define PATH_MAX_LEN 1024
#define SESSION_MAX 128
#define SUMMARY_MAX 384

/* Reference §4.5, row by row. */
static const struct approvals_op OPS[] = {
    {"POST", "/v1/sandboxes", "sandbox.create", "create a sandbox", false, false},
    {"DELETE", "/v1/sandboxes/:sandboxId", "sandbox.delete", "delete a sandbox", true, false},
    {"PUT", "/v1/sandboxes/:sandboxId/timeout", "sandbox.update", "change a sandbox's timeout",
     false, false},
    {"POST", "/v1/sandboxes/:sandboxId/exec", "sandbox.exec", "run a command in a sandbox", false,
     false},
    {"POST", "/v1/envs", "env.create", "create an env", false, false},
    {"PUT", "/v1/envs/:name", "env.update", "update an env", false, false},
    {"PATCH", "/v1/envs/:name", "env.update", "update an env", false, false},
    {"DELETE", "/v1/envs/:name", "env.delete", "delete an env", true, false},
    {"POST", "/v1/envs/:name/sandboxpools", "pool.create", "add a pool to an env", false, false},
    {"PUT", "/v1/envs/:name/sandboxpools/:poolName", "pool.update", "update a pool", false, false},
    {"DELETE", "/v1/envs/:name/sandboxpools/:poolName", "pool.delete", "delete a pool", true,
     false},
    {"PUT", "/v1/envs/:name/autoscaling/groups/:groupName", "autoscaling.update",
     "update a scaling group", false, false},
    {"DELETE", "/v1/envs/:name/autoscaling/groups/:groupName", "autoscaling.delete",
     "delete a scaling group", true, false},
    {"POST", "/v1/api-keys", "apikey.create", "create an api key", true, true},
    {"DELETE", "/v1/api-keys/:name", "apikey.delete", "delete an api key", true, false},
    {"POST", "/v1/sandboxes/:sandboxId/exec-token", "sandbox.execToken",
     "issue a terminal token for a sandbox", true, false},
};

struct approvals {
    struct loop *loop;
    struct db_pool *db;
    struct auth_ctx *auth;
    int64_t ttl_ms, session_grant_ms;
};

int approvals_new(const struct approvals_deps *d, struct approvals **out, char *err, size_t errlen)
{
    struct approvals *a = calloc(1, sizeof(*a));

    *out = NULL;
    if (a == NULL) {
        snprintf(err, errlen, "out of memory creating the approval gate");
        return AB_ENOMEM;
    }
    a->loop = d->loop;
    a->db = d->db;
    a->auth = d->auth;
    a->ttl_ms = d->ttl_ms > 0 ? d->ttl_ms : 15 * 60 * 1000LL;
    a->session_grant_ms = d->session_grant_ms > 0 ? d->session_grant_ms : 2 * 3600 * 1000LL;
    *out = a;
    return 0;
}

void approvals_free(struct approvals *a)
{
    free(a);
}

/* --- matching ------------------------------------------------------------------------ */

/* Next segment of *p (after any '/'), its length in *n; false at the end. */
static bool next_seg(const char **p, const char **s, size_t *n)
{
    while (**p == '/')
        (*p)++;
    if (**p == '\0' || **p == '?')
        return false;
    *s = *p;
    while (**p != '\0' && **p != '/' && **p != '?')
        (*p)++;
    *n = (size_t)(*p - *s);
    return true;
}

static bool match_route(const char *route, const char *path, char *params, size_t cap)
{
    const char *rp = route, *pp = path, *rs, *ps;
    size_t rn, pn, used = 0;

    params[0] = '\0';
    for (;;) {
        bool rm = next_seg(&rp, &rs, &rn), pm = next_seg(&pp, &ps, &pn);
        if (!rm || !pm)
            return rm == pm;
        if (rs[0] == ':') {
            int w = snprintf(params + used, cap - used, "%s%.*s", used ? "/" : "", (int)pn, ps);
            if (w < 0 || (size_t)w >= cap - used)
                return false; /* too long to be one of ours */
            used += (size_t)w;
        } else if (rn != pn || memcmp(rs, ps, rn) != 0) {
            return false;
        }
    }
}

const struct approvals_op *approvals_match(const char *method, const char *path, char *params,
                                           size_t cap)
{
    for (size_t i = 0; i < AB_ARRAY_LEN(OPS); i++)
        if (strcmp(OPS[i].method, method) == 0 && match_route(OPS[i].route, path, params, cap))
            return &OPS[i];
    return NULL;
}

bool approvals_gated(const struct keys_principal *p)
{
    return p->kind == KEYS_KIND_KEY && p->mode == KEYS_MODE_AGENT && p->role != KEYS_ROLE_ADMIN;
}

void approvals_body_sha(const char *body, size_t len, char out[65])
{
    uint8_t h[CRYPTO_SHA256_LEN];

    if (body == NULL || len > APPROVALS_BODY_HASH_MAX)
        len = 0; /* the reference: a body over 1 MiB hashes as empty */
    crypto_sha256(len > 0 ? body : "", len, h);
    crypto_hex_encode(h, sizeof(h), out);
}

void approvals_fingerprint(const char *method, const char *cluster, const char *path,
                           const char *body_sha, char out[65])
{
    char all[PATH_MAX_LEN + 256];

    snprintf(all, sizeof(all), "%s\n%s\n%.*s\n%s", method, cluster, (int)strcspn(path, "?"), path,
             body_sha);
    crypto_sha256_hex(all, out);
}

/* --- JSON of rows ----------------------------------------------------------------------- */

#define APR_COLS                                                                                   \
    "id, operation, summary, once_only, status, coalesce(scope, ''), cluster, method, path, " TS(  \
        "created_at") ", " TS("expires_at") ", " TS("decided_at") ", coalesce(decided_by, "        \
                                                                  "''), " TS("consumed_at") ", "   \
                                                                                            "expi" \
                                                                                            "res_" \
                                                                                            "at "  \
                                                                                            "<= "  \
                                                                                            "now(" \
                                                                                            "), "  \
                                                                                            "key_" \
                                                                                            "id, " \
                                                                                            "sess" \
                                                                                            "ion_" \
                                                                                            "id, " \
                                                                                            "team" \
                                                                                            ", "   \
                                                                                            "user" \
                                                                                            "_nam" \
                                                                                            "e"
enum {
    A_ID,
    A_OP,
    A_SUM,
    A_ONCE,
    A_STATUS,
    A_SCOPE,
    A_CLUSTER,
    A_METHOD,
    A_PATH,
    A_CREATED,
    A_EXPIRES,
    A_DECIDED,
    A_BY,
    A_CONSUMED,
    A_EXPIRED,
    A_KEY,
    A_SESSION,
    A_TEAM,
    A_USER
};

static json_t *str_or_null(const char *s)
{
    return s[0] != '\0' ? json_string(s) : json_null();
}

/* pending requests past their expiry show as "expired" */
static const char *row_status(const PGresult *r, int i)
{
    const char *st = PQgetvalue(r, i, A_STATUS);
    return strcmp(st, "pending") == 0 && PQgetvalue(r, i, A_EXPIRED)[0] == 't' ? "expired" : st;
}

static json_t *approval_json(const PGresult *r, int i)
{
    char poll[64];
    json_t *o = json_object();

    snprintf(poll, sizeof(poll), "/v1/approvals/%s", PQgetvalue(r, i, A_ID));
    json_object_set_new(o, "approvalId", json_string(PQgetvalue(r, i, A_ID)));
    json_object_set_new(o, "operation", json_string(PQgetvalue(r, i, A_OP)));
    json_object_set_new(o, "summary", json_string(PQgetvalue(r, i, A_SUM)));
    json_object_set_new(o, "onceOnly", json_boolean(PQgetvalue(r, i, A_ONCE)[0] == 't'));
    json_object_set_new(o, "status", json_string(row_status(r, i)));
    json_object_set_new(o, "scope", str_or_null(PQgetvalue(r, i, A_SCOPE)));
    json_object_set_new(o, "cluster", str_or_null(PQgetvalue(r, i, A_CLUSTER)));
    json_object_set_new(o, "method", json_string(PQgetvalue(r, i, A_METHOD)));
    json_object_set_new(o, "path", json_string(PQgetvalue(r, i, A_PATH)));
    json_object_set_new(o, "team", json_string(PQgetvalue(r, i, A_TEAM)));
    json_object_set_new(o, "user", json_string(PQgetvalue(r, i, A_USER)));
    json_object_set_new(o, "keyId", str_or_null(PQgetvalue(r, i, A_KEY)));
    json_object_set_new(o, "sessionId", str_or_null(PQgetvalue(r, i, A_SESSION)));
    json_object_set_new(o, "createdAt", json_string(PQgetvalue(r, i, A_CREATED)));
    json_object_set_new(o, "expiresAt", json_string(PQgetvalue(r, i, A_EXPIRES)));
    json_object_set_new(o, "decidedAt", str_or_null(PQgetvalue(r, i, A_DECIDED)));
    json_object_set_new(o, "decidedBy", str_or_null(PQgetvalue(r, i, A_BY)));
    json_object_set_new(o, "consumedAt", str_or_null(PQgetvalue(r, i, A_CONSUMED)));
    json_object_set_new(o, "pollUrl", json_string(poll));
    return o;
}

#define GRANT_COLS                                                                                 \
    "id, scope, operation, key_id, session_id, team, user_name, granted_by, " TS(                  \
        "granted_at") ", " TS("expires_at") ", approval_id"

static json_t *grant_json(const PGresult *r, int i)
{
    return json_pack("{s:s,s:s,s:s,s:o,s:o,s:s,s:s,s:s,s:s,s:o,s:s}", "grantId",
                     PQgetvalue(r, i, 0), "scope", PQgetvalue(r, i, 1), "operation",
                     PQgetvalue(r, i, 2), "keyId", str_or_null(PQgetvalue(r, i, 3)), "sessionId",
                     str_or_null(PQgetvalue(r, i, 4)), "team", PQgetvalue(r, i, 5), "user",
                     PQgetvalue(r, i, 6), "grantedBy", PQgetvalue(r, i, 7), "grantedAt",
                     PQgetvalue(r, i, 8), "expiresAt", str_or_null(PQgetvalue(r, i, 9)),
                     "approvalId", PQgetvalue(r, i, 10));
}

/* --- the gate --------------------------------------------------------------------------- */

enum gate_result { GATE_ALLOW, GATE_CHALLENGE };

struct gate_job {
    struct approvals *a;
    struct http_exchange *ex;
    approvals_pass_fn pass;
    void *arg;
    const struct approvals_op *op;
    char key_id[KEYS_ID_MAX + 1];
    char team[IAM_TEAM_MAX + 1];
    char user[IAM_USER_MAX + 1];
    char session[SESSION_MAX + 1];
    char cluster[64];
    char path[PATH_MAX_LEN + 1];
    char summary[SUMMARY_MAX + 1];
    char fp[65];
    char ttl[24];
    enum gate_result result;
    char why[48]; /* the grant or approval that allowed it */
    char id[APPROVALS_ID_LEN + 1];
    char expires_at[KEYS_TIME_MAX];
    char err[256];
};

static int one_value(PGconn *c, const char *sql, int n, const char *const *v, char *out, size_t cap,
                     char *err, size_t errlen)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, v, NULL, NULL, 0);
    int rc = 0;

    out[0] = '\0';
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        rc = db_fail(c, r, "approval gate", err, errlen);
    else if (PQntuples(r) > 0)
        ab_strlcpy(out, PQgetvalue(r, 0, 0), cap);
    PQclear(r);
    return rc;
}

static int gate_run(PGconn *c, void *arg)
{
    struct gate_job *j = arg;
    const char *v[6] = {j->key_id, j->team, j->user, j->op->op, j->session, j->fp};
    int rc;

    rc = one_value(c,
                   "SELECT id FROM approval_grants WHERE scope = 'key' AND key_id = $1 AND $1 <> "
                   "'' AND team = $2 AND user_name = $3 AND operation = $4 AND revoked_at IS NULL "
                   "LIMIT 1",
                   4, v, j->why, sizeof(j->why), j->err, sizeof(j->err));
    if (rc == 0 && j->why[0] == '\0')
        rc = one_value(c,
                       "SELECT id FROM approval_grants WHERE scope = 'session' AND session_id = "
                       "$5 AND $5 <> '' AND team = $2 AND user_name = $3 AND operation = $4 AND "
                       "revoked_at IS NULL AND expires_at > now() AND $1 = $1 LIMIT 1",
                       5, v, j->why, sizeof(j->why), j->err, sizeof(j->err));
    if (rc == 0 && j->why[0] == '\0') {
        const char *w[3] = {j->fp, j->team, j->user};
        rc = one_value(c,
                       "UPDATE approval_requests SET consumed_at = now() WHERE id = (SELECT id "
                       "FROM approval_requests WHERE fingerprint = $1 AND team = $2 AND "
                       "user_name = $3 AND status = 'approved' AND scope = 'once' AND "
                       "consumed_at IS NULL AND expires_at > now() ORDER BY created_at LIMIT 1 "
                       "FOR UPDATE SKIP LOCKED) RETURNING id",
                       3, w, j->why, sizeof(j->why), j->err, sizeof(j->err));
    }
    if (rc != 0)
        return rc;
    if (j->why[0] != '\0') {
        j->result = GATE_ALLOW;
        return 0;
    }
    j->result = GATE_CHALLENGE;
    /* an identical pending request is reused: retries do not pile up */
    const char *w[3] = {j->fp, j->team, j->user};
    PGresult *r = PQexecParams(c,
                               "SELECT id, " TS("expires_at") " FROM approval_requests WHERE "
                                                              "fingerprint = $1 AND team = $2 AND "
                                                              "user_name = $3 AND status = "
                                                              "'pending' AND expires_at > now() "
                                                              "ORDER BY created_at LIMIT 1",
                               3, NULL, w, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "approval gate", j->err, sizeof(j->err));
        PQclear(r);
        return rc;
    }
    if (PQntuples(r) == 1) {
        ab_strlcpy(j->id, PQgetvalue(r, 0, 0), sizeof(j->id));
        ab_strlcpy(j->expires_at, PQgetvalue(r, 0, 1), sizeof(j->expires_at));
        PQclear(r);
        return 0;
    }
    PQclear(r);
    uint8_t rnd[8];
    if (crypto_random(rnd, sizeof(rnd)) != 0) {
        snprintf(j->err, sizeof(j->err), "no randomness for an approval id");
        return AB_EIO;
    }
    memcpy(j->id, "apr_", 4);
    crypto_hex_encode(rnd, sizeof(rnd), j->id + 4);
    const char *iv[13] = {j->id,     j->fp,      j->team,    j->user,
                          j->key_id, j->session, j->cluster, j->op->method,
                          j->path,   j->op->op,  j->summary, j->op->once_only ? "t" : "f",
                          j->ttl};
    r = PQexecParams(c,
                     "INSERT INTO approval_requests (id, fingerprint, team, user_name, key_id, "
                     "session_id, cluster, method, path, operation, summary, once_only, "
                     "expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, "
                     "now() + $13::bigint * interval '1 millisecond') RETURNING " TS("expires_at"),
                     13, NULL, iv, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        rc = db_fail(c, r, "cannot store the approval request", j->err, sizeof(j->err));
        PQclear(r);
        return rc;
    }
    ab_strlcpy(j->expires_at, PQgetvalue(r, 0, 0), sizeof(j->expires_at));
    PQclear(r);
    return 0;
}

static void gate_done(void *arg, int status)
{
    struct gate_job *j = arg;
    bool allowed = status == 0 && j->result == GATE_ALLOW;

    if (status != 0) {
        auth_respond_db_error(j->a->auth, j->ex, AUTH_SURFACE_API, status, j->err);
    } else if (!allowed) {
        char poll[64], msg[SUMMARY_MAX + 32];
        snprintf(poll, sizeof(poll), "/v1/approvals/%s", j->id);
        snprintf(msg, sizeof(msg), "approval required: %s", j->summary);
        http_respond_json(j->ex, 428,
                          json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:b,s:s,s:s}}", "error", msg,
                                    "errorCode", "APPROVAL_REQUIRED", "detail", "approvalId", j->id,
                                    "operation", j->op->op, "summary", j->summary, "onceOnly",
                                    j->op->once_only, "pollUrl", poll, "expiresAt", j->expires_at));
    }
    j->pass(j->ex, allowed, j->arg);
    free(j);
}

/* The gate for explicit request parts (the hub's own relay and an agent
 * asking for its native API). session: the X-AgentBox-Session-Id value or NULL. */
static void gate_start(struct approvals *a, struct http_exchange *ex,
                       const struct keys_principal *p, const char *cluster, const char *method,
                       const char *path, const char *body_sha, const char *session,
                       approvals_pass_fn pass, void *arg)
{
    char params[512];
    const struct approvals_op *op;
    struct gate_job *j;
    int rc;

    if (!approvals_gated(p) ||
        (op = approvals_match(method, path, params, sizeof(params))) == NULL) {
        pass(ex, true, arg);
        return;
    }
    if (op->forbidden) {
        http_respond_json(
            ex, 403,
            json_pack("{s:s,s:s,s:{s:s,s:s}}", "error",
                      "this credential may not create an api key: issuing a credential would let "
                      "it act without the approval gate. Open the console and do it as yourself.",
                      "errorCode", "FORBIDDEN_FOR_AGENT", "detail", "operation", op->op, "summary",
                      op->summary));
        pass(ex, false, arg);
        return;
    }
    if ((session != NULL && strlen(session) > SESSION_MAX) || strlen(cluster) >= 64 ||
        strcspn(path, "?") > PATH_MAX_LEN) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "header " APPROVALS_SESSION_HEADER
                               " (at most %d characters), the cluster id or the path (at most %d) "
                               "is too long",
                               SESSION_MAX, PATH_MAX_LEN);
        pass(ex, false, arg);
        return;
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "out of memory");
        pass(ex, false, arg);
        return;
    }
    j->a = a;
    j->ex = ex;
    j->pass = pass;
    j->arg = arg;
    j->op = op;
    ab_strlcpy(j->key_id, p->key_id, sizeof(j->key_id));
    ab_strlcpy(j->team, p->team, sizeof(j->team));
    ab_strlcpy(j->user, p->user, sizeof(j->user));
    ab_strlcpy(j->session, session != NULL ? session : "", sizeof(j->session));
    ab_strlcpy(j->cluster, cluster, sizeof(j->cluster));
    snprintf(j->path, sizeof(j->path), "%.*s", (int)strcspn(path, "?"), path);
    if (params[0] != '\0')
        snprintf(j->summary, sizeof(j->summary), "%s (%s)", op->summary, params);
    else
        ab_strlcpy(j->summary, op->summary, sizeof(j->summary));
    snprintf(j->ttl, sizeof(j->ttl), "%lld", (long long)a->ttl_ms);
    approvals_fingerprint(method, cluster, path, body_sha, j->fp);
    rc = db_submit(a->db, gate_run, gate_done, j);
    if (rc != 0) {
        free(j);
        auth_respond_db_error(a->auth, ex, AUTH_SURFACE_API, rc, "");
        pass(ex, false, arg);
    }
}

void approvals_gate(struct approvals *a, struct http_exchange *ex, const struct keys_principal *p,
                    const char *cluster, const char *path, approvals_pass_fn pass, void *arg)
{
    const struct http_request *r = http_req(ex);
    char body_sha[65];

    approvals_body_sha(r->body, r->body != NULL ? r->body_len : 0, body_sha);
    gate_start(a, ex, p, cluster, r->method, path, body_sha,
               http_header_get(r, APPROVALS_SESSION_HEADER), pass, arg);
}

/* --- the agents' question: POST /internal/v1/approvals/gate ------------------------------ */

static void internal_pass(struct http_exchange *ex, bool allowed, void *arg)
{
    (void)arg;
    if (allowed)
        http_respond_json(ex, 200, json_pack("{s:b}", "allowed", 1));
}

/* An agent asks before a gated write on its own native API (reference
 * §4.5: grants are the hub's, not per cluster). Tunnel-only; the principal
 * is the hub's assertion made for the asking cluster (X-AgentBox-Assertion),
 * never a key or its hash. Body {method, path, bodySha256, sessionId?}.
 * 200 {"allowed": true}, or the answer the agent relays to its caller as is:
 * 428 APPROVAL_REQUIRED or 403 FORBIDDEN_FOR_AGENT. */
static void internal_gate(struct http_exchange *ex, void *arg)
{
    struct approvals *a = arg;
    const struct http_request *r = http_req(ex);
    const char *cluster = r->transport_data != NULL ? (const char *)r->transport_data : "";
    const char *tok = http_header_get(r, "X-AgentBox-Assertion");
    const char *method = NULL, *path = NULL, *sha = NULL, *sid = NULL;
    struct keys_principal p;
    char err[256];
    json_t *body;

    if (tok == NULL || tok[0] == '\0') {
        auth_respond_api_error(ex, 401, "UNAUTHENTICATED",
                               "missing X-AgentBox-Assertion: send the hub's assertion of the "
                               "caller made for this cluster");
        return;
    }
    if (auth_verify_from(a->auth, cluster, tok, &p, NULL, err, sizeof(err)) != 0) {
        auth_respond_api_error(ex, 401, "UNAUTHENTICATED", "invalid assertion: %s", err);
        return;
    }
    body = json_parse_object(r->body, r->body_len, 8192, err, sizeof(err));
    if (body == NULL || json_get_str(body, "method", true, 15, &method, err, sizeof(err)) != 0 ||
        json_get_str(body, "path", true, PATH_MAX_LEN, &path, err, sizeof(err)) != 0 ||
        json_get_str(body, "bodySha256", true, 64, &sha, err, sizeof(err)) != 0 ||
        json_get_str(body, "sessionId", false, SESSION_MAX, &sid, err, sizeof(err)) != 0) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "%s", err);
        json_decref(body);
        return;
    }
    if (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "field 'bodySha256' must be 64 lowercase hex characters");
    } else {
        gate_start(a, ex, &p, cluster, method, path, sha, sid, internal_pass, NULL);
    }
    json_decref(body);
}

int approvals_add_internal_routes(struct hub *h, struct approvals *a, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"POST", "/internal/v1/approvals/gate", internal_gate, a, 0},
    };
    return hub_add_internal_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}

/* --- the API ---------------------------------------------------------------------------- */

enum api_kind { API_LIST, API_GET, API_DECIDE, API_REVOKE };

struct api_job {
    struct approvals *a;
    struct http_exchange *ex;
    enum api_kind kind;
    struct keys_principal p;
    char id[80];
    char decision[16], scope[16];
    char session_ms[24];
    int status; /* HTTP */
    char msg[256];
    json_t *out;
    char err[256];
};

/* owner filter: $2 team, $3 user, $4 "t" for admins (every owner) */
#define OWNER "((team = $2 AND user_name = $3) OR $4 = 't')"

static int api_list_run(PGconn *c, struct api_job *j, const char *const *v)
{
    PGresult *r = PQexecParams(c,
                               "SELECT " APR_COLS " FROM approval_requests WHERE status = "
                               "'pending' AND expires_at > now() AND " OWNER " AND $1 = $1 "
                               "ORDER BY created_at LIMIT 500",
                               4, NULL, v, NULL, NULL, 0);
    json_t *pending = json_array(), *grants = json_array();
    int i, rc = 0;

    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        rc = db_fail(c, r, "cannot list approvals", j->err, sizeof(j->err));
    for (i = 0; rc == 0 && i < PQntuples(r); i++)
        json_array_append_new(pending, approval_json(r, i));
    PQclear(r);
    if (rc == 0) {
        r = PQexecParams(c,
                         "SELECT " GRANT_COLS " FROM approval_grants WHERE revoked_at IS NULL AND "
                         "(expires_at IS NULL OR expires_at > now()) AND " OWNER
                         " AND $1 = $1 ORDER BY granted_at LIMIT 500",
                         4, NULL, v, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            rc = db_fail(c, r, "cannot list grants", j->err, sizeof(j->err));
        for (i = 0; rc == 0 && i < PQntuples(r); i++)
            json_array_append_new(grants, grant_json(r, i));
        PQclear(r);
    }
    j->status = 200;
    j->out = json_pack("{s:o,s:o}", "pending", pending, "grants", grants);
    return rc;
}

static int select_approval(PGconn *c, struct api_job *j, const char *const *v, bool lock,
                           PGresult **out)
{
    PGresult *r = PQexecParams(c,
                               lock ? "SELECT " APR_COLS " FROM approval_requests WHERE id = $1 "
                                      "AND " OWNER " FOR UPDATE"
                                    : "SELECT " APR_COLS " FROM approval_requests WHERE id = $1 "
                                      "AND " OWNER,
                               4, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        int rc = db_fail(c, r, "cannot read the approval request", j->err, sizeof(j->err));
        PQclear(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* base64url without padding of s into out */
static void b64url(const char *s, char *out, size_t cap)
{
    char tmp[256];
    size_t n = strlen(s), k = 0;

    if (n > 180)
        n = 180;
    crypto_base64_encode(s, n, tmp);
    for (size_t i = 0; tmp[i] != '\0' && tmp[i] != '=' && k + 1 < cap; i++)
        out[k++] = tmp[i] == '+' ? '-' : tmp[i] == '/' ? '_' : tmp[i];
    out[k] = '\0';
}

static int api_decide_run(PGconn *c, struct api_job *j, const char *const *v)
{
    PGresult *r = NULL;
    int rc;
    char by[96], gid[160] = "", kop[128];
    bool approve = strcmp(j->decision, "approve") == 0;

    rc = db_exec(c, "BEGIN", j->err, sizeof(j->err));
    if (rc == 0)
        rc = select_approval(c, j, v, true, &r);
    if (rc != 0)
        return db_finish_tx(c, rc, j->err, sizeof(j->err));
    if (PQntuples(r) != 1) {
        j->status = 404;
        snprintf(j->msg, sizeof(j->msg), "approval request not found");
    } else if (strcmp(PQgetvalue(r, 0, A_STATUS), "pending") != 0) {
        j->status = 400;
        snprintf(j->msg, sizeof(j->msg), "approval request is already %s",
                 PQgetvalue(r, 0, A_STATUS));
    } else if (PQgetvalue(r, 0, A_EXPIRED)[0] == 't') {
        j->status = 400;
        snprintf(j->msg, sizeof(j->msg),
                 "approval request expired at %s: the agent retries its call for a new one",
                 PQgetvalue(r, 0, A_EXPIRES));
    } else if (approve && PQgetvalue(r, 0, A_ONCE)[0] == 't' && strcmp(j->scope, "once") != 0) {
        j->status = 400;
        snprintf(j->msg, sizeof(j->msg), "this operation can only be approved one call at a time");
    } else if (approve && strcmp(j->scope, "session") == 0 &&
               PQgetvalue(r, 0, A_SESSION)[0] == '\0') {
        j->status = 400;
        snprintf(j->msg, sizeof(j->msg),
                 "scope 'session' needs a request that sent " APPROVALS_SESSION_HEADER
                 "; approve it once or for the key");
    } else if (approve && strcmp(j->scope, "key") == 0 && PQgetvalue(r, 0, A_KEY)[0] == '\0') {
        j->status = 400;
        snprintf(j->msg, sizeof(j->msg), "scope 'key' needs a request made with an api key");
    }
    if (j->status != 0) {
        PQclear(r);
        return db_finish_tx(c, AB_EINVAL, j->err, sizeof(j->err)) == AB_EINVAL ? 0 : AB_EIO;
    }
    snprintf(by, sizeof(by), "console:%s", j->p.user);
    const char *op = PQgetvalue(r, 0, A_OP);
    const char *uv[4] = {j->id, approve ? "approved" : "denied", approve ? j->scope : "", by};
    PGresult *u = PQexecParams(c,
                               "UPDATE approval_requests SET status = $2, scope = NULLIF($3, ''), "
                               "decided_at = now(), decided_by = $4 WHERE id = $1",
                               4, NULL, uv, NULL, NULL, 0);
    if (PQresultStatus(u) != PGRES_COMMAND_OK)
        rc = db_fail(c, u, "cannot record the decision", j->err, sizeof(j->err));
    PQclear(u);
    if (rc == 0 && approve && strcmp(j->scope, "once") != 0) {
        bool key = strcmp(j->scope, "key") == 0;
        if (key) {
            snprintf(kop, sizeof(kop), "%s\n%s", PQgetvalue(r, 0, A_KEY), op);
            memcpy(gid, "grk_", 4);
            b64url(kop, gid + 4, sizeof(gid) - 4);
        } else {
            uint8_t rnd[8];
            if (crypto_random(rnd, sizeof(rnd)) != 0)
                rc = AB_EIO;
            memcpy(gid, "grn_", 4);
            crypto_hex_encode(rnd, sizeof(rnd), gid + 4);
        }
        const char *gv[10] = {gid,
                              j->scope,
                              PQgetvalue(r, 0, A_TEAM),
                              PQgetvalue(r, 0, A_USER),
                              PQgetvalue(r, 0, A_KEY),
                              key ? "" : PQgetvalue(r, 0, A_SESSION),
                              op,
                              j->id,
                              by,
                              key ? "" : j->session_ms};
        u = PQexecParams(
            c,
            "INSERT INTO approval_grants (id, scope, team, user_name, key_id, "
            "session_id, operation, approval_id, granted_by, expires_at) VALUES ($1, "
            "$2, $3, $4, $5, $6, $7, $8, $9, CASE WHEN $10 = '' THEN NULL ELSE now() "
            "+ $10::bigint * interval '1 millisecond' END) ON CONFLICT (id) DO UPDATE "
            "SET revoked_at = NULL, granted_at = now(), granted_by = EXCLUDED.granted_by, "
            "approval_id = EXCLUDED.approval_id",
            10, NULL, gv, NULL, NULL, 0);
        if (rc == 0 && PQresultStatus(u) != PGRES_COMMAND_OK)
            rc = db_fail(c, u, "cannot store the grant", j->err, sizeof(j->err));
        PQclear(u);
    }
    if (rc == 0) {
        json_t *details = json_pack("{s:s,s:s,s:s}", "decision", j->decision, "scope",
                                    approve ? j->scope : "", "operation", op);
        struct audit_entry e = {.actor = by,
                                .action = "approval.decide",
                                .target = j->id,
                                .namespace = j->p.namespace,
                                .details = details};
        rc = audit_write_conn(c, &e, j->err, sizeof(j->err));
        json_decref(details);
    }
    PQclear(r);
    rc = db_finish_tx(c, rc, j->err, sizeof(j->err));
    if (rc != 0)
        return rc;
    rc = select_approval(c, j, v, false, &r);
    if (rc != 0)
        return rc;
    j->status = 200;
    j->out = json_object();
    if (PQntuples(r) == 1)
        json_object_set_new(j->out, "approval", approval_json(r, 0));
    PQclear(r);
    if (gid[0] != '\0') {
        const char *gv[1] = {gid};
        r = PQexecParams(c, "SELECT " GRANT_COLS " FROM approval_grants WHERE id = $1", 1, NULL, gv,
                         NULL, NULL, 0);
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
            json_object_set_new(j->out, "grant", grant_json(r, 0));
        PQclear(r);
    }
    return 0;
}

static int api_run(PGconn *c, void *arg)
{
    struct api_job *j = arg;
    const char *v[4] = {j->id, j->p.team, j->p.user, j->p.role == KEYS_ROLE_ADMIN ? "t" : "f"};
    PGresult *r = NULL;
    int rc;

    switch (j->kind) {
    case API_LIST:
        return api_list_run(c, j, v);
    case API_GET:
        rc = select_approval(c, j, v, false, &r);
        if (rc != 0)
            return rc;
        if (PQntuples(r) == 1) {
            j->status = 200;
            j->out = approval_json(r, 0);
        } else {
            j->status = 404;
            snprintf(j->msg, sizeof(j->msg), "approval request not found");
        }
        PQclear(r);
        return 0;
    case API_DECIDE:
        return api_decide_run(c, j, v);
    case API_REVOKE:
        r = PQexecParams(c,
                         "UPDATE approval_grants SET revoked_at = now() WHERE id = $1 AND "
                         "revoked_at IS NULL AND " OWNER,
                         4, NULL, v, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            rc = db_fail(c, r, "cannot revoke the grant", j->err, sizeof(j->err));
            PQclear(r);
            return rc;
        }
        j->status = atoi(PQcmdTuples(r)) > 0 ? 204 : 404;
        if (j->status == 404)
            snprintf(j->msg, sizeof(j->msg), "grant not found");
        PQclear(r);
        return 0;
    }
    return AB_EINVAL;
}

static void api_done(void *arg, int status)
{
    struct api_job *j = arg;

    if (status != 0)
        auth_respond_db_error(j->a->auth, j->ex, AUTH_SURFACE_API, status, j->err);
    else if (j->status == 204)
        http_respond(j->ex, 204, NULL, NULL, 0, NULL, 0);
    else if (j->out != NULL)
        http_respond_json(j->ex, j->status, j->out), j->out = NULL;
    else
        auth_respond_api_error(j->ex, j->status,
                               j->status == 404 ? "NOT_FOUND" : "INVALID_ARGUMENT", "%s", j->msg);
    json_decref(j->out);
    free(j);
}

static void api_submit(struct approvals *a, struct http_exchange *ex,
                       const struct keys_principal *p, enum api_kind kind, const char *id,
                       const char *decision, const char *scope)
{
    struct api_job *j = calloc(1, sizeof(*j));
    int rc;

    if (j == NULL) {
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "out of memory");
        return;
    }
    j->a = a;
    j->ex = ex;
    j->kind = kind;
    j->p = *p;
    ab_strlcpy(j->id, id != NULL ? id : "", sizeof(j->id));
    ab_strlcpy(j->decision, decision != NULL ? decision : "", sizeof(j->decision));
    ab_strlcpy(j->scope, scope != NULL ? scope : "once", sizeof(j->scope));
    snprintf(j->session_ms, sizeof(j->session_ms), "%lld", (long long)a->session_grant_ms);
    rc = db_submit(a->db, api_run, api_done, j);
    if (rc != 0) {
        free(j);
        auth_respond_db_error(a->auth, ex, AUTH_SURFACE_API, rc, "");
    }
}

void approvals_list(struct approvals *a, struct http_exchange *ex, const struct keys_principal *p)
{
    api_submit(a, ex, p, API_LIST, "", NULL, NULL);
}

void approvals_get(struct approvals *a, struct http_exchange *ex, const struct keys_principal *p,
                   const char *id)
{
    api_submit(a, ex, p, API_GET, id, NULL, NULL);
}

void approvals_decide(struct approvals *a, struct http_exchange *ex, const struct keys_principal *p,
                      const char *id)
{
    const struct http_request *r = http_req(ex);
    const char *decision = NULL, *scope = NULL;
    char err[256];
    json_t *body;

    if (p->kind != KEYS_KIND_SESSION) {
        auth_respond_api_error(ex, 403,
                               p->mode == KEYS_MODE_AGENT ? "FORBIDDEN_FOR_AGENT" : "FORBIDDEN",
                               "approvals can only be decided from the console: the credential "
                               "that made the request cannot approve it");
        return;
    }
    body = json_parse_object(r->body, r->body_len, 4096, err, sizeof(err));
    if (body == NULL ||
        json_get_str(body, "decision", true, 15, &decision, err, sizeof(err)) != 0 ||
        json_get_str(body, "scope", false, 15, &scope, err, sizeof(err)) != 0) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "%s", err);
        json_decref(body);
        return;
    }
    if (strcmp(decision, "approve") != 0 && strcmp(decision, "deny") != 0) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "field 'decision' must be approve or deny, not '%.15s'", decision);
    } else if (scope != NULL && strcmp(scope, "once") != 0 && strcmp(scope, "session") != 0 &&
               strcmp(scope, "key") != 0) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "field 'scope' must be once, session or key, not '%.15s'", scope);
    } else {
        api_submit(a, ex, p, API_DECIDE, id, decision, scope);
    }
    json_decref(body);
}

void approvals_revoke_grant(struct approvals *a, struct http_exchange *ex,
                            const struct keys_principal *p, const char *gid)
{
    if (p->kind != KEYS_KIND_SESSION) {
        auth_respond_api_error(ex, 404, "NOT_FOUND", "grant not found");
        return;
    }
    api_submit(a, ex, p, API_REVOKE, gid, NULL, NULL);
}
