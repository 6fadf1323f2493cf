/* Console users: scrypt password hashes and the `user` CLI (synchronous
 * libpq, never inside `serve`). */
#include "hub/users.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/crypto.h"
#include "hub/cli.h"
#include "hub/db.h"
#include "hub/keys.h"

#define SALT_LEN 16
#define DK_LEN 32

static int scrypt(const char *pw, const uint8_t *salt, size_t saltlen, unsigned ln, unsigned r,
                  unsigned p, uint8_t *out, size_t outlen)
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "SCRYPT", NULL);
    EVP_KDF_CTX *ctx = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
    uint64_t n = (uint64_t)1 << ln;
    uint32_t rr = r, pp = p;
    uint64_t maxmem = (uint64_t)128 * r * (n + p + 2) + (1u << 20);
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PASSWORD, (void *)pw, strlen(pw)),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, saltlen),
        OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_N, &n),
        OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_R, &rr),
        OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_P, &pp),
        OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_MAXMEM, &maxmem),
        OSSL_PARAM_construct_end(),
    };
    int rc = ctx != NULL && EVP_KDF_derive(ctx, out, outlen, params) == 1 ? 0 : AB_EIO;

    EVP_KDF_CTX_free(ctx);
    EVP_KDF_free(kdf);
    return rc;
}

int users_password_hash(const char *password, char out[USERS_HASH_MAX + 1], char *err,
                        size_t errlen)
{
    uint8_t salt[SALT_LEN], dk[DK_LEN];
    char s64[32], k64[64];
    size_t n = strlen(password);

    if (n < USERS_PASSWORD_MIN || n > USERS_PASSWORD_MAX) {
        snprintf(err, errlen, "field 'password' must be %d to %d characters", USERS_PASSWORD_MIN,
                 USERS_PASSWORD_MAX);
        return AB_EINVAL;
    }
    if (crypto_random(salt, sizeof(salt)) != 0 ||
        scrypt(password, salt, sizeof(salt), USERS_SCRYPT_LN, USERS_SCRYPT_R, USERS_SCRYPT_P, dk,
               sizeof(dk)) != 0) {
        snprintf(err, errlen, "cannot hash the password (OpenSSL scrypt failed)");
        return AB_EIO;
    }
    crypto_base64_encode(salt, sizeof(salt), s64);
    crypto_base64_encode(dk, sizeof(dk), k64);
    OPENSSL_cleanse(dk, sizeof(dk));
    snprintf(out, USERS_HASH_MAX + 1, "$scrypt$ln=%d,r=%d,p=%d$%s$%s", USERS_SCRYPT_LN,
             USERS_SCRYPT_R, USERS_SCRYPT_P, s64, k64);
    return 0;
}

bool users_password_verify(const char *password, const char *hash)
{
    unsigned ln, r, p;
    char s64[64], k64[96];
    uint8_t salt[48], want[64], got[64];
    size_t saltlen = 0, klen = 0;
    bool ok;

    if (sscanf(hash, "$scrypt$ln=%u,r=%u,p=%u$%63[^$]$%95s", &ln, &r, &p, s64, k64) != 5)
        return false;
    /* bounds that keep a tampered row from costing more than 256 MiB or a minute */
    if (ln < 1 || ln > 20 || r < 1 || r > 32 || p < 1 || p > 4)
        return false;
    if (crypto_base64_decode(s64, strlen(s64), salt, sizeof(salt), &saltlen) != 0 ||
        crypto_base64_decode(k64, strlen(k64), want, sizeof(want), &klen) != 0 || klen < 16)
        return false;
    if (scrypt(password, salt, saltlen, ln, r, p, got, klen) != 0)
        return false;
    ok = crypto_equal(got, want, klen);
    OPENSSL_cleanse(got, sizeof(got));
    return ok;
}

int users_check_name(const char *u, char *err, size_t errlen)
{
    size_t n = strlen(u);
    bool ok = n >= 1 && n <= USERS_NAME_MAX &&
              ((u[0] >= 'a' && u[0] <= 'z') || (u[0] >= '0' && u[0] <= '9'));

    for (size_t i = 0; ok && i < n; i++)
        ok = (u[i] >= 'a' && u[i] <= 'z') || (u[i] >= '0' && u[i] <= '9') || u[i] == '.' ||
             u[i] == '_' || u[i] == '-';
    if (!ok) {
        snprintf(err, errlen,
                 "field 'username' must be 1 to %d of a-z 0-9 . _ - starting with a letter or "
                 "digit",
                 USERS_NAME_MAX);
        return AB_EINVAL;
    }
    return 0;
}

