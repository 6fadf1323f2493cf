/* `agentbox-hub key …` and `agentbox-hub team …`: synchronous CLIs over
 * libpq (never inside `serve`). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "hub/db.h"
#include "hub/iam.h"
#include "hub/cli.h"
#include "hub/keys.h"
#include "hub/vault.h"

struct key_cli_config {
    char *database_url;
    int64_t connect_timeout_ms;
    char *hub_secret;
    char *hub_secret_file;
    char *team;
    char *user;
    char *name;
    bool agent;
    bool admin;
    int64_t expires_ms;
    bool all;
};

#define KOPT(field) offsetof(struct key_cli_config, field)

static const struct cfg_option key_options[] = {
    {"database_url", CFG_STRING, NULL, false, KOPT(database_url),
     "PostgreSQL URL (postgres://user:pass@host/db); unset: libpq's PG* variables", "DATABASE_URL"},
    {"db_connect_timeout", CFG_DURATION, "10s", false, KOPT(connect_timeout_ms),
     "give up connecting to PostgreSQL after this", NULL},
    {"hub_secret", CFG_STRING, NULL, false, KOPT(hub_secret),
     "the hub secret (create: encrypts the stored token); prefer the environment or a file", NULL},
    {"hub_secret_file", CFG_STRING, NULL, false, KOPT(hub_secret_file),
     "file holding the hub secret (first line)", NULL},
    {"team", CFG_STRING, NULL, false, KOPT(team), "create: the key's team", NULL},
    {"user", CFG_STRING, NULL, false, KOPT(user), "create: the key's user", NULL},
    {"name", CFG_STRING, "", false, KOPT(name), "create: a description", NULL},
    {"agent", CFG_BOOL, "false", false, KOPT(agent),
     "create: agent mode (may not mint keys; native writes need approval)", NULL},
    {"admin", CFG_BOOL, "false", false, KOPT(admin), "create: role admin instead of tenant", NULL},
    {"expires", CFG_DURATION, "0", false, KOPT(expires_ms),
     "create: the key expires after this (e.g. 720h, 90s); 0 never", NULL},
    {"all", CFG_BOOL, "false", false, KOPT(all), "list: include revoked keys", NULL},
};

static const char KEY_USAGE[] =
    "agentbox-hub key create --team T --user U [--name N] [--agent] [--admin] [--expires D]\n"
    "       agentbox-hub key list [--team T] [--user U] [--all]\n"
    "       agentbox-hub key revoke ID";
static const char KEY_DESCRIPTION[] =
    "Manages API keys (agbx_…) in PostgreSQL. create prints the new key once, alone on\n"
    "stdout's last line; only its SHA-256 and an encrypted copy are stored (the hub\n"
    "secret is needed to encrypt it). revoke takes effect on the hub's next request and\n"
    "reaches agents within the hub's scan interval.\n"
    "Exit status: 0 done, 1 failed, 2 bad usage.";

PGconn *keys_cli_connect(const char *url, int64_t timeout_ms, char *err, size_t errlen)
{
    struct db_connect_options o = {
        .database_url = url,
        .connect_timeout_ms = timeout_ms,
        .application_name = "agentbox-hub-cli",
        .hint = DB_CONNECT_HINT,
    };
    PGconn *c = NULL;

    return db_connect(&o, &c, err, errlen) == 0 ? c : NULL;
}

/* Loads the hub secret of a CLI into a key ring. */
int keys_cli_keyring(const char *value, const char *file, const char *prev_file,
                     struct vault_keyring *kr, char *err, size_t errlen)
{
    char *s = NULL, *p = NULL;
    size_t n = 0, pn = 0;
    int rc;

    rc = vault_hub_secret_load("hub_secret", value, file, &s, &n, err, errlen);
    if (rc == 0 && prev_file != NULL && prev_file[0] != '\0')
        rc = vault_hub_secret_load("previous_hub_secret", NULL, prev_file, &p, &pn, err, errlen);
    if (rc == 0)
        rc = vault_keyring_init(kr, s, n, p, pn, err, errlen);
    if (s != NULL)
        OPENSSL_cleanse(s, n);
    if (p != NULL)
        OPENSSL_cleanse(p, pn);
    free(s);
    free(p);
    return rc;
}

