/* E2B /secrets served by the hub at /e2b/secrets, the tunnel-only resolve
 * route and vault_resolve() for the tunnel code. Loop thread; storage on
 * database workers (vault.c). Values come in, never go out, except through
 * resolve.
 *
 * The resolve route answers claims, not clusters (DESIGN §11): a cluster
 * names a sandbox and presents the principal's assertion made for it; the
 * hub answers only when its sandboxes row says that sandbox was claimed on
 * the asking cluster by that principal and has not ended, and only for the
 * secret names the claim recorded (metadata CLAIM_NAMES_KEY: the names the
 * create's rules referenced). Every resolve, answered or refused, is an
 * audit_log row (actor cluster, principal, sandbox, names; never values),
 * and each cluster is rate-limited. */
#include "hub/vault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/sbxid.h"
#include "hub/audit.h"
#include "hub/auth.h"
#include "hub/db.h"
#include "hub/hub.h"
#include "hub/keys.h"
#include "hub/vault_api.h"

enum vop_kind {
    VOP_LIST,
    VOP_GET,
    VOP_CREATE,
    VOP_UPDATE,
    VOP_DELETE,
    VOP_RESOLVE,
    VOP_CLAIM_RESOLVE, /* the tunnel route: checked against the claim first */
};

/* The sandboxes.metadata member listing the secret names a claim may resolve. */
#define CLAIM_NAMES_KEY "agentbox.scitix.ai/secret-names"
/* Per-cluster token bucket of the resolve route. */
#define RESOLVE_RATE_PER_S 20
#define RESOLVE_BURST 40
#define RESOLVE_BUCKETS 256

struct vault_op {
    struct auth_ctx *a;
    struct http_exchange *ex; /* NULL for vault_resolve() */
    enum vop_kind kind;
    char ns[IAM_NAMESPACE_MAX + 1];
    char user[IAM_USER_MAX + 1];
    char actor[KEYS_ID_MAX + 8];
    char name[VAULT_NAME_MAX + 1];
    char *value; /* owned, wiped */
    size_t len;
    json_t *metadata; /* owned */
    int64_t offset, limit;
    /* resolve */
    char names[VAULT_RESOLVE_MAX][VAULT_NAME_MAX + 1];
    size_t nnames;
    struct vault_value values[VAULT_RESOLVE_MAX];
    vault_resolve_fn cb;
    void *cb_arg;
    /* claim-checked resolve: who asks, for which sandbox */
    char cluster[AB_CLUSTER_ID_BUF];
    char sandbox[SBXID_MAX + 1];
    char team[IAM_TEAM_MAX + 1];
    char key_id[KEYS_ID_MAX + 1];
    char rid[ASRT_RID_MAX + 1];
    bool denied; /* the claim check refused: err says why */
    /* results */
    json_t *out;
    bool more;
    char err[512];
};

static void vop_free(struct vault_op *o)
{
    if (o->value != NULL) {
        OPENSSL_cleanse(o->value, o->len);
        free(o->value);
    }
    vault_values_free(o->values, o->nnames);
    json_decref(o->metadata);
    json_decref(o->out);
    free(o);
}

/* The audit row of a claim-checked resolve (same connection as the check). */
static int claim_audit(PGconn *c, struct vault_op *o, const char *outcome)
{
    char who[IAM_TEAM_MAX + IAM_USER_MAX + 2], actor[AB_CLUSTER_ID_BUF + 8], aerr[256];
    json_t *names = json_array(), *d;
    size_t i;
    int rc;

    for (i = 0; i < o->nnames; i++)
        json_array_append_new(names, json_string(o->names[i]));
    snprintf(who, sizeof(who), "%s/%s", o->team, o->user);
    snprintf(actor, sizeof(actor), "cluster:%s", o->cluster);
    d = json_pack("{s:s,s:s,s:s,s:o,s:s}", "principal", who, "keyId", o->key_id, "requestId",
                  o->rid, "names", names, "reason", o->denied ? o->err : "");
    const struct audit_entry e = {actor,      "vault.resolve", o->sandbox, o->ns,
                                  o->cluster, outcome,         d};
    rc = audit_write_conn(c, &e, aerr, sizeof(aerr));
    json_decref(d);
    if (rc != 0)
        ab_strlcpy(o->err, aerr, sizeof(o->err));
    return rc;
}

