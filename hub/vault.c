/* Vault: key ring, sealing, input rules and storage of secret values. */
#include "hub/vault.h"

#include <ctype.h>
#include <errno.h>
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

/* --- hub secret and key ring ------------------------------------------------------- */

static const char HOWTO[] =
    "generate one with `openssl rand -hex 32` and set it through AGENTBOX_HUB_SECRET, "
    "--hub-secret-file FILE (AGENTBOX_HUB_SECRET_FILE) or hub_secret_file in the config file; "
    "keep it: it decrypts the vault and the stored API keys";

int vault_hub_secret_load(const char *what, const char *value, const char *file, char **out,
                          size_t *len, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = NULL;
    int rc = 0;

    *out = NULL;
    *len = 0;
    if (value != NULL && value[0] != '\0') {
        n = strlen(value);
        if (n > VAULT_HUB_SECRET_MAX) {
            snprintf(err, errlen, "%s is longer than %d bytes", what, VAULT_HUB_SECRET_MAX);
            return AB_EINVAL;
        }
        buf = malloc(n + 1);
        if (buf == NULL)
            return AB_ENOMEM;
        memcpy(buf, value, n + 1);
    } else if (file != NULL && file[0] != '\0') {
        f = fopen(file, "r");
        if (f == NULL) {
            snprintf(err, errlen, "cannot read %s_file %s: %s", what, file, strerror(errno));
            return AB_EINVAL;
        }
        buf = calloc(1, VAULT_HUB_SECRET_MAX + 2);
        if (buf == NULL) {
            rc = AB_ENOMEM;
            goto out;
        }
        n = fread(buf, 1, VAULT_HUB_SECRET_MAX + 1, f);
        if (n > VAULT_HUB_SECRET_MAX) {
            snprintf(err, errlen, "%s_file %s is longer than %d bytes", what, file,
                     VAULT_HUB_SECRET_MAX);
            rc = AB_EINVAL;
            goto out;
        }
        buf[n] = '\0';
        n = strcspn(buf, "\r\n");
        buf[n] = '\0';
    } else {
        snprintf(err, errlen, "%s is required: %s", what, HOWTO);
        return AB_EINVAL;
    }
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    if (n < VAULT_HUB_SECRET_MIN) {
        snprintf(err, errlen, "%s must be at least %d bytes, got %zu: %s", what,
                 VAULT_HUB_SECRET_MIN, n, HOWTO);
        rc = AB_EINVAL;
        goto out;
    }
    *out = buf;
    *len = n;
    buf = NULL;
out:
    if (f != NULL)
        fclose(f);
    if (buf != NULL) {
        OPENSSL_cleanse(buf, n);
        free(buf);
    }
    return rc;
}

static int root_key(const void *secret, size_t len, uint8_t prk[CRYPTO_SHA256_LEN], char fp[9])
{
    static const char salt[] = "agentbox hub secret v1";
    static const char info_root[] = "root";
    static const char info_fp[] = "fingerprint";
    uint8_t f[4];
    int rc;

    rc = crypto_hkdf_sha256(secret, len, salt, sizeof(salt) - 1, info_root, sizeof(info_root) - 1,
                            prk, CRYPTO_SHA256_LEN);
    if (rc == 0)
        rc = crypto_hkdf_sha256(prk, CRYPTO_SHA256_LEN, NULL, 0, info_fp, sizeof(info_fp) - 1, f,
                                sizeof(f));
    if (rc == 0)
        crypto_hex_encode(f, sizeof(f), fp);
    return rc;
}

int vault_keyring_init(struct vault_keyring *kr, const void *secret, size_t len, const void *prev,
                       size_t prevlen, char *err, size_t errlen)
{
    int rc;

    memset(kr, 0, sizeof(*kr));
    if (secret == NULL || len < VAULT_HUB_SECRET_MIN) {
        snprintf(err, errlen, "the hub secret must be at least %d bytes", VAULT_HUB_SECRET_MIN);
        return AB_EINVAL;
    }
    rc = root_key(secret, len, kr->prk, kr->fp);
    if (rc == 0 && prev != NULL) {
        if (prevlen < VAULT_HUB_SECRET_MIN) {
            snprintf(err, errlen, "the previous hub secret must be at least %d bytes",
                     VAULT_HUB_SECRET_MIN);
            rc = AB_EINVAL;
        } else {
            rc = root_key(prev, prevlen, kr->prev_prk, kr->prev_fp);
            kr->has_prev = rc == 0;
        }
    }
    if (rc != 0) {
        if (err[0] == '\0')
            snprintf(err, errlen, "cannot derive keys from the hub secret");
        vault_keyring_clear(kr);
    }
    return rc;
}

