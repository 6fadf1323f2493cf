/* Request authentication, key-use batching, the revocation scan and the
 * internal key validation route. Loop thread, except the *_job functions
 * (database workers). */
#include "hub/auth.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/hex.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "hub/db.h"
#include "hub/hub.h"
#include "hub/vault.h"

/* Keys revoked up to this long before the previous scan are reported again,
 * so a revocation committed late (its revoked_at is its transaction's start)
 * is not missed. Reports are idempotent. */
#define SCAN_OVERLAP "5 seconds"

struct auth_ctx {
    struct loop *loop;
    struct db_pool *db;
    struct vault_keyring kr;
    /* the assertion key pair of the hub secret, and a keyring holding its
     * public half so the hub can check assertions agents present back */
    struct asrt_signer *signer;
    struct asrt_keyring *asrt_kr;
    int64_t interval_ms;
    struct loop_timer tick;
    bool tick_running; /* a batch job is in flight: skip the next tick */
    char mark[64];     /* database time of the last scan; "" before the first */
    /* key ids used since the last batch: open addressing, "" is empty */
    char (*used)[KEYS_ID_MAX + 1];
    size_t nused;
    struct auth_grant *grants; /* live grants of the public bridge */
    keys_revocation_fn revocation_fn;
    void *revocation_arg;
    auth_session_fn session_fn; /* console sessions (hub/sessions.c) */
    void *session_arg;
};

struct auth_grant {
    struct auth_ctx *a; /* NULL once the context is freed */
    struct auth_grant *prev, *next;
    struct keys_principal p;
};

/* --- error answers ----------------------------------------------------------------- */

void auth_respond_api_error(struct http_exchange *ex, int status, const char *code, const char *fmt,
                            ...)
{
    char msg[512];
    va_list ap;
    json_t *body;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    body = json_pack("{s:s,s:s}", "error", msg, "errorCode", code);
    if (body == NULL) {
        http_respond_error(ex, status, "%s", msg);
        return;
    }
    http_respond_json(ex, status, body);
}

static void respond(struct http_exchange *ex, enum auth_surface s, int status, const char *code,
                    const char *msg)
{
    if (s == AUTH_SURFACE_API)
        auth_respond_api_error(ex, status, code, "%s", msg);
    else
        http_respond_error(ex, status, "%s", msg);
}

void auth_respond_db_error(struct auth_ctx *a, struct http_exchange *ex, enum auth_surface s,
                           int status, const char *err)
{
    char why[256], msg[400];

    if (status == AB_EBUSY) {
        snprintf(msg, sizeof(msg),
                 "database unavailable: %zu jobs queued, the limit; retry shortly",
                 db_pool_pending(a->db));
    } else if (status == AB_ECLOSED) {
        snprintf(msg, sizeof(msg), "database unavailable: the hub is shutting down");
    } else {
        if (err != NULL && err[0] != '\0')
            ab_strlcpy(why, err, sizeof(why));
        else
            db_pool_last_error(a->db, why, sizeof(why));
        if (why[0] == '\0')
            ab_strlcpy(why, ab_strerror(status), sizeof(why));
        snprintf(msg, sizeof(msg), "database unavailable: %s", why);
    }
    respond(ex, s, 503, "UNAVAILABLE", msg);
}

/* --- key-use set --------------------------------------------------------------------- */

static size_t slot_of(const char *id)
{
    size_t h = 5381;

    while (*id != '\0')
        h = h * 33 + (unsigned char)*id++;
    return h % AUTH_USED_MAX;
}

void auth_mark_used(struct auth_ctx *a, const char *key_id)
{
    size_t i = slot_of(key_id), n;

    if (key_id[0] == '\0')
        return; /* the configured admin key (an asserted principal may name it) has no row */

    if (a->nused >= AUTH_USED_MAX * 3 / 4)
        return; /* full until the next batch: last_used_at is advisory */
    for (n = 0; n < AUTH_USED_MAX; n++, i = (i + 1) % AUTH_USED_MAX) {
        if (a->used[i][0] == '\0') {
            ab_strlcpy(a->used[i], key_id, KEYS_ID_MAX + 1);
            a->nused++;
            return;
        }
        if (strcmp(a->used[i], key_id) == 0)
            return;
    }
}

/* --- periodic batch: last_used_at and the revocation scan ----------------------------- */

struct revoked_row {
    char id[KEYS_ID_MAX + 1];
    char hash[KEYS_HASH_LEN + 1];
    char reason[8];
};

