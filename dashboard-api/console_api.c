/* The console's own login and the approval API (issue 16):
 *
 *   POST   /api/auth/login {username, password} → 200 {user: {username, team, role},
 *          token, csrfToken, expiresAt} + Set-Cookie abx_session (HttpOnly,
 *          SameSite=Strict, Secure over TLS) and abx_csrf (readable: the
 *          double-submit token); 401 wrong username or password; 429
 *          RATE_LIMITED naming the seconds to wait (and Retry-After)
 *   POST   /api/auth/logout → 204, the session revoked and the cookies cleared
 *   GET    /api/auth/session → {sessionId, user, team, role, namespace, expiresAt}
 *   GET    /api/v1/approvals                       {pending, grants}
 *   GET    /api/v1/approvals/{approvalId}          poll
 *   POST   /api/v1/approvals/{approvalId}/decision {decision, scope?} (console sessions only)
 *   DELETE /api/v1/approvals/grants/{grantId}      204
 * and the same four under /api/clusters/{id}/v1/approvals (abx console mode:
 * approvals are the hub's, one store for every cluster; pollUrl resolves
 * against either base). Loop thread; storage on database workers. */
#include "dashboard-api/dashboard_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "agentbox/common.h"
#include "agentbox/json.h"
#include "hub/approvals.h"
#include "hub/auth.h"
#include "hub/hub.h"
#include "hub/sessions.h"
#include "hub/users.h"

/* --- login / logout / session ---------------------------------------------------------- */

struct login_req {
    struct hub *h;
    struct http_exchange *ex;
};

static void login_done(void *arg, const struct sessions_login_result *r)
{
    struct login_req *q = arg;
    struct http_exchange *ex = q->ex;

    if (r->status == AB_ELIMIT) {
        char retry[24], msg[200];
        snprintf(retry, sizeof(retry), "%lld", (long long)r->retry_after_s);
        snprintf(msg, sizeof(msg), "too many failed logins for %s: retry in %lld s", r->limited,
                 (long long)r->retry_after_s);
        json_t *b = json_pack("{s:s,s:s,s:{s:I}}", "error", msg, "errorCode", "RATE_LIMITED",
                              "detail", "retryAfterSeconds", (json_int_t)r->retry_after_s);
        char *txt = b != NULL ? json_dumps(b, JSON_COMPACT) : NULL;
        struct http_header hd[1] = {{"Retry-After", retry}};
        if (txt != NULL)
            http_respond(ex, 429, "application/json", txt, strlen(txt), hd, 1);
        else
            http_respond_error(ex, 429, "%s", msg);
        free(txt);
        json_decref(b);
    } else if (r->status == AB_EDENIED) {
        auth_respond_api_error(ex, 401, "UNAUTHENTICATED", "invalid username or password");
    } else if (r->status != 0) {
        auth_respond_db_error(q->h->auth, ex, AUTH_SURFACE_API, r->status, r->err);
    } else {
        bool secure = sessions_cookie_secure(q->h->sessions, ex);
        char c1[256], c2[256];
        snprintf(c1, sizeof(c1),
                 SESSIONS_COOKIE "=%s; Path=/; Max-Age=%lld; HttpOnly; "
                                 "SameSite=Strict%s",
                 r->token, (long long)r->max_age_s, secure ? "; Secure" : "");
        snprintf(c2, sizeof(c2),
                 SESSIONS_CSRF_COOKIE "=%s; Path=/; Max-Age=%lld; "
                                      "SameSite=Strict%s",
                 r->csrf, (long long)r->max_age_s, secure ? "; Secure" : "");
        json_t *b = json_pack("{s:{s:s,s:s,s:s},s:s,s:s,s:s}", "user", "username", r->username,
                              "team", r->team, "role", r->role, "token", r->token, "csrfToken",
                              r->csrf, "expiresAt", r->expires_at);
        char *txt = b != NULL ? json_dumps(b, JSON_COMPACT) : NULL;
        struct http_header hd[2] = {{"Set-Cookie", c1}, {"Set-Cookie", c2}};
        if (txt != NULL)
            http_respond(ex, 200, "application/json", txt, strlen(txt), hd, 2);
        else
            http_respond_error(ex, 503, "out of memory");
        if (txt != NULL)
            OPENSSL_cleanse(txt, strlen(txt));
        free(txt);
        json_decref(b);
        OPENSSL_cleanse(c1, sizeof(c1));
        OPENSSL_cleanse(c2, sizeof(c2));
    }
    free(q);
}

