/* The vault: input rules and storage of secret values (vault.h). Keys and
 * sealing are keyring.c; rotate-key is vault_rotate.c. */
#include "hub/vault.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "agentbox/common.h"
#include "hub/audit.h"
#include "hub/db.h"

#define SECRET_FIELDS                                                                              \
    "name, version, metadata::text, "                                                              \
    "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "                   \
    "to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"

/* --- input rules ----------------------------------------------------------------------- */

int vault_name_normalize(const char *in, char out[VAULT_NAME_MAX + 1], char *err, size_t errlen)
{
    size_t n, i;

    out[0] = '\0';
    if (in == NULL)
        in = "";
    while (*in == ' ' || *in == '\t')
        in++;
    n = strlen(in);
    while (n > 0 && (in[n - 1] == ' ' || in[n - 1] == '\t'))
        n--;
    if (n >= 4 && strncmp(in, "sec_", 4) == 0) {
        in += 4;
        n -= 4;
    }
    if (n == 0) {
        snprintf(err, errlen, "secret name is required (1-%d characters of [a-zA-Z0-9_-])",
                 VAULT_NAME_MAX);
        return AB_EINVAL;
    }
    if (n > VAULT_NAME_MAX) {
        snprintf(err, errlen, "secret name must be at most %d characters, got %zu", VAULT_NAME_MAX,
                 n);
        return AB_EINVAL;
    }
    for (i = 0; i < n; i++) {
        char ch = (char)tolower((unsigned char)in[i]);
        if (ch == '{' || ch == '}') {
            snprintf(err, errlen,
                     "secret name must not contain '{' or '}' (it is referenced as "
                     "${e2b.secrets.NAME})");
            return AB_EINVAL;
        }
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-')) {
            snprintf(err, errlen,
                     "secret name may only contain letters, digits, '_' and '-' (character "
                     "%zu is not one)",
                     i + 1);
            return AB_EINVAL;
        }
        out[i] = ch;
    }
    out[n] = '\0';
    return 0;
}

int vault_value_check(size_t len, char *err, size_t errlen)
{
    if (len == 0) {
        snprintf(err, errlen, "secret value must not be empty");
        return AB_EINVAL;
    }
    if (len > VAULT_VALUE_MAX) {
        snprintf(err, errlen, "secret value must be at most %d bytes (64 KiB), got %zu",
                 VAULT_VALUE_MAX, len);
        return AB_ELIMIT;
    }
    return 0;
}

int vault_metadata_check(const json_t *md, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    size_t total = 0;

    if (md == NULL || json_is_null(md))
        return 0;
    if (!json_is_object(md)) {
        snprintf(err, errlen, "metadata must be an object of string values");
        return AB_EINVAL;
    }
    if (json_object_size(md) > VAULT_META_ENTRIES_MAX) {
        snprintf(err, errlen, "metadata may have at most %d entries, got %zu",
                 VAULT_META_ENTRIES_MAX, json_object_size(md));
        return AB_ELIMIT;
    }
    json_object_foreach((json_t *)md, k, v)
    {
        size_t kl = strlen(k), vl;
        if (kl == 0) {
            snprintf(err, errlen, "metadata keys must not be empty");
            return AB_EINVAL;
        }
        if (kl > VAULT_META_KEY_MAX) {
            snprintf(err, errlen, "metadata key '%.32s…' is longer than %d bytes", k,
                     VAULT_META_KEY_MAX);
            return AB_ELIMIT;
        }
        if (!json_is_string(v)) {
            snprintf(err, errlen, "metadata value of '%s' must be a string", k);
            return AB_EINVAL;
        }
        vl = json_string_length(v);
        if (vl > VAULT_META_VALUE_MAX) {
            snprintf(err, errlen, "metadata value of '%s' is longer than %d bytes (%zu)", k,
                     VAULT_META_VALUE_MAX, vl);
            return AB_ELIMIT;
        }
        total += kl + vl;
    }
    if (total > VAULT_META_TOTAL_MAX) {
        snprintf(err, errlen,
                 "metadata is %zu bytes in all (keys and values), more than the %d allowed", total,
                 VAULT_META_TOTAL_MAX);
        return AB_ELIMIT;
    }
    return 0;
}

/* --- storage helpers --------------------------------------------------------------------- */