/* In one transaction: the claim check, the audit row, then the values. */
static int claim_resolve_job(PGconn *c, struct vault_op *o)
{
    const struct vault_keyring *kr = auth_keyring(o->a);
    struct vault_scope s = {o->ns, o->user};
    const char *names[VAULT_RESOLVE_MAX];
    const char *vals[5] = {o->sandbox, o->cluster, o->ns, o->user, o->team};
    json_t *allowed = NULL;
    PGresult *r;
    size_t i;
    int rc;

    r = PQexec(c, "BEGIN");
    PQclear(r);
    r = PQexecParams(c,
                     "SELECT COALESCE(metadata -> '" CLAIM_NAMES_KEY "', '[]'::jsonb)::text "
                     "FROM sandboxes WHERE id = $1 AND cluster_id = $2 AND namespace = $3 AND "
                     "user_name = $4 AND team = $5 AND state IN ('claimed', 'running', 'paused')",
                     5, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        db_error_line(c, r, o->err, sizeof(o->err));
        PQclear(r);
        PQclear(PQexec(c, "ROLLBACK"));
        return AB_EIO;
    }
    if (PQntuples(r) != 1) {
        o->denied = true;
        snprintf(o->err, sizeof(o->err),
                 "no live claim of sandbox '%s' on cluster '%s' by this principal: the vault "
                 "answers only for sandboxes the hub saw claimed there",
                 o->sandbox, o->cluster);
    } else {
        allowed = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
        for (i = 0; i < o->nnames && !o->denied; i++) {
            size_t k;
            json_t *v;
            bool ok = false;
            json_array_foreach(allowed, k, v)
            {
                const char *n = json_string_value(v);
                char norm[VAULT_NAME_MAX + 1], nerr[64];
                if (n && vault_name_normalize(n, norm, nerr, sizeof(nerr)) == 0 &&
                    strcmp(norm, o->names[i]) == 0)
                    ok = true;
            }
            if (!ok) {
                o->denied = true;
                snprintf(o->err, sizeof(o->err),
                         "secret '%s' is not referenced by the claim of sandbox '%s'", o->names[i],
                         o->sandbox);
            }
        }
        json_decref(allowed);
    }
    PQclear(r);
    rc = claim_audit(c, o, o->denied ? "denied" : "ok");
    if (rc == 0 && !o->denied) {
        for (i = 0; i < o->nnames; i++)
            names[i] = o->names[i];
        rc = vault_resolve_conn(c, kr, &s, names, o->nnames, o->values, o->err, sizeof(o->err));
    }
    PQclear(PQexec(c, rc == 0 ? "COMMIT" : "ROLLBACK"));
    if (rc == 0 && o->denied)
        return AB_EDENIED;
    return rc;
}

