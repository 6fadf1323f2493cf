/* API keys: tokens, storage, lookup, revocation hook. */
#include "hub/keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "hub/audit.h"
#include "hub/db.h"
#include "hub/vault.h"

#define TS(col)                                                                                    \
    "coalesce(to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '')"

const char *keys_role_name(enum keys_role r)
{
    return r == KEYS_ROLE_ADMIN ? "admin" : "tenant";
}

const char *keys_mode_name(enum keys_mode m)
{
    return m == KEYS_MODE_AGENT ? "agent" : "unrestricted";
}

const char *keys_status_name(enum keys_status s)
{
    switch (s) {
    case KEYS_VALID:
        return "valid";
    case KEYS_UNKNOWN:
        return "unknown";
    case KEYS_REVOKED:
        return "revoked";
    case KEYS_EXPIRED:
        return "expired";
    }
    return "unknown";
}

int keys_token_new(char out[KEYS_TOKEN_LEN + 1])
{
    return crypto_token(KEYS_TOKEN_PREFIX, out, KEYS_TOKEN_LEN + 1);
}

static bool is_lower_hex(const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[n] == '\0';
}

bool keys_token_is_wellformed(const char *token)
{
    return token != NULL && strncmp(token, KEYS_TOKEN_PREFIX, 5) == 0 &&
           strlen(token) == KEYS_TOKEN_LEN && is_lower_hex(token + 5, 64);
}

bool keys_hash_is_wellformed(const char *hash)
{
    return hash != NULL && strlen(hash) == KEYS_HASH_LEN && is_lower_hex(hash, KEYS_HASH_LEN);
}

void keys_token_hash(const char *token, char out[KEYS_HASH_LEN + 1])
{
    crypto_sha256_hex(token, out);
}

void keys_token_prefix(const char *token, char out[KEYS_PREFIX_LEN + 1])
{
    ab_strlcpy(out, token, KEYS_PREFIX_LEN + 1);
}

/* --- storage ---------------------------------------------------------------------- */

/* Columns of a listing row, in this order. */
#define LIST_FIELDS                                                                                \
    "k.id, k.name, k.prefix, k.team, k.user_name, coalesce(tn.namespace, k.namespace), "           \
    "k.role, k.mode, " TS("k.created_at") ", " TS("k.expires_at") ", " TS("k.revoked_at") ", " TS( \
        "k.last_used_at") ", coalesce(encode(k.token_ciphertext, 'hex'), ''), "                    \
                          "coalesce(encode(k.token_nonce, 'hex'), ''), coalesce(k.token_key_id, "  \
                          "''), k.hash"

static json_t *opt_time(const char *s)
{
    return s[0] != '\0' ? json_string(s) : json_null();
}

/* One listing row → JSON; with kr, the decrypted token as rawToken, except
 * for an agent-mode key, whose token is never shown again (seed §4.5). */
static json_t *key_json(const PGresult *r, int row, const struct vault_keyring *kr)
{
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:o,s:o}", "id", PQgetvalue(r, row, 0), "name",
        PQgetvalue(r, row, 1), "prefix", PQgetvalue(r, row, 2), "team", PQgetvalue(r, row, 3),
        "user", PQgetvalue(r, row, 4), "namespace", PQgetvalue(r, row, 5), "role",
        PQgetvalue(r, row, 6), "mode", PQgetvalue(r, row, 7), "createdAt", PQgetvalue(r, row, 8),
        "expiresAt", opt_time(PQgetvalue(r, row, 9)), "revokedAt", opt_time(PQgetvalue(r, row, 10)),
        "lastUsedAt", opt_time(PQgetvalue(r, row, 11)));

    if (o != NULL && kr != NULL && PQgetvalue(r, row, 12)[0] != '\0' &&
        strcmp(PQgetvalue(r, row, 7), "agent") != 0) {
        uint8_t aad[256];
        size_t aadlen =
            vault_token_aad(PQgetvalue(r, row, 0), PQgetvalue(r, row, 15), aad, sizeof(aad));
        uint8_t *pt = NULL;
        size_t len = 0;

        if (aadlen <= sizeof(aad) &&
            vault_open_hex(kr, VAULT_PURPOSE_TOKENS, PQgetvalue(r, row, 14), PQgetvalue(r, row, 12),
                           PQgetvalue(r, row, 13), aad, aadlen, &pt, &len) == 0) {
            json_object_set_new(o, "rawToken", json_stringn((const char *)pt, len));
            OPENSSL_cleanse(pt, len);
            free(pt);
        }
    }
    return o;
}