struct tick_job {
    struct auth_ctx *a;
    char **ids;
    size_t nids;
    char mark_in[64];
    char mark_out[64];
    struct revoked_row *rows;
    size_t nrows;
    char err[256];
};

static int tick_job_run(PGconn *c, void *arg)
{
    struct tick_job *j = arg;
    const char *vals[2];
    PGresult *r;
    int rc = 0, i;

    if (j->nids > 0)
        rc = keys_touch_conn(c, (const char *const *)j->ids, j->nids, j->err, sizeof(j->err));
    r = PQexec(c, "SELECT statement_timestamp()::text");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        db_error_line(c, r, j->err, sizeof(j->err));
        PQclear(r);
        return AB_EIO;
    }
    ab_strlcpy(j->mark_out, PQgetvalue(r, 0, 0), sizeof(j->mark_out));
    PQclear(r);
    if (j->mark_in[0] == '\0')
        return rc;
    vals[0] = j->mark_in;
    vals[1] = j->mark_out;
    r = PQexecParams(c,
                     "SELECT id, hash, CASE WHEN revoked_at IS NOT NULL THEN 'revoked' ELSE "
                     "'expired' END FROM api_keys WHERE "
                     "(revoked_at > $1::timestamptz - interval '" SCAN_OVERLAP "' AND "
                     "revoked_at <= $2::timestamptz) OR "
                     "(expires_at > $1::timestamptz AND expires_at <= $2::timestamptz) "
                     "ORDER BY id LIMIT 1000",
                     2, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        db_error_line(c, r, j->err, sizeof(j->err));
        PQclear(r);
        return AB_EIO;
    }
    j->nrows = (size_t)PQntuples(r);
    j->rows = calloc(j->nrows ? j->nrows : 1, sizeof(*j->rows));
    if (j->rows == NULL) {
        j->nrows = 0;
        PQclear(r);
        return AB_ENOMEM;
    }
    for (i = 0; i < (int)j->nrows; i++) {
        ab_strlcpy(j->rows[i].id, PQgetvalue(r, i, 0), sizeof(j->rows[i].id));
        ab_strlcpy(j->rows[i].hash, PQgetvalue(r, i, 1), sizeof(j->rows[i].hash));
        ab_strlcpy(j->rows[i].reason, PQgetvalue(r, i, 2), sizeof(j->rows[i].reason));
    }
    PQclear(r);
    return rc;
}

static void tick_job_free(struct tick_job *j)
{
    size_t i;

    for (i = 0; i < j->nids; i++)
        free(j->ids[i]);
    free(j->ids);
    free(j->rows);
    free(j);
}

static void tick_job_done(void *arg, int status)
{
    struct tick_job *j = arg;
    struct auth_ctx *a = j->a;
    size_t i;

    a->tick_running = false;
    if (status == AB_ECLOSED) {
        tick_job_free(j);
        return;
    }
    if (status != 0)
        LOG_WARN("api key batch failed", "error", j->err[0] != '\0' ? j->err : ab_strerror(status));
    if (j->mark_out[0] != '\0')
        ab_strlcpy(a->mark, j->mark_out, sizeof(a->mark));
    for (i = 0; i < j->nrows; i++) {
        LOG_INFO("api key no longer valid", "key_id", j->rows[i].id, "reason", j->rows[i].reason);
        auth_notify_revoked(a, j->rows[i].id, j->rows[i].hash, j->rows[i].reason);
    }
    tick_job_free(j);
}

static void on_tick(struct loop_timer *t)
{
    struct auth_ctx *a = t->arg;
    struct tick_job *j;
    size_t i, k = 0;

    loop_timer_start(a->loop, &a->tick, a->interval_ms, on_tick, a);
    if (a->tick_running)
        return;
    j = calloc(1, sizeof(*j));
    if (j == NULL)
        return;
    j->a = a;
    ab_strlcpy(j->mark_in, a->mark, sizeof(j->mark_in));
    if (a->nused > 0) {
        j->ids = calloc(a->nused, sizeof(*j->ids));
        for (i = 0; j->ids != NULL && i < AUTH_USED_MAX && k < a->nused; i++) {
            if (a->used[i][0] == '\0')
                continue;
            j->ids[k] = strdup(a->used[i]);
            if (j->ids[k] != NULL)
                k++;
        }
        j->nids = k;
    }
    if (db_submit(a->db, tick_job_run, tick_job_done, j) != 0) {
        tick_job_free(j); /* database down: keep the set for the next tick */
        return;
    }
    a->tick_running = true;
    memset(a->used, 0, AUTH_USED_MAX * sizeof(*a->used));
    a->nused = 0;
}