void vault_keyring_clear(struct vault_keyring *kr)
{
    OPENSSL_cleanse(kr, sizeof(*kr));
}

static int derive(const uint8_t prk[CRYPTO_SHA256_LEN], const char *purpose, int generation,
                  uint8_t key[CRYPTO_AES_KEY_LEN])
{
    char info[96];
    int n = snprintf(info, sizeof(info), "agentbox/%s/v%d", purpose, generation);

    if (n < 0 || (size_t)n >= sizeof(info) || generation < 1)
        return AB_EINVAL;
    return crypto_hkdf_sha256(prk, CRYPTO_SHA256_LEN, NULL, 0, info, (size_t)n, key,
                              CRYPTO_AES_KEY_LEN);
}

int vault_keyring_derive(const struct vault_keyring *kr, const char *purpose, int generation,
                         uint8_t key[CRYPTO_AES_KEY_LEN], char key_id[VAULT_KEY_ID_MAX])
{
    snprintf(key_id, VAULT_KEY_ID_MAX, "v%d.%s", generation, kr->fp);
    return derive(kr->prk, purpose, generation, key);
}

int vault_keyring_lookup(const struct vault_keyring *kr, const char *purpose, const char *key_id,
                         uint8_t key[CRYPTO_AES_KEY_LEN])
{
    char *end = NULL;
    long gen;

    if (key_id == NULL || key_id[0] != 'v')
        return AB_EINVAL;
    gen = strtol(key_id + 1, &end, 10);
    if (end == NULL || *end != '.' || gen < 1 || gen > 1000000)
        return AB_EINVAL;
    if (strcmp(end + 1, kr->fp) == 0)
        return derive(kr->prk, purpose, (int)gen, key);
    if (kr->has_prev && strcmp(end + 1, kr->prev_fp) == 0)
        return derive(kr->prev_prk, purpose, (int)gen, key);
    return AB_ENOENT;
}

/* --- sealing --------------------------------------------------------------------------- */

static size_t put_field(uint8_t *out, size_t at, size_t cap, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;

    if (at + 4 + n <= cap) {
        out[at] = (uint8_t)(n >> 24);
        out[at + 1] = (uint8_t)(n >> 16);
        out[at + 2] = (uint8_t)(n >> 8);
        out[at + 3] = (uint8_t)n;
        memcpy(out + at + 4, s != NULL ? s : "", n);
    }
    return at + 4 + n;
}

size_t vault_aad(const char *ns, const char *user, const char *name, int version, uint8_t *out,
                 size_t cap)
{
    char v[16];
    size_t at = 0;

    snprintf(v, sizeof(v), "%d", version);
    at = put_field(out, at, cap, "agentbox-vault-v1");
    at = put_field(out, at, cap, ns);
    at = put_field(out, at, cap, user);
    at = put_field(out, at, cap, name);
    at = put_field(out, at, cap, v);
    return at;
}

size_t vault_token_aad(const char *key_id, const char *hash, uint8_t *out, size_t cap)
{
    size_t at = 0;

    at = put_field(out, at, cap, "agentbox-apikey-token-v1");
    at = put_field(out, at, cap, key_id);
    at = put_field(out, at, cap, hash);
    return at;
}

int vault_seal(const uint8_t key[CRYPTO_AES_KEY_LEN], const uint8_t *aad, size_t aadlen,
               const void *pt, size_t len, uint8_t nonce[CRYPTO_GCM_NONCE_LEN], uint8_t *ct)
{
    int rc = crypto_random(nonce, CRYPTO_GCM_NONCE_LEN);

    if (rc != 0)
        return rc;
    return crypto_aes_gcm_encrypt(key, nonce, aad, aadlen, pt, len, ct, ct + len);
}

