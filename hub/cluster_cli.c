/* `agentbox-hub cluster add|list|rotate-token|disable|enable`: the member
 * clusters in PostgreSQL, for operators. A synchronous CLI over libpq (like
 * migrate.c); never runs inside `serve`. A running hub sees every change
 * within one refresh of its registry (clusters.c, 2 s).
 *
 * Join tokens (abxc_ + 64 hex) are printed once, as the last line of stdout,
 * and only their SHA-256 is stored. Each change writes an audit_log row in
 * the same transaction. */
#include "hub/clusters.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/crypto.h>

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/crypto.h"
#include "agentbox/sbxid.h"
#include "hub/audit.h"
#include "hub/db.h"

#define CLI_NAME_MAX 127  /* bytes; what the hub's registry keeps (cluster_info.name) */
#define CLI_REGION_MAX 63 /* bytes; cluster_info.region */
#define CLI_TOKEN_MAX 80  /* "abxc_" + 64 hex + NUL, rounded up */
#define CLI_ACTOR_MAX 128

struct cluster_cli_config {
    char *database_url;
    int64_t connect_timeout_ms;
    char *name;
    char *region;
    char *namespaces;
    bool json;
};

#define COPT(field) offsetof(struct cluster_cli_config, field)

static const char DB_URL_HELP[] =
    "PostgreSQL URL (postgres://user:pass@host/db); unset: libpq's PG* variables";
static const char DB_TIMEOUT_HELP[] = "give up connecting to PostgreSQL after this";

static const struct cfg_option add_options[] = {
    {"database_url", CFG_STRING, NULL, false, COPT(database_url), DB_URL_HELP, "DATABASE_URL"},
    {"db_connect_timeout", CFG_DURATION, "10s", false, COPT(connect_timeout_ms), DB_TIMEOUT_HELP,
     NULL},
    {"name", CFG_STRING, "", false, COPT(name), "display name (at most 127 bytes)", NULL},
    {"region", CFG_STRING, "", false, COPT(region), "region label (at most 63 bytes)", NULL},
    {"namespaces", CFG_STRING, "*", false, COPT(namespaces),
     "namespaces the cluster may serve, comma-separated (a,b); '*' every namespace. Its capacity "
     "reports, events and sandbox rows for any other are dropped, and no tenant of another is "
     "placed on it",
     NULL},
};
static const struct cfg_option list_options[] = {
    {"database_url", CFG_STRING, NULL, false, COPT(database_url), DB_URL_HELP, "DATABASE_URL"},
    {"db_connect_timeout", CFG_DURATION, "10s", false, COPT(connect_timeout_ms), DB_TIMEOUT_HELP,
     NULL},
    {"json", CFG_BOOL, "false", false, COPT(json), "print JSON instead of a table", NULL},
};
static const struct cfg_option id_options[] = {
    {"database_url", CFG_STRING, NULL, false, COPT(database_url), DB_URL_HELP, "DATABASE_URL"},
    {"db_connect_timeout", CFG_DURATION, "10s", false, COPT(connect_timeout_ms), DB_TIMEOUT_HELP,
     NULL},
};

enum cli_cmd { CMD_ADD, CMD_LIST, CMD_ROTATE, CMD_DISABLE, CMD_ENABLE };

struct cli_command {
    const char *name;
    enum cli_cmd cmd;
    const struct cfg_option *opts;
    size_t nopts;
    const char *usage;
    const char *description;
};

