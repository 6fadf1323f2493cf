/* Console sessions: login (scrypt on a worker), the per-request lookup that
 * auth_request delegates to, CSRF, logout and the login rate limiter.
 * Loop thread, except the *_job functions (database workers). */
#include "hub/sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/loop.h"
#include "hub/audit.h"
#include "hub/db.h"
#include "hub/iam.h"

#define TS(col)                                                                                    \
    "coalesce(to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '')"

/* A verification against this when the user does not exist makes a wrong
 * username cost what a wrong password costs (no user enumeration by time). */
#define DUMMY_HASH                                                                                 \
    "$scrypt$ln=15,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

struct limit_slot {
    char key[96]; /* "u:<name>" or "a:<address>"; "" free */
    int failures;
    int64_t first_ms; /* start of its window */
};

struct sessions {
    struct loop *loop;
    struct db_pool *db;
    struct auth_ctx *auth;
    int64_t ttl_ms;
    bool cookie_secure;
    int max_user, max_addr;
    int64_t window_ms;
    struct limit_slot *slots; /* SESSIONS_LIMIT_SLOTS */
};

int sessions_new(const struct sessions_deps *d, struct sessions **out, char *err, size_t errlen)
{
    struct sessions *s = calloc(1, sizeof(*s));

    *out = NULL;
    if (s != NULL)
        s->slots = calloc(SESSIONS_LIMIT_SLOTS, sizeof(*s->slots));
    if (s == NULL || s->slots == NULL) {
        free(s);
        snprintf(err, errlen, "out of memory creating the session store");
        return AB_ENOMEM;
    }
    s->loop = d->loop;
    s->db = d->db;
    s->auth = d->auth;
    s->ttl_ms = d->ttl_ms > 0 ? d->ttl_ms : 12 * 3600 * 1000LL;
    s->cookie_secure = d->cookie_secure;
    s->max_user = d->max_failures_user > 0 ? d->max_failures_user : 5;
    s->max_addr = d->max_failures_addr > 0 ? d->max_failures_addr : 20;
    s->window_ms = d->failure_window_ms > 0 ? d->failure_window_ms : 15 * 60 * 1000LL;
    *out = s;
    return 0;
}

void sessions_free(struct sessions *s)
{
    if (s == NULL)
        return;
    free(s->slots);
    free(s);
}

bool sessions_cookie_secure(const struct sessions *s, struct http_exchange *ex)
{
    const char *p = http_header_get(http_req(ex), "X-Forwarded-Proto");
    return s->cookie_secure || (p != NULL && strcasecmp(p, "https") == 0);
}

/* --- rate limiting --------------------------------------------------------------------- */

static struct limit_slot *slot_find(struct sessions *s, const char *key, bool create, int64_t now)
{
    struct limit_slot *free_slot = NULL, *oldest = NULL;

    for (size_t i = 0; i < SESSIONS_LIMIT_SLOTS; i++) {
        struct limit_slot *l = &s->slots[i];
        if (l->key[0] != '\0' && now - l->first_ms >= s->window_ms)
            l->key[0] = '\0'; /* its window is over */
        if (l->key[0] == '\0') {
            if (free_slot == NULL)
                free_slot = l;
            continue;
        }
        if (strcmp(l->key, key) == 0)
            return l;
        if (oldest == NULL || l->first_ms < oldest->first_ms)
            oldest = l;
    }
    if (!create)
        return NULL;
    /* full: forget the oldest window rather than refuse to count */
    struct limit_slot *l = free_slot != NULL ? free_slot : oldest;
    ab_strlcpy(l->key, key, sizeof(l->key));
    l->failures = 0;
    l->first_ms = now;
    return l;
}

/* Seconds until key may try again, 0 when it may now. */
static int64_t limit_wait(struct sessions *s, const char *key, int max, int64_t now)
{
    struct limit_slot *l = slot_find(s, key, false, now);

    if (l == NULL || l->failures < max)
        return 0;
    return (l->first_ms + s->window_ms - now + 999) / 1000;
}

static void limit_fail(struct sessions *s, const char *key, int64_t now)
{
    struct limit_slot *l = slot_find(s, key, true, now);
    l->failures++;
}

static void limit_clear(struct sessions *s, const char *key, int64_t now)
{
    struct limit_slot *l = slot_find(s, key, false, now);
    if (l != NULL)
        l->key[0] = '\0';
}

