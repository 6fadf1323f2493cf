/* /api/v1 whoami and API keys (see identity_api.h). */
#include "dashboard-api/identity_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/json.h"
#include "hub/auth.h"
#include "hub/db.h"
#include "hub/hub.h"
#include "hub/keys.h"
#include "hub/vault.h"

enum key_op_kind { OP_LIST, OP_CREATE, OP_REVOKE };

/* One API key operation, from the loop to a worker and back. */
struct key_op {
    struct auth_ctx *a;
    struct http_exchange *ex;
    enum key_op_kind kind;
    bool admin;       /* admin route: no owner restriction */
    bool with_tokens; /* listing: decrypt rawToken */
    bool include_revoked;
    char actor[KEYS_ID_MAX + 8];
    /* owner (self-service) or filter (admin); "" = none */
    char team[IAM_TEAM_MAX + 1];
    char user[IAM_USER_MAX + 1];
    char name[KEYS_NAME_MAX + 1];
    enum keys_role role;
    enum keys_mode mode;
    int64_t expires_in_ms;
    char id[KEYS_ID_MAX + 8];
    /* results */
    json_t *out;
    char token[KEYS_TOKEN_LEN + 1];
    char hash[KEYS_HASH_LEN + 1];
    char err[512];
};

static void op_free(struct key_op *o)
{
    json_decref(o->out);
    OPENSSL_cleanse(o->token, sizeof(o->token));
    free(o);
}

static int key_op_job(PGconn *c, void *arg)
{
    struct key_op *o = arg;
    struct keys_create_request rq = {0};
    const char *team = o->team[0] != '\0' ? o->team : NULL;
    const char *user = o->user[0] != '\0' ? o->user : NULL;

    switch (o->kind) {
    case OP_LIST:
        return keys_list_conn(c, o->with_tokens ? auth_keyring(o->a) : NULL, team, user,
                              o->include_revoked, &o->out, o->err, sizeof(o->err));
    case OP_CREATE:
        rq.team = o->team;
        rq.user = o->user;
        rq.name = o->name;
        rq.role = o->role;
        rq.mode = o->mode;
        rq.expires_in_ms = o->expires_in_ms;
        rq.actor = o->actor;
        return keys_create_conn(c, auth_keyring(o->a), &rq, o->token, &o->out, o->err,
                                sizeof(o->err));
    case OP_REVOKE:
        return keys_revoke_conn(c, o->id, o->admin ? NULL : team, o->admin ? NULL : user, o->actor,
                                o->hash, o->err, sizeof(o->err));
    }
    return AB_EINVAL;
}

static void key_op_done(void *arg, int status)
{
    struct key_op *o = arg;

    if (status == AB_ENOENT) {
        auth_respond_api_error(o->ex, 404, "NOT_FOUND", "%s", o->err);
    } else if (status == AB_EINVAL) {
        auth_respond_api_error(o->ex, 400, "INVALID_ARGUMENT", "%s", o->err);
    } else if (status != 0) {
        auth_respond_db_error(o->a, o->ex, AUTH_SURFACE_API, status, o->err);
    } else if (o->kind == OP_LIST) {
        size_t n = json_array_size(o->out);
        http_respond_json(o->ex, 200,
                          json_pack("{s:O,s:I}", "items", o->out, "total", (json_int_t)n));
    } else if (o->kind == OP_CREATE) {
        json_object_set_new(o->out, "key", json_string(o->token));
        http_respond_json(o->ex, 201, json_incref(o->out));
    } else {
        auth_notify_revoked(o->a, o->id, o->hash, "revoked");
        http_respond(o->ex, 204, NULL, NULL, 0, NULL, 0);
    }
    op_free(o);
}

static void submit(struct key_op *o)
{
    int rc = db_submit(auth_db(o->a), key_op_job, key_op_done, o);

    if (rc != 0) {
        auth_respond_db_error(o->a, o->ex, AUTH_SURFACE_API, rc, NULL);
        op_free(o);
    }
}

static struct key_op *op_new(struct auth_ctx *a, struct http_exchange *ex,
                             const struct keys_principal *p, enum key_op_kind kind)
{
    struct key_op *o = calloc(1, sizeof(*o));

    if (o == NULL) {
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "out of memory");
        return NULL;
    }
    o->a = a;
    o->ex = ex;
    o->kind = kind;
    snprintf(o->actor, sizeof(o->actor), "key:%s", p->key_id);
    return o;
}

