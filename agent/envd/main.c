/* agentbox-envd: the envd-compatible daemon inside a local sandbox
 * (DESIGN §10). One thread: the loop owns the HTTP server, the children's
 * pipes and PTYs, SIGCHLD (signalfd) and inotify. */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agent/envd/envd.h"
#include "agent/envd/fdwatch.h"
#include "agent/runtime/local/zygote.h"

struct envd_config {
    char *listen;
    char *state_dir;
    char *log_level;
};

static const struct cfg_option options[] = {
    {"listen", CFG_STRING, NULL, false, offsetof(struct envd_config, listen),
     "where to serve: unix:/path/envd.sock or 127.0.0.1:49983 (default "
     "unix:<state-dir>/envd.sock)",
     NULL},
    {"state_dir", CFG_STRING, ".", false, offsetof(struct envd_config, state_dir),
     "the sandbox directory that holds envd.sock", NULL},
    {"log_level", CFG_STRING, "info", false, offsetof(struct envd_config, log_level),
     "debug, info, warn or error", NULL},
};

static struct loop *g_loop;

static void on_signal(int sig)
{
    if (g_loop != NULL)
        loop_stop(g_loop);
}

static int envd_main(int argc, char **argv)
{
    struct envd_config cfg;
    struct cfg_result res;
    struct envd e;
    struct http_server_options so;
    struct http_server *srv = NULL;
    enum log_level level;
    char listen[PATH_MAX + 8];
    char err[512];
    sigset_t chld;
    int rc = 1, src;

    memset(&cfg, 0, sizeof(cfg));
    memset(&e, 0, sizeof(e));
    /* Before any thread exists, so that only the signalfd sees SIGCHLD. */
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (cfg_load(options, AB_ARRAY_LEN(options), &cfg, argc - 1, argv + 1, &res, err,
                 sizeof(err)) != 0) {
        fprintf(stderr, "agentbox-envd: %s\n", err);
        return 2;
    }
    if (res.help) {
        cfg_print_help(stdout, "agentbox-envd [flags]",
                       "envd-compatible process, filesystem and /files server for one sandbox",
                       options, AB_ARRAY_LEN(options));
        cfg_free(options, AB_ARRAY_LEN(options), &cfg);
        return 0;
    }
    if (log_parse_level(cfg.log_level, &level) != 0) {
        fprintf(stderr, "agentbox-envd: log_level must be debug, info, warn or error\n");
        goto out;
    }
    log_set_level(level);
    /* JSON lines like E2B's envd: `e2b sandbox logs` parses each line as
     * JSON, and the log API's entries carry timestamp, level, message. */
    log_set_json(1);
    log_set_json_keys("timestamp", "message");
    log_set_component("envd");
    if (cfg.listen != NULL && cfg.listen[0] != '\0')
        ab_strlcpy(listen, cfg.listen, sizeof(listen));
    else
        snprintf(listen, sizeof(listen), "unix:%s/envd.sock", cfg.state_dir);

    /* Each failure below logs what failed: exit 1 with nothing said is what
     * a runtime would otherwise report as "cannot start: ". */
    /* poll: envd serves a handful of descriptors, and runs in images (a Pod's)
     * that need not ship libev or lws's plugin. ENVD_FD_LIMIT bounds lws's
     * tables (loop.h): sized by RLIMIT_NOFILE they were 55 page faults of
     * every start here (README.md), and 16 MiB zeroed in a Pod. */
    g_loop = loop_new(&(struct loop_options){
        .workers = 1, .kind = LOOP_POLL, .no_tls = true, .fd_limit = ENVD_FD_LIMIT});
    if (g_loop == NULL) {
        LOG_ERROR("cannot start", "error", "cannot create the event loop (libwebsockets context)");
        goto out;
    }
    e.loop = g_loop;
    if (envd_fd_init(g_loop) != 0 || envd_proc_init(&e) != 0)
        goto out; /* both log why */
    e.router = envd_router_new(&e);
    if (e.router == NULL) {
        LOG_ERROR("cannot start", "error", "cannot build the HTTP router (out of memory)");
        goto out;
    }
    memset(&so, 0, sizeof(so));
    so.listen = listen;
    so.router = e.router;
    so.name = "envd";
    so.idle_timeout_ms = 600000; /* Connect streams may be quiet between keepalives */
    err[0] = '\0';
    if ((src = http_server_start(g_loop, &so, &srv, err, sizeof(err))) != 0) {
        if (err[0] == '\0') /* http_server_start says nothing when out of memory */
            snprintf(err, sizeof(err), "%s", ab_strerror(src));
        LOG_ERROR("cannot listen", "listen", listen, "error", err);
        goto out;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    LOG_INFO("envd serving", "listen", listen, "version", ENVD_VERSION);
    loop_run(g_loop);
    rc = 0;
    LOG_INFO("envd stopping");
    envd_proc_shutdown(&e);
    envd_fs_shutdown(&e);
out:
    if (srv != NULL)
        http_server_stop(srv);
    if (g_loop != NULL)
        loop_free(g_loop);
    envd_proc_free_all(&e);
    envd_fs_free_all(&e);
    if (e.router != NULL)
        http_router_free(e.router);
    json_decref(e.env_vars);
    free(e.token);
    cfg_free(options, AB_ARRAY_LEN(options), &cfg);
    return rc;
}

/* `agentbox-envd --zygote 3`: the local runtime's zygote (zygote.h), which
 * forks sandbox inits that call envd_main instead of exec'ing this file. */
int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], LZY_FLAG) == 0)
        return lzy_serve(atoi(argv[2]), envd_main);
    return envd_main(argc, argv);
}