static int vop_job(PGconn *c, void *arg)
{
    struct vault_op *o = arg;
    const struct vault_keyring *kr = auth_keyring(o->a);
    struct vault_scope s = {o->ns, o->user};
    struct vault_write w = {s, o->name, o->value, o->len, o->metadata, o->actor};
    const char *names[VAULT_RESOLVE_MAX];
    size_t i;

    switch (o->kind) {
    case VOP_LIST:
        return vault_list_conn(c, &s, o->offset, o->limit, &o->out, &o->more, o->err,
                               sizeof(o->err));
    case VOP_GET:
        return vault_get_conn(c, &s, o->name, &o->out, o->err, sizeof(o->err));
    case VOP_CREATE:
        return vault_create_conn(c, kr, &w, &o->out, o->err, sizeof(o->err));
    case VOP_UPDATE:
        return vault_update_conn(c, kr, &w, &o->out, o->err, sizeof(o->err));
    case VOP_DELETE:
        return vault_delete_conn(c, &s, o->name, o->actor, o->err, sizeof(o->err));
    case VOP_RESOLVE:
        for (i = 0; i < o->nnames; i++)
            names[i] = o->names[i];
        return vault_resolve_conn(c, kr, &s, names, o->nnames, o->values, o->err, sizeof(o->err));
    case VOP_CLAIM_RESOLVE:
        return claim_resolve_job(c, o);
    }
    return AB_EINVAL;
}

static void respond_list(struct vault_op *o)
{
    char num[24], tok[48];
    struct http_header h[1];
    char *body = json_dumps(o->out, JSON_COMPACT);
    int n = 0;

    if (o->more) {
        snprintf(num, sizeof(num), "%lld", (long long)(o->offset + o->limit));
        crypto_base64_encode(num, strlen(num), tok);
        h[0].name = "X-Next-Token";
        h[0].value = tok;
        n = 1;
    }
    if (body == NULL) {
        http_respond_error(o->ex, 503, "out of memory");
        return;
    }
    http_respond(o->ex, 200, "application/json", body, strlen(body), h, n);
    free(body);
}

static void vop_done(void *arg, int status)
{
    struct vault_op *o = arg;

    if (o->kind == VOP_CLAIM_RESOLVE && status != 0) {
        if (o->denied) {
            LOG_WARN("vault resolve refused", "cluster", o->cluster, "sandbox", o->sandbox,
                     "request_id", o->rid);
            http_respond_error(o->ex, 403, "%s", o->err);
        } else if (status == AB_EDENIED) {
            http_respond_error(o->ex, 500, "%s", o->err);
        } else {
            auth_respond_db_error(o->a, o->ex, AUTH_SURFACE_E2B, status, o->err);
        }
    } else if (o->kind == VOP_RESOLVE && o->ex == NULL) {
        o->cb(o->cb_arg, status, status == 0 ? o->values : NULL, status == 0 ? o->nnames : 0,
              status != 0 ? o->err : NULL);
    } else if (status == AB_ENOENT) {
        http_respond_error(o->ex, 404, "%s", o->err);
    } else if (status == AB_EEXIST) {
        http_respond_error(o->ex, 409, "%s", o->err);
    } else if (status == AB_EINVAL || status == AB_ELIMIT) {
        http_respond_error(o->ex, 400, "%s", o->err);
    } else if (status == AB_EDENIED) {
        http_respond_error(o->ex, 500, "%s", o->err);
    } else if (status != 0) {
        auth_respond_db_error(o->a, o->ex, AUTH_SURFACE_E2B, status, o->err);
    } else if (o->kind == VOP_LIST) {
        respond_list(o);
    } else if (o->kind == VOP_DELETE) {
        http_respond(o->ex, 204, NULL, NULL, 0, NULL, 0);
    } else if (o->kind == VOP_RESOLVE || o->kind == VOP_CLAIM_RESOLVE) {
        json_t *arr = json_array();
        size_t i;
        for (i = 0; i < o->nnames; i++) {
            const struct vault_value *v = &o->values[i];
            json_array_append_new(arr, v->found
                                           ? json_pack("{s:s,s:b,s:i,s:s%}", "name", v->name,
                                                       "found", 1, "version", v->version, "value",
                                                       (const char *)v->value, v->len)
                                           : json_pack("{s:s,s:b}", "name", v->name, "found", 0));
        }
        http_respond_json(o->ex, 200, json_pack("{s:o}", "secrets", arr));
    } else {
        http_respond_json(o->ex, o->kind == VOP_CREATE ? 201 : 200, json_incref(o->out));
    }
    vop_free(o);
}