static void h_login(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    const struct http_request *r = http_req(ex);
    const char *user = NULL, *pw = NULL;
    char err[256];
    json_t *body = json_parse_object(r->body, r->body_len, 4096, err, sizeof(err));

    if (body == NULL ||
        json_get_str(body, "username", true, USERS_NAME_MAX, &user, err, sizeof(err)) != 0 ||
        json_get_str(body, "password", true, USERS_PASSWORD_MAX, &pw, err, sizeof(err)) != 0) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "%s", err);
        json_decref(body);
        return;
    }
    struct login_req *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        json_decref(body);
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "out of memory");
        return;
    }
    q->h = h;
    q->ex = ex;
    sessions_login(h->sessions, user, pw, r->peer, login_done, q);
    json_decref(body); /* the password string is jansson's: gone with it */
}

static bool require_session(struct http_exchange *ex, const struct keys_principal *p)
{
    if (p->kind == KEYS_KIND_SESSION)
        return true;
    auth_respond_api_error(ex, 401, "UNAUTHENTICATED",
                           "no console session: this is an api key; log in with POST "
                           "/api/auth/login");
    return false;
}

static void logout_done(void *arg, int status)
{
    struct login_req *q = arg;

    if (status != 0 && status != AB_ENOENT) {
        auth_respond_db_error(q->h->auth, q->ex, AUTH_SURFACE_API, status, "");
    } else {
        struct http_header hd[2] = {
            {"Set-Cookie", SESSIONS_COOKIE "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"},
            {"Set-Cookie", SESSIONS_CSRF_COOKIE "=; Path=/; Max-Age=0; SameSite=Strict"}};
        http_respond(q->ex, 204, NULL, NULL, 0, hd, 2);
    }
    free(q);
}

static void logout_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    struct login_req *q;

    if (!require_session(ex, p))
        return;
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "out of memory");
        return;
    }
    q->h = h;
    q->ex = ex;
    sessions_revoke(h->sessions, p->key_id, logout_done, q);
}

static void h_logout(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    auth_request(h->auth, ex, AUTH_SURFACE_API, logout_ok, h);
}

static void session_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    (void)arg;
    if (!require_session(ex, p))
        return;
    http_respond_json(ex, 200,
                      json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "sessionId", p->key_id, "user",
                                p->user, "team", p->team, "role", keys_role_name(p->role),
                                "namespace", p->namespace, "expiresAt", p->expires_at));
}

static void h_session(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    auth_request(h->auth, ex, AUTH_SURFACE_API, session_ok, h);
}

/* --- approvals --------------------------------------------------------------------------- */

static void list_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    approvals_list(h->approvals, ex, p);
}

static void get_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    const char *id = http_param(ex, "approvalId");
    approvals_get(h->approvals, ex, p, id != NULL ? id : "");
}

static void decide_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    const char *id = http_param(ex, "approvalId");
    approvals_decide(h->approvals, ex, p, id != NULL ? id : "");
}

static void revoke_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    const char *id = http_param(ex, "grantId");
    approvals_revoke_grant(h->approvals, ex, p, id != NULL ? id : "");
}

#define AUTHED(name, fn)                                                                           \
    static void name(struct http_exchange *ex, void *arg)                                          \
    {                                                                                              \
        struct hub *h = arg;                                                                       \
        auth_request(h->auth, ex, AUTH_SURFACE_API, fn, h);                                        \
    }
AUTHED(h_list, list_ok)
AUTHED(h_get, get_ok)
AUTHED(h_decide, decide_ok)
AUTHED(h_revoke, revoke_ok)

int console_api_add_routes(struct hub *h, char *err, size_t errlen)
{
    if (h->sessions == NULL || h->approvals == NULL) {
        snprintf(err, errlen, "console api: sessions and approvals are not created yet");
        return AB_EINVAL;
    }
    const struct http_route routes[] = {
        {"POST", "/api/auth/login", h_login, h, 0},
        {"POST", "/api/auth/logout", h_logout, h, 0},
        {"GET", "/api/auth/session", h_session, h, 0},
        {"GET", "/api/v1/approvals", h_list, h, 0},
        {"GET", "/api/v1/approvals/{approvalId}", h_get, h, 0},
        {"POST", "/api/v1/approvals/{approvalId}/decision", h_decide, h, 0},
        {"DELETE", "/api/v1/approvals/grants/{grantId}", h_revoke, h, 0},
        {"GET", "/api/clusters/{id}/v1/approvals", h_list, h, 0},
        {"GET", "/api/clusters/{id}/v1/approvals/{approvalId}", h_get, h, 0},
        {"POST", "/api/clusters/{id}/v1/approvals/{approvalId}/decision", h_decide, h, 0},
        {"DELETE", "/api/clusters/{id}/v1/approvals/grants/{grantId}", h_revoke, h, 0},
    };
    return hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