/* Reads the optional body fields shared by both create routes. */
static int parse_create(struct http_exchange *ex, struct key_op *o, bool admin, char *err,
                        size_t errlen)
{
    const struct http_request *r = http_req(ex);
    const char *s = NULL;
    json_t *b;
    int rc = 0;

    if (r->body_len == 0)
        return admin ? (snprintf(err, errlen, "request body required: {\"team\", \"user\"}"),
                        AB_EINVAL)
                     : 0;
    b = json_parse_object(r->body, r->body_len, 64 * 1024, err, errlen);
    if (b == NULL)
        return AB_EINVAL;
    rc = json_get_str(b, "name", false, KEYS_NAME_MAX, &s, err, errlen);
    if (rc == 0 && s != NULL)
        ab_strlcpy(o->name, s, sizeof(o->name));
    s = NULL;
    if (rc == 0)
        rc = json_get_str(b, "expiresIn", false, 64, &s, err, errlen);
    if (rc == 0 && s != NULL) {
        if (cfg_parse_duration(s, &o->expires_in_ms) != 0 || o->expires_in_ms <= 0) {
            snprintf(err, errlen,
                     "field 'expiresIn' must be a positive duration such as 90s, 12h or 720h");
            rc = AB_EINVAL;
        }
    }
    s = NULL;
    if (rc == 0)
        rc = json_get_str(b, "mode", false, 32, &s, err, errlen);
    if (rc == 0 && s != NULL) {
        if (strcmp(s, "agent") == 0) {
            o->mode = KEYS_MODE_AGENT;
        } else if (strcmp(s, "unrestricted") != 0) {
            snprintf(err, errlen, "field 'mode' must be \"unrestricted\" or \"agent\"");
            rc = AB_EINVAL;
        }
    }
    if (admin) {
        s = NULL;
        if (rc == 0)
            rc = json_get_str(b, "role", false, 32, &s, err, errlen);
        if (rc == 0 && s != NULL) {
            if (strcmp(s, "admin") == 0) {
                o->role = KEYS_ROLE_ADMIN;
            } else if (strcmp(s, "tenant") != 0) {
                snprintf(err, errlen, "field 'role' must be \"tenant\" or \"admin\"");
                rc = AB_EINVAL;
            }
        }
        s = NULL;
        if (rc == 0)
            rc = json_get_str(b, "team", true, IAM_TEAM_MAX, &s, err, errlen);
        if (rc == 0)
            ab_strlcpy(o->team, s, sizeof(o->team));
        s = NULL;
        if (rc == 0)
            rc = json_get_str(b, "user", true, IAM_USER_MAX, &s, err, errlen);
        if (rc == 0)
            ab_strlcpy(o->user, s, sizeof(o->user));
    }
    json_decref(b);
    return rc;
}

/* --- self-service ---------------------------------------------------------------------- */

static void whoami_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    (void)arg;
    http_respond_json(ex, 200,
                      json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "role", keys_role_name(p->role),
                                "user", p->user, "team", p->team, "mode", keys_mode_name(p->mode),
                                "namespace", p->namespace, "keyId", p->key_id, "name", p->name));
}

static void whoami(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, whoami_ok, arg);
}

static void list_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct key_op *o = op_new(arg, ex, p, OP_LIST);

    if (o == NULL)
        return;
    ab_strlcpy(o->team, p->team, sizeof(o->team));
    ab_strlcpy(o->user, p->user, sizeof(o->user));
    /* an agent-mode key never sees token material (reference §4.5), and no
     * token crosses a tunnel: only an owner calling the hub directly (the console) */
    o->with_tokens = p->mode != KEYS_MODE_AGENT && !auth_request_is_bridged(o->a, ex);
    submit(o);
}

static void list_keys(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, list_ok, arg);
}