/* Row (SECRET_FIELDS at column col) → E2B Secret. */
static json_t *secret_json(const PGresult *r, int row, int col)
{
    const char *name = PQgetvalue(r, row, col);
    char id[VAULT_NAME_MAX + 8];
    json_t *md = json_loads(PQgetvalue(r, row, col + 2), 0, NULL);

    snprintf(id, sizeof(id), "sec_%s", name);
    if (md == NULL)
        md = json_object();
    return json_pack("{s:s,s:s,s:I,s:o,s:s,s:s}", "secretID", id, "name", name, "currentVersion",
                     (json_int_t)strtoll(PQgetvalue(r, row, col + 1), NULL, 10), "metadata", md,
                     "createdAt", PQgetvalue(r, row, col + 3), "updatedAt",
                     PQgetvalue(r, row, col + 4));
}

int vault_generation_conn(PGconn *c, int *generation, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, "SELECT coalesce(max(generation), 1) FROM hub_key_generations");
    int rc = 0;

    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        rc =
            db_fail(c, r, "cannot read the key generation (run agentbox-hub migrate)", err, errlen);
    else
        *generation = atoi(PQgetvalue(r, 0, 0));
    PQclear(r);
    return rc;
}

/* Seals w's value for version under the current generation: hex strings out. */
static int seal_value(PGconn *c, const struct vault_keyring *kr, const struct vault_write *w,
                      int version, char **ct_hex, char **nonce_hex, char key_id[VAULT_KEY_ID_MAX],
                      char *err, size_t errlen)
{
    uint8_t aad[4 * 5 + 3 * 256 + VAULT_NAME_MAX + 64];
    size_t aadlen;
    int gen = 1, rc;

    *ct_hex = *nonce_hex = NULL;
    rc = vault_generation_conn(c, &gen, err, errlen);
    if (rc != 0)
        return rc;
    aadlen = vault_aad(w->scope.ns, w->scope.user, w->name, version, aad, sizeof(aad));
    if (aadlen > sizeof(aad)) {
        snprintf(err, errlen, "namespace and user are too long");
        return AB_EINVAL;
    }
    rc = vault_seal_hex(kr, VAULT_PURPOSE_SECRETS, gen, aad, aadlen, w->value, w->len, ct_hex,
                        nonce_hex, key_id);
    if (rc != 0 && rc != AB_ENOMEM)
        snprintf(err, errlen, "cannot encrypt the secret");
    return rc;
}

static int audit_secret(PGconn *c, const char *actor, const char *action,
                        const struct vault_scope *s, const char *name, int version, char *err,
                        size_t errlen)
{
    json_t *d = json_pack("{s:s,s:i}", "user", s->user, "version", version);
    struct audit_entry e = {
        .actor = actor, .action = action, .target = name, .namespace = s->ns, .details = d};
    int rc = audit_write_conn(c, &e, err, errlen);

    json_decref(d);
    return rc;
}

/* --- storage ----------------------------------------------------------------------------- */

int vault_create_conn(PGconn *c, const struct vault_keyring *kr, const struct vault_write *w,
                      json_t **out, char *err, size_t errlen)
{
    char key_id[VAULT_KEY_ID_MAX];
    char *ct = NULL, *nonce = NULL, *md = NULL;
    const char *vals[7];
    PGresult *r = NULL;
    int rc;

    *out = NULL;
    rc = db_exec(c, "BEGIN", err, errlen);
    if (rc != 0)
        return rc;
    rc = seal_value(c, kr, w, 1, &ct, &nonce, key_id, err, errlen);
    if (rc != 0)
        goto out;
    md = w->metadata != NULL ? json_dumps(w->metadata, JSON_COMPACT) : NULL;
    vals[0] = w->scope.ns;
    vals[1] = w->scope.user;
    vals[2] = w->name;
    vals[3] = ct;
    vals[4] = nonce;
    vals[5] = key_id;
    vals[6] = md != NULL ? md : "{}";
    r = PQexecParams(c,
                     "INSERT INTO vault_secrets (namespace, user_name, name, version, ciphertext, "
                     "nonce, key_id, metadata) VALUES ($1, $2, $3, 1, decode($4, 'hex'), "
                     "decode($5, 'hex'), $6, $7::jsonb) "
                     "ON CONFLICT (namespace, user_name, name) DO NOTHING RETURNING " SECRET_FIELDS,
                     7, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot store the secret", err, errlen);
        goto out;
    }
    if (PQntuples(r) == 0) {
        snprintf(err, errlen, "secret \"%s\" already exists; update it instead", w->name);
        rc = AB_EEXIST;
        goto out;
    }
    *out = secret_json(r, 0, 0);
    rc = audit_secret(c, w->actor, "vault.create", &w->scope, w->name, 1, err, errlen);
out:
    PQclear(r);
    free(ct);
    free(nonce);
    free(md);
    rc = db_finish_tx(c, rc, err, errlen);
    if (rc != 0) {
        json_decref(*out);
        *out = NULL;
    }
    return rc;
}

