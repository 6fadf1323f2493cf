/* Request authentication, key-use batching, the revocation scan and the
 * internal key validation route. Loop thread, except the *_job functions
 * (database workers). */
#include "hub/auth.h"

#include <inttypes.h>
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
#include "agentbox/metrics.h"
#include "hub/db.h"
#include "hub/hub.h"
#include "hub/signing_keys.h"
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
    /* key churn of the current minute: open addressing on "team/user", "" empty */
    struct churn {
        char who[IAM_TEAM_MAX + IAM_USER_MAX + 2];
        int n;
        int64_t start_ms; /* the user's window: one minute from its first change */
    } * churn;
    /* assertions verified on this loop (agents' assertions come back the
     * same bytes for minutes: bridge, relay, claim events) */
    struct asrt_cache *vcache;
    /* assertions signed per (principal, audience), reused until half their
     * lifetime: a forward costs no signature (and the target's verify hits
     * its cache) while the caller keeps forwarding */
    struct signed_entry *scache;
    /* create credits: how many creates the hub forwarded to a cluster under
     * an assertion's rid, each good for one claim row (sandbox_events.c) */
    struct credit *credits;
    /* the signing key generations (hub/signing_keys.h): derived from this
     * copy of the hub secret; pub: their public texts, current first */
    char *secret;
    size_t secret_len;
    struct signing_set set;
    char pub[2][ASRT_PUBKEY_TEXT_MAX + 1];
    size_t npub;
    /* Ed25519 work per kind: op=sign|verify (a full verification)|verify_cached */
    struct metric_family *m_asrt;
    auth_keys_fn keys_fn;
    void *keys_arg;
    keys_revocation_fn revocation_fn;
    void *revocation_arg;
};

#define SCACHE_SLOTS 512
#define CREDIT_SLOTS 16384

struct signed_entry {
    bool used;
    char key_id[KEYS_ID_MAX + 1];
    char team[IAM_TEAM_MAX + 1];
    char user[IAM_USER_MAX + 1];
    char ns[IAM_NAMESPACE_MAX + 1];
    enum keys_role role;
    enum keys_mode mode;
    char aud[AB_CLUSTER_ID_BUF];
    char rid[ASRT_RID_MAX + 1];
    int64_t iat;
    char tok[ASRT_TOKEN_MAX + 1];
};