static void create_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct key_op *o;
    char err[512];

    if (p->mode == KEYS_MODE_AGENT) {
        http_respond_json(
            ex, 403,
            json_pack("{s:s,s:s,s:{s:s,s:s}}", "error",
                      "this credential may not create an api key: issuing a credential would "
                      "let it act without the approval gate. Open the console and do it as "
                      "yourself.",
                      "errorCode", "FORBIDDEN_FOR_AGENT", "detail", "operation", "apikey.create",
                      "summary", "create an API key"));
        return;
    }
    if (auth_key_churn(arg, p, err, sizeof(err)) != 0) {
        auth_respond_api_error(ex, 429, "RATE_LIMITED", "%s", err);
        return;
    }
    o = op_new(arg, ex, p, OP_CREATE);
    if (o == NULL)
        return;
    if (parse_create(ex, o, false, err, sizeof(err)) != 0) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "%s", err);
        op_free(o);
        return;
    }
    ab_strlcpy(o->team, p->team, sizeof(o->team));
    ab_strlcpy(o->user, p->user, sizeof(o->user));
    o->role = KEYS_ROLE_TENANT;
    submit(o);
}

static void create_key(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, create_ok, arg);
}

static void revoke_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    const char *id = http_param(ex, "id");
    struct key_op *o;
    char err[256];

    if (auth_key_churn(arg, p, err, sizeof(err)) != 0) {
        auth_respond_api_error(ex, 429, "RATE_LIMITED", "%s", err);
        return;
    }
    o = op_new(arg, ex, p, OP_REVOKE);
    if (o == NULL)
        return;
    /* TODO(approvals): agent-mode revocation is a gated, once-only operation
     * (reference §4.5); until the approval gate exists it is allowed. */
    ab_strlcpy(o->id, id != NULL ? id : "", sizeof(o->id));
    ab_strlcpy(o->team, p->team, sizeof(o->team));
    ab_strlcpy(o->user, p->user, sizeof(o->user));
    submit(o);
}

static void revoke_key(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, revoke_ok, arg);
}

/* --- admin ----------------------------------------------------------------------------------- */

static bool require_admin(struct http_exchange *ex, const struct keys_principal *p)
{
    if (p->role == KEYS_ROLE_ADMIN)
        return true;
    auth_respond_api_error(ex, 403, "FORBIDDEN",
                           "admin api key required: create one with `agentbox-hub key create "
                           "--admin`");
    return false;
}

static void admin_list_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    const struct http_request *r = http_req(ex);
    char flag[16] = "";
    struct key_op *o;

    if (!require_admin(ex, p))
        return;
    o = op_new(arg, ex, p, OP_LIST);
    if (o == NULL)
        return;
    o->admin = true;
    if (http_query_get(r, "team", o->team, sizeof(o->team)) == AB_ELIMIT ||
        http_query_get(r, "user", o->user, sizeof(o->user)) == AB_ELIMIT) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "query team or user is too long");
        op_free(o);
        return;
    }
    if (http_query_get(r, "includeRevoked", flag, sizeof(flag)) == 0)
        o->include_revoked = strcmp(flag, "true") == 0 || strcmp(flag, "1") == 0;
    submit(o);
}

static void admin_list(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, admin_list_ok, arg);
}

static void admin_create_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct key_op *o;
    char err[512];

    if (!require_admin(ex, p))
        return;
    o = op_new(arg, ex, p, OP_CREATE);
    if (o == NULL)
        return;
    o->admin = true;
    if (parse_create(ex, o, true, err, sizeof(err)) != 0) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "%s", err);
        op_free(o);
        return;
    }
    submit(o);
}

static void admin_create(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, admin_create_ok, arg);
}

static void admin_revoke_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    const char *id = http_param(ex, "id");
    struct key_op *o;

    if (!require_admin(ex, p))
        return;
    o = op_new(arg, ex, p, OP_REVOKE);
    if (o == NULL)
        return;
    o->admin = true;
    ab_strlcpy(o->id, id != NULL ? id : "", sizeof(o->id));
    submit(o);
}

static void admin_revoke(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, admin_revoke_ok, arg);
}

int identity_api_add_routes(struct hub *h, struct auth_ctx *a, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/api/v1/auth/whoami", whoami, a, 0},
        {"GET", "/api/v1/api-keys", list_keys, a, 0},
        {"POST", "/api/v1/api-keys", create_key, a, 0},
        {"DELETE", "/api/v1/api-keys/{id}", revoke_key, a, 0},
        {"GET", "/api/v1/admin/api-keys", admin_list, a, 0},
        {"POST", "/api/v1/admin/api-keys", admin_create, a, 0},
        {"DELETE", "/api/v1/admin/api-keys/{id}", admin_revoke, a, 0},
    };

    return hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