static const struct cli_command commands[] = {
    {"add", CMD_ADD, add_options, AB_ARRAY_LEN(add_options),
     "agentbox-hub cluster add ID [--name NAME] [--region REGION] [--namespaces A,B]",
     "Registers cluster ID (a DNS label of at most 24 characters: lowercase letters,\n"
     "digits and '-', starting and ending with a letter or digit) and prints its\n"
     "join token once: the last line of stdout is the token alone. Only its SHA-256\n"
     "is stored. Give it to the cluster's agent; a running hub accepts it within 2 s.\n"
     "Exit status: 0 added, 1 refused (the id exists) or failed, 2 bad usage."},
    {"list", CMD_LIST, list_options, AB_ARRAY_LEN(list_options),
     "agentbox-hub cluster list [--json]",
     "Lists the clusters by id: name, region, enabled or disabled, online (the latest\n"
     "session is connected and was seen within 30 s), last seen, session epoch and\n"
     "agent version."},
    {"rotate-token", CMD_ROTATE, id_options, AB_ARRAY_LEN(id_options),
     "agentbox-hub cluster rotate-token ID",
     "Replaces the join token of cluster ID and prints the new one once (last line of\n"
     "stdout). The old token stops working: a running hub closes the cluster's tunnel\n"
     "within 2 s, and the agent must reconnect with the new token."},
    {"disable", CMD_DISABLE, id_options, AB_ARRAY_LEN(id_options),
     "agentbox-hub cluster disable ID",
     "Refuses cluster ID's tunnel (403) until 'cluster enable'; a running hub closes\n"
     "its live session within 2 s. Disabling a disabled cluster changes nothing."},
    {"enable", CMD_ENABLE, id_options, AB_ARRAY_LEN(id_options), "agentbox-hub cluster enable ID",
     "Lets a disabled cluster ID connect again."},
};

static void usage(FILE *f)
{
    fprintf(f, "Usage: agentbox-hub cluster COMMAND [flags]\n"
               "\n"
               "The member clusters (DESIGN §5, §9), in PostgreSQL.\n"
               "\n"
               "Commands:\n"
               "  add ID [--name N] [--region R] [--namespaces A,B]\n"
               "                                  register a cluster; prints its join token once\n"
               "  list [--json]                   clusters with their session state\n"
               "  rotate-token ID                 new join token (printed once); the old one dies\n"
               "  disable ID                      refuse the cluster's tunnel\n"
               "  enable ID                       accept it again\n"
               "\n"
               "Run 'agentbox-hub cluster COMMAND --help' for its flags.\n");
}

static int connect_db(const struct cluster_cli_config *cfg, PGconn **out, char *err, size_t errlen)
{
    struct db_connect_options o = {
        .database_url = cfg->database_url,
        .connect_timeout_ms = cfg->connect_timeout_ms,
        .application_name = "agentbox-hub cluster",
        .hint = DB_CONNECT_HINT,
    };

    return db_connect(&o, out, err, errlen);
}

/* Runs a statement that returns no rows; AB_EIO with err on failure. */
static int exec_cmd(PGconn *c, const char *sql, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, sql);
    char line[256];
    int rc = 0;

    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        snprintf(err, errlen, "%s failed: %s", sql, db_error_line(c, r, line, sizeof(line)));
        rc = AB_EIO;
    }
    PQclear(r);
    return rc;
}

/* Runs a parameterised statement; *out holds the result when it succeeded. */
static int exec_params(PGconn *c, const char *what, const char *sql, int n, const char *const *vals,
                       PGresult **out, char *err, size_t errlen)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    const char *state;
    char line[256];

    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        *out = r;
        return 0;
    }
    state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    snprintf(err, errlen, "cannot %s: %s%s", what, db_error_line(c, r, line, sizeof(line)),
             state != NULL && (strcmp(state, "42P01") == 0 || strcmp(state, "42703") == 0)
                 ? " (run 'agentbox-hub migrate' first)"
                 : "");
    PQclear(r);
    return AB_EIO;
}

static void actor_name(char *out, size_t len)
{
    const char *user = getenv("USER");

    if (user != NULL && user[0] != '\0')
        snprintf(out, len, "cli:%s", user);
    else
        ab_strlcpy(out, "cli", len);
}

static int audit(PGconn *c, const char *action, const char *id, json_t *details, char *err,
                 size_t errlen)
{
    char actor[CLI_ACTOR_MAX];
    struct audit_entry e = {0};

    actor_name(actor, sizeof(actor));
    e.actor = actor;
    e.action = action;
    e.target = id;
    e.cluster = id;
    e.details = details;
    return audit_write_conn(c, &e, err, errlen);
}

static void not_found(const char *id, char *err, size_t errlen)
{
    snprintf(err, errlen,
             "no cluster '%s': see 'agentbox-hub cluster list', or add it with "
             "'agentbox-hub cluster add %s'",
             id, id);
}