int keys_create_conn(PGconn *c, const struct vault_keyring *kr,
                     const struct keys_create_request *rq, char token[KEYS_TOKEN_LEN + 1],
                     json_t **out, char *err, size_t errlen)
{
    char hash[KEYS_HASH_LEN + 1], prefix[KEYS_PREFIX_LEN + 1], id[KEYS_ID_MAX + 1];
    char ns[IAM_NAMESPACE_MAX + 1], key_id[VAULT_KEY_ID_MAX] = "", expires[32] = "";
    uint8_t idraw[8], aad[256];
    char *ct = NULL, *nonce = NULL;
    const char *name = rq->name != NULL ? rq->name : "";
    const char *vals[13];
    struct audit_entry ae = {0};
    json_t *details = NULL;
    PGresult *r = NULL;
    size_t aadlen;
    int rc, gen = 1;

    token[0] = '\0';
    if (out != NULL)
        *out = NULL;
    rc = iam_check_name("team", rq->team, err, errlen);
    if (rc == 0)
        rc = iam_check_name("user", rq->user, err, errlen);
    if (rc != 0)
        return rc;
    if (strlen(name) > KEYS_NAME_MAX) {
        snprintf(err, errlen, "name must be at most %d characters, got %zu", KEYS_NAME_MAX,
                 strlen(name));
        return AB_EINVAL;
    }
    if (rq->expires_in_ms < 0) {
        snprintf(err, errlen, "expires must be a positive duration (e.g. 30d, 12h, 90s)");
        return AB_EINVAL;
    }
    rc = keys_token_new(token);
    if (rc == 0)
        rc = crypto_random(idraw, sizeof(idraw));
    if (rc != 0) {
        snprintf(err, errlen, "the random number generator failed");
        goto out_notx;
    }
    memcpy(id, "ak_", 3);
    crypto_hex_encode(idraw, sizeof(idraw), id + 3);
    keys_token_hash(token, hash);
    keys_token_prefix(token, prefix);
    iam_namespace_for(rq->team, rq->user, ns);
    if (rq->expires_in_ms > 0)
        snprintf(expires, sizeof(expires), "%lld milliseconds", (long long)rq->expires_in_ms);

    rc = db_exec(c, "BEGIN", err, errlen);
    if (rc != 0)
        goto out_notx;
    if (kr != NULL) {
        rc = vault_generation_conn(c, &gen, err, errlen);
        aadlen = vault_token_aad(id, hash, aad, sizeof(aad));
        if (rc == 0)
            rc = vault_seal_hex(kr, VAULT_PURPOSE_TOKENS, gen, aad, aadlen, token, KEYS_TOKEN_LEN,
                                &ct, &nonce, key_id);
        if (rc != 0)
            goto out;
    }
    vals[0] = id;
    vals[1] = hash;
    vals[2] = prefix;
    vals[3] = ct;
    vals[4] = nonce;
    vals[5] = kr != NULL ? key_id : NULL;
    vals[6] = name;
    vals[7] = rq->team;
    vals[8] = rq->user;
    vals[9] = ns;
    vals[10] = keys_role_name(rq->role);
    vals[11] = keys_mode_name(rq->mode);
    vals[12] = expires[0] != '\0' ? expires : NULL;
    r = PQexecParams(c,
                     "INSERT INTO api_keys (id, hash, prefix, token_ciphertext, token_nonce, "
                     "token_key_id, name, team, user_name, namespace, role, mode, expires_at) "
                     "VALUES ($1, $2, $3, decode($4, 'hex'), decode($5, 'hex'), $6, $7, $8, $9, "
                     "$10, $11, $12, now() + $13::interval)",
                     13, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        rc = db_fail(c, r, "cannot store the key", err, errlen);
        goto out;
    }
    details =
        json_pack("{s:s,s:s,s:s,s:s,s:s}", "team", rq->team, "user", rq->user, "role",
                  keys_role_name(rq->role), "mode", keys_mode_name(rq->mode), "prefix", prefix);
    ae.actor = rq->actor != NULL ? rq->actor : "unknown";
    ae.action = "apikey.create";
    ae.target = id;
    ae.namespace = ns;
    ae.details = details;
    rc = audit_write_conn(c, &ae, err, errlen);
    if (rc == 0 && out != NULL) {
        PQclear(r);
        vals[0] = id;
        r = PQexecParams(c,
                         "SELECT " LIST_FIELDS " FROM api_keys k LEFT JOIN team_namespaces tn "
                         "ON tn.team = k.team WHERE k.id = $1",
                         1, NULL, vals, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
            rc = db_fail(c, r, "cannot read the new key", err, errlen);
        else
            *out = key_json(r, 0, NULL);
    }
out:
    PQclear(r);
    json_decref(details);
    rc = db_finish_tx(c, rc, err, errlen);
out_notx:
    free(ct);
    free(nonce);
    if (rc != 0) {
        OPENSSL_cleanse(token, KEYS_TOKEN_LEN + 1);
        token[0] = '\0';
        if (out != NULL) {
            json_decref(*out);
            *out = NULL;
        }
    }
    return rc;
}

int keys_lookup_conn(PGconn *c, const char *hash, enum keys_status *status,
                     struct keys_principal *p, char when[KEYS_TIME_MAX], char *err, size_t errlen)
{
    const char *vals[1] = {hash};
    PGresult *r;
    int rc = 0;

    memset(p, 0, sizeof(*p));
    when[0] = '\0';
    *status = KEYS_UNKNOWN;
    r = PQexecParams(
        c,
        "SELECT k.id, k.name, k.team, k.user_name, "
        "coalesce(tn.namespace, k.namespace), k.role, k.mode, " TS("k.expires_at") ", " TS(
            "k.revoked_at") ", k.revoked_at IS NOT NULL, "
                            "k.expires_at IS NOT NULL AND k.expires_at <= now() "
                            "FROM api_keys k LEFT JOIN team_namespaces tn ON tn.team = k.team "
                            "WHERE k.hash = $1",
        1, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot look the key up", err, errlen);
        goto out;
    }
    if (PQntuples(r) == 0)
        goto out;
    if (PQgetvalue(r, 0, 9)[0] == 't') {
        *status = KEYS_REVOKED;
        ab_strlcpy(when, PQgetvalue(r, 0, 8), KEYS_TIME_MAX);
        goto out;
    }
    if (PQgetvalue(r, 0, 10)[0] == 't') {
        *status = KEYS_EXPIRED;
        ab_strlcpy(when, PQgetvalue(r, 0, 7), KEYS_TIME_MAX);
        goto out;
    }
    *status = KEYS_VALID;
    ab_strlcpy(p->key_id, PQgetvalue(r, 0, 0), sizeof(p->key_id));
    ab_strlcpy(p->hash, hash, sizeof(p->hash));
    ab_strlcpy(p->name, PQgetvalue(r, 0, 1), sizeof(p->name));
    ab_strlcpy(p->team, PQgetvalue(r, 0, 2), sizeof(p->team));
    ab_strlcpy(p->user, PQgetvalue(r, 0, 3), sizeof(p->user));
    ab_strlcpy(p->namespace, PQgetvalue(r, 0, 4), sizeof(p->namespace));
    p->role = strcmp(PQgetvalue(r, 0, 5), "admin") == 0 ? KEYS_ROLE_ADMIN : KEYS_ROLE_TENANT;
    p->mode = strcmp(PQgetvalue(r, 0, 6), "agent") == 0 ? KEYS_MODE_AGENT : KEYS_MODE_UNRESTRICTED;
    ab_strlcpy(p->expires_at, PQgetvalue(r, 0, 7), sizeof(p->expires_at));
out:
    PQclear(r);
    return rc;
}

int keys_list_conn(PGconn *c, const struct vault_keyring *kr, const char *team, const char *user,
                   bool include_revoked, json_t **out, char *err, size_t errlen)
{
    const char *vals[3] = {team, user, include_revoked ? "t" : "f"};
    PGresult *r;
    int rc = 0, i;

    *out = NULL;
    r = PQexecParams(c,
                     "SELECT " LIST_FIELDS " FROM api_keys k LEFT JOIN team_namespaces tn "
                     "ON tn.team = k.team WHERE ($1::text IS NULL OR k.team = $1) AND "
                     "($2::text IS NULL OR k.user_name = $2) AND "
                     "($3::boolean OR k.revoked_at IS NULL) "
                     "ORDER BY k.created_at DESC, k.id",
                     3, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot list keys", err, errlen);
        goto out;
    }
    *out = json_array();
    for (i = 0; i < PQntuples(r) && *out != NULL; i++)
        json_array_append_new(*out, key_json(r, i, kr));
    if (*out == NULL)
        rc = AB_ENOMEM;
out:
    PQclear(r);
    return rc;
}

int keys_revoke_conn(PGconn *c, const char *id, const char *team, const char *user,
                     const char *actor, char hash[KEYS_HASH_LEN + 1], char *err, size_t errlen)
{
    const char *vals[3] = {id, team, user};
    struct audit_entry ae = {0};
    PGresult *r = NULL;
    int rc;

    if (hash != NULL)
        hash[0] = '\0';
    rc = db_exec(c, "BEGIN", err, errlen);
    if (rc != 0)
        return rc;
    r = PQexecParams(c,
                     "UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND "
                     "revoked_at IS NULL AND ($2::text IS NULL OR team = $2) AND "
                     "($3::text IS NULL OR user_name = $3) RETURNING hash, namespace",
                     3, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot revoke the key", err, errlen);
        goto out;
    }
    if (PQntuples(r) == 0) {
        snprintf(err, errlen, "api key '%s' not found (or already revoked)", id);
        rc = AB_ENOENT;
        goto out;
    }
    if (hash != NULL)
        ab_strlcpy(hash, PQgetvalue(r, 0, 0), KEYS_HASH_LEN + 1);
    ae.actor = actor != NULL ? actor : "unknown";
    ae.action = "apikey.revoke";
    ae.target = id;
    ae.namespace = PQgetvalue(r, 0, 1);
    rc = audit_write_conn(c, &ae, err, errlen);
out:
    PQclear(r);
    return db_finish_tx(c, rc, err, errlen);
}

int keys_touch_conn(PGconn *c, const char *const *ids, size_t n, char *err, size_t errlen)
{
    size_t cap = 3, i, at = 0;
    const char *vals[1];
    PGresult *r;
    char *arr;
    int rc = 0;

    if (n == 0)
        return 0;
    if (n > 10000) {
        snprintf(err, errlen, "at most 10000 keys per batch");
        return AB_ELIMIT;
    }
    for (i = 0; i < n; i++)
        cap += strlen(ids[i]) + 1;
    arr = malloc(cap);
    if (arr == NULL)
        return AB_ENOMEM;
    /* ids are ak_<hex>: nothing to quote in an array literal */
    arr[at++] = '{';
    for (i = 0; i < n; i++)
        at += (size_t)snprintf(arr + at, cap - at, "%s%s", i ? "," : "", ids[i]);
    arr[at++] = '}';
    arr[at] = '\0';
    vals[0] = arr;
    r = PQexecParams(c, "UPDATE api_keys SET last_used_at = now() WHERE id = ANY($1::text[])", 1,
                     NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        rc = db_fail(c, r, "cannot record key use", err, errlen);
    PQclear(r);
    free(arr);
    return rc;
}
