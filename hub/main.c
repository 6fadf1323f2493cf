/* agentbox-hub: subcommand dispatch. Each subcommand parses its own flags. */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/loop.h"
#include "agentbox/version.h"
#include "hub/clusters.h"
#include "hub/iam.h"
#include "hub/keys.h"
#include "hub/vault.h"
#include "hub/hub.h"
#include "hub/migrate.h"
#include "hub/signing_keys.h"

struct migrate_config {
    char *database_url;
    char *migrations_dir;
    bool status;
    int64_t connect_timeout_ms;
    int64_t lock_timeout_ms;
};

#define MOPT(field) offsetof(struct migrate_config, field)

static const struct cfg_option migrate_options[] = {
    {"database_url", CFG_STRING, NULL, false, MOPT(database_url),
     "PostgreSQL URL (postgres://user:pass@host/db); unset: libpq's PG* variables", "DATABASE_URL"},
    {"migrations_dir", CFG_STRING, "./migrations", false, MOPT(migrations_dir),
     "directory holding NNNN_name.sql files", NULL},
    {"status", CFG_BOOL, "false", false, MOPT(status),
     "list applied (with time) and pending migrations; apply nothing", NULL},
    {"db_connect_timeout", CFG_DURATION, "10s", false, MOPT(connect_timeout_ms),
     "give up connecting to PostgreSQL after this", NULL},
    {"migrate_lock_timeout", CFG_DURATION, "60s", false, MOPT(lock_timeout_ms),
     "give up waiting for another migrate run's lock after this", NULL},
};

static const char MIGRATE_DESCRIPTION[] =
    "Applies the migrations in --migrations-dir (NNNN_name.sql) in version order,\n"
    "each in its own transaction, under a PostgreSQL advisory lock; records each\n"
    "version and SHA-256 in schema_migrations. Running it again applies nothing.\n"
    "A changed applied file is refused: add a new migration instead.\n"
    "Exit status: 0 done (or, with --status, consistent), 1 refused or failed,\n"
    "2 bad usage.";

static int cmd_migrate(int argc, char **argv)
{
    struct migrate_config cfg;
    struct migrate_options o;
    struct cfg_result res;
    char err[1024] = "";
    int rc;

    memset(&cfg, 0, sizeof(cfg));
    rc = cfg_load(migrate_options, AB_ARRAY_LEN(migrate_options), &cfg, argc, argv, &res, err,
                  sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "agentbox-hub migrate: %s\n", err);
        rc = 2;
        goto out;
    }
    if (res.help) {
        cfg_print_help(stdout, "agentbox-hub migrate [--status] [flags]", MIGRATE_DESCRIPTION,
                       migrate_options, AB_ARRAY_LEN(migrate_options));
        goto out;
    }
    if (res.npositional > 0) {
        fprintf(stderr, "agentbox-hub migrate: unexpected argument '%s' (see --help)\n",
                res.positional[0]);
        rc = 2;
        goto out;
    }
    if (cfg.migrations_dir == NULL || cfg.migrations_dir[0] == '\0') {
        fprintf(stderr, "agentbox-hub migrate: migrations_dir must not be empty: set "
                        "--migrations-dir or AGENTBOX_MIGRATIONS_DIR\n");
        rc = 2;
        goto out;
    }
    memset(&o, 0, sizeof(o));
    o.database_url = cfg.database_url;
    o.dir = cfg.migrations_dir;
    o.connect_timeout_ms = cfg.connect_timeout_ms;
    o.lock_timeout_ms = cfg.lock_timeout_ms;
    o.out = stdout;
    rc = cfg.status ? migrate_status(&o, err, sizeof(err)) : migrate_apply(&o, err, sizeof(err));
    if (rc != 0) {
        fflush(stdout);
        fprintf(stderr, "agentbox-hub migrate: %s\n", err);
        rc = 1;
    }
out:
    cfg_free(migrate_options, AB_ARRAY_LEN(migrate_options), &cfg);
    return rc;
}

/* The loop SIGINT/SIGTERM stop: the process's one mutable global, because a
 * signal handler can reach nothing else. */
static struct loop *volatile signal_loop;

static void on_signal(int sig)
{
    (void)sig;
    struct loop *l = signal_loop;
    if (l != NULL)
        loop_stop(l);
}

static void catch_signals(struct loop *l)
{
    struct sigaction sa;

    signal_loop = l;
    if (l == NULL)
        return; /* the handler stays: a late signal finds nothing to stop */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: agentbox-hub COMMAND [flags]\n"
            "\n"
            "agentbox hub %s: federation state, API keys and the vault in PostgreSQL.\n"
            "\n"
            "Commands:\n"
            "  serve           run the hub (HTTP API on :7700: /healthz, /readyz, /metrics)\n"
            "  migrate         apply migrations/NNNN_name.sql; --status lists them\n"
            "  cluster CMD     add, list, rotate-token, disable, enable member clusters\n"
            "  key CMD         create, list, revoke API keys (create prints the key once)\n"
            "  team CMD        set-namespace, clear-namespace, list team namespace overrides\n"
            "  vault CMD       rotate-key: re-encrypt the vault under a new key generation\n"
            "  signing-key CMD rotate, list: the assertion signing key's generations\n"
            "  help [COMMAND]  show this, or a command's flags\n"
            "  version         print the version\n"
            "\n"
            "Every command takes --config FILE (or AGENTBOX_CONFIG) for a YAML file of its\n"
            "keys. Run 'agentbox-hub COMMAND --help' for its flags, environment variables\n"
            "and config keys with their defaults.\n",
            AGENTBOX_VERSION);
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;

    if (cmd == NULL) {
        usage(stderr);
        return 2;
    }
    if (strcmp(cmd, "serve") == 0)
        return hub_serve_main(argc - 2, argv + 2, catch_signals);
    if (strcmp(cmd, "migrate") == 0)
        return cmd_migrate(argc - 2, argv + 2);
    if (strcmp(cmd, "cluster") == 0)
        return hub_cluster_main(argc - 2, argv + 2);
    if (strcmp(cmd, "key") == 0)
        return keys_cli_main(argc - 2, argv + 2);
    if (strcmp(cmd, "team") == 0)
        return iam_team_cli_main(argc - 2, argv + 2);
    if (strcmp(cmd, "vault") == 0)
        return vault_cli_main(argc - 2, argv + 2);
    if (strcmp(cmd, "signing-key") == 0)
        return signing_keys_cli_main(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("agentbox-hub %s\n", AGENTBOX_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        char *help_argv[] = {(char *)"--help", NULL};

        if (argc > 2 && strcmp(cmd, "help") == 0) {
            if (strcmp(argv[2], "serve") == 0)
                return hub_serve_main(1, help_argv, NULL);
            if (strcmp(argv[2], "migrate") == 0)
                return cmd_migrate(1, help_argv);
            if (strcmp(argv[2], "cluster") == 0)
                return hub_cluster_main(1, help_argv);
            if (strcmp(argv[2], "key") == 0)
                return keys_cli_main(1, help_argv);
            if (strcmp(argv[2], "team") == 0)
                return iam_team_cli_main(1, help_argv);
            if (strcmp(argv[2], "vault") == 0)
                return vault_cli_main(1, help_argv);
            if (strcmp(argv[2], "signing-key") == 0)
                return signing_keys_cli_main(1, help_argv);
            fprintf(stderr, "agentbox-hub help: unknown command '%s'\n\n", argv[2]);
            usage(stderr);
            return 2;
        }
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "agentbox-hub: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