/* The source address of peer without a port: lws gives "127.0.0.1",
 * "::ffff:127.0.0.1" or "::1"; other transports "host:port" or "[v6]:port".
 * An IPv4-mapped address counts as its IPv4 address. */
static void peer_address(const char *peer, char *out, size_t cap)
{
    const char *p = peer != NULL ? peer : "";
    size_t n, colons = 0;

    if (strncasecmp(p, "::ffff:", 7) == 0 && strchr(p + 7, '.') != NULL)
        p += 7;
    for (const char *q = p; *q != '\0'; q++)
        colons += *q == ':';
    if (p[0] == '[' && strchr(p, ']') != NULL)
        n = (size_t)(strchr(p, ']') - p) + 1;
    else if (colons == 1)
        n = (size_t)(strchr(p, ':') - p);
    else
        n = strlen(p);
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

/* --- login ------------------------------------------------------------------------------ */

struct login_job {
    struct sessions *s;
    sessions_login_fn cb;
    void *arg;
    char user_key[96], addr_key[96];
    char password[USERS_PASSWORD_MAX + 1];
    int64_t ttl_ms;
    struct sessions_login_result r;
};

static int login_job_run(PGconn *c, void *arg)
{
    struct login_job *j = arg;
    const char *v[1] = {j->r.username};
    PGresult *r = PQexecParams(c,
                               "SELECT password_hash, team, role, disabled_at IS NOT NULL FROM "
                               "console_users WHERE username = $1",
                               1, NULL, v, NULL, NULL, 0);
    char hash[USERS_HASH_MAX + 1] = DUMMY_HASH, th[65], ch[65], id[24], ttl[32];
    bool found = false, disabled = false, ok;
    uint8_t rnd[8];

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        int rc = db_fail(c, r, "cannot look the user up", j->r.err, sizeof(j->r.err));
        PQclear(r);
        return rc;
    }
    if (PQntuples(r) == 1) {
        found = true;
        ab_strlcpy(hash, PQgetvalue(r, 0, 0), sizeof(hash));
        ab_strlcpy(j->r.team, PQgetvalue(r, 0, 1), sizeof(j->r.team));
        ab_strlcpy(j->r.role, PQgetvalue(r, 0, 2), sizeof(j->r.role));
        disabled = PQgetvalue(r, 0, 3)[0] == 't';
    }
    PQclear(r);
    ok = users_password_verify(j->password, hash);
    OPENSSL_cleanse(j->password, sizeof(j->password));
    if (!found || disabled || !ok) {
        j->r.status = AB_EDENIED;
        return 0;
    }
    if (crypto_token(SESSIONS_TOKEN_PREFIX, j->r.token, sizeof(j->r.token)) != 0 ||
        crypto_token(NULL, j->r.csrf, sizeof(j->r.csrf)) != 0 || crypto_random(rnd, 8) != 0) {
        snprintf(j->r.err, sizeof(j->r.err), "no randomness for a session token");
        return AB_EIO;
    }
    memcpy(id, "ses_", 4);
    crypto_hex_encode(rnd, sizeof(rnd), id + 4);
    crypto_sha256_hex(j->r.token, th);
    crypto_sha256_hex(j->r.csrf, ch);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)j->ttl_ms);
    const char *iv[5] = {id, th, ch, j->r.username, ttl};
    r = PQexecParams(c,
                     "INSERT INTO console_sessions (id, token_hash, csrf_hash, username, "
                     "expires_at) VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 "
                     "millisecond') RETURNING " TS("expires_at"),
                     5, NULL, iv, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        int rc = db_fail(c, r, "cannot store the session", j->r.err, sizeof(j->r.err));
        PQclear(r);
        return rc;
    }
    ab_strlcpy(j->r.expires_at, PQgetvalue(r, 0, 0), sizeof(j->r.expires_at));
    PQclear(r);
    j->r.max_age_s = j->ttl_ms / 1000;
    /* who logged in, from where: the session id, never the token */
    char actor[96];
    snprintf(actor, sizeof(actor), "console:%s", j->r.username);
    json_t *details = json_pack("{s:s,s:s}", "from", j->addr_key + 2, "expiresAt", j->r.expires_at);
    struct audit_entry e = {
        .actor = actor, .action = "console.login", .target = id, .details = details};
    int rc = audit_write_conn(c, &e, j->r.err, sizeof(j->r.err));
    json_decref(details);
    return rc;
}