int vault_update_conn(PGconn *c, const struct vault_keyring *kr, const struct vault_write *w,
                      json_t **out, char *err, size_t errlen)
{
    char key_id[VAULT_KEY_ID_MAX], ver[16];
    char *ct = NULL, *nonce = NULL, *md = NULL;
    const char *vals[8];
    PGresult *r = NULL;
    int rc, version;

    *out = NULL;
    rc = db_exec(c, "BEGIN", err, errlen);
    if (rc != 0)
        return rc;
    vals[0] = w->scope.ns;
    vals[1] = w->scope.user;
    vals[2] = w->name;
    r = PQexecParams(c,
                     "SELECT version FROM vault_secrets WHERE namespace = $1 AND user_name = $2 "
                     "AND name = $3 FOR UPDATE",
                     3, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot read the secret", err, errlen);
        goto out;
    }
    if (PQntuples(r) == 0) {
        snprintf(err, errlen, "secret \"%s\" not found", w->name);
        rc = AB_ENOENT;
        goto out;
    }
    version = atoi(PQgetvalue(r, 0, 0)) + 1;
    PQclear(r);
    r = NULL;
    rc = seal_value(c, kr, w, version, &ct, &nonce, key_id, err, errlen);
    if (rc != 0)
        goto out;
    md = w->metadata != NULL ? json_dumps(w->metadata, JSON_COMPACT) : NULL;
    snprintf(ver, sizeof(ver), "%d", version);
    vals[3] = ct;
    vals[4] = nonce;
    vals[5] = key_id;
    vals[6] = md;
    vals[7] = ver;
    r = PQexecParams(
        c,
        "UPDATE vault_secrets SET ciphertext = decode($4, 'hex'), "
        "nonce = decode($5, 'hex'), key_id = $6, "
        "metadata = coalesce($7::jsonb, metadata), version = $8::integer, "
        "updated_at = now() "
        "WHERE namespace = $1 AND user_name = $2 AND name = $3 RETURNING " SECRET_FIELDS,
        8, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        rc = db_fail(c, r, "cannot update the secret", err, errlen);
        goto out;
    }
    *out = secret_json(r, 0, 0);
    rc = audit_secret(c, w->actor, "vault.update", &w->scope, w->name, version, err, errlen);
out:
    PQclear(r);
    free(ct);
    free(nonce);
    free(md);
    rc = db_finish_tx(c, rc, err, errlen);
    if (rc != 0) {
        json_decref(*out);
        *out = NULL;
    }
    return rc;
}

int vault_get_conn(PGconn *c, const struct vault_scope *s, const char *name, json_t **out,
                   char *err, size_t errlen)
{
    const char *vals[3] = {s->ns, s->user, name};
    PGresult *r;
    int rc = 0;

    *out = NULL;
    r = PQexecParams(c,
                     "SELECT " SECRET_FIELDS " FROM vault_secrets WHERE namespace = $1 AND "
                     "user_name = $2 AND name = $3",
                     3, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot read the secret", err, errlen);
    } else if (PQntuples(r) == 0) {
        snprintf(err, errlen, "secret \"%s\" not found", name);
        rc = AB_ENOENT;
    } else {
        *out = secret_json(r, 0, 0);
    }
    PQclear(r);
    return rc;
}

int vault_list_conn(PGconn *c, const struct vault_scope *s, int64_t offset, int64_t limit,
                    json_t **out, bool *more, char *err, size_t errlen)
{
    char off[24], lim[24];
    const char *vals[4] = {s->ns, s->user, off, lim};
    PGresult *r;
    int rc = 0, i, n;

    *out = NULL;
    *more = false;
    snprintf(off, sizeof(off), "%lld", (long long)offset);
    snprintf(lim, sizeof(lim), "%lld", (long long)limit + 1);
    r = PQexecParams(c,
                     "SELECT " SECRET_FIELDS " FROM vault_secrets WHERE namespace = $1 AND "
                     "user_name = $2 ORDER BY name COLLATE \"C\" OFFSET $3::bigint LIMIT "
                     "$4::bigint",
                     4, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot list secrets", err, errlen);
        goto out;
    }
    n = PQntuples(r);
    if (n > limit) {
        *more = true;
        n = (int)limit;
    }
    *out = json_array();
    for (i = 0; i < n && *out != NULL; i++)
        json_array_append_new(*out, secret_json(r, i, 0));
    if (*out == NULL)
        rc = AB_ENOMEM;
out:
    PQclear(r);
    return rc;
}