/* --- CLI ---------------------------------------------------------------------------- */

struct user_cli_config {
    char *database_url;
    int64_t connect_timeout_ms;
    char *team;
    bool admin;
    char *password_file;
};

#define UOPT(field) offsetof(struct user_cli_config, field)

static const struct cfg_option user_options[] = {
    {"database_url", CFG_STRING, NULL, false, UOPT(database_url),
     "PostgreSQL URL (postgres://user:pass@host/db); unset: libpq's PG* variables", "DATABASE_URL"},
    {"db_connect_timeout", CFG_DURATION, "10s", false, UOPT(connect_timeout_ms),
     "give up connecting to PostgreSQL after this", NULL},
    {"team", CFG_STRING, NULL, false, UOPT(team), "add: the user's team (required)", NULL},
    {"admin", CFG_BOOL, "false", false, UOPT(admin), "add: role admin instead of tenant", NULL},
    {"password_file", CFG_STRING, NULL, false, UOPT(password_file),
     "add, passwd: read the password from this file's first line; unset: from stdin's first "
     "line (never a flag: flags show in ps)",
     NULL},
};

static const char USER_USAGE[] = "agentbox-hub user add USERNAME --team T [--admin]\n"
                                 "       agentbox-hub user passwd USERNAME\n"
                                 "       agentbox-hub user disable USERNAME\n"
                                 "       agentbox-hub user list";
static const char USER_DESCRIPTION[] =
    "Manages the console's human users. The password is read from --password-file or\n"
    "stdin (first line) and stored only as a scrypt hash. passwd and disable end every\n"
    "session of the user at once. Console sessions are the only principal that decides\n"
    "approvals (POST /api/v1/approvals/{id}/decision).\n"
    "Exit status: 0 done, 1 failed, 2 bad usage.";

static int read_password(const char *file, char *out, size_t cap, char *err, size_t errlen)
{
    FILE *f = file != NULL && file[0] != '\0' ? fopen(file, "r") : stdin;
    size_t n;

    if (f == NULL) {
        snprintf(err, errlen, "password_file '%s': cannot open it", file);
        return AB_EINVAL;
    }
    if (fgets(out, (int)cap, f) == NULL)
        out[0] = '\0';
    if (f != stdin)
        fclose(f);
    n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        out[--n] = '\0';
    if (n == 0) {
        snprintf(err, errlen, "no password: give it on stdin's first line or in --password-file");
        return AB_EINVAL;
    }
    return 0;
}

static int exec_params(PGconn *c, const char *sql, int n, const char *const *vals, int *rows,
                       const char *what, char *err, size_t errlen)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
    int rc = 0;

    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        rc = db_fail(c, r, what, err, errlen);
    else if (rows != NULL)
        *rows = atoi(PQcmdTuples(r));
    PQclear(r);
    return rc;
}

static int user_list(PGconn *c, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, "SELECT username, team, role, "
                            "to_char(created_at AT TIME ZONE 'UTC', "
                            "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), disabled_at IS NOT NULL "
                            "FROM console_users ORDER BY username");
    int i;

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        db_fail(c, r, "cannot list users", err, errlen);
        PQclear(r);
        return AB_EIO;
    }
    printf("%-24s  %-24s  %-6s  %-20s  %s\n", "USERNAME", "TEAM", "ROLE", "CREATED", "STATUS");
    for (i = 0; i < PQntuples(r); i++)
        printf("%-24s  %-24s  %-6s  %-20s  %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
               PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
               PQgetvalue(r, i, 4)[0] == 't' ? "disabled" : "active");
    printf("%d user(s)\n", PQntuples(r));
    PQclear(r);
    return 0;
}