/* New token into token, its hash into hash. */
static int new_token(char *token, size_t len, char hash[65], char *err, size_t errlen)
{
    if (crypto_token("abxc_", token, len) != 0) {
        snprintf(err, errlen, "cannot draw a random token (OpenSSL RAND_bytes failed)");
        return AB_EIO;
    }
    crypto_sha256_hex(token, hash);
    return 0;
}

static int cmd_add(PGconn *c, const struct cluster_cli_config *cfg, const char *id, char *err,
                   size_t errlen)
{
    char token[CLI_TOKEN_MAX] = "", hash[65];
    /* cmd_check normalised namespaces: "" is every namespace (NULL in the table) */
    const char *vals[5] = {id, cfg->name, cfg->region, hash, cfg->namespaces};
    json_t *details = NULL;
    PGresult *r = NULL;
    int rc;

    rc = new_token(token, sizeof(token), hash, err, errlen);
    if (rc != 0)
        return rc;
    rc = exec_cmd(c, "BEGIN", err, errlen);
    if (rc != 0)
        goto out;
    rc = exec_params(c, "store the cluster",
                     "INSERT INTO clusters (id, name, region, token_hash, namespaces) "
                     "VALUES ($1, $2, $3, $4, NULLIF(string_to_array($5, ','), '{}')) "
                     "ON CONFLICT (id) DO NOTHING RETURNING id",
                     5, vals, &r, err, errlen);
    if (rc != 0)
        goto rollback;
    if (PQntuples(r) == 0) {
        snprintf(err, errlen,
                 "cluster '%s' already exists (conflict): 'agentbox-hub cluster rotate-token %s' "
                 "gives it a new token",
                 id, id);
        rc = AB_EEXIST;
        goto rollback;
    }
    details = json_pack("{s:s, s:s, s:s}", "name", cfg->name, "region", cfg->region, "namespaces",
                        cfg->namespaces[0] ? cfg->namespaces : "*");
    rc = audit(c, "cluster.add", id, details, err, errlen);
    if (rc != 0)
        goto rollback;
    rc = exec_cmd(c, "COMMIT", err, errlen);
    if (rc != 0)
        goto out;
    printf("cluster '%s' added. Its join token is shown only this once: give it to the\n"
           "cluster's agent (--join-token or AGENTBOX_JOIN_TOKEN); the hub keeps only its\n"
           "SHA-256.\n"
           "%s\n",
           id, token);
    goto out;
rollback:
    PQclear(PQexec(c, "ROLLBACK"));
out:
    PQclear(r);
    json_decref(details);
    OPENSSL_cleanse(token, sizeof(token));
    return rc;
}

static int cmd_rotate(PGconn *c, const char *id, char *err, size_t errlen)
{
    char token[CLI_TOKEN_MAX] = "", hash[65];
    const char *vals[2] = {id, hash};
    PGresult *r = NULL;
    int rc;

    rc = new_token(token, sizeof(token), hash, err, errlen);
    if (rc != 0)
        return rc;
    rc = exec_cmd(c, "BEGIN", err, errlen);
    if (rc != 0)
        goto out;
    rc = exec_params(c, "store the new token",
                     "UPDATE clusters SET token_hash = $2 WHERE id = $1 RETURNING id", 2, vals, &r,
                     err, errlen);
    if (rc != 0)
        goto rollback;
    if (PQntuples(r) == 0) {
        not_found(id, err, errlen);
        rc = AB_ENOENT;
        goto rollback;
    }
    rc = audit(c, "cluster.rotate_token", id, NULL, err, errlen);
    if (rc != 0)
        goto rollback;
    rc = exec_cmd(c, "COMMIT", err, errlen);
    if (rc != 0)
        goto out;
    printf("cluster '%s' has a new join token, shown only this once. The old token no longer\n"
           "works: a running hub closes the cluster's tunnel within 2 s.\n"
           "%s\n",
           id, token);
    goto out;
rollback:
    PQclear(PQexec(c, "ROLLBACK"));
out:
    PQclear(r);
    OPENSSL_cleanse(token, sizeof(token));
    return rc;
}

