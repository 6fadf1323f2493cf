/* The agent's egress, assembled (wiring.h). */
#include "agent/egress/wiring.h"

#include "agent/egress/intercept.h"

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SELF_MAX 64 /* this machine's addresses the gateway refuses */

struct seen {
    uint64_t hash;
    int64_t at_ms;
};

struct egress_wiring {
    struct loop *loop;
    char name[EGRESS_NETNS_NAME_MAX + 1];
    struct egress_netns_config cfg;
    struct egress_table *table;
    struct egress_gateway *gw;
    SSL_CTX *upstream_ctx; /* TLS toward intercepted hosts; the gateway borrows it */
    struct metric_family *denied;
    struct metric_family *conns; /* agentbox_egress_connections */
    struct seen seen[EGRESS_LOG_SEEN];
    int64_t log_window_ms; /* the second being counted ... */
    int log_lines;         /* ... and the lines written in it */
    uint64_t log_dropped;
    bool fresh; /* the namespace is this agent's own, not a predecessor's */
};

static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* abx-<cluster>-<8 hex of the state directory>: the cluster for people
 * reading `ip netns`, the hash so two agents of one cluster on one host (tests,
 * a second state directory) each get their own. */
static void name_of(const char *cluster, const char *state_dir, char *out, size_t len)
{
    char real[4096];
    const char *dir = realpath(state_dir, real) ? real : state_dir;
    uint64_t h = fnv1a(dir, strlen(dir), 0xcbf29ce484222325ULL);
    snprintf(out, len, "abx-%.24s-%08x", cluster, (unsigned)(h ^ (h >> 32)));
}

int egress_resolver_parse(const char *s, struct egress_addr *a, uint16_t *port)
{
    char host[64];
    const char *p = NULL;
    size_t n;

    *port = 53;
    if (!s || !*s)
        return AB_EINVAL;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || (n = (size_t)(end - s - 1)) >= sizeof(host))
            return AB_EINVAL;
        memcpy(host, s + 1, n);
        host[n] = '\0';
        if (end[1] == ':')
            p = end + 2;
        else if (end[1])
            return AB_EINVAL;
    } else {
        const char *c = strchr(s, ':');
        if (c && strchr(c + 1, ':'))
            c = NULL; /* a bare IPv6 address */
        n = c ? (size_t)(c - s) : strlen(s);
        if (n >= sizeof(host))
            return AB_EINVAL;
        memcpy(host, s, n);
        host[n] = '\0';
        p = c ? c + 1 : NULL;
    }
    if (p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (*p == '\0' || *end || v < 1 || v > 65535)
            return AB_EINVAL;
        *port = (uint16_t)v;
    }
    return egress_addr_parse(host, a);
}

int egress_resolver_from_file(const char *path, struct egress_addr *a)
{
    char line[512], ns[128];
    FILE *f = fopen(path, "r");
    int rc = AB_ENOENT;

    if (!f)
        return AB_ENOENT;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, " nameserver %127s", ns) == 1) {
            char *pct = strchr(ns, '%'); /* fe80::1%eth0: a zone the gateway cannot use */
            if (pct)
                *pct = '\0';
            rc = egress_addr_parse(ns, a) == 0 ? 0 : AB_EINVAL;
            break;
        }
    }
    fclose(f);
    return rc;
}