static void vop_submit(struct vault_op *o)
{
    int rc = db_submit(auth_db(o->a), vop_job, vop_done, o);

    if (rc != 0) {
        if (o->ex != NULL)
            auth_respond_db_error(o->a, o->ex, AUTH_SURFACE_E2B, rc, NULL);
        vop_free(o);
    }
}

static struct vault_op *vop_new(struct auth_ctx *a, struct http_exchange *ex,
                                const struct keys_principal *p, enum vop_kind kind)
{
    struct vault_op *o = calloc(1, sizeof(*o));

    if (o == NULL) {
        http_respond_error(ex, 503, "out of memory");
        return NULL;
    }
    o->a = a;
    o->ex = ex;
    o->kind = kind;
    ab_strlcpy(o->ns, p->namespace, sizeof(o->ns));
    ab_strlcpy(o->user, p->user, sizeof(o->user));
    snprintf(o->actor, sizeof(o->actor), "key:%s", p->key_id);
    return o;
}

/* Copies body fields value (required) and metadata (optional) into o. */
static int take_value(struct vault_op *o, json_t *b, char *err, size_t errlen)
{
    json_t *v = json_object_get(b, "value"), *md = json_object_get(b, "metadata");
    int rc;

    if (v == NULL || json_is_null(v)) {
        snprintf(err, errlen, "field 'value' is required");
        return AB_EINVAL;
    }
    if (!json_is_string(v)) {
        snprintf(err, errlen, "field 'value' must be a string");
        return AB_EINVAL;
    }
    rc = vault_value_check(json_string_length(v), err, errlen);
    if (rc != 0)
        return rc;
    if (md != NULL && !json_is_null(md)) {
        rc = vault_metadata_check(md, err, errlen);
        if (rc != 0)
            return rc;
        o->metadata = json_incref(md);
    }
    o->len = json_string_length(v);
    o->value = malloc(o->len + 1);
    if (o->value == NULL) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    memcpy(o->value, json_string_value(v), o->len + 1);
    return 0;
}

/* Wipes the parsed body's copy of the value before it is freed. */
static void body_free(json_t *b)
{
    json_t *v = b != NULL ? json_object_get(b, "value") : NULL;

    if (v != NULL && json_is_string(v) && json_string_length(v) > 0)
        OPENSSL_cleanse((char *)json_string_value(v), json_string_length(v));
    json_decref(b);
}

/* --- handlers ---------------------------------------------------------------------------- */

static void list_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    const struct http_request *r = http_req(ex);
    char buf[64], num[48];
    uint8_t dec[48];
    size_t n = 0;
    struct vault_op *o;
    char *end = NULL;
    int rc;

    o = vop_new(arg, ex, p, VOP_LIST);
    if (o == NULL)
        return;
    o->limit = VAULT_LIST_DEFAULT;
    rc = http_query_get(r, "limit", buf, sizeof(buf));
    if (rc == 0 && buf[0] != '\0') {
        long long l = strtoll(buf, &end, 10);
        if (end == NULL || *end != '\0' || l < 1 || l > VAULT_LIST_MAX) {
            http_respond_error(ex, 400, "limit must be an integer between 1 and %d",
                               VAULT_LIST_MAX);
            vop_free(o);
            return;
        }
        o->limit = l;
    } else if (rc == AB_ELIMIT) {
        http_respond_error(ex, 400, "limit must be an integer between 1 and %d", VAULT_LIST_MAX);
        vop_free(o);
        return;
    }
    rc = http_query_get(r, "nextToken", buf, sizeof(buf));
    if (rc == AB_ELIMIT ||
        (rc == 0 && buf[0] != '\0' &&
         (crypto_base64_decode(buf, strlen(buf), dec, sizeof(dec) - 1, &n) != 0 || n == 0))) {
        http_respond_error(ex, 400,
                           "nextToken is not valid: pass the X-Next-Token header of the previous "
                           "page");
        vop_free(o);
        return;
    }
    if (rc == 0 && buf[0] != '\0') {
        memcpy(num, dec, n);
        num[n] = '\0';
        end = NULL;
        o->offset = strtoll(num, &end, 10);
        if (end == NULL || *end != '\0' || o->offset < 0) {
            http_respond_error(ex, 400,
                               "nextToken is not valid: pass the X-Next-Token header of the "
                               "previous page");
            vop_free(o);
            return;
        }
    }
    vop_submit(o);
}

