/* `vault rotate-key`'s storage: a new key generation and every sealed row
 * (vault values, API key tokens) re-encrypted under it, in one transaction. */
#include "hub/vault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "agentbox/common.h"
#include "hub/audit.h"
#include "hub/db.h"

/* Re-encrypts one row's value (hex columns) under generation gen with aad; hex out. */
static int reseal(const struct vault_keyring *kr, const char *purpose, const char *old_key_id,
                  const char *ct_hex, const char *nonce_hex, const uint8_t *aad, size_t aadlen,
                  int gen, char **new_ct, char **new_nonce, char key_id[VAULT_KEY_ID_MAX])
{
    uint8_t *pt = NULL;
    size_t len = 0;
    int rc;

    *new_ct = *new_nonce = NULL;
    rc = vault_open_hex(kr, purpose, old_key_id, ct_hex, nonce_hex, aad, aadlen, &pt, &len);
    if (rc != 0)
        return rc;
    rc = vault_seal_hex(kr, purpose, gen, aad, aadlen, pt, len, new_ct, new_nonce, key_id);
    OPENSSL_cleanse(pt, len);
    free(pt);
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
    char key_id[VAULT_KEY_ID_MAX], row_key_id[VAULT_KEY_ID_MAX];
    PGresult *r;
    int rc, row;

    *count = 0;
    /* the generation's key id, and a check that the key ring can derive it */
    rc = vault_keyring_derive(kr, purpose, gen, key, key_id);
    OPENSSL_cleanse(key, sizeof(key));
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
                    PQgetvalue(r, row, 5), aad, aadlen, gen, &ct, &nonce, row_key_id);
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