size_t egress_self_addrs(struct egress_addr *out, size_t max)
{
    struct ifaddrs *ifa = NULL, *i;
    size_t n = 0;

    if (getifaddrs(&ifa) != 0)
        return 0;
    for (i = ifa; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr)
            continue;
        if (i->ifa_addr->sa_family == AF_INET) {
            out[n].family = AF_INET;
            memcpy(out[n].a, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
            n++;
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            out[n].family = AF_INET6;
            memcpy(out[n].a, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
            n++;
        }
    }
    freeifaddrs(ifa);
    return n;
}

int egress_start_gateway(struct egress_gateway_deps *gd, int lfd, int dfd,
                         const struct egress_addr *extra, size_t n_extra,
                         struct egress_gateway **out, char *err, size_t errlen)
{
    struct egress_addr self[SELF_MAX + 16];
    size_t n_self = egress_self_addrs(self, SELF_MAX);
    char why[512];

    for (size_t i = 0; i < n_extra && n_self < AB_ARRAY_LEN(self); i++)
        self[n_self++] = extra[i];
    gd->self = self; /* copied by the gateway */
    gd->n_self = n_self;
    gd->dns_fd = dfd; /* the gateway's now, also on failure */
    *out = egress_gateway_new(gd, lfd, why, sizeof(why));
    if (!*out) {
        snprintf(err, errlen, "egress gateway: %s", why);
        return AB_EIO;
    }
    return 0;
}

/* Once per sandbox and destination (EGRESS_LOG_QUIET_MS), at most
 * EGRESS_LOG_PER_SEC lines a second in all: a sandbox hammering a refused
 * address cannot flood the agent's log. Secrets never reach this: the
 * gateway knows addresses, ports and the SNI/Host name only. */
static void on_denied(void *arg, uint64_t key, enum egress_reason why, const struct egress_dest *d)
{
    struct egress_wiring *w = arg;
    const char *label = egress_reason_label(why);
    const char *v[] = {label};
    char addr[INET6_ADDRSTRLEN + 8] = "-";
    int64_t now = ab_now_ms();

    metrics_add(w->denied, v, 1);
    if (d) {
        char ip[INET6_ADDRSTRLEN];
        inet_ntop(d->addr.family, d->addr.a, ip, sizeof(ip));
        snprintf(addr, sizeof(addr), d->addr.family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, d->port);
    }
    uint64_t h = fnv1a(&key, sizeof(key), 0xcbf29ce484222325ULL);
    h = fnv1a(addr, strlen(addr), h);
    struct seen *s = &w->seen[h % EGRESS_LOG_SEEN];
    if (s->hash == h && now - s->at_ms < EGRESS_LOG_QUIET_MS)
        return;
    if (now - w->log_window_ms >= 1000) {
        if (w->log_dropped) {
            char n[24];
            snprintf(n, sizeof(n), "%llu", (unsigned long long)w->log_dropped);
            LOG_WARN("egress refusal log lines dropped (rate limit)", "count", n);
        }
        w->log_window_ms = now;
        w->log_lines = 0;
        w->log_dropped = 0;
    }
    if (w->log_lines >= EGRESS_LOG_PER_SEC) {
        w->log_dropped++;
        return;
    }
    w->log_lines++;
    s->hash = h;
    s->at_ms = now;
    const char *id = egress_table_id_of(w->table, key);
    LOG_INFO("egress refused", "sandbox", id ? id : "-", "destination", addr, "host",
             d && d->name ? d->name : "-", "reason", label);
}

/* Whether a UDP socket can be connected to the resolver (a route exists). */
static bool resolver_routable(const struct egress_addr *a, uint16_t port)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof(ss));
    if (a->family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port ? port : 53);
        memcpy(&s4->sin_addr, a->a, 4);
        sl = sizeof(*s4);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port ? port : 53);
        memcpy(&s6->sin6_addr, a->a, 16);
        sl = sizeof(*s6);
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&ss, sl) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static int sandbox_of(void *arg, const struct egress_addr *peer, struct egress_sandbox_ref *ref)
{
    struct egress_wiring *w = arg;
    return egress_table_sandbox_of(w->table, peer, ref);
}