static void create_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    const struct http_request *r = http_req(ex);
    const char *name = NULL;
    struct vault_op *o;
    char err[512];
    json_t *b;
    int rc;

    b = json_parse_object(r->body, r->body_len, 0, err, sizeof(err));
    if (b == NULL) {
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    o = vop_new(arg, ex, p, VOP_CREATE);
    if (o == NULL) {
        body_free(b);
        return;
    }
    rc = json_get_str(b, "name", true, 1024, &name, err, sizeof(err));
    if (rc == 0)
        rc = vault_name_normalize(name, o->name, err, sizeof(err));
    if (rc == 0)
        rc = take_value(o, b, err, sizeof(err));
    body_free(b);
    if (rc != 0) {
        http_respond_error(ex, rc == AB_ENOMEM ? 503 : 400, "%s", err);
        vop_free(o);
        return;
    }
    vop_submit(o);
}

/* get, update, delete: the {id} of the path is a name or sec_<name>. */
static void by_id_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg,
                     enum vop_kind kind)
{
    const struct http_request *r = http_req(ex);
    struct vault_op *o;
    char err[512];
    json_t *b = NULL;
    int rc;

    o = vop_new(arg, ex, p, kind);
    if (o == NULL)
        return;
    rc = vault_name_normalize(http_param(ex, "id"), o->name, err, sizeof(err));
    if (rc == 0 && kind == VOP_UPDATE) {
        b = json_parse_object(r->body, r->body_len, 0, err, sizeof(err));
        rc = b != NULL ? take_value(o, b, err, sizeof(err)) : AB_EINVAL;
        body_free(b);
    }
    if (rc != 0) {
        http_respond_error(ex, rc == AB_ENOMEM ? 503 : 400, "%s", err);
        vop_free(o);
        return;
    }
    vop_submit(o);
}

static void get_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    by_id_ok(ex, p, arg, VOP_GET);
}

static void update_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    by_id_ok(ex, p, arg, VOP_UPDATE);
}

static void delete_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    by_id_ok(ex, p, arg, VOP_DELETE);
}

static void h_list(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_E2B, list_ok, arg);
}

static void h_create(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_E2B, create_ok, arg);
}

static void h_get(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_E2B, get_ok, arg);
}

static void h_update(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_E2B, update_ok, arg);
}

static void h_delete(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_E2B, delete_ok, arg);
}

/* --- resolve ------------------------------------------------------------------------------ */

/* Fills o's names from an array of strings; message names the problem. */
static int take_names(struct vault_op *o, const char *const *names, size_t n, char *err,
                      size_t errlen)
{
    size_t i;
    int rc;

    if (n == 0 || n > VAULT_RESOLVE_MAX) {
        snprintf(err, errlen, "names must list 1 to %d secret names, got %zu", VAULT_RESOLVE_MAX,
                 n);
        return AB_EINVAL;
    }
    for (i = 0; i < n; i++) {
        rc = vault_name_normalize(names[i], o->names[i], err, errlen);
        if (rc != 0)
            return rc;
    }
    o->nnames = n;
    return 0;
}