static const char *str_or(json_t *o, const char *k, const char *def)
{
    const char *s = json_string_value(json_object_get(o, k));

    return s != NULL ? s : def;
}

static int key_list(PGconn *c, const struct key_cli_config *cfg, char *err, size_t errlen)
{
    json_t *arr = NULL, *k;
    size_t i;
    int rc;

    rc = keys_list_conn(c, NULL, cfg->team, cfg->user, cfg->all, &arr, err, errlen);
    if (rc != 0)
        return rc;
    printf("%-19s  %-9s  %-16s  %-16s  %-24s  %-6s  %-12s  %-20s  %-20s  %s\n", "ID", "PREFIX",
           "TEAM", "USER", "NAMESPACE", "ROLE", "MODE", "CREATED", "EXPIRES", "STATUS");
    json_array_foreach(arr, i, k)
    {
        const char *status = "active";
        if (str_or(k, "revokedAt", NULL) != NULL)
            status = "revoked";
        printf("%-19s  %-9s  %-16s  %-16s  %-24s  %-6s  %-12s  %-20s  %-20s  %s\n",
               str_or(k, "id", ""), str_or(k, "prefix", ""), str_or(k, "team", ""),
               str_or(k, "user", ""), str_or(k, "namespace", ""), str_or(k, "role", ""),
               str_or(k, "mode", ""), str_or(k, "createdAt", ""), str_or(k, "expiresAt", "never"),
               status);
    }
    printf("%zu key(s)\n", json_array_size(arr));
    json_decref(arr);
    return 0;
}

static int key_create(PGconn *c, const struct key_cli_config *cfg, char *err, size_t errlen)
{
    struct keys_create_request rq = {0};
    struct vault_keyring kr;
    char token[KEYS_TOKEN_LEN + 1];
    json_t *k = NULL;
    int rc;

    if (cfg->team == NULL || cfg->user == NULL) {
        snprintf(err, errlen, "create needs --team and --user");
        return AB_EINVAL;
    }
    rc = keys_cli_keyring(cfg->hub_secret, cfg->hub_secret_file, NULL, &kr, err, errlen);
    if (rc != 0)
        return rc;
    rq.team = cfg->team;
    rq.user = cfg->user;
    rq.name = cfg->name;
    rq.role = cfg->admin ? KEYS_ROLE_ADMIN : KEYS_ROLE_TENANT;
    rq.mode = cfg->agent ? KEYS_MODE_AGENT : KEYS_MODE_UNRESTRICTED;
    rq.expires_in_ms = cfg->expires_ms;
    rq.actor = "cli";
    rc = keys_create_conn(c, &kr, &rq, token, &k, err, errlen);
    vault_keyring_clear(&kr);
    if (rc != 0)
        return rc;
    printf("created api key %s (%s) for %s/%s in namespace %s, role %s, mode %s, expires %s\n",
           str_or(k, "id", ""), str_or(k, "prefix", ""), cfg->team, cfg->user,
           str_or(k, "namespace", ""), str_or(k, "role", ""), str_or(k, "mode", ""),
           str_or(k, "expiresAt", "never"));
    printf("the key is shown once; store it now:\n%s\n", token);
    OPENSSL_cleanse(token, sizeof(token));
    json_decref(k);
    return 0;
}

static int key_run(PGconn *c, struct cli_run *r, char *err, size_t errlen)
{
    const char *id = r->res->positional[1];
    int rc;

    if (r->cmd == 0)
        return key_create(c, r->cfg, err, errlen);
    if (r->cmd == 1)
        return key_list(c, r->cfg, err, errlen);
    rc = keys_revoke_conn(c, id, NULL, NULL, "cli", NULL, err, errlen);
    if (rc == 0)
        printf("revoked api key %s\n", id);
    return rc;
}