/* --- context ------------------------------------------------------------------------ */

int auth_new(const struct auth_options *o, struct auth_ctx **out, char *err, size_t errlen)
{
    struct auth_ctx *a = calloc(1, sizeof(*a));
    int rc;

    *out = NULL;
    if (a == NULL) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    a->used = calloc(AUTH_USED_MAX, sizeof(*a->used));
    if (a->used == NULL) {
        snprintf(err, errlen, "out of memory");
        free(a);
        return AB_ENOMEM;
    }
    rc = vault_keyring_init(&a->kr, o->hub_secret, o->hub_secret_len, NULL, 0, err, errlen);
    if (rc != 0) {
        free(a->used);
        free(a);
        return rc;
    }
    if (asrt_signer_from_secret(o->hub_secret, o->hub_secret_len, &a->signer) != 0 ||
        (a->asrt_kr = asrt_keyring_new("hub")) == NULL) {
        snprintf(err, errlen, "cannot derive the assertion signing key from the hub secret");
        asrt_signer_free(a->signer);
        vault_keyring_clear(&a->kr);
        free(a->used);
        free(a);
        return AB_ENOMEM;
    }
    char pub[ASRT_PUBKEY_TEXT_MAX + 1], kerr[128];
    if (asrt_signer_public_text(a->signer, pub, sizeof(pub)) != 0 ||
        asrt_keyring_add(a->asrt_kr, pub, kerr, sizeof(kerr)) != 0) {
        snprintf(err, errlen, "cannot publish the assertion key");
        asrt_keyring_free(a->asrt_kr);
        asrt_signer_free(a->signer);
        vault_keyring_clear(&a->kr);
        free(a->used);
        free(a);
        return AB_EINVAL;
    }
    a->loop = o->loop;
    a->db = o->db;
    a->interval_ms = o->scan_interval_ms > 0 ? o->scan_interval_ms : AUTH_SCAN_INTERVAL_MS;
    /* the first tick sets the scan mark soon after start */
    loop_timer_start(a->loop, &a->tick, 100, on_tick, a);
    *out = a;
    return 0;
}

void auth_free(struct auth_ctx *a)
{
    if (a == NULL)
        return;
    loop_timer_cancel(&a->tick);
    for (struct auth_grant *g = a->grants; g != NULL; g = g->next)
        g->a = NULL; /* a late auth_grant_free only frees the grant */
    vault_keyring_clear(&a->kr);
    asrt_keyring_free(a->asrt_kr);
    asrt_signer_free(a->signer);
    free(a->used);
    free(a);
}

void auth_set_session_hook(struct auth_ctx *a, auth_session_fn fn, void *arg)
{
    a->session_fn = fn;
    a->session_arg = arg;
}

void auth_set_revocation_hook(struct auth_ctx *a, keys_revocation_fn fn, void *arg)
{
    a->revocation_fn = fn;
    a->revocation_arg = arg;
}

void auth_notify_revoked(struct auth_ctx *a, const char *key_id, const char *hash,
                         const char *reason)
{
    /* the hub refuses assertions for the key too: a replay over a bridge or a relay */
    if (key_id != NULL && key_id[0] != '\0' &&
        asrt_keyring_revoke(a->asrt_kr, key_id, (int64_t)time(NULL)) != 0)
        LOG_WARN("cannot record a revoked key id", "key_id", key_id);
    if (a->revocation_fn != NULL)
        a->revocation_fn(a->revocation_arg, key_id, hash, reason);
}

const struct vault_keyring *auth_keyring(const struct auth_ctx *a)
{
    return &a->kr;
}

struct db_pool *auth_db(const struct auth_ctx *a)
{
    return a->db;
}

/* --- assertions ---------------------------------------------------------------------- */