static void login_job_done(void *arg, int status)
{
    struct login_job *j = arg;
    int64_t now = ab_now_ms();

    if (status != 0)
        j->r.status = status;
    if (j->r.status == AB_EDENIED) {
        limit_fail(j->s, j->user_key, now);
        limit_fail(j->s, j->addr_key, now);
    } else if (j->r.status == 0) {
        limit_clear(j->s, j->user_key, now);
    }
    j->cb(j->arg, &j->r);
    OPENSSL_cleanse(j, sizeof(*j));
    free(j);
}

void sessions_login(struct sessions *s, const char *username, const char *password,
                    const char *peer, sessions_login_fn cb, void *arg)
{
    struct login_job *j = calloc(1, sizeof(*j));
    char addr[80];
    int64_t now = ab_now_ms(), wait_u, wait_a;
    int rc;

    if (j == NULL) {
        struct sessions_login_result r = {.status = AB_ENOMEM};
        ab_strlcpy(r.err, "out of memory", sizeof(r.err));
        cb(arg, &r);
        return;
    }
    peer_address(peer, addr, sizeof(addr));
    snprintf(j->user_key, sizeof(j->user_key), "u:%s", username);
    snprintf(j->addr_key, sizeof(j->addr_key), "a:%s", addr);
    wait_u = limit_wait(s, j->user_key, s->max_user, now);
    wait_a = limit_wait(s, j->addr_key, s->max_addr, now);
    if (wait_u > 0 || wait_a > 0) {
        j->r.status = AB_ELIMIT;
        j->r.retry_after_s = wait_u > wait_a ? wait_u : wait_a;
        if (wait_u >= wait_a)
            snprintf(j->r.limited, sizeof(j->r.limited), "user '%.63s'", username);
        else
            snprintf(j->r.limited, sizeof(j->r.limited), "address %.79s", addr);
        cb(arg, &j->r);
        free(j);
        return;
    }
    j->s = s;
    j->cb = cb;
    j->arg = arg;
    j->ttl_ms = s->ttl_ms;
    ab_strlcpy(j->r.username, username, sizeof(j->r.username));
    ab_strlcpy(j->password, password, sizeof(j->password));
    rc = db_submit(s->db, login_job_run, login_job_done, j);
    if (rc != 0) {
        j->r.status = rc;
        cb(arg, &j->r);
        OPENSSL_cleanse(j, sizeof(*j));
        free(j);
    }
}

/* --- logout ---------------------------------------------------------------------------- */

struct revoke_job {
    sessions_done_fn cb;
    void *arg;
    char id[KEYS_ID_MAX + 1];
    int found;
    char err[256];
};

static int revoke_job_run(PGconn *c, void *arg)
{
    struct revoke_job *j = arg;
    const char *v[1] = {j->id};
    PGresult *r = PQexecParams(c,
                               "UPDATE console_sessions SET revoked_at = now() WHERE id = $1 AND "
                               "revoked_at IS NULL",
                               1, NULL, v, NULL, NULL, 0);
    int rc = 0;

    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        rc = db_fail(c, r, "cannot end the session", j->err, sizeof(j->err));
    else
        j->found = atoi(PQcmdTuples(r));
    PQclear(r);
    return rc;
}

static void revoke_job_done(void *arg, int status)
{
    struct revoke_job *j = arg;
    j->cb(j->arg, status != 0 ? status : j->found > 0 ? 0 : AB_ENOENT);
    free(j);
}

void sessions_revoke(struct sessions *s, const char *id, sessions_done_fn cb, void *arg)
{
    struct revoke_job *j = calloc(1, sizeof(*j));
    int rc;

    if (j == NULL) {
        cb(arg, AB_ENOMEM);
        return;
    }
    j->cb = cb;
    j->arg = arg;
    ab_strlcpy(j->id, id, sizeof(j->id));
    rc = db_submit(s->db, revoke_job_run, revoke_job_done, j);
    if (rc != 0) {
        free(j);
        cb(arg, rc);
    }
}

/* --- per-request authentication ---------------------------------------------------------- */

enum lookup_state { LK_VALID, LK_UNKNOWN, LK_REVOKED, LK_EXPIRED, LK_DISABLED };

