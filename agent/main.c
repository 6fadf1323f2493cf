/* agentbox-agent: subcommand dispatch, `serve`, and the signal handling
 * (the one process-wide state: a signal handler has no argument). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/version.h"

/* The loop SIGINT and SIGTERM stop; set only while serve runs it. */
static struct loop *volatile g_signal_loop;

static void on_signal(int sig)
{
    (void)sig;
    if (g_signal_loop)
        loop_stop(g_signal_loop);
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static int serve_main(int argc, char **argv)
{
    struct agent_config cfg;
    struct cfg_result res;
    struct agent a;
    char err[1024] = "";
    int rc = 0;

    memset(&cfg, 0, sizeof(cfg));
    memset(&a, 0, sizeof(a));
    if (cfg_load(agent_serve_options, agent_serve_noptions, &cfg, argc, argv, &res, err,
                 sizeof(err))) {
        fprintf(stderr, "agentbox-agent serve: %s\n", err);
        rc = 2;
        goto out;
    }
    if (res.help) {
        cfg_print_help(stdout, "agentbox-agent serve [flags]", agent_serve_description,
                       agent_serve_options, agent_serve_noptions);
        goto out;
    }
    if (res.npositional > 0) {
        fprintf(stderr, "agentbox-agent serve: unexpected argument '%s' (see --help)\n",
                res.positional[0]);
        rc = 2;
        goto out;
    }
    if (agent_config_check(&cfg, err, sizeof(err))) {
        fprintf(stderr, "agentbox-agent serve: %s\n", err);
        rc = 2;
        goto out;
    }
    enum log_level lvl = LOG_LEVEL_INFO;
    log_parse_level(cfg.log_level, &lvl);
    log_set_level(lvl);
    log_set_json(cfg.log_json);
    log_set_component("agent");

    err[0] = '\0';
    int start_rc = agent_init(&a, &cfg, err, sizeof(err));
    if (start_rc == 0)
        start_rc = agent_start(&a, err, sizeof(err));
    if (start_rc != 0) {
        if (err[0] == '\0') /* never an empty reason in the log */
            snprintf(err, sizeof(err), "%s", ab_strerror(start_rc));
        LOG_ERROR("cannot start", "error", err);
        fprintf(stderr, "agentbox-agent serve: %s\n", err);
        rc = 1;
        goto out;
    }
    LOG_INFO("agent started", "cluster", cfg.cluster_id, "runtime", cfg.runtime, "version",
             AGENTBOX_VERSION, "hub", cfg.hub_url ? cfg.hub_url : "none (standalone)");
    g_signal_loop = a.loop;
    install_signals();
    agent_run(&a);
    g_signal_loop = NULL;
    LOG_INFO("agent stopping", "cluster", cfg.cluster_id);
out:
    if (a.loop)
        agent_fini(&a);
    cfg_free(agent_serve_options, agent_serve_noptions, &cfg);
    return rc;
}

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
        return serve_main(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("agentbox-agent %s\n", AGENTBOX_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        if (argc > 2 && strcmp(cmd, "help") == 0) {
            char *help_argv[] = {(char *)"--help", NULL};
            if (strcmp(argv[2], "serve") == 0)
                return serve_main(1, help_argv);
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