int auth_sign_for(const struct auth_ctx *a, const struct keys_principal *p, const char *aud,
                  const char *rid, char *out, size_t outlen, char *err, size_t errlen)
{
    struct asrt_claims c;
    int64_t now = (int64_t)time(NULL); /* wall clock: the agents compare exp with theirs */
    int rc;

    memset(&c, 0, sizeof(c));
    ab_strlcpy(c.key, p->key_id, sizeof(c.key));
    ab_strlcpy(c.team, p->team, sizeof(c.team));
    ab_strlcpy(c.user, p->user, sizeof(c.user));
    ab_strlcpy(c.ns, p->namespace, sizeof(c.ns));
    ab_strlcpy(c.role, keys_role_name(p->role), sizeof(c.role));
    ab_strlcpy(c.mode, keys_mode_name(p->mode), sizeof(c.mode));
    ab_strlcpy(c.aud, aud, sizeof(c.aud));
    if (rid != NULL && rid[0] != '\0') {
        ab_strlcpy(c.rid, rid, sizeof(c.rid));
    } else {
        uint8_t r[8];
        if (crypto_random(r, sizeof(r)) != 0) {
            snprintf(err, errlen, "no randomness for a request id");
            return AB_EIO;
        }
        hex_encode(r, sizeof(r), c.rid);
    }
    c.iat = now;
    c.exp = now + ASRT_LIFETIME_MAX_S;
    rc = asrt_sign(a->signer, &c, out, outlen, err, errlen);
    OPENSSL_cleanse(&c, sizeof(c));
    return rc;
}

int auth_verify_from(const struct auth_ctx *a, const char *cluster, const char *token,
                     struct keys_principal *p, char *rid, char *err, size_t errlen)
{
    struct asrt_claims c;
    int rc = asrt_verify_for(a->asrt_kr, cluster, token, strlen(token), (int64_t)time(NULL), &c,
                             err, errlen);
    if (rc != 0)
        return rc;
    memset(p, 0, sizeof(*p));
    ab_strlcpy(p->key_id, c.key, sizeof(p->key_id));
    ab_strlcpy(p->team, c.team, sizeof(p->team));
    ab_strlcpy(p->user, c.user, sizeof(p->user));
    ab_strlcpy(p->namespace, c.ns, sizeof(p->namespace));
    p->role = strcmp(c.role, "admin") == 0 ? KEYS_ROLE_ADMIN : KEYS_ROLE_TENANT;
    p->mode = strcmp(c.mode, "agent") == 0 ? KEYS_MODE_AGENT : KEYS_MODE_UNRESTRICTED;
    if (rid != NULL)
        ab_strlcpy(rid, c.rid, ASRT_RID_MAX + 1);
    return 0;
}

json_t *auth_assertion_keys_json(const struct auth_ctx *a)
{
    char pub[ASRT_PUBKEY_TEXT_MAX + 1];
    json_t *arr = json_array();

    if (arr != NULL && asrt_signer_public_text(a->signer, pub, sizeof(pub)) == 0)
        json_array_append_new(arr, json_string(pub));
    return arr;
}

/* --- lookups ------------------------------------------------------------------------- */

struct lookup {
    struct auth_ctx *a;
    char hash[KEYS_HASH_LEN + 1];
    enum keys_status ks;
    struct keys_principal p;
    char when[KEYS_TIME_MAX];
    char err[256];
    /* a request */
    struct http_exchange *ex;
    enum auth_surface surface;
    auth_ok_fn ok;
    /* or a tunnel validation */
    auth_validate_fn cb;
    void *arg;
};

static int lookup_job(PGconn *c, void *arg)
{
    struct lookup *l = arg;

    return keys_lookup_conn(c, l->hash, &l->ks, &l->p, l->when, l->err, sizeof(l->err));
}

static void request_done(void *arg, int status)
{
    struct lookup *l = arg;
    char msg[300];

    if (status != 0) {
        auth_respond_db_error(l->a, l->ex, l->surface, status, l->err);
    } else if (l->ks == KEYS_VALID) {
        auth_mark_used(l->a, l->p.key_id);
        l->ok(l->ex, &l->p, l->arg);
    } else {
        if (l->ks == KEYS_REVOKED)
            snprintf(msg, sizeof(msg),
                     "invalid api key: this key was revoked at %s; ask an admin or use another "
                     "key",
                     l->when);
        else if (l->ks == KEYS_EXPIRED)
            snprintf(msg, sizeof(msg), "invalid api key: this key expired at %s; create a new key",
                     l->when);
        else
            snprintf(msg, sizeof(msg),
                     "invalid api key: no such key; create one with `agentbox-hub key create` "
                     "or POST /api/v1/api-keys");
        respond(l->ex, l->surface, 401, "UNAUTHENTICATED", msg);
    }
    OPENSSL_cleanse(l, sizeof(*l));
    free(l);
}