static int cmd_set_disabled(PGconn *c, const char *id, bool disable, char *err, size_t errlen)
{
    const char *vals[1] = {id};
    PGresult *r = NULL;
    int rc;

    rc = exec_cmd(c, "BEGIN", err, errlen);
    if (rc != 0)
        return rc;
    rc =
        exec_params(c, "read the cluster", "SELECT disabled FROM clusters WHERE id = $1 FOR UPDATE",
                    1, vals, &r, err, errlen);
    if (rc != 0)
        goto rollback;
    if (PQntuples(r) == 0) {
        not_found(id, err, errlen);
        rc = AB_ENOENT;
        goto rollback;
    }
    if ((PQgetvalue(r, 0, 0)[0] == 't') == disable) {
        printf("cluster '%s' is already %s; nothing changed\n", id,
               disable ? "disabled" : "enabled");
        goto rollback; /* nothing to commit, nothing to audit */
    }
    PQclear(r);
    r = NULL;
    rc = exec_params(c, disable ? "disable the cluster" : "enable the cluster",
                     disable ? "UPDATE clusters SET disabled = true, disabled_at = now() "
                               "WHERE id = $1"
                             : "UPDATE clusters SET disabled = false, disabled_at = NULL "
                               "WHERE id = $1",
                     1, vals, &r, err, errlen);
    if (rc != 0)
        goto rollback;
    rc = audit(c, disable ? "cluster.disable" : "cluster.enable", id, NULL, err, errlen);
    if (rc != 0)
        goto rollback;
    rc = exec_cmd(c, "COMMIT", err, errlen);
    if (rc != 0)
        goto out;
    if (disable)
        printf("cluster '%s' disabled: its tunnel is refused (403) and a running hub closes its\n"
               "live session within 2 s. 'agentbox-hub cluster enable %s' undoes this.\n",
               id, id);
    else
        printf("cluster '%s' enabled: its agent may connect again\n", id);
    goto out;
rollback:
    PQclear(PQexec(c, "ROLLBACK"));
out:
    PQclear(r);
    return rc;
}

static const char LIST_SQL[] =
    "SELECT c.id, c.name, c.region, c.disabled, "
    "COALESCE(s.disconnected_at IS NULL AND s.last_seen > now() - interval '30 seconds', false), "
    "to_char(s.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), s.epoch, "
    "s.agent_version, array_to_string(c.namespaces, ',') "
    "FROM clusters c LEFT JOIN LATERAL (SELECT epoch, last_seen, disconnected_at, agent_version "
    "FROM cluster_sessions WHERE cluster_id = c.id ORDER BY epoch DESC LIMIT 1) s ON true "
    "ORDER BY c.id";

enum {
    L_ID,
    L_NAME,
    L_REGION,
    L_DISABLED,
    L_ONLINE,
    L_SEEN,
    L_EPOCH,
    L_VERSION,
    L_NAMESPACES,
    L_NCOLS
};

/* null (every namespace) or the array of names. */
static json_t *namespaces_json(const char *list)
{
    json_t *a;
    if (!list || !list[0])
        return json_null();
    a = json_array();
    for (const char *p = list; a;) {
        const char *end = strchr(p, ',');
        json_array_append_new(a, end ? json_stringn(p, (size_t)(end - p)) : json_string(p));
        if (!end)
            break;
        p = end + 1;
    }
    return a ? a : json_null();
}

static json_t *nullable(PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col) || PQgetvalue(r, row, col)[0] == '\0')
        return json_null();
    return json_string(PQgetvalue(r, row, col));
}