static const struct cli_cmd key_cmds[] = {
    {"create", 0, "takes no arguments besides flags"},
    {"list", 0, "takes no arguments besides flags"},
    {"revoke", 1, "takes exactly one key id (see key list)"},
};
static const struct cli key_cli = {
    .prog = "agentbox-hub key",
    .usage = KEY_USAGE,
    .description = KEY_DESCRIPTION,
    .opts = key_options,
    .nopts = AB_ARRAY_LEN(key_options),
    .cmds = key_cmds,
    .ncmds = AB_ARRAY_LEN(key_cmds),
    .url_off = KOPT(database_url),
    .timeout_off = KOPT(connect_timeout_ms),
    .run = key_run,
};

int keys_cli_main(int argc, char **argv)
{
    struct key_cli_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    return cli_main(&key_cli, &cfg, NULL, argc, argv);
}

/* --- team ------------------------------------------------------------------------------- */

struct team_cli_config {
    char *database_url;
    int64_t connect_timeout_ms;
};

#define TOPT(field) offsetof(struct team_cli_config, field)

static const struct cfg_option team_options[] = {
    {"database_url", CFG_STRING, NULL, false, TOPT(database_url),
     "PostgreSQL URL (postgres://user:pass@host/db); unset: libpq's PG* variables", "DATABASE_URL"},
    {"db_connect_timeout", CFG_DURATION, "10s", false, TOPT(connect_timeout_ms),
     "give up connecting to PostgreSQL after this", NULL},
};

static const char TEAM_USAGE[] = "agentbox-hub team set-namespace TEAM NAMESPACE\n"
                                 "       agentbox-hub team clear-namespace TEAM\n"
                                 "       agentbox-hub team list";
static const char TEAM_DESCRIPTION[] =
    "Overrides the namespace of every key of a team (default: t-<team>-<user> per\n"
    "user). Takes effect on the next request of each key.\n"
    "Exit status: 0 done, 1 failed, 2 bad usage.";

static int team_list(PGconn *c, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, "SELECT team, namespace, updated_by, "
                            "to_char(updated_at AT TIME ZONE 'UTC', "
                            "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM team_namespaces ORDER BY team");
    char line[256];
    int i;

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "cannot list teams: %s", db_error_line(c, r, line, sizeof(line)));
        PQclear(r);
        return AB_EIO;
    }
    printf("%-24s  %-32s  %-20s  %s\n", "TEAM", "NAMESPACE", "UPDATED", "BY");
    for (i = 0; i < PQntuples(r); i++)
        printf("%-24s  %-32s  %-20s  %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
               PQgetvalue(r, i, 3), PQgetvalue(r, i, 2));
    PQclear(r);
    return 0;
}

static int team_run(PGconn *c, struct cli_run *r, char *err, size_t errlen)
{
    const char *team = r->res->positional[1];
    int rc;

    if (r->cmd == 2)
        return team_list(c, err, errlen);
    rc = iam_team_namespace_set_conn(c, team, r->cmd == 0 ? r->res->positional[2] : NULL, "cli",
                                     err, errlen);
    if (rc == 0 && r->cmd == 0)
        printf("team %s now uses namespace %s\n", team, r->res->positional[2]);
    else if (rc == 0)
        printf("team %s uses t-<team>-<user> namespaces again\n", team);
    return rc;
}

static const struct cli_cmd team_cmds[] = {
    {"set-namespace", 2, "takes a team and a namespace"},
    {"clear-namespace", 1, "takes a team"},
    {"list", 0, "takes no arguments besides flags"},
};
static const struct cli team_cli = {
    .prog = "agentbox-hub team",
    .usage = TEAM_USAGE,
    .description = TEAM_DESCRIPTION,
    .opts = team_options,
    .nopts = AB_ARRAY_LEN(team_options),
    .cmds = team_cmds,
    .ncmds = AB_ARRAY_LEN(team_cmds),
    .url_off = TOPT(database_url),
    .timeout_off = TOPT(connect_timeout_ms),
    .run = team_run,
};

int iam_team_cli_main(int argc, char **argv)
{
    struct team_cli_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    return cli_main(&team_cli, &cfg, NULL, argc, argv);
}
