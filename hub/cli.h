/* What every `agentbox-hub <tool> <command>` administration CLI does around
 * its own work (key, team, user, vault, signing-key): flags from the
 * command line, environment and file, --help, the subcommand and its
 * arguments checked, PostgreSQL connected, errors worded one way, exit
 * statuses 0 done, 1 failed, 2 bad usage. A tool describes itself in a
 * struct cli and calls cli_main. */
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

/* One run of a tool: cfg is the tool's config struct (its options' offsets
 * count from it), state whatever prepare made, cmd the index in cmds. */
struct cli_run {
    void *cfg;
    void *state;
    int cmd;
    const struct cfg_result *res;
};

struct cli {
    const char *prog; /* "agentbox-hub key" */
    const char *usage;
    const char *description;
    const struct cfg_option *opts;
    size_t nopts;
    const struct cli_cmd *cmds;
    size_t ncmds;
    size_t url_off;     /* offset in cfg of the char * PostgreSQL URL */
    size_t timeout_off; /* offset in cfg of the int64_t connect timeout (ms) */
    /* Optional, before connecting (secrets read, say): 0 or an AB_* code,
     * err naming the fix (AB_EINVAL is bad usage, exit 2). */
    int (*prepare)(struct cli_run *r, char *err, size_t errlen);
    /* The work: 0 or an AB_* code with err (AB_EINVAL: exit 2, else 1). */
    int (*run)(PGconn *c, struct cli_run *r, char *err, size_t errlen);
    /* Optional, always called last (wipe what prepare made). */
    void (*finish)(struct cli_run *r);
};

/* Runs the tool with cfg (zeroed by the caller, freed here) and state for
 * its hooks; returns the exit status. */
int cli_main(const struct cli *cli, void *cfg, void *state, int argc, char **argv);

#endif