static int print_json(PGresult *r, char *err, size_t errlen)
{
    json_t *arr = json_array(), *body = json_object();
    char *text = NULL;
    int rc = 0;

    if (arr == NULL || body == NULL)
        goto oom;
    for (int i = 0; i < PQntuples(r); i++) {
        json_t *o = json_object();

        if (o == NULL || json_array_append_new(arr, o) != 0)
            goto oom;
        json_object_set_new(o, "id", json_string(PQgetvalue(r, i, L_ID)));
        json_object_set_new(o, "name", json_string(PQgetvalue(r, i, L_NAME)));
        json_object_set_new(o, "region", json_string(PQgetvalue(r, i, L_REGION)));
        json_object_set_new(o, "disabled", json_boolean(PQgetvalue(r, i, L_DISABLED)[0] == 't'));
        json_object_set_new(o, "online", json_boolean(PQgetvalue(r, i, L_ONLINE)[0] == 't'));
        json_object_set_new(o, "lastSeen", nullable(r, i, L_SEEN));
        json_object_set_new(o, "epoch",
                            PQgetisnull(r, i, L_EPOCH)
                                ? json_null()
                                : json_integer(strtoll(PQgetvalue(r, i, L_EPOCH), NULL, 10)));
        json_object_set_new(o, "agentVersion", nullable(r, i, L_VERSION));
        json_object_set_new(o, "namespaces",
                            namespaces_json(PQgetisnull(r, i, L_NAMESPACES)
                                                ? NULL
                                                : PQgetvalue(r, i, L_NAMESPACES)));
    }
    json_object_set_new(body, "clusters", arr);
    arr = NULL;
    text = json_dumps(body, JSON_INDENT(2));
    if (text == NULL)
        goto oom;
    printf("%s\n", text);
    goto out;
oom:
    snprintf(err, errlen, "out of memory formatting %d clusters as JSON", PQntuples(r));
    rc = AB_ENOMEM;
out:
    free(text);
    json_decref(arr);
    json_decref(body);
    return rc;
}

static const char *cell(PGresult *r, int row, int col)
{
    const char *v;

    if (col == L_DISABLED)
        return PQgetvalue(r, row, col)[0] == 't' ? "disabled" : "enabled";
    if (col == L_ONLINE)
        return PQgetvalue(r, row, col)[0] == 't' ? "yes" : "no";
    v = PQgetvalue(r, row, col);
    if (col == L_NAMESPACES)
        return PQgetisnull(r, row, col) || v[0] == '\0' ? "*" : v;
    return PQgetisnull(r, row, col) || v[0] == '\0' ? "-" : v;
}

static void print_table(PGresult *r)
{
    static const char *const head[L_NCOLS] = {"ID",     "NAME",          "REGION",
                                              "STATUS", "ONLINE",        "LAST SEEN",
                                              "EPOCH",  "AGENT VERSION", "NAMESPACES"};
    int width[L_NCOLS];

    if (PQntuples(r) == 0) {
        printf("no clusters registered: add one with 'agentbox-hub cluster add ID'\n");
        return;
    }
    for (int k = 0; k < L_NCOLS; k++) {
        width[k] = (int)strlen(head[k]);
        for (int i = 0; i < PQntuples(r); i++)
            width[k] = AB_MAX(width[k], (int)strlen(cell(r, i, k)));
    }
    for (int i = -1; i < PQntuples(r); i++) {
        for (int k = 0; k < L_NCOLS; k++) {
            const char *v = i < 0 ? head[k] : cell(r, i, k);

            if (k == L_NCOLS - 1)
                printf("%s\n", v);
            else
                printf("%-*s  ", width[k], v);
        }
    }
}

static int cmd_list(PGconn *c, const struct cluster_cli_config *cfg, char *err, size_t errlen)
{
    PGresult *r = NULL;
    int rc;

    rc = exec_params(c, "list the clusters", LIST_SQL, 0, NULL, &r, err, errlen);
    if (rc != 0)
        return rc;
    if (cfg->json)
        rc = print_json(r, err, errlen);
    else
        print_table(r);
    PQclear(r);
    return rc;
}

static const struct cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < AB_ARRAY_LEN(commands); i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

/* Checks the positional arguments; 0 or 2 (usage) after printing why. */
static int check_args(const struct cli_command *cmd, const struct cluster_cli_config *cfg,
                      const struct cfg_result *res)
{
    char why[128];
    const char *id;

    if (cmd->cmd == CMD_LIST) {
        if (res->npositional > 0) {
            fprintf(stderr, "agentbox-hub cluster list: unexpected argument '%s' (see --help)\n",
                    res->positional[0]);
            return 2;
        }
        return 0;
    }
    if (res->npositional != 1) {
        fprintf(stderr, "agentbox-hub cluster %s: %s (usage: %s)\n", cmd->name,
                res->npositional == 0 ? "missing the cluster ID" : "expected exactly one ID",
                cmd->usage);
        return 2;
    }
    id = res->positional[0];
    if (!sbxid_cluster_is_valid(id, why, sizeof(why))) {
        fprintf(stderr,
                "agentbox-hub cluster %s: invalid cluster id '%.64s': %s (a DNS label of at "
                "most %d characters: lowercase letters, digits and '-', starting and ending "
                "with a letter or digit)\n",
                cmd->name, id, why, AB_CLUSTER_ID_MAX);
        return 2;
    }
    if (cmd->cmd == CMD_ADD) {
        if (strlen(cfg->name) > CLI_NAME_MAX) {
            fprintf(stderr, "agentbox-hub cluster add: --name is longer than %d bytes\n",
                    CLI_NAME_MAX);
            return 2;
        }
        if (strlen(cfg->region) > CLI_REGION_MAX) {
            fprintf(stderr, "agentbox-hub cluster add: --region is longer than %d bytes\n",
                    CLI_REGION_MAX);
            return 2;
        }
    }
    return 0;
}