/* Copies the trimmed value into out; false when absent or empty. */
static bool take(const char *v, char *out, size_t cap)
{
    size_t n;

    if (v == NULL)
        return false;
    while (*v == ' ' || *v == '\t')
        v++;
    n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n == 0)
        return false;
    if (n >= cap)
        n = cap - 1; /* too long: stays malformed */
    memcpy(out, v, n);
    out[n] = '\0';
    return true;
}

static bool take_bearer(const char *v, char *out, size_t cap)
{
    if (v == NULL)
        return false;
    while (*v == ' ')
        v++;
    if (strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    return take(v + 7, out, cap);
}

static bool credential(const struct http_request *r, enum auth_surface s, char *out, size_t cap)
{
    if (s == AUTH_SURFACE_E2B)
        return take(http_header_get(r, "X-API-Key"), out, cap) ||
               take(http_header_get(r, "AGENTBOX-API-KEY"), out, cap) ||
               take_bearer(http_header_get(r, "Authorization"), out, cap);
    return take_bearer(http_header_get(r, "Authorization"), out, cap) ||
           take(http_header_get(r, "AGENTBOX-API-KEY"), out, cap);
}

/* --- grants of the public bridge ------------------------------------------------------ */

struct auth_grant *auth_grant_new(struct auth_ctx *a, const struct keys_principal *p)
{
    struct auth_grant *g = calloc(1, sizeof(*g));

    if (g == NULL)
        return NULL;
    g->a = a;
    g->p = *p;
    g->next = a->grants;
    if (a->grants != NULL)
        a->grants->prev = g;
    a->grants = g;
    return g;
}

void auth_grant_free(struct auth_grant *g)
{
    if (g == NULL)
        return;
    if (g->a != NULL) {
        if (g->prev != NULL)
            g->prev->next = g->next;
        else
            g->a->grants = g->next;
        if (g->next != NULL)
            g->next->prev = g->prev;
    }
    OPENSSL_cleanse(g, sizeof(*g));
    free(g);
}

/* The live grant of a that td is, or NULL (td is compared, never followed). */
static const struct auth_grant *grant_of(const struct auth_ctx *a, const void *td)
{
    if (td == NULL)
        return NULL;
    for (const struct auth_grant *g = a->grants; g != NULL; g = g->next)
        if ((const void *)g == td)
            return g;
    return NULL;
}

bool auth_request_is_bridged(const struct auth_ctx *a, struct http_exchange *ex)
{
    return grant_of(a, http_req(ex)->transport_data) != NULL;
}

void auth_request(struct auth_ctx *a, struct http_exchange *ex, enum auth_surface s, auth_ok_fn ok,
                  void *arg)
{
    char token[KEYS_TOKEN_LEN + 2];
    struct lookup *l;
    int rc;
    const struct auth_grant *g = grant_of(a, http_req(ex)->transport_data);

    if (g != NULL) {
        struct keys_principal p = g->p;
        auth_mark_used(a, p.key_id);
        ok(ex, &p, arg);
        OPENSSL_cleanse(&p, sizeof(p));
        return;
    }
    if (a->session_fn != NULL && a->session_fn(a->session_arg, ex, s, ok, arg))
        return;
    if (!credential(http_req(ex), s, token, sizeof(token))) {
        respond(ex, s, 401, "UNAUTHENTICATED",
                s == AUTH_SURFACE_E2B
                    ? "missing api key: send X-API-Key: agbx_… (the E2B SDK sends E2B_API_KEY)"
                    : "missing api key: send Authorization: Bearer agbx_… or AGENTBOX-API-KEY: "
                      "agbx_…");
        return;
    }
    if (!keys_token_is_wellformed(token)) {
        OPENSSL_cleanse(token, sizeof(token));
        respond(ex, s, 401, "UNAUTHENTICATED",
                "invalid api key: expected agbx_ followed by 64 lowercase hex characters");
        return;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        OPENSSL_cleanse(token, sizeof(token));
        respond(ex, s, 503, "UNAVAILABLE", "out of memory");
        return;
    }
    keys_token_hash(token, l->hash);
    OPENSSL_cleanse(token, sizeof(token));
    l->a = a;
    l->ex = ex;
    l->surface = s;
    l->ok = ok;
    l->arg = arg;
    rc = db_submit(a->db, lookup_job, request_done, l);
    if (rc != 0) {
        free(l);
        auth_respond_db_error(a, ex, s, rc, NULL);
    }
}

static void validate_done(void *arg, int status)
{
    struct lookup *l = arg;

    if (status != 0)
        l->cb(l->arg, status, KEYS_UNKNOWN, NULL);
    else if (l->ks == KEYS_VALID)
        l->cb(l->arg, 0, KEYS_VALID, &l->p);
    else
        l->cb(l->arg, 0, l->ks, NULL);
    free(l);
}

int auth_validate_hash(struct auth_ctx *a, const char *hash, auth_validate_fn cb, void *arg)
{
    struct lookup *l;
    int rc;

    if (!keys_hash_is_wellformed(hash))
        return AB_EINVAL;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return AB_ENOMEM;
    ab_strlcpy(l->hash, hash, sizeof(l->hash));
    l->a = a;
    l->cb = cb;
    l->arg = arg;
    rc = db_submit(a->db, lookup_job, validate_done, l);
    if (rc != 0)
        free(l);
    return rc;
}

/* --- tunnel-only routes ------------------------------------------------------------------- */

struct validate_req {
    struct auth_ctx *a;
    struct http_exchange *ex;
    char cluster[AB_CLUSTER_ID_BUF]; /* the asking tunnel's: the assertion's audience */
};

json_t *auth_principal_json(const struct keys_principal *p)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:o}", "keyId", p->key_id, "name", p->name,
                     "team", p->team, "user", p->user, "namespace", p->namespace, "role",
                     keys_role_name(p->role), "mode", keys_mode_name(p->mode), "expiresAt",
                     p->expires_at[0] != '\0' ? json_string(p->expires_at) : json_null());
}