int vault_resolve(struct auth_ctx *a, const char *ns, const char *user, const char *const *names,
                  size_t n, vault_resolve_fn cb, void *arg, char *err, size_t errlen)
{
    struct vault_op *o = calloc(1, sizeof(*o));
    int rc;

    if (o == NULL)
        return AB_ENOMEM;
    o->a = a;
    o->kind = VOP_RESOLVE;
    o->cb = cb;
    o->cb_arg = arg;
    if (ns == NULL || ns[0] == '\0' || strlen(ns) > IAM_NAMESPACE_MAX || user == NULL ||
        strlen(user) > IAM_USER_MAX) {
        snprintf(err, errlen, "namespace (1-%d characters) and user (at most %d) are required",
                 IAM_NAMESPACE_MAX, IAM_USER_MAX);
        free(o);
        return AB_EINVAL;
    }
    ab_strlcpy(o->ns, ns, sizeof(o->ns));
    ab_strlcpy(o->user, user, sizeof(o->user));
    rc = take_names(o, names, n, err, errlen);
    if (rc == 0) {
        rc = db_submit(auth_db(a), vop_job, vop_done, o);
        if (rc != 0)
            snprintf(err, errlen, "database unavailable: %s", ab_strerror(rc));
    }
    if (rc != 0)
        free(o);
    return rc;
}

/* Per-cluster token buckets (a small table: clusters hashed into it share a
 * bucket, which only makes the limit stricter for them). Loop thread. */
struct resolve_bucket {
    double tokens;
    int64_t at_ms;
};

struct vault_api {
    struct auth_ctx *a;
    struct resolve_bucket buckets[RESOLVE_BUCKETS];
};

static bool resolve_allowed(struct vault_api *v, const char *cluster)
{
    struct resolve_bucket *buckets = v->buckets;
    size_t h = 5381;
    for (const char *p = cluster; *p; p++)
        h = h * 33 + (unsigned char)*p;
    struct resolve_bucket *b = &buckets[h % RESOLVE_BUCKETS];
    int64_t now = ab_now_ms();
    if (b->at_ms == 0)
        b->tokens = RESOLVE_BURST;
    else
        b->tokens = AB_MIN((double)RESOLVE_BURST,
                           b->tokens + (double)(now - b->at_ms) * RESOLVE_RATE_PER_S / 1000.0);
    b->at_ms = now;
    if (b->tokens < 1.0)
        return false;
    b->tokens -= 1.0;
    return true;
}

/* A refusal before the claim check (no or bad assertion): audited from the loop. */
static void audit_refusal(struct auth_ctx *a, const char *cluster, const char *sandbox,
                          const char *why)
{
    char actor[AB_CLUSTER_ID_BUF + 8];
    json_t *d = json_pack("{s:s}", "reason", why);
    snprintf(actor, sizeof(actor), "cluster:%s", cluster);
    const struct audit_entry e = {actor, "vault.resolve", sandbox, NULL, cluster, "denied", d};
    audit_write(auth_db(a), &e);
    json_decref(d);
}

/* POST /internal/v1/vault/resolve {sandboxId, names: [..]} with X-AgentBox-Assertion (made for
 * the asking cluster) → {secrets: [{name, found, version, value}]}; 401 without a valid
 * assertion, 403 when the claim does not allow it, 429 over the cluster's rate. On the
 * internal (tunnel-only) router. */