int egress_wiring_new(const struct egress_wiring_deps *deps, struct egress_wiring **out, char *err,
                      size_t errlen)
{
    static const char *const labels[] = {"reason", NULL};
    struct egress_wiring *w = calloc(1, sizeof(*w));
    struct egress_gateway_deps gd = {0};
    char why[512];
    int lfd = -1, dfd = -1, rc;

    *out = NULL;
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    w->loop = deps->loop;
    name_of(deps->cluster, deps->state_dir, w->name, sizeof(w->name));
    w->cfg.name = w->name;
    w->cfg.tcp_port = EGRESS_TCP_PORT;
    w->cfg.dns_port = EGRESS_DNS_PORT;
    const char *range = deps->range && deps->range[0] ? deps->range : EGRESS_DEFAULT_RANGE;
    if (egress_cidr_parse(range, &w->cfg.range) != 0 ||
        egress_netns_config_check(&w->cfg, why, sizeof(why)) != 0) {
        snprintf(err, errlen,
                 "egress_range '%s' must be an IPv4 CIDR from /8 to /28 (a private range such as "
                 "%s), one "
                 "/30 per sandbox",
                 range, EGRESS_DEFAULT_RANGE);
        rc = AB_EINVAL;
        goto fail;
    }
    if (deps->resolver && deps->resolver[0]) {
        if (egress_resolver_parse(deps->resolver, &gd.resolver, &gd.resolver_port) != 0) {
            snprintf(err, errlen,
                     "egress_resolver '%s' must be IP, IP:port or [IPv6]:port of a DNS server",
                     deps->resolver);
            rc = AB_EINVAL;
            goto fail;
        }
    } else if (egress_resolver_from_file("/etc/resolv.conf", &gd.resolver) != 0) {
        memset(&gd.resolver, 0, sizeof(gd.resolver)); /* every query refused at once */
        LOG_WARN("no nameserver in /etc/resolv.conf: sandboxes cannot resolve names; set "
                 "--egress-resolver");
    }
    if (!(w->table = egress_table_new(&w->cfg))) {
        snprintf(err, errlen, "out of memory");
        rc = AB_ENOMEM;
        goto fail;
    }
    const char *v[] = {"internet_off"};
    w->denied = metrics_register(metrics_default(), "agentbox_egress_denied_total",
                                 "Sandbox connections and DNS queries the egress gateway refused",
                                 METRIC_COUNTER, labels, NULL, 0);
    if (w->denied)
        metrics_add(w->denied, v, 0);
    w->conns = metrics_register(metrics_default(), "agentbox_egress_connections",
                                "Sandbox connections the egress gateway splices now", METRIC_GAUGE,
                                NULL, NULL, 0);
    char nspath[96];
    snprintf(nspath, sizeof(nspath), "/run/netns/%s", w->name);
    w->fresh = access(nspath, F_OK) != 0;
    if ((rc = egress_netns_create(&w->cfg, why, sizeof(why))) != 0) {
        snprintf(err, errlen,
                 "egress namespace %s: %s (the agent needs root, iproute2 and nftables: "
                 "scripts/deps.sh installs them)",
                 w->name, why);
        goto fail;
    }
    if ((lfd = egress_gateway_listen(&w->cfg, w->cfg.tcp_port, why, sizeof(why))) < 0 ||
        (dfd = egress_gateway_listen_dns(&w->cfg, w->cfg.dns_port, why, sizeof(why))) < 0) {
        snprintf(err, errlen, "egress gateway in namespace %s: %s", w->name, why);
        rc = AB_EIO;
        goto fail;
    }
    if (gd.resolver.family && !resolver_routable(&gd.resolver, gd.resolver_port)) {
        /* an agent in a namespace with no route to it (tests, an isolated
         * node) still runs: sandbox DNS is refused at once until restarted */
        char r[64];
        inet_ntop(gd.resolver.family, gd.resolver.a, r, sizeof(r));
        LOG_WARN("the egress resolver is unreachable from the agent's namespace: sandbox DNS "
                 "queries are refused; set --egress-resolver",
                 "resolver", r);
        memset(&gd.resolver, 0, sizeof(gd.resolver));
    }
    gd.loop = deps->loop;
    gd.sandbox_of = sandbox_of;
    gd.arg = w;
    gd.denied = on_denied;
    gd.max_conns_per_sandbox = deps->max_conns_per_sandbox;
    /* TLS toward hosts with rules (intercept.h): verified against this */
    if (!(w->upstream_ctx = egress_intercept_client_ctx(deps->upstream_ca, why, sizeof(why)))) {
        snprintf(err, errlen, "egress gateway: %s", why);
        rc = AB_EINVAL;
        goto fail;
    }
    gd.upstream_ctx = w->upstream_ctx;
    rc = egress_start_gateway(&gd, lfd, dfd, NULL, 0, &w->gw, err, errlen);
    lfd = dfd = -1;
    if (rc != 0)
        goto fail;
    char r[64] = "none";
    if (gd.resolver.family)
        inet_ntop(gd.resolver.family, gd.resolver.a, r, sizeof(r));
    /* for the operator (and test cleanup): which namespace is this agent's */
    {
        char f[4096 + 16];
        snprintf(f, sizeof(f), "%s/egress-netns", deps->state_dir);
        FILE *fp = fopen(f, "w");
        if (fp) {
            fprintf(fp, "%s\n", w->name);
            fclose(fp);
        }
    }
    LOG_INFO("egress gateway ready", "namespace", w->name, "range", range, "resolver", r);
    *out = w;
    return 0;
fail:
    if (lfd >= 0)
        close(lfd);
    if (dfd >= 0)
        close(dfd);
    if (w->fresh) { /* made here and of no use: not left behind */
        char e2[128];
        egress_netns_destroy(&w->cfg, e2, sizeof(e2));
    }
    egress_table_free(w->table);
    SSL_CTX_free(w->upstream_ctx);
    free(w);
    return rc ? rc : AB_EIO;
}

void egress_wiring_refresh_metrics(struct egress_wiring *w)
{
    if (w && w->gw && w->conns)
        metrics_set(w->conns, NULL, (double)egress_gateway_conns(w->gw));
}

void egress_wiring_discard(struct egress_wiring *w)
{
    char why[256];
    if (w && w->fresh && egress_netns_destroy(&w->cfg, why, sizeof(why)) != 0)
        LOG_WARN("cannot remove the egress namespace", "namespace", w->name, "error", why);
}

void egress_wiring_stop(struct egress_wiring *w)
{
    if (!w)
        return;
    egress_gateway_free(w->gw);
    w->gw = NULL;
}

void egress_wiring_free(struct egress_wiring *w)
{
    if (!w)
        return;
    egress_wiring_stop(w);
    egress_table_free(w->table);
    SSL_CTX_free(w->upstream_ctx);
    free(w);
}

const struct egress_netns_config *egress_wiring_config(const struct egress_wiring *w)
{
    return &w->cfg;
}

struct egress_table *egress_wiring_table(struct egress_wiring *w)
{
    return w->table;
}