struct lookup_job {
    struct sessions *s;
    struct http_exchange *ex;
    enum auth_surface surf;
    auth_ok_fn ok;
    void *ok_arg;
    bool cookie; /* came as the cookie: writes need the CSRF token */
    char token_hash[65];
    char csrf_given[65]; /* SHA-256 of X-CSRF-Token, "" when absent */
    char csrf_hash[65];
    enum lookup_state state;
    char when[KEYS_TIME_MAX];
    struct keys_principal p;
    char err[256];
};

static int lookup_job_run(PGconn *c, void *arg)
{
    struct lookup_job *j = arg;
    const char *v[1] = {j->token_hash};
    PGresult *r = PQexecParams(
        c,
        "SELECT s.id, u.username, u.team, u.role, coalesce(tn.namespace, ''), s.csrf_hash, " TS(
            "s.expires_at") ", " TS("s.revoked_at") ", s.expires_at <= now(), "
                                                    "u.disabled_at IS NOT NULL "
                                                    "FROM console_sessions s JOIN console_users u "
                                                    "ON u.username = s.username LEFT JOIN "
                                                    "team_namespaces tn ON tn.team = u.team "
                                                    "WHERE s.token_hash = $1",
        1, NULL, v, NULL, NULL, 0);
    struct keys_principal *p = &j->p;

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        int rc = db_fail(c, r, "cannot look the session up", j->err, sizeof(j->err));
        PQclear(r);
        return rc;
    }
    if (PQntuples(r) != 1) {
        j->state = LK_UNKNOWN;
    } else if (PQgetvalue(r, 0, 7)[0] != '\0') {
        j->state = LK_REVOKED;
        ab_strlcpy(j->when, PQgetvalue(r, 0, 7), sizeof(j->when));
    } else if (PQgetvalue(r, 0, 8)[0] == 't') {
        j->state = LK_EXPIRED;
        ab_strlcpy(j->when, PQgetvalue(r, 0, 6), sizeof(j->when));
    } else if (PQgetvalue(r, 0, 9)[0] == 't') {
        j->state = LK_DISABLED;
    } else {
        j->state = LK_VALID;
        ab_strlcpy(p->key_id, PQgetvalue(r, 0, 0), sizeof(p->key_id));
        ab_strlcpy(p->name, "console session", sizeof(p->name));
        ab_strlcpy(p->user, PQgetvalue(r, 0, 1), sizeof(p->user));
        ab_strlcpy(p->team, PQgetvalue(r, 0, 2), sizeof(p->team));
        p->role = strcmp(PQgetvalue(r, 0, 3), "admin") == 0 ? KEYS_ROLE_ADMIN : KEYS_ROLE_TENANT;
        p->mode = KEYS_MODE_UNRESTRICTED;
        p->kind = KEYS_KIND_SESSION;
        if (PQgetvalue(r, 0, 4)[0] != '\0')
            ab_strlcpy(p->namespace, PQgetvalue(r, 0, 4), sizeof(p->namespace));
        else
            iam_namespace_for(p->team, p->user, p->namespace);
        ab_strlcpy(j->csrf_hash, PQgetvalue(r, 0, 5), sizeof(j->csrf_hash));
        ab_strlcpy(p->expires_at, PQgetvalue(r, 0, 6), sizeof(p->expires_at));
    }
    PQclear(r);
    return 0;
}

static bool safe_method(const char *m)
{
    return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0 || strcmp(m, "OPTIONS") == 0;
}

static void fail(struct lookup_job *j, int status, const char *code, const char *msg)
{
    if (j->surf == AUTH_SURFACE_API)
        auth_respond_api_error(j->ex, status, code, "%s", msg);
    else
        http_respond_error(j->ex, status, "%s", msg);
}

