/* What every `agentbox-hub <tool> <command>` administration CLI does before
 * its own work (key, team, user, vault, signing-key): flags from the
 * command line, environment and file, --help, the subcommand and its
 * arguments checked, PostgreSQL connected, errors worded one way and exit
 * statuses 0 done, 1 failed, 2 bad usage. */
#ifndef AGENTBOX_HUB_CLI_H
#define AGENTBOX_HUB_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "agentbox/config.h"

/* A subcommand: its name, how many positional arguments it takes after the
 * name, and what to say when it gets another number. */
struct cli_cmd {
    const char *name;
    int args;
    const char *args_hint; /* e.g. "takes exactly one key id (see key list)" */
};

struct cli {
    const char *prog; /* "agentbox-hub key" */
    const char *usage;
    const char *description;
    const struct cfg_option *opts;
    size_t nopts;
    const struct cli_cmd *cmds;
    size_t ncmds;
};

/* Loads the flags into cfg and picks the subcommand. Returns its index in
 * cli->cmds, or -1 with *status the exit status (0 after --help, 2 for bad
 * usage, the reason printed on stderr). The caller frees cfg with cfg_free
 * either way. */
int cli_begin(const struct cli *cli, void *cfg, int argc, char **argv, struct cfg_result *res,
              int *status);

/* Connects for subcommand cmd; NULL after printing why on stderr (exit 1). */
PGconn *cli_connect(const struct cli *cli, const char *cmd, const char *url, int64_t timeout_ms);

/* Prints "<prog> <cmd>: <err>" and returns the exit status for rc, an
 * AB_* code: 2 for AB_EINVAL (bad usage), else 1. */
int cli_fail(const struct cli *cli, const char *cmd, int rc, const char *err);

#endif
