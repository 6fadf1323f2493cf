/* See cli.h. */
#include "hub/cli.h"

#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"
#include "hub/keys.h"

/* "a, b or c" */
static void print_names(FILE *f, const struct cli *cli)
{
    for (size_t i = 0; i < cli->ncmds; i++)
        fprintf(f, "%s%s", i == 0 ? "" : i + 1 == cli->ncmds ? " or " : ", ", cli->cmds[i].name);
}

int cli_begin(const struct cli *cli, void *cfg, int argc, char **argv, struct cfg_result *res,
              int *status)
{
    char err[1024] = "";
    const char *sub;

    if (cfg_load(cli->opts, cli->nopts, cfg, argc, argv, res, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", cli->prog, err);
        *status = 2;
        return -1;
    }
    if (res->help || res->npositional == 0) {
        cfg_print_help(res->help ? stdout : stderr, cli->usage, cli->description, cli->opts,
                       cli->nopts);
        *status = res->help ? 0 : 2;
        return -1;
    }
    sub = res->positional[0];
    for (size_t i = 0; i < cli->ncmds; i++) {
        if (strcmp(sub, cli->cmds[i].name) != 0)
            continue;
        if (res->npositional != cli->cmds[i].args + 1) {
            fprintf(stderr, "%s %s: %s\nusage: %s\n", cli->prog, sub, cli->cmds[i].args_hint,
                    cli->usage);
            *status = 2;
            return -1;
        }
        return (int)i;
    }
    fprintf(stderr, "%s: unknown command '%s': use ", cli->prog, sub);
    print_names(stderr, cli);
    fputc('\n', stderr);
    *status = 2;
    return -1;
}

PGconn *cli_connect(const struct cli *cli, const char *cmd, const char *url, int64_t timeout_ms)
{
    char err[1024] = "";
    PGconn *c = keys_cli_connect(url, timeout_ms, err, sizeof(err));

    if (c == NULL)
        fprintf(stderr, "%s %s: %s\n", cli->prog, cmd, err);
    return c;
}

int cli_fail(const struct cli *cli, const char *cmd, int rc, const char *err)
{
    fflush(stdout);
    fprintf(stderr, "%s %s: %s\n", cli->prog, cmd, err);
    return rc == AB_EINVAL ? 2 : 1;
}
