/* `agentbox-hub vault rotate-key`: re-encrypts every vault value and stored
 * API key token under a new key generation (synchronous, libpq). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "hub/cli.h"
#include "hub/keys.h"
#include "hub/vault.h"

struct vault_cli_config {
    char *database_url;
    int64_t connect_timeout_ms;
    char *hub_secret;
    char *hub_secret_file;
    char *previous_hub_secret_file;
};

#define VOPT(field) offsetof(struct vault_cli_config, field)

static const struct cfg_option vault_options[] = {
    {"database_url", CFG_STRING, NULL, false, VOPT(database_url),
     "PostgreSQL URL (postgres://user:pass@host/db); unset: libpq's PG* variables", "DATABASE_URL"},
    {"db_connect_timeout", CFG_DURATION, "10s", false, VOPT(connect_timeout_ms),
     "give up connecting to PostgreSQL after this", NULL},
    {"hub_secret", CFG_STRING, NULL, false, VOPT(hub_secret),
     "the hub secret every row is re-encrypted under; prefer the environment or a file", NULL},
    {"hub_secret_file", CFG_STRING, NULL, false, VOPT(hub_secret_file),
     "file holding the hub secret (first line)", NULL},
    {"previous_hub_secret_file", CFG_STRING, NULL, false, VOPT(previous_hub_secret_file),
     "when changing the hub secret: file holding the old one, to decrypt rows written under it",
     NULL},
};

static const char VAULT_USAGE[] = "agentbox-hub vault rotate-key [--previous-hub-secret-file F]";
static const char VAULT_DESCRIPTION[] =
    "rotate-key adds a key generation and re-encrypts every vault value and every stored\n"
    "API key token under it, in one transaction: all rows or none. Names, versions,\n"
    "metadata and timestamps stay as they were. To change the hub secret itself, run it\n"
    "with the new secret and --previous-hub-secret-file holding the old one, then restart\n"
    "the hubs with the new secret.\n"
    "Exit status: 0 done, 1 failed, 2 bad usage.";

static int vault_prepare(struct cli_run *r, char *err, size_t errlen)
{
    const struct vault_cli_config *cfg = r->cfg;

    return keys_cli_keyring(cfg->hub_secret, cfg->hub_secret_file, cfg->previous_hub_secret_file,
                            r->state, err, errlen) == 0
               ? 0
               : AB_EINVAL;
}

static int vault_run(PGconn *c, struct cli_run *r, char *err, size_t errlen)
{
    size_t secrets = 0, tokens = 0;
    int gen = 0;

    if (vault_rotate_conn(c, r->state, "cli", &gen, &secrets, &tokens, err, errlen) != 0)
        return AB_EIO;
    printf("rotated to key generation %d: re-encrypted %zu secret(s) and %zu api key token(s)\n",
           gen, secrets, tokens);
    return 0;
}

static void vault_finish(struct cli_run *r)
{
    vault_keyring_clear(r->state);
}

static const struct cli_cmd vault_cmds[] = {
    {"rotate-key", 0, "takes no arguments besides flags"},
};
static const struct cli vault_cli = {
    .prog = "agentbox-hub vault",
    .usage = VAULT_USAGE,
    .description = VAULT_DESCRIPTION,
    .opts = vault_options,
    .nopts = AB_ARRAY_LEN(vault_options),
    .cmds = vault_cmds,
    .ncmds = AB_ARRAY_LEN(vault_cmds),
    .url_off = VOPT(database_url),
    .timeout_off = VOPT(connect_timeout_ms),
    .prepare = vault_prepare,
    .run = vault_run,
    .finish = vault_finish,
};

int vault_cli_main(int argc, char **argv)
{
    struct vault_cli_config cfg;
    struct vault_keyring kr;

    memset(&cfg, 0, sizeof(cfg));
    memset(&kr, 0, sizeof(kr));
    return cli_main(&vault_cli, &cfg, &kr, argc, argv);
}