int vault_delete_conn(PGconn *c, const struct vault_scope *s, const char *name, const char *actor,
                      char *err, size_t errlen)
{
    const char *vals[3] = {s->ns, s->user, name};
    PGresult *r = NULL;
    int rc;

    rc = db_exec(c, "BEGIN", err, errlen);
    if (rc != 0)
        return rc;
    r = PQexecParams(c,
                     "DELETE FROM vault_secrets WHERE namespace = $1 AND user_name = $2 AND "
                     "name = $3 RETURNING version",
                     3, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot delete the secret", err, errlen);
        goto out;
    }
    if (PQntuples(r) == 0) {
        snprintf(err, errlen, "secret \"%s\" not found", name);
        rc = AB_ENOENT;
        goto out;
    }
    rc = audit_secret(c, actor, "vault.delete", s, name, atoi(PQgetvalue(r, 0, 0)), err, errlen);
out:
    PQclear(r);
    return db_finish_tx(c, rc, err, errlen);
}

void vault_values_free(struct vault_value *v, size_t n)
{
    size_t i;

    for (i = 0; v != NULL && i < n; i++) {
        if (v[i].value != NULL) {
            OPENSSL_cleanse(v[i].value, v[i].len);
            free(v[i].value);
        }
        v[i].value = NULL;
        v[i].len = 0;
    }
}

int vault_resolve_conn(PGconn *c, const struct vault_keyring *kr, const struct vault_scope *s,
                       const char *const *names, size_t n, struct vault_value *out, char *err,
                       size_t errlen)
{
    char arr[VAULT_RESOLVE_MAX * (VAULT_NAME_MAX + 1) + 3];
    const char *vals[3] = {s->ns, s->user, arr};
    uint8_t aad[4 * 5 + 3 * 256 + VAULT_NAME_MAX + 64];
    size_t at = 0, i;
    PGresult *r = NULL;
    int rc = 0, row;

    if (n > VAULT_RESOLVE_MAX) {
        snprintf(err, errlen, "at most %d secrets per resolve, got %zu", VAULT_RESOLVE_MAX, n);
        return AB_ELIMIT;
    }
    memset(out, 0, n * sizeof(*out));
    arr[at++] = '{';
    for (i = 0; i < n; i++) {
        char norm[VAULT_NAME_MAX + 1];
        rc = vault_name_normalize(names[i], norm, err, errlen);
        if (rc != 0)
            return rc;
        ab_strlcpy(out[i].name, norm, sizeof(out[i].name));
        at += (size_t)snprintf(arr + at, sizeof(arr) - at, "%s%s", i ? "," : "", norm);
    }
    arr[at++] = '}';
    arr[at] = '\0';
    r = PQexecParams(c,
                     "SELECT name, version, encode(ciphertext, 'hex'), encode(nonce, 'hex'), "
                     "key_id FROM vault_secrets WHERE namespace = $1 AND user_name = $2 AND "
                     "name = ANY($3::text[])",
                     3, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot read secrets", err, errlen);
        goto out;
    }
    for (row = 0; row < PQntuples(r) && rc == 0; row++) {
        const char *name = PQgetvalue(r, row, 0);
        int version = atoi(PQgetvalue(r, row, 1));
        size_t aadlen = vault_aad(s->ns, s->user, name, version, aad, sizeof(aad));
        uint8_t *pt = NULL;
        size_t len = 0;

        if (aadlen > sizeof(aad)) {
            rc = AB_EINVAL;
            snprintf(err, errlen, "namespace and user are too long");
            break;
        }
        rc = vault_open_hex(kr, VAULT_PURPOSE_SECRETS, PQgetvalue(r, row, 4), PQgetvalue(r, row, 2),
                            PQgetvalue(r, row, 3), aad, aadlen, &pt, &len);
        if (rc != 0) {
            snprintf(err, errlen,
                     "secret \"%s\" does not decrypt with this hub secret (key %s): %s", name,
                     PQgetvalue(r, row, 4),
                     rc == AB_ENOENT ? "it was written under another hub secret"
                                     : "the stored data or its key id was altered");
            rc = AB_EDENIED;
            break;
        }
        for (i = 0; i < n; i++) {
            if (strcmp(out[i].name, name) == 0 && !out[i].found) {
                out[i].found = true;
                out[i].version = version;
                out[i].value = pt;
                out[i].len = len;
                pt = NULL;
                break;
            }
        }
        if (pt != NULL) {
            OPENSSL_cleanse(pt, len);
            free(pt);
        }
    }
out:
    PQclear(r);
    if (rc != 0)
        vault_values_free(out, n);
    return rc;
}
