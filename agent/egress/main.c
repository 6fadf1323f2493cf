/* agentbox-egress: the egress gateway as a kube Pod's sidecar (pod.h,
 * sidecar.h). Two modes, one binary (one image):
 *   agentbox-egress --init   the init container: installs the nftables
 *                            redirect in the Pod's network namespace and
 *                            exits (needs NET_ADMIN, only this container has it)
 *   agentbox-egress          the sidecar: the gateway on 127.0.0.1 and the
 *                            control API on the Pod IP (needs NET_RAW for SO_MARK)
 * Not part of the agent library (CMakeLists.txt leaves this file out of it). */
#include "agent/egress/pod.h"
#include "agent/egress/sidecar.h"

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct egress_main_config {
    bool init;
    char *egress_token;
    char *pod_ip;
    char *host_ip;
    char *resolver;
    int64_t control_port;
    int64_t tcp_port;
    int64_t dns_port;
    int64_t mark;
    int64_t conns;
    char *log_level;
};

static const struct cfg_option options[] = {
    {"init", CFG_BOOL, "false", false, offsetof(struct egress_main_config, init),
     "install the Pod's nftables redirect and exit (the init container)", NULL},
    {"egress_token", CFG_STRING, NULL, false, offsetof(struct egress_main_config, egress_token),
     "bearer token of the control API (set by the agent in the Pod's environment)", NULL},
    {"pod_ip", CFG_STRING, NULL, false, offsetof(struct egress_main_config, pod_ip),
     "the Pod IP the control API listens on (downward API status.podIP)", "POD_IP"},
    {"host_ip", CFG_STRING, NULL, false, offsetof(struct egress_main_config, host_ip),
     "the node's address, refused like the Pod's own (downward API status.hostIP)", "HOST_IP"},
    {"resolver", CFG_STRING, NULL, false, offsetof(struct egress_main_config, resolver),
     "DNS server (IP or IP:port) sandbox queries are relayed to; default /etc/resolv.conf's",
     "AGENTBOX_EGRESS_RESOLVER"},
    {"control_port", CFG_INT, "15000", false, offsetof(struct egress_main_config, control_port),
     "port of the control API on the Pod IP", NULL},
    {"tcp_port", CFG_INT, "15001", false, offsetof(struct egress_main_config, tcp_port),
     "the gateway's TCP port on 127.0.0.1 (the redirect's target)", NULL},
    {"dns_port", CFG_INT, "15053", false, offsetof(struct egress_main_config, dns_port),
     "the gateway's DNS port on 127.0.0.1", NULL},
    {"mark", CFG_INT, "43790", false, offsetof(struct egress_main_config, mark),
     "SO_MARK of the gateway's own sockets (the redirect lets them pass)", NULL},
    {"conns", CFG_INT, "0", false, offsetof(struct egress_main_config, conns),
     "open connections the sandbox may have (0: 1024)", NULL},
    {"log_level", CFG_STRING, "info", false, offsetof(struct egress_main_config, log_level),
     "debug, info, warn or error", NULL},
};

static struct loop *g_loop;

static void on_signal(int sig)
{
    (void)sig;
    if (g_loop)
        loop_stop(g_loop);
}

static bool port_ok(int64_t p)
{
    return p > 0 && p < 65536;
}

int main(int argc, char **argv)
{
    struct egress_main_config cfg;
    struct cfg_result res;
    struct egress_sidecar *sc = NULL;
    struct egress_addr node;
    enum log_level level;
    char err[512], listen[96];
    int rc = 1;

    memset(&cfg, 0, sizeof(cfg));
    signal(SIGPIPE, SIG_IGN);
    if (cfg_load(options, AB_ARRAY_LEN(options), &cfg, argc - 1, argv + 1, &res, err,
                 sizeof(err)) != 0) {
        fprintf(stderr, "agentbox-egress: %s\n", err);
        return 2;
    }
    if (res.help) {
        cfg_print_help(stdout, "agentbox-egress [--init] [flags]",
                       "the sandbox egress gateway as a kube Pod's sidecar and init container",
                       options, AB_ARRAY_LEN(options));
        rc = 0;
        goto out;
    }
    if (log_parse_level(cfg.log_level, &level) != 0) {
        fprintf(stderr, "agentbox-egress: log_level must be debug, info, warn or error\n");
        goto out;
    }
    log_set_level(level);
    log_set_component("egress");
    if (!port_ok(cfg.tcp_port) || !port_ok(cfg.dns_port) || !port_ok(cfg.control_port) ||
        cfg.mark <= 0 || cfg.mark > 0xffffffffLL) {
        fprintf(stderr, "agentbox-egress: ports must be 1-65535 and mark 1-4294967295\n");
        goto out;
    }
    const struct egress_pod_config pc = {.mark = (uint32_t)cfg.mark,
                                         .tcp_port = (uint16_t)cfg.tcp_port,
                                         .dns_port = (uint16_t)cfg.dns_port};
    if (cfg.init) {
        if (egress_pod_install(&pc, err, sizeof(err)) != 0) {
            LOG_ERROR("cannot install the Pod's egress redirect", "error", err);
            goto out;
        }
        LOG_INFO("egress redirect installed", "tcp_port", "15001");
        rc = 0;
        goto out;
    }
    if (!cfg.pod_ip || !cfg.pod_ip[0] || egress_addr_parse(cfg.pod_ip, &node) != 0) {
        fprintf(stderr, "agentbox-egress: pod_ip (POD_IP) must be the Pod's IP address\n");
        goto out;
    }
    snprintf(listen, sizeof(listen), strchr(cfg.pod_ip, ':') ? "[%s]:%d" : "%s:%d", cfg.pod_ip,
             (int)cfg.control_port);
    size_t n_node = 0;
    if (cfg.host_ip && cfg.host_ip[0]) {
        if (egress_addr_parse(cfg.host_ip, &node) != 0) {
            fprintf(stderr, "agentbox-egress: host_ip (HOST_IP) must be an IP address\n");
            goto out;
        }
        n_node = 1;
    }
    /* poll: one Pod's egress is a few descriptors, and its image need not ship
     * libev or lws's plugin */
    g_loop = loop_new(&(struct loop_options){.workers = 1, .kind = LOOP_POLL});
    if (!g_loop) {
        LOG_ERROR("cannot start", "error", "cannot create the event loop");
        goto out;
    }
    const struct egress_sidecar_deps d = {.loop = g_loop,
                                          .token = cfg.egress_token,
                                          .control_listen = listen,
                                          .tcp_port = pc.tcp_port,
                                          .dns_port = pc.dns_port,
                                          .mark = pc.mark,
                                          .resolver = cfg.resolver,
                                          .extra_self = &node,
                                          .n_extra_self = n_node,
                                          .max_conns = (int)cfg.conns};
    if (egress_sidecar_new(&d, &sc, err, sizeof(err)) != 0) {
        LOG_ERROR("cannot start", "error", err);
        goto out;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    LOG_INFO("egress sidecar serving", "control", listen);
    loop_run(g_loop);
    rc = 0;
out:
    egress_sidecar_free(sc);
    if (g_loop)
        loop_free(g_loop);
    cfg_free(options, AB_ARRAY_LEN(options), &cfg);
    return rc;
}