struct credit {
    char aud[AB_CLUSTER_ID_BUF]; /* "" never used */
    char rid[ASRT_RID_MAX + 1];
    int n;
    int64_t until_s; /* the assertion's exp + skew: no claim can present it later */
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

int auth_key_churn(struct auth_ctx *a, const struct keys_principal *p, char *err, size_t errlen)
{
    char who[sizeof(a->churn[0].who)];
    int64_t now = ab_now_ms();
    struct churn *found = NULL, *room = NULL;
    size_t h = 5381;

    if (p->role == KEYS_ROLE_ADMIN)
        return 0;
    snprintf(who, sizeof(who), "%s/%s", p->team, p->user);
    for (const char *q = who; *q != '\0'; q++)
        h = h * 33 + (unsigned char)*q;
    /* Open addressing; a slot whose minute is over is free for anyone, but
     * only an empty slot ends a chain (slots are overwritten, never emptied). */
    for (size_t i = 0; i < AUTH_KEY_CHURN_USERS; i++) {
        struct churn *c = &a->churn[(h + i) % AUTH_KEY_CHURN_USERS];
        if (c->who[0] == '\0') {
            if (room == NULL)
                room = c;
            break;
        }
        if (strcmp(c->who, who) == 0) {
            found = c;
            break;
        }
        if (room == NULL && now - c->start_ms >= 60000)
            room = c;
    }
    if (found == NULL && room == NULL) {
        /* more users changing keys within a minute than tracked: refuse
         * rather than let churn through uncounted */
        snprintf(err, errlen,
                 "too many API key changes: more than %d users changed keys within a minute; "
                 "retry in a minute",
                 AUTH_KEY_CHURN_USERS);
        return AB_ELIMIT;
    }
    if (found == NULL) {
        found = room;
        ab_strlcpy(found->who, who, sizeof(found->who));
        found->n = 0;
        found->start_ms = now;
    } else if (now - found->start_ms >= 60000) {
        found->n = 0; /* a window per user, from its first change: no boundary to game */
        found->start_ms = now;
    }
    if (found->n >= AUTH_KEY_CHURN_PER_MIN) {
        snprintf(err, errlen,
                 "too many API key changes: at most %d creates and revokes per user per minute; "
                 "retry in %" PRId64 " s",
                 AUTH_KEY_CHURN_PER_MIN, (60000 - (now - found->start_ms)) / 1000 + 1);
        return AB_ELIMIT;
    }
    found->n++;
    return 0;
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
    struct signing_set set;
    bool set_ok;
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
    {
        /* a rotation by the CLI or another hub: picked up here */
        char serr[256];
        j->set_ok = signing_keys_load_conn(c, &j->set, serr, sizeof(serr)) == 0;
        if (!j->set_ok)
            LOG_WARN("cannot read the signing key generations", "error", serr);
    }
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

/* Switches signer and published keys to set (a no-op when unchanged): the
 * hub's own keyring takes current and previous at once (assertions the
 * previous key signed keep verifying, a retired key's are refused), signed
 * assertions cached under the old key go, and the hook tells the agents. */
static int apply_set(struct auth_ctx *a, const struct signing_set *set, char *err, size_t errlen)
{
    struct asrt_signer *cur = NULL, *prev = NULL;
    char texts[2][ASRT_PUBKEY_TEXT_MAX + 1];
    const char *tp[2] = {texts[0], texts[1]};
    size_t n = 1;
    int rc;

    if (set->current == a->set.current && set->previous == a->set.previous)
        return 0;
    rc = asrt_signer_from_secret_gen(a->secret, a->secret_len, set->current, &cur);
    if (rc == 0)
        rc = asrt_signer_public_text(cur, texts[0], sizeof(texts[0]));
    if (rc == 0 && set->previous >= 0) {
        rc = asrt_signer_from_secret_gen(a->secret, a->secret_len, set->previous, &prev);
        if (rc == 0)
            rc = asrt_signer_public_text(prev, texts[1], sizeof(texts[1]));
        n = 2;
        asrt_signer_free(prev);
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot derive signing key generation %d: %s", set->current,
                 ab_strerror(rc));
        asrt_signer_free(cur);
        return rc;
    }
    rc = asrt_keyring_replace(a->asrt_kr, tp, n, err, errlen);
    if (rc != 0) {
        asrt_signer_free(cur);
        return rc;
    }
    asrt_signer_free(a->signer);
    a->signer = cur;
    a->set = *set;
    memcpy(a->pub, texts, sizeof(texts));
    a->npub = n;
    OPENSSL_cleanse(a->scache, SCACHE_SLOTS * sizeof(*a->scache));
    {
        char g[16];
        snprintf(g, sizeof(g), "%d", set->current);
        LOG_INFO("assertion signing key changed", "generation", g, "kid", asrt_signer_kid(cur));
    }
    if (a->keys_fn != NULL) {
        json_t *keys = auth_assertion_keys_json(a);
        if (keys != NULL)
            a->keys_fn(a->keys_arg, keys);
        json_decref(keys);
    }
    return 0;
}

int auth_set_signing(struct auth_ctx *a, const struct signing_set *set, char *err, size_t errlen)
{
    return apply_set(a, set, err, errlen);
}

void auth_set_keys_hook(struct auth_ctx *a, auth_keys_fn fn, void *arg)
{
    a->keys_fn = fn;
    a->keys_arg = arg;
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
    if (j->set_ok) {
        char err[256];
        if (apply_set(a, &j->set, err, sizeof(err)) != 0)
            LOG_WARN("cannot switch the assertion signing keys", "error", err);
    }
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

static void free_caches(struct auth_ctx *a)
{
    if (a->secret != NULL) {
        OPENSSL_cleanse(a->secret, a->secret_len);
        free(a->secret);
        a->secret = NULL;
    }
    free(a->used);
    free(a->churn);
    asrt_cache_free(a->vcache);
    if (a->scache != NULL)
        OPENSSL_cleanse(a->scache, SCACHE_SLOTS * sizeof(*a->scache));
    free(a->scache);
    free(a->credits);
}

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
    a->churn = calloc(AUTH_KEY_CHURN_USERS, sizeof(*a->churn));
    a->vcache = asrt_cache_new(ASRT_CACHE_SLOTS);
    a->scache = calloc(SCACHE_SLOTS, sizeof(*a->scache));
    a->credits = calloc(CREDIT_SLOTS, sizeof(*a->credits));
    if (a->used == NULL || a->churn == NULL || a->vcache == NULL || a->scache == NULL ||
        a->credits == NULL) {
        snprintf(err, errlen, "out of memory");
        free_caches(a);
        free(a);
        return AB_ENOMEM;
    }
    rc = vault_keyring_init(&a->kr, o->hub_secret, o->hub_secret_len, NULL, 0, err, errlen);
    if (rc != 0) {
        free_caches(a);
        free(a);
        return rc;
    }
    if (asrt_signer_from_secret(o->hub_secret, o->hub_secret_len, &a->signer) != 0 ||
        (a->asrt_kr = asrt_keyring_new("hub")) == NULL) {
        snprintf(err, errlen, "cannot derive the assertion signing key from the hub secret");
        asrt_signer_free(a->signer);
        vault_keyring_clear(&a->kr);
        free_caches(a);
        free(a);
        return AB_ENOMEM;
    }
    char kerr[128];
    a->secret = malloc(o->hub_secret_len);
    if (a->secret != NULL) {
        memcpy(a->secret, o->hub_secret, o->hub_secret_len);
        a->secret_len = o->hub_secret_len;
    }
    /* generation 0 until the first tick reads signing_keys (100 ms after start) */
    a->set.current = 0;
    a->set.previous = -1;
    a->npub = 1;
    if (a->secret == NULL ||
        asrt_signer_public_text(a->signer, a->pub[0], sizeof(a->pub[0])) != 0 ||
        asrt_keyring_add(a->asrt_kr, a->pub[0], kerr, sizeof(kerr)) != 0) {
        snprintf(err, errlen, "cannot publish the assertion key");
        asrt_keyring_free(a->asrt_kr);
        asrt_signer_free(a->signer);
        vault_keyring_clear(&a->kr);
        free_caches(a);
        free(a);
        return AB_EINVAL;
    }
    {
        static const char *const labels[] = {"op", NULL};
        a->m_asrt = metrics_register(
            metrics_default(), "agentbox_hub_assertion_ops_total",
            "Principal assertion work on the hub: sign, verify (full, Ed25519) and "
            "verify_cached (a token verified before: no Ed25519).",
            METRIC_COUNTER, labels, NULL, 0);
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
    free_caches(a);
    free(a);
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
    if (key_id != NULL && key_id[0] != '\0') {
        int rc = asrt_keyring_revoke(a->asrt_kr, key_id, (int64_t)time(NULL));
        if (rc == 1)
            LOG_WARN("revoked key ids overflow one bucket: its keys' assertions are refused "
                     "for a lifetime",
                     "key_id", key_id);
        else if (rc != 0)
            LOG_WARN("cannot record a revoked key id", "key_id", key_id);
    }
    for (size_t i = 0; key_id != NULL && key_id[0] != '\0' && i < SCACHE_SLOTS; i++) {
        if (a->scache[i].used && strcmp(a->scache[i].key_id, key_id) == 0)
            OPENSSL_cleanse(&a->scache[i], sizeof(a->scache[i]));
    }
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

/* rid as given, except that a rid with a claim-capable prefix is never
 * copied into a new assertion: a relayed validation rid would otherwise let
 * the target cluster record claims (auth_claim_allowed). */
static void take_rid(const char *rid, char out[ASRT_RID_MAX + 1])
{
    if (strncmp(rid, AUTH_RID_VALIDATION, sizeof(AUTH_RID_VALIDATION) - 1) == 0)
        snprintf(out, ASRT_RID_MAX + 1, "r.%s", rid);
    else
        ab_strlcpy(out, rid, ASRT_RID_MAX + 1);
}

static void count_op(const struct auth_ctx *a, const char *op)
{
    const char *v[] = {op};
    if (a->m_asrt != NULL)
        metrics_add(a->m_asrt, v, 1);
}

static int sign(const struct auth_ctx *a, const struct keys_principal *p, const char *aud,
                const char *rid, int64_t now, char *out, size_t outlen, char *err, size_t errlen)
{
    struct asrt_claims c;
    int rc;

    memset(&c, 0, sizeof(c));
    ab_strlcpy(c.key, p->key_id, sizeof(c.key));
    ab_strlcpy(c.team, p->team, sizeof(c.team));
    ab_strlcpy(c.user, p->user, sizeof(c.user));
    ab_strlcpy(c.ns, p->namespace, sizeof(c.ns));
    ab_strlcpy(c.role, keys_role_name(p->role), sizeof(c.role));
    ab_strlcpy(c.mode, keys_mode_name(p->mode), sizeof(c.mode));
    ab_strlcpy(c.aud, aud, sizeof(c.aud));
    ab_strlcpy(c.rid, rid, sizeof(c.rid));
    c.iat = now;
    c.exp = now + ASRT_LIFETIME_MAX_S;
    rc = asrt_sign(a->signer, &c, out, outlen, err, errlen);
    OPENSSL_cleanse(&c, sizeof(c));
    count_op(a, "sign");
    return rc;
}

static int fresh_rid(const char *prefix, char out[ASRT_RID_MAX + 1], char *err, size_t errlen)
{
    uint8_t r[8];
    char hex[2 * sizeof(r) + 1];

    if (crypto_random(r, sizeof(r)) != 0) {
        snprintf(err, errlen, "no randomness for a request id");
        return AB_EIO;
    }
    hex_encode(r, sizeof(r), hex);
    snprintf(out, ASRT_RID_MAX + 1, "%s%s", prefix, hex);
    return 0;
}

int auth_sign_for(const struct auth_ctx *a, const struct keys_principal *p, const char *aud,
                  const char *rid, char *out, size_t outlen, char *err, size_t errlen)
{
    char r[ASRT_RID_MAX + 1];
    int rc = 0;

    if (rid != NULL && rid[0] != '\0')
        take_rid(rid, r);
    else
        rc = fresh_rid("", r, err, errlen);
    if (rc != 0)
        return rc;
    /* wall clock: the agents compare exp with theirs */
    return sign(a, p, aud, r, (int64_t)time(NULL), out, outlen, err, errlen);
}

static bool same_principal(const struct signed_entry *e, const struct keys_principal *p,
                           const char *aud)
{
    return strcmp(e->aud, aud) == 0 && strcmp(e->key_id, p->key_id) == 0 &&
           strcmp(e->team, p->team) == 0 && strcmp(e->user, p->user) == 0 &&
           strcmp(e->ns, p->namespace) == 0 && e->role == p->role && e->mode == p->mode;
}

static size_t principal_slot(const struct keys_principal *p, const char *aud, size_t slots)
{
    char buf[512];
    uint8_t d[CRYPTO_SHA256_LEN];
    int n = snprintf(buf, sizeof(buf), "%s|%s|%s|%s|%d|%d|%s", p->key_id, p->team, p->user,
                     p->namespace, (int)p->role, (int)p->mode, aud);

    crypto_sha256(buf, n > 0 ? AB_MIN((size_t)n, sizeof(buf) - 1) : 0, d);
    return (((size_t)d[0] << 16) | ((size_t)d[1] << 8) | d[2]) % slots;
}

/* One more create forwarded to aud under rid, until until_s. Full table:
 * 0 with the credit not recorded (the claim will be refused, never one
 * accepted that was not forwarded) and a warning. */
static void credit_add(struct auth_ctx *a, const char *aud, const char *rid, int64_t now,
                       int64_t until_s)
{
    struct credit *found = NULL, *room = NULL;
    char key[AB_CLUSTER_ID_BUF + ASRT_RID_MAX + 2];
    uint8_t d[CRYPTO_SHA256_LEN];
    size_t h;
    int n = snprintf(key, sizeof(key), "%s|%s", aud, rid);

    crypto_sha256(key, n > 0 ? (size_t)n : 0, d);
    h = ((size_t)d[0] << 16) | ((size_t)d[1] << 8) | d[2];
    for (size_t i = 0; i < CREDIT_SLOTS; i++) {
        struct credit *c = &a->credits[(h + i) % CREDIT_SLOTS];
        if (c->aud[0] == '\0') {
            if (room == NULL)
                room = c;
            break;
        }
        if (strcmp(c->aud, aud) == 0 && strcmp(c->rid, rid) == 0) {
            found = c;
            break;
        }
        if (room == NULL && (c->n == 0 || now > c->until_s))
            room = c;
    }
    if (found == NULL && room == NULL) {
        LOG_WARN("create credits full: the claim of this forwarded create will be refused",
                 "cluster", aud);
        return;
    }
    if (found == NULL) {
        found = room;
        ab_strlcpy(found->aud, aud, sizeof(found->aud));
        ab_strlcpy(found->rid, rid, sizeof(found->rid));
        found->n = 0;
    } else if (now > found->until_s) {
        found->n = 0;
    }
    found->n++;
    found->until_s = AB_MAX(found->until_s, until_s);
}

int auth_assertion_for(struct auth_ctx *a, const struct keys_principal *p, const char *aud,
                       const char *rid, bool create, char *out, size_t outlen, char *err,
                       size_t errlen)
{
    struct signed_entry *e = &a->scache[principal_slot(p, aud, SCACHE_SLOTS)];
    int64_t now = (int64_t)time(NULL);
    int rc;

    if (!(e->used && same_principal(e, p, aud) && now >= e->iat &&
          now - e->iat < ASRT_LIFETIME_MAX_S / 2)) {
        char r[ASRT_RID_MAX + 1];
        rc = rid != NULL && rid[0] != '\0' ? (take_rid(rid, r), 0) : fresh_rid("", r, err, errlen);
        if (rc == 0)
            rc = sign(a, p, aud, r, now, e->tok, sizeof(e->tok), err, errlen);
        if (rc != 0) {
            e->used = false;
            return rc;
        }
        e->used = true;
        ab_strlcpy(e->key_id, p->key_id, sizeof(e->key_id));
        ab_strlcpy(e->team, p->team, sizeof(e->team));
        ab_strlcpy(e->user, p->user, sizeof(e->user));
        ab_strlcpy(e->ns, p->namespace, sizeof(e->ns));
        e->role = p->role;
        e->mode = p->mode;
        ab_strlcpy(e->aud, aud, sizeof(e->aud));
        ab_strlcpy(e->rid, r, sizeof(e->rid));
        e->iat = now;
    }
    if (strlen(e->tok) + 1 > outlen) {
        snprintf(err, errlen, "assertion needs %zu bytes, the buffer has %zu", strlen(e->tok) + 1,
                 outlen);
        return AB_ELIMIT;
    }
    memcpy(out, e->tok, strlen(e->tok) + 1);
    if (create)
        credit_add(a, aud, e->rid, now, e->iat + ASRT_LIFETIME_MAX_S + ASRT_SKEW_S);
    return 0;
}

bool auth_claim_allowed(struct auth_ctx *a, const char *cluster, const char *rid)
{
    char key[AB_CLUSTER_ID_BUF + ASRT_RID_MAX + 2];
    uint8_t d[CRYPTO_SHA256_LEN];
    int64_t now = (int64_t)time(NULL);
    size_t h;
    int n;

    /* made when this cluster validated a key its client just presented */
    if (strncmp(rid, AUTH_RID_VALIDATION, sizeof(AUTH_RID_VALIDATION) - 1) == 0)
        return true;
    n = snprintf(key, sizeof(key), "%s|%s", cluster, rid);
    crypto_sha256(key, n > 0 ? (size_t)n : 0, d);
    h = ((size_t)d[0] << 16) | ((size_t)d[1] << 8) | d[2];
    for (size_t i = 0; i < CREDIT_SLOTS; i++) {
        struct credit *c = &a->credits[(h + i) % CREDIT_SLOTS];
        if (c->aud[0] == '\0')
            return false;
        if (strcmp(c->aud, cluster) == 0 && strcmp(c->rid, rid) == 0) {
            if (c->n <= 0 || now > c->until_s)
                return false;
            c->n--;
            return true;
        }
    }
    return false;
}

int auth_verify_from(const struct auth_ctx *a, const char *cluster, const char *token,
                     struct keys_principal *p, char *rid, char *err, size_t errlen)
{
    struct asrt_claims c;
    uint64_t hits0, hits1, misses;
    int rc;

    asrt_cache_stats(a->vcache, &hits0, &misses);
    rc = asrt_verify_cached(a->asrt_kr, a->vcache, cluster, token, strlen(token),
                            (int64_t)time(NULL), &c, err, errlen);
    asrt_cache_stats(a->vcache, &hits1, &misses);
    count_op(a, hits1 > hits0 ? "verify_cached" : "verify");
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
    OPENSSL_cleanse(&c, sizeof(c));
    return 0;
}

json_t *auth_assertion_keys_json(const struct auth_ctx *a)
{
    json_t *arr = json_array();

    for (size_t i = 0; arr != NULL && i < a->npub; i++)
        json_array_append_new(arr, json_string(a->pub[i]));
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
        char rid[ASRT_RID_MAX + 1];
        /* a validation rid: this cluster's client just presented its key, so
         * claims it records under this assertion are its client's */
        if (fresh_rid(AUTH_RID_VALIDATION, rid, err, sizeof(err)) != 0 ||
            sign(v->a, p, v->cluster, rid, (int64_t)time(NULL), tok, sizeof(tok), err,
                 sizeof(err)) != 0) {
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
