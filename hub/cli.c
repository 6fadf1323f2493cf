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

/* The subcommand's index, or -1 with *status the exit status (0 after
 * --help, 2 for bad usage; the reason printed on stderr). */
static int pick(const struct cli *cli, void *cfg, int argc, char **argv, struct cfg_result *res,
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

int cli_main(const struct cli *cli, void *cfg, void *state, int argc, char **argv)
{
    struct cfg_result res;
    struct cli_run r = {.cfg = cfg, .state = state, .res = &res};
    char err[1024] = "";
    PGconn *c = NULL;
    int status = 0, rc = 0;
    char *const *url = (char *const *)((char *)cfg + cli->url_off);
    const int64_t *timeout = (const int64_t *)((const char *)cfg + cli->timeout_off);

    if ((r.cmd = pick(cli, cfg, argc, argv, &res, &status)) < 0)
        goto out;
    if (cli->prepare && (rc = cli->prepare(&r, err, sizeof(err))) != 0)
        goto fail;
    if ((c = keys_cli_connect(*url, *timeout, err, sizeof(err))) == NULL) {
        rc = AB_EIO;
        goto fail;
    }
    if ((rc = cli->run(c, &r, err, sizeof(err))) == 0)
        goto out;
fail:
    fflush(stdout);
    fprintf(stderr, "%s %s: %s\n", cli->prog, cli->cmds[r.cmd].name, err);
    status = rc == AB_EINVAL ? 2 : 1;
out:
    if (c != NULL)
        PQfinish(c);
    if (cli->finish)
        cli->finish(&r);
    cfg_free(cli->opts, cli->nopts, cfg);
    return status;
}