static void resolve_route(struct http_exchange *ex, void *arg)
{
    struct vault_api *v = arg;
    struct auth_ctx *a = v->a;
    const struct http_request *r = http_req(ex);
    const char *cluster = r->transport_data ? (const char *)r->transport_data : "";
    const char *tok = http_header_get(r, ASRT_HEADER);
    const char *sandbox = NULL;
    const char *names[VAULT_RESOLVE_MAX];
    struct keys_principal p;
    char rid[ASRT_RID_MAX + 1] = "";
    json_t *b = NULL, *arr = NULL;
    struct vault_op *o = NULL;
    char err[512];
    size_t i, n = 0;
    int rc;

    if (!resolve_allowed(v, cluster)) {
        http_respond_error(ex, 429, "cluster '%s' is over %d vault resolves per second; retry",
                           cluster, RESOLVE_RATE_PER_S);
        return;
    }
    b = json_parse_object(r->body, r->body_len, 0, err, sizeof(err));
    rc = b != NULL ? 0 : AB_EINVAL;
    if (rc == 0)
        rc = json_get_str(b, "sandboxId", true, SBXID_MAX, &sandbox, err, sizeof(err));
    if (rc == 0)
        rc = json_get_array(b, "names", true, &arr, err, sizeof(err));
    if (rc == 0) {
        n = json_array_size(arr);
        for (i = 0; i < n && i < VAULT_RESOLVE_MAX; i++) {
            names[i] = json_string_value(json_array_get(arr, i));
            if (names[i] == NULL) {
                snprintf(err, sizeof(err), "names[%zu] must be a string", i);
                rc = AB_EINVAL;
                break;
            }
        }
    }
    if (rc != 0) {
        json_decref(b);
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    if (!tok || !tok[0] || auth_verify_from(a, cluster, tok, &p, rid, err, sizeof(err)) != 0) {
        if (!tok || !tok[0])
            snprintf(
                err, sizeof(err),
                "missing assertion: a resolve presents the principal's assertion in " ASRT_HEADER);
        audit_refusal(a, cluster, sandbox, err);
        json_decref(b);
        http_respond_error(ex, 401, "%s", err);
        return;
    }
    o = calloc(1, sizeof(*o));
    rc = o != NULL ? 0 : AB_ENOMEM;
    if (rc != 0)
        snprintf(err, sizeof(err), "out of memory");
    if (rc == 0) {
        o->a = a;
        o->ex = ex;
        o->kind = VOP_CLAIM_RESOLVE;
        ab_strlcpy(o->ns, p.namespace, sizeof(o->ns));
        ab_strlcpy(o->user, p.user, sizeof(o->user));
        ab_strlcpy(o->team, p.team, sizeof(o->team));
        ab_strlcpy(o->key_id, p.key_id, sizeof(o->key_id));
        ab_strlcpy(o->cluster, cluster, sizeof(o->cluster));
        ab_strlcpy(o->sandbox, sandbox, sizeof(o->sandbox));
        ab_strlcpy(o->rid, rid, sizeof(o->rid));
        rc = take_names(o, names, n, err, sizeof(err));
    }
    json_decref(b);
    if (rc != 0) {
        http_respond_error(ex, rc == AB_ENOMEM ? 503 : 400, "%s", err);
        free(o);
        return;
    }
    vop_submit(o);
}

int vault_api_new(struct hub *h, struct auth_ctx *a, struct vault_api **out, char *err,
                  size_t errlen)
{
    struct vault_api *v = calloc(1, sizeof(*v));
    int rc;

    *out = NULL;
    if (v == NULL) {
        snprintf(err, errlen, "vault api: out of memory");
        return AB_ENOMEM;
    }
    v->a = a;
    const struct http_route routes[] = {
        {"GET", "/e2b/secrets", h_list, a, 0},
        {"POST", "/e2b/secrets", h_create, a, 0},
        {"GET", "/e2b/secrets/{id}", h_get, a, 0},
        {"POST", "/e2b/secrets/{id}", h_update, a, 0},
        {"DELETE", "/e2b/secrets/{id}", h_delete, a, 0},
    };
    const struct http_route internal[] = {
        {"POST", "/internal/v1/vault/resolve", resolve_route, v, 0},
    };
    rc = hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
    if (rc == 0)
        rc = hub_add_internal_routes(h, internal, AB_ARRAY_LEN(internal), err, errlen);
    if (rc != 0) {
        free(v);
        return rc;
    }
    *out = v;
    return 0;
}

void vault_api_free(struct vault_api *v)
{
    free(v);
}