static void lookup_job_done(void *arg, int status)
{
    struct lookup_job *j = arg;
    char msg[300];

    if (status != 0) {
        auth_respond_db_error(j->s->auth, j->ex, j->surf, status, j->err);
    } else if (j->state != LK_VALID) {
        if (j->state == LK_REVOKED)
            snprintf(msg, sizeof(msg),
                     "invalid session: it ended at %s (logout, a password change or a disabled "
                     "user); log in again with POST /api/auth/login",
                     j->when);
        else if (j->state == LK_EXPIRED)
            snprintf(msg, sizeof(msg),
                     "invalid session: it expired at %s; log in again with POST /api/auth/login",
                     j->when);
        else if (j->state == LK_DISABLED)
            snprintf(msg, sizeof(msg), "invalid session: this user is disabled");
        else
            snprintf(msg, sizeof(msg),
                     "invalid session: no such session; log in with POST /api/auth/login");
        fail(j, 401, "UNAUTHENTICATED", msg);
    } else if (j->cookie && !safe_method(http_req(j->ex)->method) &&
               (j->csrf_given[0] == '\0' || !crypto_equal(j->csrf_given, j->csrf_hash, 64))) {
        fail(j, 403, "CSRF_REJECTED",
             j->csrf_given[0] == '\0'
                 ? "missing X-CSRF-Token: a write authenticated by the session cookie must send "
                   "the csrfToken of the login (also in the abx_csrf cookie)"
                 : "X-CSRF-Token does not match this session's csrfToken");
    } else {
        j->ok(j->ex, &j->p, j->ok_arg);
    }
    OPENSSL_cleanse(j, sizeof(*j));
    free(j);
}

/* The value of cookie name in a Cookie header into out; false when absent. */
static bool cookie_get(const char *hdr, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);

    for (const char *p = hdr; p != NULL && *p != '\0';) {
        while (*p == ' ' || *p == ';')
            p++;
        const char *end = strchr(p, ';');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t vl = len - nl - 1;
            if (vl == 0 || vl >= cap)
                return false;
            memcpy(out, p + nl + 1, vl);
            out[vl] = '\0';
            return true;
        }
        p = end;
    }
    return false;
}

static bool is_session_token(const char *t)
{
    size_t n = strlen(t);

    if (n != SESSIONS_TOKEN_LEN || strncmp(t, SESSIONS_TOKEN_PREFIX, 5) != 0)
        return false;
    for (size_t i = 5; i < n; i++)
        if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f')))
            return false;
    return true;
}

bool sessions_authenticate(void *arg, struct http_exchange *ex, enum auth_surface surf,
                           auth_ok_fn ok, void *ok_arg)
{
    struct sessions *s = arg;
    const struct http_request *r = http_req(ex);
    const char *authz = http_header_get(r, "Authorization");
    char tok[SESSIONS_TOKEN_LEN + 8] = "";
    bool cookie = false;
    struct lookup_job *j;
    int rc;

    if (authz != NULL) {
        while (*authz == ' ')
            authz++;
        if (strncasecmp(authz, "Bearer ", 7) != 0)
            return false;
        authz += 7;
        while (*authz == ' ')
            authz++;
        if (strncmp(authz, SESSIONS_TOKEN_PREFIX, 5) != 0)
            return false; /* an API key: auth.c's */
        ab_strlcpy(tok, authz, sizeof(tok));
    } else if (http_header_get(r, "AGENTBOX-API-KEY") == NULL &&
               http_header_get(r, "X-API-Key") == NULL &&
               cookie_get(http_header_get(r, "Cookie"), SESSIONS_COOKIE, tok, sizeof(tok))) {
        cookie = true;
    } else {
        return false;
    }
    if (!is_session_token(tok)) {
        OPENSSL_cleanse(tok, sizeof(tok));
        j = NULL;
        if (surf == AUTH_SURFACE_API)
            auth_respond_api_error(ex, 401, "UNAUTHENTICATED",
                                   "invalid session: expected abxs_ followed by 64 lowercase hex "
                                   "characters; log in with POST /api/auth/login");
        else
            http_respond_error(ex, 401, "invalid session: expected abxs_ + 64 lowercase hex");
        return true;
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        OPENSSL_cleanse(tok, sizeof(tok));
        http_respond_error(ex, 503, "out of memory");
        return true;
    }
    j->s = s;
    j->ex = ex;
    j->surf = surf;
    j->ok = ok;
    j->ok_arg = ok_arg;
    j->cookie = cookie;
    crypto_sha256_hex(tok, j->token_hash);
    OPENSSL_cleanse(tok, sizeof(tok));
    const char *csrf = http_header_get(r, SESSIONS_CSRF_HEADER);
    if (csrf != NULL && csrf[0] != '\0' && strlen(csrf) <= 128)
        crypto_sha256_hex(csrf, j->csrf_given);
    rc = db_submit(s->db, lookup_job_run, lookup_job_done, j);
    if (rc != 0) {
        free(j);
        auth_respond_db_error(s->auth, ex, surf, rc, "");
    }
    return true;
}