int vault_open(const uint8_t key[CRYPTO_AES_KEY_LEN], const uint8_t *aad, size_t aadlen,
               const uint8_t nonce[CRYPTO_GCM_NONCE_LEN], const uint8_t *ct, size_t ctlen,
               uint8_t *pt)
{
    if (ctlen < CRYPTO_GCM_TAG_LEN)
        return AB_EINVAL;
    return crypto_aes_gcm_decrypt(key, nonce, aad, aadlen, ct, ctlen - CRYPTO_GCM_TAG_LEN,
                                  ct + ctlen - CRYPTO_GCM_TAG_LEN, pt);
}

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

static char *hex_of(const uint8_t *data, size_t len)
{
    char *h = malloc(2 * len + 1);

    if (h != NULL)
        crypto_hex_encode(data, len, h);
    return h;
}

/* Decodes a hex column into a new buffer of *len bytes. */
static uint8_t *unhex(const char *hex, size_t *len)
{
    size_t n = strlen(hex) / 2;
    uint8_t *b = malloc(n ? n : 1);

    if (b == NULL)
        return NULL;
    if (crypto_hex_decode(hex, b, n, len) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

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
    uint8_t key[CRYPTO_AES_KEY_LEN], nonce[CRYPTO_GCM_NONCE_LEN];
    uint8_t aad[4 * 5 + 3 * 256 + VAULT_NAME_MAX + 64];
    size_t aadlen;
    uint8_t *ct = NULL;
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
    ct = malloc(w->len + CRYPTO_GCM_TAG_LEN);
    if (ct == NULL)
        return AB_ENOMEM;
    rc = vault_keyring_derive(kr, VAULT_PURPOSE_SECRETS, gen, key, key_id);
    if (rc == 0)
        rc = vault_seal(key, aad, aadlen, w->value, w->len, nonce, ct);
    OPENSSL_cleanse(key, sizeof(key));
    if (rc != 0) {
        snprintf(err, errlen, "cannot encrypt the secret");
        goto out;
    }
    *ct_hex = hex_of(ct, w->len + CRYPTO_GCM_TAG_LEN);
    *nonce_hex = hex_of(nonce, sizeof(nonce));
    if (*ct_hex == NULL || *nonce_hex == NULL) {
        free(*ct_hex);
        free(*nonce_hex);
        *ct_hex = *nonce_hex = NULL;
        rc = AB_ENOMEM;
    }
out:
    free(ct);
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

int vault_open_hex(const struct vault_keyring *kr, const char *purpose, const char *key_id,
                   const char *ct_hex, const char *nonce_hex, const uint8_t *aad, size_t aadlen,
                   uint8_t **pt, size_t *ptlen)
{
    uint8_t key[CRYPTO_AES_KEY_LEN];
    uint8_t *ct = NULL, *nonce = NULL, *out = NULL;
    size_t ctlen = 0, nlen = 0;
    int rc;

    *pt = NULL;
    *ptlen = 0;
    rc = vault_keyring_lookup(kr, purpose, key_id, key);
    if (rc != 0)
        return rc;
    ct = unhex(ct_hex, &ctlen);
    nonce = unhex(nonce_hex, &nlen);
    if (ct == NULL || nonce == NULL || nlen != CRYPTO_GCM_NONCE_LEN || ctlen < CRYPTO_GCM_TAG_LEN) {
        rc = AB_EINVAL;
        goto out;
    }
    out = malloc(ctlen - CRYPTO_GCM_TAG_LEN + 1);
    if (out == NULL) {
        rc = AB_ENOMEM;
        goto out;
    }
    rc = vault_open(key, aad, aadlen, nonce, ct, ctlen, out);
    if (rc != 0)
        goto out;
    out[ctlen - CRYPTO_GCM_TAG_LEN] = '\0';
    *pt = out;
    *ptlen = ctlen - CRYPTO_GCM_TAG_LEN;
    out = NULL;
out:
    OPENSSL_cleanse(key, sizeof(key));
    free(ct);
    free(nonce);
    if (out != NULL) {
        OPENSSL_cleanse(out, ctlen - CRYPTO_GCM_TAG_LEN);
        free(out);
    }
    return rc;
}

int vault_seal_hex(const struct vault_keyring *kr, const char *purpose, int generation,
                   const uint8_t *aad, size_t aadlen, const void *pt, size_t len, char **ct_hex,
                   char **nonce_hex, char key_id[VAULT_KEY_ID_MAX])
{
    uint8_t key[CRYPTO_AES_KEY_LEN], nonce[CRYPTO_GCM_NONCE_LEN];
    uint8_t *ct = malloc(len + CRYPTO_GCM_TAG_LEN);
    int rc;

    *ct_hex = *nonce_hex = NULL;
    if (ct == NULL)
        return AB_ENOMEM;
    rc = vault_keyring_derive(kr, purpose, generation, key, key_id);
    if (rc == 0)
        rc = vault_seal(key, aad, aadlen, pt, len, nonce, ct);
    OPENSSL_cleanse(key, sizeof(key));
    if (rc == 0) {
        *ct_hex = hex_of(ct, len + CRYPTO_GCM_TAG_LEN);
        *nonce_hex = hex_of(nonce, sizeof(nonce));
        if (*ct_hex == NULL || *nonce_hex == NULL) {
            free(*ct_hex);
            free(*nonce_hex);
            *ct_hex = *nonce_hex = NULL;
            rc = AB_ENOMEM;
        }
    }
    free(ct);
    return rc;
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

/* Re-encrypts one row's value (hex columns) under key/key_id with aad; hex out. */
static int reseal(const struct vault_keyring *kr, const char *purpose, const char *old_key_id,
                  const char *ct_hex, const char *nonce_hex, const uint8_t *aad, size_t aadlen,
                  const uint8_t key[CRYPTO_AES_KEY_LEN], char **new_ct, char **new_nonce)
{
    uint8_t nonce[CRYPTO_GCM_NONCE_LEN];
    uint8_t *pt = NULL, *ct = NULL;
    size_t len = 0;
    int rc;

    *new_ct = *new_nonce = NULL;
    rc = vault_open_hex(kr, purpose, old_key_id, ct_hex, nonce_hex, aad, aadlen, &pt, &len);
    if (rc != 0)
        return rc;
    ct = malloc(len + CRYPTO_GCM_TAG_LEN);
    if (ct == NULL) {
        rc = AB_ENOMEM;
        goto out;
    }
    rc = vault_seal(key, aad, aadlen, pt, len, nonce, ct);
    if (rc != 0)
        goto out;
    *new_ct = hex_of(ct, len + CRYPTO_GCM_TAG_LEN);
    *new_nonce = hex_of(nonce, sizeof(nonce));
    if (*new_ct == NULL || *new_nonce == NULL)
        rc = AB_ENOMEM;
out:
    if (pt != NULL) {
        OPENSSL_cleanse(pt, len);
        free(pt);
    }
    free(ct);
    return rc;
}

static int rotate_table(PGconn *c, const struct vault_keyring *kr, bool tokens, int gen,
                        size_t *count, char *err, size_t errlen)
{
    const char *purpose = tokens ? VAULT_PURPOSE_TOKENS : VAULT_PURPOSE_SECRETS;
    const char *select_sql =
        tokens ? "SELECT id, hash, '', '', encode(token_ciphertext, 'hex'), "
                 "encode(token_nonce, 'hex'), token_key_id FROM api_keys "
                 "WHERE token_ciphertext IS NOT NULL ORDER BY id FOR UPDATE"
               : "SELECT id::text, namespace, user_name, name || '/' || version::text, "
                 "encode(ciphertext, 'hex'), encode(nonce, 'hex'), key_id FROM vault_secrets "
                 "ORDER BY id FOR UPDATE";
    const char *update_sql =
        tokens ? "UPDATE api_keys SET token_ciphertext = decode($2, 'hex'), "
                 "token_nonce = decode($3, 'hex'), token_key_id = $4 WHERE id = $1"
               : "UPDATE vault_secrets SET ciphertext = decode($2, 'hex'), "
                 "nonce = decode($3, 'hex'), key_id = $4 WHERE id = $1::bigint";
    uint8_t key[CRYPTO_AES_KEY_LEN];
    uint8_t aad[4 * 5 + 3 * 256 + VAULT_NAME_MAX + 64];
    char key_id[VAULT_KEY_ID_MAX];
    PGresult *r;
    int rc, row;

    *count = 0;
    rc = vault_keyring_derive(kr, purpose, gen, key, key_id);
    if (rc != 0)
        return rc;
    r = PQexec(c, select_sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = db_fail(c, r, "cannot read rows to re-encrypt", err, errlen);
        goto out;
    }
    for (row = 0; row < PQntuples(r) && rc == 0; row++) {
        const char *id = PQgetvalue(r, row, 0);
        char name[VAULT_NAME_MAX + 1] = "";
        char *ct = NULL, *nonce = NULL;
        const char *uv[4];
        PGresult *u;
        size_t aadlen;
        int version = 0;

        if (tokens) {
            aadlen = vault_token_aad(id, PQgetvalue(r, row, 1), aad, sizeof(aad));
        } else {
            const char *nv = PQgetvalue(r, row, 3);
            const char *slash = strrchr(nv, '/');
            size_t nl = slash != NULL ? (size_t)(slash - nv) : 0;
            if (slash == NULL || nl > VAULT_NAME_MAX) {
                snprintf(err, errlen, "vault row %s has a malformed name", id);
                rc = AB_EINVAL;
                break;
            }
            memcpy(name, nv, nl);
            name[nl] = '\0';
            version = atoi(slash + 1);
            aadlen = vault_aad(PQgetvalue(r, row, 1), PQgetvalue(r, row, 2), name, version, aad,
                               sizeof(aad));
        }
        if (aadlen > sizeof(aad)) {
            snprintf(err, errlen, "row %s: scope too long", id);
            rc = AB_EINVAL;
            break;
        }
        rc = reseal(kr, purpose, PQgetvalue(r, row, 6), PQgetvalue(r, row, 4),
                    PQgetvalue(r, row, 5), aad, aadlen, key, &ct, &nonce);
        if (rc != 0) {
            if (tokens)
                snprintf(err, errlen,
                         "the stored token of API key %s does not decrypt (key %s): nothing "
                         "was changed; pass the secret it was written with as "
                         "--previous-hub-secret-file",
                         id, PQgetvalue(r, row, 6));
            else
                snprintf(err, errlen,
                         "secret \"%s\" of %s/%s does not decrypt (key %s): nothing was "
                         "changed; pass the secret it was written with as "
                         "--previous-hub-secret-file",
                         name, PQgetvalue(r, row, 1), PQgetvalue(r, row, 2), PQgetvalue(r, row, 6));
            rc = AB_EDENIED;
            free(ct);
            free(nonce);
            break;
        }
        uv[0] = id;
        uv[1] = ct;
        uv[2] = nonce;
        uv[3] = key_id;
        u = PQexecParams(c, update_sql, 4, NULL, uv, NULL, NULL, 0);
        if (PQresultStatus(u) != PGRES_COMMAND_OK)
            rc = db_fail(c, u, "cannot store a re-encrypted row", err, errlen);
        PQclear(u);
        free(ct);
        free(nonce);
        if (rc == 0)
            (*count)++;
    }
out:
    OPENSSL_cleanse(key, sizeof(key));
    PQclear(r);
    return rc;
}

int vault_rotate_conn(PGconn *c, const struct vault_keyring *kr, const char *actor, int *generation,
                      size_t *secrets, size_t *tokens, char *err, size_t errlen)
{
    struct audit_entry ae = {0};
    json_t *d = NULL;
    PGresult *r;
    int rc;

    *secrets = *tokens = 0;
    rc = db_exec(c, "BEGIN", err, errlen);
    if (rc != 0)
        return rc;
    r = PQexec(c, "INSERT INTO hub_key_generations (generation) "
                  "SELECT coalesce(max(generation), 0) + 1 FROM hub_key_generations "
                  "RETURNING generation");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        rc = db_fail(c, r, "cannot add a key generation (is another rotation running?)", err,
                     errlen);
        PQclear(r);
        goto out;
    }
    *generation = atoi(PQgetvalue(r, 0, 0));
    PQclear(r);
    rc = rotate_table(c, kr, false, *generation, secrets, err, errlen);
    if (rc == 0)
        rc = rotate_table(c, kr, true, *generation, tokens, err, errlen);
    if (rc != 0)
        goto out;
    d = json_pack("{s:i,s:I,s:I}", "generation", *generation, "secrets", (json_int_t)*secrets,
                  "tokens", (json_int_t)*tokens);
    ae.actor = actor;
    ae.action = "vault.rotate-key";
    ae.target = kr->fp;
    ae.details = d;
    rc = audit_write_conn(c, &ae, err, errlen);
    json_decref(d);
out:
    return db_finish_tx(c, rc, err, errlen);
}