int hub_cluster_main(int argc, char **argv)
{
    const struct cli_command *cmd;
    struct cluster_cli_config cfg;
    struct cfg_result res;
    PGconn *conn = NULL;
    char err[1024] = "";
    int rc;

    if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0 ||
        strcmp(argv[0], "help") == 0) {
        usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    cmd = find_command(argv[0]);
    if (cmd == NULL) {
        fprintf(stderr, "agentbox-hub cluster: unknown command '%s'\n\n", argv[0]);
        usage(stderr);
        return 2;
    }
    memset(&cfg, 0, sizeof(cfg));
    rc = cfg_load(cmd->opts, cmd->nopts, &cfg, argc - 1, argv + 1, &res, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "agentbox-hub cluster %s: %s\n", cmd->name, err);
        rc = 2;
        goto out;
    }
    if (res.help) {
        cfg_print_help(stdout, cmd->usage, cmd->description, cmd->opts, cmd->nopts);
        goto out;
    }
    if (cfg.name == NULL || cfg.region == NULL) {
        /* Only add has these options; the others leave them NULL. */
        if (cfg.name == NULL)
            cfg.name = strdup("");
        if (cfg.region == NULL)
            cfg.region = strdup("");
        if (cfg.name == NULL || cfg.region == NULL) {
            fprintf(stderr, "agentbox-hub cluster: out of memory\n");
            rc = 1;
            goto out;
        }
    }
    rc = check_args(cmd, &cfg, &res);
    if (rc != 0)
        goto out;
    if (cmd->cmd == CMD_ADD) {
        char ns[CLUSTERS_NS_BUF];
        if (clusters_parse_ns_list(cfg.namespaces, ns, sizeof(ns), err, sizeof(err)) != 0) {
            fprintf(stderr, "agentbox-hub cluster add: --namespaces: %s\n", err);
            rc = 2;
            goto out;
        }
        free(cfg.namespaces);
        if (!(cfg.namespaces = strdup(ns))) {
            fprintf(stderr, "agentbox-hub cluster: out of memory\n");
            rc = 1;
            goto out;
        }
    }
    rc = connect_db(&cfg, &conn, err, sizeof(err));
    if (rc == 0) {
        const char *id = res.npositional > 0 ? res.positional[0] : "";

        switch (cmd->cmd) {
        case CMD_ADD:
            rc = cmd_add(conn, &cfg, id, err, sizeof(err));
            break;
        case CMD_LIST:
            rc = cmd_list(conn, &cfg, err, sizeof(err));
            break;
        case CMD_ROTATE:
            rc = cmd_rotate(conn, id, err, sizeof(err));
            break;
        case CMD_DISABLE:
        case CMD_ENABLE:
            rc = cmd_set_disabled(conn, id, cmd->cmd == CMD_DISABLE, err, sizeof(err));
            break;
        }
    }
    if (rc != 0) {
        fflush(stdout);
        fprintf(stderr, "agentbox-hub cluster %s: %s\n", cmd->name, err);
        rc = 1;
    }
out:
    if (conn != NULL)
        PQfinish(conn);
    /* name and region may come from strdup above rather than cfg_load: free
     * them here, then let cfg_free handle whatever its table owns. */
    free(cfg.name);
    free(cfg.region);
    cfg.name = cfg.region = NULL;
    cfg_free(cmd->opts, cmd->nopts, &cfg);
    return rc;
}
