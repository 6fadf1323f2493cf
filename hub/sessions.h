/* Console sessions (issue 16): a human logs in with a username and password
 * (hub/users.h) and gets a session, the principal of kind KEYS_KIND_SESSION
 * that auth_request accepts on every /api route (hub/auth.h's session hook).
 *
 * Token "abxs_" + 64 hex from the CSPRNG; PostgreSQL keeps only its SHA-256,
 * the expiry and revoked_at (logout, `user passwd`, `user disable`), and it
 * is looked up on every request (no cache: a revocation is immediate).
 * Presented either as the cookie abx_session (HttpOnly, SameSite=Strict,
 * Secure when the console is served over TLS) or as Authorization: Bearer.
 *
 * CSRF: a cookie-authenticated request other than GET/HEAD/OPTIONS must send
 * X-CSRF-Token equal to the csrfToken login answered (also readable from
 * the abx_csrf cookie, not HttpOnly: a double-submit token, and the hub
 * checks it against the session's stored hash, so a forged cookie does not
 * help). Bearer requests need none: a browser never adds that header.
 *
 * Login rate limiting: failed logins are counted per username and per
 * source address over a window; past the limit login answers 429 naming the
 * seconds to wait (also Retry-After), before the password is even checked.
 *
 * Everything here runs on the loop thread; hashing and storage run in jobs. */
#ifndef AGENTBOX_HUB_SESSIONS_H
#define AGENTBOX_HUB_SESSIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/http.h"
#include "hub/auth.h"
#include "hub/users.h"

struct loop;
struct db_pool;

#define SESSIONS_TOKEN_PREFIX "abxs_"
#define SESSIONS_TOKEN_LEN 69 /* "abxs_" + 64 hex */
#define SESSIONS_COOKIE "abx_session"
#define SESSIONS_CSRF_COOKIE "abx_csrf"
#define SESSIONS_CSRF_HEADER "X-CSRF-Token"
#define SESSIONS_LIMIT_SLOTS 1024 /* distinct users + addresses with recent failures */

struct sessions;

struct sessions_deps {
    struct loop *loop;
    struct db_pool *db;
    struct auth_ctx *auth;     /* error bodies */
    int64_t ttl_ms;            /* session lifetime; 0 → 12 h */
    bool cookie_secure;        /* Secure on the cookies (also when X-Forwarded-Proto: https) */
    int max_failures_user;     /* failed logins per username per window; 0 → 5 */
    int max_failures_addr;     /* per source address; 0 → 20 */
    int64_t failure_window_ms; /* 0 → 15 min */
};

int sessions_new(const struct sessions_deps *d, struct sessions **out, char *err, size_t errlen);
void sessions_free(struct sessions *s);

/* auth_session_fn (auth.h): takes ex when it carries a session credential
 * (Bearer abxs_…, or the cookie without any API key header). */
bool sessions_authenticate(void *arg, struct http_exchange *ex, enum auth_surface surf,
                           auth_ok_fn ok, void *ok_arg);

/* What sessions_login found. status 0: token, csrf, expires_at and the user
 * are set; AB_EDENIED wrong username or password (or a disabled user);
 * AB_ELIMIT rate limited (retry_after_s, limited names what); else a
 * database error (err). */
struct sessions_login_result {
    int status;
    char token[SESSIONS_TOKEN_LEN + 1];
    char csrf[SESSIONS_TOKEN_LEN + 1];
    char expires_at[KEYS_TIME_MAX];
    int64_t max_age_s;
    char username[USERS_NAME_MAX + 1];
    char team[IAM_TEAM_MAX + 1];
    char role[8];
    int64_t retry_after_s;
    char limited[96];
    char err[256];
};
typedef void (*sessions_login_fn)(void *arg, const struct sessions_login_result *r);
/* Checks the limits, then the password on a worker, then stores a session.
 * cb runs exactly once (at once when rate limited or the queue is full). */
void sessions_login(struct sessions *s, const char *username, const char *password,
                    const char *peer, sessions_login_fn cb, void *arg);

/* Revokes session id (logout). cb(arg, 0 | AB_ENOENT | db error). */
typedef void (*sessions_done_fn)(void *arg, int status);
void sessions_revoke(struct sessions *s, const char *id, sessions_done_fn cb, void *arg);

/* Whether Set-Cookie should carry Secure for ex. */
bool sessions_cookie_secure(const struct sessions *s, struct http_exchange *ex);

#endif