static int user_run(PGconn *c, const char *sub, const char *name, const struct user_cli_config *cfg,
                    char *err, size_t errlen)
{
    char pw[USERS_PASSWORD_MAX + 2], hash[USERS_HASH_MAX + 1];
    int rc, rows = 0;

    if (strcmp(sub, "disable") == 0) {
        const char *v[1] = {name};
        rc = exec_params(c,
                         "WITH u AS (UPDATE console_users SET disabled_at = coalesce(disabled_at, "
                         "now()) WHERE username = $1 RETURNING username) "
                         "UPDATE console_sessions SET revoked_at = now() WHERE username = "
                         "(SELECT username FROM u) AND revoked_at IS NULL",
                         1, v, NULL, "cannot disable the user", err, errlen);
        if (rc == 0) {
            PGresult *r = PQexecParams(c, "SELECT 1 FROM console_users WHERE username = $1", 1,
                                       NULL, v, NULL, NULL, 0);
            rows = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : 0;
            PQclear(r);
        }
        if (rc == 0 && rows == 0) {
            snprintf(err, errlen, "no user '%s': list them with `agentbox-hub user list`", name);
            return AB_ENOENT;
        }
        if (rc == 0)
            printf("user %s disabled; every session of it ended\n", name);
        return rc;
    }
    rc = users_check_name(name, err, errlen);
    if (rc == 0 && strcmp(sub, "add") == 0) {
        if (cfg->team == NULL || cfg->team[0] == '\0') {
            snprintf(err, errlen, "add needs --team");
            return AB_EINVAL;
        }
        rc = iam_check_name("team", cfg->team, err, errlen);
    }
    if (rc == 0)
        rc = read_password(cfg->password_file, pw, sizeof(pw), err, errlen);
    if (rc == 0)
        rc = users_password_hash(pw, hash, err, errlen);
    OPENSSL_cleanse(pw, sizeof(pw));
    if (rc != 0)
        return rc;
    if (strcmp(sub, "add") == 0) {
        const char *v[4] = {name, cfg->team, cfg->admin ? "admin" : "tenant", hash};
        rc = exec_params(c,
                         "INSERT INTO console_users (username, team, role, password_hash) "
                         "VALUES ($1, $2, $3, $4) ON CONFLICT (username) DO NOTHING",
                         4, v, &rows, "cannot add the user", err, errlen);
        if (rc == 0 && rows == 0) {
            snprintf(err, errlen,
                     "user '%s' already exists: change its password with `agentbox-hub user "
                     "passwd %s`",
                     name, name);
            return AB_EEXIST;
        }
        if (rc == 0)
            printf("user %s added to team %s (%s)\n", name, cfg->team, v[2]);
    } else {
        const char *v[2] = {name, hash};
        rc = exec_params(c,
                         "WITH u AS (UPDATE console_users SET password_hash = $2, password_at = "
                         "now() WHERE username = $1 RETURNING username), "
                         "s AS (UPDATE console_sessions SET revoked_at = now() WHERE username IN "
                         "(SELECT username FROM u) AND revoked_at IS NULL) "
                         "SELECT username FROM u",
                         2, v, &rows, "cannot change the password", err, errlen);
        if (rc == 0 && rows == 0) {
            snprintf(err, errlen, "no user '%s': add it with `agentbox-hub user add`", name);
            return AB_ENOENT;
        }
        if (rc == 0)
            printf("password of %s changed; every session of it ended\n", name);
    }
    OPENSSL_cleanse(hash, sizeof(hash));
    return rc;
}

static int user_cli_run(PGconn *c, struct cli_run *r, char *err, size_t errlen)
{
    if (r->cmd == 3)
        return user_list(c, err, errlen);
    return user_run(c, r->res->positional[0], r->res->positional[1], r->cfg, err, errlen);
}

static const struct cli_cmd user_cmds[] = {
    {"add", 1, "takes exactly one user name"},
    {"passwd", 1, "takes exactly one user name"},
    {"disable", 1, "takes exactly one user name"},
    {"list", 0, "takes no arguments besides flags"},
};
static const struct cli user_cli = {
    .prog = "agentbox-hub user",
    .usage = USER_USAGE,
    .description = USER_DESCRIPTION,
    .opts = user_options,
    .nopts = AB_ARRAY_LEN(user_options),
    .cmds = user_cmds,
    .ncmds = AB_ARRAY_LEN(user_cmds),
    .url_off = UOPT(database_url),
    .timeout_off = UOPT(connect_timeout_ms),
    .run = user_cli_run,
};

int users_cli_main(int argc, char **argv)
{
    struct user_cli_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    return cli_main(&user_cli, &cfg, NULL, argc, argv);
}