static void validate_route_done(void *arg, int status, enum keys_status ks,
                                const struct keys_principal *p)
{
    struct validate_req *v = arg;

    char tok[ASRT_TOKEN_MAX + 1], err[256];

    if (status != 0) {
        auth_respond_db_error(v->a, v->ex, AUTH_SURFACE_E2B, status, NULL);
    } else if (ks == KEYS_VALID) {
        /* the principal plus its assertion for the asking cluster: what the
         * agent presents on every later hop instead of the key or its hash */
        if (auth_sign_for(v->a, p, v->cluster, NULL, tok, sizeof(tok), err, sizeof(err)) != 0) {
            LOG_WARN("cannot sign an assertion", "cluster", v->cluster, "error", err);
            http_respond_error(v->ex, 500, "cannot sign an assertion for cluster '%s': %s",
                               v->cluster, err);
        } else {
            http_respond_json(v->ex, 200,
                              json_pack("{s:b,s:o,s:s}", "valid", 1, "principal",
                                        auth_principal_json(p), "assertion", tok));
        }
        OPENSSL_cleanse(tok, sizeof(tok));
    } else
        http_respond_json(v->ex, 200,
                          json_pack("{s:b,s:s}", "valid", 0, "reason", keys_status_name(ks)));
    free(v);
}

/* POST /internal/v1/keys/validate {"hash": "<sha256 hex>"} → 200 {valid, principal | reason}.
 * On the internal router only: reached by agents over their tunnel, never
 * from a socket (the public listener answers 404). */
static void validate_route(struct http_exchange *ex, void *arg)
{
    struct auth_ctx *a = arg;
    const struct http_request *r = http_req(ex);
    const char *hash = NULL;
    struct validate_req *v;
    char err[256];
    json_t *body;
    int rc;

    body = json_parse_object(r->body, r->body_len, 4096, err, sizeof(err));
    if (body == NULL ||
        json_get_str(body, "hash", true, KEYS_HASH_LEN, &hash, err, sizeof(err)) != 0) {
        http_respond_error(ex, 400, "%s", err);
        json_decref(body);
        return;
    }
    v = calloc(1, sizeof(*v));
    if (v == NULL) {
        json_decref(body);
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    v->a = a;
    v->ex = ex;
    ab_strlcpy(v->cluster, r->transport_data != NULL ? (const char *)r->transport_data : "",
               sizeof(v->cluster));
    rc = auth_validate_hash(a, hash, validate_route_done, v);
    json_decref(body);
    if (rc == AB_EINVAL) {
        free(v);
        http_respond_error(ex, 400,
                           "field 'hash' must be 64 lowercase hex characters (SHA-256 "
                           "of the key)");
    } else if (rc != 0) {
        free(v);
        auth_respond_db_error(a, ex, AUTH_SURFACE_E2B, rc, NULL);
    }
}

/* --- wiring -------------------------------------------------------------------------------- */

int auth_add_internal_routes(struct hub *h, struct auth_ctx *a, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"POST", "/internal/v1/keys/validate", validate_route, a, 0},
    };
    return hub_add_internal_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
