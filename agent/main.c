/* agentbox-agent: subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agentbox/version.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: agentbox-agent COMMAND [flags]\n"
            "\n"
            "agentbox agent %s: one per cluster. Keeps a tunnel to the hub, runs the\n"
            "cluster's sandboxes, serves its E2B-compatible API and data plane.\n"
            "\n"
            "Commands:\n"
            "  serve           run the agent (E2B :8090, data plane :8091, native :8080)\n"
            "  help [COMMAND]  show this, or a command's flags\n"
            "  version         print the version\n"
            "\n"
            "Every command takes --config FILE (or AGENTBOX_CONFIG) for a YAML file of its\n"
            "keys. Run 'agentbox-agent serve --help' for flags, environment variables and\n"
            "config keys with their defaults.\n",
            AGENTBOX_VERSION);
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : NULL;
    if (!cmd) {
        usage(stderr);
        return 2;
    }
    if (strcmp(cmd, "serve") == 0)
        return agent_serve_main(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("agentbox-agent %s\n", AGENTBOX_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        if (argc > 2 && strcmp(cmd, "help") == 0) {
            char *help_argv[] = {(char *)"--help", NULL};
            if (strcmp(argv[2], "serve") == 0)
                return agent_serve_main(1, help_argv);
            fprintf(stderr, "agentbox-agent help: unknown command '%s'\n\n", argv[2]);
            usage(stderr);
            return 2;
        }
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "agentbox-agent: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
